"""``parse nvidia-smi`` on every capture of the folder, whichever layout it is (the default
table, ``topo -m``, ``-L``, ``dmon``, ``pmon`` and the ``-q -x`` / ``-q`` / CSV reports), with
the numbers read from each capture's text; the layouts' structure on synthetic text; fuzz of
each layout reader (a result or a ParseError, nothing else)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hetero_exporter import cli
from hetero_exporter.model import fields as F
from hetero_exporter.collectors.nvidia import common as C
from hetero_exporter.collectors.nvidia.nvidia_smi import dmon, listing, mig_listing, nvlink_status, pmon, table, topo
from hetero_exporter.collectors.nvidia.nvidia_smi.collector import layout, parse
from hetero_exporter.model import snapshot_to_json
from hetero_exporter.sdk.contract import ParseError
from tests.conftest import shared_fixture, shared_fixtures

MIB = 1 << 20
TOOL = "nvidia-smi"


def _bus(*ids):
    return [f"0000:{b}" for b in ids]


# capture -> (layout, GPUs (top-level devices), PCI address per GPU (None: not shown),
#             memory total MiB per GPU (None: not shown), MIG children, health per GPU,
#             processes as (GPU index, pid, memory MiB or None))
EXPECTED = {
    # the default table
    "default_8x-h100-sxm_565.57.01.txt": (
        "table", 8, _bus("18:00.0", "2a:00.0", "3a:00.0", "5d:00.0", "9a:00.0", "ab:00.0", "ba:00.0", "db:00.0"),
        [81559] * 8, 0, ["ok"] * 8, []),
    "nvidia-smi-default_8x-B200_570.158.01_cuda-12.9_1000W.txt": (
        "table", 8, _bus("1b:00.0", "43:00.0", "52:00.0", "61:00.0", "9d:00.0", "c3:00.0", "d1:00.0", "df:00.0"),
        [183359] * 8, 0, ["ok"] * 8, []),
    "nvidia-smi-default_8x-H200_580.95.05_cuda-13.0_under-load_truncated-process-memory.txt": (
        "table", 8, _bus("59:00.0", "5a:00.0", "72:00.0", "73:00.0", "8b:00.0", "8c:00.0", "a4:00.0", "a5:00.0"),
        [143771] * 8, 0, ["ok"] * 8,
        # GPUs 4-7: "13583..." (R580 truncates the column): not a value, absent
        [(0, 969852, 87186), (1, 970554, 97264), (2, 970556, 90582), (3, 970553, 90102),
         (4, 972057, None), (5, 972058, None), (6, 972027, None), (7, 972028, None)]),
    # topo -m, -L, dmon, pmon: no PCI address, no memory total, health not shown
    "nvidia-smi-topo-m_8x-B200_16-NICs_570.158.01_missing-tab-quirk-at-NIC8-NIC9.txt": (
        "topo", 8, [None] * 8, [None] * 8, 0, ["unknown"] * 8, []),
    "nvidia-smi-topo-m_8x-B300-SXM6_590.44.01_9-NICs-bond_ansi-residue-ESC-stripped.txt": (
        "topo", 8, [None] * 8, [None] * 8, 0, ["unknown"] * 8, []),
    "topo-m_1x-h100-mig_ansi-escapes.txt": ("topo", 1, [None], [None], 0, ["unknown"], []),
    "list-L_h100-mig-devices.txt": ("list", 1, [None], [None], 4, ["unknown"], []),
    "dmon-c5_h100-80gb-hbm3_590.48.01_load.txt": ("dmon", 1, [None], [None], 0, ["unknown"], []),
    "dmon-c5_h100-mig_590.48.01_load.txt": ("dmon", 1, [None], [None], 0, ["unknown"], []),
    "dmon-d5_8gpu_a800-class.txt": ("dmon", 8, [None] * 8, [None] * 8, 0, ["unknown"] * 8, []),
    "dmon-s-put_1gpu_pcie-wide-values.txt": ("dmon", 1, [None], [None], 0, ["unknown"], []),
    "pmon-c5_h100-80gb-hbm3_590.48.01_load.txt": (
        "pmon", 1, [None], [None], 0, ["unknown"], [(0, 11327, None), (0, 11328, None), (0, 11345, None)]),
    # -q -x
    # <max_link_width>16x, <current_link_width>8x: a degraded PCIe link
    "q-x_a10g_515.105.01_v11.xml": ("report", 1, _bus("00:1e.0"), [23028], 0, ["degraded"], [(0, 725, 22)]),
    "q-x_dual-rtx-a5000_v13.xml": ("report", 2, _bus("81:00.0", "c1:00.0"), [24564, 24564], 0, ["ok", "ok"],
                                   [(0, 100477, 22430), (1, 100477, 17246)]),
    "q-x_quadro-p400_418.43.xml": ("report", 1, _bus("43:00.0"), [1998], 0, ["ok"], []),
    "q-x_rtx3060_570.124.04_v12.xml": ("report", 1, _bus("2d:00.0"), [12288], 0, ["ok"], []),
    "q-x_rtx3090_525.147.05_v12.xml": ("report", 1, _bus("00:10.0"), [24576], 0, ["ok"], []),
    # -q
    "q_1x-l40s_550.127.05.txt": ("report", 1, _bus("a1:00.0"), [46068], 0, ["ok"], []),
    "q_2x-h100-nvl_550.54.14.txt": ("report", 2, _bus("ad:00.0", "ae:00.0"), [95830] * 2, 0, ["ok"] * 2, []),
    # GPU 1: Remapped Rows "Pending : Yes"
    "q_4x-a100-sxm4-80gb_555.42.02.txt": ("report", 4, _bus("68:00.0", "9e:00.0", "c2:00.0", "d4:00.0"),
                                          [81920] * 4, 0, ["ok", "degraded", "ok", "ok"], []),
    "q_h100-mig_590.48.01_idle.txt": ("report", 1, _bus("00:09.0"), [81559], 4, ["ok"], []),
    "nvidia-smi-q_1x-H200-passthrough-VM_550.90.12_cuda-12.4_fabric-block.txt": (
        "report", 1, _bus("03:00.0"), [143771], 0, ["ok"], []),
    # Link Width "Max : 16x", "Current : 8x": a degraded PCIe link
    "nvidia-smi-q_1x-RTX-5090_570.124.06_cuda-12.8.txt": ("report", 1, _bus("02:00.0"), [32607], 0, ["degraded"], []),
    # --query-gpu / --query-compute-apps CSV
    "query-gpu-csv_all-fields_h100-80gb-hbm3_590.48.01_load.csv": ("report", 1, _bus("00:09.0"), [81559], 0,
                                                                  ["ok"], []),
    "query-gpu-csv_all-fields_h100-mig_590.48.01_idle.csv": ("report", 1, _bus("00:09.0"), [81559], 0, ["ok"], []),
    "query-gpu-csv_all-fields_l40s_595.80_idle.csv": ("report", 1, _bus("01:00.0"), [46068], 0, ["ok"], []),
    "query-gpu-csv_all-fields_rtx2080super_windows_591.86_idle.csv": ("report", 1, _bus("0c:00.0"), [8192], 0,
                                                                     ["ok"], []),
    "query-gpu-csv_all-fields_rtx4080super_595.71.05_load.csv": ("report", 1, _bus("01:00.0"), [16376], 0,
                                                                ["ok"], []),
    "query-compute-apps-csv_h100-mig_590.48.01_load.csv": (
        "report", 1, _bus("00:09.0"), [None], 0, ["ok"], [(0, 21180, 2296), (0, 21181, 1272), (0, 21198, 7484)]),
    "query-compute-apps-csv_rtx2080super_windows_591.86_load.csv": (  # WDDM: memory "[N/A]"
        "report", 1, _bus("0c:00.0"), [None], 0, ["ok"],
        [(0, p, None) for p in (12444, 15076, 2056, 12332, 20372, 4680, 14160, 14184, 16280, 24804, 25704, 26660)]),
    # ---- batch of 2026-12-06 (SOURCES.md)
    # Remapped Rows: Uncorrectable Error 4, Pending Yes (remap-pending: degraded)
    "nvidia-smi-q_1x-A10_535.129.03.txt": ("report", 1, _bus("07:00.0"), [23028], 0, ["degraded"], []),
    "nvidia-smi-q_8x-RTX-4090_535.154.05.txt": (
        "report", 8, _bus("01:00.0", "21:00.0", "41:00.0", "61:00.0", "81:00.0", "a1:00.0", "c1:00.0", "e1:00.0"),
        [24564] * 8, 0, ["ok"] * 8,
        [(0, 2010222, 6724), (1, 2774709, 21952), (2, 3077587, 2514), (3, 2007540, 5526), (4, 3229670, 9958),
         (5, 3080907, 5818), (6, 1535847, 2058), (7, 540189, 15922)]),
    "nvidia-smi-q_8x-H100-80GB-HBM3_535.161.08.txt": (
        "report", 8, _bus("19:00.0", "3b:00.0", "4c:00.0", "5d:00.0", "9b:00.0", "bb:00.0", "cb:00.0", "db:00.0"),
        [81559] * 8, 0, ["ok"] * 8, []),
    "nvidia-smi-q_1x-TITAN-V_560.35.03.txt": ("report", 1, _bus("01:00.0"), [12288], 0, ["ok"],
                                              [(0, 100607, 142), (0, 100838, 33), (0, 101815, 111)]),
    "nvidia-smi-default_8x-H100-80GB-HBM3_550.90.07_with-timestamp-line.txt": (
        "table", 8, _bus("19:00.0", "3b:00.0", "4c:00.0", "5d:00.0", "9b:00.0", "bb:00.0", "cb:00.0", "db:00.0"),
        [81559] * 8, 0, ["ok"] * 8, []),
    # <max_link_width>16x, <current_link_width>8x on both: degraded PCIe links
    "nvidia-smi-q-x_2x-RTX-2080_590.44.01_dtd-v13.xml": ("report", 2, _bus("01:00.0", "02:00.0"), [8192] * 2, 0,
                                                         ["degraded"] * 2, []),
    "nvidia-smi-q-x_1x-RTX-3080_595.58.03_dtd-v13.xml": ("report", 1, _bus("0c:00.0"), [10240], 0, ["ok"], []),
    "nvidia-smi-topo-m_8x-H100_12-NICs_host-aihub0007_NIC-rows-4-trailing-tabs.txt": (
        "topo", 8, [None] * 8, [None] * 8, 0, ["unknown"] * 8, []),
    # nvlink -s: the -L line's identities, no PCI address or memory, health not shown
    "nvidia-smi-nvlink-s_8x-A100-SXM4-80GB_12-links.txt": ("nvlink", 8, [None] * 8, [None] * 8, 0, ["unknown"] * 8, []),
}
# The MIG listings are no device list but the GPUs' partition inventory (tests/test_mig_listings.py
# checks each against its text): capture -> what it lists as (profiles, placements, GPU instances,
# compute instances).
MIG_LISTINGS = {
    "nvidia-smi-mig-lgip_1x-RTX-PRO-6000-Blackwell-Server_610.43.02_gfx-me-profiles.txt": (11, 0, 0, 0),
    "nvidia-smi-mig-lgipp_1x-RTX-PRO-6000-Blackwell-Server_610.43.02.txt": (0, 11, 0, 0),
    "nvidia-smi-mig-lgi_1x-RTX-PRO-6000-Blackwell-Server_610.43.02_4x-1g.24gb.txt": (0, 0, 4, 0),
    "nvidia-smi-mig-lci_1x-RTX-PRO-6000-Blackwell-Server_610.43.02_4x-1g.24gb.txt": (0, 0, 0, 4),
}


def test_every_capture_is_listed():
    assert {p.name for p in shared_fixtures(TOOL)} <= set(EXPECTED) | set(MIG_LISTINGS)


@pytest.mark.parametrize("name", sorted(MIG_LISTINGS))
def test_mig_listings_are_the_partition_inventory(name, capsys):
    text = shared_fixture(TOOL, name).read_text(encoding="utf-8")
    assert layout(text) == "mig"
    inv = parse(text)
    assert (len(inv.profiles), len(inv.placements), len(inv.gpu_instances), len(inv.compute_instances)) == \
        MIG_LISTINGS[name]
    assert cli.main(["parse", TOOL, str(shared_fixture(TOOL, name)), "--json"]) == cli.EXIT_OK
    assert json.loads(capsys.readouterr().out)["command"].startswith("nvidia-smi mig -l")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_capture_parses_to_what_its_text_shows(name):
    text = shared_fixture(TOOL, name).read_text(encoding="utf-8")
    kind, count, buses, totals, migs, health, procs = EXPECTED[name]
    assert layout(text) == kind
    snap = parse(text)
    gpus = [d for d in snap.devices if d.identity.parent is None]
    assert len(gpus) == count and len(snap.devices) - count == migs
    assert all(d.identity.vendor == "nvidia" for d in snap.devices)
    assert [d.identity.pci_address for d in gpus] == buses
    assert [None if F.MEMORY_TOTAL not in d.readings else d.readings[F.MEMORY_TOTAL].value / MIB
            for d in gpus] == totals
    assert [d.health.state for d in gpus] == health
    index = {d.identity.uuid: d.identity.index for d in gpus}
    got = [(index[p.device_uuid], p.pid, None if p.memory_bytes is None else p.memory_bytes / MIB)
           for d in gpus for p in d.processes]
    assert got == procs
    json.loads(snapshot_to_json(snap))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cli_parse_json_exits_0(name, capsys):
    path = shared_fixture(TOOL, name)
    assert cli.main(["parse", TOOL, str(path), "--json"]) == cli.EXIT_OK
    assert json.loads(capsys.readouterr().out)["devices"]


# --------------------------------------------------------------------------- default table


TABLE_VALUES = {  # capture -> (driver, CUDA, power cap W, GPU 0: used MiB, util, temp C, power W)
    "default_8x-h100-sxm_565.57.01.txt": ("565.57.01", "12.7", 700, 1, 0.0, 30, 100),
    "nvidia-smi-default_8x-B200_570.158.01_cuda-12.9_1000W.txt": ("570.158.01", "12.9", 1000, 0, 0.0, 30, 141),
    "nvidia-smi-default_8x-H200_580.95.05_cuda-13.0_under-load_truncated-process-memory.txt":
        ("580.95.05", "13.0", 700, 87321, 0.68, 62, 434),
}


@pytest.mark.parametrize("name", sorted(TABLE_VALUES))
def test_default_table_values(name):
    snap = parse(shared_fixture(TOOL, name).read_text(encoding="utf-8"))
    driver, cuda, cap, used, util, temp, power = TABLE_VALUES[name]
    g = snap.devices[0]
    assert (g.identity.driver_version, g.identity.runtime_version) == (driver, cuda)
    assert {d.value(F.POWER_LIMIT) for d in snap.devices} == {cap}
    assert g.value(F.MEMORY_USED) == used * MIB and g.value(F.UTILIZATION) == pytest.approx(util)
    assert g.value(F.TEMP_CORE) == temp and g.value(F.POWER) == power
    assert g.value(C.ECC_UNCORRECTED_VOLATILE) == 0
    assert g.identity.uuid == f"nvidia-pci-{g.identity.pci_address}" and g.processes_reported
    assert g.identity.model and not g.identity.model.startswith("NVIDIA")


def test_default_table_h200_model_and_names():
    snap = parse(shared_fixture(TOOL, EXPECTED_H200 := "nvidia-smi-default_8x-H200_580.95.05_cuda-13.0_under-load"
                                "_truncated-process-memory.txt").read_text(encoding="utf-8"))
    assert EXPECTED_H200 in EXPECTED
    assert snap.devices[0].identity.name == "NVIDIA H200"
    assert [p.name for p in snap.devices[0].processes] == ["ray::MegatronTrainRayActor.train"]
    assert snap.time > 0  # the timestamp line


MIG_TABLE = """\
Wed Jan 15 10:00:00 2025
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
|                                         |                      |               MIG M. |
|=========================================+======================+======================|
|   0  NVIDIA A100-SXM4-40GB          On  | 00000000:07:00.0 Off |                   On |
| N/A   33C    P0              N/A /  400W |   4125MiB / 40960MiB |     N/A      Default |
|                                         |                      |              Enabled |
+-----------------------------------------+----------------------+----------------------+

