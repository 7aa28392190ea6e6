"""accelerator_health_kubernetes_up without cluster access (issue 18, item 9): dry-run and
enforce with no working credentials export 0 from the start (AcceleratorHealthKubernetesDown
fires on it); observe expects no access and leaves the gauge absent."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from agent_proc import Agent
from health_agent import SCENARIOS, HealthAgent
from hetero_exporter.model import names as N
from hetero_exporter.k8s.client import off

pytest.importorskip("kubernetes")

UP = N.HEALTH_KUBERNETES_UP.name


def _text(agent: HealthAgent) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(agent.metrics)
    return generate_latest(reg).decode()


@pytest.mark.parametrize("mode", ["dry-run", "enforce"])
def test_acting_modes_without_cluster_access_export_kubernetes_up_0(mode):
    agent = HealthAgent("health-xid79.yaml", None, mode=mode)
    try:
        assert f"{UP} 0.0" in _text(agent)  # before any cycle
        agent.run(0, 30)  # cycles plan against an empty node and write nothing
        assert not agent.remedy.writes
        assert f"{UP} 0.0" in _text(agent)
    finally:
        agent.close()


def test_an_unusable_cluster_is_no_access_either():
    agent = HealthAgent("health-xid79.yaml", None, mode="enforce")
    try:
        from hetero_exporter.health.act.remedy import Remedy
        remedy = Remedy(off("no KUBECONFIG"), agent.node, agent.policy, agent.cfg, agent.metrics)
        assert not remedy.writes and f"{UP} 0.0" in _text(agent)
    finally:
        agent.close()


def test_observe_mode_leaves_kubernetes_up_absent():
    agent = HealthAgent("health-xid79.yaml", None, mode="observe")
    try:
        agent.run(0, 30)
        text = _text(agent)
        assert UP not in text
        assert "accelerator_health_node_unhealthy" in text  # the loop did run
    finally:
        agent.close()


def test_run_in_enforce_mode_without_credentials_serves_kubernetes_up_0():
    no_cluster = {"KUBECONFIG": "", "KUBERNETES_SERVICE_HOST": ""}
    with Agent(["--simulate", str(SCENARIOS / "health-xid79-now.yaml"), "--interval", "1",
                "--health-mode", "enforce"], env=no_cluster) as agent:
        text = agent.wait_metrics(lambda t: f"{UP} " in t)
        assert f"{UP} 0.0" in text
        assert any(doc.get("msg") == "health loop writes nothing" for doc in agent.logs)
