"""Issue 38, §3: the recovery gate end to end against the loopback API server (enforce mode, the
agent's own token under deploy/base's RBAC and admission policy).

- Evidence gate: GPU 5 of a class with ``evidence_annotation`` falls off the bus (node taint,
  DeviceTaintRule); its fault clears at the reset, and it stays ``recovering`` (DeviceTaintRule
  NoSchedule, not serving in the node verdict, the condition's reason ``AcceleratorsRecovering``
  naming the gate) through evidence dated before the failure and a failed certification, and
  through a restart of the agent (the watch is kept in the book); a pass dated after the failure
  clears it, the recovery event names the gate's result, and everything the agent added goes.
- ``health --dry-run`` against that Node shows the device recovering and the gate's last result.
- Exec gate: a fake self-test under a tmp host root fails (its output is the reason), then passes.
- The agent builds the self-test runner where a class has an exec gate and closes it at stop.
"""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path
from typing import Callable

import pytest

import kubeapi
from hetero_exporter.health.detect.texts import rfc3339

pytest.importorskip("kubernetes")
pytest.importorskip("celpy", reason="cel-python evaluates the policy's CEL (pip install cel-python)")

KEY = "hetero-exporter.io/accelerator-unhealthy"
BOOK = "hetero-exporter.io/agent-state"
EVIDENCE = "hetero-exporter.io/recovery-evidence"
ACCELERATOR = {"hetero-exporter.io/accelerator": "true"}
SCENARIO = "health-xid79.yaml"  # GPU 5 of eight H100s falls off the bus at t=60, reset at t=180
SCENARIO_FILE = str(Path(__file__).resolve().parent.parent / "fixtures" / "scenarios" / SCENARIO)


def _classes(gate: dict) -> dict:
    return {"resync_seconds": 1, "classes": [{"name": "training", "match": {"vendor": "nvidia", "model": "H100*"},
                                              "node_taint": True, "recovery_gate": gate}]}


def _agent(kube_api, tmp_path, health: dict, token: str):
    from health_agent import HealthAgent
    return HealthAgent(SCENARIO, kube_api.write_kubeconfig(tmp_path / "agent", token=token), health=health,
                       state_dir=str(tmp_path / "state"))


def _seed(kube_api, agent) -> str:
    """The node, its NVIDIA device plugin running (the stack is sound), and a ResourceSlice
    listing its GPUs by uuid; GPU 5's uuid."""
    kube_api.seed_node(agent.node, labels=ACCELERATOR)
    kube_api.create(kubeapi.PODS, "kube-system", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nvidia-device-plugin-x", "namespace": "kube-system",
                     "labels": {"app.kubernetes.io/name": "nvidia-device-plugin"}},
        "spec": {"nodeName": agent.node, "containers": [{"name": "plugin", "image": "nvidia/k8s-device-plugin"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"name": "plugin", "ready": True, "restartCount": 0,
                                          "state": {"running": {}}}]}})
    agent.cycle(0)
    uuids = {d.identity.index: d.identity.uuid for d in agent.last_snapshot.devices}
    kube_api.seed_resource_slice(f"{agent.node}-gpu.nvidia.com", agent.node, [
        {"name": f"gpu-{i}", "attributes": {"uuid": {"string": u}}} for i, u in sorted(uuids.items())],
        driver="gpu.nvidia.com")
    return uuids[5]


def _effects(api) -> dict[str, str]:
    return {r["spec"]["deviceSelector"]["device"]: r["spec"]["taint"]["effect"]
            for r in api.list(kubeapi.DEVICE_TAINT_RULES)}


def _tainted(api, node: str) -> bool:
    return any(t["key"] == KEY for t in api.node(node)["spec"].get("taints") or [])


def _condition(api, node: str) -> dict:
    return next(c for c in api.node(node)["status"]["conditions"] if c["type"] == "AcceleratorUnhealthy")


def _book(api, node: str) -> dict:
    return json.loads(api.node(node)["metadata"]["annotations"][BOOK])


def _until(agent, start: float, cond: Callable[[], bool], cycles: int = 60) -> float:
    """Cycles every 10 s of scenario time from ``start`` until ``cond()`` holds (bounded: ``cycles``
    cycles and 120 s of real time; the self-tests run on their own thread)."""
    deadline = time.monotonic() + 120
    t = start
    for _ in range(cycles):
        agent.cycle(t)
        if cond():
            return t
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
        t += 10
    raise AssertionError(f"not reached by t={t}")


