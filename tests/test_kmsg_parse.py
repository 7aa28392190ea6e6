"""Kernel-log records and the vendors' kernel-log rules (hetero_exporter/sdk/kmsg.py,
collectors/<vendor>/kernel_log.yaml): every real capture gives the faults its lines state."""

from __future__ import annotations

import io
import json

import pytest

from hetero_exporter import vendors
from hetero_exporter.sdk import faults
from hetero_exporter.sdk import kmsg
from hetero_exporter.sdk.kmsg import Record, split_record

from conftest import shared_fixture, shared_fixtures


def parse(text: str) -> list[kmsg.Event]:
    events, _ = kmsg.parse_lines(io.StringIO(text))
    return events


def summary(events):
    return [(e.pci_address, e.code, e.recovery) for e in events]


def capture(name: str) -> list[kmsg.Event]:
    path = shared_fixture("kernel-log", name)
    with path.open(encoding="utf-8") as f:
        events, n = kmsg.parse_lines(f)
    assert n == len(path.read_text(encoding="utf-8").splitlines())
    return events


# ------------------------------------------------------------------ split_record, every format

@pytest.mark.parametrize("raw, text, time, seq, prio", [
    ("6,3964,206764307,-;nvidia-nvswitch2: open (major=510)", "nvidia-nvswitch2: open (major=510)",
     "206764307", 3964, 6),
    ("4,12,5000,-,caller=T1;NVRM: Xid (PCI:0000:3b:00): 48, pid=1", "NVRM: Xid (PCI:0000:3b:00): 48, pid=1",
     "5000", 12, 4),
    ("[  12.345678] amdgpu 0000:c3:00.0: amdgpu: GPU reset begin!", "amdgpu 0000:c3:00.0: amdgpu: GPU reset begin!",
     "12.345678", None, None),
    ("[Sun Feb 23 16:24:18 2025] NVRM: GPU Board Serial Number: 1650124014249",
     "NVRM: GPU Board Serial Number: 1650124014249", "Sun Feb 23 16:24:18 2025", None, None),
    ("Nov 01 16:52:04 ifrit-hpc kernel: amdgpu 0000:43:00.0: amdgpu: MODE1 reset",
     "amdgpu 0000:43:00.0: amdgpu: MODE1 reset", "Nov 01 16:52:04", None, None),
    ("Nov  1 16:52:04 host kernel: [ 8390.785329] amdgpu 0000:68:00.0: x", "amdgpu 0000:68:00.0: x",
     "Nov  1 16:52:04", None, None),
    ("2025-01-21T04:41:44.283302+00:00 host kernel: NVRM: x", "NVRM: x",
     "2025-01-21T04:41:44.283302+00:00", None, None),
    ("kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: Xid (PCI:0000:38:00): 43, x",
     "NVRM: Xid (PCI:0000:38:00): 43, x", "2025-01-21T04:41:44,283302+00:00", None, 4),
    ("kern  :err   : [  171.5] amdgpu: y", "amdgpu: y", "171.5", None, 3),
    ("NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus.",
     "NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus.", None, None, None),
])
def test_split_record_strips_each_formats_prefix(raw, text, time, seq, prio):
    rec = split_record(raw + "\n", 7)
    assert rec == Record(line=7, text=text, time=time, seq=seq, priority=prio)


@pytest.mark.parametrize("raw", [" SUBSYSTEM=pci", " DEVICE=+pci:0000:3b:00.0", "", "   ", "\n"])
def test_kmsg_continuation_and_empty_lines_are_no_record(raw):
    assert split_record(raw, 1) is None


# ------------------------------------------------------------------ the real captures

def test_every_capture_parses_and_gives_only_known_vendors():
    paths = shared_fixtures("kernel-log")
    if not paths:
        pytest.skip("../shared/fixtures/kernel-log absent")
    for p in paths:
        doc = kmsg.parse_text(p.read_text(encoding="utf-8"))
        assert doc["schema"] == 1
        json.dumps(doc)
        for e in doc["events"]:
            assert set(e) >= {"line", "time", "vendor", "pci_address", "uuid", "code", "class", "action",
                              "severity", "source", "message"}
            assert e["source"] == "kmsg" and e["vendor"] in ("nvidia", "amd")


