"""The verdicts of a call read from arrays (scoring.columns: points, score, reason code, passing
nodes; a new shape read from the rows' best scores without a per-node search) say what the
Decisions of the node by node path say (``Scorer.decide``, the reference), whatever the request
and the node; Decisions are made only where asked, and kept."""

from __future__ import annotations

import math

import numpy as np

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetero_exporter.model import compact_json
from hetero_exporter.scoring import batch, columns, synthetic
from hetero_exporter.scoring import scorer as scorer_module
from hetero_exporter.scoring.nodes import from_annotation
from hetero_exporter.scoring.nodetable import NodeTable
from hetero_exporter.scoring.request import request_from_pod
from hetero_exporter.scoring.scorer import NO_ACCELERATOR, Decision, Scorer
from hetero_exporter.scoring.verdicts import DecisionVerdicts, reason_counts
from test_scoring_columns import T0, _node, _request, pod, text

def mixed(name: str) -> str:
    """A node of two vendors (two device groups): decided node by node."""
    a = synthetic.node(name, "hgx-h100", time=T0, count=4)
    b = synthetic.node(name, "mi300x", time=T0, count=4)
    return compact_json(a.__class__(node=name, time=T0, devices=a.devices + b.devices, collectors=a.collectors))


_VENDORS = st.sampled_from([None, ["amd", "nvidia"], ["ascend"], ["nvidia", "ascend", "amd"]])


def _request_of(req, count, vendors, resource):
    if count == 0:
        return request_from_pod(pod())
    if vendors or resource is None:
        return request_from_pod(pod(request={**req, "count": count, **({"vendors": vendors} if vendors else {})}))
    return request_from_pod(pod({resource: count}, req or None))


def _within(spec: dict) -> dict:
    """A generated node with loads and health of its own devices only."""
    return {**spec, **{key: {k: v for k, v in spec[key].items() if k < spec["count"]} for key in ("loads", "health")}}


def _table(nodes, precompute):
    texts = {f"n{i}": text(f"n{i}", **_within(spec)) for i, spec in enumerate(nodes)}
    texts["broken"] = "{not json"
    texts["two-vendors"] = mixed("two-vendors")
    texts["no-devices"] = text("no-devices", count=0)
    table = NodeTable(Scorer(), precompute=precompute)
    table.replace(texts)
    table.update("no-annotation", None)
    return table, texts


def check(v, req, names, table, texts) -> None:
    """Every array verdict against the reference Decision of the node by node path."""
    reference = Scorer()
    want = []
    for name in names:
        if name not in texts and name != "no-annotation":
            want.append(None)
            continue
        st_ = table.get(name)
        want.append(reference.decide(req, from_annotation(name, texts.get(name))) if st_ is not None else None)
    points = v.points()
    passing = set(v.passing())
    for i, (name, d) in enumerate(zip(names, want)):
        if d is None:  # not in the table
            assert points[i] == 0 and (i in passing) == (req.count == 0), name
            continue
        assert points[i] == d.points, name
        assert (i in passing) == d.feasible, name
        if d.feasible:
            assert v.score(i) == d.score, name  # the very same float
    found = [d if d is not None else v.decisions()[i] for i, d in enumerate(want)]
    assert v.counts() == reason_counts(found, v.states, True)
    for i, d in zip(*v.failing()):
        ref = want[i]
        if ref is not None:
            assert (d.reason, d.resolvable) == (ref.reason, ref.resolvable), names[i]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(_node, min_size=1, max_size=5),
       reqs=st.lists(st.tuples(_request, st.integers(0, 9), _VENDORS,
                               st.sampled_from([None, "nvidia.com/gpu", "huawei.com/Ascend910", "amd.com/gpu"])),
                     min_size=1, max_size=4),
       precompute=st.booleans())
def test_array_verdicts_equal_the_node_by_node_decisions(nodes, reqs, precompute):
    table, texts = _table(nodes, precompute)
    names = [*texts, "no-annotation", "absent", "n0"]  # a name not in the table; a name twice
    for req in [_request_of(*r) for r in reqs] * 2:  # the second round: from the columns
        missing = (lambda name: NO_ACCELERATOR) if req.count == 0 else (lambda name: Decision(False, reason=name))
        check(table.verdicts(table.scorer, req, names, missing), req, names, table, texts)


