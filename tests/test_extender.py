"""The scheduler extender over HTTP: kube-scheduler extender v1 JSON in both modes (nodes in the
request, node names from the cache), trace ids in logs and /explain, 400 for bad requests."""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetero_exporter.model import compact_json
from hetero_exporter.scoring import synthetic
from hetero_exporter.scoring.extender import Extender
from hetero_exporter.scoring.nodetable import NodeTable
from hetero_exporter.scoring.scorer import Scorer
from hetero_exporter.scoring.server import ExtenderServer

T0 = 1764400000.0
ANN = "hetero-exporter.io/devices"


def annotations() -> dict[str, str]:
    return {
        "hgx-busy": compact_json(synthetic.node("hgx-busy", "hgx-h100", time=T0, loads={0: .9, 1: .9, 2: .9, 3: .9})),
        "hgx-idle": compact_json(synthetic.node("hgx-idle", "hgx-h100", time=T0)),
        "hgx-stale": compact_json(synthetic.node("hgx-stale", "hgx-h100", time=T0 - 3600,
                                                 loads={0: .9, 1: .9, 2: .9, 3: .9})),
        "dgx1-old": compact_json(synthetic.node("dgx1-old", "dgx1-v100", time=T0, health={2: "failed"})),
        "atlas": compact_json(synthetic.node("atlas", "atlas800-910b", time=T0)),
    }


def node_obj(name: str, text) -> dict:
    meta = {"name": name, "labels": {"kubernetes.io/hostname": name}}
    if text is not None:
        meta["annotations"] = {ANN: text}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta,
            "status": {"allocatable": {"nvidia.com/gpu": "8"}}}


def pod(resources=None, request=None) -> dict:
    meta = {"name": "trainer", "namespace": "ml", "uid": "u1"}
    if request is not None:
        meta["annotations"] = {"hetero-exporter.io/request": json.dumps(request)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "resources": {"limits": resources or {"nvidia.com/gpu": 4}}}]}}


class Client:
    def __init__(self, address):
        self.conn = http.client.HTTPConnection(*address, timeout=30)

    def post(self, path: str, body) -> tuple[int, dict, object]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        r = self.conn.getresponse()
        return r.status, dict(r.getheaders()), json.loads(r.read())

    def get(self, path: str) -> tuple[int, bytes]:
        self.conn.request("GET", path)
        r = self.conn.getresponse()
        return r.status, r.read()


@pytest.fixture
def service():
    scorer = Scorer("binpack")
    table = NodeTable(scorer)
    table.replace(annotations())
    ext = Extender(scorer, table, clock=lambda: T0 + 30)
    server = ExtenderServer(("127.0.0.1", 0), ext).start()
    try:
        yield Client(server.address), ext, table
    finally:
        server.stop()


@pytest.fixture
def nodes_only():
    ext = Extender(Scorer(), None, clock=lambda: T0 + 30)
    server = ExtenderServer(("127.0.0.1", 0), ext).start()
    try:
        yield Client(server.address), ext
    finally:
        server.stop()


def node_list(names=None) -> dict:
    anns = annotations()
    return {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "42"},
            "items": [node_obj(n, anns[n]) for n in (names or anns)] + [node_obj("cpu-1", None)]}


# --------------------------------------------------------------------------- nodes in the request

def test_filter_with_nodes_in_the_request(nodes_only):
    client, _ = nodes_only
    status, headers, result = client.post("/filter", {"Pod": pod(), "Nodes": node_list(), "NodeNames": None})
    assert status == 200 and result["Error"] == "" and result["NodeNames"] is None
    passed = [n["metadata"]["name"] for n in result["Nodes"]["items"]]
    assert passed == ["hgx-busy", "hgx-idle", "hgx-stale", "dgx1-old"]
    assert result["Nodes"]["items"][0] == node_obj("hgx-busy", annotations()["hgx-busy"])  # echoed whole
    assert result["Nodes"]["kind"] == "NodeList"
    failed = result["FailedNodes"]
    assert set(failed) == {"atlas", "cpu-1"}
    assert "no nvidia.com/gpu devices here" in failed["atlas"]
    assert "no hetero-exporter.io/devices annotation" in failed["cpu-1"]
    assert result["FailedAndUnresolvableNodes"] == failed
    assert len(headers["X-Trace-Id"].partition("-")[0]) == 16  # then "-<replica>" (scoring/trace.py)


