"""Issue 35 items 8 and 9 (kernel log): a storm of distinct benign texts never holds a critical line
back and whatever it skips is counted; syslog(2) counts what the ring overwrote between two reads
and tells apart any number of lines in one microsecond; a device's kernel-log fault codes are
bounded by count and bytes, the overflow folded into one ``other`` fault, counted and said once."""

from __future__ import annotations

import logging
import threading

from hetero_exporter.health.detect import policy as policy_mod
from hetero_exporter.health.detect.verdicts import HealthVerdicts
from hetero_exporter.model import Fault
from hetero_exporter.sdk import kmsg
from hetero_exporter.sdk.ledger import OVERFLOW_CODE, FaultLedger, LedgerBounds
from hetero_exporter.simulate.kernel_log import RingBuffer
from hetero_exporter.sources import kernel_log as kl
from test_kernel_log import AMD0, GPU0, GPU1, XID79, follower, snapshot, state_of
from test_kernel_log_syslog import Buffer, _follower


def distinct_xid13(n: int) -> str:
    """A benign Xid 13 whose text no other line repeats (its own pid and process name)."""
    return (f"NVRM: Xid (PCI:0000:18:00): 13, pid={100000 + n}, name=worker-{n}, Graphics SM Warp Exception "
            f"on (GPC 0, TPC {n % 4}, SM 0): Out Of Range Address")


def test_a_critical_line_behind_distinct_benign_ones_is_matched_within_one_seconds_budget(tmp_path):
    """300,000 distinct Xid 13 lines delayed an Xid 79 by 59 s (each spent a rule run of the
    5,000 a second). Past the budget a benign text is skipped and counted, so one second's budget
    reads them all and matches the Xid 79."""
    n = 60_000
    ring = RingBuffer(capacity=n + 10)
    for i in range(n):
        ring.append(distinct_xid13(i))
    ring.append(XID79)
    f = follower(ring, tmp_path)
    read, caught_up = f.drain(limit=5000)  # what the thread may spend in one second at the default rate
    assert (read, caught_up) == (n + 1, True)
    st = f.status()
    assert st["events"] == {("nvidia", "13"): 5000, ("nvidia", "79"): 1}
    assert st["dropped"]["rate-limited"] == n - 5000  # every skipped record counted, no more
    assert f._matcher.evaluated == 5001
    snap = HealthVerdicts(policy_mod.load())(kl.KernelLogFaults(f)(snapshot(100.0)))
    assert state_of(snap, GPU1) == "failed" and state_of(snap, GPU0) == "ok"


def test_the_thread_wakes_for_the_critical_line_and_counts_every_skipped_record(tmp_path):
    n = 30_000
    ring = RingBuffer(capacity=n + 10)
    woke = threading.Event()
    f = follower(ring, tmp_path, wake=woke.set).start()  # the first read (an empty ring) done
    try:
        for i in range(n):
            ring.append(distinct_xid13(i))
        ring.append(XID79)
        assert woke.wait(120), "the Xid 79 never woke the health loop"
        for _ in range(1200):  # bounded: the thread reads the rest
            if f.records == n + 1:
                break
            threading.Event().wait(0.1)
        st = f.status()
        assert st["records"] == n + 1
        assert st["events"][("nvidia", "79")] == 1
        assert st["events"][("nvidia", "13")] + st["dropped"]["rate-limited"] == n
    finally:
        f.close()


def test_past_the_budget_recoveries_uuid_lines_and_overridden_codes_are_still_matched(tmp_path):
    ring = RingBuffer()
    ring.append("NVRM: GPU at PCI:0000:28:00: GPU-11111111-1111-1111-1111-111111111111")  # teaches a uuid
    ring.append(XID79)
    ring.append("amdgpu 0000:25:00.0: amdgpu: GPU reset(2) succeeded!")  # a recovery
    ring.append("amdgpu 0000:25:00.0: amdgpu: 0 uncorrectable hardware errors detected in UMC block")  # all-clear
    ring.append("usb 1-1: new high-speed USB device number 2")  # no vendor's line
    ring.append(distinct_xid13(1))  # info: skipped
    f = follower(ring, tmp_path, urgent_codes={"nvidia": {"31": {"severity": "critical"}}})
    ring.append("NVRM: Xid (PCI:0000:18:00): 31, pid=7, name=x, MMU Fault")  # info, but overridden
    assert f.drain(limit=0, reads=100) == (7, True)
    events = {(p.event.code, p.event.uuid) for p in f.take()}
    assert events == {("79", GPU1), ("gpu-reset", None), ("31", None)}
    assert f.status()["dropped"]["rate-limited"] == 1  # the Xid 13 alone: lines that state nothing are no loss


