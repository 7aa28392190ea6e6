"""The extender's per-pod shortcuts at fleet size (issue 39 §4) say what the reference paths say:
refusal Decisions kept per (unconstrained shape, refusal id) across pod shapes, per-device checks
kept per request by what they read, a name list's states gathered once while no row changes,
floor classes counted rather than sorted, a pod's Request read once for its /filter and
/prioritize, /prioritize's answer joined from its parts."""

from __future__ import annotations

import json
import math

import msgspec
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetero_exporter.scoring import columns
from hetero_exporter.scoring.extender import Extender
from hetero_exporter.scoring.nodes import Dev, Group, from_annotation
from hetero_exporter.scoring.nodetable import NodeTable
from hetero_exporter.scoring.request import Request, request_from_pod
from hetero_exporter.scoring.scorer import Scorer, _refusal, all_fit, device_problem
from test_scoring_columns import T0, _node, pod, text
from test_scoring_verdicts import _within

_SHAPE = st.tuples(st.integers(1, 8), st.sampled_from(["binpack", "spread"]),
                   st.sampled_from(["same-node", "same-switch", "same-fabric"]),
                   st.sampled_from([None, "8Gi", "33Gi", "40Gi", "41Gi", "70Gi", "500Gi"]), st.booleans())


def _pod_request(count, policy, topology, memory, vendors) -> Request:
    req = {"count": count, "policy": policy, "topology": topology}
    if memory is not None:
        req["memory_per_device"] = memory
    if vendors:
        req["vendors"] = ["nvidia", "amd"]
    return request_from_pod(pod(request=req))


def _fleet(nodes) -> tuple[NodeTable, dict[str, str]]:
    """Generated nodes, each three times (alike nodes share refusal ids)."""
    texts = {f"n{i}-{k}": text(f"n{i}-{k}", **_within(spec)) for i, spec in enumerate(nodes) for k in range(3)}
    texts["broken"] = "{not json"
    table = NodeTable(Scorer())
    table.replace(texts)
    return table, texts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(_node, min_size=1, max_size=5), shapes=st.lists(_SHAPE, min_size=2, max_size=8),
       changed=st.integers(0, 7))
def test_refusals_kept_across_shapes_are_the_reference_decisions(nodes, shapes, changed):
    table, texts = _fleet(nodes)
    names = list(texts)
    for round_, shape in enumerate(shapes):
        if round_ == 2:  # a node's annotation changes mid-stream: its refusal id may change
            name = names[changed % len(nodes)]
            spec = {**_within(nodes[changed % len(nodes)]), "health": {0: "failed"}}
            texts[name] = text(name, **spec)
            table.update(name, texts[name])
        req = _pod_request(*shape)
        at, made = table.verdicts(table.scorer, req, names).failing()
        for i, d in zip(at, made):
            ref = Scorer().decide(req, from_annotation(names[i], texts[names[i]]))
            assert (d.feasible, d.reason, d.resolvable) == (ref.feasible, ref.reason, ref.resolvable), names[i]


def _dev(i: int, memory: float, units: float, features: frozenset, driver) -> Dev:
    return Dev(uuid=f"u{i}", index=i, model="m", health="ok", compute_units=units, cost_weight=0.0,
               features=features, memory_total=memory, memory_free=memory / 2, load=0.5, driver=driver,
               driver_key=None, runtime=None, runtime_key=None, numa=None)


