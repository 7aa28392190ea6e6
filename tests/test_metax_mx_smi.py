"""MetaX ``mx-smi``: the real captures parsed to what their text says, the layouts of other
versions, the topology, the fake's round trip, the collector over its fake (topology cadence,
faults, a hung tool), and the vendor contract on the metax spec."""

from __future__ import annotations

import dataclasses

import pytest

import test_vendor_contract as contract
from cli_fakes import gone
from conftest import shared_fixture, shared_fixtures
from hetero_exporter import registry, vendors
from hetero_exporter.model import NodeSnapshot
from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate import scenario as scenario_mod

MIB = 1 << 20


@pytest.fixture
def metax():
    """The metax spec, registered for one test (the lead adds it to collectors.BUILTIN)."""
    from hetero_exporter.collectors.metax import SPEC
    registered = vendors.spec("metax") is not None
    if not registered:
        vendors.register(SPEC)
    try:
        yield vendors.spec("metax")
    finally:
        if not registered:
            vendors.unregister("metax")


def _parse():
    from hetero_exporter.collectors.metax.mx_smi import parse
    return parse


# --------------------------------------------------------------------------- real captures

CAPTURES = {
    # file: (tool version, KMD, MACA, BIOS, bus ids, used MiB, total MiB, power cap W, GPU-State)
    "default_8x-metax-c550_mx-smi-2.1.6.txt": (
        "2.1.6", "2.5.014", "2.23.0.1018", "1.13.4.0",
        ["0000:2a:00.0", "0000:3a:00.0", "0000:4c:00.0", "0000:5c:00.0",
         "0000:aa:00.0", "0000:ba:00.0", "0000:ca:00.0", "0000:da:00.0"], 810, 65536, None, None),
    "mx-smi-default_8x-C550_mx-smi-2.2.4_kmd-2.15.9.txt": (
        "2.2.4", "2.15.9", "2.32.0.6", "1.25.1.0",
        ["0000:0f:00.0", "0000:34:00.0", "0000:48:00.0", "0000:5a:00.0",
         "0000:87:00.0", "0000:ae:00.0", "0000:c2:00.0", "0000:d7:00.0"], 858, 65536, 450, "Available"),
}


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_default_table_captures(name):
    version, kmd, maca, bios, buses, used, total, cap, state = CAPTURES[name]
    t = _parse().parse_table(shared_fixture("mx-smi", name).read_text())
    assert (t.tool_version, t.driver_version, t.runtime_version, t.bios_version) == (version, kmd, maca, bios)
    assert t.attached == 8 and [g.index for g in t.gpus] == list(range(8))
    assert [g.bus_id for g in t.gpus] == buses
    assert all(g.memory_total_mib == total and g.memory_used_mib == used for g in t.gpus)
    assert all(g.power_cap_w == cap and g.state == state and g.util_ratio == 0.0 for g in t.gpus)
    assert t.process_section and t.processes == ()


def test_capture_values_of_one_gpu():
    t = _parse().parse_table(shared_fixture("mx-smi", "default_8x-metax-c550_mx-smi-2.1.6.txt").read_text())
    g = t.gpus[4]
    assert (g.name, g.temp_c, g.power_w, g.bus_id) == ("MXC550", 30.0, 46.0, "0000:aa:00.0")
    t = _parse().parse_table(shared_fixture("mx-smi", "mx-smi-default_8x-C550_mx-smi-2.2.4_kmd-2.15.9.txt").read_text())
    g = t.gpus[7]
    assert (g.name, g.temp_c, g.power_w, g.power_cap_w) == ("MetaX C550", 31.0, 56.0, 450.0)


