"""Kunlunxin XPUs through xpu_smi: the real capture, other layouts (rendered by the fake in the
documented XRE 4.0 column set, K200 chip pairs, SR-IOV), faults, the collector over its fake
(hung, garbage, lost devices) and the vendor contract checks on the Kunlunxin spec."""

from __future__ import annotations

import time

import pytest
import yaml

import test_vendor_contract as contract
from cli_fakes import alive
from conftest import shared_fixture, shared_fixtures
from hetero_exporter.model import fields as F
from hetero_exporter import registry, vendors
from hetero_exporter.sdk.contract import CollectorOptions, HostPaths, ParseError, Unavailable
from hetero_exporter.sdk.runner import CliError, CliTimeout
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate.scenario import from_dict

CAPTURE = ("xpu-smi", "xpu_smi_2x-kunlunxin-r300.txt")
GIB = 1 << 30


@pytest.fixture(autouse=True)
def kunlunxin():
    """The Kunlunxin spec, registered for each test (until the lead adds it to BUILTIN)."""
    from hetero_exporter.collectors.kunlunxin import SPEC
    was = vendors.spec("kunlunxin")
    if was is None:
        vendors.register(SPEC)
    try:
        yield vendors.spec("kunlunxin")
    finally:
        if was is None:
            vendors.unregister("kunlunxin")


def P():
    from hetero_exporter.collectors.kunlunxin.xpu_smi import parse
    return parse


def C():
    from hetero_exporter.collectors.kunlunxin.xpu_smi import collector
    return collector


def FAKE():
    from hetero_exporter.collectors.kunlunxin.xpu_smi import fake
    return fake


def row(index, bus, model="R200", serial="02K00Y6217V00009", used=0, total=16384, **kw):
    return {"index": index, "bus": bus, "model": model, "serial": serial, "mem_used_mib": used,
            "mem_total_mib": total, "util_pct": 0, "l3_used_mib": 0, "l3_total_mib": 63, "power_w": 25,
            "temp_c": 49, "freq_mhz": 1300, "firmware": "0001.0002.0022", "cpld": "103", **kw}


# --------------------------------------------------------------------------- the real capture


def test_the_r300_capture():
    text = shared_fixture(*CAPTURE).read_text()
    t = P().parse(text)
    assert (t.runtime_version, t.driver_version) == ("4.31", "4.0")
    assert [d.index for d in t.devices] == [0, 1]
    assert [d.bus_id for d in t.devices] == ["0000:53:00.0", "0000:56:00.0"]
    assert [d.model for d in t.devices] == ["R300", "R300"]
    assert all(d.memory_total_bytes == 32768 * (1 << 20) == 32 * GIB for d in t.devices)
    assert all(d.memory_used_bytes == 0 and d.utilization_ratio == 0 for d in t.devices)
    assert all(d.l3_total_bytes == 63 * (1 << 20) for d in t.devices)
    assert all(d.state is None and d.power_watts is None for d in t.devices)  # no such columns in 4.31
    assert t.sections == ("DEVICES", "VIDEO", "PROCESSES")
    assert t.process_section and t.processes == ()
    assert t.video[1]["dec"].clock_hertz == 800e6 and t.video[1]["imgproc"].utilization_ratio == 0


def test_the_capture_through_parse_any():
    snap = registry.parser("xpu-smi")(shared_fixture(*CAPTURE).read_text())
    assert len(snap.devices) == 2
    ids = [d.identity for d in snap.devices]
    assert {(i.vendor, i.kind) for i in ids} == {("kunlunxin", "xpu")}
    assert [i.pci_address for i in ids] == ["0000:53:00.0", "0000:56:00.0"]
    assert len({i.uuid for i in ids}) == 2  # the redacted serial is shared: the address tells them apart
    assert all(i.model == "R300" and i.runtime_version == "4.31" and i.driver_version == "4.0" for i in ids)
    for d in snap.devices:
        assert d.value(F.MEMORY_TOTAL) == 32 * GIB and d.value(F.MEMORY_USED) == 0
        assert d.readings[F.POWER].quality.status == "unsupported"  # not printed: absent, not 0
        assert d.processes == () and d.processes_reported and d.health.state == "ok"


@pytest.mark.parametrize("path", shared_fixtures("xpu-smi", "*.txt"), ids=lambda p: p.name)
def test_every_capture_gives_devices(path):
    snap = registry.parser("xpu-smi")(path.read_text())
    assert snap.devices and all(d.identity.pci_address for d in snap.devices)


