"""What to tell the pods that hold a failed device: a pod condition, an event, opt-in eviction.

A Job restarts a pod from its checkpoint without counting the failure when the pod carries a
condition its ``podFailurePolicy`` names (``onPodConditions``), so a pod holding a failed device
gets ``<domain>/AcceleratorHealthy=False`` (reason as the node condition's, e.g. ``NvidiaXid79``;
message naming each failed device and its fault), a Warning event ``AcceleratorFailed`` and,
opt-in, an eviction (the Eviction API honours PodDisruptionBudgets). On recovery the condition
turns ``True`` and a Normal event ``AcceleratorRecovered`` says which devices are back.

Who holds a device: the kubelet's PodResources allocations and process attribution on the
snapshot's devices; a MIG instance of a failed GPU counts as failed.

``plan_pod_signals(...) -> PodSignalPlan``. Pure: no I/O, no clock (``now`` is passed); dry-run is
the caller's business (it prints the plan instead of writing it).

The book (``PodSignalPlan.book``, pod "namespace/name" -> record) is what makes this safe across
restarts: the plan repeats nothing the book says was done (the same condition is not written
again unless its message changed; events have fixed ids, so a resend is AlreadyExists). The caller
keeps the new book only for writes that landed: ``settle(plan, old_book, ...)`` makes the next
plan redo a condition write that failed (a lost write is redone) and keeps an eviction that was
refused (a PodDisruptionBudget) pending. A recovered pod's record stays, status "True", for
``RECOVERED_KEEP_SECONDS`` and is then dropped. A pod that is gone from the snapshot
while its device is still failed keeps its record: the caller drops it when the API answers 404.
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterable, Mapping, Optional

from hetero_exporter.health.detect.texts import _event_id, device_name, fault_text
from hetero_exporter.health.detect.policy import Policy
from hetero_exporter.health.detect.rules import Verdict
from hetero_exporter.model import DeviceSample, Fault, NodeSnapshot
from hetero_exporter.model.keys import DEFAULT_DOMAIN, Keys
from hetero_exporter.health.plan.records import PodRecord

MAX_DEVICES = 256
MAX_PODS = 1024
MAX_MESSAGE = 1024
RECOVERED_KEEP_SECONDS = 600.0
FAILED_REASON = "AcceleratorFailed"
RECOVERED_REASON = "AcceleratorRecovered"
HEALTHY_REASON = "AcceleratorsHealthy"


# pods written (condition, event, eviction) in one reconcile, the rest next cycle; at most half the
# book's outbox (RemedyConfig.outbox_max, 40), which holds each cycle's events until they are sent
MAX_PODS_PER_CYCLE = 20
EVICT_BACKOFF_FIRST = 10.0  # seconds after the first failed eviction call
EVICT_BACKOFF_MAX = 600.0

@dataclass(frozen=True)
class PodSignalSettings:
    """``conditions``/``events``: write them; ``evict``: opt-in eviction of pods on a failed device."""

    domain: str = DEFAULT_DOMAIN
    conditions: bool = True
    events: bool = True
    evict: bool = False
    # the devices whose failure evicts their pods, by their class (health.classes); None: ``evict`` for all
    evict_devices: Optional[frozenset[str]] = None

    def evicts(self, bad: Iterable[str]) -> bool:
        """Whether a pod holding these failed devices is evicted."""
        return self.evict if self.evict_devices is None else any(u in self.evict_devices for u in bad)

    @property
    def condition_type(self) -> str:
        return Keys(self.domain).pod_condition


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str = ""  # "" when unknown: the caller reads it before a write with a uid precondition


@dataclass(frozen=True)
class PodCondition:
    """One condition to write through pods/status (strategic merge on ``type``)."""

    namespace: str
    name: str
    uid: str
    type: str
    status: str  # "False" | "True"
    reason: str
    message: str


@dataclass(frozen=True)
class PodEvent:
    """An event on the pod; ``id`` is fixed per episode (a resend is AlreadyExists)."""

    namespace: str
    name: str
    uid: str
    id: str
    type: str  # Warning | Normal
    reason: str
    message: str


@dataclass
class PodSignalPlan:
    conditions: list[PodCondition] = field(default_factory=list)
    events: list[PodEvent] = field(default_factory=list)
    evictions: list[PodRef] = field(default_factory=list)
    book: dict[str, PodRecord] = field(default_factory=dict)
    explain: list[str] = field(default_factory=list)
    actions: list[tuple[str, str]] = field(default_factory=list)  # (action, what) for metrics
    deferred: int = 0  # pods whose signals wait for the next cycle (MAX_PODS_PER_CYCLE)
    written_pods: int = 0  # pods this plan writes to

    @property
    def writes(self) -> bool:
        return bool(self.conditions or self.events or self.evictions)


@dataclass
class _Holder:
    uid: str = ""
    devices: set[str] = field(default_factory=set)


def _holders(snapshot: NodeSnapshot) -> tuple[dict[str, _Holder], bool]:
    """"namespace/name" -> the pod's uid (when attribution knows it) and the devices it holds;
    True when the pod bound cut the list."""
    pods: dict[str, _Holder] = {}
    cut = False
    for d in snapshot.devices[:MAX_DEVICES]:
        refs = [(a.namespace, a.pod, "") for a in d.allocations] + [
            (p.namespace, p.pod, p.pod_uid or "") for p in d.processes if p.namespace and p.pod]
        for ns, name, uid in refs:
            if not ns or not name:
                continue
            key = f"{ns}/{name}"
            if key not in pods and len(pods) >= MAX_PODS:
                cut = True
                continue
            h = pods.setdefault(key, _Holder())
            h.devices.add(d.identity.uuid)
            h.uid = h.uid or uid
    return pods, cut


def _failed_verdicts(snapshot: NodeSnapshot, verdicts: Mapping[str, Verdict]) -> dict[str, Verdict]:
    """uuid -> the verdict that fails it: its own, or its parent's (a MIG instance of a failed GPU)."""
    out = {u: v for u, v in verdicts.items() if v.state == "failed"}
    for d in snapshot.devices[:MAX_DEVICES]:
        parent = d.identity.parent
        if d.identity.uuid not in out and parent in out:
            out[d.identity.uuid] = out[parent]
    return out


