"""Fault episodes of the judged snapshots, and the HealthEvents they make: the pure part of the bridge.

An episode (``model.episodes``) is one fault code active on one device: it opens when a judged
snapshot shows the device ``failed`` or ``degraded`` with that code among the verdict's reasons (info faults are
events only, never reasons to report), and closes when a later judged snapshot no longer does:

- the device is judged ``ok``, or its verdict lists other faults but not this one;
- the device was removed from the node (``NodeSnapshot.removed``), or is absent while a
  collector of its vendor answered (gone from enumeration: a lost device is reported failed
  under its uuid, not left out).

Missing data decides nothing: a device judged ``unknown`` (its collector failed, timed out or
was late: carried over stale), absent while no collector of its vendor answered, or held
``failed``/``degraded`` without a named fault (hysteresis) keeps its episodes as they are:
no recovery because data is missing, no new fault either.

Each opening is one unhealthy event, each closing one recovery (same check name, entities and
error code, the processing strategy of the opening). ``Tracker`` holds the open episodes and
the outbox of events not yet sent, bounded, and their JSON form for the state file (read
back as hostile: every field checked, ``StateError`` otherwise). No I/O, no clock, no grpc.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional

from hetero_exporter.health.detect.policy import shipped_catalogue
from hetero_exporter.health.detect.promote import SOURCE as PROMOTED
from hetero_exporter.model import DeviceSample, Fault, NodeSnapshot, episodes
from hetero_exporter.model.evaluation import Evaluation
from hetero_exporter.model.faults import Catalogue

AGENT = "hetero-exporter"
EVENT_VERSION = 1
# NVSentinel's entity types (its GPU health and syslog monitors name a GPU by these two); the
# same for every vendor, so one fault-quarantine rule matches any accelerator
ENTITY_UUID = "GPU_UUID"
ENTITY_PCI = "PCI"
# the uuid a collector gives a device it could not identify (NVML's lost GPU, the index-only CLI
# layouts): no GPU_UUID NVSentinel could match, so such a device is named by its PCI address alone
_PLACEHOLDER_UUID = re.compile(r"[a-z]+-unidentified-\d+")

# Our recommended actions (model.ACTIONS, the vendors' fault tables) -> NVSentinel's
# RecommendedAction (names of health_event.proto). restart-app: the workload is restarted, the
# device is fine. reset-device: a reset of that one device (NVSentinel's GPU reset, keyed by
# GPU_UUID, which every event carries). reboot-node: RESTART_VM, the reboot NVSentinel's fault
# remediation maps to a node reboot (its own monitors fall back to it when a reset cannot be
# done). contact-support and isolate-device: no automatic repair fixes it; the device is taken
# out of service (a fatal event quarantines the node) until a person looks at it.
RECOMMENDED_ACTION: Mapping[str, str] = {
    "none": "NONE",
    "restart-app": "RESTART_APP",
    "reset-device": "COMPONENT_RESET",
    "reboot-node": "RESTART_VM",
    "contact-support": "CONTACT_SUPPORT",
    "isolate-device": "CONTACT_SUPPORT",
}
UNMAPPED_ACTION = "UNKNOWN"  # an action a plugin's table invents (model.ACTIONS refuses it today)

# Health mode -> ProcessingStrategy: NVSentinel acts only when the agent itself would
PROCESSING_STRATEGY: Mapping[str, str] = {
    "observe": "STORE_ONLY",
    "dry-run": "STORE_ONLY",
    "enforce": "EXECUTE_REMEDIATION",
}
STRATEGIES = frozenset(PROCESSING_STRATEGY.values())

REPORTED_STATES = ("failed", "degraded")
MAX_OPEN = 4096  # open episodes tracked (a node has a few dozen devices)
MAX_CLOSING = 8192  # unsent recoveries a state file may hold (config.NVSENTINEL's max_outbox bound)
MAX_TEXT = 1024  # characters of a message
MAX_NAME = 256  # characters of a uuid, code, check name, model, ...
STATE_FORMAT = "hetero-exporter/nvsentinel-state"
STATE_VERSION = 1
OPEN_STATES = ("pending", "sent", "dropped")  # of the unhealthy event


def recommended_action(action: str) -> str:
    return RECOMMENDED_ACTION.get(action, UNMAPPED_ACTION)


def strategy_of(mode: str) -> str:
    try:
        return PROCESSING_STRATEGY[mode]
    except KeyError:
        raise ValueError(f"health mode {mode!r} is not one of {tuple(PROCESSING_STRATEGY)}") from None


@dataclass(frozen=True)
class Episode:
    """One fault code active on one device, with what its two events say."""

    id: str
    uuid: str
    code: str
    vendor: str
    kind: str
    index: int
    model: str
    pci_address: Optional[str]
    check_name: str  # the node condition's reason for this code (NvidiaXid79)
    fault_class: str
    action: str  # ours (model.ACTIONS)
    fatal: bool  # the device was failed by a critical fault when it opened
    message: str
    opened: float
    strategy: str  # ProcessingStrategy name, kept for the recovery (NVSentinel pairs them)
    open_seq: int
    open_state: str = "pending"  # pending | sent | dropped (the outbox was full)
    restored: bool = False  # read back from the state file (not persisted)

    @property
    def key(self) -> tuple[str, str]:
        return (self.uuid, self.code)


@dataclass(frozen=True)
class Closing:
    """An episode that closed, its recovery not yet sent."""

    episode: Episode
    seq: int
    time: float
    message: str


@dataclass(frozen=True)
class Event:
    """A HealthEvent to send: the opening (unhealthy) or closing (recovery) of an episode."""

    seq: int
    healthy: bool
    episode: Episode
    time: float
    message: str

    @property
    def event_id(self) -> str:
        """The same for every send of this event, across restarts (the episode's id is kept in the
        state file): a store can drop a copy a late answer caused. Opening and recovery differ."""
        return f"{self.episode.id}-{'recovered' if self.healthy else 'opened'}"

    def fields(self, node: str) -> dict[str, Any]:
        """The HealthEvent's fields as plain values (enum fields by name)."""
        ep = self.episode
        entities = [(ENTITY_PCI, ep.pci_address)] if ep.pci_address else []
        if not (entities and _PLACEHOLDER_UUID.fullmatch(ep.uuid)):
            entities.append((ENTITY_UUID, ep.uuid))
        metadata = {"vendor": ep.vendor, "kind": ep.kind, "device_index": str(ep.index), "episode_id": ep.id,
                    "event_id": self.event_id, "fault_class": ep.fault_class, "action": ep.action}
        if ep.model:
            metadata["model"] = ep.model
        return {
            "version": EVENT_VERSION, "agent": AGENT, "componentClass": ep.kind.upper(),
            "checkName": ep.check_name, "isFatal": ep.fatal and not self.healthy, "isHealthy": self.healthy,
            "message": self.message, "errorCode": [ep.code], "entitiesImpacted": entities,
            "recommendedAction": "NONE" if self.healthy else recommended_action(ep.action),
            "metadata": metadata, "generatedTimestamp": self.time, "nodeName": node,
            "processingStrategy": ep.strategy,
        }


