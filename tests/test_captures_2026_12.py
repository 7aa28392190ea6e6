"""The layouts of the 2026-12-06 batch that were refused or read short (issue 40 section 1):
``nvidia-smi nvlink -s`` (links and their speeds), ``amd-smi partition`` (partition mode per
GPU), npu-smi 26.0's wide table and its cut-off last line, ``amd-smi list -e``'s HIP uuid; the
values read off each capture's text; synthetic variants for what no capture shows; fuzz."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import shared_fixture
from hetero_exporter.collectors.amd.amd_smi import collector as amd_smi
from hetero_exporter.collectors.amd.amd_smi import partition as P
from hetero_exporter.collectors.ascend.npu_smi import collector as N
from hetero_exporter.collectors.nvidia.nvidia_smi import nvlink_status as NV
from hetero_exporter.collectors.nvidia.nvidia_smi.collector import parse as parse_nvidia_smi
from hetero_exporter.model import NodeSnapshot, snapshot_to_json
from hetero_exporter.model import fields as F
from hetero_exporter.model import names
from hetero_exporter.sdk.contract import ParseError

FUZZ = settings(max_examples=60, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _text(tool: str, name: str) -> str:
    return shared_fixture(tool, name).read_text(encoding="utf-8")


def _one_line_error(parse, text: str, words: str, tool: str) -> None:
    with pytest.raises(ParseError, match=words) as e:
        parse(text)
    assert str(e.value).startswith(tool) and "\n" not in str(e.value)


def _damaged(seed: str, at: int, cut: int, junk: str) -> str:
    at %= len(seed) + 1
    return seed[:at] + junk + seed[at + cut:]


# --------------------------------------------------------------------------- nvidia-smi nvlink -s

NVLINK_A100 = "nvidia-smi-nvlink-s_8x-A100-SXM4-80GB_12-links.txt"
A100_UUIDS = ["GPU-5269b708-678a-b1a8-60f0-c90406537486", "GPU-a7605225-d684-1f65-4ad4-ee2ab39338b4",
              "GPU-483e6bb6-bb11-8916-e22f-d1d69abbafaa", "GPU-6e4fbadc-10d9-a63a-8988-9a0d320ff1a0"]
H100 = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n" + "".join(f"\t Link {n}: 26.562 GB/s\n" for n in range(17))
        + "\t Link 17: <inactive>\n")


def test_nvlink_s_twelve_links_of_25_gbps_on_each_a100():
    snap = parse_nvidia_smi(_text("nvidia-smi", NVLINK_A100))
    assert len(snap.devices) == 8 and [d.identity.uuid for d in snap.devices[:4]] == A100_UUIDS
    assert {d.identity.model for d in snap.devices} == {"A100-SXM4-80GB"}
    for d in snap.devices:
        assert d.value(NV.ACTIVE_FIELD) == 12 and d.value(NV.INACTIVE_FIELD) == 0
        assert [d.value(NV.link_speed_field(n)) for n in range(12)] == [25e9] * 12
        assert d.value(NV.SPEED_FIELD) == 12 * 25e9  # 300 GB/s one way
        assert d.readings[NV.SPEED_FIELD].quality.resolution == 1e9 and d.health.state == "unknown"
    json.loads(snapshot_to_json(snap))


def test_an_inactive_link_lowers_the_speed_and_counts_as_inactive():
    (d,) = NV.parse(H100).devices
    assert (d.value(NV.ACTIVE_FIELD), d.value(NV.INACTIVE_FIELD)) == (17, 1)
    assert d.value(NV.SPEED_FIELD) == pytest.approx(17 * 26.562e9)
    assert d.readings[NV.SPEED_FIELD].quality.resolution == pytest.approx(1e6)  # 26.562: MB/s printed
    assert d.readings[NV.link_speed_field(17)].quality.status == "unsupported"


def test_the_new_fields_are_catalogued_and_exported():
    assert names.metric_for_field(NV.SPEED_FIELD)[0].name == "accelerator_interconnect_speed_bytes_per_second"
    assert F.lookup(NV.link_speed_field(3))[0].json_only  # per-link detail stays in the JSON model
    assert names.metric_for_field("partitions_compute")[0].name == "accelerator_partitions"


@pytest.mark.parametrize("text,words", [
    ("\t Link 0: 25 GB/s\n", "before any GPU"),
    ("GPU 0: NVIDIA A100 (UUID: GPU-1)\nsomething\n", "neither"),
    ("GPU 0: NVIDIA A100 (UUID: GPU-1)\n\t Link 0: fast\n", "Link 0"),
    ("GPU 0: NVIDIA A100 (UUID: GPU-1)\n\t Link 0: 25 GB/s\n\t Link 0: 25 GB/s\n", "twice"),
    ("GPU 0: NVIDIA A100 (UUID: GPU-1)\n\t Link 0: 25 GB/s\nGPU 1: NVIDIA A100 (UUID: GPU-1)\n", "twice"),
])
def test_a_broken_nvlink_status_is_a_one_line_parse_error(text, words):
    _one_line_error(NV.parse, text, words, "nvidia-smi nvlink -s")


@FUZZ
@given(st.integers(0, 5000), st.integers(0, 120), st.text(max_size=30))
def test_fuzz_nvlink_status(at, cut, junk):
    try:
        snap = NV.parse(_damaged(H100, at, cut, junk))
    except ParseError:
        return
    json.loads(snapshot_to_json(snap))


# --------------------------------------------------------------------------- amd-smi partition

PARTITION = "amd-smi-partition-g0_1x-MI325X-VF_SPX-NPS1_accelerator-profiles-and-resources.txt"
# two GPUs in CPX / NPS4 (the profile table gives CPX's count; GPU 1's rows leave GPU_ID blank)
CPX = """\
CURRENT_PARTITION:
GPU_ID  MEMORY  ACCELERATOR_TYPE  ACCELERATOR_PROFILE_INDEX  PARTITION_ID
0       NPS4    CPX               3                          0,1,2,3,4,5,6,7
1       NPS4    CPX               3                          0,1,2,3,4,5,6,7