def test_prioritize_with_nodes_in_the_request(nodes_only):
    client, _ = nodes_only
    status, _, result = client.post("/prioritize", {"Pod": pod(), "Nodes": node_list()})
    assert status == 200
    scores = {r["Host"]: r["Score"] for r in result}
    assert list(scores) == ["hgx-busy", "hgx-idle", "hgx-stale", "dgx1-old", "atlas", "cpu-1"]
    assert all(isinstance(s, int) and 0 <= s <= 10 for s in scores.values())
    assert scores["hgx-busy"] == max(scores.values())  # binpack
    assert scores["hgx-stale"] < scores["hgx-busy"]  # same hardware and load, an hour old
    assert scores["atlas"] == scores["cpu-1"] == 0


def test_unchanged_annotations_are_decoded_once(nodes_only):
    client, ext = nodes_only
    client.post("/filter", {"Pod": pod(), "Nodes": node_list()})
    before = ext.decoded.get("hgx-idle")
    client.post("/prioritize", {"Pod": pod(), "Nodes": node_list()})
    assert ext.decoded.get("hgx-idle") is before
    changed = node_list()
    changed["items"][1]["metadata"]["annotations"][ANN] = compact_json(
        synthetic.node("hgx-idle", "hgx-h100", time=T0, health={0: "failed"}))
    client.post("/filter", {"Pod": pod(), "Nodes": changed})
    assert ext.decoded.get("hgx-idle") is not before


def test_node_names_without_a_cache_is_a_clear_400(nodes_only):
    client, _ = nodes_only
    status, _, result = client.post("/filter", {"Pod": pod(), "NodeNames": ["hgx-idle"]})
    assert status == 400
    assert "nodes-in-request mode only" in result["Error"] and "nodeCacheCapable: false" in result["Error"]


# --------------------------------------------------------------------------- node names from the cache

def test_filter_and_prioritize_with_node_names(service):
    client, _, _ = service
    names = ["hgx-busy", "hgx-idle", "hgx-stale", "dgx1-old", "atlas", "unknown-node"]
    status, _, result = client.post("/filter", {"Pod": pod(), "Nodes": None, "NodeNames": names})
    assert status == 200 and result["Nodes"] is None
    assert result["NodeNames"] == ["hgx-busy", "hgx-idle", "hgx-stale", "dgx1-old"]
    assert "not in the extender's node cache" in result["FailedNodes"]["unknown-node"]
    status, _, prio = client.post("/prioritize", {"Pod": pod(), "NodeNames": names})
    assert status == 200 and [p["Host"] for p in prio] == names
    scores = {p["Host"]: p["Score"] for p in prio}
    assert scores["hgx-busy"] > scores["hgx-idle"] > 0 and scores["unknown-node"] == 0


def test_both_modes_agree(service, nodes_only):
    cached, _, _ = service
    inline, _ = nodes_only
    names = list(annotations())
    _, _, a = cached.post("/prioritize", {"Pod": pod(request={"policy": "spread"}), "NodeNames": names})
    _, _, b = inline.post("/prioritize", {"Pod": pod(request={"policy": "spread"}), "Nodes": node_list(names)})
    assert a == b[:len(names)]


def test_go_field_names_match_case_insensitively(service):
    client, _, _ = service
    status, _, result = client.post("/filter", {"pod": pod(), "nodenames": ["hgx-idle", "atlas"]})
    assert status == 200 and result["NodeNames"] == ["hgx-idle"]