def _record(raw: Any) -> Optional[PodRecord]:
    """A book record as a previous process left it, or None when malformed."""
    if not isinstance(raw, Mapping):
        return None
    devices = raw.get("devices") or []
    if not isinstance(devices, list):
        return None
    try:
        rec = PodRecord(uid=str(raw.get("uid") or ""), devices=[str(u) for u in devices[:MAX_DEVICES]],
                        since=float(raw["since"]), status=str(raw["status"]), reason=str(raw.get("reason") or ""),
                        message=str(raw.get("message") or "")[:MAX_MESSAGE], evicted=bool(raw.get("evicted", False)),
                        recovered_at=None if raw.get("recovered_at") is None else float(raw["recovered_at"]),
                        evict_failures=max(0, min(int(raw.get("evict_failures") or 0), 64)),
                        evict_retry_at=float(raw.get("evict_retry_at") or 0.0))
    except (KeyError, TypeError, ValueError):
        return None
    recovered = rec["recovered_at"]
    times = (rec["since"], rec["evict_retry_at"]) + (() if recovered is None else (recovered,))
    return rec if rec["status"] in ("True", "False") and all(math.isfinite(t) for t in times) else None


def _text(uuids: list[str], by_uuid: Mapping[str, DeviceSample], failed: Mapping[str, Verdict],
          policy: Policy) -> tuple[str, str]:
    """(reason, message) of a pod holding these failed devices, as the node condition says them."""
    parts = []
    reason = ""
    for uuid in uuids:
        d, v = by_uuid[uuid], failed[uuid]
        head = v.reasons[0] if v.reasons else Fault(code="failed")
        reason = reason or policy.condition_reason(d.identity.vendor, head.code)
        faults = "; ".join(fault_text(d.identity.vendor, f, policy, uuid) for f in v.reasons[:3]) or "failed"
        parts.append(f"{device_name(d)}: {faults}")
    return reason, " | ".join(parts)[:MAX_MESSAGE]


def _name(uuid: str, by_uuid: Mapping[str, DeviceSample]) -> str:
    return device_name(by_uuid[uuid]) if uuid in by_uuid else uuid


def _read_book(book_pods: Any, explain: list[str]) -> dict[str, PodRecord]:
    book: dict[str, PodRecord] = {}
    malformed = 0
    for key, raw in list(book_pods.items())[:MAX_PODS] if isinstance(book_pods, Mapping) else []:
        rec = _record(raw)
        if rec is None or not isinstance(key, str) or key.count("/") != 1:
            malformed += 1
            continue
        book[key] = rec
    if malformed:
        explain.append(f"{malformed} malformed pod record(s) in the book skipped")
    return book


