"""Cumulative fault bookkeeping for a collector: counts and timestamps per (device, code).

Collectors record each fault *occurrence* (a driver fault event, a device found lost after being
fine); the ledger keeps ``count``, ``first_seen`` and ``last_seen`` since the agent started,
so ``accelerator_fault_events_total`` only grows, also across failed collection cycles
(the sampler carries a failed collector's last devices, faults included).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Optional

from hetero_exporter.model import Fault


class FaultLedger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: dict[str, dict[str, Fault]] = {}

    def record(self, uuid: str, fault: Fault, when: float, occurrences: int = 1) -> Fault:
        """Add ``occurrences`` of ``fault`` (its code identifies it) seen at ``when``."""
        with self._lock:
            per = self._faults.setdefault(uuid, {})
            prev = per.get(fault.code)
            if prev is None:
                new = dataclasses.replace(fault, first_seen=when, last_seen=when, count=occurrences)
            else:
                new = dataclasses.replace(fault, first_seen=prev.first_seen, last_seen=when,
                                          count=prev.count + occurrences)
            per[fault.code] = new
            return new

    def get(self, uuid: str, code: str) -> Optional[Fault]:
        with self._lock:
            return self._faults.get(uuid, {}).get(code)

    def faults(self, uuid: str) -> tuple[Fault, ...]:
        """Every fault code seen on the device, oldest first."""
        with self._lock:
            per = self._faults.get(uuid)
            if not per:
                return ()
            return tuple(sorted(per.values(), key=lambda f: (f.first_seen or 0.0, f.code)))
