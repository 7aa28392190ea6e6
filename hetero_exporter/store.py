"""The latest snapshot, shared between the sampler (writer) and its readers.

Snapshots are immutable, so publishing is one reference swap under a lock and a reader
never sees a half-built state. Readers (a scrape, the health loop) never call a vendor.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

from hetero_exporter.model import NodeSnapshot


class SnapshotStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: Optional[NodeSnapshot] = None
        self._seq = 0
        self._listeners: list[Callable[[NodeSnapshot], None]] = []
        self._changed = threading.Condition(self._lock)

    def publish(self, snapshot: NodeSnapshot) -> None:
        with self._lock:
            self._snapshot = snapshot
            self._seq += 1
            listeners = list(self._listeners)
            self._changed.notify_all()
        for fn in listeners:
            fn(snapshot)

    def latest(self) -> Optional[NodeSnapshot]:
        with self._lock:
            return self._snapshot

    @property
    def ready(self) -> bool:
        return self.latest() is not None

    @property
    def sequence(self) -> int:
        """Number of snapshots published so far."""
        with self._lock:
            return self._seq

    def wait_for(self, sequence: int, timeout: float) -> bool:
        """Wait until more than ``sequence`` snapshots were published."""
        with self._changed:
            return self._changed.wait_for(lambda: self._seq > sequence, timeout)

    def subscribe(self, fn: Callable[[NodeSnapshot], None]) -> None:
        """Call ``fn`` with each new snapshot (on the sampler's thread: keep it short)."""
        with self._lock:
            self._listeners.append(fn)
