"""Kernel-log lines of issue 40 §1: dmesg's other prefixes (-x with an ISO time, --time-format=iso,
-e, -d, -r), NVSwitch SXid lines given by their error-log entry alone (Severity / Data), the
multi-line "fallen off the bus" record without an Xid, and each visible capture that gives no event
decided with its reason (a rules file's ``ignore`` entry). Fuzz on the new prefixes and rules."""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import shared_fixture
from hetero_exporter import vendors
from hetero_exporter.sdk import faults, kmsg
from hetero_exporter.sdk.kmsg import Record, split_record

from test_kmsg_fuzz import check

FUZZ = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def parse(text: str) -> list[kmsg.Event]:
    return kmsg.parse_lines(io.StringIO(text))[0]


def capture(name: str) -> tuple[list[kmsg.Event], list[str]]:
    text = shared_fixture("kernel-log", name).read_text(encoding="utf-8")
    return parse(text), text.splitlines()


def rules(vendor: str) -> kmsg.VendorRules:
    got = kmsg.load_rules(vendors.specs()[vendor])
    assert got is not None
    return got


# --------------------------------------------------------------------------- dmesg's prefixes

@pytest.mark.parametrize("raw, text, time, prio, kernel", [
    # dmesg -x --time-format=iso (the line)
    ("kern  :err   : 2025-01-25T10:34:54,859532+00:00 NVRM: Xid (PCI:0000:38:00): 79, x",
     "NVRM: Xid (PCI:0000:38:00): 79, x", "2025-01-25T10:34:54,859532+00:00", 3, True),
    ("kern  :err   : [Jan25 10:34] NVRM: x", "NVRM: x", "Jan25 10:34", 3, True),  # -x -e
    ("kern  :err   : [  +0.000123] NVRM: x", "NVRM: x", "+0.000123", 3, True),
    ("kern  :err   : [  171.500000 <    0.000123>] NVRM: x", "NVRM: x", "171.500000", 3, True),  # -x -d
    ("kern  :crit  : NVRM: x", "NVRM: x", None, 2, True),  # -x --notime
    ("user  :err   : 2025-01-25T10:34:54,859532+00:00 NVRM: Xid (PCI:0000:38:00): 79, x",
     "NVRM: Xid (PCI:0000:38:00): 79, x", "2025-01-25T10:34:54,859532+00:00", 3, False),  # logger: forged
    # dmesg --time-format=iso without -x: the comma tells it from a syslog ISO stamp
    ("2024-11-15T12:02:03,470068+00:00 NVRM: Xid (PCI:0000:19:00): 48, x", "NVRM: Xid (PCI:0000:19:00): 48, x",
     "2024-11-15T12:02:03,470068+00:00", None, True),
    ("2024-11-15T05:39:15,491363+00:00 amdgpu 0000:c3:00.0: amdgpu: GPU reset begin!",
     "amdgpu 0000:c3:00.0: amdgpu: GPU reset begin!", "2024-11-15T05:39:15,491363+00:00", None, True),
    ("[Jan25 10:34] NVRM: x", "NVRM: x", "Jan25 10:34", None, True),
    ("[  171.500000 <    0.000123>] NVRM: x", "NVRM: x", "171.500000", None, True),
    ("<3>[  171.5] NVRM: x", "NVRM: x", "171.5", 3, True),  # dmesg -r
    ("<14>NVRM: x", "NVRM: x", None, 6, False),  # facility 1 (user)
])
def test_dmesg_prefixes(raw, text, time, prio, kernel):
    assert split_record(raw, 4) == Record(line=4, text=text, time=time, priority=prio, kernel=kernel)


def test_an_iso_dmesg_amdgpu_line_is_the_kernels_not_a_syslog_tag():
    """It read as host 'amdgpu', tag '0000' (user space) before: the reset was lost."""
    (e,) = parse("2024-11-15T05:39:15,491363+00:00 amdgpu 0000:c3:00.0: amdgpu: GPU reset begin!\n")
    assert (e.pci_address, e.code, e.time) == ("0000:c3:00.0", "gpu-reset", "2024-11-15T05:39:15,491363+00:00")


