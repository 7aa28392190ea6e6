"""cnmon parsers on every real capture in ../shared/fixtures/cnmon (values read off the
captures), the ``cnmon info`` parser on documented-structure samples, and hypothesis fuzzing
of both."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_fakes import mutated, only_parse_errors
from conftest import shared_fixture, shared_fixtures
from hetero_exporter.model import fields as F
from hetero_exporter.cli import main as cli_main
from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.collectors.cambricon.cnmon import collector as C
from hetero_exporter.model import snapshot_from_json

MIB = 1 << 20

# file -> (version, driver, timestamp, instance column,
#          cards as (card, vf, name, firmware, bus, util %, ecc, fan %, temp, (power, cap), (mem used, total),
#                    (vmem used, total), inited, driver, compute mode))
CAPTURES = {
    # name and memory total masked in the source ("MLUXXX-XX", "xxxxx MiB"): the total is absent
    "cnmon-default_8x-MLUXXX-XX-550W_cnmon-v5.10.31_mode-FULL_name-and-memory-REDACTED.txt": (
        "5.10.31", "5.10.31", "Thu Dec 19 22:05:42 2024", "MI",
        [(i, "/", "MLUXXX-XX", "v1.5.0", bus, 0, 0, 0, t, (p, 550), (0, None), (None, None), None, None, "Default")
         for i, (bus, t, p) in enumerate((("0000:4f:00.0", 35, 105), ("0000:53:00.0", 34, 100),
                                           ("0000:6f:00.0", 35, 100), ("0000:73:00.0", 34, 109),
                                           ("0000:af:00.0", 34, 107), ("0000:b3:00.0", 33, 105),
                                           ("0000:cf:00.0", 36, 102), ("0000:d3:00.0", 33, 105)))]),
    "default_1x-mlu220-m2_cnmon-1.16.0_driver-4.6.9_edge.txt": (
        "1.16.0", None, "Wed May 19 10:33:51 2021", "VF",
        [(0, "/", "MLU220-M2", "v1.1.1", None, 0, None, 0, 51, (3.70, 8.25), (967, 4096), (10240, 1048576),
          "On", "v4.6.9", None)]),
    "default_2x-mlu370-x4_cnmon-v5.10.10_exclusive.txt": (
        "5.10.10", "5.10.10", "Wed Jun 21 10:27:01 2023", "VF",
        [(0, "/", "MLU370-X4", "v1.1.6", "0000:1b:00.0", 0, None, 0, 41, (27, 150), (0, 23308), (None, None),
          None, None, "Exclusive"),
         (1, "/", "MLU370-X4", "v1.1.6", "0000:36:00.0", 0, None, 0, 41, (27, 150), (0, 23308), (None, None),
          None, None, "Exclusive")]),
    "default_2x-mlu370-x8_cnmon-v5.10.13.txt": (
        "5.10.13", "5.10.13", None, "MI",
        [(0, "/", "MLU370-X8", "v1.1.6", "0000:39:00.0", 0, None, 0, 32, (106, 250), (0, 23374), (None, None),
          None, None, "Default"),
         (1, "/", "MLU370-X8", "v1.1.6", "0000:3d:00.0", 0, None, 0, 39, (106, 250), (0, 23374), (None, None),
          None, None, "Default")]),
    "default_3x-mlu370-x4_cnmon-v4.20.11_vmemory.txt": (
        "4.20.11", None, "Sat Oct  8 11:22:22 2022", "VF",
        [(i, "/", "MLU370-X4", "v1.1.6", None, 0, None, 0, t, (p, 150), (0, 23308), (10240, 1048576),
          "On", "v4.20.11", None) for i, t, p in ((0, 32, 30), (1, 33, 25), (2, 30, 26))]),
}


def test_every_capture_is_known_to_this_test():
    names = {p.name for p in shared_fixtures("cnmon")}
    if not names:
        pytest.skip("../shared/fixtures/cnmon absent")
    assert names <= set(CAPTURES)


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_default_tables_give_the_cards_as_printed(name):
    text = shared_fixture("cnmon", name).read_text()
    assert C.detect(text) == "cnmon"
    t = C.parse_table(text)
    version, driver, stamp, inst, cards = CAPTURES[name]
    assert (t.version, t.driver_version, t.timestamp, t.instance_column) == (version, driver, stamp, inst)
    got = [(c.card, c.vf, c.name, c.firmware, c.bus_id, c.util_pct, c.ecc_errors, c.fan_pct, c.temp_c,
            (c.power_w, c.power_cap_w), (c.memory_used_mib, c.memory_total_mib),
            (c.vmemory_used_mib, c.vmemory_total_mib), c.inited, c.driver, c.compute_mode) for c in t.cards]
    assert got == cards
    assert t.processes == () and t.process_section  # "No running processes found" in every capture
    snap = C.table_snapshot(t)
    assert all(d.processes_reported for d in snap.devices)
    assert {d.health.state for d in snap.devices} == {"ok"}  # every card Inited / no fault shown


def test_snapshot_in_base_units():
    snap = C.parse_any(shared_fixture("cnmon", "default_2x-mlu370-x8_cnmon-v5.10.13.txt").read_text())
    a, b = snap.devices
    assert (a.identity.vendor, a.identity.kind, a.identity.model) == ("cambricon", "mlu", "MLU370-X8")
    assert a.identity.pci_address == "0000:39:00.0" and a.identity.uuid == "cambricon-pci-0000:39:00.0"
    assert a.identity.driver_version == "5.10.13" and a.identity.firmware_version == "v1.1.6"
    assert a.value(F.MEMORY_TOTAL) == 23374 * MIB and a.value(F.MEMORY_USED) == 0
    assert a.value(F.UTILIZATION) == 0.0 and a.value(F.POWER) == 106 and a.value(F.POWER_LIMIT) == 250
    assert b.value(F.TEMP_CORE) == 39
    # ECC off (N/A): absent with status unsupported, never 0
    assert a.readings["ecc_errors_total"].value is None
    assert a.readings["ecc_errors_total"].quality.status == "unsupported"
    edge = C.parse_any(shared_fixture("cnmon", "default_1x-mlu220-m2_cnmon-1.16.0_driver-4.6.9_edge.txt").read_text())
    (e,) = edge.devices
    assert e.identity.model == "MLU220" and e.identity.uuid == "cambricon-card0" and e.identity.pci_address is None
    assert e.identity.driver_version == "4.6.9"
    assert e.value(F.MEMORY_TOTAL) == 4096 * MIB and e.value("virtual_memory_total_bytes") == 1048576 * MIB
    assert e.value(F.POWER) == 3.7 and e.health.state == "ok"


def test_process_rows_and_not_initialized_cards():
    text = shared_fixture("cnmon", "default_3x-mlu370-x4_cnmon-v4.20.11_vmemory.txt").read_text()
    # the capture's own lines, with card 1 not initialized and two processes listed
    text = text.replace("| 1     /   MLU370-X4    v1.1.6 | On  ", "| 1     /   MLU370-X4    v1.1.6 | Off ")
    text = text.replace("|  No running processes found                                                  |",
                        "|  0     /   41234  python train.py --bs 8                          2048 MiB  |\n"
                        "|  2     /   5150   /usr/bin/infer                                  512 MiB   |")
    t = C.parse_table(text)
    assert [(p.card, p.instance, p.pid, p.command, p.memory_mib) for p in t.processes] == [
        (0, "/", 41234, "python train.py --bs 8", 2048), (2, "/", 5150, "/usr/bin/infer", 512)]
    snap = C.table_snapshot(t)
    assert [(p.pid, p.memory_bytes) for p in snap.devices[0].processes] == [(41234, 2048 * MIB)]
    assert snap.devices[1].processes == () and snap.devices[2].processes[0].pid == 5150
    bad = snap.devices[1]
    assert bad.health.state == "failed" and bad.health.reasons[0].code == "not-initialized"
    assert bad.health.reasons[0].action == "reset-device"


def test_parse_command(capsys):
    f = shared_fixture("cnmon", "default_2x-mlu370-x4_cnmon-v5.10.10_exclusive.txt")
    assert cli_main(["parse", "cnmon", str(f), "--json"]) == 0
    snap = snapshot_from_json(capsys.readouterr().out)
    assert [d.identity.pci_address for d in snap.devices] == ["0000:1b:00.0", "0000:36:00.0"]


# --------------------------------------------------------------------------- cnmon info
# NO REAL CAPTURE of `cnmon info` is at hand: these samples follow the section structure the
# vendor documents (Card header, key : value lines, indented sections), not a capture.

INFO_SAMPLE = """\
Card 0
Product Name                   : MLU370-X8
Serial Number                  : SN0123456789
UUID                           : 6f1c2a3b-0000-1111-2222-333344445555
Firmware                       : v1.1.6
Driver                         : v5.10.13
Physical Memory Usage          :
    Total                      : 23374 MiB
    Used                       : 1024 MiB
    Free                       : 22350 MiB
