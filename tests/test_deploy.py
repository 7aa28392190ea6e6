"""deploy/: `kubectl kustomize` renders the base, the overlays (all-vendors, example) and
deploy/extender; every built-in object validates against the Kubernetes schemas of 1.30 and 1.37
(kubernetes-validate, strict: unknown fields fail); the prometheus-operator objects, which it has
no schema for, are checked by structure; the objects agree with each other and with the agent
(config, CLI, ports), for every agent DaemonSet of a rendering (the vendor components' and their
node selection: tests/test_deploy_components.py)."""

from __future__ import annotations

import copy
import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from admission import AdmissionPolicy
from conftest import ROOT, require_tool
from hetero_exporter import cli
from hetero_exporter import config as config_mod
from promql_names import load

pytestmark = pytest.mark.integration

rules = load("alerts/rules.py")
DEPLOY = ROOT / "deploy"
# the oldest supported (ValidatingAdmissionPolicy is GA in 1.30; node-restriction.yaml) and the newest known
KUBE_VERSIONS = ("1.30.0", "1.37.0")
TARGETS = ["base", "overlays/all-vendors", "overlays/example", "extender"]
OPERATOR_GROUP = "monitoring.coreos.com/v1"
# Fields of a ServiceMonitor endpoint this project uses; a typo (honorLabel) would be ignored silently.
ENDPOINT_FIELDS = {"port", "path", "interval", "scrapeTimeout", "honorLabels", "relabelings",
                   "metricRelabelings", "scheme", "tlsConfig", "bearerTokenSecret", "authorization"}
RELABEL_FIELDS = {"action", "sourceLabels", "targetLabel", "regex", "replacement", "separator", "modulus"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding"}


def _kubectl() -> str:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed (kubectl kustomize renders deploy/); not required on a fresh machine")
    return require_tool("kubectl")


def render(target: str | Path) -> list[dict]:
    """The objects `kubectl kustomize` renders from ``target`` (a folder below deploy/, or a path);
    a fresh copy each call, of one rendering per target and test session."""
    return copy.deepcopy(_rendered(str(DEPLOY / target)))


@functools.lru_cache(maxsize=None)
def _rendered(path: str) -> list[dict]:
    res = subprocess.run([_kubectl(), "kustomize", path], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.load_all(res.stdout, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d]


def validation_errors(objs: list[dict]) -> list[str]:
    """One line per built-in object that fails the strict schema of a KUBE_VERSIONS release."""
    errors = []
    for obj in objs:
        if obj["apiVersion"].startswith(("monitoring.coreos.com/", "nfd.k8s-sigs.io/")):
            continue  # CRDs: checked by structure (test_servicemonitor..., test_prometheusrule..., NFD's rule
            # in test_deploy_components.py)
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                errors.append(f"{obj['kind']}/{obj['metadata']['name']} against {version}: {e.message} "
                              f"at {list(e.path)}")
    return errors


def by_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict], kind: str) -> dict:
    found = by_kind(objs, kind)
    assert len(found) == 1, f"{len(found)} {kind}"
    return found[0]


@pytest.fixture(scope="module", params=TARGETS)
def rendered(request) -> tuple[str, list[dict]]:
    return request.param, render(request.param)


def test_builtin_objects_validate_against_the_kubernetes_schemas(rendered):
    _, objs = rendered
    assert objs
    assert validation_errors(objs) == []


