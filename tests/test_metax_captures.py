"""Every real ``mx-smi`` capture parsed to what its text shows (device count, bus ids, memory
total per GPU, health, processes), the ``-L`` list and its UUIDs, and the MACA runtime
version: from the title where it prints a number, else the install's Version.txt, never the
driver version."""

from __future__ import annotations

import pytest

from tests.conftest import shared_fixture, shared_fixtures
from test_metax_mx_smi import metax  # noqa: F401 - the fixture registering the spec

MIB = 1 << 20
TOOL = "mx-smi"

C550_216 = ["0000:2a:00.0", "0000:3a:00.0", "0000:4c:00.0", "0000:5c:00.0",
            "0000:aa:00.0", "0000:ba:00.0", "0000:ca:00.0", "0000:da:00.0"]
C550_224 = ["0000:0f:00.0", "0000:34:00.0", "0000:48:00.0", "0000:5a:00.0",
            "0000:87:00.0", "0000:ae:00.0", "0000:c2:00.0", "0000:d7:00.0"]
C500_229 = ["0000:0e:00.0", "0000:0f:00.0", "0000:10:00.0", "0000:12:00.0",
            "0000:35:00.0", "0000:36:00.0", "0000:37:00.0", "0000:38:00.0"]
MXC500_4 = ["0000:05:00.0", "0000:08:00.0", "0000:0e:00.0", "0000:0f:00.0"]

# device outputs: file -> (kind, bus ids, memory total MiB of every GPU, health of every GPU,
#                          processes (gpu, pid, memory MiB) or None where the output has no process table,
#                          runtime version as the title prints it)
# topology outputs: file -> ("topo", GPUs in the matrix, MetaXLink (MX) ordered pairs, NICs)
EXPECTED = {
    "default_8x-metax-c550_mx-smi-2.1.6.txt": ("table", C550_216, 65536, "ok", [], "2.23.0.1018"),
    "mx-smi-default_1x-C500_mx-smi-2.3.1_kmd-3.8.30_maca-3.7.1.5_end-of-log.txt":
        ("table", ["0000:12:00.0"], 65536, "ok", [], "3.7.1.5"),
    "mx-smi-default_1x-C550_in-k8s-pod_mx-smi-2.1.12_maca-unknown_pwr-cap-NA_end-of-log.txt":
        ("table", ["0000:2a:00.0"], 65536, "ok", [], None),  # "MACA Version: unknown"
    "mx-smi-default_4x-MXC500_mx-smi-2.1.6_kmd-2.5.014_vllm-tp4-processes.txt":
        ("table", MXC500_4, 65536, "ok",
         [(0, 15652, 60032), (1, 22854, 59584), (2, 22945, 59584), (3, 23034, 59584)], "2.23.0.1018"),
    "mx-smi-default_4x-MXC500_mx-smi-2.1.6_under-load-36pct_6-digit-pids_no-version-line.txt":
        ("table", MXC500_4, 65536, "ok",
         [(0, 343683, 59328), (1, 350950, 58880), (2, 351042, 58880), (3, 351132, 58880)], "2.23.0.1018"),
    "mx-smi-default_8x-C500_mx-smi-2.2.9_kmd-3.4.4_board-persist-sgpu-layout_no-version-line.txt":
        ("table", C500_229, 65536, "ok", [], "3.3.0.15"),
    "mx-smi-default_8x-C550_mx-smi-2.2.4_kmd-2.15.9.txt": ("table", C550_224, 65536, "ok", [], "2.32.0.6"),
    # vram total 67108864 KB (KiB) = 65536 MiB; the report has no process table and no state
    "mx-smi-show-temperature-usage-memory_1x-N260_mx-smi-2.2.6.txt":
        ("report", ["0000:0f:00.0"], 65536, "ok", None, None),
    "mx-smi-show-temperature-usage-memory_2x-N260_mx-smi-2.2.12.txt":
        ("report", ["0000:19:00.0", "0000:1a:00.0"], 65536, "ok", None, None),
    "mx-smi-show-temperature-usage-memory_2x-N260_mx-smi-2.3.4.txt":
        ("report", ["0000:0c:00.0", "0000:0f:00.0"], 65536, "ok", None, None),
    "mx-smi-topo-m_4x-MXC500_mx-smi-2.1.6_all-MetaXLink_no-ETH-legend.txt": ("topo", 4, 12, 0),
    "mx-smi-topo-m_8x-C500_mx-smi-2.2.9.txt": ("topo", 8, 24, 0),
    "mx-smi-topo-n_8x-C500_6-NIC_mx-smi-2.2.9.txt": ("topo", 8, 24, 6),
}


