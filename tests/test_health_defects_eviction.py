"""Issue 38 §6 (a): with ``evict_pods`` on and the Eviction API answering 404 while the pod is still
there (an API server or proxy that does not serve the eviction subresource for it, a 404 from an
aggregation layer), the pod was taken for gone: its record left the book, the next cycle started a
new episode (another condition write, another eviction), and once the device recovered nothing was
left to turn its condition back to True. A 404 counts as gone only when the pod itself reads 404;
otherwise it is a failed eviction, retried with the back-off, and recovery restores the condition."""

from __future__ import annotations

import pytest

import kubeapi
from test_device_health_e2e import _agent, _pod_condition, _pod_events, _seed

pytest.importorskip("kubernetes")


def test_an_eviction_answered_404_for_a_pod_that_is_there_does_not_lose_the_pod(kube_api, tmp_path):
    agent = _agent(kube_api, tmp_path, health={"evict_pods": True})
    try:
        _seed(kube_api, agent)
        kube_api.fail_next(1000, 404, path="/eviction")
        agent.run(10, 170, step=5)  # GPU 2 failed from t=60 (Xid 79) to the reset at t=180
        assert _pod_condition(kube_api)["status"] == "False"
        assert len(_pod_events(kube_api, "Warning")) == 1, "one episode, one Warning"
        tries = [r for r in kube_api.requests if r.path.endswith("/eviction")]
        assert 1 <= len(tries) <= 6, f"{len(tries)} eviction calls in 110 s: not backed off"
        agent.run(180, 240, step=5)
        assert _pod_condition(kube_api)["status"] == "True"
        assert len(_pod_events(kube_api, "Normal")) == 1 and len(_pod_events(kube_api, "Warning")) == 1
        assert kube_api.get(kubeapi.PODS, "ml", "train-0")["metadata"]["name"] == "train-0"
    finally:
        agent.close()


def test_a_pod_deleted_as_it_is_evicted_is_forgotten(kube_api, tmp_path, monkeypatch):
    """The other side: the pod deleted between the read and the eviction (the pod itself reads
    404 afterwards) is gone: its eviction is not tried again."""
    from hetero_exporter.k8s import pod_writes

    calls = []

    def evict(self, namespace, name):
        calls.append(name)
        kube_api.delete(kubeapi.PODS, namespace, name)
        return pod_writes.EvictOutcome("gone", "pods \"train-0\" not found")

    monkeypatch.setattr(pod_writes.PodWrites, "evict", evict)
    agent = _agent(kube_api, tmp_path, health={"evict_pods": True})
    try:
        _seed(kube_api, agent)
        agent.run(10, 170, step=5)
        assert calls == ["train-0"]
        assert not any(r.path.endswith("/eviction") for r in kube_api.requests)
    finally:
        agent.close()
