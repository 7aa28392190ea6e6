"""npu-smi parsers on every real capture in ../shared/fixtures/npu-smi: device counts, bus ids,
memory totals (MB -> bytes), AI core usage as a ratio, health, processes and the detail
outputs, with the expected values read off the captures themselves."""

from __future__ import annotations

import pytest

from conftest import shared_fixture, shared_fixtures
from hetero_exporter.model import fields as F
from hetero_exporter.cli import main as cli_main
from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.collectors.ascend.npu_smi import collector as N
from hetero_exporter.model import NodeSnapshot, snapshot_from_json

MIB = 1 << 20


def text(name: str) -> str:
    return shared_fixture("npu-smi", name).read_text()


# Which command printed each capture (the detector must say so for every one).
EXPECTED_KIND = {
    "ascend950_info-l_doc.txt": "info -l",
    "ascend950_info-m_doc-REDACTED.txt": "info -m",
    "ascend950_info-t-board_doc-REDACTED.txt": "info -t board",
    "ascend950_info-t-common_doc.txt": "info -t common",
    "ascend950_info-t-current-fault-event_doc.txt": "info -t current-fault-event",
    "ascend950_info-t-ecc_doc.txt": "info -t ecc",
    "ascend950_info-t-health_doc.txt": "info -t health",
    "ascend950_info-t-memory_doc.txt": "info -t memory",
    "ascend950_info-t-power_doc.txt": "info -t power",
    "ascend950_info-t-proc-mem_doc.txt": "info -t proc-mem",
    "ascend950_info-t-sensors_doc.txt": "info -t sensors",
    "ascend950_info-t-temp_doc.txt": "info -t temp",
    "ascend950_info-t-usages_doc.txt": "info -t usages",
    "ascend950_info-table_new-layout_DOC-REDACTED.txt": "info",
    "info-l_8x-910B-IT21HMDC_npu-smi-25.5.1_8sp-indent.txt": "info -l",
    "info-m_4x-310P-duo-2chips-plus-mcu_REDACTED.txt": "info -m",
    "info-m_910A-x8_mindcluster-faultdiag.txt": "info -m",
    "info-m_atlas800-3000_310x4-plus-mcu_npu-smi-21.0.4.txt": "info -m",
    "info-m_atlas800-3000_310x4_npu-smi-20.2.0.txt": "info -m",
    "info-t-board-chip_310P_die-id_REDACTED.txt": "info -t board-chip",
    "info-t-board-chip_910A_npu-smi-23.0.5.txt": "info -t board-chip",
    "info-t-board_910A_npu-smi-23.0.5.txt": "info -t board",
    "info-t-board_910B-IT21HMDC_npu-smi-25.5.1_8sp-indent.txt": "info -t board",
    "info-t-board_error-invalid-card-id.txt": "error",
    "info-t-common_910A_doc.txt": "info -t common",
    "info-t-common_910B-20core_with-mcu.txt": "info -t common",
    "info-t-ecc_910A_npu-smi-23.0.5_doc.txt": "info -t ecc",
    "info-t-flash.txt": "info -t flash",
    "info-t-health_910A_OK.txt": "info -t health",
    "info-t-memory_hbm32768.txt": "info -t memory",
    "info-t-power_910B-IT21HMDC_npu-smi-25.5.1_8sp-indent.txt": "info -t power",
    "info-t-temp_910B-IT21HMDC_npu-smi-25.5.1_8sp-indent.txt": "info -t temp",
    "info-t-usages_310P-duo-2chips-dvpp.txt": "info -t usages",
    "info-t-usages_910A_npu-smi-23.0.5.txt": "info -t usages",
    "info-t-usages_ddr15079-hbm32768.txt": "info -t usages",
    "info-table_1x-910B-first-gen_in-container_npu-smi-23.0.rc1.txt": "info",
    "info-table_1x-910ProB_npu-smi-23.0.rc1_process.txt": "info",
    "info-table_2x-910B2C_npu-smi-23.0.rc3.txt": "info",
    "info-table_4x-910A_npu-smi-1.9.3_v21.0.rc1_old-layout.txt": "info",
    "info-table_8x-910B1_npu-smi-23.0.rc2.b090_under-load_ELIDED.txt": "info",
    "info-table_8x-910B3_npu-smi-23.0.0_container.txt": "info",
    "info-table_atlas800-3000_310x4_npu-smi-20.2.0.txt": "info",
    "info-table_atlas800-9010_910A-x8_npu-smi-22.0.3.1.txt": "info",
    "info-t-board_310P3-duo_IT21PD2G10_npu-smi-25.5.1.txt": "info -t board",
    "info-t-common_310P3-duo-2chips-plus-mcu_npu-smi-25.5.1.txt": "info -t common",
    "info-t-power_310P3-duo_mcu_npu-smi-25.5.1.txt": "info -t power",
    "info-t-product_atlas-300I-duo_npu-smi-25.5.1.txt": "info -t product",
    "info-t-topo_8x-910B3_HCCS-full-mesh_npu-smi-24.1.rc1.b030_leading-tab.txt": "info -t topo",
    "info-t-usages_310P3-duo-2chips_npu-smi-25.5.1.txt": "info -t usages",
    "info-table_1x-310P3-duo-2chips_npu-id-2944_npu-smi-25.5.1.txt": "info",
    "info-table_2x-910A_npu-smi-21.0.4_cann504.txt": "info",
    "info-table_8x-910B3_npu-smi-24.1.rc1.b030_no-process-table_TRUNCATED.txt": "info",
    # batch of 2026-12-06
    "npu-smi-info_2x-910B2C_npu-smi-23.0.2.1_trailing-spaces_no-space-before-slash_process-row.txt": "info",
    "npu-smi-info_1x-310B4_Atlas-200I-DK-A2_npu-smi-23.0.0_state-Alarm_bus-id-NA_no-HBM-column_trailing-spaces.txt":
        "info",
    "npu-smi-info_2x-A3-Ascend910-4-dies_npu-smi-25.2.0_process-on-die1_no-space-before-slash.txt": "info",
    "npu-smi-info_2x-310P3-duo-2chips_npu-smi-24.1.0.1_power-NA_hugepages_mindie-processes.txt": "info",
    "npu-smi-info_1x-910B4_npu-smi-26.0.rc1_wide-layout_process-id-in-container-column.txt": "info",
}


