"""A prometheus_client custom Collector that renders the latest NodeSnapshot.

Series are built from the snapshot at scrape time, so a vanished pid or device vanishes
without clean-up code, and a scrape never calls a vendor. Snapshots are immutable, so the
families built for one are kept and reused by every scrape until the next snapshot; only
``accelerator_snapshot_age_seconds`` is computed per scrape.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric as PromMetric
from prometheus_client.samples import Exemplar, Sample

from hetero_exporter.model import fields as F
from hetero_exporter import finops as finops_mod
from hetero_exporter.model import names as N
from hetero_exporter.model import HEALTH_STATES, RECOVERING, DeviceSample, NodeSnapshot
from hetero_exporter.model.evaluation import OVERRIDE_CODE
from hetero_exporter.exposition import openmetrics as om
from hetero_exporter.exposition.selection import EVERYTHING, Selection

_EMPTY = ""
# Every kind sampling.classify (and the sampler's "late" and "busy") can give a failed cycle: each collector's
# errors counter is exported at 0 for all of them from the start (DESIGN: known label sets), so
# rate()/increase() have a series before the first failure.
COLLECTOR_ERROR_KINDS = ("unavailable", "timeout", "late", "busy", "parse", "exception")


def _s(v: object) -> str:
    return _EMPTY if v is None else str(v)


def _fmt_num(v: Optional[float]) -> str:
    if v is None:
        return _EMPTY
    return repr(int(v)) if float(v).is_integer() else repr(float(v))


class _Families:
    """Lazily created families, in the order of names.ALL; only those the selection's profile serves.

    Samples are appended directly with ready-made label dicts (not through
    ``add_metric``): with ~2,000 series per scrape the generic path costs about a fifth of
    the rendering itself, and a scrape after a new snapshot pays it. With ``starts``, each counter
    also gets an OpenMetrics twin with its created samples and exemplars (``openmetrics.py``)."""

    def __init__(self, selection: Selection = EVERYTHING, starts: Optional[om.CounterStarts] = None) -> None:
        self.selection, self.starts = selection, starts
        self._by_name: dict[str, PromMetric] = {}
        self._openmetrics: dict[str, PromMetric] = {}  # counter name -> its twin with created samples

    def sink(self, m: N.Metric) -> Callable[..., None]:
        """``add(labels, value, exemplar=None)`` for metric ``m``; the family appears on first use."""
        if not self.selection.serves(m):
            return _ignore
        state: list = []
        starts = self.starts if m.type == "counter" else None

        def add(labels: dict, value: float, exemplar: Optional[Exemplar] = None) -> None:
            if not state:
                fam = self._by_name.get(m.name)
                if fam is None:
                    cls = CounterMetricFamily if m.type == "counter" else GaugeMetricFamily
                    fam = self._by_name[m.name] = cls(m.family, m.help, labels=m.labels)
                state.append(fam.samples.append)
                if starts is not None:
                    twin = self._openmetrics.get(m.name)
                    if twin is None:
                        twin = self._openmetrics[m.name] = CounterMetricFamily(m.family, m.help, labels=m.labels)
                    state.append(twin.samples.append)
            # a counter's sample is named <family>_total, which is m.name
            state[0](Sample(m.name, labels, value))
            if starts is not None:
                state[1](Sample(m.name, labels, value, None, exemplar))
                created = starts.created(m, labels, value)
                if created is not None:  # right after its sample: the parsers look there
                    state[1](Sample(m.family + "_created", labels, created))
        return add

    def ordered(self, openmetrics: bool = False) -> list[PromMetric]:
        twins = self._openmetrics if openmetrics else {}
        return [twins.get(m.name) or self._by_name[m.name] for m in N.ALL if m.name in self._by_name]


def _ignore(labels: dict, value: float, exemplar: Optional[Exemplar] = None) -> None:
    """The sink of a family the profile does not serve."""


def build_families(snap: NodeSnapshot, finops: Optional[finops_mod.FinOps] = None,
                   selection: Selection = EVERYTHING) -> list[PromMetric]:
    """Every family of DESIGN.md's table that the snapshot has data for and the selection's profile
    serves; the FinOps families (prices, shares) only with ``finops`` settings; readings as
    ``selection`` says. Families come out in the order of names.ALL."""
    return _build(snap, finops, selection, None).ordered()


def _build(snap: NodeSnapshot, finops: Optional[finops_mod.FinOps], selection: Selection,
           starts: Optional[om.CounterStarts]) -> _Families:
    if starts is not None:
        starts.begin(snap)
    fam = _Families(selection, starts)
    devices = _DeviceFamilies(fam, selection)
    for d in snap.devices:
        devices.add(d)
    _inventory_families(fam, snap)
    _collector_families(fam, snap)
    if finops is not None:
        _finops_families(fam, snap, finops)
    _attribution_families(fam, snap)
    _energy_families(fam, snap)
    return fam


class _DeviceFamilies:
    """The per-device families of one build: identity, readings and their quality, health,
    faults, profile, processes, allocations."""

    def __init__(self, fam: "_Families", selection: Selection = EVERYTHING):
        self.fam = fam
        self.selection = selection
        self.info, self.field_status = fam.sink(N.DEVICE_INFO), fam.sink(N.FIELD_STATUS)
        self.quality_info = fam.sink(N.QUALITY_INFO)
        self.health, self.reason = fam.sink(N.HEALTH_STATUS), fam.sink(N.HEALTH_REASON)
        self.override_until = fam.sink(N.HEALTH_OVERRIDE_UNTIL)
        self.fault_events, self.fault_last = fam.sink(N.FAULT_EVENTS), fam.sink(N.FAULT_LAST)
        self.compute_units, self.cost_weight = fam.sink(N.COMPUTE_UNITS), fam.sink(N.COST_WEIGHT)
        self.proc_mem, self.proc_util = fam.sink(N.PROCESS_MEMORY), fam.sink(N.PROCESS_UTILIZATION)
        self.allocation, self.unattributed = fam.sink(N.ALLOCATION), fam.sink(N.UNATTRIBUTED_MEMORY)
        self.value_sinks: dict[str, Callable[[dict, float], None]] = {}
        self.quality_seen: set[tuple] = set()

    def add(self, d: DeviceSample) -> None:
        ident, profile = d.identity, d.profile
        self.info({"vendor": ident.vendor, "uuid": ident.uuid, "index": str(ident.index), "kind": ident.kind,
                   "model": ident.model, "pci_address": _s(ident.pci_address), "numa_node": _s(ident.numa_node),
                   "driver_version": _s(ident.driver_version),
                   "profile": _EMPTY if profile is None else ("estimated" if profile.estimated else profile.model)},
                  1)
        self._readings(d)
        self._health(d)
        if profile is not None:
            self.compute_units({"vendor": ident.vendor, "uuid": ident.uuid}, profile.compute_units)
            self.cost_weight({"vendor": ident.vendor, "uuid": ident.uuid}, profile.cost_weight)
        self._processes(d)

    def _readings(self, d: DeviceSample) -> None:
        vendor, uuid = d.identity.vendor, d.identity.uuid
        select = None if self.selection.everything else self.selection
        for field, reading in d.readings.items():
            target = N.metric_for_field(field)
            if select is not None and not select.allows(field, target[0].name if target else None):
                continue
            q = reading.quality
            if q.status != "ok":  # an ok field is its value series (the series budget: tests/test_series_budget.py)
                self.field_status({"vendor": vendor, "uuid": uuid, "field": field, "status": q.status}, 1)
            qkey = (vendor, field, q.source, q.method, q.window_seconds, q.resolution, q.error_bound)
            if qkey not in self.quality_seen:
                self.quality_seen.add(qkey)
                self.quality_info({"vendor": vendor, "field": field, "source": q.source, "method": q.method,
                                   "window_seconds": _fmt_num(q.window_seconds), "resolution": _fmt_num(q.resolution),
                                   "error_bound": _fmt_num(q.error_bound)}, 1)
            if q.status != "ok" or reading.value is None:
                continue  # unsupported / error / stale values are absent, never 0
            if target is not None:
                metric, extra = target
                add = self.value_sinks.get(metric.name)
                if add is None:
                    add = self.value_sinks[metric.name] = self.fam.sink(metric)
                labels = {"vendor": vendor, "uuid": uuid}
                labels.update(zip(metric.labels[2:], extra))
                add(labels, reading.value)

    def _health(self, d: DeviceSample) -> None:
        vendor, uuid = d.identity.vendor, d.identity.uuid
        # the four states always; recovering (a recovery gate's, opt-in) only while the device is in it
        for s in HEALTH_STATES + ((RECOVERING,) if d.health.state == RECOVERING else ()):
            self.health({"vendor": vendor, "uuid": uuid, "state": s}, 1.0 if s == d.health.state else 0.0)
        for r in d.health.reasons:
            self.reason({"vendor": vendor, "uuid": uuid, "code": r.code, "reason": r.message or r.fault_class}, 1)
            if r.code == OVERRIDE_CODE and r.last_seen is not None:  # an honoured override: until when
                self.override_until({"vendor": vendor, "uuid": uuid, "state": d.health.state}, r.last_seen)
        for f in d.faults:
            labels = {"vendor": vendor, "uuid": uuid, "code": f.code, "action": f.action}
            self.fault_events(labels, f.count, om.fault_exemplar(f) if self.fam.starts else None)
            if f.last_seen is not None:
                self.fault_last(labels, f.last_seen)

    def _processes(self, d: DeviceSample) -> None:
        vendor, uuid = d.identity.vendor, d.identity.uuid
        for p in d.processes:
            labels = {"vendor": vendor, "uuid": uuid, "pid": str(p.pid), "namespace": _s(p.namespace),
                      "pod": _s(p.pod), "container": _s(p.container)}
            if p.memory_bytes is not None:
                self.proc_mem(labels, p.memory_bytes)
            if p.utilization_ratio is not None:
                self.proc_util(labels, p.utilization_ratio)
        owners = {(a.namespace, a.pod, a.container) for a in d.allocations}
        for ns, pod, container in sorted(owners):
            self.allocation({"vendor": vendor, "uuid": uuid, "namespace": ns, "pod": pod, "container": container}, 1)
        used = d.value(F.MEMORY_USED)
        if used is not None and (d.processes or d.processes_reported) \
                and all(p.memory_bytes is not None for p in d.processes):
            # what the listed processes do not explain (driver reservations, processes in
            # other PID namespaces, vendor accounting); only where processes are reported
            self.unattributed({"vendor": vendor, "uuid": uuid},
                              max(0.0, used - sum(p.memory_bytes or 0 for p in d.processes)))


def _inventory_families(fam: "_Families", snap: NodeSnapshot) -> None:
    """Devices the PCI bus expects, the vendors' tools show, and removed ones, per vendor."""
    expected, present = fam.sink(N.DEVICES_EXPECTED), fam.sink(N.DEVICES_PRESENT)
    seen = snap.present()
    for vendor in sorted(set(snap.expected) | set(seen)):
        if vendor in snap.expected:
            expected({"vendor": vendor}, snap.expected[vendor])
        present({"vendor": vendor}, seen.get(vendor, 0))
    removed = fam.sink(N.DEVICES_REMOVED)
    last = fam.starts.removed if fam.starts else {}
    for vendor in sorted(set(snap.expected) | set(seen) | set(snap.removed_total)):
        gone = last.get(vendor)
        removed({"vendor": vendor}, snap.removed_total.get(vendor, 0), om.removed_exemplar(*gone) if gone else None)


