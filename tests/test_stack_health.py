"""Issue 38 §4, the plugin pods: each vendor's device plugin and DRA kubelet plugin pods on the node.
The pure sub-plan (health/plan/stack.py), the vendors' selectors, and end to end the health agent
(fake NVML -> rules -> remedy) against the loopback API server with a stand-in plugin pod that
crash-loops, goes Ready again, and disappears; the grace on an injected clock."""

from __future__ import annotations

import pytest

import kubeapi
from health_agent import SCENARIOS, HealthAgent
from hetero_exporter import vendors
from hetero_exporter.health.plan import RemedyConfig, rfc3339
from hetero_exporter.health.plan.stack import PluginRead, component_up, plan_stack
from hetero_exporter.model import names as N
from hetero_exporter.model.spec import PluginSelector

GRACE = 300.0
T0 = 1_800_000_000.0


def _pod(name="nvidia-device-plugin-daemonset-x1", *, ready=True, waiting=None, restarts=0, finished=None,
         since=None, uid=None):
    status = {"phase": "Running",
              "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                              **({"lastTransitionTime": rfc3339(since)} if since is not None else {})}],
              "containerStatuses": [{"name": "nvidia-device-plugin-ctr", "restartCount": restarts,
                                     "state": {"waiting": {"reason": waiting}} if waiting else {"running": {}},
                                     **({"lastState": {"terminated": {"finishedAt": rfc3339(finished)}}}
                                        if finished is not None else {})}]}
    return {"metadata": {"name": name, "namespace": "nvidia", "uid": uid or name},
            "spec": {"nodeName": "gpu-1"}, "status": status}


def _read(*pods, component="device-plugin", failed=False):
    return PluginRead("nvidia", component, "name=nvidia-device-plugin-ds", None if failed else tuple(pods))


# ---------------------------------------------------------------- the pure sub-plan


def test_crash_loop_is_a_reason_at_once_with_one_warning_per_episode():
    sp = plan_stack("gpu-1", ["nvidia"], [_read(_pod(ready=False, waiting="CrashLoopBackOff", restarts=7))], {},
                    GRACE, T0)
    (f,) = sp.faults
    assert (f.code, f.reason) == ("nvidia/device-plugin/crash-loop", "AcceleratorPluginCrashLoop")
    assert "nvidia/nvidia-device-plugin-daemonset-x1" in f.message and "CrashLoopBackOff (7 restarts)" in f.message
    (ev,) = sp.events
    assert (ev["type"], ev["reason"]) == ("Warning", "AcceleratorPluginCrashLoop")
    again = plan_stack("gpu-1", ["nvidia"], [_read(_pod(ready=False, waiting="CrashLoopBackOff"))], sp.state,
                       GRACE, T0 + 60)
    assert len(again.faults) == 1 and again.events == []  # announced once
    well = plan_stack("gpu-1", ["nvidia"], [_read(_pod())], again.state, GRACE, T0 + 120)
    assert well.faults == [] and well.state == {}
    (ev,) = well.events
    assert (ev["type"], ev["reason"]) == ("Normal", "AcceleratorPluginRecovered")


def test_restarts_rising_recently_count_as_a_crash_loop_old_ones_do_not():
    recent = _pod(restarts=5, finished=T0 - 30)
    assert [f.code for f in plan_stack("gpu-1", ["nvidia"], [_read(recent)], {}, GRACE, T0).faults] == [
        "nvidia/device-plugin/crash-loop"]
    old = _pod(restarts=5, finished=T0 - 3600)
    assert plan_stack("gpu-1", ["nvidia"], [_read(old)], {}, GRACE, T0).faults == []


def test_not_ready_waits_for_the_grace_from_the_pods_own_transition():
    pod = _pod(ready=False, since=T0 - 100)
    sp = plan_stack("gpu-1", ["nvidia"], [_read(pod)], {}, GRACE, T0)
    assert sp.faults == [] and any("within the 300 s grace" in line for line in sp.explain)
    sp = plan_stack("gpu-1", ["nvidia"], [_read(pod)], sp.state, GRACE, T0 + 199)
    assert sp.faults == []
    sp = plan_stack("gpu-1", ["nvidia"], [_read(pod)], sp.state, GRACE, T0 + 200)
    assert [f.reason for f in sp.faults] == ["AcceleratorPluginNotReady"]
    # a pod that does not say since when: the grace runs from when the agent first saw it
    sp = plan_stack("gpu-1", ["nvidia"], [_read(_pod(ready=False))], {}, GRACE, T0)
    assert sp.faults == [] and sp.state == {"seen:nvidia/device-plugin/not-ready": T0}


