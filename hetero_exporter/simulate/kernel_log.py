"""A simulated kernel ring buffer with /dev/kmsg's reading semantics.

``RingBuffer`` holds the last ``capacity`` records (``pri,seq,usec,flags;message``); each
``open()`` gives a reader that starts at the oldest record still held, returns one record per
``read()``, raises BlockingIOError when there is no new record and BrokenPipeError (once) when
the records it was about to read were overwritten, then goes on from the oldest one held, as
the kernel's does. Tests feed it with ``append``; ``ScenarioKmsg`` fills it from a scenario's
``kernel_log`` lines as the scenario clock passes their ``at``, so the buffer holds every line
emitted up to the clock (a follower's first read takes the buffer as it stands).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional


class RingBuffer:
    def __init__(self, capacity: int = 16384):
        self.capacity = capacity
        # seq -> bytes, oldest first; a dict, not a deque, so a reader far into a storm's
        # 500,000 records finds its next one in O(1) (deque indexing walks the blocks)
        self._records: dict[int, bytes] = {}
        self._oldest = 0
        self._next_seq = 0
        self._lock = threading.Lock()
        self.before_read: Optional[Callable[[], None]] = None  # fills the buffer lazily

    def append(self, message: str, priority: int = 3, usec: int = 0, flags: str = "-",
               dictionary: tuple[str, ...] = ()) -> int:
        """Add a record; its sequence number."""
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
            text = f"{priority},{seq},{usec},{flags};{message}\n" + "".join(f" {d}\n" for d in dictionary)
            self._records[seq] = text.encode("utf-8", errors="replace")
            if len(self._records) > self.capacity:
                del self._records[self._oldest]
                self._oldest += 1
            return seq

    def open(self) -> "_Reader":
        return _Reader(self)

    def _next(self, seq: int) -> tuple[Optional[bytes], int, bool]:
        """(record at or after ``seq``, the seq after it, overwritten) for a reader at ``seq``."""
        if self.before_read is not None:
            self.before_read()
        with self._lock:
            if not self._records:
                return None, seq, False
            if seq < self._oldest:
                return None, self._oldest, True
            rec = self._records.get(seq)
            return (rec, seq + 1, False) if rec is not None else (None, seq, False)


class _Reader:
    def __init__(self, ring: RingBuffer):
        self._ring = ring
        with ring._lock:
            self._seq = ring._oldest if ring._records else ring._next_seq
        self._started = False

    def read(self, _n: int = 8192) -> bytes:
        if not self._started:
            self._started = True
            if self._ring.before_read is not None:
                self._ring.before_read()
            with self._ring._lock:  # opened before anything was emitted: start at the oldest
                if self._ring._records and self._seq < self._ring._oldest:
                    self._seq = self._ring._oldest
        rec, nxt, overwritten = self._ring._next(self._seq)
        self._seq = nxt
        if overwritten:
            raise BrokenPipeError(32, "Broken pipe")
        if rec is None:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return rec

    def close(self) -> None:
        pass


class ScenarioKmsg:
    """The ring buffer of a scenario: its ``kernel_log`` lines appended as the clock passes
    their ``at`` (usec = ``at`` seconds after boot). ``opener`` and ``wall_time`` go to
    ``kernel_log.KmsgSource``."""

    def __init__(self, scenario: Any, clock: Any, capacity: int = 16384):
        self.ring = RingBuffer(capacity)
        self._lines = sorted(getattr(scenario, "kernel_log", ()) or (), key=lambda line: line.at)
        self._next = 0
        self._clock = clock
        self._lock = threading.Lock()
        self.ring.before_read = self.fill

    def _t(self) -> float:
        return self._clock.t() if hasattr(self._clock, "t") else 0.0

    def fill(self) -> None:
        t = self._t()
        with self._lock:
            while self._next < len(self._lines) and self._lines[self._next].at <= t:
                line = self._lines[self._next]
                self._next += 1
                self.ring.append(line.line, priority=line.priority, usec=int(line.at * 1e6))

    def opener(self) -> Any:
        return self.ring.open()

    def wall_time(self, usec: int) -> Optional[float]:
        """Unix time of a record at scenario time ``usec`` / 1e6 (the clock's stamps)."""
        if not hasattr(self._clock, "t"):
            return None
        return self._clock() - (self._t() - usec / 1e6)