def device_name(ident: Any) -> str:
    """``nvidia GPU 3 (GPU-...)``: how the node condition names a device."""
    return f"{ident.vendor} {ident.kind.upper()} {ident.index} ({ident.uuid})"


def default_fault_text(vendor: str, f: Fault, uuid: str) -> str:
    what = f": {f.message}" if f.message else ""
    return f"{f.code}{what} [{f.fault_class}, action {f.action}]"


def reported_faults(d: DeviceSample) -> list[Fault]:
    """The faults an episode is kept for: the verdict's reasons (once per code), info ones left out."""
    seen: dict[str, Fault] = {}
    for f in d.health.reasons:
        if f.severity != "info" and str(f.code) and str(f.code) not in seen:
            seen[str(f.code)] = f
    return list(seen.values())


class Tracker:
    """Open episodes and the outbox of unsent events; ``observe`` folds in one judged snapshot.

    ``condition_reason(vendor, code)``: the node condition's reason (the health policy's
    ``condition_reason``, handed in: the tracker is pure and knows no policy);
    ``fault_text(vendor, fault, uuid)``: the condition's words for a fault (``texts.fault_text``
    with the policy), else ``default_fault_text``; ``catalogue``: what each code means (the
    policy's, with its overrides; else the vendors' tables as shipped), which says whether an
    event is fatal and the action it recommends (``meaning``). Not thread-safe: the bridge locks
    around it."""

    def __init__(self, node: str, mode: str, *, condition_reason: Callable[[str, str], str],
                 fault_text: Optional[Callable[[str, Fault, str], str]] = None, max_outbox: int = 1024,
                 max_open: int = MAX_OPEN, settle_snapshots: int = 0, catalogue: Optional[Catalogue] = None) -> None:
        self.node = node
        self.strategy = strategy_of(mode)
        self.condition_reason = condition_reason
        self.fault_text = fault_text or default_fault_text
        self.catalogue = catalogue if catalogue is not None else shipped_catalogue()
        self.max_outbox = max(1, int(max_outbox))
        self.max_open = max(1, int(max_open))
        self.settle_snapshots = max(0, int(settle_snapshots))
        self.open: dict[tuple[str, str], Episode] = {}
        self.closing: list[Closing] = []
        self.next_seq = 1
        self.snapshots = 0  # judged snapshots observed since this tracker was made
        self.opened_total = 0
        self.closed_total = 0

    # ---- one judged snapshot

    def observe(self, snapshot: NodeSnapshot, evaluation: Optional[Evaluation] = None) -> int:
        """Open and close episodes (``model.episodes``: per device, the codes its verdict shows
        against those open) from one judged snapshot; the number of events dropped (outbox full,
        or too many open episodes to track)."""
        self.snapshots += 1
        devices = {d.identity.uuid: d for d in snapshot.devices if d.identity.parent is None}
        open_codes: dict[str, list[str]] = {}
        for uuid, code in self.open:
            open_codes.setdefault(uuid, []).append(code)
        dropped = 0
        for d in devices.values():
            if d.identity.uuid and d.health.state in REPORTED_STATES:
                faults = {str(f.code): f for f in reported_faults(d)}
                for code in episodes.change(open_codes.get(d.identity.uuid, ()), faults).opened:
                    dropped += self._open(d, faults[code], snapshot.time)
        removed = {i.uuid for i in snapshot.removed}
        answered = {c.vendor for c in snapshot.collectors if c.ok and c.vendor}
        over: dict[tuple[str, str], str] = {}  # (uuid, code) -> why its episode is over
        for uuid, codes in open_codes.items():
            shown = _shown(devices.get(uuid), uuid, self.open[(uuid, codes[0])].vendor, removed, answered)
            if shown is not None:
                over.update({(uuid, code): shown[1] for code in episodes.change(codes, shown[0]).closed})
        cleared = _cleared_by(evaluation)
        for ep in list(self.open.values()):
            why = over.get(ep.key)
            if why is None or (ep.restored and self.snapshots <= self.settle_snapshots):
                continue  # held, or restored and the judge has no debounce history yet: let it confirm
            by = (cleared.get(ep.uuid) or {}).get(ep.code) if ep.uuid in devices else None
            self._close(ep, snapshot.time, f"cleared by {by} evidence" if by else why)
        return dropped + self._bound()

    def _open(self, d: DeviceSample, f: Fault, now: float) -> int:
        if len(self.open) >= self.max_open:
            return 1
        i = d.identity
        code = str(f.code)
        seq = self._seq()
        ep_id = hashlib.sha1("\x00".join((self.node, i.uuid, code, repr(now), str(seq))).encode()).hexdigest()[:20]
        text = f"{device_name(i)}: {self.fault_text(i.vendor, f, i.uuid)}"
        severity, action = self.meaning(i.vendor, f)
        self.open[(i.uuid, code)] = Episode(
            id=ep_id, uuid=i.uuid, code=code, vendor=i.vendor, kind=i.kind, index=i.index, model=i.model or "",
            pci_address=i.pci_address, check_name=self.condition_reason(i.vendor, code)[:MAX_NAME],
            fault_class=f.fault_class, action=action,
            fatal=d.health.state == "failed" and severity == "critical",
            message=text[:MAX_TEXT], opened=now, strategy=self.strategy, open_seq=seq)
        self.opened_total += 1
        return 0

    def meaning(self, vendor: str, f: Fault) -> tuple[str, str]:
        """(severity, action) an event states for one of a device's reasons: the catalogue's for a
        code it knows. The judge makes every reason of a device its collector reports failed
        critical (an Ascend ``Alarm``, a major alarm of severity warning, beside an error code that
        fails the NPU): that says the device failed, not that each of its reasons is fatal. A code
        the catalogue does not know (a threshold rule, repeat-offender) and a promotion
        (``health.promote``: the operator's decision) keep their own."""
        if f.source == PROMOTED:
            return f.severity, f.action
        info = self.catalogue.lookup(vendor, str(f.code))
        return (info.severity, info.action) if info.known else (f.severity, f.action)

    def _close(self, ep: Episode, now: float, why: str) -> None:
        del self.open[ep.key]
        self.closed_total += 1
        if ep.open_state == "dropped":
            return  # nothing was said of it: nothing to take back
        text = f"{device_name(ep)}: {ep.check_name} recovered ({why})"
        self.closing.append(Closing(ep, self._seq(), now, text[:MAX_TEXT]))

    def _seq(self) -> int:
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        return seq

    def _bound(self) -> int:
        """Drop the oldest unsent events beyond ``max_outbox``; how many were dropped. An opening
        dropped takes its episode's pending recovery with it (nothing to take back)."""
        pending = self.pending()
        excess = len(pending) - self.max_outbox
        if excess <= 0:
            return 0
        close_of = {c.episode.open_seq: c.seq for c in self.closing}
        opens: set[int] = set()
        closes: set[int] = set()
        for ev in pending:
            if len(opens) + len(closes) >= excess:
                break
            if ev.healthy:
                closes.add(ev.seq)
            else:
                opens.add(ev.seq)
                if ev.seq in close_of:
                    closes.add(close_of[ev.seq])
        for key, ep in list(self.open.items()):
            if ep.open_state == "pending" and ep.open_seq in opens:
                self.open[key] = dataclasses.replace(ep, open_state="dropped")
        self.closing = [c for c in self.closing if c.seq not in closes]
        return len(opens) + len(closes)

    # ---- the outbox

    def pending(self) -> list[Event]:
        """The events not yet sent, oldest first (an opening always before its closing)."""
        out = [Event(ep.open_seq, False, ep, ep.opened, ep.message) for ep in self.open.values()
               if ep.open_state == "pending"]
        out += [Event(ep.open_seq, False, ep, ep.opened, ep.message) for ep in (c.episode for c in self.closing)
                if ep.open_state == "pending"]
        out += [Event(c.seq, True, c.episode, c.time, c.message) for c in self.closing]
        return sorted(out, key=lambda e: e.seq)

    def mark_sent(self, seqs: Iterable[int]) -> None:
        done = set(seqs)
        for key, ep in list(self.open.items()):
            if ep.open_state == "pending" and ep.open_seq in done:
                self.open[key] = dataclasses.replace(ep, open_state="sent")
        kept = []
        for c in self.closing:
            if c.seq in done:
                continue  # the recovery went: the episode is over
            if c.episode.open_state == "pending" and c.episode.open_seq in done:
                c = dataclasses.replace(c, episode=dataclasses.replace(c.episode, open_state="sent"))
            kept.append(c)
        self.closing = kept

    # ---- the state file's document

    def to_doc(self) -> dict[str, Any]:
        return {"format": STATE_FORMAT, "version": STATE_VERSION, "node": self.node, "next_seq": self.next_seq,
                "open": [_episode_doc(ep) for ep in self.open.values()],
                "closing": [{"episode": _episode_doc(c.episode), "seq": c.seq, "time": c.time, "message": c.message}
                            for c in self.closing]}

    def restore(self, doc: Any) -> int:
        """Take the open episodes and unsent events of a state document (StateError when it is
        not one; nothing changed then). Returns the number of events dropped to fit the outbox.
        A document of another node is ignored (0)."""
        opened, closing, next_seq = parse_doc(doc, self.node, self.max_open)
        if opened is None:
            return 0
        self.open = {ep.key: dataclasses.replace(ep, restored=True) for ep in opened}
        self.closing = [dataclasses.replace(c, episode=dataclasses.replace(c.episode, restored=True)) for c in closing]
        self.next_seq = max(self.next_seq, next_seq)
        return self._bound()


