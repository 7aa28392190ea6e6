"""Announcements: a Warning event when a device shows a new class of fault (an episode of the class,
``model.episodes``, held until the device recovers), a Normal one when it recovers, and the book's
record of what has been announced (``devices``), so a restart does not announce the same fault
again. The node actions of the cycle are folded into these events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from hetero_exporter.health.detect.texts import device_name, event_id, fault_text
from hetero_exporter.health.detect.policy import Policy
from hetero_exporter.health.detect.rules import NodeVerdict, StickyFault, Verdict
from hetero_exporter.health.plan.records import AnnouncedDevice, OutboxEvent
from hetero_exporter.model import DeviceSample, NodeSnapshot, episodes
from hetero_exporter.model.evaluation import GATE_CODE


@dataclass(frozen=True)
class Announcements:
    events: tuple[OutboxEvent, ...]  # one per device change, in device order
    devices: dict[str, AnnouncedDevice]  # the book's new ``devices``
    explain: tuple[str, ...] = ()
    actions: tuple[tuple[str, str], ...] = ()


def announce(name: str, snapshot: NodeSnapshot, verdicts: Mapping[str, Verdict],
             announced: Mapping[str, AnnouncedDevice], policy: Policy, now: float,
             sticky: Optional[Mapping[str, list[StickyFault]]] = None) -> Announcements:
    """New faults and recoveries of the devices, against what ``announced`` (the book) holds."""
    by_uuid = {d.identity.uuid: d for d in snapshot.devices}
    devices = dict(announced)
    events: list[OutboxEvent] = []
    explain: list[str] = []
    for uuid, v in sorted(verdicts.items(), key=lambda kv: (by_uuid[kv[0]].identity.vendor, by_uuid[kv[0]].identity.index)
                          if kv[0] in by_uuid else ("", 0)):
        d = by_uuid.get(uuid)
        if d is None:
            continue
        event: Optional[OutboxEvent]
        if v.state in ("failed", "degraded"):
            record, event, line = _fault(name, d, v, devices.get(uuid), policy, now)
            devices[uuid] = record
        elif devices.get(uuid) is not None and v.state == "ok":
            event, line = _recovery(name, d, v, devices.pop(uuid), now)
        else:
            continue
        if event is not None:
            events.append(event)
            explain.append(line)
    for uuid in list(devices):  # announced devices that are no longer reported at all
        if uuid not in verdicts and uuid not in (sticky or {}):
            devices.pop(uuid)
    return Announcements(events=tuple(events), devices=devices, explain=tuple(explain))


def _fault(name: str, d: DeviceSample, v: Verdict, announced: Optional[AnnouncedDevice], policy: Policy,
           now: float) -> tuple[AnnouncedDevice, Optional[OutboxEvent], str]:
    """The device's new record, and its event when a fault class is new to it. A new fault is a
    new class of problem on the device: a cause and its symptom (a fell-off-the-bus code and
    gpu-lost, both device-lost) are announced once, whichever comes first."""
    uuid = d.identity.uuid
    current = [f for f in v.reasons if f.code != "unreadable"]
    known: set[str] = set(announced.get("classes") or []) if announced else set()
    opened = set(episodes.change(known, (f.fault_class for f in current)).opened)
    fresh = [f for f in current if f.fault_class in opened]
    since = announced["since"] if announced else now
    event: Optional[OutboxEvent] = None
    line = ""
    if fresh:
        text = "; ".join(fault_text(d.identity.vendor, f, policy, uuid) for f in fresh)
        classes = ",".join(sorted(known | {f.fault_class for f in fresh}))
        event = OutboxEvent(id=event_id(name, uuid, "fault", since, classes), type="Warning",
                            reason=policy.condition_reason(d.identity.vendor, fresh[0].code),
                            message=f"{device_name(d)} {v.state}: {text}", action="Fault", time=now)
        line = f"{device_name(d)} is {v.state}: {text}"
    codes: set[str] = set(announced.get("codes") or []) if announced else set()
    record = AnnouncedDevice(codes=sorted(codes | {f.code for f in current}),
                             classes=sorted(known | {f.fault_class for f in current}),
                             state=v.state, since=since, vendor=d.identity.vendor, index=d.identity.index)
    return record, event, line


def _recovery(name: str, d: DeviceSample, v: Verdict, announced: AnnouncedDevice,
              now: float) -> tuple[OutboxEvent, str]:
    # the recovery gate's result is said with it (health/detect/gate.py)
    said = [f"{c}: {v.cleared_by[c]}" if c == GATE_CODE and c in v.cleared_by else c for c in v.cleared]
    why = f" (cleared by evidence: {', '.join(said)})" if v.cleared else ""
    text = f"{device_name(d)} recovered from {', '.join(announced['codes'])}{why}"
    event = OutboxEvent(id=event_id(name, d.identity.uuid, "recovered", announced["since"]), type="Normal",
                        reason="AcceleratorRecovered", message=text, action="Recover", time=now)
    return event, text


def with_node_actions(events: Sequence[OutboxEvent], notes: Sequence[str], name: str, nv: NodeVerdict, now: float,
                      dry_run: bool) -> list[OutboxEvent]:
    """The device events with this cycle's node actions (``notes``) folded into the first, or
    one event for the actions alone; ``[dry-run]`` before each message in dry-run mode."""
    out = [OutboxEvent(**e) for e in events]
    if notes:
        note = "; ".join(notes)
        if out:
            out[0]["message"] += f". Node: {note}"
        else:
            healthy = not nv.unhealthy
            out.append(OutboxEvent(id=event_id(name, "action", note, now), type="Normal" if healthy else "Warning",
                                   reason="AcceleratorTaintRemoved" if healthy else "AcceleratorTaintAdded",
                                   message=f"{note}: {nv.why}", action="Taint", time=now))
    if dry_run:
        for e in out:
            e["message"] = "[dry-run] " + e["message"]
    return out
