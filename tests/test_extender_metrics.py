"""The extender's own /metrics: calls and latency per verb, decisions by a bounded reason, cache
size and age, annotation decode errors; the optional metrics-only port."""

from __future__ import annotations

import http.client
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hetero_exporter import cli
from hetero_exporter.scoring import metrics as m
from hetero_exporter.scoring.extender import Extender
from hetero_exporter.scoring.scorer import Scorer
from hetero_exporter.scoring.server import ExtenderServer
from test_extender import ANN, T0, Client, annotations, node_obj, pod


def samples(text: str) -> dict[tuple, float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape(address) -> dict[tuple, float]:
    conn = http.client.HTTPConnection(*address, timeout=10)
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Type").startswith("text/plain")
    return samples(r.read().decode())


@pytest.fixture
def served():
    scorer = Scorer("binpack")
    metrics = m.ExtenderMetrics()
    table = metrics.node_table(scorer, ANN)
    table.replace(annotations())
    ext = Extender(scorer, table, clock=lambda: T0 + 30, metrics=metrics, replica="r")
    server = ExtenderServer(("127.0.0.1", 0), ext, metrics_address=("127.0.0.1", 0)).start()
    try:
        yield server, Client(server.address)
    finally:
        server.stop()


def test_calls_latency_and_decisions_by_reason(served):
    server, client = served
    names = ["hgx-busy", "hgx-idle", "atlas", "nowhere"]
    assert client.post("/filter", {"Pod": pod(), "NodeNames": names})[0] == 200
    assert client.post("/prioritize", {"Pod": pod(), "NodeNames": names})[0] == 200
    assert client.post("/filter", b"[]")[0] == 400
    unreadable = pod(request={"count": "many"})
    assert client.post("/filter", {"Pod": unreadable, "NodeNames": names[:2]})[0] == 200
    assert client.get("/explain?trace=nope")[0] == 404
    got = scrape(server.address)
    assert got[("accelerator_extender_requests_total", (("code", "200"), ("verb", "filter")))] == 2
    assert got[("accelerator_extender_requests_total", (("code", "400"), ("verb", "filter")))] == 1
    assert got[("accelerator_extender_requests_total", (("code", "404"), ("verb", "explain")))] == 1
    assert got[("accelerator_extender_request_duration_seconds_count", (("verb", "prioritize"),))] == 1
    assert got[("accelerator_extender_request_duration_seconds_bucket", (("le", "+Inf"), ("verb", "filter")))] == 3

    def decisions(verb, result, reason):
        return got.get(("accelerator_extender_decisions_total",
                        (("reason", reason), ("result", result), ("verb", verb))), 0)
    assert decisions("filter", "feasible", "fit") == 2  # hgx-busy, hgx-idle
    assert decisions("filter", "infeasible", "unfit") == 1  # atlas: no NVIDIA devices
    assert decisions("filter", "infeasible", "not-cached") == 1
    assert decisions("filter", "infeasible", "request-unreadable") == 2
    assert decisions("prioritize", "feasible", "fit") == 2
    reasons = {dict(labels)["reason"] for name, labels in got if name == "accelerator_extender_decisions_total"}
    assert reasons <= set(m.REASONS)  # a bounded label: never the reason text
    assert got[("accelerator_extender_nodes_cached", (("cache", "watch"),))] == len(annotations())
    age = got[("accelerator_extender_cache_age_seconds", (("cache", "watch"),))]
    assert age == 30  # the synthetic annotations are written at T0 (one at T0 - 3600): the median
    assert ("accelerator_extender_cache_age_seconds", (("cache", "request"),)) not in got  # none cached: absent


def test_annotation_errors_count_each_unreadable_text_once():
    ext = Extender(Scorer(), None, replica="r")

    def call(text):
        body = {"Pod": pod(), "Nodes": {"items": [node_obj("n1", text), node_obj("n2", None)]}}
        ext.prioritize(json.dumps(body).encode())

    for text in ("{not json", "{not json", '{"schema": 99}', annotations()["atlas"]):
        call(text)
    got = samples(ext.metrics.render()[0].decode())
    assert got[("accelerator_extender_annotation_errors_total", ())] == 2  # n2 has none: not an error
    assert got[("accelerator_extender_nodes_cached", (("cache", "request"),))] == 2
    assert got[("accelerator_extender_decisions_total", (("reason", "annotation-error"), ("result", "infeasible"),
                                                          ("verb", "prioritize")))] == 7


def test_the_metrics_port_serves_metrics_and_probes_only(served):
    server, _ = served
    conn = http.client.HTTPConnection(*server.metrics_http.address, timeout=10)
    for path, status in (("/metrics", 200), ("/healthz", 200), ("/readyz", 200), ("/explain", 404)):
        conn.request("GET", path)
        r = conn.getresponse()
        r.read()
        assert r.status == status, path
    conn.request("POST", "/filter", body=b"{}", headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 404 and b"/metrics" in r.read()


def test_a_bad_metrics_listen_flag_exits_2(capsys):
    assert cli.main(["scheduler-extender", "--metrics-listen", "nowhere"]) == 2
    assert "--metrics-listen expects HOST:PORT" in capsys.readouterr().err