def test_a_new_unconstrained_shape_is_read_from_the_best_scores_without_a_search(monkeypatch):
    names = [f"n{i}" for i in range(30)]
    texts = {n: text(n, synthetic.SHAPES[i % len(synthetic.SHAPES)], loads={i % 8: 0.9, (i + 3) % 8: 0.3},
                     health={i % 8: "failed"} if i % 7 == 0 else None) for i, n in enumerate(names)}
    table = NodeTable(Scorer())
    table.replace(texts)
    calls = []
    real = scorer_module.Scorer.decide_fresh
    monkeypatch.setattr(scorer_module.Scorer, "decide_fresh", lambda *a: calls.append(a) or real(*a))
    for count in range(1, 9):
        for policy in ("binpack", "spread"):
            for topology in ("same-node", "same-switch", "same-fabric"):
                req = request_from_pod(pod({"nvidia.com/gpu": count}, {"policy": policy, "topology": topology}))
                v = table.verdicts(table.scorer, req, names)
                assert not calls  # no node searched, no Decision made
                check(v, req, names, table, texts)  # makes the failed nodes' Decisions
                calls.clear()


def test_decisions_are_made_once_and_kept_in_the_column(monkeypatch):
    names = [f"n{i}" for i in range(10)]
    table = NodeTable(Scorer())
    table.replace({n: text(n, "atlas800-910b" if i % 2 else "hgx-h100") for i, n in enumerate(names)})
    req = request_from_pod(pod({"nvidia.com/gpu": 2}))
    first = table.verdicts(table.scorer, req, names).decisions()
    calls = []
    real = scorer_module.Scorer.decide_fresh
    monkeypatch.setattr(scorer_module.Scorer, "decide_fresh", lambda *a: calls.append(a) or real(*a))
    again = table.verdicts(table.scorer, req, names)
    assert again.failing()[1] == first[1::2] and not calls
    assert again.decisions() == first and not calls


def test_a_changed_node_is_decided_for_its_new_state():
    table = NodeTable(Scorer())
    table.replace({"a": text("a"), "b": text("b")})
    req = request_from_pod(pod({"nvidia.com/gpu": 4}))
    assert table.verdicts(table.scorer, req, ["a", "b"]).passing() == [0, 1]
    table.update("a", text("a", health={i: "failed" for i in range(6)}))  # 2 usable left
    v = table.verdicts(table.scorer, req, ["a", "b"])
    assert v.passing() == [1] and "2 usable of 8" in v.failing()[1][0].reason


def test_points_of_stale_annotations_fall_as_node_by_node():
    ages = [0, 100, 180, 181, 500, 999.5, 1799, 1800, 5000]
    texts = {f"n{i}": compact_json(synthetic.node(f"n{i}", "hgx-h100", time=T0 - age, loads={i % 8: 0.5}))
             for i, age in enumerate(ages)}
    texts["amd"] = compact_json(synthetic.node("amd", "mi300x", time=T0 - 1000))
    table = NodeTable(Scorer())
    table.replace(texts)
    names = [*texts, "gone"]
    for count in (1, 3):
        req = request_from_pod(pod({"nvidia.com/gpu": count}))
        v = table.verdicts(table.scorer, req, names, lambda name: Decision(False, reason=name))
        ref = DecisionVerdicts(v.decisions(), list(v.states))
        for now in (T0, T0 + 400.25):
            got = v.points_at(now, table.scorer.staleness)
            assert got == ref.points_at(now, table.scorer.staleness)
            assert got[-2:] == [0, 0]  # amd: infeasible; gone: not cached
        assert len(set(v.points_at(T0, table.scorer.staleness))) > 3  # the ages tell the nodes apart


def test_best_scores_are_the_searched_floats():
    state = from_annotation("n", text("n", loads={1: 0.9, 2: 0.3}))
    scorer = Scorer()
    scorer.precompute(state)
    rows = columns.Rows()
    rows.put("n", state, searched=True)
    g = state.group_list[0]
    at = rows.row["n"]
    for k in range(1, 9):
        for j, (p, t) in enumerate(columns.BEST_SHAPES):
            got = g.choices[(g.every, k, p, t, False)]
            value = rows.best[at, (k - 1) * len(columns.BEST_SHAPES) + j]
            assert (math.isnan(value) and got is None) or value == (got[0] if isinstance(got, tuple) else got.inner)