def test_every_capture_is_known_to_this_test():
    names = {p.name for p in shared_fixtures("npu-smi")}
    if not names:
        pytest.skip("../shared/fixtures/npu-smi absent")
    assert names == set(EXPECTED_KIND), "a capture was added or removed: extend EXPECTED_KIND"


@pytest.mark.parametrize("path", shared_fixtures("npu-smi"), ids=lambda p: p.name)
def test_detector_names_the_command_and_every_capture_parses(path):
    t = path.read_text()
    kind = EXPECTED_KIND[path.name]
    if kind == "error":
        with pytest.raises(ParseError, match="Invalid card id"):
            N.detect(t)
        with pytest.raises(ParseError):
            N.parse_any(t)
        return
    assert N.detect(t) == kind
    result = N.parse_any(t)
    if isinstance(result, NodeSnapshot):
        assert result.devices, "a device output gives at least one device"
    else:
        assert result.to_dict()["command"] == kind


# --------------------------------------------------------------------------- summary tables

# file -> (chips as (npu, chip, bus id, name, health, aicore %, (mem used, total), (hbm used, total),
#          power W, temp C), processes as (npu, chip, pid, name, MB))
SUMMARIES = {
    "info-table_8x-910B3_npu-smi-23.0.0_container.txt": (
        [(0, 0, "0000:c1:00.0", "910B3", "OK", 0, (0, 0), (3314, 65536), 92.2, 36),
         (1, 0, "0000:c2:00.0", "910B3", "OK", 0, (0, 0), (3307, 65536), 91.9, 38),
         (2, 0, "0000:81:00.0", "910B3", "OK", 0, (0, 0), (3308, 65536), 93.3, 37),
         (3, 0, "0000:82:00.0", "910B3", "OK", 0, (0, 0), (3308, 65536), 94.7, 38),
         (4, 0, "0000:01:00.0", "910B3", "OK", 0, (0, 0), (3307, 65536), 94.8, 41),
         (5, 0, "0000:02:00.0", "910B3", "OK", 0, (0, 0), (3307, 65536), 95.8, 44),
         (6, 0, "0000:41:00.0", "910B3", "OK", 0, (0, 0), (3307, 65536), 92.5, 41),
         (7, 0, "0000:42:00.0", "910B3", "OK", 0, (0, 0), (3307, 65536), 93.3, 43)], []),
    "info-table_8x-910B1_npu-smi-23.0.rc2.b090_under-load_ELIDED.txt": (
        [(0, 0, "0000:c1:00.0", "910B1", "OK", 57, (0, 0), (64293, 65536), 327.1, 54),
         (7, 0, "0000:42:00.0", "910B1", "OK", 68, (0, 0), (64114, 65536), 451.6, 76)],
        [(0, 0, 2441447, "python", 59618), (1, 0, 2441448, "python", 59834), (7, 0, 2441454, "python", 59802)]),
    "info-table_1x-910ProB_npu-smi-23.0.rc1_process.txt": (
        [(0, 0, "0000:c1:00.0", "910ProB", "OK", 0, (1198, 15137), (30711, 32768), 78.4, 33)],
        [(0, 0, 55115, "python", 30784)]),
    "info-table_1x-910B-first-gen_in-container_npu-smi-23.0.rc1.txt": (
        [(0, 0, "0000:c1:00.0", "910B", "OK", 0, (2003, 15039), (1, 32768), 68.4, 39)], []),
    "info-table_2x-910B2C_npu-smi-23.0.rc3.txt": (
        [(0, 0, "0000:5a:00.0", "910B2C", "OK", 0, (0, 0), (4302, 65536), 83.4, 35),
         (1, 0, "0000:29:00.0", "910B2C", "OK", 0, (0, 0), (4302, 65536), 83.4, 37)], []),
    "info-table_4x-910A_npu-smi-1.9.3_v21.0.rc1_old-layout.txt": (
        [(4, 0, "0000:c2:00.0", "910A", "OK", 0, (303, 15171), (0, 32768), 67.2, 30),
         (5, 0, "0000:82:00.0", "910A", "OK", 0, (2123, 15171), (0, 32768), 63.8, 25),
         (6, 0, "0000:42:00.0", "910A", "OK", 0, (1061, 15171), (0, 32768), 67.1, 27),
         (7, 0, "0000:02:00.0", "910A", "OK", 0, (2563, 15078), (0, 32768), 65.5, 30)], []),
    "info-table_atlas800-9010_910A-x8_npu-smi-22.0.3.1.txt": (
        [(0, 0, "0000:61:00.0", "910A", "OK", 0, (1867, 15077), (0, 32768), 67.2, 43),
         (1, 0, "0000:db:00.0", "910A", "OK", 0, (1867, 15077), (0, 32768), 63.3, 38),
         (2, 0, "0000:b2:00.0", "910A", "OK", 0, (1868, 15077), (0, 32768), 64.8, 34),
         (3, 0, "0000:3e:00.0", "910A", "OK", 0, (1866, 15077), (0, 32768), 191.7, 42),
         (4, 0, "0000:60:00.0", "910A", "OK", 0, (1867, 15077), (0, 32768), 66.4, 44),
         (5, 0, "0000:da:00.0", "910A", "OK", 0, (1865, 15077), (0, 32768), 62.7, 33),
         (6, 0, "0000:b1:00.0", "910A", "OK", 0, (1865, 15077), (0, 32768), 64.5, 35),
         (7, 0, "0000:3d:00.0", "910A", "OK", 0, (1866, 15077), (0, 32768), 191.4, 40)], []),
    "info-table_atlas800-3000_310x4_npu-smi-20.2.0.txt": (
        [(215, 0, "0000:da:00.0", "310", "OK", 0, (2703, 8192), (None, None), 12.8, 56),
         (215, 1, "0000:dc:00.0", "310", "OK", 0, (2703, 8192), (None, None), 12.8, 57),
         (215, 2, "0000:dd:00.0", "310", "OK", 0, (2703, 8192), (None, None), 12.8, 57),
         (215, 3, "0000:db:00.0", "310", "OK", 0, (2703, 8192), (None, None), 12.8, 55)], []),
    "ascend950_info-table_new-layout_DOC-REDACTED.txt": (
        [(0, 0, "0000:91:00.0", "xxx", "OK", 0, (0, 0), (4439, 86016), 204.4, 56)], []),
    # batch of 2026-12-06
    "npu-smi-info_2x-910B2C_npu-smi-23.0.2.1_trailing-spaces_no-space-before-slash_process-row.txt": (
        [(0, 0, "0000:5a:00.0", "910B2C", "OK", 0, (0, 0), (20701, 65536), 88.6, 51),
         (1, 0, "0000:19:00.0", "910B2C", "OK", 0, (0, 0), (20687, 65536), 99.6, 50)],
        [(0, 0, 124528, "python3.8", 17400)]),
    "npu-smi-info_1x-310B4_Atlas-200I-DK-A2_npu-smi-23.0.0_state-Alarm_bus-id-NA_no-HBM-column_trailing-spaces.txt": (
        [(0, 0, None, "310B4", "Alarm", 0, (3628, 15609), (None, None), 0.0, 65)], []),
    # the second die of each card prints Power "-"
    "npu-smi-info_2x-A3-Ascend910-4-dies_npu-smi-25.2.0_process-on-die1_no-space-before-slash.txt": (
        [(0, 0, "0000:9c:00.0", "Ascend910", "OK", 0, (0, 0), (3133, 65536), 162.8, 37),
         (0, 1, "0000:9e:00.0", "Ascend910", "OK", 0, (0, 0), (2876, 65536), None, 37),
         (1, 0, "0000:37:00.0", "Ascend910", "OK", 0, (0, 0), (3116, 65536), 167.1, 38),
         (1, 1, "0000:39:00.0", "Ascend910", "OK", 0, (0, 0), (10568, 65536), None, 38)],
        [(1, 1, 990711, "python", 7746)]),
    "npu-smi-info_2x-310P3-duo-2chips_npu-smi-24.1.0.1_power-NA_hugepages_mindie-processes.txt": (
        [(1, 0, "0000:01:00.0", "310P3", "OK", 0, (16302, 44280), (None, None), None, 62),
         (1, 1, "0000:01:00.0", "310P3", "OK", 0, (15543, 43693), (None, None), None, 62),
         (2, 0, "0000:02:00.0", "310P3", "OK", 0, (35563, 44280), (None, None), None, 61),
         (2, 1, "0000:02:00.0", "310P3", "OK", 0, (35204, 43693), (None, None), None, 61)],
        [(1, 0, 3277562, "mindie_llm_back", 14513), (1, 1, 3277565, "mindie_llm_back", 14513),
         (2, 0, 3034986, "mindie_llm_back", 34207), (2, 1, 3034989, "mindie_llm_back", 33740)]),
    "npu-smi-info_1x-910B4_npu-smi-26.0.rc1_wide-layout_process-id-in-container-column.txt": (
        [(0, 0, "0000:c1:00.0", "910B4", "OK", 0, (0, 0), (2871, 32768), 82.6, 32)], []),
}


