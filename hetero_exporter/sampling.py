"""The sampler: runs every enabled collector concurrently, each under its own deadline,
and builds one immutable NodeSnapshot per cycle.

Each collector owns one worker thread. A collector that raises is reported with its error;
one that hangs past its deadline is reported as ``timeout`` and, while it is still stuck,
as ``busy`` on later cycles (Python cannot kill a thread; CLI collectors kill their child
process at the deadline, so they come back). Either way the other collectors' devices are
in the snapshot on time, and the devices of a failing collector are carried over from its
last success, marked ``stale`` with health ``unknown`` (cannot read is never failed), so
fault counters and identities survive a bad cycle.

When a cycle is published (a late collector does not hold it to its deadline): every
collector starts at the cycle's start, and the cycle waits for each one up to its
*patience*, then publishes what has answered by then. The patience is the collector's usual
time (the longest of its last USUAL_WINDOW answers that came back on time, timeouts left out)
x LATE_FACTOR + LATE_GRACE_SECONDS, never more than its deadline. On the sampler's first cycle
it is the deadline (the first snapshot waits for everyone); later, a collector with no answer
on time yet gets LATE_GRACE_SECONDS. So a collector is waited for until the later of "the others
are done" and "its own usual time plus a grace": a slow-but-steady tool is waited for, a
tool that suddenly hangs costs the snapshot about a second, not its deadline. A collector
still running then is reported ``late`` (its call goes on; its devices are carried over
stale); a collector still running from an earlier cycle is ``busy`` and is not started
again. A late call that answers before the next cycle is that cycle's answer when the
cycle's own call (started as usual) is not back in time, else it only updates the history.

Agents started in the same second must not collect in phase for ever: ``run`` waits a bounded
random offset (``start_offset()``: uniform in [0, min(interval, START_JITTER_MAX_SECONDS)), from the
sampler's ``rng``, seedable) before its first cycle; a wake-up (an urgent driver event) ends the
wait at once.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from hetero_exporter import profiles
from hetero_exporter.sdk.contract import Collector, ParseError, Unavailable
from hetero_exporter.sdk.identity import RemovalLog
from hetero_exporter.model.fields import MEMORY_TOTAL
from hetero_exporter.model import (CollectorStatus, DeviceSample, Fault, Health, NodeSnapshot,
                                   Profile, Reading)
from hetero_exporter.model.evaluation import Evaluation

log = logging.getLogger(__name__)

Enricher = Callable[[NodeSnapshot], NodeSnapshot]
# The health judge (health.detect.verdicts): the judged snapshot and its evaluation
Judge = Callable[[NodeSnapshot], "tuple[NodeSnapshot, Evaluation]"]
# What a cycle publishes (``SnapshotStore.publish``): the snapshot and its evaluation, None unjudged
Publish = Callable[[NodeSnapshot, Optional[Evaluation]], Any]

# How long an unavailable collector waits before trying to start again (driver loaded
# later, library installed by an operator): seconds.
RETRY_UNAVAILABLE_SECONDS = 60.0

# A collector's patience (module docstring): its usual time x LATE_FACTOR + LATE_GRACE_SECONDS
# (seconds), the usual time being the longest of its last USUAL_WINDOW answers on time.
LATE_FACTOR = 1.5
LATE_GRACE_SECONDS = 1.0
USUAL_WINDOW = 8
# The bound of the random wait before a sampler's first cycle (seconds; never more than the interval)
START_JITTER_MAX_SECONDS = 2.0
# constant messages: they become label values of the error info series
LATE_MESSAGE = "still running past its usual time; devices carried over, its answer is used next cycle"
BUSY_MESSAGE = "still running from an earlier cycle; not restarted"


def start_offset(interval: float, rng: Optional[random.Random] = None) -> float:
    """Seconds to wait before the first cycle: uniform in [0, min(interval, START_JITTER_MAX_SECONDS)),
    so that agents started together do not collect (nor reconcile) in the same second; ``rng``
    seeds it (tests), else the module's generator."""
    bound = max(0.0, min(float(interval), START_JITTER_MAX_SECONDS))
    return (rng or random).random() * bound


@dataclass
class CollectorSpec:
    """A collector to run: ``factory()`` builds it (and may raise Unavailable/ImportError)."""

    name: str
    vendor: str
    factory: Callable[[], Collector]
    timeout_seconds: float = 5.0


@dataclass
class _Outcome:
    devices: Sequence[DeviceSample] = ()
    error: Optional[BaseException] = None
    duration: float = 0.0  # seconds the call took
    finished_at: float = 0.0  # the sampler clock when it answered


