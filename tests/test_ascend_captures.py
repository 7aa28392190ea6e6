"""Every npu-smi capture in ../shared/fixtures/npu-smi parses to what its text shows: the command
that printed it, the devices (count, bus ids, memory totals in MB, health) and the processes,
or a clear ParseError for npu-smi's own error messages. The values were read off the captures.

Per file: (command, devices, bus ids, memory total MB (HBM, DDR on chips without HBM), DDR
total MB beside HBM, health states, process ids). For outputs that are not per device
(-l, -m, topo, proc-mem, current-fault-event, sensors, flash, product) ``devices`` is the count
of entries the text lists (cards, chips without the MCU rows, matrix NPUs, processes, events)
and the rest is empty; for -t outputs the memory columns are the Capacity(MB) lines.
"""

from __future__ import annotations

import pytest

from conftest import shared_fixtures
from hetero_exporter.collectors.ascend.npu_smi import collector as N
from hetero_exporter.model import NodeSnapshot
from hetero_exporter.sdk.contract import ParseError

TOOL = "npu-smi"
MIB = 1 << 20
E8 = ("0000:c1:00.0", "0000:c2:00.0", "0000:81:00.0", "0000:82:00.0",
      "0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0")
OK = "ok"

EXPECTED = {
    # ---- npu-smi info (box table)
    "ascend950_info-table_new-layout_DOC-REDACTED.txt": ("info", 1, ("0000:91:00.0",), (86016,), (None,), (OK,), ()),
    "info-table_1x-310P3-duo-2chips_npu-id-2944_npu-smi-25.5.1.txt":
        ("info", 2, ("0000:0c:00.0", "0000:0c:00.0"), (44278, 43693), (None, None), (OK, OK), ()),
    "info-table_1x-910B-first-gen_in-container_npu-smi-23.0.rc1.txt":
        ("info", 1, ("0000:c1:00.0",), (32768,), (15039,), (OK,), ()),
    "info-table_1x-910ProB_npu-smi-23.0.rc1_process.txt":
        ("info", 1, ("0000:c1:00.0",), (32768,), (15137,), (OK,), (55115,)),
    "info-table_2x-910A_npu-smi-21.0.4_cann504.txt":
        ("info", 2, ("0000:c1:00.0", "0000:81:00.0"), (32768, 32768), (15170, 15171), (OK, OK), ()),
    "info-table_2x-910B2C_npu-smi-23.0.rc3.txt":
        ("info", 2, ("0000:5a:00.0", "0000:29:00.0"), (65536, 65536), (None, None), (OK, OK), ()),
    "info-table_4x-910A_npu-smi-1.9.3_v21.0.rc1_old-layout.txt":
        ("info", 4, ("0000:c2:00.0", "0000:82:00.0", "0000:42:00.0", "0000:02:00.0"), (32768,) * 4,
         (15171, 15171, 15171, 15078), (OK,) * 4, ()),
    # NPU 1-6 rows elided by the author ("..."); the process rows of NPU 0, 1 and 7 remain
    "info-table_8x-910B1_npu-smi-23.0.rc2.b090_under-load_ELIDED.txt":
        ("info", 2, ("0000:c1:00.0", "0000:42:00.0"), (65536, 65536), (None, None), (OK, OK),
         (2441447, 2441448, 2441454)),
    "info-table_8x-910B3_npu-smi-23.0.0_container.txt": ("info", 8, E8, (65536,) * 8, (None,) * 8, (OK,) * 8, ()),
    "info-table_8x-910B3_npu-smi-24.1.rc1.b030_no-process-table_TRUNCATED.txt":
        ("info", 8, E8, (65536,) * 8, (None,) * 8, (OK,) * 8, ()),
    "info-table_atlas800-3000_310x4_npu-smi-20.2.0.txt":
        ("info", 4, ("0000:da:00.0", "0000:dc:00.0", "0000:dd:00.0", "0000:db:00.0"), (8192,) * 4, (None,) * 4,
         (OK,) * 4, ()),
    "info-table_atlas800-9010_910A-x8_npu-smi-22.0.3.1.txt":
        ("info", 8, ("0000:61:00.0", "0000:db:00.0", "0000:b2:00.0", "0000:3e:00.0",
                     "0000:60:00.0", "0000:da:00.0", "0000:b1:00.0", "0000:3d:00.0"),
         (32768,) * 8, (15077,) * 8, (OK,) * 8, ()),
    # ---- batch of 2026-12-06 (SOURCES.md): read off each capture's text
    # Memory-Usage "0    / 0" (no DDR figure beside the HBM) is absent, as in the 23.0.rc3 capture above
    "npu-smi-info_2x-910B2C_npu-smi-23.0.2.1_trailing-spaces_no-space-before-slash_process-row.txt":
        ("info", 2, ("0000:5a:00.0", "0000:19:00.0"), (65536, 65536), (None, None), (OK, OK), (124528,)),
    # Health "Alarm" (degraded), Bus-Id "NA" (absent), no HBM column: Memory-Usage 3628 / 15609 is the total
    "npu-smi-info_1x-310B4_Atlas-200I-DK-A2_npu-smi-23.0.0_state-Alarm_bus-id-NA_no-HBM-column_trailing-spaces.txt":
        ("info", 1, (None,), (15609,), (None,), ("degraded",), ()),
    # Atlas A3: 2 NPUs x 2 dies, each die its own bus id; the one process on NPU 1 chip 1
    "npu-smi-info_2x-A3-Ascend910-4-dies_npu-smi-25.2.0_process-on-die1_no-space-before-slash.txt":
        ("info", 4, ("0000:9c:00.0", "0000:9e:00.0", "0000:37:00.0", "0000:39:00.0"), (65536,) * 4, (None,) * 4,
         (OK,) * 4, (990711,)),
    # 310P3 Duo cards: 2 chips each on one bus id, DDR totals 44280 / 43693, a mindie process per chip
    "npu-smi-info_2x-310P3-duo-2chips_npu-smi-24.1.0.1_power-NA_hugepages_mindie-processes.txt":
        ("info", 4, ("0000:01:00.0", "0000:01:00.0", "0000:02:00.0", "0000:02:00.0"), (44280, 43693) * 2,
         (None,) * 4, (OK,) * 4, (3277562, 3277565, 3034986, 3034989)),
    # npu-smi 26.0 wide layout; the published text stops at an unterminated "No running processes" line
    "npu-smi-info_1x-910B4_npu-smi-26.0.rc1_wide-layout_process-id-in-container-column.txt":
        ("info", 1, ("0000:c1:00.0",), (32768,), (None,), (OK,), ()),
    # ---- -t board / board-chip: the PCIe Bus Info line
    "ascend950_info-t-board_doc-REDACTED.txt": ("info -t board", 1, ("0000:f1:00.0",), (), (), (OK,), ()),
    "info-t-board-chip_310P_die-id_REDACTED.txt": ("info -t board-chip", 1, ("0000:81:00.0",), (), (), (OK,), ()),
    "info-t-board-chip_910A_npu-smi-23.0.5.txt": ("info -t board-chip", 1, ("0000:61:00.0",), (), (), (OK,), ()),
    "info-t-board_310P3-duo_IT21PD2G10_npu-smi-25.5.1.txt": ("info -t board", 1, ("0000:0c:00.0",), (), (), (OK,), ()),
    "info-t-board_910A_npu-smi-23.0.5.txt": ("info -t board", 1, ("0000:61:00.0",), (), (), (OK,), ()),
    "info-t-board_910B-IT21HMDC_npu-smi-25.5.1_8sp-indent.txt": ("info -t board", 1, ("0000:c1:00.0",), (), (), (OK,), ()),
    "info-t-board_error-invalid-card-id.txt": ("error", 0, (), (), (), (), ()),
    # ---- -t health
    "ascend950_info-t-health_doc.txt": ("info -t health", 1, (None,), (), (), (OK,), ()),
    "info-t-health_910A_OK.txt": ("info -t health", 1, (None,), (), (), (OK,), ()),
    # ---- -t usages / memory (HBM Capacity, DDR Capacity on chips without HBM)
    "ascend950_info-t-usages_doc.txt": ("info -t usages", 1, (None,), (131072,), (0,), (OK,), ()),
    "info-t-usages_310P-duo-2chips-dvpp.txt": ("info -t usages", 2, (None, None), (44280, 43693), (None, None), (OK, OK), ()),
    "info-t-usages_310P3-duo-2chips_npu-smi-25.5.1.txt":
        ("info -t usages", 2, (None, None), (44278, 43693), (None, None), (OK, OK), ()),
    "info-t-usages_910A_npu-smi-23.0.5.txt": ("info -t usages", 1, (None,), (31129,), (13553,), (OK,), ()),
    "info-t-usages_ddr15079-hbm32768.txt": ("info -t usages", 1, (None,), (32768,), (15079,), (OK,), ()),
    "ascend950_info-t-memory_doc.txt": ("info -t memory", 1, (None,), (131072,), (0,), (OK,), ()),
    "info-t-memory_hbm32768.txt": ("info -t memory", 1, (None,), (32768,), (0,), (OK,), ()),
    # ---- other -t outputs with per-chip blocks
    "ascend950_info-t-common_doc.txt": ("info -t common", 1, (None,), (), (), (OK,), ()),
    "info-t-common_310P3-duo-2chips-plus-mcu_npu-smi-25.5.1.txt": ("info -t common", 2, (None, None), (), (), (OK, OK), ()),
    "info-t-common_910A_doc.txt": ("info -t common", 1, (None,), (), (), (OK,), ()),
    "info-t-common_910B-20core_with-mcu.txt": ("info -t common", 1, (None,), (), (), (OK,), ()),
    "ascend950_info-t-ecc_doc.txt": ("info -t ecc", 1, (None,), (), (), (OK,), ()),
    "info-t-ecc_910A_npu-smi-23.0.5_doc.txt": ("info -t ecc", 1, (None,), (), (), (OK,), ()),
    "ascend950_info-t-power_doc.txt": ("info -t power", 1, (None,), (), (), (OK,), ()),
    "info-t-power_310P3-duo_mcu_npu-smi-25.5.1.txt": ("info -t power", 1, (None,), (), (), (OK,), ()),
    "info-t-power_910B-IT21HMDC_npu-smi-25.5.1_8sp-indent.txt": ("info -t power", 1, (None,), (), (), (OK,), ()),
    "ascend950_info-t-temp_doc.txt": ("info -t temp", 1, (None,), (), (), (OK,), ()),
    "info-t-temp_910B-IT21HMDC_npu-smi-25.5.1_8sp-indent.txt": ("info -t temp", 1, (None,), (), (), (OK,), ()),
    # ---- not per device: the count of entries listed
    "ascend950_info-l_doc.txt": ("info -l", 1, (), (), (), (), ()),
    "info-l_8x-910B-IT21HMDC_npu-smi-25.5.1_8sp-indent.txt": ("info -l", 8, (), (), (), (), ()),
    "ascend950_info-m_doc-REDACTED.txt": ("info -m", 1, (), (), (), (), ()),
    "info-m_4x-310P-duo-2chips-plus-mcu_REDACTED.txt": ("info -m", 8, (), (), (), (), ()),
    "info-m_910A-x8_mindcluster-faultdiag.txt": ("info -m", 8, (), (), (), (), ()),
    "info-m_atlas800-3000_310x4-plus-mcu_npu-smi-21.0.4.txt": ("info -m", 4, (), (), (), (), ()),
    "info-m_atlas800-3000_310x4_npu-smi-20.2.0.txt": ("info -m", 4, (), (), (), (), ()),
    "info-t-topo_8x-910B3_HCCS-full-mesh_npu-smi-24.1.rc1.b030_leading-tab.txt": ("info -t topo", 8, (), (), (), (), ()),
    "ascend950_info-t-proc-mem_doc.txt": ("info -t proc-mem", 1, (), (), (), (), (395864,)),
    "ascend950_info-t-current-fault-event_doc.txt": ("info -t current-fault-event", 1, (), (), (), (), ()),
    "ascend950_info-t-sensors_doc.txt": ("info -t sensors", 0, (), (), (), (), ()),
    "info-t-flash.txt": ("info -t flash", 0, (), (), (), (), ()),
    "info-t-product_atlas-300I-duo_npu-smi-25.5.1.txt": ("info -t product", 0, (), (), (), (), ()),
}