+---------------------------------------------------------------------------------------+
| MIG devices:                                                                          |
+------------------+--------------------------------+-----------+-----------------------+
| GPU  GI  CI  MIG |                   Memory-Usage |        Vol|      Shared           |
|      ID  ID  Dev |                     BAR1-Usage | SM     Unc| CE ENC DEC OFA JPG    |
|                  |                                |        ECC|                       |
|==================+================================+===========+=======================|
|  0    1   0   0  |            4100MiB / 20096MiB  | 42      0 |  3   0    2    0    0 |
|                  |               2MiB / 32767MiB  |           |                       |
+------------------+--------------------------------+-----------+-----------------------+
|  0    2   0   1  |              25MiB / 20096MiB  | 42      0 |  3   0    2    0    0 |
|                  |               0MiB / 32767MiB  |           |                       |
+------------------+--------------------------------+-----------+-----------------------+

+---------------------------------------------------------------------------------------+
| Processes:                                                                            |
|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |
|        ID   ID                                                             Usage      |
|=======================================================================================|
|    0    1    0      12345      C   python train.py                           4088MiB |
|    0    2    0      12346      C   /usr/bin/python3                             N/A |
+---------------------------------------------------------------------------------------+
"""


def test_mig_table_gives_instances_and_their_processes():
    snap = parse(MIG_TABLE)
    gpu, a, b = snap.devices
    assert gpu.identity.model == "A100-SXM4-40GB" and gpu.identity.pci_address == "0000:07:00.0"
    assert gpu.readings[F.POWER].quality.status == "unsupported" and gpu.value(F.POWER_LIMIT) == 400
    assert gpu.readings[F.UTILIZATION].quality.status == "unsupported"
    assert [m.identity.parent for m in (a, b)] == [gpu.identity.uuid] * 2
    assert [m.identity.uuid for m in (a, b)] == [f"{gpu.identity.uuid}/mig-gi1-ci0", f"{gpu.identity.uuid}/mig-gi2-ci0"]
    assert [m.identity.index for m in (a, b)] == [0, 1]
    assert [m.value(F.MEMORY_TOTAL) / MIB for m in (a, b)] == [20096, 20096]
    assert [m.value(F.MEMORY_USED) / MIB for m in (a, b)] == [4100, 25]
    assert a.identity.model == "A100-SXM4-40GB-MIG-20gb"
    assert [(p.pid, p.memory_bytes, p.name) for p in a.processes] == [(12345, 4088 * MIB, "python train.py")]
    assert [(p.pid, p.memory_bytes) for p in b.processes] == [(12346, None)]
    assert gpu.processes == () and gpu.processes_reported


OLD_TABLE = """\
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 418.43       Driver Version: 418.43       CUDA Version: 10.1     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|===============================+======================+======================|
|   0  Tesla V100-SXM2...  Off  | 00000000:3B:00.0 Off |                    2 |
| N/A   41C    P0    42W / 300W |  16130MiB / 16130MiB |     97%      Default |
+-------------------------------+----------------------+----------------------+

