"""The NVSentinel HealthEvent bridge: fault episodes of the judged snapshots to NVSentinel's
platform connector socket, from a bounded outbox kept in the agent's state dir.

``offer(snapshot, evaluation)`` (a ``SnapshotStore`` subscriber, like the health loop's) only
folds the judged snapshot into the episodes (``episodes.Tracker``) and wakes the sender; it never
waits on the socket or the disk. The sender thread saves the state file, then sends the oldest
unsent events in one call under a deadline; after a failed call it waits (``retry_min_seconds``,
doubled per failure up to ``retry_max_seconds``) and tries again, while the socket is absent or
down, as long as the bridge runs. Each failed call and each event dropped (the outbox full, or
refused by the peer) counts once in the export failures (``Failures``: ``ExportFailures`` of
exposition, ``accelerator_export_failures_total{exporter="nvsentinel"}``).

Across a restart with the same state dir: an episode whose opening was sent is not sent again
while it stays open, and one that closed while the agent was down yields its recovery from the
first judged snapshot that shows it over (``settle_snapshots`` later for warnings, which the judge
must confirm again). Delivery is at least once: a call whose answer was lost (a deadline that
passed after the peer stored the events, a crash between the answer and the save) is sent again,
with the same ``metadata.event_id``. Bounded: a call that reached the peer and failed (its answer
late, or an error of its handler) counts against each of its events; after ``MAX_REACHED_SENDS``
such calls an event is given up (counted, logged: the peer may well have it), and each late
answer doubles the next call's deadline, up to ``DEADLINE_GROWTH`` times ``timeout`` (a slow peer
is waited for, not flooded). A socket that is absent or refuses connections costs no attempt.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional, Protocol
from hetero_exporter.health.act.nvsentinel import state as state_file
from hetero_exporter.health.act.nvsentinel.episodes import StateError, Tracker
from hetero_exporter.health.act.nvsentinel.settings import NvSentinelSettings
from hetero_exporter.model import Fault, NodeSnapshot
from hetero_exporter.model.evaluation import Evaluation
from hetero_exporter.model.errors import ExitError
from hetero_exporter.model.faults import Catalogue

log = logging.getLogger(__name__)

EXPORTER = "nvsentinel"  # accelerator_export_failures_total{exporter}
IDLE_SECONDS = 60.0  # the sender's longest sleep with nothing to send (it is woken by offer)
JOIN_SECONDS = 10.0  # close() lets a call in flight finish this long at most, then cancels it
MAX_REACHED_SENDS = 3  # calls that reached the peer without an answer in time, per event, then given up
DEADLINE_GROWTH = 4.0  # a late answer doubles the next call's deadline, up to this times ``timeout``


class Failures(Protocol):
    """What the bridge counts its failed and dropped events in (exposition's ``ExportFailures``,
    which app/commands.py hands in with the OTLP exporter's)."""

    def declare(self, exporter: str) -> None: ...

    def add(self, exporter: str, n: int = 1) -> None: ...


class NvSentinelUnavailable(ExitError):
    """The bridge is configured but its gRPC libraries are not installed."""


class NvSentinelBridge:
    """Fault episodes and recoveries as NVSentinel HealthEvents.

    ``mode``: the health mode (observe | dry-run -> STORE_ONLY, enforce -> EXECUTE_REMEDIATION);
    ``state_dir``: where the state file lives (None: in memory only, nothing survives a restart);
    ``condition_reason(vendor, code)``: the node condition's reason, the events' checkName (the
    health policy's ``condition_reason``); ``fault_text(vendor, fault, uuid)``: the condition's words
    for a fault (``health.detect.texts.fault_text`` with the policy), else the fault's own message;
    ``ready()``: False while the judge still lacks the sticky faults an earlier agent recorded
    (the health loop's ``Remedy.restored``): snapshots offered until then, and the first after,
    are ignored, so a restart does not close an episode the judge has not restored yet;
    ``catalogue``: the policy's fault catalogue (what makes an event fatal and its recommended
    action; else the vendors' tables as shipped)."""

    def __init__(self, settings: NvSentinelSettings, node_name: str, mode: str, state_dir: Optional[str],
                 failures: Failures, *, condition_reason: Callable[[str, str], str],
                 fault_text: Optional[Callable[[str, Fault, str], str]] = None,
                 ready: Optional[Callable[[], bool]] = None, catalogue: Optional[Catalogue] = None) -> None:
        self.settings = settings
        self.node = node_name
        self.failures = failures
        failures.declare(EXPORTER)
        self._ready = ready
        self._was_unready = False
        self._tracker = Tracker(node_name, mode, condition_reason=condition_reason, fault_text=fault_text,
                                max_outbox=settings.max_outbox, settle_snapshots=settings.settle_snapshots,
                                catalogue=catalogue)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._client: Any = None
        self._dirty = False
        self._save_failed = False
        self._failing: Optional[str] = None  # the error of the failing sends, None while they go
        self._single = False  # send one event per call (after the peer refused a batch)
        self._reached: dict[int, int] = {}  # seq -> calls that reached the peer without delivering it
        self._deadline = settings.timeout  # of the next call: grows after late answers
        self.sent_total = 0
        self._path = state_file.path_in(state_dir)
        self._load()

    # ---- the state file

    def _load(self) -> None:
        if self._path is None:
            return
        state_file.remove_stale(self._path)
        try:
            doc = state_file.load(self._path)
            dropped = self._tracker.restore(doc) if doc is not None else 0
        except (OSError, ValueError, StateError) as e:  # StateError is a ValueError; named for the reader
            log.warning("NVSentinel bridge state unreadable; starting without it (the file is replaced)",
                        extra={"path": self._path, "error": str(e)[:300]})
            self._dirty = True
            return
        if dropped:
            self.failures.add(EXPORTER, dropped)
            self._dirty = True
        if doc is not None:
            log.info("NVSentinel bridge state read back", extra={
                "path": self._path, "open": len(self._tracker.open), "unsent": len(self._tracker.pending())})

    def _save(self) -> None:
        with self._lock:
            if not self._dirty or self._path is None:
                return
            doc, self._dirty = self._tracker.to_doc(), False
        try:
            state_file.save(self._path, doc)
        except (OSError, ValueError) as e:
            with self._lock:
                self._dirty = True
            if not self._save_failed:
                log.warning("NVSentinel bridge state not saved (a restart may resend or miss events)",
                            extra={"path": self._path, "error": str(e)[:300]})
            self._save_failed = True
            return
        if self._save_failed:
            log.info("NVSentinel bridge state saved again", extra={"path": self._path})
        self._save_failed = False

    # ---- the caller's side

    def offer(self, snapshot: NodeSnapshot, evaluation: Optional[Evaluation]) -> None:
        """Fold one judged snapshot into the episodes and wake the sender (never waits on the
        socket or the disk). An unjudged snapshot (``evaluation`` None) says nothing."""
        if evaluation is None:
            return
        if self._ready is not None and not self._ready():
            self._was_unready = True
            return
        if self._was_unready:  # judged before the restore finished: act from the next one
            self._was_unready = False
            return
        with self._lock:
            before = len(self._tracker.open), self._tracker.next_seq
            dropped = self._tracker.observe(snapshot, evaluation)
            changed = (len(self._tracker.open), self._tracker.next_seq) != before or dropped
            self._dirty = self._dirty or bool(changed)
        if dropped:
            self.failures.add(EXPORTER, dropped)
            log.warning("NVSentinel outbox full: oldest events dropped", extra={"dropped": dropped})
        if changed:
            self._wake.set()

    def pending(self) -> int:
        """Events not yet sent."""
        with self._lock:
            return len(self._tracker.pending())

    def open_episodes(self) -> list[tuple[str, str]]:
        """(uuid, code) of the open episodes."""
        with self._lock:
            return sorted(self._tracker.open)

    # ---- the sender

    def start(self) -> None:
        """Start the sender thread. NvSentinelUnavailable (one line, exit 1) without grpcio/protobuf."""
        if self._thread is not None:
            return
        try:
            from hetero_exporter.health.act.nvsentinel.client import PlatformConnectorClient
        except ImportError as e:
            raise NvSentinelUnavailable(f"nvsentinel: the bridge needs grpcio and protobuf ({e}); "
                                        "pip install 'hetero-exporter[all]'") from None
        self._client = PlatformConnectorClient(self.settings.target, self.settings.timeout)
        self._thread = threading.Thread(target=self._run, name="nvsentinel-bridge", daemon=True)
        self._thread.start()
        self._wake.set()  # what the state file held goes out first

    def close(self) -> None:
        """Stop the sender and save the state. A call in flight may finish within its deadline
        (at most ``JOIN_SECONDS``); past that it is cancelled, and its events stay unsent."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(min(self.settings.timeout, JOIN_SECONDS))
        if self._client is not None:
            self._client.close()
        if self._thread is not None:
            self._thread.join(JOIN_SECONDS)
        self._save()

    def _run(self) -> None:
        delay = 0.0
        while not self._stop.is_set():
            if delay:
                self._stop.wait(delay)
            else:
                self._wake.wait(IDLE_SECONDS)
            self._wake.clear()
            if self._stop.is_set():
                break
            self._save()
            delay = self._send_once(delay)

    def _send_once(self, delay: float) -> float:
        """One call with the oldest unsent events; the wait before the next try (0: none)."""
        with self._lock:
            batch = self._tracker.pending()[: 1 if self._single else self.settings.batch]
        if not batch:
            return 0.0
        try:
            self._client.send([e.fields(self.node) for e in batch], timeout=self._deadline)
        except Exception as e:  # noqa: BLE001 - SendError, or a bug in one event: the thread goes on
            if self._stop.is_set():
                return 0.0  # closing: the events stay in the outbox (and the state file)
            return self._failed(batch, e, delay)
        with self._lock:
            self._tracker.mark_sent(e.seq for e in batch)
            self._dirty = True
            more = bool(self._tracker.pending())
        self.sent_total += len(batch)
        self._single = False
        self._deadline = self.settings.timeout
        for ev in batch:
            self._reached.pop(ev.seq, None)
        if self._failing is not None:
            log.info("NVSentinel platform connector reached again", extra={"target": self.settings.target})
            self._failing = None
        self._save()
        if more:
            self._wake.set()
        return 0.0

    def _failed(self, batch: list, e: Exception, delay: float) -> float:
        self.failures.add(EXPORTER)
        why = str(e) or type(e).__name__
        refused = e.refused if hasattr(e, "refused") else True  # not a SendError: a bug in an event
        if refused and len(batch) == 1:
            with self._lock:  # the peer (or our encoding) refuses this event: it would block the rest
                self._tracker.mark_sent([batch[0].seq])
                self._dirty = True
            self.failures.add(EXPORTER)
            log.warning("NVSentinel refused an event: dropped", extra={
                "check": batch[0].episode.check_name, "uuid": batch[0].episode.uuid, "error": why[:300]})
            self._wake.set()
            return 0.0
        if refused:
            self._single = True  # find the event it refuses, one call each
            return self.settings.retry_min_seconds
        if getattr(e, "late", False):
            self._deadline = min(self._deadline * 2, self.settings.timeout * DEADLINE_GROWTH)
        if getattr(e, "reached", False):
            self._give_up([ev for ev in batch if self._count_reached(ev.seq) >= MAX_REACHED_SENDS], why)
        if self._failing is None:
            log.warning("NVSentinel platform connector not reachable; events wait in the outbox", extra={
                "target": self.settings.target, "error": why[:300], "pending": self.pending()})
        self._failing = why
        if not delay:
            return self.settings.retry_min_seconds
        return min(self.settings.retry_max_seconds, delay * 2)

    def _count_reached(self, seq: int) -> int:
        """One more call that reached the peer with event ``seq``; the count so far. Bounded: past
        the outbox's size, the counts of events no longer pending (dropped) are forgotten."""
        if seq not in self._reached and len(self._reached) >= self.settings.max_outbox:
            with self._lock:
                live = {ev.seq for ev in self._tracker.pending()}
            self._reached = {s: n for s, n in self._reached.items() if s in live}
        self._reached[seq] = self._reached.get(seq, 0) + 1
        return self._reached[seq]

    def _give_up(self, events: list, why: str) -> None:
        """Stop resending ``events``: the peer took each of the last MAX_REACHED_SENDS calls and
        answered none in time, so it may hold them already (an opening given up is taken as
        sent: its recovery still follows). Each counts in the failures."""
        if not events:
            return
        with self._lock:
            self._tracker.mark_sent(ev.seq for ev in events)
            self._dirty = True
        for ev in events:
            self._reached.pop(ev.seq, None)
        self.failures.add(EXPORTER, len(events))
        log.warning("NVSentinel platform connector took %d calls without answering in time: %d event(s) given up "
                    "(it may have them, each copy with the same metadata.event_id)", MAX_REACHED_SENDS, len(events),
                    extra={"target": self.settings.target, "error": why[:300],
                           "event_ids": ",".join(ev.event_id for ev in events[:8])})
        self._wake.set()
