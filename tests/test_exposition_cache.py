"""The /metrics body of an unchanged snapshot is rendered once: same bytes as prometheus_client's
own rendering, new bytes for a new snapshot or a changed extra, gzip and OpenMetrics intact."""

from __future__ import annotations

import dataclasses
import gzip
import http.client

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from test_exposition import golden_snapshot
from hetero_exporter.exposition import cache as cache_mod
from hetero_exporter.exposition import openmetrics as om_mod
from hetero_exporter.exposition.cache import Exposition, negotiate
from hetero_exporter.exposition.collector import SnapshotCollector
from hetero_exporter.exposition.server import MetricsServer

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


class Extra:
    """A collector beside the snapshot one (as the health actions counter is)."""

    def __init__(self):
        self.value = 1.0

    def describe(self):
        return []

    def collect(self):
        yield CounterMetricFamily("accelerator_test_extra", "An extra counter.", value=self.value)


@pytest.fixture
def node():
    state = {"snap": golden_snapshot(), "now": 1764400005.0}
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: state["snap"], clock=lambda: state["now"]))
    extra = Extra()
    reg.register(extra)
    return state, reg, extra


def body(expo: Exposition, accept=None, gz=False) -> bytes:
    chunks, _, gzipped = expo.render(accept, gz)
    data = b"".join(chunks)
    return gzip.decompress(data) if gzipped else data


def test_two_scrapes_of_one_snapshot_render_it_once(node):
    _, reg, _ = node
    expo = Exposition(reg)
    first, second = body(expo), body(expo)
    assert first == second == generate_latest(reg)
    assert expo.renders == 1


def test_a_new_snapshot_or_a_changed_extra_changes_the_body(node):
    state, reg, extra = node
    expo = Exposition(reg)
    before = body(expo)
    extra.value = 2.0  # an extra changes: same snapshot part, new tail
    changed = body(expo)
    assert changed != before and b"accelerator_test_extra_total 2.0" in changed and expo.renders == 1
    state["now"] += 60  # the age gauge is rendered per scrape
    assert b"accelerator_snapshot_age_seconds 65.0" in body(expo) and expo.renders == 1
    gpu = state["snap"].devices[0]
    state["snap"] = dataclasses.replace(state["snap"], devices=(dataclasses.replace(gpu, processes=()),)
                                        + state["snap"].devices[1:])
    fresh = body(expo)
    assert expo.renders == 2 and b'pid="4242"' in before and b'pid="4242"' not in fresh
    assert fresh == generate_latest(reg)


def test_gzip_and_openmetrics_bodies_are_whole(node):
    state, reg, extra = node
    expo = Exposition(reg)
    for accept, reference in ((None, generate_latest), (OPENMETRICS, openmetrics_latest)):
        for _ in range(3):  # the first builds the gzip prefix, the others reuse it
            extra.value += 1
            state["now"] += 1
            plain, zipped = body(expo, accept), body(expo, accept, gz=True)
            with om_mod.rendering(accept is not None):  # as the cache collects for OpenMetrics
                assert plain == zipped == reference(reg)
    om = body(expo, OPENMETRICS)
    assert om.count(b"# EOF") == 1 and om.endswith(b"# EOF\n")
    assert expo.renders == 2  # one per format


def test_a_small_body_is_not_gzipped():
    reg = CollectorRegistry(auto_describe=False)
    reg.register(Extra())
    chunks, _, gzipped = Exposition(reg).render(None, True)
    assert not gzipped and b"".join(chunks) == generate_latest(reg)


@pytest.mark.parametrize("accept, expected", [
    (None, "text/plain; version=0.0.4"),
    ("text/plain;version=zz", "text/plain; version=0.0.4"),
    ("text/plain;version=1.0.0.0.0", "text/plain; version=0.0.4"),
    ("application/openmetrics-text;version=9.9.9", "text/plain; version=0.0.4"),
    ("application/openmetrics-text;version=x,text/plain;version=0.0.4", "text/plain; version=0.0.4"),
    ("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5", "application/openmetrics-text"),
    ("application/openmetrics-text", "application/openmetrics-text"),
    ("*/*", "text/plain; version=0.0.4"),
])
def test_negotiation_never_fails(accept, expected):
    _, ctype = negotiate(accept)
    assert ctype.startswith(expected)


def test_the_server_serves_cached_bytes_and_gzip(node):
    state, reg, _ = node
    srv = MetricsServer("127.0.0.1:0", reg, lambda: state["snap"]).start()
    try:
        conn = http.client.HTTPConnection(*srv.address, timeout=10)
        bodies = []
        for encoding in ("identity", "gzip", "gzip;q=0", "gzip"):
            conn.request("GET", "/metrics", headers={"Accept-Encoding": encoding})
            r = conn.getresponse()
            data = r.read()
            gzipped = r.getheader("Content-Encoding") == "gzip"
            assert gzipped == (encoding == "gzip")
            bodies.append(gzip.decompress(data) if gzipped else data)
        assert len(set(bodies)) == 1 and srv.exposition.renders == 1
        conn.request("GET", "/snapshot", headers={"Accept-Encoding": "gzip"})
        r = conn.getresponse()
        assert b'"schema": 1' in gzip.decompress(r.read())
    finally:
        srv.stop()


def test_gzip_prefix_is_one_valid_member():
    prefix = cache_mod._GzipPrefix(b"a" * 5000 + b"b" * 100)
    for tail in (b"", b"tail\n", b"x" * 70000):
        member = b"".join(prefix.finish(tail))
        assert gzip.decompress(member) == b"a" * 5000 + b"b" * 100 + tail


def test_the_server_negotiates_openmetrics_and_gzips_both_formats(node):
    """Prometheus' Accept gets OpenMetrics (gzipped when asked), no Accept the text format; each
    format's snapshot part is rendered once however the scrapes interleave."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
    state, reg, _ = node
    srv = MetricsServer("127.0.0.1:0", reg, lambda: state["snap"]).start()
    try:
        conn = http.client.HTTPConnection(*srv.address, timeout=10)
        got = {}
        for accept in (None, OPENMETRICS, None, OPENMETRICS):
            for encoding in ("identity", "gzip"):
                headers = {"Accept-Encoding": encoding, **({"Accept": accept} if accept else {})}
                conn.request("GET", "/metrics", headers=headers)
                r = conn.getresponse()
                data = r.read()
                assert (r.getheader("Content-Encoding") == "gzip") == (encoding == "gzip")
                assert "Accept" in r.getheader("Vary")
                got.setdefault(r.getheader("Content-Type"), set()).add(
                    gzip.decompress(data) if encoding == "gzip" else data)
        kinds = {ctype.split(";")[0]: bodies for ctype, bodies in got.items()}
        assert sorted(kinds) == ["application/openmetrics-text", "text/plain"]
        assert all(len(bodies) == 1 for bodies in got.values()) and srv.exposition.renders == 2
        om = kinds["application/openmetrics-text"].pop()
        assert om.endswith(b"# EOF\n") and om.count(b"# EOF") == 1 and b"_created" in om
        assert list(text_string_to_metric_families(om.decode()))  # strict parser: a valid exposition
        assert b"_created" not in kinds["text/plain"].pop()
    finally:
        srv.stop()
