"""Simulation scenarios: devices, values over time, processes, pods and injected faults.

A scenario is a YAML file (see scenarios/default.yaml for the annotated format). Values are
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
from typing import Any, Mapping, Optional, Sequence

import yaml

from hetero_exporter import vendors

# libyaml's loader when PyYAML has it: same safe subset, ~10x faster on our data files
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

BUILTIN_DIR = Path(__file__).with_name("scenarios")

_SIZE = re.compile(r"^\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*([KMGT]i?B|B)?\s*$", re.I)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


class ScenarioError(ValueError):
    """A scenario file that cannot be used (message says where and why)."""


def parse_size(v: Any, where: str) -> float:
    """A number, or a string like '80GiB' / '512 MiB', to a number of bytes."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, str):
        m = _SIZE.match(v)
        if m:
            return float(m.group(1)) * _UNITS[(m.group(2) or "b").lower()]
    raise ScenarioError(f"{where}: expected a number or a size like '80GiB', got {v!r}")


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
        if isinstance(spec, Mapping) and len([k for k in spec if k not in ("min", "max")]) == 1:
            kind = next(k for k in spec if k not in ("min", "max"))
            body = spec[kind]
            clamps = {k: parse_size(spec[k], where) for k in ("min", "max") if k in spec}
            if kind == "steps":
                pts = [(float(a), parse_size(b, where)) for a, b in body]
                if not pts:
                    raise ScenarioError(f"{where}: steps needs at least one [t, value] pair")
                return Signal("steps", {"points": sorted(pts), **clamps}, key)
            if kind in ("sine", "ramp", "noise") and isinstance(body, Mapping):
                params = {k: parse_size(v, f"{where}.{k}") for k, v in body.items()}
                if kind == "sine" and "phase" not in params:
                    # devices of one group should not move in lockstep: phase from the key
                    h = hashlib.blake2b(key.encode(), digest_size=4).digest()
                    params["phase"] = 2 * math.pi * int.from_bytes(h, "big") / 2**32
                required = {"sine": ("mean",), "ramp": ("from", "to"), "noise": ("mean",)}[kind]
                for r in required:
                    if r not in params:
                        raise ScenarioError(f"{where}: {kind} needs {r!r}")
                return Signal(kind, {**params, **clamps}, key)
        raise ScenarioError(f"{where}: not a value: {spec!r} (number, size, sine, ramp, steps, noise)")


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


def _uuid(vendor: str, scenario: str, index: int) -> str:
    h = hashlib.sha1(f"{scenario}/{vendor}/{index}".encode()).hexdigest()
    core = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
    spec = vendors.spec(vendor)
    return f"{spec.uuid_prefix if spec is not None else ''}{core}"


def _pci(base: str, offset: int, where: str) -> str:
    m = re.match(r"^([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$", base.lower())
    if not m:
        raise ScenarioError(f"{where}: pci_address {base!r} is not like 0000:18:00.0")
    bus = int(m.group(2), 16) + offset
    if bus > 0xFF:
        raise ScenarioError(f"{where}: pci bus overflows past ff")
    return f"{m.group(1)}:{bus:02x}:{m.group(3)}.{m.group(4)}"


def _process(spec: Mapping[str, Any], where: str, key: str) -> ProcessSpec:
    try:
        pid = int(spec["pid"])
    except (KeyError, TypeError, ValueError):
        raise ScenarioError(f"{where}: a process needs an integer pid") from None
    util = spec.get("utilization")
    return ProcessSpec(
        pid=pid, name=str(spec.get("name", "python")),
        memory=Signal.from_yaml(spec.get("memory", 0), f"{where}.memory", f"{key}:mem"),
        utilization=None if util is None else Signal.from_yaml(util, f"{where}.utilization", f"{key}:util"),
        pod=spec.get("pod"), container=spec.get("container"), cgroup=spec.get("cgroup"))


def _devices(group: Mapping[str, Any], where: str, scenario: str, next_index: dict) -> list[DeviceSpec]:
    vendor = group.get("vendor")
    if not isinstance(vendor, str):
        raise ScenarioError(f"{where}: 'vendor' is required")
    count = int(group.get("count", 1))
    out = []
    for n in range(count):
        index = next_index.get(vendor, 0)
        next_index[vendor] = index + 1
        w = f"{where}[{n}]"
        key = f"{scenario}/{vendor}/{index}"
        values = {name: Signal.from_yaml(spec, f"{w}.values.{name}", f"{key}:{name}")
                  for name, spec in (group.get("values") or {}).items()}
        per_proc = group.get("processes") or []
        procs = []
        for j, p in enumerate(per_proc):
            p = dict(p)
            # pids differ per device in a group: pid + 100 * position in the group
            p["pid"] = int(p.get("pid", 1000)) + 100 * n
            if isinstance(p.get("pod"), str) and "{n}" in p["pod"]:
                p["pod"] = p["pod"].replace("{n}", str(n))
            procs.append(_process(p, f"{w}.processes[{j}]", f"{key}:p{j}"))
        mem_total = parse_size(group.get("memory_total", "16GiB"), f"{w}.memory_total")
        values.setdefault("memory_total_bytes", Signal("const", {"value": mem_total}))
        out.append(DeviceSpec(
            vendor=vendor, index=index, product=str(group.get("product", group.get("model", "unknown"))),
            uuid=str(group.get("uuid") if count == 1 and group.get("uuid") else _uuid(vendor, scenario, index)),
            serial=str(int(group.get("serial_base", 1650000000000)) + index),
            pci_address=_pci(str(group.get("pci_address", "0000:18:00.0")), n * int(group.get("pci_stride", 16)), w),
            numa_node=int(group.get("numa_nodes", [0])[n % len(group.get("numa_nodes", [0]))]),
            memory_total_bytes=mem_total,
            driver_version=str(group.get("driver_version", "")),
            firmware_version=str(group.get("firmware_version", "")),
            values=values, unsupported=frozenset(group.get("unsupported") or ()),
            processes=tuple(procs),
            extra=dict(group.get("extra") or {})))
    return out


