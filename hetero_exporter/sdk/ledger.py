"""Cumulative fault bookkeeping for a collector: counts and timestamps per (device, code).

Collectors record each fault *occurrence* (a driver fault event, a device found lost after being
fine); the ledger keeps ``count``, ``first_seen`` and ``last_seen`` since the agent started,
so ``accelerator_fault_events_total`` only grows, also across failed collection cycles
(the sampler carries a failed collector's last devices, faults included).

Bounded on request (``LedgerBounds``; the kernel log's codes are free text it does not choose):
past a device's code count or bytes, a new code is folded into one ``other`` fault of that
device (its count, last time and the worst severity of what it holds); past the device count,
the device recorded least recently is forgotten.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Optional

from hetero_exporter.model import SEVERITIES, Fault

OVERFLOW_CODE = "other"
_RANK = {s: i for i, s in enumerate(SEVERITIES)}
_OVERFLOW_MESSAGE = 512  # characters of the folded fault's message (the latest code and its text)


@dataclass(frozen=True)
class LedgerBounds:
    """What one ledger keeps: distinct codes and their estimated bytes per device (the ``other``
    fault not counted), and devices. ``code_bytes``: the estimate of one code besides its code
    and message text (the Fault and what its keeper adds per code)."""

    codes: int = 128
    bytes: int = 256 << 10
    devices: int = 1024
    code_bytes: int = 2048


@dataclass(frozen=True)
class Recorded:
    """What ``record`` kept: the fault as it stands now, and whether its code was folded into
    ``other`` (the device is past its bounds) or the device's first fold (say it once)."""

    fault: Fault
    folded: bool = False
    first_fold: bool = False


class FaultLedger:
    def __init__(self, bounds: Optional[LedgerBounds] = None) -> None:
        self._lock = threading.Lock()
        self._faults: dict[str, dict[str, Fault]] = {}
        self.bounds = bounds
        self._bytes: dict[str, int] = {}  # uuid -> estimated bytes of its codes (bounded ledgers)
        self.folded = 0  # occurrences recorded under ``other`` instead of their own code
        self.devices_forgotten = 0

    def _weight(self, f: Fault) -> int:
        assert self.bounds is not None
        return self.bounds.code_bytes + len(f.code) + len(f.message or "")

    def record(self, uuid: str, fault: Fault, when: float, occurrences: int = 1) -> Fault:
        """Add ``occurrences`` of ``fault`` (its code identifies it) seen at ``when``; the fault
        as it stands now (its code ``other`` when it was folded)."""
        return self.record_bounded(uuid, fault, when, occurrences).fault

    def record_bounded(self, uuid: str, fault: Fault, when: float, occurrences: int = 1) -> Recorded:
        """``record``, saying whether the code was folded into ``other``."""
        with self._lock:
            per = self._faults.get(uuid)
            if per is None:
                per = self._faults[uuid] = {}
                self._forget_past_bounds(uuid)
            elif self.bounds is not None:  # recently recorded: the last one forgotten
                self._faults[uuid] = self._faults.pop(uuid)
            prev = per.get(fault.code)
            if prev is None and fault.code != OVERFLOW_CODE and self._full(uuid, per, fault):
                first = OVERFLOW_CODE not in per
                self.folded += occurrences
                return Recorded(self._fold(per, fault, when, occurrences), True, first)
            if prev is None:
                new = dataclasses.replace(fault, first_seen=when, last_seen=when, count=occurrences)
            else:
                new = dataclasses.replace(fault, first_seen=prev.first_seen, last_seen=when,
                                          count=prev.count + occurrences)
            if self.bounds is not None and fault.code != OVERFLOW_CODE:
                self._bytes[uuid] = (self._bytes.get(uuid, 0) + self._weight(new)
                                     - (self._weight(prev) if prev is not None else 0))
            per[fault.code] = new
            return Recorded(new)

    def _full(self, uuid: str, per: dict[str, Fault], fault: Fault) -> bool:
        b = self.bounds
        if b is None:
            return False
        codes = len(per) - (OVERFLOW_CODE in per)
        return codes >= b.codes or self._bytes.get(uuid, 0) + self._weight(fault) > b.bytes

    def _fold(self, per: dict[str, Fault], fault: Fault, when: float, occurrences: int) -> Fault:
        """The device's ``other`` fault with these occurrences: the worst severity folded in
        keeps its class and action (a critical code past the bound still fails the device)."""
        prev = per.get(OVERFLOW_CODE)
        message = f"{fault.code}: {fault.message}"[:_OVERFLOW_MESSAGE]
        worst = fault if prev is None or _RANK.get(fault.severity, 1) >= _RANK.get(prev.severity, 1) else prev
        new = Fault(code=OVERFLOW_CODE, fault_class=worst.fault_class, action=worst.action, message=message,
                    first_seen=prev.first_seen if prev is not None else when, last_seen=when,
                    count=(prev.count if prev is not None else 0) + occurrences, severity=worst.severity,
                    source=fault.source)
        per[OVERFLOW_CODE] = new
        return new

    def _forget_past_bounds(self, keep: str) -> None:
        if self.bounds is None:
            return
        while len(self._faults) > self.bounds.devices:
            oldest = next(iter(self._faults))
            if oldest == keep:
                break
            del self._faults[oldest]
            self._bytes.pop(oldest, None)
            self.devices_forgotten += 1

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
