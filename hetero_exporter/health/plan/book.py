"""The agent's bookkeeping on its Node (annotation ``<domain>/agent-state``, JSON).

It is what makes the agent safe across restarts: which taint and cordon it added (it removes
nothing else), the faults it has announced (so a restart does not announce them again), the
sticky faults of the rules, the labels it owns, and an outbox of recent events whose names are
fixed before they are sent (a resend is answered AlreadyExists, so no event is written twice).
The per-device records of issue 15 (device taint rules, pod signals, scheduler annotations,
the black-hole detector, the budget slot) are written only when they hold something, so an
older agent's book reads back unchanged and is not rewritten for their sake.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, TypedDict

from hetero_exporter import model
from hetero_exporter.health.detect.rules import StickyFault
from hetero_exporter.health.plan.records import (AnnouncedDevice, BlackHoleState, OccurrenceRecord, OutboxEvent,
                                                 PodRecord, StickyRecord, TaintRecord)
from hetero_exporter.model import Fault
from hetero_exporter.model.evaluation import GateHold, OccurrenceBook, Occurrences

BOOK_VERSION = 1
# fields left out of the JSON while empty (added after version 1 was written)
_OPTIONAL = ("pods", "scheduler", "black_hole", "overrides", "occurrences", "holds")
MAX_OCCURRENCE_DEVICES = 256  # devices with promotion occurrences read back from the Node
MAX_OCCURRENCE_CODES = 64  # codes per device (promote.MAX_CODES)
MAX_OCCURRENCE_TIMES = 1000  # times per code (promote.MAX_COUNT)
MAX_HOLDS = 1024  # devices the recovery gates watch, read back from the Node (gate.MAX_HOLDS)
MAX_SAID = 1024  # characters of a recovering device's reason kept (gate.MAX_ARG)


class HoldRecord(TypedDict, total=False):
    """A device the recovery gate watches (model GateHold): failed since ``failed_at``,
    recovering since ``recovering_since`` (absent while it is still failed), Unix seconds;
    ``said``: the gate's last result as the agent showed it (``health --dry-run`` reads it)."""

    failed_at: float
    recovering_since: float
    said: str


@dataclass
class Book:
    """The agent's record on the Node (annotation ``<domain>/agent-state``)."""

    taint: Optional[TaintRecord] = None  # our taint (None: none added)
    cordoned: bool = False  # the agent set spec.unschedulable
    suppressed: bool = False  # someone removed our taint/cordon: not again until recovery
    refused_since: Optional[float] = None  # the budget refused the taint (episode start)
    labels: list[str] = field(default_factory=list)  # label keys the agent owns
    devices: dict[str, AnnouncedDevice] = field(default_factory=dict)  # uuid -> what was announced
    sticky: dict[str, list[StickyRecord]] = field(default_factory=dict)  # uuid -> sticky faults of the rules
    boot_id: Optional[str] = None
    outbox: list[OutboxEvent] = field(default_factory=list)
    inventory_hash: str = ""
    inventory_time: float = 0.0
    pods: dict[str, PodRecord] = field(default_factory=dict)  # "ns/name" -> pod signal record
    scheduler: dict[str, list[str]] = field(default_factory=dict)  # annotation key -> ids this agent marked
    black_hole: BlackHoleState = field(default_factory=lambda: BlackHoleState())  # the black-hole detector's
    overrides: dict[str, str] = field(default_factory=dict)  # uuid -> the operator's override announced (overrides.py)
    # uuid -> code -> the occurrences health.promote counts (read back by occurrences_from_json)
    occurrences: dict[str, dict[str, OccurrenceRecord]] = field(default_factory=dict)
    holds: dict[str, HoldRecord] = field(default_factory=dict)  # uuid -> the recovery gate's watch (gate.py)
    broken: str = ""  # why the annotation could not be read (then nothing is assumed ours)

    def to_json(self) -> str:
        doc = {k: v for k, v in dataclasses.asdict(self).items()
               if k != "broken" and not (k in _OPTIONAL and not v)}
        doc["v"] = BOOK_VERSION
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, text: Optional[str]) -> "Book":
        if not text:
            return cls()
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or doc.get("v") != BOOK_VERSION:
                raise ValueError(f"unsupported version {doc.get('v') if isinstance(doc, dict) else doc!r}")
            names = {f.name for f in dataclasses.fields(cls)} - {"broken"}
            book = cls(**{k: v for k, v in doc.items() if k in names})
            _check_shapes(book)
            return book
        except (ValueError, TypeError) as e:
            return cls(broken=f"bookkeeping annotation unreadable ({e}); assuming nothing on the node is ours")


