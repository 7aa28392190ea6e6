"""What one frame of ``top`` shows, from a snapshot: pure data, no terminal.

``build(snapshot, state, now)`` gives the header (node, driver versions per vendor, collector
states, snapshot age), one row per device (MIG and partition children right under their parent)
plus one row per collector that has no device to show for itself (tool missing, timeout), and
the process rows. ``ViewState`` is what the keys change: sort column, vendor filter, processes
shown; its methods return a new state.

Every string in a frame went through ``terminal.printable``: what a vendor tool, the kubelet or
a remote agent wrote is shown as text, never acted on by the terminal. A frame holds at most
``max_rows`` device and process rows (a snapshot of 100,000 processes is not drawn whole); the
counts left out are in the frame.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from hetero_exporter.model import fields as F
from hetero_exporter.model import CollectorStatus, DeviceSample, NodeSnapshot
from hetero_exporter.terminal import printable as _p

SORT_KEYS = ("vendor", "util", "memory", "temp", "power", "state")
# collector outcomes as a row says them (CollectorStatus.error_kind)
COLLECTOR_STATES = {"unavailable": "tool missing", "timeout": "timeout", "late": "late", "busy": "late",
                    "parse": "bad output", "exception": "error"}
MAX_ROWS = 1000  # device + process rows of one frame; a terminal shows fewer, --once prints these
MAX_REASONS = 8  # reasons of one device shown in its fault cell
_STATE_ORDER = {"failed": 0, "recovering": 1, "degraded": 2, "unknown": 3, "late": 4, "ok": 5}


@dataclass(frozen=True)
class ViewState:
    sort: str = "vendor"  # SORT_KEYS
    vendor: Optional[str] = None  # only this vendor's rows; None: every vendor
    processes: bool = True

    def next_sort(self) -> "ViewState":
        return dataclasses.replace(self, sort=SORT_KEYS[(SORT_KEYS.index(self.sort) + 1) % len(SORT_KEYS)])

    def sorted_by(self, key: str) -> "ViewState":
        return dataclasses.replace(self, sort=key) if key in SORT_KEYS else self

    def next_vendor(self, vendors: list[str]) -> "ViewState":
        """Cycle: every vendor, then each vendor of the node in turn."""
        order: list[Optional[str]] = [None, *vendors]
        i = order.index(self.vendor) if self.vendor in order else 0
        return dataclasses.replace(self, vendor=order[(i + 1) % len(order)])

    def toggle_processes(self) -> "ViewState":
        return dataclasses.replace(self, processes=not self.processes)


@dataclass(frozen=True)
class DeviceRow:
    vendor: str
    index: str
    model: str
    uuid: str
    util: Optional[float]  # 0..1
    mem_used: Optional[float]  # bytes
    mem_total: Optional[float]
    temp: Optional[float]  # celsius
    power: Optional[float]  # watts
    power_limit: Optional[float]
    state: str  # ok | degraded | failed | recovering | unknown | late | a collector state (tool missing, ...)
    fault: str = ""  # the active reason(s), or why the collector has no device
    child: bool = False  # a MIG / partition instance, shown under its parent


@dataclass(frozen=True)
class ProcessRow:
    pid: int
    device: str  # vendor:index (vendor:parent/index for a MIG instance)
    name: str
    memory: Optional[float]  # bytes
    util: Optional[float]
    namespace: str
    pod: str
    container: str


@dataclass(frozen=True)
class CollectorLine:
    name: str
    vendor: str
    state: str  # ok or a COLLECTOR_STATES value
    devices: int


@dataclass(frozen=True)
class Frame:
    node: str
    age: Optional[float]  # seconds since the snapshot was taken; None: no snapshot yet
    drivers: tuple[tuple[str, str], ...]  # (vendor, "driver versions / runtime versions")
    collectors: tuple[CollectorLine, ...]
    devices: tuple[DeviceRow, ...]
    processes: tuple[ProcessRow, ...]
    state: ViewState
    vendors: tuple[str, ...]  # every vendor on the node (the filter key cycles through them)
    message: str = ""  # why there is no fresh snapshot (agent unreachable, ...)
    hidden: tuple[int, int] = (0, 0)  # device and process rows left out (more than the frame holds)


def _collector_state(c: CollectorStatus) -> str:
    return "ok" if c.ok else COLLECTOR_STATES.get(c.error_kind or "", "error")


def _late_vendors(snap: NodeSnapshot) -> set[str]:
    return {c.vendor for c in snap.collectors if c.vendor and c.error_kind in ("late", "busy")}


def _row(d: DeviceSample, late: bool) -> DeviceRow:
    i = d.identity
    state = d.health.state
    if late and state == "ok":
        state = "late"  # values carried over from the last cycle that finished
    fault = ", ".join(f"{r.code}: {r.message}" if r.message else r.code for r in d.health.reasons[:MAX_REASONS])
    model = i.model or "-"
    if i.parent is not None and "-MIG-" in model:
        model = "MIG " + model.split("-MIG-", 1)[1]  # the parent's row names the GPU
    return DeviceRow(_p(i.vendor), _p(str(i.index)), _p(model), _p(i.uuid), d.value(F.UTILIZATION),
                     d.value(F.MEMORY_USED), d.value(F.MEMORY_TOTAL), d.value(F.TEMP_CORE), d.value(F.POWER),
                     d.value(F.POWER_LIMIT), state, _p(fault), child=i.parent is not None)


_NUMERIC = {"util": "util", "memory": "mem_used", "temp": "temp", "power": "power"}  # sort key -> field


def _sort_key(key: str):
    """vendor: the node's order (vendor, index); a number: highest first, unknown last; state: worst first."""
    def k(r: DeviceRow) -> tuple:
        natural = (r.vendor, _index(r))
        if key == "state":
            return (_STATE_ORDER.get(r.state, 4), *natural)
        if key in _NUMERIC:
            value = getattr(r, _NUMERIC[key])
            return (value is None, -(value or 0.0), *natural)
        return natural
    return k


