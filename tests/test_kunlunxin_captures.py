"""Every xpu-smi capture in ../shared/fixtures/xpu-smi parsed to what its text shows (device
count, PCI addresses, memory total per device, health, processes, the runtime version of the
title), the xpu-smi 5.x box (P800 class) and ``-q`` layouts, and the runtime version's
sources (the tool's title, else the XRE version file, else None; never the driver's)."""

from __future__ import annotations

import pytest

from conftest import shared_fixture, shared_fixtures
from hetero_exporter.model import fields as F
from hetero_exporter.sdk.contract import ParseError

MIB = 1 << 20
P800 = ["0000:52:00.0", "0000:55:00.0", "0000:63:00.0", "0000:66:00.0",
        "0000:9a:00.0", "0000:9b:00.0", "0000:aa:00.0", "0000:ab:00.0"]

# file -> (devices, PCI addresses in order, memory total MiB each, health, processes (None:
# no process section printed), runtime version as the title prints it (None: N/A or absent))
EXPECTED = {
    "xpu-smi-default_4x-P800-OAM_driver-reported-515.58_one-busy_WEAK.txt":
        (4, ["0000:03:00.0", "0000:16:00.0", "0000:1c:00.0", "0000:2e:00.0"], 98304, "ok", None, None),
    "xpu-smi-default_8x-P800-OAM_driver-5.0.21.26_blank-spacer-line.txt": (8, P800, 98304, "ok", 0, "5.0.21"),
    "xpu-smi-default_8x-P800-OAM_in-container_driver-reported-515.58_xpu-rt-NA_GI-header.txt":
        (8, P800, 98304, "ok", 0, None),
    "xpu-smi-q-id_P800-PCIe_driver-5.0.21.26_single-xpu-block_of-2.txt": (1, ["0000:01:00.0"], 98304, "ok", 0, "10.2"),
    "xpu_smi-default_2x-R200_aarch64_runtime-4.0_one-busy.txt":
        (2, ["0000:03:00.0", "0001:03:00.0"], 13568, "ok", 0, "4.0"),
    "xpu_smi-default_4x-K200-dual-die_runtime-4.0_old-layout-no-state.txt":
        (4, ["0000:06:00.0", "0000:06:00.0", "0001:03:00.0", "0001:03:00.0"], 8064, "ok", 0, "4.0"),
    "xpu_smi-default_4x-K200_runtime-4.0_state-power-temp-fw-cpld-columns.txt":
        (4, ["0000:86:00.0", "0000:86:00.0", "0000:af:00.0", "0000:af:00.0"], 8064, "ok", None, "4.0"),
    "xpu_smi-default_R200-plus-K100-mixed_runtime-4.0_state-column_with-processes-table.txt":
        (2, ["0000:01:00.0", "0000:06:00.0"], [16384, 8064], "ok", 0, "4.0"),
    "xpu_smi_2x-kunlunxin-r300.txt": (2, ["0000:53:00.0", "0000:56:00.0"], 32768, "ok", 0, "4.31"),
}


def _parse_any(text):
    from hetero_exporter.collectors.kunlunxin.xpu_smi.collector import parse_any
    return parse_any(text)


def test_every_capture_is_listed():
    names = {p.name for p in shared_fixtures("xpu-smi")}
    if not names:
        pytest.skip("no xpu-smi captures (../shared/fixtures/xpu-smi absent)")
    assert names <= set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_capture_parses_to_what_its_text_shows(name):
    count, buses, totals, health, procs, runtime = EXPECTED[name]
    snap = _parse_any(shared_fixture("xpu-smi", name).read_text(encoding="utf-8"))
    assert len(snap.devices) == count
    assert [d.identity.pci_address for d in snap.devices] == buses
    totals = totals if isinstance(totals, list) else [totals] * count
    assert [d.readings[F.MEMORY_TOTAL].value for d in snap.devices] == [t * MIB for t in totals]
    assert {d.health.state for d in snap.devices} == {health}
    if procs is None:
        assert not any(d.processes_reported for d in snap.devices)
    else:
        assert all(d.processes_reported for d in snap.devices)
        assert sum(len(d.processes) for d in snap.devices) == procs
    assert {d.identity.runtime_version for d in snap.devices} == {runtime}
    assert len({d.identity.uuid for d in snap.devices}) == count  # K200 chip pairs too


# --------------------------------------------------------------------------- xpu-smi 5.x box

