"""Issue 39 §1: the stack health's plugin pods come from the pod cache's watch of the node.

With a synced watch an idle reconcile lists no pods (the remedy listed each plugin selector per
reconcile: 2.6 of the 3.5 idle requests per node per minute), and the verdicts are those of the
list: a Ready plugin is up, a crash loop is a reason at once, a pod Ready no more or gone is one
after the grace. A watch not in sync, or broken, falls back to the list; a failed list as well
stays unknown (never absent)."""

from __future__ import annotations

import time

import pytest

import kubeapi
from health_agent import HealthAgent
from test_pod_cache_failed import _until as _until_10s
from test_stack_health import GRACE, _condition, _cycle, _scenario, _set_status, _stack_up

pytest.importorskip("kubernetes")

from hetero_exporter.health.act.remedy import HealthLoop, Remedy  # noqa: E402
from hetero_exporter.health.plan.stack import component_up, plan_stack, plugin_selectors  # noqa: E402
from hetero_exporter.k8s.client import connect  # noqa: E402
from hetero_exporter.k8s.pods import PodCache, selector_terms  # noqa: E402
from hetero_exporter.model import names as N  # noqa: E402

PLUGIN = "nvidia-device-plugin-daemonset-x1"
LABELS = {"app": "nvidia-device-plugin-daemonset"}  # the GPU Operator's


def _until(check) -> bool:
    return _until_10s(check, 60.0)  # generous: a loaded 2-core machine


def _watched(kube_api, tmp_path, node, *, backoff=(1.0, 30.0), start=True):
    """A HealthAgent whose remedy reads the plugin pods (and failed pods) from a pod cache."""
    agent = HealthAgent(_scenario(tmp_path), kube_api.write_kubeconfig(tmp_path / "kc"),
                        node=node, health={"stack_grace_seconds": GRACE})
    cluster = connect(None, env={"KUBECONFIG": kube_api.write_kubeconfig(tmp_path / "kc-pods")})
    cache = PodCache(cluster.api_client, node, request_timeout=5, backoff=backoff, plugin_selectors=plugin_selectors())
    if start:
        cache.start(wait_first=10)
        assert _until(lambda: cache.synced)
    agent.remedy = Remedy(agent.cluster, node, agent.policy, agent.cfg, agent.metrics, clock=agent.clock,
                          resource_of=lambda d: "nvidia.com/gpu", environ={},
                          failed_pods=cache.failed_pods, plugin_pods=cache.plugin_pods)
    agent.loop = HealthLoop(agent.remedy, agent.verdicts, boot_id=agent.boot_id)
    return agent, cache


def _plugin_lists(kube_api) -> int:
    """The remedy's plugin pod lists so far (the pod cache lists by field selector alone)."""
    return sum(1 for r in list(kube_api.requests) if r.path == "/api/v1/pods" and "labelSelector" in r.query)


def _seen(cache, check) -> bool:
    """Wait until the cache's view of the plugin pod satisfies ``check``."""
    def ok():
        pods = cache.plugin_pods("app=nvidia-device-plugin-daemonset")
        return pods is not None and check(pods)
    return _until(ok)


def test_selector_terms_serve_equality_selectors_only():
    assert selector_terms("app=x,app.kubernetes.io/name=y") == (("app", "x"), ("app.kubernetes.io/name", "y"))
    for other in ("app!=x", "app==x", "app in (x,y)", "app", "!app", "app=", "=x", ""):
        assert selector_terms(other) is None, other
    assert set(plugin_selectors()) >= {"app=nvidia-device-plugin-daemonset", "name=amdgpu-dp-ds"}