def test_a_pod_without_accelerators_passes_everywhere(service):
    client, _, _ = service
    status, _, result = client.post("/filter", {"Pod": pod({"cpu": "1"}), "NodeNames": ["atlas", "nowhere"]})
    assert status == 200 and result["NodeNames"] == ["atlas", "nowhere"] and result["FailedNodes"] == {}


def test_unreadable_pod_request_fails_every_node_with_the_reason(service):
    client, _, _ = service
    status, _, result = client.post("/filter", {"Pod": pod(request={"count": "four"}), "NodeNames": ["hgx-idle"]})
    assert status == 200 and result["NodeNames"] == []
    assert result["FailedNodes"]["hgx-idle"].startswith("pod request unreadable: metadata.annotations")


# --------------------------------------------------------------------------- trace ids and /explain

def test_trace_id_in_logs_and_explain(service, caplog):
    client, _, _ = service
    caplog.set_level(logging.INFO, logger="hetero_exporter.scoring")
    status, headers, _ = client.post("/filter", {"Pod": pod({"nvidia.com/gpu": 4}, {"min_driver_version": "550"}),
                                                 "NodeNames": ["hgx-idle", "dgx1-old", "atlas"]})
    trace = headers["X-Trace-Id"]
    lines = [r for r in caplog.records if getattr(r, "trace", None) == trace]
    assert lines and lines[0].getMessage() == "filter" and lines[0].pod == "ml/trainer"
    status, body = client.get(f"/explain?trace={trace}")
    doc = json.loads(body)
    assert status == 200 and doc["trace"] == trace and doc["verb"] == "filter" and doc["mode"] == "names"
    assert doc["pod"] == "ml/trainer" and doc["request"] == "4 x nvidia.com/gpu, driver >= 550"
    rows = {r["node"]: r for r in doc["nodes"]}
    assert doc["nodes"][0]["node"] == "hgx-idle" and rows["hgx-idle"]["feasible"]
    assert [d["index"] for d in rows["hgx-idle"]["devices"]] == [0, 1, 2, 3]
    assert set(rows["hgx-idle"]["parts"]) >= {"topology", "fill", "idle", "health", "cost", "affinity"}
    assert rows["hgx-idle"]["confidence"] == 1.0 and rows["hgx-idle"]["age_seconds"] == 30.0
    assert "driver 535.104.05 older than required 550" in rows["dgx1-old"]["reason"]
    assert "failed: #2" in rows["dgx1-old"]["reason"]
    status, body = client.get("/explain")
    assert status == 200 and json.loads(body)["traces"][0]["trace"] == trace
    status, body = client.get("/explain?trace=0000")
    assert status == 404 and b"no trace" in body


def test_explain_keeps_the_most_recent_traces():
    ext = Extender(Scorer(), None, traces=2, clock=lambda: T0)
    body = json.dumps({"Pod": pod(), "Nodes": node_list(["atlas"])}).encode()
    for t in ("a", "b", "c"):
        ext.filter(body, t)
    assert ext.explain("a") is None and ext.explain("c")["trace"] == "c"
    assert [t["trace"] for t in ext.explain(None)["traces"]] == ["c", "b"]


# --------------------------------------------------------------------------- bad requests

@pytest.mark.parametrize("body, message", [
    (b"{not json", "body is not JSON"),
    (b"[]", "expected ExtenderArgs"),
    (b"{}", "ExtenderArgs.Pod is missing"),
    (json.dumps({"Pod": pod()}).encode(), "neither Nodes nor NodeNames"),
    (json.dumps({"Pod": pod(), "NodeNames": "hgx-idle"}).encode(), "must be a list of node names"),
    (json.dumps({"Pod": pod(), "Nodes": {"items": "x"}}).encode(), "NodeList object with an items list"),
    (json.dumps({"Pod": pod(), "Nodes": {"items": [{"metadata": {}}]}}).encode(), "items[0] has no metadata.name"),
    (b"\xff\xfe", "body is not JSON"),
])
def test_bad_requests_get_400_with_a_clear_message(service, body, message):
    client, _, _ = service
    for verb in ("/filter", "/prioritize"):
        status, headers, result = client.post(verb, body)
        assert status == 400 and message in result["Error"] and result["Trace"] == headers["X-Trace-Id"]
        assert "Traceback" not in result["Error"]