def test_triage_agrees_with_the_rules():
    m = kmsg.Matcher()
    assert m.triage(distinct_xid13(3)) == kmsg.BENIGN
    assert m.triage(XID79) == kmsg.URGENT
    assert m.triage("amdgpu 0000:25:00.0: amdgpu: 2 uncorrectable hardware errors detected in UMC block") == kmsg.URGENT
    assert m.triage("amdgpu 0000:25:00.0: amdgpu: 2 correctable hardware errors detected in UMC block") == kmsg.BENIGN
    assert m.triage("amdgpu 0000:25:00.0: amdgpu: 0 uncorrectable hardware errors detected in UMC block") == kmsg.NO_EVENT
    assert m.triage("NVRM: loading NVIDIA UNIX x86_64 Kernel Module") == kmsg.NO_EVENT
    assert m.evaluated == 0  # the triage is no rule run


def test_a_full_pending_table_makes_room_for_a_critical_event(tmp_path):
    ring = RingBuffer()
    for bus in range(0x30, 0x40):  # 16 benign events, each its own device: the table is full
        ring.append(f"NVRM: Xid (PCI:0000:{bus:02x}:00): 13, pid=1, name=x, Graphics Exception")
    ring.append(XID79)
    ring.append("NVRM: Xid (PCI:0000:50:00): 13, pid=1, name=x, Graphics Exception")  # benign, no room
    f = follower(ring, tmp_path, max_pending=16)
    f.drain()
    taken = f.take()
    assert "79" in [p.event.code for p in taken] and len(taken) == 16
    assert f.status()["dropped"]["queue-full"] == 2  # the oldest benign entry out, the last benign one refused


# --------------------------------------------------------------------------- syslog(2)


