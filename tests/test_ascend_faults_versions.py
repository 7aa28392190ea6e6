"""npu-smi fault details and versions: ``-t health`` whose Error Code / Error Information
continue on ``: ...`` lines after blank lines (every code kept), ``-t current-fault-event``
parsed and called at the detail cadence with its events becoming the chip's faults through
faults.yaml (an unknown id still a fault), and runtime_version being CANN's or None."""

from __future__ import annotations

import pytest
import yaml

from cli_fakes import in_process_runner
from conftest import shared_fixture
from hetero_exporter.collectors.ascend import versions
from hetero_exporter.collectors.ascend.npu_smi import collector as N
from hetero_exporter.collectors.ascend.npu_smi import fake
from hetero_exporter.sdk.contract import CollectorOptions, ParseError
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate.scenario import from_dict, load

# A multi-line -t health as npu-smi prints it on a chip with several errors: each further
# item on a "<blanks>: item" line, blank lines between (indent: a tab, as npu-smi prints).
HEALTH_MULTI = (
    "\tHealth Status                  : Alarm\n"
    "\tError Code                     : 80E18402\n"
    "\n"
    "\t                               : 80E0020B\n"
    "\tError Information              : node type=HBMC, sensor type=Memory, event state=multi bit ECC\n"
    "\n"
    "\t                               : node type=SOC, sensor type=Temperature, event state=over temp\n")


def _indented(text: str, indent: str) -> str:
    return "".join(indent + line.lstrip("\t") if line.strip() else line for line in text.splitlines(True))


@pytest.mark.parametrize("indent", ["\t", " " * 8, ""], ids=["tab", "8sp", "none"])
def test_health_continuation_lines_after_blank_lines_keep_every_code(indent):
    text = _indented(HEALTH_MULTI, indent)
    assert N.detect(text) == "info -t health"
    h = N.health_detail(N.parse_detail(text, "health"))
    assert h.state == "Alarm" and h.codes == ("80E18402", "80E0020B")
    assert h.information == ("node type=HBMC, sensor type=Memory, event state=multi bit ECC; "
                             "node type=SOC, sensor type=Temperature, event state=over temp")
    snap = N.parse_any(text)
    assert {f.code for f in snap.devices[0].faults} == {"Alarm", "80E18402", "80E0020B"}
    assert snap.devices[0].health.state == "failed"  # 80E18402 / 80E0020B: SeparateNPU


def test_health_continuation_of_an_empty_value_and_a_stray_one():
    text = "Health Status : Warning\nError Code :\n: 80E01801\n\n: 80E18005\nError Information : NA\n"
    assert N.health_detail(N.parse_detail(text, "health")).codes == ("80E01801", "80E18005")
    with pytest.raises(ParseError, match=r"line 1"):  # no key above it: not npu-smi's structure
        N.parse_detail(": 80E01801\nHealth Status : OK\n", "health")


@pytest.mark.parametrize("name, indent", [("ascend950_info-t-health_doc.txt", " " * 8),
                                          ("info-t-health_910A_OK.txt", "\t")])
def test_health_captures_and_a_multi_line_error_in_their_indentation(name, indent):
    text = shared_fixture("npu-smi", name).read_text()
    assert N.health_detail(N.parse_detail(text, "health")) == N.HealthDetail("OK", (), "")
    # the same capture with a multi-line error in its own indentation (950: 8 spaces; 910A: tab)
    key = "Health" if "Health Status" not in text else "Health Status"
    bad = (text.replace(f"{key} ", f"{key} ", 1).replace(": OK", ": Alarm", 1)
           .replace("NA\n", "80E18402\n\n" + indent + " " * 31 + ": A4193216\n", 1))
    h = N.health_detail(N.parse_detail(bad, "health"))
    assert h.state == "Alarm" and h.codes == ("80E18402", "A4193216")


def test_8sp_indent_captures_still_parse_with_the_continuation_reader():
    board = N.parse_detail(shared_fixture("npu-smi", "info-t-board_910B-IT21HMDC_npu-smi-25.5.1_8sp-indent.txt")
                           .read_text(), "board")
    assert board.get(0, "pcie bus info").lower() == "0000:c1:00.0"
    assert board.get(0, "software version") == "25.5.1"


# --------------------------------------------------------------------------- current-fault-event