def test_captures_through_parse_any(metax):
    snap = registry.parser("mx-smi")(
        shared_fixture("mx-smi", "mx-smi-default_8x-C550_mx-smi-2.2.4_kmd-2.15.9.txt").read_text())
    assert isinstance(snap, NodeSnapshot) and len(snap.devices) == 8
    d = snap.devices[0]
    assert d.identity.uuid == "metax-pci-0000:0f:00.0" and d.identity.model == "MXC550"
    assert (d.identity.driver_version, d.identity.runtime_version, d.identity.firmware_version) == \
        ("2.15.9", "2.32.0.6", "1.25.1.0")
    assert d.value("memory_total_bytes") == 65536 * MIB and d.value("memory_used_bytes") == 858 * MIB
    assert d.value("power_limit_watts") == 450 and d.health.state == "ok" and d.processes_reported


def test_topo_m_capture_gives_metaxlink():
    p = _parse()
    text = shared_fixture("mx-smi", "mx-smi-topo-m_8x-C500_mx-smi-2.2.9.txt").read_text()
    assert p.detect(text) == "mx-smi topo -m"
    topo = p.parse_topo(text)
    assert topo.gpus == tuple(range(8)) and topo.nics == {}
    mx = set(p.metaxlinks(topo))
    assert len(mx) == 24 and (0, 3) in mx and (4, 7) in mx and (0, 4) not in mx
    assert ("NODE" == dict(((a, b), w) for a, b, w in topo.links)[(0, 4)])
    assert topo.numa == {i: 0 for i in range(8)} and topo.cpus[7] == "0-31,64-95"
    assert topo.legend["MX"] == "Connection traversing MetaXLink"


def test_topo_n_capture_gpus_and_nics():
    p = _parse()
    text = shared_fixture("mx-smi", "mx-smi-topo-n_8x-C500_6-NIC_mx-smi-2.2.9.txt").read_text()
    assert p.detect(text) == "mx-smi topo -n"
    topo = p.parse_topo(text)
    assert topo.command == "mx-smi topo -n" and len(p.metaxlinks(topo)) == 24
    assert topo.nics == {f"NIC{i}": f"mlx5_{i}" for i in range(6)}
    words = {(g, n): w for g, n, w in topo.nic_links}
    assert words[(0, "NIC0")] == "PIX" and words[(4, "NIC2")] == "PIX" and words[(0, "NIC4")] == "SYS"


def test_topo_links_in_the_model(metax):
    from hetero_exporter.collectors.metax.mx_smi import collector
    topo = _parse().parse_topo(shared_fixture("mx-smi", "mx-smi-topo-m_8x-C500_mx-smi-2.2.9.txt").read_text())
    links = collector.links_of(topo, {i: f"u{i}" for i in range(8)})
    assert sorted(lk.peer for lk in links["u0"] if lk.type == "metaxlink") == ["u1", "u2", "u3"]
    assert {lk.type for lk in links["u0"]} == {"metaxlink", "numa"}
    out = registry.parser("mx-smi")(shared_fixture("mx-smi", "mx-smi-topo-n_8x-C500_6-NIC_mx-smi-2.2.9.txt").read_text())
    assert out.to_dict()["command"] == "mx-smi topo -n"


# --------------------------------------------------------------------------- other versions' layouts

V226 = """mx-smi  version: 2.2.6

=================== MetaX System Management Interface Log ===================
Timestamp                                         : Thu Sep 18 14:01:32 2025

Attached GPUs                                     : 1
+---------------------------------------------------------------------------------+
| MX-SMI 2.2.6                        Kernel Mode Driver Version: 2.16.0          |
| MACA Version: 3.0.0.8               BIOS Version: 1.26.1.0                      |
|------------------------------------+---------------------+----------------------+
| GPU     NAME         Persistence-M | Bus-id              | GPU-Util      sGPU-M |
| Temp    Pwr:Usage/Cap         Perf | Memory-Usage        | GPU-State            |
|====================================+=====================+======================|
| 0       MetaX C500             Off | 0000:38:00.0        | 0%            Native |
| 44C     71W / 350W              P9 | 986/65536 MiB       | Available            |
+------------------------------------+---------------------+----------------------+

+---------------------------------------------------------------------------------+
| Process:                                                                        |
|  GPU                    PID         Process Name                 GPU Memory     |
|                                                                  Usage(MiB)     |
|=================================================================================|
|  0                     2477         python                       128            |
+---------------------------------------------------------------------------------+
"""