+-----------------------------------------------------------------------------+
| Processes:                                                       GPU Memory |
|  GPU       PID   Type   Process name                             Usage      |
|=============================================================================|
|    0      4242      C   python                                     16119MiB |
+-----------------------------------------------------------------------------+
"""


def test_two_row_header_of_older_drivers():
    (g,) = parse(OLD_TABLE).devices
    assert g.identity.pci_address == "0000:3b:00.0" and g.identity.name == "Tesla V100-SXM2..."
    assert g.value(F.MEMORY_TOTAL) == 16130 * MIB and g.value(F.UTILIZATION) == pytest.approx(0.97)
    assert g.value(C.ECC_UNCORRECTED_VOLATILE) == 2 and g.value(F.POWER) == 42
    assert [(p.pid, p.memory_bytes) for p in g.processes] == [(4242, 16119 * MIB)]


# --------------------------------------------------------------------------- topo -m

TOPO = {  # capture -> (NUMA node per GPU, the link every GPU pair has)
    "nvidia-smi-topo-m_8x-B200_16-NICs_570.158.01_missing-tab-quirk-at-NIC8-NIC9.txt": ([0] * 4 + [1] * 4, ("nvlink", 18)),
    "nvidia-smi-topo-m_8x-B300-SXM6_590.44.01_9-NICs-bond_ansi-residue-ESC-stripped.txt": ([0] * 4 + [1] * 4, ("nvlink", 18)),
    "topo-m_1x-h100-mig_ansi-escapes.txt": ([0], None),
}


@pytest.mark.parametrize("name", sorted(TOPO))
def test_topo_links_and_numa(name):
    snap = parse(shared_fixture(TOOL, name).read_text(encoding="utf-8"))
    numa, link = TOPO[name]
    assert [d.identity.numa_node for d in snap.devices] == numa
    n = len(numa)
    uuid = {d.identity.index: d.identity.uuid for d in snap.devices}
    edges = {(d.identity.index, lk.peer, lk.type, lk.lanes) for d in snap.devices for lk in d.links}
    want = {(a, uuid[b], *link) for a in range(n) for b in range(n) if a != b} if link else set()
    assert edges == want
    assert uuid == {i: f"nvidia-unidentified-{i}" for i in range(n)}


SMALL_TOPO = """\
\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\x1b[0m
GPU0\t X \tPIX\tPHB\tSYS\t0-15\t0
GPU1\tPIX\t X \tNODE\tSYS\t0-15\t0
GPU2\tPHB\tNODE\t X \tSOC\t0-15\t0
GPU3\tSYS\tSYS\tSOC\t X \t16-31\tN/A

Legend:

  X    = Self
"""


def test_topo_host_link_types():
    snap = parse(SMALL_TOPO)
    links = {(d.identity.index, int(lk.peer.rsplit("-", 1)[1])): (lk.type, lk.lanes) for d in snap.devices
             for lk in d.links}
    assert links[(0, 1)] == ("pcie-switch", None) and links[(0, 2)] == ("pcie-hostbridge", None)
    assert links[(1, 2)] == ("numa", None) and links[(0, 3)] == ("cross-numa", None)
    assert links[(2, 3)] == ("cross-numa", None) and len(links) == 12
    assert [d.identity.numa_node for d in snap.devices] == [0, 0, 0, None]


# --------------------------------------------------------------------------- -L

def test_listing_mig_children():
    snap = parse(shared_fixture(TOOL, "list-L_h100-mig-devices.txt").read_text(encoding="utf-8"))
    gpu, *migs = snap.devices
    assert gpu.identity.uuid == "GPU-00000000-0000-0000-0000-000000000000"
    assert gpu.identity.model == "H100-SXM5-80GB" and gpu.identity.name == "NVIDIA H100 80GB HBM3"
    assert [m.identity.uuid[:12] for m in migs] == ["MIG-00000000", "MIG-00000001", "MIG-00000002", "MIG-00000003"]
    assert [m.identity.index for m in migs] == [0, 1, 2, 3]
    assert {m.identity.parent for m in migs} == {gpu.identity.uuid}
    assert [m.identity.model for m in migs] == [f"H100-SXM5-80GB-MIG-{g}gb" for g in (40, 20, 10, 10)]


# --------------------------------------------------------------------------- dmon / pmon

DMON = {  # capture -> per GPU index, the last row: (pwr W, gtemp C, mtemp C, sm %, mem %, mclk MHz, pclk MHz)
    "dmon-c5_h100-80gb-hbm3_590.48.01_load.txt": {0: (636, 65, 59, 100, 9, 2619, 1980)},
    "dmon-c5_h100-mig_590.48.01_load.txt": {0: (439, 56, 62, None, None, 2619, 1980)},  # sm/mem "-" (MIG)
    "dmon-d5_8gpu_a800-class.txt": {
        0: (244, 45, 52, 100, 0, 2619, 1980), 1: (195, 45, 52, 100, 2, 2619, 1980),
        2: (271, 40, 48, 100, 0, 2619, 1980), 3: (236, 47, 50, 20, 9, 2619, 1980),
        4: (300, 53, 56, 73, 39, 2619, 1980), 5: (254, 51, 57, 16, 8, 2619, 1980),
        6: (219, 39, 47, 100, 2, 2619, 1980), 7: (214, 39, 47, 100, 4, 2619, 1980)},
    # -s put: no clock columns
    "dmon-s-put_1gpu_pcie-wide-values.txt": {3: (224, 40, 45, 100, 8, "absent", "absent")},
}
_DMON_FIELDS = ((F.POWER, 1), (F.TEMP_CORE, 1), (F.TEMP_MEMORY, 1), (F.UTILIZATION, 0.01),
                (F.MEMORY_UTILIZATION, 0.01), (F.CLOCK_MEMORY, 1e6), (F.CLOCK_COMPUTE, 1e6))


@pytest.mark.parametrize("name", sorted(DMON))
def test_dmon_last_row_per_gpu(name):
    snap = parse(shared_fixture(TOOL, name).read_text(encoding="utf-8"))
    assert [d.identity.index for d in snap.devices] == sorted(DMON[name])
    for d in snap.devices:
        for (field, scale), want in zip(_DMON_FIELDS, DMON[name][d.identity.index]):
            if want == "absent":
                assert field not in d.readings
            elif want is None:
                assert d.readings[field].value is None and d.readings[field].quality.status == "unsupported"
            else:
                assert d.readings[field].value == pytest.approx(want * scale), field
        assert d.readings[F.UTILIZATION].quality.window_seconds == 1.0


DMON_FB = """\
# gpu   Time       fb   bar1    sm   pwr
# Idx   HH:MM:SS   MB     MB     %     W
    1   10:00:00  1200     4    50   101
    1   10:00:01  1300     4    55     -
"""


def test_dmon_reads_columns_by_name():
    (d,) = parse(DMON_FB).devices
    assert d.identity.index == 1 and d.value(F.MEMORY_USED) == 1300 * MIB
    assert d.value(F.UTILIZATION) == pytest.approx(0.55) and d.readings[F.POWER].quality.status == "unsupported"


def test_pmon_last_sample():
    snap = parse(shared_fixture(TOOL, "pmon-c5_h100-80gb-hbm3_590.48.01_load.txt").read_text(encoding="utf-8"))
    (gpu,) = snap.devices
    assert [(p.pid, p.name, p.utilization_ratio) for p in gpu.processes] == [
        (11327, "memhog", None), (11328, "memhog", None), (11345, "gpu_burn", pytest.approx(0.99))]
    assert gpu.processes_reported and all(p.device_uuid == gpu.identity.uuid for p in gpu.processes)


PMON_FB = """\
# gpu        pid  type    sm   mem   enc   dec    fb   command
# Idx          #   C/G     %     %     %     %    MB   name
    0       4242     C    10     5     -     -  2048   python my script.py
    1          -     -     -     -     -     -     -   -
    0       4242     C    20     5     -     -  4096   python my script.py
    1          -     -     -     -     -     -     -   -
"""


def test_pmon_fb_and_idle_gpu():
    gpu0, gpu1 = parse(PMON_FB).devices
    assert [(p.pid, p.memory_bytes, p.name) for p in gpu0.processes] == [(4242, 4096 * MIB, "python my script.py")]
    assert gpu0.processes[0].utilization_ratio == pytest.approx(0.2)
    assert gpu1.processes == () and gpu1.processes_reported


@pytest.mark.parametrize("text", [
    "# gpu pwr\n# Idx W\n  x 100\n",  # an index that is no number
    "# gpu pwr\n# Idx W\n  0 100 7\n",  # more values than columns
    "# gpu pwr\n# Idx W\n  0 100\n# gpu sm\n# Idx %\n  0 5\n",  # two captures in one file
    "# gpu pid type command\n# Idx # C/G name\n 0 abc C x\n",
    "GPU 0: NVIDIA H100 (UUID: GPU-1)\nsomething else\n",
    "GPU 0: NVIDIA H100 (UUID: GPU-1)\n  MIG 1g.10gb Device 0: (UUID: GPU-1)\n",  # one uuid twice
    "\tGPU0\tGPU1\nGPU0\t X \tNV4\n",  # GPU1 has no row
])
def test_broken_layouts_are_one_line_parse_errors(text):
    assert layout(text) != "report"
    with pytest.raises(ParseError) as e:
        parse(text)
    assert str(e.value).startswith(TOOL) and "\n" not in str(e.value)


# --------------------------------------------------------------------------- fuzz

FUZZ = settings(max_examples=60, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
READERS = {"table": table.parse, "topo": topo.parse, "list": listing.parse, "dmon": dmon.parse, "pmon": pmon.parse,
           "nvlink": nvlink_status.parse}
NVLINK_H100 = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n" + "".join(f"\t Link {n}: 26.562 GB/s\n" for n in range(17))
               + "\t Link 17: <inactive>\n")
SYNTHETIC = {"table": [MIG_TABLE, OLD_TABLE], "topo": [SMALL_TOPO], "list": [], "dmon": [DMON_FB], "pmon": [PMON_FB],
             "nvlink": [NVLINK_H100]}


def _seeds(kind):
    real = [p.read_text(encoding="utf-8") for p in shared_fixtures(TOOL) if p.name in EXPECTED
            and EXPECTED[p.name][0] == kind]
    return SYNTHETIC[kind] + real or ["GPU 0: NVIDIA A100 (UUID: GPU-1)\n"]


def _one(reader, text):
    for fn in (reader, parse):
        try:
            snap = fn(text)
        except ParseError:
            continue
        if isinstance(snap, mig_listing.MigInventory):  # parse: the MIG listings are an inventory
            json.dumps(snap.to_dict())
            continue
        json.loads(snapshot_to_json(snap))
        assert all(d.identity.vendor == "nvidia" for d in snap.devices)


@pytest.mark.parametrize("kind", sorted(READERS))
def test_fuzz_layout_reader(kind):
    reader, seeds = READERS[kind], _seeds(kind)

    @FUZZ
    @given(st.text(max_size=400))
    def random_text(text):
        _one(reader, text)

    @FUZZ
    @given(st.sampled_from(seeds), st.integers(0, 10_000), st.integers(0, 200), st.text(max_size=40))
    def mutated(seed, at, cut, junk):
        at = at % (len(seed) + 1)
        _one(reader, seed[:at] + junk + seed[at + cut:])

    @FUZZ
    @given(st.sampled_from(seeds), st.lists(st.integers(0, 200), min_size=1, max_size=4),
           st.sampled_from(("drop", "duplicate")))
    def lines_damaged(seed, picks, how):
        lines = seed.splitlines(keepends=True)
        for i in sorted({p % max(len(lines), 1) for p in picks}, reverse=True):
            if i < len(lines):
                if how == "drop":
                    del lines[i]
                else:
                    lines.insert(i, lines[i])
        _one(reader, "".join(lines))

    random_text()
    mutated()
    lines_damaged()
