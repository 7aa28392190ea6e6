"""The kernel log as a health source: a follower of /dev/kmsg (or of a text log such as
/var/log/kern.log) and the sampler enricher that turns what it matched into faults on the
devices the lines name.

``Follower`` runs in its own thread and never blocks a collection cycle:

- /dev/kmsg is opened non-blocking; each read returns one record as the kernel gives it
  (``pri,seq,usec,flags;message`` and dictionary lines that start with a space, which are
  ignored, as are continuation fragments, flag ``+``); ``EAGAIN`` means nothing new, ``EPIPE``
  means the next records were overwritten: the gap (from the sequence numbers) is counted as
  dropped (``overwritten``) and reading goes on.
- The cursor (the last sequence number handed over, or a text file's inode and offset) and the
  boot id (/proc/sys/kernel/random/boot_id) live in a small state file under ``state_dir``, so a
  restart neither replays nor misses records; a new boot id starts from the ring buffer's start
  (a fault since boot still counts).
- A text file is followed like ``tail -F``: lines as they come, rotation (a new inode at the
  path, or a truncated file) reopens it from its start. On a first start without state, only the
  last ``initial_bytes`` are read, and lines before the last boot in them (``Linux version``) are
  not faults of this boot.
- A record storm is bounded and never holds a critical line back. Two token buckets: the rules
  run on at most ``max_records_per_second`` texts the matcher has not judged before (a storm
  repeats a few texts: a repeat is answered from its memo), and at most 50 times that many records
  are read a second (past it the kernel overwrites and the loss is counted). Past the rule
  budget, a record is triaged by the rules' regexes alone (``Matcher.triage``, ~2 us): one that
  states more than an info fault, a recovery or a uuid is matched anyway (it borrows from the next
  second's budget); one that states at most an info fault is skipped and counted
  (``rate-limited``). 300,000 distinct benign Xid 13 lines no longer delay the Xid 79 behind them
  by a minute. Pending events are coalesced by (vendor, device, code) in a table of at most
  ``max_pending`` entries; past it a new benign entry is dropped and counted (``queue-full``),
  while an urgent one takes the place of the oldest benign entry.
- When /dev/kmsg cannot be opened (no CAP_SYSLOG, not mounted) it logs why once, reports
  ``up`` 0, and retries quietly every ``retry_seconds``.
- ``SyslogSource`` (``--kernel-log=syslog``) reads the same ring buffer through syslog(2), as
  ``dmesg`` does where /dev/kmsg is refused: it needs CAP_SYSLOG but no device, so an agent
  that is not privileged (the NVIDIA one: its device cgroup refuses /dev/kmsg) still reads Xid
  and SXid lines. Records the ring overwrote between two reads are counted (``overwritten``,
  estimated from the timestamps: syslog(2) gives no sequence numbers).

Matching is ``hetero_exporter.sdk.kmsg`` (pure; each vendor's rules in its package).

``KernelLogFaults`` is the sampler enricher (after PCI presence, before the health verdicts):
it takes the follower's events each cycle and records them in a ``FaultLedger`` under the
device they name (by uuid when the line gives one, else by PCI address, with the identities seen
at that address earlier for a device gone from the snapshot), so they reach the health rules as
fault occurrences with ``source: "kmsg"``, like the vendor APIs' events.

- A device keeps at most ``CODE_BOUNDS`` distinct kernel-log codes (64, and 128 KiB estimated);
  a new code past them is recorded under code ``other`` (the worst severity folded in keeps its
  class: a critical code still fails the device), counted (``code-cap``) and said once a device.
- A fault that the device's collector also reports (NVML Xid 79 and the kernel's Xid 79) is
  counted once: the same device, the same code, occurrences within ``dedup_seconds`` of each
  other are paired and the pair counts one.
- Node-level events (NVSwitch SXid: the switch is not a device the agent exports) become a fault
  on every GPU of that vendor on the node: every GPU of an NVSwitch board moves its peer traffic
  through the switches, a fatal SXid ends the jobs on all of them, and the fault class (fabric,
  node-level in the policy) taints the node; a placeholder device instead would add a device
  that is not one to the counts the scheduler and the expected-vs-present alert read.
- Recovery only on evidence: a recovery event (a reset that succeeded) is recorded as a reset
  code for its device (the rules clear the faults whose policy clears on reset); the device
  readable again after being lost, and a new boot id, are the rules' own evidence. The rules
  keep a critical kmsg fault sticky until one of them (health/detect/rules.py).
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import json
import logging
import os
import re
import select
import stat
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

from hetero_exporter import smallfile
from hetero_exporter.model import DeviceIdentity, Fault, NodeSnapshot
from hetero_exporter.sdk import pciaddr
from hetero_exporter.sdk.ledger import FaultLedger, LedgerBounds

log = logging.getLogger(__name__)

KMSG = "/dev/kmsg"
SYSLOG = "syslog"  # --kernel-log value: the ring buffer through syslog(2) (SyslogSource)
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
STATE_FILE = "kernel-log.state.json"
STATE_TMP_PREFIX = ".kernel-log-"  # its temporary files (smallfile.write_atomically)
MAX_STATE_BYTES = 4096  # the cursor file is a line of JSON
MAX_EVENT_CODES = 512  # distinct (vendor, code) counted one by one (a series each); the rest as OTHER_CODES
OTHER_CODES = "other"
READ_SIZE = 8192  # one /dev/kmsg record with its dictionary fits (CONSOLE_EXT_LOG_MAX)
MAX_LINE = 64 * 1024  # a text-log line longer than this is cut
RESET_CODES = frozenset({"reset", "device-reset", "gpu-reset"})
BOOT_MARKER = "Linux version "
CHEAP_RECORD = 0.02  # records read a second: max_records_per_second / CHEAP_RECORD (50 x the rule runs)
RATE_LIMITED = "rate-limited"  # dropped reason: an info-only record past the rule budget, not matched
CODE_CAP = "code-cap"  # dropped reason: a device's new code past its bound, counted under code "other"
# kernel-log fault codes kept per device and their estimated bytes (a code cost ~2.3 KiB with its
# pairing state and counts, measured: benchmarks/hardening_bounds.py), devices kept
# (least recently recorded out): at most ~16 MiB whatever the log says
CODE_BOUNDS = LedgerBounds(codes=64, bytes=128 << 10, devices=128, code_bytes=2048)


def read_boot_id(path: str = BOOT_ID_FILE) -> Optional[str]:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _kmsg_api() -> tuple[Callable, Callable, Callable, str]:
    from hetero_exporter.sdk.kmsg import BENIGN, Matcher, kmsg_record, split_record
    return Matcher, split_record, kmsg_record, BENIGN


# --------------------------------------------------------------------------- sources


class KmsgSource:
    """/dev/kmsg (or what ``opener()`` returns: a file-like object whose ``read(n)`` gives one
    record, raises BlockingIOError when there is none and BrokenPipeError when the next one was
    overwritten, as the kernel's does; tests and simulation use this)."""

    kind = "kmsg"

    def __init__(self, path: str = KMSG, opener: Optional[Callable[[], Any]] = None,
                 wall_time: Optional[Callable[[int], Optional[float]]] = None):
        self.path = path
        self._opener = opener
        self._wall_time = wall_time
        self._fd: Optional[int] = None
        self._f: Any = None
        self._poll: Any = None

    @property
    def name(self) -> str:
        return self.path

    def open(self, cursor: Optional[Mapping[str, Any]] = None) -> None:
        """Open at the oldest record of the buffer (the cursor is applied by the follower,
        which skips records up to it: /dev/kmsg seeks only to its start, end or clear point)."""
        self.close()
        if self._opener is not None:
            self._f = self._opener()
            return
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        if not stat.S_ISCHR(os.fstat(self._fd).st_mode):
            os.close(self._fd)
            self._fd = None
            raise OSError(errno.EINVAL, f"{self.path} is not the kernel's log device (a character device)")
        try:
            self._poll = select.poll()
            self._poll.register(self._fd, select.POLLIN)
        except (AttributeError, OSError):
            self._poll = None

    def read(self) -> Optional[bytes]:
        """One record; None when there is none now. BrokenPipeError: records were overwritten."""
        try:
            data = os.read(self._fd, READ_SIZE) if self._fd is not None else self._f.read(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return None
        return data or None

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for a record; False when it cannot wait (the caller sleeps)."""
        if self._poll is None:
            return False
        try:
            self._poll.poll(max(0, int(timeout * 1000)))
        except (OSError, InterruptedError):
            pass
        return True

    def wall_time(self, usec: int) -> Optional[float]:
        """Unix time of a record stamped ``usec`` after boot (printk's clock is monotonic)."""
        if self._wall_time is not None:
            return self._wall_time(usec)
        if self._opener is not None:
            return None
        try:
            return time.time() - (time.clock_gettime(time.CLOCK_MONOTONIC) - usec / 1e6)
        except (AttributeError, OSError):
            return None

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None
        if self._f is not None:
            try:
                self._f.close()
            except Exception:  # noqa: BLE001 - a fake without close
                pass
            self._f = None
        self._poll = None


_SYSLOG_ACTION_READ_ALL, _SYSLOG_ACTION_SIZE_BUFFER = 3, 10
# one line of the syslog(2) buffer: <priority>[seconds.micros] text (the stamp with PRINTK_TIME)
_SYSLOG_LINE = re.compile(rb"<(\d{1,4})>(?:\[\s*(\d{1,10})\.(\d{1,9})\]\s?)?([^\n]*)")
# A record's sequence: its microsecond x _SEQ_SCALE + its place among that microsecond's lines.
# One read holds at most MAX_SYSLOG_BYTES, so fewer than _SEQ_SCALE lines (of 9 bytes or more).
_SEQ_SCALE = 1 << 24
MAX_SYSLOG_BYTES = 128 << 20
_OLD_SEQ_SCALE = 16  # cursors saved before the scale was recorded (16 lines a microsecond, the rest lost)


def klogctl_read_all(max_bytes: int) -> bytes:
    """The kernel ring buffer as text (syslog(2) READ_ALL: non-destructive); OSError with the
    errno (EPERM: no CAP_SYSLOG where kernel.dmesg_restrict=1)."""
    libc = ctypes.CDLL(None, use_errno=True)
    size = libc.klogctl(_SYSLOG_ACTION_SIZE_BUFFER, None, 0)
    if size < 0:
        err = ctypes.get_errno() or errno.EPERM
        raise OSError(err, os.strerror(err))
    size = min(max(int(size), 4096), max_bytes)
    buf = ctypes.create_string_buffer(size)
    n = libc.klogctl(_SYSLOG_ACTION_READ_ALL, buf, size)
    if n < 0:
        err = ctypes.get_errno() or errno.EPERM
        raise OSError(err, os.strerror(err))
    return buf.raw[:n]


class SyslogSource:
    """The kernel's ring buffer through syslog(2) (``klogctl``), for an agent that may not open
    /dev/kmsg. Records are handed over in /dev/kmsg's format, their sequence made from the
    timestamp (microseconds x 2^24 + the n-th line of that microsecond: any number of lines a
    microsecond), so the follower's cursor and boot id work as for /dev/kmsg; lines without a
    timestamp (a kernel without PRINTK_TIME) cannot be told apart across reads and are skipped.
    The buffer is read again at most every ``refill_seconds`` (its size is the kernel's, capped
    at ``max_bytes``).

    syslog(2) gives no sequence numbers: when the last record handed over is gone from the
    buffer and the oldest one held is newer, the kernel overwrote records between two reads.
    How many is estimated from the timestamps (the gap times the records per microsecond of
    what the buffer holds; exact for a steady storm) and handed to the follower through
    ``take_overwritten``."""

    kind = "kmsg"
    sequential = False  # sequence numbers jump: a gap is no overwritten record
    cursor_fields = {"seq_scale": _SEQ_SCALE}  # saved with the cursor: an older cursor is converted

    def __init__(self, reader: Callable[[int], bytes] = klogctl_read_all, *, refill_seconds: float = 1.0,
                 max_bytes: int = 16 << 20):
        self._reader = reader
        self._refill = refill_seconds
        self._max = min(int(max_bytes), MAX_SYSLOG_BYTES)
        self._after = -1  # sequence of the last record handed over
        self._queue: deque = deque()
        self._next_read = 0.0
        self._overwritten = 0

    @property
    def name(self) -> str:
        return "syslog(2)"

    @staticmethod
    def load_seq(doc: Mapping[str, Any]) -> Optional[int]:
        """The cursor's sequence in this source's scale (a cursor saved by an older agent, 16
        lines a microsecond, is converted); None when it holds none."""
        seq = doc.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool):
            return None
        if doc.get("seq_scale") == _SEQ_SCALE:
            return seq
        return seq // _OLD_SEQ_SCALE * _SEQ_SCALE + seq % _OLD_SEQ_SCALE

    def open(self, cursor: Optional[Mapping[str, Any]] = None) -> None:
        seq = (cursor or {}).get("seq")
        self._after = seq if isinstance(seq, int) else -1
        self._queue.clear()
        self._fill()  # raises here when syslog(2) is refused: the follower says why

    def _fill(self) -> None:
        data = self._reader(self._max)
        self._next_read = time.monotonic() + self._refill
        after = self._after
        last_usec, n = -1, 0
        kept = False  # the last record handed over is still in the buffer
        first_new: Optional[int] = None
        count, newest = 0, -1
        for m in _SYSLOG_LINE.finditer(data):
            prio, sec, frac, text = m.groups()
            if sec is None:
                continue
            usec = int(sec) * 1_000_000 + int(frac.ljust(6, b"0")[:6])
            n = n + 1 if usec == last_usec else 0
            last_usec = usec
            seq = usec * _SEQ_SCALE + n
            if seq == after:
                kept = True
            if seq > after:
                if first_new is None:
                    first_new = seq
                count, newest = count + 1, usec
                self._queue.append(b"%d,%d,%d,-;%s" % (int(prio), seq, usec, text))
                self._after = seq
        if after >= 0 and not kept and first_new is not None:
            self._overwritten += _lost_between(after // _SEQ_SCALE, first_new // _SEQ_SCALE, newest, count)

    def take_overwritten(self) -> int:
        """Records estimated overwritten since the last call (the follower counts them)."""
        n, self._overwritten = self._overwritten, 0
        return n

    def read(self) -> Optional[bytes]:
        if not self._queue and time.monotonic() >= self._next_read:
            self._fill()
        return self._queue.popleft() if self._queue else None

    def wait(self, timeout: float) -> bool:
        return False

    def wall_time(self, usec: int) -> Optional[float]:
        try:
            return time.time() - (time.clock_gettime(time.CLOCK_MONOTONIC) - usec / 1e6)
        except (AttributeError, OSError):
            return None

    def close(self) -> None:
        self._queue.clear()


def _lost_between(last_usec: int, first_usec: int, newest_usec: int, count: int) -> int:
    """Records the kernel wrote after one stamped ``last_usec`` and before the oldest one held
    (``first_usec``), at the rate of the ``count`` records held up to ``newest_usec``: the gap
    holds gap x rate records, the oldest held one among them."""
    if count < 2 or first_usec < last_usec:
        return 0
    per_usec = (count - 1) / max(1, newest_usec - first_usec)
    return max(0, round((first_usec - last_usec) * per_usec) - 1)


class FileSource:
    """A text log followed like ``tail -F``: complete lines as they are written; a rotated or
    truncated file is reopened from its start (after the rest of the old one was read)."""

    kind = "file"

    def __init__(self, path: str, initial_bytes: int = 8 << 20):
        self.path = path
        self.initial_bytes = initial_bytes
        self._f: Any = None
        self._inode: Optional[int] = None
        self._offset = 0  # end of the last complete line read
        self._partial = b""
        self.catching_up = False  # reading what was there at open (not live lines)

    @property
    def name(self) -> str:
        return self.path

    def open(self, cursor: Optional[Mapping[str, Any]] = None) -> None:
        self.close()
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block the open
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # /dev/zero behind a symlink would spin a core
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file (a text log, or /dev/kmsg / syslog as the source)")
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")  # kept open while following
        self._f, self._inode, self._partial = f, st.st_ino, b""
        if cursor and cursor.get("inode") == st.st_ino and 0 <= int(cursor.get("offset", -1)) <= st.st_size:
            self._offset = int(cursor["offset"])
            f.seek(self._offset)
        elif cursor and cursor.get("inode") is not None:
            self._offset = 0  # rotated while we were away: the new file from its start
        else:
            start = max(0, st.st_size - self.initial_bytes)
            f.seek(start)
            if start:
                f.readline()  # the first line is cut
            self._offset = f.tell()
        self.catching_up = True

    @property
    def cursor(self) -> dict[str, Any]:
        return {"inode": self._inode, "offset": self._offset}

    def read(self) -> Optional[bytes]:
        """The next complete line; None at the end (for now)."""
        if self._f is None:
            return None
        chunk = self._f.readline(MAX_LINE)
        if chunk:
            if chunk.endswith(b"\n") or len(self._partial) + len(chunk) >= MAX_LINE:
                line, self._partial = self._partial + chunk, b""
                self._offset = self._f.tell()
                return line
            self._partial += chunk  # the writer is mid-line: keep it for the next read
            return None
        self.catching_up = False
        self._check_rotation()
        return None

    def _check_rotation(self) -> None:
        try:
            st = os.stat(self.path)
        except OSError:
            return  # moved away and not recreated yet: keep the old one open
        pos = self._f.tell()
        if st.st_ino != self._inode or st.st_size < pos:
            try:
                f = open(self.path, "rb")  # noqa: SIM115
            except OSError:
                return
            self._f.close()
            self._f, self._inode, self._offset, self._partial = f, os.fstat(f.fileno()).st_ino, 0, b""

    def wait(self, timeout: float) -> bool:
        return False

    def wall_time(self, usec: int) -> Optional[float]:
        return None

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


# --------------------------------------------------------------------------- follower


@dataclass
class Pending:
    """Occurrences of one event (coalesced by vendor, device, code) not yet taken."""

    event: Any
    count: int
    first: float
    last: float
    order: int
    urgent: bool = False  # more than an info fault, or a recovery: never evicted for another


def _kmsg_header(raw: bytes) -> Optional[tuple[int, int, int, str, str]]:
    """(priority, seq, usec, flags, message) of a /dev/kmsg record ``pri,seq,usec,flags[,..];msg``,
    dictionary lines cut; None for anything else."""
    first = raw.decode("utf-8", errors="replace").partition("\n")[0]
    head, sep, message = first.partition(";")
    parts = head.split(",")
    if not sep or len(parts) < 3 or not head.isascii() or not 1 <= len(parts[0]) <= 3:
        return None
    try:
        priority, seq, usec = int(parts[0]), int(parts[1]), int(parts[2])
    except ValueError:
        return None
    return priority, seq, usec, parts[3] if len(parts) > 3 else "-", message


class Follower:
    """Follows one source in a thread; ``take()`` hands over the events matched since."""

    def __init__(self, source: Any, *, state_dir: Optional[str] = None, boot_id: Optional[str] = None,
                 matcher: Any = None, split: Optional[Callable[[str, int], Any]] = None,
                 clock: Callable[[], float] = time.time, max_records_per_second: float = 5000.0,
                 max_pending: int = 1024, wake: Optional[Callable[[], None]] = None,
                 retry_seconds: float = 60.0, poll_seconds: float = 0.25, writable: bool = True,
                 urgent_codes: Optional[Mapping[str, Iterable[str]]] = None, defer_restore: bool = False):
        self.source = source
        self._cursor_fields: dict[str, Any] = dict(getattr(source, "cursor_fields", {}))
        self.state_dir = state_dir
        self.writable = writable  # False: the cursor is read, never saved (inspect, health --dry-run)
        self.boot_id = boot_id if boot_id is not None else read_boot_id()
        Matcher, split_record, self._kmsg_record, self._benign = _kmsg_api()
        self._matcher = matcher if matcher is not None else Matcher(urgent_codes=urgent_codes)
        self._split = split if split is not None else split_record
        self._clock = clock
        # two token buckets: rule runs (a text the matcher has not judged) and records read (any)
        self._rate = float(max_records_per_second)
        self._tokens = self._rate
        self._reads = self._rate / CHEAP_RECORD
        self._refilled = time.monotonic()
        self._spent = 0.0  # rule runs the last drain() used
        self._read = 0  # records the last drain() read
        self._max_pending = int(max_pending)
        self._wake = wake
        self._retry = retry_seconds
        self._poll = poll_seconds
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()  # one reader at a time (thread, or a test's drain())
        self._pending: "OrderedDict[tuple, Pending]" = OrderedDict()
        self._order = 0
        self.records = 0
        self.events: dict[tuple[str, str], int] = {}
        # every reason from the start (a rate needs the 0): "unresolved" and CODE_CAP are counted
        # by KernelLogFaults, after the hand-over
        self.dropped: dict[str, int] = {"overwritten": 0, "queue-full": 0, RATE_LIMITED: 0, "unresolved": 0,
                                        CODE_CAP: 0}
        self._benign_pending = 0  # pending entries that are not urgent (evicted first when full)
        self.up = False
        self.reason = "not started"
        self._said_why = False
        self._opened = False
        self._seq: Optional[int] = None  # last kmsg sequence number read
        self._cursor: dict[str, Any] = {}  # read cursor
        self._committed: dict[str, Any] = {}  # cursor of what was handed over (saved)
        self._saved: dict[str, Any] = {}
        self._behind_since: Optional[float] = None
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._restored = False  # the saved cursor read: now, or (defer_restore) by restore() or the first read
        if not defer_restore:
            self.restore()

    # ---- state file

    @property
    def state_path(self) -> Optional[str]:
        return os.path.join(self.state_dir, STATE_FILE) if self.state_dir else None

    def restore(self) -> None:
        """Read the cursor an earlier run saved (and remove what a save killed mid-write left),
        once: a restart neither replays what it handed over nor misses what came since. Made
        with ``defer_restore``, the agent calls it before its first cycle (app/agent.py
        Agent.restore), else the first read does."""
        if self._restored:
            return
        self._restored = True
        self._load_state()

    def _load_state(self) -> None:
        path, state_dir = self.state_path, self.state_dir
        if not path or not state_dir:
            return
        if self.writable:  # what a save killed mid-write left
            smallfile.remove_stale(state_dir, STATE_TMP_PREFIX)
        try:
            doc = json.loads(smallfile.read_regular(path, MAX_STATE_BYTES, follow_links=False))
        except FileNotFoundError:
            return
        except (OSError, ValueError, RecursionError) as e:
            log.warning("kernel log state unreadable; starting from the buffer's start",
                        extra={"path": path, "error": str(e)})
            return
        if not isinstance(doc, dict) or doc.get("source") != self.source.name:
            return
        if self.source.kind == "kmsg":
            load_seq = getattr(self.source, "load_seq", None)
            seq = load_seq(doc) if load_seq is not None else doc.get("seq")
            if doc.get("boot_id") != self.boot_id or not isinstance(seq, int):
                return  # a new boot: the ring buffer is new, read it from its start
            self._seq = seq
            self._cursor = {"seq": seq, **self._cursor_fields}
        elif isinstance(doc.get("inode"), int) and isinstance(doc.get("offset"), int):
            self._cursor = {"inode": doc["inode"], "offset": doc["offset"]}
        self._committed = self._saved = dict(self._cursor)

    def save_state(self) -> None:
        """Write the handed-over cursor (atomically) when it moved."""
        path = self.state_path
        with self._lock:
            cursor = dict(self._committed)
        if not path or not self.writable or not cursor or cursor == self._saved:
            return
        doc = {"schema": 1, "source": self.source.name, "boot_id": self.boot_id, **cursor}
        try:
            # no fsync: saved after each batch read; a lost cursor only reads the buffer again
            smallfile.write_atomically(path, json.dumps(doc).encode(), prefix=STATE_TMP_PREFIX, fsync=False)
            self._saved = cursor
        except OSError as e:
            if self._saved.get("_failed") is None:
                log.warning("kernel log cursor not saved (a restart will read the buffer again)",
                            extra={"path": path, "error": str(e)})
            self._saved = {**cursor, "_failed": True}

    # ---- reading

    def _open(self) -> bool:
        self.restore()
        try:
            self.source.open(self._cursor or None)
        except OSError as e:
            self.up = False
            why = e.strerror or str(e)
            if isinstance(e, PermissionError):
                why += " (reading it needs CAP_SYSLOG, or kernel.dmesg_restrict=0)"
            elif isinstance(e, FileNotFoundError):
                why += " (not mounted into the container?)"
            self.reason = f"cannot open {self.source.name}: {why}"
            if not self._said_why:
                log.warning("kernel log off: %s; the rest of the agent runs", self.reason,
                            extra={"path": self.source.name})
                self._said_why = True
            return False
        if self._said_why:
            log.info("kernel log on", extra={"path": self.source.name})
        self.up, self.reason, self._opened = True, "", True
        return True

    def _take_tokens(self) -> int:
        """Refill both buckets; the rule runs available now (the records: ``self._reads``)."""
        now = time.monotonic()
        elapsed, self._refilled = now - self._refilled, now
        self._tokens = min(self._rate, self._tokens + elapsed * self._rate)
        self._reads = min(self._rate / CHEAP_RECORD, self._reads + elapsed * self._rate / CHEAP_RECORD)
        return max(0, int(self._tokens))

    def drain(self, limit: Optional[float] = None, reads: Optional[float] = None) -> tuple[int, bool]:
        """Read what is there now: at most ``reads`` records (default ``limit / CHEAP_RECORD``),
        the rules run on at most ``limit`` texts the matcher has not judged. Past ``limit``, a
        record the matcher's triage finds urgent still has its rules run (a critical line never
        waits behind benign ones); one that states at most an info fault is skipped and counted
        (``dropped["rate-limited"]``). None: no limit. (records read, caught up)."""
        if reads is None and limit is not None:
            reads = limit / CHEAP_RECORD
        with self._read_lock:
            if not self._opened and not self._open():
                return 0, True
            n = 0
            spent = 0.0
            caught_up = False
            while reads is None or n < reads:
                try:
                    raw = self.source.read()
                except BrokenPipeError:  # overwritten: the gap is counted from the next seq
                    continue
                except OSError as e:
                    self.up, self._opened = False, False
                    self.reason = f"read {self.source.name}: {e.strerror or e}"
                    log.warning("kernel log read failed; reopening", extra={"error": self.reason})
                    caught_up = True
                    break
                if raw is None:
                    caught_up = True
                    break
                n += 1
                evaluated = self._matcher.evaluated  # grows when the rules really ran on a record
                self._record(raw, limit is not None and spent >= limit)
                if self._matcher.evaluated != evaluated:
                    spent += 1.0
            self._spent, self._read = spent, n
            lost = getattr(self.source, "take_overwritten", None)
            lost = lost() if lost is not None else 0
            now = self._clock()
            with self._lock:
                if lost:
                    self.dropped["overwritten"] += lost
                if caught_up:
                    self._behind_since = None
                    if not self._pending:
                        self._committed = dict(self._cursor)
                elif self._behind_since is None:
                    self._behind_since = now
            return n, caught_up

    def _record(self, raw: bytes, shed: bool = False) -> None:
        """One record. ``shed``: the rule budget is spent, only urgent texts are matched."""
        if self.source.kind == "kmsg":
            header = _kmsg_header(raw)
            if header is None:
                return
            priority, seq, usec, flags, message = header
            if self._seq is not None:
                if seq <= self._seq:
                    return  # handed over before a restart
                if seq > self._seq + 1 and getattr(self.source, "sequential", True):
                    with self._lock:
                        self.dropped["overwritten"] += seq - self._seq - 1
            self._seq = seq
            self._cursor = {"seq": seq, **self._cursor_fields} if self._cursor_fields else {"seq": seq}
            self.records += 1
            if "+" in flags:  # a continuation fragment (old kernels): not a whole message
                return
            # a storm's repeat is answered from the matcher's memo before any Record is made
            events = self._matcher.replay(message, seq, str(usec)) if priority >> 3 == 0 else None
            if events is None:
                self._handle(self._kmsg_record(seq, seq, str(usec), priority, message),
                             self.source.wall_time(usec), shed)
            elif events:
                self._coalesce(events, self.source.wall_time(usec))
        else:
            self.records += 1
            self._cursor = self.source.cursor
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if self.source.catching_up and BOOT_MARKER in text:
                with self._lock:  # what came before belongs to an earlier boot
                    self._pending.clear()
                    self._benign_pending = 0
            self._handle(self._split(text, self.records), None, shed)

    def _handle(self, record: Any, when: Optional[float], shed: bool = False) -> None:
        if record is None:
            return
        try:
            if shed and record.kernel and self._matcher.triage(record.text) == self._benign:
                with self._lock:
                    self.dropped[RATE_LIMITED] += 1
                return
            events = self._matcher.match(record)
        except Exception:  # noqa: BLE001 - a rule bug must not stop the follower
            log.exception("kernel log matcher failed on line %s", record.line)
            return
        if events:
            self._coalesce(events, when)

    def _coalesce(self, events: list, when: Optional[float]) -> None:
        """Count the events and fold them into the pending table; wake the health loop for a
        critical one or a recovery."""
        when = self._clock() if when is None else when
        urgent = False
        with self._lock:
            for ev in events:  # a storm runs this ~100,000 times a second: kept lean
                key = (ev.vendor, ev.pci_address, ev.uuid, ev.code, ev.recovery, ev.node_level)
                self._order += 1
                code = (ev.vendor, ev.code)
                seen = self.events.get(code)
                if seen is None and len(self.events) >= MAX_EVENT_CODES:
                    code = (ev.vendor, OTHER_CODES)  # free-text codes (amdgpu blocks) must not grow it
                    seen = self.events.get(code)
                self.events[code] = (seen or 0) + 1
                p = self._pending.get(key)
                if p is not None:
                    p.count += 1
                    if when > p.last:
                        p.last = when
                    p.order, p.event = self._order, ev
                else:
                    hot = self._matcher.urgent(ev)
                    if len(self._pending) >= self._max_pending and not (hot and self._evict_benign()):
                        self.dropped["queue-full"] += 1
                        continue
                    self._pending[key] = Pending(ev, 1, when, when, self._order, hot)
                    self._benign_pending += not hot
                urgent = urgent or ev.severity == "critical" or bool(ev.recovery)
        if urgent and self._wake is not None:
            self._wake()

    def count_dropped(self, reason: str, n: int = 1) -> None:
        """Count ``n`` events lost after the follower handed them over (``dropped[reason]``)."""
        with self._lock:
            self.dropped[reason] = self.dropped.get(reason, 0) + n

    def _evict_benign(self) -> bool:
        """Make room for an urgent event: the oldest pending entry that is not urgent out
        (its occurrences counted queue-full). False when every entry is urgent. Under the lock."""
        if not self._benign_pending:
            return False
        for key, p in self._pending.items():
            if not p.urgent:
                del self._pending[key]
                self._benign_pending -= 1
                self.dropped["queue-full"] += p.count
                return True
        return False

    def take(self) -> list[Pending]:
        """The events matched since the last call, oldest first; their records count as
        handed over (the cursor saved next)."""
        with self._lock:
            out = sorted(self._pending.values(), key=lambda p: p.order)
            self._pending.clear()
            self._benign_pending = 0
            self._committed = dict(self._cursor)
        return out

    # ---- thread

    def start(self, wait_first: float = 2.0) -> "Follower":
        """Start following; wait up to ``wait_first`` seconds for the first read (the buffer as
        it stands) so the first cycle sees it."""
        self._thread = threading.Thread(target=self._loop, name="kernel-log", daemon=True)
        self._thread.start()
        self._first.wait(wait_first)
        return self

    def _loop(self) -> None:
        first = True
        while not self._stop.is_set():
            if not self._opened and not self._open():
                self._first.set()
                self._stop.wait(self._retry)
                continue
            limit = None if first else self._take_tokens()
            if limit is not None and self._reads < 1:
                with self._lock:
                    if self._behind_since is None:
                        self._behind_since = self._clock()
                self._stop.wait(1.0 / max(self._rate, 1.0))
                continue
            _n, caught_up = self.drain(limit, None if first else self._reads)
            if not first:
                # urgent lines past the budget borrow from the next second (one second's worth at most)
                self._tokens = max(-self._rate, self._tokens - self._spent)
                self._reads -= self._read
            first = False
            self._first.set()
            self.save_state()
            if caught_up and not self._stop.is_set():
                if not self.source.wait(self._poll):
                    self._stop.wait(self._poll)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self.save_state()
        self.source.close()

    # ---- self-metrics

    def status(self) -> dict[str, Any]:
        now = self._clock()
        with self._lock:
            lag = 0.0 if self._behind_since is None else max(0.0, now - self._behind_since)
            return {"up": self.up, "reason": self.reason, "source": self.source.kind, "path": self.source.name,
                    "records": self.records, "events": dict(self.events), "dropped": dict(self.dropped),
                    "pending": len(self._pending), "lag_seconds": lag}


# --------------------------------------------------------------------------- enricher


class _Pairing:
    """Occurrences of one (device, code) from the kernel log and from the device's collector,
    paired when within ``window`` seconds: a pair is one fault."""

    def __init__(self, window: float):
        self.window = window
        self.kmsg: deque = deque(maxlen=64)  # unpaired [time, n]
        self.collector: deque = deque(maxlen=64)
        self.collector_seen = 0
        self.pairs = 0
        self.merged = 0

    def _pair(self, when: float, n: int, other: deque) -> int:
        """Pair ``n`` occurrences at ``when`` with ``other``'s; the unpaired rest."""
        for item in other:
            if n == 0:
                break
            if item[1] and abs(item[0] - when) <= self.window:
                k = min(n, item[1])
                item[1] -= k
                n -= k
                self.pairs += k
        while other and other[0][1] == 0:
            other.popleft()
        return n

    def add_kmsg(self, when: float, n: int) -> None:
        rest = self._pair(when, n, self.collector)
        if rest:
            self.kmsg.append([when, rest])

    def count(self, kmsg_total: int, collector: Fault, now: float) -> int:
        """The one count of a fault both report."""
        if collector.count < self.collector_seen:  # the collector restarted its ledger
            self.collector_seen = collector.count
        grown = collector.count - self.collector_seen
        self.collector_seen = collector.count
        if grown > 0:
            when = collector.last_seen if collector.last_seen is not None else now
            rest = self._pair(when, grown, self.kmsg)
            if rest:
                self.collector.append([when, rest])
        for q in (self.kmsg, self.collector):
            while q and q[0][0] < now - 10 * self.window:
                q.popleft()
        self.merged = max(self.merged, collector.count + kmsg_total - self.pairs)
        return self.merged


class KernelLogFaults:
    """``Sampler(enrichers=[..., PciPresence, KernelLogFaults(follower), HealthVerdicts])``."""

    __name__ = "kernel-log"

    def __init__(self, follower: Any, *, reset_codes: Iterable[str] = RESET_CODES,
                 dedup_seconds: float = 60.0, max_unresolved: int = 256,
                 bounds: LedgerBounds = CODE_BOUNDS):
        self.follower = follower
        self.reset_codes = frozenset(reset_codes)
        self.dedup_seconds = dedup_seconds
        self._max_unresolved = max_unresolved
        # the log's codes are free text (amdgpu block names, any Xid number): per device at most
        # bounds.codes of them and bounds.bytes, the rest folded into one "other" fault
        self._ledger = FaultLedger(bounds)
        self._max_pairings = bounds.devices * (bounds.codes + 1)
        self._lock = threading.Lock()
        self._known: dict[str, DeviceIdentity] = {}  # PCI address -> identity seen there
        self._pairing: dict[tuple[str, str], _Pairing] = {}
        self._held: list[Pending] = []  # not resolved yet, or a recovery kept for the next cycle
        self.unresolved_dropped = 0

    def fault_code(self, ev: Any) -> str:
        """A recovery is recorded as a reset code (the rules' evidence); a fault whose code is a
        reset code but is no recovery (amdgpu "GPU reset begin!") must not read as one."""
        code = str(ev.code)
        if ev.recovery:
            return code if code in self.reset_codes else "device-reset"
        return f"{code}-begin" if code in self.reset_codes else code

    def _fault(self, ev: Any, code: str) -> Fault:
        msg = str(ev.message or "")
        if ev.node_level and ev.pci_address:
            msg = f"{msg} (reported at PCI {ev.pci_address}: node-level)"
        if ev.recovery:
            return Fault(code=code, fault_class="reset", action="none", severity="info", message=msg, source="kmsg")
        return Fault(code=code, fault_class=str(ev.fault_class or "unknown"), action=str(ev.action or "none"),
                     severity=str(ev.severity or "warning"), message=msg, source="kmsg")

    def __call__(self, snapshot: NodeSnapshot) -> NodeSnapshot:
        with self._lock:
            return self._enrich(snapshot)

    def _enrich(self, snapshot: NodeSnapshot) -> NodeSnapshot:
        by_pci, by_bus, by_vendor = self._device_maps(snapshot)
        resolved = self._resolve(self._held + self.follower.take(), by_pci, by_bus, by_vendor)
        self._into_ledger(resolved)
        return self._merged(snapshot)

    def _device_maps(self, snapshot: NodeSnapshot) -> tuple[dict[str, str], dict[str, str], dict[str, list[str]]]:
        """(PCI address -> uuid, PCI bus -> uuid, vendor -> uuids of its top-level devices); the
        addresses of devices seen before are remembered (a lost device still has its faults)."""
        tops = [d for d in snapshot.devices if d.identity.parent is None and not d.identity.uuid.startswith("pci-")]
        for d in tops:
            if d.identity.pci_address:
                addr = pciaddr.normalize(d.identity.pci_address)
                if addr:
                    self._known[addr] = d.identity
        by_pci: dict[str, str] = {}
        by_bus: dict[str, str] = {}
        for d in snapshot.devices:  # placeholders too: PCI presence's stand-ins for lost devices
            addr = pciaddr.normalize(d.identity.pci_address) if d.identity.pci_address else None
            if addr and d.identity.parent is None:
                by_pci.setdefault(addr, d.identity.uuid)
                by_bus.setdefault(addr.rsplit(".", 1)[0], d.identity.uuid)
        for addr, ident in self._known.items():
            by_pci.setdefault(addr, ident.uuid)
        by_vendor: dict[str, list[str]] = {}
        for d in tops:
            by_vendor.setdefault(d.identity.vendor, []).append(d.identity.uuid)
        return by_pci, by_bus, by_vendor

    def _resolve(self, batch: list[Pending], by_pci: Mapping[str, str], by_bus: Mapping[str, str],
                 by_vendor: Mapping[str, list[str]]) -> list[tuple[Pending, list[str]]]:
        """Each pending event with the uuids it is about; an event whose device is not seen yet
        is held for the next cycle (a bounded number of them: the rest are counted dropped)."""
        self._held = []
        resolved: list[tuple[Pending, list[str]]] = []
        for p in batch:
            ev = p.event
            addr = pciaddr.normalize(ev.pci_address) if ev.pci_address else None
            at_addr = (by_pci.get(addr) or by_bus.get(addr.rsplit(".", 1)[0])) if addr else None
            if ev.node_level:
                targets = by_vendor.get(ev.vendor, [])
            elif at_addr:
                # the device the collectors report at that address: a uuid the log put on the
                # address (a "GPU at PCI:... : GPU-..." line) never overrides what they report
                targets = [at_addr]
            else:
                targets = [ev.uuid] if ev.uuid else []
            if targets:
                resolved.append((p, targets))
            elif len(self._held) < self._max_unresolved:
                self._held.append(p)  # its device has not been seen yet: try next cycle
            else:
                self.unresolved_dropped += 1
                self._count_dropped("unresolved", p.count)
        return resolved

    def _count_dropped(self, reason: str, n: int) -> None:
        count = getattr(self.follower, "count_dropped", None)  # the follower's metric
        if count is not None:
            count(reason, n)

    def _into_ledger(self, resolved: list[tuple[Pending, list[str]]]) -> None:
        """The resolved events into the ledger and the per-(device, code) pairing with the
        collectors' counts. A recovery after a fault of the same device in one batch waits a
        cycle, so the rules see the fault before the reset that cleared it."""
        last_fault: dict[str, int] = {}
        for p, targets in resolved:
            if not p.event.recovery:
                for u in targets:
                    last_fault[u] = max(last_fault.get(u, 0), p.order)
        for p, targets in resolved:
            if p.event.recovery and any(last_fault.get(u, 0) and last_fault[u] < p.order for u in targets):
                self._held.append(p)
                continue
            fault = self._fault(p.event, self.fault_code(p.event))
            for u in targets:
                got = self._ledger.record_bounded(u, fault, p.first, 1)
                first_fold = got.first_fold
                if p.count > 1:
                    got = self._ledger.record_bounded(u, fault, p.last, p.count - 1)
                if got.folded:
                    self._count_dropped(CODE_CAP, p.count)
                    bounds = self._ledger.bounds  # set: only a bounded ledger folds
                    if (first_fold or got.first_fold) and bounds is not None:
                        log.warning("kernel-log fault codes of a device past their bound; further new codes "
                                    "are counted under code %r", got.fault.code,
                                    extra={"uuid": u, "code": fault.code, "max_codes": bounds.codes,
                                           "max_bytes": bounds.bytes})
                code = got.fault.code
                pairing = self._pairing.get((u, code))
                if pairing is None:
                    pairing = self._pairing[(u, code)] = _Pairing(self.dedup_seconds)
                pairing.add_kmsg(p.last, p.count)
        if len(self._pairing) > self._max_pairings:  # devices the ledger forgot: their pairings too
            self._pairing = {k: v for k, v in self._pairing.items() if self._ledger.get(*k) is not None}

    def _merged(self, snapshot: NodeSnapshot) -> NodeSnapshot:
        """The snapshot with each device's kernel-log faults beside (or counted into) the
        collectors' faults of the same code."""
        devices = list(snapshot.devices)
        for i, d in enumerate(devices):
            mine = self._ledger.faults(d.identity.uuid)
            if not mine:
                continue
            out = list(d.faults)
            where = {f.code: j for j, f in enumerate(out)}
            for f in mine:
                j = where.get(f.code)
                if j is None:
                    out.append(f)
                    continue
                c = out[j]
                pairing = self._pairing[(d.identity.uuid, f.code)]
                count = pairing.count(f.count, c, snapshot.time)
                last = max(x for x in (c.last_seen, f.last_seen, 0.0) if x is not None)
                out[j] = dataclasses.replace(c, count=count, last_seen=last or None,
                                             message=c.message or f.message)
            devices[i] = dataclasses.replace(d, faults=tuple(out))
        return dataclasses.replace(snapshot, devices=tuple(devices))


# --------------------------------------------------------------------------- parse kernel-log


def iter_lines(stream: Any, limit_bytes: int, name: str) -> Iterator[str]:
    """Lines of a binary stream, decoded; ValueError naming the limit past ``limit_bytes``."""
    total = 0
    while True:
        # a line is cut at MAX_LINE before it is buffered: 3 GB of NUL bytes with no newline is
        # read in bounded pieces, never held whole
        raw = stream.readline(MAX_LINE)
        if not raw:
            return
        total += len(raw)
        if total > limit_bytes:
            raise ValueError(f"{name}: more than {limit_bytes} bytes ({limit_bytes >> 20} MiB), the limit "
                             "of parse kernel-log")
        if len(raw) == MAX_LINE and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):  # the rest of an over-long line: skipped
                raw = stream.readline(MAX_LINE)
                total += len(raw)
                if total > limit_bytes:
                    raise ValueError(f"{name}: more than {limit_bytes} bytes ({limit_bytes >> 20} MiB), the "
                                     "limit of parse kernel-log")
            continue
        yield raw.decode("utf-8", errors="replace").rstrip("\r\n")


def render_events(doc: Mapping[str, Any]) -> str:
    """The events of a ``parse kernel-log`` result as a table."""
    events = list(doc.get("events") or [])
    cols = ("line", "time", "vendor", "pci_address", "code", "severity", "action", "message")
    heads = ("LINE", "TIME", "VENDOR", "PCI", "CODE", "SEVERITY", "ACTION", "MESSAGE")
    rows = [[("-" if e.get(c) in (None, "") else str(e.get(c))) for c in cols] for e in events]
    for r in rows:
        r[-1] = r[-1][:80]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.append(f"{len(events)} event(s)" + (f" in {doc['lines']} line(s)" if "lines" in doc else ""))
    return "\n".join(lines) + "\n"