def _index(r: DeviceRow) -> tuple:
    return (int(r.index),) if r.index.isdigit() else (1 << 30, r.index)


def _device_rows(snap: NodeSnapshot, state: ViewState) -> list[DeviceRow]:
    late = _late_vendors(snap)
    rows = [_row(d, d.identity.vendor in late) for d in snap.devices]
    parents = [r for r, d in zip(rows, snap.devices) if d.identity.parent is None]
    children: dict[str, list[DeviceRow]] = {}
    for r, d in zip(rows, snap.devices):
        if d.identity.parent is not None:
            children.setdefault(d.identity.parent, []).append(r)
    known = {r.uuid for r in parents}
    orphans = [r for uuid, rs in children.items() if uuid not in known for r in rs]
    out = []
    for p in sorted(parents + orphans, key=_sort_key(state.sort)):
        out.append(p)
        out.extend(sorted(children.get(p.uuid, ()), key=_index) if p in parents else ())
    with_devices = {d.identity.vendor for d in snap.devices}
    for c in snap.collectors:
        if not c.ok and c.vendor and c.vendor not in with_devices:
            out.append(DeviceRow(_p(c.vendor), "-", f"({_p(c.name)})", "", None, None, None, None, None, None,
                                 _collector_state(c), _p(c.error or "", 200)))
    if state.vendor is not None:
        out = [r for r in out if r.vendor == state.vendor]
    return out


def _device_labels(snap: NodeSnapshot) -> dict[str, str]:
    """uuid -> ``vendor:index``, ``vendor:parent/index`` for a MIG or partition instance."""
    index = {d.identity.uuid: d.identity.index for d in snap.devices}
    out = {}
    for d in snap.devices:
        i = d.identity
        parent = index.get(i.parent) if i.parent else None
        out[i.uuid] = _p(f"{i.vendor}:{i.index}" if parent is None else f"{i.vendor}:{parent}/{i.index}")
    return out


def _process_rows(snap: NodeSnapshot, state: ViewState) -> list[ProcessRow]:
    out = []
    labels = _device_labels(snap)
    for d in snap.devices:
        if state.vendor is not None and _p(d.identity.vendor) != state.vendor:
            continue
        for p in d.processes:
            out.append(ProcessRow(p.pid, labels[d.identity.uuid], _p(p.name or ""), p.memory_bytes,
                                  p.utilization_ratio, _p(p.namespace or ""), _p(p.pod or ""),
                                  _p(p.container or "")))
    out.sort(key=lambda p: (-(p.memory or 0), p.pid))
    return out


def _drivers(snap: NodeSnapshot) -> tuple[tuple[str, str], ...]:
    """Per vendor: its driver versions and, after a slash, its runtime versions (CUDA, CANN, ...)."""
    drivers: dict[str, set[str]] = {}
    runtimes: dict[str, set[str]] = {}
    for d in snap.devices:
        i = d.identity
        if i.driver_version:
            drivers.setdefault(i.vendor, set()).add(i.driver_version)
        if i.runtime_version:
            runtimes.setdefault(i.vendor, set()).add(i.runtime_version)
    out = []
    for vendor in sorted(set(drivers) | set(runtimes)):
        text = ", ".join(sorted(drivers.get(vendor, ()))) or "-"
        if vendor in runtimes:
            text += " / " + ", ".join(sorted(runtimes[vendor]))
        out.append((_p(vendor), _p(text)))
    return tuple(out)


def build(snap: Optional[NodeSnapshot], state: ViewState, now: float, message: str = "",
          max_rows: int = MAX_ROWS) -> Frame:
    """The frame for ``snap`` (None: nothing to show yet, ``message`` says why), with at most
    ``max_rows`` device rows and as many process rows as are left of that."""
    message = _p(message, 1000)
    if snap is None:
        return Frame("", None, (), (), (), (), state, (), message or "waiting for the first snapshot")
    collectors = tuple(CollectorLine(_p(c.name), _p(c.vendor or ""), _collector_state(c), c.devices)
                       for c in snap.collectors[:MAX_ROWS])
    vendors = tuple(sorted({_p(d.identity.vendor) for d in snap.devices}
                           | {_p(c.vendor) for c in snap.collectors if c.vendor})[:MAX_ROWS])
    devices = _device_rows(snap, state)
    processes = _process_rows(snap, state) if state.processes else []
    rows = max(0, max_rows)
    shown_devices = devices[:rows]
    shown_processes = processes[:rows - len(shown_devices)]
    hidden = len(devices) - len(shown_devices), len(processes) - len(shown_processes)
    return Frame(_p(snap.node), max(0.0, now - snap.time), _drivers(snap), collectors, tuple(shown_devices),
                 tuple(shown_processes), state, vendors, message, hidden)
