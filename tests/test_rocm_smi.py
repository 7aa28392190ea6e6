"""rocm-smi parsers on every real capture (JSON of ROCm 4.3-6.2, concise tables, keyed text),
fuzzing, render-then-parse round trips, and the CLI collector through the shared runner."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import shared_fixture, shared_fixtures
from hetero_exporter import cli
from hetero_exporter.model import fields as F
from hetero_exporter.sdk import runner as vendor_cli
from hetero_exporter.sdk.contract import CollectorOptions, ParseError
from hetero_exporter.collectors.amd.rocm_smi import collector as rocm_smi
from hetero_exporter.collectors.amd.rocm_smi.fake import FakeSmiCli
from hetero_exporter.collectors.amd.rocm_smi import fake as amd_fake
from hetero_exporter.collectors.hygon.hy_smi import fake as hy_fake
from hetero_exporter.model import snapshot_from_json
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate.scenario import from_dict

GIB = 1 << 30
CAPTURES = shared_fixtures("rocm-smi") + shared_fixtures("hy-smi")


def read(*parts: str) -> str:
    return shared_fixture(*parts).read_text(encoding="utf-8")


def devices(name: str, tool: str = "rocm-smi"):
    return rocm_smi.parse(read("rocm-smi", name), tool).devices


def values(devs, fld):
    return [d.value(fld) for d in devs]


def count_in_text(text: str) -> int:
    """Devices in a capture, counted from its text without the parser."""
    if any(line.lstrip().startswith("{") for line in text.splitlines()):
        return len([k for k in json.loads(text) if re.fullmatch(r"card\d+", k)])
    keyed = set(re.findall(r"^\s*(?:GPU|DCU|HCU)\[(\d+)\]", text, re.M))
    if keyed:
        return len(keyed)
    return len(re.findall(r"^\d+ {2,}", text, re.M))


# --------------------------------------------------------------------------- every capture
# capture -> (device count, bus ids or None, VRAM total bytes per device or None, health, processes
# (pid, bytes)), as each capture's text shows (the concise tables print no bus ids nor byte counts)
MI100_BUSES = ["0000:1e:00.0", "0000:22:00.0", "0000:3f:00.0", "0000:43:00.0", "0000:46:00.0", "0000:49:00.0"]
EXPECTED = {
    "concise_1x-mi300x.txt": (1, None, None, ["ok"], []),
    "concise_4x-mi300x_partitions_driver-6.7.0.txt": (4, None, None, ["ok"] * 4, []),
    # "PID104225": "mlir-cpu-runner, 0, 0, 0, 0": the process holds 0 GPUs
    "json_mi100_rocm-5.7.1.json": (6, MI100_BUSES, [34342961152] * 6, ["ok"] * 6, []),
    "json_rx6700xt_rocm-4.3.0.json": (1, ["0000:07:00.0"], [12868124672], ["ok"], []),
    "json_rx6700xt_rocm-5.7.1.json": (1, ["0000:07:00.0"], [12868124672], ["ok"], []),
    "json_rx6700xt_rocm-6.0.2.json": (1, ["0000:07:00.0"], [12868124672], ["ok"], []),
    "json_subset_radeon-rx7800xt-navi32_rocm-6.2.4.json": (1, None, [17163091968], ["ok"], []),
    "json_vega10-xt.json": (1, ["0000:04:00.0"], [17163091968], ["ok"], []),
    "rocm-smi-concise_8x-0x74a2-MI308X-class_partitions.txt": (8, None, None, ["ok"] * 8, []),
    "rocm-smi-u-showmeminfo-vram_8x-0x74a2-MI308X-class.txt": (8, None, [206141652992] * 8, ["ok"] * 8, []),
}


def test_every_rocm_smi_capture_is_listed():
    assert {p.name for p in shared_fixtures("rocm-smi")} <= set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_rocm_smi_capture_parses_to_its_text(name):
    snap = rocm_smi.parse(read("rocm-smi", name), "rocm-smi")
    count, buses, totals, health, procs = EXPECTED[name]
    assert len(snap.devices) == count
    assert [d.identity.pci_address for d in snap.devices] == (buses or [None] * count)
    assert [d.value(F.MEMORY_TOTAL) for d in snap.devices] == (totals or [None] * count)
    assert [d.health.state for d in snap.devices] == health
    assert [(p.pid, p.memory_bytes) for d in snap.devices for p in d.processes] == procs




@pytest.mark.skipif(not CAPTURES, reason="../shared/fixtures absent")
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("tool", ["rocm-smi", "hy-smi"])
def test_every_capture_parses_with_both_tools(path, tool):
    text = path.read_text(encoding="utf-8")
    snap = rocm_smi.parse(text, tool)
    assert len(snap.devices) == count_in_text(text) > 0
    assert len({d.identity.uuid for d in snap.devices}) == len(snap.devices)
    for d in snap.devices:
        t = d.value(F.TEMP_CORE)
        assert t is None or 0 < t < 120
        for r in d.readings.values():
            assert (r.value is None) == (r.quality.status != "ok") and r.quality.source.startswith(tool)
    # the JSON encoding of DESIGN.md round-trips
    from hetero_exporter.model import snapshot_to_json
    assert snapshot_from_json(snapshot_to_json(snap)).devices == snap.devices


@pytest.mark.skipif(not CAPTURES, reason="../shared/fixtures absent")
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_parse_command_works_on_every_capture(path, capsys):
    for tool in ("rocm-smi", "hy-smi"):
        assert cli.main(["parse", tool, str(path), "--json"]) == 0
        snap = snapshot_from_json(capsys.readouterr().out)
        assert len(snap.devices) == count_in_text(path.read_text(encoding="utf-8"))
    assert cli.main(["parse", "rocm-smi", str(path)]) == 0
    assert "VENDOR" in capsys.readouterr().out


def test_mi100_rocm_5_7_json():
    devs = devices("json_mi100_rocm-5.7.1.json")
    assert [d.identity.pci_address for d in devs] == [
        "0000:1e:00.0", "0000:22:00.0", "0000:3f:00.0", "0000:43:00.0", "0000:46:00.0", "0000:49:00.0"]
    assert values(devs, F.MEMORY_TOTAL) == [34342961152.0] * 6
    assert values(devs, F.MEMORY_USED) == [6782976.0] * 6
    assert values(devs, F.TEMP_CORE) == [34, 33, 34, 35, 34, 35]  # junction
    assert values(devs, rocm_smi.TEMP_EDGE) == [31, 30, 31, 33, 32, 33]
    assert values(devs, F.TEMP_MEMORY)[:2] == [30, 38]
    assert values(devs, F.POWER) == [39, 37, 35, 39, 39, 40] and values(devs, F.POWER_LIMIT) == [290] * 6
    assert values(devs, F.CLOCK_COMPUTE) == [300e6] * 6 and values(devs, F.CLOCK_MEMORY) == [1200e6] * 6
    d = devs[0]
    assert (d.identity.model, d.identity.driver_version, d.identity.firmware_version) == ("MI100", "6.2.4", "113-D3430400-037")
    assert d.identity.serial is None  # "Serial Number": "0"
    assert all(dev.processes == () and dev.links == () for dev in devs)  # PID on 0 GPUs; PCIE topology
    assert d.readings[F.TEMP_CORE].quality.source == "rocm-smi 'Temperature (Sensor junction) (C)'"


def test_rx6700xt_across_rocm_4_3_5_7_6_0():
    old = devices("json_rx6700xt_rocm-4.3.0.json")[0]
    mid = devices("json_rx6700xt_rocm-5.7.1.json")[0]
    new = devices("json_rx6700xt_rocm-6.0.2.json")[0]
    for d, used in ((old, 1622728704), (mid, 1564491776), (new, 1572757504)):
        assert d.identity.pci_address == "0000:07:00.0" and d.value(F.MEMORY_TOTAL) == 12868124672
        assert d.value(F.MEMORY_USED) == used and d.value(F.TEMP_CORE) == 47 and d.value(F.TEMP_MEMORY) == 46
        assert d.value(F.CLOCK_COMPUTE) == 500e6 and d.value(F.CLOCK_MEMORY) == 96e6
    assert old.identity.name == "0x73df"  # "Card series": "0x1002" is not a name
    assert mid.identity.name == "Navi 22 [Radeon RX 6700/6700 XT / 6800M]"
    assert old.value(F.POWER) == 6.0
    r = new.readings[F.POWER]  # "N/A (Secondary die)"
    assert r.value is None and r.quality.status == "unsupported"


def test_navi32_rocm_6_2_subset_and_vega10():
    navi = devices("json_subset_radeon-rx7800xt-navi32_rocm-6.2.4.json")[0]
    assert navi.identity.uuid == "5c88007d760374f3" and navi.identity.pci_address is None
    assert navi.value(F.MEMORY_TOTAL) == 17163091968 and navi.value(F.MEMORY_USED) == 11615076352
    assert navi.value(F.UTILIZATION) == 1.0 and navi.value(F.TEMP_CORE) == 51 and navi.value(F.TEMP_MEMORY) == 54
    vega = devices("json_vega10-xt.json")[0]
    assert vega.identity.uuid == "02150e7d042a1124" and vega.identity.pci_address == "0000:04:00.0"
    assert vega.value(F.TEMP_MEMORY) == 92 and vega.value(F.CLOCK_COMPUTE) == 1269e6
    assert vega.value(F.MEMORY_TOTAL) == 17163091968


def test_concise_mi300x_tables():
    one = devices("concise_1x-mi300x.txt")
    assert len(one) == 1 and one[0].identity.model == "MI300X" and one[0].identity.name == "AMD Instinct MI300X"
    assert one[0].value(F.TEMP_CORE) == 41 and one[0].readings[F.TEMP_CORE].quality.source == "rocm-smi concise 'Temp (Junction)'"
    four = devices("concise_4x-mi300x_partitions_driver-6.7.0.txt")
    assert values(four, F.TEMP_CORE) == [35, 37, 34, 38]
    assert values(four, F.POWER) == [133, 131, 131, 137] and values(four, F.POWER_LIMIT) == [750] * 4
    assert four[0].readings[F.POWER].quality.method == "measured"  # "Power (Socket)": instantaneous
    assert values(four, F.CLOCK_COMPUTE) == [131e6, 132e6, 132e6, 131e6] and values(four, F.CLOCK_MEMORY) == [900e6] * 4
    assert values(four, F.UTILIZATION) == [0.0] * 4 and values(four, rocm_smi.MEMORY_USED_RATIO) == [0.0] * 4
    assert F.MEMORY_TOTAL not in four[0].readings  # the table prints no byte counts: absent, not 0


def test_concise_mi308x_with_node_and_ids_columns():
    devs = devices("rocm-smi-concise_8x-0x74a2-MI308X-class_partitions.txt")
    assert len(devs) == 8
    assert values(devs, F.TEMP_CORE) == [43, 41, 45, 41, 44, 42, 45, 43]
    assert values(devs, F.POWER) == [155, 155, 159, 155, 160, 157, 160, 158] and values(devs, F.POWER_LIMIT) == [650] * 8
    assert values(devs, F.CLOCK_COMPUTE)[-1] == 107e6
    assert devs[0].identity.uuid == "amd-guid-1017" and devs[1].identity.uuid == "amd-guid-47713"
    assert devs[0].identity.name == "0x74a2" and devs[0].identity.model == "MI300X"  # profiles alias by device id


def test_keyed_text_of_use_and_vram():
    devs = devices("rocm-smi-u-showmeminfo-vram_8x-0x74a2-MI308X-class.txt")
    assert len(devs) == 8 and values(devs, F.MEMORY_TOTAL) == [206141652992] * 8
    assert values(devs, F.MEMORY_USED) == [297611264] + [297623552] * 7
    assert values(devs, F.UTILIZATION) == [0.0] * 8


# --------------------------------------------------------------------------- fuzzing


def _mutations():
    texts = [p.read_text(encoding="utf-8") for p in CAPTURES] or ['{"card0": {"GPU use (%)": "5"}}']
    base = st.sampled_from(texts)

    def cut(t, a, b):
        return t[: min(a, b)] + t[max(a, b):]

    def flip(t, i, ch):
        return t[:i] + ch + t[i + 1:] if t else ch

    return st.one_of(
        st.text(max_size=400),
        st.builds(cut, base, st.integers(0, 3000), st.integers(0, 3000)),
        st.builds(flip, base, st.integers(0, 3000), st.sampled_from(list("{}[]:,\"0x% \n=N/A"))),
        st.builds(lambda t, n: "\n".join(t.splitlines()[:n]), base, st.integers(0, 40)),
        st.builds(lambda t, n: "\n".join(line[:n] for line in t.splitlines()), base, st.integers(0, 60)),
    )


_json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
                            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=12), c, max_size=4),
                            max_leaves=12)
_card_keys = st.sampled_from(["Device ID", "Card Series", "Unique ID", "PCI Bus", "VRAM Total Memory (B)",
                              "vram Total Used Memory (MiB)", "Temperature (Sensor junction) (C)",
                              "Average Graphics Package Power (W)", "GPU use (%)", "sclk clock speed:",
                              "(Topology) Numa Node", "Serial Number"])


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutations(), st.sampled_from(["rocm-smi", "hy-smi"]))
def test_fuzzed_text_gives_a_snapshot_or_a_parse_error(text, tool):
    try:
        snap = rocm_smi.parse(text, tool)
    except ParseError as e:
        assert str(e).startswith(tool)
        return
    from hetero_exporter.model import snapshot_to_json
    snapshot_to_json(snap)  # finite numbers only


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["card0", "card1", "card7", "system", "x"]),
                       st.one_of(_json_values, st.dictionaries(_card_keys, _json_values, max_size=6)), max_size=4))
def test_fuzzed_json_documents(doc):
    text = json.dumps(doc)
    try:
        snap = rocm_smi.parse(text, "rocm-smi")
    except ParseError:
        return
    assert len(snap.devices) == len([k for k in doc if k.startswith("card")])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet="GPUDC[]0123456789: ()%.abcNA/", max_size=60), max_size=12))
def test_fuzzed_keyed_and_table_lines(lines):
    text = "\n".join(lines)
    try:
        rocm_smi.parse(text, "hy-smi")
    except ParseError:
        pass


# --------------------------------------------------------------------------- render -> parse

ROUND = """
name: rt
devices:
  - vendor: {vendor}
    count: 3
    product: "{product}"
    memory_total: {total}
    driver_version: "6.3.6"
    firmware_version: "113-D3430400-037"
    pci_address: "0000:1e:00.0"
    numa_nodes: [0, 1, 1]
    values:
      utilization_ratio: {util}
      memory_used_bytes: {used}
      temperature_core_celsius: {temp}
      temperature_memory_celsius: {mtemp}
      power_watts: {power}
      power_limit_watts: 750
      clock_compute_hertz: {sclk}
      clock_memory_hertz: 1300e6
    processes:
      - {{pid: 4000, name: python3, memory: 1GiB}}
    extra: {{xgmi: true}}
