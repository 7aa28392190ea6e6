"""Issue 25, items 1 and 2: writes that would reach another node, against the loopback API server.

- A ResourceSlice on this node that names another node's pool (a buggy or hostile DRA driver)
  never makes the agent write a DeviceTaintRule selecting that pool.
- A device holder the API server places on another node gets no pod condition, no event and no
  eviction from this node's agent (checked on the pod object read, not on the attribution).
"""

from __future__ import annotations

import pytest

import kubeapi
from test_device_health_e2e import COND, _agent, _pod_events, _rules, _seed

pytest.importorskip("kubernetes")


def test_a_slice_naming_another_nodes_pool_never_gets_a_rule(kube_api, tmp_path):
    agent = _agent(kube_api, tmp_path)
    try:
        uuids = _seed(kube_api, agent)
        # the same GPU listed again by a hostile driver on this node, in the pool of gpu-other
        kube_api.seed_resource_slice(f"{agent.node}-evil", agent.node, [
            {"name": "gpu-3", "attributes": {"uuid": {"string": uuids[2]}}}], driver="gpu.nvidia.com",
            pool="gpu-other")
        agent.run(10, 90)
        pools = {r["spec"]["deviceSelector"]["pool"] for r in _rules(kube_api)}
        assert pools == {agent.node}, pools  # this node's own rule only
    finally:
        agent.close()


def test_the_plan_skips_a_foreign_pool_on_this_nodes_slice():
    from test_device_taints import NODE, Store, _nvidia_devices, _nvidia_slice, _plan, _verdicts
    devices = _nvidia_devices()
    bad = list(devices)[2]
    evil = _nvidia_slice(devices)
    evil["spec"]["pool"]["name"] = "gpu-other"
    p = _plan([evil], Store(), _verdicts(devices, **{bad: "failed"}), devices)
    assert p.create == [] and any("not this node's" in e for e in p.explain)
    p = _plan([_nvidia_slice(devices), evil], Store(), _verdicts(devices, **{bad: "failed"}), devices)
    assert [r["spec"]["deviceSelector"]["pool"] for r in p.create] == [NODE]


def test_a_holder_on_another_node_gets_no_condition_event_or_eviction(kube_api, tmp_path):
    agent = _agent(kube_api, tmp_path, health={"evict_pods": True})
    try:
        _seed(kube_api, agent)
        # the API server places the pod attribution names on another node
        pod = kube_api.get(kubeapi.PODS, "ml", "train-0")
        kube_api.delete(kubeapi.PODS, "ml", "train-0")
        kube_api.seed_pod("ml", "train-0", "gpu-other", uid=pod["metadata"]["uid"], labels={"app": "train"})
        agent.run(10, 90)
        after = kube_api.get(kubeapi.PODS, "ml", "train-0")
        assert not [c for c in after["status"].get("conditions") or [] if c["type"] == COND]
        assert _pod_events(kube_api) == []
        assert not [r for r in kube_api.requests if r.path.endswith("/eviction")]
        assert not [r for r in kube_api.requests if r.method == "PATCH" and r.path.endswith("/train-0/status")]
    finally:
        agent.close()