# the four-column layout of 2.2.9 (rows from a published ht-smi 2.2.9 output; a C500 row and a
# GPU whose driver reports more memory used than it has, and a process name with a space)
V229 = """+---------------------------------------------------------------------------------+
| MX-SMI 2.2.9                       Kernel Mode Driver Version: 3.4.4            |
| MACA Version: 3.3.0.15             BIOS Version: 1.30.0.0                       |
|------------------+-----------------+---------------------+----------------------|
| Board       Name | GPU   Persist-M | Bus-id              | GPU-Util      sGPU-M |
| Pwr:Usage/Cap    | Temp       Perf | Memory-Usage        | GPU-State            |
|==================+=================+=====================+======================|
| 0     MetaX C500 | 0           Off | 0000:4b:00.0        | 0%          Disabled |
| 38W / 350W       | 34C          P0 | 858/65536 MiB       | Available            |
+------------------+-----------------+---------------------+----------------------+
| 1     MetaX C500 | 1           Off | 0000:4c:00.0        | N/A         Disabled |
| N/A / 350W       | N/A          P0 | 70000/65536 MiB     | Unavailable          |
+------------------+-----------------+---------------------+----------------------+

+---------------------------------------------------------------------------------+
| Process:                                                                        |
|  GPU                    PID         Process Name                 GPU Memory     |
|                                                                  Usage(MiB)     |
|=================================================================================|
|  0                  3496691         python3.10                   4066           |
|  1                   967306         python worker                N/A            |
+---------------------------------------------------------------------------------+
"""


def test_layout_2_2_6_with_persistence_and_perf():
    t = _parse().parse_table(V226)
    (g,) = t.gpus
    assert (g.index, g.name, g.persistence, g.perf, g.sgpu_mode, g.state) == (0, "MetaX C500", "Off", "P9", "Native", "Available")
    assert (g.temp_c, g.power_w, g.power_cap_w, g.memory_used_mib) == (44.0, 71.0, 350.0, 986.0)
    assert t.processes[0] == _parse().MxProcess(gpu=0, pid=2477, name="python", memory_mib=128.0)


def test_layout_2_2_9_four_columns_and_faults(metax):
    from hetero_exporter.collectors.metax.mx_smi import collector
    t = _parse().parse_table(V229)
    g0, g1 = t.gpus
    assert (g0.board, g0.index, g0.name, g0.bus_id, g0.temp_c, g0.perf) == (0, 0, "MetaX C500", "0000:4b:00.0", 34.0, "P0")
    assert (g1.util_ratio, g1.temp_c, g1.power_w, g1.power_cap_w) == (None, None, None, 350.0)
    assert set(g1.na_fields) == {"util", "temp", "power"} and g1.state == "Unavailable"
    assert [p.name for p in t.processes] == ["python3.10", "python worker"] and t.processes[1].memory_mib is None
    snap = collector.table_snapshot(t)
    d1 = snap.devices[1]
    used = d1.readings["memory_used_bytes"]
    assert used.value is None and used.quality.status == "error"  # used above total: no negative free
    assert d1.value("memory_total_bytes") == 65536 * MIB
    assert d1.readings["temperature_core_celsius"].quality.status == "unsupported"
    codes = {f.code for f in d1.faults}
    assert codes == {"gpu-state", "readings-na", "memory-above-total"} and d1.health.state == "failed"
    assert snap.devices[0].health.state == "ok" and snap.devices[0].identity.runtime_version == "3.3.0.15"


@pytest.mark.parametrize("text", ["", "garbage\n", "| a | b |\n", "+---+\n| Bus-id |\n+---+\n",
                                  V226.replace("0000:38:00.0", "zz:38"), V226.replace("986/65536", "986/65536/1")])