def _collector_families(fam: "_Families", snap: NodeSnapshot) -> None:
    """The collectors' self-metrics."""
    success, duration = fam.sink(N.COLLECTOR_SUCCESS), fam.sink(N.COLLECTOR_DURATION)
    last_success, errors = fam.sink(N.COLLECTOR_LAST_SUCCESS), fam.sink(N.COLLECTOR_ERRORS)
    error_info = fam.sink(N.COLLECTOR_ERROR_INFO)
    for c in snap.collectors:
        success({"collector": c.name}, 1 if c.ok else 0)
        duration({"collector": c.name}, c.duration_seconds)
        if c.last_success is not None:
            last_success({"collector": c.name}, c.last_success)
        for kind in _error_kinds(c.errors_total):
            errors({"collector": c.name, "kind": kind}, c.errors_total.get(kind, 0))
        if not c.ok:
            error_info({"collector": c.name, "kind": _s(c.error_kind), "reason": _s(c.error)[:200]}, 1)


def _energy_families(fam: "_Families", snap: NodeSnapshot) -> None:
    """Each device's energy split (sources/energy.py): per container, and the rest."""
    container, unattributed = fam.sink(N.CONTAINER_ENERGY), fam.sink(N.UNATTRIBUTED_ENERGY)
    for e in snap.energy:
        unattributed({"vendor": e.vendor, "uuid": e.uuid}, e.unattributed_joules)
        for c in e.containers:
            container({"vendor": e.vendor, "uuid": e.uuid, "namespace": c.namespace, "pod": c.pod,
                       "container": c.container}, c.joules)


