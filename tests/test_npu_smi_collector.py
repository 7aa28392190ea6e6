"""The npu-smi collector: over the fake executable (the real runner, real parsers), its
failure modes, health and faults, the call cadence; and a hung npu-smi in a Sampler beside
the NVML collector of the same scenario."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from cli_fakes import alive as _alive
from cli_fakes import in_process_runner
from hetero_exporter.model import fields as F
from hetero_exporter.sdk import runner as vendor_cli
from hetero_exporter.sdk.contract import CollectorOptions, ParseError, Unavailable
from hetero_exporter.collectors.ascend.npu_smi import collector as N
from hetero_exporter.collectors.ascend.npu_smi import fake
from hetero_exporter.collectors.nvidia.nvml import collector as nvml
from hetero_exporter.sampling import CollectorSpec, Sampler
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate.scenario import from_dict, load
from hetero_exporter.sdk.runner import CliError, CliResult

GIB = 1 << 30


def ascend_group(n=2, **over):
    g = {"vendor": "ascend", "count": n, "product": "910B3", "memory_total": "64GiB", "pci_address": "0000:c1:00.0",
         "pci_stride": 1, "driver_version": "23.0.3", "firmware_version": "7.1.0.5.220",
         "values": {"utilization_ratio": 0.25, "memory_used_bytes": "8GiB", "power_watts": {"steps": [[0, 100], [100, 300]]},
                    "temperature_core_celsius": 50, "memory_utilization_ratio": 0.1, "clock_compute_hertz": 1800e6,
                    "clock_memory_hertz": 1600e6, "temperature_memory_celsius": 41,
                    "ecc_corrected_total": 3, "ecc_uncorrected_total": 0},
         "processes": [{"pid": 6100, "name": "python", "memory": "2GiB"}]}
    g.update(over)
    return g


def write_scenario(tmp_path: Path, doc: dict) -> str:
    p = tmp_path / "scenario.yaml"
    p.write_text(yaml.safe_dump({"name": "npu-test", **doc}))
    return str(p)


def collector_over_fake(tmp_path, doc, clock, timeout=8.0, settings=None):
    sc = load(write_scenario(tmp_path, doc))
    opts = CollectorOptions(scenario=sc, clock=clock, workdir=str(tmp_path / "work"), timeout_seconds=timeout,
                            interval_seconds=10, settings=settings or {})
    return N.create(opts), sc


def test_collector_runs_the_fake_executable_through_the_real_runner(tmp_path):
    clock = ManualClock()
    clock.set_t(50)
    col, sc = collector_over_fake(tmp_path, {"devices": [ascend_group()]}, clock)
    launcher = tmp_path / "work" / "npu-smi"
    assert launcher.is_file() and os.access(launcher, os.X_OK)
    before = vendor_cli.invocations().get("npu-smi", 0)
    devs = col.collect()
    assert vendor_cli.invocations().get("npu-smi", 0) - before == col.calls >= 3  # summary + 2 board
    assert [d.identity.pci_address for d in devs] == ["0000:c1:00.0", "0000:c2:00.0"]
    d = devs[0]
    assert d.identity.uuid == f"ascend-sn-{sc.devices[0].serial}" and d.identity.serial == sc.devices[0].serial
    assert d.identity.model == "Ascend910B3" and d.identity.firmware_version == "7.1.0.5.220"
    assert d.value(F.MEMORY_TOTAL) == 64 * GIB and d.value(F.MEMORY_USED) == 8 * GIB
    assert d.value(F.UTILIZATION) == 0.25 and d.value(F.POWER) == 100
    assert [(p.pid, p.memory_bytes, p.pod) for p in d.processes] == [(6100, 2 * GIB, None)]
    # the scenario time reaches the fake with each call: the power step at t=100 shows
    clock.set_t(150)
    assert col.collect()[0].value(F.POWER) == 300


def test_hung_npu_smi_is_killed_at_its_deadline_next_cycle_works_and_nvidia_keeps_its_readings(tmp_path):
    doc = {"devices": [{"vendor": "nvidia", "count": 2, "product": "NVIDIA H100 80GB HBM3", "memory_total": "80GiB",
                        "values": {"utilization_ratio": 0.5, "memory_used_bytes": "10GiB", "power_watts": 300,
                                   "temperature_core_celsius": 55}},
                       ascend_group()],
           "faults": [{"at": 0, "until": 100, "vendor": "ascend", "index": 0, "kind": "hung", "command": "summary"}]}
    sc = load(write_scenario(tmp_path, doc))
    clock = ManualClock()
    clock.set_t(10)
    work = tmp_path / "work"
    specs = []
    for name, vendor, module, timeout in (("nvml", "nvidia", nvml, 5.0), ("npu_smi", "ascend", N, 4.0)):
        opts = CollectorOptions(scenario=sc, clock=clock, workdir=str(work), timeout_seconds=timeout,
                                interval_seconds=10)
        specs.append(CollectorSpec(name, vendor, lambda m=module, o=opts: m.create(o), timeout))
    sampler = Sampler(specs, "node-a", clock=clock)
    try:
        t0 = time.monotonic()
        snap = sampler.collect()
        took = time.monotonic() - t0
        status = {c.name: c for c in snap.collectors}
        assert status["nvml"].ok and not status["npu_smi"].ok
        assert status["npu_smi"].error_kind == "timeout"
        assert "killed its process group" in status["npu_smi"].error  # our deadline, not the sampler's
        assert took < 4.0 + 2.0  # the cycle did not wait for the hung tool
        nvidia = [d for d in snap.devices if d.identity.vendor == "nvidia"]
        assert len(nvidia) == 2 and all(d.value(F.POWER) == 300 and d.value(F.UTILIZATION) == 0.5 for d in nvidia)
        # the hung npu-smi and its grandchild are gone
        pids = [int(x) for x in (work / "npu-smi.hung.pids").read_text().split()]
        for _ in range(50):
            if not any(_alive(p) for p in pids):
                break
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids), pids
        # the fault is over: the next cycle reads the NPUs, NVIDIA still fresh
        clock.set_t(120)
        snap2 = sampler.collect()
        st2 = {c.name: c for c in snap2.collectors}
        if st2["npu_smi"].error_kind == "late":  # no usual time yet (its first answer): 1 s of patience,
            assert sampler._workers["npu_smi"].wait(10)  # which a loaded machine can pass; its answer
            clock.set_t(130)  # stands in for the next cycle
            snap2 = sampler.collect()
            st2 = {c.name: c for c in snap2.collectors}
        assert st2["npu_smi"].ok and st2["nvml"].ok, st2["npu_smi"].error
        npus = [d for d in snap2.devices if d.identity.vendor == "ascend"]
        assert [d.value(F.POWER) for d in npus] == [300, 300]
        assert all(d.value(F.POWER) == 300 for d in snap2.devices if d.identity.vendor == "nvidia")
        assert st2["npu_smi"].errors_total.get("timeout") == 1  # (and at most the one late cycle above)
        assert set(st2["npu_smi"].errors_total) <= {"timeout", "late"}
    finally:
        sampler.close()


@pytest.mark.parametrize("mode, error, match", [
    ("garbage", ParseError, "npu-smi"),
    ("truncated", ParseError, "npu-smi"),
    ("exit", CliError, "exit status 255: dcmi model initialized failed"),
])
def test_broken_output_fails_the_cycle_with_a_clear_error(tmp_path, mode, error, match):
    doc = {"devices": [ascend_group(1)], "settings": {"ascend": {"mode": mode}}}
    col, _ = collector_over_fake(tmp_path, doc, ManualClock())
    with pytest.raises(error, match=match):
        col.collect()


def test_a_slow_npu_smi_within_the_deadline_is_fine(tmp_path):
    doc = {"devices": [ascend_group(1)], "faults": [{"at": 0, "vendor": "ascend", "index": 0, "kind": "slow",
                                                     "seconds": 1.0, "command": "summary"}]}
    col, _ = collector_over_fake(tmp_path, doc, ManualClock())
    assert [d.value(F.UTILIZATION) for d in col.collect()] == [0.25]


def test_missing_tool_is_unavailable(tmp_path):
    with pytest.raises(Unavailable, match="not found"):
        N.create(CollectorOptions(settings={"path": str(tmp_path / "no-npu-smi")}))
    col = N.NpuSmiCollector(str(tmp_path / "gone"), timeout=2)
    with pytest.raises(Unavailable):
        col.collect()


# --------------------------------------------------------------------------- in-process fake


def in_process(sc, clock, calls):
    return in_process_runner(fake.answer, sc, clock, calls)


def test_health_states_and_error_codes_become_health_and_counted_faults():
    sc = from_dict({"name": "h", "devices": [ascend_group(2)], "faults": [
        {"at": 100, "until": 200, "vendor": "ascend", "index": 1, "kind": "health", "state": "Alarm",
         "codes": ["80E3A201"], "message": "node type=HBM, sensor type=ECC"},
        {"at": 300, "until": 400, "vendor": "ascend", "index": 1, "kind": "health", "state": "Warning",
         "code": "80E01801"},
        {"at": 500, "until": 600, "vendor": "ascend", "index": 1, "kind": "health", "state": "Alarm",
         "codes": ["80E3A201"]}]})
    clock, calls = ManualClock(), []
    col = N.NpuSmiCollector("npu-smi", clock=clock, runner=in_process(sc, clock, calls),
                            settings={"detail_intervals": {"usages": 0, "common": 0, "memory": 0, "ecc": 0}})

    def at(t):
        clock.set_t(t)
        calls.clear()
        return {d.identity.index: d for d in col.collect()}

    assert at(50)[1].health.state == "ok" and not any("health" in c for c in calls)
    d = at(150)[1]
    assert ["info", "-t", "health", "-i", "1", "-c", "0"] in calls  # only for the chip that is not OK
    assert not any(c[:3] == ["info", "-t", "health"] and c[4] == "0" for c in calls)
    assert d.health.state == "failed"  # SeparateNPU code: critical
    codes = {f.code: f for f in d.health.reasons}
    assert set(codes) == {"Alarm", "80E3A201"}
    assert codes["80E3A201"].action == "isolate-device" and codes["80E3A201"].count == 1
    assert "node type=HBM" in codes["80E3A201"].message
    assert at(160)[1].health.reasons[1].count == 1  # the same episode is counted once
    healed = at(250)[1]
    assert healed.health.state == "ok" and {f.code for f in healed.faults} == {"Alarm", "80E3A201"}
    warn = at(350)[1]
    assert warn.health.state == "degraded" and {f.code for f in warn.health.reasons} == {"Warning", "80E01801"}
    again = at(550)[1]
    assert next(f for f in again.faults if f.code == "80E3A201").count == 2  # a second episode
    assert at(550)[0].health.state == "ok" and at(550)[0].faults == ()


def test_a_chip_that_leaves_the_table_is_reported_failed():
    sc = from_dict({"name": "m", "devices": [ascend_group(2)],
                    "faults": [{"at": 100, "vendor": "ascend", "index": 1, "kind": "missing"}]})
    clock, calls = ManualClock(), []
    col = N.NpuSmiCollector("npu-smi", clock=clock, runner=in_process(sc, clock, calls))
    uuid = col.collect()[1].identity.uuid
    clock.set_t(150)
    devs = col.collect()
    assert len(devs) == 2
    lost = next(d for d in devs if d.identity.uuid == uuid)
    assert lost.health.state == "failed" and lost.health.reasons[0].code == "missing"
    assert lost.readings == {}
    clock.set_t(160)
    assert next(d for d in col.collect() if d.identity.uuid == uuid).health.reasons[0].count == 1


def test_eight_npus_one_summary_per_cycle_and_details_spread_at_their_cadence():
    sc = from_dict({"name": "c", "devices": [ascend_group(8)]})
    clock, calls = ManualClock(), []
    col = N.NpuSmiCollector("npu-smi", clock=clock, interval=10, runner=in_process(sc, clock, calls))
    per_cycle, fetched = [], {}
    for cycle in range(120):  # twenty minutes of 10 s cycles (the steady state over several 300 s periods)
        clock.set_t(cycle * 10)
        calls.clear()
        devs = col.collect()
        assert len(devs) == 8
        assert calls.count(["info"]) == 1  # one summary for all NPUs
        per_cycle.append(len(calls))
        for c in calls:
            if c[:2] == ["info", "-t"] and c[2] in N.DEFAULT_DETAIL_INTERVALS:
                fetched.setdefault((c[4], c[2]), []).append(cycle * 10)
    # first cycle: summary + one board per card (identity) + the detail budget
    rate = sum(8 * 10 / every for every in N.DEFAULT_DETAIL_INTERVALS.values())  # 3.2 calls per cycle
    budget = int(rate) + 1 + 1
    assert per_cycle[0] == 1 + 8 + budget
    assert max(per_cycle[1:]) <= 1 + budget
    assert sum(per_cycle[30:]) / 90 == pytest.approx(1 + rate, abs=0.35)  # steady state
    # every card's every kind is refreshed, no sooner than its interval
    assert len(fetched) == 8 * len(N.DEFAULT_DETAIL_INTERVALS)
    for (card, kind), times in fetched.items():
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert all(g >= N.DEFAULT_DETAIL_INTERVALS[kind] for g in gaps), (card, kind, gaps)
    # the details reached the readings, with their age
    d = col.collect()[0]
    assert d.value(F.CLOCK_COMPUTE) == 1800e6 and d.value(F.TEMP_MEMORY) == 41
    assert d.value(F.ECC_CORRECTED) == 3 and d.value(F.MEMORY_UTILIZATION) == pytest.approx(0.1)
    assert d.readings[F.ECC_CORRECTED].quality.age_seconds >= 0


def test_failing_detail_calls_do_not_cost_the_summary_and_stop_after_three_tries():
    sc = from_dict({"name": "d", "devices": [ascend_group(1)],
                    "faults": [{"at": 0, "vendor": "ascend", "index": 0, "kind": "exit", "command": "detail"}]})
    clock, calls = ManualClock(), []

    def run(argv, timeout, env=None, **_):
        calls.append(list(argv[1:]))
        if argv[1:] != ["info"]:
            raise CliError("npu-smi: exit status 255: device busy")
        _, out, _ = fake.answer(sc, clock.t(), argv[1:])
        return CliResult(tuple(argv), out, "", 0, 0.0)

    col = N.NpuSmiCollector("npu-smi", clock=clock, runner=run,
                            settings={"detail_intervals": {"usages": 10, "common": 0, "memory": 0, "ecc": 0}})
    for cycle in range(6):
        clock.set_t(cycle * 10)
        (d,) = col.collect()
        assert d.value(F.UTILIZATION) == 0.25
    assert sum(1 for c in calls if c[:3] == ["info", "-t", "usages"]) == 3
    # identity fell back: no board output, no die id: the PCI address is the id
    assert d.identity.uuid == "ascend-pci-0000:c1:00.0"


def test_multi_chip_cards_use_the_device_column_and_serial_per_chip():
    sc = from_dict({"name": "p", "settings": {"ascend": {"layout": "310", "chips_per_card": 4, "npu_id_base": 215}},
                    "devices": [ascend_group(4, product="310", memory_total="8GiB",
                                             values={"utilization_ratio": 0.1, "memory_used_bytes": "1GiB"})]})
    clock, calls = ManualClock(), []
    col = N.NpuSmiCollector("npu-smi", clock=clock, runner=in_process(sc, clock, calls))
    devs = col.collect()
    assert [d.identity.index for d in devs] == [0, 1, 2, 3]
    assert ["info", "-m"] not in calls  # the Device column already names the logic ids
    assert len({d.identity.uuid for d in devs}) == 4
    assert all(d.identity.uuid.startswith("ascend-sn-") and d.identity.uuid.endswith(f"-c{i}")
               for i, d in enumerate(devs))
    assert all(d.identity.model == "Ascend310" and d.value(F.MEMORY_TOTAL) == 8 * GIB for d in devs)


def test_identity_calls_that_run_out_of_time_are_asked_again_not_pinned():
    sc = from_dict({"name": "late", "devices": [ascend_group(2)]})
    clock, calls = ManualClock(), []
    answer = in_process(sc, clock, calls)
    slow_boards = {"left": 1}

    def run(argv, timeout, env=None, **kw):
        if argv[1:4] == ["info", "-t", "board"] and slow_boards["left"]:
            raise vendor_cli.CliTimeout("npu-smi: no answer within 1 s; killed its process group")
        return answer(argv, timeout, env, **kw)

    col = N.NpuSmiCollector("npu-smi", clock=clock, runner=run)
    first = col.collect()  # boards timed out: reported by PCI address for this cycle
    assert [d.identity.uuid for d in first] == ["ascend-pci-0000:c1:00.0", "ascend-pci-0000:c2:00.0"]
    slow_boards["left"] = 0
    clock.set_t(10)
    second = col.collect()
    assert [d.identity.uuid for d in second] == [f"ascend-sn-{s.serial}" for s in sc.devices]
    clock.set_t(20)
    calls.clear()
    assert [d.identity.uuid for d in col.collect()] == [d.identity.uuid for d in second]
    assert not any(c[:3] == ["info", "-t", "board"] for c in calls)  # learned once
