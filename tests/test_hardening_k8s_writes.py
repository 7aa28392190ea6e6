"""Issue 35, items 4 and 5: writes that reach another node, against the loopback API server with
deploy/base's RBAC and node-restriction admission policy in front of it (tests/admission.py), and
one node's stolen agent token.

- The agent's own writes are all admitted (taint, cordon and uncordon, labels, condition, events,
  DeviceTaintRules, pod condition and event, its NodeFeature, taint slots): the policy admits
  exactly what the agent writes.
- With gpu-node-3's stolen token: another node's NodeFeature name cannot be taken, nor labels
  outside the agent's domain, nor 5,000 labels; on its own Node no control-plane role label, no
  removal of a taint someone else set, no lifting of someone else's cordon, no event about a
  kube-system pod, no eviction (not granted by the base).
- The agent on a node whose NodeFeature name someone else holds (or changed) says so: a Warning
  event on its Node, a log line, ``accelerator_health_foreign_objects{kind="NodeFeature"}``.
- An agent configured to evict without deploy/components/eviction says so once (event, log).
"""

from __future__ import annotations

import json
import logging

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import kubeapi
from admission import deploy_objects, install
from health_agent import HealthAgent
from test_nodefeature import Driver

pytest.importorskip("kubernetes")
pytest.importorskip("celpy", reason="cel-python evaluates the policy's CEL (pip install cel-python)")

from hetero_exporter.health.plan.nodefeature import object_name  # noqa: E402
from hetero_exporter.k8s.api import Api  # noqa: E402
from hetero_exporter.k8s.client import K8sError, connect  # noqa: E402
from hetero_exporter.model import names as N  # noqa: E402

AGENT_NS = "hetero-exporter"  # deploy/base's namespace: the budget's Leases and the NodeFeatures
OWN_TAINT = "hetero-exporter.io/accelerator-unhealthy"
OTHERS_TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


def thief(kube_api, tmp_path, node: str = "gpu-node-3", components=()) -> Api:
    """The API as one node's stolen agent token reaches it (RBAC and admission installed)."""
    token = install(kube_api, deploy_objects(components), node)
    cluster = connect(kube_api.write_kubeconfig(tmp_path / f"stolen-{node}", token=token), env={}, timeout_seconds=5)
    return Api(cluster.api_client, cluster.timeout_seconds)


def agent_kubeconfig(kube_api, tmp_path, node: str, components=()) -> str:
    token = install(kube_api, deploy_objects(components), node)
    return kube_api.write_kubeconfig(tmp_path / f"agent-{node}", token=token)


def resource_of(path: str) -> str:
    """``pods/eviction``, ``leases``...: the resource (and subresource) a request path names."""
    segs = path.strip("/").split("/")
    rest = segs[2:] if segs[0] == "api" else segs[3:]
    if rest[:1] == ["namespaces"]:
        rest = rest[2:]
    return "/".join(rest[:1] + rest[2:3])


def refused(call) -> K8sError:
    with pytest.raises(K8sError) as e:
        call()
    assert e.value.status == 403, e.value
    return e.value


def denied(kube_api) -> list:
    return [r for r in kube_api.requests if r.status == 403]


def nodefeature(node: str, labels: dict, namespace: str = AGENT_NS, name: str = "") -> dict:
    return {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
            "metadata": {"name": name or object_name(node), "namespace": namespace,
                         "labels": {"nfd.node.kubernetes.io/node-name": node,
                                    "app.kubernetes.io/managed-by": "hetero-exporter"}},
            "spec": {"labels": labels}, "status": {}}


NF = "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{namespace}/nodefeatures"

# --------------------------------------------------------------------------- the agent's own writes pass


