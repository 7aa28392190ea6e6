"""NVIDIA depth over the fake pynvml: processes, memory health, PCIe, clock-event reasons,
recovery action, topology, MIG, NotSupported per field, API fallbacks, lost GPUs.

Scenarios live in fixtures/scenarios/nvidia-*.yaml; every expectation below is stated in the
scenario's header comment too."""

from __future__ import annotations

import dataclasses

import pytest

pynvml = pytest.importorskip("pynvml")

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from conftest import ROOT  # noqa: E402
from hetero_exporter.model import fields as F  # noqa: E402
from hetero_exporter.sdk.contract import CollectorOptions  # noqa: E402
from hetero_exporter.collectors.nvidia import common as C  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml import collector as nvml  # noqa: E402
from hetero_exporter.exposition.collector import SnapshotCollector  # noqa: E402
from hetero_exporter.model import NodeSnapshot, snapshot_from_json, snapshot_to_json  # noqa: E402
from hetero_exporter.simulate import ManualClock, load  # noqa: E402

SCENARIOS = ROOT / "fixtures" / "scenarios"
GIB, MIB = 1 << 30, 1 << 20


def make(name: str, t: float = 0.0, **fake_settings):
    """The NVML collector over a scenario (events off: tests/test_nvml_events.py drives
    them); ``fake_settings`` override the scenario's ``settings.nvidia``."""
    clock = ManualClock()
    clock.set_t(t)
    scenario = load(str(SCENARIOS / f"{name}.yaml"))
    if fake_settings:
        nvidia = {**scenario.vendor_settings("nvidia"), **fake_settings}
        scenario = dataclasses.replace(scenario, settings={**scenario.settings, "nvidia": nvidia})
    opts = CollectorOptions(scenario=scenario, clock=clock, settings={"events": False}, interval_seconds=10.0)
    return nvml.create(opts), clock


def gpus(devices):
    return [d for d in devices if d.identity.parent is None]


def reasons(d):
    return [(r.code, r.action) for r in d.health.reasons]


# ---------------------------------------------------------------- processes


def test_processes_have_memory_and_utilization_with_the_window_stated():
    c, clock = make("nvidia-xid79")
    first = gpus(c.collect())
    p = first[1].processes[0]
    assert (p.pid, p.memory_bytes, p.name) == (4342, 30 * GIB, "python")  # pid + 100 * position
    assert p.utilization_ratio == pytest.approx(0.7)
    assert p.utilization_quality.source == "nvmlDeviceGetProcessesUtilizationInfo.smUtil"
    assert p.utilization_quality.method == "sampled"
    assert p.utilization_quality.window_seconds is None  # first poll: NVML's own buffer
    assert (p.namespace, p.pod, p.container) == (None, None, None)  # attribution is an enricher's job
    assert first[1].processes_reported
    clock.advance(10)
    p2 = gpus(c.collect())[1].processes[0]
    assert p2.utilization_quality.window_seconds == pytest.approx(10.0)  # samples since the last poll


@pytest.mark.parametrize("api", ["v3", "v2"])
def test_every_running_process_struct_version_the_driver_has_is_used(api):
    c, _ = make("nvidia-notsupported", process_api=api)
    d = c.collect()[0]
    assert sorted(p.pid for p in d.processes) == [1500, 2600]  # graphics Xorg + compute blender
    assert d.processes_reported


def test_a_driver_without_any_process_call_reports_processes_as_not_reported():
    c, _ = make("nvidia-notsupported", process_api="v1")  # no _v3, no _v2: pynvml's unversioned wrapper needs _v3
    d = c.collect()[0]
    assert d.processes == () and d.processes_reported is False  # unknown, not "none run"


def test_without_process_utilization_the_ratio_is_absent_not_zero():
    c, _ = make("nvidia-notsupported")
    d = c.collect()[0]
    blender = next(p for p in d.processes if p.pid == 2600)
    assert blender.utilization_ratio is None and blender.utilization_quality is None
    assert blender.memory_bytes == 800 * MIB


