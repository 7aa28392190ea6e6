"""The loopback API server (tests/kubeapi.py) against the real `kubernetes` client: the wire
protocol the agent's Kubernetes code relies on, so a fake that drifts from the API server
fails here and not silently in the health tests."""

from __future__ import annotations

import threading
import urllib.request

import pytest

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, config, watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from kubeapi import KubeAPIServer, merge_patch, strategic_merge_patch  # noqa: E402

MERGE = "application/merge-patch+json"


@pytest.fixture
def core(kube_api):
    return client.CoreV1Api(kube_api.api_client())


def test_kubeconfig_file_drives_the_real_loader(kube_api, tmp_path):
    path = kube_api.write_kubeconfig(tmp_path / "kc")
    api_client = config.new_client_from_config(config_file=path)
    kube_api.seed_node("n1")
    node = client.CoreV1Api(api_client).read_node("n1")
    assert node.metadata.name == "n1"
    assert node.status.conditions[0].type == "Ready"


def test_wrong_token_is_401(kube_api, tmp_path):
    path = kube_api.write_kubeconfig(tmp_path / "kc", token="nope")
    v1 = client.CoreV1Api(config.new_client_from_config(config_file=path))
    with pytest.raises(ApiException) as e:
        v1.list_node()
    assert e.value.status == 401


def test_get_and_list_with_selectors(kube_api, core):
    kube_api.seed_node("gpu-1", labels={"pool": "gpu"})
    kube_api.seed_node("cpu-1", labels={"pool": "cpu"})
    kube_api.seed_pod("ml", "train-0", "gpu-1")
    kube_api.seed_pod("ml", "train-1", "cpu-1")
    kube_api.seed_pod("web", "front", "gpu-1")
    assert [n.metadata.name for n in core.list_node(label_selector="pool=gpu").items] == ["gpu-1"]
    assert [n.metadata.name for n in core.list_node(label_selector="pool in (cpu,x)").items] == ["cpu-1"]
    pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-1").items
    assert sorted((p.metadata.namespace, p.metadata.name) for p in pods) == [("ml", "train-0"), ("web", "front")]
    assert [p.metadata.name for p in core.list_namespaced_pod("ml", field_selector="spec.nodeName!=gpu-1").items] == ["train-1"]
    with pytest.raises(ApiException) as e:
        core.read_node("absent")
    assert e.value.status == 404