def test_every_capture_is_listed():
    names = {p.name for p in shared_fixtures(TOOL)}
    if not names:
        pytest.skip("../shared/fixtures/npu-smi absent")
    assert names <= set(EXPECTED), sorted(names - set(EXPECTED))


def _entries(kind: str, result) -> int:
    data = result.data
    if kind == "info -l":
        return len(data.cards)
    if kind == "info -m":
        return sum(1 for m in data if m["name"].strip().lower() != "mcu")
    if kind == "info -t topo":
        return len(data.npus)
    if kind == "info -t proc-mem":
        return len(data)
    if kind == "info -t current-fault-event":
        return len(data.events)
    return 0


def _mb(v):
    return None if v is None else int(v) // MIB


@pytest.mark.parametrize("path", shared_fixtures(TOOL), ids=lambda p: p.name)
def test_capture_parses_to_what_its_text_shows(path):
    kind, count, buses, memory, ddr, health, pids = EXPECTED[path.name]
    text = path.read_text()
    if kind == "error":
        with pytest.raises(ParseError, match="npu-smi printed an error: Invalid card id"):
            N.parse_any(text)
        return
    assert N.detect(text) == kind
    result = N.parse_any(text)
    if not isinstance(result, NodeSnapshot):
        assert result.command == kind and _entries(kind, result) == count
        if kind == "info -t proc-mem":
            assert tuple(p["pid"] for p in result.data) == pids
        return
    devs = result.devices
    assert len(devs) == count
    assert tuple(d.identity.pci_address for d in devs) == buses
    assert tuple(d.health.state for d in devs) == health
    if kind == "info":
        assert tuple(_mb(d.value("memory_total_bytes")) for d in devs) == memory
        assert tuple(_mb(d.value("memory_ddr_total_bytes")) for d in devs) == ddr
        assert tuple(p.pid for p in N.parse_summary(text).processes) == pids
    elif memory:
        doc = N.parse_detail(text, kind.split()[-1])
        hbm = [doc.get(c, "hbm capacity(mb)") for c in doc.chip_ids()]
        dram = [doc.get(c, "ddr capacity(mb)") for c in doc.chip_ids()]
        got_mem = tuple(int(h) if h is not None else int(d) for h, d in zip(hbm, dram))
        got_ddr = tuple(int(d) if h is not None else None for h, d in zip(hbm, dram))
        assert got_mem == memory and got_ddr == ddr