def test_the_current_fault_event_capture_parses_to_its_event():
    text = shared_fixture("npu-smi", "ascend950_info-t-current-fault-event_doc.txt").read_text()
    ev = N.parse_fault_events(text)
    assert ev.count == 1 and len(ev.events) == 1
    e = ev.events[0]
    assert (e.code, e.severity, e.chip_id) == ("81AF8000", 2, None)
    assert e.details == (("node type ex", "215"), ("node id", "0"), ("sub node type ex", "0"), ("sub node id", "0"))
    f = N.event_fault(e, "NPU 0 chip 0")
    assert (f.fault_class, f.action, f.source) == ("ub-module-error", "reset-device", N.FAULT_EVENT_SOURCE)


def test_several_events_time_and_description_and_no_event():
    text = ("\tNPU ID                         : 3\n"
            "\tFault Event Count              : 2\n"
            "\tFault Event Information        : event id=0x80E18402, severity=3, node type ex=5, "
            "alarm raised time=2025-06-01 10:00:01, event name=HBM multi-bit ECC, uncorrected\n"
            "\n"
            "\t                               : event id=0xDEADBEEF, severity=1\n")
    ev = N.parse_fault_events(text)
    assert ev.npu_id == 3 and ev.count == 2 and [e.code for e in ev.events] == ["80E18402", "DEADBEEF"]
    first, unknown = ev.events
    assert first.time == "2025-06-01 10:00:01" and first.description == "HBM multi-bit ECC, uncorrected"
    assert first.details == (("node type ex", "5"),)
    f = N.event_fault(first, "NPU 3 chip 0")
    assert f.severity == "critical" and f.action == "isolate-device"  # the table's SeparateNPU row
    assert "HBM multi-bit ECC" in f.message and "2025-06-01 10:00:01" in f.message
    u = N.event_fault(unknown, "NPU 3 chip 0")  # not in the table: still a fault, default class
    assert (u.code, u.fault_class, u.severity) == ("DEADBEEF", "unknown", "warning")
    assert N.event_fault(N.FaultEvent("DEADBEEF", severity=3), "x").severity == "critical"
    assert N.parse_fault_events("Fault Event Count : 0\n").events == ()
    with pytest.raises(ParseError, match="event id"):
        N.parse_fault_events("Fault Event Count : 1\nFault Event Information : severity=2\n")


def test_fake_renders_scenario_faults_as_events_and_they_parse_back():
    sc = from_dict({"name": "e", "devices": [{"vendor": "ascend", "count": 2, "product": "910B3"}],
                    "faults": [{"at": 0, "vendor": "ascend", "index": 1, "kind": "fault-event", "code": "0x81AF8008",
                                "severity": 3, "message": "UB Multi Bit Ecc"},
                               {"at": 0, "vendor": "ascend", "index": 1, "kind": "fault-event", "code": "12345678"}]})
    status, out, _ = fake.answer(sc, 10.0, ["info", "-t", "current-fault-event", "-i", "1"])
    assert status == 0
    ev = N.parse_fault_events(out)
    assert [(e.code, e.severity, e.description) for e in ev.events] == [
        ("81AF8008", 3, "UB Multi Bit Ecc"), ("12345678", 2, "")]
    assert N.parse_fault_events(fake.answer(sc, 10.0, ["info", "-t", "current-fault-event", "-i", "0"])[1]).events == ()


def ascend(n=2, **over):
    g = {"vendor": "ascend", "count": n, "product": "910B3", "memory_total": "64GiB", "pci_address": "0000:c1:00.0",
         "pci_stride": 1, "driver_version": "23.0.3"}
    g.update(over)
    return g