def test_the_iso_capture_gives_its_times_and_repeats_hit_the_memo():
    events, lines = capture("nvidia_xid-48-dbe_xid-63-row-remap_xid-94-contained_peermem_dmesg-time-format-iso.log")
    assert [e.code for e in events] == ["48", "63"] + ["94"] * 9
    assert events[0].time == "2024-11-15T12:02:03,470068+00:00" and events[0].pci_address == "0000:19:00.0"
    assert events[0].message.startswith("NVRM: Xid")  # the stamp is no part of the text
    m = kmsg.Matcher()
    for n, raw in enumerate(lines, 1):
        rec = split_record(raw, n)
        assert rec is not None
        m.match(rec)
    # the 31 nvidia-peermem lines are two texts: judged once each, not once a line
    assert m.evaluated <= 2 + len(events)


# --------------------------------------------------------------------------- NVSwitch SXid

# gpud components/accelerator/nvidia/sxid/README.md (a real node: SXid 20034 with Xid 79) and
# kmsg_test.go ("[131453.740758] nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 20034, Data {...}")
README = """\
[6781753.400584] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up
[6781753.404587] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 63 LTSSM Fault Up
[6781753.404848] nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Severity 1 Engine instance 60 Sub-engine instance 00
[6781753.406566] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x10000000, 0x10000000, 0x00000000, 0x10000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000}
[6781753.407899] nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 37 LTSSM Fault Up
[6781753.408138] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 62 LTSSM Fault Up
[6781753.409504] nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Severity 1 Engine instance 37 Sub-engine instance 00
[6781753.409792] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Severity 1 Engine instance 62 Sub-engine instance 00
"""


def test_sxid_headers_count_and_their_entry_lines_do_not_count_again():
    events = parse(README)
    # nvswitch2's link 60 is given by its Severity line alone (its header is not in the excerpt)
    assert [(e.line, e.pci_address, e.code) for e in events] == [
        (1, "0000:06:00.0", "SXID-20034"), (2, "0000:05:00.0", "SXID-20034"), (3, "0000:07:00.0", "SXID-20034"),
        (5, "0000:07:00.0", "SXID-20034"), (6, "0000:05:00.0", "SXID-20034")]
    assert all(e.node_level and e.severity == "critical" and e.action == "reboot-node" for e in events)


def test_an_sxid_given_only_by_its_data_line():
    (e,) = parse("[131453.740758] nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 20034, Data {0x50610002, 0x10100030}\n")
    assert (e.pci_address, e.code, e.fault_class, e.node_level) == ("0000:a9:00.0", "SXID-20034",
                                                                      "nvswitch-link-fatal", True)
    # an SXid the table does not list: its Severity word says fatal or not; a Data or SOE line says neither
    unknown = parse("nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 12033, Severity 1 Engine instance 00 Sub-engine instance 00\n"
                    "nvidia-nvswitch1: SXid (PCI:0000:c4:00.0): 12033, Severity 0 Engine instance 00 Sub-engine instance 00\n"
                    "nvidia-nvswitch2: SXid (PCI:0000:c5:00.0): 11111, Data {0x50610002, 0x10100030}\n"
                    "nvidia-nvswitch3: SXid (PCI:0004:00:00.0): 26008, SOE Watchdog error\n")
    sxid = faults.lookup("nvidia", "sxid")
    assert [(e.code, e.severity, e.fault_class) for e in unknown] == [
        ("SXID-12033", "critical", "nvswitch-fatal"), ("SXID-12033", "warning", "nvswitch"),
        ("SXID-11111", sxid.severity, sxid.fault_class), ("SXID-26008", sxid.severity, sxid.fault_class)]