def test_xid_119_on_its_gpu_with_the_uuid_the_log_maps():
    events = capture("nvidia_xid-119_gsp-rpc-timeout_dmesg-T.log")
    assert [e.line for e in events] == [3, 38, 40, 42, 43]  # the RPC history / stack lines state nothing
    for e in events:
        assert (e.vendor, e.pci_address, e.code) == ("nvidia", "0000:9b:00.0", "119")
        assert e.uuid == "GPU-509665ad-b600-ac93-3616-d754b23d636d"
        assert (e.severity, e.action) == ("critical", "reset-device")  # GSP RPC timeout: reset the GPU
        assert e.time and e.time.endswith("2025")
    assert events[0].time == "Sun Feb 23 16:24:18 2025"


def test_xid_13_and_43_from_dmesg_decode():
    events = capture("nvidia_xid-13-and-43_dmesg-decode-iso.log")
    assert [e.code for e in events] == ["13"] * 16 + ["43"]
    assert {e.pci_address for e in events} == {"0000:38:00.0"}
    assert all(e.uuid is None for e in events)  # no "GPU at PCI" line in this capture
    assert {e.severity for e in events} == {faults.lookup("nvidia", "13").severity}


def test_xid_149_on_a_nonzero_pci_domain():
    (e,) = capture("nvidia_xid-149_netir-link-evt_line.log")
    assert (e.pci_address, e.code, e.time) == ("0009:01:00.0", "149", "171167.620236")


def test_raw_kmsg_nvswitch_opens_are_no_fault():
    assert capture("dev-kmsg_raw_nvswitch.log") == []


def test_mi300x_athub_interrupt_and_aca_records():
    events = capture("amdgpu_mi300x_ras-athub-uncorrectable_aca-hardware-error_dmesg_TRUNCATED.log")
    assert summary(events) == [("0000:68:00.0", "ras-uncorrectable-athub", False),
                               ("0000:9e:00.0", "aca-poison", False),
                               ("0000:d4:00.0", "aca-poison", False)]
    assert events[0].severity == "critical" and events[0].time == "8390.785329"


def test_ring_timeout_then_reset_that_succeeded():
    events = capture("amdgpu_ring-timeout_mode1-reset_rx6700xt_journalctl.log")
    assert summary(events) == [("0000:43:00.0", "ring-timeout", False),
                               ("0000:43:00.0", "gpu-reset", False),
                               ("0000:43:00.0", "gpu-reset", True)]  # "GPU reset(2) succeeded!"
    assert [e.line for e in events] == [1, 3, 42]  # "reset succeeded, trying to resume" is no evidence yet


# ------------------------------------------------------------------ published formats not in the captures

def test_sxid_fatal_and_non_fatal_are_node_level_faults_on_the_switch():
    events = parse(
        "[6781753.400584] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 28 LTSSM Fault Up\n"
        "[6781753.400590] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Severity 5 Engine instance 28 Sub-engine instance 00\n"
        "[6781753.400593] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Data {0x00000000, 0x00000000}\n"
        "Nov 01 16:52:04 h kernel: nvidia-nvswitch4: SXid (PCI:0000:c6:00.0): 19084, Non-fatal, Link 29 AN1 Heartbeat Timeout Error (First)\n"
        "6,10,5,-;nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 99999, Fatal, something new\n"
        "6,11,6,-;nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 99998, Non-fatal, something new\n")
    assert [(e.pci_address, e.code, e.severity) for e in events] == [
        ("0000:06:00.0", "SXID-20034", "critical"), ("0000:c6:00.0", "SXID-19084", "warning"),
        ("0000:c2:00.0", "SXID-99999", "critical"), ("0000:c2:00.0", "SXID-99998", "warning")]
    assert all(e.node_level and not e.recovery for e in events)
    assert events[2].action == "reboot-node" and events[3].action == "none"