def test_absent_after_the_grace_only_where_the_vendors_devices_are_and_the_list_answered():
    sp = plan_stack("gpu-1", ["nvidia"], [_read()], {}, GRACE, T0)
    assert sp.faults == []
    sp = plan_stack("gpu-1", ["nvidia"], [_read()], sp.state, GRACE, T0 + GRACE)
    (f,) = sp.faults
    assert (f.code, f.reason) == ("nvidia/plugins/absent", "AcceleratorPluginAbsent")
    # a DRA kubelet plugin instead of the device plugin is enough
    dra = PluginRead("nvidia", "dra-kubelet-plugin", "x=y", (_pod("kp"),))
    assert plan_stack("gpu-1", ["nvidia"], [_read(), dra], sp.state, GRACE, T0 + GRACE).faults == []
    # no NVIDIA device on the node: its plugins are not judged; a failed list is never "absent"
    assert plan_stack("gpu-1", ["amd"], [_read()], {}, GRACE, T0 + 10 * GRACE).faults == []
    failed = plan_stack("gpu-1", ["nvidia"], [_read(failed=True)], sp.state, GRACE, T0 + 10 * GRACE)
    assert failed.faults == [] and any("not judged absent" in line for line in failed.explain)


def test_component_up_says_each_component_and_whether_any_runs():
    bad = _pod("b", ready=False, waiting="CrashLoopBackOff")
    up = component_up([_read(_pod("a")), PluginRead("nvidia", "dra-kubelet-plugin", "x=y", (bad,)),
                       PluginRead("amd", "device-plugin", "name=amdgpu-dp-ds", ())], GRACE, T0)
    assert up == {("nvidia", "device-plugin"): 1.0, ("nvidia", "dra-kubelet-plugin"): 0.0,
                  ("nvidia", "plugins"): 1.0, ("amd", "plugins"): 0.0}
    assert component_up([_read(failed=True)], GRACE, T0) == {}


@pytest.mark.parametrize("pods", [None, [None, 3, "x", {"status": []}, {"status": {"conditions": "no"}},
                                         {"metadata": [], "status": {"containerStatuses": [{"restartCount": "9"}]}}]])
def test_hostile_pods_and_state_never_raise(pods):
    reads = [PluginRead("nvidia", "device-plugin", "a=b", None if pods is None else tuple(pods))]
    sp = plan_stack("gpu-1", ["nvidia"], reads, {"seen:x": "no", "told:y": -5, 3: 4}, GRACE, T0)
    assert isinstance(sp.faults, list)


def test_every_vendor_with_selectors_cites_a_source_and_the_selectors_parse():
    with_selectors = {n for n in vendors.specs() if vendors.spec(n).plugin_pods}
    assert {"nvidia", "amd", "ascend", "cambricon", "hygon", "iluvatar", "enflame"} <= with_selectors
    for n in with_selectors:
        for sel in vendors.spec(n).plugin_pods:
            assert sel.source and sel.labels()
    comps = {s.component for s in vendors.spec("nvidia").plugin_pods}
    assert comps == {"device-plugin", "dra-kubelet-plugin"}
    with pytest.raises(ValueError):
        PluginSelector("device-plugin", "name in (a,b)")
    with pytest.raises(ValueError):
        PluginSelector("exporter", "name=a")


def test_the_grace_is_checked_at_load():
    assert RemedyConfig.from_mapping({"stack_grace_seconds": 0}).stack_grace_seconds == 0.0
    with pytest.raises(ValueError, match="stack_grace_seconds"):
        RemedyConfig.from_mapping({"stack_grace_seconds": -1})
    with pytest.raises(ValueError, match="stack"):
        RemedyConfig.from_mapping({"stack": "yes"})


# ---------------------------------------------------------------- end to end, loopback API server

pytest.importorskip("kubernetes")


def _scenario(tmp_path) -> str:
    """health-xid79's eight H100s without its fault (scenario time runs past the grace here)."""
    text = (SCENARIOS / "health-xid79.yaml").read_text()
    path = tmp_path / "eight-h100.yaml"
    path.write_text(text[:text.index("faults:")])
    return str(path)


def _condition(api, node):
    return next(c for c in api.node(node)["status"]["conditions"] if c["type"] == "AcceleratorUnhealthy")


def _set_status(api, name, **kw):
    def fn(pod):
        pod["status"] = _pod(name, **kw)["status"]
    api.mutate(kubeapi.PODS, "nvidia", name, fn)


def _cycle(agent, t):
    agent.remedy._last_sig = None  # pods changed, not the devices: reconcile now (resync would, within 60 s)
    return agent.cycle(t)


