"""What the agent should do to its Node now: a pure function of the Node as read, the snapshot
with its verdicts, the agent's own bookkeeping on the Node, and the configuration.

``plan(...) -> Plan``: a strategic-merge patch for the Node (taints, cordon, labels, the inventory and
bookkeeping annotations), a strategic-merge patch for the ``AcceleratorUnhealthy`` condition,
the events to send, and a line of explanation per decision. health/remedy.py applies it;
``hetero-exporter health --dry-run`` prints it.

Bookkeeping (annotation ``<domain>/agent-state``, JSON) is what makes the agent safe across
restarts: which taint and cordon it added (it removes nothing else), the faults it has announced
(so a restart does not announce them again), the sticky faults of the rules, the labels it owns,
and an outbox of recent events whose names are fixed before they are sent (sending one again is
answered AlreadyExists, so no event is written twice).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from hetero_exporter import model
from hetero_exporter.health import faults as fault_tables
from hetero_exporter.health.policy import Policy
from hetero_exporter.health.rules import NodeVerdict, StickyFault, Verdict
from hetero_exporter.model import DeviceSample, Fault, NodeSnapshot

MODES = ("observe", "dry-run", "enforce")
CONDITION_TYPE = "AcceleratorUnhealthy"
BOOK_VERSION = 1
# keys of the config's health section that are not remedy settings
OTHER_HEALTH_KEYS = frozenset({"policy", "pci_presence", "udev"})
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class RemedyConfig:
    """``health:`` section of the agent config (see README: Health and Kubernetes)."""

    mode: str = "observe"
    domain: str = "hetero-exporter.io"
    cordon: bool = False  # opt-in: also mark the node unschedulable
    no_execute: bool = False  # opt-in: also a NoExecute taint (evicts pods without a toleration)
    inventory: bool = True  # the devices annotation and the selection labels
    condition_heartbeat_seconds: float = 300.0
    inventory_heartbeat_seconds: float = 120.0
    inventory_max_bytes: int = 65536
    budget_max_fraction: float = 0.1  # share of accelerator nodes that may carry the taint
    budget_min_nodes: int = 1  # this many may always carry it, whatever the fleet size
    outbox_seconds: float = 1800.0  # below the API server's 1 h event TTL
    outbox_max: int = 40
    conflict_retries: int = 3
    resync_seconds: float = 60.0  # re-read the Node at least this often when nothing changed

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], mode: Optional[str] = None) -> "RemedyConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known - OTHER_HEALTH_KEYS)
        if unknown:
            raise ValueError(f"health: unknown keys {unknown}; known: {sorted(known | OTHER_HEALTH_KEYS)}")
        cfg = cls(**{k: v for k, v in raw.items() if k in known})
        if mode is not None:
            cfg = dataclasses.replace(cfg, mode=mode)
        if cfg.mode not in MODES:
            raise ValueError(f"health.mode must be one of {MODES}, got {cfg.mode!r}")
        if not re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?", cfg.domain):
            raise ValueError(f"health.domain {cfg.domain!r} is not a DNS subdomain")
        if not 0.0 <= float(cfg.budget_max_fraction) <= 1.0:
            raise ValueError("health.budget_max_fraction must be between 0 and 1")
        return cfg

    @property
    def taint_key(self) -> str:
        return f"{self.domain}/accelerator-unhealthy"

    @property
    def devices_annotation(self) -> str:
        return f"{self.domain}/devices"

    @property
    def book_annotation(self) -> str:
        return f"{self.domain}/agent-state"

    @property
    def present_label(self) -> str:
        return f"{self.domain}/accelerator"

    @property
    def effects(self) -> tuple[str, ...]:
        return ("NoSchedule", "NoExecute") if self.no_execute else ("NoSchedule",)


# --------------------------------------------------------------------------- bookkeeping


@dataclass
class Book:
    """The agent's record on the Node (annotation ``<domain>/agent-state``)."""

    taint: Optional[dict] = None  # {"value", "effects": [...], "since", "applied": bool}
    cordoned: bool = False  # the agent set spec.unschedulable
    suppressed: bool = False  # someone removed our taint/cordon: not again until recovery
    refused_since: Optional[float] = None  # the budget refused the taint (episode start)
    labels: list[str] = field(default_factory=list)  # label keys the agent owns
    devices: dict[str, dict] = field(default_factory=dict)  # uuid -> announced {codes, state, since, ...}
    sticky: dict[str, list[dict]] = field(default_factory=dict)  # uuid -> sticky faults of the rules
    boot_id: Optional[str] = None
    outbox: list[dict] = field(default_factory=list)  # {id, type, reason, message, action, time}
    inventory_hash: str = ""
    inventory_time: float = 0.0
    broken: str = ""  # why the annotation could not be read (then nothing is assumed ours)

    def to_json(self) -> str:
        doc = {k: v for k, v in dataclasses.asdict(self).items() if k != "broken"}
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
            if book.taint is not None and not isinstance(book.taint, dict):
                raise ValueError("taint is not an object")
            return book
        except (ValueError, TypeError) as e:
            return cls(broken=f"bookkeeping annotation unreadable ({e}); assuming nothing on the node is ours")


