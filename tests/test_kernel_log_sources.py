"""Issue 25, item 8: kernel-log sources and state files are hostile input.

- ``--kernel-log`` pointed (by a symlink) at /dev/zero burned a core: a text log must be a
  regular file, /dev/kmsg a character device;
- a state file that is a FIFO kept the agent from ever becoming ready, one that points at
  /dev/zero ended in a MemoryError: read only as a regular file, with a size cap;
- ``parse kernel-log`` of gigabytes of NUL bytes with no newline ended in MemoryError: lines
  are cut before they are buffered."""

from __future__ import annotations

import io
import json
import os
import threading

from hetero_exporter.sources import kernel_log as kl
from hetero_exporter.simulate import ManualClock


def test_a_text_log_that_links_to_dev_zero_is_refused_and_the_follower_says_why(tmp_path):
    link = tmp_path / "kern.log"
    link.symlink_to("/dev/zero")
    f = kl.Follower(kl.FileSource(str(link)), state_dir=None, boot_id="b", clock=ManualClock())
    assert f.drain() == (0, True)
    assert not f.up and "not a regular file" in f.reason


def test_kmsg_must_be_a_character_device(tmp_path):
    fake = tmp_path / "kmsg"
    fake.write_text("6,1,0,-;hello\n")
    f = kl.Follower(kl.KmsgSource(str(fake)), state_dir=None, boot_id="b", clock=ManualClock())
    f.drain()
    assert not f.up and "character device" in f.reason


def _follower(state_dir):
    log = state_dir.parent / "kern.log"
    log.write_text("Dec  1 10:00:00 h kernel: hello\n")
    return kl.Follower(kl.FileSource(str(log)), state_dir=str(state_dir), boot_id="b", clock=ManualClock())


def test_a_state_file_that_is_a_fifo_does_not_hang_the_start(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    os.mkfifo(state / kl.STATE_FILE)
    done = threading.Event()
    t = threading.Thread(target=lambda: (_follower(state), done.set()), daemon=True)
    t.start()
    assert done.wait(10), "the follower hung on a FIFO state file"


def test_a_state_file_linked_to_dev_zero_or_too_large_is_ignored(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / kl.STATE_FILE).symlink_to("/dev/zero")
    f = _follower(state)
    f.drain()
    assert f.up and f.records == 1  # started from the file's start
    os.unlink(state / kl.STATE_FILE)
    (state / kl.STATE_FILE).write_text(json.dumps({"schema": 1, "pad": "x" * 10000}))
    assert _follower(state).drain()[0] == 1


def test_gigabytes_of_nul_without_a_newline_are_read_in_bounded_pieces():
    class Zeros(io.RawIOBase):
        """3 GiB of NUL bytes, never in memory at once."""
        left = 3 << 30

        def readable(self):
            return True

        def readinto(self, b):
            n = min(len(b), self.left)
            b[:n] = bytes(n)
            self.left -= n
            return n

    stream = io.BufferedReader(Zeros(), buffer_size=1 << 20)
    lines = kl.iter_lines(stream, 1 << 30, "zeros")
    try:
        next(lines)
        raise AssertionError("a line was made of 1 GiB of NUL")
    except ValueError as e:
        assert "the limit of parse kernel-log" in str(e)
    except StopIteration:
        raise AssertionError("nothing read")


def test_a_long_line_is_cut_and_the_next_one_read():
    stream = io.BytesIO(b"x" * (kl.MAX_LINE * 3) + b"\nNVRM: Xid 79\n")
    assert list(kl.iter_lines(stream, 1 << 30, "f")) == ["NVRM: Xid 79"]


def test_distinct_fault_codes_are_counted_in_a_bounded_table(tmp_path):
    """Issue 25, item 7: free-text codes (amdgpu block names, Xid numbers) grew the per-code
    table (and its metric series) without bound; past MAX_EVENT_CODES they count as "other"."""
    from hetero_exporter.simulate.kernel_log import RingBuffer
    ring = RingBuffer(capacity=5000)
    for i in range(kl.MAX_EVENT_CODES + 300):
        ring.append(f"NVRM: Xid (PCI:0000:18:00): {1000 + i}, pid=1, a made-up Xid")
    f = kl.Follower(kl.KmsgSource("fake:/dev/kmsg", opener=ring.open), state_dir=None, boot_id="b",
                    clock=ManualClock(), max_records_per_second=1e9, max_pending=100_000)
    f.drain()
    assert len(f.events) == kl.MAX_EVENT_CODES + 1
    assert f.events[("nvidia", kl.OTHER_CODES)] == 300
