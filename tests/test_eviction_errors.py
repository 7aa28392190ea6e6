"""Issue 24, item 4: with ``evict_pods: true`` and the Eviction API failing (a 500, a 403: not a
PodDisruptionBudget's 429), the pod gets one Warning per episode, the eviction is retried with a
growing back-off (not every reconcile), and after the device recovers the pod condition goes back
to True whatever eviction did."""

from __future__ import annotations

import pytest

import kubeapi
from test_device_health_e2e import _agent, _pod_condition, _pod_events, _seed

pytest.importorskip("kubernetes")


@pytest.mark.parametrize("status", [500, 403])
def test_a_failing_eviction_warns_once_backs_off_and_recovery_restores_the_condition(kube_api, tmp_path, status):
    agent = _agent(kube_api, tmp_path, health={"evict_pods": True})
    try:
        _seed(kube_api, agent)
        kube_api.fail_next(1000, status, path="/eviction")
        agent.run(10, 170, step=5)  # GPU 2 failed from t=60 (Xid 79) to the reset at t=180: 23 reconciles
        assert len(_pod_events(kube_api, "Warning")) == 1
        tries = [r for r in kube_api.requests if r.path.endswith("/eviction")]
        assert 1 <= len(tries) <= 6, f"{len(tries)} eviction calls in 110 s: not backed off"
        assert _pod_condition(kube_api)["status"] == "False"
        agent.run(180, 240, step=5)
        assert _pod_condition(kube_api)["status"] == "True"
        assert len(_pod_events(kube_api, "Normal")) == 1 and len(_pod_events(kube_api, "Warning")) == 1
        assert kube_api.get(kubeapi.PODS, "ml", "train-0")["metadata"]["name"] == "train-0"
    finally:
        agent.close()