def _stack_up(agent):
    fams = {m.name: m for m in agent.metrics.collect()}
    return {tuple(s.labels.values()): s.value for s in fams[N.STACK_COMPONENT_UP.name].samples}


def test_a_crash_looping_device_plugin_makes_a_node_reason_and_clears_when_ready(kube_api, tmp_path):
    agent = HealthAgent(_scenario(tmp_path), kube_api.write_kubeconfig(tmp_path / "kc"))
    node, name = agent.node, "nvidia-device-plugin-daemonset-x1"
    try:
        kube_api.seed_node(node)
        kube_api.seed_pod("nvidia", name, node, labels={"name": "nvidia-device-plugin-ds"})
        _set_status(kube_api, name)
        kube_api.seed_pod("nvidia", "other-node-plugin", "gpu-2", labels={"name": "nvidia-device-plugin-ds"})
        agent.cycle(0)  # the first cycle reads the book back (restart safety), the next acts
        agent.cycle(1)
        assert _condition(kube_api, node)["status"] == "False"
        assert _stack_up(agent)[("nvidia", "device-plugin")] == 1.0
        _set_status(kube_api, name, ready=False, waiting="CrashLoopBackOff", restarts=4)
        _cycle(agent, 10)
        cond = _condition(kube_api, node)
        assert (cond["status"], cond["reason"]) == ("True", "AcceleratorPluginCrashLoop")
        assert name in cond["message"] and "CrashLoopBackOff" in cond["message"]
        (ev,) = kube_api.events(involved_name=node, reason="AcceleratorPluginCrashLoop")
        assert ev["type"] == "Warning"
        # no device failed, no taint, no device taint rule
        verdict = agent.loop.last.plan.verdict
        assert verdict is not None and not verdict.unhealthy and not verdict.failed
        assert {d.health.state for d in agent.last_snapshot.devices} == {"ok"}
        assert not kube_api.node(node)["spec"].get("taints") and kube_api.list(kubeapi.DEVICE_TAINT_RULES) == []
        assert _stack_up(agent)[("nvidia", "device-plugin")] == 0.0
        _cycle(agent, 20)
        assert len(kube_api.events(involved_name=node, reason="AcceleratorPluginCrashLoop")) == 1
        _set_status(kube_api, name)
        _cycle(agent, 30)
        assert _condition(kube_api, node)["status"] == "False"
        (ok,) = kube_api.events(involved_name=node, reason="AcceleratorPluginRecovered")
        assert ok["type"] == "Normal"
        assert _stack_up(agent)[("nvidia", "device-plugin")] == 1.0
    finally:
        agent.close()


def test_an_absent_plugin_with_devices_present_waits_for_the_grace(kube_api, tmp_path):
    agent = HealthAgent(_scenario(tmp_path), kube_api.write_kubeconfig(tmp_path / "kc"),
                        health={"stack_grace_seconds": 120})
    node = agent.node
    try:
        kube_api.seed_node(node)
        agent.cycle(0)
        agent.cycle(1)
        assert _condition(kube_api, node)["status"] == "False"  # within the grace
        assert _stack_up(agent)[("nvidia", "plugins")] == 0.0
        _cycle(agent, 120)
        assert _condition(kube_api, node)["status"] == "False"
        _cycle(agent, 121)
        cond = _condition(kube_api, node)
        assert (cond["status"], cond["reason"]) == ("True", "AcceleratorPluginAbsent")
        assert not kube_api.node(node)["spec"].get("taints")
        # the plugin is deployed: cleared
        kube_api.seed_pod("nvidia", "nvdp-1", node, labels={"app.kubernetes.io/name": "nvidia-device-plugin"})
        _set_status(kube_api, "nvdp-1")
        _cycle(agent, 140)
        assert _condition(kube_api, node)["status"] == "False"
        assert kube_api.events(involved_name=node, reason="AcceleratorPluginRecovered")
    finally:
        agent.close()


def test_off_says_nothing_and_lists_nothing(kube_api, tmp_path):
    agent = HealthAgent(_scenario(tmp_path), kube_api.write_kubeconfig(tmp_path / "kc"),
                        health={"stack": False, "stack_grace_seconds": 0})
    try:
        kube_api.seed_node(agent.node)
        agent.cycle(0)
        _cycle(agent, 1)
        _cycle(agent, 10)
        assert _condition(kube_api, agent.node)["status"] == "False"
        assert not [r for r in kube_api.requests if r.path == "/api/v1/pods" and "labelSelector" in r.query]
        assert N.STACK_COMPONENT_UP.name not in {m.name for m in agent.metrics.collect()}
    finally:
        agent.close()