def test_namespaced_objects_and_rbac_subjects_share_the_namespace(rendered):
    target, objs = rendered
    if target == "extender":
        pytest.skip("the extender's own layout")
    ns = one(objs, "Namespace")["metadata"]["name"]
    for o in objs:
        if o["kind"] not in CLUSTER_SCOPED:
            assert o["metadata"].get("namespace") == ns, f"{o['kind']}/{o['metadata']['name']}"
    sa = one(objs, "ServiceAccount")["metadata"]["name"]
    binding = one(objs, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
    assert binding["roleRef"]["name"] == one(objs, "ClusterRole")["metadata"]["name"]


def test_rbac_allows_what_the_health_loop_and_attribution_do(rendered):
    target, objs = rendered
    if target == "extender":
        pytest.skip("the extender's own RBAC")
    granted = {(g, r, v) for rule in one(objs, "ClusterRole")["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    needed = {("", "nodes", "get"), ("", "nodes", "patch"), ("", "nodes", "list"), ("", "nodes/status", "patch"),
              ("", "events", "create"), ("", "pods", "get"), ("", "pods", "list"), ("", "pods", "watch"),
              ("", "pods/status", "patch"),
              ("resource.k8s.io", "resourceslices", "list"), ("resource.k8s.io", "resourceslices", "watch"),
              ("resource.k8s.io", "devicetaintrules", "list"), ("resource.k8s.io", "devicetaintrules", "create"),
              ("resource.k8s.io", "devicetaintrules", "patch"), ("resource.k8s.io", "devicetaintrules", "delete")}
    # nothing more: no nodes watch (the extender's), no node update or delete, no pods/eviction
    # (opt-in, deploy/components/eviction: issue 35, item 5)
    assert granted == needed
    # Roles, each bound in the agent's own namespace (kustomize moves both): the budget's Lease
    # slots, and the NodeFeature of the opt-in nodefeature mode (docs/nodefeature.md)
    wanted = {"budget": {("coordination.k8s.io", "leases", v) for v in ("list", "get", "create", "update", "delete")},
              "nodefeature": {("nfd.k8s-sigs.io", "nodefeatures", v) for v in ("get", "create", "update", "delete")}}
    roles = {r["metadata"]["name"]: r for r in by_kind(objs, "Role")}
    bindings = {b["roleRef"]["name"]: b for b in by_kind(objs, "RoleBinding")}
    assert len(roles) == len(bindings) == len(wanted)
    sa = one(objs, "ServiceAccount")["metadata"]
    for what, grants in wanted.items():
        (name,) = [n for n in roles if n.endswith(f"-{what}")]
        role, binding = roles[name], bindings[name]
        assert {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
                for v in rule["verbs"]} == grants
        assert role["metadata"]["namespace"] == sa["namespace"] == binding["metadata"]["namespace"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}]


def daemonsets(objs: list[dict]) -> list[dict]:
    """The agent DaemonSets of a rendering: the generic one and/or one per vendor component."""
    found = by_kind(objs, "DaemonSet")
    assert found, "no agent DaemonSet"
    return found


NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
WRITE_OPERATION = {"patch": "UPDATE", "update": "UPDATE", "create": "CREATE", "delete": "DELETE"}


def _agent_objects(rendered) -> list[dict]:
    target, objs = rendered
    if target == "extender":
        pytest.skip("no agent here")
    return objs


def test_node_restriction_policy_fails_closed_and_covers_every_write_rbac_grants(rendered):
    objs = _agent_objects(rendered)
    vap, binding = one(objs, "ValidatingAdmissionPolicy"), one(objs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
    spec = vap["spec"]
    assert spec["failurePolicy"] == "Fail"
    matched = {(group, op, res) for rule in spec["matchConstraints"]["resourceRules"] for group in rule["apiGroups"]
               for op in rule["operations"] for res in rule["resources"]}
    writes = {(g, WRITE_OPERATION[v], r) for rule in one(objs, "ClusterRole")["rules"] for g in rule["apiGroups"]
              for r in rule["resources"] for v in rule["verbs"] if v in WRITE_OPERATION}
    node_scoped = {("", "UPDATE", "nodes"), ("", "UPDATE", "nodes/status"), ("", "CREATE", "events"),
                   ("", "UPDATE", "pods/status"), ("resource.k8s.io", "CREATE", "devicetaintrules"),
                   ("resource.k8s.io", "UPDATE", "devicetaintrules"), ("resource.k8s.io", "DELETE", "devicetaintrules")}
    # no eviction in the base (issue 35, item 5: deploy/components/eviction grants it); the policy
    # still matches it, for a namespace check (an Eviction names no node)
    assert writes == node_scoped
    assert node_scoped | {("", "CREATE", "pods/eviction")} <= matched  # every write goes through the policy
    # structure, without a CEL library: the caller is the agent's ServiceAccount, the node comes
    # from its token, and the node written must be that one
    sa = one(objs, "ServiceAccount")["metadata"]["name"]
    (cond,) = spec["matchConditions"]
    assert "request.userInfo.username" in cond["expression"] and f":{sa}$" in cond["expression"]
    var = spec["variables"][0]
    assert var["name"] == "nodeName" and f"request.userInfo.extra['{NODE_NAME_KEY}']" in var["expression"]
    checks = " ".join(v["expression"] for v in spec["validations"])
    assert "object.metadata.name == variables.nodeName" in checks
    assert "object.involvedObject.name == variables.nodeName" in checks
    assert all(v.get("message") or v.get("messageExpression") for v in spec["validations"])


def _request(user: str, op: str, resource: str, namespace: str = "", sub: str = "",
             node: str | None = None, group: str = "") -> dict:
    extra = {NODE_NAME_KEY: [node], "authentication.kubernetes.io/pod-name": ["hetero-exporter-x7k2q"]} if node else {}
    return {"operation": op, "resource": {"group": group, "version": "v1", "resource": resource},
            "subResource": sub, "namespace": namespace, "userInfo": {"username": user, "extra": extra,
                                                                      "groups": ["system:serviceaccounts"]}}


def _node(name: str, labels: dict | None = None, taints: list | None = None, unschedulable: bool = False,
          book: str | None = None) -> dict:
    spec: dict = {"taints": taints} if taints is not None else {}
    if unschedulable:
        spec["unschedulable"] = True
    meta: dict = {"name": name, "labels": dict(labels or {})}
    if book is not None:
        meta["annotations"] = {"hetero-exporter.io/agent-state": book}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec,
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "capacity": {"cpu": "64"},
                       "allocatable": {"cpu": "64"}}}


def _event(about: str, kind: str = "Node", namespace: str = "default", reporter: str = "gpu-node-7",
           pod_namespace: str | None = None) -> dict:
    """An event as the agent on ``reporter`` writes it (k8s/events.py), about the Node or Pod
    ``about``, stored in ``namespace``; a Pod's ``involvedObject.namespace`` is ``pod_namespace``."""
    from hetero_exporter.k8s.events import NodeEvent, ObjectRef, body_for
    ref = ObjectRef.node(about) if kind == "Node" else ObjectRef(kind, about, pod_namespace or "", "uid-1")
    doc = body_for(ref, NodeEvent(f"{about}.abc", "Warning", "AcceleratorUnhealthy", "m"), "hetero-exporter",
                   1.8e9, host=reporter)
    doc["metadata"]["namespace"] = namespace
    return doc