def test_unknown_paths_and_missing_length(service):
    client, _, _ = service
    status, _, result = client.post("/bind", {"Pod": pod()})
    assert status == 404 and "POST /filter or /prioritize" in result["Error"]
    conn = http.client.HTTPConnection(*client.conn.sock.getpeername()[:2], timeout=10)
    conn.putrequest("POST", "/filter")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    conn.send(b"2\r\n{}\r\n0\r\n\r\n")
    r = conn.getresponse()
    assert r.status == 400 and b"Content-Length header is required" in r.read()


def test_health_endpoints():
    ext = Extender(Scorer(), NodeTable(Scorer()))
    ready = {"v": False}
    server = ExtenderServer(("127.0.0.1", 0), ext, ready=lambda: ready["v"]).start()
    try:
        client = Client(server.address)
        assert client.get("/healthz") == (200, b"ok\n")
        assert client.get("/readyz")[0] == 503
        ready["v"] = True
        assert client.get("/readyz") == (200, b"ready\n")
    finally:
        server.stop()


def test_scoring_calls_run_one_at_a_time_and_the_probes_pass_them():
    """/filter and /prioritize run on one thread of their own, one at a time (four at once under
    one GIL only contend for it: BENCHMARKS.md "Extender at fleet size"); a probe is not queued
    behind them."""
    scorer = Scorer("binpack")
    table = NodeTable(scorer)
    table.replace(annotations())
    ext = Extender(scorer, table, clock=lambda: T0 + 30)
    server = ExtenderServer(("127.0.0.1", 0), ext).start()
    gate, entered = threading.Event(), threading.Semaphore(0)
    lock = threading.Lock()
    running, most, seen = [0], [0], []
    real = ext.filter_json

    def held(body: bytes):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            seen.append(json.loads(body)["Pod"]["metadata"]["uid"])
        entered.release()
        gate.wait(60)
        try:
            return real(body)
        finally:
            with lock:
                running[0] -= 1

    ext.filter_json = held
    answers: dict[str, int] = {}

    def call(uid: str) -> None:
        body = {"Pod": {**pod(), "metadata": {**pod()["metadata"], "uid": uid}}, "NodeNames": ["hgx-idle"]}
        answers[uid] = Client(server.address).post("/filter", body)[0]

    threads = [threading.Thread(target=call, args=(uid,)) for uid in ("u0", "u1", "u2", "u3")]
    try:
        threads[0].start()
        assert entered.acquire(timeout=60)  # u0 is being scored: it holds the lane
        for t in threads[1:]:
            t.start()
        lane = server._http._serial._work_queue  # the three others wait there, not in the handler
        deadline = time.monotonic() + 60
        while lane.qsize() < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lane.qsize() == 3 and seen == ["u0"]
        assert Client(server.address).get("/healthz") == (200, b"ok\n")  # answered while the lane is held
        gate.set()
        for t in threads:
            t.join(60)
    finally:
        gate.set()
        server.stop()
    assert answers == {"u0": 200, "u1": 200, "u2": 200, "u3": 200}
    assert most[0] == 1 and seen[0] == "u0" and sorted(seen) == ["u0", "u1", "u2", "u3"]


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=6),
                     lambda i: st.lists(i, max_size=3) | st.dictionaries(
                         st.sampled_from(["Pod", "Nodes", "NodeNames", "items", "metadata", "name", "spec",
                                          "annotations", "containers", "resources", "limits", "nvidia.com/gpu", "x"]),
                         i, max_size=4), max_leaves=15)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=_json)
def test_any_body_is_answered_200_or_400_never_500(service, doc):
    client, _, _ = service
    for verb in ("/filter", "/prioritize"):
        status, _, result = client.post(verb, json.dumps(doc).encode())
        assert status in (200, 400), result
