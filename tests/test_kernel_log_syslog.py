"""Issue 24, item 7: the NVIDIA agent is not privileged, and its device cgroup refuses /dev/kmsg;
it reads the ring buffer through syslog(2) (``--kernel-log=syslog``, CAP_SYSLOG only). The
source hands records over in /dev/kmsg's format with a sequence from their timestamps, so the
follower's cursor, boot id and matching work as for /dev/kmsg."""

from __future__ import annotations

import errno

import pytest

from hetero_exporter.sources import kernel_log as kl
from hetero_exporter.simulate import ManualClock

XID = b"<4>[ 1234.567890] NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
BENIGN = b"<6>[    0.000000] Linux version 6.8.0 (buildd@lcy02)\n<6>[    1.000001] pci 0000:18:00.0: [10de:2330]\n"


class Buffer:
    """syslog(2) READ_ALL over a growing buffer; ``refuse`` answers as without CAP_SYSLOG."""

    def __init__(self, data: bytes = b""):
        self.data, self.refuse, self.reads = data, False, 0

    def __call__(self, max_bytes: int) -> bytes:
        self.reads += 1
        if self.refuse:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return self.data[-max_bytes:]


def _follower(tmp_path, buf: Buffer, **kw) -> kl.Follower:
    src = kl.SyslogSource(buf, refill_seconds=0.0)
    return kl.Follower(src, state_dir=str(tmp_path / "state"), boot_id="boot-1", clock=ManualClock(), **kw)


def _codes(f: kl.Follower) -> list[str]:
    return [p.event.code for p in f.take()]


def test_an_xid_in_the_ring_buffer_is_an_event_and_none_is_read_twice(tmp_path):
    buf = Buffer(BENIGN + XID)
    f = _follower(tmp_path, buf)
    f.drain()
    assert _codes(f) == ["79"] and f.up
    f.drain()  # the buffer read again: nothing new
    assert _codes(f) == [] and f.dropped["overwritten"] == 0
    buf.data += XID.replace(b"1234.567890", b"1300.000001")
    f.drain()
    assert _codes(f) == ["79"]


def test_a_restart_neither_replays_nor_misses(tmp_path):
    buf = Buffer(BENIGN + XID)
    f = _follower(tmp_path, buf)
    f.drain()
    assert _codes(f) == ["79"]
    f.close()
    buf.data += XID.replace(b"1234.567890", b"1400.000000")
    again = _follower(tmp_path, buf)
    again.drain()
    assert _codes(again) == ["79"]  # only the new one


def test_lines_of_one_microsecond_are_told_apart_and_unstamped_lines_skipped():
    data = XID + XID + b"<4>NVRM: Xid (PCI:0000:18:00): 79, no stamp\n"
    src = kl.SyslogSource(Buffer(data), refill_seconds=0.0)
    src.open(None)
    seqs = []
    while (rec := src.read()) is not None:
        seqs.append(int(rec.split(b",")[1]))
    assert len(seqs) == 2 and seqs[1] == seqs[0] + 1


def test_refused_syslog_says_why_and_the_agent_goes_on(tmp_path):
    buf = Buffer(XID)
    buf.refuse = True
    f = _follower(tmp_path, buf)
    assert f.drain() == (0, True)
    assert not f.up and "CAP_SYSLOG" in f.reason


def test_the_real_syslog_call_answers_or_says_why():
    try:
        data = kl.klogctl_read_all(1 << 20)
    except OSError as e:
        assert e.errno in (errno.EPERM, errno.ENOSYS, errno.EACCES), e
        pytest.skip(f"syslog(2) refused here: {e}")
    assert isinstance(data, bytes)


def test_the_flag_selects_the_syslog_source(tmp_path):
    from hetero_exporter import cli
    args = cli.build_parser().parse_args(["inspect", "--kernel-log", "syslog", "--log-format", "text"])
    w = cli.agent(args)
    try:
        assert isinstance(w.parts.kernel_log.follower.source, kl.SyslogSource)
    finally:
        w.close()