def test_the_older_utilization_samples_call_is_used_when_the_newer_is_missing():
    c, clock = make("nvidia-xid79", process_utilization_api="samples")
    c.collect()
    clock.advance(5)
    p = gpus(c.collect())[0].processes[0]
    assert p.utilization_ratio == pytest.approx(0.7)
    assert p.utilization_quality.source == "nvmlDeviceGetProcessUtilization.smUtil"
    assert p.utilization_quality.window_seconds == pytest.approx(5.0)


# ---------------------------------------------------------------- NotSupported, fallbacks


def test_not_supported_fields_are_absent_with_status_never_zero():
    c, _ = make("nvidia-notsupported")
    d = c.collect()[0]
    for field in (F.ECC_CORRECTED, F.ECC_UNCORRECTED, F.ENERGY, C.REMAPPED_CORRECTABLE, C.REMAP_PENDING,
                  C.RETIRED_SBE, C.PCIE_REPLAY, C.RECOVERY_ACTION, C.ECC_CORRECTED_VOLATILE, F.TEMP_MEMORY):
        r = d.readings[field]
        assert r.value is None and r.quality.status == "unsupported", field
        assert d.value(field) is None
    assert C.NVLINK_ACTIVE not in d.readings and d.links == ()  # no NVLink, one GPU: no links
    assert d.health.state == "ok"
    text = render(NodeSnapshot(node="n", time=0.0, devices=(d,)))
    assert "accelerator_ecc_errors_total{" not in text
    assert 'field="ecc_corrected_total",status="unsupported"' in text


def test_older_driver_calls_are_used_and_the_quality_says_which():
    c, _ = make("nvidia-notsupported")
    d = c.collect()[0]
    used = d.readings[F.MEMORY_USED]
    assert used.quality.source == "nvmlDeviceGetMemoryInfo.used"  # v1: includes reserved memory
    assert used.value == 1 * GIB + 368 * MIB
    idle = d.readings[C.clock_reason_field("idle")]
    assert idle.value == 1.0 and idle.quality.source == "nvmlDeviceGetCurrentClocksThrottleReasons"
    assert d.value(C.clock_reason_field("power_cap")) == 0.0


def test_memory_v2_used_excludes_reserved_like_nvidia_smi():
    c, _ = make("nvidia-notsupported", memory_api="v2")
    d = c.collect()[0]
    assert d.value(F.MEMORY_USED) == 1 * GIB
    assert d.readings[F.MEMORY_USED].quality.source == "nvmlDeviceGetMemoryInfo_v2.used"


def test_unsupported_calls_are_not_repeated():
    for name in ("nvidia-notsupported", "nvidia-memory-health", "nvidia-mig"):
        c, _ = make(name)
        c.collect()
        c.collect()
        before = c._nv.calls
        c.collect()
        one = c._nv.calls - before
        c.collect()
        assert c._nv.calls - before == 2 * one, name


# ---------------------------------------------------------------- memory health, PCIe, reasons


def test_memory_health_readings_and_conditions():
    c, clock = make("nvidia-memory-health")
    d = gpus(c.collect())
    g0 = d[0]
    assert g0.value(C.RETIRED_SBE) == 2 and g0.value(C.RETIRED_DBE) == 1
    assert g0.value(C.REMAPPED_CORRECTABLE) == 4 and g0.value(C.REMAPPED_UNCORRECTABLE) == 1
    assert g0.value(C.ECC_CORRECTED_VOLATILE) == 3 and g0.value(C.ECC_UNCORRECTED_VOLATILE) == 1
    assert g0.value(F.ECC_CORRECTED) == 12 and g0.value(C.PCIE_REPLAY) == 7
    assert (g0.value(C.PCIE_GEN), g0.value(C.PCIE_GEN_MAX), g0.value(C.PCIE_WIDTH)) == (4, 4, 16)
    # clock_event_reasons 0x44 = software power cap + hardware thermal slowdown
    assert g0.value(C.clock_reason_field("power_cap")) == 1 and g0.value(C.clock_reason_field("hw_thermal")) == 1
    assert g0.value(C.clock_reason_field("idle")) == 0
    assert g0.health.state == "degraded" and reasons(g0) == [("remap-pending", "reset-device")]
    assert d[1].health.state == "failed" and reasons(d[1]) == [("remap-failure", "contact-support")]
    assert d[2].health.state == "degraded" and reasons(d[2]) == [("pcie-width-degraded", "contact-support")]
    assert "x8 of x16" in d[2].health.reasons[0].message
    assert d[3].health.state == "ok" and d[3].value(C.RECOVERY_ACTION) == 0
    clock.set_t(11)  # the driver now asks for a node reboot (GPU recovery action 2)
    d3 = gpus(c.collect())[3]
    assert d3.value(C.RECOVERY_ACTION) == 2
    assert d3.health.state == "failed" and ("recovery-node-reboot", "reboot-node") in reasons(d3)
    clock.set_t(20)
    again = gpus(c.collect())
    # a condition is one fault event per episode, however many polls see it
    assert [f.count for f in again[0].faults if f.code == "remap-pending"] == [1]
    assert [f.count for f in again[3].faults if f.code == "recovery-node-reboot"] == [1]