def _shown(d: Optional[DeviceSample], uuid: str, vendor: str, removed: set[str],
           answered: set[str]) -> Optional[tuple[list[str], str]]:
    """The codes a judged snapshot shows active on a device, and why an episode it no longer shows
    is over; None when it says nothing (missing data: the episodes hold as they are)."""
    if d is None:
        if uuid in removed:
            return [], "the device was removed from the node"
        if vendor in answered:
            return [], f"the device is no longer reported by its {vendor} collector"
        return None  # no collector of its vendor answered: nothing is known
    state = d.health.state
    if state == "unknown":
        return None
    if state in REPORTED_STATES:
        codes = [str(f.code) for f in reported_faults(d)]
        return (codes, "the fault is no longer reported") if codes else None  # none named: held
    return [], "the device is healthy" if state == "ok" else "the fault is no longer reported"


def _cleared_by(evaluation: Optional[Evaluation]) -> dict[str, Mapping[str, str]]:
    """uuid -> code -> the evidence that cleared it this poll (the judge's ``Evaluation``)."""
    if evaluation is None:
        return {}
    return {uuid: v.cleared_by for uuid, v in evaluation.verdicts.items() if v.cleared_by}


# --------------------------------------------------------------------------- the state document

class StateError(ValueError):
    """A state document that is not ours (the message names the field)."""