def test_every_write_of_the_agent_is_admitted(kube_api, tmp_path):
    """Taint, cordon, labels, condition and events of a failure and its recovery, on the agent's
    own token under RBAC and the policy: nothing refused, and the node ends clean."""
    agent = HealthAgent("health-xid79.yaml", agent_kubeconfig(kube_api, tmp_path, "gpu-node-7"),
                        health={"cordon": True}, environ={"POD_NAMESPACE": AGENT_NS})
    try:
        kube_api.seed_node(agent.node, taints=[OTHERS_TAINT])
        seen = set()
        for t in range(0, 260, 10):
            agent.cycle(t)
            node = kube_api.node(agent.node)
            seen |= {"taint"} if any(x["key"] == OWN_TAINT for x in node["spec"].get("taints") or []) else set()
            seen |= {"cordon"} if node["spec"].get("unschedulable") else set()
        assert denied(kube_api) == []
        assert seen == {"taint", "cordon"}
        node = kube_api.node(agent.node)
        assert node["spec"].get("taints") == [OTHERS_TAINT] and not node["spec"].get("unschedulable")
        assert node["metadata"]["labels"]["hetero-exporter.io/nvidia.count"] == "8"
        events = kube_api.events(involved_name=agent.node)
        assert "Warning" in {e["type"] for e in events} and "AcceleratorRecovered" in {e["reason"] for e in events}
        assert [r.status for r in kube_api.writes(path=r"/nodes/[^/]+/status$")][:1] == [200]  # its condition
        assert {r.user for r in kube_api.requests} == {"system:serviceaccount:hetero-exporter:hetero-exporter"}
    finally:
        agent.close()


def test_device_taints_pod_signals_and_evictions_are_admitted_with_the_component(kube_api, tmp_path):
    from test_device_health_e2e import _seed
    agent = HealthAgent("health-dra-4gpu.yaml", agent_kubeconfig(kube_api, tmp_path, "gpu-dra-1", ["eviction"]),
                        pods={2: ("ml", "train-0")}, health={"evict_pods": True},
                        environ={"POD_NAMESPACE": AGENT_NS}, state_dir=str(tmp_path / "state"))
    try:
        _seed(kube_api, agent)
        agent.run(10, 240)
        assert denied(kube_api) == []
        kinds = {resource_of(r.path) for r in kube_api.writes()}
        assert {"pods/eviction", "pods/status", "devicetaintrules", "leases", "events"} <= kinds, kinds
    finally:
        agent.close()


def test_the_nodefeature_lifecycle_is_admitted(kube_api, tmp_path):
    d = Driver(kube_api, tmp_path, node="gpu-node-9", kubeconfig=agent_kubeconfig(kube_api, tmp_path, "gpu-node-9"),
               nodefeature_namespace=AGENT_NS, budget_namespace=AGENT_NS)
    kube_api.seed_node(d.node)
    for n in (4, 3, 0):
        assert d.reconcile(n).error is None
    assert denied(kube_api) == []
    assert [r.method for r in kube_api.writes(path="/nodefeatures")] == ["POST", "PUT", "DELETE"]


# --------------------------------------------------------------------------- item 4: the NodeFeature


def test_a_stolen_token_cannot_take_another_nodes_nodefeature(kube_api, tmp_path):
    api = thief(kube_api, tmp_path)
    kube_api.seed_node("gpu-node-3")
    kube_api.seed_node("gpu-node-8")
    at = {"namespace": AGENT_NS}
    # the other node's name, labelled as the other node's or (to pass the old check) as its own
    for target in ("gpu-node-8", "gpu-node-3"):
        squat = nodefeature(target, {"hetero-exporter.io/accelerator": "true"}, name=object_name("gpu-node-8"))
        err = refused(lambda: api.post(NF, at, body=squat))
        assert "gpu-node-3" in str(err)
    # its own object: labels outside the agent's domain, 5,000 labels, features
    for labels in ({"nvidia.com/gpu.present": "false"}, {"feature.node.kubernetes.io/pci-10de.present": "true"},
                   {f"hetero-exporter.io/l{i}": "x" for i in range(5000)}):
        refused(lambda: api.post(NF, at, body=nodefeature("gpu-node-3", labels)))
    own = nodefeature("gpu-node-3", {"hetero-exporter.io/accelerator": "true"})
    features = {**own, "spec": {**own["spec"], "features": {"flags": {"pci": {"elements": {"10de": {}}}}}}}
    refused(lambda: api.post(NF, at, body=features))
    assert kube_api.list(kubeapi.NODE_FEATURES) == []
    api.post(NF, at, body=own)  # what the agent writes: admitted
    assert [o["metadata"]["name"] for o in kube_api.list(kubeapi.NODE_FEATURES)] == [object_name("gpu-node-3")]