def test_a_scenario_fault_event_is_a_fault_of_the_device_through_the_detail_call():
    sc = from_dict({"name": "e", "devices": [ascend(2)], "faults": [
        {"at": 100, "until": 300, "vendor": "ascend", "index": 1, "kind": "fault-event", "code": "81AF8008",
         "severity": 3, "message": "UB Multi Bit Ecc"},
        {"at": 100, "until": 300, "vendor": "ascend", "index": 1, "kind": "fault-event", "code": "0BADC0DE",
         "severity": 1}]})
    clock, calls = ManualClock(), []
    col = N.NpuSmiCollector("npu-smi", clock=clock, interval=10, runner=in_process_runner(fake.answer, sc, clock, calls),
                            settings={"detail_intervals": {"usages": 0, "common": 0, "memory": 0, "ecc": 0}})

    def at(t):
        clock.set_t(t)
        calls.clear()
        return {d.identity.index: d for d in col.collect()}

    asked = []
    for t in (0, 10):  # due at first sight, within the cycle's budget (the topology goes first)
        assert all(d.faults == () for d in at(t).values())
        asked += [c for c in calls if c[2:3] == ["current-fault-event"]]
    assert ["info", "-t", "current-fault-event", "-i", "1"] in asked
    # the fault starts at 100; the next call is at its cadence (120 s after the first, at 10)
    devs = at(130)
    assert ["info", "-t", "current-fault-event", "-i", "1"] in calls
    d = devs[1]
    codes = {f.code: f for f in d.health.reasons}
    assert set(codes) == {"81AF8008", "0BADC0DE"}
    assert codes["81AF8008"].fault_class == "ub-ecc-multi-bit" and codes["81AF8008"].severity == "critical"
    assert codes["81AF8008"].source == N.FAULT_EVENT_SOURCE and "UB Multi Bit Ecc" in codes["81AF8008"].message
    assert codes["0BADC0DE"].fault_class == "unknown" and codes["0BADC0DE"].severity == "warning"
    assert d.health.state == "failed" and devs[0].faults == ()
    # not asked again before its interval, the faults stay (same episode, counted once)
    again = at(140)
    assert not any(c[2:3] == ["current-fault-event"] for c in calls)
    assert next(f for f in again[1].faults if f.code == "81AF8008").count == 1
    # the events end at 300; the answer at 250 still had them, the one at 370 has none
    assert {f.code for f in at(250)[1].health.reasons} == {"81AF8008", "0BADC0DE"}
    healed = at(370)[1]
    assert healed.health.state == "ok" and healed.health.reasons == ()
    assert {f.code for f in healed.faults} == {"81AF8008", "0BADC0DE"}  # counted, kept in the ledger


def test_a_summary_health_change_asks_the_fault_events_again():
    sc = from_dict({"name": "h", "devices": [ascend(1)], "faults": [
        {"at": 50, "until": 100, "vendor": "ascend", "index": 0, "kind": "health", "state": "Alarm",
         "code": "80E3A201"}]})
    clock, calls = ManualClock(), []
    col = N.NpuSmiCollector("npu-smi", clock=clock, interval=10, runner=in_process_runner(fake.answer, sc, clock, calls),
                            settings={"detail_intervals": {"usages": 0, "common": 0, "memory": 0, "ecc": 0}})
    for t in (0, 60, 110):
        clock.set_t(t)
        calls.clear()
        dev = col.collect()[0]
        assert ["info", "-t", "current-fault-event", "-i", "0"] in calls, t  # 60 and 110: a change, not the cadence
    assert dev.health.state == "ok" and dev.health.reasons == ()


# --------------------------------------------------------------------------- runtime_version


def test_versions_without_cann_have_no_runtime_version(tmp_path):
    versions.write_fake(str(tmp_path), None, "23.0.3")
    info = versions.discover(str(tmp_path))
    assert info.runtime_version is None and info.driver_version == "23.0.3" and info.source is None
    versions.write_fake(str(tmp_path), "8.0.RC3", "23.0.3")
    info = versions.discover(str(tmp_path))
    assert info.runtime_version == "8.0.RC3" and info.driver_version == "23.0.3"
    assert info.source.endswith("ascend_toolkit_install.info")


def test_the_cann_8_5_layout_is_read(tmp_path):
    d = tmp_path / "usr/local/Ascend/cann/aarch64-linux"
    d.mkdir(parents=True)
    (d / "ascend_toolkit_install.info").write_text("package_name=Ascend-cann-toolkit\nversion=8.5.0\n")
    assert versions.discover(str(tmp_path)).runtime_version == "8.5.0"


@pytest.mark.parametrize("cann, expected", [("none", None), ("8.0.RC3", "8.0.RC3")])
def test_a_910b_fake_node_runtime_version_is_cann_or_none(tmp_path, cann, expected):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump({"name": "v", "devices": [ascend(1)], "settings": {"ascend": {"cann_version": cann}}}))
    sc = load(str(path))
    opts = CollectorOptions(scenario=sc, clock=ManualClock(), workdir=str(tmp_path / "work"), timeout_seconds=8.0,
                            interval_seconds=10)
    d = N.create(opts).collect()[0]
    assert d.identity.driver_version == "23.0.3"
    assert d.identity.runtime_version == expected
