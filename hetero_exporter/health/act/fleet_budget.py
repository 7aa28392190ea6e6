"""The fleet-wide blast-radius budget: a node adds the taint only while it holds a taint slot.

Counting the tainted nodes and then tainting overshoots when many agents fail in the same minute
(each sees "0 tainted"). Here the slots are Leases ``hetero-exporter-taint-slot-<i>`` (labelled
``app.kubernetes.io/managed-by: hetero-exporter`` and ``<domain>/budget: taint``) and the API
server's optimistic concurrency decides who gets one: a create answered AlreadyExists, a takeover
(PUT with the resourceVersion read) answered 409, means another node won that slot; try the next.
With ``limit`` slots, at most ``limit`` nodes hold one, whatever the timing. No home-made consensus.

- Another node's slot is held while ``spec.holderIdentity`` names it and its resourceVersion has
  moved (a renewal) within ``leaseDurationSeconds``, measured on this agent's own monotonic clock
  since it last saw the resourceVersion change: the Lease's ``renewTime`` is the holder's wall
  clock, and an agent 11 minutes ahead or behind must neither take a live slot nor keep a dead one
  (a slot first seen counts as just renewed: the safe side). An expired slot is free again (a node
  that died holding one frees it after ``lease_seconds`` of silence), except while its holder still
  carries the taint: that node still uses the budget, and keeping its slot counts it once, in
  every agent's view.
- A slot is taken only by a node of the cluster that uses it: one whose holder is no accelerator
  node (``nodes``, where the caller knows them), or a node that has held slots for more than
  ``untainted_grace`` seconds without carrying the taint, is free (a token that may create Leases
  cannot starve the fleet with made-up holders, nor with real ones). The grace covers the moment
  between a node's taking its slot and its taint landing; it runs per holder node, from when this
  agent first saw it hold a slot untainted, whichever slot and however often rewritten, and starts
  again only once the node was seen tainted or holding nothing for ``FORGET_SECONDS``. A node holds
  one slot: its others are free. An untainted holder's lease counts for at most this agent's own
  ``lease_seconds`` (a 7-day lease of someone else's does not hold longer).
- The same rule, seen from the holder: this node grants itself a taint only while other agents
  still count its slot (``landing`` seconds before the grace runs out, by its own clock, which
  starts no later than theirs: at its first slot write), asked at the grant and again right
  before the patch is sent (``late``). Its taint patch lands, or times out, within ``landing``; a taint that lands later than the grace could
  find its slot taken over (two nodes tainted on one slot). A node past it is refused, as others
  would count its slot free, until it is seen carrying the taint or has held nothing for
  ``FORGET_SECONDS`` (what resets the others' count). An overloaded API server (a Node patch
  that took minutes at 1,000 agents on 2 CPUs) exceeded the budget before this rule. A taint sent
  in time may still be applied late by such a server: the others stretch the grace by twice the
  slowest listing of the slots they saw in the last ``LAG_MEMORY_SECONDS``.
- The fence, for whatever lag is left: a node that takes over another node's slot reads that
  Node right after (``carries``) and gives the slot back when it carries the taint; a node whose
  taint has landed reads its slot back (``confirm``) and, when it was taken over, takes another
  or gives the taint back (``lost``: the remedy's recheck). The API server orders these writes
  and reads, so at least one of the two nodes sees the other's and backs off.
- A Lease with a slot's name but without the slots' labels (not in the listing; found when its
  name is answered AlreadyExists) is read by name and judged as a slot by the same rules: taken
  only by a tainted node of the cluster, else reclaimed (replaced, with the resourceVersion read,
  by this node's slot). One that cannot be read refuses with an error naming it, never as a slot
  held by nobody. ``Acquired.foreign`` counts them.
- Nodes that carry the taint without a slot (an older agent, a restart that lost its slot) use
  the budget too: only slots ``0 .. k-1`` may be taken, ``k`` the largest with ``k`` + those
  nodes + slots held at ``k`` or above (granted under a larger limit) <= ``limit``. A smaller
  limit never revokes a held slot; it only stops new grants.
- ``acquire`` renews a slot this node already holds (even an expired one not yet taken), else
  takes one: the lowest free one, or a random free one when more than ``SPREAD_ABOVE`` are free
  or once a race was lost (nodes failing together spread over the slots instead of all racing
  for slot 0). A round loses at most ``TRIES_PER_ROUND`` races, then reads the slots again, so
  a node refused because the slots filled stops writing as soon as it reads them full; a name
  answered AlreadyExists is read by name only when the next listing lacks it. ``renew`` keeps
  it (at most once per ``lease_seconds / 3``); ``release`` deletes it with uid and
  resourceVersion preconditions (a slot taken over since it was read is not ours).
- Every failure of the API refuses (the safe side) and says why. Slot objects are hostile input:
  a malformed one is free only to a writer that replaces it by its resourceVersion.
- A device class with a ``budget_share`` (health.classes) has its own pool of slots, by the same
  rules: ``hetero-exporter-taint-slot-<class>-<i>``, labelled ``<domain>/budget: taint-<class>``,
  ``int(share * nodes)`` of them (at least ``budget_min_nodes``). A node about to be tainted for
  devices of such classes takes a slot of each class's pool first, then the fleet's; a refusal of
  any gives back what this call took. Nodes whose book says they carry the taint for the class
  use its budget too (``class_tainted``), as tainted nodes without a slot use the fleet's.

``leases`` is ``k8s.leases.Leases`` (or anything with its methods); its failures are
``k8s.client.K8sError``, recognized here by their ``status`` and ``reason`` (only cli and
health.remedy import k8s/).
"""