# --------------------------------------------------------------------------- other layouts


def test_the_full_layout_with_processes():
    text = FAKE().render("4.0", "4.0", [row(0, "0000:01:00.0"), row(1, "0000:06:00.0", "K100", "000000000000022f",
                                                                     504, 8064, cpld="eb1302")],
                         [{"devid": 1, "pid": 4321, "streams": 2, "memory_mib": 504, "command": "python3 infer.py"}],
                         layout="full", video=False)
    t = P().parse(text)
    assert t.sections == ("DEVICES", "PROCESSES")
    d0, d1 = t.devices
    assert (d0.state, d0.power_watts, d0.temperature_celsius, d0.clock_hertz) == ("N", 25, 49, 1300e6)
    assert (d0.firmware, d1.cpld) == ("0001.0002.0022", "eb1302")
    assert d1.memory_used_bytes == 504 << 20 and d1.memory_total_bytes == 8064 << 20
    (p,) = t.processes
    assert (p.index, p.pid, p.streams, p.memory_bytes, p.command) == (1, 4321, 2, 504 << 20, "python3 infer.py")
    snap = C().snapshot(t)
    assert snap.devices[1].processes[0].memory_bytes == 504 << 20
    assert snap.devices[1].processes[0].device_uuid == snap.devices[1].identity.uuid
    assert snap.devices[0].identity.firmware_version == "0001.0002.0022"


def test_k200_chip_pairs_and_sriov_get_distinct_stable_uuids():
    text = FAKE().render("4.0", "4.0", [
        row(0, "0000:86:00.0", "K200", "000000000007a136"), row(1, "0000:86:00.0", "K200", "000000000007a136"),
        row(2, "0000:af:00.0", "K200", "000000000007a135"), row(3, "0000:af:00.0", "K200", "000000000007a135"),
        row(4, "0000:01:00.0", "R200-PF", "02K00Y6219V00013"), row(5, "0000:01:01.0", "R200-VF-5G", "02K00Y6219V00013"),
        row(6, "0000:01:01.1", "R200-VF-5G", "02K00Y6219V00013"), row(7, "0001:03:00.0", "R200", "N/A")], [])
    snap = C().snapshot(P().parse(text))
    ids = {d.identity.index: d.identity for d in snap.devices}
    assert len({i.uuid for i in ids.values()}) == 8
    assert (ids[0].uuid, ids[1].uuid) == ("KLX-000000000007a136-0", "KLX-000000000007a136-1")
    assert ids[7].uuid == "KLX-pci-0001:03:00.0"  # no serial: the address
    assert ids[5].parent == ids[6].parent == ids[4].uuid and ids[4].parent is None
    # the same rows in another order keep their uuids
    again = C().snapshot(P().parse(text))
    assert [d.identity.uuid for d in again.devices] == [d.identity.uuid for d in snap.devices]


def test_memory_used_above_total_is_an_error_reading():
    snap = C().snapshot(P().parse(FAKE().render("4.0", "4.0", [row(0, "0000:01:00.0", used=17000)], [])))
    r = snap.devices[0].readings
    assert r[F.MEMORY_USED].quality.status == "error" and r[F.MEMORY_USED].value is None
    assert r[F.MEMORY_TOTAL].value == 16384 << 20


@pytest.mark.parametrize("state, code, health", [("E", "state-error", "failed"), ("X", "state-abnormal", "degraded"),
                                                 ("N", None, "ok")])
def test_the_state_column_gives_faults(state, code, health):
    snap = C().snapshot(P().parse(FAKE().render("4.0", "4.0", [row(0, "0000:01:00.0", state=state)], [])))
    d = snap.devices[0]
    assert d.health.state == health
    assert [f.code for f in d.faults] == ([code] if code else [])
    if code == "state-error":
        assert d.faults[0].action == "reset-device"  # from faults.yaml


def test_na_cells_are_absent():
    text = FAKE().render("4.0", "4.0", [row(0, "0000:01:00.0", power_w=None, temp_c=None, util_pct=None, used=None)], [])
    d = C().snapshot(P().parse(text)).devices[0]
    for name in (F.POWER, F.TEMP_CORE, F.UTILIZATION, F.MEMORY_USED):
        assert d.readings[name].value is None and d.readings[name].quality.status == "unsupported"


