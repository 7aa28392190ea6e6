"""The ascend-* and mixed-* scenarios of fixtures/scenarios: each file's stated expectations,
checked through the real collectors (the fake executables where a hang must be killed)."""

from __future__ import annotations

from pathlib import Path

from cli_fakes import in_process_runner
from conftest import ROOT
from hetero_exporter.model import fields as F
from hetero_exporter import sampling
from hetero_exporter.sdk.contract import CollectorOptions
from hetero_exporter.collectors.cambricon.cnmon import collector as cnmon
from hetero_exporter.collectors.ascend.npu_smi import collector as npu_smi
from hetero_exporter.collectors.nvidia.nvml import collector as nvml
from hetero_exporter.collectors.ascend.npu_smi import fake
from hetero_exporter.sampling import CollectorSpec, Sampler
from hetero_exporter.simulate import ManualClock, load

SCENARIOS = ROOT / "fixtures" / "scenarios"
GIB = 1 << 30


def scenario(name: str):
    return load(str(SCENARIOS / f"{name}.yaml"))


def in_process(sc, clock, calls):
    return in_process_runner(fake.answer, sc, clock, calls)


def sampler_for(sc, clock, workdir: Path, timeouts: dict) -> Sampler:
    modules = {"nvml": ("nvidia", nvml), "npu_smi": ("ascend", npu_smi), "cnmon": ("cambricon", cnmon)}
    specs = []
    for name, timeout in timeouts.items():
        vendor, module = modules[name]
        opts = CollectorOptions(scenario=sc, clock=clock, workdir=str(workdir), timeout_seconds=timeout,
                                interval_seconds=10)
        specs.append(CollectorSpec(name, vendor, lambda m=module, o=opts: m.create(o), timeout))
    return Sampler(specs, sc.node, clock=clock)


def test_ascend_910b_8x():
    sc = scenario("ascend-910b-8x")
    clock, calls = ManualClock(), []
    clock.set_t(40)
    devs = npu_smi.NpuSmiCollector("npu-smi", clock=clock, runner=in_process(sc, clock, calls)).collect()
    assert [d.identity.pci_address for d in devs] == [f"0000:c{i}:00.0" for i in range(1, 9)]
    assert all(d.value(F.MEMORY_TOTAL) == 64 * GIB and d.health.state == "ok" for d in devs)
    assert [len(d.processes) for d in devs] == [1] * 8 and calls.count(["info"]) == 1


def test_ascend_health_codes():
    sc = scenario("ascend-health-codes")
    clock, calls = ManualClock(), []
    col = npu_smi.NpuSmiCollector("npu-smi", clock=clock, runner=in_process(sc, clock, calls))

    def at(t):
        clock.set_t(t)
        calls.clear()
        return col.collect()

    devs = at(45)
    assert [d.health.state for d in devs] == ["ok", "degraded", "ok", "ok"]
    assert [(f.code, f.action) for f in devs[1].health.reasons] == [("Warning", "none"), ("80E01805", "none")]
    assert "node type=SOC" in devs[1].health.reasons[1].message
    assert [c for c in calls if c[:3] == ["info", "-t", "health"]] == [["info", "-t", "health", "-i", "1", "-c", "0"]]
    devs = at(75)
    assert [d.health.state for d in devs] == ["ok", "degraded", "ok", "failed"]
    alarm = {f.code: f for f in devs[3].health.reasons}
    assert set(alarm) == {"Alarm", "80E3A201"}
    assert (alarm["80E3A201"].action, alarm["80E3A201"].fault_class) == ("isolate-device", "separate-npu")
    devs = at(200)
    assert [d.health.state for d in devs] == ["ok"] * 4
    assert {f.code: f.count for f in devs[3].faults} == {"Alarm": 1, "80E3A201": 1}
    assert {f.code: f.count for f in devs[1].faults} == {"Warning": 1, "80E01805": 1}
    assert not any(c[:3] == ["info", "-t", "health"] for c in calls)


def test_ascend_310p_duo():
    sc = scenario("ascend-310p-duo")
    clock, calls = ManualClock(), []
    devs = npu_smi.NpuSmiCollector("npu-smi", clock=clock, runner=in_process(sc, clock, calls)).collect()
    assert [d.identity.index for d in devs] == [0, 1, 2, 3] and ["info", "-m"] not in calls
    assert all(d.identity.model == "Ascend310P3" and d.value(F.MEMORY_TOTAL) == 24 * GIB for d in devs)
    assert len({d.identity.uuid for d in devs}) == 4


def test_ascend_hung_npu_smi(tmp_path):
    sc = scenario("ascend-hung-npu-smi")
    clock = ManualClock()
    s = sampler_for(sc, clock, tmp_path, {"npu_smi": 4.0})
    try:
        assert {c.name: c.ok for c in s.collect().collectors} == {"npu_smi": True}
        clock.set_t(60)
        snap = s.collect()
        (st,) = snap.collectors
        # published before npu-smi's deadline (sampling.py: a late collector does not hold the cycle),
        # unless its patience (1.5 x its first, slow cycle + 1 s) already reached the deadline, as on
        # a loaded machine: then it is the timeout; the devices are carried over either way
        assert (st.error_kind == "late" and sampling.LATE_MESSAGE in st.error) or st.error_kind == "timeout"
        assert len(snap.devices) == 2 and all(d.health.state == "unknown" for d in snap.devices)
        assert all(r.quality.status == "stale" for d in snap.devices for r in d.readings.values()
                   if r.value is not None)
        assert s._workers["npu_smi"].wait(10)  # the late call ends: npu-smi killed at its deadline
        clock.set_t(120)
        snap = s.collect()
        assert snap.collectors[0].ok and [d.value(F.POWER) for d in snap.devices] == [150, 150]
    finally:
        s.close()


def test_mixed_node_a_hung_npu_smi_costs_only_the_npus(tmp_path):
    sc = scenario("mixed-nvidia-ascend-cambricon")
    clock = ManualClock()
    clock.set_t(10)
    s = sampler_for(sc, clock, tmp_path, {"nvml": 5.0, "npu_smi": 4.0, "cnmon": 8.0})
    try:
        first = s.collect()
        assert all(c.ok for c in first.collectors), [(c.name, c.error) for c in first.collectors]
        clock.set_t(60)
        snap = s.collect()
        st = {c.name: c for c in snap.collectors}
        # late (past its patience) or timeout (its patience was its deadline: a slow first cycle
        # on a loaded machine makes the usual time long): either way only the NPUs are carried over
        assert st["nvml"].ok and st["cnmon"].ok and st["npu_smi"].error_kind in ("late", "timeout")
        by_vendor = {}
        for d in snap.devices:
            by_vendor.setdefault(d.identity.vendor, []).append(d)
        assert [d.value(F.POWER) for d in by_vendor["nvidia"]] == [450, 450]
        assert [d.value(F.POWER) for d in by_vendor["cambricon"]] == [120, 120]
        assert [d.health.state for d in by_vendor["ascend"]] == ["unknown", "unknown"]
        assert s._workers["npu_smi"].wait(10)  # the late call ends: npu-smi killed at its deadline
        clock.set_t(120)
        assert all(c.ok for c in s.collect().collectors)
    finally:
        s.close()