def test_xid_79_and_its_fallen_off_the_bus_line_are_one_fault():
    events = parse(
        "[6781741.548768] NVRM: GPU at PCI:0000:91:00: GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b\n"
        "[6781741.548776] NVRM: GPU Board Serial Number: 1653723052734\n"
        "[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
        "[6781741.548783] NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.\n"
        "[6781741.548786] NVRM: GPU 0000:91:00.0: GPU serial number is 1653723052734.\n")
    assert [(e.line, e.pci_address, e.uuid, e.code, e.action) for e in events] == [
        (3, "0000:91:00.0", "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b", "79", "reboot-node")]


def test_fallen_off_the_bus_alone_is_xid_79():
    (e,) = parse("[ 5.1] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n")
    assert (e.pci_address, e.code, e.severity) == ("0000:3b:00.0", "79", "critical")


def test_mig_xid_and_unknown_xid():
    events = parse("NVRM: Xid (PCI:0000:4e:00 GPU-I:05 GPU-CI:01): 31, pid=77, name=python, Ch 00000008, MMU Fault\n"
                   "NVRM: Xid (PCI:0000:4e:00): 999, pid=1, something new\n")
    assert [(e.pci_address, e.code) for e in events] == [("0000:4e:00.0", "31"), ("0000:4e:00.0", "999")]
    default = faults.table("nvidia").default
    assert (events[1].fault_class, events[1].action, events[1].severity) == (
        default.fault_class, default.action, default.severity)


def test_amdgpu_ras_counts_per_block_and_the_all_clear_guards():
    events = parse(
        "amdgpu 0000:c3:00.0: amdgpu: 2 uncorrectable hardware errors detected in umc block\n"
        "amdgpu 0000:c3:00.0: amdgpu: socket: 0, die: 1, 3 new correctable hardware errors detected in gfx block, no user action is needed.\n"
        "amdgpu 0000:c3:00.0: amdgpu: {4}socket: 0, die: 1, 1 new deferred hardware errors detected in umc block\n"
        "amdgpu 0000:c3:00.0: amdgpu: socket: 0, die: 1, 7 new uncorrectable hardware errors detected in xgmi_wafl block\n"
        "amdgpu 0000:c3:00.0: amdgpu: 5 new uncorrectable hardware errors detected in vcn block\n"
        # all-clear and summary lines
        "amdgpu 0000:c3:00.0: amdgpu: 0 uncorrectable hardware errors detected in umc block\n"
        "amdgpu 0000:c3:00.0: amdgpu: socket: 0, die: 0, 0 new uncorrectable hardware errors detected in umc block\n"
        "amdgpu 0000:c1:00.0: amdgpu: socket: 4, die: 0 1 correctable hardware errors detected in total in gfx block, no user action is needed.\n"
        "amdgpu 0000:43:00.0: amdgpu: RAS: optional ras ta ucode is not available\n"
        "amdgpu 0000:43:00.0: amdgpu: GPU reset succeeded, trying to resume\n"
        "amdgpu 0000:43:00.0: amdgpu: ring gfx_0.0.0 timeout, but soft recovered\n")
    assert [(e.code, e.severity) for e in events] == [
        ("ras-uncorrectable-umc", "critical"), ("ras-correctable-gfx", "info"),
        ("ras-deferred-umc", "warning"), ("ras-uncorrectable-xgmi_wafl", "critical"),
        ("ras-uncorrectable-vcn", "critical"),  # no row of its own: the ras-uncorrectable row
        ("ring-soft-recovered", "info")]
    assert events[-1].pci_address == "0000:43:00.0"
    assert {e.pci_address for e in events[:-1]} == {"0000:c3:00.0"}
    assert events[3].action == "reboot-node"