from __future__ import annotations

import datetime
import random
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterable, Mapping, Optional, Protocol, Sequence

from hetero_exporter.health.detect.texts import parse_k8s_time
from hetero_exporter.health.plan import Budget, RemedyConfig
from hetero_exporter.health.plan.budget import ClassBudget, class_limit, class_taints
from hetero_exporter.model.keys import Keys

SLOT_PREFIX = "hetero-exporter-taint-slot-"
MANAGED_BY = ("app.kubernetes.io/managed-by", "hetero-exporter")
MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"  # metav1.MicroTime, as the API server writes it
MAX_LEASE_SECONDS = 7 * 86400  # a longer lease is not one of ours: malformed
MAX_NAMES = 10  # holders named in a refusal
_INDEX = r"(0|[1-9][0-9]{0,5})"
_SLOT_NAME = re.compile(re.escape(SLOT_PREFIX) + _INDEX)
_ROUNDS = 8  # read and try; again after each lost race, with what the winners wrote (bounded)
TRIES_PER_ROUND = 2  # writes one round may lose before reading the slots again
SPREAD_ABOVE = 8  # with more free slots than this, a node starts at a random one (small pools: lowest first)
UNTAINTED_GRACE_SECONDS = 120.0  # a node holding slots this long without the taint is not using them
LANDING_SECONDS = 30.0  # a taint lands (or its patch times out) this soon after its grant
LAG_MEMORY_SECONDS = 600.0  # a slow answer of the API server stretches the grace this long
FORGET_SECONDS = 6 * 3600.0  # a holder unseen this long gets its grace again (a new failure)
MAX_HOLDERS = 4096  # holders remembered (nodes of the cluster; the oldest go first)
MAX_FOREIGN = 64  # unlabelled Leases of slot names remembered (read by name at each acquire)
VIEW_SECONDS = 300.0  # a listing of the accelerator nodes serves refusals this long (never grants)


class SlotStore(Protocol):
    def list(self, label_selector: Optional[str] = None) -> list[dict]: ...
    def get(self, name: str) -> Optional[dict]: ...
    def create(self, body: dict) -> dict: ...
    def replace(self, name: str, body: dict) -> dict: ...
    def delete(self, name: str, uid: Optional[str], resource_version: str) -> bool: ...


@dataclass(frozen=True)
class Acquired:
    """What ``acquire`` got: ``granted`` (this node holds a slot now), how many others use the
    budget (slot holders plus nodes tainted without a slot), and why, in one line."""

    granted: bool
    held_by_others: int
    why: str
    error: Optional[str] = None  # the slots could not be read or written: refused (safe side)
    foreign: int = 0  # Leases of slot names without the slots' labels, as last seen
    fenced: bool = False  # refused by the fence: the slot taken over was given back (``why`` says why)


@dataclass(frozen=True)
class Slot:
    """One slot Lease as read. ``holder`` None: nobody (or not a readable name); ``expires`` None:
    malformed times (expired); ``resource_version`` None: cannot be replaced or deleted safely."""

    index: int
    name: str
    holder: Optional[str]
    expires: Optional[float]  # Unix seconds, by the holder's clock (our own slot only)
    resource_version: Optional[str]
    uid: Optional[str]
    acquire_time: Optional[str]
    transitions: int
    duration: Optional[int] = None  # leaseDurationSeconds when valid

    def live(self, now: float) -> bool:
        return self.holder is not None and self.expires is not None and self.expires > now


def _api_error(e: Exception) -> bool:
    """A failed API call (K8sError), as opposed to a bug, which must not pass for a refusal."""
    return hasattr(e, "status") and hasattr(e, "reason")


def _changed(e: Exception) -> bool:
    """409 (another writer came first) or 404 (deleted since read): read again, never overwrite."""
    return getattr(e, "status", None) in (404, 409)


def _text(v: object, limit: int) -> Optional[str]:
    return v if isinstance(v, str) and 0 < len(v) <= limit and v.isprintable() else None


