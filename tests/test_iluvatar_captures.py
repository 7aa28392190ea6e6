"""Every ixsmi capture in ../shared/fixtures/ixsmi parsed to what its text shows (device count,
PCI addresses, memory total per device, health, processes, the IX-ML version of the title),
``ixsmi -q -x`` XML, and the runtime version's sources (the title's IX-ML version, else the
CoreX version file, else None; never the driver's)."""

from __future__ import annotations

import pytest

from conftest import shared_fixture, shared_fixtures
from hetero_exporter.model import fields as F
from hetero_exporter.sdk.contract import ParseError

MIB = 1 << 20
BI_V150 = ["0000:13:00.0", "0000:16:00.0", "0000:1c:00.0", "0000:1f:00.0", "0000:27:00.0", "0000:2a:00.0",
           "0000:34:00.0", "0000:37:00.0", "0000:3d:00.0", "0000:40:00.0", "0000:48:00.0", "0000:4b:00.0",
           "0000:54:00.0", "0000:57:00.0", "0000:64:00.0", "0000:67:00.0"]

# file -> (devices, PCI addresses (None: not printed), memory total MiB per device, health,
# processes (None: no process section), runtime version (IX-ML of the title; None: not printed))
EXPECTED = {
    "default_16x-iluvatar-bi-v150_ix-ml-4.1.0.txt": (16, BI_V150, [32768] * 16, "ok", 0, "4.1.0"),
    "ixsmi-default_1x-BI-V150S_in-k8s-pod_ix-ml-4.0.0_driver-4.1.0_cuda-NA_ix-device-plugin-readme.txt":
        (1, ["0000:8a:00.0"], [32768], "ok", 0, "4.0.0"),
    "ixsmi-default_2x-MR-V100-DUO_ix-ml-4.4.0_driver-4.4.0_wide-82col-layout_no-processes.txt":
        (2, ["0000:35:00.0", "0000:38:00.0"], [32768, 32768], "ok", 0, "4.4.0"),
    "ixsmi-q-x_2x-MR-V100_driver-4.2.0_with-processes.xml":
        (2, ["0000:0c:00.0", "0000:0f:00.0"], [32768, 32768], "ok", 2, None),
    "query-gpu-csv-noheader_mr-v50_mr-v100.csv": (2, [None, None], [16384, 32768], "ok", None, None),
    # batch of 2026-12-06: the table after a GPU reset lists 7 of 8 (00000000:21:00.0 absent); no process box
    "ixsmi-default_7x-BI-V100_ix-ml-3.0.1_driver-3.0.1_after-gpu-reset.txt":
        (7, ["0000:14:00.0", "0000:15:00.0", "0000:18:00.0", "0000:1d:00.0", "0000:1e:00.0", "0000:25:00.0",
             "0000:2d:00.0"], [32768] * 7, "ok", None, "3.0.1"),
}


def _parse_any(text):
    from hetero_exporter.collectors.iluvatar.ixsmi.collector import parse_any
    return parse_any(text)


def test_every_capture_is_listed():
    names = {p.name for p in shared_fixtures("ixsmi")}
    if not names:
        pytest.skip("no ixsmi captures (../shared/fixtures/ixsmi absent)")
    assert names <= set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_capture_parses_to_what_its_text_shows(name):
    count, buses, totals, health, procs, runtime = EXPECTED[name]
    snap = _parse_any(shared_fixture("ixsmi", name).read_text(encoding="utf-8"))
    assert len(snap.devices) == count
    assert [d.identity.pci_address for d in snap.devices] == buses
    assert [d.readings[F.MEMORY_TOTAL].value for d in snap.devices] == [t * MIB for t in totals]
    assert {d.health.state for d in snap.devices} == {health}
    if procs is None:
        assert not any(d.processes_reported for d in snap.devices)
    else:
        assert all(d.processes_reported for d in snap.devices)
        assert sum(len(d.processes) for d in snap.devices) == procs
    assert {d.identity.runtime_version for d in snap.devices} == {runtime}