def test_amdgpu_reset_outcomes():
    events = parse("amdgpu 0000:c3:00.0: amdgpu: GPU reset begin!. Source:  1\n"
                   "amdgpu 0000:c3:00.0: amdgpu: GPU reset(3) failed\n"
                   "amdgpu 0000:c4:00.0: amdgpu: ASIC reset failed with error, -110 for drm dev, 0000:c4:00.0\n"
                   "amdgpu 0000:c5:00.0: amdgpu: GPU reset end with ret = -110\n"
                   "amdgpu 0000:c6:00.0: amdgpu: GPU reset end with ret = 0\n")
    assert summary(events) == [("0000:c3:00.0", "gpu-reset", False), ("0000:c3:00.0", "gpu-reset-failed", False),
                               ("0000:c4:00.0", "gpu-reset-failed", False), ("0000:c5:00.0", "gpu-reset-failed", False),
                               ("0000:c6:00.0", "gpu-reset", True)]
    assert events[1].severity == "critical"


def test_old_ring_timeout_without_an_address_takes_the_only_gpu_seen():
    one = parse("[ 1.0] amdgpu 0000:0b:00.0: amdgpu: SMU is initialized successfully!\n"
                "[ 9.0] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring sdma0 timeout, signaled seq=1, emitted seq=3\n")
    assert summary(one) == [("0000:0b:00.0", "ring-timeout", False)]
    two = parse("amdgpu 0000:0b:00.0: amdgpu: x\namdgpu 0000:0c:00.0: amdgpu: x\n"
                "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, signaled seq=1, emitted seq=3\n")
    assert summary(two) == [(None, "ring-timeout", False)]  # two GPUs: the line names neither


def test_aca_status_decoding():
    assert kmsg.decode_smca_status("0xb000000000000000") == "uncorrectable"  # Val, UC, En
    assert kmsg.decode_smca_status("0x9c00100000000000") == "deferred"
    assert kmsg.decode_smca_status("0x98000800003e0000") == "poison"
    assert kmsg.decode_smca_status("0x9c20000000000000") == "correctable"
    assert kmsg.decode_smca_status("0x0000000000000000") is None  # not valid: no record
    assert kmsg.decode_smca_status("zz") is None
    assert parse("amdgpu 0000:9e:00.0: {1}[Hardware Error]: aca entry[00].STATUS=0x0000000000000000\n") == []


def test_other_drivers_lines_are_no_fault():
    assert parse("iommu ivhd1: AMD-Vi: Event logged [INVALID_DEVICE_REQUEST device=0000:00:00.0]\n"
                 "[drm] VRAM is lost due to GPU reset!\n"
                 "mce: 3 correctable hardware errors detected in total in mc0 block on CPU1\n"
                 "pcieport 0000:00:01.1: AER: Uncorrected (Non-Fatal) error received: 0000:01:00.0\n"
                 "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.133.20\n") == []


# ------------------------------------------------------------------ the rules files

def test_every_vendor_with_rules_loads_them_and_every_code_they_name_is_in_the_table():
    with_rules = [s for s in vendors.specs().values() if s.kernel_log]
    assert {"nvidia", "amd"} <= {s.name for s in with_rules}
    for s in with_rules:
        rules = kmsg.load_rules(s)
        assert rules is not None and rules.vendor == s.name and rules.source
        assert s.data_path(s.kernel_log).parent == s.data_path(s.fault_table).parent
        table = faults.table(s.name)
        for r in rules.rules:
            if r.learn or "{" in r.code:
                continue
            assert table.lookup(r.code).known, (s.name, r.name, r.code)


def test_a_broken_rules_document_says_what_is_wrong():
    with pytest.raises(kmsg.RulesError, match="vendor"):
        kmsg.parse_rules({"rules": []}, "x.yaml")
    with pytest.raises(kmsg.RulesError, match="bad regex"):
        kmsg.parse_rules({"vendor": "v", "rules": [{"name": "a", "match": "(", "code": "c"}]}, "x.yaml")
    with pytest.raises(kmsg.RulesError, match="unknown keys"):
        kmsg.parse_rules({"vendor": "v", "rules": [{"match": "a", "code": "c", "sevrity": 1}]}, "x.yaml")
    with pytest.raises(kmsg.RulesError, match="group"):
        kmsg.parse_rules({"vendor": "v", "rules": [{"match": "a", "code": "c", "nonzero": ["n"]}]}, "x.yaml")


