"""The snapshot as OpenTelemetry points: the families /metrics serves, under OTel names.

Pure (no OpenTelemetry import): ``points(snapshot)`` builds the same families a scrape does
(``build_families``) and renames each sample:

- where the hardware semantic conventions have a metric for the device, that name, with the
  instrument kind and unit ``semconv.CLAIMED`` gives it, and the conventions' attribute names
  (``HW``; docs/opentelemetry.md has the table). ``hw.gpu.*`` is for devices of kind ``gpu``
  only (the conventions require ``hw.type=gpu``); an NPU, MLU, DCU, GCU or XPU gets the generic
  ``hw.power``, ``hw.energy``, ``hw.errors``, ``hw.status``, ``hw.temperature`` and our
  ``accelerator.*`` names for the rest;
- every other family (and sample) as ``accelerator.<family>`` without the ``accelerator_``
  prefix and the unit suffix (``accelerator_fan_speed_ratio`` -> ``accelerator.fan_speed``, unit ``1``).

Device points carry ``hw.id`` (our uuid), ``hw.vendor``, ``hw.type`` (the device kind: gpu, npu,
mlu, ...), ``hw.model``, the driver and firmware versions and serial number where known and, for a
MIG or partition child, ``hw.parent``; a point made from a reading carries its quality as
``accelerator.quality.method`` / ``.window`` / ``.status``. Empty label values (no pod) are left
out rather than sent as "".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from hetero_exporter.exposition.collector import build_families
from hetero_exporter.exposition.export import semconv
from hetero_exporter.exposition.export.semconv import COUNTER, GAUGE, UPDOWN
from hetero_exporter.exposition.selection import EVERYTHING, Selection
from hetero_exporter.model import NodeSnapshot, Quality
from hetero_exporter.model.fields import MEMORY_TOTAL as N_MEMORY_TOTAL, MEMORY_USED as N_MEMORY_USED
from hetero_exporter.model import names as N

__all__ = ["COUNTER", "GAUGE", "UPDOWN", "HW", "Instrument", "Point", "points", "instruments", "generic"]

PREFIX = "accelerator."
GPU = "gpu"

# our unit suffixes -> UCUM units (OTel's), longest first
_UNITS: tuple[tuple[str, str], ...] = (
    ("_bytes_per_second", "By/s"), ("_transfers_per_second", "{transfer}/s"), ("_timestamp_seconds", "s"),
    ("_bytes", "By"), ("_ratio", "1"), ("_celsius", "Cel"), ("_watts", "W"), ("_joules", "J"),
    ("_hertz", "Hz"), ("_seconds", "s"), ("_lanes", "{lane}"), ("_pages", "{page}"),
)
# where stripping the suffix would give two families one name (bytes and share of memory used)
_GENERIC_NAMES = {N.MEMORY_USED_RATIO.name: PREFIX + "memory_used_ratio"}


@dataclass(frozen=True)
class Instrument:
    """One OTel metric: its name, instrument kind (gauge, counter, updowncounter), UCUM unit."""

    name: str
    kind: str
    unit: str
    description: str


@dataclass(frozen=True)
class Point:
    instrument: Instrument
    value: float
    attributes: Mapping[str, Any]


@dataclass(frozen=True)
class HwMetric:
    """A family (or the samples of it whose labels are in ``when``) under a conventions name;
    kind and unit are ``semconv.CLAIMED``'s, and a ``hw.gpu.*`` name takes GPUs only."""

    name: str
    rename: Mapping[str, str] = field(default_factory=dict)  # our label -> the convention's attribute
    values: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # a label's values, translated
    fixed: Mapping[str, str] = field(default_factory=dict)  # attributes every point gets
    when: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # only samples with these label values
    drop: tuple[str, ...] = ()  # labels the convention's name already says
    also_generic: bool = False  # the family's accelerator.* point too (it says more than the convention can)
    sensor: str = ""  # the label naming a sensor: the point's component is that sensor (hw.temperature)

    @property
    def claimed(self) -> semconv.Claimed:
        return semconv.CLAIMED[self.name]

    @property
    def partial(self) -> bool:
        """Some samples or devices of the family stay under the generic name."""
        return bool(self.when) or self.claimed.gpu_only or self.also_generic

    def matches(self, labels: Mapping[str, str], kind: str) -> bool:
        if self.claimed.gpu_only and kind != GPU:
            return False
        return all(labels.get(k) in allowed for k, allowed in self.when.items())


