"""Clocks for simulation: scenario time ``t`` is seconds since the simulation started.

``SimulationClock`` follows the wall clock (``run --simulate``); ``ManualClock`` only moves
when a test says so, which makes fault timing deterministic.
"""

from __future__ import annotations

import threading
import time


class SimulationClock:
    """Wall-clock Unix time plus scenario time, optionally sped up by ``speed``.

    ``start_t`` starts the scenario at that many seconds (``--at T``): samples are still
    stamped with the real time, the scenario's faults and values are those of ``t``."""

    def __init__(self, speed: float = 1.0, start_t: float = 0.0):
        self._speed = speed
        self._start_t = start_t
        self._wall0 = time.time()
        self._mono0 = time.monotonic()

    def __call__(self) -> float:
        """Unix seconds (what collectors stamp samples with)."""
        return self._wall0 + (time.monotonic() - self._mono0) * self._speed

    def t(self) -> float:
        """Scenario seconds since start."""
        return self._start_t + (time.monotonic() - self._mono0) * self._speed


class ManualClock:
    def __init__(self, start: float = 1764400000.0):
        self._start = start
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def t(self) -> float:
        return self() - self._start

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def set_t(self, t: float) -> None:
        with self._lock:
            self._now = self._start + t
