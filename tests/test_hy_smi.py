"""Hygon DCUs: hy-smi / Hygon rocm-smi captures, the hy_smi collector over the default scenario,
and the agent serving AMD and Hygon devices while a hung hy-smi is killed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from agent_proc import Agent
from conftest import shared_fixture, shared_fixtures
from hetero_exporter.model import fields as F
from hetero_exporter.sdk.contract import CollectorOptions
from hetero_exporter.collectors.amd.rocm_smi import collector as rocm_smi
from hetero_exporter.collectors.hygon.hy_smi import collector as hy_smi
from hetero_exporter.model import snapshot_from_json
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate.scenario import load

MIB = 1 << 20
ROOT = Path(__file__).resolve().parent.parent


def parse(name: str, tool: str = "hy-smi"):
    text = shared_fixture("hy-smi", name).read_text(encoding="utf-8")
    return (hy_smi.parse_hy_smi(text) if tool == "hy-smi" else rocm_smi.parse(text, tool)).devices


def test_z100l_json_of_dtk():
    (d,) = parse("rocm-smi-json_hygon-z100l_dtk-pre2504.json", "rocm-smi")  # vendor from "Card Vendor"
    i = d.identity
    assert (i.vendor, i.kind, i.model, i.uuid, i.serial) == ("hygon", "dcu", "Z100L", "a000000000000000", "TRCW200000000000")
    assert d.value(F.MEMORY_TOTAL) == 32752 * MIB and d.value(F.MEMORY_USED) == 2 * MIB
    assert d.readings[F.MEMORY_TOTAL].quality.resolution == MIB
    assert d.value(F.TEMP_CORE) == 41 and d.value(rocm_smi.TEMP_EDGE) == 38 and d.value(F.TEMP_MEMORY) == 39
    assert d.value(F.POWER) == 38 and d.value(F.UTILIZATION) == 0.0
    assert d.readings[F.TEMP_MEMORY].quality.source == "rocm-smi 'Temperature (Sensor mem) (C)'"


def test_dtk_24_04_json_with_an_empty_key():
    (d,) = parse("rocm-smi-json_hygon-dcu_dtk-24.04.3.json")
    assert d.identity.vendor == "hygon" and d.identity.uuid == "7100fa8866904061" and d.identity.name == "DCU xxxx"
    assert d.value(F.MEMORY_TOTAL) == 65520 * MIB and d.value(F.MEMORY_USED) == 2 * MIB
    assert (d.value(F.TEMP_CORE), d.value(rocm_smi.TEMP_EDGE), d.value(F.TEMP_MEMORY)) == (39, 41, 44)
    assert d.value(F.POWER) == 80


def test_dtk_23_10_dcu_table():
    devs = parse("rocm-smi_4x-hygon-z100_dtk-23.10.1.txt", "rocm-smi")  # "DCU" header -> hygon
    assert [d.identity.vendor for d in devs] == ["hygon"] * 4 and [d.identity.kind for d in devs] == ["dcu"] * 4
    assert [d.value(F.TEMP_CORE) for d in devs] == [30, 30, 29, 29]
    assert devs[0].readings[F.TEMP_CORE].quality.source == "rocm-smi concise 'Temp'"  # the edge sensor
    assert [d.value(F.POWER) for d in devs] == [38, 41, 38, 39] and [d.value(F.POWER_LIMIT) for d in devs] == [280] * 4
    assert [d.value(F.UTILIZATION) for d in devs] == [0.0] * 4
    assert F.CLOCK_COMPUTE not in devs[0].readings  # this table has no SCLK column


def test_rocm_4_classic_table_on_hygon():
    devs = parse("rocm-smi-concise_4x-hygon-dcu_rocm-4.0.1.txt")
    assert [d.identity.vendor for d in devs] == ["hygon"] * 4
    assert [d.value(F.TEMP_CORE) for d in devs] == [50, 48, 48, 49]
    assert [d.value(F.POWER) for d in devs] == [23, 25, 24, 27] and devs[0].value(F.POWER_LIMIT) == 300
    assert devs[0].value(F.CLOCK_COMPUTE) == 1319e6 and devs[0].value(F.CLOCK_MEMORY) == 800e6


def test_hy_smi_collector_over_the_default_scenario(tmp_path):
    clock = ManualClock()
    c = hy_smi.create(CollectorOptions(scenario=load("default"), clock=clock, workdir=str(tmp_path)))
    assert (c.name, c.vendor) == ("hy_smi", "hygon")
    devs = c.collect()
    assert [(d.identity.kind, d.identity.model) for d in devs] == [("dcu", "Z100L")] * 2
    assert [d.identity.pci_address for d in devs] == ["0000:4d:00.0", "0000:6d:00.0"]
    assert [[p.pid for p in d.processes] for d in devs] == [[8100], [8200]]
    assert devs[0].value(F.MEMORY_TOTAL) == 32752 * MIB and devs[0].value(F.TEMP_MEMORY) is not None
    assert devs[0].readings[F.UTILIZATION].quality.source == "hy-smi 'DCU use (%)'"


def _config(tmp_path: Path, doc: dict) -> str:
    p = tmp_path / "config.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


def test_agent_serves_amd_and_hygon_devices_from_the_default_scenario():
    with Agent(["--simulate", "--interval", "1"]) as agent:
        text = agent.wait_metrics(lambda t: 'accelerator_collector_success{collector="hy_smi"} 1.0' in t
                                  and 'accelerator_collector_success{collector="amdsmi"} 1.0' in t)
        info = [l for l in text.splitlines() if l.startswith("accelerator_device_info{")]
        assert len([l for l in info if 'vendor="amd"' in l and 'model="MI300X"' in l]) == 2
        assert len([l for l in info if 'vendor="hygon"' in l and 'kind="dcu"' in l]) == 2
        assert 'accelerator_interconnect_bytes_total{' in text and 'link_type="xgmi"' in text
        snap = snapshot_from_json(agent.get("/snapshot")[1])
        amd = [d for d in snap.devices if d.identity.vendor == "amd"]
        assert all(len(d.links) == 1 and d.links[0].type == "xgmi" for d in amd)
        assert [len(d.processes) for d in amd] == [1, 1]
        assert agent.stop() == 0


def test_a_hung_hy_smi_is_killed_and_the_rest_is_served(tmp_path):
    scenario = str(ROOT / "fixtures" / "scenarios" / "hygon-hung-cli.yaml")
    config = _config(tmp_path, {"collectors": {"hy_smi": {"timeout": 1.0}}})
    with Agent(["--simulate", scenario, "--interval", "1", "--config", config]) as agent:
        # the counter is exported at 0 from the start: wait for it to count
        text = agent.wait_metrics(lambda t: re.search(r'accelerator_collector_errors_total\{collector="hy_smi",kind="timeout"\} [1-9]', t)
                                  and 'accelerator_collector_success{collector="amdsmi"} 1.0' in t)
        assert 'accelerator_collector_success{collector="hy_smi"} 0.0' in text
        assert 'vendor="amd"' in text and agent.get("/healthz")[0] == 200
        assert agent.stop() == 0


def test_garbage_printing_hy_smi_is_a_parse_error_of_its_collector_only(tmp_path):
    from hetero_exporter.sdk.contract import ParseError
    from hetero_exporter.collectors.amd.amdsmi import collector as amdsmi
    scenario = load(str(ROOT / "fixtures" / "scenarios" / "hygon-garbage-cli.yaml"))
    c = hy_smi.create(CollectorOptions(scenario=scenario, clock=ManualClock(), workdir=str(tmp_path)))
    with pytest.raises(ParseError, match="^hy-smi: "):
        c.collect()
    with pytest.raises(ParseError):  # every cycle, not once
        c.collect()
    assert amdsmi.create(CollectorOptions(scenario=scenario, clock=ManualClock())).collect() == []


# --------------------------------------------------------------------------- every capture
# capture -> (device count, bus ids or None, VRAM total bytes per device or None, health, processes),
# as each capture's text shows (tables print VRAM% only; --showmemavailable the free MiB, not the total)
MIB = 1 << 20
SHOWBUS = ["0000:05:00.0", "0000:2b:00.0", "0000:14:00.0", "0000:1a:00.0",
           "0000:86:00.0", "0000:b8:00.0", "0000:c0:00.0", "0000:9e:00.0"]
EXPECTED = {
    "hy-smi-default_1x-hygon-dcu_400W_dec-enc-columns_trailing-spaces.txt": (1, None, None, ["ok"], []),
    "hy-smi-default_2x-BW1000_1000W_dtk-26.04_no-trailing-spaces.txt": (2, None, None, ["ok"] * 2, []),
    "hy-smi-default_8x-K100_AI_400W_idle_mode-column_trailing-spaces.txt": (8, None, None, ["ok"] * 8, []),
    "hy-smi-showbus_8x-hygon-dcu-6430_sn-NA-on-some.txt": (8, SHOWBUS, None, ["ok"] * 8, []),
    "hy-smi-showmemavailable_8x-K100_AI_65438MiB.txt": (8, None, None, ["ok"] * 8, []),
    "rocm-smi-concise_1x-hygon-dcu_rocm-4.0.1_paddle-inference.txt": (1, None, None, ["ok"], []),
    "rocm-smi-concise_4x-hygon-dcu_rocm-4.0.1.txt": (4, None, None, ["ok"] * 4, []),
    "rocm-smi-json_hygon-dcu_dtk-24.04.3.json": (1, None, [65520 * MIB], ["ok"], []),
    "rocm-smi-json_hygon-z100l_dtk-pre2504.json": (1, None, [32752 * MIB], ["ok"], []),
    "rocm-smi_4x-hygon-z100_dtk-23.10.1.txt": (4, None, None, ["ok"] * 4, []),
}


def test_every_hy_smi_capture_is_listed():
    assert {p.name for p in shared_fixtures("hy-smi")} <= set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_hy_smi_capture_parses_to_its_text(name):
    snap = hy_smi.parse_hy_smi(shared_fixture("hy-smi", name).read_text(encoding="utf-8"))
    count, buses, totals, health, procs = EXPECTED[name]
    assert len(snap.devices) == count and all(d.identity.vendor == "hygon" for d in snap.devices)
    assert [d.identity.pci_address for d in snap.devices] == (buses or [None] * count)
    assert [d.value(F.MEMORY_TOTAL) for d in snap.devices] == (totals or [None] * count)
    assert [d.health.state for d in snap.devices] == health
    assert [(p.pid, p.memory_bytes) for d in snap.devices for p in d.processes] == procs


def test_showbus_serial_na_falls_back_to_the_bus_id():
    devs = hy_smi.parse_hy_smi(shared_fixture("hy-smi", "hy-smi-showbus_8x-hygon-dcu-6430_sn-NA-on-some.txt")
                               .read_text(encoding="utf-8")).devices
    assert [d.identity.serial for d in devs[:3]] == ["2500238601000586", "2500238601000600", None]
    assert devs[2].identity.uuid == "hygon-pci-0000:14:00.0" and devs[0].identity.uuid == "hygon-2500238601000586"
