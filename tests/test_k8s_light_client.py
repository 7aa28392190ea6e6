"""k8s/api.py: the agent's Kubernetes calls go to REST paths through the client's ApiClient, not
through the generated API classes (``CoreV1Api`` imports every core/v1 model class, ~21 MiB of
RSS; issue 16), and the API server sees the same requests as before.

GOLDEN was recorded from the code before the change (CoreV1Api methods and kubernetes.watch,
client 37.0.2) with tests/kubeapi.py. One difference, on purpose: Event timestamps. The old
``create_namespaced_event`` ran the dict through pydantic's ``CoreV1Event`` and re-serialized
``2023-11-14T22:13:20Z`` as ``2023-11-14T22:13:20+00:00``; the body events.py builds is now sent
as it is (as the older "python-legacy" clients sent it; both are RFC 3339, the Z form is the API
server's own)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")

from hetero_exporter.k8s import api as k8s_api  # noqa: E402
from hetero_exporter.k8s.api import Api, WatchExpired, WatchStream  # noqa: E402
from hetero_exporter.k8s.client import K8sError, connect  # noqa: E402
from hetero_exporter.k8s.events import Events, NodeEvent, body as event_body  # noqa: E402
from hetero_exporter.k8s.node_cache import NodeCache  # noqa: E402
from hetero_exporter.k8s.nodes import Nodes  # noqa: E402
from hetero_exporter.k8s.pods import PodCache  # noqa: E402

SMP = "application/strategic-merge-patch+json"
TAINT = {"key": "k", "effect": "NoSchedule"}
EVENT = NodeEvent(name="n1.abc", type="Warning", reason="Xid", message="m", time=1.7e9)
# (step, method, request target as sent, Content-Type, status); {rv}: the list's resourceVersion
GOLDEN = [
    ("pod-cache", "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", None, 200),
    ("pod-cache", "GET", "/api/v1/pods?allowWatchBookmarks=true&fieldSelector=spec.nodeName%3Dn1"
                         "&resourceVersion={rv}&timeoutSeconds=5&watch=true", None, 200),
    ("node-cache", "GET", "/api/v1/nodes?labelSelector=role%3Dgpu&limit=1", None, 200),
    ("node-cache", "GET", "/api/v1/nodes?allowWatchBookmarks=true&labelSelector=role%3Dgpu"
                          "&resourceVersion={rv}&timeoutSeconds=5&watch=true", None, 200),
    ("get", "GET", "/api/v1/nodes/n1", None, 200),
    ("get-absent", "GET", "/api/v1/nodes/absent", None, 404),
    ("list", "GET", "/api/v1/nodes", None, 200),
    ("list-selector", "GET", "/api/v1/nodes?labelSelector=role%3Dgpu", None, 200),
    ("patch", "PATCH", "/api/v1/nodes/n1", SMP, 200),
    ("patch-rv-conflict", "PATCH", "/api/v1/nodes/n1", SMP, 409),
    ("patch-dry-run", "PATCH", "/api/v1/nodes/n1?dryRun=All", SMP, 200),
    ("patch-status", "PATCH", "/api/v1/nodes/n1/status", SMP, 200),
    ("event", "POST", "/api/v1/namespaces/default/events", None, 201),
    ("event-again", "POST", "/api/v1/namespaces/default/events", None, 409),
]


class NullSink:
    def replace(self, items): pass
    def update(self, name, text): pass
    def remove(self, name): pass


def wait_until(pred, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not pred():
        time.sleep(0.01)
    return pred()


def watches(api) -> int:
    return sum(1 for r in api.requests if r.query.get("watch"))


def test_requests_are_the_ones_the_generated_client_sent(kube_api, tmp_path):
    kube_api.seed_node("n1", labels={"role": "gpu"})
    kube_api.seed_node("n2")
    kube_api.seed_pod("ml", "p1", "n1", uid="u1")
    rv = kube_api.resource_version
    cluster = connect(kube_api.write_kubeconfig(tmp_path / "kc"), env={})
    steps: list[tuple[str, int]] = []

    def step(name, fn):
        n = len(kube_api.requests)
        try:
            fn()
        except K8sError:
            pass  # the 404 and 409 steps: their requests are what is compared
        steps.extend((name, i) for i in range(n, len(kube_api.requests)))

    def pod_cache():
        c = PodCache(cluster.api_client, "n1", watch_seconds=5, request_timeout=5).start()
        assert wait_until(lambda: watches(kube_api) >= 1)
        c.close()

    def node_cache():
        c = NodeCache(cluster.api_client, NullSink(), watch_seconds=5, request_timeout=5, page_size=1,
                      label_selector="role=gpu").start()
        assert wait_until(lambda: watches(kube_api) >= 2)
        c.close()

    nodes, events = Nodes(cluster), Events(cluster)
    step("pod-cache", pod_cache)
    step("node-cache", node_cache)
    step("get", lambda: nodes.get("n1"))
    step("get-absent", lambda: nodes.get("absent"))
    step("list", lambda: nodes.list())
    step("list-selector", lambda: nodes.list("role=gpu"))
    old_rv = kube_api.node("n1")["metadata"]["resourceVersion"]
    step("patch", lambda: nodes.patch("n1", {"metadata": {"labels": {"a": "b"}}, "spec": {"taints": [TAINT]}}))
    step("patch-rv-conflict", lambda: nodes.patch("n1", {"metadata": {"labels": {"a": "c"}}}, resource_version=old_rv))
    step("patch-dry-run", lambda: nodes.patch("n1", {"metadata": {"labels": {"a": None}}}, dry_run=True))
    step("patch-status", lambda: nodes.patch_status("n1", {"status": {"conditions": [{"type": "X", "status": "True"}]}}))
    step("event", lambda: events.create("n1", EVENT, 1.7e9))
    step("event-again", lambda: events.create("n1", EVENT, 1.7e9))

    recs = [kube_api.requests[i] for _, i in steps]
    got = [(name, r.method, r.target, r.headers.get("Content-Type"), r.status) for (name, _), r in zip(steps, recs)]
    assert got == [(s, m, t.replace("{rv}", rv), c, st) for s, m, t, c, st in GOLDEN]
    for r in recs:
        assert r.headers["Accept"] == "application/json"
        assert r.headers["Authorization"] == "Bearer"
        assert r.headers["User-Agent"] == cluster.api_client.user_agent
    bodies = [r.body for r in recs if r.method != "GET"]
    assert bodies == [
        {"metadata": {"labels": {"a": "b"}}, "spec": {"taints": [TAINT]}},
        {"metadata": {"labels": {"a": "c"}, "resourceVersion": old_rv}},
        {"metadata": {"labels": {"a": None}}},
        {"status": {"conditions": [{"type": "X", "status": "True"}]}},
        event_body("n1", EVENT, "hetero-exporter", 1.7e9), event_body("n1", EVENT, "hetero-exporter", 1.7e9)]
    assert bodies[-1]["firstTimestamp"] == "2023-11-14T22:13:20Z"


def test_a_fresh_agent_process_loads_no_model_and_no_generated_api(kube_api, tmp_path):
    kube_api.seed_node("n1")
    kube_api.seed_pod("ml", "p1", "n1")
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "kc")
    prog = textwrap.dedent(f"""
        import json, sys, time
        from hetero_exporter.k8s.client import connect
        from hetero_exporter.k8s.events import Events, NodeEvent
        from hetero_exporter.k8s.node_cache import NodeCache
        from hetero_exporter.k8s.nodes import Nodes
        from hetero_exporter.k8s.pods import PodCache

        class Sink:
            def replace(self, items): pass
            def update(self, name, text): pass
            def remove(self, name): pass

        cluster = connect({kubeconfig!r}, env={{}})
        pods = PodCache(cluster.api_client, "n1", watch_seconds=5, request_timeout=5).start(wait_first=10)
        nodes = NodeCache(cluster.api_client, Sink(), watch_seconds=5, request_timeout=5).start()
        nodes.wait_synced(10)
        Nodes(cluster).patch("n1", {{"metadata": {{"labels": {{"a": "b"}}}}}})
        Nodes(cluster).patch_status("n1", {{"status": {{"conditions": [{{"type": "X", "status": "True"}}]}}}})
        Events(cluster).create("n1", NodeEvent("n1.x", "Normal", "Test", "m"), time.time())
        synced = pods.synced and nodes.synced
        pods.close()
        nodes.close()
        print(json.dumps({{"synced": synced, "kubernetes": "kubernetes" in sys.modules,
                          "generated": sorted(m for m in sys.modules if m.startswith(
                              ("kubernetes.client.models.", "kubernetes.client.api.")))}}))
        """)
    done = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got == {"synced": True, "kubernetes": True, "generated": []}  # no v1_pod, no core_v1_api
    assert watches(kube_api) >= 2 and any(r.method == "POST" for r in kube_api.requests)


def test_merge_and_json_patches_carry_their_content_type(kube_api):
    kube_api.seed_node("n1", labels={"a": "1"})
    api = Api(kube_api.api_client(), timeout=5)
    node = api.patch("/api/v1/nodes/{name}", {"name": "n1"}, body={"metadata": {"labels": {"a": None, "b": "2"}}},
                     content_type=k8s_api.MERGE_PATCH)
    assert "a" not in node["metadata"]["labels"] and node["metadata"]["labels"]["b"] == "2"
    node = api.patch("/api/v1/nodes/{name}", {"name": "n1"}, content_type=k8s_api.JSON_PATCH,
                     body=[{"op": "test", "path": "/metadata/labels/b", "value": "2"},
                           {"op": "add", "path": "/metadata/labels/c", "value": "3"}])
    assert node["metadata"]["labels"]["c"] == "3"
    assert [r.headers["Content-Type"] for r in kube_api.requests] == [k8s_api.MERGE_PATCH, k8s_api.JSON_PATCH]
    with pytest.raises(ValueError, match="content_type"):
        api.patch("/api/v1/nodes/{name}", {"name": "n1"}, body={}, content_type="application/apply-patch+yaml")
    with pytest.raises(ValueError, match="list of operations"):
        api.patch("/api/v1/nodes/{name}", {"name": "n1"}, body={"op": "add"}, content_type=k8s_api.JSON_PATCH)


def test_path_parameters_are_quoted_whole(kube_api):
    api = Api(kube_api.api_client(), timeout=5)
    with pytest.raises(K8sError) as e:
        api.get("/api/v1/nodes/{name}", {"name": "a/b?c"})
    assert e.value.not_found and kube_api.requests[-1].target == "/api/v1/nodes/a%2Fb%3Fc"


def test_watch_answered_with_an_error_status(kube_api):
    api = Api(kube_api.api_client(), timeout=5)
    kube_api.fail_next(1, 503, watch=True)
    with pytest.raises(K8sError) as e:
        api.watch("/api/v1/nodes", timeout_seconds=1, request_timeout=5)
    assert e.value.status == 503 and str(e.value).startswith("watch: HTTP 503")
    kube_api.fail_next(1, 410, watch=True)
    with pytest.raises(WatchExpired):
        api.watch("/api/v1/nodes", timeout_seconds=1, request_timeout=5)


def test_watch_from_a_forgotten_resource_version_expires(kube_api):
    kube_api.seed_node("n1")
    old = kube_api.resource_version
    kube_api.mutate_node("n1", lambda n: n["metadata"]["labels"].update(x="1"))
    kube_api.compact()
    stream = Api(kube_api.api_client()).watch("/api/v1/nodes", resource_version=old, timeout_seconds=2)
    with pytest.raises(WatchExpired):
        list(stream)


class FakeResponse:
    """A urllib3 response whose body arrives in the given pieces."""

    def __init__(self, pieces):
        self.pieces, self.reads, self.closed, self.released = pieces, [], False, False

    def stream(self, amt, decode_content=None):
        for p in self.pieces:
            self.reads.append(amt)
            yield p

    def close(self):
        self.closed = True

    def release_conn(self):
        self.released = True


def line(etype, obj) -> bytes:
    return json.dumps({"type": etype, "object": obj}).encode() + b"\n"


def test_events_split_across_reads_come_out_whole():
    data = line("ADDED", {"metadata": {"name": "a"}}) + b"\n" + line("BOOKMARK", {"metadata": {"resourceVersion": "7"}})
    data += line("WHATEVER", {}) + line("MODIFIED", "not an object") + line("DELETED", {"metadata": {"name": "a"}})
    data += b'{"type": "ADDED", "obj'  # the stream cut inside an event: dropped, not an error
    resp = FakeResponse([data[i:i + 5] for i in range(0, len(data), 5)])
    got = list(WatchStream(resp))
    assert got == [("ADDED", {"metadata": {"name": "a"}}), ("BOOKMARK", {"metadata": {"resourceVersion": "7"}}),
                   ("DELETED", {"metadata": {"name": "a"}})]
    assert set(resp.reads) == {k8s_api.READ_BYTES} and resp.closed and resp.released


def test_an_endless_line_is_refused_after_the_bound():
    resp = FakeResponse(itertools.islice(itertools.repeat(b"x" * 1000), 10_000))  # 10 MB, no newline
    with pytest.raises(K8sError, match="longer than 4096 bytes"):
        list(WatchStream(resp, max_event_bytes=4096))
    assert len(resp.reads) <= 6 and resp.closed  # stopped at the bound, not at the end of the stream


@pytest.mark.parametrize("data, error", [
    (b"{not json\n", "not JSON"),
    (b'{"type": "ADDED", "object": {"n": NaN}}\n', "not JSON"),  # json would take it; the API server never sends it
    (b"[" * 100_000 + b"]" * 100_000 + b"\n", "not JSON"),      # deeper than a decoder recurses
    (b'{"type": "ADDED", "object": {"n": "\xff"}}\n', "not JSON"),  # not UTF-8
    (line("ERROR", {"code": 500, "message": "etcd down"}), "ERROR 500: etcd down"),
])
def test_bad_lines_and_error_events_fail_the_stream(data, error):
    with pytest.raises(K8sError, match=error):
        list(WatchStream(FakeResponse([data])))


def test_an_error_event_410_means_list_again():
    with pytest.raises(WatchExpired):
        list(WatchStream(FakeResponse([line("ERROR", {"code": 410, "reason": "Expired"})])))


class LegacyApiClient:
    """The call_api of the older clients (openapi-generator "python-legacy"): no param_serialize."""

    def __init__(self):
        self.calls = []

    def call_api(self, resource_path, method, path_params=None, query_params=None, header_params=None, body=None,
                 post_params=None, files=None, response_types_map=None, auth_settings=None, async_req=None,
                 _return_http_data_only=None, collection_formats=None, _preload_content=True,
                 _request_timeout=None, _host=None, _request_auth=None):
        self.calls.append(dict(path=resource_path, method=method, path_params=path_params, query=query_params,
                               headers=header_params, body=body, auth=auth_settings, preload=_preload_content,
                               timeout=_request_timeout))
        resp = FakeResponse([])
        resp.status, resp.data = 200, b'{"kind": "Node"}'
        return resp


def test_older_clients_get_the_same_arguments_through_their_call_api():
    legacy = LegacyApiClient()
    got = Api(legacy, timeout=3).patch("/api/v1/nodes/{name}", {"name": "n1"}, body={"a": 1},
                                        query={"dryRun": "All", "fieldManager": None})
    assert got == {"kind": "Node"}
    assert legacy.calls == [dict(path="/api/v1/nodes/{name}", method="PATCH", path_params={"name": "n1"},
                                 query=[("dryRun", "All")], headers={"Accept": "application/json",
                                                                     "Content-Type": SMP},
                                 body={"a": 1}, auth=["BearerToken"], preload=False, timeout=3)]