def _failing(p: PodSignalPlan, key: str, uid: str, rec: Optional[PodRecord], bad: list[str], reason: str,
             message: str, cfg: PodSignalSettings, now: float) -> PodRecord:
    """Signals for a pod holding failed devices; its new record."""
    ns, name = key.split("/", 1)
    ongoing = rec if rec is not None and rec["status"] == "False" else None
    since = ongoing["since"] if ongoing else now
    new = PodRecord(uid=uid, devices=bad, since=since, status="False", reason=reason, message=message,
                    evicted=bool(ongoing and ongoing["evicted"]), recovered_at=None,
                    evict_failures=ongoing["evict_failures"] if ongoing else 0,
                    evict_retry_at=ongoing["evict_retry_at"] if ongoing else 0.0)
    if not (ongoing and (ongoing["reason"], ongoing["message"]) == (reason, message)):
        p.explain.append(f"pod {key} holds failed {message}")
        if cfg.conditions:
            p.conditions.append(PodCondition(ns, name, uid, cfg.condition_type, "False", reason, message))
            p.actions.append(("pod-condition", f"{key} False {reason}"))
    if cfg.events and not (ongoing and set(ongoing["devices"]) == set(bad)):  # once per episode and device set
        p.events.append(PodEvent(ns, name, uid, _event_id(ns, name, uid, ",".join(bad), since), "Warning",
                                 FAILED_REASON, message))
        p.actions.append(("event", f"{key} {FAILED_REASON}"))
    evict = cfg.evicts(bad)
    if evict and not new["evicted"] and now < new["evict_retry_at"]:
        p.explain.append(f"pod {key}: eviction failed {new['evict_failures']} time(s); retried in "
                         f"{new['evict_retry_at'] - now:.0f} s")
    elif evict and not new["evicted"]:
        p.evictions.append(PodRef(ns, name, uid))
        new["evicted"] = True
        p.actions.append(("evict", key))
        p.explain.append(f"pod {key} evicted (opt-in): it holds a failed device")
    return new


def _recovering(p: PodSignalPlan, key: str, uid: str, rec: PodRecord, by_uuid: Mapping[str, DeviceSample],
                cfg: PodSignalSettings, now: float) -> PodRecord:
    """Signals for a pod whose failed devices are back; its new record."""
    ns, name = key.split("/", 1)
    back = ", ".join(_name(u, by_uuid) for u in rec["devices"]) or "its devices"
    message = f"{back} recovered"[:MAX_MESSAGE]
    p.explain.append(f"pod {key}: {message}")
    if cfg.conditions:
        p.conditions.append(PodCondition(ns, name, uid, cfg.condition_type, "True", HEALTHY_REASON, message))
        p.actions.append(("pod-condition", f"{key} True {HEALTHY_REASON}"))
    if cfg.events:
        p.events.append(PodEvent(ns, name, uid, _event_id(ns, name, uid, "recovered", rec["since"]), "Normal",
                                 RECOVERED_REASON, message))
        p.actions.append(("event", f"{key} {RECOVERED_REASON}"))
    return {**rec, "uid": uid, "status": "True", "reason": HEALTHY_REASON, "message": message, "recovered_at": now}