"""


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([("amd", "AMD Instinct MI300X", 206141652992), ("hygon", "Z100L", 34343469056)]),
       st.integers(0, 100), st.floats(0, 1), st.integers(20, 105), st.integers(20, 105),
       st.integers(1, 749), st.integers(100, 2500))
def test_rendered_json_parses_back_to_the_scenario(kind, util, used_frac, temp, mtemp, power, sclk_mhz):
    vendor, product, total = kind
    doc = yaml.safe_load(ROUND.format(vendor=vendor, product=product, total=total, util=util / 100,
                                      used=int(total * used_frac), temp=temp, mtemp=mtemp, power=power,
                                      sclk=sclk_mhz * 1e6))
    specs = from_dict(doc, "rt").devices
    tool = "rocm-smi" if vendor == "amd" else "hy-smi"
    report = rocm_smi.parse_json({"amd": amd_fake, "hygon": hy_fake}[vendor].render_json(list(specs), 0.0), tool)
    devs = rocm_smi.build_devices(report, 0.0, {p.pid: (i,) for i, s in enumerate(specs) for p in s.processes})
    assert [d.identity.pci_address for d in devs] == [s.pci_address for s in specs]
    assert [d.identity.vendor for d in devs] == [vendor] * 3
    for d, s in zip(devs, specs):
        assert d.identity.model == ("MI300X" if vendor == "amd" else "Z100L")
        assert d.value(F.UTILIZATION) == pytest.approx(util / 100, abs=0.006)
        assert d.value(F.TEMP_CORE) == temp and d.value(F.TEMP_MEMORY) == mtemp and d.value(F.POWER) == power
        assert d.value(F.CLOCK_COMPUTE) == sclk_mhz * 1e6 and d.value(F.POWER_LIMIT) == 750
        unit = (1 << 20) if vendor == "hygon" else 1  # hy-smi prints MiB
        assert d.value(F.MEMORY_TOTAL) == pytest.approx(total, abs=unit)
        assert d.value(F.MEMORY_USED) == pytest.approx(min(total, int(total * used_frac)), abs=unit)
        assert [p.pid for p in d.processes] == [p.pid for p in s.processes]
        assert sorted(link.peer for link in d.links) == sorted(o.identity.uuid for o in devs if o is not d)


# --------------------------------------------------------------------------- the CLI collector

CLI_SCENARIO = ROUND.format(vendor="amd", product="AMD Instinct MI300X", total=206141652992, util=0.5,
                            used=80 * GIB, temp=55, mtemp=60, power=400, sclk=2100e6)


def cli_collector(tmp_path, mode="ok", doc=CLI_SCENARIO, **settings_):
    d = yaml.safe_load(doc)
    d["settings"] = {"amd": {"cli_mode": mode}}
    clock = ManualClock()
    opts = CollectorOptions(scenario=from_dict(d, "cli"), clock=clock, workdir=str(tmp_path),
                            timeout_seconds=2.0, settings=settings_)
    return rocm_smi.create(opts), clock


def test_cli_collector_runs_the_tool_and_places_processes(tmp_path):
    c, _ = cli_collector(tmp_path)
    before = vendor_cli.invocations().get("rocm-smi", 0)
    devs = c.collect()
    assert c.name == "rocm_smi" and c.vendor == "amd"
    assert len(devs) == 3 and [len(d.processes) for d in devs] == [1, 1, 1]  # via --showpidgpus
    assert vendor_cli.invocations()["rocm-smi"] - before == 2
    assert devs[1].processes[0].pid == 4100 and devs[1].processes[0].memory_bytes == GIB
    assert devs[0].value(F.MEMORY_USED) == 80 * GIB and devs[0].identity.driver_version == "6.3.6"
    assert all(len(d.links) == 2 for d in devs)


def test_cli_hang_is_killed_at_the_deadline(tmp_path):
    c, _ = cli_collector(tmp_path, "hang", cli_timeout=0.5)
    with pytest.raises(vendor_cli.CliTimeout):
        c.collect()


def test_cli_garbage_is_a_parse_error(tmp_path):
    c, _ = cli_collector(tmp_path, "garbage")
    with pytest.raises(ParseError, match="rocm-smi"):
        c.collect()


def test_cli_crash_is_an_error_with_stderr(tmp_path):
    c, _ = cli_collector(tmp_path, "crash")
    with pytest.raises(vendor_cli.CliError, match="Driver not initialized"):
        c.collect()


def test_old_tool_rejecting_an_option_falls_back_to_the_minimal_set(tmp_path):
    c, _ = cli_collector(tmp_path, "legacy")
    devs = c.collect()
    assert len(devs) == 3 and devs[0].value(F.TEMP_CORE) == 55
    assert c._args == rocm_smi.MINIMAL_ARGS
    assert c.collect()[0].value(F.POWER) == 400  # stays on the minimal set


def test_pcie_replay_increase_is_a_fault(tmp_path):
    doc = yaml.safe_load(CLI_SCENARIO)
    doc["devices"][0]["values"]["pcie_replay_total"] = {"steps": [[0, 3], [30, 10]]}
    c, clock = cli_collector(tmp_path, doc=yaml.safe_dump(doc))
    first = c.collect()[0]
    assert first.faults == () and first.value(rocm_smi.PCIE_REPLAY) == 3  # baseline
    clock.set_t(40)
    d = c.collect()[0]
    assert d.faults[0].code == "pcie-replay" and d.faults[0].count == 7 and d.faults[0].action == "none"
    assert d.health.state == "ok"


def test_missing_tool_is_unavailable(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    import dataclasses
    monkeypatch.setattr(rocm_smi.RocmSmiCollector, "member",
                        dataclasses.replace(rocm_smi.ROCM_SMI, search_dirs=("/nonexistent",)))
    from hetero_exporter.sdk.contract import Unavailable
    with pytest.raises(Unavailable, match="rocm-smi not found"):
        rocm_smi.create(CollectorOptions())


def test_fake_rejects_unknown_modes(tmp_path):
    d = from_dict(yaml.safe_load(CLI_SCENARIO), "cli")
    fake = FakeSmiCli(d, ManualClock(), str(tmp_path), "rocm-smi")
    with pytest.raises(ValueError):
        fake.set_mode("sideways")


@pytest.mark.skipif(not CAPTURES, reason="../shared/fixtures absent")
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_warnings_before_the_output_and_crlf_line_ends_change_nothing(path):
    text = path.read_text(encoding="utf-8")
    noisy = "WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status\r\n\r\n"
    noisy += text.replace("\n", "\r\n")
    assert rocm_smi.parse(noisy, "rocm-smi").devices == rocm_smi.parse(text, "rocm-smi").devices
