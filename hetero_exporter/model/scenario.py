"""Simulation scenarios: devices, values over time, processes, pods and injected faults.

A scenario is a YAML file (see simulate/scenarios/default.yaml for the annotated format); this
module holds its types and turns a file or document into them. Finding a scenario by its
built-in name is ``simulate.scenario.load``, which also gives each vendor's uuid prefix (from
its spec): this module, part of the model, knows no vendor. Values are
given in the model's base units under the model's field names (``power_watts``,
``memory_used_bytes``...); each vendor's fake backend converts them to what its binding or
CLI reports (mW, MHz, MiB, percent), so the real collector converts them back and a
simulation round-trips through the real parsing code.

Time ``t`` is seconds since the simulation started (see ``clock.SimulationClock``).
Everything here is pure and deterministic: the same scenario and ``t`` give the same values.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Mapping, Optional, Sequence

from hetero_exporter import validate as v
from hetero_exporter.validate import ValidationError

UuidPrefix = Callable[[str], str]  # vendor -> the prefix of its uuids ("GPU-" for NVIDIA's)


def no_prefix(vendor: str) -> str:
    return ""


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+\.)\s*([KMGT]i?B|B)?\s*$", re.I)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}

# Caps: a scenario describes one node; these are far above any real one and keep a wrong file
# (count: 1000000) from taking minutes and gigabytes.
MAX_SCENARIO_BYTES = 4 << 20
MAX_DEVICES_PER_VENDOR = 64
MAX_GROUPS = 256
MAX_PROCESSES_PER_GROUP = 64
MAX_PROCESSES = 4096  # over all devices
MAX_PODS = 1024
MAX_FAULTS = 1024
MAX_LINKS = 4096
MAX_KERNEL_LOG_LINES = 10000
MAX_LINE = 4096  # characters of a kernel-log line
MAX_STEPS = 10000  # [t, value] pairs of one steps signal
MAX_VALUES = 256  # value fields of one device group
MAX_T = 10 * 365 * 86400.0  # scenario seconds
PID_MAX = 4194304  # Linux's largest pid_max
MAX_NUMA = 1023


class ScenarioError(ValidationError):
    """A scenario file that cannot be used (one line: where and why)."""


def parse_size(v_: Any, where: str) -> float:
    """A finite number, or a string like '80GiB' / '512 MiB' / '1755e6', to a number of bytes."""
    if isinstance(v_, (int, float)) and not isinstance(v_, bool):
        return v.number(where, v_)
    if isinstance(v_, str):
        m = _SIZE.match(v_)
        if m:
            value = float(m.group(1)) * _UNITS[(m.group(2) or "b").lower()]
            if math.isfinite(value):
                return value
    raise ScenarioError(where, f"expected a number or a size, got {v.describe(v_)}", "a number, or a size like 80GiB")


# --------------------------------------------------------------------------- signals


@dataclass(frozen=True)
class Signal:
    """A value as a function of scenario time.

    YAML forms: ``42`` | ``"80GiB"`` | ``{sine: {mean, amplitude, period, phase}}`` |
    ``{ramp: {from, to, period}}`` (sawtooth) | ``{steps: [[t, v], ...]}`` |
    ``{noise: {mean, spread, every}}`` (deterministic pseudo-random, changes every
    ``every`` seconds). Any form accepts ``min``/``max`` clamps."""

    kind: str
    params: Mapping[str, Any]
    key: str = ""  # seeds the noise so two devices do not move in lockstep

    def at(self, t: float) -> float:
        p = self.params
        if self.kind == "const":
            v = p["value"]
        elif self.kind == "sine":
            v = p["mean"] + p.get("amplitude", 0.0) * math.sin(
                2 * math.pi * (t / p.get("period", 60.0)) + p.get("phase", 0.0))
        elif self.kind == "ramp":
            period = p.get("period", 60.0)
            frac = (t % period) / period
            v = p["from"] + (p["to"] - p["from"]) * frac
        elif self.kind == "steps":
            v = p["points"][0][1]
            for when, value in p["points"]:
                if t >= when:
                    v = value
        elif self.kind == "noise":
            bucket = int(t // p.get("every", 10.0))
            h = hashlib.blake2b(f"{self.key}:{bucket}".encode(), digest_size=8).digest()
            u = int.from_bytes(h, "big") / 2**64
            v = p["mean"] + p.get("spread", 0.0) * (2 * u - 1)
        else:  # pragma: no cover - rejected by from_yaml
            raise AssertionError(self.kind)
        if "min" in p:
            v = max(p["min"], v)
        if "max" in p:
            v = min(p["max"], v)
        return v

    @staticmethod
    def from_yaml(spec: Any, where: str, key: str = "") -> "Signal":
        if isinstance(spec, (int, float, str)) and not isinstance(spec, bool):
            return Signal("const", {"value": parse_size(spec, where)}, key)
        kinds = [k for k in spec if k not in ("min", "max")] if isinstance(spec, Mapping) else []
        if len(kinds) != 1 or kinds[0] not in _SIGNAL_PARAMS:
            raise ScenarioError(where, f"not a value: {v.describe(spec)}",
                                "a number, a size, or one of {sine|ramp|steps|noise: ...} with min/max")
        kind = kinds[0]
        body, at = spec[kind], v.join(where, kind)
        clamps = {k: parse_size(spec[k], v.join(where, k)) for k in ("min", "max") if k in spec}
        if kind == "steps":
            pts = v.list_of(at, body, _step, max_items=MAX_STEPS, min_items=1)
            return Signal("steps", {"points": sorted(pts), **clamps}, key)
        allowed, required = _SIGNAL_PARAMS[kind]
        params = {k: parse_size(x, v.join(at, k)) for k, x in v.mapping(at, body, allowed).items()}
        for r in required:
            if r not in params:
                raise ScenarioError(at, f"{kind} needs {r!r}", ", ".join(allowed))
        for r in ("period", "every"):  # divisors of scenario time
            if r in params and params[r] <= 0:
                raise ScenarioError(v.join(at, r), f"must be positive, got {params[r]!r}", "seconds > 0")
        if kind == "sine" and "phase" not in params:
            # devices of one group should not move in lockstep: phase from the key
            h = hashlib.blake2b(key.encode(), digest_size=4).digest()
            params["phase"] = 2 * math.pi * int.from_bytes(h, "big") / 2**32
        return Signal(kind, {**params, **clamps}, key)


# kind -> (its parameters, the required ones)
_SIGNAL_PARAMS = {"sine": (("mean", "amplitude", "period", "phase"), ("mean",)),
                  "ramp": (("from", "to", "period"), ("from", "to")),
                  "noise": (("mean", "spread", "every"), ("mean",)),
                  "steps": ((), ())}


def _step(where: str, pair: Any) -> tuple[float, float]:
    if not isinstance(pair, list) or len(pair) != 2:
        raise ScenarioError(where, f"expected a [t, value] pair, got {v.describe(pair)}", "[seconds, value]")
    return _seconds(f"{where}[0]", pair[0]), parse_size(pair[1], f"{where}[1]")


def _seconds(where: str, x: Any) -> float:
    return v.number(where, x, minimum=0, maximum=MAX_T, unit="scenario seconds")


# --------------------------------------------------------------------------- scenario


@dataclass(frozen=True)
class PodSpec:
    namespace: str
    name: str
    uid: str
    qos: str = "burstable"  # guaranteed | burstable | besteffort
    containers: Mapping[str, str] = field(default_factory=dict)  # container name -> container id
    runtime: str = "containerd"  # containerd | cri-o | docker


@dataclass(frozen=True)
class ProcessSpec:
    pid: int
    name: str
    memory: Signal
    utilization: Optional[Signal] = None
    pod: Optional[str] = None  # "namespace/name"
    container: Optional[str] = None
    cgroup: Optional[str] = None  # explicit /proc/<pid>/cgroup text, overrides pod/container


@dataclass(frozen=True)
class DeviceSpec:
    """One simulated device. ``index`` is vendor-local; ``product`` is the vendor's own
    product string as its tool prints it (the collector normalizes it)."""

    vendor: str
    index: int
    product: str
    uuid: str
    serial: str
    pci_address: str
    numa_node: int
    memory_total_bytes: float
    driver_version: str
    firmware_version: str
    values: Mapping[str, Signal]
    unsupported: frozenset[str]
    processes: tuple[ProcessSpec, ...]
    extra: Mapping[str, Any]  # vendor-specific knobs, read by that vendor's fake only

    def value(self, field: str, t: float) -> Optional[float]:
        """The scenario value of a model field at t, None when unsupported or not given."""
        if field in self.unsupported:
            return None
        sig = self.values.get(field)
        return None if sig is None else sig.at(t)


@dataclass(frozen=True)
class FaultSpec:
    """An injected fault. ``kind`` is vendor-interpreted (each vendor's fake reads its own kinds,
    e.g. a driver event, lost, reset; the fake-tool failure modes are common to CLI vendors);
    ``until`` (optional) ends a condition-like fault."""

    at: float
    vendor: str
    index: int
    kind: str
    code: Optional[str] = None
    until: Optional[float] = None
    message: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)

    def active(self, t: float) -> bool:
        return self.at <= t and (self.until is None or t < self.until)


@dataclass(frozen=True)
class KernelLogLine:
    """A line the simulated kernel prints at scenario time ``at`` (into the simulated ring
    buffer that the kernel-log follower reads, simulate/kernel_log.py)."""

    at: float
    line: str
    priority: int = 3  # syslog level (3 = err)


@dataclass(frozen=True)
class Scenario:
    name: str
    node: str
    devices: tuple[DeviceSpec, ...]
    faults: tuple[FaultSpec, ...] = ()
    pods: tuple[PodSpec, ...] = ()
    links: tuple[Mapping[str, Any], ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)  # vendor-keyed fake settings
    source: str = ""
    kernel_log: tuple[KernelLogLine, ...] = ()

    def devices_of(self, vendor: str) -> list[DeviceSpec]:
        return [d for d in self.devices if d.vendor == vendor]

    def faults_of(self, vendor: str, index: Optional[int] = None) -> list[FaultSpec]:
        return [f for f in self.faults
                if f.vendor == vendor and (index is None or f.index == index)]

    def pod(self, ref: str) -> Optional[PodSpec]:
        for p in self.pods:
            if f"{p.namespace}/{p.name}" == ref:
                return p
        return None

    def vendor_settings(self, vendor: str) -> Mapping[str, Any]:
        return self.settings.get(vendor) or {}


# --------------------------------------------------------------------------- loading


def _uuid(vendor: str, scenario: str, index: int, prefix: UuidPrefix) -> str:
    h = hashlib.sha1(f"{scenario}/{vendor}/{index}".encode()).hexdigest()
    return f"{prefix(vendor)}{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


_PCI = re.compile(r"([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])")


def _pci(base: str, offset: int, where: str) -> str:
    m = _PCI.fullmatch(base.lower())
    if not m:
        raise ScenarioError(where, f"pci_address {base!r} is not like 0000:18:00.0", "DDDD:BB:DD.F")
    bus = int(m.group(2), 16) + offset
    if bus > 0xFF:
        raise ScenarioError(where, "pci bus overflows past ff", "fewer devices or a smaller pci_stride")
    return f"{m.group(1)}:{bus:02x}:{m.group(3)}.{m.group(4)}"


def _text(where: str, x: Any) -> str:
    """A name or version: a string, or a number written unquoted (``driver_version: 6.7``)."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return str(x)
    return v.string(where, x, max_length=256)