def test_a_synced_watch_serves_the_plugin_pods_and_an_idle_reconcile_lists_none(kube_api, tmp_path):
    node = "gpu-w1"
    kube_api.seed_node(node)
    kube_api.seed_pod("nvidia", PLUGIN, node, labels=LABELS)
    _set_status(kube_api, PLUGIN)
    kube_api.seed_pod("nvidia", "elsewhere", "gpu-w2", labels=LABELS)  # another node's: never seen
    agent, cache = _watched(kube_api, tmp_path, node)
    try:
        assert _seen(cache, lambda pods: [p["metadata"]["name"] for p in pods] == [PLUGIN])
        agent.cycle(0)
        agent.cycle(1)
        before = kube_api.tally()
        for t in (10, 20, 30):
            _cycle(agent, t)  # idle reconciles
        after = kube_api.tally()
        assert after.get("list pods", 0) == before.get("list pods", 0)  # none: the watch answers
        assert _plugin_lists(kube_api) == 0
        assert _condition(kube_api, node)["status"] == "False"
        assert _stack_up(agent)[("nvidia", "device-plugin")] == 1.0
        # crash-looping: a reason at once
        _set_status(kube_api, PLUGIN, ready=False, waiting="CrashLoopBackOff", restarts=4)
        assert _seen(cache, lambda pods: "CrashLoopBackOff" in str(pods))
        _cycle(agent, 40)
        cond = _condition(kube_api, node)
        assert (cond["status"], cond["reason"]) == ("True", "AcceleratorPluginCrashLoop") and PLUGIN in cond["message"]
        assert _stack_up(agent)[("nvidia", "device-plugin")] == 0.0
        # Ready again: cleared
        _set_status(kube_api, PLUGIN)
        assert _seen(cache, lambda pods: "CrashLoopBackOff" not in str(pods))
        _cycle(agent, 50)
        assert _condition(kube_api, node)["status"] == "False"
        assert kube_api.events(involved_name=node, reason="AcceleratorPluginRecovered")
        # gone: absent only after the grace
        kube_api.delete(kubeapi.PODS, "nvidia", PLUGIN)
        assert _seen(cache, lambda pods: pods == [])
        _cycle(agent, 60)
        assert _condition(kube_api, node)["status"] == "False"
        assert _stack_up(agent)[("nvidia", "plugins")] == 0.0
        _cycle(agent, 60 + GRACE)
        cond = _condition(kube_api, node)
        assert (cond["status"], cond["reason"]) == ("True", "AcceleratorPluginAbsent")
        assert _plugin_lists(kube_api) == 0 and kube_api.tally().get("list pods", 0) == before.get("list pods", 0)
    finally:
        cache.close()
        agent.close()


@pytest.mark.parametrize("state", [{}, {"ready": False}, {"ready": False, "since": -10.0},
                                   {"ready": False, "since": -2 * GRACE},
                                   {"ready": False, "waiting": "CrashLoopBackOff", "restarts": 9},
                                   {"restarts": 5, "finished": -30.0}, {"restarts": 5, "finished": -4000.0}])
def test_the_watch_judges_as_the_list_does(kube_api, tmp_path, state):
    node = "gpu-w3"
    kube_api.seed_node(node)
    agent, cache = _watched(kube_api, tmp_path, node)
    listing = Remedy(agent.cluster, node, agent.policy, agent.cfg, clock=agent.clock, environ={})
    t0 = agent.clock()  # the pods' times are relative to the agent's clock
    for name, labels in ((PLUGIN, LABELS), ("nvidia-dra-kp", {"nvidia-dra-driver-gpu-component": "kubelet-plugin"})):
        kube_api.seed_pod("nvidia", name, node, labels=labels)
        _set_status(kube_api, name, **{k: t0 + v if k in ("since", "finished") else v for k, v in state.items()})
    try:
        assert _until(lambda: [len(cache.plugin_pods(sel) or ()) for sel in
                               ("app=nvidia-device-plugin-daemonset", "nvidia-dra-driver-gpu-component=kubelet-plugin")]
                      == [1, 1] and "conditions" in str(cache.plugin_pods("app=nvidia-device-plugin-daemonset")))
        agent.cycle(0)
        snap = agent.last_snapshot
        now = agent.clock()
        lists = _plugin_lists(kube_api)
        from_watch = agent.remedy._cluster._stack(snap)
        assert _plugin_lists(kube_api) == lists
        from_list = listing._cluster._stack(snap)
        assert _plugin_lists(kube_api) > lists  # the other one did list
        assert [(r.vendor, r.component, r.selector) for r in from_watch] == \
            [(r.vendor, r.component, r.selector) for r in from_list]
        assert [len(r.pods) for r in from_watch] == [len(r.pods) for r in from_list]
        assert component_up(from_watch, GRACE, now) == component_up(from_list, GRACE, now)
        for later in (0.0, GRACE + 1):
            a = plan_stack(node, ["nvidia"], from_watch, {}, GRACE, now + later)
            b = plan_stack(node, ["nvidia"], from_list, {}, GRACE, now + later)
            assert (a.faults, a.state, a.events) == (b.faults, b.state, b.events)
    finally:
        cache.close()
        agent.close()


