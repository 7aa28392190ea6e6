"""Decisions for all nodes at once (scoring.columns, issue 17) give the answers of the node by
node path (``Scorer.decide``, the reference), whatever the request and the node; the caches are
bounded; a changed annotation is never answered from the cache; bounded JSON decoding by msgspec
answers as the standard json path does."""

from __future__ import annotations

import gc
import json
import weakref

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetero_exporter.model import compact_json
from hetero_exporter.scoring import jsonsafe, synthetic
from hetero_exporter.scoring import scorer as scorer_module
from hetero_exporter.scoring.columns import GC, GcPolicy, ShapeCache
from hetero_exporter.scoring.nodes import from_annotation
from hetero_exporter.scoring.nodetable import NodeTable
from hetero_exporter.scoring.request import request_from_pod
from hetero_exporter.scoring.scorer import EXHAUSTIVE_POOL, MEMO_LIMIT, Scorer

T0 = 1764400000.0


def pod(resources=None, request=None):
    meta = {"name": "p", "namespace": "ns"}
    if request is not None:
        meta["annotations"] = {"hetero-exporter.io/request": json.dumps(request)}
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "resources": {"limits": resources or {}}}]}}


def text(name: str, shape: str = "hgx-h100", **kw) -> str:
    return compact_json(synthetic.node(name, shape, time=T0, **kw))


def same(a, b) -> bool:
    """Two decisions say the same thing (verdict, devices, score, reason, preemption)."""
    return ((a.feasible, [d.index for d in a.devices], a.group, a.score, a.points, a.reason, a.resolvable)
            == (b.feasible, [d.index for d in b.devices], b.group, b.score, b.points, b.reason, b.resolvable))


_node = st.fixed_dictionaries({
    "shape": st.sampled_from(synthetic.SHAPES),
    "count": st.integers(1, 8),
    "loads": st.dictionaries(st.integers(0, 7), st.sampled_from([0.0, 0.2, 0.5, 0.9, 0.37]), max_size=8),
    "health": st.dictionaries(st.integers(0, 7), st.sampled_from(["failed", "degraded", "unknown"]), max_size=3),
    "driver": st.sampled_from([None, "535.104.05", "550.54.15"]),
})
_request = st.fixed_dictionaries({}, optional={
    "memory_per_device": st.sampled_from(["8Gi", "40Gi", "70Gi", "100Gi", "500Gi"]),
    "compute_units": st.sampled_from([0.1, 1.0, 3.0]),
    "min_driver_version": st.sampled_from(["500", "550.54", "560"]),
    "features": st.sampled_from([["nvlink"], ["rdma"]]),
    "topology": st.sampled_from(["same-node", "same-switch", "same-fabric", "same-nvlink-domain"]),
    "policy": st.sampled_from(["binpack", "spread"]),
    "shared": st.booleans(),
})


def _requests(reqs):
    out = []
    for req, count, vendors in reqs:
        if count == 0:
            out.append(request_from_pod(pod()))  # no accelerator asked
        elif vendors:
            out.append(request_from_pod(pod(request={**req, "count": count, "vendors": vendors})))
        else:
            out.append(request_from_pod(pod({"nvidia.com/gpu": count}, req or None)))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(_node, min_size=1, max_size=5),
       reqs=st.lists(st.tuples(_request, st.integers(0, 8), st.sampled_from([None, ["amd", "nvidia"], ["ascend"]])),
                     min_size=1, max_size=4),
       precompute=st.booleans())
def test_all_at_once_equals_node_by_node(nodes, reqs, precompute):
    texts = {}
    for i, spec in enumerate(nodes):
        n = spec["count"]
        spec = {**spec, "loads": {k: v for k, v in spec["loads"].items() if k < n},
                "health": {k: v for k, v in spec["health"].items() if k < n}}
        texts[f"n{i}"] = text(f"n{i}", **spec)
    texts["broken"] = "{not json"
    table = NodeTable(Scorer(), precompute=precompute)
    table.replace(texts)
    names = [*texts, "absent", "n0"]  # a name not in the table; a name twice
    for req in _requests(reqs) * 2:  # the second round: from the columns
        states, got = table.decide(table.scorer, req, names)
        reference = Scorer()
        for name, st_, d in zip(names, states, got):
            if name == "absent":
                assert st_ is None and d is None
                continue
            assert st_ is table.get(name)
            assert same(d, reference.decide(req, from_annotation(name, texts[name]))), name


