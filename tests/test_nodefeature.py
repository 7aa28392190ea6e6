"""The inventory labels as a Node Feature Discovery NodeFeature (``health.inventory_labels:
nodefeature``, docs/nodefeature.md), against the loopback API server: in enforce mode the
NodeFeature of the node carries exactly the labels labels mode puts on the Node, is owned by the
Node and labelled with its name, follows an inventory change, and no label is written on the
Node; labels an earlier labels-mode agent set are removed once; dry-run and observe write
nothing; the loopback server serves the custom resource as the API server does; the RBAC
manifest grants it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from health_agent import make_agent  # noqa: F401

pytest.importorskip("kubernetes")

from hetero_exporter.health.act.remedy import Remedy  # noqa: E402
from hetero_exporter.health.detect import policy as policy_mod  # noqa: E402
from hetero_exporter.health.detect.verdicts import HealthVerdicts  # noqa: E402
from hetero_exporter.health.plan import ClusterView, RemedyConfig, plan, selection_labels  # noqa: E402
from hetero_exporter.health.plan.nodefeature import NodeFeatureRead, object_name, plan_nodefeature  # noqa: E402
from hetero_exporter.k8s.api import Api  # noqa: E402
from hetero_exporter.k8s.client import K8sError, connect  # noqa: E402
from hetero_exporter.model import DeviceIdentity, DeviceSample, Health, NodeSnapshot  # noqa: E402
from hetero_exporter.model.keys import DEFAULT_DOMAIN, Keys  # noqa: E402
from kubeapi import NODE_FEATURES, KubeAPIServer  # noqa: E402

NODEFEATURE = {"inventory_labels": "nodefeature"}
NS = "gpu-ops"
ENV = {"POD_NAMESPACE": NS}
OURS = f"{DEFAULT_DOMAIN}/"
NF_PATH = "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{ns}/nodefeatures"


def our_labels(labels: dict) -> dict:
    return {k: v for k, v in (labels or {}).items() if k.startswith(OURS)}


def node_label_writes(kube_api) -> list:
    """The Node patches that carried labels (set or removed)."""
    return [r for r in kube_api.writes(path=r"^/api/v1/nodes/[^/]+$")
            if isinstance(r.body, dict) and "labels" in (r.body.get("metadata") or {})]


def nodefeature_writes(kube_api) -> list:
    return kube_api.writes(path="/nodefeatures")


# --------------------------------------------------------------------------- a remedy over hand-made snapshots


def gpu(i: int, model: str = "H100-SXM5-80GB") -> DeviceSample:
    ident = DeviceIdentity(vendor="nvidia", kind="gpu", index=i, uuid=f"GPU-{i}", model=model,
                           driver_version="550.54.15")
    return DeviceSample(identity=ident, timestamp=1.0, health=Health("ok"))


class Driver:
    """A Remedy on the loopback server (the server's token, or ``kubeconfig``'s), reconciling
    hand-made snapshots at a manual time."""

    def __init__(self, kube_api, tmp_path: Path, node: str = "gpu-node-3", mode: str = "enforce",
                 kubeconfig: str = "", **health):
        self.kube_api, self.node, self.t = kube_api, node, 1000.0
        kc = kubeconfig or kube_api.write_kubeconfig(tmp_path / f"kc-{node}-{mode}")
        self.cfg = RemedyConfig.from_mapping({**NODEFEATURE, **health}, mode=mode)
        self.verdicts = HealthVerdicts(policy_mod.load())
        self.remedy = Remedy(connect(kc, env={}, timeout_seconds=5), node, policy_mod.load(), self.cfg,
                             clock=lambda: self.t, environ=ENV)

    def reconcile(self, n: int, *, advance: float = 10.0, resync: bool = True):
        self.t += advance
        if resync:
            self.remedy._last_sig = None  # a full reconcile, as the resync would
        snap, ev = self.verdicts.judge(NodeSnapshot(node=self.node, time=self.t,
                                                    devices=tuple(gpu(i) for i in range(n))))
        out = self.remedy.reconcile(snap, ev)
        self.last_snapshot = snap
        return out

    def nodefeature(self):
        return self.kube_api.get(NODE_FEATURES, NS, object_name(self.node))


def nodefeature_lifecycle(kube_api, tmp_path: Path) -> Driver:
    """Created (4 GPUs), updated (3), deleted (none left): every NodeFeature call the agent makes
    (tests/test_k8s_rbac.py checks they are all granted, and used)."""
    d = Driver(kube_api, tmp_path, node="gpu-node-9")
    kube_api.seed_node(d.node)
    for n in (4, 3, 0):
        assert d.reconcile(n).error is None
    return d


# --------------------------------------------------------------------------- enforce


def test_enforce_publishes_the_inventory_labels_as_a_nodefeature_and_no_node_label(kube_api, make_agent):
    ref = make_agent("health-xid79.yaml", node="gpu-labels")  # the default labels mode, for comparison
    kube_api.seed_node(ref.node)
    ref.run(0, 30)
    want = our_labels(kube_api.node(ref.node)["metadata"]["labels"])
    assert want[f"{OURS}nvidia.count"] == "8" and want[f"{OURS}accelerator"] == "true"
    before = len(node_label_writes(kube_api))
    assert before >= 1  # labels mode does write the Node's labels (so the check below can fail)

    agent = make_agent("health-xid79.yaml", health={"inventory": "nodefeature"}, environ=ENV)  # the spelling
    seeded = kube_api.seed_node(agent.node)
    agent.run(0, 30)
    nf = kube_api.get(NODE_FEATURES, NS, f"hetero-exporter-{agent.node}")
    assert nf["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1" and nf["kind"] == "NodeFeature"
    assert nf["metadata"]["namespace"] == NS
    assert nf["spec"]["labels"] == want  # exactly the labels labels mode computes and writes
    assert nf["spec"]["labels"] == selection_labels(agent.last_snapshot, DEFAULT_DOMAIN)
    assert nf["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"] == agent.node
    assert nf["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": agent.node, "uid": seeded["metadata"]["uid"]}]
    # no label on the Node, in any version of it, and no Node patch of this agent carried labels
    node = kube_api.node(agent.node)
    assert Keys().devices in node["metadata"]["annotations"]  # it did write the Node (the inventory annotation)
    assert all(our_labels(v["metadata"].get("labels")) == {} for v in kube_api.node_versions(agent.node))
    assert node["metadata"]["labels"] == seeded["metadata"]["labels"]
    assert len(node_label_writes(kube_api)) == before
    assert json.loads(node["metadata"]["annotations"][Keys().agent_state])["labels"] == []
    # written once: the following cycles find it as it should be
    assert [r.method for r in nodefeature_writes(kube_api)] == ["POST"]
    agent.remedy._last_sig = None
    agent.cycle(40)
    assert [r.method for r in nodefeature_writes(kube_api)] == ["POST"]
    assert agent.metrics.actions()[("nodefeature", "ok")] == 1


def test_an_inventory_change_updates_the_nodefeature_and_nothing_left_deletes_it(kube_api, tmp_path):
    d = Driver(kube_api, tmp_path)
    kube_api.seed_node(d.node)
    assert d.reconcile(4).error is None
    first = d.nodefeature()
    assert first["spec"]["labels"][f"{OURS}nvidia.count"] == "4"
    assert d.reconcile(3).error is None  # a GPU less: the count changes
    second = d.nodefeature()
    assert second["spec"]["labels"][f"{OURS}nvidia.count"] == "3"
    assert second["spec"]["labels"] == selection_labels(d.last_snapshot, DEFAULT_DOMAIN)
    assert second["metadata"]["uid"] == first["metadata"]["uid"]  # replaced, not recreated
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert [r.method for r in nodefeature_writes(kube_api)] == ["POST", "PUT"]
    put = nodefeature_writes(kube_api)[1]
    assert put.body["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]  # optimistic concurrency
    # no change: no write, even on a full reconcile
    assert d.reconcile(3).error is None
    assert len(nodefeature_writes(kube_api)) == 2
    # no accelerator left: nothing to publish, the object goes (as the labels do in labels mode)
    assert d.reconcile(0).error is None
    assert kube_api.list(NODE_FEATURES) == []
    delete = nodefeature_writes(kube_api)[-1]
    assert delete.method == "DELETE" and delete.body["preconditions"]["uid"] == first["metadata"]["uid"]
    assert our_labels(kube_api.node(d.node)["metadata"]["labels"]) == {}


def test_a_concurrent_writer_or_a_deletion_is_answered_by_the_next_cycle(kube_api, tmp_path):
    d = Driver(kube_api, tmp_path)
    kube_api.seed_node(d.node)
    d.reconcile(2)
    # someone changes the object between the agent's read and its write: 409, then repaired
    kube_api.before_next(lambda: kube_api.mutate(NODE_FEATURES, NS, object_name(d.node),
                                                 lambda o: o["metadata"].setdefault("annotations", {}).update(x="y")),
                         methods=["PUT"], path="/nodefeatures/")
    out = d.reconcile(1)
    assert out.error and "409" in out.error
    assert d.remedy.metrics.actions()[("nodefeature", "conflict")] == 1
    assert d.nodefeature()["spec"]["labels"][f"{OURS}nvidia.count"] == "2"
    assert d.reconcile(1, resync=False).error is None  # a failed cycle is not "complete": no wait for the resync
    assert d.nodefeature()["spec"]["labels"][f"{OURS}nvidia.count"] == "1"
    # someone deletes it: the next full reconcile creates it again
    kube_api.delete(NODE_FEATURES, NS, object_name(d.node))
    assert d.reconcile(1).error is None
    assert d.nodefeature()["spec"]["labels"][f"{OURS}nvidia.count"] == "1"
    # an object of that name that is not ours is left alone
    kube_api.mutate(NODE_FEATURES, NS, object_name(d.node),
                    lambda o: o["metadata"]["labels"].pop("app.kubernetes.io/managed-by"))
    writes = len(nodefeature_writes(kube_api))
    out = d.reconcile(3)
    assert out.error is None and len(nodefeature_writes(kube_api)) == writes
    assert any("is not this agent's" in x and "no label app.kubernetes.io/managed-by" in x for x in out.plan.explain)


def test_labels_set_in_labels_mode_are_removed_once_when_the_nodefeature_takes_over(kube_api, make_agent):
    kube_api.seed_node("gpu-node-7", labels={f"{OURS}nvidia.count": "99"})  # someone else's: not ours
    labels_mode = make_agent("health-xid79.yaml")
    labels_mode.run(0, 20)
    owned = json.loads(kube_api.node("gpu-node-7")["metadata"]["annotations"][Keys().agent_state])["labels"]
    assert owned and f"{OURS}nvidia.count" not in owned
    set_before = our_labels(kube_api.node("gpu-node-7")["metadata"]["labels"])
    assert set(owned) <= set(set_before)

    agent = make_agent("health-xid79.yaml", health=NODEFEATURE, environ=ENV)  # the agent restarted in nodefeature mode
    writes = len(node_label_writes(kube_api))
    agent.run(30, 80)
    node = kube_api.node("gpu-node-7")
    assert our_labels(node["metadata"]["labels"]) == {f"{OURS}nvidia.count": "99"}  # ours gone, theirs kept
    removals = node_label_writes(kube_api)[writes:]
    assert len(removals) == 1  # once
    assert removals[0].body["metadata"]["labels"] == dict.fromkeys(sorted(owned))  # only what it had added
    assert json.loads(node["metadata"]["annotations"][Keys().agent_state])["labels"] == []
    # in the same cycle as the NodeFeature's creation, which carries them
    assert kube_api.get(NODE_FEATURES, NS, "hetero-exporter-gpu-node-7")["spec"]["labels"][f"{OURS}nvidia.count"] == "8"


def test_without_nfd_nothing_is_published_and_the_labels_it_set_stay(tmp_path):
    with KubeAPIServer(nfd=False) as server:
        server.seed_node("gpu-node-3")
        Driver(server, tmp_path, inventory_labels="labels").reconcile(2)
        set_before = our_labels(server.node("gpu-node-3")["metadata"]["labels"])
        assert set_before[f"{OURS}nvidia.count"] == "2"
        d = Driver(server, tmp_path)
        out = d.reconcile(4)
        assert out.error is None and out.plan is not None
        assert [r for r in server.requests if "/nodefeatures" in r.path] == []  # discovery said no: never asked
        assert our_labels(server.node("gpu-node-3")["metadata"]["labels"]) == set_before  # kept, not updated
        assert any("stay until its NodeFeature can be read" in x for x in out.plan.explain)


# --------------------------------------------------------------------------- dry-run, observe


def test_dry_run_writes_no_nodefeature_and_no_label_and_says_what_it_would(kube_api, make_agent):
    agent = make_agent("health-xid79.yaml", mode="dry-run", health=NODEFEATURE, environ=ENV)
    seeded = kube_api.seed_node(agent.node)
    outs = [o for o in agent.run(0, 30) if o is not None and o.plan is not None]
    assert outs  # it did reconcile (so the checks below can fail)
    assert any(r.method == "GET" and "/nodefeatures/" in r.path for r in kube_api.requests)  # it read
    assert nodefeature_writes(kube_api) == [] and kube_api.list(NODE_FEATURES) == []
    assert kube_api.node(agent.node)["metadata"]["labels"] == seeded["metadata"]["labels"]
    assert node_label_writes(kube_api) == []
    said = [x for o in outs for x in o.plan.explain if "NodeFeature" in x]
    assert any(x.startswith(f"[dry-run] NodeFeature {NS}/hetero-exporter-{agent.node}: would be created") for x in said)
    assert not any(action == "nodefeature" for action, _ in agent.metrics.actions())  # nothing applied


def test_dry_run_leaves_the_labels_it_set_in_labels_mode(kube_api, tmp_path):
    kube_api.seed_node("gpu-node-3")
    labels_mode = Driver(kube_api, tmp_path, inventory_labels="labels")
    labels_mode.reconcile(2)
    set_before = our_labels(kube_api.node("gpu-node-3")["metadata"]["labels"])
    assert set_before
    out = Driver(kube_api, tmp_path, mode="dry-run").reconcile(2)
    assert our_labels(kube_api.node("gpu-node-3")["metadata"]["labels"]) == set_before
    assert nodefeature_writes(kube_api) == []
    assert any(x.startswith("[dry-run] labels:") and "would move" in x for x in out.plan.explain)


def test_observe_mode_makes_no_call(kube_api, make_agent):
    agent = make_agent("health-xid79.yaml", mode="observe", health=NODEFEATURE, environ=ENV)
    kube_api.seed_node(agent.node)
    agent.run(0, 20)
    assert agent.loop.cycles >= 1  # it judged and planned
    assert kube_api.requests == []  # and asked the API server nothing


# --------------------------------------------------------------------------- the plan, pure


def test_a_second_plan_over_the_first_ones_result_is_empty():
    snap = NodeSnapshot(node="n1", time=1.0, devices=(gpu(0), gpu(1)))
    labels = selection_labels(snap, DEFAULT_DOMAIN)
    first = plan_nodefeature("n1", "uid-1", labels, NodeFeatureRead(NS), "enforce")
    assert first.create is not None and first.replace is None and first.delete is None
    stored = {**first.create, "metadata": {**first.create["metadata"], "uid": "u", "resourceVersion": "7"}}
    again = plan_nodefeature("n1", "uid-1", labels, NodeFeatureRead(NS, stored), "enforce")
    assert not again.writes and again.actions == []
    # a node name nfd-master cannot target (a label value is at most 63 characters): nothing planned
    long = "n" * 64
    assert not plan_nodefeature(long, "u", labels, NodeFeatureRead(NS), "enforce").writes
    assert len(object_name("x" * 253)) <= 253 and object_name("x" * 253) != object_name("x" * 252 + "y")


def _stored(node: str = "n1", **changes) -> dict:
    """The NodeFeature the agent writes for ``node`` (two GPUs), as stored, with ``changes`` to its
    metadata labels (``meta_labels``, None deletes), owner references (``owners``) or spec."""
    snap = NodeSnapshot(node=node, time=1.0, devices=(gpu(0), gpu(1)))
    obj = plan_nodefeature(node, "uid-1", selection_labels(snap, DEFAULT_DOMAIN), NodeFeatureRead(NS), "enforce").create
    obj["metadata"].update(uid="u", resourceVersion="7")
    for k, v in changes.pop("meta_labels", {}).items():
        if v is None:
            obj["metadata"]["labels"].pop(k)
        else:
            obj["metadata"]["labels"][k] = v
    if "owners" in changes:
        obj["metadata"]["ownerReferences"] = changes.pop("owners")
    obj["spec"].update(changes)
    return obj


@pytest.mark.parametrize("why,stored", [
    ("no label app.kubernetes.io/managed-by=hetero-exporter", _stored(meta_labels={"app.kubernetes.io/managed-by": None})),
    ("labelled nfd.node.kubernetes.io/node-name='n2', not this node",
     _stored(meta_labels={"nfd.node.kubernetes.io/node-name": "n2"})),
    ("labelled nfd.node.kubernetes.io/node-name='n1\\x1b]0;x', not this node",
     _stored(meta_labels={"nfd.node.kubernetes.io/node-name": "n1\x1b]0;x"})),
    ("owned by Node 'n2' (uid 'uid-2')", _stored(owners=[{"apiVersion": "v1", "kind": "Node", "name": "n2", "uid": "uid-2"}])),
    ("owned by Node 'n1' (uid 'old')", _stored(owners=[{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "old"}])),
])
def test_a_squatted_nodefeature_is_left_alone_and_said(why, stored):
    """Issue 35, item 4: an object of our name that is not ours plans no write (no repair, no
    delete: a write would take over another node's or someone else's object), and says why."""
    snap = NodeSnapshot(node="n1", time=1.0, devices=(gpu(0), gpu(1), gpu(2)))
    for labels in (selection_labels(snap, DEFAULT_DOMAIN), {}):
        p = plan_nodefeature("n1", "uid-1", labels, NodeFeatureRead(NS, stored), "enforce")
        assert not p.writes and p.labels == {} and why in p.foreign, p.foreign
        assert p.uid == "u" and any("is not this agent's" in x for x in p.explain)


@pytest.mark.parametrize("why,spec", [
    ("outside hetero-exporter.io/ ('nvidia.com/gpu.present')", {"labels": {"nvidia.com/gpu.present": "false"}}),
    ("5000 labels", {"labels": {f"{OURS}l{i}": "x" for i in range(5000)}}),
    ("features", {"features": {"flags": {"pci": {"elements": {"10de": {}}}}}}),
])
def test_a_nodefeature_of_ours_someone_changed_is_repaired_and_said(why, spec):
    p = plan_nodefeature("n1", "uid-1", {f"{OURS}accelerator": "true"}, NodeFeatureRead(NS, _stored(**spec)), "enforce")
    assert why in p.foreign, p.foreign
    assert p.replace["spec"] == {"labels": {f"{OURS}accelerator": "true"}}
    again = plan_nodefeature("n1", "uid-1", {f"{OURS}accelerator": "true"},
                             NodeFeatureRead(NS, {**p.replace, "metadata": {**p.replace["metadata"]}}), "enforce")
    assert again.foreign == "" and not again.writes


def test_more_labels_than_the_policy_admits_publish_nothing():
    many = {f"{OURS}l{i}": "x" for i in range(257)}
    p = plan_nodefeature("n1", "uid-1", many, NodeFeatureRead(NS), "enforce")
    assert not p.writes and any("more than the 256" in x for x in p.explain)


def test_health_dry_run_report_names_the_nodefeature():
    from hetero_exporter.health.act import report
    policy = policy_mod.load()
    cfg = RemedyConfig.from_mapping(NODEFEATURE, mode="enforce")
    snap, ev = HealthVerdicts(policy).judge(NodeSnapshot(node="n1", time=1.0, devices=(gpu(0),)))
    node = {"metadata": {"name": "n1", "uid": "u1", "labels": {}, "annotations": {}}, "spec": {}, "status": {}}
    p = plan(node, snap, ev.verdicts, ev.node, policy, cfg, 1.0, view=ClusterView(nodefeature=NodeFeatureRead(NS)))
    assert p.node_patch is not None and "labels" not in p.node_patch["metadata"]
    text = report.render(snap, ev, p, policy, cfg, "test")
    assert f"nodefeature create {NS}/hetero-exporter-n1: {OURS}accelerator=true" in " ".join(text.split())


# --------------------------------------------------------------------------- config


def test_config_key_values_and_namespace():
    from hetero_exporter import config as config_mod
    from hetero_exporter.app.settings import Settings
    cfg = config_mod.from_dict({"health": {"mode": "enforce", "inventory_labels": "nodefeature"}})
    remedy = Settings.parse(cfg).health.remedy
    assert remedy.nodefeature and remedy.inventory_labels == "nodefeature"
    assert not Settings.parse(config_mod.from_dict({})).health.remedy.nodefeature  # labels mode is the default
    assert not RemedyConfig.from_mapping({**NODEFEATURE, "inventory": False}).nodefeature  # no inventory at all
    with pytest.raises(config_mod.ConfigError, match="health.inventory_labels"):
        config_mod.from_dict({"health": {"inventory_labels": "nfd"}})
    with pytest.raises(config_mod.ConfigError, match="health.nodefeature_namespace"):
        config_mod.from_dict({"health": {"nodefeature_namespace": "Not A Namespace"}})
    assert remedy.nodefeature_home({"POD_NAMESPACE": "monitoring"}) == "monitoring"
    assert remedy.nodefeature_home({}) == "hetero-exporter"  # deploy/base's namespace
    pinned = RemedyConfig.from_mapping({**NODEFEATURE, "nodefeature_namespace": "nfd-ext"})
    assert pinned.nodefeature_home({"POD_NAMESPACE": "monitoring"}) == "nfd-ext"


# --------------------------------------------------------------------------- RBAC


def test_the_rbac_manifest_grants_nodefeatures_in_the_agents_namespace():
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "base" / "rbac.yaml").read_text()) if d]
    role = next(d for d in docs if d["kind"] == "Role" and any(
        "nodefeatures" in r["resources"] for r in d["rules"]))
    grants = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
              for v in rule["verbs"]}
    assert {("nfd.k8s-sigs.io", "nodefeatures", v) for v in ("get", "create", "update", "delete")} <= grants
    binding = next(d for d in docs if d["kind"] == "RoleBinding" and d["roleRef"]["name"] == role["metadata"]["name"])
    assert binding["roleRef"]["kind"] == "Role"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hetero-exporter", "namespace": "hetero-exporter"}]
    cluster_role = next(d for d in docs if d["kind"] == "ClusterRole")
    assert not any("nodefeatures" in r["resources"] for r in cluster_role["rules"])  # namespaced, not cluster-wide


# --------------------------------------------------------------------------- the loopback server's NodeFeature


def _body(name: str = "nf1", **spec) -> dict:
    return {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
            "metadata": {"name": name, "labels": {"nfd.node.kubernetes.io/node-name": "n1"}},
            "spec": {"labels": {"example.com/a": "1"}, **spec}, "status": {}}


def _refused(call) -> K8sError:
    with pytest.raises(K8sError) as e:
        call()
    return e.value


def test_the_loopback_server_serves_nodefeatures_as_a_custom_resource(kube_api):
    api = Api(kube_api.api_client())
    path = NF_PATH.format(ns="ns1")
    one = path + "/nf1"
    doc = api.get("/apis/nfd.k8s-sigs.io/v1alpha1")
    assert [(r["name"], r["namespaced"], r["kind"]) for r in doc["resources"]] == [("nodefeatures", True, "NodeFeature")]
    assert _refused(lambda: api.get(one)).status == 404
    created = api.post(path, body=_body())
    assert created["metadata"]["namespace"] == "ns1" and created["metadata"]["generation"] == 1
    assert _refused(lambda: api.post(path, body=_body())).already_exists
    assert api.get(NF_PATH.format(ns="ns2"))["items"] == []  # namespaced
    # PUT: the resourceVersion read, else 409; a change outside metadata is a new generation
    stale = {**created, "spec": {"labels": {"example.com/a": "2"}}}
    updated = api.request("PUT", one, body=stale)
    assert updated["spec"]["labels"] == {"example.com/a": "2"} and updated["metadata"]["generation"] == 2
    assert _refused(lambda: api.request("PUT", one, body=stale)).conflict
    blind = {**updated, "metadata": {k: v for k, v in updated["metadata"].items() if k != "resourceVersion"}}
    assert _refused(lambda: api.request("PUT", one, body=blind)).status == 422  # no unconditional update of a CR
    relabelled = api.request("PUT", one, body={**updated, "metadata": {**updated["metadata"], "labels": {"x": "y"}}})
    assert relabelled["metadata"]["generation"] == 2  # metadata only
    # no strategic merge patch on a custom resource; a JSON merge patch works
    assert _refused(lambda: api.patch(one, body={"spec": {}})).status == 415
    merged = api.patch(one, body={"spec": {"labels": {"example.com/a": None, "example.com/b": "3"}}},
                       content_type="application/merge-patch+json")
    assert merged["spec"]["labels"] == {"example.com/b": "3"}
    # the structural schema: 422 naming the field; unknown fields refused (Strict, this server's default)
    bad = _refused(lambda: api.post(path, body=_body("nf2", labels={"example.com/a": 1})))
    assert bad.status == 422 and bad.body["details"]["causes"][0]["field"] == "spec.labels.example.com/a"
    assert _refused(lambda: api.post(path, body={**_body("nf2"), "status": None})).status == 422  # required
    assert _refused(lambda: api.post(path, body=_body("nf2", extra=1))).status == 400
    owner = {**_body("nf2"), "metadata": {"name": "nf2", "ownerReferences": [{"apiVersion": "v1", "kind": "Node"}]}}
    assert _refused(lambda: api.post(path, body=owner)).status == 422
    # DELETE with preconditions
    cur = api.get(one)
    opts = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": "1"}}
    assert _refused(lambda: api.request("DELETE", one, body=opts)).conflict
    opts["preconditions"] = {"uid": cur["metadata"]["uid"], "resourceVersion": cur["metadata"]["resourceVersion"]}
    api.request("DELETE", one, body=opts)
    assert _refused(lambda: api.get(one)).status == 404


def test_a_cluster_without_nfd_serves_no_nodefeature():
    with KubeAPIServer(nfd=False) as server:
        api = Api(server.api_client())
        assert _refused(lambda: api.get("/apis/nfd.k8s-sigs.io/v1alpha1")).status == 404
        assert _refused(lambda: api.post(NF_PATH.format(ns="ns1"), body=_body())).status == 404
        groups = {g["name"] for g in api.get("/apis")["groups"]}
        assert "nfd.k8s-sigs.io" not in groups and "coordination.k8s.io" in groups


def test_inventory_nodefeature_is_inventory_labels_nodefeature():
    a = RemedyConfig.from_mapping({"inventory": "nodefeature"})
    b = RemedyConfig.from_mapping({"inventory_labels": "nodefeature"})
    assert a == b and a.nodefeature and a.inventory
    assert not RemedyConfig.from_mapping({"inventory": "labels"}).nodefeature
    assert not RemedyConfig.from_mapping({"inventory": False, "inventory_labels": "nodefeature"}).nodefeature
    with pytest.raises(ValueError, match="disagree"):
        RemedyConfig.from_mapping({"inventory": "nodefeature", "inventory_labels": "labels"})
