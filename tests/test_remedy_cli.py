"""`hetero-exporter health --dry-run` and the health loop inside `run`."""

from __future__ import annotations

import time

import pytest

from agent_proc import Agent
from health_agent import SCENARIOS
from hetero_exporter import cli

pytest.importorskip("kubernetes")

XID79_NOW = str(SCENARIOS / "health-xid79-now.yaml")
KEY = "hetero-exporter.io/accelerator-unhealthy"


def test_dry_run_without_cluster_compares_against_an_empty_node(capsys, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert cli.main(["health", "--dry-run", "--simulate", XID79_NOW, "--log-level", "error"]) == 0
    out = capsys.readouterr().out
    assert "no cluster access" in out and "compared against an empty node" in out
    assert "nvidia GPU 5" in out and "failed" in out
    assert f"taint       {KEY}=device-lost:NoSchedule" in out
    assert "AcceleratorUnhealthy=True" in out
    assert "event       Warning Nvidia" in out
    assert "hetero-exporter.io/devices (" in out
    assert "the budget was not checked" in out


def test_dry_run_with_cluster_reads_the_node_and_writes_nothing(capsys, kube_api, tmp_path):
    kc = kube_api.write_kubeconfig(tmp_path / "kc")
    kube_api.seed_node("gpu-node-7", taints=[{"key": KEY, "value": "device-lost", "effect": "NoSchedule"}])
    assert cli.main(["health", "--dry-run", "--simulate", XID79_NOW, "--kubeconfig", kc,
                     "--log-level", "error"]) == 0
    out = capsys.readouterr().out
    assert "read from the API server" in out
    # the taint there was not added by the agent (no bookkeeping): it is left alone
    assert "already on the node and was not added by this agent" in out
    assert kube_api.writes() == []


def test_health_needs_dry_run(capsys):
    assert cli.main(["health"]) == 2  # neither --dry-run nor override (issue 38): a usage error
    assert "--dry-run" in capsys.readouterr().err


def test_run_enforce_taints_the_simulated_node(kube_api, tmp_path):
    kc = kube_api.write_kubeconfig(tmp_path / "kc")
    kube_api.seed_node("gpu-node-7")
    with Agent(["--simulate", XID79_NOW, "--interval", "1", "--health-mode", "enforce",
                "--kubeconfig", kc]) as agent:
        deadline = time.monotonic() + 60
        node = kube_api.node("gpu-node-7")
        while time.monotonic() < deadline and not any(
                t["key"] == KEY for t in node.get("spec", {}).get("taints") or []):
            time.sleep(0.2)
            node = kube_api.node("gpu-node-7")
        assert [t["value"] for t in node["spec"]["taints"] if t["key"] == KEY] == ["device-lost"]
        text = agent.wait_metrics(lambda t: 'accelerator_health_actions_total{action="taint",result="ok"} 1.0' in t)
        assert "accelerator_health_node_unhealthy 1.0" in text
        assert "accelerator_health_kubernetes_up 1.0" in text
    assert len(kube_api.events(type="Warning")) == 1
