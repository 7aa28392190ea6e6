"""The events of operators' overrides (health/detect/override.py): one when the agent first
honours an override, one when an override it honoured expires; the book's ``overrides`` (uuid ->
the override announced) makes each once per override, across restarts. The command that sets
or clears an override sends its own event (app/override.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from hetero_exporter.health.detect.override import text
from hetero_exporter.health.detect.texts import event_id, rfc3339
from hetero_exporter.health.plan.records import OutboxEvent
from hetero_exporter.model.evaluation import OverrideNote

HONOURED, EXPIRED = "AcceleratorOverrideHonoured", "AcceleratorOverrideExpired"


@dataclass(frozen=True)
class OverridePlan:
    events: tuple[OutboxEvent, ...]
    honoured: dict[str, str]  # the book's: uuid -> OverrideNote.key of the override announced
    explain: tuple[str, ...] = ()


def plan_overrides(name: str, notes: Sequence[OverrideNote], honoured: Mapping[str, str],
                   devices: Mapping[str, str], now: float) -> OverridePlan:
    """``notes``: the evaluation's overrides; ``honoured``: the book's; ``devices``: uuid -> the
    name of each device of the node (an override of a device not on it is honoured by nobody)."""
    book = {u: k for u, k in honoured.items() if isinstance(u, str) and isinstance(k, str)}
    events: list[OutboxEvent] = []
    explain: list[str] = []
    seen = set()
    for note in notes:
        seen.add(note.uuid)
        device = devices.get(note.uuid)
        if device is None:
            explain.append(f"override of {note.uuid}: no such device on this node; ignored")
            continue
        if not note.expired:
            explain.append(f"{device} {note.state}: {text(note)}")
            if book.get(note.uuid) != note.key:
                book[note.uuid] = note.key
                events.append(OutboxEvent(id=event_id(name, note.uuid, "override", note.key), type="Normal",
                                          reason=HONOURED, message=f"{device} {note.state}: {text(note)}",
                                          action="Override", time=now))
        elif book.get(note.uuid) == note.key:
            del book[note.uuid]
            message = (f"{device}: the override to {note.state} by {note.by} ended at {rfc3339(note.until)}; "
                       "its own verdict holds again")
            explain.append(message)
            events.append(OutboxEvent(id=event_id(name, note.uuid, "override-expired", note.key), type="Normal",
                                      reason=EXPIRED, message=message, action="Override", time=now))
    for uuid in [u for u in book if u not in seen]:  # cleared (health override --clear): the command said so
        del book[uuid]
    return OverridePlan(tuple(events), book, tuple(explain))