def sticky_to_json(items: Mapping[str, list[StickyFault]]) -> dict[str, list[dict]]:
    out = {}
    for uuid, faults in sorted(items.items()):
        out[uuid] = [{"fault": model.to_dict(st.fault), "since": st.since, "clear_on": sorted(st.clear_on),
                      "level": st.level, "seen_lost": st.seen_lost} for st in faults]
    return out


def sticky_from_json(doc: Mapping[str, Any]) -> dict[str, list[StickyFault]]:
    """Sticky faults read back from the bookkeeping; malformed entries are skipped."""
    out: dict[str, list[StickyFault]] = {}
    for uuid, items in (doc or {}).items():
        for raw in items or ():
            try:
                f = model.from_dict(Fault, raw["fault"])
                out.setdefault(str(uuid), []).append(StickyFault(
                    fault=f, since=float(raw["since"]), clear_on=frozenset(raw.get("clear_on") or ("boot",)),
                    level=str(raw.get("level", "failed")), seen_lost=bool(raw.get("seen_lost", False))))
            except (KeyError, TypeError, ValueError):
                continue
    return out


# --------------------------------------------------------------------------- text


def rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(s: Any) -> Optional[float]:
    try:
        return datetime.datetime.strptime(str(s), "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
    except ValueError:
        return None


def label_value(s: str) -> str:
    """A valid label value (<= 63 chars, alphanumeric at both ends)."""
    v = _LABEL_VALUE.sub("-", s)[:63].strip("-_.")
    return v or "unknown"


def device_name(d: DeviceSample) -> str:
    i = d.identity
    return f"{i.vendor} {i.kind.upper()} {i.index} ({i.uuid})"


def fault_text(vendor: str, f: Fault, policy: Policy, uuid: str = "") -> str:
    """``<code>: <catalogue description> [device-lost, action reboot-node]``. The collector's
    message is added when it says more than the catalogue, not when it only names the device
    again (``uuid``), which the text around it does already."""
    table = policy.tables.get(vendor) or fault_tables.table(vendor)
    info = table.lookup(f.code)
    prefix = policy.code_prefix(vendor)
    name = f"{prefix.upper()} {f.code}" if prefix and str(f.code).isdigit() else str(f.code)
    what = info.description if info.known and info.description else (f.message or "")
    repeats = bool(uuid) and uuid in (f.message or "")
    if f.message and info.known and f.message not in what and not repeats:
        what = f"{what} ({f.message})" if what else f.message
    return f"{name}: {what} [{f.fault_class}, action {f.action}]" if what else f"{name} [{f.fault_class}, action {f.action}]"


def _event_id(*parts: Any) -> str:
    return hashlib.sha1("\x00".join(str(p) for p in parts).encode()).hexdigest()[:20]


# --------------------------------------------------------------------------- inventory


def inventory(snapshot: NodeSnapshot, max_bytes: int) -> tuple[str, str, list[str]]:
    """The devices annotation (compact schema-1 JSON within ``max_bytes``), its fingerprint
    (what matters for change: not the time or moving readings) and what was left out to fit."""
    doc = model.compact_document(snapshot)
    dropped: list[str] = []
    for what, shrink in (
            ("links", lambda d: [dev.update(links=[]) for dev in d["devices"]]),
            ("collectors", lambda d: d.update(collectors=[])),
            ("fault history", lambda d: [dev.update(faults=[]) for dev in d["devices"]]),
            ("readings", lambda d: [dev.update(readings={k: v for k, v in dev["readings"].items()
                                                         if k in ("memory_free_bytes", "utilization_ratio")})
                                    for dev in d["devices"]]),
            ("profiles", lambda d: [dev.update(profile=None) for dev in d["devices"]])):
        text = json.dumps(doc, separators=(",", ":"), sort_keys=True, allow_nan=False)
        if len(text.encode()) <= max_bytes:
            break
        shrink(doc)
        dropped.append(what)
    text = json.dumps(doc, separators=(",", ":"), sort_keys=True, allow_nan=False)
    if len(text.encode()) > max_bytes:
        doc = {"schema": model.SCHEMA_VERSION, "node": snapshot.node, "time": snapshot.time, "devices": [],
               "truncated": f"{len(snapshot.devices)} devices do not fit in {max_bytes} bytes"}
        dropped.append("devices")
        text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    # What makes a change worth a write: who is there and how they are, not moving values.
    significant = {
        "expected": snapshot.expected,
        "collectors": sorted((c.name, c.ok) for c in snapshot.collectors),
        "devices": [(d.identity, d.profile, d.links, d.health.state,
                     sorted((f.code, f.fault_class, f.action) for f in d.health.reasons),
                     sorted((f.code, f.count) for f in d.faults)) for d in snapshot.devices],
        "dropped": dropped,
    }
    fingerprint = hashlib.sha1(repr(significant).encode()).hexdigest()[:16]
    return text, fingerprint, dropped


def selection_labels(snapshot: NodeSnapshot, domain: str) -> dict[str, str]:
    """Vendor presence and count, model, driver major version, profile features."""
    by_vendor: dict[str, list[DeviceSample]] = {}
    for d in snapshot.devices:
        if d.identity.parent is None:
            by_vendor.setdefault(d.identity.vendor, []).append(d)
    out: dict[str, str] = {}
    if by_vendor:
        out[f"{domain}/accelerator"] = "true"
    for vendor, devs in sorted(by_vendor.items()):
        v = label_value(vendor).lower()
        out[f"{domain}/{v}"] = "true"
        out[f"{domain}/{v}.count"] = str(len(devs))
        models = sorted({d.identity.model for d in devs if d.identity.model})
        if models:
            common = max(models, key=lambda m: sum(d.identity.model == m for d in devs))
            out[f"{domain}/{v}.model"] = label_value(common)
        drivers = sorted({d.identity.driver_version for d in devs if d.identity.driver_version})
        if drivers:
            out[f"{domain}/{v}.driver-major"] = label_value(drivers[0].lstrip("v").split(".")[0])
        for feat in sorted({f for d in devs if d.profile for f in d.profile.features}):
            out[f"{domain}/feature.{label_value(feat).lower()}"] = "true"
    return out


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Budget:
    """What the budget check saw: accelerator nodes and how many carry the taint (others)."""

    total: int
    tainted: int
    error: Optional[str] = None  # the count could not be taken: refuse (safe side)
    checked: bool = True  # False: a report without cluster access (nothing is written)

    @classmethod
    def unchecked(cls) -> "Budget":
        return cls(0, 0, checked=False)

    def allows(self, cfg: RemedyConfig) -> bool:
        if not self.checked:
            return True
        if self.error is not None:
            return False
        limit = max(cfg.budget_min_nodes, int(cfg.budget_max_fraction * self.total))
        return self.tainted + 1 <= limit

    def describe(self, cfg: RemedyConfig) -> str:
        if not self.checked:
            return "the budget was not checked (no cluster access)"
        if self.error is not None:
            return f"the budget could not be checked ({self.error})"
        limit = max(cfg.budget_min_nodes, int(cfg.budget_max_fraction * self.total))
        return (f"{self.tainted} of {self.total} accelerator nodes already carry the taint; "
                f"the budget allows {limit} ({cfg.budget_max_fraction:.0%}, at least {cfg.budget_min_nodes})")


@dataclass
class Plan:
    node: str
    mode: str
    node_patch: Optional[dict] = None  # strategic merge patch of metadata/spec (with the book)
    status_patch: Optional[dict] = None  # strategic merge patch of status.conditions
    condition: Optional[dict] = None  # the condition we want (whether or not it is written)
    events: list[dict] = field(default_factory=list)  # outbox entries added by this plan
    actions: list[tuple[str, str]] = field(default_factory=list)  # (action, what) for metrics
    explain: list[str] = field(default_factory=list)
    budget_refused: bool = False
    book: Book = field(default_factory=Book)

    @property
    def writes(self) -> bool:
        return self.node_patch is not None or self.status_patch is not None


def needs_budget(nv: NodeVerdict, book: Book, cfg: RemedyConfig) -> bool:
    """True when the plan would add the taint now (then the caller counts tainted nodes)."""
    if not nv.unhealthy or book.suppressed or cfg.mode == "observe":
        return False
    if book.taint is None:
        return True
    return cfg.mode == "enforce" and not book.taint.get("applied")


def plan(node: Mapping[str, Any], snapshot: NodeSnapshot, verdicts: Mapping[str, Verdict], nv: NodeVerdict,
         policy: Policy, cfg: RemedyConfig, now: float, *, budget: Optional[Budget] = None,
         sticky: Optional[Mapping[str, list[StickyFault]]] = None) -> Plan:
    meta = node.get("metadata") or {}
    name = meta.get("name") or snapshot.node
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    spec = node.get("spec") or {}
    old_book = Book.from_annotation(annotations.get(cfg.book_annotation))
    book = Book.from_annotation(annotations.get(cfg.book_annotation))
    book.broken = ""
    p = Plan(node=name, mode=cfg.mode, book=book)
    if old_book.broken:
        p.explain.append(old_book.broken)
    if not snapshot.devices and cfg.book_annotation not in annotations:
        # a node without accelerators (the DaemonSet runs everywhere): nothing to say about it
        p.explain.append("no accelerator on this node and nothing of this agent's on the Node: nothing to write")
        return p
    enforce = cfg.mode == "enforce"
    by_uuid = {d.identity.uuid: d for d in snapshot.devices}
    action_notes: list[str] = []

    # ---- announced faults: new ones get a Warning event, recovered devices a Normal one
    device_events: list[dict] = []
    for uuid, v in sorted(verdicts.items(), key=lambda kv: (by_uuid[kv[0]].identity.vendor, by_uuid[kv[0]].identity.index)
                          if kv[0] in by_uuid else ("", 0)):
        d = by_uuid.get(uuid)
        if d is None:
            continue
        announced = book.devices.get(uuid)
        if v.state in ("failed", "degraded"):
            # A new fault is a new class of problem on the device: a cause and its symptom
            # (a fell-off-the-bus code and gpu-lost, both device-lost) are announced once,
            # whichever comes first.
            current = [f for f in v.reasons if f.code != "unreadable"]
            known = set(announced.get("classes") or []) if announced else set()
            fresh = [f for f in current if f.fault_class not in known]
            if fresh:
                head = fresh[0]
                text = "; ".join(fault_text(d.identity.vendor, f, policy, uuid) for f in fresh)
                since = announced["since"] if announced else now
                device_events.append({
                    "id": _event_id(name, uuid, "fault", since, ",".join(sorted(known | {f.fault_class for f in fresh}))),
                    "type": "Warning", "reason": policy.condition_reason(d.identity.vendor, head.code),
                    "message": f"{device_name(d)} {v.state}: {text}", "action": "Fault", "time": now})
                p.explain.append(f"{device_name(d)} is {v.state}: {text}")
            codes = set(announced.get("codes") or []) if announced else set()
            book.devices[uuid] = {"codes": sorted(codes | {f.code for f in current}),
                                  "classes": sorted(known | {f.fault_class for f in current}),
                                  "state": v.state, "since": announced["since"] if announced else now,
                                  "vendor": d.identity.vendor, "index": d.identity.index}
        elif announced is not None and v.state == "ok":
            why = f" (cleared by evidence: {', '.join(v.cleared)})" if v.cleared else ""
            device_events.append({
                "id": _event_id(name, uuid, "recovered", announced["since"]),
                "type": "Normal", "reason": "AcceleratorRecovered",
                "message": f"{device_name(d)} recovered from {', '.join(announced['codes'])}{why}",
                "action": "Recover", "time": now})
            p.explain.append(f"{device_name(d)} recovered from {', '.join(announced['codes'])}{why}")
            del book.devices[uuid]
    for uuid in list(book.devices):  # announced devices that are no longer reported at all
        if uuid not in verdicts and uuid not in (sticky or {}):
            book.devices.pop(uuid)

    # ---- the taint (and opt-in cordon)
    taints = [dict(t) for t in spec.get("taints") or [] if isinstance(t, dict)]
    ours = {(cfg.taint_key, e) for e in ((book.taint or {}).get("effects") or [])} if book.taint else set()
    on_node = {(t.get("key"), t.get("effect")) for t in taints}
    if enforce and book.taint and book.taint.get("applied") and not (ours & on_node) and nv.unhealthy:
        book.suppressed = True  # someone removed the taint we added: respect it until recovery
        p.explain.append("the taint this agent added was removed by someone else: not adding it again "
                         "until the accelerators recover")
    if not nv.unhealthy:
        book.suppressed = False
    want_value = label_value(nv.taint_class or "unhealthy") if nv.unhealthy else None
    refused = False
    if nv.unhealthy and not book.suppressed:
        if needs_budget(nv, book, cfg):
            if budget is None or not budget.allows(cfg):  # no budget given: refuse (safe side)
                refused = True
            else:
                book.refused_since = None
                if not budget.checked:
                    p.explain.append(budget.describe(cfg))
    if refused:
        p.budget_refused = True
        why = budget.describe(cfg) if budget is not None else "the budget was not checked"
        p.explain.append(f"taint refused by the blast-radius budget: {why}")
        p.actions.append(("taint", "refused"))
        if book.refused_since is None:
            book.refused_since = now
            p.events.append({"id": _event_id(name, "budget", now), "type": "Warning",
                             "reason": "AcceleratorTaintBudgetExhausted",
                             "message": f"not tainting {name} ({nv.why}): {why}", "action": "Taint", "time": now})
    elif not nv.unhealthy:
        book.refused_since = None

    new_taints = taints
    if nv.unhealthy and not refused and not book.suppressed:
        tv = f"{cfg.taint_key}={want_value}:{'+'.join(cfg.effects)}"
        if enforce:
            new_taints = []
            placed = set()
            for t in taints:
                k = (t.get("key"), t.get("effect"))
                if k in ours:
                    if t.get("effect") in cfg.effects:
                        new_taints.append({**t, "value": want_value})
                        placed.add(t.get("effect"))
                    continue  # an effect we added that is no longer configured
                new_taints.append(t)
            for e in cfg.effects:
                if e in placed:
                    continue
                if (cfg.taint_key, e) in on_node:  # a taint with our key that we did not add: leave it
                    p.explain.append(f"{cfg.taint_key}:{e} is already on the node and was not added by this agent")
                    continue
                new_taints.append({"key": cfg.taint_key, "value": want_value, "effect": e})
                placed.add(e)
            if placed:
                adding = not (book.taint and book.taint.get("applied"))
                if adding or (book.taint or {}).get("value") != want_value:
                    p.actions.append(("taint", tv))
                    action_notes.append(f"tainted the node {tv}")
                book.taint = {"value": want_value, "effects": sorted(placed), "applied": True,
                              "since": (book.taint or {}).get("since") or now}
            else:  # someone else's taint with our key already keeps pods away: nothing of ours
                book.taint = None
        else:
            if not book.taint or book.taint.get("value") != want_value:
                p.actions.append(("taint", f"dry-run {tv}"))
                action_notes.append(f"would taint the node {tv} (dry-run)")
            book.taint = {"value": want_value, "effects": list(cfg.effects), "applied": False,
                          "since": (book.taint or {}).get("since") or now}
        p.explain.append(f"node unhealthy: {nv.why} -> taint {tv}")
    elif not nv.unhealthy and book.taint:
        if book.taint.get("applied"):
            if enforce and ours & on_node:
                new_taints = [t for t in taints if (t.get("key"), t.get("effect")) not in ours]
                p.actions.append(("untaint", f"{cfg.taint_key}"))
                action_notes.append(f"removed the taint {cfg.taint_key}")
            elif enforce:
                p.explain.append(f"the taint {cfg.taint_key} this agent added is already gone")
            else:
                p.explain.append(f"the taint {cfg.taint_key} added in enforce mode stays: mode is {cfg.mode}")
        else:
            action_notes.append(f"would remove the taint {cfg.taint_key} (dry-run)")
            p.actions.append(("untaint", "dry-run"))
        if enforce or not book.taint.get("applied"):
            book.taint = None
    if not nv.unhealthy:
        p.explain.append(f"node healthy: {nv.why}")

    unschedulable = None
    if cfg.cordon and enforce:
        cordoned_now = bool(spec.get("unschedulable"))
        if nv.unhealthy and not refused and not book.suppressed and not book.cordoned:
            if cordoned_now:
                p.explain.append("the node is already cordoned (not by this agent): leaving it")
            else:
                unschedulable = True
                book.cordoned = True
                p.actions.append(("cordon", name))
                action_notes.append("cordoned the node")
        elif not nv.unhealthy and book.cordoned:
            if cordoned_now:
                unschedulable = False
                p.actions.append(("uncordon", name))
                action_notes.append("uncordoned the node")
            book.cordoned = False
        elif book.cordoned and not cordoned_now and nv.unhealthy:
            book.suppressed = True
            book.cordoned = False
            p.explain.append("the node was uncordoned by someone else: not cordoning it again until recovery")

    # ---- events: one per device change, with this cycle's actions folded in
    if action_notes:
        note = "; ".join(action_notes)
        if device_events:
            device_events[0]["message"] += f". Node: {note}"
        else:
            healthy = not nv.unhealthy
            device_events.append({"id": _event_id(name, "action", note, now), "type": "Normal" if healthy else "Warning",
                                  "reason": "AcceleratorTaintRemoved" if healthy else "AcceleratorTaintAdded",
                                  "message": f"{note}: {nv.why}", "action": "Taint", "time": now})
    if cfg.mode == "dry-run":
        for ev in device_events:
            ev["message"] = "[dry-run] " + ev["message"]
    p.events = device_events + p.events

    # ---- condition
    failed = [by_uuid[u] for u in nv.failed if u in by_uuid]
    if failed:
        first = failed[0]
        v = verdicts[first.identity.uuid]
        head = v.reasons[0] if v.reasons else Fault(code="failed")
        reason = policy.condition_reason(first.identity.vendor, head.code)
        parts = [f"{device_name(d)}: " + "; ".join(fault_text(d.identity.vendor, f, policy, d.identity.uuid)
                                                    for f in verdicts[d.identity.uuid].reasons[:3])
                 for d in failed]
        message = " | ".join(parts) + f". Node: {nv.why}"
        if refused:
            message += " (taint refused by the blast-radius budget)"
        status = "True"
    else:
        reason = "AcceleratorsDegraded" if nv.degraded else "AcceleratorsHealthy"
        status = "False"
        message = nv.why
    message = message[:1024]
    current = next((c for c in (node.get("status") or {}).get("conditions") or []
                    if isinstance(c, dict) and c.get("type") == CONDITION_TYPE), None)
    same = current is not None and (current.get("status"), current.get("reason"), current.get("message")) == (
        status, reason, message)
    beat = parse_rfc3339(current.get("lastHeartbeatTime")) if current else None
    due = beat is None or now - beat >= cfg.condition_heartbeat_seconds
    transition = current.get("lastTransitionTime") if current and current.get("status") == status else None
    cond = {"type": CONDITION_TYPE, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": rfc3339(now), "lastTransitionTime": transition or rfc3339(now)}
    p.condition = cond
    if enforce and (not same or due):
        p.status_patch = {"status": {"conditions": [cond]}}
        if not same:
            p.actions.append(("condition", f"{status} {reason}"))

    # ---- inventory annotation and labels
    new_labels: dict[str, Optional[str]] = {}
    new_annotations: dict[str, Optional[str]] = {}
    if cfg.inventory and cfg.mode != "observe":
        text, fp, dropped = inventory(snapshot, cfg.inventory_max_bytes)
        if fp != book.inventory_hash or now - book.inventory_time >= cfg.inventory_heartbeat_seconds \
                or cfg.devices_annotation not in annotations:
            new_annotations[cfg.devices_annotation] = text
            book.inventory_hash, book.inventory_time = fp, now
            p.actions.append(("annotation", f"{len(text.encode())} bytes"))
            if dropped:
                p.explain.append(f"devices annotation: left out {', '.join(dropped)} to stay within "
                                 f"{cfg.inventory_max_bytes} bytes")
        want = selection_labels(snapshot, cfg.domain)
        owned = set(book.labels)
        for k, val in want.items():
            if labels.get(k) == val:
                continue
            if k in labels and k not in owned:
                p.explain.append(f"label {k} is set by someone else: leaving it")
                continue
            new_labels[k] = val
            owned.add(k)
        for k in sorted(owned - set(want)):
            if k in labels:
                new_labels[k] = None
            owned.discard(k)
        book.labels = sorted(owned & (set(want) | set(new_labels)))
        if new_labels:
            p.actions.append(("labels", ",".join(sorted(new_labels))))

    # ---- bookkeeping: sticky faults, boot id, outbox
    if sticky is not None:
        book.sticky = sticky_to_json(sticky)
    book.boot_id = snapshot.boot_id or book.boot_id
    book.outbox = [e for e in book.outbox if now - float(e.get("time", 0)) < cfg.outbox_seconds] + p.events
    book.outbox = book.outbox[-cfg.outbox_max:]
    if cfg.mode != "observe":
        new_book = book.to_json()
        changed_book = new_book != annotations.get(cfg.book_annotation)
        # the inventory timestamps alone do not justify a write
        if changed_book or new_annotations or new_labels or new_taints != taints or unschedulable is not None:
            new_annotations[cfg.book_annotation] = new_book
            patch: dict[str, Any] = {"metadata": {"annotations": new_annotations}}
            if new_labels:
                patch["metadata"]["labels"] = new_labels
            if enforce and new_taints != taints:
                patch["spec"] = {"taints": new_taints or None}
            if unschedulable is not None:
                patch.setdefault("spec", {})["unschedulable"] = unschedulable if unschedulable else None
            p.node_patch = patch
    return p
