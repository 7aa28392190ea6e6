"""Enflame GCUs through ``efsmi``: the real capture parsed to what its text says, other
layouts of the table (1.6 / 1.7), ``efsmi -q``, faults, the collector over its fake, the fake's
round trip and the vendor contract (the spec registered for each test until the lead adds
``enflame`` to collectors.BUILTIN)."""

from __future__ import annotations

import pytest

import test_vendor_contract as contract
from conftest import ROOT, shared_fixture, shared_fixtures
from hetero_exporter import cli, registry, vendors
from hetero_exporter.model import snapshot_from_json
from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.simulate import ManualClock

CAPTURE = "default_2x-enflame-s60_efsmi-1.2.0.301.txt"
MIB = 1 << 20

# efsmi 1.6.3.12 and 1.7.2.14 as printed in FlagTree's Enflame README (another card and
# version than the capture: +---+ borders, a |===| rule, Lpm, "34℃", "68W / 300W", "N/A")
NEWER = """\
-------------------------------------------------------------------------------
--------------------- Enflame System Management Interface ---------------------
--------- Enflame Tech, All Rights Reserved. 2024-2026 Copyright (C) ----------
-------------------------------------------------------------------------------

+2026-03-06, 10:12:03 CST-----------------------------------------------------+
| EFSMI: 1.7.2.14          Driver Ver: 1.7.2.14                               |
+-----------------------------+-------------------+---------------------------+
| DEV    NAME                 | Boot FW VER       | BUS-ID      ECC           |
| TEMP   Lpm   Pwr(Usage/Cap) | Mem      GCU Virt | DUsed       SN            |
|=============================================================================|
| 0      Enflame L300         | 40.2.8.3          | 00:2d:00.0  Enable        |
| 35℃    LP1      68W / 300W  | 147456MiB Disable | 0%          A098Q50610048 |
+-----------------------------+-------------------+---------------------------+
| 1      Enflame S60G         | 31.5.3            | 00:2e:00.0  Disable       |
| 34℃    N/A      N/A         | 23552MiB  SRIOV   | 0%          A018K30520031 |
+-----------------------------+-------------------+---------------------------+
| 2      Enflame S60G         | 31.5.3            | 00:2f:00.0  Disable       |
| 34℃    LP0      N/A         | 23552MiB  SRIOV   | 0%          A018K30520032 |
+-----------------------------+-------------------+---------------------------+
"""

QUERY = """\
-------------------------------------------------------------------------------
---------------------- Enflame System Management Interface ----------------------
-------------------------------------------------------------------------------
DEV ID 0
    Driver Info
        Ver                     : 1.4.3.4
    Device Info
        Dev Name                : S60
        Dev UUID                : TR6Y46010302
        Dev SN                  : A0A1650510676
        Health                  : False
    PCIe Info
        Vendor ID               : 1e36
        Domain                  : 0000
        Bus                     : 17
        Dev                     : 00
        Func                    : 0
        Link Info
        Max Link Speed          : Gen5
    Device Mem Info
        Total Size              : 42976 MiB
        Reserved Size           : 1129 MiB
        Used Size               : 50000 MiB
    Temperature Info
        GCU Temp                : 35 ℃
    RMA Info
        Flags                   : False
        Total DBE               : 0
"""


@pytest.fixture
def enflame():
    """The enflame spec, registered for one test (BUILTIN may already hold it)."""
    from hetero_exporter.collectors.enflame import SPEC
    known = vendors.spec("enflame") is not None
    if not known:
        vendors.register(SPEC)
    try:
        yield SPEC
    finally:
        if not known:
            vendors.unregister("enflame")


def capture_text() -> str:
    return shared_fixture("efsmi", CAPTURE).read_text(encoding="utf-8")


def rendered(t: float = 0.0) -> str:
    from hetero_exporter.collectors.enflame.efsmi import fake
    from hetero_exporter.simulate import scenario as scenario_mod
    from pathlib import Path
    sc = scenario_mod.load(str(Path(__file__).resolve().parents[1] / "collectors/enflame/scenario.yaml"))
    return fake.answer(sc, t, [])[1]


# --------------------------------------------------------------------------- the capture