def test_node_restriction_lets_the_agent_write_only_its_own_node(rendered):
    pytest.importorskip("celpy", reason="cel-python evaluates the policy's CEL (pip install cel-python)")
    objs = _agent_objects(rendered)
    policy = AdmissionPolicy(one(objs, "ValidatingAdmissionPolicy"))
    sa = one(objs, "ServiceAccount")["metadata"]
    agent = f"system:serviceaccount:{sa['namespace']}:{sa['name']}"  # the overlay's namespace too

    def node_write(user, name, sub="", node="gpu-node-7"):
        return policy.admits(_request(user, "UPDATE", "nodes", sub=sub, node=node), _node(name), _node(name))

    def event(user, ev, node="gpu-node-7"):
        return policy.admits(_request(user, "CREATE", "events", ev["metadata"]["namespace"], node=node), ev)

    assert node_write(agent, "gpu-node-7") and node_write(agent, "gpu-node-7", "status")
    assert not node_write(agent, "gpu-node-8") and not node_write(agent, "gpu-node-8", "status")
    assert not node_write(agent, "gpu-node-7", node=None)  # a token that names no node: refused
    assert event(agent, _event("gpu-node-7"))
    assert not event(agent, _event("gpu-node-8"))
    assert not event(agent, _event("gpu-node-7", namespace="kube-system"))
    assert not event(agent, _event("train-0", kind="Pod", namespace="default"))
    assert not event(agent, {**_event("gpu-node-7"), "involvedObject": {"name": "gpu-node-7"}})  # no kind
    assert not event(agent, _event("gpu-node-7"), node=None)
    # other callers are not this policy's business (the kubelet, the extender, an admin)
    for user in ("system:node:gpu-node-8", f"system:serviceaccount:{sa['namespace']}:{sa['name']}-extender",
                 "kubernetes-admin"):
        assert node_write(user, "gpu-node-8", node=None) and event(user, _event("gpu-node-8"), node=None)
    # reads and other resources pass through untouched
    assert policy.admits(_request(agent, "CREATE", "pods", "ml", node="gpu-node-7"), {"metadata": {"name": "p"}})


def _pod(name: str, node: str, namespace: str = "ml") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node}, "status": {"conditions": []}}


_OWN_POOL = object()


def _rule(node: str | None, pool: Any = _OWN_POOL, device: str | None = "gpu-2", effect: str = "NoSchedule") -> dict:
    """A DeviceTaintRule as the agent writes it (annotated with ``node``, selecting ``device`` of
    ``pool``: the node's own by default; None leaves that selector field out)."""
    meta: dict = {"name": "hetero-exporter-gpu-node-7-0123456789", "labels": {"app.kubernetes.io/managed-by": "hetero-exporter"}}
    if node is not None:
        meta["annotations"] = {"hetero-exporter.io/node": node}
    selector = {"driver": "gpu.nvidia.com", "pool": node if pool is _OWN_POOL else pool, "device": device}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": meta,
            "spec": {"deviceSelector": {k: v for k, v in selector.items() if v is not None},
                     "taint": {"key": OWN_TAINT, "value": "device-lost", "effect": effect}}}


def test_node_restriction_confines_pod_signals_and_device_taints_to_its_own_node(rendered):
    """Issue 15: pod conditions of its own node's pods only, pod events in the pod's namespace, and
    DeviceTaintRules marked with its own node only (create, update and delete)."""
    pytest.importorskip("celpy", reason="cel-python evaluates the policy's CEL (pip install cel-python)")
    objs = _agent_objects(rendered)
    policy = AdmissionPolicy(one(objs, "ValidatingAdmissionPolicy"))
    sa = one(objs, "ServiceAccount")["metadata"]
    agent = f"system:serviceaccount:{sa['namespace']}:{sa['name']}"

    def pod_status(pod, node="gpu-node-7"):
        return policy.admits(_request(agent, "UPDATE", "pods", "ml", sub="status", node=node), pod, pod)

    assert pod_status(_pod("train-0", "gpu-node-7"))
    assert not pod_status(_pod("train-0", "gpu-node-8"))
    assert not pod_status({**_pod("train-0", "gpu-node-7"), "spec": {}})  # not bound: not its node's
    pod_event = _event("train-0", kind="Pod", namespace="ml", pod_namespace="ml")
    assert policy.admits(_request(agent, "CREATE", "events", "ml", node="gpu-node-7"), pod_event)
    assert not policy.admits(_request(agent, "CREATE", "events", "kube-system", node="gpu-node-7"), pod_event)

    def rule(op, new, old=None, node="gpu-node-7"):
        return policy.admits(_request(agent, op, "devicetaintrules", node=node, group="resource.k8s.io"), new, old)

    assert rule("CREATE", _rule("gpu-node-7"))
    assert not rule("CREATE", _rule("gpu-node-8")) and not rule("CREATE", _rule(None))
    assert rule("UPDATE", _rule("gpu-node-7"), old=_rule("gpu-node-7"))
    assert not rule("UPDATE", _rule("gpu-node-7"), old=_rule("gpu-node-8"))  # taking over another node's rule
    assert not rule("UPDATE", _rule("gpu-node-7"), old=_rule(None))  # a rule someone else made
    assert rule("DELETE", None, old=_rule("gpu-node-7"))
    assert not rule("DELETE", None, old=_rule("gpu-node-8"))


def _nodefeature(node: str | None) -> dict:
    """A NodeFeature as the agent writes it in nodefeature mode (labelled with ``node``; None: no label)."""
    meta: dict = {"name": f"hetero-exporter-{node or 'x'}", "namespace": "hetero-exporter"}
    if node is not None:
        meta["labels"] = {"nfd.node.kubernetes.io/node-name": node, "app.kubernetes.io/managed-by": "hetero-exporter"}
    return {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature", "metadata": meta,
            "spec": {"labels": {"hetero-exporter.io/accelerator": "true"}}, "status": {}}


