"""``amd-smi``: the parser on every real capture (text and --json), fuzz, the CLI collector over
the fake amd-smi (round trip, failure modes), one uuid with amdsmi, and amdsmi's fallback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from hetero_exporter.model import fields as F
from hetero_exporter.collectors.amd.amd_smi import collector as amd_smi
from hetero_exporter.collectors.amd.amd_smi import fake
from hetero_exporter.collectors.amd.amd_smi.parse import parse_output
from hetero_exporter.collectors.amd.amdsmi import collector as amdsmi
from hetero_exporter.collectors.amd.amdsmi.fake import FakeAmdSmi
from hetero_exporter.model import snapshot_to_json
from hetero_exporter.sdk.contract import CollectorOptions, ParseError, Unavailable
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate.scenario import load
from tests.conftest import shared_fixture, shared_fixtures

ROOT = Path(__file__).resolve().parent.parent
ECC = ROOT / "fixtures" / "scenarios" / "amd-ecc-uncorrectable.yaml"
MIB = 1 << 20

# capture -> (GPU count, bus ids or None, VRAM total MiB per GPU or None, health per GPU,
# processes (pid, VRAM bytes), links in all), as each capture's text shows
OK1, OK2, OK8 = ["ok"], ["ok"] * 2, ["ok"] * 8
MI355X_BUSES = ["0000:05:00.0", "0000:15:00.0", "0000:65:00.0", "0000:75:00.0",
                "0000:85:00.0", "0000:95:00.0", "0000:e5:00.0", "0000:f5:00.0"]
R9700_PROCS = [(213534, int(54.7 * 1024)), (213890, int(54.7 * 1024)), (213952, int(19.6 * (1 << 30))),
               (213953, int(19.1 * (1 << 30)))]
R9700_JSON = [(213534, 56000), (213890, 56000), (213952, 21008920000), (213953, 20503796000)]
CSV_PROCS = [(207590, 7889485824), (207591, 7923122176), (207589, 7889575936), (207588, 7822258176),
             (207595, 7889514496), (207590, 7822381056), (207597, 7923064832), (207593, 7889465344)]
EXPECTED = {
    "amd-smi-default_1x-MI300X-VF_guest_amd-smi-26.0.0_rocm-7.0.0_no-vbios-line_no-processes.txt":
        (1, ["0000:83:00.0"], [196288], OK1, [], 0),
    "amd-smi-default_1x-MI325X_amd-smi-26.0.0_rocm-7.0.1_no-vbios-line_rocm-docs.txt":
        (1, ["0000:09:00.0"], [262128], OK1, [], 0),
    "amd-smi-default_1x-Radeon-8060S-Strix-Halo-APU_amd-smi-26.0.2_rocm-7.0.2_power-NA-0W.txt":
        (1, ["0000:c5:00.0"], [512], OK1, [], 0),
    "amd-smi-default_2x-MI355X_amd-smi-26.2.1_rocm-7.2.0_long-vbios-version_rocm-docs.txt":
        (2, MI355X_BUSES[:2], [294896] * 2, OK2, [], 0),
    "amd-smi-default_2x-RX-9070-XT_amd-smi-26.2.0_rocm-7.1.1_process-name-NA.txt":
        (2, ["0000:04:00.0", "0000:07:00.0"], [16304] * 2, OK2, [(5300, 0), (5300, 0)], 0),
    "amd-smi-default_2x-Radeon-AI-PRO-R9700_amd-smi-26.2.1_rocm-7.2.0_idle-100pct-gfx_8-process-rows.txt":
        (2, ["0000:03:00.0", "0000:43:00.0"], [32624] * 2, OK2, R9700_PROCS * 2, 0),
    "amd-smi-default_8x-MI355X_amd-smi-26.2.0_rocm-7.1.1_SPX-NPS1_gpuagent-processes.txt":
        (8, MI355X_BUSES, [294896] * 8, OK8, [(326601, 0)] * 8, 0),
    "amd-smi-list_1x-MI300X-VF_guest_amd-smi-26.0.0_kfd-node-partition-ids.txt": (1, ["0000:83:00.0"], None, OK1, [], 0),
    "amd-smi-metric_1x-Radeon-RDNA3-dGPU_max-gfx-2482MHz_jpeg-activity-wrapped-list_TRUNCATED.txt":
        (1, None, None, OK1, [], 0),
    "amd-smi-monitor-putm_8x-MI300X_rocm-6.2-era_rocm-blog.txt": (8, None, None, OK8, [], 0),
    "amd-smi-monitor_1x-RX-9070-XT_amd-smi-27.0.0_rocm-10.0_XCP-layout_vram-usage-column.txt":
        (1, None, [15.9 * 1024], OK1, [], 0),
    "amd-smi-monitor_1x-Radeon-PRO-V710-VF_azure-NVv5_rocm-6.1.4_throttle-column_header-trailing-space_blank-line.txt":
        (1, None, [25476], OK1, [], 0),
    "amd-smi-process-csv_8x-MI300X_pt_main_thread_rocm-blog.txt": (8, None, None, OK8, CSV_PROCS, 0),
    "amd-smi-process-json_2x-Radeon-AI-PRO-R9700_amd-smi-26.2.1_4-procs-per-gpu_cu_occupancy-evicted_time.json":
        (2, None, None, OK2, R9700_JSON * 2, 0),
    # ACCESS and WEIGHT tables only (the LINK TYPE table was cut): no link type, so no links
    "amd-smi-topology_access-weight-tables_8x-MI300X_rocm-blog_TRUNCATED.txt":
        (8, ["0000:05:00.0", "0000:26:00.0", "0000:46:00.0", "0000:65:00.0", "0000:85:00.0", "0000:a6:00.0",
             "0000:c6:00.0", "0000:e5:00.0"], None, OK8, [], 0),
    # GPU0 and GPU1 rows (the rest cut): one xGMI link each way
    "amd-smi-xgmi_link-metric-table_MI300X_rocm-blog_TRUNCATED.txt": (2, ["0000:05:00.0", "0000:26:00.0"], None, OK2, [], 2),
    "list_2gpu_uuid-redacted.txt": (2, ["0000:23:00.0", "0000:26:00.0"], None, OK2, [], 0),
    "metric-clock_mi300.txt": (1, None, None, OK1, [], 0),
    "metric-p_json_units.json": (1, None, None, OK1, [], 0),
    "metric-pcie_mi300_TRUNCATED.txt": (2, None, None, OK2, [], 0),
    "metric-power_2gpu_navi-mi1x.txt": (2, None, None, OK2, [], 0),
    "metric-throttle_mi300_TRUNCATED.txt": (2, None, None, OK2, [], 0),
    "process_mi300_name-na.txt": (1, None, None, OK1, [(1693982, int(10.1 * (1 << 30)))], 0),
    "static-limit_2gpu.txt": (2, None, None, OK2, [], 0),
    "static_4x-mi300a-apu_with-cpu_driver-6.9.0-rc5.txt": (
        4, ["0000:01:00.0", "0001:01:00.0", "0002:01:00.0", "0003:01:00.0"], [64289] * 4, ["ok"] * 4, [], 0),
    # PCIE between the two GPUs with link_accessibility DISABLED: not linked
    "topology_json_old-format_2gpu-pcie.json": (2, None, None, OK2, [], 0),
    # batch of 2026-12-06: GPU 0 of the partition output, named by its index only; health not shown
    "amd-smi-partition-g0_1x-MI325X-VF_SPX-NPS1_accelerator-profiles-and-resources.txt":
        (1, [None], None, ["unknown"], [], 0),
    "amd-smi-list-e_MI325X-VF_render-card-hsa-hip-ids_TRUNCATED.txt": (2, ["0000:83:00.0", "0000:8b:00.0"], None, OK2,
                                                                      [], 0),
    "amd-smi-static-g0_MI325X-VF_asic-bus-sections_TRUNCATED.txt": (1, ["0000:83:00.0"], None, OK1, [], 0),
}


def test_every_capture_is_listed():
    assert {p.name for p in shared_fixtures("amd-smi")} <= set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_capture_parses(name):
    snap = amd_smi.parse_any(shared_fixture("amd-smi", name).read_text(encoding="utf-8"))
    count, buses, totals, health, procs, links = EXPECTED[name]
    assert len(snap.devices) == count
    assert all(d.identity.vendor == "amd" for d in snap.devices)
    if buses is not None:
        assert [d.identity.pci_address for d in snap.devices] == buses
    if totals is not None:
        assert [d.readings[F.MEMORY_TOTAL].value / MIB for d in snap.devices] == pytest.approx(totals)
    else:
        assert all(F.MEMORY_TOTAL not in d.readings for d in snap.devices)
    assert [d.health.state for d in snap.devices] == health
    assert [(p.pid, p.memory_bytes) for d in snap.devices for p in d.processes] == procs
    assert sum(len(d.links) for d in snap.devices) == links
    json.loads(snapshot_to_json(snap))


def test_static_identity_uses_the_asic_serial_as_amdsmi_does():
    snap = amd_smi.parse_any(shared_fixture("amd-smi", "static_4x-mi300a-apu_with-cpu_driver-6.9.0-rc5.txt")
                             .read_text(encoding="utf-8"))
    d = snap.devices[0]
    assert d.identity.uuid == "7e8f7e20764e2714"  # ASIC_SERIAL 0x7E8F7E20764E2714
    assert d.identity.model == "MI300A" and d.identity.driver_version == "6.9.0-rc5+"
    assert d.identity.numa_node == 0
    assert d.readings[F.POWER_LIMIT].value == 550


def test_metric_values_in_base_units():
    pcie = amd_smi.parse_any(shared_fixture("amd-smi", "metric-pcie_mi300_TRUNCATED.txt").read_text())
    r = pcie.devices[1].readings
    assert r[amd_smi.PCIE_WIDTH].value == 16 and r[amd_smi.PCIE_SPEED].value == 32e9
    assert r[amd_smi.PCIE_BANDWIDTH].value == 18 * 125000
    clock = amd_smi.parse_any(shared_fixture("amd-smi", "metric-clock_mi300.txt").read_text())
    assert clock.devices[0].readings[F.CLOCK_COMPUTE].value == 113e6
    assert clock.devices[0].readings[F.CLOCK_MEMORY].value == 900e6
    power = amd_smi.parse_any(shared_fixture("amd-smi", "metric-p_json_units.json").read_text())
    assert power.devices[0].readings[F.POWER].value == 10


def test_process_name_na_is_absent_not_a_name():
    snap = amd_smi.parse_any(shared_fixture("amd-smi", "process_mi300_name-na.txt").read_text())
    assert snap.devices[0].processes[0].name is None


METRIC_TEXT = """GPU: 0
    USAGE:
        GFX_ACTIVITY: 45 %
        UMC_ACTIVITY: 10 %
        MM_ACTIVITY: N/A
    POWER:
        SOCKET_POWER: 139 W
    TEMPERATURE:
        EDGE: N/A
        HOTSPOT: 41 \u00b0C
        MEM: 34 \u00b0C
    MEM_USAGE:
        TOTAL_VRAM: 196592 MB
        USED_VRAM: 200000 MB
    ECC:
        TOTAL_CORRECTABLE_COUNT: 0
        TOTAL_UNCORRECTABLE_COUNT: 2
        TOTAL_DEFERRED_COUNT: 0