def _check_shapes(book: Book) -> None:
    """ValueError when a record is not of its type (a hand-edited or foreign annotation)."""
    if book.taint is not None and not isinstance(book.taint, dict):
        raise ValueError("taint is not an object")
    for name in _OPTIONAL:
        if not isinstance(getattr(book, name), dict):
            raise ValueError(f"{name} is not an object")


def sticky_to_json(items: Mapping[str, list[StickyFault]]) -> dict[str, list[StickyRecord]]:
    out: dict[str, list[StickyRecord]] = {}
    for uuid, faults in sorted(items.items()):
        out[uuid] = [{"fault": model.to_dict(st.fault), "since": st.since, "clear_on": sorted(st.clear_on),
                      "level": st.level, "lost": st.seen_lost, "recovery_pending": st.recovery_pending}
                     for st in faults]
    return out


def sticky_from_json(doc: Mapping[str, Any]) -> dict[str, list[StickyFault]]:
    """Sticky faults read back from the bookkeeping; malformed entries are skipped. ``lost`` (the
    device was really lost since the fault) replaced ``seen_lost``, which older agents set when
    the collector merely said failed: an old entry keeps waiting for evidence (the safe side)."""
    out: dict[str, list[StickyFault]] = {}
    for uuid, items in (doc or {}).items():
        for raw in items or ():
            try:
                f = model.from_dict(Fault, raw["fault"])
                out.setdefault(str(uuid), []).append(StickyFault(
                    fault=f, since=float(raw["since"]), clear_on=frozenset(raw.get("clear_on") or ("boot",)),
                    level=str(raw.get("level", "failed")), seen_lost=bool(raw.get("lost", False)),
                    recovery_pending=bool(raw.get("recovery_pending", False))))
            except (KeyError, TypeError, ValueError):
                continue
    return out


def occurrences_to_json(items: OccurrenceBook) -> dict[str, dict[str, OccurrenceRecord]]:
    return {uuid: {code: OccurrenceRecord(times=list(o.times), active=o.active) for code, o in sorted(codes.items())}
            for uuid, codes in sorted(items.items()) if codes}


def occurrences_from_json(doc: Any) -> dict[str, dict[str, Occurrences]]:
    """The promotion occurrences read back from the bookkeeping (hostile: bounded, a malformed
    entry skipped, times that are no finite numbers dropped). A book without them reads as none."""
    out: dict[str, dict[str, Occurrences]] = {}
    if not isinstance(doc, Mapping):
        return out
    for uuid, codes in list(doc.items())[:MAX_OCCURRENCE_DEVICES]:
        if not isinstance(uuid, str) or not isinstance(codes, Mapping):
            continue
        kept: dict[str, Occurrences] = {}
        for code, raw in list(codes.items())[:MAX_OCCURRENCE_CODES]:
            times = raw.get("times") if isinstance(raw, Mapping) else None
            if not isinstance(code, str) or not isinstance(times, list):
                continue
            good = sorted(float(t) for t in times[-MAX_OCCURRENCE_TIMES:]
                          if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t))
            kept[code] = Occurrences(tuple(good), raw.get("active") is True)
        if kept:
            out[uuid] = kept
    return out


def holds_to_json(holds: Mapping[str, GateHold], said: Mapping[str, str]) -> dict[str, HoldRecord]:
    """The holds as the book keeps them; ``said``: uuid -> the recovering device's reason."""
    out: dict[str, HoldRecord] = {}
    for uuid, h in sorted(holds.items()):
        rec = HoldRecord(failed_at=h.failed_at)
        if h.recovering_since is not None:
            rec["recovering_since"] = h.recovering_since
        if said.get(uuid):
            rec["said"] = said[uuid][:MAX_SAID]
        out[uuid] = rec
    return out


def said_in(doc: Any, uuid: str) -> str:
    """What the agent last said of a recovering device's gate, from the book's holds ('' none)."""
    raw = doc.get(uuid) if isinstance(doc, Mapping) else None
    said = raw.get("said") if isinstance(raw, Mapping) else None
    return said[:MAX_SAID] if isinstance(said, str) and said.isprintable() else ""


def _time(value: Any) -> Optional[float]:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def holds_from_json(doc: Any) -> dict[str, GateHold]:
    """The recovery gates' watch read back from the bookkeeping (hostile: bounded, an entry
    without a finite ``failed_at`` skipped). A book without it reads as none."""
    out: dict[str, GateHold] = {}
    if not isinstance(doc, Mapping):
        return out
    for uuid, raw in list(doc.items())[:MAX_HOLDS]:
        failed_at = _time(raw.get("failed_at")) if isinstance(raw, Mapping) else None
        if not isinstance(uuid, str) or failed_at is None:
            continue
        out[uuid] = GateHold(failed_at, _time(raw.get("recovering_since")) if isinstance(raw, Mapping) else None)
    return out