def test_a_rules_document_of_a_vendor_without_a_table_uses_the_default_row():
    rules = kmsg.parse_rules({"vendor": "acme-nokmsg", "rules": [
        {"name": "boom", "match": r"acme (?P<pci>[0-9a-f:.]+): boom (?P<n>\d+)", "code": "boom-{n}"}]}, "t")
    m = kmsg.Matcher(specs=[], rules=[rules])
    (e,) = m.match(Record(line=1, text="acme 0000:3b:00.0: boom 7"))
    assert (e.vendor, e.pci_address, e.code, e.severity) == ("acme-nokmsg", "0000:3b:00.0", "boom-7", "warning")


def test_parse_lines_counts_lines_and_caps_events():
    text = "NVRM: Xid (PCI:0000:3b:00): 48, pid=1\n" * 10
    events, n = kmsg.parse_lines(io.StringIO(text), max_events=3)
    assert (len(events), n) == (3, 10)


# --------------------------------------------------------------------------- the matcher's memo


def _nvidia_matcher() -> kmsg.Matcher:
    return kmsg.Matcher([vendors.specs()["nvidia"]])


XID13 = "NVRM: Xid (PCI:0000:18:00): 13, pid=7, name=x, Graphics Exception"


def test_a_repeated_text_is_judged_once_and_replayed_with_its_own_line_and_time():
    m = _nvidia_matcher()
    first = m.match(Record(line=1, text=XID13, time="10.0"))
    again = m.match(Record(line=2, text=XID13, time="11.0"))
    assert m.evaluated == 1  # the rules ran on the first record only
    assert [(e.line, e.time, e.code, e.severity) for e in first + again] == [
        (1, "10.0", "13", first[0].severity), (2, "11.0", "13", first[0].severity)]
    assert again[0].to_dict() | {"line": 1, "time": "10.0"} == first[0].to_dict()


def test_a_replayed_event_carries_the_uuid_learned_since():
    m = _nvidia_matcher()
    assert m.match(Record(line=1, text=XID13))[0].uuid is None
    m.match(Record(line=2, text="NVRM: GPU at PCI:0000:18:00: GPU-aaaa-bbbb"))
    assert m.match(Record(line=3, text=XID13))[0].uuid == "GPU-aaaa-bbbb"


def test_the_duplicate_window_holds_for_replays_and_a_held_back_text_is_not_memoized():
    m = _nvidia_matcher()
    xid79 = "NVRM: Xid (PCI:0000:28:00): 79, pid=0, GPU has fallen off the bus."
    off = "NVRM: GPU at PCI:0000:28:00: GPU has fallen off the bus."
    assert [e.code for e in m.match(Record(line=1, text=xid79))] == ["79"]
    assert m.match(Record(line=2, text=off)) == []  # the same fault within 32 lines: held back
    assert [e.code for e in m.match(Record(line=100, text=off))] == ["79"]  # past the window: an event
    assert m.match(Record(line=101, text=off)) == []  # and its replay is held back again


def test_user_space_text_is_never_answered_from_the_memo():
    m = _nvidia_matcher()
    assert m.match(Record(line=1, text=XID13))
    assert m.match(Record(line=2, text=XID13, kernel=False)) == []


def test_the_memo_is_bounded():
    m = _nvidia_matcher()
    for n in range(kmsg._MEMO_ENTRIES + 500):
        m.match(Record(line=n, text=f"NVRM: Xid (PCI:0000:18:00): 13, pid={n}, name=x"))
    m.match(Record(line=0, text="NVRM: " + "x" * (kmsg._MEMO_TEXT + 1)))
    assert len(m._memo) == kmsg._MEMO_ENTRIES
