"""An operator's override of a device's health: the Node annotation ``<domain>/health-override``.

``hetero-exporter health override`` writes it (app/override.py); the judge honours it until it
expires (health/detect/verdicts.py). The document, schema version 1::

    {"v": 1, "devices": {"<uuid>": {"state": "ok", "until": "2025-06-01T12:00:00Z",
                                    "reason": "vendor RMA says healthy", "by": "alice",
                                    "at": "2025-06-01T10:00:00Z"}}}

Read back as hostile input: a document over ``MAX_BYTES``, not JSON or of another version is
ignored whole; an entry that is malformed (a state other than ok / failed, a time that is not
RFC 3339, an ``until`` more than ``MAX_FOR_SECONDS`` ahead, text over its bound) or past
``MAX_DEVICES`` is ignored alone; each with a reason (``Overrides.problems``), which the judge
logs once. An expired entry is kept, marked expired: the judge no longer honours it, and the
plan announces its end.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from hetero_exporter.health.detect.texts import parse_rfc3339, rfc3339
from hetero_exporter.model import Fault
from hetero_exporter.model.evaluation import OVERRIDE_CODE, OverrideNote, Verdict

SCHEMA = 1
STATES = ("ok", "failed")
MAX_BYTES = 32 << 10  # the whole annotation (a Node's annotations together may hold 256 KiB)
MAX_DEVICES = 128  # entries read (a node has a few dozen devices, MIG instances included)
MAX_REASON = 256  # characters of a reason
MAX_BY = 128  # characters of who set it
MAX_UUID = 128
MAX_FOR_SECONDS = 30 * 86400.0  # the longest override: a month (the command's --for bound)
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
_TEXT = re.compile(r"[^\x00-\x1f\x7f]*")  # one line of text: no control characters


@dataclass(frozen=True)
class Overrides:
    """The overrides a Node's annotation holds (uuid -> note), and why anything was ignored."""

    notes: Mapping[str, OverrideNote] = dataclasses.field(default_factory=dict)
    problems: tuple[str, ...] = ()


def _time(value: Any) -> Optional[float]:
    return parse_rfc3339(value) if isinstance(value, str) and _TIME.fullmatch(value) else None


def text(note: OverrideNote) -> str:
    """``overridden by <by> until <time>: <reason>``: the reason a verdict shows."""
    return f"overridden by {note.by} until {rfc3339(note.until)}: {note.reason}"


def one_line(value: Any, limit: int) -> Optional[str]:
    """``value`` when it is one line of 1 to ``limit`` characters, else None."""
    return value if isinstance(value, str) and 0 < len(value) <= limit and _TEXT.fullmatch(value) else None


def _entry(uuid: Any, raw: Any, now: float) -> tuple[Optional[OverrideNote], str]:
    """One entry, or why it is ignored."""
    if not isinstance(uuid, str) or one_line(uuid, MAX_UUID) is None:
        return None, f"an entry's device is not a uuid of at most {MAX_UUID} characters"
    if not isinstance(raw, dict):
        return None, f"entry {uuid}: not an object"
    state, until, at = raw.get("state"), _time(raw.get("until")), _time(raw.get("at")) if "at" in raw else 0.0
    reason, by = one_line(raw.get("reason"), MAX_REASON), one_line(raw.get("by"), MAX_BY)
    if state not in STATES:
        return None, f"entry {uuid}: state must be one of {', '.join(STATES)}"
    if until is None or at is None:
        return None, f"entry {uuid}: until (and at) must be times like 2025-06-01T12:00:00Z"
    if until - now > MAX_FOR_SECONDS:
        return None, f"entry {uuid}: until is more than {MAX_FOR_SECONDS / 86400:g} days ahead"
    if reason is None or by is None:
        return None, (f"entry {uuid}: reason (at most {MAX_REASON} characters) and by (at most {MAX_BY}) "
                      "must be one line of text each")
    return OverrideNote(uuid, str(state), until, reason, by, at, expired=until <= now), ""


def parse(text: Optional[str], now: float) -> Overrides:
    """The overrides of the annotation's value (None: no annotation), ``now`` judging expiry."""
    if text is None:
        return Overrides()
    if len(text) > MAX_BYTES:  # characters: at least as many bytes; cheap before decoding
        return Overrides(problems=(f"larger than {MAX_BYTES} bytes; ignored",))
    try:
        doc = json.loads(text)
    except ValueError:
        return Overrides(problems=("not JSON; ignored",))
    if not isinstance(doc, dict) or doc.get("v") != SCHEMA or not isinstance(doc.get("devices"), dict):
        return Overrides(problems=(f"not a version {SCHEMA} document with devices; ignored",))
    notes: dict[str, OverrideNote] = {}
    problems: list[str] = []
    for i, (uuid, raw) in enumerate(doc["devices"].items()):
        if i >= MAX_DEVICES:
            problems.append(f"more than {MAX_DEVICES} devices; the rest ignored")
            break
        note, why = _entry(uuid, raw, now)
        if note is None:
            problems.append(why + "; ignored")
        else:
            notes[note.uuid] = note
    return Overrides(notes, tuple(problems))


def to_json(notes: Mapping[str, OverrideNote]) -> str:
    """The annotation's value holding ``notes`` (compact, sorted: the same notes, the same text)."""
    devices = {u: {"state": n.state, "until": rfc3339(n.until), "reason": n.reason, "by": n.by, "at": rfc3339(n.at)}
               for u, n in sorted(notes.items())}
    return json.dumps({"v": SCHEMA, "devices": devices}, sort_keys=True, separators=(",", ":"))


def fault(note: OverrideNote) -> Fault:
    """The reason a verdict shows for an honoured override (``last_seen``: when it ends)."""
    return Fault(code=OVERRIDE_CODE, fault_class=OVERRIDE_CODE, action="none", message=text(note),
                 first_seen=note.at or None, last_seen=note.until,
                 severity="critical" if note.state == "failed" else "info", source="health.override")


def apply(verdicts: Mapping[str, Verdict], notes: Mapping[str, OverrideNote], now: float) -> dict[str, Verdict]:
    """The verdicts with each unexpired override honoured: ``ok`` lifts a failed, degraded or
    recovering verdict (an unknown device stays unknown: nothing of it was read), ``failed``
    fails the device; the override is the first reason. The rules' own state is untouched, so
    the device's own verdict holds again once the override expires or is cleared."""
    out = dict(verdicts)
    for uuid, note in notes.items():
        v = out.get(uuid)
        if v is None or note.until <= now:
            continue
        if note.state == "ok" and v.state in ("ok", "unknown"):
            out[uuid] = dataclasses.replace(v, override=note)
            continue
        kept = tuple(r for r in v.reasons if r.code != OVERRIDE_CODE) if note.state == "failed" else ()
        out[uuid] = dataclasses.replace(v, state=note.state, reasons=(fault(note),) + kept, node_level=False,
                                        override=note)
    return out


def current(notes: Mapping[str, OverrideNote], now: float) -> tuple[OverrideNote, ...]:
    """Every note with ``expired`` as of ``now`` (the evaluation's), in uuid order."""
    return tuple(dataclasses.replace(n, expired=n.until <= now) for _, n in sorted(notes.items()))