_DEVICE = st.tuples(st.sampled_from([0.0, -0.0, 8 * 2.0**30, 40 * 2.0**30, 80 * 2.0**30, math.nan]),
                    st.sampled_from([0.0, -0.0, 1.0, 2.5]), st.sampled_from([frozenset(), frozenset({"nvlink"})]),
                    st.sampled_from([None, "535.104.05"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=st.lists(st.lists(_DEVICE, min_size=1, max_size=8), min_size=1, max_size=4),
       memory=st.sampled_from([None, "1Gi", "40Gi", "64Gi"]), units=st.sampled_from([None, 0.5, 2.0]),
       features=st.sampled_from([None, ["nvlink"]]), shared=st.booleans(), count=st.integers(1, 8))
def test_device_checks_kept_per_request_say_what_each_device_check_says(groups, memory, units, features, shared,
                                                                         count):
    ask: dict = {"count": count, "shared": shared}
    for key, value in (("memory_per_device", memory), ("compute_units", units), ("features", features)):
        if value is not None:
            ask[key] = value
    req = request_from_pod(pod(request=ask))
    for devs in groups:  # one request over several groups: checks of alike devices are kept
        devices = tuple(_dev(i, *d) for i, d in enumerate(devs))
        n = len(devices)
        g = Group(resource="nvidia.com/gpu", vendor="nvidia", devices=devices,
                  excluded=((_dev(n, 0.0, 1.0, frozenset(), None), "failed"),) if n % 2 else (),
                  pair=[[0.5] * n for _ in range(n)], pair_kind=[["PCIe"] * n for _ in range(n)], domain=(0,) * n,
                  load_total=0.5 * n, has_links=False)
        problems: dict = {}
        for d in g.devices:  # the reference: each device checked on its own
            why = device_problem(d, req, g.vendor)
            if why is not None:
                problems.setdefault(why, []).append(d)
        elig = tuple(i for i, d in enumerate(g.devices) if device_problem(d, req, g.vendor) is None)
        want = (elig, _refusal(g, req, elig, problems) if len(elig) < req.count else None)
        assert Scorer._eligible(g, req) == want


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(_node, min_size=1, max_size=6), shapes=st.lists(_SHAPE, min_size=1, max_size=4))
def test_floor_classes_counted_fit_as_each_node_checked(nodes, shapes):
    table, texts = _fleet(nodes)
    got = table._gather(list(texts))
    for shape in shapes:
        req = _pod_request(*shape)
        fits = columns.ShapeCache._fits(req, got.states, got.classes, got.class_groups)
        want = [st_ is not None and not st_.error and all_fit(req, st_) for st_ in got.states]
        assert fits.tolist() == want


def test_a_list_gathered_again_is_read_once_until_a_row_changes(monkeypatch):
    monkeypatch.setattr(columns, "KNOWN_MIN", 2)
    table = NodeTable(Scorer())
    table.replace({"a": text("a"), "b": text("b", "mi300x"), "c": text("c")})
    names = ["a", "b", "c"]
    req = request_from_pod(pod({"nvidia.com/gpu": 1}))
    first = table.verdicts(table.scorer, req, names)
    again = table.verdicts(table.scorer, req, names)
    assert again.states is first.states  # read once: the same arrays
    assert first.states[np.int64(1)] is first.states[1] is table.get("b") and list(first.states) == first.states[:]
    assert not first.times.flags.writeable
    before = table.get("b")
    table.update("b", text("b"))  # now an NVIDIA node: the list is read anew
    third = table.verdicts(table.scorer, req, names)
    assert third.states is not first.states and third.states[1] is table.get("b")
    assert third.passing() == [0, 1, 2] and first.states[1] is before  # what the first call saw stays
    third.put(1, before, Scorer().decide(req, before))  # a state given in the request: a copy changes
    assert third.states[1] is before and table.verdicts(table.scorer, req, names).states[1] is table.get("b")


def _ext() -> Extender:
    scorer = Scorer()
    table = NodeTable(scorer)
    table.replace({f"n{i}": text(f"n{i}", ("hgx-h100", "dgx1-v100", "mi300x")[i % 3]) for i in range(30)})
    return Extender(scorer, table, clock=lambda: T0 + 30)


def test_a_pods_request_is_read_once_for_its_filter_and_prioritize():
    ext = _ext()
    names = [f"n{i}" for i in range(30)]
    the_pod = pod(request={"count": 2, "memory_per_device": "40Gi"})
    body = msgspec.json.encode({"Pod": the_pod, "NodeNames": names})
    _, first = ext.filter_json(body, "t1")
    passed = json.loads(ext.filter_json(body, "t1")[0])["NodeNames"]
    _, second = ext.prioritize(msgspec.json.encode({"Pod": the_pod, "NodeNames": passed}), "t1")
    assert second.request is first.request  # the same Pod bytes: decoded and read once
    whole, third = Extender(ext.scorer, ext.table, clock=lambda: T0 + 30).prioritize(
        json.dumps({"Pod": the_pod, "NodeNames": passed}, indent=1).encode(), "t1")
    assert ext.prioritize(msgspec.json.encode({"Pod": the_pod, "NodeNames": passed}), "t1")[0] == whole
    bad = pod(request={"count": "x"})
    for _ in range(2):  # an unreadable request: refused alike each time
        result, ev = ext.filter(msgspec.json.encode({"Pod": bad, "NodeNames": names}), "t2")
        assert ev.request is None and "pod request unreadable" in ev.request_error
        assert set(result["FailedNodes"]) == set(names)
    for i in range(100):  # bounded
        ext.filter(msgspec.json.encode({"Pod": pod(request={"count": 1 + i % 8}) | {"x": i}, "NodeNames": names}))
    assert len(ext.values) <= 64


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(st.text(min_size=1, max_size=30), min_size=0, max_size=12, unique=True))
def test_prioritize_bytes_are_those_of_each_host_joined(names):
    ext = _ext()
    listed = [*names, "n0", "n1", "n5"]
    listed = list(dict.fromkeys(listed))
    body = json.dumps({"Pod": pod({"nvidia.com/gpu": 1}), "NodeNames": listed}).encode()
    out, ev = ext.prioritize(body, "t")
    points = ev.verdicts.points_at(ev.now, ext.scorer.staleness)
    want = "[" + ",".join('{"Host":%s,"Score":%d}' % (json.dumps(n), p) for n, p in zip(listed, points)) + "]"
    assert out == want.encode() and json.loads(out) == [{"Host": n, "Score": p} for n, p in zip(listed, points)]
    assert np.count_nonzero(points) >= 2  # the NVIDIA nodes score