def _squatted_node(kube_api, tmp_path, obj: dict, caplog) -> tuple[Driver, str]:
    """gpu-node-8's agent (nodefeature mode, its own token) after someone with other rights put
    ``obj`` under its NodeFeature's name; two full reconciles; the /metrics text of its health metrics."""
    d = Driver(kube_api, tmp_path, node="gpu-node-8", kubeconfig=agent_kubeconfig(kube_api, tmp_path, "gpu-node-8"),
               nodefeature_namespace=AGENT_NS, budget_namespace=AGENT_NS)
    kube_api.seed_node(d.node)
    kube_api.create(kubeapi.NODE_FEATURES, AGENT_NS, obj)  # the server's own token: not the agent's
    with caplog.at_level(logging.WARNING, logger="hetero_exporter.health.act.remedy_cluster"):
        d.reconcile(4)
        d.reconcile(4)
    reg = CollectorRegistry()
    reg.register(d.remedy.metrics)
    return d, generate_latest(reg).decode()


def foreign_events(kube_api, node: str) -> list[dict]:
    return kube_api.events(involved_name=node, reason="AcceleratorNodeFeatureForeign")


@pytest.mark.parametrize("how", ["another node's", "not managed", "another owner"])
def test_the_agent_says_when_its_nodefeature_name_is_taken(kube_api, tmp_path, caplog, how):
    """Its name held by an object labelled for gpu-node-3, by one without the managed-by label,
    or by one owned by another Node: left alone (nothing written to it), and said once: one
    Warning event, one log line, the gauge at 1."""
    obj = nodefeature("gpu-node-3" if how == "another node's" else "gpu-node-8",
                      {"hetero-exporter.io/accelerator": "true"}, name=object_name("gpu-node-8"))
    if how == "not managed":
        del obj["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    if how == "another owner":
        obj["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": "gpu-node-3", "uid": "u3"}]
    d, text = _squatted_node(kube_api, tmp_path, obj, caplog)
    assert kube_api.writes(path="/nodefeatures") == []  # left alone: no repair, no delete, nothing refused
    assert denied(kube_api) == []
    (ev,) = foreign_events(kube_api, "gpu-node-8")
    assert ev["type"] == "Warning" and "is not this agent's" in ev["message"] and object_name("gpu-node-8") in ev["message"]
    lines = [r for r in caplog.records if "NodeFeature is not this agent's" in r.getMessage()]
    assert len(lines) == 1
    assert f'{N.HEALTH_FOREIGN_OBJECTS.name}{{kind="NodeFeature"}} 1.0' in text


def test_the_agent_repairs_and_reports_a_nodefeature_someone_changed(kube_api, tmp_path, caplog):
    """Its own object (labelled for it, managed by it) carrying nvidia.com/gpu.present=false and
    features: replaced with its own labels (admitted), and said once."""
    obj = nodefeature("gpu-node-8", {"nvidia.com/gpu.present": "false"})
    obj["spec"]["features"] = {"flags": {"pci": {"elements": {"10de": {}}}}}
    d, text = _squatted_node(kube_api, tmp_path, obj, caplog)
    assert denied(kube_api) == []
    cur = kube_api.get(kubeapi.NODE_FEATURES, AGENT_NS, object_name("gpu-node-8"))
    assert all(k.startswith("hetero-exporter.io/") for k in cur["spec"]["labels"]) and not cur["spec"].get("features")
    (ev,) = foreign_events(kube_api, "gpu-node-8")
    assert "changed by someone else" in ev["message"] and "nvidia.com/gpu.present" in ev["message"]
    assert f'{N.HEALTH_FOREIGN_OBJECTS.name}{{kind="NodeFeature"}} 0.0' in text  # repaired by the second cycle