def _certify(admin: str, node: str, uuid: str, result: str, when: float, detail: str) -> None:
    """The certifier: the evidence annotation written with an operator's credentials."""
    from hetero_exporter.k8s.api import Api
    from hetero_exporter.k8s.client import connect
    body = {"metadata": {"annotations": {EVIDENCE: json.dumps(
        {uuid: {"result": result, "time": rfc3339(when), "detail": detail}})}}}
    Api(connect(admin, env={}).api_client).patch("/api/v1/nodes/{name}", {"name": node}, body=body)


def _dry_run(capsys, admin: str, tmp_path: Path, at: float, gate: dict) -> str:
    from hetero_exporter import cli
    cfg = tmp_path / "dry.yaml"
    cfg.write_text(json.dumps({"health": {"classes": _classes(gate)["classes"]}}))
    rc = cli.main(["health", "--dry-run", "--simulate", SCENARIO_FILE, "--at", str(at), "--kubeconfig", admin, "--config", str(cfg), "--log-level", "error"])
    out = capsys.readouterr().out
    assert rc == 0, out
    return out


def test_an_evidence_gate_holds_a_device_recovering_until_a_pass_after_its_failure(kube_api, tmp_path, capsys):
    from admission import deploy_objects, install
    token = install(kube_api, deploy_objects(), "gpu-node-7")
    admin = kube_api.write_kubeconfig(tmp_path / "admin")
    health = _classes({"evidence_annotation": EVIDENCE})
    agent = _agent(kube_api, tmp_path, health, token)
    try:
        uuid = _seed(kube_api, agent)
        t = _until(agent, 10, lambda: _tainted(kube_api, agent.node))
        assert _effects(kube_api) == {"gpu-5": "NoSchedule"}
        agent.run(t + 10, 170)  # lost until the reset
        failed_at = _book(kube_api, agent.node)["holds"][uuid]["failed_at"]
        # the reset clears the fault: recovering, not serving, the gate pending
        _until(agent, 180, lambda: agent.verdicts.verdicts[uuid].state == "recovering")
        for t in range(300, 340, 10):
            agent.cycle(t)
        assert _effects(kube_api) == {"gpu-5": "NoSchedule"} and _tainted(kube_api, agent.node)
        assert agent.verdicts.node.why.startswith("7 of 8 devices serving") and "1 recovering" in agent.verdicts.node.why
        cond = _condition(kube_api, agent.node)
        assert cond["reason"] == "AcceleratorsRecovering", cond
        assert f"waiting for a pass in {EVIDENCE} (not yet)" in cond["message"]
        assert _book(kube_api, agent.node)["holds"][uuid]["recovering_since"] > failed_at
        # a pass dated before the failure does not count; a failed certification is the reason
        _certify(admin, agent.node, uuid, "pass", failed_at - 30, "old burn-in")
        for t in range(340, 380, 10):
            agent.cycle(t)
        assert agent.verdicts.verdicts[uuid].state == "recovering"
        _certify(admin, agent.node, uuid, "fail", agent.clock() + 5, "HBM row remap pending")
        _until(agent, 380, lambda: "fail: HBM row remap pending" in _condition(kube_api, agent.node)["message"])
        assert agent.verdicts.verdicts[uuid].state == "recovering" and _effects(kube_api) == {"gpu-5": "NoSchedule"}
        # health --dry-run shows it recovering, with the gate's last result
        out = _dry_run(capsys, admin, tmp_path, agent.clock.t(), {"evidence_annotation": EVIDENCE})
        line = next(x for x in out.splitlines() if f"({uuid})" in x)
        assert " recovering " in line and "fail: HBM row remap pending" in line, out
        assert "device taint NoSchedule" in out
        # a restart keeps the watch: the new agent holds it from its first reconcile
        agent.close()
        agent = _agent(kube_api, tmp_path, health, token)
        agent.cycle(500)
        agent.cycle(510)  # the first cycle reads the book back, the second acts
        assert agent.verdicts.verdicts[uuid].state == "recovering"
        assert _effects(kube_api) == {"gpu-5": "NoSchedule"} and _tainted(kube_api, agent.node)
        # certified after the failure: cleared, the gate's result said, everything of ours gone
        _certify(admin, agent.node, uuid, "pass", agent.clock() + 5, "dcgmi diag -r 3 passed")
        _until(agent, 520, lambda: not _tainted(kube_api, agent.node))
        assert agent.verdicts.verdicts[uuid].state == "ok" and _effects(kube_api) == {}
        cond = _condition(kube_api, agent.node)
        assert cond["status"] == "False" and cond["reason"] == "AcceleratorsHealthy"
        (recovered,) = kube_api.events(involved_name=agent.node, reason="AcceleratorRecovered")
        assert "cleared by evidence: recovery-gate: pass: dcgmi diag -r 3 passed" in recovered["message"]
        book = _book(kube_api, agent.node)
        assert "holds" not in book and book.get("taint") is None
        assert [r for r in kube_api.requests if r.status == 403] == []  # every write of the agent admitted
    finally:
        agent.close()