@pytest.mark.parametrize("name", sorted(SUMMARIES))
def test_summary_tables_give_the_rows_as_printed(name):
    s = N.parse_summary(text(name))
    chips, procs = SUMMARIES[name]
    got = [(c.npu_id, c.chip_id, c.bus_id, c.name, c.health, c.aicore_pct, (c.memory_used_mb, c.memory_total_mb),
            (c.hbm_used_mb, c.hbm_total_mb), c.power_w, c.temp_c) for c in s.chips]
    assert got == chips
    assert [(p.npu_id, p.chip_id, p.pid, p.name, p.memory_mb) for p in s.processes] == procs
    assert s.elided == ("ELIDED" in name)


def test_versions_and_layouts_come_from_the_title_and_header():
    assert (N.parse_summary(text("info-table_8x-910B3_npu-smi-23.0.0_container.txt")).driver_version) == "23.0.0"
    old = N.parse_summary(text("info-table_4x-910A_npu-smi-1.9.3_v21.0.rc1_old-layout.txt"))
    assert (old.tool_version, old.driver_version, old.layout) == ("1.9.3", "21.0.rc1", "910")
    assert old.chips[0].hugepages_total is None  # this layout has no Hugepages column
    a3000 = N.parse_summary(text("info-table_atlas800-3000_310x4_npu-smi-20.2.0.txt"))
    assert a3000.layout == "310" and [c.logic_id for c in a3000.chips] == [0, 1, 2, 3]
    assert N.parse_summary(text("ascend950_info-table_new-layout_DOC-REDACTED.txt")).layout == "new"
    hp = N.parse_summary(text("info-table_atlas800-9010_910A-x8_npu-smi-22.0.3.1.txt")).chips[0]
    assert (hp.hugepages_used, hp.hugepages_total) == (15, 15)


