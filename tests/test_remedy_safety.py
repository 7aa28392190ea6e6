"""Remedy under adverse conditions: concurrent writers (409), API outages and lost replies,
an agent restart in the middle of an episode, the blast-radius budget, and what the agent
must never touch (taints and cordons it did not add)."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("kubernetes")

from health_agent import make_agent  # noqa: E402,F401

KEY = "hetero-exporter.io/accelerator-unhealthy"
BOOK = "hetero-exporter.io/agent-state"
NODE_PATH = r"/api/v1/nodes/gpu-node-7$"


def _ours(node):
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t["key"] == KEY]


def _condition(node):
    return next((c for c in node["status"].get("conditions", []) if c["type"] == "AcceleratorUnhealthy"), None)


def _taint_additions(versions):
    return sum(1 for a, b in zip(versions, versions[1:]) if not _ours(a) and _ours(b))


def test_concurrent_writer_409_then_right_state_written_once(kube_api, make_agent):
    agent = make_agent()
    kube_api.seed_node(agent.node)
    agent.run(0, 50)

    def human_adds_a_taint():
        kube_api.mutate_node(agent.node, lambda n: n["spec"].setdefault("taints", []).append(
            {"key": "team/maintenance", "effect": "NoSchedule"}))

    # between the agent's read and its write, someone else writes the node: the server answers
    # the agent's patch (carrying the resourceVersion it read) with a genuine 409
    kube_api.before_next(human_adds_a_taint, methods=["PATCH"], path=NODE_PATH)
    out = agent.cycle(60)
    assert out.conflicts == 1 and out.wrote_node and out.error is None
    assert any(r.status == 409 for r in kube_api.requests if r.method == "PATCH")
    node = kube_api.node(agent.node)
    assert {"key": "team/maintenance", "effect": "NoSchedule"} in node["spec"]["taints"]  # not clobbered
    assert _ours(node) == [{"key": KEY, "value": "device-lost", "effect": "NoSchedule"}]
    agent.run(70, 100)
    assert _taint_additions(kube_api.node_versions(agent.node)) == 1
    assert len(kube_api.events(type="Warning")) == 1
    assert agent.metrics.actions()[("node", "conflict")] == 1


def test_outage_then_recovery_writes_once(kube_api, make_agent):
    agent = make_agent(timeout=0.5)
    kube_api.seed_node(agent.node)
    agent.run(0, 50)
    kube_api.fail_next(100, 503)  # the API server is down for this cycle
    out = agent.cycle(60)
    assert out is not None and out.error and "503" in out.error
    assert _ours(kube_api.node(agent.node)) == []
    kube_api.clear_faults()
    out = agent.cycle(70)
    assert out.error is None and out.wrote_node
    agent.run(80, 120)
    node = kube_api.node(agent.node)
    assert _ours(node) == [{"key": KEY, "value": "device-lost", "effect": "NoSchedule"}]
    assert _condition(node)["status"] == "True"
    assert _taint_additions(kube_api.node_versions(agent.node)) == 1
    assert len(kube_api.events(type="Warning")) == 1
    assert agent.metrics.actions()[("read", "error")] == 1


def test_lost_replies_do_not_write_twice(kube_api, make_agent):
    agent = make_agent(timeout=0.5)
    kube_api.seed_node(agent.node)
    agent.run(0, 50)
    # the taint patch lands but its reply never arrives (client timeout), and the event is
    # created but answered 500: the agent must find both done, not do them again
    kube_api.delay_next(1, 2.0, methods=["PATCH"], path=NODE_PATH, after_apply=True)
    out = agent.cycle(60)
    assert out.error and "no answer" in out.error
    assert _ours(kube_api.node(agent.node))  # it did land
    kube_api.fail_next(1, 500, methods=["POST"], path="/events$", after_apply=True)
    agent.run(70, 120)
    assert _taint_additions(kube_api.node_versions(agent.node)) == 1
    assert len(kube_api.events(type="Warning")) == 1
    posts = [r for r in kube_api.requests if r.method == "POST" and r.path.endswith("/events")]
    assert [r.status for r in posts][:2] == [500, 409]  # sent, reply lost; resent: AlreadyExists
    taint_patches = [r for r in kube_api.writes(path=NODE_PATH, changed=True)
                     if "spec" in (r.body or {})]
    assert len(taint_patches) == 1


def test_drop_of_status_write_keeps_condition_right(kube_api, make_agent):
    agent = make_agent(timeout=0.5)
    kube_api.seed_node(agent.node)
    agent.run(0, 50)
    kube_api.drop_next(1, methods=["PATCH"], path="/status$")
    agent.cycle(60)
    agent.cycle(70)
    cond = _condition(kube_api.node(agent.node))
    assert cond["status"] == "True" and "GPU 5" in cond["message"]


ECC_POLICY = {"min_healthy_fraction": 1.0,
              "readings": [{"code": "ecc-uncorrected", "field": "ecc_uncorrected_total", "increase": 1,
                            "severity": "critical", "class": "memory-ecc", "action": "reset-device"}]}


def test_agent_restart_in_the_middle_changes_nothing(kube_api, make_agent):
    agent = make_agent("health-ecc-sticky.yaml", policy=ECC_POLICY)
    kube_api.seed_node(agent.node)
    agent.run(0, 60)
    node = kube_api.node(agent.node)
    assert _ours(node) == [{"key": KEY, "value": "too-few-healthy", "effect": "NoSchedule"}]
    cond_before = _condition(node)
    assert cond_before["status"] == "True" and "ecc-uncorrected" in cond_before["message"]
    book = json.loads(node["metadata"]["annotations"][BOOK])
    assert list(book["sticky"].values())[0][0]["fault"]["code"] == "ecc-uncorrected"
    events_before = kube_api.events()
    agent.close()

    # a new process: new collector (its counters start afresh, so the ECC increase is not
    # seen again), new rules state, same node and boot
    again = make_agent("health-ecc-sticky.yaml", policy=ECC_POLICY, clock=agent.clock)
    assert again.cycle(70) is None  # reads back the bookkeeping first
    again.run(80, 190)
    node = kube_api.node(agent.node)
    assert _ours(node) == [{"key": KEY, "value": "too-few-healthy", "effect": "NoSchedule"}]
    cond = _condition(node)
    assert (cond["status"], cond["reason"], cond["message"], cond["lastTransitionTime"]) == (
        cond_before["status"], cond_before["reason"], cond_before["message"], cond_before["lastTransitionTime"])
    assert kube_api.events() == events_before
    versions = kube_api.node_versions(agent.node)
    first = next(i for i, v in enumerate(versions) if _ours(v))
    assert all(_ours(v) for v in versions[first:])  # the taint never went away meanwhile

    again.cycle(200)  # the reset: the volatile ECC counter restarts from zero
    node = kube_api.node(agent.node)
    assert _ours(node) == [] and _condition(node)["status"] == "False"
    recovered = kube_api.events(reason="AcceleratorRecovered")
    assert len(recovered) == 1 and "GPU 1" in recovered[0]["message"]


def test_node_reboot_clears_sticky_faults(kube_api, make_agent):
    agent = make_agent("health-ecc-sticky.yaml", policy=ECC_POLICY)
    kube_api.seed_node(agent.node)
    agent.run(0, 60)
    assert _ours(kube_api.node(agent.node))
    agent.close()
    rebooted = make_agent("health-ecc-sticky.yaml", policy=ECC_POLICY, clock=agent.clock, boot_id="boot-2")
    rebooted.run(70, 90)
    assert _ours(kube_api.node(agent.node)) == []


def test_budget_exhausted_no_taint_metric_and_event(kube_api, make_agent):
    agent = make_agent(health={"budget_max_fraction": 0.1})
    for i in range(9):
        kube_api.seed_node(f"gpu-node-{100 + i}", labels={"hetero-exporter.io/accelerator": "true"})
    kube_api.seed_node("gpu-node-99", labels={"hetero-exporter.io/accelerator": "true"},
                       taints=[{"key": KEY, "value": "device-lost", "effect": "NoSchedule"}])
    kube_api.seed_node(agent.node)
    agent.run(0, 100)
    node = kube_api.node(agent.node)
    assert _ours(node) == []
    assert _condition(node)["status"] == "True"
    assert "refused" in _condition(node)["message"]
    assert agent.metrics.budget_exhausted
    assert agent.metrics.actions()[("taint", "refused")] >= 1
    exhausted = kube_api.events(reason="AcceleratorTaintBudgetExhausted")
    assert len(exhausted) == 1 and "1 of 11 accelerator nodes" in exhausted[0]["message"]
    from prometheus_client import CollectorRegistry, generate_latest
    reg = CollectorRegistry()
    reg.register(agent.metrics)
    text = generate_latest(reg).decode()
    assert "accelerator_health_budget_exhausted 1.0" in text
    assert re.search(r'accelerator_health_actions_total\{action="taint",result="refused"\} [1-9]', text)

    # the other node recovers: the budget frees and the taint goes on at the next re-read
    kube_api.mutate_node("gpu-node-99", lambda n: n["spec"].pop("taints"))
    agent.run(110, 170)
    assert _ours(kube_api.node(agent.node))
    assert not agent.metrics.budget_exhausted


def test_never_removes_a_taint_or_cordon_it_did_not_add(kube_api, make_agent):
    agent = make_agent(health={"cordon": True})
    kube_api.seed_node(agent.node, unschedulable=True,
                       taints=[{"key": KEY, "value": "manual", "effect": "NoSchedule"}])
    agent.run(0, 100)
    agent.run(180, 220)  # failure and recovery
    node = kube_api.node(agent.node)
    assert node["spec"]["unschedulable"] is True  # the human's cordon stays
    assert _ours(node) == [{"key": KEY, "value": "manual", "effect": "NoSchedule"}]
    book = json.loads(node["metadata"]["annotations"][BOOK])
    assert book["cordoned"] is False and book["taint"] is None
    assert all("tainted the node" not in e["message"] and "cordoned" not in e["message"]
               for e in kube_api.events())  # nothing claimed that it did not do


def test_opt_in_cordon_and_noexecute_are_undone_on_recovery(kube_api, make_agent):
    agent = make_agent(health={"cordon": True, "no_execute": True})
    kube_api.seed_node(agent.node)
    agent.run(0, 60)
    node = kube_api.node(agent.node)
    assert node["spec"]["unschedulable"] is True
    assert sorted(t["effect"] for t in _ours(node)) == ["NoExecute", "NoSchedule"]
    agent.run(70, 200)
    node = kube_api.node(agent.node)
    assert not node["spec"].get("unschedulable") and _ours(node) == []


def test_someone_removing_our_taint_is_respected_until_recovery(kube_api, make_agent):
    agent = make_agent()
    kube_api.seed_node(agent.node)
    agent.run(0, 70)
    kube_api.mutate_node(agent.node, lambda n: n["spec"].pop("taints"))
    agent.run(80, 170)
    assert _ours(kube_api.node(agent.node)) == []
    assert _taint_additions(kube_api.node_versions(agent.node)) == 1
    agent.run(180, 200)  # recovery: nothing to remove, no claim that it removed anything
    assert not any("removed the taint" in e["message"] for e in kube_api.events())
    assert len(kube_api.events(reason="AcceleratorRecovered")) == 1
    assert agent.metrics.actions().get(("untaint", "ok")) is None