def test_the_capture_parses_to_what_it_says(enflame):
    from hetero_exporter.collectors.enflame.efsmi import collector, parse
    t = parse.parse_table(capture_text())
    assert (t.version, t.driver_version) == ("1.2.0.301", "1.2.0.301")
    assert [d.index for d in t.devices] == [0, 1]
    assert [d.bus_id for d in t.devices] == ["0000:01:00.0", "0000:09:00.0"]
    assert [d.memory_total_mib for d in t.devices] == [49120, 42976]  # ECC on costs memory
    assert [d.serial for d in t.devices] == ["A073640510015", "C807J40510285"]
    assert [(d.temp_c, d.dpm, d.power_w, d.power_cap_w) for d in t.devices] == [
        (39, "Sleep", 105, 300), (46, "Active", 128, 300)]
    assert [(d.ecc, d.virt, d.firmware, d.util_pct) for d in t.devices] == [
        ("Disable", "Disable", "33.6.2", 0.0), ("Enable", "Disable", "33.6.5", 0.0)]
    assert not t.process_section and t.processes == ()
    snap = collector.parse_any(capture_text())
    d0, d1 = snap.devices
    assert (d0.identity.vendor, d0.identity.kind, d0.identity.model) == ("enflame", "gcu", "S60")
    assert d0.identity.uuid == "A073640510015" and d0.identity.driver_version == "1.2.0.301"
    assert d0.identity.runtime_version is None  # efsmi prints no TopsRider version; never the driver's
    assert d1.value("memory_total_bytes") == 42976 * MIB
    assert d0.value("power_watts") == 105 and d0.value("power_limit_watts") == 300
    assert d0.value("utilization_ratio") == 0.0
    assert d0.readings["memory_used_bytes"].quality.status == "unsupported"  # the table has none
    assert d0.health.state == "ok" and not d0.processes_reported


def test_parse_command(enflame, tmp_path, capsys):
    f = tmp_path / "efsmi.txt"
    f.write_text(capture_text())
    assert cli.main(["parse", "efsmi", str(f), "--json"]) == 0
    snap = snapshot_from_json(capsys.readouterr().out)
    assert [d.identity.pci_address for d in snap.devices] == ["0000:01:00.0", "0000:09:00.0"]
    f.write_text(QUERY)
    assert cli.main(["parse", "efsmi", str(f), "--json"]) == 0
    assert "TR6Y46010302" in capsys.readouterr().out


def test_newer_layouts_and_na_on_one_chip(enflame):
    from hetero_exporter.collectors.enflame.efsmi import collector, parse
    t = parse.parse_table(NEWER)
    assert (t.version, t.driver_version) == ("1.7.2.14", "1.7.2.14")
    assert [d.bus_id for d in t.devices] == ["0000:2d:00.0", "0000:2e:00.0", "0000:2f:00.0"]
    assert [d.memory_total_mib for d in t.devices] == [147456, 23552, 23552]
    assert (t.devices[0].temp_c, t.devices[0].power_w, t.devices[0].power_cap_w) == (35, 68, 300)
    assert t.devices[0].firmware == "40.2.8.3" and t.devices[1].virt == "SRIOV"
    snap = collector.parse_any(NEWER)
    l300, s60g_na, s60g = snap.devices
    assert l300.identity.model == "L300" and s60g.identity.model == "S60"
    assert s60g.readings["power_watts"].quality.status == "unsupported"  # N/A: absent, not 0
    assert s60g.health.state == "ok"  # power N/A is a reading, not a state
    assert [f.code for f in s60g_na.faults] == ["state-na"]  # Lpm N/A where the others print it
    assert s60g_na.faults[0].fault_class == "device-unreadable" and s60g_na.health.state == "degraded"


def test_processes_and_query(enflame):
    from hetero_exporter.collectors.enflame.efsmi import collector, parse
    text = rendered(10.0)
    t = parse.parse_table(text)
    assert t.process_section and len(t.devices) == 8
    assert [(p.dev, p.pid, p.name, p.memory_mib) for p in t.processes[:2]] == [
        (0, 5100, "python3", 28672), (0, 5101, "topsprof", 256)]
    details = parse.parse_query(QUERY)
    (d,) = details
    assert (d.uuid, d.serial, d.bus_id, d.health, d.total_dbe) == ("TR6Y46010302", "A0A1650510676",
                                                                   "0000:17:00.0", "False", 0)
    assert (d.memory_total_mib, d.memory_used_mib, d.temp_c) == (42976, 50000, 35)
    table = parse.EfsmiTable("1.4.3.4", "1.4.3.4", (parse.GcuDevice(
        0, "S60", "0000:17:00.0", None, "Enable", 35, "Sleep", 96, 300, 42976, None, "Disable", 0.0,
        "A0A1650510676"),))
    snap = collector.table_snapshot(table, details)
    dev = snap.devices[0]
    assert dev.identity.uuid == "TR6Y46010302"  # the id the device plugin advertises
    used = dev.readings["memory_used_bytes"]
    assert used.value is None and used.quality.status == "error"  # used above total: a driver fault
    assert "memory_free_bytes" not in dev.readings
    assert [f.code for f in dev.faults] == ["unhealthy"] and dev.health.state == "failed"