class _Worker:
    """One thread per collector; a job = (build the collector if needed) + collect()."""

    def __init__(self, spec: CollectorSpec, clock: Callable[[], float]):
        self.spec = spec
        self._clock = clock
        self._collector: Optional[Collector] = None
        self._retry_at = 0.0
        self._last_unavailable: Optional[BaseException] = None
        self._lock = threading.Lock()
        self._busy = False
        self._busy_since = 0.0
        self._go = threading.Event()
        self._done = threading.Event()
        self._outcome = _Outcome()
        self._unread = False  # _outcome is an answer no cycle has taken yet
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name=f"collector-{spec.name}", daemon=True)
        self._thread.start()

    @property
    def busy_since(self) -> float:
        return self._busy_since

    def submit(self) -> bool:
        """Start a call; False when the previous one has not finished yet."""
        return self.start()[0]

    def start(self) -> tuple[bool, Optional[_Outcome]]:
        """Take the answer of a call that finished after its cycle (if any), then start a new
        call unless one is still running: (started, that earlier answer). One lock for both,
        so an answer arriving in between is neither lost nor overwritten."""
        with self._lock:
            earlier = self._take_locked()
            if self._busy:
                return False, earlier
            self._busy = True
            self._busy_since = time.monotonic()
            self._done.clear()
            self._go.set()
            return True, earlier

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the running call; True when it has answered."""
        return self._done.wait(max(0.0, timeout))

    def take(self) -> Optional[_Outcome]:
        """The answer not taken yet, else None (the call is still running, or was taken)."""
        with self._lock:
            return self._take_locked()

    def _take_locked(self) -> Optional[_Outcome]:
        if not self._unread:
            return None
        self._unread = False
        return self._outcome

    def _loop(self) -> None:
        while True:
            self._go.wait()
            self._go.clear()
            if self._stopping:
                return
            t0 = time.perf_counter()
            try:
                devices = self._run_once()
                outcome = _Outcome(devices=devices)
            except BaseException as e:  # noqa: BLE001 - every failure becomes a status
                outcome = _Outcome(error=e)
            outcome.duration = time.perf_counter() - t0
            try:
                outcome.finished_at = self._clock()
            except Exception:  # noqa: BLE001 - a broken clock must not lose the answer
                outcome.finished_at = time.time()
            with self._lock:
                self._outcome = outcome
                self._unread = True
                self._busy = False
                self._done.set()

    def _run_once(self) -> Sequence[DeviceSample]:
        if self._collector is None:
            if time.monotonic() < self._retry_at and self._last_unavailable is not None:
                raise self._last_unavailable
            try:
                self._collector = self.spec.factory()
            except (Unavailable, ImportError, OSError) as e:
                self._retry_at = time.monotonic() + RETRY_UNAVAILABLE_SECONDS
                self._last_unavailable = e if isinstance(e, Unavailable) else Unavailable(
                    f"{type(e).__name__}: {e}")
                raise self._last_unavailable from None
        return list(self._collector.collect())

    def close(self) -> None:
        self._stopping = True
        self._go.set()
        c = self._collector
        if c is not None and hasattr(c, "close"):
            try:
                c.close()
            except Exception:  # noqa: BLE001 - shutting down anyway
                log.debug("collector %s close failed", self.spec.name, exc_info=True)


def classify(error: BaseException) -> str:
    """The error kind used in statuses and ``accelerator_collector_errors_total{kind}``."""
    if isinstance(error, Unavailable):
        return "unavailable"
    if isinstance(error, ParseError):
        return "parse"
    if isinstance(error, TimeoutError):
        return "timeout"
    return "exception"


def describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    if isinstance(error, (Unavailable, ParseError)):
        return text
    return f"{type(error).__name__}: {text}"


def mark_stale(device: DeviceSample, now: float, why: str) -> DeviceSample:
    """A device carried over from an earlier cycle: readings stale, health unknown."""
    age = max(0.0, now - device.timestamp)
    readings = {k: Reading(r.value, r.quality.with_status("stale", age)) for k, r in device.readings.items()}
    reason = Fault(code="unreadable", fault_class="unreadable", action="none", severity="info",
                   message=why, first_seen=now, last_seen=now, source="sampler")
    return dataclasses.replace(device, readings=readings, health=Health("unknown", (reason,)))


class _ProfileCache:
    def __init__(self) -> None:
        self._cache: dict[tuple, Profile] = {}

    def attach(self, d: DeviceSample) -> DeviceSample:
        if d.profile is not None:
            return d
        ident = d.identity
        mem = d.value(MEMORY_TOTAL)
        # memory only matters for unknown models; keep it in the key so estimates follow it
        key = (ident.vendor, ident.model, ident.kind, mem if profiles.lookup(ident.model, ident.vendor) is None else None)
        p = self._cache.get(key)
        if p is None:
            p = profiles.profile_for(ident.vendor, ident.model, kind=ident.kind, memory_total_bytes=mem)
            self._cache[key] = p
        return dataclasses.replace(d, profile=p)


@dataclass
class _History:
    last_success: Optional[float] = None
    devices: Sequence[DeviceSample] = ()
    errors: Counter = field(default_factory=Counter)
    durations: deque = field(default_factory=lambda: deque(maxlen=USUAL_WINDOW))  # seconds, answers on time

    def absorb(self, outcome: _Outcome, at: float) -> None:
        """Learn from an answer: its duration (a timeout says nothing of the usual time) and,
        when it succeeded, its devices (``at``: when, on the sampler clock)."""
        if outcome.error is None or classify(outcome.error) != "timeout":
            self.durations.append(outcome.duration)
        if outcome.error is None:
            self.devices, self.last_success = outcome.devices, at


class Sampler:
    """Runs collectors and builds snapshots. Thread-safe for one caller at a time."""

    def __init__(self, specs: Iterable[CollectorSpec], node_name: str, *,
                 clock: Callable[[], float] = time.time,
                 enrichers: Sequence[Enricher] = (),
                 expected: Callable[[], Mapping[str, int]] = dict,
                 boot_id: Optional[str] = None,
                 wake: Optional[threading.Event] = None,
                 min_cycle_gap: float = 1.0,
                 removals: Optional[RemovalLog] = None,
                 judge: Optional[Judge] = None,
                 rng: Optional[random.Random] = None):
        self.node_name = node_name
        self._removals = removals  # devices the collectors' identity memories forgot as removed
        self._clock = clock
        self._specs = list(specs)
        self._workers = {s.name: _Worker(s, clock) for s in self._specs}
        self._history = {s.name: _History() for s in self._specs}
        self._enrichers = list(enrichers)  # the sources: each adds facts to the snapshot
        self._judge = judge  # last: the verdicts, published with the snapshot they judged
        self._expected = expected
        self._boot_id = boot_id
        self._profiles = _ProfileCache()
        # Set by a collector (CollectorOptions.wake) when something urgent happened, e.g. a
        # driver event about a device: the next cycle starts at once instead of at the next tick.
        self._wake = wake or threading.Event()
        self._min_gap = min_cycle_gap
        self._cycles = 0  # cycles collected; the first waits for every collector's deadline
        self._rng = rng  # the start offset's generator (None: the module's)

    def request_cycle(self) -> None:
        """Start the next cycle now (at most one per ``min_cycle_gap`` seconds)."""
        self._wake.set()

    @property
    def collector_names(self) -> list[str]:
        return [s.name for s in self._specs]

    def _patience(self, spec: CollectorSpec, hist: _History) -> float:
        """Seconds the cycle waits for this collector's call (module docstring)."""
        if self._cycles == 0:
            return spec.timeout_seconds
        usual = max(hist.durations, default=0.0)
        return min(spec.timeout_seconds, usual * LATE_FACTOR + LATE_GRACE_SECONDS)

    def collect(self) -> NodeSnapshot:
        """One snapshot: the collectors' devices, the sources' facts, the judge's verdicts."""
        return self.collect_judged()[0]

    def collect_judged(self) -> "tuple[NodeSnapshot, Optional[Evaluation]]":
        """One snapshot and the judge's evaluation of it (None without a judge, or when it failed)."""
        snap = self._collect()
        if self._judge is None:
            return snap, None
        try:
            return self._judge(snap)
        except Exception:  # noqa: BLE001 - a judge bug must not cost the snapshot
            log.exception("health judge failed; snapshot published without verdicts")
            return snap, None

    def _collect(self) -> NodeSnapshot:
        now = self._clock()
        t0 = time.monotonic()
        calls = {s.name: self._workers[s.name].start() for s in self._specs}  # (started, earlier answer)
        patience = {s.name: self._patience(s, self._history[s.name]) for s in self._specs}
        # the calls run concurrently: waiting for each in turn up to its own patience ends when
        # the last patience is spent or every call has answered
        for spec in self._specs:
            if calls[spec.name][0]:
                self._workers[spec.name].wait(patience[spec.name] - (time.monotonic() - t0))
        statuses: list[CollectorStatus] = []
        devices: list[DeviceSample] = []
        seen: set[str] = set()
        for spec in self._specs:
            worker, hist = self._workers[spec.name], self._history[spec.name]
            started, earlier = calls[spec.name]
            outcome, at = worker.take(), now  # this cycle's call, or a busy one that answered meanwhile
            if earlier is not None and outcome is not None:  # superseded: it only teaches the history
                hist.absorb(earlier, earlier.finished_at)
            elif earlier is not None:  # this cycle's call is late: the late call's answer stands in
                outcome, at = earlier, earlier.finished_at
            kind: Optional[str]  # the error kind of a failed call (None: it answered)
            if outcome is None:
                stuck = time.monotonic() - worker.busy_since
                if not started:
                    kind, why = "busy", BUSY_MESSAGE
                elif patience[spec.name] >= spec.timeout_seconds:
                    kind, why = "timeout", f"no answer within its {spec.timeout_seconds:g} s deadline"
                else:
                    kind, why = "late", LATE_MESSAGE
                outcome = _Outcome(error=TimeoutError(why), duration=stuck)
            else:
                kind = classify(outcome.error) if outcome.error is not None else None
                hist.absorb(outcome, at)
            if outcome.error is None:
                got = outcome.devices
                statuses.append(CollectorStatus(
                    name=spec.name, ok=True, duration_seconds=outcome.duration, last_success=hist.last_success,
                    errors_total=dict(hist.errors), vendor=spec.vendor, devices=len(got)))
            else:
                hist.errors[kind] += 1
                why = describe(outcome.error)
                if kind != "unavailable":
                    log.warning("collector failed", extra={"collector": spec.name, "kind": kind, "error": why})
                got = [mark_stale(d, now, f"{spec.name}: {why}") for d in hist.devices]
                statuses.append(CollectorStatus(
                    name=spec.name, ok=False, duration_seconds=outcome.duration, error=why,
                    error_kind=kind, last_success=hist.last_success, errors_total=dict(hist.errors),
                    vendor=spec.vendor, devices=0))
            for d in got:
                if d.identity.uuid in seen:  # two collectors for one vendor: first one wins
                    continue
                seen.add(d.identity.uuid)
                devices.append(self._profiles.attach(d))
        self._cycles += 1
        try:
            expected = dict(self._expected())
        except Exception:  # noqa: BLE001 - PCI enumeration is advisory
            log.warning("pci enumeration failed", exc_info=True)
            expected = {}
        snap = NodeSnapshot(node=self.node_name, time=now, devices=tuple(devices),
                            collectors=tuple(statuses), expected=expected, boot_id=self._boot_id)
        if self._removals is not None:
            snap = dataclasses.replace(snap, removed=self._removals.drain(), removed_total=self._removals.totals())
        for enrich in self._enrichers:
            try:
                snap = enrich(snap)
            except Exception:  # noqa: BLE001 - an enricher bug must not cost the snapshot
                log.exception("enricher %s failed; snapshot published without it",
                              getattr(enrich, "__name__", enrich))
        return snap

    def run(self, interval: float, publish: Publish, stop: threading.Event, offset: Optional[float] = None) -> None:
        """``publish(snapshot, evaluation)`` (``SnapshotStore.publish``) every ``interval``
        seconds until ``stop`` is set, and at once (but not
        more often than every ``min_cycle_gap`` seconds) when a wake-up is requested.
        Whoever sets ``stop`` should call ``request_cycle()`` too, to end the wait. ``offset``:
        seconds before the first cycle (default ``start_offset(interval)``: the agents' jitter), cut
        short by a wake-up."""
        wait = start_offset(interval, self._rng) if offset is None else offset
        if wait > 0 and self._wake.wait(wait) and stop.is_set():
            return
        next_at = time.monotonic()
        while not stop.is_set():
            self._wake.clear()
            started = time.monotonic()
            try:
                publish(*self.collect_judged())
            except Exception:  # noqa: BLE001 - the loop must outlive any one cycle
                log.exception("collection cycle failed")
            next_at += interval
            if next_at < time.monotonic():  # fell behind (slow cycle): skip ticks, no burst
                next_at = time.monotonic() + interval
            if self._wake.wait(max(0.0, next_at - time.monotonic())) and not stop.is_set():
                # woken early: keep the minimum gap, then run an extra cycle; the regular
                # schedule (next_at) is unchanged
                gap = self._min_gap - (time.monotonic() - started)
                if gap > 0:
                    stop.wait(gap)
                next_at -= interval  # the extra cycle does not consume a tick

    def close(self) -> None:
        for w in self._workers.values():
            w.close()
