"""Moore Threads through ``mthreads-gmi``: the real captures (../shared/fixtures/mthreads-gmi) parsed
to what their text says, the memory-over-total driver fault, shortened outputs, the fake's round
trip, the collector over the fake (lost GPUs, a hung tool), and the vendor contract checks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

import test_vendor_contract as contract
from conftest import shared_fixture, shared_fixtures
from hetero_exporter import cli, registry, vendors
from hetero_exporter.model import fields as F
from hetero_exporter.collectors.mthreads import SPEC
from hetero_exporter.model import snapshot_from_json
from hetero_exporter.sdk.contract import CollectorOptions, HostPaths, ParseError
from hetero_exporter.sdk.runner import CliTimeout
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate import scenario as scenario_mod

MIB, GIB = 1 << 20, 1 << 30
TOOL = "mthreads-gmi"
OWN_SCENARIO = Path(SPEC.data_path("scenario.yaml"))


@pytest.fixture(autouse=True)
def mthreads():
    """The spec registered for each test (until the lead adds it to collectors.BUILTIN)."""
    known = vendors.spec("mthreads") is not None
    if not known:
        vendors.register(SPEC)
    try:
        yield vendors.spec("mthreads")
    finally:
        if not known:
            vendors.unregister("mthreads")


def parse(name: str):
    from hetero_exporter.collectors.mthreads.gmi import parse as P
    return P.parse_table(shared_fixture(TOOL, name).read_text())


def snapshot(name: str):
    return registry.parser(TOOL)(shared_fixture(TOOL, name).read_text())


S4000 = "mthreads-gmi-default_MTT-S4000_gmi-1.12.2_driver-1.2.0_mem-anomaly_TRUNCATED.txt"
S5000 = "mthreads-gmi-default_MTT-S5000_gmi-2.3.3_driver-3.3.8-server_TRUNCATED.txt"
S80_X4 = "mthreads-gmi-default_MTT-S80_gmi-1.14.0_driver-2.7.0_pcie-x4.txt"
S80_PROC = "mthreads-gmi-default_MTT-S80_gmi-2.0.0_driver-3.0.0_with-processes.txt"
S5000_LOAD = "mthreads-gmi-default_MTT-S5000_gmi-2.3.2_driver-3.3.5-server_under-load_trailing-spaces_TRUNCATED.txt"

# capture -> (gmi version, driver, [(bus id, model, total MiB, health)], processes (pid, name, MiB), complete)
EXPECTED = {
    # used 44302MiB above the printed total 32768MiB: the FAQ's driver fault, degraded
    S4000: ("1.12.2", "1.2.0", [("0000:08:00.0", "MTT-S4000", 32768, "degraded")], [], False),
    S5000: ("2.3.3", "3.3.8-server", [("0000:18:00.0", "MTT-S5000", 81920, "ok")], [], False),
    # cut inside GPU 2 (its ECC row missing): three GPUs read, the table incomplete
    S5000_LOAD: ("2.3.2", "3.3.5-server", [("0000:2a:00.0", "MTT-S5000", 81920, "ok"),
                                           ("0000:3a:00.0", "MTT-S5000", 81920, "ok"),
                                           ("0000:4c:00.0", "MTT-S5000", 81920, "ok")], [], False),
    S80_X4: ("1.14.0", "2.7.0", [("0000:04:00.0", "MTT-S80", 16384, "ok")], [], True),
    S80_PROC: ("2.0.0", "3.0.0", [("0000:01:00.0", "MTT-S80", 16384, "ok")],
               [(1123, "/usr/lib/xorg/Xorg", 134), (1361, "/usr/sbin/unity-greeter", 1)], True),
}


def test_every_capture_is_listed():
    assert {p.name for p in shared_fixtures(TOOL)} <= set(EXPECTED)


# --------------------------------------------------------------------------- real captures


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_capture_parses_to_what_it_says(name):
    version, driver, devices, procs, complete = EXPECTED[name]
    t = parse(name)
    assert (t.version, t.driver_version, t.complete) == (version, driver, complete)
    snap = snapshot(name)
    assert [(d.identity.pci_address, d.identity.model, d.readings[F.MEMORY_TOTAL].value, d.health.state)
            for d in snap.devices] == [(b, m, mib * MIB, h) for b, m, mib, h in devices]
    assert [d.identity.index for d in snap.devices] == list(range(len(devices)))
    for d in snap.devices:
        assert (d.identity.vendor, d.identity.kind) == ("mthreads", "gpu")
        # no MUSA version printed: the runtime version is unknown, never the driver's
        assert d.identity.driver_version == driver and d.identity.runtime_version is None
        assert d.identity.uuid == f"mthreads-pci-{d.identity.pci_address}"
        assert d.processes_reported == complete
    got = [(p.pid, p.name, p.memory_bytes) for d in snap.devices for p in d.processes]
    assert got == [(pid, n, mib * MIB) for pid, n, mib in procs]


def test_the_values_of_the_s80_captures():
    d = snapshot(S80_PROC).devices[0]
    assert d.value(F.MEMORY_USED) == 662 * MIB and d.value(F.UTILIZATION) == 0.0
    assert d.value(F.TEMP_CORE) == 41 and d.health.state == "ok" and not d.faults
    assert (d.value("pcie_link_width"), d.value("pcie_link_width_max")) == (16, 16)
    x4 = snapshot(S80_X4).devices[0]
    assert (x4.value("pcie_link_width"), x4.value("pcie_link_width_max")) == (4, 16)  # "4x(16x)"
    assert x4.value(F.MEMORY_USED) == 2 * MIB and x4.value(F.TEMP_CORE) == 49
    assert x4.processes == () and x4.processes_reported  # "No running processes found"


def test_the_s5000_capture_reads_the_perf_column_and_ecc_mode():
    d = parse(S5000).devices[0]
    assert (d.name, d.perf, d.ecc_mode, d.device_type) == ("MTT S5000", "P0", "On-die, EDC", "Physical")
    assert d.utilization_ratio == 0.0 and d.memory_used_bytes == 0 and d.temperature_celsius == 47


def test_memory_used_above_total_is_an_error_reading_not_a_negative_free_figure():
    """The S4000 FAQ capture: 44302MiB used of 32768MiB (IOMMU off, the driver under-reports)."""
    d = snapshot(S4000).devices[0]
    used = d.readings[F.MEMORY_USED]
    assert used.value is None and used.quality.status == "error"
    assert d.value(F.MEMORY_TOTAL) == 32768 * MIB  # printed, kept
    assert d.value(F.UTILIZATION) == pytest.approx(0.88) and d.value(F.TEMP_CORE) == 65  # the others stay
    assert F.MEMORY_FREE not in d.readings
    assert [(f.code, f.fault_class, f.severity) for f in d.faults] == [("memory-over-total", "driver", "warning")]
    assert d.health.state == "degraded"
    from hetero_exporter.model import compact_document
    from hetero_exporter.model import NodeSnapshot
    kept = compact_document(NodeSnapshot(node="n", time=0.0, devices=(d,)))["devices"][0]["readings"]
    assert "memory_used_bytes" not in kept and "memory_free_bytes" not in kept


def test_shortened_captures_are_incomplete():
    """A capture cut after the first GPU (no closing rule) or elided with '...' lists what it has
    and says it is incomplete, so the collector takes no GPU as lost from it."""
    for name in (S4000, S5000):
        t = parse(name)
        assert not t.complete and len(t.devices) == 1 and not t.process_section


def test_parse_command_prints_a_snapshot(tmp_path, capsys):
    path = shared_fixture(TOOL, S80_PROC)
    assert cli.main(["parse", TOOL, str(path), "--json"]) == 0
    snap = snapshot_from_json(capsys.readouterr().out)
    assert [d.identity.model for d in snap.devices] == ["MTT-S80"]


@pytest.mark.parametrize("text, message", [
    ("", "not mthreads-gmi output"),
    ("hello\nworld\n", "not mthreads-gmi output"),
    ("    mthreads-gmi:2.0.0\n", "Driver Version"),
])
def test_garbage_gives_a_one_line_parse_error(text, message):
    with pytest.raises(ParseError, match=message) as e:
        registry.parser(TOOL)(text)
    assert "\n" not in str(e.value) and str(e.value).startswith(TOOL)


def test_a_damaged_row_names_its_line():
    text = shared_fixture(TOOL, S80_PROC).read_text().replace("00000000:01:00.0", "00000000:zz:00.0")
    with pytest.raises(ParseError, match=r"PCIe: not a PCI address.*\(line 9\)"):
        registry.parser(TOOL)(text)


# --------------------------------------------------------------------------- fake round trip


def own_doc(**settings) -> dict:
    doc = yaml.safe_load(OWN_SCENARIO.read_text())
    if settings:
        doc["settings"] = {"mthreads": settings}
    return doc


def rendered(doc: dict, tmp_path: Path, t: float = 0.0) -> str:
    from hetero_exporter.collectors.mthreads.gmi import fake
    return fake.answer(contract.write_scenario(doc, tmp_path), t, [])[1]


@pytest.mark.parametrize("layout", ["2.0", "2.3"])
def test_the_fake_renders_what_the_parser_reads(layout, tmp_path):
    from hetero_exporter.collectors.mthreads.gmi import parse as P
    sc = contract.write_scenario(own_doc(layout=layout), tmp_path)
    t = P.parse_table(rendered(own_doc(layout=layout), tmp_path, 30.0))
    assert t.complete and t.process_section and len(t.devices) == 8
    assert [d.bus_id for d in t.devices] == [s.pci_address for s in sc.devices_of("mthreads")]
    assert all(d.memory_total_bytes == 48 * GIB and d.name == "MTT S4000" for d in t.devices)
    for d, s in zip(t.devices, sc.devices_of("mthreads")):
        assert d.memory_used_bytes == round(s.value(F.MEMORY_USED, 30.0) / MIB) * MIB
        assert d.utilization_ratio == pytest.approx(round(s.value(F.UTILIZATION, 30.0) * 100) / 100)
    assert len(t.processes) == 16 and {p.gpu for p in t.processes} == set(range(8))
    assert (t.devices[0].perf == "P0") == (layout == "2.3")


def options(sc, tmp_path, clock, timeout=10.0):
    return CollectorOptions(node_name=sc.node, timeout_seconds=timeout, interval_seconds=10.0,
                            host=HostPaths(sysfs=str(tmp_path / "no-sysfs")), scenario=sc,
                            clock=clock, workdir=str(tmp_path / "work"))


def collector(doc, tmp_path, clock, timeout=10.0):
    tmp_path.mkdir(parents=True, exist_ok=True)
    sc = contract.write_scenario(doc, tmp_path)
    entry = registry.collector_entries()["mthreads_gmi"]
    return registry.collector_factory(entry)(options(sc, tmp_path, clock, timeout)), sc


def test_collection_over_the_fake_one_call_per_cycle_and_a_lost_gpu(tmp_path):
    doc = own_doc()
    doc["faults"] = [{"at": 100, "vendor": "mthreads", "index": 3, "kind": "missing"},
                     {"at": 100, "vendor": "mthreads", "index": 5, "kind": "memory-over-total"}]
    clock = ManualClock()
    c, sc = collector(doc, tmp_path, clock)
    first = c.collect()
    assert c.calls == 2 and len(first) == 8  # the table + -q at first sight
    assert {d.identity.index: d.identity.uuid for d in first} == {s.index: s.uuid for s in sc.devices_of("mthreads")}
    assert {d.identity.serial for d in first} == {s.serial for s in sc.devices_of("mthreads")}
    d0 = first[0]
    assert (d0.identity.model, d0.identity.pci_address, d0.identity.driver_version) == ("MTT-S4000", "0000:08:00.0", "3.0.0")
    assert d0.value(F.MEMORY_TOTAL) == 48 * GIB and d0.health.state == "ok"
    assert [p.pid for p in d0.processes] == [7100, 7101] and d0.processes_reported
    contract.check_quality(SPEC, first)
    clock.set_t(150)
    later = {d.identity.index: d for d in c.collect()}
    assert c.calls == 3  # -q not asked again
    assert later[3].identity.uuid == first[3].identity.uuid and later[3].health.state == "failed"
    assert later[3].faults[0].code == "missing" and later[3].faults[0].fault_class == "device-lost"
    assert later[5].readings[F.MEMORY_USED].quality.status == "error" and later[5].health.state == "degraded"
    assert later[5].value(F.UTILIZATION) is not None
    assert all(later[i].health.state == "ok" for i in (0, 1, 2, 4, 6, 7))


def test_a_truncated_answer_never_reports_a_gpu_lost(tmp_path):
    clock = ManualClock()
    c, _ = collector(own_doc(), tmp_path / "a", clock)
    assert len(c.collect()) == 8
    doc = own_doc(mode="truncated")
    c2, _ = collector(doc, tmp_path / "b", clock)
    c2.identities = c.identities  # the same agent: the eight GPUs pinned
    try:
        got = c2.collect()
    except ParseError:
        return  # cut inside a row: the cycle fails, nothing is reported lost either
    assert 0 < len(got) < 8 and all(d.health.state == "ok" for d in got)


def test_a_hung_fake_is_killed_with_its_process_group(tmp_path):
    """The fake hangs with a grandchild; the runner's deadline kills both (no timing asserted)."""
    clock = ManualClock()
    c, _ = collector(own_doc(mode="hang"), tmp_path, clock, timeout=4.0)  # time for the fake to start and hang, even on a loaded machine
    with pytest.raises(CliTimeout, match="killed its process group"):
        c.collect()
    pids_file = tmp_path / "work" / "mthreads-gmi.hung.pids"
    pids = [int(p) for p in pids_file.read_text().split()] if pids_file.exists() else []
    for pid in pids:  # bounded: a killed process is gone or a zombie once reaped by its parent
        for _ in range(50):
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                break
            if state in ("Z", "X"):
                break
            import time
            time.sleep(0.1)
        else:
            pytest.fail(f"pid {pid} of the hung fake is still running")
    c2, _ = collector(own_doc(), tmp_path / "next", clock)
    assert len(c2.collect()) == 8