def _selftest(root: Path, flag: Path) -> None:
    path = root / "usr" / "bin" / "gpu-selftest"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\nif [ -e {flag} ]; then echo "$1: all 12 tests passed"; exit 0; fi\n'
                    'echo "HBM row 7 failed" >&2\nexit 3\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_an_exec_gate_fails_then_passes(kube_api, tmp_path, capsys):
    from admission import deploy_objects, install
    from hetero_exporter.sdk.contract import HostPaths
    from hetero_exporter.sources.recovery_gate import ExecGates
    root, flag = tmp_path / "host", tmp_path / "fixed"
    _selftest(root, flag)
    token = install(kube_api, deploy_objects(), "gpu-node-7")
    gate = {"exec": ["/usr/bin/gpu-selftest", "{uuid}"], "timeout_seconds": 30, "retry_seconds": 10}
    agent = _agent(kube_api, tmp_path, _classes(gate), token)
    agent.verdicts.gate_runner = runner = ExecGates(HostPaths(root=str(root)), clock=agent.clock)
    try:
        uuid = _seed(kube_api, agent)
        t = _until(agent, 10, lambda: _tainted(kube_api, agent.node))
        agent.run(t + 10, 170)  # lost until the reset
        t = _until(agent, 180, lambda: "failed, exit 3: HBM row 7 failed" in _condition(kube_api, agent.node)["message"])
        assert agent.verdicts.verdicts[uuid].state == "recovering" and _effects(kube_api) == {"gpu-5": "NoSchedule"}
        assert "waiting for the self-test /usr/bin/gpu-selftest {uuid}" in _condition(kube_api, agent.node)["message"]
        # health --dry-run runs no self-test: it says so, and what the agent last said (from the book)
        out = _dry_run(capsys, kube_api.write_kubeconfig(tmp_path / "admin"), tmp_path, agent.clock.t(), gate)
        line = next(x for x in out.splitlines() if f"({uuid})" in x)
        assert " recovering " in line and "no self-test runner here" in line, out
        assert "recovery gate, as the agent last said: recovering: waiting for the self-test " \
               "/usr/bin/gpu-selftest {uuid} (failed, exit 3: HBM row 7 failed)" in out, out
        flag.touch()  # repaired: the next run (retry_seconds later) passes
        _until(agent, t + 10, lambda: not _tainted(kube_api, agent.node))
        assert agent.verdicts.verdicts[uuid].state == "ok" and _effects(kube_api) == {}
        (recovered,) = kube_api.events(involved_name=agent.node, reason="AcceleratorRecovered")
        assert f"recovery-gate: passed, exit 0: {uuid}: all 12 tests passed" in recovered["message"]
    finally:
        runner.close()
        agent.close()


def test_the_agent_runs_the_self_tests_where_a_class_has_one_and_closes_them(tmp_path):
    from hetero_exporter.app.agent import Agent, Options
    from hetero_exporter.sources.recovery_gate import ExecGates
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"health": {"mode": "observe", **_classes({"exec": ["/usr/bin/gpu-selftest"]})}}))
    agent = Agent.build(Options(command="run", config_file=str(cfg), simulate=SCENARIO_FILE,
                                kernel_log="off"))
    try:
        runner = agent.parts.gates
        assert isinstance(runner, ExecGates) and agent.parts.verdicts.gate_runner is runner
        assert agent.parts.verdicts.gates_of is not None
        agent.start()
        assert "recovery-gates" in agent.services.names
    finally:
        agent.close()
    assert runner._stop.is_set()
    cfg.write_text(json.dumps({"health": {"mode": "observe", **_classes({"evidence_annotation": EVIDENCE})}}))
    with Agent.build(Options(command="run", config_file=str(cfg), simulate=SCENARIO_FILE,
                             kernel_log="off")) as agent:
        assert agent.parts.gates is None and agent.parts.verdicts.gates_of is not None
