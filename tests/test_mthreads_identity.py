"""Moore Threads identities from ``mthreads-gmi -q`` (GPU UUID, Serial Number, MTBios) asked once
at first sight, PCI ids only where -q gives none, and the MUSA runtime version from the toolkit's
version.json: never the driver version."""

from __future__ import annotations

import pytest

import test_vendor_contract as contract
from test_mthreads_gmi import collector, own_doc, rendered  # noqa: F401 - the helpers of the gmi tests
from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.simulate import ManualClock

# the key names of mthreads-gmi --query --json (an 8x MTT S5000 excerpt), in -q's text form
QUERY = """Timestamp                             : Wed Jul 22 16:07:29 2026
Driver Version                        : 3.3.5-server
Attached GPUs                         : 2
GPU 00000000:2a:00.0
    Index                             : 0
    Product Name                      : MTT S5000
    Product Brand                     : MTT
    GPU UUID                          : 399282a8-ba01-1475-893c-2eeca9e302f5
    Serial Number                     : MY10YL225BF06077
    MTBios Version                    : 4.3.41
    PCI
        Bus                           : 0x2A
        Bus ID                        : 00000000:2a:00.0
GPU 00000000:3a:00.0
    Index                             : 1
    Product Name                      : MTT S5000
    GPU UUID                          : N/A
    Serial Number                     : MY10YL225BF06005
    PCI
        Bus ID                        : 00000000:3a:00.0
"""

def test_query_gives_uuid_serial_and_mtbios():
    from hetero_exporter.collectors.mthreads.gmi import query
    q = query.parse_query(QUERY)
    assert q.driver_version == "3.3.5-server"
    a, b = q.gpus
    assert (a.index, a.bus_id, a.uuid, a.serial, a.mtbios) == (
        0, "0000:2a:00.0", "399282a8-ba01-1475-893c-2eeca9e302f5", "MY10YL225BF06077", "4.3.41")
    assert (b.index, b.bus_id, b.uuid, b.serial) == (1, "0000:3a:00.0", None, "MY10YL225BF06005")

@pytest.mark.parametrize("text", ["", "garbage\n", "GPU 0\n    Index : x\n", "Index : 0\nIndex : 0\n"])
def test_bad_query_is_a_parse_error(text):
    from hetero_exporter.collectors.mthreads.gmi import query
    with pytest.raises(ParseError):
        query.parse_query(text)

def test_uuid_prefers_the_gpu_uuid_then_the_serial_then_the_pci_address():
    from hetero_exporter.collectors.mthreads.gmi import collector as C, query
    from hetero_exporter.collectors.mthreads.gmi.parse import GmiDevice
    a, b = query.parse_query(QUERY).gpus
    d = GmiDevice(index=0, name="MTT S5000", bus_id="0000:2a:00.0")
    assert C.device_uuid(d, a) == "mthreads-399282a8-ba01-1475-893c-2eeca9e302f5"
    assert C.device_uuid(d, b) == "mthreads-sn-MY10YL225BF06005"
    assert C.device_uuid(d) == "mthreads-pci-0000:2a:00.0"

def test_parse_any_reads_a_query(tmp_path):
    from hetero_exporter.collectors.mthreads.gmi import collector as C
    out = C.parse_any(QUERY)
    assert out.command == "mthreads-gmi -q" and out.data.gpus[0].serial == "MY10YL225BF06077"

def test_musa_version_json_below_the_host_root(tmp_path):
    from hetero_exporter.collectors.mthreads import versions
    assert versions.discover(str(tmp_path)).runtime_version is None
    versions.write_fake(str(tmp_path), "4.3.8")
    got = versions.discover(str(tmp_path))
    assert got.runtime_version == "4.3.8" and got.source.endswith("usr/local/musa/version.json")
    (tmp_path / "usr/local/musa/version.json").write_text("{not json")
    assert versions.discover(str(tmp_path)).runtime_version is None

def test_collector_runtime_from_version_json_never_the_driver(tmp_path):
    """Over the fake: the table prints no MUSA version; runtime_version is the host's
    version.json, and None (not the driver version) without it."""
    from hetero_exporter import registry
    from hetero_exporter.collectors.mthreads import versions
    sc = contract.write_scenario(own_doc(), tmp_path)
    entry = registry.collector_entries()["mthreads_gmi"]
    base = dict(node_name=sc.node, timeout_seconds=10.0, interval_seconds=10.0, scenario=sc,
                clock=ManualClock(), workdir=str(tmp_path / "work"))
    from hetero_exporter.sdk.contract import CollectorOptions, HostPaths
    none = registry.collector_factory(entry)(CollectorOptions(
        host=HostPaths(root=str(tmp_path / "empty"), sysfs=str(tmp_path / "no-sysfs")), **base))
    assert {d.identity.runtime_version for d in none.collect()} == {None}
    root = tmp_path / "host"
    versions.write_fake(str(root), "4.3.8")
    c = registry.collector_factory(entry)(CollectorOptions(
        host=HostPaths(root=str(root), sysfs=str(tmp_path / "no-sysfs")),
        **{**base, "workdir": str(tmp_path / "work2")}))
    got = c.collect()
    assert {d.identity.runtime_version for d in got} == {"4.3.8"}
    assert {d.identity.driver_version for d in got} == {"3.0.0"}
    assert all(d.identity.uuid.startswith("mthreads-") and not d.identity.uuid.startswith("mthreads-pci-")
               for d in got)

def test_query_failing_falls_back_to_the_pci_address(tmp_path, monkeypatch):
    from hetero_exporter.collectors.mthreads.gmi import collector as C
    c, sc = collector(own_doc(), tmp_path, ManualClock())
    monkeypatch.setattr(C.gmi_query, "parse_query", lambda text: (_ for _ in ()).throw(ParseError("mthreads-gmi", "x")))
    got = c.collect()
    assert [d.identity.uuid for d in got] == [f"mthreads-pci-{s.pci_address}" for s in sc.devices_of("mthreads")]
    assert c.calls == 2
    assert got[0].identity.serial is None
