"""The fleet budget's listing (issue 39 §1): above ``budget_whole_listing_max_nodes`` accelerator
nodes, a failing node lists their names as a Table and the nodes labelled as carrying the taint,
never every Node whole; the label mirrors the taint in the same Node write."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kubeapi
from hetero_exporter.health.detect.rules import NodeVerdict
from hetero_exporter.health.plan import Budget, RemedyConfig, plan
from hetero_exporter.health.plan.taint import taint_label
from hetero_exporter.k8s.client import K8sError
from hetero_exporter.k8s.nodes import names_of
from tests.health_agent import make_agent  # noqa: F401  (fixture)
from tests.test_remedy_plan import POLICY, _snap, _verdicts

KEY = "hetero-exporter.io/accelerator-unhealthy"
ACCELERATOR = {"hetero-exporter.io/accelerator": "true"}


# --------------------------------------------------------------------------- the mirror label

def _applied(node: dict, p) -> dict:
    """``node`` after the plan's patch (labels and annotations merge, None deletes; taints replaced)."""
    out = json.loads(json.dumps(node))
    patch = p.node_patch or {}
    for part in ("labels", "annotations"):
        have = out["metadata"].setdefault(part, {})
        for k, v in ((patch.get("metadata") or {}).get(part) or {}).items():
            have.pop(k, None) if v is None else have.__setitem__(k, v)
    if "taints" in (patch.get("spec") or {}):
        out.setdefault("spec", {})["taints"] = patch["spec"]["taints"] or []
    return out


def test_the_label_goes_on_with_the_taint_in_one_write_and_off_with_it():
    cfg = RemedyConfig(mode="enforce")
    sick = _snap()
    v, _, sticky = _verdicts(sick)
    nv = NodeVerdict(True, "device-lost", ("GPU-0005",), (), 8, "1 of 8 devices failed")
    node = {"metadata": {"name": "n1", "labels": {}}, "spec": {}}
    p = plan(node, sick, v, nv, POLICY, cfg, 1000.0, sticky=sticky, budget=Budget(total=10, tainted=0))
    taints = [t for t in p.node_patch["spec"]["taints"] if t["key"] == KEY]
    assert len(taints) == 1
    assert p.node_patch["metadata"]["labels"][KEY] == taints[0]["value"]
    node = _applied(node, p)
    well = _snap()
    v, nv, _ = _verdicts(well)
    p = plan(node, well, v, nv, POLICY, cfg, 2000.0, budget=Budget(total=10, tainted=0))
    assert not (p.node_patch["spec"]["taints"] or [])
    assert p.node_patch["metadata"]["labels"][KEY] is None
    assert KEY not in _applied(node, p)["metadata"]["labels"]


@pytest.mark.parametrize("mode,labels_mode,on_node,want", [
    ("enforce", "labels", {}, {KEY: "by-hand"}),  # whoever put the taint there: mirrored
    ("dry-run", "labels", {}, {KEY: "by-hand"}),  # written where the selection labels are
    ("enforce", "labels", {KEY: "by-hand"}, {}),  # already right: no write
    ("enforce", "nodefeature", {}, {}),  # no label of ours on the Node in nodefeature mode ...
    ("enforce", "nodefeature", {KEY: "old"}, {KEY: None}),  # ... and a mirror left from before goes
    ("observe", "labels", {}, {}),  # observe writes nothing
])
def test_the_label_mirrors_whatever_taint_has_the_key(mode, labels_mode, on_node, want):
    cfg = RemedyConfig.from_mapping({"inventory_labels": labels_mode}, mode=mode)
    taints = [{"key": KEY, "value": "by-hand", "effect": "NoSchedule"}]
    assert taint_label(on_node, taints, cfg) == want


def test_the_label_is_removed_when_the_taint_is_gone_and_left_alone_when_absent():
    cfg = RemedyConfig(mode="enforce")
    assert taint_label({KEY: "x"}, [{"key": "other", "effect": "NoSchedule"}], cfg) == {KEY: None}
    assert taint_label({}, [], cfg) == {}
    # a taint value that is no label value (never from the API server, which validates both alike)
    assert taint_label({}, [{"key": KEY, "value": "a b", "effect": "NoSchedule"}], cfg) == {KEY: "true"}


# --------------------------------------------------------------------------- reading the listings

def test_names_come_from_a_table_or_from_a_plain_list():
    table = {"kind": "Table", "columnDefinitions": [{"name": "Status", "format": ""}, {"name": "Name", "format": "name"}],
             "rows": [{"cells": ["Ready", "a"]}, {"cells": ["Ready", "b"], "object": None}, {"cells": ["x"]},
                      {"cells": ["Ready", 7]}, "junk"]}
    assert names_of(table) == ["a", "b"]
    assert names_of({"kind": "NodeList", "items": [{"metadata": {"name": "a"}}, {"metadata": {}}, 3]}) == ["a"]
    with pytest.raises(K8sError, match="no name column"):
        names_of({"kind": "Table", "columnDefinitions": [{"name": "Status"}], "rows": []})


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(
                        st.sampled_from(["kind", "rows", "cells", "columnDefinitions", "format", "items",
                                         "metadata", "name", "Table"]), c, max_size=4), max_leaves=30))
def test_a_hostile_list_answer_gives_names_or_one_clear_error(answer):
    if not isinstance(answer, dict):
        answer = {"kind": "Table", "rows": answer}
    try:
        names = names_of(answer)
    except K8sError as e:
        assert "\n" not in str(e)
    else:
        assert all(isinstance(n, str) and n for n in names)