def test_new_fields_are_exported_as_metrics():
    c, _ = make("nvidia-memory-health")
    snap = NodeSnapshot(node="n", time=0.0, devices=tuple(c.collect()))
    text = render(snap)
    u = snap.devices[1].identity.uuid
    for line in (f'accelerator_memory_remapped_rows{{cause="correctable",uuid="{u}",vendor="nvidia"}} 4.0',
                 f'accelerator_memory_remap_failed{{uuid="{u}",vendor="nvidia"}} 1.0',
                 f'accelerator_memory_retired_pages{{cause="double_bit",uuid="{u}",vendor="nvidia"}} 1.0',
                 f'accelerator_ecc_volatile_errors_total{{severity="uncorrected",uuid="{u}",vendor="nvidia"}} 1.0',
                 f'accelerator_pcie_link_width_max_lanes{{uuid="{u}",vendor="nvidia"}} 16.0',
                 f'accelerator_pcie_replay_errors_total{{uuid="{u}",vendor="nvidia"}} 7.0',
                 f'accelerator_clock_throttle_active{{reason="hw_thermal",uuid="{u}",vendor="nvidia"}} 1.0',
                 f'accelerator_interconnect_links{{link_type="nvlink",state="inactive",uuid="{u}",vendor="nvidia"}} 1.0'):
        assert line in text, line


def render(snap: NodeSnapshot) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, clock=lambda: snap.time))
    return generate_latest(reg).decode()


# ---------------------------------------------------------------- topology


def test_nvswitch_and_pcie_links_between_every_pair():
    c, _ = make("nvidia-xid79", t=10)
    d = gpus(c.collect())
    u = [x.identity.uuid for x in d]
    links = {(link.peer, link.type): link for link in d[0].links}
    for peer in u[1:]:
        sw = links[(peer, "nvswitch")]
        assert (sw.lanes, sw.state) == (18, "up")
        assert sw.bandwidth_bytes_per_second == pytest.approx(18 * 25781e6)  # per direction
    # numa_nodes [0, 0, 1, 1], two GPUs per PCIe switch
    assert (u[1], "pcie-switch") in links
    assert (u[2], "cross-numa") in links and (u[3], "cross-numa") in links
    assert d[0].value(C.NVLINK_ACTIVE) == 18 and d[0].value(C.NVLINK_INACTIVE) == 0
    # 10 GB/s for 10 s, counted per link in KiB by NVML and summed over the 18 links
    assert d[0].value(C.NVLINK_RX) == pytest.approx(1e11, rel=1e-4)
    assert d[0].readings[C.NVLINK_TX].quality.status == "unsupported"  # the scenario gives no TX rate


def test_same_numa_node_across_switches_is_a_numa_link():
    c, _ = make("nvidia-lost")
    d = gpus(c.collect())
    types = {link.peer: link.type for link in d[0].links if link.type != "nvswitch"}
    assert types[d[1].identity.uuid] == "pcie-switch"
    assert types[d[2].identity.uuid] == "numa"  # same NUMA node, another switch
    assert types[d[4].identity.uuid] == "cross-numa"