def test_a_changed_annotation_is_decided_again_not_served_from_the_column():
    table = NodeTable(Scorer())
    table.replace({"a": text("a"), "b": text("b")})
    req = request_from_pod(pod({"nvidia.com/gpu": 4}))
    _, first = table.decide(table.scorer, req, ["a", "b"])
    assert all(d.feasible for d in first)
    table.update("a", text("a", health={i: "failed" for i in range(6)}))  # 2 usable left
    table.remove("b")
    states, again = table.decide(table.scorer, req, ["a", "b"])
    assert not again[0].feasible and "2 usable of 8" in again[0].reason
    assert states[1] is None and again[1] is None


def test_the_shape_cache_is_bounded_in_columns_and_cells():
    table = NodeTable(Scorer())
    table.shapes = ShapeCache(max_columns=4)
    table.replace({f"n{i}": text(f"n{i}") for i in range(3)})
    for mib in range(20):
        req = request_from_pod(pod({"nvidia.com/gpu": 2}, {"memory_per_device": f"{1000 + mib}Mi"}))
        table.decide(table.scorer, req, ["n0", "n1", "n2"])
    assert len(table.shapes) == 4
    few_cells = ShapeCache(max_columns=100, max_cells=3 * 64)  # rows are allocated 64 at a time
    table.shapes = few_cells
    for mib in range(20):
        req = request_from_pod(pod({"nvidia.com/gpu": 2}, {"memory_per_device": f"{1000 + mib}Mi"}))
        table.decide(table.scorer, req, ["n0"])
    assert len(few_cells) == 3


@pytest.fixture
def gc_policy(monkeypatch):
    """The column GC policy on, for fills of any size; everything unfrozen afterwards."""
    monkeypatch.setattr(GC, "enabled", True)
    monkeypatch.setattr(GC, "min_new", 1)
    gc.collect()
    gc.freeze()
    yield GC
    gc.unfreeze()


def _tracked_growth(table, req, names) -> int:
    gc.collect()
    before = len(gc.get_objects())
    _, got = table.decide(table.scorer, req, names)
    assert len(got) == len(names)
    return len(gc.get_objects()) - before


def test_a_filled_column_leaves_no_node_count_of_objects_to_the_gc(gc_policy):
    names = [f"n{i}" for i in range(40)]
    table = NodeTable(Scorer(), precompute=False)  # every node searched on the request path
    table.replace({n: text(n, loads={0: 0.3 * (i % 3)}) for i, n in enumerate(names)})
    for mib in range(3):  # each a new shape: a Decision (and a Choice) per node
        req = request_from_pod(pod({"nvidia.com/gpu": 1 + mib}, {"memory_per_device": f"{1000 + mib}Mi"}))
        assert _tracked_growth(table, req, names) < len(names)
    assert gc.get_freeze_count() > 0


def test_without_the_policy_a_new_shape_leaves_objects_per_node(monkeypatch):
    monkeypatch.setattr(GC, "enabled", False)
    names = [f"n{i}" for i in range(40)]
    table = NodeTable(Scorer(), precompute=False)
    table.replace({n: text(n, loads={0: 0.3 * (i % 3)}) for i, n in enumerate(names)})
    req = request_from_pod(pod({"nvidia.com/gpu": 2}, {"memory_per_device": "1000Mi"}))
    assert _tracked_growth(table, req, names) >= len(names)  # what the policy freezes


def test_a_sweep_collects_cycles_dropped_after_a_freeze():
    policy = GcPolicy(min_new=1)
    policy.enabled = True

    class Node:
        pass

    a, b = Node(), Node()
    a.peer, b.peer = b, a  # a cycle, like a replaced node state's groups and choices
    dead = weakref.ref(a)
    try:
        policy.after_fill(10)
        del a, b
        gc.collect()
        assert dead() is not None  # frozen: the GC does not see it
        assert not policy.sweep(idle_seconds=3600, max_wait=3600)  # not idle yet
        assert policy.sweep(idle_seconds=0)
        assert dead() is None and policy.frozen_fills == 0
        assert not policy.sweep(idle_seconds=0)  # nothing frozen since
    finally:
        gc.unfreeze()


def test_alike_groups_are_checked_once_per_request_and_keep_their_own_reasons(monkeypatch):
    calls = []
    real = scorer_module.device_problem
    monkeypatch.setattr(scorer_module, "device_problem", lambda *a: calls.append(a) or real(*a))
    names = [f"n{i}" for i in range(30)]
    texts = {n: text(n, health={3: "failed"} if i % 10 == 0 else None) for i, n in enumerate(names)}
    table = NodeTable(Scorer(), precompute=False)
    table.replace(texts)
    req = request_from_pod(pod({"nvidia.com/gpu": 2}, {"memory_per_device": "500000Mi"}))  # fits nowhere
    _, got = table.decide(table.scorer, req, names)
    assert len(calls) < 8 * 3  # per floor and per kind of group, not 8 devices x 30 nodes
    reference = Scorer()
    for name, d in zip(names, got):
        want = reference.decide_fresh(req, from_annotation(name, texts[name]))
        assert same(d, want), name
    assert "#3" in got[0].reason and got[0].reason != got[1].reason  # the failed device is named
    assert got[1].reason == got[2].reason