@pytest.mark.parametrize("bad", ["", "hello\n", "| DEV  NAME | BUS-ID |\n| x | y |\n", NEWER.replace("00:2d:00.0", "zz:zz")])
def test_garbage_is_a_one_line_parse_error(enflame, bad):
    from hetero_exporter.collectors.enflame.efsmi import collector
    with pytest.raises(ParseError) as e:
        collector.parse_any(bad)
    assert "\n" not in str(e.value)


# --------------------------------------------------------------------------- collector + fake


def test_collector_over_its_fake(enflame, tmp_path):
    doc = contract.scenario_doc(enflame)
    doc["faults"] = [*(doc.get("faults") or []), {"at": 100, "vendor": "enflame", "index": 3, "kind": "missing"},
                     {"at": 100, "vendor": "enflame", "index": 2, "kind": "state-na"},
                     {"at": 100, "vendor": "enflame", "index": 1, "kind": "unhealthy"}]
    sc = contract.write_scenario(doc, tmp_path)
    clock = ManualClock()
    c = registry.collector_factory(registry.collector_entries()["efsmi"])(contract.options(sc, tmp_path, clock))
    first = c.collect()
    assert c.calls == 2  # the table, and -q at first sight
    assert [d.identity.index for d in first] == list(range(8))
    want = {d.index: d for d in sc.devices_of("enflame")}
    for d in first:
        s = want[d.identity.index]
        assert d.identity.uuid == s.uuid and d.identity.pci_address == s.pci_address
        assert d.identity.model == "S60" and d.identity.driver_version == "1.2.0.301"
        assert d.value("memory_total_bytes") == s.memory_total_bytes
        assert d.value("memory_used_bytes") is not None and d.health.state == "ok"
        assert [p.pid for p in d.processes] == [p.pid for p in s.processes]
    clock.set_t(30)
    c.collect()
    assert c.calls == 3  # -q waits for query_interval
    clock.set_t(150)
    later = {d.identity.index: d for d in c.collect()}
    assert c.calls == 5
    assert later[3].identity.uuid == first[3].identity.uuid and later[3].health.state == "failed"
    assert later[3].faults[0].code == "missing"
    assert [f.code for f in later[2].faults] == ["state-na"]
    assert [f.code for f in later[1].faults] == ["unhealthy"] and later[1].health.state == "failed"
    assert later[0].health.state == "ok"


def test_round_trip(enflame):
    """What the fake prints parses back to the scenario's values."""
    from hetero_exporter.collectors.enflame.efsmi import collector, fake
    from hetero_exporter.simulate import scenario as scenario_mod
    from pathlib import Path
    sc = scenario_mod.load(str(Path(__file__).resolve().parents[1] / "collectors/enflame/scenario.yaml"))
    for t in (0.0, 45.0, 333.0):
        snap = collector.table_snapshot(collector.parse_table(fake.answer(sc, t, [])[1]),
                                        collector.parse_query(fake.answer(sc, t, ["-q"])[1]))
        for d, s in zip(snap.devices, sc.devices_of("enflame"), strict=True):
            assert d.identity.uuid == s.uuid and d.identity.serial == s.serial
            assert d.identity.pci_address == s.pci_address
            assert d.value("utilization_ratio") == pytest.approx(s.value("utilization_ratio", t), abs=0.001)
            assert d.value("temperature_core_celsius") == pytest.approx(s.value("temperature_core_celsius", t), abs=0.5)
            assert d.value("power_watts") == pytest.approx(s.value("power_watts", t), abs=0.5)
            assert d.value("memory_used_bytes") == pytest.approx(s.value("memory_used_bytes", t), abs=MIB)
            assert d.value("memory_total_bytes") == s.memory_total_bytes


