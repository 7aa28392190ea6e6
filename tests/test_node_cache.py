"""The watch-backed node annotation cache with the real `kubernetes` client against the loopback
API server (tests/kubeapi.py): list, watch, delete, 410 re-list, failures; and the extender
process in both modes."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import time

import pytest

from kubeapi import NODES
from hetero_exporter.k8s.node_cache import K8sError, NodeCache, annotation_of, list_pages
from hetero_exporter.model import compact_json
from hetero_exporter.scoring import synthetic
from hetero_exporter.scoring.nodetable import NodeTable
from hetero_exporter.scoring.scorer import Scorer

ANN = "hetero-exporter.io/devices"
T0 = time.time()


def wait_until(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def text(name: str, **kw) -> str:
    return compact_json(synthetic.node(name, kw.pop("shape", "hgx-h100"), time=T0, **kw))


def set_annotation(api, name: str, value) -> None:
    def fn(node):
        anns = node["metadata"].setdefault("annotations", {})
        if value is None:
            anns.pop(ANN, None)
        else:
            anns[ANN] = value
    api.mutate_node(name, fn)


@pytest.fixture
def cache(kube_api):
    kube_api.seed_node("gpu-1", annotations={ANN: text("gpu-1")})
    kube_api.seed_node("gpu-2", annotations={ANN: text("gpu-2", health={0: "failed"})})
    kube_api.seed_node("cpu-1")
    table = NodeTable(Scorer())
    c = NodeCache(kube_api.api_client(), table, watch_seconds=2, request_timeout=5, backoff=(0.05, 0.2)).start()
    try:
        assert c.wait_synced(10)
        yield c, table, kube_api
    finally:
        c.close()


def test_list_loads_every_node(cache):
    c, table, _ = cache
    assert sorted(table.names()) == ["cpu-1", "gpu-1", "gpu-2"]
    assert table.synced.is_set() and c.lists == 1
    assert len(table.get("gpu-1").groups["nvidia.com/gpu"].devices) == 8
    assert len(table.get("gpu-2").groups["nvidia.com/gpu"].devices) == 7
    assert "no hetero-exporter.io/devices annotation" in table.get("cpu-1").error


def test_watch_follows_annotation_changes_adds_and_deletes(cache):
    c, table, api = cache
    set_annotation(api, "gpu-1", text("gpu-1", health={0: "failed", 1: "failed"}))
    assert wait_until(lambda: len(table.get("gpu-1").groups["nvidia.com/gpu"].devices) == 6)
    api.seed_node("gpu-3", annotations={ANN: text("gpu-3", shape="atlas800-910b")})
    assert wait_until(lambda: table.get("gpu-3") is not None)
    assert "huawei.com/Ascend910" in table.get("gpu-3").groups
    set_annotation(api, "gpu-2", "garbage")
    assert wait_until(lambda: (table.get("gpu-2").error or "").startswith("annotation unreadable"))
    api.delete(NODES, None, "cpu-1")
    assert wait_until(lambda: table.get("cpu-1") is None)
    assert c.lists == 1  # all by watch


def test_status_updates_without_annotation_change_keep_the_state(cache):
    c, table, api = cache
    before = table.get("gpu-1")
    api.mutate_node("gpu-1", lambda n: n["metadata"].setdefault("labels", {}).update({"touched": "yes"}))
    set_annotation(api, "gpu-2", text("gpu-2"))  # a change after it, to know the watch got there
    assert wait_until(lambda: len(table.get("gpu-2").groups["nvidia.com/gpu"].devices) == 8)
    assert table.get("gpu-1") is before


def test_expired_watch_lists_again(cache):
    c, table, api = cache
    lists = c.lists
    api.compact()
    api.close_watches()  # the watch resumes from a resourceVersion the server has forgotten: 410
    set_annotation(api, "gpu-1", text("gpu-1", health={3: "failed"}))
    api.compact()
    assert wait_until(lambda: c.lists > lists)
    assert wait_until(lambda: len(table.get("gpu-1").groups["nvidia.com/gpu"].devices) == 7)
    watches = [r for r in api.requests if r.query.get("watch") in ("true", "1", True)]
    assert any(r.status == 200 and r.query.get("resourceVersion") for r in watches)  # resumed, not from now


def test_api_failures_are_retried_and_the_cache_keeps_serving(kube_api):
    kube_api.seed_node("gpu-1", annotations={ANN: text("gpu-1")})
    kube_api.fail_next(2, 503, methods=["GET"], path="/api/v1/nodes$", watch=False)
    table = NodeTable(Scorer())
    c = NodeCache(kube_api.api_client(), table, watch_seconds=2, request_timeout=5, backoff=(0.05, 0.2)).start()
    try:
        assert c.wait_synced(10)
        assert table.get("gpu-1") is not None and c.lists == 1
        kube_api.fail_next(3, 500, methods=["GET"], path="/api/v1/nodes$")
        kube_api.close_watches()
        set_annotation(kube_api, "gpu-1", text("gpu-1", health={7: "failed"}))
        assert table.get("gpu-1") is not None  # still served while the API fails
        assert wait_until(lambda: len(table.get("gpu-1").groups["nvidia.com/gpu"].devices) == 7)
        injected = [r for r in kube_api.requests if r.injected]
        assert [r.status for r in injected] == [503, 503, 500, 500, 500]  # every failure was seen and retried
        assert c.lists >= 2
    finally:
        c.close()


def test_list_pages_follows_continue_tokens():
    pages = {None: {"metadata": {"continue": "p2", "resourceVersion": "10"}, "items": [{"a": 1}]},
             "p2": {"metadata": {"continue": "p3"}, "items": [{"a": 2}, "junk"]},
             "p3": {"metadata": {"resourceVersion": "10"}, "items": [{"a": 3}]}}
    seen = []

    def list_fn(timeout, **kw):
        seen.append(kw)
        return pages[kw.get("_continue")]
    items, rv = list_pages(list_fn, page_size=1, timeout=1.0, label_selector="gpu=yes")
    assert items == [{"a": 1}, {"a": 2}, {"a": 3}] and rv == "10"
    assert [k.get("_continue") for k in seen] == [None, "p2", "p3"]
    assert all(k["limit"] == 1 and k["label_selector"] == "gpu=yes" for k in seen)


def test_list_pages_is_bounded(monkeypatch):
    import hetero_exporter.k8s.node_cache as nc
    monkeypatch.setattr(nc, "MAX_PAGES", 3)
    with pytest.raises(K8sError, match="did not end after 3 pages"):
        list_pages(lambda timeout, **kw: {"metadata": {"continue": "again"}, "items": []}, page_size=1, timeout=1)


@pytest.mark.parametrize("node, expected", [
    ({"metadata": {"name": "n", "annotations": {ANN: "x"}}}, ("n", "x")),
    ({"metadata": {"name": "n", "annotations": {ANN: 5}}}, ("n", None)),
    ({"metadata": {"name": "n"}}, ("n", None)),
    ({"metadata": {}}, (None, None)),
    ("junk", (None, None)),
])
def test_annotation_of(node, expected):
    assert annotation_of(node) == expected


# --------------------------------------------------------------------------- the extender process

def _start(args, env=None):
    proc = subprocess.Popen([sys.executable, "-m", "hetero_exporter", "scheduler-extender",
                             "--listen", "127.0.0.1:0", "--log-format", "json", *args],
                            stderr=subprocess.PIPE, text=True, env=env)
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if '"scheduler extender serving"' in line:
            port = int(re.search(r'"listen": "127\.0\.0\.1:(\d+)"', line).group(1))
            return proc, port, lines
    proc.kill()
    raise AssertionError("extender did not start: " + "".join(lines))


def _post(port, path, doc):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", path, body=json.dumps(doc).encode(), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def _stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
    assert proc.returncode == 0


POD = {"metadata": {"name": "p", "namespace": "ml"},
       "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}


def test_extender_process_with_a_kubeconfig_serves_node_names(kube_api, tmp_path):
    kube_api.seed_node("gpu-1", annotations={ANN: text("gpu-1")})
    kube_api.seed_node("gpu-2", annotations={ANN: text("gpu-2", health={0: "failed"})})
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "kubeconfig")
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    proc, port, lines = _start(["--kubeconfig", kubeconfig], env)
    try:
        assert "node names (nodeCacheCapable)" in lines[-1]

        def ready():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        assert wait_until(ready, 30)
        status, result = _post(port, "/filter", {"Pod": POD, "NodeNames": ["gpu-1", "gpu-2"]})
        assert status == 200 and result["NodeNames"] == ["gpu-1"]
        assert "needs 8 x nvidia.com/gpu, 7 usable of 8: failed: #0" in result["FailedNodes"]["gpu-2"]
    finally:
        _stop(proc)


def test_extender_process_without_cluster_access_says_so(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    proc, port, lines = _start([], env)
    try:
        start_log = "".join(lines)
        assert "serving the nodes-in-request mode only" in start_log
        assert "nodes in the request only (register with nodeCacheCapable: false)" in start_log
        status, result = _post(port, "/filter", {"Pod": POD, "NodeNames": ["gpu-1"]})
        assert status == 400 and "nodes-in-request mode only" in result["Error"]
        node = {"metadata": {"name": "gpu-1", "annotations": {ANN: text("gpu-1")}}}
        status, result = _post(port, "/prioritize", {"Pod": POD, "Nodes": {"items": [node]}})
        assert status == 200 and result == [{"Host": "gpu-1", "Score": result[0]["Score"]}]
        assert result[0]["Score"] > 0
    finally:
        _stop(proc)