def _attribution_families(fam: "_Families", snap: NodeSnapshot) -> None:
    """The attribution sources' self-metrics (cgroups, PodResources, the pod cache)."""
    up, stale = fam.sink(N.ATTRIBUTION_SOURCE_UP), fam.sink(N.ATTRIBUTION_SOURCE_STALE)
    src_last, src_items = fam.sink(N.ATTRIBUTION_SOURCE_LAST_SUCCESS), fam.sink(N.ATTRIBUTION_SOURCE_ITEMS)
    for src in snap.attribution_sources:
        labels = {"source": src.name}
        up(labels, 1 if src.ok else 0)
        stale(labels, 1 if src.stale else 0)
        src_items(labels, src.items)
        if src.last_success is not None:
            src_last(labels, src.last_success)


def _error_kinds(counted: Mapping[str, int]) -> list[str]:
    """The known kinds and any other kind counted, sorted."""
    return sorted(set(COLLECTOR_ERROR_KINDS) | set(counted))


def _finops_families(fam: _Families, snap: NodeSnapshot, fin: finops_mod.FinOps) -> None:
    fam.sink(N.FINOPS_INFO)({"currency": fin.currency, "reference": fin.reference}, 1)
    price = fam.sink(N.PRICE_PER_HOUR)
    for d in snap.devices:
        p = finops_mod.price(d, fin)
        if p is not None:
            price({"vendor": d.identity.vendor, "uuid": d.identity.uuid, "basis": p[1]}, p[0])
    share = fam.sink(N.ALLOCATION_SHARE)
    for (vendor, uuid), shares in finops_mod.node_shares(snap).items():
        for (ns, pod, container), s in sorted(shares.items()):
            share({"vendor": vendor, "uuid": uuid, "namespace": ns, "pod": pod, "container": container}, s)