"""
MONITOR = """GPU  POWER  GPU_TEMP  MEM_TEMP  GFX_UTIL  GFX_CLOCK  MEM_UTIL  MEM_CLOCK  VRAM_USED  VRAM_TOTAL
  0  139 W     41 \u00b0C     34 \u00b0C       7 %    132 MHz       0 %    900 MHz     283 MB   196592 MB
  1    N/A     40 \u00b0C     33 \u00b0C       0 %    132 MHz       0 %    900 MHz     283 MB   196592 MB
"""
MONITOR_NEW = """GPU  XCP  POWER   GPU_T   MEM_T   GFX_CLK   GFX%   MEM%  ENC%  DEC%      VRAM_USAGE
  0    0  140 W   41 \u00b0C   34 \u00b0C   132 MHz    0 %    0 %   N/A   0 %    0.3/192.0 GB
"""


def test_metric_text_units_and_memory_above_total_is_an_error():
    d = amd_smi.parse_any(METRIC_TEXT).devices[0]
    assert d.readings[F.UTILIZATION].value == 0.45 and d.readings[F.TEMP_CORE].value == 41
    assert d.readings[amd_smi.TEMP_EDGE].quality.status == "unsupported"
    assert d.readings[F.MEMORY_TOTAL].value == 196592 * MIB
    assert d.readings[F.MEMORY_USED].quality.status == "error" and d.readings[F.MEMORY_USED].value is None
    assert d.health.state == "failed" and d.faults[0].code == "ecc-uncorrectable"


def test_monitor_tables_old_and_new():
    a, b = amd_smi.parse_any(MONITOR).devices
    assert a.readings[F.POWER].value == 139 and b.readings[F.POWER].quality.status == "unsupported"
    assert a.readings[F.MEMORY_USED].value == 283 * MIB and a.readings[F.UTILIZATION].value == 0.07
    (n,) = amd_smi.parse_any(MONITOR_NEW).devices
    assert n.readings[F.MEMORY_TOTAL].value == 192 * (1 << 30) and n.readings[F.CLOCK_COMPUTE].value == 132e6


def test_json_plain_numbers_and_wrapped_list():
    old = '[{"gpu": 0, "usage": {"gfx_activity": 12}, "mem_usage": {"total_vram": 65520, "used_vram": 10}}]'
    d = amd_smi.parse_any(old).devices[0]
    assert d.readings[F.UTILIZATION].value == 0.12 and d.readings[F.MEMORY_TOTAL].value == 65520 * MIB
    new = {"gpu_data": [{"gpu": 3, "asic": {"asic_serial": "0xABC"}, "bus": {"bdf": "0000:0C:00.0"}}]}
    d = amd_smi.parse_any(json.dumps(new)).devices[0]
    assert d.identity.index == 3 and d.identity.uuid == "0000000000000abc"
    assert d.identity.pci_address == "0000:0c:00.0"


def test_xgmi_links_from_topology_json():
    doc = [{"gpu": i, "link_type": {f"gpu_{j}": "SELF" if i == j else "XGMI" for j in range(2)}} for i in range(2)]
    a, b = amd_smi.parse_any(json.dumps(doc)).devices
    assert [(x.peer, x.type) for x in a.links] == [(b.identity.uuid, "xgmi")]
    pcie = amd_smi.parse_any(shared_fixture("amd-smi", "topology_json_old-format_2gpu-pcie.json").read_text())
    assert all(d.links == () for d in pcie.devices)


@pytest.mark.parametrize("text", ["", "hello world", "GPU: x\n", "    ASIC:\n", "[1, 2]", '{"gpu": "zero"}',
                                  "GPU: 0\n    %%%%\n", "[{\"gpu\": 0"])
def test_garbage_is_a_one_line_parse_error(text):
    with pytest.raises(ParseError) as e:
        amd_smi.parse_any(text)
    assert str(e.value).startswith("amd-smi") and "\n" not in str(e.value)
    assert not amd_smi.detect(text)


FUZZ = settings(max_examples=80, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
_SEEDS = [METRIC_TEXT, MONITOR, MONITOR_NEW] + [p.read_text(encoding="utf-8") for p in shared_fixtures("amd-smi")]


@FUZZ
@given(st.sampled_from(_SEEDS), st.integers(0, 20_000), st.integers(0, 300), st.text(max_size=40))
def test_mutated_captures_parse_or_raise_parse_error(seed, at, cut, junk):
    at = at % (len(seed) + 1)
    try:
        snap = amd_smi.parse_any(seed[:at] + junk + seed[at + cut:])
    except ParseError:
        return
    json.loads(snapshot_to_json(snap))


@FUZZ
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                    max_leaves=20))
def test_random_json_parses_or_raises_parse_error(doc):
    try:
        amd_smi.parse_any(json.dumps(doc))
    except ParseError:
        pass


# --------------------------------------------------------------------------- collector and fake
def _collector(tmp_path, scenario, settings=None):
    clock = ManualClock()
    opts = CollectorOptions(scenario=scenario, clock=clock, workdir=str(tmp_path), settings=settings or {})
    return amd_smi.create(opts), clock


def test_round_trip_fake_to_collector(tmp_path):
    scenario = load(str(ECC))
    col, clock = _collector(tmp_path, scenario)
    devices = col.collect()
    specs = scenario.devices_of("amd")
    assert [d.identity.pci_address for d in devices] == [s.pci_address for s in specs]
    for d, s in zip(devices, specs):
        assert d.readings[F.MEMORY_TOTAL].value == pytest.approx(s.memory_total_bytes, abs=MIB)
        assert d.readings[F.MEMORY_USED].value == pytest.approx(s.value(F.MEMORY_USED, 0), abs=MIB)
        assert d.readings[F.POWER].value == s.value(F.POWER, 0)
        assert d.readings[F.TEMP_CORE].value == s.value(F.TEMP_CORE, 0)
        assert d.identity.driver_version == s.driver_version and d.identity.model == "MI300X"
    assert col.calls == 2  # metric + static at first sight
    col.collect()
    assert col.calls == 3  # static only once


def test_fake_renders_every_command_the_parser_reads():
    scenario = load(str(ECC))
    for command in fake.RENDER:
        status, out, _ = fake.answer(scenario, 0.0, [command, "--json"])
        assert status == 0 and len(parse_output(out).gpus) == len(scenario.devices_of("amd"))
    procs = amd_smi.parse_any(fake.answer(scenario, 0.0, ["process", "--json"])[1])
    assert [[p.pid for p in d.processes] for d in procs.devices] == [[p.pid for p in s.processes] for s in scenario.devices_of("amd")]


def test_same_uuid_as_amdsmi_for_the_same_simulated_gpu(tmp_path):
    scenario = load(str(ECC))
    cli, _ = _collector(tmp_path, scenario)
    lib = amdsmi.create(CollectorOptions(scenario=scenario, clock=ManualClock()))
    ours = [d.identity.uuid for d in cli.collect()]
    theirs = [d.identity.uuid for d in lib.collect() if d.identity.parent is None]
    assert ours == theirs and len(set(ours)) == len(ours)


@pytest.mark.parametrize("mode", ["garbage", "exit", "truncated"])
def test_failure_modes_fail_the_cycle_not_the_process(tmp_path, mode):
    doc = yaml.safe_load(ECC.read_text())
    doc["settings"] = {"amd": {"mode": mode}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    col, _ = _collector(tmp_path, load(str(path)))
    with pytest.raises(Exception) as e:
        col.collect()
    assert not isinstance(e.value, (SystemExit, KeyboardInterrupt))


def _real_options(tmp_path, settings=None):
    """Options as on a real node (no scenario) with the fake amd-smi as ``settings.path``."""
    exe, _env = fake.install(load(str(ECC)), ManualClock(), str(tmp_path))
    return CollectorOptions(clock=ManualClock(), settings={"path": exe, **(settings or {})})


def test_amdsmi_falls_back_to_amd_smi_when_the_binding_import_fails(tmp_path, monkeypatch):
    def broken():
        raise Unavailable("amdsmi cannot be imported (KeyError: 'libamd_smi.so')")
    monkeypatch.setattr(amdsmi, "import_binding", broken)
    col = amdsmi.create(_real_options(tmp_path))
    assert isinstance(col, amd_smi.AmdSmiCliCollector) and col.name == "amd_smi"
    devices = col.collect()
    lib = amdsmi.create(CollectorOptions(scenario=load(str(ECC)), clock=ManualClock()))
    assert [d.identity.uuid for d in devices] == [d.identity.uuid for d in lib.collect() if d.identity.parent is None]
    assert devices[0].readings[F.POWER].quality.source.startswith("amd-smi metric: ")


def test_amdsmi_falls_back_when_the_library_does_not_match_the_host_rocm(tmp_path, monkeypatch):
    doc = yaml.safe_load(ECC.read_text())
    doc["settings"] = {"amd": {"init_error": "DRIVER_NOT_LOADED"}}
    from hetero_exporter.simulate.scenario import from_dict
    monkeypatch.setattr(amdsmi, "import_binding", lambda: FakeAmdSmi(from_dict(doc, "x"), ManualClock()))
    col = amdsmi.create(_real_options(tmp_path))
    assert isinstance(col, amd_smi.AmdSmiCliCollector)


def test_no_fallback_when_turned_off_or_amd_smi_missing(tmp_path, monkeypatch):
    def broken():
        raise Unavailable("amdsmi cannot be imported")
    monkeypatch.setattr(amdsmi, "import_binding", broken)
    with pytest.raises(Unavailable, match="cannot be imported$"):
        amdsmi.create(_real_options(tmp_path, {"fallback": False}))
    with pytest.raises(Unavailable, match="amd-smi fallback: .*not found"):
        amdsmi.create(CollectorOptions(settings={"path": str(tmp_path / "nowhere" / "amd-smi")}))


# --------------------------------------------------------------------------- issue 24 item 8 layouts
def _parse(name):
    return amd_smi.parse_any(shared_fixture("amd-smi", name).read_text(encoding="utf-8"))


def test_default_view_cells_by_header_name():
    a, b = _parse("amd-smi-default_2x-Radeon-AI-PRO-R9700_amd-smi-26.2.1_rocm-7.2.0_idle-100pct-gfx_8-process-rows.txt").devices
    assert a.readings[F.POWER].value == 103 and a.readings[F.POWER_LIMIT].value == 300
    assert a.readings[F.UTILIZATION].value == 1.0 and a.readings[F.MEMORY_UTILIZATION].value == 0.01
    assert a.readings[F.TEMP_CORE].value == 79 and a.readings[F.MEMORY_USED].value == 29777 * MIB
    assert a.identity.driver_version == "6.16.6" and a.identity.firmware_version == "00158742"
    assert a.identity.name == "Radeon AI PRO R9700" and a.identity.runtime_version is None
    assert [p.name for p in a.processes] == ["python3.12"] * 4 and a.processes_reported
    apu = _parse("amd-smi-default_1x-Radeon-8060S-Strix-Halo-APU_amd-smi-26.0.2_rocm-7.0.2_power-NA-0W.txt").devices[0]
    assert apu.readings[F.POWER].quality.status == "unsupported" and apu.readings[F.POWER_LIMIT].value == 0
    assert apu.readings[F.UTILIZATION].value is None and apu.processes == () and apu.processes_reported
    vf = _parse("amd-smi-default_1x-MI300X-VF_guest_amd-smi-26.0.0_rocm-7.0.0_no-vbios-line_no-processes.txt").devices[0]
    assert vf.identity.name == "AMD Instinct MI300X VF" and vf.identity.firmware_version is None
    assert vf.readings[F.ECC_UNCORRECTED].value == 0


def test_process_name_na_in_the_default_view_is_absent():
    d = _parse("amd-smi-default_2x-RX-9070-XT_amd-smi-26.2.0_rocm-7.1.1_process-name-NA.txt").devices[0]
    assert [(p.pid, p.name) for p in d.processes] == [(5300, None)]


def test_list_gives_bus_uuid_and_kfd_partition_ids():
    (d,) = _parse("amd-smi-list_1x-MI300X-VF_guest_amd-smi-26.0.0_kfd-node-partition-ids.txt").devices
    assert d.identity.pci_address == "0000:83:00.0" and d.identity.uuid == "amd-pci-0000:83:00.0"
    assert (d.readings[amd_smi.KFD_ID].value, d.readings[amd_smi.KFD_NODE_ID].value,
            d.readings[amd_smi.PARTITION_ID].value) == (21947, 1, 0)


def test_throttle_readings_in_base_units():
    from hetero_exporter.collectors.amd.fields import (throttle_active_field, throttle_count_field,
                                                       throttle_ratio_field)
    a, b = _parse("metric-throttle_mi300_TRUNCATED.txt").devices
    r = b.readings
    assert r[amd_smi.THROTTLE_ACCUMULATION].value == 3806335
    assert r[throttle_count_field("socket_thermal")].value == 18010 and r[throttle_count_field("ppt")].value == 586332
    assert r[throttle_active_field("ppt")].value == 0 and r[throttle_ratio_field("hbm_thermal")].value == 0
    assert r[throttle_ratio_field("ppt")].quality.method == "sampled"
    doc = {"gpu_data": [{"gpu": 0, "throttle": {"ppt_violation_status": "ACTIVE",
                                                "ppt_violation_activity": {"value": 37, "unit": "%"},
                                                "gfx_clk_below_host_limit_violation_status": "N/A"}}]}
    r = amd_smi.parse_any(json.dumps(doc)).devices[0].readings
    assert r[throttle_active_field("ppt")].value == 1 and r[throttle_ratio_field("ppt")].value == 0.37
    assert r[throttle_active_field("gfx_clk_below_host_limit")].quality.status == "unsupported"
    mon = _parse("amd-smi-monitor_1x-Radeon-PRO-V710-VF_azure-NVv5_rocm-6.1.4_throttle-column_header-trailing-space_blank-line.txt")
    assert mon.devices[0].readings[amd_smi.THROTTLE_ACTIVE].value == 0
    assert mon.devices[0].readings[F.CLOCK_COMPUTE].value == 1814e6


def test_wrapped_list_values_and_new_monitor_vram_usage():
    d = _parse("amd-smi-metric_1x-Radeon-RDNA3-dGPU_max-gfx-2482MHz_jpeg-activity-wrapped-list_TRUNCATED.txt").devices[0]
    assert d.readings[F.POWER].value == 20 and d.readings[F.CLOCK_COMPUTE].value == 14e6
    m = _parse("amd-smi-monitor_1x-RX-9070-XT_amd-smi-27.0.0_rocm-10.0_XCP-layout_vram-usage-column.txt").devices[0]
    assert m.readings[F.MEMORY_USED].value == pytest.approx(2.9 * (1 << 30))


TOPOLOGY_TEXT = """ACCESS TABLE:
             0000:05:00.0 0000:26:00.0 0000:46:00.0