def test_a_soe_halt_and_its_data_line_are_one_sxid():
    events = parse("nvidia-nvswitch0: SXid (PCI:0004:00:00.0): 26006, SOE HALTED\n"
                   "nvidia-nvswitch0: SXid (PCI:0004:00:00.0): 26006, SOE HALT data[0] = 0x               0\n")
    assert [(e.line, e.code) for e in events] == [(1, "SXID-26006")]


def test_sxid_lines_that_are_no_sxid():
    assert parse("nvidia-nvswitch0: SXid (PCI:0000:00:00.0): xyz, Fatal error\n"
                 "nvidia-nvswitch0: SXid (invalid): some error\n"
                 "6,3964,206764307,-;nvidia-nvswitch2: open (major=510)\n") == []


# --------------------------------------------------------------------------- the visible captures

def test_fallen_off_the_bus_over_three_lines_without_an_xid_is_79_on_its_gpu():
    events, lines = capture("nvidia_fallen-off-bus-multiline_no-xid_570.158.01_dmesg.log")
    (e,) = events
    assert (e.line, e.pci_address, e.code, e.severity, e.action) == (3, "0000:b3:00.0", "79", "critical",
                                                                     "reboot-node")
    # the probe's summary line after it is decided no fault (it names no device)
    assert rules("nvidia").ignoring(split_record(lines[3], 4).text).name == "probe-failed"


def test_the_same_record_from_dev_kmsg_and_from_syslog2():
    # /dev/kmsg escapes the record's newlines (\x0a): one record
    kmsg_line = ("3,812,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) installed in "
                 "this system has\\x0aNVRM: fallen off the bus and is not responding to commands.\n")
    assert [(e.pci_address, e.code) for e in parse(kmsg_line)] == [("0000:b3:00.0", "79")]
    # syslog(2) prefixes each of its lines
    syslog = ("<3>[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
              "<3>[ 1843.308145] NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
              "<3>[ 1843.308145] NVRM: fallen off the bus and is not responding to commands.\n")
    assert [(e.pci_address, e.code) for e in parse(syslog)] == [("0000:b3:00.0", "79")]


def test_a_continuation_far_from_its_header_names_no_device_unless_one_gpu_was_seen():
    far = "NVRM: The NVIDIA GPU 0000:b3:00.0\n" + "x\n" * kmsg.AFTER_LINES + \
        "NVRM: fallen off the bus and is not responding to commands.\n"
    assert [(e.pci_address, e.code) for e in parse(far)] == [(None, "79")]
    one = "NVRM: GPU at PCI:0000:3b:00: GPU-aaaa-bbbb\nNVRM: fallen off the bus and is not responding to commands.\n"
    assert [(e.pci_address, e.uuid) for e in parse(one)] == [("0000:3b:00.0", "GPU-aaaa-bbbb")]


def test_after_xid_79_the_multiline_record_is_the_same_fault():
    events = parse("NVRM: Xid (PCI:0000:b3:00): 79, pid=0, GPU has fallen off the bus.\n"
                   "NVRM: The NVIDIA GPU 0000:b3:00.0\n"
                   "               NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
                   "               NVRM: fallen off the bus and is not responding to commands.\n")
    assert [(e.line, e.code) for e in events] == [(1, "79")]


def test_the_gh200_bad_register_reads_are_ignored_with_their_reason():
    events, lines = capture("nvidia_gh200_gpuHandleSanityCheckRegReadError_550_dmesg_TRUNCATED.log")
    assert events == []
    for n, raw in enumerate(lines, 1):
        got = rules("nvidia").ignoring(split_record(raw, n).text)
        assert got is not None and got.name == "bad-register-read" and "issue 688" in got.reason