def _vendor(where: str, x: Any) -> str:
    return v.string(where, x, pattern=r"[a-z0-9][a-z0-9_-]*", max_length=64)


def _int(lo: int, hi: int) -> Callable[[str, Any], int]:
    return lambda where, x: v.number(where, x, minimum=lo, maximum=hi, integer=True)


_PROCESS_KEYS = ("pid", "name", "memory", "utilization", "pod", "container", "cgroup")


def _process(spec: Mapping[str, Any], where: str, key: str) -> ProcessSpec:
    """A process of a group's device (its keys checked by _group, its pid already offset)."""
    util = spec.get("utilization")
    return ProcessSpec(
        pid=spec["pid"], name=v.optional(spec, where, "name", _text, "python"),
        memory=Signal.from_yaml(spec.get("memory", 0), f"{where}.memory", f"{key}:mem"),
        utilization=None if util is None else Signal.from_yaml(util, f"{where}.utilization", f"{key}:util"),
        pod=v.optional(spec, where, "pod", v.string), container=v.optional(spec, where, "container", v.string),
        cgroup=v.optional(spec, where, "cgroup", v.string, max_length=65536))


_GROUP: dict[str, Callable[[str, Any], Any]] = {
    "vendor": _vendor, "count": _int(1, MAX_DEVICES_PER_VENDOR),
    "product": _text, "model": _text, "uuid": _text, "driver_version": _text, "firmware_version": _text,
    "serial_base": _int(0, 10**18), "pci_address": v.string, "pci_stride": _int(1, 255),
    "numa_nodes": lambda w, x: v.list_of(w, x, _int(-1, MAX_NUMA), max_items=64, min_items=1),
    "memory_total": lambda w, x: v.number(w, parse_size(x, w), minimum=0),
    "values": lambda w, x: v.mapping(w, x, max_items=MAX_VALUES),
    "unsupported": lambda w, x: v.list_of(w, x, v.string, max_items=MAX_VALUES),
    "processes": lambda w, x: v.list_of(w, x, lambda w2, p: v.mapping(w2, p, _PROCESS_KEYS),
                                        max_items=MAX_PROCESSES_PER_GROUP),
    "extra": lambda w, x: v.mapping(w, v.plain(w, x)),
}