def test_the_view_of_the_light_lists_counts_the_labelled_others_and_this_node_once():
    from hetero_exporter.health.act.fleet_budget import FleetListing, fleet_view
    cfg = RemedyConfig(mode="enforce")
    listing = FleetListing(names=["a", "b", 7, "me"], labelled=["b", "me", "joined-since", None])
    view = fleet_view(listing, cfg, "me", labelled=True, classes=False, at=1.0)
    assert view.total == 4 and view.names == {"a", "b", "me", "joined-since"}
    assert view.tainted == {"b", "joined-since"}  # the label alone; never this node itself
    assert fleet_view(FleetListing(names=[]), cfg, "me", labelled=True, classes=False, at=1.0).total == 1


# --------------------------------------------------------------------------- the API server's side

def test_the_loopback_server_answers_a_table_as_the_api_server_does(kube_api):
    kube_api.seed_node("gpu-0", labels=ACCELERATOR)
    kube_api.seed_node("cpu-0")
    from hetero_exporter.k8s.api import TABLE, Api
    api = Api(kube_api.api_client())
    answer = api.get("/api/v1/nodes", query={"includeObject": "None", "labelSelector": "hetero-exporter.io/accelerator"},
                     accept=TABLE)
    assert answer["kind"] == "Table" and answer["apiVersion"] == "meta.k8s.io/v1"
    assert [r["cells"][0] for r in answer["rows"]] == ["gpu-0"] and answer["rows"][0]["object"] is None
    assert answer["columnDefinitions"][0] == {"name": "Name", "type": "string", "format": "name",
                                              "description": answer["columnDefinitions"][0]["description"],
                                              "priority": 0}
    meta = api.get("/api/v1/nodes", accept=TABLE)["rows"][0]["object"]  # includeObject=Metadata, the default
    assert meta["kind"] == "PartialObjectMetadata" and "spec" not in meta
    assert api.get("/api/v1/nodes")["kind"] == "NodeList"  # no Table asked: the list
    assert kube_api.requests[-2].headers["Accept"] == f"{TABLE}, application/json"  # the fallback offered
    with pytest.raises(K8sError, match="400"):
        api.get("/api/v1/nodes", query={"includeObject": "Everything"}, accept=TABLE)


@pytest.mark.parametrize("accept,table", [
    ("application/json;as=Table;v=v1;g=meta.k8s.io, application/json", True),
    ("application/json;as=Table;v=v1beta1;g=meta.k8s.io", True),
    ("application/json;as=Table;v=v9;g=meta.k8s.io, application/json", False),  # unknown version: the fallback
    ("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io, */*", False),
    ("", False),
])
def test_accept_negotiation(accept, table):
    assert kubeapi.wants_table(accept) is table


def test_nothing_acceptable_is_406():
    with pytest.raises(kubeapi.ApiError) as e:
        kubeapi.wants_table("application/json;as=Table;v=v9;g=meta.k8s.io")
    assert e.value.code == 406
    with pytest.raises(kubeapi.ApiError):
        kubeapi.wants_table("application/yaml")


# --------------------------------------------------------------------------- the agent, end to end

def _fleet(kube_api, agent, *, labelled: bool) -> None:
    for i in range(9):
        kube_api.seed_node(f"gpu-node-{100 + i}", labels=ACCELERATOR)
    other = {**ACCELERATOR, **({KEY: "device-lost"} if labelled else {})}
    kube_api.seed_node("gpu-node-99", labels=other, taints=[{"key": KEY, "value": "device-lost", "effect": "NoSchedule"}])
    kube_api.seed_node(agent.node)


def _ours(node: dict) -> list:
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") == KEY]


def test_above_the_whole_listing_size_the_budget_lists_names_and_labelled_nodes_only(kube_api, make_agent):
    agent = make_agent(health={"budget_max_fraction": 0.1, "budget_whole_listing_max_nodes": 5})
    _fleet(kube_api, agent, labelled=True)
    agent.run(0, 100)
    assert _ours(kube_api.node(agent.node)) == []  # 1 of 11 carries it: the budget (1) is used
    lists = kube_api.node_lists()
    assert lists and not kube_api.node_lists(table=False)  # names only: no class shares to read from books
    assert {r.query.get("labelSelector") for r in lists} == {"hetero-exporter.io/accelerator=true",
                                                             f"hetero-exporter.io/accelerator=true,{KEY}"}
    assert all(r.query.get("resourceVersion") == "0" for r in lists)  # from the watch cache
    assert any(r.query.get("includeObject") == "None" for r in lists)
    # the other node recovers (its agent takes taint and label off together): this one is tainted
    kube_api.mutate_node("gpu-node-99", lambda n: (n["spec"].pop("taints"), n["metadata"]["labels"].pop(KEY)))
    agent.run(110, 170)
    node = kube_api.node(agent.node)
    assert len(_ours(node)) == 1 and node["metadata"]["labels"][KEY] == _ours(node)[0]["value"]


@pytest.mark.parametrize("whole_up_to,tainted", [(500, False), (5, True)])
def test_a_taint_without_its_mirror_label_counts_only_in_a_whole_listing(kube_api, make_agent, whole_up_to, tainted):
    """The documented limit of the light listing: a node whose taint has no mirror label (put
    there by hand where no agent of this version runs) is not seen by it."""
    agent = make_agent(health={"budget_max_fraction": 0.1, "budget_whole_listing_max_nodes": whole_up_to})
    _fleet(kube_api, agent, labelled=False)
    agent.run(0, 60)
    assert bool(_ours(kube_api.node(agent.node))) is tainted