ACCELERATOR_PARTITION_PROFILES:
GPU_ID  PROFILE_INDEX  MEMORY_PARTITION_CAPS  ACCELERATOR_TYPE  PARTITION_ID  NUM_PARTITIONS  NUM_RESOURCES  RESOURCE_INDEX  RESOURCE_TYPE  RESOURCE_INSTANCES  RESOURCES_SHARED
0       3              NPS1,NPS4              CPX*              0             8               1              12              XCC            1                   1
1       3              NPS1,NPS4              CPX*              0             8               1              12              XCC            1                   1
"""


def test_partition_mode_per_gpu_from_the_mi325x_capture():
    text = _text("amd-smi", PARTITION)
    snap = amd_smi.parse_any(text)
    (d,) = snap.devices
    assert (d.identity.vendor, d.identity.index) == ("amd", 0)
    assert (d.value("partitions_compute"), d.value("partitions_memory")) == (1, 1)  # SPX, NPS1
    parts = P.parse(text)
    (cur,) = parts.current
    assert (cur.compute, cur.memory, cur.profile_index, cur.partition_id) == ("SPX", "NPS1", 0, "0")
    assert [(p.type, p.current, p.partitions) for p in parts.profiles] == \
        [("SPX", True, 1), ("DPX", False, 2), ("QPX", False, 4), ("CPX", False, 8)]
    # each profile's four resource rows (multi-line rows), CPX's decoders and JPEGs shared by two
    cpx = parts.profiles[3]
    assert [(r.index, r.type, r.instances, r.shared) for r in cpx.resources] == \
        [(12, "XCC", 1, 1), (13, "DECODER", 1, 2), (14, "DMA", 2, 1), (15, "JPEG", 8, 2)]
    assert [r.instances for r in parts.profiles[0].resources] == [8, 4, 16, 32]
    assert len(parts.resources) == 16 and parts.resources[15] == P.Resource(15, "JPEG", 8, 2)
    # read by structure: the same with every run of blanks squeezed to one
    assert P.parse("\n".join(re.sub(r" +", " ", ln).strip() for ln in text.splitlines())) == parts
    json.dumps(parts.to_dict())


def test_cpx_nps4_on_two_gpus():
    snap = amd_smi.parse_any(CPX)
    assert [(d.identity.index, d.value("partitions_compute"), d.value("partitions_memory")) for d in snap.devices] \
        == [(0, 8, 4), (1, 8, 4)]
    assert P.parse(CPX).profiles[1].memory_caps == "NPS1,NPS4"


@pytest.mark.parametrize("text,words", [
    ("CURRENT_PARTITION:\nGPU_ID MEMORY\n0 NPS1 extra\n", "2 columns"),
    ("CURRENT_PARTITION:\nGPU_ID MEMORY\nx NPS1\n", "GPU_ID"),
    ("CURRENT_PARTITION:\nGPU_ID MEMORY\n0 NPS1\nCURRENT_PARTITION:\n", "twice"),
    ("CURRENT_PARTITION:\nGPU_ID MEMORY\n0 NPS1\nOTHER_TABLE:\n", "unknown section"),
    ("ACCELERATOR_PARTITION_PROFILES:\nGPU_ID PROFILE_INDEX RESOURCE_INDEX\n5\n", "lacks GPU_ID"),
])
def test_a_broken_partition_output_is_a_one_line_parse_error(text, words):
    _one_line_error(amd_smi.parse_any, text, words, "amd-smi partition")


@FUZZ
@given(st.integers(0, 5000), st.integers(0, 200), st.text(max_size=30))
def test_fuzz_partition(at, cut, junk):
    try:
        snap = amd_smi.parse_any(_damaged(CPX, at, cut, junk))
    except ParseError:
        return
    json.loads(snapshot_to_json(snap))


def test_list_e_names_the_gpu_as_static_does():
    """Two captures of one MI325X node: list -e's HIP_UUID is GPU-<the static ASIC_SERIAL>."""
    listed = amd_smi.parse_any(_text("amd-smi", "amd-smi-list-e_MI325X-VF_render-card-hsa-hip-ids_TRUNCATED.txt"))
    static = amd_smi.parse_any(_text("amd-smi", "amd-smi-static-g0_MI325X-VF_asic-bus-sections_TRUNCATED.txt"))
    assert [d.identity.uuid for d in listed.devices] == ["9f444a2fb30adeb0", "b7d181671a192e45"]
    assert static.devices[0].identity.uuid == listed.devices[0].identity.uuid
    assert static.devices[0].identity.pci_address == listed.devices[0].identity.pci_address == "0000:83:00.0"