def _group(where: str, raw: Any) -> dict:
    """A device group's keys, checked (null = absent); ``vendor`` is required."""
    group = {k: _GROUP[k](v.join(where, k), x) for k, x in v.mapping(where, raw, _GROUP).items() if x is not None}
    if "vendor" not in group:
        raise ScenarioError(where, "'vendor' is required", "vendor: a vendor name (nvidia, amd, ...)")
    for j, p in enumerate(group.get("processes") or ()):
        if "pid" in p:
            _int(1, PID_MAX - 100 * (group.get("count", 1) - 1))(f"{where}.processes[{j}].pid", p["pid"])
    return group


def _devices(group: Mapping[str, Any], where: str, scenario: str, next_index: dict,
             prefix: UuidPrefix) -> list[DeviceSpec]:
    vendor = group["vendor"]
    count = group.get("count", 1)
    numa = group.get("numa_nodes", [0])
    out = []
    for n in range(count):
        index = next_index.get(vendor, 0)
        next_index[vendor] = index + 1
        w = f"{where}[{n}]"
        key = f"{scenario}/{vendor}/{index}"
        values = {name: Signal.from_yaml(spec, f"{w}.values.{name}", f"{key}:{name}")
                  for name, spec in (group.get("values") or {}).items()}
        procs = []
        for j, p in enumerate(group.get("processes") or ()):
            p = dict(p)
            # pids differ per device in a group: pid + 100 * position in the group
            p["pid"] = p.get("pid", 1000) + 100 * n
            if isinstance(p.get("pod"), str) and "{n}" in p["pod"]:
                p["pod"] = p["pod"].replace("{n}", str(n))
            procs.append(_process(p, f"{w}.processes[{j}]", f"{key}:p{j}"))
        mem_total = group.get("memory_total", 16 << 30)
        values.setdefault("memory_total_bytes", Signal("const", {"value": mem_total}))
        out.append(DeviceSpec(
            vendor=vendor, index=index, product=group.get("product", group.get("model", "unknown")),
            uuid=group["uuid"] if count == 1 and group.get("uuid") else _uuid(vendor, scenario, index, prefix),
            serial=str(group.get("serial_base", 1650000000000) + index),
            pci_address=_pci(group.get("pci_address", "0000:18:00.0"), n * group.get("pci_stride", 16), w),
            numa_node=numa[n % len(numa)],
            memory_total_bytes=mem_total,
            driver_version=group.get("driver_version", ""),
            firmware_version=group.get("firmware_version", ""),
            values=values, unsupported=frozenset(group.get("unsupported") or ()),
            processes=tuple(procs),
            extra=dict(group.get("extra") or {})))
    return out


