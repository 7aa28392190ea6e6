"""Issue 37, the assembly: ``Agent.build`` makes its parts once, in dependency order, into one
frozen ``Parts`` and starts nothing; the environment answers with data and never calls the agent;
what an earlier agent left (pinned identities, the kernel-log cursor, the Node's sticky faults)
comes back once, before the first cycle, in ``Agent.restore``."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from pathlib import Path

import pytest

from hetero_exporter import config as config_mod
from hetero_exporter.app.agent import Agent, Options
from hetero_exporter.app.environment import AttributionInputs, Environment, SimulatedEnvironment
from hetero_exporter.app.settings import DEFAULT_PODRESOURCES_SOCKET, Settings
from hetero_exporter.model import DeviceIdentity, Fault
from hetero_exporter.model.evaluation import StickyFault
from hetero_exporter.sdk.contract import HostPaths
from hetero_exporter.sdk.identity import IdentityMemory, identity_file
from hetero_exporter.sources.energy import EnergyMeter
from hetero_exporter.simulate import load

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "fixtures" / "scenarios"
XID = "Dec  1 10:00:00 host kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.\n"


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.is_alive()}


def test_build_makes_one_frozen_set_of_parts_and_starts_nothing():
    before = _threads()
    agent = Agent.build(Options(command="inspect", simulate="default"))
    try:
        parts = agent.parts
        with pytest.raises(dataclasses.FrozenInstanceError):
            parts.sampler = None  # type: ignore[misc]
        assert parts.kernel_log is not None and parts.sources[-2] is parts.kernel_log.faults
        assert isinstance(parts.sources[-1], EnergyMeter)  # last: the shares and the resets known
        assert parts.attribution in parts.sources
        assert parts.health is None and parts.cluster is None  # inspect: no health loop; no part needs the API
        # nothing started: no service, no thread but the collectors' idle workers
        assert agent.services.names == []
        assert {n for n in _threads() - before if not n.startswith("collector-")} == set()
        assert agent.start() is parts
        assert agent.services.names == ["simulated-kubelet", "podresources", "kernel-log", "energy"]
        agent.start()  # once
        assert agent.services.names == ["simulated-kubelet", "podresources", "kernel-log", "energy"]
    finally:
        agent.close()
    assert agent.services.names == []


def test_the_environment_answers_with_data(tmp_path):
    cfg = config_mod.from_dict({"sysfs_root": str(tmp_path / "no-sysfs"), "host_exec": "chroot",
                                "attribution": {"pod_cache": False, "proc_root": "/host/proc"}})
    env = Environment(Settings.parse(cfg), host_root=str(tmp_path))
    assert env.attribution_inputs() == AttributionInputs("/host/proc", watch_pods=False,
                                                         socket=DEFAULT_PODRESOURCES_SOCKET)
    assert env.collector_paths() == HostPaths(str(tmp_path), "chroot", str(tmp_path / "no-sysfs"), "/proc")
    sim = SimulatedEnvironment(Settings.parse(config_mod.Config()), load("default"), 0.0)
    try:
        got = sim.attribution_inputs()
        assert os.path.isdir(got.proc_root) and got.proc_root.startswith(str(sim.workdir))
        assert not got.watch_pods and got.pods is not None and got.simulated
        assert got.socket.startswith(str(sim.workdir)) and sim.collector_paths().root is None
    finally:
        sim.close()


def test_restore_reads_the_identities_of_every_collector_once_before_the_first_cycle():
    agent = Agent.build(Options(command="inspect", simulate=str(SCENARIOS / "nvidia-lost.yaml"), kernel_log="off"))
    try:
        os.makedirs(agent.state_dir, exist_ok=True)
        gone = DeviceIdentity(vendor="nvidia", kind="gpu", index=9, uuid="GPU-gone", model="H100-SXM5-80GB",
                              pci_address="0000:f8:00.0")  # on no simulated bus
        IdentityMemory(identity_file(agent.state_dir, "nvml"), boot_id="an-earlier-boot").remember(gone)
        assert agent.parts.removals.totals() == {}
        agent.restore()
        assert agent.parts.removals.totals() == {"nvidia": 1}  # read before any cycle
        agent.restore()
        assert agent.parts.removals.totals() == {"nvidia": 1}  # once
        snap = agent.start().sampler.collect()
        assert [d.uuid for d in snap.removed] == ["GPU-gone"]
    finally:
        agent.close()


def test_restore_reads_the_kernel_log_cursor_before_the_first_read(tmp_path):
    log_path = tmp_path / "kern.log"
    log_path.write_text(XID)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(json.dumps({"kernel_log": {"path": str(log_path)}}))
    agent = Agent.build(Options(command="inspect", simulate="default", config_file=str(cfg)))
    try:
        follower = agent.parts.kernel_log.follower
        state = Path(agent.state_dir) / "kernel-log.state.json"
        state.parent.mkdir(parents=True, exist_ok=True)
        done = {"schema": 1, "source": str(log_path), "inode": log_path.stat().st_ino, "offset": len(XID)}
        state.write_text(json.dumps(done))  # an earlier run handed the line over
        agent.restore()
        state.write_text(json.dumps({**done, "offset": 0}))  # read at restore, not again at the first read
        assert follower.drain() == (0, True) and follower.take() == []
    finally:
        agent.close()


def test_restore_brings_the_nodes_sticky_faults_into_the_verdicts_before_the_first_cycle():
    from hetero_exporter.health.plan.book import Book, sticky_to_json
    agent = Agent.build(Options(command="health", simulate="default", kernel_log="off"))
    try:
        fault = Fault(code="79", fault_class="fallen-off-bus", action="reset", severity="critical", message="x",
                      first_seen=5.0, last_seen=5.0, source="nvml")
        book = Book(sticky=sticky_to_json({"GPU-x": [StickyFault(fault, 5.0, frozenset({"boot"}), "failed")]}),
                    boot_id=agent.env.boot_id)
        node = {"metadata": {"annotations": {agent.settings.health.remedy.book_annotation: book.to_json()}}}
        assert agent.parts.verdicts.sticky() == {}
        agent.start(node)
        assert [s.fault.code for s in agent.parts.verdicts.sticky()["GPU-x"]] == ["79"]
    finally:
        agent.close()