# --------------------------------------------------------------------------- npu-smi 26.0

WIDE = "npu-smi-info_1x-910B4_npu-smi-26.0.rc1_wide-layout_process-id-in-container-column.txt"
PROCESS_ROW = "| 0       0                 | 22114         | python             | 2048                  | 88                      |"


def test_the_cut_last_line_is_left_out_with_its_reason():
    text = _text("npu-smi", WIDE)
    s = N.parse_summary(text)
    assert len(s.chips) == 1 and s.process_section and s.processes == ()
    assert s.cut is not None and "line 13" in s.cut and "No running processes" in s.cut
    snap = N.parse_any(text)
    (d,) = snap.devices
    assert d.identity.pci_address == "0000:c1:00.0" and d.value(F.MEMORY_TOTAL) == 32768 << 20
    assert not d.processes_reported  # the process list was cut: not "none run"
    assert snap.collectors[0].ok and "cut off" in snap.collectors[0].error
    assert not N.NpuSmiCollector.complete(None, s)  # chips past the cut are not lost


def test_the_process_id_in_container_column():
    text = _text("npu-smi", WIDE).splitlines()
    whole = "\n".join(text[:-1] + [PROCESS_ROW, "+" + "-" * 20 + "+"]) + "\n"
    s = N.parse_summary(whole)
    assert s.cut is None
    assert [(p.npu_id, p.chip_id, p.pid, p.name, p.memory_mb, p.container_pid) for p in s.processes] == \
        [(0, 0, 22114, "python", 2048, 88)]
    assert N.parse_any(whole).devices[0].processes_reported


def test_a_device_that_lost_its_second_row_is_left_out_not_the_node():
    lines = _text("npu-smi", "npu-smi-info_2x-910B2C_npu-smi-23.0.2.1_trailing-spaces_no-space-before-slash"
                             "_process-row.txt").splitlines()
    cut = "\n".join(lines[:10] + [lines[10][:36]])  # NPU 1's first row whole, its second cut
    s = N.parse_summary(cut)
    assert [c.npu_id for c in s.chips] == [0]
    assert "lost its second row" in s.cut


def test_a_broken_line_with_whole_lines_after_it_is_still_an_error():
    lines = _text("npu-smi", WIDE).splitlines()
    with pytest.raises(ParseError, match="not a table line|cells"):
        N.parse_summary("\n".join(lines[:7] + [lines[7][:30]] + lines[8:12]))


