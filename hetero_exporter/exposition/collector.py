"""A prometheus_client custom Collector that renders the latest NodeSnapshot.

Series are built from the snapshot at scrape time, so a vanished pid or device vanishes
without clean-up code, and a scrape never calls a vendor. Snapshots are immutable, so the
families built for one are kept and reused by every scrape until the next snapshot; only
``accelerator_snapshot_age_seconds`` is computed per scrape.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterable, Iterator, Optional

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric as PromMetric

from hetero_exporter.exposition import names as N
from hetero_exporter.model import HEALTH_STATES, NodeSnapshot

_EMPTY = ""


def _s(v: object) -> str:
    return _EMPTY if v is None else str(v)


def _fmt_num(v: Optional[float]) -> str:
    if v is None:
        return _EMPTY
    return repr(int(v)) if float(v).is_integer() else repr(float(v))


class _Families:
    """Lazily created families, in the order of names.ALL."""

    def __init__(self) -> None:
        self._by_name: dict[str, PromMetric] = {}

    def get(self, m: N.Metric) -> PromMetric:
        fam = self._by_name.get(m.name)
        if fam is None:
            cls = CounterMetricFamily if m.type == "counter" else GaugeMetricFamily
            fam = cls(m.family, m.help, labels=m.labels)
            self._by_name[m.name] = fam
        return fam

    def add(self, m: N.Metric, labels: list[str], value: float) -> None:
        self.get(m).add_metric(labels, value)

    def ordered(self) -> list[PromMetric]:
        return [self._by_name[m.name] for m in N.ALL if m.name in self._by_name]


def build_families(snap: NodeSnapshot) -> list[PromMetric]:
    """Every family of DESIGN.md's table that the snapshot has data for."""
    fam = _Families()
    quality_seen: set[tuple] = set()
    for d in snap.devices:
        ident = d.identity
        dev = [ident.vendor, ident.uuid]
        profile = d.profile
        fam.add(N.DEVICE_INFO, dev + [
            str(ident.index), ident.kind, ident.model, _s(ident.pci_address), _s(ident.numa_node),
            _s(ident.driver_version),
            _EMPTY if profile is None else ("estimated" if profile.estimated else profile.model)], 1)
        for field, reading in d.readings.items():
            q = reading.quality
            fam.add(N.FIELD_STATUS, dev + [field, q.status], 1)
            qkey = (ident.vendor, field, q.source, q.method, q.window_seconds, q.error_bound)
            if qkey not in quality_seen:
                quality_seen.add(qkey)
                fam.add(N.QUALITY_INFO, [ident.vendor, field, q.source, q.method,
                                         _fmt_num(q.window_seconds), _fmt_num(q.error_bound)], 1)
            if q.status != "ok" or reading.value is None:
                continue  # unsupported / error / stale values are absent, never 0
            target = N.metric_for_field(field)
            if target is not None:
                metric, extra = target
                fam.add(metric, dev + list(extra), reading.value)
        state = d.health.state
        for s in HEALTH_STATES:
            fam.add(N.HEALTH_STATUS, dev + [s], 1.0 if s == state else 0.0)
        for r in d.health.reasons:
            fam.add(N.HEALTH_REASON, dev + [r.code, r.message or r.fault_class], 1)
        for f in d.faults:
            labels = dev + [f.code, f.action]
            fam.add(N.FAULT_EVENTS, labels, f.count)
            if f.last_seen is not None:
                fam.add(N.FAULT_LAST, labels, f.last_seen)
        if profile is not None:
            fam.add(N.COMPUTE_UNITS, dev, profile.compute_units)
            fam.add(N.COST_WEIGHT, dev, profile.cost_weight)
        for p in d.processes:
            labels = dev + [str(p.pid), _s(p.namespace), _s(p.pod), _s(p.container)]
            if p.memory_bytes is not None:
                fam.add(N.PROCESS_MEMORY, labels, p.memory_bytes)
            if p.utilization_ratio is not None:
                fam.add(N.PROCESS_UTILIZATION, labels, p.utilization_ratio)
    present = snap.present()
    for vendor in sorted(set(snap.expected) | set(present)):
        if vendor in snap.expected:
            fam.add(N.DEVICES_EXPECTED, [vendor], snap.expected[vendor])
        fam.add(N.DEVICES_PRESENT, [vendor], present.get(vendor, 0))
    for c in snap.collectors:
        fam.add(N.COLLECTOR_SUCCESS, [c.name], 1 if c.ok else 0)
        fam.add(N.COLLECTOR_DURATION, [c.name], c.duration_seconds)
        if c.last_success is not None:
            fam.add(N.COLLECTOR_LAST_SUCCESS, [c.name], c.last_success)
        for kind, count in sorted(c.errors_total.items()):
            fam.add(N.COLLECTOR_ERRORS, [c.name, kind], count)
        if not c.ok:
            fam.add(N.COLLECTOR_ERROR_INFO, [c.name, _s(c.error_kind), _s(c.error)[:200]], 1)
    return fam.ordered()


class SnapshotCollector:
    """Register with a CollectorRegistry; reads ``latest()`` at every scrape."""

    def __init__(self, latest: Callable[[], Optional[NodeSnapshot]],
                 clock: Callable[[], float] = time.time):
        self._latest = latest
        self._clock = clock
        self._lock = threading.Lock()
        self._cached_for: Optional[NodeSnapshot] = None
        self._cached: list[PromMetric] = []

    def describe(self) -> Iterable[PromMetric]:
        return []  # families vary with the snapshot; no pre-registration checks

    def collect(self) -> Iterator[PromMetric]:
        snap = self._latest()
        if snap is None:
            return
        with self._lock:
            if self._cached_for is not snap:
                self._cached = build_families(snap)
                self._cached_for = snap
            families = self._cached
        yield from families
        age = GaugeMetricFamily(N.SNAPSHOT_AGE.family, N.SNAPSHOT_AGE.help)
        age.add_metric([], max(0.0, self._clock() - snap.time))
        yield age