def test_garbage_is_a_one_line_parse_error(metax, text):
    with pytest.raises(ParseError) as e:
        registry.parser("mx-smi")(text)
    assert str(e.value).startswith("mx-smi") and "\n" not in str(e.value)


# --------------------------------------------------------------------------- the fake


def _scenario(**settings):
    from hetero_exporter.collectors.metax import SPEC
    sc = scenario_mod.load(str(SPEC.data_path("scenario.yaml")))
    return dataclasses.replace(sc, settings={"metax": settings}) if settings else sc


@pytest.mark.parametrize("layout", ["2.1.6", "2.2.4", "2.2.6", "2.2.9"])
def test_render_parse_round_trip(metax, layout):
    from hetero_exporter.collectors.metax.mx_smi import fake
    sc = _scenario(layout=layout)
    status, out, _ = fake.answer(sc, 42.0, [])
    assert status == 0
    t = _parse().parse_table(out)
    devs = sc.devices_of("metax")
    assert [g.bus_id for g in t.gpus] == [d.pci_address for d in devs]
    assert all(g.memory_total_mib == 65536 for g in t.gpus) and t.runtime_version == "2.32.0.6"
    assert t.driver_version == "2.15.9" and t.bios_version == "1.25.1.0"
    for g, d in zip(t.gpus, devs):
        assert g.util_ratio == pytest.approx(d.value("utilization_ratio", 42.0), abs=0.005)
        assert g.memory_used_mib == pytest.approx(d.value("memory_used_bytes", 42.0) / MIB, abs=0.5)
    assert len(t.processes) == 16 and {p.pid for p in t.processes if p.gpu == 1} == {6200, 6201}
    topo = _parse().parse_topo(fake.answer(sc, 0.0, ["topo", "-m"])[1])
    assert len(_parse().metaxlinks(topo)) == 24 and topo.numa[5] == 1


def test_collector_over_its_fake(metax, tmp_path):
    """The summary every cycle; mx-smi -L once at first sight (the uuids); topo -m at start and
    then every topo_interval seconds; a GPU that stops being listed is failed under its uuid;
    the fake's N/A and state faults."""
    doc = contract.scenario_doc(metax)
    doc["faults"] = [*(doc.get("faults") or []),
                     {"at": 100, "vendor": "metax", "index": 2, "kind": "missing"},
                     {"at": 100, "vendor": "metax", "index": 3, "kind": "state", "until": 200}]
    sc = contract.write_scenario(doc, tmp_path)
    clock = ManualClock()
    opts = contract.options(sc, tmp_path, clock)
    opts = dataclasses.replace(opts, settings={**opts.settings, "topo_interval": 300})
    c = registry.collector_factory(registry.collector_entries()["mx_smi"])(opts)
    assert c.calls == 1  # topo -m at start
    first = [d for d in c.collect() if d.identity.vendor == "metax"]
    assert c.calls == 3 and len(first) == 8  # the table + mx-smi -L at first sight
    d0 = first[0]
    want = {d.index: d.uuid for d in sc.devices_of("metax")}
    assert {d.identity.index: d.identity.uuid for d in first} == want  # the round trip through -L
    assert d0.identity.uuid.startswith("GPU-") and d0.identity.model == "MXC500"
    assert d0.identity.runtime_version == "2.32.0.6" and d0.identity.numa_node == 0
    assert first[5].identity.numa_node == 1  # topo's Node Affinity (no sysfs here)
    mx = [lk for lk in d0.links if lk.type == "metaxlink"]
    assert sorted(lk.peer for lk in mx) == sorted(d.identity.uuid for d in first[1:4])
    assert {p.pid for p in d0.processes} == {6100, 6101} and d0.processes[0].memory_bytes == 30 * (1 << 30)
    clock.set_t(150)
    later = {d.identity.index: d for d in c.collect()}
    assert c.calls == 4  # topo not due yet, -L not asked again
    assert later[2].health.state == "failed" and later[2].faults[0].code == "missing"
    assert later[2].identity.uuid == first[2].identity.uuid
    assert later[3].health.state == "failed" and later[3].faults[0].code == "gpu-state"
    clock.set_t(320)
    c.collect()
    assert c.calls == 6  # summary + the topo refresh