def _line(usec: int, text: str, prio: int = 6) -> bytes:
    return b"<%d>[%5d.%06d] %s\n" % (prio, usec // 1_000_000, usec % 1_000_000, text.encode())


def test_syslog_any_number_of_lines_of_one_microsecond_are_handed_over_once(tmp_path):
    """``seq = usec * 16 + n`` dropped the 17th line of a microsecond and those after it."""
    data = b"".join(_line(5_000_000, f"NVRM: Xid (PCI:0000:{bus:02x}:00): 79, pid=1, GPU has fallen off the bus.", 4)
                    for bus in range(0x10, 0x10 + 40))
    buf = Buffer(data)
    f = _follower(tmp_path, buf)
    f.drain()
    assert len(f.take()) == 40 and f.records == 40
    f.close()
    again = _follower(tmp_path, buf)
    again.drain()
    assert again.take() == [] and again.records == 0  # a restart replays none of them


def test_syslog_a_cursor_saved_by_the_old_agent_is_not_replayed(tmp_path):
    usec = 1_234_567_890
    buf = Buffer(_line(usec, XID79, 4) + _line(usec + 10, "later line"))
    state = tmp_path / "state"
    state.mkdir()
    (state / kl.STATE_FILE).write_text(
        f'{{"schema": 1, "source": "syslog(2)", "boot_id": "boot-1", "seq": {usec * 16 + 0}}}')
    f = _follower(tmp_path, buf)
    f.drain()
    assert f.take() == [] and f.records == 1  # the Xid 79 was handed over before the upgrade


class Ring:
    """A kernel ring of ``capacity`` lines read through syslog(2), a line every 10 us."""

    def __init__(self, capacity: int):
        self.capacity, self.lines, self.usec = capacity, [], 1_000_000

    def emit(self, n: int) -> None:
        for _ in range(n):
            self.usec += 10
            self.lines.append(_line(self.usec, f"pci 0000:00:01.0: line at {self.usec}"))
        del self.lines[:-self.capacity]

    def __call__(self, max_bytes: int) -> bytes:
        return b"".join(self.lines)


def test_syslog_records_overwritten_between_two_reads_are_counted(tmp_path):
    ring = Ring(capacity=1000)
    ring.emit(500)
    f = _follower(tmp_path, Buffer())
    f.source._reader = ring
    f.drain()
    assert f.records == 500 and f.status()["dropped"]["overwritten"] == 0
    ring.emit(800)  # fits: nothing lost
    f.drain()
    assert f.records == 1300 and f.status()["dropped"]["overwritten"] == 0
    ring.emit(3000)  # 2,000 of them overwritten before the next read
    f.drain()
    assert f.records == 2300 and f.status()["dropped"]["overwritten"] == 2000


# --------------------------------------------------------------------------- codes per device


def _codes_line(i: int, kind: str = "correctable") -> str:
    return f"amdgpu 0000:25:00.0: amdgpu: 2 {kind} hardware errors detected in blk{i} block"


def test_a_devices_kernel_log_codes_are_bounded_and_the_overflow_counted_and_said_once(tmp_path, caplog):
    """A new code cost ~2.5 KiB for good (5,000 codes: 12.5 MiB, one series each)."""
    ring = RingBuffer(capacity=10_000)
    f = follower(ring, tmp_path, max_pending=10_000)
    enrich = kl.KernelLogFaults(f)
    n = 2000
    for i in range(n):
        ring.append(_codes_line(i))
    f.drain()
    caplog.set_level(logging.WARNING, logger=kl.__name__)
    snap = enrich(snapshot(10.0))
    faults = next(d.faults for d in snap.devices if d.identity.uuid == AMD0)
    kept = [x for x in faults if x.code != OVERFLOW_CODE]
    other = next(x for x in faults if x.code == OVERFLOW_CODE)
    assert len(kept) <= kl.CODE_BOUNDS.codes
    assert sum(len(x.code) + len(x.message) + kl.CODE_BOUNDS.code_bytes for x in kept) <= kl.CODE_BOUNDS.bytes
    assert other.count == n - len(kept) == f.status()["dropped"]["code-cap"]
    assert other.severity == "info"
    # a critical code past the bound still fails the device, under "other"
    ring.append(_codes_line(n + 1, "uncorrectable"))
    f.drain()
    snap = HealthVerdicts(policy_mod.load())(enrich(snapshot(20.0)))
    assert state_of(snap, AMD0) == "failed"
    other = next(x for d in snap.devices if d.identity.uuid == AMD0 for x in d.faults if x.code == OVERFLOW_CODE)
    assert (other.code, other.severity, other.count) == (OVERFLOW_CODE, "critical", n - len(kept) + 1)
    said = [r for r in caplog.records if "past their bound" in r.getMessage()]
    assert len(said) == 1


def test_the_ledger_bounds_devices_least_recently_recorded_out():
    ledger = FaultLedger(LedgerBounds(codes=2, bytes=1 << 20, devices=3, code_bytes=100))
    for u in ("a", "b", "c"):
        ledger.record(u, Fault("1", severity="warning"), 1.0)
    ledger.record("a", Fault("1"), 2.0)  # a recorded again: b is now the oldest
    ledger.record("d", Fault("1"), 3.0)
    assert ledger.get("b", "1") is None and ledger.get("a", "1").count == 2 and ledger.devices_forgotten == 1
    ledger.record("a", Fault("2"), 4.0)
    got = ledger.record_bounded("a", Fault("3", severity="critical"), 5.0)
    assert got.folded and got.first_fold and got.fault.code == OVERFLOW_CODE and got.fault.severity == "critical"
    got = ledger.record_bounded("a", Fault("4", severity="info"), 6.0)
    assert got.folded and not got.first_fold and got.fault.severity == "critical" and got.fault.count == 2
    assert FaultLedger().record("x", Fault("9"), 1.0).code == "9"  # unbounded by default (the collectors')