def test_node_restriction_confines_nodefeatures_to_its_own_node(rendered):
    """Nodefeature mode (docs/nodefeature.md): a stolen token cannot have nfd-master label another
    node, by creating, retargeting, taking over or deleting a NodeFeature of another node."""
    pytest.importorskip("celpy", reason="cel-python evaluates the policy's CEL (pip install cel-python)")
    objs = _agent_objects(rendered)
    policy = AdmissionPolicy(one(objs, "ValidatingAdmissionPolicy"))
    sa = one(objs, "ServiceAccount")["metadata"]
    agent = f"system:serviceaccount:{sa['namespace']}:{sa['name']}"

    def nf(op, new, old=None, node="gpu-node-7", user=agent):
        return policy.admits(_request(user, op, "nodefeatures", sa["namespace"], node=node, group="nfd.k8s-sigs.io"),
                             new, old)

    own, other = _nodefeature("gpu-node-7"), _nodefeature("gpu-node-8")
    assert nf("CREATE", own) and nf("UPDATE", own, old=own) and nf("DELETE", None, old=own)
    assert not nf("CREATE", other) and not nf("CREATE", _nodefeature(None))
    assert not nf("UPDATE", other, old=own)  # retargeting its own at another node
    assert not nf("UPDATE", own, old=other)  # taking over another node's
    assert not nf("DELETE", None, old=other)
    assert not nf("CREATE", own, node=None)  # a token that names no node
    assert nf("CREATE", other, node=None, user="system:serviceaccount:node-feature-discovery:nfd-worker")


def test_node_restriction_refuses_what_one_stolen_node_token_could_do_to_others(rendered):
    """Issue 25, item 3: with gpu-node-7's token, a DeviceTaintRule (annotated as its own) on
    another node's pool, NoExecute included; one selecting every device of a driver (no pool, no
    device); and Node label writes under node-restriction.kubernetes.io/."""
    pytest.importorskip("celpy", reason="cel-python evaluates the policy's CEL (pip install cel-python)")
    objs = _agent_objects(rendered)
    policy = AdmissionPolicy(one(objs, "ValidatingAdmissionPolicy"))
    sa = one(objs, "ServiceAccount")["metadata"]
    agent = f"system:serviceaccount:{sa['namespace']}:{sa['name']}"

    def rule(op, new, old=None):
        return policy.admits(_request(agent, op, "devicetaintrules", node="gpu-node-7", group="resource.k8s.io"),
                             new, old)

    assert rule("CREATE", _rule("gpu-node-7", effect="NoExecute"))  # its own pool: allowed (opt-in)
    assert not rule("CREATE", _rule("gpu-node-7", pool="gpu-node-8", effect="NoExecute"))
    assert not rule("CREATE", _rule("gpu-node-7", pool=None, device=None))  # every device of the driver
    assert not rule("CREATE", _rule("gpu-node-7", device=None))  # every device of its pool: not one device
    assert not rule("UPDATE", _rule("gpu-node-7", pool="gpu-node-8"), old=_rule("gpu-node-7"))

    def labels(new, old):
        request = _request(agent, "UPDATE", "nodes", node="gpu-node-7")
        return policy.admits(request, {**_node("gpu-node-7"), "metadata": {"name": "gpu-node-7", "labels": new}},
                             {**_node("gpu-node-7"), "metadata": {"name": "gpu-node-7", "labels": old}})

    restricted = "node-restriction.kubernetes.io/dedicated"
    assert labels({"hetero-exporter.io/vendor.nvidia": "true"}, {})  # its own labels: allowed
    assert labels({restricted: "ml"}, {restricted: "ml"})  # kept as it was: allowed
    assert not labels({restricted: "ml"}, {})  # added
    assert not labels({restricted: "batch"}, {restricted: "ml"})  # changed
    assert not labels({}, {restricted: "ml"})  # removed


def _stolen(rendered) -> tuple[AdmissionPolicy, str]:
    """The policy of a rendering, and its agent's username (gpu-node-7's token below)."""
    pytest.importorskip("celpy", reason="cel-python evaluates the policy's CEL (pip install cel-python)")
    objs = _agent_objects(rendered)
    sa = one(objs, "ServiceAccount")["metadata"]
    return AdmissionPolicy(one(objs, "ValidatingAdmissionPolicy")), f"system:serviceaccount:{sa['namespace']}:{sa['name']}"


OTHERS_TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