def plan_pod_signals(node: str, snapshot: NodeSnapshot, verdicts: Mapping[str, Verdict],
                     book_pods: Mapping[str, PodRecord],
                     policy: Policy, cfg: PodSignalSettings, now: float) -> PodSignalPlan:
    """Conditions, events and evictions for the pods on this node's failed devices, and the new book.

    ``book_pods``: the book a previous plan returned (possibly from a previous process);
    ``now``: Unix seconds."""
    p = PodSignalPlan()
    by_uuid = {d.identity.uuid: d for d in snapshot.devices[:MAX_DEVICES]}
    failed = {u: v for u, v in _failed_verdicts(snapshot, verdicts).items() if u in by_uuid}
    holders, cut = _holders(snapshot)
    if cut:
        p.explain.append(f"more than {MAX_PODS} pods hold devices on {node}: the rest are not signalled")
    old = _read_book(book_pods, p.explain)
    book: dict[str, PodRecord] = {}
    for key in sorted(set(holders) | set(old)):
        held, rec = holders.get(key), old.get(key)
        devices = held.devices if held is not None else (rec["devices"] if rec else ())
        bad = sorted((u for u in devices if u in failed),
                     key=lambda u: (by_uuid[u].identity.vendor, by_uuid[u].identity.index, u))
        if rec is not None and held is not None and held.uid and rec["uid"] and held.uid != rec["uid"]:
            rec = None  # a new pod with the same name: a new episode
        uid = (held.uid if held else "") or (rec["uid"] if rec else "")
        if bad and held is None:  # gone from the snapshot: judged by the devices it held
            p.explain.append(f"pod {key} is gone from the snapshot while {_name(bad[0], by_uuid)} is still "
                             "failed: its record stays until the API says the pod is gone")
            if rec is not None:  # always: a pod not in the snapshot is one of the book's
                book[key] = rec
        elif bad:
            reason, message = _text(bad, by_uuid, failed, policy)
            _bounded(p, key, rec, book, functools.partial(_failing, p, key, uid, rec, bad, reason, message, cfg, now))
        elif rec is not None and rec["status"] == "False" and any(u not in by_uuid for u in rec["devices"]):
            # a device it held is not seen this cycle: unknown is not recovered
            p.explain.append(f"pod {key}: {', '.join(u for u in rec['devices'] if u not in by_uuid)} "
                             "not seen this cycle: its condition stays")
            book[key] = rec
        elif rec is not None and rec["status"] == "False":
            _bounded(p, key, rec, book, functools.partial(_recovering, p, key, uid, rec, by_uuid, cfg, now))
        elif rec is not None and now - (rec["recovered_at"] or 0.0) < RECOVERED_KEEP_SECONDS:
            book[key] = rec  # recovered: the record is kept a while, then dropped
    if p.deferred:
        p.explain.append(f"{p.deferred} more pod(s) to signal: {MAX_PODS_PER_CYCLE} per cycle, the rest next cycle")
    p.book = dict(sorted(book.items())[:MAX_PODS])
    return p


def _bounded(p: PodSignalPlan, key: str, rec: Optional[PodRecord], book: dict[str, PodRecord],
             signal: Callable[[], PodRecord]) -> None:
    """Plan one pod's signals, unless MAX_PODS_PER_CYCLE pods are written already: then the pod
    keeps the record it had (none: it is planned as new next cycle) and counts as deferred, so a
    GPU shared by hundreds of pods is written in bounded steps, each pod once per episode."""
    mark = (len(p.conditions), len(p.events), len(p.evictions), len(p.actions), len(p.explain))
    new = signal()
    if (len(p.conditions), len(p.events), len(p.evictions)) == mark[:3]:
        book[key] = new  # nothing to write for it this cycle
        return
    if p.written_pods < MAX_PODS_PER_CYCLE:
        p.written_pods += 1
        book[key] = new
        return
    del p.conditions[mark[0]:], p.events[mark[1]:], p.evictions[mark[2]:], p.actions[mark[3]:], p.explain[mark[4]:]
    p.deferred += 1
    if rec is not None:
        book[key] = rec


def eviction_backoff(failures: int) -> float:
    """Seconds before the next eviction try after ``failures`` failed calls (10 s doubling, 10 min at most)."""
    return min(EVICT_BACKOFF_MAX, EVICT_BACKOFF_FIRST * 2.0 ** max(0, failures - 1))


def settle(plan: PodSignalPlan, old_book: Mapping[str, PodRecord], failed_conditions: Collection[str] = (),
           refused_evictions: Collection[str] = (), failed_evictions: Collection[str] = (),
           now: float = 0.0) -> dict[str, PodRecord]:
    """The book to keep once the plan's writes are done. A pod ("namespace/name") whose condition
    write failed is written again next cycle: a failing pod's record keeps its episode (so its
    event is not announced twice) but not the condition text; a recovered pod's record goes back
    to the previous one. An eviction a PodDisruptionBudget refused stays pending (retried next
    cycle: the budget decides); one the API failed (a 500, a 403) is retried after a growing
    back-off (``eviction_backoff``), and never stands in the way of the pod's recovery."""
    book = copy.deepcopy(plan.book)
    for key in failed_conditions:
        rec = book.get(key)
        if rec is None:
            continue
        if rec["status"] == "False":
            rec["reason"] = rec["message"] = ""
            continue
        prev = _record(old_book.get(key)) if isinstance(old_book, Mapping) else None
        if prev is None:
            del book[key]
        else:
            book[key] = prev
    for key in refused_evictions:
        if key in book:
            book[key]["evicted"] = False
    for key in failed_evictions:
        rec = book.get(key)
        if rec is not None:
            rec["evicted"] = False
            rec["evict_failures"] = min(rec.get("evict_failures", 0) + 1, 64)
            rec["evict_retry_at"] = now + eviction_backoff(rec["evict_failures"])
    return book
