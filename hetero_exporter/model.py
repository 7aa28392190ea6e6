"""The normalized, vendor-neutral model (schema version 1) and its JSON encoding.

Every collector turns vendor output into these frozen dataclasses; everything downstream
(Prometheus exposition, health rules, the node annotation, the scorer) reads only these.

Units are base units: bytes, watts, joules, hertz, celsius, ratios 0..1. A value the device
does not support is *absent*: either no entry in ``DeviceSample.readings`` or a ``Reading``
whose value is ``None`` and whose quality status says why (``unsupported``, ``error``).
It is never 0 and never NaN.

The JSON outline is fixed by DESIGN.md: field names may be added, never renamed. Decoding
rejects unknown major schema versions and malformed documents with ``SchemaError`` naming
the path of the offending value.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

SCHEMA_VERSION = 1

# identity.vendor names come from the vendor specs (hetero_exporter.vendors), not from here
KINDS = ("gpu", "npu", "mlu", "dcu", "gcu", "xpu")
METHODS = ("measured", "sampled", "derived", "estimated")
STATUSES = ("ok", "unsupported", "error", "stale")
HEALTH_STATES = ("ok", "degraded", "failed", "unknown")
# Link.type: the device-to-device fabrics known today, then the host-side PCIe / NUMA
# relations. A new fabric adds its own name in its vendor's spec (``fabric_links``), not here:
# decoding accepts any type, and the scorer treats every type that is not host-side as a fabric.
HOST_LINK_TYPES = ("pcie-switch", "pcie-hostbridge", "numa", "cross-numa")
LINK_TYPES = ("nvlink", "nvswitch", "xgmi", "hccs", "mlulink", *HOST_LINK_TYPES)
ATTRIBUTION_METHODS = ("none", "cgroup", "podresources", "scenario")
# Recommended actions of a fault (vendor catalogues mapped onto one vocabulary).
ACTIONS = ("none", "restart-app", "reset-device", "reboot-node", "contact-support", "isolate-device")
SEVERITIES = ("info", "warning", "critical")


class SchemaError(ValueError):
    """A JSON document does not match schema version 1 (message names the path)."""


# --------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True)
class Quality:
    """How much to trust a reading.

    ``source`` names the API call or CLI field the value came from; the static part
    (source, method, window, resolution, error bound) is declared once per field by the
    collector, the dynamic part (age, status) is set per sample.
    """

    source: str
    method: str = "measured"
    window_seconds: Optional[float] = None
    resolution: Optional[float] = None
    error_bound: Optional[float] = None
    age_seconds: float = 0.0
    status: str = "ok"

    def with_status(self, status: str, age_seconds: float | None = None) -> "Quality":
        return dataclasses.replace(
            self, status=status,
            age_seconds=self.age_seconds if age_seconds is None else age_seconds)


@dataclass(frozen=True)
class Reading:
    """One value in base units, or ``None`` when the quality status is not ``ok``.

    The quality defaults to an empty source: the compact annotation document leaves
    per-field quality out, and decoding it gives such readings."""

    value: Optional[float]
    quality: Quality = Quality(source="")


@dataclass(frozen=True)
class DeviceIdentity:
    """Who a device is. ``uuid`` is stable across reboots (vendor UUID or serial)."""

    vendor: str
    kind: str
    index: int
    uuid: str
    model: str = ""
    pci_address: Optional[str] = None
    numa_node: Optional[int] = None
    driver_version: Optional[str] = None
    firmware_version: Optional[str] = None
    parent: Optional[str] = None
    name: Optional[str] = None  # the vendor's own product string, before normalization
    serial: Optional[str] = None
    # compute runtime the driver serves (the vendor's runtime / toolkit API version), when the
    # vendor reports it; the scorer checks a pod's minimum runtime version against it
    runtime_version: Optional[str] = None


@dataclass(frozen=True)
class Fault:
    """A vendor fault: code as the vendor prints it, class and recommended action.

    ``count`` is cumulative since the agent started; ``first_seen``/``last_seen`` are Unix
    seconds. ``action`` is one of the action names of health/faults (e.g. ``reboot-node``).
    """

    code: str
    fault_class: str = "unknown"
    action: str = "none"
    message: str = ""
    first_seen: Optional[float] = None
    last_seen: Optional[float] = None
    count: int = 1
    severity: str = "warning"  # info | warning | critical
    source: str = ""


@dataclass(frozen=True)
class Health:
    state: str = "ok"
    reasons: tuple[Fault, ...] = ()


@dataclass(frozen=True)
class ProcessSample:
    """A process using a device. ``memory_bytes`` is device memory; ``utilization_ratio``
    is present only where the vendor reports per-process utilization."""

    pid: int
    device_uuid: str = ""
    memory_bytes: Optional[int] = None
    utilization_ratio: Optional[float] = None
    name: Optional[str] = None
    container_id: Optional[str] = None
    namespace: Optional[str] = None
    pod: Optional[str] = None
    pod_uid: Optional[str] = None
    container: Optional[str] = None
    attribution: str = "none"
    # how utilization_ratio was measured (source call, method, averaging window)
    utilization_quality: Optional[Quality] = None


@dataclass(frozen=True)
class Allocation:
    """A device allocated to a container by the kubelet (PodResources ``List``).

    ``resource`` is the extended resource name (``<vendor domain>/<resource>``);
    ``device_id`` the id the vendor's device plugin gave the kubelet (a uuid, PCI address,
    index or a name ending in the index, per the vendor spec's ``plugin_device_id``);
    ``method`` says how the allocation was learned."""

    namespace: str
    pod: str
    container: str
    resource: str = ""
    device_id: str = ""
    method: str = "podresources"


@dataclass(frozen=True)
class Link:
    """A connection from the owning device to ``peer`` (a uuid)."""

    peer: str
    type: str
    lanes: Optional[int] = None
    bandwidth_bytes_per_second: Optional[float] = None
    state: Optional[str] = None


@dataclass(frozen=True)
class Profile:
    """What a model is worth to a scheduler. ``compute_units`` is relative to the
    reference device named in profiles/profiles.yaml; ``estimated`` marks guesses."""

    model: str
    vendor: str = ""
    kind: str = ""
    compute_units: float = 1.0
    memory_bytes: Optional[int] = None
    interconnect: Optional[str] = None
    features: tuple[str, ...] = ()
    cost_weight: float = 1.0
    estimated: bool = False  # model unknown: figures guessed from what the device reports
    approximate: bool = False  # known model, figures from secondary public reporting
    source: str = ""


@dataclass(frozen=True)
class DeviceSample:
    identity: DeviceIdentity
    timestamp: float
    readings: Mapping[str, Reading] = field(default_factory=dict)
    health: Health = Health()
    faults: tuple[Fault, ...] = ()
    processes: tuple[ProcessSample, ...] = ()
    links: tuple[Link, ...] = ()
    profile: Optional[Profile] = None
    allocations: tuple[Allocation, ...] = ()  # containers the kubelet gave this device to
    # True when the collector lists this device's processes, so an empty ``processes``
    # means none run (and all used memory is unattributed); False: not reported.
    processes_reported: bool = False

    def value(self, name: str) -> Optional[float]:
        """The value of reading ``name``, or None when absent or not ok."""
        r = self.readings.get(name)
        return None if r is None or r.quality.status != "ok" else r.value


@dataclass(frozen=True)
class CollectorStatus:
    """Outcome of one collector in one cycle. ``error_kind`` is one of
    unavailable | timeout | late (still running when the cycle was published; its devices
    carried over stale) | exception | parse | busy (still running from an earlier cycle)."""

    name: str
    ok: bool
    duration_seconds: float = 0.0
    error: Optional[str] = None
    error_kind: Optional[str] = None
    last_success: Optional[float] = None
    errors_total: Mapping[str, int] = field(default_factory=dict)
    vendor: Optional[str] = None
    devices: int = 0


@dataclass(frozen=True)
class SourceStatus:
    """State of an attribution source (``procfs``, ``pod-cache``, ``podresources``).

    ``stale`` means the source is serving what it last knew (e.g. the Kubernetes API is
    unreachable and pod names come from the last successful list/watch); ``last_success``
    is Unix seconds; ``items`` counts what it holds (pods, allocations, cached pids)."""

    name: str
    ok: bool
    stale: bool = False
    last_success: Optional[float] = None
    error: Optional[str] = None
    items: int = 0


@dataclass(frozen=True)
class NodeSnapshot:
    node: str
    time: float
    devices: tuple[DeviceSample, ...] = ()
    collectors: tuple[CollectorStatus, ...] = ()
    expected: Mapping[str, int] = field(default_factory=dict)  # vendor -> devices on PCI
    boot_id: Optional[str] = None
    attribution_sources: tuple[SourceStatus, ...] = ()
    # devices remembered from an earlier boot that neither the PCI bus nor their tool shows:
    # removed, not lost (sdk/identity.py); ``removed`` those forgotten this cycle (a Node
    # event), ``removed_total`` per vendor since the agent started (a counter)
    removed: tuple[DeviceIdentity, ...] = ()
    removed_total: Mapping[str, int] = field(default_factory=dict)

    def present(self) -> dict[str, int]:
        """Devices the vendor tools really see, per vendor (top-level devices only).

        Not counted: a device with nothing read and health failed or unknown. That is PCI
        presence's stand-in for a device on the bus that no tool reports
        (health/pci_presence.py: no readings, failed), and a device its collector reports lost
        under its pinned identity (NVML GPU_IS_LOST, a CLI tool that no longer lists it), so
        ``accelerator_devices_expected > accelerator_devices_present`` says a device is missing.
        A device carried over stale from a late collector still counts: it has (stale)
        readings, it was seen at the last success, and a slow tool is not a missing device
        (``accelerator_collector_success`` says that), so a late cycle does not fire the
        missing-device alert."""
        counts: dict[str, int] = {}
        for d in self.devices:
            if d.identity.parent is None and (d.readings or d.health.state not in ("failed", "unknown")):
                counts[d.identity.vendor] = counts.get(d.identity.vendor, 0) + 1
        return counts


# --------------------------------------------------------------------------- JSON codec
#
# The codec walks the dataclass type hints, so adding a field to a class above is all it
# takes to carry it in JSON. Names that differ in JSON are listed here.

_JSON_NAMES = {(Fault, "fault_class"): "class"}


def _json_name(cls: type, name: str) -> str:
    return _JSON_NAMES.get((cls, name), name)


def to_dict(obj: Any) -> Any:
    """Plain JSON-able structure of a model object (no schema envelope)."""
    if dataclasses.is_dataclass(obj):
        cls = type(obj)
        return {_json_name(cls, f.name): to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (tuple, list)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, Mapping):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError("non-finite float in model; unsupported values must be absent")
    return obj


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _fail(path: str, msg: str) -> SchemaError:
    return SchemaError(f"{path or '$'}: {msg}")


def _decode(tp: Any, data: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if data is None:
            if type(None) in args:
                return None
            raise _fail(path, "must not be null")
        inner = [a for a in args if a is not type(None)]
        return _decode(inner[0], data, path)
    if dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise _fail(path, f"expected an object, got {type(data).__name__}")
        kwargs = {}
        hints = _hints(tp)
        for f in dataclasses.fields(tp):
            key = _json_name(tp, f.name)
            if key in data:
                kwargs[f.name] = _decode(hints[f.name], data[key], f"{path}.{key}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise _fail(path, f"missing required field {key!r}")
        return tp(**kwargs)
    if origin is tuple:
        if not isinstance(data, list):
            raise _fail(path, f"expected a list, got {type(data).__name__}")
        return tuple(_decode(args[0], x, f"{path}[{i}]") for i, x in enumerate(data))
    if origin in (dict, collections.abc.Mapping) or tp in (dict, Mapping):
        if not isinstance(data, dict):
            raise _fail(path, f"expected an object, got {type(data).__name__}")
        vt = args[1] if args else Any
        return {str(k): _decode(vt, v, f"{path}.{k}") for k, v in data.items()}
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise _fail(path, f"expected a number, got {data!r:.60}")
        try:
            value = float(data)
        except OverflowError:
            raise _fail(path, "number out of range") from None
        if not math.isfinite(value):
            raise _fail(path, "expected a finite number")
        return value
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise _fail(path, f"expected an integer, got {data!r:.60}")
        return data
    if tp is bool:
        if not isinstance(data, bool):
            raise _fail(path, f"expected true or false, got {data!r:.60}")
        return data
    if tp is str:
        if not isinstance(data, str):
            raise _fail(path, f"expected a string, got {data!r:.60}")
        return data
    return data


class _Invalid(Exception):
    """Raised inside a compiled decoder; the path-tracking decoder then explains where."""


_COMPILED: dict[Any, Callable[[Any], Any]] = {}


def _compiled(tp: Any) -> Callable[[Any], Any]:
    """A decoder for ``tp`` without path bookkeeping (the scheduler decodes thousands of
    annotations): it accepts exactly what ``_decode`` accepts and raises _Invalid on
    anything else, so that ``_decode`` can be rerun to name the offending path."""
    found = _COMPILED.get(tp)
    if found is not None:
        return found
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    fn: Callable[[Any], Any]
    if origin in (typing.Union, types.UnionType):
        inner_tp = [a for a in args if a is not type(None)][0]
        nullable = type(None) in args
        inner = _compiled(inner_tp)

        def fn(d: Any) -> Any:
            if d is None:
                if nullable:
                    return None
                raise _Invalid
            return inner(d)
    elif dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        plan = [(_json_name(tp, f.name), f.name, hints[f.name],
                 f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                for f in dataclasses.fields(tp)]
        _COMPILED[tp] = lambda d: compiled_fields(d)  # placeholder for recursive types
        steps = [(key, name, _compiled(hint), required) for key, name, hint, required in plan]

        def compiled_fields(d: Any, cls: type = tp) -> Any:
            if type(d) is not dict:
                raise _Invalid
            kwargs = {}
            for key, name, dec, required in steps:
                if key in d:
                    kwargs[name] = dec(d[key])
                elif required:
                    raise _Invalid
            return cls(**kwargs)
        fn = compiled_fields
    elif origin is tuple:
        item = _compiled(args[0])

        def fn(d: Any) -> Any:
            if type(d) is not list:
                raise _Invalid
            return tuple([item(x) for x in d])
    elif origin in (dict, collections.abc.Mapping) or tp in (dict, Mapping):
        value = _compiled(args[1]) if args else (lambda v: v)

        def fn(d: Any) -> Any:
            if type(d) is not dict:
                raise _Invalid
            return {str(k): value(v) for k, v in d.items()}
    elif tp is float:
        def fn(d: Any) -> Any:
            t = type(d)
            if t is float:
                if d - d != 0.0:  # inf or nan
                    raise _Invalid
                return d
            if t is int:
                try:
                    return float(d)
                except OverflowError:
                    raise _Invalid from None
            raise _Invalid
    elif tp in (int, bool, str):
        def fn(d: Any, t: type = tp) -> Any:
            if type(d) is not t:
                raise _Invalid
            return d
    else:
        def fn(d: Any) -> Any:
            return d
    _COMPILED[tp] = fn
    return fn


def from_dict(cls: type, data: Any, path: str = "") -> Any:
    """Decode a plain structure into ``cls``; raises SchemaError on malformed input."""
    try:
        return _compiled(cls)(data)
    except (_Invalid, TypeError, ValueError):
        return _decode(cls, data, path)  # raises SchemaError naming the path


def snapshot_to_json(snapshot: NodeSnapshot, *, indent: int | None = None, compact: bool = False) -> str:
    """The schema-1 document of DESIGN.md (``inspect --json``, annotation, scorer input)."""
    doc = {"schema": SCHEMA_VERSION, **to_dict(snapshot)}
    if compact:
        return json.dumps(doc, separators=(",", ":"), sort_keys=True, allow_nan=False)
    return json.dumps(doc, indent=indent, sort_keys=True, allow_nan=False)


def check_schema(doc: Any) -> None:
    if not isinstance(doc, dict):
        raise SchemaError(f"$: expected a JSON object, got {type(doc).__name__}")
    version = doc.get("schema")
    if version is None:
        raise SchemaError("$.schema: missing; this is not a hetero-exporter document")
    if isinstance(version, bool) or not isinstance(version, (int, float)):
        raise SchemaError(f"$.schema: expected a number, got {version!r:.40}")
    if int(version) != SCHEMA_VERSION:
        raise SchemaError(
            f"$.schema: version {version} is not supported (this build reads major version "
            f"{SCHEMA_VERSION}); upgrade hetero-exporter to read it")


def snapshot_from_json(text: str | bytes) -> NodeSnapshot:
    """Decode a schema-1 document; SchemaError on bad JSON, unknown versions, bad fields."""
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise SchemaError(f"$: not valid JSON: {e}") from None
    return snapshot_from_doc(doc)


def snapshot_from_doc(doc: Any) -> NodeSnapshot:
    check_schema(doc)
    body = {k: v for k, v in doc.items() if k != "schema"}
    return from_dict(NodeSnapshot, body, "$")


# --------------------------------------------------------------------------- compact form

# Readings kept in the node annotation: what a scheduler needs, nothing per-process.
COMPACT_READINGS = ("utilization_ratio", "memory_used_bytes", "memory_total_bytes",
                    "memory_free_bytes", "temperature_core_celsius", "power_watts")


def compact_document(snapshot: NodeSnapshot) -> dict:
    """The annotation form of a snapshot (DESIGN.md): the schema-1 document with processes
    and per-field quality left out; identity, profile, health, faults, links, free memory,
    utilization and driver versions kept. ``snapshot_from_doc`` reads it back."""
    doc = {"schema": SCHEMA_VERSION, **to_dict(snapshot)}
    doc.pop("boot_id", None)
    doc.pop("attribution_sources", None)  # agent internals; would churn the annotation
    for c in doc.get("collectors", []):
        c.pop("errors_total", None)
    for d, dev in zip(doc.get("devices", []), snapshot.devices):
        d["processes"] = []
        d.pop("allocations", None)  # changes with every pod start: kept out of the annotation
        kept = {}
        for name in COMPACT_READINGS:
            r = dev.readings.get(name)
            if r is not None and r.value is not None and r.quality.status == "ok":
                kept[name] = {"value": r.value}
        used, total = dev.value("memory_used_bytes"), dev.value("memory_total_bytes")
        if "memory_free_bytes" not in kept and used is not None and total is not None:
            kept["memory_free_bytes"] = {"value": max(0.0, total - used)}
        d["readings"] = kept
        for f in d.get("faults", []):
            f.pop("source", None)
    return _without_nulls(doc)


def _without_nulls(obj: Any) -> Any:
    """Drop null members: every nullable field defaults to null when decoded, and an
    8-GPU link matrix is mostly nulls (half the annotation before this)."""
    if isinstance(obj, dict):
        return {k: _without_nulls(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_without_nulls(v) for v in obj]
    return obj


def compact_json(snapshot: NodeSnapshot) -> str:
    return json.dumps(compact_document(snapshot), separators=(",", ":"), sort_keys=True, allow_nan=False)