def test_the_ascend_driver_errors_are_ignored_with_their_reason():
    events, lines = capture("ascend_devdrv-dms-errors_vascend-mdev_910B4_dmesg_TRUNCATED.log")
    assert events == []
    ascend = rules("ascend")
    decided = [n for n, raw in enumerate(lines, 1) if ascend.ignoring(split_record(raw, n).text)]
    assert decided == [7, 8, 9, 10]  # the four [ascend] ... [ERROR] lines; the others are no Ascend line
    assert all("[ascend]" not in lines[n - 1] for n in range(1, len(lines) + 1) if n not in decided)
    assert "npu-smi" in ascend.ignored[0].reason


def test_an_ignore_entry_needs_its_reason():
    with pytest.raises(kmsg.RulesError, match="reason"):
        kmsg.parse_rules({"vendor": "v", "rules": [], "ignore": [{"name": "a", "match": "x"}]}, "x.yaml")
    with pytest.raises(kmsg.RulesError, match="list"):
        kmsg.parse_rules({"vendor": "v", "rules": [], "ignore": {"name": "a"}}, "x.yaml")
    with pytest.raises(kmsg.RulesError, match="pci"):
        kmsg.parse_rules({"vendor": "v", "rules": [{"match": "a", "code": "c", "after": "b"}]}, "x.yaml")


def test_an_ignored_line_is_no_event_even_where_a_rule_would_match():
    doc = {"vendor": "acme-kmsg", "ignore": [{"name": "noise", "match": "boom 0", "reason": "all clear"}],
           "rules": [{"name": "boom", "match": r"acme (?P<pci>[0-9a-f:.]+): boom (?P<n>\d+)", "code": "boom"}]}
    m = kmsg.Matcher(specs=[], rules=[kmsg.parse_rules(doc, "t")])
    assert m.match(Record(line=1, text="acme 0000:3b:00.0: boom 0")) == []
    assert m.triage("acme 0000:3b:00.0: boom 0") == kmsg.NO_EVENT
    assert [e.code for e in m.match(Record(line=2, text="acme 0000:3b:00.0: boom 1"))] == ["boom"]


def test_a_header_is_urgent_in_a_storm_so_its_continuation_keeps_its_device():
    m = kmsg.Matcher([vendors.specs()["nvidia"]])
    assert m.triage("NVRM: The NVIDIA GPU 0000:b3:00.0") == kmsg.URGENT


# --------------------------------------------------------------------------- fuzz

_PREFIXES = st.sampled_from(["", "kern  :err   : ", "user  :warn  : ", "<3>", "<14>", "[Jan25 10:34] ",
                             "[  +0.000123] ", "[  1.5 <  0.1>] ", "2024-11-15T12:02:03,470068+00:00 ",
                             "2024-11-15T12:02:03.470068+00:00 h kernel: ", "<999>", "[Feb  1 00:00] "])
_BODIES = st.sampled_from([
    "nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 20034, Data {0x1}", "NVRM: The NVIDIA GPU 0000:b3:00.0",
    "NVRM: fallen off the bus and is not responding to commands.", "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 1, Severity 9 Engine instance",
    "NVRM: gpuHandleSanityCheckRegReadError_GH100: Possible bad register read: addr: 0x1",
    "[ascend] [devdrv] [ERROR] [f 1] <npu-smi:1,1> device(4) is not initialized", "amdgpu 0000:c3:00.0: amdgpu: GPU reset begin!"])


@FUZZ
@given(st.lists(st.tuples(_PREFIXES, _BODIES, st.text(max_size=12)), max_size=20))
def test_fuzz_prefixes_and_new_rules(parts):
    text = "".join(f"{p}{b}{junk}\n" for p, b, junk in parts)
    check(parse(text))
    kmsg.parse_text(text)


@FUZZ
@given(_PREFIXES, st.text(max_size=80))
def test_fuzz_split_record(prefix, rest):
    rec = split_record(prefix + rest, 1)
    assert rec is None or (isinstance(rec.text, str) and (rec.priority is None or 0 <= rec.priority <= 7))