def test_every_batch_capture_gives_a_snapshot_of_its_vendor():
    for tool, name, vendor in (("nvidia-smi", NVLINK_A100, "nvidia"), ("amd-smi", PARTITION, "amd"),
                               ("npu-smi", WIDE, "ascend")):
        snap = {"nvidia-smi": parse_nvidia_smi, "amd-smi": amd_smi.parse_any, "npu-smi": N.parse_any}[tool](
            _text(tool, name))
        assert isinstance(snap, NodeSnapshot) and {d.identity.vendor for d in snap.devices} == {vendor}


def test_the_amdsmi_collector_gives_the_partition_mode_too():
    """The live path: amdsmi's compute/memory partition and the handles it lists for one GPU."""
    from hetero_exporter.collectors.amd.amdsmi import collector as amdsmi
    from hetero_exporter.sdk.contract import CollectorOptions
    from hetero_exporter.simulate import ManualClock
    from hetero_exporter.simulate.scenario import load
    from conftest import ROOT
    scenario = load(str(ROOT / "fixtures" / "scenarios" / "amd-cpx-partitions.yaml"))
    devices = amdsmi.create(CollectorOptions(scenario=scenario, clock=ManualClock())).collect()
    gpus = [d for d in devices if d.identity.parent is None]
    assert [(d.value("partitions_compute"), d.value("partitions_memory")) for d in gpus] == [(8, 1), (1, 1)]
    assert gpus[0].readings["partitions_compute"].quality.source.startswith("amdsmi_get_gpu_compute_partition")


# --------------------------------------------------------------------------- every capture of the batch has its row

# The batch's captures that no tool table lists, with what their text shows: the kernel log's
# events (code, device, count) and dcgmi's devices (index, the fields the second sample gives).
EXPECTED = {
    "kernel-log/nvidia_xid-48-dbe_xid-63-row-remap_xid-94-contained_peermem_dmesg-time-format-iso.log": (
        "kernel-log", [("48", "0000:19:00.0", 1), ("63", "0000:19:00.0", 1), ("94", "0000:19:00.0", 9)]),
    "dcgmi/dcgmi-dmon-e-1001-1002-1005_1x-H100-NVL_azure-NC40ads-H100-v5_dcgm-3.3.9_first-sample-NA"
    "_trailing-spaces.txt": (
        "dcgmi", [(0, ("engine_compute_utilization_ratio", "engine_memory_utilization_ratio",
                       "graphics_active_ratio"))]),
}


def _batch() -> list[str]:
    """The captures SOURCES.md lists under its batch of 2026-12-06, as tool/name."""
    text = shared_fixture("SOURCES.md").read_text(encoding="utf-8")
    start = text.index("## Batch of 2026-12-06")
    end = text.find("\n## ", start + 10)
    return re.findall(r"^### `([^`]+)`", text[start:end if end > 0 else None], re.M)


def _tables() -> dict[str, set[str]]:
    """tool -> the capture names the tool tests' EXPECTED tables list."""
    import test_amd_smi
    import test_ascend_captures
    import test_iluvatar_captures
    import test_nvidia_smi_layouts
    return {"nvidia-smi": set(test_nvidia_smi_layouts.EXPECTED) | set(test_nvidia_smi_layouts.MIG_LISTINGS),
            "amd-smi": set(test_amd_smi.EXPECTED), "npu-smi": set(test_ascend_captures.EXPECTED),
            "ixsmi": set(test_iluvatar_captures.EXPECTED)}


def test_every_capture_of_the_batch_has_an_expected_row():
    batch = _batch()
    assert len(batch) == 24
    tables = _tables()
    missing = [p for p in batch if p not in EXPECTED and p.split("/", 1)[1] not in tables.get(p.split("/")[0], ())]
    assert missing == []


@pytest.mark.parametrize("path", sorted(EXPECTED))
def test_the_rows_of_this_table(path):
    from collections import Counter

    from hetero_exporter.collectors.nvidia.dcgmi import dmon
    from hetero_exporter.sdk import kmsg
    kind, want = EXPECTED[path]
    text = _text(*path.split("/", 1))
    if kind == "kernel-log":
        events, _ = kmsg.parse_lines(text.splitlines())
        got = Counter((e.code, e.pci_address) for e in events)
        assert sorted((c, p, n) for (c, p), n in got.items()) == want
        assert all(e.time and e.time.startswith("2024-11-15T12:02:03,") for e in events)
    else:
        snap = dmon.parse(text)
        assert [(d.identity.index, tuple(sorted(d.readings))) for d in snap.devices] == want