def test_a_refusal_by_topology_is_not_kept_as_hardware_the_node_lacks():
    state = from_annotation("n", text("n", "pcie-a100"))  # PCIe switches of 2, no fabric
    scorer = Scorer()
    fabric = scorer.decide(request_from_pod(pod({"nvidia.com/gpu": 2}, {"topology": "same-fabric"})), state)
    switch = scorer.decide(request_from_pod(pod({"nvidia.com/gpu": 3}, {"topology": "same-switch"})), state)
    assert fabric.reason.startswith("no 2 usable nvidia.com/gpu devices in one fabric-connected set")
    assert switch.reason.startswith("no 3 usable nvidia.com/gpu devices under one PCIe switch"), switch.reason
    assert switch.reason.endswith("node has 8 x nvidia.com/gpu (A100-PCIE-80GB)")
    lacking = scorer.decide(request_from_pod(pod({"amd.com/gpu": 1})), state)
    assert lacking.reason == "no amd.com/gpu devices here; node has 8 x nvidia.com/gpu (A100-PCIE-80GB)"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(_node, min_size=1, max_size=6), policy=st.sampled_from(["binpack", "spread"]),
       topology=st.sampled_from(["same-node", "same-switch", "same-fabric"]), k=st.integers(1, 8),
       weights=st.sampled_from([None, {"topology": 0.1, "fill": 0.4, "idle": 0.2, "health": 0.1, "cost": 0.1,
                                       "affinity": 0.1}]))
def test_one_size_searched_for_many_groups_equals_the_node_by_node_search(nodes, policy, topology, k, weights):
    groups = []
    for i, spec in enumerate(nodes):
        n = spec["count"] or 1
        spec = {**spec, "count": n, "loads": {a: v for a, v in spec["loads"].items() if a < n},
                "health": {a: v for a, v in spec["health"].items() if a < n and v == "degraded"}}
        groups.append(from_annotation(f"n{i}", text(f"n{i}", **spec)).group_list[0])
    scorer = Scorer(weights=weights) if weights else Scorer()
    for n in {len(g.devices) for g in groups}:
        alike = [g for g in groups if len(g.devices) == n]
        if k > n:
            continue
        got = batch.search(scorer, alike, k, policy, topology)
        for g, found in zip(alike, got):
            want = scorer._exhaustive_size(g, g.every, k, policy, topology, False).get(k)
            assert found == want  # the same set and the very same float


def test_ties_go_to_the_first_set_as_node_by_node():
    idle = [from_annotation(f"n{i}", text(f"n{i}")).group_list[0] for i in range(3)]  # every set alike
    scorer = Scorer()
    for k in (2, 4):
        assert batch.search(scorer, idle, k, "binpack", "same-node") == \
            [scorer._exhaustive_size(g, g.every, k, "binpack", "same-node", False)[k] for g in idle]
    scores = np.array([[1.0, 1.0 + 0.6e-12, 1.0 + 1.2e-12, 1.0 + 1.9e-12], [-np.inf, -np.inf, 0.5, 0.5]])
    assert batch._first_records(scores).tolist() == [2, 2]  # 1.2e-12 beats 1.0 by more than 1e-12; then none


def test_a_node_in_requests_is_searched_once_per_shape_with_its_alikes(monkeypatch):
    names = [f"n{i}" for i in range(40)]
    texts = {n: text(n, loads={i % 8: 0.9}, health={(i + 1) % 8: "failed"} if i % 5 == 0 else None)
             for i, n in enumerate(names)}
    table = NodeTable(Scorer(), precompute=False)  # as the decode cache of nodes in requests
    table.replace(texts)
    calls = []
    real = batch.search
    monkeypatch.setattr(batch, "search", lambda *a: calls.append(len(a[1])) or real(*a))
    monkeypatch.setattr(scorer_module.Scorer, "_exhaustive_size", None)  # never node by node
    req = request_from_pod(pod({"nvidia.com/gpu": 3}, {"policy": "spread"}))
    v = table.verdicts(table.scorer, req, names)
    assert sorted(calls) == [8, 32]  # 7 usable devices, 8 usable
    monkeypatch.undo()
    check(v, req, names, table, texts)


