"""A critical fault whose catalogue action is a reset or a reboot keeps its device failed until
evidence that the action happened (issue 15): a reset seen, the vendor's recovery action back to
none, the device really lost and back, or a boot. A GPU that answered with a critical code and
then answers ok again has not been reset. The verdict names the evidence (``cleared_by``), and
the evidence state survives an agent restart (the sticky faults kept on the Node)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

pytest.importorskip("pynvml")

from cli_fakes import in_process_runner  # noqa: E402
from hetero_exporter import cli  # noqa: E402
from hetero_exporter.collectors.ascend.npu_smi import collector as npu_smi  # noqa: E402
from hetero_exporter.collectors.ascend.npu_smi import fake as npu_fake  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml import collector as nvml  # noqa: E402
from hetero_exporter.health import plan  # noqa: E402
from hetero_exporter.health.detect import rules  # noqa: E402
from hetero_exporter.health.detect import policy as policy_mod  # noqa: E402
from hetero_exporter.model import (CollectorStatus, DeviceIdentity, DeviceSample, Fault, Health,  # noqa: E402
                                   NodeSnapshot, Quality, Reading)
from hetero_exporter.sampling import mark_stale  # noqa: E402
from hetero_exporter.sdk.contract import CollectorOptions  # noqa: E402
from hetero_exporter.simulate import ManualClock  # noqa: E402
from hetero_exporter.simulate.scenario import from_dict  # noqa: E402

POLICY = policy_mod.load()
H100 = {"vendor": "nvidia", "count": 2, "product": "NVIDIA H100 80GB HBM3", "pci_address": "0000:18:00.0",
        "pci_stride": 16, "values": {"utilization_ratio": 0.5, "power_watts": 300, "temperature_core_celsius": 50}}
XID79_ANSWERING = {"at": 30, "vendor": "nvidia", "index": 0, "kind": "xid", "code": "79", "lost": False}


class SimNode:
    """The NVML collector over the fake, fed to the pure rules one poll at a time. Events are
    delivered by hand (the watcher drained before each poll): no thread, no race."""

    def __init__(self, faults: list[dict]):
        scenario = from_dict({"name": "evidence", "devices": [H100], "faults": faults}, "evidence")
        self.clock = ManualClock()
        self.collector = nvml.create(CollectorOptions(scenario=scenario, clock=self.clock, interval_seconds=10.0,
                                                      settings={"events": False}))
        first = self.collector.collect()
        self.watcher = self.collector.event_watcher(
            [(d.identity.uuid, self.collector._nv.nvmlDeviceGetHandleByIndex(d.identity.index)) for d in first])
        self.watcher.open()
        self.uuid = first[0].identity.uuid
        self.state = rules.State()

    def poll(self, t: float, boot: str = "b1", edit=None) -> rules.Verdict:
        self.clock.set_t(t)
        self.watcher.drain()
        devices = self.collector.collect()
        snap = NodeSnapshot("n", self.clock(), devices=tuple(devices), boot_id=boot,
                            collectors=(CollectorStatus("nvml", True, vendor="nvidia"),))
        self.state, verdicts = rules.step(self.state, edit(snap) if edit else snap, POLICY)
        return verdicts[self.uuid]

    def run(self, times, **kw) -> list[rules.Verdict]:
        return [self.poll(t, **kw) for t in times]

    def close(self) -> None:
        self.watcher.close_set()
        self.collector.close()


@pytest.fixture
def sim():
    made = []

    def make(*faults):
        node = SimNode(list(faults))
        made.append(node)
        return node
    yield make
    for node in made:
        node.close()


def test_xid79_then_the_gpu_answers_again_stays_failed(sim):
    node = sim(XID79_ANSWERING)
    before = node.run([0, 10, 20])
    during = node.run([30, 40])
    after = node.run(range(50, 200, 10))  # the event is history, the GPU reads normally for 150 s
    assert {v.state for v in before} == {"ok"}
    assert {v.state for v in during} == {"failed"} and during[0].reasons[0].code == "79"
    assert {v.state for v in after} == {"failed"} and all(v.cleared == () for v in after)
    assert after[-1].reasons[0].code == "79" and after[-1].node_level


def test_a_gpu_unavailable_event_on_a_gpu_that_answers_stays_failed(sim):
    node = sim({"at": 30, "vendor": "nvidia", "index": 0, "kind": "gpu-unavailable"})
    v = node.run(range(0, 150, 10))
    assert [x.state for x in v[3:]] == ["failed"] * 12  # class device-lost, action reset-device


def test_the_recovery_action_back_to_none_clears_it_and_says_so(sim):
    node = sim(XID79_ANSWERING, {"at": 30, "until": 90, "vendor": "nvidia", "index": 0, "kind": "recovery",
                                 "code": "node-reboot"})
    v = node.run(range(0, 90, 10))
    assert [x.state for x in v] == ["ok"] * 3 + ["failed"] * 6
    back = node.poll(90)  # the driver no longer asks for a reboot
    assert back.state == "ok"
    assert back.cleared_by == {"79": "recovery", "recovery-node-reboot": "recovery"}
    assert back.cleared == ("79", "recovery-node-reboot")


def test_a_boot_clears_it_and_says_so(sim):
    node = sim(XID79_ANSWERING)
    assert node.run(range(0, 100, 10))[-1].state == "failed"
    v = node.poll(100, boot="b2")
    assert v.state == "ok" and v.cleared_by == {"79": "boot"} and v.cleared == ("79",)


def test_a_reset_code_clears_it_and_says_so(sim):
    """NVIDIA prints no reset line the kernel-log tables know: a reset code as another source
    (a vendor reset event) reports it."""
    node = sim(XID79_ANSWERING)
    assert node.run(range(0, 100, 10))[-1].state == "failed"
    reset = Fault("gpu-reset", "reset", "none", severity="info", count=1, source="kmsg")

    def with_reset(snap):
        d0 = dataclasses.replace(snap.devices[0], faults=snap.devices[0].faults + (reset,))
        return dataclasses.replace(snap, devices=(d0,) + snap.devices[1:])
    v = node.poll(100, edit=with_reset)
    assert v.state == "ok" and v.cleared_by == {"79": "reset"}


def test_a_gpu_really_lost_and_back_was_reset(sim):
    """Xid 79 with the GPU off the bus (NVML GPU_IS_LOST, nothing readable), then a GPU reset: it
    answers again, which it only does after a reset or a reboot."""
    node = sim({"at": 30, "vendor": "nvidia", "index": 0, "kind": "xid", "code": "79"},
               {"at": 90, "vendor": "nvidia", "index": 0, "kind": "reset"})
    v = node.run(range(0, 100, 10))
    assert [x.state for x in v] == ["ok"] * 3 + ["failed"] * 6 + ["ok"]
    assert v[-1].cleared_by == {"79": "readable", "gpu-lost": "readable"}


# --------------------------------------------------------------------------- pure rules

X79 = Fault("79", "device-lost", "reboot-node", severity="critical", count=1, source="nvmlEventSetWait")
OK_READINGS = {"utilization_ratio": Reading(0.5, Quality("nvml"))}


def _dev(state="ok", readings=None, reasons=(), faults=(X79,)) -> DeviceSample:
    return DeviceSample(DeviceIdentity("nvidia", "gpu", 0, "U0"), 0.0,
                        readings=OK_READINGS if readings is None else readings,
                        health=Health(state, tuple(reasons)), faults=tuple(faults))


def _polls(*polls, ok=True):
    """Each poll: a device, or None (absent); the nvml collector answered (``ok``) or not."""
    state, out = rules.State(), []
    for i, d in enumerate(polls):
        snap = NodeSnapshot("n", 1000.0 + 10 * i, devices=() if d is None else (d,), boot_id="b1",
                            collectors=(CollectorStatus("nvml", ok, vendor="nvidia"),))
        state, v = rules.step(state, snap, POLICY)
        out.append(v.get("U0"))
    return state, out


def test_absent_while_its_tool_answered_is_lost_and_back():
    _, v = _polls(_dev("failed", reasons=[X79]), None, _dev())
    assert v[2].state == "ok" and v[2].cleared_by == {"79": "readable"}


def test_absent_while_its_tool_failed_is_no_evidence():
    _, v = _polls(_dev("failed", reasons=[X79]), None, _dev(), ok=False)
    assert v[2].state == "failed"


def test_a_stale_carry_over_is_no_evidence():
    stale = mark_stale(_dev(), 1010.0, "nvml: late")
    _, v = _polls(_dev("failed", reasons=[X79]), stale, _dev(), _dev(), _dev())
    assert [x.state for x in v] == ["failed"] * 5


def test_unknown_with_nothing_read_then_readable_is_lost_and_back():
    unreadable = Fault("unreadable", "unreadable", "none", severity="info", source="nvml")
    _, v = _polls(_dev("failed", reasons=[X79]), _dev("unknown", readings={}, reasons=[unreadable]), _dev())
    assert v[2].state == "ok" and v[2].cleared_by == {"79": "readable"}


def test_the_kernel_log_s_own_critical_faults_need_evidence_too():
    """A critical kernel-log fault is sticky whatever its class (printed once): the device
    answering again after a failed poll is no reset either."""
    kmsg = Fault("ring-timeout", "ring-timeout", "restart-app", severity="critical", count=1, source="kmsg")
    _, v = _polls(_dev("failed", reasons=[kmsg], faults=[kmsg]), _dev(faults=[kmsg]), _dev(faults=[kmsg]),
                  _dev(faults=[kmsg]), _dev(faults=[kmsg]))
    assert [x.state for x in v] == ["failed"] * 5


# --------------------------------------------------------------------------- restart


def _restarted(state: rules.State) -> rules.State:
    """What a new agent process starts from: the sticky faults kept on the Node, read back."""
    doc = plan.sticky_to_json(rules.sticky_faults(state))
    return rules.restore(plan.sticky_from_json(doc), "b1", "b1")


def _continue(state, *polls):
    """Polls of the new process (its collector's fault ledger starts empty: NVML does not replay
    events)."""
    out = []
    for i, d in enumerate(polls):
        snap = NodeSnapshot("n", 2000.0 + 10 * i, devices=(d,), boot_id="b1",
                            collectors=(CollectorStatus("nvml", True, vendor="nvidia"),))
        state, v = rules.step(state, snap, POLICY)
        out.append(v["U0"])
    return out


def test_a_restart_keeps_a_fault_that_only_answered_failed():
    state, _ = _polls(_dev("failed", reasons=[X79]), _dev())
    fresh = _dev(faults=())
    assert [v.state for v in _continue(_restarted(state), fresh, fresh, fresh, fresh)] == ["failed"] * 4


def test_a_restart_keeps_the_device_seen_lost():
    lost = _dev("failed", readings={}, reasons=[X79])
    state, _ = _polls(_dev("failed", reasons=[X79]), lost)
    v = _continue(_restarted(state), _dev(faults=()))
    assert v[0].state == "ok" and v[0].cleared_by == {"79": "readable"}


def test_a_restart_keeps_the_recovery_action_asked_for():
    asking = _dev("failed", readings={**OK_READINGS, "recovery_action": Reading(2.0, Quality("nvml"))},
                  reasons=[X79])
    state, _ = _polls(asking)
    none = _dev(readings={**OK_READINGS, "recovery_action": Reading(0.0, Quality("nvml"))}, faults=())
    v = _continue(_restarted(state), none)
    assert v[0].state == "ok" and v[0].cleared_by == {"79": "recovery"}


# --------------------------------------------------------------------------- AMD: the kernel log's reset line


def test_an_amd_uncorrectable_error_holds_until_the_kernel_log_says_the_gpu_was_reset(tmp_path: Path):
    doc = {"name": "amd-reset", "node": "n1",
           "devices": [{"vendor": "amd", "count": 2, "product": "AMD Instinct MI300X", "pci_address": "0000:05:00.0",
                        "pci_stride": 32, "values": {"utilization_ratio": 0.5, "temperature_core_celsius": 50}}],
           "kernel_log": [
               {"at": 45, "vendor": "amd", "index": 1,
                "line": "amdgpu {pci}: amdgpu: 2 uncorrectable hardware errors detected in UMC block"},
               {"at": 90, "vendor": "amd", "index": 1, "line": "amdgpu {pci}: amdgpu: GPU reset(1) succeeded!"}]}
    path = tmp_path / "amd-reset.yaml"
    path.write_text(yaml.safe_dump(doc))
    args = cli.build_parser().parse_args(["inspect", "--simulate", str(path), "--log-format", "text"])
    clock = ManualClock()
    w = cli.agent(args, clock=clock)
    sampler = w.start().sampler
    states, cleared = [], {}
    try:
        for t in range(40, 110, 10):
            clock.set_t(t)
            w.parts.kernel_log.follower.drain()  # what the follower's thread does when a line arrives
            snap, evaluation = sampler.collect_judged()
            gpu = next(d for d in snap.devices if d.identity.index == 1)
            states.append(gpu.health.state)
            v = evaluation.verdicts[gpu.identity.uuid]
            cleared.update(v.cleared_by)
    finally:
        sampler.close()
        w.close()
    assert states == ["ok", "failed", "failed", "failed", "failed", "ok", "ok"]
    assert cleared == {"ras-uncorrectable-umc": "reset"}


# --------------------------------------------------------------------------- Ascend: RestartNPU


def test_an_ascend_restart_npu_code_holds_after_the_chip_reports_ok_until_evidence():
    npus = {"vendor": "ascend", "count": 2, "product": "910B3", "memory_total": "64GiB", "driver_version": "23.0.3",
            "pci_address": "0000:c1:00.0", "pci_stride": 1, "values": {"utilization_ratio": 0.4}}
    sc = from_dict({"name": "restart-npu", "devices": [npus],
                    "faults": [{"at": 30, "until": 90, "vendor": "ascend", "index": 1, "kind": "health",
                                "state": "Critical", "codes": ["8C03A000"]}]}, "restart-npu")
    clock = ManualClock()
    col = npu_smi.NpuSmiCollector("npu-smi", clock=clock, runner=in_process_runner(npu_fake.answer, sc, clock, []))
    state, out = rules.State(), []
    for t, boot in [(20, "b1"), (40, "b1"), (100, "b1"), (150, "b1"), (160, "b2")]:
        clock.set_t(t)
        devices = col.collect()
        snap = NodeSnapshot("n", clock(), devices=tuple(devices), boot_id=boot,
                            collectors=(CollectorStatus("npu_smi", True, vendor="ascend"),))
        state, v = rules.step(state, snap, POLICY)
        out.append(v[devices[1].identity.uuid])
    # MindCluster RestartNPU: reset the chip; npu-smi saying OK again is no reset
    assert [x.state for x in out] == ["ok", "failed", "failed", "failed", "ok"]
    assert out[2].reasons[0].code == "8C03A000" and out[-1].cleared_by.get("8C03A000") == "boot"