def test_hung_fake_times_out_cleanly(metax, tmp_path):
    """mx-smi hanging: the call is killed at the cycle's deadline (process group included) and
    the collection raises instead of blocking."""
    doc = contract.scenario_doc(metax)
    doc["settings"] = {**(doc.get("settings") or {}), "metax": {"mode": "hang"}}
    sc = contract.write_scenario(doc, tmp_path)
    opts = contract.options(sc, tmp_path, ManualClock(), timeout=4.0)  # time for the fake to start and hang, even on a loaded machine
    c = registry.collector_factory(registry.collector_entries()["mx_smi"])(opts)
    with pytest.raises(Exception) as e:
        c.collect()
    assert not isinstance(e.value, AssertionError)
    pids = (tmp_path / "mx-smi.hung.pids").read_text().split()
    for pid in pids:  # both the fake and its grandchild are gone (or zombies reaped by init)
        assert gone(int(pid)), f"pid {pid} survived the deadline"


def test_parse_command(metax, tmp_path, capsys):
    from hetero_exporter import cli
    from hetero_exporter.model import snapshot_from_json
    capture = shared_fixture("mx-smi", "default_8x-metax-c550_mx-smi-2.1.6.txt")
    assert cli.main(["parse", "mx-smi", str(capture), "--json"]) == 0
    snap = snapshot_from_json(capsys.readouterr().out)
    assert [d.identity.pci_address for d in snap.devices][:2] == ["0000:2a:00.0", "0000:3a:00.0"]
    topo = shared_fixture("mx-smi", "mx-smi-topo-m_8x-C500_mx-smi-2.2.9.txt")
    assert cli.main(["parse", "mx-smi", str(topo), "--json"]) == 0
    assert "metaxlink" in capsys.readouterr().out
    bad = tmp_path / "bad.txt"
    bad.write_text("hello\n")
    assert cli.main(["parse", "mx-smi", str(bad)]) != 0


# --------------------------------------------------------------------------- the contract


def test_contract_spec(metax):
    contract.check_spec(metax)
    assert metax.pci_vendor_ids == (0x9999,) and metax.kind == "gpu"
    assert metax.resource_group("metax-tech.com/sgpu")[1] == "metax-tech.com/gpu"
    assert metax.resource_group("metax-tech.com/gpu")[0].unit == "devices"


def test_contract_captures(metax):
    if not contract.captures(metax):
        pytest.skip("../shared/fixtures/mx-smi absent")
    assert contract.check_captures(metax) == len(shared_fixtures("mx-smi"))


def test_contract_parser_fuzz(metax):
    from hetero_exporter.collectors.metax.mx_smi import fake
    seeds = [V226, V229, fake.answer(_scenario(layout="2.2.9"), 5.0, [])[1],
             fake.answer(_scenario(), 5.0, ["topo", "-n"])[1]]
    contract.check_parser_fuzz(metax, "mx-smi", seeds=seeds)


def test_contract_simulation_and_quality(metax, tmp_path):
    devices = contract.check_simulation(metax, tmp_path)
    contract.check_quality(metax, devices)


@pytest.mark.parametrize("mode", contract.FAILURE_MODES)
def test_contract_failure_isolation(metax, mode, tmp_path):
    assert contract.uses_fake_tool(metax.collectors[0])
    contract.check_failure_isolation(metax, mode, tmp_path)


def test_profiles(metax):
    from hetero_exporter import profiles
    for name, model in (("MetaX C500", "MXC500"), ("MXC550", "MXC550"), ("MetaX C550", "MXC550"), ("MetaX N260", "MXN260")):
        assert profiles.normalize_model("metax", name) == model
    p = profiles.profile_for("metax", "MXC500", kind="gpu", memory_total_bytes=64 << 30)
    assert not p.estimated and p.compute_units == pytest.approx(280 / 312, abs=0.01)