def test_nodes_whose_devices_all_fall_short_are_refused_once_per_kind_of_group(monkeypatch):
    names = [f"n{i}" for i in range(40)]
    texts = {n: text(n, "dgx1-v100", loads={i % 8: 0.9}, health={3: "failed"} if i % 4 == 0 else None)
             for i, n in enumerate(names)}
    table = NodeTable(Scorer())
    table.replace(texts)
    calls = []
    real = scorer_module.Scorer.decide_fresh
    monkeypatch.setattr(scorer_module.Scorer, "decide_fresh", lambda *a: calls.append(a) or real(*a))
    req = request_from_pod(pod({"nvidia.com/gpu": 2}, {"memory_per_device": "40Gi"}))  # V100s have 32 GB
    v = table.verdicts(table.scorer, req, names)
    assert len(calls) == 2  # with a failed device, without
    monkeypatch.undo()
    check(v, req, names, table, texts)
    assert v.passing() == [] and v.failing()[1][0].reason.startswith("needs 2 x nvidia.com/gpu, 0 usable of 8")


_ANSWERS = r'''
import json, sys
if sys.argv[1] == "without":
    sys.modules["numpy"] = None  # the extender extra not installed: node by node
from hetero_exporter.model import compact_json
from hetero_exporter.scoring import nodetable, synthetic
from hetero_exporter.scoring.extender import Extender
from hetero_exporter.scoring.scorer import Scorer
assert (nodetable.columns is None) == (sys.argv[1] == "without")
T0 = 1764400000.0
texts = {f"n{i}": compact_json(synthetic.node(f"n{i}", shape, time=T0 - 300 * i, loads={i: 0.5}))
         for i, shape in enumerate(["hgx-h100", "mi300x", "pcie-a100", "dgx1-v100"])}
scorer = Scorer()
table = nodetable.NodeTable(scorer)
table.replace(texts)
ext = Extender(scorer, table, clock=lambda: T0, replica="r")
out = []
for limits, ann in [({"nvidia.com/gpu": 2}, None), ({"nvidia.com/gpu": 3}, {"memory_per_device": "40Gi"}),
                    ({}, None)]:
    meta = {"name": "p", "namespace": "ns"}
    if ann:
        meta["annotations"] = {"hetero-exporter.io/request": json.dumps(ann)}
    spec = {"containers": [{"name": "c", "resources": {"limits": limits}}]}
    body = json.dumps({"Pod": {"metadata": meta, "spec": spec}, "NodeNames": [*texts, "gone"]}).encode()
    result, ev = ext.filter(body, trace="t")
    answer, _ = ext.prioritize(body, trace="t")
    out.append([result, answer.decode(), ev.verdicts.counts(), [r["reason"] for r in ext.explain("t")["nodes"]]])
print(json.dumps(out))
'''


def test_without_numpy_the_answers_are_the_same():
    import subprocess
    import sys
    got = [subprocess.run([sys.executable, "-c", _ANSWERS, mode], capture_output=True, text=True, timeout=60)
           for mode in ("with", "without")]
    assert all(r.returncode == 0 for r in got), [r.stderr[-2000:] for r in got]
    assert got[0].stdout == got[1].stdout and 'Score' in got[0].stdout and 'memory 32.0 GiB < 40.0 GiB' in got[0].stdout


def test_a_name_list_sent_again_follows_the_nodes_added_and_removed(monkeypatch):
    monkeypatch.setattr(columns, "KEEP_NAMES", 2)
    table = NodeTable(Scorer())
    table.replace({"a": text("a"), "b": text("b", "mi300x")})
    req = request_from_pod(pod({"nvidia.com/gpu": 1}))
    names = ["a", "b", "c"]
    assert table.verdicts(table.scorer, req, list(names)).passing() == [0]
    assert table.verdicts(table.scorer, req, list(names)).passing() == [0]  # the kept rows
    table.remove("a")
    table.update("c", text("c"))  # takes the row "a" had
    v = table.verdicts(table.scorer, req, list(names))
    assert v.passing() == [2] and v.states[0] is None and v.states[2] is table.get("c")
    table.update("c", text("c", "mi300x"))  # the same row, a new state
    assert table.verdicts(table.scorer, req, list(names)).passing() == []