class SnapshotCollector:
    """Register with a CollectorRegistry; reads ``latest()`` at every scrape. Each snapshot's
    families are built once, for both formats (``openmetrics.wanted()`` picks the counters with
    created samples and exemplars); ``started`` / ``boot`` (Unix seconds) default to this
    process's start and the host's boot."""

    def __init__(self, latest: Callable[[], Optional[NodeSnapshot]],
                 clock: Callable[[], float] = time.time,
                 finops: Optional[finops_mod.FinOps] = None, selection: Selection = EVERYTHING,
                 started: Optional[float] = None, boot: Optional[float] = None):
        self._latest = latest
        self._finops = finops
        self._selection = selection
        self._clock = clock
        self._lock = threading.Lock()
        self._cached_for: Optional[NodeSnapshot] = None
        self._cached: tuple[list[PromMetric], list[PromMetric]] = ([], [])
        boot = om.boot_time() if boot is None else boot
        self._starts = om.CounterStarts(om.process_start(boot) if started is None else started, boot)

    def describe(self) -> Iterable[PromMetric]:
        return []  # families vary with the snapshot; no pre-registration checks

    def collect(self) -> Iterator[PromMetric]:
        snap = self._latest()
        if snap is None:
            return
        with self._lock:
            if self._cached_for is not snap:
                built = _build(snap, self._finops, self._selection, self._starts)
                self._cached = (built.ordered(), built.ordered(openmetrics=True))
                self._cached_for = snap
            families = self._cached[1 if om.wanted() else 0]
        yield from families
        age = GaugeMetricFamily(N.SNAPSHOT_AGE.family, N.SNAPSHOT_AGE.help)
        age.add_metric([], max(0.0, self._clock() - snap.time))
        yield age


