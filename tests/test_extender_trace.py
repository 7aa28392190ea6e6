"""One trace per pod's scheduling cycle: /filter and /prioritize of one pod object share a trace, the
trace id ends every FailedNodes reason (so it shows in the pod's events) and names the replica,
and /explain on another replica says where the trace lives."""

from __future__ import annotations

import json

import pytest

from hetero_exporter.scoring import explain as explain_mod
from hetero_exporter.scoring import extender as extender_mod
from hetero_exporter.scoring.extender import REASON_LIMIT, Extender
from hetero_exporter.scoring.nodetable import NodeTable
from hetero_exporter.scoring.request import RequestError
from hetero_exporter.scoring.scorer import Scorer
from hetero_exporter.scoring.server import ExtenderServer
from hetero_exporter.scoring.trace import PodTraces, replica_name, replica_of
from test_extender import ANN, T0, Client, annotations, pod

NAMES = ["hgx-busy", "hgx-idle", "atlas", "nowhere"]


def cycle_pod(rv: str = "7", uid: str = "u-1", gpus: int = 4) -> dict:
    p = pod({"nvidia.com/gpu": gpus})
    p["metadata"].update(uid=uid, resourceVersion=rv)
    return p


def body(p: dict, names=NAMES) -> bytes:
    return json.dumps({"Pod": p, "NodeNames": names}).encode()


@pytest.fixture
def replica_a():
    scorer = Scorer("binpack")
    table = NodeTable(scorer)
    table.replace(annotations())
    ext = Extender(scorer, table, clock=lambda: T0 + 30, replica="extender-a")
    server = ExtenderServer(("127.0.0.1", 0), ext).start()
    try:
        yield Client(server.address), ext
    finally:
        server.stop()


def test_filter_then_prioritize_of_one_pod_share_a_trace(replica_a):
    client, _ = replica_a
    status, h1, result = client.post("/filter", body(cycle_pod()))
    assert status == 200
    passed = result["NodeNames"]
    status, h2, _ = client.post("/prioritize", body(cycle_pod(), passed))
    assert status == 200
    trace = h1["X-Trace-Id"]
    assert h2["X-Trace-Id"] == trace and replica_of(trace) == "extender-a"
    status, raw = client.get(f"/explain?trace={trace}")
    doc = json.loads(raw)
    assert status == 200 and doc["verb"] == "filter" and doc["verbs"] == ["filter", "prioritize"]
    assert doc["replica"] == "extender-a" and len(doc["nodes"]) == len(NAMES)
    status, raw = client.get(f"/explain?trace={trace}&verb=prioritize")
    doc = json.loads(raw)
    assert status == 200 and doc["verb"] == "prioritize" and len(doc["nodes"]) == len(passed)
    status, raw = client.get(f"/explain?trace={trace}&verb=bind")
    assert status == 400 and b"filter or prioritize" in raw


def test_a_new_resource_version_or_no_resource_version_gets_a_new_trace(replica_a):
    client, _ = replica_a
    _, h1, _ = client.post("/filter", body(cycle_pod(rv="7")))
    _, h2, _ = client.post("/filter", body(cycle_pod(rv="8")))  # the retry after a failed cycle
    _, h3, _ = client.post("/filter", body(cycle_pod(rv="7", uid="u-2")))  # another pod
    assert len({h1["X-Trace-Id"], h2["X-Trace-Id"], h3["X-Trace-Id"]}) == 3
    bare = pod()  # no resourceVersion: not from an API server, a trace per call
    _, h4, _ = client.post("/filter", body(bare))
    _, h5, _ = client.post("/prioritize", body(bare))
    assert h4["X-Trace-Id"] != h5["X-Trace-Id"]


def test_the_trace_id_ends_every_failed_node_reason(replica_a):
    client, _ = replica_a
    status, headers, result = client.post("/filter", body(cycle_pod(gpus=8)))
    trace = headers["X-Trace-Id"]
    assert status == 200 and set(result["FailedNodes"]) == {"atlas", "nowhere"}
    for reason in result["FailedNodes"].values():
        assert reason.endswith(f" (trace {trace})") and len(reason) <= REASON_LIMIT


def test_a_long_reason_is_clipped_before_the_trace(monkeypatch):
    ext = Extender(Scorer(), None, replica="r")
    def unreadable(*_a):
        raise RequestError("z" * 5000)  # reasons this long come from no real input (each part is clipped)

    monkeypatch.setattr(extender_mod, "request_from_pod", unreadable)
    nodes = {"items": [{"metadata": {"name": "n1", "annotations": {ANN: annotations()["hgx-idle"]}}}]}
    result, ev = ext.filter(json.dumps({"Pod": cycle_pod(), "Nodes": nodes}).encode())
    reason = result["FailedNodes"]["n1"]
    assert len(reason) == REASON_LIMIT and reason.endswith(f"z... (trace {ev.trace})")


def test_explain_of_another_replicas_trace_names_that_replica(replica_a):
    client, _ = replica_a
    other = PodTraces("extender-b").new()
    status, raw = client.get(f"/explain?trace={other}")
    error = json.loads(raw)["Error"]
    assert status == 404 and "served by replica extender-b" in error and "extender-a" in error
    mine = PodTraces("extender-a").new()
    status, raw = client.get(f"/explain?trace={mine}")
    assert status == 404 and "no trace" in json.loads(raw)["Error"]


def test_the_replica_name_comes_from_pod_name_and_is_made_safe():
    assert replica_name({"POD_NAME": "hetero-exporter-extender-7d9f-abcde"}) == "hetero-exporter-extender-7d9f-abcde"
    hostile = replica_name({"POD_NAME": "A b/c?d&e=" + "x" * 500})
    assert hostile.startswith("a-b-c-d-e-") and len(hostile) <= 63
    assert replica_name({"POD_NAME": "///"}) == "extender"
    assert replica_of(PodTraces(hostile).new()) == hostile
    assert replica_of("0000") is None and replica_of("short-r") is None


def test_pod_traces_are_bounded_and_join_only_within_the_window():
    now = [0.0]
    traces = PodTraces("r", kept=2, join_seconds=30, clock=lambda: now[0])
    a = traces.for_pod(cycle_pod(uid="a"))
    assert traces.for_pod(cycle_pod(uid="a")) == a
    now[0] = 31.0
    a2 = traces.for_pod(cycle_pod(uid="a"))
    assert a2 != a  # too late to be the same cycle
    b, c = traces.for_pod(cycle_pod(uid="b")), traces.for_pod(cycle_pod(uid="c"))
    assert len(traces._pods) == 2 and traces.for_pod(cycle_pod(uid="a")) != a2  # a was dropped
    assert traces.for_pod(cycle_pod(uid="c")) == c != b
    assert traces.for_pod({"metadata": "x"}) != traces.for_pod({"metadata": "x"})


def test_explain_builds_its_rows_outside_the_ring_lock(monkeypatch):
    """/explain of a large call words every node: that work must not hold the lock every
    /filter and /prioritize takes to record its call."""
    ext = Extender(Scorer(), None, replica="r")
    ext.filter(json.dumps({"Pod": cycle_pod(), "Nodes": {"items": [
        {"metadata": {"name": f"n{i}"}} for i in range(50)]}}).encode(), "t1")
    held = []
    rows = explain_mod.node_rows

    def spy(*a, **k):
        held.append(ext._lock.locked())
        return rows(*a, **k)

    monkeypatch.setattr(explain_mod, "node_rows", spy)
    doc = ext.explain("t1")
    assert held == [False] and len(doc["nodes"]) == 50
