"""The latest snapshot and its health evaluation, shared between the sampler (writer) and its readers.

Snapshots are immutable, so publishing is one reference swap under a lock and a reader
never sees a half-built state; the evaluation the judge made of a snapshot is published with
it, so a reader never pairs a snapshot with another cycle's verdicts. Readers (a scrape, the
health loop) never call a vendor.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

from hetero_exporter.model import NodeSnapshot
from hetero_exporter.model.evaluation import Evaluation

# a subscriber: (snapshot, the judge's evaluation of it; None when it was not judged)
Listener = Callable[[NodeSnapshot, Optional[Evaluation]], None]


class SnapshotStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: Optional[NodeSnapshot] = None
        self._evaluation: Optional[Evaluation] = None
        self._seq = 0
        self._listeners: list[Listener] = []
        self._changed = threading.Condition(self._lock)

    def publish(self, snapshot: NodeSnapshot, evaluation: Optional[Evaluation] = None) -> None:
        """Make ``snapshot`` (and ``evaluation``, the health judge's of it) the latest."""
        with self._lock:
            self._snapshot, self._evaluation = snapshot, evaluation
            self._seq += 1
            listeners = list(self._listeners)
            self._changed.notify_all()
        for fn in listeners:
            fn(snapshot, evaluation)

    def latest(self) -> Optional[NodeSnapshot]:
        with self._lock:
            return self._snapshot

    def latest_judged(self) -> tuple[Optional[NodeSnapshot], Optional[Evaluation]]:
        """The latest snapshot and its evaluation, read together."""
        with self._lock:
            return self._snapshot, self._evaluation

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

    def subscribe(self, fn: Listener) -> None:
        """Call ``fn(snapshot, evaluation)`` with each new snapshot (on the sampler's thread: keep it short)."""
        with self._lock:
            self._listeners.append(fn)