def test_summary_snapshot_in_base_units():
    snap = N.parse_any(text("info-table_8x-910B1_npu-smi-23.0.rc2.b090_under-load_ELIDED.txt"))
    d0, d7 = snap.devices
    assert (d0.identity.vendor, d0.identity.kind, d0.identity.model) == ("ascend", "npu", "Ascend910B1")
    assert d0.identity.pci_address == "0000:c1:00.0" and d0.identity.driver_version == "23.0.rc2.b090"
    assert d0.value(F.UTILIZATION) == pytest.approx(0.57) and d7.value(F.UTILIZATION) == pytest.approx(0.68)
    assert d0.value(F.MEMORY_TOTAL) == 65536 * MIB and d0.value(F.MEMORY_USED) == 64293 * MIB
    assert d0.value(F.POWER) == 327.1 and d7.value(F.TEMP_CORE) == 76
    # processes of the chips shown; NPU 1's row belongs to a chip the capture left out
    assert [(p.pid, p.memory_bytes) for p in d0.processes] == [(2441447, 59618 * MIB)]
    assert [(p.pid, p.memory_bytes) for p in d7.processes] == [(2441454, 59802 * MIB)]
    assert all(p.pod is None and p.namespace is None for p in d0.processes)
    assert d0.processes_reported  # the table has a process section
    a3000 = N.parse_any(text("info-table_atlas800-3000_310x4_npu-smi-20.2.0.txt"))
    assert not any(d.processes_reported for d in a3000.devices)  # this layout lists none
    assert d0.health.state == "ok"