XML = """<?xml version="1.0" ?>
<ixsmi_log>
  <driver_version>4.2.0</driver_version>
  <gpu id="00000000:0C:00.0">
    <product_name>Iluvatar MR-V100</product_name>
    <uuid>GPU-1ac807aa</uuid>
    <minor_number>0</minor_number>
    <pci><pci_bus_id>00000000:0C:00.0</pci_bus_id></pci>
    <memory_usage><total>32768 MiB</total><used>27780 MiB</used></memory_usage>
    <utilization><gpu_util>12 %</gpu_util></utilization>
    <temperature><gpu_temp>44 C</gpu_temp></temperature>
    <power_readings><gpu_power_draw>N/A</gpu_power_draw><current_gpu_power_limit>150 W</current_gpu_power_limit></power_readings>
    <processes><process_info><pid>4194300</pid><process_name>python3 -c x</process_name>
      <used_memory>27664 MiB</used_memory></process_info></processes>
  </gpu>
</ixsmi_log>
"""


def test_the_xml_report_by_element_names():
    from hetero_exporter.collectors.iluvatar.ixsmi.parse import detect, parse_any
    assert detect(XML) == "xml"
    out = parse_any(XML)
    (g,) = out.gpus
    assert (g.index, g.bus_id, g.uuid, g.name) == (0, "0000:0c:00.0", "GPU-1ac807aa", "Iluvatar MR-V100")
    assert (g.memory_used_bytes, g.memory_total_bytes) == (27780 * MIB, 32768 * MIB)
    assert g.utilization_ratio == pytest.approx(0.12) and g.temperature_celsius == 44
    assert (g.power_watts, g.power_limit_watts) == (None, 150)
    (p,) = out.processes
    assert (p.gpu, p.pid, p.name, p.memory_bytes) == (0, 4194300, "python3 -c x", 27664 * MIB)
    assert out.driver_version == "4.2.0" and out.ml_version is None


@pytest.mark.parametrize("bad", ['<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><ixsmi_log/>',
                                 "<nvidia_smi_log></nvidia_smi_log>", "<ixsmi_log><gpu>", "<ixsmi_log></ixsmi_log>"])
def test_bad_xml_is_a_parse_error(bad):
    from hetero_exporter.collectors.iluvatar.ixsmi.parse import parse_any
    with pytest.raises(ParseError):
        parse_any(bad)


def test_runtime_version_title_then_file_then_none(tmp_path):
    from hetero_exporter.collectors.iluvatar import versions
    from hetero_exporter.collectors.iluvatar.ixsmi.collector import identity_of
    from hetero_exporter.collectors.iluvatar.ixsmi.parse import parse_any
    out = parse_any(XML)  # no IX-ML version printed
    runtime = versions.discover(str(tmp_path)).runtime_version
    ident = identity_of(out.gpus[0], out, runtime=runtime)
    assert runtime is None and ident.runtime_version is None and ident.driver_version == "4.2.0"
    versions.write_fake(str(tmp_path), "4.2.0-rc3")
    runtime = versions.discover(str(tmp_path)).runtime_version
    assert identity_of(out.gpus[0], out, runtime=runtime).runtime_version == "4.2.0"


def test_the_title_ix_ml_version_wins_over_the_file():
    from hetero_exporter.collectors.iluvatar.ixsmi.collector import identity_of
    from hetero_exporter.collectors.iluvatar.ixsmi.parse import parse_any
    table = parse_any(shared_fixture("ixsmi", "default_16x-iluvatar-bi-v150_ix-ml-4.1.0.txt").read_text())
    assert identity_of(table.gpus[0], table, runtime="9.9").runtime_version == "4.1.0"  # the title wins


def test_the_xml_passes_the_parser_fuzz():
    import test_vendor_contract as contract
    from hetero_exporter.collectors.iluvatar import SPEC
    contract.check_parser_fuzz(SPEC, "ixsmi", seeds=[XML])