# --------------------------------------------------------------------------- the contract


def test_contract_spec():
    contract.check_spec(SPEC)
    assert SPEC.pci_vendor_ids == (0x1ED5,)
    assert SPEC.resource_group("mthreads.com/vgpu")[1] == "mthreads.com/gpu"
    assert SPEC.resource_group("mthreads.com/gpu")[0].unit == "devices"
    assert SPEC.resource_group("mthreads.com/sgpu-memory")[0].unit == "slices"


def test_contract_captures():
    if not contract.captures(SPEC):
        pytest.skip("../shared/fixtures/mthreads-gmi absent")
    assert contract.check_captures(SPEC) == len(shared_fixtures(TOOL))


def test_contract_parser_fuzz(tmp_path):
    contract.check_parser_fuzz(SPEC, TOOL, seeds=[rendered(own_doc(), tmp_path),
                                                  rendered(own_doc(layout="2.3"), tmp_path, 50.0)])


def test_contract_simulation_and_quality(tmp_path):
    devices = contract.check_simulation(SPEC, tmp_path)
    contract.check_quality(SPEC, devices)
    assert len(devices) == 8


@pytest.mark.parametrize("mode", contract.FAILURE_MODES)
def test_contract_failure_isolation(mode, tmp_path):
    assert contract.uses_fake_tool(SPEC.collectors[0])
    contract.check_failure_isolation(SPEC, mode, tmp_path)


def test_profiles_give_compute_units():
    from hetero_exporter import profiles
    p = profiles.profile_for("mthreads", "MTT-S4000", kind="gpu", memory_total_bytes=48 * GIB)
    assert not p.estimated and p.compute_units == pytest.approx(100 / 312, abs=0.001)
    for raw, model in (("MTT S80", "MTT-S80"), ("MTT S3000", "MTT-S3000"), ("MTTS4000", "MTT-S4000"),
                       ("MTT S5000", "MTT-S5000")):
        assert profiles.normalize_model("mthreads", raw) == model
        assert not profiles.profile_for("mthreads", model).estimated


def test_the_package_is_importable_under_hetero_exporter_collectors():
    import importlib
    m = importlib.import_module("hetero_exporter.collectors.mthreads.gmi.collector")
    assert os.path.samefile(Path(m.__file__).parents[1], OWN_SCENARIO.parent)