def test_shared_requests_tell_devices_apart_by_their_load():
    texts = {"a": text("a", loads={i: 0.9 for i in range(8)}), "b": text("b", loads={i: 0.9 for i in range(7)})}
    table = NodeTable(Scorer(), precompute=False)
    table.replace(texts)
    req = request_from_pod(pod(request={"count": 2, "shared": True, "compute_units": 0.5}))
    _, got = table.decide(table.scorer, req, ["a", "b"])
    for name, d in zip(["a", "b"], got):
        assert same(d, Scorer().decide_fresh(req, from_annotation(name, texts[name]))), name
    assert not got[0].feasible and not got[1].feasible and got[0].reason != got[1].reason


def test_the_per_node_memo_of_absent_hardware_is_bounded():
    state = from_annotation("n", text("n"))
    scorer = Scorer()
    for i in range(MEMO_LIMIT + 50):  # vendors this node lacks, a new list each time
        req = request_from_pod(pod(request={"count": 1, "vendors": [f"v{i}", f"w{i}"]}))
        assert not scorer.decide(req, state).feasible
    assert len(state.memo) <= MEMO_LIMIT


@settings(max_examples=80, deadline=None)
@given(spec=_node, policy=st.sampled_from(["binpack", "spread"]),
       topology=st.sampled_from(["same-node", "same-switch", "same-fabric"]), shared=st.booleans(),
       drop=st.sets(st.integers(0, 7), max_size=3))
def test_one_size_search_equals_the_walk_of_every_size(spec, policy, topology, shared, drop):
    n = spec["count"]
    spec = {**spec, "loads": {k: v for k, v in spec["loads"].items() if k < n}, "health": {}}
    group = from_annotation("n", text("n", **spec)).groups.popitem()[1]
    elig = tuple(i for i in group.every if i not in drop)
    assert len(elig) <= EXHAUSTIVE_POOL
    scorer = Scorer(policy)
    walked = scorer._exhaustive(group, elig, shared)[(policy, topology)]
    for k in range(2, len(elig) + 1):
        one = scorer._exhaustive_size(group, elig, k, policy, topology, shared)
        assert one.get(k) == walked.get(k)  # the same set and the very same float


# --------------------------------------------------------------------------- JSON by msgspec

TEXTS = [
    "[1.5, -2, true, null]", "[" * 64 + "]" * 64, "[" * 65 + "]" * 65, "[" * 2000 + "]" * 2000,
    "[1" + "0" * 30 + "]", "[1" + "0" * 4299 + "]", "[1" + "0" * 4300 + "]", "[18446744073709551616]",
    '["\\ud800"]', '["\\udc00x\\ud83d\\ude00"]', '{"a": 1, "a": 2}', "[1e999]", "[1e-400]", "[NaN]",
    '{"x": [{"y": [[[]]]}], "z": {"w": {}}}', '"[[["', "\ufeff[1]", "[1] x", '["a\\u0000b"]', "[-0.0, -0]",
    json.dumps({"deep": [[[[{"k": "v" * 40}]]]] * 30}),
]


@pytest.mark.parametrize("doc", TEXTS)
def test_msgspec_path_answers_as_the_json_path(doc):
    for data in (doc, doc.encode("utf-8", "surrogatepass")):
        try:
            want = ("ok", jsonsafe.checked_loads(data))
        except jsonsafe.JSONRefused as e:
            want = ("refused", str(e))
        try:
            got = ("ok", jsonsafe.loads(data))
        except jsonsafe.JSONRefused as e:
            got = ("refused", str(e))
        assert got == want
        if got[0] == "ok":
            assert repr(got[1]) == repr(want[1])  # types too: 1e30 stays an int where json keeps one


def test_depth_is_counted_on_the_decoded_tree():
    assert jsonsafe.depth_within([[[]]], 3) and not jsonsafe.depth_within([[[]]], 2)
    assert jsonsafe.depth_within({"a": [1, {"b": 2}]}, 3) and not jsonsafe.depth_within({"a": [1, {"b": {}}]}, 3)
    assert jsonsafe.depth_within("x", 0) and jsonsafe.depth_within(5, 0)
