"""The health loop end to end: scenario -> NVML collector (fake pynvml) -> rules -> remedy ->
the real `kubernetes` client -> the loopback API server. These are the "must show" items."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("kubernetes")

from health_agent import make_agent  # noqa: E402,F401

KEY = "hetero-exporter.io/accelerator-unhealthy"


def _taints(node):
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t["key"] == KEY]


def _condition(node):
    return next((c for c in node["status"].get("conditions", []) if c["type"] == "AcceleratorUnhealthy"), None)


def test_xid79_taints_within_one_cycle_then_reset_clears(kube_api, make_agent):
    agent = make_agent("health-xid79.yaml")
    kube_api.seed_node(agent.node, taints=[{"key": "team/maintenance", "effect": "PreferNoSchedule"}])
    agent.cycle(0)  # first cycle reads the bookkeeping (none yet)
    agent.run(10, 50)
    node = kube_api.node(agent.node)
    assert _taints(node) == []
    assert _condition(node)["status"] == "False"
    assert kube_api.events(type="Warning") == []

    agent.cycle(60)  # the XID 79 happens at t=60: one cycle later the node is tainted
    node = kube_api.node(agent.node)
    assert _taints(node) == [{"key": KEY, "value": "device-lost", "effect": "NoSchedule"}]
    assert {"key": "team/maintenance", "effect": "PreferNoSchedule"} in node["spec"]["taints"]
    cond = _condition(node)
    gpu5 = next(d for d in agent.last_snapshot.devices if d.identity.index == 5)
    assert cond["status"] == "True"
    assert cond["reason"] in ("NvidiaXid79", "NvidiaGpuLost")
    assert "GPU 5" in cond["message"] and gpu5.identity.uuid in cond["message"]
    assert "fallen off the bus" in cond["message"] or "lost" in cond["message"]
    warnings = kube_api.events(type="Warning")
    assert len(warnings) == 1, [e["message"] for e in warnings]
    assert "GPU 5" in warnings[0]["message"] and "tainted the node" in warnings[0]["message"]
    assert warnings[0]["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": agent.node,
                                             "uid": agent.node}

    # the XID 79 event itself comes through NVML's event thread: once it is in, the condition
    # names it (the cause) rather than gpu-lost (the symptom), and no second Warning event is sent
    # (same class of fault on the same device)
    reasons = []
    for t in range(70, 180, 10):  # lost for 2 minutes
        agent.cycle(t)
        reasons.append(_condition(kube_api.node(agent.node))["reason"])
    assert reasons[-1] == "NvidiaXid79" and "fallen off the bus" in _condition(kube_api.node(agent.node))["message"]
    assert len(kube_api.events(type="Warning")) == 1
    versions = kube_api.node_versions(agent.node)
    assert sum(1 for a, b in zip(versions, versions[1:]) if not _taints(a) and _taints(b)) == 1

    agent.cycle(180)  # the reset: the GPU reads again
    node = kube_api.node(agent.node)
    assert _taints(node) == []
    assert {"key": "team/maintenance", "effect": "PreferNoSchedule"} in node["spec"]["taints"]
    assert _condition(node)["status"] == "False"
    normal = kube_api.events(type="Normal", reason="AcceleratorRecovered")
    assert len(normal) == 1 and "GPU 5" in normal[0]["message"]
    assert "removed the taint" in normal[0]["message"]
    book = json.loads(node["metadata"]["annotations"]["hetero-exporter.io/agent-state"])
    assert book["taint"] is None and book["devices"] == {} and book["sticky"] == {}
    assert agent.metrics.actions()[("taint", "ok")] == 1
    assert agent.metrics.actions()[("untaint", "ok")] == 1


def test_flapping_temperature_never_toggles_taint_or_condition(kube_api, make_agent):
    agent = make_agent("health-flapping-temperature.yaml")
    kube_api.seed_node(agent.node)
    states = []
    for t in range(0, 250, 10):
        agent.cycle(t)
        gpu2 = next(d for d in agent.last_snapshot.devices if d.identity.index == 2)
        states.append(gpu2.health.state)
    assert "degraded" in states
    first = states.index("degraded")
    # once degraded it stays degraded while the temperature flaps (no toggling), then
    # recovers once when it stays cool
    last = len(states) - 1 - states[::-1].index("degraded")
    assert set(states[first:last + 1]) == {"degraded"}
    assert states[-1] == "ok"
    versions = kube_api.node_versions(agent.node)
    assert all(_taints(v) == [] for v in versions)
    conds = [_condition(v) for v in versions if _condition(v)]
    assert {c["status"] for c in conds} == {"False"}
    assert len(kube_api.events(type="Warning")) == 1  # temperature-high announced once
    assert len(kube_api.events(reason="AcceleratorRecovered")) == 1


def test_observe_mode_writes_nothing(kube_api, make_agent):
    agent = make_agent("health-xid79.yaml", mode="observe")
    kube_api.seed_node(agent.node)
    agent.run(0, 80)
    assert kube_api.writes() == []
    assert agent.loop.last.plan.explain  # it still knows what it would do
    assert any("taint" in line for line in agent.loop.last.plan.explain)


def test_dry_run_says_what_it_would_do_and_never_taints(kube_api, make_agent):
    agent = make_agent("health-xid79.yaml", mode="dry-run")
    kube_api.seed_node(agent.node)
    agent.run(0, 100)
    node = kube_api.node(agent.node)
    assert _taints(node) == [] and _condition(node) is None
    warnings = kube_api.events(type="Warning")
    assert len(warnings) == 1
    assert warnings[0]["message"].startswith("[dry-run]") and "would taint" in warnings[0]["message"]
    assert "hetero-exporter.io/devices" in node["metadata"]["annotations"]


def test_steady_state_rereads_the_node_only_at_resync(kube_api, make_agent):
    agent = make_agent("health-xid79.yaml")
    kube_api.seed_node(agent.node)
    agent.run(0, 50)  # healthy, nothing changes after the first write
    gets = [r for r in kube_api.requests if r.method == "GET" and r.path.endswith(f"/nodes/{agent.node}")]
    assert 1 <= len(gets) <= 2  # the restore read and the first reconcile; then skipped (resync 60 s)
    agent.run(60, 130)
    gets = [r for r in kube_api.requests if r.method == "GET" and r.path.endswith(f"/nodes/{agent.node}")]
    assert len(gets) <= 2 + 1 + 2  # the failure at 60, then at most one re-read per 60 s