def test_answers_are_counted_in_bytes_by_verb_and_resource_and_a_list_rv_is_checked(kube_api, core):
    """sent_bytes(): the JSON answered, by tally()'s key (fleet_burst reports the burst's LIST bytes);
    a list's resourceVersion is "0" (the watch cache) or a number, else 400."""
    for i in range(3):
        kube_api.seed_node(f"gpu-{i}", annotations={"big": "x" * 5000})
    def body(path: str) -> bytes:
        req = urllib.request.Request(kube_api.url + path, headers={"Authorization": f"Bearer {kube_api.token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()
    one = len(body("/api/v1/nodes/gpu-0"))
    everything = body("/api/v1/nodes?resourceVersion=0")
    sent = kube_api.sent_bytes()
    assert sent["get nodes"] == one and sent["list nodes"] == len(everything) > 3 * 5000, sent
    assert set(sent) == {"get nodes", "list nodes"}
    for bad in ("latest", "\u00b2"):  # a word, a digit that is not an ASCII one
        with pytest.raises(ApiException) as e:
            core.list_node(resource_version=bad)
        assert e.value.status == 400, bad


def test_strategic_merge_merges_conditions_by_type_and_replaces_taints(kube_api, core):
    kube_api.seed_node("n1", taints=[{"key": "human/maint", "effect": "NoSchedule"}])
    rv0 = kube_api.node("n1")["metadata"]["resourceVersion"]
    # a dict body goes out as strategic-merge-patch with the real client
    core.patch_node_status("n1", {"status": {"conditions": [
        {"type": "AcceleratorUnhealthy", "status": "True", "reason": "NvidiaXid79", "message": "m"}]}})
    node = kube_api.node("n1")
    assert [c["type"] for c in node["status"]["conditions"]] == ["Ready", "AcceleratorUnhealthy"]
    assert int(node["metadata"]["resourceVersion"]) > int(rv0)
    assert kube_api.requests[-1].content_type == "application/strategic-merge-patch+json"
    core.patch_node("n1", {"spec": {"taints": [{"key": "a/b", "value": "x", "effect": "NoSchedule"}]}})
    assert kube_api.node("n1")["spec"]["taints"] == [{"key": "a/b", "value": "x", "effect": "NoSchedule"}]


def test_merge_and_json_patch(kube_api, core):
    kube_api.seed_node("n1", annotations={"keep": "1", "drop": "2"})
    core.patch_node("n1", {"metadata": {"annotations": {"drop": None, "new": "3"}}}, _content_type=MERGE)
    assert kube_api.node("n1")["metadata"]["annotations"] == {"keep": "1", "new": "3"}
    rv = kube_api.node("n1")["metadata"]["resourceVersion"]
    core.patch_node("n1", [{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                           {"op": "add", "path": "/metadata/labels/x", "value": "y"}])
    assert kube_api.node("n1")["metadata"]["labels"]["x"] == "y"
    with pytest.raises(ApiException) as e:
        core.patch_node("n1", [{"op": "test", "path": "/metadata/labels/x", "value": "other"}])
    assert e.value.status == 422


def test_stale_resource_version_is_409_and_noop_patch_writes_nothing(kube_api, core):
    kube_api.seed_node("n1")
    rv = kube_api.node("n1")["metadata"]["resourceVersion"]
    kube_api.mutate_node("n1", lambda n: n["metadata"]["labels"].update(other="writer"))
    with pytest.raises(ApiException) as e:
        core.patch_node("n1", {"metadata": {"resourceVersion": rv, "labels": {"a": "b"}}})
    assert e.value.status == 409
    assert "a" not in kube_api.node("n1")["metadata"]["labels"]
    before = kube_api.resource_version
    core.patch_node("n1", {"metadata": {"labels": {"other": "writer"}}})
    assert kube_api.resource_version == before
    assert kube_api.requests[-1].method == "PATCH" and kube_api.requests[-1].changed is False
    assert len(kube_api.node_versions("n1")) == 2  # seeded + the other writer's change


def test_status_subresource_and_main_resource_are_separate(kube_api, core):
    kube_api.seed_node("n1")
    core.patch_node("n1", {"status": {"conditions": [{"type": "X", "status": "True"}]}})
    assert [c["type"] for c in kube_api.node("n1")["status"]["conditions"]] == ["Ready"]
    core.patch_node_status("n1", {"metadata": {"annotations": {"a": "b"}}})
    assert "a" not in kube_api.node("n1")["metadata"]["annotations"]


def test_invalid_taint_is_422(kube_api, core):
    kube_api.seed_node("n1")
    with pytest.raises(ApiException) as e:
        core.patch_node("n1", {"spec": {"taints": [{"key": "a", "effect": "Sometimes"}]}})
    assert e.value.status == 422


def test_events_core_v1_validation_and_events_v1(kube_api, core):
    kube_api.seed_node("n1")
    ev = {"metadata": {"generateName": "n1."}, "involvedObject": {"kind": "Node", "name": "n1", "uid": "n1"},
          "reason": "AcceleratorFault", "message": "m", "type": "Warning", "count": 1,
          "source": {"component": "hetero-exporter", "host": "n1"}}
    created = core.create_namespaced_event("default", ev)
    assert created.metadata.name.startswith("n1.")
    with pytest.raises(ApiException) as e:  # a cluster-scoped object's event lives in default
        core.create_namespaced_event("kube-system", ev)
    assert e.value.status == 422
    core.patch_namespaced_event(created.metadata.name, "default", {"count": 2})
    assert kube_api.events(involved_name="n1")[0]["count"] == 2
    ev1 = client.EventsV1Api(kube_api.api_client())
    ev1.create_namespaced_event("default", {
        "metadata": {"name": "e2"}, "eventTime": "2025-01-01T00:00:00.000000Z", "action": "Taint",
        "reason": "R", "type": "Normal", "reportingController": "hetero-exporter.io/agent",
        "reportingInstance": "n1", "regarding": {"kind": "Node", "name": "n1"}})
    assert [e["reason"] for e in kube_api.events(involved_name="n1")] == ["AcceleratorFault", "R"]


def test_watch_streams_changes_and_resumes(kube_api, core):
    kube_api.seed_node("a", labels={"pool": "gpu"})
    start_rv = core.list_node().metadata.resource_version
    got = []

    def consume():
        w = watch.Watch()
        for ev in w.stream(core.list_node, label_selector="pool=gpu", timeout_seconds=5,
                           resource_version=start_rv):
            got.append((ev["type"], ev["object"].metadata.name))
            if len(got) == 3:
                w.stop()

    t = threading.Thread(target=consume)
    t.start()
    kube_api.seed_node("b", labels={"pool": "gpu"})
    kube_api.seed_node("c", labels={"pool": "cpu"})  # not selected
    kube_api.mutate_node("a", lambda n: n["metadata"]["labels"].update(pool="cpu"))  # leaves the selector
    kube_api.mutate_node("b", lambda n: n["metadata"]["annotations"].update(x="1"))
    t.join(10)
    assert not t.is_alive()
    assert got == [("ADDED", "b"), ("DELETED", "a"), ("MODIFIED", "b")]


def test_watch_without_resource_version_lists_first_and_410_after_compaction(kube_api, core):
    kube_api.seed_node("a")
    events = list(watch.Watch().stream(core.list_node, timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "a")]
    old = kube_api.resource_version
    kube_api.seed_node("b")
    kube_api.compact()
    with pytest.raises(ApiException) as e:
        list(watch.Watch().stream(core.list_node, resource_version=old, timeout_seconds=1))
    assert e.value.status == 410


def test_bookmarks(kube_api, core):
    kube_api.bookmark_seconds = 0.05
    kube_api.seed_node("a")
    rv = kube_api.resource_version
    w = watch.Watch()
    types = []
    for ev in w.stream(core.list_node, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=5):
        types.append(ev["type"])
        w.stop()
    assert types == ["BOOKMARK"]
    assert w.resource_version == rv


def test_injected_5xx_delay_and_drop(kube_api, core):
    kube_api.seed_node("n1")
    kube_api.fail_next(2, 503, methods=["GET"])
    for _ in range(2):
        with pytest.raises(ApiException) as e:
            core.read_node("n1")
        assert e.value.status == 503
    assert core.read_node("n1").metadata.name == "n1"

    kube_api.delay_next(1, 2.0, methods=["PATCH"], after_apply=True)
    with pytest.raises(Exception) as e:
        core.patch_node("n1", {"metadata": {"labels": {"late": "yes"}}}, _request_timeout=0.3)
    assert "timed out" in str(e.value).lower() or "timeout" in type(e.value).__name__.lower()
    assert kube_api.node("n1")["metadata"]["labels"]["late"] == "yes"  # applied, reply lost

    kube_api.drop_next(1, methods=["PATCH"])
    with pytest.raises(Exception):
        core.patch_node("n1", {"metadata": {"labels": {"dropped": "yes"}}})
    assert "dropped" not in kube_api.node("n1")["metadata"]["labels"]
    assert [r.injected for r in kube_api.requests if r.injected] == ["status", "status", "delay", "drop"]


def test_pure_patch_functions():
    assert merge_patch({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": None}, "l": [2]}) == {"a": {"c": 2}, "l": [2]}
    cur = {"status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]}}
    out = strategic_merge_patch(cur, {"status": {"conditions": [{"type": "A", "$patch": "delete"},
                                                                {"type": "C", "status": "False"}]}}, "Node")
    assert out["status"]["conditions"] == [{"type": "B", "status": "True"}, {"type": "C", "status": "False"}]
    out = strategic_merge_patch({"metadata": {"finalizers": ["a"]}},
                                {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}, "Node")
    assert out["metadata"]["finalizers"] == []


def test_context_manager_closes():
    with KubeAPIServer() as srv:
        url = srv.url
        srv.seed_node("x")
    assert url.startswith("http://127.0.0.1:")