def test_no_synced_watch_falls_back_to_the_list(kube_api, tmp_path):
    node = "gpu-w4"
    kube_api.seed_node(node)
    kube_api.seed_pod("nvidia", PLUGIN, node, labels=LABELS)
    _set_status(kube_api, PLUGIN, ready=False, waiting="CrashLoopBackOff", restarts=4)
    agent, cache = _watched(kube_api, tmp_path, node, start=False)  # never started: not in sync
    try:
        assert cache.plugin_pods("app=nvidia-device-plugin-daemonset") is None
        agent.cycle(0)
        agent.cycle(1)
        assert _plugin_lists(kube_api) > 0
        assert _condition(kube_api, node)["reason"] == "AcceleratorPluginCrashLoop"
        assert cache.plugin_pods("name=not-a-vendors-selector") is None  # a selector not watched: listed
    finally:
        agent.close()


def test_a_broken_watch_falls_back_and_a_failed_list_is_never_absent(kube_api, tmp_path):
    node = "gpu-w5"
    kube_api.seed_node(node)
    # a long back-off: once broken, the cache stays out of sync for the test's length
    agent, cache = _watched(kube_api, tmp_path, node, backoff=(120.0, 600.0))
    try:
        assert _seen(cache, lambda pods: pods == [])
        agent.cycle(0)
        agent.cycle(1)
        assert _plugin_lists(kube_api) == 0
        time.sleep(1.1)  # a stream open under 1 s is resumed after the back-off, not at once
        kube_api.fail_next(1000, 500, methods=["GET"], path="^/api/v1/pods$")
        kube_api.close_watches()
        assert _until(lambda: not cache.synced)  # the resumed watch failed
        assert cache.plugin_pods("app=nvidia-device-plugin-daemonset") is None
        kube_api.clear_faults()  # the list answers again; the cache waits out its back-off
        _cycle(agent, 10)
        listed = _plugin_lists(kube_api)
        assert listed > 0  # fell back to the list, which answers: no plugin yet, within the grace
        assert _stack_up(agent)[("nvidia", "plugins")] == 0.0
        # the list fails too: unknown, not absent, however long
        kube_api.fail_next(1000, 500, methods=["GET"], path="^/api/v1/pods$")
        _cycle(agent, 10 + GRACE)
        _cycle(agent, 10 + 3 * GRACE)
        assert _plugin_lists(kube_api) > listed
        assert _condition(kube_api, node)["status"] == "False"
        assert not kube_api.events(involved_name=node, reason="AcceleratorPluginAbsent")
        fams = {m.name: m for m in agent.metrics.collect()}
        assert not [s for m in fams.values() if m.name == N.STACK_COMPONENT_UP.name for s in m.samples
                    if s.labels.get("component") == "plugins"]  # nothing said of the plugins
    finally:
        kube_api.clear_faults()
        cache.close()
        agent.close()