def test_direct_nvlinks_aggregate_per_peer_and_a_down_link_degrades_it():
    c, _ = make("nvidia-memory-health")
    d = gpus(c.collect())
    g1 = d[1]
    nv = {link.peer: link for link in g1.links if link.type == "nvlink"}
    # mesh: 12 links over the 3 other GPUs, link 3 -> the first other GPU (GPU 0), and it is down
    assert sorted(link.lanes for link in nv.values()) == [4, 4, 4]
    assert nv[d[0].identity.uuid].state == "degraded"
    assert nv[d[0].identity.uuid].bandwidth_bytes_per_second == pytest.approx(3 * 25781e6)
    assert nv[d[2].identity.uuid].state == "up"
    assert g1.value(C.NVLINK_INACTIVE) == 1 and g1.value(C.NVLINK_ACTIVE) == 11


# ---------------------------------------------------------------- MIG


def test_mig_instances_are_devices_with_a_parent():
    c, _ = make("nvidia-mig")
    devices = c.collect()
    parent, migs, other = devices[0], devices[1:5], devices[5]
    assert [m.identity.parent for m in migs] == [parent.identity.uuid] * 4
    assert other.identity.parent is None and other.identity.index == 1
    assert [m.identity.model for m in migs] == [
        "H100-SXM5-80GB-MIG-3g.40gb", "H100-SXM5-80GB-MIG-2g.20gb",
        "H100-SXM5-80GB-MIG-1g.10gb", "H100-SXM5-80GB-MIG-1g.10gb"]
    assert all(m.identity.uuid.startswith("MIG-") and m.identity.kind == "gpu" for m in migs)
    assert migs[0].value(F.MEMORY_TOTAL) == 40448 * MIB and migs[0].value(F.MEMORY_USED) == 2322 * MIB
    assert migs[0].readings[F.UTILIZATION].quality.status == "unsupported"  # as NVML says on MIG
    # processes go to the instance whose GPU instance id they run in
    assert [p.pid for p in migs[0].processes] == [21180]
    assert [p.pid for p in migs[2].processes] == [21198] and migs[3].processes == ()
    assert parent.processes == ()
    snap = NodeSnapshot(node="n", time=0.0, devices=tuple(devices))
    assert snap.present() == {"nvidia": 2}  # instances are not counted as GPUs
    back = snapshot_from_json(snapshot_to_json(snap))
    assert back.devices[1].identity.parent == parent.identity.uuid


def test_a_mig_instance_is_as_healthy_as_its_gpu():
    c, _ = make("nvidia-mig")
    c._nv._scenario.devices[0].values["memory_remap_failed"] = __import__(
        "hetero_exporter.model.scenario", fromlist=["Signal"]).Signal("const", {"value": 1})
    devices = c.collect()
    assert devices[0].health.state == "failed"
    assert all(m.health.state == "failed" for m in devices[1:5])
    assert devices[5].health.state == "ok"


# ---------------------------------------------------------------- lost GPU


def test_a_lost_gpu_does_not_stop_readings_from_the_others():
    c, clock = make("nvidia-lost")
    c.collect()
    clock.set_t(30)
    d = c.collect()
    assert [x.identity.index for x in d] == list(range(8))
    lost = d[2]
    assert lost.health.state == "failed" and reasons(lost)[0] == ("gpu-lost", "reboot-node")
    for other in d[:2] + d[3:]:
        assert other.health.state == "ok"
        assert other.value(F.POWER) == 600 and other.value(F.UTILIZATION) == pytest.approx(0.9)
        assert other.processes and other.processes[0].memory_bytes == 58 * GIB
        assert lost.identity.uuid not in {link.peer for link in other.links}
    clock.set_t(45)
    assert [f.count for f in c.collect()[2].faults] == [1]  # one loss episode
    clock.set_t(61)
    back = c.collect()[2]
    assert back.health.state == "ok" and back.value(F.POWER) == 600


def test_link_states_without_the_batched_state_field_use_one_call_per_link():
    batched, _ = make("nvidia-memory-health")
    per_link, _ = make("nvidia-memory-health", nvlink_state_field=False)
    a, b = gpus(batched.collect()), gpus(per_link.collect())
    assert [x.links for x in a] == [x.links for x in b]
    assert b[1].value(C.NVLINK_INACTIVE) == 1
    batched.collect()
    per_link.collect()
    before = (batched._nv.calls, per_link._nv.calls)
    batched.collect()
    per_link.collect()
    # 4 GPUs x 12 links: the fallback costs one call per link per cycle
    assert per_link._nv.calls - before[1] == batched._nv.calls - before[0] + 4 * 12
