"""Issue 40 §2: energy for every device (the vendor's counter, else power integrated over the
cycle) and its split per container by the allocation shares (sources/energy.py)."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings, strategies as st

from hetero_exporter.model import fields as F
from hetero_exporter.model import (Allocation, DeviceIdentity, DeviceSample, Fault, NodeSnapshot, ProcessSample,
                                   Quality, Reading)
from hetero_exporter.sources.energy import FILE_NAME, MAX_CONTAINERS, EnergyMeter

POWER_Q = Quality(source="npu-smi -t power", resolution=0.1, error_bound=1.0)


def npu(t: float, watts=None, *, energy=None, uuid="ascend-0", driver="24.1.rc2", index=0, parent=None,
        procs=(), allocs=(), faults=()) -> DeviceSample:
    readings = {}
    if watts is not None:
        readings[F.POWER] = Reading(watts, POWER_Q)
    if energy is not None:
        readings[F.ENERGY] = Reading(energy, Quality(source="nvmlDeviceGetTotalEnergyConsumption"))
    ident = DeviceIdentity("ascend" if energy is None else "nvidia", "npu" if energy is None else "gpu", index, uuid,
                           model="910B3", driver_version=driver, parent=parent)
    return DeviceSample(ident, t, readings=readings, processes=tuple(procs), allocations=tuple(allocs),
                        faults=tuple(faults))


def proc(pod: str, mem: int, uuid="ascend-0") -> ProcessSample:
    return ProcessSample(pid=hash(pod) & 0xFFFF, device_uuid=uuid, memory_bytes=mem, namespace="ml", pod=pod,
                         container="main")


def snap(t: float, *devices: DeviceSample) -> NodeSnapshot:
    return NodeSnapshot("n1", t, devices=devices, boot_id="boot-1")


def split(s: NodeSnapshot, uuid: str) -> tuple[float, dict]:
    e = next(x for x in s.energy if x.uuid == uuid)
    return e.unattributed_joules, {(c.namespace, c.pod, c.container): c.joules for c in e.containers}


def energy(s: NodeSnapshot, uuid: str) -> Reading:
    return next(d for d in s.devices if d.identity.uuid == uuid).readings[F.ENERGY]


def test_power_is_integrated_with_its_quality_stated():
    m = EnergyMeter(None, "boot-1")
    first = m(snap(0.0, npu(0.0, 100.0)))
    assert energy(first, "ascend-0").value == 0.0  # a run that begins now
    m(snap(10.0, npu(10.0, 100.0)))
    s = m(snap(20.0, npu(20.0, 300.0)))
    r = energy(s, "ascend-0")
    assert r.value == pytest.approx(100 * 10 + 200 * 10)  # trapezoid: 1000 + 2000 J
    assert (r.quality.method, r.quality.window_seconds) == ("derived", 10.0)
    assert r.quality.error_bound == pytest.approx(2 * (0.05 + 1.0) * 10)  # (resolution/2 + bound) x dt, twice
    assert split(s, "ascend-0") == (pytest.approx(3000.0), {})  # nobody holds it


def test_a_gap_or_a_missing_power_reading_is_not_integrated():
    m = EnergyMeter(None, "boot-1", max_gap_seconds=30.0)
    m(snap(0.0, npu(0.0, 100.0)))
    assert energy(m(snap(100.0, npu(100.0, 100.0))), "ascend-0").value == 0.0  # 100 s gap: unknown, not invented
    m(snap(110.0, npu(110.0, None)))
    assert energy(m(snap(120.0, npu(120.0, 100.0))), "ascend-0").value == 0.0  # no left point
    assert energy(m(snap(130.0, npu(130.0, 100.0))), "ascend-0").value == pytest.approx(1000.0)


def test_a_device_without_power_or_energy_gets_no_energy():
    s = EnergyMeter(None, "boot-1")(snap(0.0, npu(0.0, None)))
    assert F.ENERGY not in s.devices[0].readings and s.energy == ()


def test_the_vendor_counter_is_kept_and_its_increments_split_by_the_shares():
    m = EnergyMeter(None, "boot-1")
    procs = (proc("a", 1 << 30, "GPU-0"), proc("b", 3 << 30, "GPU-0"))
    m(snap(0.0, npu(0.0, 500.0, energy=1e6, uuid="GPU-0", procs=procs)))
    s = m(snap(10.0, npu(10.0, 500.0, energy=1e6 + 4000.0, uuid="GPU-0", procs=procs)))
    assert energy(s, "GPU-0").value == 1e6 + 4000.0  # the vendor's reading as read
    unattributed, containers = split(s, "GPU-0")
    assert containers == {("ml", "a", "main"): pytest.approx(1000.0), ("ml", "b", "main"): pytest.approx(3000.0)}
    assert unattributed == pytest.approx(1e6)  # what it counted before the agent saw it
    assert unattributed + sum(containers.values()) == pytest.approx(energy(s, "GPU-0").value)


def test_a_whole_device_allocation_takes_all_and_mig_children_fold_into_the_parent():
    alloc = Allocation("ml", "train", "main", resource="huawei.com/Ascend910", device_id="0")
    m = EnergyMeter(None, "boot-1")
    m(snap(0.0, npu(0.0, 200.0, allocs=(alloc,))))
    s = m(snap(10.0, npu(10.0, 200.0, allocs=(alloc,))))
    assert split(s, "ascend-0") == (0.0, {("ml", "train", "main"): pytest.approx(2000.0)})
    # a partition child has no energy run of its own: its share lands on the parent
    child = npu(10.0, None, uuid="ascend-0-vnpu-1", index=1, parent="ascend-0", allocs=(alloc,))
    s = EnergyMeter(None, "boot-1")(snap(0.0, npu(0.0, 200.0), child))
    assert [e.uuid for e in s.energy] == ["ascend-0"]


def test_a_device_restart_begins_a_new_run():
    m = EnergyMeter(None, "boot-1")
    for t in (0.0, 10.0):
        s = m(snap(t, npu(t, 100.0, procs=(proc("a", 1),))))
    assert energy(s, "ascend-0").value == pytest.approx(1000.0)
    s = m(snap(20.0, npu(20.0, 100.0, driver="25.0.rc1", procs=(proc("a", 1),))))  # a driver reload
    assert energy(s, "ascend-0").value == 0.0 and split(s, "ascend-0") == (0.0, {})
    reset = Fault(code="device-reset", count=1, source="kernel-log")
    m(snap(30.0, npu(30.0, 100.0, driver="25.0.rc1")))
    s = m(snap(40.0, npu(40.0, 100.0, driver="25.0.rc1", faults=(reset,))))
    assert energy(s, "ascend-0").value == 0.0
    # a vendor counter going backwards: the driver's new run, counted from there
    m = EnergyMeter(None, "boot-1")
    m(snap(0.0, npu(0.0, 1.0, energy=5000.0, uuid="GPU-0")))
    s = m(snap(10.0, npu(10.0, 1.0, energy=30.0, uuid="GPU-0")))
    assert split(s, "GPU-0") == (30.0, {})


def test_runs_survive_an_agent_restart_and_never_go_backwards(tmp_path):
    state = str(tmp_path)
    m = EnergyMeter(state, "boot-1", save_seconds=0.0)
    for t in (0.0, 10.0, 20.0):
        before = m(snap(t, npu(t, 100.0, procs=(proc("a", 1),))))
    m.close()
    assert (tmp_path / FILE_NAME).stat().st_mode & 0o077 == 0
    again = EnergyMeter(state, "boot-1")
    s = again(snap(100.0, npu(100.0, 100.0, procs=(proc("a", 1),))))
    assert energy(s, "ascend-0").value == energy(before, "ascend-0").value == pytest.approx(2000.0)
    s = again(snap(110.0, npu(110.0, 100.0, procs=(proc("a", 1),))))
    assert energy(s, "ascend-0").value == pytest.approx(3000.0)
    assert split(s, "ascend-0")[1] == {("ml", "a", "main"): pytest.approx(3000.0)}
    # another boot: every device restarted, so did the runs
    fresh = EnergyMeter(state, "boot-2")(snap(200.0, npu(200.0, 100.0)))
    assert energy(fresh, "ascend-0").value == 0.0


@pytest.mark.parametrize("content", [
    b"{not json", b"[]", json.dumps({"format": "hetero-exporter-energy", "version": 9}).encode(),
    json.dumps({"format": "hetero-exporter-energy", "version": 1, "boot_id": "boot-1",
                "devices": [{"uuid": "ascend-0", "vendor": "ascend", "total": -5.0, "unattributed": 0,
                             "containers": []}]}).encode(),
    json.dumps({"format": "hetero-exporter-energy", "version": 1, "boot_id": "boot-1",
                "devices": [{"uuid": "ascend-0", "vendor": "ascend", "total": 1.0, "unattributed": 0,
                             "containers": [["ml", "a", "main", 1.0, 0.0]] * (MAX_CONTAINERS + 1)}]}).encode(),
    b"[" * 100_000,
])
def test_a_hostile_state_file_is_ignored_with_one_warning(tmp_path, caplog, content):
    (tmp_path / FILE_NAME).write_bytes(content)
    os.chmod(tmp_path / FILE_NAME, 0o600)
    s = EnergyMeter(str(tmp_path), "boot-1")(snap(0.0, npu(0.0, 100.0)))
    assert energy(s, "ascend-0").value == 0.0
    assert [r.message for r in caplog.records] == ["energy state ignored: energy runs start again"]


def test_a_state_file_others_may_write_or_a_link_is_refused(tmp_path, caplog):
    good = EnergyMeter(str(tmp_path), "boot-1", save_seconds=0.0)
    for t in (0.0, 10.0):
        good(snap(t, npu(t, 100.0)))
    good.close()
    os.chmod(tmp_path / FILE_NAME, 0o666)
    assert energy(EnergyMeter(str(tmp_path), "boot-1")(snap(0.0, npu(0.0, 1.0))), "ascend-0").value == 0.0
    os.chmod(tmp_path / FILE_NAME, 0o600)
    os.rename(tmp_path / FILE_NAME, tmp_path / "real.json")
    os.symlink(tmp_path / "real.json", tmp_path / FILE_NAME)
    assert energy(EnergyMeter(str(tmp_path), "boot-1")(snap(0.0, npu(0.0, 1.0))), "ascend-0").value == 0.0
    assert len(caplog.records) == 2


cycle = st.tuples(st.one_of(st.none(), st.floats(0, 2000)),  # power, watts
                  st.floats(0.5, 90),  # seconds since the last cycle
                  st.lists(st.integers(0, 4 << 30), max_size=4),  # the containers' process memory
                  st.booleans())  # a driver reload


@settings(max_examples=150, deadline=None)
@given(st.lists(cycle, min_size=1, max_size=25))
def test_containers_plus_unattributed_equal_the_device_and_only_a_restart_lowers_it(cycles):
    m, t, last, driver = EnergyMeter(None, "boot-1"), 0.0, 0.0, 0
    for watts, dt, mems, reload in cycles:
        t += dt
        driver += reload
        procs = tuple(proc(f"p{i}", mem) for i, mem in enumerate(mems))
        s = m(snap(t, npu(t, watts, driver=str(driver), procs=procs)))
        if not s.energy:
            continue
        unattributed, containers = split(s, "ascend-0")
        total = energy(s, "ascend-0").value
        assert unattributed >= 0 and all(j >= 0 for j in containers.values())
        assert unattributed + sum(containers.values()) == pytest.approx(total, rel=1e-9, abs=1e-6)
        assert total >= last or reload
        last = total
