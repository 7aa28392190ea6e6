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
- A record storm is bounded: the rules are run on at most ``max_records_per_second`` records
  (token bucket; the kernel then overwrites and the loss is counted). A record the rules need not
  run on (no vendor's needle, or a text the matcher has judged before: a storm repeats a few texts)
  costs 1/50 of a token, so 500,000 repeated benign Xid 13 lines are read in about three seconds and
  the Xid 79 behind them is not 100 s late. Pending events are coalesced by
  (vendor, device, code) in a table of at most ``max_pending`` entries (more are dropped and
  counted, ``queue-full``).
- When /dev/kmsg cannot be opened (no CAP_SYSLOG, not mounted) it logs why once, reports
  ``up`` 0, and retries quietly every ``retry_seconds``.
- ``SyslogSource`` (``--kernel-log=syslog``) reads the same ring buffer through syslog(2), as
  ``dmesg`` does where /dev/kmsg is refused: it needs CAP_SYSLOG but no device, so an agent
  that is not privileged (the NVIDIA one: its device cgroup refuses /dev/kmsg) still reads Xid
  and SXid lines.

Matching is ``hetero_exporter.sdk.kmsg`` (pure; each vendor's rules in its package).

``KernelLogFaults`` is the sampler enricher (after PCI presence, before the health verdicts):
it takes the follower's events each cycle and records them in a ``FaultLedger`` under the
device they name (by uuid when the line gives one, else by PCI address, with the identities seen
at that address earlier for a device gone from the snapshot), so they reach the health rules as
fault occurrences with ``source: "kmsg"``, like the vendor APIs' events.

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
from hetero_exporter.sdk.ledger import FaultLedger

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
CHEAP_RECORD = 0.02  # tokens a record costs when the matcher's rules did not run on it


def read_boot_id(path: str = BOOT_ID_FILE) -> Optional[str]:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _kmsg_api() -> tuple[Callable, Callable, Callable]:
    from hetero_exporter.sdk.kmsg import Matcher, kmsg_record, split_record
    return Matcher, split_record, kmsg_record


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
_SEQ_PER_USEC = 16  # lines stamped within one microsecond, told apart in the sequence


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
    timestamp (microseconds x 16 + the n-th line of that microsecond), so the follower's cursor
    and boot id work as for /dev/kmsg; lines without a timestamp (a kernel without PRINTK_TIME)
    cannot be told apart across reads and are skipped. The buffer is read again at most every
    ``refill_seconds`` (its size is the kernel's, capped at ``max_bytes``)."""

    kind = "kmsg"
    sequential = False  # sequence numbers jump: a gap is no overwritten record

    def __init__(self, reader: Callable[[int], bytes] = klogctl_read_all, *, refill_seconds: float = 1.0,
                 max_bytes: int = 16 << 20):
        self._reader = reader
        self._refill = refill_seconds
        self._max = max_bytes
        self._after = -1  # sequence of the last record handed over
        self._queue: deque = deque()
        self._next_read = 0.0

    @property
    def name(self) -> str:
        return "syslog(2)"

    def open(self, cursor: Optional[Mapping[str, Any]] = None) -> None:
        seq = (cursor or {}).get("seq")
        self._after = seq if isinstance(seq, int) else -1
        self._queue.clear()
        self._fill()  # raises here when syslog(2) is refused: the follower says why

    def _fill(self) -> None:
        data = self._reader(self._max)
        self._next_read = time.monotonic() + self._refill
        last_usec, n = -1, 0
        for m in _SYSLOG_LINE.finditer(data):
            prio, sec, frac, text = m.groups()
            if sec is None:
                continue
            usec = int(sec) * 1_000_000 + int(frac.ljust(6, b"0")[:6])
            n = n + 1 if usec == last_usec else 0
            last_usec = usec
            seq = usec * _SEQ_PER_USEC + min(n, _SEQ_PER_USEC - 1)
            if seq > self._after:
                self._queue.append(b"%d,%d,%d,-;%s" % (int(prio), seq, usec, text))
                self._after = seq

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
                 retry_seconds: float = 60.0, poll_seconds: float = 0.25, writable: bool = True):
        self.source = source
        self.state_dir = state_dir
        self.writable = writable  # False: the cursor is read, never saved (inspect, health --dry-run)
        self.boot_id = boot_id if boot_id is not None else read_boot_id()
        Matcher, split_record, self._kmsg_record = _kmsg_api()
        self._matcher = matcher if matcher is not None else Matcher()
        self._split = split if split is not None else split_record
        self._clock = clock
        self._rate = float(max_records_per_second)
        self._tokens = self._rate
        self._refilled = time.monotonic()
        self._spent = 0.0  # tokens the last drain() used
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
        self.dropped: dict[str, int] = {"overwritten": 0, "queue-full": 0}
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
        self._load_state()

    # ---- state file

    @property
    def state_path(self) -> Optional[str]:
        return os.path.join(self.state_dir, STATE_FILE) if self.state_dir else None

    def _load_state(self) -> None:
        path = self.state_path
        if not path:
            return
        if self.writable:  # what a save killed mid-write left
            smallfile.remove_stale(self.state_dir, STATE_TMP_PREFIX)
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
            if doc.get("boot_id") != self.boot_id or not isinstance(doc.get("seq"), int):
                return  # a new boot: the ring buffer is new, read it from its start
            self._seq = doc["seq"]
            self._cursor = {"seq": self._seq}
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
        now = time.monotonic()
        self._tokens = min(self._rate, self._tokens + (now - self._refilled) * self._rate)
        self._refilled = now
        return int(self._tokens)

    def drain(self, limit: Optional[float] = None) -> tuple[int, bool]:
        """Read what is there now, for at most ``limit`` tokens (a record the rules ran on costs
        one, any other CHEAP_RECORD): (records read, caught up)."""
        with self._read_lock:
            if not self._opened and not self._open():
                return 0, True
            n = 0
            spent = 0.0
            caught_up = False
            while limit is None or spent < limit:
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
                self._record(raw)
                spent += 1.0 if self._matcher.evaluated != evaluated else CHEAP_RECORD
            self._spent = spent
            now = self._clock()
            with self._lock:
                if caught_up:
                    self._behind_since = None
                    if not self._pending:
                        self._committed = dict(self._cursor)
                elif self._behind_since is None:
                    self._behind_since = now
            return n, caught_up

    def _record(self, raw: bytes) -> None:
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
            self._cursor = {"seq": seq}
            self.records += 1
            if "+" in flags:  # a continuation fragment (old kernels): not a whole message
                return
            # a storm's repeat is answered from the matcher's memo before any Record is made
            events = self._matcher.replay(message, seq, str(usec)) if priority >> 3 == 0 else None
            if events is None:
                self._handle(self._kmsg_record(seq, seq, str(usec), priority, message), self.source.wall_time(usec))
            elif events:
                self._coalesce(events, self.source.wall_time(usec))
        else:
            self.records += 1
            self._cursor = self.source.cursor
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if self.source.catching_up and BOOT_MARKER in text:
                with self._lock:  # what came before belongs to an earlier boot
                    self._pending.clear()
            self._handle(self._split(text, self.records), None)

    def _handle(self, record: Any, when: Optional[float]) -> None:
        if record is None:
            return
        try:
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
                elif len(self._pending) >= self._max_pending:
                    self.dropped["queue-full"] += 1
                    continue
                else:
                    self._pending[key] = Pending(ev, 1, when, when, self._order)
                urgent = urgent or ev.severity == "critical" or bool(ev.recovery)
        if urgent and self._wake is not None:
            self._wake()

    def take(self) -> list[Pending]:
        """The events matched since the last call, oldest first; their records count as
        handed over (the cursor saved next)."""
        with self._lock:
            out = sorted(self._pending.values(), key=lambda p: p.order)
            self._pending.clear()
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
            if limit == 0:
                with self._lock:
                    if self._behind_since is None:
                        self._behind_since = self._clock()
                self._stop.wait(1.0 / max(self._rate, 1.0))
                continue
            _n, caught_up = self.drain(limit)
            if not first:
                self._tokens -= self._spent
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
                 dedup_seconds: float = 60.0, max_unresolved: int = 256):
        self.follower = follower
        self.reset_codes = frozenset(reset_codes)
        self.dedup_seconds = dedup_seconds
        self._max_unresolved = max_unresolved
        self._ledger = FaultLedger()
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
        return resolved

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
            code = self.fault_code(p.event)
            fault = self._fault(p.event, code)
            for u in targets:
                self._ledger.record(u, fault, p.first, 1)
                if p.count > 1:
                    self._ledger.record(u, fault, p.last, p.count - 1)
                pairing = self._pairing.get((u, code))
                if pairing is None:
                    pairing = self._pairing[(u, code)] = _Pairing(self.dedup_seconds)
                pairing.add_kmsg(p.last, p.count)

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