_DIRECTION = {"direction": {"rx": "receive", "tx": "transmit"}}
HW: Mapping[str, tuple[HwMetric, ...]] = {
    N.UTILIZATION.name: (HwMetric("hw.gpu.utilization", fixed={"hw.gpu.task": "general"}),),
    N.ENGINE_UTILIZATION.name: (HwMetric("hw.gpu.utilization", rename={"engine": "hw.gpu.task"},
                                         when={"engine": ("encoder", "decoder")}),),
    N.MEMORY_USED.name: (HwMetric("hw.gpu.memory.usage"),),
    N.MEMORY_TOTAL.name: (HwMetric("hw.gpu.memory.limit"),),
    N.MEMORY_USED_RATIO.name: (HwMetric("hw.gpu.memory.utilization"),),
    # every link type's byte counters of a GPU (NVLink, xGMI, ...): link_type stays an attribute
    N.INTERCONNECT.name: (HwMetric("hw.gpu.io", rename={"direction": "network.io.direction"}, values=_DIRECTION),),
    N.POWER.name: (HwMetric("hw.power"),),
    N.ENERGY.name: (HwMetric("hw.energy"),),
    N.TEMPERATURE.name: (HwMetric("hw.temperature", rename={"sensor": "hw.sensor_location"}, sensor="sensor"),),
    N.ECC_ERRORS.name: (HwMetric("hw.errors", rename={"severity": "error.type"}),),
    # the conventions' states only; unknown and recovering (no state of theirs) leave every hw.status
    # point at 0, and accelerator.health_status carries our whole state set
    N.HEALTH_STATUS.name: (HwMetric("hw.status", rename={"state": "hw.state"},
                                    when={"state": ("ok", "degraded", "failed")}, also_generic=True),),
}
_IDENTITY = {"uuid": "hw.id", "vendor": "hw.vendor"}


def generic(metric: N.Metric) -> Instrument:
    """``accelerator.<family>`` without the prefix and unit suffix, with the suffix's unit."""
    name = metric.name[len("accelerator_"):] if metric.name.startswith("accelerator_") else metric.name
    if metric.type == "counter" and name.endswith("_total"):
        name = name[: -len("_total")]
    unit = ""
    for suffix, ucum in _UNITS:
        if name.endswith(suffix):
            name, unit = name[: -len(suffix)], ucum
            break
    kind = COUNTER if metric.type == "counter" else GAUGE
    return Instrument(_GENERIC_NAMES.get(metric.name, PREFIX + name), kind, unit, metric.help)


def _hw_instrument(hw: HwMetric, metric: N.Metric) -> Instrument:
    return Instrument(hw.name, hw.claimed.kind, hw.claimed.unit, metric.help)


def instruments() -> list[Instrument]:
    """Every instrument a snapshot can produce (one per OTel name: the first family's help)."""
    out: dict[str, Instrument] = {}
    for m in N.ALL:
        hws = HW.get(m.name, ())
        for hw in hws:
            out.setdefault(hw.name, _hw_instrument(hw, m))
        if not hws or any(hw.partial for hw in hws):
            g = generic(m)
            out.setdefault(g.name, g)
    out.setdefault(SNAPSHOT_AGE.name, SNAPSHOT_AGE)
    return list(out.values())


SNAPSHOT_AGE = generic(N.SNAPSHOT_AGE)


class _Devices:
    """Per uuid: the device kind, the hw.* identity attributes, and the quality of each
    (family, label values) reading."""

    def __init__(self, snap: NodeSnapshot) -> None:
        self.identity: dict[str, dict[str, str]] = {}
        self.kind: dict[str, str] = {}
        self.quality: dict[tuple, Quality] = {}
        for d in snap.devices:
            ident = d.identity
            attrs = {"hw.type": ident.kind, "hw.model": ident.model, "hw.parent": ident.parent,
                     "hw.driver_version": ident.driver_version, "hw.firmware_version": ident.firmware_version,
                     "hw.serial_number": ident.serial}
            self.identity[ident.uuid] = {k: v for k, v in attrs.items() if v}
            self.kind[ident.uuid] = ident.kind
            for name, reading in d.readings.items():
                target = N.metric_for_field(name)
                if target is not None:
                    self.quality[(target[0].name, ident.uuid, target[1])] = reading.quality


def _quality_attributes(q: Optional[Quality]) -> dict[str, Any]:
    if q is None:
        return {}
    out: dict[str, Any] = {"accelerator.quality.method": q.method, "accelerator.quality.status": q.status}
    if q.window_seconds is not None:
        out["accelerator.quality.window"] = float(q.window_seconds)
    return out