@pytest.mark.parametrize("text, where", [
    ("", "no table"), ("hello\nworld\n", "no table"),
    ("  DEVICES\n-----\n| DevID | PCI Addr | Memory |\n-----\n| x | 0000:01:00.0 | 0 / 1 MB |\n-----\n", "DevID"),
    ("  DEVICES\n-----\n| DevID | PCI Addr | Memory |\n-----\n| 0 | nowhere | 0 / 1 MB |\n-----\n", "PCI Addr"),
    ("  DEVICES\n-----\n| DevID | PCI Addr | Memory |\n-----\n| 0 | 0000:01:00.0 | 7 MB |\n-----\n", "Memory"),
    ("  DEVICES\n-----\n| DevID | PCI Addr | Memory |\n-----\n| 0 | 0000:01:00.0 |\n-----\n", "cells"),
])
def test_garbage_gives_one_line_parse_errors(text, where):
    with pytest.raises(ParseError) as e:
        registry.parser("xpu-smi")(text)
    msg = str(e.value)
    assert msg.startswith("xpu-smi") and "\n" not in msg and where in msg


# --------------------------------------------------------------------------- the collector over its fake


def scenario(tmp_path, extra_faults=(), settings=None):
    doc = yaml.safe_load(open(vendors.spec("kunlunxin").data_path("scenario.yaml")))
    doc["faults"] = list(extra_faults)
    if settings:
        doc["settings"] = {"kunlunxin": settings}
    path = tmp_path / "sc.yaml"
    path.write_text(yaml.safe_dump(doc))
    return from_dict(doc, str(path))


def collector(sc, tmp_path, clock, timeout=8.0):
    opts = CollectorOptions(node_name=sc.node, timeout_seconds=timeout, interval_seconds=10.0, scenario=sc,
                            clock=clock, workdir=str(tmp_path / "work"),
                            host=HostPaths(sysfs=str(tmp_path / "no-sysfs")))
    return C().create(opts)


def test_collection_one_call_per_cycle_and_a_lost_device(tmp_path):
    sc = scenario(tmp_path, [{"at": 100, "vendor": "kunlunxin", "index": 3, "kind": "missing"},
                             {"at": 100, "until": 200, "vendor": "kunlunxin", "index": 5, "kind": "state-error"}])
    clock = ManualClock()
    c = collector(sc, tmp_path, clock)
    first = c.collect()
    assert c.calls == 1
    assert [d.identity.index for d in first] == list(range(8))
    d0 = first[0]
    assert d0.identity.uuid == f"KLX-{sc.devices[0].serial}" and d0.identity.model == "P800"
    assert (d0.identity.driver_version, d0.identity.runtime_version) == ("5.0.21.21", "5.0.21")
    assert d0.value(F.MEMORY_TOTAL) == 96 * GIB and 0 <= d0.value(F.UTILIZATION) <= 1
    assert [p.pid for p in d0.processes] == [7100, 7101] and d0.processes[0].memory_bytes == 48 * GIB
    clock.set_t(150)
    later = {d.identity.index: d for d in c.collect()}
    assert c.calls == 2
    assert later[3].identity.uuid == first[3].identity.uuid and later[3].health.state == "failed"
    assert later[3].faults[0].code == "missing" and later[3].faults[0].fault_class == "device-lost"
    assert later[5].health.state == "failed" and later[5].faults[0].code == "state-error"
    clock.set_t(250)
    assert {d.identity.index: d.health.state for d in c.collect()}[5] == "ok"


def test_the_compact_layout_round_trips(tmp_path):
    c = collector(scenario(tmp_path, settings={"layout": "compact", "video": False}), tmp_path, ManualClock())
    devices = c.collect()
    assert len(devices) == 8 and all(d.readings[F.POWER].quality.status == "unsupported" for d in devices)
    assert all(d.value(F.MEMORY_TOTAL) == 96 * GIB for d in devices)


