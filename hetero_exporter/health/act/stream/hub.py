"""The health stream's fan-out: the observer's views and episodes to each watching client, each
through its own bounded queue (no grpc here: ``server.py`` drains the queues onto the wire).

- A health watch (``HealthWatch``) holds at most one pending view per device: a newer view of a
  device replaces the one its client has not read yet (counted ``superseded``), so a slow reader
  gets each device's latest state and its queue never outgrows the node's devices.
- An events watch (``EventsWatch``) holds at most ``max_queue`` events past the replay of the
  episodes open when it connected; one more and the watch is over (``overflowed``): its client
  is dropped with a status, the events it lost counted ``slow-reader``.
- At most ``max_clients`` watches at once (both kinds); one more is refused (counted).

``Hub`` is also the prometheus_client collector of the stream's own families (model/names.py).
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from typing import Callable, Iterator, Optional

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric as PromMetric

from hetero_exporter.health.act.stream.views import DeviceView, EpisodeEvent, Observation, Observer
from hetero_exporter.model import DeviceIdentity, NodeSnapshot
from hetero_exporter.model import names as N
from hetero_exporter.model.evaluation import Evaluation

HEALTH, EVENTS = "health", "events"  # the two watches (the metrics' ``stream`` label)
STREAMS = (HEALTH, EVENTS)
SUPERSEDED, SLOW_READER, STALLED, REFUSED, UNTRACKED = "superseded", "slow-reader", "stalled", "refused", "untracked"


class Watch:
    """One client's watch; ``wake()`` (the server's) is called after anything is queued for it."""

    stream = ""

    def __init__(self, vendors: frozenset[str], wake: Callable[[], None]) -> None:
        self.vendors = vendors
        self.wake = wake
        self.overflowed = False
        self.closing = False  # the agent stops: the server ends the watch (UNAVAILABLE)

    def wants(self, identity: DeviceIdentity) -> bool:
        return not self.vendors or identity.vendor in self.vendors


class HealthBatch:
    """What a health watch has to send: ``full`` (every device, on connect) or the changes."""

    def __init__(self, time: float, full: bool, views: list[DeviceView], removed: list[DeviceIdentity]) -> None:
        self.time, self.full, self.views, self.removed = time, full, views, removed


class HealthWatch(Watch):
    stream = HEALTH

    def __init__(self, vendors: frozenset[str], wake: Callable[[], None]) -> None:
        super().__init__(vendors, wake)
        self.full = True  # the next batch is every device (nothing sent yet)
        self.time: Optional[float] = None
        self.pending: dict[str, Optional[DeviceView]] = {}  # uuid -> newest view, None: removed
        self.removed: dict[str, DeviceIdentity] = {}

    def add(self, obs: Observation) -> int:
        """Queue an observation's changes; how many unread views it replaced."""
        replaced = 0
        for view in obs.changed:
            if self.wants(view.identity):
                replaced += self.pending.get(view.uuid) is not None
                self.pending[view.uuid] = view
                self.removed.pop(view.uuid, None)
        for ident in obs.removed:
            if self.wants(ident):
                replaced += self.pending.get(ident.uuid) is not None
                self.pending[ident.uuid] = None
                self.removed[ident.uuid] = ident
        self.time = obs.time
        return replaced


class EventsWatch(Watch):
    stream = EVENTS

    def __init__(self, vendors: frozenset[str], wake: Callable[[], None], replay: list[EpisodeEvent],
                 max_queue: int) -> None:
        super().__init__(vendors, wake)
        self.queue: deque[EpisodeEvent] = deque(replay)
        self.limit = max_queue + len(replay)  # the replay does not count against the client's queue


