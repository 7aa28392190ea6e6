"""The kernel log in simulation: scenario lines in the simulated ring buffer fail the devices
they name in the next cycle, `inspect --at` and `health --dry-run` see them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from hetero_exporter import cli
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate.scenario import ScenarioError, from_dict

SCENARIO = str(Path(__file__).resolve().parents[1] / "fixtures" / "scenarios" / "kernel-log-faults.yaml")


def _wiring(extra_args=(), clock=None) -> "Agent":
    args = cli.build_parser().parse_args(["inspect", "--simulate", SCENARIO, "--log-format", "text", *extra_args])
    return cli.agent(args, clock=clock)


def _health(snap, vendor: str, index: int) -> str:
    return next(d.health.state for d in snap.devices if d.identity.vendor == vendor and d.identity.index == index)


def test_an_xid79_line_fails_its_gpu_in_the_next_cycle_and_an_amdgpu_ue_line_fails_its_gpu():
    clock = ManualClock()
    clock.set_t(20)
    w = _wiring(clock=clock)  # deterministic: the scenario clock moves only when the test says
    sampler = w.start().sampler
    try:
        snap = sampler.collect()
        assert _health(snap, "nvidia", 1) == "ok" and _health(snap, "amd", 1) == "ok"
        clock.set_t(31)
        w.parts.kernel_log.follower.drain()  # what the follower's thread does when the line arrives
        snap = sampler.collect()
        assert _health(snap, "nvidia", 1) == "failed"
        gpu = next(d for d in snap.devices if d.identity.vendor == "nvidia" and d.identity.index == 1)
        assert [(f.code, f.source) for f in gpu.faults] == [("79", "kmsg")]
        assert w.parts.verdicts.node.unhealthy
        assert _health(snap, "amd", 1) == "ok"
        clock.set_t(46)
        w.parts.kernel_log.follower.drain()
        snap = sampler.collect()
        assert _health(snap, "amd", 1) == "failed" and _health(snap, "amd", 0) == "ok"
        clock.set_t(60)
        w.parts.kernel_log.follower.drain()
        snap = sampler.collect()  # sticky; the all-clear line on amd 0 is no fault
        assert [_health(snap, "nvidia", i) for i in range(4)] == ["ok", "failed", "ok", "ok"]
        assert [_health(snap, "amd", i) for i in range(2)] == ["ok", "failed"]
        assert w.parts.kernel_log.follower.status()["records"] == 5
    finally:
        sampler.close()
        w.close()


def test_inspect_at_sees_every_line_emitted_up_to_the_scenario_clock(capsys):
    assert cli.main(["inspect", "--simulate", SCENARIO, "--at", "60", "--json", "--log-format", "text"]) == 0
    doc = json.loads(capsys.readouterr().out)
    states = {(d["identity"]["vendor"], d["identity"]["index"]): d["health"]["state"] for d in doc["devices"]}
    assert states[("nvidia", 1)] == "failed" and states[("amd", 1)] == "failed"
    assert sum(s == "failed" for s in states.values()) == 2
    assert cli.main(["inspect", "--simulate", SCENARIO, "--at", "10", "--json", "--log-format", "text"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert all(d["health"]["state"] == "ok" for d in doc["devices"])


def test_health_dry_run_shows_the_taint(capsys, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert cli.main(["health", "--dry-run", "--simulate", SCENARIO, "--at", "60", "--log-format", "text"]) == 0
    out = capsys.readouterr().out
    assert "accelerator-unhealthy=device-lost:NoSchedule" in out
    assert "XID 79" in out and "ras-uncorrectable-umc" in out


def test_kernel_log_off_leaves_the_devices_alone(capsys):
    assert cli.main(["inspect", "--simulate", SCENARIO, "--at", "60", "--json", "--kernel-log", "off",
                     "--log-format", "text"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert all(d["health"]["state"] == "ok" for d in doc["devices"])


def test_scenario_lines_substitute_the_device_and_say_what_is_missing():
    doc = {"devices": [{"vendor": "nvidia", "count": 2, "pci_address": "0000:18:00.0"}],
           "kernel_log": [{"at": 3, "vendor": "nvidia", "index": 1, "line": "NVRM: Xid (PCI:{bus}): 79, x {pci} {uuid}"},
                          {"at": 1, "line": "amdgpu: {12} braces stay"}]}
    s = from_dict(doc, "t")
    assert [x.at for x in s.kernel_log] == [1.0, 3.0]
    assert s.kernel_log[1].line == f"NVRM: Xid (PCI:0000:28:00): 79, x 0000:28:00.0 {s.devices[1].uuid}"
    assert s.kernel_log[0].line == "amdgpu: {12} braces stay"
    with pytest.raises(ScenarioError, match="vendor and index"):
        from_dict({"devices": doc["devices"], "kernel_log": [{"at": 1, "line": "x {pci}"}]}, "t")
    with pytest.raises(ScenarioError, match="at and line"):
        from_dict({"kernel_log": [{"line": "x"}]}, "t")


def test_the_run_command_exports_the_follower_metrics():
    from prometheus_client import CollectorRegistry, generate_latest

    from hetero_exporter.exposition.collector import KernelLogCollector
    w = _wiring(["--at", "60"])
    sampler = w.start().sampler
    try:
        reg = CollectorRegistry()
        reg.register(KernelLogCollector(w.parts.kernel_log.follower.status))
        text = generate_latest(reg).decode()
    finally:
        sampler.close()
        w.close()
    assert "accelerator_kernel_log_up 1.0" in text
    assert 'accelerator_kernel_log_events_total{code="79",vendor="nvidia"} 1.0' in text
    assert 'accelerator_kernel_log_events_total{code="ras-uncorrectable-umc",vendor="amd"} 1.0' in text


def test_args_namespace_without_the_flag_still_wires():
    # commands built elsewhere (tests, embedding programs) may not carry --kernel-log
    args = argparse.Namespace(config=None, simulate=SCENARIO, simulate_if_absent=False, at=60.0, node_name=None,
                              kubeconfig=None, interval=None, log_format=None, listen=None)
    w = cli.agent(args)
    sampler = w.start().sampler
    try:
        snap = sampler.collect()
    finally:
        sampler.close()
        w.close()
    assert _health(snap, "nvidia", 1) == "failed"