BOX = """\
+-----------------------------------------------------------------------------+
| XPU-SMI               Driver Version: 5.0.21.26    XPU-RT Version: 5.0.21   |
|-------------------------------+----------------------+----------------------+
| XPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | XPU-Util  Compute M. |
|                               |             L3-Usage |            SR-IOV M. |
|===============================+======================+======================|
|   0  P800 OAM           N/A   | 00000000:52:00.0 N/A |                    2 |
| N/A   38C  N/A     85W / 400W |  31058MiB / 98304MiB |     37%      Default |
|                               |     12MiB /    96MiB |             Disabled |
+-------------------------------+----------------------+----------------------+
|   1  P800 OAM           N/A   | 00000000:55:00.0 N/A |                  N/A |
| N/A   40C  N/A       N/A / N/A|      0MiB / 98304MiB |      0%      Default |
|                               |      N/A             |             Disabled |
+-------------------------------+----------------------+----------------------+

+-----------------------------------------------------------------------------+
| Processes:                                                                  |
|  XPU   XI   CI        PID   Type   Process name                  XPU Memory |
|        ID   ID                                                   Usage      |
|=============================================================================|
|    0  N/A  N/A     423011      C   python train.py                 31000MiB |
+-----------------------------------------------------------------------------+
"""


def test_the_5x_box_is_read_by_its_header_names():
    from hetero_exporter.collectors.kunlunxin.xpu_smi.parse import detect, parse
    assert detect(BOX) == "xpu-smi box"
    t = parse(BOX)
    assert (t.driver_version, t.runtime_version) == ("5.0.21.26", "5.0.21")
    a, b = t.devices
    assert (a.index, a.bus_id, a.model) == (0, "0000:52:00.0", "P800 OAM")
    assert (a.memory_used_bytes, a.memory_total_bytes) == (31058 * MIB, 98304 * MIB)
    assert (a.l3_used_bytes, a.l3_total_bytes) == (12 * MIB, 96 * MIB)
    assert (a.power_watts, a.power_limit_watts, a.temperature_celsius) == (85, 400, 38)
    assert a.utilization_ratio == pytest.approx(0.37) and a.ecc_uncorrected == 2
    assert (b.power_watts, b.power_limit_watts, b.ecc_uncorrected, b.l3_total_bytes) == (None, None, None, None)
    (p,) = t.processes
    assert (p.index, p.pid, p.command, p.memory_bytes) == (0, 423011, "python train.py", 31000 * MIB)
    snap = _parse_any(BOX)
    d0 = snap.devices[0]
    assert d0.readings["l3_used_bytes"].value == 12 * MIB  # the vendor-local L3 reading
    assert d0.readings[F.POWER_LIMIT].value == 400 and d0.readings[F.ECC_UNCORRECTED].value == 2
    assert [len(d.processes) for d in snap.devices] == [1, 0]


def test_a_cut_5x_box_is_a_parse_error():
    from hetero_exporter.collectors.kunlunxin.xpu_smi.parse import parse
    cut = "\n".join(BOX.splitlines()[:10])
    with pytest.raises(ParseError):
        parse(cut)


# --------------------------------------------------------------------------- runtime version

R300 = """\
Runtime Version: 4.31
Driver Version: 4.0
  DEVICES
-------------------------------------------------------------------------------------------
| DevID |   PCI Addr   | Model |   SN   |    INODE   | UseRate |    L3     |    Memory    |
-------------------------------------------------------------------------------------------
|     0 | 0000:53:00.0 | R300  | 02Kxxx | /dev/xpu0  |     0 % | 0 / 63 MB | 0 / 32768 MB |
-------------------------------------------------------------------------------------------
"""


def _identity(text, host_root):
    from hetero_exporter.collectors.kunlunxin import versions
    from hetero_exporter.collectors.kunlunxin.xpu_smi.collector import identity_of
    from hetero_exporter.collectors.kunlunxin.xpu_smi.parse import parse
    t = parse(text)
    return identity_of(t.devices[0], t, "u", runtime=versions.discover(str(host_root)).runtime_version)


def test_runtime_version_title_then_file_then_none(tmp_path):
    from hetero_exporter.collectors.kunlunxin import versions
    na = BOX.replace("XPU-RT Version: 5.0.21  ", "XPU-RT Version: N/A     ")
    ident = _identity(na, tmp_path)
    assert ident.runtime_version is None and ident.driver_version == "5.0.21.26"  # never the driver's
    versions.write_fake(str(tmp_path), "5.0.21.21")
    assert _identity(na, tmp_path).runtime_version == "5.0.21.21"  # the XRE version file
    assert _identity(BOX, tmp_path).runtime_version == "5.0.21"  # the title wins
    assert _identity(R300, tmp_path).runtime_version == "4.31"
    assert versions.discover(str(tmp_path / "nothing")).runtime_version is None


def test_the_box_and_query_layouts_pass_the_parser_fuzz():
    import test_vendor_contract as contract
    from hetero_exporter.collectors.kunlunxin import SPEC
    query = ("==============XPUSMI LOG==============\n\nDriver Version : 5.0.21.26\nXPU-RT Version : 10.2\n"
             "XPU 00000000:01:00.0\n    Product Name : P800 PCIe\n    Minor Number : 0\n    Memory Usage\n"
             "        Total : 98304 MiB\n        Used : 0 MiB\n    Processes : None\n")
    for _ in range(3):  # more examples over the new layouts than one run gives them
        contract.check_parser_fuzz(SPEC, "xpu-smi", seeds=[BOX, query])