def test_a_hung_xpu_smi_is_killed_and_the_next_cycle_works(tmp_path):
    sc = scenario(tmp_path, [{"at": 0, "until": 100, "vendor": "kunlunxin", "index": 0, "kind": "hang"}])
    clock = ManualClock()
    c = collector(sc, tmp_path, clock, timeout=4.0)  # time for the fake to start and hang, even on a loaded machine
    with pytest.raises(CliTimeout, match="killed its process group"):
        c.collect()
    pids = [int(x) for x in (tmp_path / "work" / "xpu_smi.hung.pids").read_text().split()]
    for _ in range(50):  # bounded: the kill is asynchronous to this process
        if not any(alive(p) for p in pids):
            break
        time.sleep(0.1)
    assert not any(alive(p) for p in pids), pids
    clock.set_t(120)
    assert len(c.collect()) == 8


@pytest.mark.parametrize("mode, error", [("garbage", ParseError), ("truncated", ParseError), ("exit", CliError)])
def test_broken_output_fails_the_cycle(tmp_path, mode, error):
    c = collector(scenario(tmp_path, settings={"mode": mode}), tmp_path, ManualClock())
    with pytest.raises(error):
        c.collect()


def test_no_tool_is_unavailable(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    opts = CollectorOptions(node_name="n", timeout_seconds=2, interval_seconds=10,
                            settings={"path": str(tmp_path / "xpu_smi")})
    with pytest.raises(Unavailable):
        C().create(opts)


# --------------------------------------------------------------------------- the contract


def test_contract_spec(kunlunxin):
    contract.check_spec(kunlunxin)
    assert kunlunxin.kind == "xpu" and vendors.pci_vendors()[0x1D22] == "kunlunxin"
    assert kunlunxin.resource_group("kunlunxin.com/vxpu-memory")[0].unit == "memory_mib"
    assert kunlunxin.device_resource("P800") == "kunlunxin.com/xpu"


def test_contract_captures(kunlunxin):
    found = shared_fixtures("xpu-smi")
    if not found:
        pytest.skip("no xpu-smi captures (../shared/fixtures/xpu-smi absent)")
    assert contract.check_captures(kunlunxin) == len(found)


def test_contract_parser_fuzz(kunlunxin):
    f = FAKE()
    seeds = [f.render("4.0", "4.0", [row(0, "0000:01:00.0"), row(1, "0000:06:00.0", "K100", "x", 504, 8064)],
                      [{"devid": 0, "pid": 9, "memory_mib": 10, "command": "a.out"}]),
             f.render("4.31", "4.0", [row(0, "0000:53:00.0", "R300")], [], layout="compact")]
    contract.check_parser_fuzz(kunlunxin, "xpu-smi", seeds=seeds)


def test_contract_simulation_and_quality(kunlunxin, tmp_path):
    devices = contract.check_simulation(kunlunxin, tmp_path)
    contract.check_quality(kunlunxin, devices)
    assert len([d for d in devices if d.identity.vendor == "kunlunxin"]) == 8


@pytest.mark.parametrize("mode", contract.FAILURE_MODES)
def test_contract_failure_isolation(kunlunxin, mode, tmp_path):
    assert contract.uses_fake_tool(kunlunxin.collectors[0])
    contract.check_failure_isolation(kunlunxin, mode, tmp_path)


def test_its_profiles(kunlunxin):
    from hetero_exporter import profiles
    for model, gib in (("P800", 96), ("R300", 32), ("R200", 16)):
        p = profiles.profile_for("kunlunxin", model, kind="xpu", memory_total_bytes=gib * GIB)
        assert p.model == model and not p.estimated and p.approximate and p.source


# --------------------------------------------------------------------------- the CLI


def test_parse_command(capsys):
    from hetero_exporter import cli
    from hetero_exporter.model import snapshot_from_json
    path = shared_fixture(*CAPTURE)
    assert cli.main(["parse", "xpu-smi", str(path), "--json"]) == 0
    snap = snapshot_from_json(capsys.readouterr().out)
    assert [d.identity.pci_address for d in snap.devices] == ["0000:53:00.0", "0000:56:00.0"]


def test_inspect_simulate(kunlunxin, capsys):
    from hetero_exporter import cli
    from hetero_exporter.model import snapshot_from_json
    assert cli.main(["inspect", "--simulate", str(kunlunxin.data_path("scenario.yaml")), "--json"]) == 0
    snap = snapshot_from_json(capsys.readouterr().out)
    assert [d.identity.vendor for d in snap.devices] == ["kunlunxin"] * 8
    assert [(c.name, c.ok) for c in snap.collectors] == [("xpu_smi", True)]
    assert all(d.identity.runtime_version == "5.0.21" for d in snap.devices)