def test_every_capture_is_listed():
    assert {p.name for p in shared_fixtures(TOOL)} <= set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_capture_parses_to_what_its_text_shows(metax, name):
    from hetero_exporter.collectors.metax.mx_smi import collector as C
    from hetero_exporter.model import NodeSnapshot
    text = shared_fixture(TOOL, name).read_text(encoding="utf-8")
    want = EXPECTED[name]
    got = C.parse_any(text)
    if want[0] == "topo":
        _, gpus, mx, nics = want
        topo = got.data
        assert len(topo.gpus) == gpus and len(C.parse_topo(text).links) == gpus * (gpus - 1)
        assert sum(1 for _, _, w in topo.links if w == "MX") == mx and len(topo.nics) == nics
        return
    kind, buses, total_mib, health, procs, runtime = want
    assert isinstance(got, NodeSnapshot)
    assert [d.identity.pci_address for d in got.devices] == buses
    assert [d.identity.index for d in got.devices] == list(range(len(buses)))
    assert all(d.value("memory_total_bytes") == total_mib * MIB for d in got.devices)
    assert all(d.health.state == health for d in got.devices)
    # no UUID in these outputs: the id is the PCI address
    assert [d.identity.uuid for d in got.devices] == [f"metax-pci-{b}" for b in buses]
    if procs is None:
        assert not any(d.processes_reported for d in got.devices)
    else:
        seen = sorted((d.identity.index, p.pid, p.memory_bytes // MIB) for d in got.devices for p in d.processes)
        assert seen == sorted(procs) and all(d.processes_reported for d in got.devices)
    if kind == "table":
        assert {d.identity.runtime_version for d in got.devices} == {runtime}
        assert all(d.identity.runtime_version != d.identity.driver_version for d in got.devices)


def test_the_report_reads_memory_use_and_the_hotspot(metax):
    from hetero_exporter.collectors.metax.mx_smi import collector as C
    snap = C.parse_any(shared_fixture(TOOL, "mx-smi-show-temperature-usage-memory_2x-N260_mx-smi-2.2.12.txt")
                       .read_text(encoding="utf-8"))
    d0, d1 = snap.devices
    assert d0.value("memory_used_bytes") == 60917480 * 1024 and d1.value("memory_used_bytes") == 2409888 * 1024
    assert (d0.value("temperature_core_celsius"), d1.value("temperature_core_celsius")) == (38.0, 37.5)
    assert d0.value("utilization_ratio") == 0.0 and d0.identity.model == "MXN260"
    # 2.2.6 prints a degree sign
    one = C.parse_any(shared_fixture(TOOL, "mx-smi-show-temperature-usage-memory_1x-N260_mx-smi-2.2.6.txt")
                      .read_text(encoding="utf-8"))
    assert one.devices[0].value("temperature_core_celsius") == 44.0


# --------------------------------------------------------------------------- mx-smi -L

LIST = ("mx-smi  version: 2.2.9\n"
        "GPU#0    MXC500      0000:08:00.0   Available (UUID: GPU-e702f06b-bbd6-bc06-5196-90a5554a24ba)\n"
        "GPU#1    MXC550      0000:2b:00.0   Not Available(MetaX Sysfs File Unaccessible)\n"
        "GPU#7    MXC500      0000:3c:00.0   Available (UUID: GPU-0e715b45-bcef-1500-e2db-752724095700)\n")


def test_the_gpu_list_gives_uuids_where_printed():
    from hetero_exporter.collectors.metax.mx_smi import listing
    got = listing.parse_list(LIST)
    assert [(g.index, g.bus_id, g.state) for g in got] == [
        (0, "0000:08:00.0", "Available"), (1, "0000:2b:00.0", "Not Available"), (7, "0000:3c:00.0", "Available")]
    assert [g.uuid for g in got] == ["GPU-e702f06b-bbd6-bc06-5196-90a5554a24ba", None,
                                     "GPU-0e715b45-bcef-1500-e2db-752724095700"]


def test_the_gpu_list_through_parse_any(metax):
    from hetero_exporter.collectors.metax.mx_smi import collector as C
    out = C.parse_any(LIST)
    assert out.command == "mx-smi -L" and out.data[2]["uuid"].startswith("GPU-0e715b45")


def test_uuid_from_the_list_else_the_pci_address():
    from hetero_exporter.collectors.metax.mx_smi import collector as C, listing
    g = listing.parse_list(LIST)[1]
    assert C.gpu_uuid(g, "GPU-ab") == "GPU-ab" and C.gpu_uuid(g, "ab-cd") == "GPU-ab-cd"
    assert C.gpu_uuid(g) == "metax-pci-0000:2b:00.0"


# --------------------------------------------------------------------------- runtime version


def test_maca_version_file_below_the_host_root(tmp_path):
    from hetero_exporter.collectors.metax import versions
    assert versions.discover(str(tmp_path)).runtime_version is None
    versions.write_fake(str(tmp_path), "3.3.0.15")
    got = versions.discover(str(tmp_path))
    assert got.runtime_version == "3.3.0.15" and got.source.endswith("opt/maca/Version.txt")


def test_runtime_version_is_the_install_file_where_the_title_says_unknown(metax, tmp_path):
    """The in-pod capture prints 'MACA Version: unknown': the runtime version is the install's
    Version.txt, else None; never the Kernel Mode Driver Version, never ''."""
    from hetero_exporter.collectors.metax import versions
    from hetero_exporter.collectors.metax.mx_smi import collector as C
    name = "mx-smi-default_1x-C550_in-k8s-pod_mx-smi-2.1.12_maca-unknown_pwr-cap-NA_end-of-log.txt"
    t = C.parse_table(shared_fixture(TOOL, name).read_text(encoding="utf-8"))
    assert t.runtime_version is None and t.driver_version == "2.12.13"
    assert C.identity_of(t.gpus[0], t).runtime_version is None
    assert C.identity_of(t.gpus[0], t, runtime="3.1.0.14").runtime_version == "3.1.0.14"
    versions.write_fake(str(tmp_path), "3.1.0.14")
    assert C.identity_of(t.gpus[0], t, runtime=versions.discover(str(tmp_path)).runtime_version
                         ).runtime_version == "3.1.0.14"
    # the title's number wins over the file
    named = C.parse_table(shared_fixture(TOOL, "mx-smi-default_8x-C550_mx-smi-2.2.4_kmd-2.15.9.txt")
                          .read_text(encoding="utf-8"))
    assert C.identity_of(named.gpus[0], named, runtime="9.9").runtime_version == "2.32.0.6"


def test_collector_asks_the_list_once_and_keeps_uuids_of_a_lost_gpu(metax, tmp_path):
    """Over the fake: -L at first sight only, the scenario's uuids round-trip, a GPU that
    disappears stays under its GPU- uuid; MACA 'unknown' in the title -> the host's Version.txt."""
    import dataclasses
    import test_vendor_contract as contract
    from hetero_exporter import registry
    from hetero_exporter.collectors.metax import versions
    from hetero_exporter.sdk.contract import HostPaths
    from hetero_exporter.simulate import ManualClock
    doc = contract.scenario_doc(metax)
    for group in doc["devices"]:
        if group.get("vendor") == "metax":
            group.setdefault("extra", {})["maca_version"] = "unknown"
    doc["faults"] = [*(doc.get("faults") or []), {"at": 100, "vendor": "metax", "index": 6, "kind": "missing"}]
    sc = contract.write_scenario(doc, tmp_path)
    root = tmp_path / "host"
    versions.write_fake(str(root), "3.1.0.14")
    clock = ManualClock()
    opts = contract.options(sc, tmp_path, clock)
    opts = dataclasses.replace(opts, settings={**opts.settings, "topo_interval": 0}, host=HostPaths(root=str(root)))
    c = registry.collector_factory(registry.collector_entries()["mx_smi"])(opts)
    first = {d.identity.index: d for d in c.collect() if d.identity.vendor == "metax"}
    assert c.calls == 2  # the table and -L
    assert {i: d.identity.uuid for i, d in first.items()} == {d.index: d.uuid for d in sc.devices_of("metax")}
    assert {d.identity.runtime_version for d in first.values()} == {"3.1.0.14"}
    assert {d.identity.driver_version for d in first.values()} != {"3.1.0.14"}
    clock.set_t(150)
    later = {d.identity.index: d for d in c.collect() if d.identity.vendor == "metax"}
    assert c.calls == 3  # -L not asked again
    assert later[6].health.state == "failed" and later[6].identity.uuid == first[6].identity.uuid
    assert later[6].identity.uuid.startswith("GPU-")
