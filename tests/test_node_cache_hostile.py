"""The watch-backed node cache with hostile annotations (issue 18): a node whose annotation is
deep, NaN, of hundreds of devices or anything else fails alone, with its reason; the others are
listed and watched, the cache syncs (/readyz 200 after a restart) and keeps following changes."""

from __future__ import annotations

import contextlib
import http.client
import json

import pytest

from test_extender_hostile import DEEP, SPARSE_256
from test_node_cache import ANN, set_annotation, text, wait_until
from hetero_exporter.k8s.node_cache import K8sError, NodeCache, list_pages
from hetero_exporter.scoring.extender import Extender
from hetero_exporter.scoring.nodetable import NodeTable
from hetero_exporter.scoring.scorer import Scorer
from hetero_exporter.scoring.server import ExtenderServer

BAD = {"deep": DEEP, "nan": '{"schema": NaN}', "inf": '{"schema": Infinity}',
       "digits": '{"schema": ' + "1" * 5000 + "}", "wide": SPARSE_256}
POD = {"metadata": {"name": "p", "namespace": "ml"},
       "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 4}}}]}}


@contextlib.contextmanager
def synced(api, annotations: dict, sink=None):
    """A started node cache over nodes seeded with ``annotations``, once its first list is in."""
    for name, value in annotations.items():
        api.seed_node(name, annotations={ANN: value})
    table = sink or NodeTable(Scorer())
    cache = NodeCache(api.api_client(), table, watch_seconds=2, request_timeout=5, backoff=(0.05, 0.2)).start()
    try:
        assert cache.wait_synced(10)
        yield cache, table
    finally:
        cache.close()


def test_bad_annotations_at_list_time_fail_alone_and_the_cache_syncs(kube_api):
    with synced(kube_api, {"gpu-1": text("gpu-1"), **BAD}) as (cache, table):
        server = ExtenderServer(("127.0.0.1", 0), Extender(Scorer(), table), ready=table.synced.is_set).start()
        try:
            _serves_the_good_node(server, cache)
            kube_api.seed_node("late", annotations={ANN: text("late")})  # new nodes still come in
            assert wait_until(lambda: table.get("late") is not None and not table.get("late").error)
        finally:
            server.stop()


def _serves_the_good_node(server, cache) -> None:
    assert cache.lists == 1
    conn = http.client.HTTPConnection(*server.address, timeout=30)
    conn.request("GET", "/readyz")
    assert conn.getresponse().read() == b"ready\n"
    conn.request("POST", "/filter", body=json.dumps({"Pod": POD, "NodeNames": ["gpu-1", *BAD]}).encode())
    r = conn.getresponse()
    result = json.loads(r.read())
    assert r.status == 200 and result["NodeNames"] == ["gpu-1"]
    assert set(result["FailedNodes"]) == set(BAD)
    assert all(why.startswith("annotation unreadable: ") for why in result["FailedNodes"].values())
    assert "nested deeper than 64 levels" in result["FailedNodes"]["deep"]
    assert "256 whole devices, over the 64" in result["FailedNodes"]["wide"]


def test_a_bad_annotation_by_watch_does_not_stop_the_others(kube_api):
    with synced(kube_api, {"gpu-1": text("gpu-1"), "gpu-2": text("gpu-2")}) as (cache, table):
        for value in BAD.values():
            set_annotation(kube_api, "gpu-2", value)
            assert wait_until(lambda: (table.get("gpu-2").error or "").startswith("annotation unreadable"))
            set_annotation(kube_api, "gpu-2", text("gpu-2"))
            assert wait_until(lambda: table.get("gpu-2").error is None)
        set_annotation(kube_api, "gpu-2", DEEP)
        set_annotation(kube_api, "gpu-1", text("gpu-1", health={5: "failed"}))
        assert wait_until(lambda: len(table.get("gpu-1").groups["nvidia.com/gpu"].devices) == 7)
        assert "nested deeper" in table.get("gpu-2").error
        assert cache.lists == 1 and cache.error is None  # all by watch: no failure, no re-list


class FlakySink(NodeTable):
    """A sink that fails on one node's updates (a bug in a sink, not in the annotation)."""

    def update(self, name, text):
        if name == "boom":
            raise RuntimeError("sink bug")
        super().update(name, text)


def test_a_sink_failing_on_one_node_costs_that_node_only(kube_api):
    with synced(kube_api, {"boom": text("boom"), "gpu-1": text("gpu-1")}, FlakySink(Scorer())) as (cache, table):
        set_annotation(kube_api, "boom", text("boom", health={0: "failed"}))
        set_annotation(kube_api, "gpu-1", text("gpu-1", health={0: "failed"}))
        assert wait_until(lambda: len(table.get("gpu-1").groups["nvidia.com/gpu"].devices) == 7)
        assert cache.lists == 1 and cache.error is None  # the watch went on: no failure, no re-list


@pytest.mark.parametrize("page", [[], "junk", {"items": "x"}, {"items": [], "metadata": []}])
def test_a_list_page_that_is_not_a_node_list_is_an_api_error(page):
    with pytest.raises(K8sError, match="not a NodeList"):
        list_pages(lambda timeout, **kw: page, page_size=1, timeout=1)


def test_odd_list_metadata_is_ignored():
    items, rv = list_pages(lambda timeout, **kw: {"items": [{"a": 1}], "metadata": {"resourceVersion": {"x": 1},
                                                                                      "continue": 5}},
                           page_size=1, timeout=1)
    assert items == [{"a": 1}] and rv is None