class Hub:
    """Judged snapshots in (``offer``), one bounded queue per watching client out."""

    def __init__(self, node: str, max_clients: int, max_queue: int) -> None:
        self.node = node
        self.max_clients = max(1, max_clients)
        self.max_queue = max(1, max_queue)
        self._lock = threading.Lock()
        self._observer = Observer(node)
        self._watches: list[Watch] = []
        self._dropped: Counter[tuple[str, str]] = Counter()  # (stream, reason) -> messages not delivered
        self._clients_dropped: Counter[tuple[str, str]] = Counter()  # (stream, reason) -> clients
        self.observed = 0  # judged snapshots observed

    # ---- the publisher's side (the sampler's thread: short, never waits on a client)

    def offer(self, snapshot: NodeSnapshot, evaluation: Optional[Evaluation]) -> None:
        with self._lock:
            obs = self._observer.observe(snapshot, evaluation)
            self.observed += 1
            if obs.untracked:
                self._dropped[(EVENTS, UNTRACKED)] += obs.untracked
            woken = [w for w in self._watches if self._queue(w, obs)]
        for w in woken:
            w.wake()

    def _queue(self, w: Watch, obs: Observation) -> bool:
        """Queue ``obs`` for ``w``; whether it has news (an events watch past its limit is over)."""
        if isinstance(w, HealthWatch):
            if w.full:  # its first batch, every device as it is then, is still to go
                return True
            self._dropped[(HEALTH, SUPERSEDED)] += w.add(obs)
            return bool(w.pending)
        assert isinstance(w, EventsWatch)
        news = [e for e in obs.events if w.wants(e.identity)]
        if w.overflowed or not news:
            return False
        if len(w.queue) + len(news) > w.limit:
            self._drop(w, SLOW_READER)
        else:
            w.queue.extend(news)
        return True

    def _drop(self, w: Watch, reason: str) -> None:
        """End ``w`` (its client is told by the server); what it had queued is counted lost."""
        lost = len(w.queue) if isinstance(w, EventsWatch) else len(w.pending) if isinstance(w, HealthWatch) else 0
        if isinstance(w, EventsWatch):
            w.queue.clear()
        elif isinstance(w, HealthWatch):
            w.pending.clear()
        w.overflowed = True
        self._dropped[(w.stream, reason)] += lost
        self._clients_dropped[(w.stream, reason)] += 1

    # ---- the server's side

    def watch_health(self, vendors: frozenset[str], wake: Callable[[], None]) -> Optional[HealthWatch]:
        """A new health watch, or None past ``max_clients`` (counted)."""
        with self._lock:
            if not self._room(HEALTH):
                return None
            w = HealthWatch(vendors, wake)
            self._watches.append(w)
            return w

    def watch_events(self, vendors: frozenset[str], wake: Callable[[], None]) -> Optional[EventsWatch]:
        """A new events watch with the open episodes to replay, or None past ``max_clients``."""
        with self._lock:
            if not self._room(EVENTS):
                return None
            w = EventsWatch(vendors, wake, self._observer.replay(vendors), self.max_queue)
            self._watches.append(w)
            return w

    def _room(self, stream: str) -> bool:
        if len(self._watches) < self.max_clients:
            return True
        self._clients_dropped[(stream, REFUSED)] += 1
        return False

    def take_health(self, w: HealthWatch) -> Optional[HealthBatch]:
        """What ``w`` has to send now (None: nothing); the views taken are no longer pending."""
        with self._lock:
            if self._observer.time is None or w.overflowed:
                return None  # nothing judged yet: the full state goes out with the first snapshot
            if w.full:
                w.full, w.pending, w.removed = False, {}, {}
                views = [v for v in self._observer.views.values() if w.wants(v.identity)]
                return HealthBatch(self._observer.time, True, views, [])
            if not w.pending:
                return None
            views = [v for v in w.pending.values() if v is not None]
            batch = HealthBatch(w.time or self._observer.time, False, views, list(w.removed.values()))
            w.pending, w.removed = {}, {}
            return batch

    def take_events(self, w: EventsWatch) -> list[EpisodeEvent]:
        with self._lock:
            out = list(w.queue)
            w.queue.clear()
            return out

    def stalled(self, w: Watch) -> None:
        """``w``'s client read nothing for the stall time: drop it (what it had queued is lost)."""
        with self._lock:
            if w in self._watches and not w.overflowed:
                self._drop(w, STALLED)

    def close(self) -> None:
        """Tell every watch that the stream stops."""
        with self._lock:
            watches = list(self._watches)
            for w in watches:
                w.closing = True
        for w in watches:
            w.wake()

    def leave(self, w: Watch) -> None:
        with self._lock:
            if w in self._watches:
                self._watches.remove(w)

    def clients(self) -> dict[str, int]:
        with self._lock:
            counts = {s: 0 for s in STREAMS}
            for w in self._watches:
                counts[w.stream] += 1
            return counts

    def dropped(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._dropped)

    def clients_dropped(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._clients_dropped)

    # ---- prometheus_client collector

    def describe(self) -> list[PromMetric]:
        return []

    def collect(self) -> Iterator[PromMetric]:
        clients = GaugeMetricFamily(N.HEALTH_STREAM_CLIENTS.family, N.HEALTH_STREAM_CLIENTS.help,
                                    labels=N.HEALTH_STREAM_CLIENTS.labels)
        for stream, n in sorted(self.clients().items()):
            clients.add_metric([stream], float(n))
        yield clients
        for metric, counts, reasons in (
                (N.HEALTH_STREAM_MESSAGES_DROPPED, self.dropped(),
                 {HEALTH: (SUPERSEDED, STALLED), EVENTS: (SLOW_READER, STALLED, UNTRACKED)}),
                (N.HEALTH_STREAM_CLIENTS_DROPPED, self.clients_dropped(),
                 {HEALTH: (STALLED, REFUSED), EVENTS: (SLOW_READER, STALLED, REFUSED)})):
            fam = CounterMetricFamily(metric.family, metric.help, labels=metric.labels)
            for stream, names in reasons.items():  # each at 0 from the start
                for reason in names:
                    fam.add_metric([stream, reason], float(counts.get((stream, reason), 0)))
            yield fam