def _attributes(metric: N.Metric, labels: Mapping[str, str], hw: Optional[HwMetric],
                devices: _Devices) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for k, v in labels.items():
        if v == "" or (hw is not None and k in hw.drop):
            continue
        if hw is not None and k in hw.rename:
            attrs[hw.rename[k]] = hw.values.get(k, {}).get(v, v)
        else:
            attrs[_IDENTITY.get(k, k)] = v
    uuid = labels.get("uuid")
    if uuid is not None:
        attrs.update(devices.identity.get(uuid, {}))
        extra = tuple(labels.get(k, "") for k in metric.labels[2:])
        attrs.update(_quality_attributes(devices.quality.get((metric.name, uuid, extra))))
    if hw is not None:
        attrs.update(hw.fixed)
        if hw.sensor and uuid is not None:
            _as_sensor(attrs, uuid, labels.get(hw.sensor, ""))
    return attrs


_NOT_THE_SENSORS = ("hw.driver_version", "hw.firmware_version", "hw.serial_number")


def _as_sensor(attrs: dict[str, Any], uuid: str, sensor: str) -> None:
    """The conventions' temperature metrics describe a sensor: its own ``hw.id``, the device as
    ``hw.parent``, ``hw.type=temperature``; the device's versions and serial are not the sensor's."""
    for k in _NOT_THE_SENSORS:
        attrs.pop(k, None)
    attrs.update({"hw.id": f"{uuid}/temperature/{sensor}", "hw.parent": uuid, "hw.type": "temperature"})


def _points(metric: N.Metric, labels: Mapping[str, str], value: float, devices: _Devices) -> list[Point]:
    """The sample under its conventions name where one applies to this device, and under the
    generic name where none does (or the conventions' name says less than the family)."""
    kind = devices.kind.get(labels.get("uuid", ""), "")
    hw = next((h for h in HW.get(metric.name, ()) if h.matches(labels, kind)), None)
    out = []
    if hw is not None:
        out.append(Point(_hw_instrument(hw, metric), value, _attributes(metric, labels, hw, devices)))
    if hw is None or hw.also_generic:
        out.append(Point(generic(metric), value, _attributes(metric, labels, None, devices)))
    return out


def points(snap: NodeSnapshot, *, finops: Any = None, selection: Selection = EVERYTHING,
           now: Optional[float] = None) -> list[Point]:
    """Every sample of the families a scrape of ``snap`` serves, as OTel points (and the
    snapshot's age at ``now``, when given)."""
    devices = _Devices(snap)
    out: list[Point] = []
    for fam in build_families(snap, finops, selection):
        for s in fam.samples:
            metric = N.BY_NAME.get(s.name)
            if metric is not None:
                out.extend(_points(metric, s.labels, float(s.value), devices))
    out.extend(_memory_utilization(snap, devices, selection))
    if now is not None:
        out.append(Point(SNAPSHOT_AGE, max(0.0, now - snap.time), {}))
    return out


MEMORY_USED_RATIO = "memory_used_ratio"


def _memory_utilization(snap: NodeSnapshot, devices: _Devices, selection: Selection) -> list[Point]:
    """``hw.gpu.memory.utilization`` (used / limit) of a GPU whose vendor reports used and total
    memory but no ratio of its own: the convention's consumers expect it beside usage and
    limit. Quality ``derived``; the vendor's own ratio, where reported, is the family's point.
    Other kinds get none: the conventions have no such metric for them."""
    hw = HW[N.MEMORY_USED_RATIO.name][0]
    if not selection.allows(MEMORY_USED_RATIO, N.MEMORY_USED_RATIO.name):
        return []
    out = []
    for d in snap.devices:
        used, total = d.value(N_MEMORY_USED), d.value(N_MEMORY_TOTAL)
        if MEMORY_USED_RATIO in d.readings or used is None or not total or d.identity.kind != GPU:
            continue
        ident = d.identity
        attrs = {"hw.vendor": ident.vendor, "hw.id": ident.uuid, **devices.identity.get(ident.uuid, {}),
                 "accelerator.quality.method": "derived", "accelerator.quality.status": "ok"}
        out.append(Point(_hw_instrument(hw, N.MEMORY_USED_RATIO), min(1.0, used / total), attrs))
    return out


def by_instrument(pts: Iterable[Point]) -> dict[str, list[Point]]:
    out: dict[str, list[Point]] = {}
    for p in pts:
        out.setdefault(p.instrument.name, []).append(p)
    return out