# --------------------------------------------------------------------------- item 5: its own Node, events, evictions


def test_a_stolen_token_can_only_mark_its_own_node(kube_api, tmp_path):
    api = thief(kube_api, tmp_path)
    kube_api.seed_node("gpu-node-3", labels={"nvidia.com/gpu.present": "true"}, taints=[OTHERS_TAINT])
    kube_api.seed_node("gpu-node-8", unschedulable=True)
    node = "/api/v1/nodes/{name}"

    def patch(name, body, sub=""):
        return lambda: api.patch(node + sub, {"name": name}, body=body)

    refused(patch("gpu-node-8", {"metadata": {"labels": {"hetero-exporter.io/x": "1"}}}))
    refused(patch("gpu-node-3", {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}))
    refused(patch("gpu-node-3", {"metadata": {"labels": {"nvidia.com/gpu.present": None}}}))
    refused(patch("gpu-node-3", {"spec": {"taints": None}}))  # removing a taint someone else set
    refused(patch("gpu-node-3", {"spec": {"unschedulable": True}}))  # a cordon its book does not record
    kube_api.mutate_node("gpu-node-3", lambda n: n["spec"].update(unschedulable=True))  # an admin's cordon
    refused(patch("gpu-node-3", {"spec": {"unschedulable": None}}))
    refused(patch("gpu-node-3", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, "/status"))
    after = kube_api.node("gpu-node-3")
    assert after["spec"]["taints"] == [OTHERS_TAINT] and after["spec"]["unschedulable"] is True
    assert after["metadata"]["labels"] == {"kubernetes.io/hostname": "gpu-node-3", "nvidia.com/gpu.present": "true"}
    # what the agent does is admitted: its label, its taint beside the other one
    mine = {"key": OWN_TAINT, "value": "device-lost", "effect": "NoSchedule"}
    api.patch(node, {"name": "gpu-node-3"}, body={"metadata": {"labels": {"hetero-exporter.io/accelerator": "true"}},
                                                  "spec": {"taints": [OTHERS_TAINT, mine]}})
    assert kube_api.node("gpu-node-3")["spec"]["taints"] == [OTHERS_TAINT, mine]


def test_a_stolen_token_writes_no_event_about_kube_system_pods_and_evicts_nothing(kube_api, tmp_path):
    from hetero_exporter.k8s.events import NodeEvent, ObjectRef, body_for
    api = thief(kube_api, tmp_path)
    kube_api.seed_pod("kube-system", "coredns-7db6d", "gpu-node-3")
    kube_api.seed_pod("ml", "train-0", "gpu-node-3")
    events = "/api/v1/namespaces/{namespace}/events"

    def event(namespace, pod, **override):
        doc = body_for(ObjectRef("Pod", pod, namespace, "u"), NodeEvent(f"{pod}.x", "Warning", "Killing", "m"),
                       "hetero-exporter", 1.8e9, host="gpu-node-3")
        return {**doc, **override}

    refused(lambda: api.post(events, {"namespace": "kube-system"}, body=event("kube-system", "coredns-7db6d")))
    refused(lambda: api.post(events, {"namespace": "ml"}, body=event("ml", "train-0", reportingComponent="kubelet")))
    api.post(events, {"namespace": "ml"}, body=event("ml", "train-0"))  # the agent's own kind of event
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "train-0", "namespace": "ml"}}
    err = refused(lambda: api.post("/api/v1/namespaces/{namespace}/pods/{name}/eviction",
                                   {"namespace": "ml", "name": "train-0"}, body=eviction))
    assert 'cannot create resource "pods/eviction"' in str(err)  # RBAC: the base grants no eviction
    assert {p["metadata"]["name"] for p in kube_api.list(kubeapi.PODS)} == {"coredns-7db6d", "train-0"}
    assert [e["involvedObject"]["name"] for e in kube_api.list(kubeapi.EVENTS)] == ["train-0"]


