"""deploy/: `kubectl kustomize` renders the base, the example overlay and deploy/extender (when
present); every built-in object validates against the Kubernetes schemas (kubernetes-validate,
strict: unknown fields fail); the prometheus-operator objects, which it has no schema for, are
checked by structure; the objects agree with each other and with the agent (config, CLI, ports)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from conftest import ROOT, require_tool
from hetero_exporter import cli
from hetero_exporter import config as config_mod
from promql_names import load

pytestmark = pytest.mark.integration

rules = load("alerts/rules.py")
DEPLOY = ROOT / "deploy"
KUBE_VERSIONS = ("1.28.0", kubernetes_validate.latest_version())  # oldest supported, newest known
TARGETS = ["base", "overlays/example"] + (["extender"] if (DEPLOY / "extender" / "kustomization.yaml").is_file() else [])
OPERATOR_GROUP = "monitoring.coreos.com/v1"
# Fields of a ServiceMonitor endpoint this project uses; a typo (honorLabel) would be ignored silently.
ENDPOINT_FIELDS = {"port", "path", "interval", "scrapeTimeout", "honorLabels", "relabelings",
                   "metricRelabelings", "scheme", "tlsConfig", "bearerTokenSecret", "authorization"}
RELABEL_FIELDS = {"action", "sourceLabels", "targetLabel", "regex", "replacement", "separator", "modulus"}
# Objects whose API is younger than the oldest supported version: validated from the first version
# that serves it (kubernetes-validate has no schema for them before). admissionregistration.k8s.io/v1
# ValidatingAdmissionPolicy is GA in 1.30; on older clusters drop node-restriction.yaml (its header).
FIRST_VERSION = {("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): "1.30.0",
                 ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): "1.30.0"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding"}


def _kubectl() -> str:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed (kubectl kustomize renders deploy/); not required on a fresh machine")
    return require_tool("kubectl")


def render(target: str) -> list[dict]:
    res = subprocess.run([_kubectl(), "kustomize", str(DEPLOY / target)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


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
    for obj in objs:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # CRDs: checked by structure below
        first = FIRST_VERSION.get((obj["apiVersion"], obj["kind"]), KUBE_VERSIONS[0])
        for version in sorted({first, KUBE_VERSIONS[-1]}):
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} against {version}: {e.message} at {list(e.path)}")


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
              ("", "events", "create"), ("", "pods", "list"), ("", "pods", "watch")}
    assert granted == needed  # nothing more: no nodes watch (the extender's), no update, no delete


def _daemonset(objs: list[dict]) -> dict:
    return one(objs, "DaemonSet")


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
    matched = {(op, res) for rule in spec["matchConstraints"]["resourceRules"] if rule["apiGroups"] == [""]
               for op in rule["operations"] for res in rule["resources"]}
    writes = {(WRITE_OPERATION[v], r) for rule in one(objs, "ClusterRole")["rules"] for r in rule["resources"]
              for v in rule["verbs"] if v in WRITE_OPERATION}
    assert writes == {("UPDATE", "nodes"), ("UPDATE", "nodes/status"), ("CREATE", "events")}
    assert writes <= matched  # RBAC cannot name the node: every write it grants goes through the policy
    # structure, without a CEL library: the caller is the agent's ServiceAccount, the node comes
    # from its token, and the node written must be that one
    sa = one(objs, "ServiceAccount")["metadata"]["name"]
    (cond,) = spec["matchConditions"]
    assert "request.userInfo.username" in cond["expression"] and f":{sa}$" in cond["expression"]
    (var,) = spec["variables"]
    assert var["name"] == "nodeName" and f"request.userInfo.extra['{NODE_NAME_KEY}']" in var["expression"]
    checks = " ".join(v["expression"] for v in spec["validations"])
    assert "object.metadata.name == variables.nodeName" in checks
    assert "object.involvedObject.name == variables.nodeName" in checks
    assert all(v.get("message") or v.get("messageExpression") for v in spec["validations"])


class AdmissionPolicy:
    """A ValidatingAdmissionPolicy evaluated as the API server does for one request (cel-python):
    outside matchConstraints or matchConditions it does not apply; otherwise every validation must
    hold, and an evaluation error denies (failurePolicy Fail)."""

    def __init__(self, vap: dict):
        import celpy
        self._celpy = celpy
        env = celpy.Environment()
        spec = vap["spec"]
        assert spec["failurePolicy"] == "Fail"
        self.rules = spec["matchConstraints"]["resourceRules"]
        compile_ = lambda e: env.program(env.compile(e))  # noqa: E731
        self.conditions = [compile_(c["expression"]) for c in spec["matchConditions"]]
        self.variables = [(v["name"], compile_(v["expression"])) for v in spec["variables"]]
        self.validations = [compile_(v["expression"]) for v in spec["validations"]]

    def _matches(self, request: dict) -> bool:
        res = request["resource"]["resource"] + (f"/{request['subResource']}" if request.get("subResource") else "")
        return any(request["resource"]["group"] in r["apiGroups"] and request["operation"] in r["operations"]
                   and res in r["resources"] for r in self.rules)

    def admits(self, request: dict, obj: dict) -> bool:
        celpy = self._celpy
        if not self._matches(request):
            return True
        act = {"request": celpy.json_to_cel(request), "object": celpy.json_to_cel(obj)}
        if not all(bool(c.evaluate(act)) for c in self.conditions):
            return True
        try:
            act["variables"] = celpy.json_to_cel({name: p.evaluate(act) for name, p in self.variables})
            return all(bool(v.evaluate(act)) is True for v in self.validations)
        except celpy.CELEvalError:
            return False  # failurePolicy: Fail


def _request(user: str, op: str, resource: str, namespace: str = "", sub: str = "",
             node: str | None = None) -> dict:
    extra = {NODE_NAME_KEY: [node], "authentication.kubernetes.io/pod-name": ["hetero-exporter-x7k2q"]} if node else {}
    return {"operation": op, "resource": {"group": "", "version": "v1", "resource": resource},
            "subResource": sub, "namespace": namespace, "userInfo": {"username": user, "extra": extra,
                                                                      "groups": ["system:serviceaccounts"]}}


def _node(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}}}


def _event(node: str, kind: str = "Node", namespace: str = "default") -> dict:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{node}.abc", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": kind, "name": node, "uid": node}}


def test_node_restriction_lets_the_agent_write_only_its_own_node(rendered):
    pytest.importorskip("celpy", reason="cel-python evaluates the policy's CEL (pip install cel-python)")
    objs = _agent_objects(rendered)
    policy = AdmissionPolicy(one(objs, "ValidatingAdmissionPolicy"))
    sa = one(objs, "ServiceAccount")["metadata"]
    agent = f"system:serviceaccount:{sa['namespace']}:{sa['name']}"  # the overlay's namespace too

    def node_write(user, name, sub="", node="gpu-node-7"):
        return policy.admits(_request(user, "UPDATE", "nodes", sub=sub, node=node), _node(name))

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
    # kube-prometheus-stack's defaults (networkpolicy.yaml says to adjust them)
    assert_ingress_only_from(one(objs, "NetworkPolicy"), _daemonset(objs), "monitoring",
                             {"app.kubernetes.io/name": "prometheus"})


def test_daemonset_probes_env_tolerations_and_resources(rendered):
    target, objs = rendered
    if target == "extender":
        pytest.skip("no agent here")
    pod = _daemonset(objs)["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["livenessProbe"]["httpGet"]["port"] in ports and c["readinessProbe"]["httpGet"]["port"] in ports
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert {"operator": "Exists"} in pod["tolerations"]  # also its own accelerator-unhealthy taint
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    assert pod["hostPID"] is True and pod["serviceAccountName"] == one(objs, "ServiceAccount")["metadata"]["name"]
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/dev", "/host/sys", "/var/lib/kubelet/pod-resources"} <= mounts


def test_the_kernel_log_is_mounted_read_only_with_a_persistent_cursor(rendered):
    target, objs = rendered
    if target == "extender":
        pytest.skip("no agent here")
    pod = _daemonset(objs)["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    vols = {v["name"]: v for v in pod["volumes"]}
    kmsg = next(m for m in c["volumeMounts"] if m["mountPath"] == "/dev/kmsg")
    assert kmsg.get("readOnly") is True
    assert vols[kmsg["name"]]["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    state = next(m for m in c["volumeMounts"] if m["mountPath"] == "/var/lib/hetero-exporter")
    assert vols[state["name"]]["hostPath"]["path"] == "/var/lib/hetero-exporter"  # survives a pod restart


def test_the_agent_accepts_the_daemonset_args_and_config(rendered, tmp_path):
    target, objs = rendered
    if target == "extender":
        pytest.skip("no agent here")
    pod = _daemonset(objs)["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    args, extra = cli.build_parser().parse_known_args(c["args"])
    assert args.command == "run" and extra == []
    port = int(args.listen.rsplit(":", 1)[1])
    assert port in {p["containerPort"] for p in c["ports"]}
    # the config file the args name is the rendered ConfigMap, mounted where the args say
    (vol,) = [v for v in pod["volumes"] if "configMap" in v]
    cm = [o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"] == vol["configMap"]["name"]]
    assert cm, "the DaemonSet mounts a ConfigMap that is not rendered"
    mount = next(m for m in c["volumeMounts"] if m["name"] == vol["name"])
    rel = Path(args.config).relative_to(mount["mountPath"])
    path = tmp_path / rel
    path.write_text(cm[0]["data"][str(rel)])
    cfg = config_mod.load(str(path))
    sys_mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "sys")
    assert cfg.sysfs_root == sys_mount


def test_every_host_mount_says_why_in_the_base():
    """Each privilege of the base DaemonSet has its reason written right above it."""
    lines = (DEPLOY / "base" / "daemonset.yaml").read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if l.strip() == "volumeMounts:")
    end = next(i for i, l in enumerate(lines) if l.strip() == "volumes:")
    for i in range(start + 1, end):
        if lines[i].strip().startswith("- name:") and lines[i].split(":", 1)[1].strip() != "config":
            assert lines[i - 1].strip().startswith("#"), f"no reason above mount {lines[i].strip()}"
    for key in ("privileged: true", "hostPID: true", "runAsUser: 0", "tolerations:"):
        i = next(i for i, l in enumerate(lines) if l.strip() == key)
        assert lines[i - 1].strip().startswith("#"), f"no reason above {key}"


def test_service_and_servicemonitor_select_the_agents(rendered):
    target, objs = rendered
    if target == "extender":
        pytest.skip("no agent here")
    pod_labels = _daemonset(objs)["spec"]["template"]["metadata"]["labels"]
    svc = one(objs, "Service")
    assert svc["spec"]["selector"].items() <= pod_labels.items()
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
    pod = _daemonset(overlay)["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"].startswith("registry.example.com/")
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 5
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