class ToolProcessesCollector:
    """Vendor-tool calls' leftovers killed past their deadline; ``killed()`` is sdk.runner's
    ``killed_total`` (injected: exposition sees no sdk). Exported at 0 from the start."""

    def __init__(self, killed: Callable[[], int], started: Optional[float] = None):
        self._killed = killed
        self._started = om.process_start() if started is None else started  # sdk.runner counts from then

    def describe(self) -> Iterable[PromMetric]:
        return []

    def collect(self) -> Iterator[PromMetric]:
        yield CounterMetricFamily(N.TOOL_PROCESSES_KILLED.family, N.TOOL_PROCESSES_KILLED.help,
                                  value=float(self._killed()), created=self._started if om.wanted() else None)


class TlsCertificateCollector:
    """The served certificate's expiry (``WebSettings.certificate_expiry``), so an alert fires
    before clients start refusing the agent; absent while the date is unknown."""

    def __init__(self, expiry: Callable[[], Optional[float]]):
        self._expiry = expiry

    def describe(self) -> Iterable[PromMetric]:
        return []

    def collect(self) -> Iterator[PromMetric]:
        not_after = self._expiry()
        if not_after is not None:
            yield GaugeMetricFamily(N.TLS_CERTIFICATE_EXPIRY.family, N.TLS_CERTIFICATE_EXPIRY.help, value=not_after)


class KernelLogCollector:
    """The kernel log follower's self-metrics; ``status()`` is ``kernel_log.Follower.status``
    (a plain mapping: up, records, events {(vendor, code): n}, dropped {reason: n}, lag_seconds)."""

    def __init__(self, status: Callable[[], Optional[Mapping[str, Any]]], started: Optional[float] = None):
        self._status = status
        self._started = om.process_start() if started is None else started  # the follower counts from then

    def describe(self) -> Iterable[PromMetric]:
        return []

    def collect(self) -> Iterator[PromMetric]:
        st = self._status()
        if st is None:
            return
        created = self._started if om.wanted() else None
        yield GaugeMetricFamily(N.KERNEL_LOG_UP.name, N.KERNEL_LOG_UP.help, value=1.0 if st.get("up") else 0.0)
        yield CounterMetricFamily(N.KERNEL_LOG_RECORDS.family, N.KERNEL_LOG_RECORDS.help,
                                  value=float(st.get("records", 0)), created=created)
        ev = CounterMetricFamily(N.KERNEL_LOG_EVENTS.family, N.KERNEL_LOG_EVENTS.help, labels=N.KERNEL_LOG_EVENTS.labels)
        for (vendor, code), n in sorted((st.get("events") or {}).items()):
            ev.add_metric([vendor, code], n, created=created)
        yield ev
        dropped = CounterMetricFamily(N.KERNEL_LOG_DROPPED.family, N.KERNEL_LOG_DROPPED.help,
                                      labels=N.KERNEL_LOG_DROPPED.labels)
        for reason, n in sorted((st.get("dropped") or {}).items()):
            dropped.add_metric([reason], n, created=created)
        yield dropped
        yield GaugeMetricFamily(N.KERNEL_LOG_LAG.name, N.KERNEL_LOG_LAG.help, value=float(st.get("lag_seconds", 0.0)))