def test_node_restriction_confines_node_patches_to_the_agents_own_marks(rendered):
    """Issue 35, item 5: with gpu-node-7's token, on its own Node: a control-plane role label, a
    change to another label or taint, removing a taint someone else set, a cordon outside the
    book or lifting someone else's cordon, other node conditions, capacity: all refused; the
    agent's own labels, taint and cordon admitted."""
    from hetero_exporter.health.plan.book import Book
    policy, agent = _stolen(rendered)
    cordoned, clean = Book(cordoned=True).to_json(), Book().to_json()

    def patch(new: dict, old: dict, sub: str = "") -> bool:
        return policy.admits(_request(agent, "UPDATE", "nodes", sub=sub, node="gpu-node-7"), new, old)

    def labels(new, old):
        return patch(_node("gpu-node-7", labels=new), _node("gpu-node-7", labels=old))

    own = "hetero-exporter.io/nvidia.count"
    assert labels({own: "8"}, {}) and labels({own: "7"}, {own: "8"}) and labels({}, {own: "8"})
    assert labels({"kubernetes.io/hostname": "gpu-node-7", own: "8"}, {"kubernetes.io/hostname": "gpu-node-7"})
    assert not labels({"node-role.kubernetes.io/control-plane": ""}, {})
    assert not labels({"nvidia.com/gpu.present": "false"}, {"nvidia.com/gpu.present": "true"})
    assert not labels({}, {"nvidia.com/gpu.present": "true"})
    assert not labels({"feature.node.kubernetes.io/pci-10de.present": "true"}, {})

    def taints(new, old):
        return patch(_node("gpu-node-7", taints=new), _node("gpu-node-7", taints=old))

    mine = {"key": OWN_TAINT, "value": "device-lost", "effect": "NoSchedule"}
    assert taints([OTHERS_TAINT, mine], [OTHERS_TAINT]) and taints([OTHERS_TAINT], [OTHERS_TAINT, mine])
    assert taints([{**mine, "value": "xid"}], [mine]) and taints([mine], [])
    assert not taints([mine], [OTHERS_TAINT, mine])  # removing a taint someone else set
    assert not taints([], [OTHERS_TAINT])
    assert not taints([{**OTHERS_TAINT, "effect": "NoExecute"}], [OTHERS_TAINT])  # changing it
    assert not taints([OTHERS_TAINT, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
                      [OTHERS_TAINT])  # another key added

    def cordon(new_unsched, new_book, old_unsched, old_book):
        return patch(_node("gpu-node-7", unschedulable=new_unsched, book=new_book),
                     _node("gpu-node-7", unschedulable=old_unsched, book=old_book))

    assert cordon(True, cordoned, False, clean)  # the agent's cordon, recorded in its book
    assert cordon(False, clean, True, cordoned)  # lifting its own cordon
    assert cordon(True, cordoned, True, cordoned) and cordon(False, clean, False, clean)  # no change
    assert cordon(True, clean, True, cordoned)  # forgetting it (someone else's now): allowed
    assert not cordon(True, clean, False, clean)  # a cordon the book does not record
    assert not cordon(False, clean, True, clean)  # lifting someone else's cordon
    assert not cordon(False, clean, True, None)
    assert not cordon(True, cordoned, True, clean)  # claiming someone else's cordon, to lift it later
    assert not cordon(False, cordoned, False, clean)  # a claim without a cordon

    status_old = _node("gpu-node-7")
    own_condition = {"type": "AcceleratorUnhealthy", "status": "True", "reason": "NvidiaXid79"}
    with_own = copy.deepcopy(status_old)
    with_own["status"]["conditions"].append(own_condition)
    assert patch(with_own, status_old, "status") and patch(status_old, with_own, "status")
    not_ready = copy.deepcopy(with_own)
    not_ready["status"]["conditions"][0]["status"] = "False"
    assert not patch(not_ready, with_own, "status")
    gpus = copy.deepcopy(status_old)
    gpus["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    assert not patch(gpus, status_old, "status")


def test_node_restriction_confines_pod_status_events_and_evictions(rendered):
    """Issue 35, item 5: a pod status write changes only the agent's condition; events are the
    agent's own (component, node), never in kube-* namespaces nor about another node; evictions
    (deploy/components/eviction) never in kube-* namespaces."""
    policy, agent = _stolen(rendered)
    pod = _pod("train-0", "gpu-node-7")
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}

    def pod_status(new, old=pod):
        return policy.admits(_request(agent, "UPDATE", "pods", "ml", sub="status", node="gpu-node-7"), new, old)

    mine = copy.deepcopy(pod)
    mine["status"]["conditions"].append({"type": "hetero-exporter.io/AcceleratorHealthy", "status": "False"})
    assert pod_status(mine) and pod_status(pod, mine)
    failed = copy.deepcopy(mine)
    failed["status"]["phase"] = "Failed"
    assert not pod_status(failed, mine)
    unready = copy.deepcopy(mine)
    unready["status"]["conditions"][0]["status"] = "False"
    assert not pod_status(unready, mine)

    def event(ev):
        return policy.admits(_request(agent, "CREATE", "events", ev["metadata"]["namespace"], node="gpu-node-7"), ev)

    assert event(_event("gpu-node-7")) and event(_event("train-0", "Pod", "ml", pod_namespace="ml"))
    assert not event(_event("coredns-7db6d", "Pod", "kube-system", pod_namespace="kube-system"))
    assert not event(_event("x", "Pod", "kube-node-lease", pod_namespace="kube-node-lease"))
    assert not event(_event("gpu-node-7", reporter="gpu-node-8"))  # posing as another node's agent
    for field, value in (("reportingComponent", "kubelet"), ("source", {"component": "kubelet", "host": "gpu-node-7"}),
                         ("source", {"component": "hetero-exporter", "host": "gpu-node-8"})):
        assert not event({**_event("gpu-node-7"), field: value}), field
    assert not event({k: v for k, v in _event("gpu-node-7").items() if k != "reportingComponent"})

    def evict(namespace):
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": namespace}}
        return policy.admits(_request(agent, "CREATE", "pods", namespace, sub="eviction", node="gpu-node-7"), eviction)

    assert evict("ml") and not evict("kube-system")


def test_node_restriction_binds_the_nodefeature_name_and_labels_to_the_tokens_node(rendered):
    """Issue 35, item 4: with gpu-node-7's token, hetero-exporter-gpu-node-8 (even labelled as
    gpu-node-7's) cannot be created; labels outside hetero-exporter.io/, more than 256 labels and
    features are refused."""
    policy, agent = _stolen(rendered)

    def nf(op, new, old=None):
        request = _request(agent, op, "nodefeatures", "hetero-exporter", node="gpu-node-7", group="nfd.k8s-sigs.io")
        return policy.admits(request, new, old)

    own = _nodefeature("gpu-node-7")
    squat = copy.deepcopy(own)
    squat["metadata"]["name"] = "hetero-exporter-gpu-node-8"
    assert nf("CREATE", own) and not nf("CREATE", squat)
    assert not nf("DELETE", None, old=squat) and not nf("UPDATE", squat, old=squat)

    def with_labels(labels, **spec):
        obj = copy.deepcopy(own)
        obj["spec"] = {"labels": labels, **spec}
        return obj

    for foreign in ("nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present", "accelerator"):
        assert not nf("CREATE", with_labels({foreign: "false"})), foreign
        assert not nf("UPDATE", with_labels({foreign: "false"}), old=own), foreign
    many = {f"hetero-exporter.io/l{i}": "x" for i in range(256)}
    assert nf("CREATE", with_labels(many))
    assert not nf("CREATE", with_labels({**many, "hetero-exporter.io/one-more": "x"}))
    assert not nf("CREATE", with_labels({f"hetero-exporter.io/l{i}": "x" for i in range(5000)}))
    flags = {"flags": {"pci": {"elements": {"10de": {}}}}}
    assert not nf("CREATE", with_labels({}, features=flags))
    assert nf("CREATE", with_labels({}, features={"flags": {}, "attributes": {}, "instances": {}}))


def assert_ingress_only_from(netpol: dict, workload: dict, namespace: str, pod_labels: dict) -> None:
    """``netpol`` selects the workload's pods and admits, to their container ports only, the pods
    labelled ``pod_labels`` in ``namespace``: one peer holding both selectors (two peers would be OR)."""
    template = workload["spec"]["template"]
    assert netpol["spec"]["podSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert netpol["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = netpol["spec"]["ingress"]
    (c,) = template["spec"]["containers"]
    assert rule["ports"] == [{"port": p["containerPort"], "protocol": "TCP"} for p in c["ports"]]
    (peer,) = rule["from"]
    assert peer == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                    "podSelector": {"matchLabels": pod_labels}}


def test_the_network_policy_admits_only_prometheus_to_the_metrics_port(rendered):
    objs = _agent_objects(rendered)
    # kube-prometheus-stack's defaults (networkpolicy.yaml says to adjust them); every agent's pods
    for ds in daemonsets(objs):
        assert_ingress_only_from(one(objs, "NetworkPolicy"), ds, "monitoring",
                                 {"app.kubernetes.io/name": "prometheus"})


OWN_TAINT = "hetero-exporter.io/accelerator-unhealthy"  # DESIGN: health actions
KERNEL_LOG_OFF = "--kernel-log=off"
KERNEL_LOG_SYSLOG = "--kernel-log=syslog"


def tolerates(tolerations: list[dict], taint: dict) -> bool:
    """Whether a pod with ``tolerations`` tolerates ``taint``, as the scheduler and kubelet decide."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("operator", "Equal") == "Exists":
            if not t.get("key") or t["key"] == taint["key"]:
                return True
        elif t.get("key") == taint["key"] and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def container(ds: dict) -> dict:
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return c


def mount(ds: dict, path: str) -> dict | None:
    return next((m for m in container(ds)["volumeMounts"] if m["mountPath"] == path), None)


def volume(ds: dict, name: str) -> dict:
    return next(v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == name)


def host_root_arg(ds: dict) -> str | None:
    args = [a.split("=", 1)[1] for a in container(ds)["args"] if a.startswith("--host-root=")]
    assert len(args) <= 1, args
    return args[0] if args else None


def assert_agent_daemonset(ds: dict, objs: list[dict], extra_taints: tuple[str, ...] = ()) -> None:
    """What every agent DaemonSet holds, generic or vendor's (issue 16's invariants)."""
    name = ds["metadata"]["name"]
    pod = ds["spec"]["template"]["spec"]
    c = container(ds)
    # keeps running on the nodes it taints, and on the vendors' resource taints
    for key in (OWN_TAINT, *extra_taints):
        for effect in ("NoSchedule", "NoExecute"):
            assert tolerates(pod["tolerations"], {"key": key, "value": "x", "effect": effect}), (name, key, effect)
    assert pod["priorityClassName"] == "system-node-critical", name
    assert pod["serviceAccountName"] == one(objs, "ServiceAccount")["metadata"]["name"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert c[probe]["httpGet"]["path"] == path and c[probe]["httpGet"]["port"] in ports, (name, probe)
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName", name
    # the fleet-wide budget's Lease slots live in the agent's namespace (health.budget_namespace)
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace", name
    res = c["resources"]
    assert res["requests"]["cpu"] and res["requests"]["memory"] and res["limits"]["memory"], name
    assert "cpu" not in res["limits"], f"{name}: a CPU limit throttles collection cycles past their deadline"
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True, name
    if sc.get("privileged"):
        # the API server refuses privileged together with allowPrivilegeEscalation: false
        assert "allowPrivilegeEscalation" not in sc, name
    else:
        assert sc.get("allowPrivilegeEscalation") is False and sc["capabilities"]["drop"] == ["ALL"], name
    # what the API server checks beyond the schema: each mount names a volume, once per path
    paths = [m["mountPath"] for m in c["volumeMounts"]]
    assert len(paths) == len(set(paths)), name
    assert {m["name"] for m in c["volumeMounts"]} <= {v["name"] for v in pod["volumes"]}, name
    pr = mount(ds, "/var/lib/kubelet/pod-resources")
    assert pr and pr.get("readOnly") is True, name
    assert volume(ds, pr["name"])["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    kernel_log = [a for a in c["args"] if a.startswith("--kernel-log")]
    assert len(kernel_log) == 1, f"{name}: says whether it reads the kernel log ({kernel_log})"
    kmsg = mount(ds, "/dev/kmsg")
    if kernel_log == [KERNEL_LOG_SYSLOG]:
        # the ring buffer through syslog(2): CAP_SYSLOG, the one capability added, and no device
        assert kmsg is None and not sc.get("privileged"), name
        assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG"]}, name
        state = mount(ds, "/var/lib/hetero-exporter")
        assert state and volume(ds, state["name"])["hostPath"]["path"] == "/var/lib/hetero-exporter", name
    elif kernel_log != [KERNEL_LOG_OFF]:
        assert kernel_log == ["--kernel-log=/dev/kmsg"] and kmsg and kmsg.get("readOnly") is True, name
        assert volume(ds, kmsg["name"])["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
        # /dev/kmsg is outside an unprivileged container's device cgroup
        assert sc.get("privileged") is True, f"{name} reads the kernel log without privilege"
        state = mount(ds, "/var/lib/hetero-exporter")
        assert volume(ds, state["name"])["hostPath"]["path"] == "/var/lib/hetero-exporter"  # survives a restart
    else:
        assert kmsg is None, name
    # --host-root names where the host's / is mounted, and the other way round
    root = host_root_arg(ds)
    mounted = [m for m in c["volumeMounts"] if volume(ds, m["name"]).get("hostPath", {}).get("path") == "/"]
    assert [m["mountPath"] for m in mounted] == ([root] if root else []), name
    assert all(m.get("readOnly") is True for m in mounted), name
    rolling = ds["spec"]["updateStrategy"]
    assert rolling["type"] == "RollingUpdate"
    bound = rolling["rollingUpdate"]["maxUnavailable"]
    assert (isinstance(bound, int) and bound >= 1) or re.fullmatch(r"([1-9]|[1-9]\d)%", str(bound)), (name, bound)
    selector = ds["spec"]["selector"]["matchLabels"]
    assert selector.items() <= ds["spec"]["template"]["metadata"]["labels"].items(), name


def test_every_agent_daemonset_holds_the_invariants(rendered):
    objs = _agent_objects(rendered)
    for ds in daemonsets(objs):
        assert_agent_daemonset(ds, objs)


def test_no_two_agent_daemonsets_select_the_same_pods(rendered):
    objs = _agent_objects(rendered)
    sets = daemonsets(objs)
    for a in sets:
        for b in sets:
            if a is not b:
                sel = a["spec"]["selector"]["matchLabels"]
                assert not sel.items() <= b["spec"]["template"]["metadata"]["labels"].items(), \
                    (a["metadata"]["name"], b["metadata"]["name"])


def test_the_namespace_admits_the_agents_pods(rendered):
    """hostPath volumes (every agent), hostPID and privileged (the vendor agents) are beyond Pod
    Security's baseline level, which a cluster may enforce by default; system-node-critical pods
    outside kube-system need a ResourceQuota for that class on some clusters."""
    objs = _agent_objects(rendered)
    labels = one(objs, "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    # and a ResourceQuota that covers the agents' priority class (clusters that limit it to kube-system)
    (scope,) = one(objs, "ResourceQuota")["spec"]["scopeSelector"]["matchExpressions"]
    assert scope["scopeName"] == "PriorityClass" and scope["operator"] == "In"
    assert {ds["spec"]["template"]["spec"]["priorityClassName"] for ds in daemonsets(objs)} <= set(scope["values"])


def test_the_base_holds_the_generic_agent_of_least_privilege():
    (ds,) = daemonsets(render("base"))
    pod = ds["spec"]["template"]["spec"]
    c = container(ds)
    assert ds["spec"]["selector"]["matchLabels"]["hetero-exporter.io/agent"] == "generic"
    assert not pod.get("hostPID") and not c["securityContext"].get("privileged")
    assert {"operator": "Exists"} in pod["tolerations"]
    assert not any(volume(ds, m["name"]).get("hostPath", {}).get("path") in ("/", "/dev") for m in c["volumeMounts"])
    assert host_root_arg(ds) is None and KERNEL_LOG_OFF in c["args"]
    assert not {e["name"] for e in c["env"]} - {"NODE_NAME", "POD_NAMESPACE"}  # no vendor's variables
    assert {"/host/sys", "/var/lib/kubelet/pod-resources"} <= {m["mountPath"] for m in c["volumeMounts"]}


def test_the_invariants_can_fail():
    """assert_agent_daemonset rejects a DaemonSet that breaks one of them."""
    (ds,) = daemonsets(objs := render("base"))
    assert_agent_daemonset(ds, objs)
    broken = yaml.safe_load(yaml.safe_dump(ds))
    broken["spec"]["template"]["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    with pytest.raises(AssertionError):
        assert_agent_daemonset(broken, objs)
    broken = yaml.safe_load(yaml.safe_dump(ds))
    broken["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = "100%"
    with pytest.raises(AssertionError):
        assert_agent_daemonset(broken, objs)
    broken = yaml.safe_load(yaml.safe_dump(ds))
    container(broken)["args"].append("--host-root=/host/root")  # and no such mount
    with pytest.raises(AssertionError):
        assert_agent_daemonset(broken, objs)
    assert not tolerates([{"key": OWN_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                         {"key": OWN_TAINT, "effect": "NoExecute"})


def test_the_agent_accepts_the_daemonset_args_and_config(rendered, tmp_path):
    objs = _agent_objects(rendered)
    for ds in daemonsets(objs):
        pod = ds["spec"]["template"]["spec"]
        c = container(ds)
        args, extra = cli.build_parser().parse_known_args(c["args"])
        assert args.command == "run" and extra == [], (ds["metadata"]["name"], extra)
        port = int(args.listen.rsplit(":", 1)[1])
        assert port in {p["containerPort"] for p in c["ports"]}
        # the config file the args name is the rendered ConfigMap, mounted where the args say
        (vol,) = [v for v in pod["volumes"] if "configMap" in v]
        cm = [o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"] == vol["configMap"]["name"]]
        assert cm, "the DaemonSet mounts a ConfigMap that is not rendered"
        mnt = next(m for m in c["volumeMounts"] if m["name"] == vol["name"])
        rel = Path(args.config).relative_to(mnt["mountPath"])
        path = tmp_path / rel
        path.write_text(cm[0]["data"][str(rel)])
        cfg = config_mod.load(str(path))
        sys_mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "sys")
        assert cfg.sysfs_root == sys_mount
        if cfg.kernel_log.get("enabled", True) and args.kernel_log != "off":
            assert mount(ds, cfg.kernel_log["state_dir"]), "the kernel-log cursor is not on a hostPath"


SOURCES_WITH_REASONS = ["base/daemonset.yaml", "components/_device-access/device-access.yaml",
                        "components/nvidia/agent/daemonset-patch.yaml"]


def test_every_host_mount_and_privilege_says_why():
    """Each mount, privilege and toleration of an agent has its reason written right above it
    (deploy/base and the components' patches)."""
    patches = DEPLOY.glob("components/*/agent/daemonset-patch.yaml")
    files = SOURCES_WITH_REASONS + [str(p.relative_to(DEPLOY)) for p in patches]
    for rel in sorted(set(files)):
        lines = (DEPLOY / rel).read_text().splitlines()
        if "volumeMounts:" in (l.strip() for l in lines):
            start = next(i for i, l in enumerate(lines) if l.strip() == "volumeMounts:")
            end = next((i for i, l in enumerate(lines) if l.strip() == "volumes:"), len(lines))
            for i in range(start + 1, end):
                if lines[i].strip().startswith("- name:") and lines[i].split(":", 1)[1].strip() != "config":
                    assert lines[i - 1].strip().startswith("#"), f"{rel}: no reason above mount {lines[i].strip()}"
        for key in ("privileged: true", "hostPID: true", "runAsUser: 0", "tolerations:", "runtimeClassName: nvidia"):
            for i, l in enumerate(lines):
                if l.strip() == key:
                    assert lines[i - 1].strip().startswith("#"), f"{rel}: no reason above {key}"


def test_service_and_servicemonitor_select_the_agents(rendered):
    target, objs = rendered
    if target == "extender":
        pytest.skip("no agent here")
    svc = one(objs, "Service")
    for ds in daemonsets(objs):  # one Service and one ServiceMonitor for every agent
        assert svc["spec"]["selector"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert svc["spec"]["clusterIP"] == "None"
    sm = one(objs, "ServiceMonitor")
    assert sm["apiVersion"] == OPERATOR_GROUP
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    # job label = the Service's label value = the job the rules and dashboards select on
    assert svc["metadata"]["labels"][sm["spec"]["jobLabel"]] == rules.JOB
    (ep,) = sm["spec"]["endpoints"]
    assert set(ep) <= ENDPOINT_FIELDS, set(ep) - ENDPOINT_FIELDS
    assert ep["port"] in {p["name"] for p in svc["spec"]["ports"]}
    assert ep["path"] == "/metrics" and ep["honorLabels"] is True
    assert re.fullmatch(r"\d+[smh]", ep["interval"]) and re.fullmatch(r"\d+[smh]", ep["scrapeTimeout"])
    for r in ep["relabelings"]:
        assert set(r) <= RELABEL_FIELDS and r["action"] in ("replace", "labeldrop", "keep", "drop", "labelmap")
    node = [r for r in ep["relabelings"] if r.get("targetLabel") == "node"]
    assert node == [{"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]
    dropped = [r["regex"] for r in ep["relabelings"] if r["action"] == "labeldrop"]
    assert any(re.fullmatch(rx, "pod") and re.fullmatch(rx, "namespace") for rx in dropped)


def test_prometheusrule_is_the_alerts_rule_file(rendered, tmp_path):
    target, objs = rendered
    if target == "extender":
        pytest.skip("no agent here")
    pr = one(objs, "PrometheusRule")
    assert pr["apiVersion"] == OPERATOR_GROUP
    assert pr["spec"] == rules.rule_groups() == yaml.safe_load(rules.RULES_FILE.read_text())
    promtool = shutil.which("promtool")
    if promtool:
        f = tmp_path / "spec.yml"
        f.write_text(yaml.safe_dump(pr["spec"]))
        res = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr


def test_the_example_overlay_changes_what_it_says():
    base, overlay = render("base"), render("overlays/example")
    # the all-vendors overlay below it: every vendor's agent, in the example's namespace and registry
    assert len(daemonsets(overlay)) == len(daemonsets(render("overlays/all-vendors"))) > 1
    for ds in daemonsets(overlay):
        assert container(ds)["image"] == "registry.example.com/platform/hetero-exporter:0.1.0"
        assert ds["metadata"]["namespace"] == "gpu-monitoring"
    assert one(overlay, "ServiceMonitor")["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert one(overlay, "PrometheusRule")["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    cm = one(overlay, "ConfigMap")
    assert yaml.safe_load(cm["data"]["config.yaml"])["health"]["mode"] == "dry-run"
    assert yaml.safe_load(one(base, "ConfigMap")["data"]["config.yaml"])["health"]["mode"] == "observe"


def test_kubernetes_validate_rejects_a_broken_object():
    """The schema check can fail: a DaemonSet with a misspelt field does not pass."""
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "x"},
          "spec": {"selector": {"matchLabels": {"a": "b"}},
                   "template": {"metadata": {"labels": {"a": "b"}},
                                "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicy": "Always",
                                                         "livenesProbe": {}}]}}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, KUBE_VERSIONS[-1], strict=True)


def test_every_shipped_agent_reads_the_kernel_log_but_the_generic_one():
    """Issue 24, item 7: the NVIDIA agent ran with the kernel log off, so Xid text lines and NVSwitch
    SXids were never read on NVIDIA nodes as shipped; now only the generic agent (no vendor: nothing
    to match) leaves it off."""
    objs = render("overlays/all-vendors")
    seen = {}
    for ds in daemonsets(objs):
        (c,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "agent"]
        seen[ds["metadata"]["name"]] = [a for a in c["args"] if a.startswith("--kernel-log")]
    assert seen.pop("hetero-exporter", [KERNEL_LOG_OFF]) == [KERNEL_LOG_OFF]
    assert seen["hetero-exporter-nvidia"] == [KERNEL_LOG_SYSLOG]
    assert len(seen) == 10 and all(v != [KERNEL_LOG_OFF] for v in seen.values()), seen