def micro_time(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(MICROTIME)


def parse_time(v: object) -> Optional[float]:
    """Unix seconds of a MicroTime (or RFC 3339 Time), None when it is not one."""
    return parse_k8s_time(v, micro=True)


def parse_slot(obj: object, now: float, pattern: re.Pattern[str] = _SLOT_NAME) -> Optional[Slot]:
    """The slot of a listed Lease; None when it is not a slot (other name, not an object)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    m = pattern.fullmatch(name) if isinstance(name, str) else None
    if m is None or not isinstance(name, str) or not isinstance(obj, dict) or not isinstance(meta, dict):
        return None
    spec = obj.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    raw = spec.get("leaseDurationSeconds")
    renewed = parse_time(spec.get("renewTime"))
    valid = isinstance(raw, int) and not isinstance(raw, bool) and 0 < raw <= MAX_LEASE_SECONDS
    duration: Optional[int] = raw if valid else None
    expires = renewed + duration if duration is not None and renewed is not None else None
    acquired, transitions = spec.get("acquireTime"), spec.get("leaseTransitions")
    return Slot(index=int(m.group(1)), name=name, holder=_text(spec.get("holderIdentity"), 253),
                expires=expires, resource_version=_text(meta.get("resourceVersion"), 64),
                uid=_text(meta.get("uid"), 64), acquire_time=acquired if parse_time(acquired) is not None else None,
                transitions=transitions if isinstance(transitions, int) and 0 <= transitions < 2**31 else 0,
                duration=duration)


def usable_slots(limit: int, unslotted: int, other_indexes: Collection[int]) -> int:
    """k: slots 0..k-1 may be taken, so that k + unslotted + slots held at k or above <= limit."""
    k = limit - unslotted
    while k > 0 and k + unslotted + sum(1 for i in other_indexes if i >= k) > limit:
        k -= 1
    return max(k, 0)


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_NAMES])
    return shown + (f" and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else "")


def refusal(limit: int, holders: list[str], unslotted: list[str], foreign: Collection[str] = ()) -> str:
    """Why no slot was granted, naming who uses the budget (``foreign``: slot holders whose Lease
    lacks the slots' labels)."""
    parts = []
    if holders:
        of = f"{len(holders)} of {limit}" if len(holders) <= limit else f"{len(holders)} (the budget allows {limit})"
        parts.append(f"{of} taint slots are held by {_names(holders)}")
        unlabelled = [h for h in holders if h in foreign]
        if unlabelled:
            parts[-1] += f" ({_names(unlabelled)} in a Lease without the slots' labels)"
    if unslotted:
        verb = "node carries" if len(unslotted) == 1 else "nodes carry"
        parts.append(f"{len(unslotted)} {verb} the taint without a slot ({_names(unslotted)})")
    return "; ".join(parts) if parts else f"no taint slot could be taken (the budget allows {limit})"


def has_taint(node: Mapping[str, Any], key: str) -> bool:
    """Whether a Node, as the API server sends it (hostile input), carries a taint with ``key``."""
    spec = node.get("spec")
    taints = spec.get("taints") if isinstance(spec, Mapping) else None
    return isinstance(taints, list) and any(isinstance(t, dict) and t.get("key") == key for t in taints)


@dataclass(frozen=True)
class FleetView:
    """The accelerator Nodes as one listing showed them: how many (this node included), their
    names, the other nodes that carry the taint, class -> the other nodes tainted for it (their
    books), and when it was listed (the caller's monotonic seconds)."""

    total: int
    names: frozenset[str]
    tainted: frozenset[str]
    by_class: Mapping[str, set[str]]
    at: float


@dataclass(frozen=True)
class FleetListing:
    """What the budget listed (hostile input, as the API server answered it): ``nodes`` whole,
    every accelerator Node or, after the light lists, those labelled as tainted (needed only for
    their books' classes); ``names``: every accelerator node's name (a Table; None: ``nodes`` are
    all of them); ``labelled``: the names of those with the taint's mirror label (a Table; None:
    read from ``nodes``)."""

    nodes: Sequence[Mapping[str, Any]] = ()
    names: Optional[Sequence[str]] = None
    labelled: Optional[Sequence[str]] = None


def fleet_view(listing: FleetListing, cfg: RemedyConfig, node: str, *, labelled: bool, classes: bool,
               at: float) -> FleetView:
    """The view of a listing of Nodes (unnamed ones are skipped). ``labelled``: the listing was
    by the accelerator label; else accelerator nodes are those with our marks (the devices
    annotation or our taint). ``classes``: read the books' classes too. A node listed by the
    taint's mirror label counts as tainted by the label alone: one whose taint was just removed
    keeps it until its agent's next write, which counts it a little longer (the safe side)."""
    names = {n for n in listing.names or () if isinstance(n, str)}
    tainted = {n for n in listing.labelled or () if isinstance(n, str)}
    names |= tainted  # listed a moment apart: a node may have joined between
    kept: list[Mapping[str, Any]] = []
    for n in listing.nodes:
        meta = n.get("metadata") if isinstance(n, Mapping) else None
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str) or not isinstance(meta, Mapping):
            continue  # a Node the API lists always has a name
        annotations = meta.get("annotations") or {}
        ours = has_taint(n, cfg.taint_key)
        if not labelled and not ours and cfg.devices_annotation not in annotations:
            continue  # without labels: accelerator nodes are those with our marks
        names.add(name)
        if name != node:
            kept.append(n)
            if ours:
                tainted.add(name)
    names.add(node)
    tainted.discard(node)
    return FleetView(len(names), frozenset(names), frozenset(tainted),
                     class_taints(kept, cfg) if classes else {}, at)


class FleetBudget:
    """Taint slots of one node. Not thread-safe: one reconcile loop uses it."""

    def __init__(self, leases: SlotStore, node: str, *, domain: str, lease_seconds: int = 600,
                 clock: Callable[[], float] = time.time, monotonic: Optional[Callable[[], float]] = None,
                 untainted_grace: float = UNTAINTED_GRACE_SECONDS, pool: str = "", classes: Iterable[str] = (),
                 landing: float = LANDING_SECONDS, carries: Optional[Callable[[str], Optional[bool]]] = None):
        """``pool``: a device class's pool of slots ("" the fleet's); ``classes``: the classes
        with a budget share (the fleet's budget keeps a pool for each); ``landing``: seconds a
        taint may take to land after its grant (its Node patch's timeout, with room);
        ``carries``: node -> whether it carries the taint now, read by name (None: unknown),
        the fence of a takeover (``_fenced``; without it, no fence)."""
        if not 0 < int(lease_seconds) <= MAX_LEASE_SECONDS:
            raise ValueError(f"lease_seconds: between 1 and {MAX_LEASE_SECONDS}, not {lease_seconds!r}")
        self.leases = leases
        self.node = node
        self.lease_seconds = int(lease_seconds)
        self.prefix = f"{SLOT_PREFIX}{pool}-" if pool else SLOT_PREFIX
        self._pattern = re.compile(re.escape(self.prefix) + _INDEX) if pool else _SLOT_NAME
        self.labels = {MANAGED_BY[0]: MANAGED_BY[1], Keys(domain).budget: f"taint-{pool}" if pool else "taint"}
        self.selector = ",".join(f"{k}={v}" for k, v in self.labels.items())
        self._clock = clock
        # elapsed time on this agent's clock: the real monotonic clock, or a test's own clock
        self._mono = monotonic or (time.monotonic if clock is time.time else clock)
        self._grace = float(untainted_grace)
        self._landing = min(float(landing), self._grace / 2)  # a longer one would leave no time to grant
        self._lag = (0.0, float("-inf"))  # (seconds the slowest recent listing of the slots took, when)
        # this node's own count, as the others keep it: since when it holds slots untainted, and
        # when it last held one (monotonic); reset when it carries the taint
        self._own: Optional[tuple[float, float]] = None
        self._carrying = False  # it carries the taint now (until it gives its slots back)
        self._carries = carries
        self._lost = False  # carrying the taint, this node found its slot taken over or gone
        self._seen: dict[str, tuple[Optional[str], float]] = {}  # slot -> (resourceVersion, when it moved)
        # holder -> (since when seen holding untainted, when last seen holding)
        self._untainted: dict[str, tuple[float, float]] = {}
        self._foreign: dict[int, str] = {}  # index -> why: Leases of slot names without our labels
        self._held: Optional[Slot] = None  # the slot as last written by us
        self._next_renew = 0.0  # renew() writes again from then on
        self._renew_note: Optional[str] = None  # what renew() said last, until then
        self._rng = random.Random(f"{pool}/{node}")  # the order free slots are tried in, once contended
        self._pools = {c: FleetBudget(leases, node, domain=domain, lease_seconds=lease_seconds, clock=clock,
                                      monotonic=monotonic, untainted_grace=untainted_grace, pool=c,
                                      landing=landing, carries=carries)
                       for c in classes} if not pool else {}

    # ------------------------------------------------------------------ reads and writes

    def _read(self, now: float) -> dict[int, Slot]:
        """The slots: the labelled Leases listed, and the unlabelled ones of slot names met
        before, read by name (those that went or got our labels are forgotten)."""
        slots: dict[int, Slot] = {}
        started = self._mono()
        listed = self.leases.list(self.selector)
        self._note_lag(self._mono() - started)
        for obj in listed:
            s = parse_slot(obj, now, self._pattern)
            if s is not None and s.index not in slots:
                slots[s.index] = s
        for index in sorted(self._foreign):
            if index in slots:
                del self._foreign[index]  # labelled now (reclaimed)
                continue
            found = self._unlabelled(index, now)
            if found is not None:
                slots[index] = found
        return slots

    def _unlabelled(self, index: int, now: float) -> Optional[Slot]:
        """The Lease of slot ``index``'s name read by name, when it lacks the slots' labels
        (remembered in ``_foreign``: its index -> why it is unusable, "" when readable)."""
        name = f"{self.prefix}{index}"
        try:
            obj = self.leases.get(name)
        except Exception as e:
            if not _api_error(e):
                raise
            self._remember_foreign(index, f"a Lease without the taint slots' labels occupies {name} and could "
                                          f"not be read: {e}")
            return None
        labels = ((obj or {}).get("metadata") or {}).get("labels") if isinstance(obj, dict) else None
        if obj is None or (isinstance(labels, dict) and all(labels.get(k) == v for k, v in self.labels.items())):
            self._foreign.pop(index, None)  # gone, or one of ours: a race, read again
            return None
        self._remember_foreign(index, "")
        return parse_slot(obj, now, self._pattern)

    def _remember_foreign(self, index: int, why: str) -> None:
        if index in self._foreign or len(self._foreign) < MAX_FOREIGN:
            self._foreign[index] = why

    def _body(self, name: str, now: float, *, resource_version: Optional[str] = None,
              acquire_time: Optional[str] = None, transitions: int = 0) -> dict:
        meta: dict = {"name": name, "labels": dict(self.labels)}
        if resource_version is not None:
            meta["resourceVersion"] = resource_version
        stamp = micro_time(now)
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": {"holderIdentity": self.node, "leaseDurationSeconds": self.lease_seconds,
                         "acquireTime": acquire_time or stamp, "renewTime": stamp, "leaseTransitions": transitions}}

    def _wrote(self, answer: dict, now: float) -> None:
        self._held = parse_slot(answer, now, self._pattern)
        self._next_renew, self._renew_note, self._lost = now + self.lease_seconds / 3, None, False
        if self._carrying:
            return
        mono = self._mono()
        since = self._own_since(mono)
        self._own = (mono if since is None else since, mono)

    def _own_since(self, mono: float) -> Optional[float]:
        """Since when the others count this node as holding slots untainted (None: they do not,
        or forgot it after ``FORGET_SECONDS`` of holding nothing)."""
        if self._own is None or mono - self._own[1] > FORGET_SECONDS:
            return None
        return self._own[0]

    def _note_lag(self, took: float) -> None:
        mono = self._mono()
        if took >= self._lag[0] or mono - self._lag[1] > LAG_MEMORY_SECONDS:
            self._lag = (took, mono)

    def _grace_now(self, mono: float) -> float:
        """The grace, stretched by twice the slowest listing of the last ``LAG_MEMORY_SECONDS``
        (at most a lease): a server that answers this agent late applies the others' writes late
        too, and a holder's taint sent within its own deadline may land that much later."""
        lag = self._lag[0] if mono - self._lag[1] <= LAG_MEMORY_SECONDS else 0.0
        return self._grace + 2 * min(lag, float(self.lease_seconds))

    def _too_late(self, mono: float) -> Optional[str]:
        """Why this node may not taint on a slot now (the others may count it free by the time
        the taint lands), else None."""
        since = self._own_since(mono)
        if since is None:
            return None
        held = mono - since
        if held <= self._grace - self._landing:
            return None
        return (f"this node has held taint slots for {held:.0f} s without its taint landing: other nodes count "
                f"them free after {self._grace:.0f} s, so it does not taint on them (it may again once it has "
                f"held none for {FORGET_SECONDS / 3600:.0f} h)")

    def late(self) -> Optional[str]:
        """Why a taint granted earlier may no longer be sent (``_too_late`` now, by this node's
        clock), else None: asked again right before the Node patch that adds it."""
        return self._too_late(self._mono())

    def carrying(self) -> bool:
        """This node carries the taint (the others reset their count of it when they see so).
        True the first time since it took its slots (or since this agent started): its taint
        has just landed, so ``confirm`` the slots."""
        news = not self._carrying
        self._own, self._carrying = None, True
        for pool in self._pools.values():
            pool.carrying()
        return news

    @property
    def lost(self) -> bool:
        """Carrying the taint, this node found its fleet slot (or one of its classes') taken
        over or gone: it must take another or give the taint back (the remedy's recheck)."""
        return self._lost

    def forget_loss(self) -> None:
        """The remedy had nothing to ask again after a loss (the taint was removed by someone
        else, or the node recovered): stop asking."""
        self._lost = False

    def confirm(self) -> Optional[str]:
        """Read back the slots this node wrote (a GET each), once its taint has landed: None
        while they are its own (or this agent wrote none: ``renew`` finds them by listing);
        else why not (``lost`` is set when one was taken over or deleted; a read that fails
        says so and leaves it unknown).

        One half of the fence against a taint landing after its slot was counted free: the
        node that took the slot over reads this node's Node after its write (``_fenced``),
        this node reads the slot after its taint landed. The API server orders the four
        requests, so at least one of the two sees the other's write and backs off: never
        both tainted on one slot once both have looked."""
        now = self._clock()
        for budget in (self, *self._pools.values()):
            held = budget._held
            if held is None:
                continue
            try:
                s = parse_slot(budget.leases.get(held.name), now, budget._pattern)
            except Exception as e:
                if not _api_error(e):
                    raise
                return f"cannot read back taint slot {held.name}: {e}"
            if s is None or s.holder != self.node:
                budget._held = None
                self._lost = True
                by = f"taken over by {s.holder}" if s is not None and s.holder else "deleted"
                return f"taint slot {held.name} was {by} before this node's taint landed"
        return None

    def _renew(self, slot: Slot, now: float) -> None:
        body = self._body(slot.name, now, resource_version=slot.resource_version,
                          acquire_time=slot.acquire_time, transitions=slot.transitions)
        self._wrote(self.leases.replace(slot.name, body), now)

    def _take(self, index: int, slot: Optional[Slot], now: float) -> None:
        name = f"{self.prefix}{index}"
        if slot is None:
            self._wrote(self.leases.create(self._body(name, now)), now)
        else:
            body = self._body(name, now, resource_version=slot.resource_version,
                              transitions=min(slot.transitions + 1, 2**31 - 1))
            self._wrote(self.leases.replace(name, body), now)

    def _observe(self, slots: dict[int, Slot], mono: float, tainted: Collection[str]) -> None:
        """When each slot's resourceVersion last moved, and since when each holder holds slots
        without the taint, on this agent's clock; slots gone are forgotten (bounded by the
        listing), holders when seen tainted or unseen for ``FORGET_SECONDS`` (bounded)."""
        names = {s.name for s in slots.values()}
        for gone in [n for n in self._seen if n not in names]:
            del self._seen[gone]
        for s in slots.values():
            if self._seen.get(s.name, (None,))[0] != s.resource_version or s.name not in self._seen:
                self._seen[s.name] = (s.resource_version, mono)
        table = self._untainted
        for h in [h for h, (_, last) in table.items() if h in tainted or mono - last > FORGET_SECONDS]:
            del table[h]
        for h in {s.holder for s in slots.values() if s.holder and s.holder != self.node} - set(tainted):
            table[h] = (table.get(h, (mono, mono))[0], mono)
        for h in sorted(table, key=lambda h: table[h][1])[:max(0, len(table) - MAX_HOLDERS)]:
            del table[h]

    def _taken(self, s: Slot, mono: float, tainted: Collection[str], nodes: Optional[Collection[str]]) -> bool:
        """Whether another node's slot uses the budget (module docstring)."""
        if s.holder is None or s.holder == self.node:
            return False
        if nodes is not None and s.holder not in nodes:
            return False  # no node of the cluster: a made-up holder
        if s.holder in tainted:
            return True  # it carries the taint: it uses the budget, live or not
        moved = self._seen.get(s.name, (None, mono))[1]
        if s.duration is None or mono - moved >= min(s.duration, self.lease_seconds):
            return False  # not renewed within its lease (at most ours), by our clock
        return mono - self._untainted.get(s.holder, (mono, mono))[0] <= self._grace_now(mono)

    def _others(self, slots: dict[int, Slot], mono: float, tainted: Collection[str],
                nodes: Optional[Collection[str]]) -> list[Slot]:
        """The slots other nodes use: the first (lowest) one of each holder that uses one."""
        out: list[Slot] = []
        for _, s in sorted(slots.items()):
            if self._taken(s, mono, tainted, nodes) and s.holder not in {o.holder for o in out}:
                out.append(s)
        return out

    def _mine(self, slots: dict[int, Slot]) -> list[Slot]:
        return [s for _, s in sorted(slots.items()) if s.holder == self.node and s.resource_version]

    # ------------------------------------------------------------------ the three calls

    def acquire(self, limit: int, tainted: Collection[str], nodes: Optional[Collection[str]] = None) -> Acquired:
        """Hold a slot (keep ours, else take a free one below the usable count). ``tainted``:
        the nodes that carry the taint now (read before this call), this one included or not;
        ``nodes``: the accelerator nodes of the cluster, where known (a slot of any other holder
        is free)."""
        now, mono = self._clock(), self._mono()
        marked = {t for t in tainted if isinstance(t, str)} - {self.node}
        late = self._too_late(mono)
        if late is not None:
            return self._result(False, len(marked), late)
        why, held = "", 0
        suspects: set[int] = set()  # slots answered AlreadyExists though not listed: read by name
        contended = False
        for _ in range(_ROUNDS):
            try:
                slots = self._read(now)
                for index in sorted(suspects - set(slots)):
                    found = self._unlabelled(index, now)  # a Lease not listed holds the name
                    if found is not None:
                        slots[index] = found
            except Exception as e:
                if not _api_error(e):
                    raise
                return self._result(False, 0, f"the taint slots could not be read: {e}", error=str(e))
            self._observe(slots, mono, marked)
            others = self._others(slots, mono, marked, nodes)
            holders = [s.holder for s in others if s.holder]
            unslotted = sorted(marked - set(holders))
            held = len(others) + len(unslotted)
            candidates = self._candidates(slots, others, limit, len(unslotted), contended)
            outcome = self._try(candidates, slots, held, limit, now)
            if isinstance(outcome, Acquired):
                return outcome
            suspects, lost_race = outcome
            contended = contended or lost_race
            unreadable = [w for w in self._foreign.values() if w]
            if unreadable:
                return self._result(False, held, unreadable[0], error=unreadable[0])
            foreign = {s.holder for i, s in slots.items() if i in self._foreign and s.holder}
            why = refusal(limit, holders, unslotted, foreign)
            if not lost_race:
                return self._result(False, held, why)
        return self._result(False, held, why)

    def _candidates(self, slots: dict[int, Slot], others: list[Slot], limit: int, unslotted: int,
                    contended: bool) -> list[tuple[int, Optional[Slot]]]:
        """The slots to try: this node's own first, then the free ones below the usable count,
        lowest first; in a random order once a race was lost or when many are free (nodes
        failing together spread over the free slots instead of all racing for the lowest)."""
        mine: list[tuple[int, Optional[Slot]]] = [(s.index, s) for s in self._mine(slots)]
        k = usable_slots(limit, unslotted, [s.index for s in others])
        occupied = {s.index for s in others} | {i for i, _ in mine}
        free = [(i, slots.get(i)) for i in range(k) if i not in occupied]
        if contended or len(free) > SPREAD_ABOVE:
            self._rng.shuffle(free)
        return mine + free

    def _try(self, candidates: list[tuple[int, Optional[Slot]]], slots: dict[int, Slot], held: int, limit: int,
             now: float) -> "Acquired | tuple[set[int], bool]":
        """Take (or renew) the first candidate that can be had, losing at most TRIES_PER_ROUND
        races: the Acquired, or (slots answered AlreadyExists though not listed, whether a race
        was lost) to read again."""
        suspects: set[int] = set()
        lost_race, tries = False, 0
        for index, slot in candidates:
            if slot is not None and slot.resource_version is None:
                continue  # cannot be taken without overwriting blindly
            if tries >= TRIES_PER_ROUND:
                break
            tries += 1
            try:
                if slot is not None and slot.holder == self.node:
                    self._renew(slot, now)
                    return self._result(True, held, f"this node holds taint slot {index} (renewed)")
                self._take(index, slot, now)
                fenced = self._fenced(slot)
                if fenced is not None:
                    return self._result(False, held + 1, fenced, fenced=True)
                return self._result(True, held, f"taint slot {index} taken; {held} other nodes use the "
                                                f"budget of {limit}")
            except Exception as e:
                if not _api_error(e):
                    raise
                if getattr(e, "reason", "") == "AlreadyExists" and slot is None and index not in slots:
                    suspects.add(index)  # the winner's slot, listed next round; else a Lease not listed
                elif not _changed(e):
                    return self._result(False, held, f"cannot write taint slot {index}: {e}", error=str(e))
                lost_race = True  # another node won this slot: another one, or read again
        return suspects, lost_race

    def _fenced(self, taken: Optional[Slot]) -> Optional[str]:
        """The other half of ``confirm``'s fence: after taking over another node's slot, read
        that node (``carries``). When it carries the taint now (it landed after the listing
        that counted the slot free) or cannot be read, the slot is given back (deleted with
        its uid and resourceVersion; if that fails it expires unrenewed) and this says why;
        None: the slot is this node's to taint on."""
        holder = taken.holder if taken is not None else None
        if taken is None or holder is None or holder == self.node or self._carries is None:
            return None
        carried = self._carries(holder)
        if carried is False:
            return None
        mine, self._held, self._next_renew = self._held, None, 0.0
        if mine is not None and mine.resource_version:
            try:
                self.leases.delete(mine.name, mine.uid, mine.resource_version)
            except Exception as e:
                if not _api_error(e):
                    raise
        state = "carries the taint now" if carried else "could not be read"
        return f"taint slot {taken.index} was taken over from {holder}, which {state}: given back"

    def full(self, limit: int, view: FleetView) -> Optional[Acquired]:
        """A refusal read from the slots alone, with an earlier listing of the nodes (``view``):
        the other nodes whose slots ``acquire`` would count with that listing (``_taken``: tainted
        when listed, or holding within their grace), each slot live by this agent's clock since
        ``acquire`` last saw it (one never seen is not counted), already fill ``limit``
        (``view.total``'s). None when a slot may be free, when this node holds one, or when the
        slots cannot be read: then list the nodes again and ``acquire``. It never grants, writes
        nothing and changes no state: a node that recovered since the listing gave its slot
        back, so it is not counted; a fleet grown since refuses by the older, smaller budget
        until the listing is renewed (the safe side)."""
        if self._held is not None:
            return None
        try:
            slots = self._read(self._clock())
        except Exception as e:
            if not _api_error(e):
                raise
            return None
        if any(s.holder == self.node for s in slots.values()):
            return None
        mono = self._mono()
        using = [s.holder for s in self._others(slots, mono, view.tainted, view.names)
                 if s.holder and self._live(s, mono)]
        if len(using) < limit:
            return None
        return self._result(False, len(using), refusal(limit, using, []))

    def _live(self, s: Slot, mono: float) -> bool:
        """Renewed (its resourceVersion moved) since last seen, or last seen moving within its
        lease (at most ours), by this agent's clock."""
        seen = self._seen.get(s.name)
        if seen is None or s.duration is None:
            return False
        return seen[0] != s.resource_version or mono - seen[1] < min(s.duration, self.lease_seconds)

    def _result(self, granted: bool, held: int, why: str, error: Optional[str] = None,
                fenced: bool = False) -> Acquired:
        return Acquired(granted, held, why, error=error, foreign=len(self._foreign), fenced=fenced)

    def renew(self, classes: Optional[Iterable[str]] = None) -> Optional[str]:
        """Keep our slot (call each reconcile while tainted; writes at most once per
        ``lease_seconds / 3``). None when it is held; else why not. ``classes``: those the taint
        is for now: their pools' slots held are kept, the others' given back (None: every pool's
        slot held is kept)."""
        for name, pool in self._pools.items():
            if classes is not None and name not in set(classes):
                pool.release() if pool._held is not None else None
            elif pool._held is not None:
                pool.renew()
        return self._renew_fleet()

    def _renew_fleet(self) -> Optional[str]:
        now = self._clock()
        if now < self._next_renew:
            return self._renew_note
        slot = self._held
        for _ in range(_ROUNDS):
            try:
                if slot is None:
                    mine = self._mine(self._read(now))
                    if not mine:
                        self._held, self._next_renew = None, now + self.lease_seconds / 3
                        self._renew_note, self._lost = "this node holds no taint slot", self._carrying
                        return self._renew_note
                    slot = mine[0]
                self._renew(slot, now)
                return None
            except Exception as e:
                if not _api_error(e):
                    raise
                if not _changed(e):
                    return f"cannot renew the taint slot: {e}"
                slot = self._held = None  # changed since we wrote it: read again
        return "the taint slot kept changing under us"

    def release(self) -> Optional[str]:
        """Give back every slot this node holds, its classes' too (call on recovery, after the
        taint is off). None when none is left; else why (it expires after ``lease_seconds`` anyway)."""
        notes = [n for n in (pool.release() for pool in self._pools.values()) if n]
        return self._release_own() or (notes[0] if notes else None)

    def _release_own(self) -> Optional[str]:
        now = self._clock()
        self._held, self._next_renew, self._carrying, self._lost = None, 0.0, False, False
        if self._own is not None:  # the others' count of it goes on from when they last saw it hold
            self._own = (self._own[0], self._mono())
        for _ in range(_ROUNDS):
            try:
                mine = self._mine(self._read(now))
            except Exception as e:
                if not _api_error(e):
                    raise
                return f"the taint slots could not be read: {e}"
            changed = False
            for slot in mine:
                try:
                    self.leases.delete(slot.name, slot.uid, slot.resource_version or "")
                except Exception as e:
                    if not _api_error(e):
                        raise
                    if not _changed(e):
                        return f"cannot release taint slot {slot.index}: {e}"
                    changed = True  # taken over since read (then not ours) or changed: read again
            if not changed:
                return None
        return "a taint slot of this node kept changing under us"

    # ------------------------------------------------------------------ for the plan

    def check(self, cfg: RemedyConfig, total: int, tainted: Collection[str],
              nodes: Optional[Collection[str]] = None, shares: Optional[Mapping[str, float]] = None,
              class_tainted: Optional[Mapping[str, Collection[str]]] = None) -> tuple[Budget, Acquired]:
        """``acquire`` under the configured limit of ``total`` accelerator nodes, as the plan's
        Budget (``granted`` decides; ``tainted`` counts the others using the budget), with the
        Acquired for its one-line why. ``shares``: class -> budget share of the classes the taint
        would be for, each asked first in its own pool (``class_tainted``: class -> the nodes
        whose book says they carry the taint for it); a refusal gives back what this call took."""
        classes, taken = self._classes(cfg, total, shares or {}, class_tainted or {}, nodes)
        refused = next((c for c in classes if not c.granted), None)
        if refused is not None:
            for pool in taken:
                pool.release()
            why = f"class {refused.name}: " + (refused.error or f"no taint slot of its share is free "
                                                                f"({refused.held_by_others} held by other nodes)")
            others = len(set(tainted) - {self.node})
            return (Budget(total=total, tainted=others, classes=tuple(classes)),
                    Acquired(False, others, why, error=refused.error))
        result = self.acquire(Budget(total=total, tainted=0).limit(cfg), tainted, nodes)
        if not result.granted:
            for pool in taken:
                pool.release()
        return Budget(total=total, tainted=result.held_by_others, error=result.error, granted=result.granted,
                      classes=tuple(classes), refused_why=result.why if result.fenced else None), result

    def _classes(self, cfg: RemedyConfig, total: int, shares: Mapping[str, float],
                 class_tainted: Mapping[str, Collection[str]],
                 nodes: Optional[Collection[str]]) -> tuple[list[ClassBudget], list["FleetBudget"]]:
        """A slot of each class's pool, in name order, up to the first refusal: what each said,
        and the pools a slot was taken in (to give back when another refuses)."""
        out: list[ClassBudget] = []
        taken: list[FleetBudget] = []
        for name, share in sorted(shares.items()):
            pool = self._pools.get(name)
            if pool is None:  # not a configured class with a share (the config changed): none of its slots
                continue
            fresh = pool._held is None
            got = pool.acquire(class_limit(share, total, cfg.budget_min_nodes), class_tainted.get(name, ()), nodes)
            out.append(ClassBudget(name, share, got.held_by_others, got.granted, got.error))
            if not got.granted:
                break
            if fresh:
                taken.append(pool)
        return out, taken