def test_ddr_is_device_memory_on_chips_without_hbm_and_extra_on_910():
    a3000 = N.parse_any(text("info-table_atlas800-3000_310x4_npu-smi-20.2.0.txt")).devices[0]
    assert a3000.value(F.MEMORY_TOTAL) == 8192 * MIB and a3000.value(F.MEMORY_USED) == 2703 * MIB
    assert "memory_ddr_total_bytes" not in a3000.readings
    assert a3000.identity.model == "Ascend310" and a3000.identity.index == 0
    a910 = N.parse_any(text("info-table_atlas800-9010_910A-x8_npu-smi-22.0.3.1.txt")).devices[3]
    assert a910.value(F.MEMORY_TOTAL) == 32768 * MIB and a910.value("memory_ddr_total_bytes") == 15077 * MIB
    assert a910.value("memory_ddr_used_bytes") == 1866 * MIB and a910.value(F.POWER) == 191.7


# --------------------------------------------------------------------------- -m, -l, details


def test_mapping_outputs():
    m = N.parse_mapping(text("info-m_4x-310P-duo-2chips-plus-mcu_REDACTED.txt"))
    assert [(r.npu_id, r.chip_id, r.logic_id) for r in m if not r.is_mcu] == [
        (1, 0, 0), (1, 1, 1), (2, 0, 2), (2, 1, 3), (4, 0, 4), (4, 1, 5), (5, 0, 6), (5, 1, 7)]
    assert [(r.npu_id, r.chip_id) for r in m if r.is_mcu] == [(1, 2), (2, 2), (4, 2), (5, 2)]
    m910 = N.parse_mapping(text("info-m_910A-x8_mindcluster-faultdiag.txt"))
    assert [r.logic_id for r in m910] == list(range(8)) and m910[0].name == "Ascend 910A"
    old = N.parse_mapping(text("info-m_atlas800-3000_310x4_npu-smi-20.2.0.txt"))
    assert [(r.npu_id, r.chip_id, r.name) for r in old] == [(215, i, "MiniD") for i in range(4)]
    new = N.parse_mapping(text("ascend950_info-m_doc-REDACTED.txt"))
    assert [(r.npu_id, r.slot_id, r.chip_id, r.phy_id, r.name) for r in new] == [(0, 0, 0, 0, "xxx")]


