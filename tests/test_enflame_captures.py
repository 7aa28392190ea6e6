"""Every efsmi capture in ../shared/fixtures/efsmi parsed to what its text shows (device count,
PCI addresses, memory total per device, health, processes), ``efsmi dmon``, SR-IOV VFs that
share their card's SN, the BAR apertures of ``efsmi -q`` (not device memory), and the runtime
version's sources (the TopsRider version file, else None; never the driver's)."""

from __future__ import annotations

import pytest

from conftest import shared_fixture, shared_fixtures
from hetero_exporter.model import fields as F
from hetero_exporter.model import NodeSnapshot

MIB = 1 << 20

# file -> (devices, PCI addresses (None: not printed), memory total MiB per device (None: not
# printed), health, processes (None: no process section printed))
EXPECTED = {
    "default_2x-enflame-s60_efsmi-1.2.0.301.txt": (2, ["0000:01:00.0", "0000:09:00.0"], [49120, 42976], "ok", None),
    "efsmi-default_1x-L300_efsmi-1.7.2.14_boot-fw-ver.txt": (1, ["0000:2d:00.0"], [147456], "ok", None),
    "efsmi-default_2x-S60G-SRIOV-VF_efsmi-1.6.3.12_lpm-column.txt":
        (2, ["0000:2e:00.0", "0000:2f:00.0"], [23552, 23552], "ok", None),
    "efsmi-dmon_7x-S60-class-42976MiB_banner-2024-2025_single-sample.txt": (7, [None] * 7, [42976] * 7, "ok", None),
    # efsmi -q: the model's devices, as every other output gives (no Health line printed in these:
    # health unknown); the first is cut inside DEV ID 1 (no memory size: absent)
    "efsmi-q-d-TEMP-MEMORY-USAGE-PCIE_2x-S60-c035_2024-2026-banner_bar-mem.txt":
        (2, ["0000:0c:00.0", "0000:0f:00.0"], [42976, None], "unknown", None),
    "efsmi-q-d-TEMP-MEMORY-USAGE-PCIE_2x-S60-c035_old-format_mem-size.txt":
        (2, ["0000:0c:00.0", "0000:0f:00.0"], [42976, 42976], "unknown", None),
}


def _parse_any(text):
    from hetero_exporter.collectors.enflame.efsmi.collector import parse_any
    return parse_any(text)


def test_every_capture_is_listed():
    names = {p.name for p in shared_fixtures("efsmi")}
    if not names:
        pytest.skip("no efsmi captures (../shared/fixtures/efsmi absent)")
    assert names <= set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_capture_parses_to_what_its_text_shows(name):
    count, buses, totals, health, procs = EXPECTED[name]
    got = _parse_any(shared_fixture("efsmi", name).read_text(encoding="utf-8"))
    assert isinstance(got, NodeSnapshot)  # every output, -q too, as the model's devices
    assert len(got.devices) == count
    assert [d.identity.pci_address for d in got.devices] == buses
    assert [None if F.MEMORY_TOTAL not in d.readings else d.readings[F.MEMORY_TOTAL].value
            for d in got.devices] == [None if t is None else t * MIB for t in totals]
    assert {d.health.state for d in got.devices} == {health}
    assert not any(d.processes_reported for d in got.devices) if procs is None else True
    assert len({d.identity.uuid for d in got.devices}) == count  # VFs sharing an SN too


DMON = """\
*Dev Pwr    DTemp  Sip    DUsed  Dpm     MUsed  Mem    Mclk   TxPci   RxPci
*Idx W      C      %      %      L       %      MiB    MHz    MiB/s   MiB/s
0    101    36     0.0    12.5   Sleep   84.1   42976  7000   0       0
1    N/A    37     0.0    0.0    Active  83.7   42976  7000   0       0
0    99     35     0.0    50.0   Active  84.1   42976  7000   0       0
"""


def test_dmon_columns_by_name_and_the_last_sample_of_each_device():
    from hetero_exporter.collectors.enflame.efsmi.dmon import parse_dmon
    from hetero_exporter.collectors.enflame.efsmi.parse import detect
    assert detect(DMON) == "efsmi dmon"
    a, b = parse_dmon(DMON).devices
    assert (a.index, a.power_w, a.temp_c, a.util_pct, a.dpm, a.memory_total_mib) == (0, 99, 35, 50.0, "Active", 42976)
    assert b.power_w is None  # N/A: absent
    swapped = "*Dev DTemp Pwr Mem\n*Idx C W MiB\n3 36 101 42976\n"
    (c,) = parse_dmon(swapped).devices
    assert (c.index, c.temp_c, c.power_w, c.memory_total_mib) == (3, 36, 101, 42976)  # by name, not position


def test_the_bar_apertures_are_not_device_memory():
    from hetero_exporter.collectors.enflame.efsmi.parse import parse_query
    text = ("DEV ID 0\n    Device Mem Info\n        Total Size : 42976 MiB\n        Used Size : 8684 MiB\n"
            "    BAR2 Mem Info\n        Total Size : 64 GiB\n        Used Size : 1 GiB\n")
    (d,) = parse_query(text)
    assert (d.memory_total_mib, d.memory_used_mib) == (42976, 8684)


def test_runtime_version_from_the_topsrider_file_else_none(tmp_path):
    from hetero_exporter.collectors.enflame import versions
    from hetero_exporter.collectors.enflame.efsmi.collector import identity_of
    from hetero_exporter.collectors.enflame.efsmi.parse import parse_table
    t = parse_table(_NEWER)
    assert versions.discover(str(tmp_path)).runtime_version is None
    ident = identity_of(t.devices[0], t, runtime=versions.discover(str(tmp_path)).runtime_version)
    assert ident.runtime_version is None and ident.driver_version == "1.7.2.14"  # never the driver's
    versions.write_fake(str(tmp_path), "3.4.1")
    ident = identity_of(t.devices[0], t, runtime=versions.discover(str(tmp_path)).runtime_version)
    assert ident.runtime_version == "3.4.1"


_NEWER = """\
+2026-03-06, 10:12:03 CST-----------------------------------------------------+
| EFSMI: 1.7.2.14          Driver Ver: 1.7.2.14                               |
+-----------------------------+-------------------+---------------------------+
| DEV    NAME                 | Boot FW VER       | BUS-ID      ECC           |
| TEMP   Lpm   Pwr(Usage/Cap) | Mem      GCU Virt | DUsed       SN            |
|=============================================================================|
| 0      Enflame L300         | 40.2.8.3          | 00:2d:00.0  Enable        |
| 35℃    LP1      68W / 300W  | 147456MiB Disable | 0%          A098Q50610048 |
+-----------------------------+-------------------+---------------------------+
"""