Utilization                    :
    MLU Average                : 12 %
Temperature                    :
    Board                      : 34 C
    Chip                       : 40 C
Power                          :
    Usage                      : 106 W
    Cap                        : 250 W
ECC
    DDR
        One Bit ECC Error      : 2
        Multi-bit ECC Error    : 1
Card 1
Product Name                   : MLU370-X8
Serial Number                  : N/A
Physical Memory Usage          :
    Total                      : 23374 MiB
"""


def test_info_sections_by_name_not_position():
    info = C.parse_info(INFO_SAMPLE)
    assert [c.card for c in info.cards] == [0, 1]
    c0 = info.cards[0]
    assert c0.values["physical memory usage/used"] == "1024 MiB"
    assert c0.values["utilization/mlu average"] == "12 %"
    r = C.info_readings(c0)
    assert (r.serial, r.product, r.firmware) == ("SN0123456789", "MLU370-X8", "v1.1.6")
    assert r.uuid == "6f1c2a3b-0000-1111-2222-333344445555"
    assert (r.ecc_corrected, r.ecc_uncorrected, r.temp_board) == (2, 1, 34)
    assert r.memory_total == 23374 * MIB
    r1 = C.info_readings(info.cards[1])
    assert r1.serial is None and r1.ecc_corrected is None
    assert C.detect(INFO_SAMPLE) == "cnmon info"
    assert C.parse_any(INFO_SAMPLE).to_dict()["command"] == "cnmon info"
    card = C.MluCard(card=0, name="MLU370-X8", bus_id="0000:39:00.0")
    assert C.card_uuid(card, r) == "MLU-6f1c2a3b-0000-1111-2222-333344445555"
    assert C.card_uuid(card, r1) == "cambricon-pci-0000:39:00.0"


def test_info_of_one_card_without_a_card_line():
    (c,) = C.parse_info("Product Name : MLU290-M5\nPower :\n  Usage : 200 W\n").cards
    assert c.card == 0 and c.find("usage", within="power") == "200 W"


# --------------------------------------------------------------------------- fuzzing

REAL = [p.read_text() for p in shared_fixtures("cnmon")] + [INFO_SAMPLE]
ALPHABET = "| +-=:/%.\nCardVFNameMiBWCN/A0123456789 vMLUOnOff"
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _only_parse_errors(fn, *args):
    return only_parse_errors("cnmon", fn, *args)


@FUZZ
@given(st.one_of(st.text(ALPHABET, max_size=400), mutated(REAL, "|+ :/x9-%C", ALPHABET)))
def test_fuzz_every_cnmon_parser(t):
    table = _only_parse_errors(C.parse_table, t)
    if table is not None:
        C.table_snapshot(table)
    info = _only_parse_errors(C.parse_info, t)
    if info is not None:
        for c in info.cards:
            _only_parse_errors(C.info_readings, c)
    _only_parse_errors(C.detect, t)
    _only_parse_errors(C.parse_any, t)


def test_a_huge_line_is_refused_quickly():
    _only_parse_errors(C.parse_table, "| CNMON v1 |\n| " + "a " * 500_000 + "|\n")
    _only_parse_errors(C.parse_info, "Product Name : " + "x " * 500_000 + "\n")