_EPISODE_FIELDS = [f for f in dataclasses.fields(Episode) if f.name != "restored"]


def _episode_doc(ep: Episode) -> dict[str, Any]:
    return {f.name: getattr(ep, f.name) for f in _EPISODE_FIELDS}


def _text(where: str, v: Any, limit: int = MAX_NAME, empty: bool = True) -> str:
    if not isinstance(v, str) or len(v) > limit or (not empty and not v):
        raise StateError(f"{where}: not a string of at most {limit} characters")
    return v


def _int(where: str, v: Any, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum or v > 1 << 62:
        raise StateError(f"{where}: not an integer >= {minimum}")
    return v


def _time(where: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v < 1e11:
        raise StateError(f"{where}: not a time")
    return float(v)


def _episode(where: str, raw: Any) -> Episode:
    if not isinstance(raw, dict) or set(raw) != {f.name for f in _EPISODE_FIELDS}:
        raise StateError(f"{where}: not an episode")
    pci = raw["pci_address"]
    if pci is not None:
        _text(f"{where}.pci_address", pci, 64)
    if not isinstance(raw["fatal"], bool):
        raise StateError(f"{where}.fatal: not a boolean")
    if raw["strategy"] not in STRATEGIES or raw["open_state"] not in OPEN_STATES:
        raise StateError(f"{where}: strategy or open_state unknown")
    return Episode(
        id=_text(f"{where}.id", raw["id"], 64, empty=False), uuid=_text(f"{where}.uuid", raw["uuid"], empty=False),
        code=_text(f"{where}.code", raw["code"], empty=False), vendor=_text(f"{where}.vendor", raw["vendor"], 64, False),
        kind=_text(f"{where}.kind", raw["kind"], 16, False), index=_int(f"{where}.index", raw["index"]),
        model=_text(f"{where}.model", raw["model"]), pci_address=pci,
        check_name=_text(f"{where}.check_name", raw["check_name"], empty=False),
        fault_class=_text(f"{where}.fault_class", raw["fault_class"]), action=_text(f"{where}.action", raw["action"], 64),
        fatal=raw["fatal"],
        message=_text(f"{where}.message", raw["message"], MAX_TEXT), opened=_time(f"{where}.opened", raw["opened"]),
        strategy=raw["strategy"], open_seq=_int(f"{where}.open_seq", raw["open_seq"], 1), open_state=raw["open_state"])


def parse_doc(doc: Any, node: str, max_open: int) -> tuple[Optional[list[Episode]], list[Closing], int]:
    """(open episodes, closings, next seq) of a state document; (None, [], 1) when it is another
    node's; StateError when it is not a state document of this format."""
    if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
        raise StateError(f"format: not {STATE_FORMAT!r}")
    if doc.get("version") != STATE_VERSION:
        raise StateError(f"version: not {STATE_VERSION}")
    if set(doc) != {"format", "version", "node", "next_seq", "open", "closing"}:
        raise StateError("keys: not those of a state document")
    if _text("node", doc["node"]) != node:
        return None, [], 1
    next_seq = _int("next_seq", doc["next_seq"], 1)
    rows, closing_rows = doc["open"], doc["closing"]
    if not isinstance(rows, list) or len(rows) > max_open:
        raise StateError(f"open: not a list of at most {max_open}")
    if not isinstance(closing_rows, list) or len(closing_rows) > MAX_CLOSING:
        raise StateError(f"closing: not a list of at most {MAX_CLOSING}")
    opened = [_episode(f"open[{i}]", r) for i, r in enumerate(rows)]
    if len({ep.key for ep in opened}) != len(opened):
        raise StateError("open: an episode listed twice")
    closing = []
    for i, r in enumerate(closing_rows):
        if not isinstance(r, dict) or set(r) != {"episode", "seq", "time", "message"}:
            raise StateError(f"closing[{i}]: not a closing")
        closing.append(Closing(_episode(f"closing[{i}].episode", r["episode"]), _int(f"closing[{i}].seq", r["seq"], 1),
                               _time(f"closing[{i}].time", r["time"]),
                               _text(f"closing[{i}].message", r["message"], MAX_TEXT)))
    seqs = [ep.open_seq for ep in opened] + [s for c in closing for s in (c.seq, c.episode.open_seq)]
    if len(set(seqs)) != len(seqs) or any(s >= next_seq for s in seqs):
        raise StateError("seq: repeated, or not below next_seq")
    return opened, closing, next_seq
