"""The pod cache keeps this node's failed pods (trimmed, bounded) from its watch, so the health
loop's black-hole check reads them from memory instead of listing pods every reconcile."""

from __future__ import annotations

import time

import pytest

import kubeapi
from health_agent import HealthAgent

pytest.importorskip("kubernetes")


def _failed(name: str, node: str, reason: str = "UnexpectedAdmissionError") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml",
                                                            "annotations": {"big": "x" * 50000}},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "cuda",
                                                       "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Failed", "reason": reason, "startTime": kubeapi.now_rfc3339(),
                       "message": "Allocate failed due to no healthy devices present; cannot allocate unhealthy "
                                  "devices nvidia.com/gpu, which is unexpected"}}


def _cache(api, tmp_path, node: str):
    from hetero_exporter.k8s.client import connect
    from hetero_exporter.k8s.pods import PodCache
    cluster = connect(None, env={"KUBECONFIG": api.write_kubeconfig(tmp_path / "kc-pods")})
    return PodCache(cluster.api_client, node, request_timeout=5).start(wait_first=5)


def _until(check, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # bounded
        if check():
            return True
        time.sleep(0.02)
    return check()


def test_failed_pods_come_from_the_list_and_the_watch_trimmed(kube_api, tmp_path):
    kube_api.seed_node("gpu-node-7")
    kube_api.seed_pod("ml", "running", "gpu-node-7")
    kube_api.create(kubeapi.PODS, "ml", _failed("job-0", "gpu-node-7"))
    cache = _cache(kube_api, tmp_path, "gpu-node-7")
    try:
        (pod,) = cache.failed_pods()
        assert pod["metadata"]["name"] == "job-0" and pod["status"]["reason"] == "UnexpectedAdmissionError"
        assert "annotations" not in pod["metadata"]  # trimmed: not the 50 KB the object carries
        assert pod["spec"]["containers"] == [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]
        kube_api.create(kubeapi.PODS, "ml", _failed("job-1", "gpu-node-7", reason="OutOfnvidia.com/gpu"))
        assert _until(lambda: len(cache.failed_pods()) == 2)
        kube_api.delete(kubeapi.PODS, "ml", "job-0")
        assert _until(lambda: [p["metadata"]["name"] for p in cache.failed_pods()] == ["job-1"])
        # a running pod that fails later is seen through the watch too
        kube_api.mutate(kubeapi.PODS, "ml", "running", lambda p: p["status"].update(phase="Failed", reason="Evicted"))
        assert _until(lambda: len(cache.failed_pods()) == 2)
    finally:
        cache.close()


def test_failed_pods_are_bounded_newest_kept(kube_api, tmp_path, monkeypatch):
    from hetero_exporter.k8s import pods
    monkeypatch.setattr(pods, "MAX_FAILED", 3)
    kube_api.seed_node("gpu-node-7")
    for i in range(6):
        kube_api.create(kubeapi.PODS, "ml", _failed(f"job-{i}", "gpu-node-7"))
    cache = _cache(kube_api, tmp_path, "gpu-node-7")
    try:
        assert [p["metadata"]["name"] for p in cache.failed_pods()] == ["job-3", "job-4", "job-5"]
    finally:
        cache.close()


def test_not_in_sync_answers_none_so_the_remedy_lists(kube_api, tmp_path):
    from hetero_exporter.k8s.pods import PodCache
    cache = PodCache(None, "gpu-node-7")  # never started: not in sync
    assert cache.failed_pods() is None


def test_the_black_hole_check_reads_the_watched_pods_without_listing(kube_api, tmp_path):
    agent = HealthAgent("health-xid79.yaml", kube_api.write_kubeconfig(tmp_path / "kc"))
    kube_api.seed_node(agent.node)
    cache = _cache(kube_api, tmp_path, agent.node)
    try:
        agent.remedy._cluster._failed_pods = cache.failed_pods  # as cli wires it
        for i in range(3):
            kube_api.create(kubeapi.PODS, "ml", _failed(f"job-{i}", agent.node))
        assert _until(lambda: len(cache.failed_pods()) == 3)
        agent.run(0, 10)
        node = kube_api.node(agent.node)
        assert [t["value"] for t in node["spec"]["taints"]] == ["admission-failures"]
        lists = [r for r in kube_api.requests if r.path == "/api/v1/pods" and "status.phase" in
                 (r.query.get("fieldSelector") or "")]
        assert lists == []  # from the watch, not one list per reconcile
    finally:
        cache.close()
        agent.close()