def test_an_agent_configured_to_evict_without_the_grant_says_so_once(kube_api, tmp_path, caplog):
    from test_device_health_e2e import _seed
    agent = HealthAgent("health-dra-4gpu.yaml", agent_kubeconfig(kube_api, tmp_path, "gpu-dra-1"),
                        pods={2: ("ml", "train-0")}, health={"evict_pods": True},
                        environ={"POD_NAMESPACE": AGENT_NS}, state_dir=str(tmp_path / "state"))
    try:
        _seed(kube_api, agent)
        with caplog.at_level(logging.WARNING, logger="hetero_exporter.health.act.remedy_cluster"):
            agent.run(10, 170)
        evictions = [r for r in kube_api.requests if r.path.endswith("/eviction")]
        assert evictions and all(r.status == 403 for r in evictions)
        (ev,) = kube_api.events(involved_name=agent.node, reason="AcceleratorEvictionForbidden")
        assert "deploy/components/eviction" in ev["message"]
        said = [r for r in caplog.records if "refused to evict" in r.getMessage()]
        assert len(said) == 1
        # the other pod signals went on: its condition, its event
        pod = kube_api.get(kubeapi.PODS, "ml", "train-0")
        assert any(c["type"] == "hetero-exporter.io/AcceleratorHealthy" for c in pod["status"]["conditions"])
        assert [r for r in denied(kube_api) if not r.path.endswith("/eviction")] == []
    finally:
        agent.close()


def test_the_loopback_server_authorizes_and_admits_as_the_api_server_does(kube_api, tmp_path):
    """The server's own token stays a cluster admin (no RBAC, no admission); an unknown token is
    401; RBAC's 403 names the user, verb and resource; an admission denial names the policy."""
    api = thief(kube_api, tmp_path)
    kube_api.seed_node("gpu-node-8")
    kube_api.mutate_node("gpu-node-8", lambda n: n["metadata"]["labels"].update(x="1"))  # tests' writes: no admission
    admin = Api(kube_api.api_client(), 5)
    admin.patch("/api/v1/nodes/{name}", {"name": "gpu-node-8"}, body={"metadata": {"labels": {"y": "2"}}})
    err = refused(lambda: api.request("DELETE", "/api/v1/nodes/{name}", {"name": "gpu-node-8"}))
    assert str(err).count('User "system:serviceaccount:hetero-exporter:hetero-exporter" cannot delete resource '
                          '"nodes" in API group "" at the cluster scope') == 1
    err = refused(lambda: api.patch("/api/v1/nodes/{name}", {"name": "gpu-node-8"},
                                    body={"metadata": {"labels": {"z": "3"}}}))
    assert "ValidatingAdmissionPolicy 'hetero-exporter-node-restriction'" in str(err)
    assert "may not write node gpu-node-8" in str(err)
    bad = connect(kube_api.write_kubeconfig(tmp_path / "bad", token="nobody"), env={}, timeout_seconds=5)
    with pytest.raises(K8sError) as e:
        Api(bad.api_client, 5).get("/api/v1/nodes")
    assert e.value.status == 401
    assert json.dumps(kube_api.node("gpu-node-8")["metadata"]["labels"], sort_keys=True) == json.dumps(
        {"kubernetes.io/hostname": "gpu-node-8", "x": "1", "y": "2"}, sort_keys=True)