def test_list_outputs():
    lst = N.parse_list(text("info-l_8x-910B-IT21HMDC_npu-smi-25.5.1_8sp-indent.txt"))
    assert lst.total == 8 and [c.npu_id for c in lst.cards] == list(range(8))
    assert all(c.chip_count == 1 for c in lst.cards)
    one = N.parse_list(text("ascend950_info-l_doc.txt"))
    assert one.total == 1 and one.cards[0].serial == "IT23HMDA0502FAA"
    assert one.cards[0].product_name == "A5 PCIe Card"


def test_usages_give_ratios_per_chip():
    doc = N.parse_detail(text("info-t-usages_310P-duo-2chips-dvpp.txt"), "usages")
    assert doc.npu_id == 1 and sorted(doc.chips) == [0, 1]
    assert doc.get(0, "ddr capacity(mb)") == "44280" and doc.get(1, "ddr capacity(mb)") == "43693"
    r0, r1 = N.detail_readings(doc, 0), N.detail_readings(doc, 1)
    assert r0[F.MEMORY_UTILIZATION].value == pytest.approx(0.51)  # DDR bandwidth: no HBM
    assert r0["ctrlcpu_utilization_ratio"].value == pytest.approx(0.02)
    assert r1["ctrlcpu_utilization_ratio"].value == pytest.approx(0.03)
    assert r0["vector_utilization_ratio"].value == 0.0
    hbm = N.parse_detail(text("info-t-usages_ddr15079-hbm32768.txt"), "usages")
    assert hbm.get(0, "hbm capacity(mb)") == "32768" and hbm.get(0, "ddr usage rate(%)") == "14"
    new = N.detail_readings(N.parse_detail(text("ascend950_info-t-usages_doc.txt"), "usages"), 0)
    assert new[F.MEMORY_UTILIZATION].value == pytest.approx(0.03) and new["ctrlcpu_utilization_ratio"].value == 0.4


def test_common_memory_ecc_temp_details():
    common = N.detail_readings(N.parse_detail(text("info-t-common_910B-20core_with-mcu.txt"), "common"), 0)
    assert common[F.CLOCK_COMPUTE].value == 1800e6 and common["aicore_count"].value == 20
    c950 = N.detail_readings(N.parse_detail(text("ascend950_info-t-common_doc.txt"), "common"), 0)
    assert c950[F.CLOCK_COMPUTE].value == 100e6 and c950["clock_compute_max_hertz"].value == 1650e6
    mem = N.detail_readings(N.parse_detail(text("info-t-memory_hbm32768.txt"), "memory"), 0)
    assert mem[F.CLOCK_MEMORY].value == 1600e6 and mem[F.TEMP_MEMORY].value == 35
    ecc = N.detail_readings(N.parse_detail(text("info-t-ecc_910A_npu-smi-23.0.5_doc.txt"), "ecc"), 0)
    assert ecc[F.ECC_CORRECTED].value == 0 and ecc[F.ECC_UNCORRECTED].value == 0
    temp = N.parse_detail(text("info-t-temp_910B-IT21HMDC_npu-smi-25.5.1_8sp-indent.txt"), "temp")
    assert temp.get(0, "npu temperature (c)") == "39" and temp.mcu["lm75a_te (c)"] == "36"
    assert N.detail_readings(temp, 0)[F.TEMP_BOARD].value == 36