def test_a_hung_fake_times_out_cleanly(enflame, tmp_path):
    """A hung efsmi: the runner kills its process group before the deadline; the cycle raises
    a timeout (the sampler reports the collector failed), no child is left behind."""
    import os
    from hetero_exporter.sdk.runner import CliTimeout
    doc = contract.scenario_doc(enflame)
    doc["settings"] = {**(doc.get("settings") or {}), "enflame": {"mode": "hang"}}
    sc = contract.write_scenario(doc, tmp_path)
    c = registry.collector_factory(registry.collector_entries()["efsmi"])(
        contract.options(sc, tmp_path, ManualClock(), timeout=4.0))  # time for the fake to start and hang, even on a loaded machine
    with pytest.raises((CliTimeout, TimeoutError)):
        c.collect()
    pids = (tmp_path / "efsmi.hung.pids").read_text().split()
    for pid in map(int, pids):
        for _ in range(100):  # bounded: the kill is already sent; reaping may lag a moment
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            if _zombie(pid):
                break
            import time
            time.sleep(0.05)
        else:
            pytest.fail(f"process {pid} of the hung efsmi still runs")


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# --------------------------------------------------------------------------- the contract


def test_contract_spec(enflame):
    contract.check_spec(enflame)
    assert enflame.kind == "gcu" and 0x1E36 in enflame.pci_vendor_ids
    assert vendors.pci_vendors()[0x1E36] == "enflame"
    assert enflame.resource_group("enflame.com/gcu")[1] == "enflame.com/gcu"
    assert enflame.resource_group("enflame.com/vgcu")[0].unit == "slices"
    assert enflame.resource_group("enflame.com/vgcu-percentage")[0].unit == "slices"


def test_contract_captures(enflame):
    found = shared_fixtures("efsmi")
    if not found:
        pytest.skip("no efsmi captures (../shared/fixtures/efsmi absent)")
    assert contract.check_captures(enflame) == len(found)


def test_contract_parser_fuzz(enflame):
    contract.check_parser_fuzz(enflame, "efsmi", seeds=[rendered(0.0), NEWER, QUERY])


def test_contract_simulation_and_quality(enflame, tmp_path):
    devices = contract.check_simulation(enflame, tmp_path)
    contract.check_quality(enflame, devices)


@pytest.mark.parametrize("mode", contract.FAILURE_MODES)
def test_contract_failure_isolation(enflame, mode, tmp_path):
    assert contract.uses_fake_tool(enflame.collectors[0])
    contract.check_failure_isolation(enflame, mode, tmp_path)


def test_profiles(enflame):
    from hetero_exporter import profiles
    for model, mem, tflops in (("S60", 48, 100), ("T20", 32, 128), ("i20", 16, 128)):
        p = profiles.profile_for("enflame", model, kind="gcu", memory_total_bytes=mem << 30)
        assert not p.estimated and p.compute_units == pytest.approx(tflops / 312, abs=0.01)


def test_a_hung_detail_call_leaves_the_table(enflame, tmp_path):
    """``efsmi -q`` hung: killed at the deadline, the cycle still gives every device from the
    table (memory used unsupported until a -q answers)."""
    doc = contract.scenario_doc(enflame)
    doc["faults"] = [*(doc.get("faults") or []),
                     {"at": 0, "vendor": "enflame", "index": 0, "kind": "hang", "command": "detail"}]
    sc = contract.write_scenario(doc, tmp_path)
    c = registry.collector_factory(registry.collector_entries()["efsmi"])(
        contract.options(sc, tmp_path, ManualClock(), timeout=1.5))
    out = c.collect()
    assert len(out) == 8 and all(d.health.state == "ok" for d in out)
    assert all(d.readings["memory_used_bytes"].quality.status == "unsupported" for d in out)
    assert out[0].identity.uuid == sc.devices_of("enflame")[0].serial  # no -q: the serial


def test_an_idle_card_table_with_no_running_processes_parses():
    # efsmi writes a one-cell "No running processes found" row under the process header when
    # nothing runs (the fake renders it for an idle scenario, as the tool does)
    from hetero_exporter.collectors.enflame.efsmi import fake, parse as efparse
    from hetero_exporter.simulate.scenario import load as load_scenario
    sc = load_scenario(str(ROOT / "collectors" / "enflame" / "scenario.yaml"))
    rows = []
    for line in fake.table(sc, 0.0).splitlines():
        rows.append(line)
        if "=====" in line:
            rows.append("|" + " No running processes found".ljust(len(line) - 2) + "|")
            break
    rows.append("+" + "-" * (len(rows[-1]) - 2) + "+")
    parsed = efparse.parse_table("\n".join(rows) + "\n")
    assert len(parsed.devices) == 8 and parsed.processes == ()