_PLACEHOLDERS = ("{pci}", "{bus}", "{uuid}", "{index}")


def _kernel_log(entries: Any, devices: Sequence[DeviceSpec]) -> tuple[KernelLogLine, ...]:
    """``kernel_log: [{at, line, vendor, index, priority}]``: ``{pci}`` (0000:18:00.0), ``{bus}``
    (0000:18:00, as NVRM prints it), ``{uuid}`` and ``{index}`` in ``line`` are those of device
    ``index`` of ``vendor``. Other braces (amdgpu's ``{12}`` event ids) stay as written."""
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise ScenarioError("kernel_log: a list of {at, line, vendor, index}")
    out = []
    for i, e in enumerate(entries):
        where = f"kernel_log[{i}]"
        if not isinstance(e, Mapping) or "at" not in e or not isinstance(e.get("line"), str):
            raise ScenarioError(f"{where}: needs at and line")
        try:
            at, priority = float(e["at"]), int(e.get("priority", 3))
        except (TypeError, ValueError):
            raise ScenarioError(f"{where}: at is seconds, priority 0..7") from None
        line = e["line"]
        if any(p in line for p in _PLACEHOLDERS):
            dev = next((d for d in devices if d.vendor == e.get("vendor") and d.index == e.get("index")), None)
            if dev is None:
                raise ScenarioError(f"{where}: the line names {{pci}}/{{bus}}/{{uuid}}/{{index}}: give the vendor "
                                    f"and index of a scenario device (got {e.get('vendor')!r} {e.get('index')!r})")
            line = (line.replace("{pci}", dev.pci_address).replace("{bus}", dev.pci_address.rsplit(".", 1)[0])
                    .replace("{uuid}", dev.uuid).replace("{index}", str(dev.index)))
        out.append(KernelLogLine(at=at, line=line, priority=priority & 7))
    return tuple(sorted(out, key=lambda x: x.at))


def from_dict(doc: Mapping[str, Any], source: str = "") -> Scenario:
    if not isinstance(doc, Mapping):
        raise ScenarioError(f"{source}: a scenario is a YAML mapping")
    name = str(doc.get("name") or Path(source).stem or "scenario")
    next_index: dict[str, int] = {}
    devices: list[DeviceSpec] = []
    for i, group in enumerate(doc.get("devices") or []):
        devices.extend(_devices(group, f"devices[{i}]", name, next_index))
    faults = []
    for i, f in enumerate(doc.get("faults") or []):
        try:
            faults.append(FaultSpec(
                at=float(f["at"]), vendor=str(f["vendor"]), index=int(f["index"]), kind=str(f["kind"]),
                code=None if f.get("code") is None else str(f["code"]),
                until=None if f.get("until") is None else float(f["until"]),
                message=str(f.get("message", "")),
                params={k: v for k, v in f.items()
                        if k not in ("at", "vendor", "index", "kind", "code", "until", "message")}))
        except (KeyError, TypeError, ValueError) as e:
            raise ScenarioError(f"faults[{i}]: needs at, vendor, index, kind ({e})") from None
    pods = []
    for i, p in enumerate(doc.get("pods") or []):
        try:
            pods.append(PodSpec(namespace=p["namespace"], name=p["name"], uid=p["uid"],
                                qos=p.get("qos", "burstable"), runtime=p.get("runtime", "containerd"),
                                containers=dict(p.get("containers") or {})))
        except (KeyError, TypeError) as e:
            raise ScenarioError(f"pods[{i}]: needs namespace, name, uid ({e})") from None
    refs = {f"{p.namespace}/{p.name}" for p in pods}
    for d in devices:
        for p in d.processes:
            if p.pod is not None and p.pod not in refs:
                raise ScenarioError(f"{d.vendor}[{d.index}] process {p.pid}: unknown pod {p.pod!r}")
    return Scenario(name=name, node=str(doc.get("node", "sim-node")), devices=tuple(devices),
                    faults=tuple(faults), pods=tuple(pods), links=tuple(doc.get("links") or ()),
                    settings=dict(doc.get("settings") or {}), source=source,
                    kernel_log=_kernel_log(doc.get("kernel_log"), devices))


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def load(ref: Optional[str] = None) -> Scenario:
    """A scenario by file path, or by built-in name (default: ``default``)."""
    ref = ref or "default"
    path = Path(ref)
    if not path.is_file():
        path = BUILTIN_DIR / f"{ref}.yaml"
        if not path.is_file():
            raise ScenarioError(
                f"no scenario {ref!r}: not a file, and not one of the built-in scenarios "
                f"({', '.join(builtin_names())})")
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: not valid YAML: {e}") from None
    return from_dict(doc, str(path))