_PLACEHOLDERS = ("{pci}", "{bus}", "{uuid}", "{index}")
_KERNEL_LOG_KEYS = ("at", "line", "vendor", "index", "priority")


def _kernel_log(entries: Any, devices: Sequence[DeviceSpec]) -> tuple[KernelLogLine, ...]:
    """``kernel_log: [{at, line, vendor, index, priority}]``: ``{pci}`` (0000:18:00.0), ``{bus}``
    (0000:18:00, as NVRM prints it), ``{uuid}`` and ``{index}`` in ``line`` are those of device
    ``index`` of ``vendor``. Other braces (amdgpu's ``{12}`` event ids) stay as written."""
    if entries is None:
        return ()
    entries = v.list_of("kernel_log", entries, lambda w, e: v.mapping(w, e, _KERNEL_LOG_KEYS),
                        max_items=MAX_KERNEL_LOG_LINES)
    out = []
    for i, e in enumerate(entries):
        where = f"kernel_log[{i}]"
        if "at" not in e or not isinstance(e.get("line"), str):
            raise ScenarioError(where, "needs at and line", "{at: seconds, line: text, vendor, index, priority}")
        at = _seconds(f"{where}.at", e["at"])
        priority = v.optional(e, where, "priority", _int(0, 7), 3)
        line = v.string(f"{where}.line", e["line"], max_length=MAX_LINE)
        if any(p in line for p in _PLACEHOLDERS):
            dev = next((d for d in devices if d.vendor == e.get("vendor") and d.index == e.get("index")), None)
            if dev is None:
                raise ScenarioError(where, f"the line names {{pci}}/{{bus}}/{{uuid}}/{{index}}: give the vendor "
                                           f"and index of a scenario device (got {e.get('vendor')!r} {e.get('index')!r})")
            line = (line.replace("{pci}", dev.pci_address).replace("{bus}", dev.pci_address.rsplit(".", 1)[0])
                    .replace("{uuid}", dev.uuid).replace("{index}", str(dev.index)))
        out.append(KernelLogLine(at=at, line=line, priority=priority))
    return tuple(sorted(out, key=lambda x: x.at))


