"""Render -> parse round trips (hypothesis): the fake npu-smi's renderers and the real parsers
agree on every layout, and a scenario read through the fake and the real collector gives the
scenario's values back in base units."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_fakes import in_process_runner
from hetero_exporter.model import fields as F
from hetero_exporter.collectors.ascend.npu_smi import collector as N
from hetero_exporter.collectors.ascend.npu_smi import parse as P
from hetero_exporter.collectors.ascend.npu_smi import fake
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate.scenario import from_dict

MIB = 1 << 20
RT = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HEALTH = st.sampled_from(["OK", "Warning", "Alarm", "Critical", "UNKNOWN"])
NAMES = st.sampled_from(["910B3", "910A", "910B2C", "910ProB", "310", "310P3", "xxx"])
maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731


@st.composite
def summaries(draw, layout: str) -> N.NpuSummary:
    n = draw(st.integers(0, 6))
    per_card = 1 if layout == "new" else draw(st.integers(1, 3))
    npu_ids = draw(st.lists(st.integers(0, 255), min_size=n, max_size=n, unique=True))
    chips = []
    for k, npu in enumerate(sorted(npu_ids)):
        for chip in range(per_card):
            c = N.NpuChip(
                npu_id=npu, chip_id=chip, name=draw(NAMES), health=draw(HEALTH),
                bus_id=f"0000:{draw(st.integers(0, 255)):02x}:{draw(st.integers(0, 31)):02x}.{draw(st.integers(0, 7))}",
                power_w=draw(maybe(st.integers(0, 9999).map(lambda x: x / 10))),
                temp_c=draw(maybe(st.integers(0, 120).map(float))),
                aicore_pct=draw(maybe(st.integers(0, 100).map(float))),
                memory_used_mb=draw(maybe(st.integers(0, 99999))), memory_total_mb=draw(maybe(st.integers(0, 99999))))
            if layout == "310":
                c = dataclasses.replace(c, logic_id=draw(st.integers(0, 99)))
            else:
                c = dataclasses.replace(c, hbm_used_mb=draw(maybe(st.integers(0, 99999))),
                                        hbm_total_mb=draw(maybe(st.integers(0, 131072))))
                if layout != "910-old":
                    c = dataclasses.replace(c, hugepages_used=draw(maybe(st.integers(0, 9999))),
                                            hugepages_total=draw(maybe(st.integers(0, 9999))))
            chips.append(c)
    procs = []
    if chips and layout in ("910", "910-22", "new"):
        for _ in range(draw(st.integers(0, 4))):
            c = draw(st.sampled_from(chips))
            procs.append(N.NpuProcess(
                npu_id=c.npu_id, chip_id=None if layout == "new" else c.chip_id, pid=draw(st.integers(1, 4194304)),
                name=draw(st.from_regex(r"[a-z][a-z0-9_.]{0,10}( [a-z0-9]{1,5})?", fullmatch=True)),
                memory_mb=draw(maybe(st.integers(0, 999999)))))
    procs.sort(key=lambda p: p.npu_id)  # npu-smi lists them card by card
    version = draw(st.sampled_from(["23.0.0", "23.0.rc2.b090", "1.9.3", "24.1.rc1"]))
    return N.NpuSummary(tool_version=version, driver_version=version, layout="", chips=tuple(chips),
                        processes=tuple(procs))


def _layout_name(layout: str) -> str:
    return {"910": "910", "910-22": "910", "910-old": "910", "310": "310", "new": "new"}[layout]


@RT
@given(st.sampled_from(fake.LAYOUTS).flatmap(lambda lay: st.tuples(st.just(lay), summaries(lay))))
def test_summary_render_then_parse_gives_the_rows_back(case):
    layout, s = case
    text = fake.render_summary(s, layout)
    got = N.parse_summary(text)
    assert got.chips == s.chips
    assert got.processes == s.processes
    assert (got.tool_version, got.driver_version, got.layout) == (s.tool_version, s.driver_version,
                                                                  _layout_name(layout))


@RT
@given(HEALTH, st.lists(st.from_regex(r"[0-9A-F]{8}", fullmatch=True), max_size=4, unique=True),
       st.lists(st.from_regex(r"node type=[A-Z]{2,8}, sensor type=[A-Za-z ]{1,12}[a-z]", fullmatch=True), max_size=3))
def test_health_render_then_parse(state, codes, info):
    h = N.health_detail(N.parse_detail(fake.render_health(state, codes, info), "health"))
    assert h == N.HealthDetail(state, tuple(codes), "; ".join(info))


KEYS = st.sampled_from(["Aicore Usage Rate(%)", "HBM Capacity(MB)", "DDR Usage Rate(%)", "Aicore Freq(MHZ)",
                        "HBM Temperature(C)", "NPU Real-time Power(W)", "HBM Single Bit Aggregate Total Err Cnt"])


@RT
@given(st.lists(st.lists(st.tuples(KEYS, st.integers(0, 10 ** 6).map(str)), min_size=1, max_size=5,
                         unique_by=lambda kv: kv[0]), min_size=1, max_size=3))
def test_key_value_render_then_parse(chip_blocks):
    blocks = [[("NPU ID", "3"), ("Chip Count", str(len(chip_blocks)))]]
    blocks += [b + [("Chip ID", str(i))] for i, b in enumerate(chip_blocks)]
    doc = N.parse_detail(fake.render_kv(blocks), "usages")
    assert doc.npu_id == 3
    for i, b in enumerate(chip_blocks):
        for k, v in b:
            assert doc.get(i, P._norm_key(k)) == v


# --------------------------------------------------------------------------- through the collector


@RT
@given(st.integers(1, 4), st.integers(0, 100), st.integers(1, 64).map(lambda g: g << 30),
       st.integers(0, 1000).map(lambda x: x / 1000), st.integers(200, 5000).map(lambda x: x / 10),
       st.integers(20, 95), st.integers(0, 100), st.sampled_from(["910", "910-22", "310", "new"]))
def test_scenario_through_fake_and_collector_gives_the_values_back(n, util_pct, total, used_frac, power, temp,
                                                                 bw_pct, layout):
    used = int(total * used_frac) // MIB * MIB
    product = "310" if layout == "310" else "910B3"
    sc = from_dict({"name": "rt", "settings": {"ascend": {"layout": layout}}, "devices": [{
        "vendor": "ascend", "count": n, "product": product, "memory_total": total,
        "pci_address": "0000:c1:00.0", "pci_stride": 1, "driver_version": "23.0.0", "firmware_version": "7.1",
        "values": {"utilization_ratio": util_pct / 100, "memory_used_bytes": used, "power_watts": power,
                   "temperature_core_celsius": temp, "memory_utilization_ratio": bw_pct / 100,
                   "clock_compute_hertz": 1800e6},
        "processes": [{"pid": 4000, "name": "python", "memory": "1GiB"}]}]})
    clock = ManualClock()
    calls: list = []
    col = N.NpuSmiCollector("npu-smi", clock=clock, timeout=5, interval=10,
                            settings={"detail_calls_per_cycle": 100, "parallel_calls": 1},
                            runner=in_process_runner(fake.answer, sc, clock, calls))
    devs = col.collect()
    assert len(devs) == n
    for d, spec in zip(sorted(devs, key=lambda d: d.identity.pci_address), sc.devices):
        assert d.identity.pci_address == spec.pci_address and d.identity.model.startswith("Ascend")
        assert d.value(F.UTILIZATION) == util_pct / 100
        assert d.value(F.MEMORY_TOTAL) == total and d.value(F.MEMORY_USED) == used
        assert d.value(F.POWER) == round(power, 1) and d.value(F.TEMP_CORE) == temp
        if layout != "310":  # the 310 has no HBM bandwidth figure
            assert d.value(F.MEMORY_UTILIZATION) == bw_pct / 100
        assert d.value(F.CLOCK_COMPUTE) == 1800e6
        if layout in ("910", "910-22", "new"):
            assert [(p.pid, p.memory_bytes) for p in d.processes] == [(spec.processes[0].pid, 1 << 30)]
        assert d.health.state == "ok"