0000:05:00.0 ENABLED      ENABLED      ENABLED
0000:26:00.0 ENABLED      ENABLED      ENABLED
0000:46:00.0 ENABLED      ENABLED      ENABLED

HOPS TABLE:
             0000:05:00.0 0000:26:00.0 0000:46:00.0
0000:05:00.0 0            1            2
0000:26:00.0 1            0            2
0000:46:00.0 2            2            0

LINK TYPE TABLE:
             0000:05:00.0 0000:26:00.0 0000:46:00.0
0000:05:00.0 SELF         XGMI         PCIE
0000:26:00.0 XGMI         SELF         PCIE
0000:46:00.0 PCIE         PCIE         SELF

NUMA BW TABLE:
             0000:05:00.0 0000:26:00.0 0000:46:00.0
0000:05:00.0 N/A          50000-100000 N/A
0000:26:00.0 50000-100000 N/A          N/A
0000:46:00.0 N/A          N/A          N/A
"""


def test_topology_text_tables_give_links():
    a, b, c = amd_smi.parse_any(TOPOLOGY_TEXT).devices
    assert [(x.peer, x.type, x.bandwidth_bytes_per_second) for x in a.links] == [
        (b.identity.uuid, "xgmi", 100000e6), (c.identity.uuid, "pcie-hostbridge", None)]
    assert [x.type for x in c.links] == ["pcie-hostbridge"] * 2 and b.identity.pci_address == "0000:26:00.0"


def test_topology_json_new_format_links():
    doc = [{"gpu": i, "bdf": f"0000:0{i}:00.0", "links": [
        {"gpu": j, "bdf": f"0000:0{j}:00.0", "weight": 0 if i == j else 15, "link_status": "ENABLED",
         "link_type": "SELF" if i == j else ("XGMI" if j < 2 and i < 2 else "PCIE"),
         "num_hops": 0 if i == j else 1, "bandwidth": "N/A" if i == j else "50000-100000"} for j in range(3)]}
        for i in range(3)]
    a, b, c = amd_smi.parse_any(json.dumps(doc)).devices
    assert [(x.peer, x.type) for x in a.links] == [(b.identity.uuid, "xgmi"), (c.identity.uuid, "pcie-hostbridge")]
    assert a.links[0].bandwidth_bytes_per_second == 100000e6


def test_xgmi_metric_table_links_with_the_link_bandwidth():
    a, b = _parse("amd-smi-xgmi_link-metric-table_MI300X_rocm-blog_TRUNCATED.txt").devices
    assert [(x.peer, x.type, x.bandwidth_bytes_per_second) for x in a.links] == [(b.identity.uuid, "xgmi", 64e9)]
    assert [x.peer for x in b.links] == [a.identity.uuid]


def test_old_topology_json_disabled_access_is_no_link_but_pcie_enabled_is():
    doc = json.loads(shared_fixture("amd-smi", "topology_json_old-format_2gpu-pcie.json").read_text())
    for d in doc:
        d["link_accessibility"] = {k: "ENABLED" for k in d["link_accessibility"]}
    a, b = amd_smi.parse_any(json.dumps(doc)).devices
    assert [(x.peer, x.type) for x in a.links] == [(b.identity.uuid, "pcie-hostbridge")]


# --------------------------------------------------------------------------- hostile process CSV (issue 35, item 11)
CSV_HEAD = "gpu,name,pid,gtt_mem,cpu_mem,vram_mem,mem_usage,gfx,enc\n"
DIGITS_5000 = "9" * 5000  # past int()'s 4,300-digit limit for a string
_cell = st.one_of(st.text(max_size=12), st.integers(0, 10**25).map(str),
                  st.integers(4200, 5200).map(lambda n: "1" * n),  # int() refuses past 4,300 digits
                  st.integers(131_000, 140_000).map(lambda n: '"' + "x" * n + '"'))  # csv's field limit: 131,072


@pytest.mark.parametrize("row", [
    f'0,"{"x" * 200_000}",12,0,0,0,0,0,0',  # csv.Error: field larger than field limit
    f"0,x,{DIGITS_5000},0,0,0,0,0,0",  # int(pid): Exceeds the limit (4300 digits)
    f"{DIGITS_5000},x,12,0,0,0,0,0,0",
    f"0,x,12,0,0,{DIGITS_5000},0,0,0",
    "0,x,123456789012345678901234,0,0,0,0,0,0",  # a pid of 24 digits: no pid
    "²,x,12,0,0,0,0,0,0",  # str.isdigit() says yes, int() says no
])
def test_a_hostile_process_csv_row_is_a_one_line_parse_error(row):
    with pytest.raises(ParseError) as e:
        amd_smi.parse_any(CSV_HEAD + row + "\n")
    assert str(e.value).startswith("amd-smi") and "\n" not in str(e.value)


def test_a_pid_past_int_limits_in_process_json_is_no_process():
    doc = [{"gpu": 0, "process_list": [{"process_info": {"pid": DIGITS_5000, "name": "x"}},
                                       {"process_info": {"pid": "42", "name": "ok"}}]}]
    snap = amd_smi.parse_any(json.dumps(doc))
    assert [p.pid for p in snap.devices[0].processes] == [42]
    with pytest.raises(ParseError):
        amd_smi.parse_any(json.dumps([{"gpu": "0" * 5000 + "1"}]))


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(st.lists(st.lists(_cell, min_size=9, max_size=9), min_size=1, max_size=3))
def test_fuzzed_process_csv_parses_or_raises_parse_error(rows):
    text = CSV_HEAD + "".join(",".join(r) + "\n" for r in rows)
    try:
        snap = amd_smi.parse_any(text)
    except ParseError as e:
        assert "\n" not in str(e)
        return
    json.loads(snapshot_to_json(snap))


def test_parse_amd_smi_on_a_hostile_csv_says_one_line(tmp_path):
    import subprocess
    import sys
    for n, row in enumerate((f'0,"{"x" * 200_000}",12,0,0,0,0,0,0', f"0,x,{DIGITS_5000},0,0,0,0,0,0")):
        path = tmp_path / f"process{n}.csv"
        path.write_text(CSV_HEAD + row + "\n")
        out = subprocess.run([sys.executable, "-m", "hetero_exporter", "parse", "amd-smi", str(path)],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert out.returncode == 1 and out.stdout == "", out.stderr[-2000:]
        assert out.stderr.count("\n") == 1 and out.stderr.startswith("hetero-exporter parse: "), out.stderr[-2000:]