_FAULT_FIELDS = ("at", "vendor", "index", "kind", "code", "until", "message")


def _fault(where: str, raw: Any) -> FaultSpec:
    """A fault: its fields checked; every other key is a vendor-interpreted parameter (plain data)."""
    f = v.mapping(where, raw)
    missing = [k for k in ("at", "vendor", "index", "kind") if f.get(k) is None]
    if missing:
        raise ScenarioError(where, f"needs at, vendor, index, kind (missing {', '.join(missing)})")
    return FaultSpec(
        at=_seconds(f"{where}.at", f["at"]), vendor=_vendor(f"{where}.vendor", f["vendor"]),
        index=_int(0, MAX_DEVICES_PER_VENDOR - 1)(f"{where}.index", f["index"]),
        kind=v.string(f"{where}.kind", f["kind"], max_length=64),
        code=v.optional(f, where, "code", _text), until=v.optional(f, where, "until", _seconds),
        message=v.optional(f, where, "message", v.string, ""),
        params={k: v.plain(v.join(where, k), x) for k, x in f.items() if k not in _FAULT_FIELDS})


_POD_KEYS = ("namespace", "name", "uid", "qos", "runtime", "containers")


def _pod(where: str, raw: Any) -> PodSpec:
    p = v.mapping(where, raw, _POD_KEYS)
    missing = [k for k in ("namespace", "name", "uid") if p.get(k) is None]
    if missing:
        raise ScenarioError(where, f"needs namespace, name, uid (missing {', '.join(missing)})")
    containers = v.mapping(f"{where}.containers", p.get("containers") or {}, max_items=64)
    return PodSpec(namespace=v.string(f"{where}.namespace", p["namespace"], max_length=253),
                   name=v.string(f"{where}.name", p["name"], max_length=253),
                   uid=_text(f"{where}.uid", p["uid"]),
                   qos=v.optional(p, where, "qos", v.string, "burstable", choices=("guaranteed", "burstable", "besteffort")),
                   runtime=v.optional(p, where, "runtime", v.string, "containerd", choices=("containerd", "cri-o", "docker")),
                   containers={k: _text(f"{where}.containers.{k}", c) for k, c in containers.items()})


_TOP = ("name", "node", "devices", "faults", "pods", "links", "settings", "kernel_log")


