"""Iluvatar CoreX (ixsmi): the captures parsed to what their text says, the CSV query, the fake
round trip, the collector over its fake (uuids from the query, lost chips, the memory fault) and
the vendor contract checks on the spec (registered for each test until the lead adds it to
collectors.BUILTIN)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import test_vendor_contract as contract
from cli_fakes import gone
from conftest import shared_fixture, shared_fixtures
from hetero_exporter import registry, vendors
from hetero_exporter.model import snapshot_from_json, snapshot_to_json
from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate import scenario as scenario_mod

MIB, GIB = 1 << 20, 1 << 30
TABLE = "default_16x-iluvatar-bi-v150_ix-ml-4.1.0.txt"
CSV = "query-gpu-csv-noheader_mr-v50_mr-v100.csv"
BUSES = ["13", "16", "1c", "1f", "27", "2a", "34", "37", "3d", "40", "48", "4b", "54", "57", "64", "67"]


@pytest.fixture
def iluvatar():
    from hetero_exporter.collectors.iluvatar import SPEC
    registered = vendors.spec("iluvatar") is not None  # once the lead lists it in BUILTIN
    if not registered:
        vendors.register(SPEC)
    try:
        yield vendors.spec("iluvatar")
    finally:
        if not registered:
            vendors.unregister("iluvatar")


def _scenario():
    from hetero_exporter.collectors.iluvatar import SPEC
    return scenario_mod.load(str(SPEC.data_path("scenario.yaml")))


def _fake(argv=(), t=0.0, sc=None):
    from hetero_exporter.collectors.iluvatar.ixsmi import fake
    return fake.answer(sc or _scenario(), t, list(argv))


def test_the_package_is_importable_under_the_installed_name():
    import hetero_exporter.collectors.iluvatar.ixsmi.collector as c
    assert callable(c.create) and callable(c.parse_any)


# --------------------------------------------------------------------------- captures


def test_the_bi_v150_table(iluvatar):
    text = shared_fixture("ixsmi", TABLE).read_text()
    snap = registry.parser("ixsmi")(text)
    devs = snap.devices
    assert len(devs) == 16 and [d.identity.index for d in devs] == list(range(16))
    assert [d.identity.pci_address for d in devs] == [f"0000:{b}:00.0" for b in BUSES]
    assert all(d.value("memory_total_bytes") == 32768 * MIB for d in devs)
    assert all(d.value("memory_used_bytes") == 116 * MIB for d in devs)
    d0, d1 = devs[0], devs[1]
    assert (d0.identity.model, d0.identity.name) == ("BI-V150", "Iluvatar BI-V150")
    assert (d0.identity.driver_version, d0.identity.runtime_version) == ("4.1.0", "4.1.0")
    assert d0.identity.uuid == "iluvatar-pci-0000:13:00.0"
    # every other chip (the first of each two-chip board) prints Pwr N/A: unsupported, not 0
    assert d0.readings["power_watts"].value is None and d0.readings["power_watts"].quality.status == "unsupported"
    assert (d1.value("power_watts"), d1.value("power_limit_watts")) == (93.0, 350.0)
    assert d0.value("temperature_core_celsius") == 32.0 and d0.value("utilization_ratio") == 0.0
    assert d0.value("clock_compute_hertz") == 1500e6 and d0.value("clock_memory_hertz") == 1600e6
    assert all(d.processes == () and d.processes_reported for d in devs)
    assert all(d.health.state == "ok" for d in devs)
    json_ = snapshot_to_json(snap)
    assert snapshot_from_json(json_).devices[15].identity.pci_address == "0000:67:00.0"


def test_the_bi_v150_table_versions_and_timestamp():
    from hetero_exporter.collectors.iluvatar.ixsmi import parse
    t = parse.parse_table(shared_fixture("ixsmi", TABLE).read_text())
    assert (t.ml_version, t.driver_version, t.cuda_version) == ("4.1.0", "4.1.0", "10.2")
    assert t.timestamp.startswith("Timestamp") and t.process_section


def test_the_noheader_csv_in_gpustacks_field_order(iluvatar):
    snap = registry.parser("ixsmi")(shared_fixture("ixsmi", CSV).read_text())
    a, b = snap.devices
    assert [d.identity.model for d in snap.devices] == ["MR-V50", "MR-V100"]
    assert (a.value("memory_total_bytes"), a.value("memory_used_bytes")) == (16384 * MIB, 116 * MIB)
    assert (b.value("memory_total_bytes"), b.value("memory_used_bytes")) == (32768 * MIB, 27996 * MIB)
    assert (a.value("temperature_core_celsius"), b.value("temperature_core_celsius")) == (30.0, 36.0)
    assert a.identity.pci_address is None and a.identity.uuid == "iluvatar-index-0"  # the query has no bus id
    assert not a.processes_reported and b.readings["power_watts"].quality.status == "unsupported"


def test_a_csv_with_a_header_names_its_fields_and_units():
    from hetero_exporter.collectors.iluvatar.ixsmi import parse
    text = ("index, uuid, pci.bus_id, memory.total [MiB], gpu.power.draw [W], utilization.gpu [%]\n"
            "0, GPU-aa, 00000000:3B:00.0, 32768 MiB, 120.5 W, 45 %\n"
            "1, GPU-bb, 00000000:3C:00.0, 32768, [N/A], 3\n")
    out = parse.parse_any(text)
    g0, g1 = out.gpus
    assert (g0.uuid, g0.bus_id, g0.memory_total_bytes, g0.power_watts) == ("GPU-aa", "0000:3b:00.0", 32 * GIB, 120.5)
    assert g0.utilization_ratio == pytest.approx(0.45) and g1.utilization_ratio == pytest.approx(0.03)
    assert g1.power_watts is None
    # noheader: the caller names the fields
    assert parse.parse_csv("0, GPU-aa, 00000000:3B:00.0\n", ("index", "uuid", "pci.bus_id")).gpus[0].uuid == "GPU-aa"


def test_a_table_with_processes_and_a_memory_fault(iluvatar):
    """Processes under a name with spaces; used above total is an error reading and a fault."""
    from hetero_exporter.collectors.iluvatar.ixsmi.collector import parse_any
    sc = _scenario()
    text = _fake(sc=sc)[1]
    text = text.replace("|  3           8400      python3   ", "|  3           8400      python3 -m x")
    row = next(ln for ln in text.splitlines() if ln.startswith("| 0%") and "MiB /" in ln)
    used = row.split("|")[2].split("/")[0].strip()
    text = text.replace(row, row.replace(used + " /", "40000MiB /", 1), 1)
    snap = parse_any(text)
    d0 = snap.devices[0]
    assert d0.readings["memory_used_bytes"].quality.status == "error" and d0.readings["memory_used_bytes"].value is None
    assert d0.value("memory_total_bytes") == 32768 * MIB
    assert d0.health.state == "degraded" and d0.faults[0].code == "memory-over-total"
    assert d0.faults[0].fault_class == "driver"
    assert [p.pid for p in snap.devices[3].processes] == [8400] and snap.devices[3].processes[0].name == "python3 -m x"
    assert snap.devices[3].processes[0].memory_bytes == 18 * GIB


@pytest.mark.parametrize("text,msg", [
    ("", "neither"), ("hello world\n", "neither"), ("+---+\n| x |\n+---+\n", "neither"),
    ("0, a, b\n", "without header"),
    ("| GPU  Name | Bus-Id |\n|====|====|\n| zero  X | 0000:3b:00.0 |\n", "device index"),
])
def test_garbage_gives_one_line_parse_errors(iluvatar, text, msg):
    with pytest.raises(ParseError) as e:
        registry.parser("ixsmi")(text)
    assert str(e.value).startswith("ixsmi") and msg in str(e.value) and "\n" not in str(e.value)


FUZZ = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(st.data())
def test_fuzzed_tables_and_csv_give_a_result_or_a_parse_error(data):
    """Mutated captures and fake outputs (cells, lines, units): only ParseError escapes."""
    from hetero_exporter.collectors.iluvatar.ixsmi import parse
    seeds = [_fake()[1], _fake(["--query-gpu=index,uuid,pci.bus_id,memory.total,memory.used,power.draw",
                                "--format=csv"])[1]]
    seeds += [p.read_text() for p in shared_fixtures("ixsmi") if p.name in (TABLE, CSV)]
    text = data.draw(st.sampled_from(seeds))
    lines = text.splitlines()
    i = data.draw(st.integers(0, max(0, len(lines) - 1)))
    how = data.draw(st.sampled_from(("cell", "drop", "dup", "chars")))
    if how == "cell" and lines:
        lines[i] = lines[i].replace(data.draw(st.sampled_from(("MiB", "W", "%", "C", "/", "|", ",", "0", "N/A"))),
                                    data.draw(st.sampled_from(("", "x", "1e309", "-", "N/A", "||", ",,"))), 1)
    elif how == "drop" and lines:
        del lines[i]
    elif how == "dup" and lines:
        lines.insert(i, lines[i])
    elif lines:
        lines[i] = data.draw(st.text(max_size=80))
    try:
        out = parse.parse_any("\n".join(lines))
    except ParseError:
        return
    assert all(g.index >= 0 for g in out.gpus)


# --------------------------------------------------------------------------- fake round trip


def test_the_fake_table_and_query_round_trip(iluvatar):
    from hetero_exporter.collectors.iluvatar.ixsmi import parse
    sc = _scenario()
    t = parse.parse_table(_fake(t=33.0, sc=sc)[1])
    csv = parse.parse_any(_fake(["--query-gpu=index,name,uuid,pci.bus_id,memory.total,memory.used,"
                                 "utilization.gpu,temperature.gpu,power.draw", "--format=csv,nounits"], 33.0, sc)[1])
    noheader = parse.parse_csv(_fake(["--query-gpu=index,uuid", "--format=csv,noheader"], 33.0, sc)[1],
                               ("index", "uuid"))
    devs = sc.devices_of("iluvatar")
    assert len(t.gpus) == len(csv.gpus) == len(devs) == 8
    for g, c, n, d in zip(t.gpus, csv.gpus, noheader.gpus, devs):
        assert g.bus_id == c.bus_id == d.pci_address and c.uuid == n.uuid == d.uuid
        assert g.memory_total_bytes == c.memory_total_bytes == d.memory_total_bytes
        assert g.memory_used_bytes == c.memory_used_bytes
        assert abs(g.memory_used_bytes - d.value("memory_used_bytes", 33.0)) <= MIB
        assert g.power_watts == c.power_watts and g.temperature_celsius == c.temperature_celsius
    assert t.gpus[0].power_watts is None and t.gpus[1].power_watts is not None  # two-chip boards
    assert [p.gpu for p in t.processes] == list(range(8))
    assert t.ml_version == "4.1.0" and t.cuda_version == "10.2"


def test_the_fake_refuses_an_unknown_field():
    status, out, err = _fake(["--query-gpu=index,bogus.field", "--format=csv"])
    assert status == 2 and out == "" and "bogus.field" in err


# --------------------------------------------------------------------------- the collector


def _collector(iluvatar, tmp_path, doc=None, runner=None):
    sc = contract.write_scenario(doc or contract.scenario_doc(iluvatar), tmp_path)
    clock = ManualClock()
    c = registry.collector_factory(registry.collector_entries()["ixsmi"])(contract.options(sc, tmp_path, clock))
    return sc, clock, c


def test_collection_over_the_fake(iluvatar, tmp_path):
    doc = contract.scenario_doc(iluvatar)
    doc["faults"] = [*(doc.get("faults") or []), {"at": 100, "vendor": "iluvatar", "index": 2, "kind": "missing"},
                     {"at": 100, "until": 200, "vendor": "iluvatar", "index": 5, "kind": "memory-over-total"}]
    sc, clock, c = _collector(iluvatar, tmp_path, doc)
    first = c.collect()
    want = sc.devices_of("iluvatar")
    assert [d.identity.uuid for d in first] == [d.uuid for d in want]  # from the uuid query
    assert all(d.identity.uuid.startswith("GPU-") for d in first)
    assert c.calls == 2  # the table + one uuid query for the new chips
    d1 = first[1]
    assert d1.identity.model == "BI-V150" and d1.identity.runtime_version == "4.1.0"
    assert d1.value("memory_total_bytes") == 32 * GIB and d1.processes[0].pid == 8200
    assert iluvatar.plugin_device_id(d1.identity) == want[1].uuid
    c.collect()
    assert c.calls == 3  # steady state: one call per cycle
    clock.set_t(150)
    later = {d.identity.index: d for d in c.collect()}
    assert later[2].identity.uuid == first[2].identity.uuid and later[2].health.state == "failed"
    assert later[2].faults[0].code == "missing" and later[2].faults[0].fault_class == "device-lost"
    assert later[5].readings["memory_used_bytes"].quality.status == "error"
    assert later[5].health.state == "degraded"
    assert later[0].health.state == "ok"


def test_a_failing_uuid_query_falls_back_to_the_pci_address(iluvatar, tmp_path):
    doc = contract.scenario_doc(iluvatar)
    doc["faults"] = [*(doc.get("faults") or []),
                     {"at": 0, "vendor": "iluvatar", "index": 0, "kind": "exit", "command": "detail"}]
    sc, clock, c = _collector(iluvatar, tmp_path, doc)
    devs = c.collect()
    assert devs[0].identity.uuid == "iluvatar-pci-0000:13:00.0"


def test_a_hung_fake_times_out_cleanly(iluvatar, tmp_path):
    """The runner kills the hung fake's process group within the deadline: Unavailable-free
    TimeoutError, and the grandchild sleep is gone."""
    doc = contract.scenario_doc(iluvatar)
    doc["settings"] = {**(doc.get("settings") or {}), "iluvatar": {"mode": "hang"}}
    sc = contract.write_scenario(doc, tmp_path)
    c = registry.collector_factory(registry.collector_entries()["ixsmi"])(
        contract.options(sc, tmp_path, ManualClock(), timeout=4.0))  # time for the fake to start and hang, even on a loaded machine
    with pytest.raises(TimeoutError):
        c.collect()
    pids = (tmp_path / "ixsmi.hung.pids")
    if pids.is_file():
        for pid in map(int, pids.read_text().split()):
            assert gone(pid), f"pid {pid} still running"  # a live one is a leak


# --------------------------------------------------------------------------- Kubernetes names


@pytest.mark.parametrize("name,unit", [
    ("iluvatar.ai/gpu", "devices"), ("iluvatar.com/gpu", "devices"), ("iluvatar.ai/BI-V150-vgpu", "slices"),
    ("iluvatar.ai/BI-V150.vCore", "slices"), ("iluvatar.ai/MR-V100.vMem", "slices"),
    ("iluvatar.ai/vgpu", "slices"), ("iluvatar.ai/vcuda-memory", "slices"),
])
def test_resource_names(iluvatar, name, unit):
    rule, group = iluvatar.resource_group(name)
    assert group == iluvatar.device_resource("BI-V150") == "iluvatar.ai/gpu" and rule.unit == unit
    from hetero_exporter.scoring.resources import parse_resource
    assert parse_resource(name).vendor == "iluvatar"


def test_profiles(iluvatar):
    from hetero_exporter import profiles
    for model, units in (("BI-V150", 96 / 312), ("BI-V100", 147 / 312), ("MR-V100", 96 / 312), ("MR-V50", 48 / 312)):
        p = profiles.profile_for("iluvatar", model, kind="gpu")
        assert not p.estimated and p.compute_units == pytest.approx(units, abs=0.01)
    assert profiles.normalize_model("iluvatar", "Iluvatar MR-V50") == "MR-V50"


# --------------------------------------------------------------------------- the contract


def test_contract_spec(iluvatar):
    contract.check_spec(iluvatar)


def test_contract_captures(iluvatar):
    found = shared_fixtures("ixsmi")
    if not found:
        pytest.skip("no ixsmi captures (../shared/fixtures/ixsmi absent)")
    assert contract.check_captures(iluvatar) == len(found)


def test_contract_parser_fuzz(iluvatar):
    contract.check_parser_fuzz(iluvatar, "ixsmi", seeds=[_fake()[1]])


def test_contract_simulation_and_quality(iluvatar, tmp_path):
    devices = contract.check_simulation(iluvatar, tmp_path)
    contract.check_quality(iluvatar, devices)


@pytest.mark.parametrize("mode", contract.FAILURE_MODES)
def test_contract_failure_isolation(iluvatar, mode, tmp_path):
    assert contract.uses_fake_tool(iluvatar.collectors[0])
    contract.check_failure_isolation(iluvatar, mode, tmp_path)
