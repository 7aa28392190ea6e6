"""What the health stream says, from the judged snapshots: the pure part (no grpc, no clock, no I/O).

``Observer.observe(snapshot, evaluation)`` turns one judged snapshot into an ``Observation``: the
devices whose view changed (``DeviceView``: identity, verdict state and reasons, a quality summary),
the devices gone, and the fault episodes that opened or closed (``EpisodeEvent``).

A device's view changes when its identity, state, reasons (code, class, action, severity, message:
not their counts or times) or quality summary (readings per status, whether its collector answered:
not their ages) change. An episode (``model.episodes``) is one fault code among a device's verdict
reasons while the device is ``failed``, ``degraded`` or ``recovering`` (info reasons are events,
never reasons to report); it closes when the device is shown without it: judged ``ok`` or with
other reasons, removed from the node, or absent while a collector of its vendor answered. Missing
data decides nothing: a device judged ``unknown``, held unhealthy without a named reason, or absent
while no collector of its vendor answered keeps its episodes as they are.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from hetero_exporter.model import DeviceIdentity, DeviceSample, Fault, NodeSnapshot, episodes
from hetero_exporter.model.evaluation import Evaluation

UNHEALTHY = ("failed", "degraded", "recovering")  # states whose reasons are episodes
MAX_DEVICES = 4096  # devices viewed (a node has a few dozen, with partitions a few hundred)
MAX_OPEN = 4096  # open episodes tracked; past it a new one is not (and counted)
MAX_REASONS = 16  # reasons kept per device (the verdict lists the worst first)
MAX_TEXT = 1024  # characters of a message
MAX_NAME = 256  # characters of a code, class, uuid, model, ...


def _clip(text: Optional[str], limit: int = MAX_NAME) -> str:
    return (text or "")[:limit]


@dataclass(frozen=True)
class QualitySummary:
    """A device's readings of one snapshot by quality status, and whether a collector of its
    vendor answered that cycle (None: the snapshot names no collector of it)."""

    readings: int = 0
    ok: int = 0
    stale: int = 0
    error: int = 0
    unsupported: int = 0
    oldest_age_seconds: float = 0.0
    collector_ok: Optional[bool] = None

    @property
    def key(self) -> tuple:
        """What a change of it is (the ages grow every cycle: not one)."""
        return (self.readings, self.ok, self.stale, self.error, self.unsupported, self.collector_ok)


@dataclass(frozen=True)
class DeviceView:
    """One device as the stream shows it: ``observed`` the judged snapshot's time, ``since`` the
    first judged snapshot that showed ``state``."""

    identity: DeviceIdentity
    state: str
    reasons: tuple[Fault, ...]
    quality: QualitySummary
    observed: float
    since: float

    @property
    def uuid(self) -> str:
        return self.identity.uuid

    @property
    def key(self) -> tuple:
        """What a change of the view is (not the counts, times or ages, which move every cycle)."""
        i = self.identity
        reasons = tuple((f.code, f.fault_class, f.action, f.severity, f.message) for f in self.reasons)
        return (i.vendor, i.kind, i.index, i.pci_address, i.model, i.parent, self.state, reasons, self.quality.key)


@dataclass(frozen=True)
class EpisodeEvent:
    """A fault episode opening (``recovered`` False) or closing on a device, at ``time`` (the judged
    snapshot's); ``opened`` is the episode's opening, ``state`` the device's state at the event."""

    episode_id: str
    recovered: bool
    identity: DeviceIdentity
    fault: Fault
    state: str
    time: float
    opened: float
    message: str
    replay: bool = False  # open before the client connected (sent on connect)


@dataclass(frozen=True)
class Observation:
    """What one judged snapshot changed."""

    time: float
    changed: tuple[DeviceView, ...] = ()
    removed: tuple[DeviceIdentity, ...] = ()
    events: tuple[EpisodeEvent, ...] = ()
    untracked: int = 0  # episodes not tracked (MAX_OPEN reached)


def quality_of(d: DeviceSample, answered: Optional[bool]) -> QualitySummary:
    counts = {"ok": 0, "stale": 0, "error": 0, "unsupported": 0}
    oldest = 0.0
    for r in d.readings.values():
        counts[r.quality.status] = counts.get(r.quality.status, 0) + 1
        oldest = max(oldest, r.quality.age_seconds)
    return QualitySummary(len(d.readings), counts["ok"], counts["stale"], counts["error"], counts["unsupported"],
                          oldest, answered)


def _reason(f: Fault) -> Fault:
    return dataclasses.replace(f, code=_clip(str(f.code)), fault_class=_clip(f.fault_class), action=_clip(f.action),
                               message=_clip(f.message, MAX_TEXT), source=_clip(f.source))


def _identity(i: DeviceIdentity) -> DeviceIdentity:
    return DeviceIdentity(i.vendor[:MAX_NAME], i.kind[:MAX_NAME], i.index, _clip(i.uuid), model=_clip(i.model),
                          pci_address=i.pci_address and _clip(i.pci_address), parent=i.parent and _clip(i.parent))


def episode_faults(d: DeviceSample) -> Optional[dict[str, Fault]]:
    """The faults a judged device shows in episodes, by code; None when it says nothing (missing
    data: its episodes hold as they are)."""
    state = d.health.state
    if state == "unknown":
        return None
    if state not in UNHEALTHY:
        return {}
    faults: dict[str, Fault] = {}
    for f in d.health.reasons:
        if f.severity != "info" and str(f.code):
            faults.setdefault(str(f.code), f)
    return faults or None  # held unhealthy without a named fault (hysteresis): nothing said


@dataclass(frozen=True)
class _Open:
    id: str
    identity: DeviceIdentity
    fault: Fault
    opened: float


class Observer:
    """The views and open episodes of the judged snapshots so far. Not thread-safe (the hub locks)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.views: dict[str, DeviceView] = {}
        self.open: dict[tuple[str, str], _Open] = {}
        self.time: Optional[float] = None  # of the last snapshot observed

    def observe(self, snapshot: NodeSnapshot, evaluation: Optional[Evaluation] = None) -> Observation:
        """Fold one judged snapshot in; what it changed."""
        answered: dict[str, bool] = {}  # vendor -> any collector of it answered this cycle
        for c in snapshot.collectors:
            if c.vendor:
                answered[c.vendor] = answered.get(c.vendor, False) or c.ok
        devices = {d.identity.uuid: d for d in list(snapshot.devices)[:MAX_DEVICES] if d.identity.uuid}
        changed = []
        for uuid, d in devices.items():
            view = self._view(d, snapshot.time, answered.get(d.identity.vendor))
            if uuid not in self.views or self.views[uuid].key != view.key:
                changed.append(view)
            self.views[uuid] = view
        removed = tuple(self.views.pop(u).identity for u in [u for u in self.views if u not in devices])
        events, untracked = self._episodes(snapshot, devices, answered, evaluation)
        self.time = snapshot.time
        return Observation(snapshot.time, tuple(changed), removed, tuple(events), untracked)

    def _view(self, d: DeviceSample, t: float, answered: Optional[bool]) -> DeviceView:
        before = self.views.get(d.identity.uuid)
        state = d.health.state
        since = before.since if before is not None and before.state == state else t
        return DeviceView(_identity(d.identity), state, tuple(_reason(f) for f in d.health.reasons[:MAX_REASONS]),
                          quality_of(d, answered), t, since)

    def _episodes(self, snapshot: NodeSnapshot, devices: Mapping[str, DeviceSample], answered: Mapping[str, bool],
                  evaluation: Optional[Evaluation]) -> tuple[list[EpisodeEvent], int]:
        by_device: dict[str, list[str]] = {}
        for uuid, code in self.open:
            by_device.setdefault(uuid, []).append(code)
        removed = {i.uuid for i in snapshot.removed}
        events: list[EpisodeEvent] = []
        untracked = 0
        for uuid in dict.fromkeys([*by_device, *devices]):
            d = devices.get(uuid)
            if d is not None:
                now = episode_faults(d)
            else:  # gone: over when removed, or when its vendor's collector answered without it
                vendor = self.open[(uuid, by_device[uuid][0])].identity.vendor
                now = {} if uuid in removed or answered.get(vendor) else None
            if now is None:
                continue
            change = episodes.change(by_device.get(uuid, ()), now)
            for code in change.closed:
                events.append(self._close(self.open.pop((uuid, code)), d, snapshot.time, evaluation))
            for code in change.opened:
                assert d is not None  # an opening is of a device shown now
                if len(self.open) >= MAX_OPEN:
                    untracked += 1
                    continue
                events.append(self._open(d, now[code], snapshot.time))
        return events, untracked

    def _open(self, d: DeviceSample, f: Fault, t: float) -> EpisodeEvent:
        code = _clip(str(f.code))
        ep_id = hashlib.sha1("\x00".join((self.node, d.identity.uuid, code, repr(t))).encode()).hexdigest()[:20]
        ep = _Open(ep_id, _identity(d.identity), _reason(f), t)
        self.open[(d.identity.uuid, str(f.code))] = ep
        text = f"{code} opened on {d.identity.vendor} {d.identity.kind} {d.identity.index}"
        text += f": {f.message}" if f.message else ""
        return EpisodeEvent(ep.id, False, ep.identity, ep.fault, d.health.state, t, t, text[:MAX_TEXT])

    def _close(self, ep: _Open, d: Optional[DeviceSample], t: float, evaluation: Optional[Evaluation]) -> EpisodeEvent:
        if d is None:
            why, state = "the device is no longer on the node", "unknown"
        else:
            state = d.health.state
            verdict = evaluation.verdicts.get(d.identity.uuid) if evaluation is not None else None
            by = verdict.cleared_by.get(ep.fault.code) if verdict is not None else None
            why = f"cleared by {by} evidence" if by else (
                "the device is healthy" if state == "ok" else "the fault is no longer a reason")
        text = f"{ep.fault.code} recovered on {ep.identity.vendor} {ep.identity.kind} {ep.identity.index}: {why}"
        return EpisodeEvent(ep.id, True, ep.identity, ep.fault, state, t, ep.opened, text[:MAX_TEXT])

    def replay(self, vendors: Iterable[str] = ()) -> list[EpisodeEvent]:
        """The open episodes as openings marked ``replay`` (oldest first), of ``vendors`` (empty: all)."""
        only = frozenset(vendors)
        out = [EpisodeEvent(ep.id, False, ep.identity, ep.fault, self._state(uuid), ep.opened, ep.opened,
                            f"{ep.fault.code} open on {ep.identity.vendor} {ep.identity.kind} {ep.identity.index}",
                            replay=True)
               for (uuid, _), ep in self.open.items() if not only or ep.identity.vendor in only]
        return sorted(out, key=lambda e: e.opened)

    def _state(self, uuid: str) -> str:
        view = self.views.get(uuid)
        return view.state if view is not None else "unknown"