def from_dict(doc: Any, source: str = "", uuid_prefix: UuidPrefix = no_prefix,
              known_vendors: Optional[Collection[str]] = None) -> Scenario:
    """A parsed scenario document -> Scenario; ScenarioError (one line, from ``source``) otherwise.
    ``known_vendors``: the vendor names a device group or a fault may name (the caller's registry:
    the model knows none); None accepts any."""
    try:
        return _from_dict(doc, source, uuid_prefix, known_vendors)
    except ValidationError as e:
        raise e.rebased(ScenarioError, source) from None


def _check_vendors(named: Iterable[tuple[str, str]], known: Collection[str]) -> None:
    """Each (where, vendor) names a known vendor, else a ScenarioError naming the entry."""
    for where, vendor in named:
        if vendor not in known:
            raise ScenarioError(where, f"unknown vendor {vendor!r}", sorted(known))


def _from_dict(doc: Any, source: str, prefix: UuidPrefix, known: Optional[Collection[str]]) -> Scenario:
    doc = v.mapping("", doc, _TOP, extra_prefix="x-")  # x-...: YAML anchors for the groups
    name = v.optional(doc, "", "name", _text) or Path(source).stem or "scenario"
    groups = v.list_of("devices", doc.get("devices") or [], _group, max_items=MAX_GROUPS)
    per_vendor: dict[str, int] = {}
    processes = 0
    for i, g in enumerate(groups):  # caps over all groups, before anything is built
        per_vendor[g["vendor"]] = per_vendor.get(g["vendor"], 0) + g.get("count", 1)
        processes += g.get("count", 1) * len(g.get("processes") or ())
        if per_vendor[g["vendor"]] > MAX_DEVICES_PER_VENDOR:
            raise ScenarioError(f"devices[{i}].count", f"more than {MAX_DEVICES_PER_VENDOR} {g['vendor']} devices in all",
                                f"at most {MAX_DEVICES_PER_VENDOR} devices per vendor")
        if processes > MAX_PROCESSES:
            raise ScenarioError(f"devices[{i}].processes", f"more than {MAX_PROCESSES} processes in all",
                                f"at most {MAX_PROCESSES} processes over all devices")
    if known is not None:
        _check_vendors(((f"devices[{i}].vendor", g["vendor"]) for i, g in enumerate(groups)), known)
    next_index: dict[str, int] = {}
    devices: list[DeviceSpec] = []
    for i, group in enumerate(groups):
        devices.extend(_devices(group, f"devices[{i}]", name, next_index, prefix))
    faults = v.list_of("faults", doc.get("faults") or [], _fault, max_items=MAX_FAULTS)
    if known is not None:
        _check_vendors(((f"faults[{i}].vendor", f.vendor) for i, f in enumerate(faults)), known)
    pods = v.list_of("pods", doc.get("pods") or [], _pod, max_items=MAX_PODS)
    refs = {f"{p.namespace}/{p.name}" for p in pods}
    for d in devices:
        for p in d.processes:
            if p.pod is not None and p.pod not in refs:
                raise ScenarioError(f"{d.vendor}[{d.index}] process {p.pid}", f"unknown pod {p.pod!r}",
                                    ", ".join(sorted(refs)) or "no pods are declared")
    links = v.list_of("links", doc.get("links") or [], lambda w, x: v.mapping(w, v.plain(w, x)), max_items=MAX_LINKS)
    settings = v.mapping("settings", v.plain("settings", doc.get("settings") or {}))
    for vendor, s in settings.items():
        v.mapping(f"settings.{vendor}", s or {})
    return Scenario(name=name, node=v.optional(doc, "", "node", _text, "sim-node"), devices=tuple(devices),
                    faults=tuple(faults), pods=tuple(pods), links=tuple(links),
                    settings=settings, source=source,
                    kernel_log=_kernel_log(doc.get("kernel_log"), devices))


def load_file(path: str, uuid_prefix: UuidPrefix = no_prefix,
              known_vendors: Optional[Collection[str]] = None) -> Scenario:
    """The scenario in the file at ``path`` (at most MAX_SCENARIO_BYTES are read)."""
    try:
        doc = v.load_yaml(v.read_text(path, MAX_SCENARIO_BYTES, "scenario"))
    except ValidationError as e:
        raise e.rebased(ScenarioError) from None
    except ValueError as e:  # validate.NotYaml, or an integer too long to convert
        raise ScenarioError("", f"not valid YAML: {e}", source=path) from None
    return from_dict(doc, path, uuid_prefix, known_vendors)