def test_board_outputs_and_stable_ids():
    b = N.parse_detail(text("info-t-board_910B-IT21HMDC_npu-smi-25.5.1_8sp-indent.txt"), "board")
    assert b.get(0, "serial number") == "1025C9048791" and b.get(0, "pcie bus info") == "0000:C1:00.0"
    chip = N.NpuChip(npu_id=0, bus_id="0000:c1:00.0")
    assert N.chip_uuid(chip, b, None, False) == "ascend-sn-1025C9048791"
    a = N.parse_detail(text("info-t-board-chip_910A_npu-smi-23.0.5.txt"), "board-chip")
    a_board = N.parse_detail(text("info-t-board_910A_npu-smi-23.0.5.txt"), "board")
    assert a_board.get(0, "serial number") is None  # this release prints no serial
    assert N.chip_uuid(chip, a_board, a, False) == "ascend-42c711d4-20b03704-4a10c8d4-14cc040a-d2102003"
    assert N.chip_uuid(chip, a_board, None, False) == "ascend-pci-0000:c1:00.0"
    p = N.parse_detail(text("info-t-board-chip_310P_die-id_REDACTED.txt"), "board-chip")
    assert p.npu_id == 1 and p.get(0, "die id") == "409921D4 2140A100 E54BDDD4 07CC040A 9B00301F"


def test_health_outputs():
    ok = N.health_detail(N.parse_detail(text("info-t-health_910A_OK.txt"), "health"))
    assert ok == N.HealthDetail("OK", (), "")
    new = N.health_detail(N.parse_detail(text("ascend950_info-t-health_doc.txt"), "health"))
    assert new.state == "OK" and new.codes == ()


def test_health_with_codes_and_multi_line_information():
    # layout of a -t health output with codes (key column 30 wide, value column 33)
    sample = ("\tHealth Status                  : Critical\n"
              "\tError Code                     : 80E3A201 0x80CF8009\n"
              "\tError Information              : node type=AICORE, sensor type=Memory\n"
              "\t                                 node type=HBM, sensor type=ECC\n")
    h = N.health_detail(N.parse_detail(sample, "health"))
    assert h.state == "Critical" and h.codes == ("80E3A201", "80CF8009")
    assert h.information == "node type=AICORE, sensor type=Memory; node type=HBM, sensor type=ECC"
    snap = N.parse_any(sample)
    (dev,) = snap.devices
    assert dev.health.state == "failed"
    by_code = {f.code: f for f in dev.health.reasons}
    assert by_code["80E3A201"].action == "isolate-device" and by_code["80E3A201"].fault_class == "separate-npu"
    assert by_code["80CF8009"].action == "reset-device" and by_code["Critical"].severity == "critical"
    with pytest.raises(ParseError, match="Error Code"):
        N.health_detail(N.parse_detail("Health Status : Alarm\nError Code : oops\n", "health"))


def test_proc_mem_and_fault_events():
    (p,) = N.parse_proc_mem(text("ascend950_info-t-proc-mem_doc.txt"))
    assert (p.npu_id, p.pid, p.name, p.memory_mb) == (0, 395864, "power_test", 5118)
    ev = N.parse_detail(text("ascend950_info-t-current-fault-event_doc.txt"), "current-fault-event")
    assert ev.get(None, "fault event count") == "1" and "0x81AF8000" in ev.get(None, "fault event information")


def test_parse_command_prints_the_model(tmp_path, capsys):
    f = shared_fixture("npu-smi", "info-table_2x-910B2C_npu-smi-23.0.rc3.txt")
    assert cli_main(["parse", "npu-smi", str(f), "--json"]) == 0
    snap = snapshot_from_json(capsys.readouterr().out)
    assert [d.identity.pci_address for d in snap.devices] == ["0000:5a:00.0", "0000:29:00.0"]
    assert all(d.value(F.MEMORY_TOTAL) == 65536 * MIB for d in snap.devices)
    m = shared_fixture("npu-smi", "info-m_910A-x8_mindcluster-faultdiag.txt")
    assert cli_main(["parse", "npu-smi", str(m), "--json"]) == 0
    assert '"command": "info -m"' in capsys.readouterr().out
    err = shared_fixture("npu-smi", "info-t-board_error-invalid-card-id.txt")
    assert cli_main(["parse", "npu-smi", str(err)]) == 1
    assert "Invalid card id" in capsys.readouterr().err
