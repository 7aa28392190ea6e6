"""The only code that writes to Kubernetes (through k8s/, with remedy_cluster.py for what lies
beyond the Node): applies health/plan to this node.

One ``reconcile`` = read the Node, plan against what is there, write the Node (strategic merge patch
carrying the resourceVersion just read: a concurrent change is answered 409 and the cycle
re-reads and re-plans, at most ``conflict_retries`` times), write the condition (strategic
merge on ``status.conditions``), then the writes beyond the Node (DRA DeviceTaintRules, pod
conditions, opt-in evictions: remedy_cluster.py), then send the outbox events, the pods' included
(fixed names: a resend is answered AlreadyExists). A failed or timed-out write is not retried
blindly: the next cycle reads the Node again, so a write that did land is seen and not repeated.
Before a taint is added, the blast-radius budget is asked: fleet-wide, a Lease slot
(health/act/fleet_budget.py), renewed while the taint is on and given back on recovery.

Modes: ``observe`` makes no call at all (metrics only); ``dry-run`` writes events that say what
would be done, plus its bookkeeping and the inventory (in nodefeature mode: the devices annotation
only; the NodeFeature is planned and explained, not written); ``enforce`` taints, conditions,
labels (or the NodeFeature).

``HealthLoop`` runs reconcile on its own thread with the latest published snapshot, so the
sampler never waits on the API server.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from hetero_exporter.health import plan as plan_mod
from hetero_exporter.health.plan import pod_signals
from hetero_exporter.health.act.metrics import HealthMetrics
from hetero_exporter.health.plan import Book, Budget, ClusterView, Plan, RemedyConfig
from hetero_exporter.health.plan import classes as classes_mod
from hetero_exporter.health.plan.book import holds_from_json
from hetero_exporter.health.plan.budget import counted_classes
from hetero_exporter.health.plan.records import PodRecord
from hetero_exporter.health.detect.policy import Policy
from hetero_exporter.health.detect.gate import RecoveryGate
from hetero_exporter.health.detect.verdicts import Evaluation, GatesOf, HealthVerdicts
from hetero_exporter.k8s.client import Cluster, K8sError
from hetero_exporter.model import DeviceIdentity, DeviceSample, NodeSnapshot
from hetero_exporter.model.evaluation import GATE_CODE

if TYPE_CHECKING:
    # imported where they are used, with cluster access only: a node without it never loads them
    # (k8s.api, .dra, .events, .leases, .nodes, the fleet budget: ~0.5 MiB of RSS, issue 39 §5)
    from hetero_exporter.health.act.fleet_budget import FleetBudget, FleetListing, FleetView
    from hetero_exporter.health.act.remedy_cluster import Applied, ClusterSide
    from hetero_exporter.k8s.events import Events
    from hetero_exporter.k8s.nodes import Nodes

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What one reconcile did."""

    plan: Optional[Plan] = None
    wrote_node: bool = False
    wrote_condition: bool = False
    events_sent: int = 0
    undelivered: int = 0  # outbox events not sent yet (retried next cycle)
    error: Optional[str] = None
    conflicts: int = 0
    skipped: str = ""  # why nothing was attempted
    notes: list[str] = field(default_factory=list)
    applied: Optional[Applied] = None  # the device taints and pod signals written


@dataclass(frozen=True)
class _Api:
    """What the remedy reads and writes through: made only with cluster access, in a mode that writes."""

    nodes: Nodes
    events: Events
    cluster: ClusterSide  # the writes beyond the Node


FAILING = ("failed", "degraded", "recovering")  # states whose devices the cluster side acts on
MAX_REMOVED = 256  # removal events waiting for the API: a node has a few dozen devices at most


def _both(first: Outcome, then: Outcome) -> Outcome:
    """Two reconciles of one cycle (a recheck right after the first) as one outcome: the
    second's plan and error, what either wrote or sent."""
    then.wrote_node = first.wrote_node or then.wrote_node
    then.wrote_condition = first.wrote_condition or then.wrote_condition
    then.events_sent += first.events_sent
    then.conflicts += first.conflicts
    then.notes[:0] = first.notes
    return then


def _result(what: str) -> str:
    if what == "refused":
        return "refused"
    if what.startswith("dry-run"):
        return "dry-run"
    return "ok"


def empty_node(name: str) -> dict:
    return {"metadata": {"name": name, "labels": {}, "annotations": {}}, "spec": {}, "status": {}}


HAMI_RESYNC_SECONDS = 10.0
RESYNC_JITTER = 0.5  # the share of resync_seconds the first resync may come late by (random)
# the cluster-side actions, counted when they are applied (remedy_cluster), not with the Node patch
CLUSTER_ACTIONS = frozenset({"device-taint", "pod-condition", "evict", "nodefeature"})


def no_resource(device: DeviceSample) -> str:
    return ""


def class_gates(cfg: RemedyConfig, resource_of: Callable[[DeviceSample], str] = no_resource) -> GatesOf:
    """The recovery gates of a snapshot's devices from health.classes and the Node's labels, for
    the judge until the plan's class table is seen (the first cycle, ``health --dry-run``): as
    the plan classes them, but a class matched by DRA pool alone is known from the plan only."""
    gated = any(c.recovery_gate is not None for c in cfg.classes)

    def gates(snapshot: NodeSnapshot, labels: Mapping[str, str]) -> dict[str, RecoveryGate]:
        if not gated:
            return {}
        table = classes_mod.assign(snapshot, cfg.classes, cfg.class_default, labels, {},
                                   {d.identity.uuid: resource_of(d) for d in snapshot.devices})
        return table.gates()
    return gates


def _cluster_parts(live: Cluster, node_name: str, cfg: RemedyConfig, metrics: HealthMetrics,
                   env: Mapping[str, str], resource_of: Callable[[DeviceSample], str], slices: Any,
                   clock: Callable[[], float], failed_pods: Optional[Callable[[], Optional[list]]],
                   plugin_pods: Optional[Callable[[str], Optional[list[dict[str, Any]]]]]) -> "tuple[_Api, Optional[FleetBudget]]":
    """The remedy's API (Node, events, the writes beyond the Node) and, in enforce mode, the
    fleet-wide budget: made only with cluster access in a mode that writes."""
    # here, not at module level: a node without cluster access never needs them (issue 39 §5)
    from hetero_exporter.health.act.fleet_budget import FleetBudget
    from hetero_exporter.health.act.remedy_cluster import ClusterSide
    from hetero_exporter.k8s.events import Events
    from hetero_exporter.k8s.leases import Leases
    from hetero_exporter.k8s.nodes import Nodes
    if cfg.nodefeature and not cfg.nodefeature_namespace and not env.get("POD_NAMESPACE"):
        log.warning("nodefeature mode without POD_NAMESPACE (the DaemonSet sets it from the downward API) "
                    "or health.nodefeature_namespace: the NodeFeature goes to namespace "
                    f"{cfg.nodefeature_home(env)}", extra={"node": node_name})
    api = _Api(Nodes(live), Events(live), ClusterSide(
        live, node_name, cfg, metrics, resource_of, slices, clock, failed_pods,
        nodefeature_namespace=cfg.nodefeature_home(env), plugin_pods=plugin_pods))
    # the fleet-wide budget takes Lease slots in enforce mode only: a dry-run never taints. A
    # grant's taint lands within two requests' timeouts (the Node patch, a conflict's retry)
    fleet = FleetBudget(Leases(live, cfg.lease_namespace(env)),
                        node_name, domain=cfg.domain, lease_seconds=int(cfg.budget_lease_seconds),
                        clock=clock, classes=[c.name for c in cfg.classes if c.budget_share is not None],
                        landing=2 * live.timeout_seconds,
                        carries=lambda name: carries_taint(api.nodes, name, cfg.taint_key)
                        ) if cfg.fleet_budget and cfg.mode == "enforce" else None
    return api, fleet


def carries_taint(nodes: Nodes, name: str, key: str) -> Optional[bool]:
    """Whether Node ``name`` carries a taint with ``key`` now (read by name; a Node that is
    gone carries none); None when it cannot be read (the fleet budget's fence, fleet_budget.py)."""
    from hetero_exporter.health.act.fleet_budget import has_taint  # loaded with cluster access only
    try:
        node = nodes.get(name)
    except K8sError as e:
        return False if e.status == 404 else None
    return isinstance(node, dict) and has_taint(node, key)


class Remedy:
    """``resource_of``: the extended resource a device is allocated as (``nvidia.com/gpu``; ''
    when none), from the vendor specs (cli wires it); ``slices``: a started SliceCache of this
    node (else the ResourceSlices are listed when needed); ``failed_pods``: the pod cache's
    watched failed pods (else listed per reconcile); ``plugin_pods``: its watched pods of a plugin
    selector (else listed per reconcile); ``environ``: for POD_NAMESPACE; ``rng``:
    the resyncs' random phase (seedable; RESYNC_JITTER)."""

    def __init__(self, cluster: Optional[Cluster], node_name: str, policy: Policy, cfg: RemedyConfig,
                 metrics: Optional[HealthMetrics] = None, *, clock: Callable[[], float] = time.time,
                 resource_of: Callable[[DeviceSample], str] = no_resource, slices: Any = None,
                 failed_pods: Optional[Callable[[], Optional[list]]] = None,
                 plugin_pods: Optional[Callable[[str], Optional[list[dict[str, Any]]]]] = None,
                 environ: Optional[Mapping[str, str]] = None, rng: Optional[random.Random] = None):
        self.node = node_name
        self.policy = policy
        self.cfg = cfg
        self.resource_of = resource_of
        self.metrics = metrics or HealthMetrics()
        self._clock = clock
        live = cluster if cluster is not None and cluster.enabled and cfg.mode != "observe" else None
        on = live is not None
        env = os.environ if environ is None else environ
        self._api: Optional[_Api] = None
        self._fleet: Optional[FleetBudget] = None
        if live is not None:
            self._api, self._fleet = _cluster_parts(live, node_name, cfg, self.metrics, env, resource_of, slices,
                                                    clock, failed_pods, plugin_pods)
        self._slot: Optional[bool] = None  # holds a budget slot; None: unknown (after a start)
        self._nodes_view: Optional[FleetView] = None  # the accelerator nodes as last listed (refusals reuse it)
        self._pods_book: Optional[dict[str, PodRecord]] = None  # pod records settled after the last writes
        if not on and cfg.mode != "observe":
            # dry-run/enforce with no cluster access: it writes nothing, which must show (and alert)
            # as an API it cannot reach; observe expects no access, so the gauge stays absent there
            self.metrics.kubernetes_up(False)
        self._delivered: set[str] = set()
        # called with the Node's metadata each time it is read (HealthLoop: the verdicts' see_node,
        # for the operators' overrides and the recovery gates' evidence)
        self.node_seen: Optional[Callable[[Mapping[str, Any]], None]] = None
        self.restored = not on  # sticky faults read back from the Node (or nothing to read)
        # Skip the API round trip when nothing the plan depends on changed since the last
        # complete reconcile, up to resync_seconds (then re-read: someone may have changed the Node)
        self._last_sig: Optional[tuple] = None
        self._last_full = float("-inf")
        # the first resync comes after resync_seconds x uniform(1, 1 + RESYNC_JITTER) (rng: seedable), so
        # agents started together do not re-read their Nodes in the same second ever after
        self._resync_offset = (rng or random).random() * RESYNC_JITTER * cfg.resync_seconds

    @property
    def writes(self) -> bool:
        return self._api is not None

    @property
    def _cluster(self) -> Optional[ClusterSide]:
        """The writes beyond the Node (remedy_cluster.py); None without cluster access."""
        return self._api.cluster if self._api is not None else None

    def _writer(self) -> _Api:
        """The API, where the caller knows there is one (the cluster is reachable and the mode writes)."""
        if self._api is None:
            raise RuntimeError("the health remedy has no cluster access in this mode: nothing is read or written")
        return self._api

    # ------------------------------------------------------------------ restart safety
    def restore_into(self, verdicts: HealthVerdicts, current_boot_id: Optional[str]) -> bool:
        """Read the bookkeeping on the Node and seed the rules with the sticky faults an
        earlier agent process recorded. True once done (or when there is nothing to do)."""
        if self.restored:
            return True
        if self._api is None:  # nothing to read back (restored is set from the start then)
            self.restored = True
            return True
        try:
            node = self._api.nodes.get(self.node)
        except K8sError as e:
            if e.not_found:
                self.restored = True
                return True
            log.warning("cannot read the node's bookkeeping yet", extra={"node": self.node, "error": str(e)})
            self.metrics.kubernetes_up(False)
            return False
        self._seen(node)
        book = Book.from_annotation(((node.get("metadata") or {}).get("annotations") or {}).get(self.cfg.book_annotation))
        sticky = plan_mod.sticky_from_json(book.sticky)
        holds = holds_from_json(book.holds)
        verdicts.restore(sticky, book.boot_id, current_boot_id, plan_mod.occurrences_from_json(book.occurrences),
                         holds)
        if sticky or holds:
            log.info("restored sticky faults from the node", extra={
                "node": self.node, "devices": len(sticky), "recovery_gate_holds": len(holds),
                "rebooted": bool(book.boot_id and current_boot_id and book.boot_id != current_boot_id)})
        self.restored = True
        self.metrics.kubernetes_up(True)
        return True

    def now(self) -> float:
        return self._clock()

    def _seen(self, node: Mapping[str, Any]) -> None:
        meta = node.get("metadata")
        if self.node_seen is not None:
            self.node_seen(meta if isinstance(meta, dict) else {})

    # ------------------------------------------------------------------ one cycle
    def read_node(self) -> dict:
        """The Node as the API server has it (K8sError when it cannot be read)."""
        return self._writer().nodes.get(self.node)

    def budget(self, shares: Optional[Mapping[str, float]] = None) -> Budget:
        """How many accelerator nodes carry the taint (a Budget with ``error`` when unknown), and
        for each class of ``shares`` (health.classes); read-only: no fleet-wide slot is taken
        (``health --dry-run`` reports with it)."""
        return self._budget(shares, take_slot=False)

    def view(self, snapshot: NodeSnapshot, ev: Evaluation) -> ClusterView:
        """What the plan reads from the cluster besides the Node (read-only)."""
        return self._view(snapshot, ev)

    def _budget(self, shares: Optional[Mapping[str, float]] = None, take_slot: bool = True) -> Budget:
        """Accelerator nodes and those carrying the taint (for each class of ``shares`` too: a
        device class's budget share); with the fleet-wide budget, the decision is a Lease slot
        (nodes failing in the same minute cannot overshoot)."""
        # with cluster access only (the writer's listing below), so not at module level
        from hetero_exporter.health.act.fleet_budget import VIEW_SECONDS, fleet_view
        # the accelerator label is ours in labels mode; in nodefeature mode nfd-master writes it (if
        # it accepts it), so the nodes are found by our marks as without labels
        selector = f"{self.cfg.present_label}=true" if self.cfg.inventory and not self.cfg.nodefeature else None
        view, fleet = self._nodes_view, self._fleet
        if fleet is not None and take_slot and not shares and view is not None \
                and time.monotonic() - view.at < VIEW_SECONDS:
            full = fleet.full(Budget(total=view.total, tainted=0).limit(self.cfg), view)
            if full is not None:  # the slots alone refuse: no listing of every accelerator node
                log.info("health: no fleet-wide taint slot", extra={"node": self.node, "why": full.why})
                return Budget(total=view.total, tainted=full.held_by_others, granted=False)
        try:
            listing = self._fleet_listing(selector, classes=bool(shares))
        except K8sError as e:
            return Budget(0, 0, error=str(e))
        view = self._nodes_view = fleet_view(listing, self.cfg, self.node, labelled=selector is not None,
                                             classes=bool(shares), at=time.monotonic())
        if fleet is None or not take_slot:
            return Budget(total=view.total, tainted=len(view.tainted),
                          classes=counted_classes(shares or {}, view.by_class, self.node))
        budget, got = fleet.check(self.cfg, view.total, view.tainted, nodes=view.names, shares=shares,
                                  class_tainted=view.by_class)
        self.metrics.foreign("Lease", got.foreign)
        self._slot = bool(got.granted) or self._slot
        if not got.granted:
            log.info("health: no fleet-wide taint slot", extra={"node": self.node, "why": got.why})
        return budget

    def _fleet_listing(self, selector: Optional[str], classes: bool) -> FleetListing:
        """The accelerator Nodes and those carrying the taint, K8sError when they cannot be
        listed: every accelerator Node whole (by our marks when unlabelled), or, with the Lease
        slots and the accelerator label in a fleet of more than ``budget_whole_listing_max_nodes``
        (as last listed; a first listing asks the names), two light lists from the watch cache:
        the names as a Table (~140 bytes a node) and those with the taint's mirror label, as a
        Table too, or whole when ``classes`` (their books say which classes they are tainted
        for). This runs once per failing node: at 1,000 nodes the LISTs of every whole Node were
        97 % of the bytes the API server sent in a fault burst (BENCHMARKS.md "Fleet burst"). A
        taint without its mirror label (put there by hand on a node whose agent is not running,
        or by an older agent) counts only in a whole listing."""
        from hetero_exporter.health.act.fleet_budget import FleetListing
        nodes = self._writer().nodes
        if self._fleet is None or selector is None:
            return FleetListing(nodes.list(selector, cached=self._fleet is not None))
        named: Optional[list[str]] = None
        if self._nodes_view is None:  # the fleet's size not known yet: the cheap list says it
            named = nodes.names(selector, cached=True)
            size = len(named)
        else:
            size = self._nodes_view.total
        if size <= self.cfg.budget_whole_listing_max_nodes:
            return FleetListing(nodes.list(selector, cached=True))
        named = named if named is not None else nodes.names(selector, cached=True)
        tainted = f"{selector},{self.cfg.taint_key}"
        if classes:
            return FleetListing(nodes.list(tainted, cached=True), names=named)
        return FleetListing(names=named, labelled=nodes.names(tainted, cached=True))

    def _lost(self) -> bool:
        return self._fleet is not None and self._fleet.lost

    def _keep_slot(self, p: Plan) -> None:
        """Renew the budget slot while the taint is on; give it back once it is off."""
        if self._fleet is None:
            return
        if p.book.taint and p.book.taint.get("applied"):
            # the taint has just landed: read the slots back (the fence; a lost one is rechecked)
            note = self._fleet.confirm() if self._fleet.carrying() else None
            if note is None:
                note = self._fleet.renew(p.book.taint.get("classes") or ())  # the slots of its classes now
            self._slot = note is None
        elif p.book.taint is None and (self._slot is not False or self._fleet.lost):
            note = self._fleet.release()  # also after a start, or a recheck: what is held is given back
            self._slot = False if note is None else None
        else:
            return
        if note:
            log.warning("health: taint slot", extra={"node": self.node, "note": note})

    def _signature(self, snapshot: NodeSnapshot, ev: Evaluation) -> tuple:
        """What the plan depends on, apart from the Node itself and the clock."""
        # a recovery gate's result is said in the condition: its text counts, not only its code
        devices = tuple(sorted((u, v.state, tuple(f.code if f.code != GATE_CODE else f"{f.code} {f.message}"
                                                  for f in v.reasons)) for u, v in ev.verdicts.items()))
        sticky = tuple(sorted((u, tuple(sorted(st.fault.code for st in items))) for u, items in ev.sticky.items()))
        inventory: tuple = ()
        if self.cfg.inventory:
            inventory = (plan_mod.inventory(snapshot, self.cfg.inventory_max_bytes)[1],
                         tuple(sorted(plan_mod.selection_labels(snapshot, self.cfg.domain).items())))
        failing = {u for u, v in ev.verdicts.items() if v.state in FAILING}
        holders = tuple(sorted((d.identity.uuid, tuple(sorted((a.namespace, a.pod) for a in d.allocations)),
                                tuple(sorted((pr.namespace or "", pr.pod) for pr in d.processes if pr.pod)))
                               for d in snapshot.devices if d.identity.uuid in failing))
        overrides = tuple((n.uuid, n.key, n.expired) for n in ev.overrides)
        holds = tuple(sorted((u, h.failed_at, h.recovering_since) for u, h in ev.holds.items()))
        return (ev.node.unhealthy, ev.node.taint_class, devices, sticky, inventory, snapshot.boot_id, holders,
                overrides, holds)

    def reconcile(self, snapshot: NodeSnapshot, ev: Evaluation) -> Outcome:
        """Bring the Node in line with the verdicts. Never raises."""
        self.metrics.promotions(ev.promotions)
        api = self._api
        if api is None:
            p = plan_mod.plan(empty_node(self.node), snapshot, ev.verdicts, ev.node, self.policy, self.cfg,
                              self._clock(), sticky=ev.sticky, overrides=ev.overrides, holds=ev.holds)
            self.metrics.node(p.verdict.unhealthy if p.verdict is not None else ev.node.unhealthy)
            return Outcome(plan=p, skipped="observe mode" if self.cfg.mode == "observe" else "no cluster access")
        now = self._clock()
        sig = self._signature(snapshot, ev)
        resync = self.cfg.resync_seconds
        if "hami" in self.cfg.scheduler_annotations and ev.node.failed:
            # HAMi's device plugin rewrites its register annotation from its own view every ~30 s:
            # put the failed devices' health back sooner than the plain resync would
            resync = min(resync, HAMI_RESYNC_SECONDS)
        if sig == self._last_sig and now - self._last_full < resync:
            if self._fleet is not None and self._slot:
                self._fleet.renew()  # a held slot outlives quiet cycles (writes only when a third is gone)
            if not self._lost():
                return Outcome(skipped="nothing changed since the last reconcile")
        recheck = self._lost()
        out = self._reconcile(api, snapshot, ev, now, recheck=recheck)
        if not recheck and self._lost() and out.error is None:
            # carrying the taint, this node has just found its slot taken over: take another or
            # give the taint back now (until then the fleet may carry one taint over its budget)
            recheck, out = True, _both(out, self._reconcile(api, snapshot, ev, self._clock(), recheck=True))
        if recheck and self._fleet is not None and self._fleet.lost and out.plan is not None \
                and out.plan.budget is None:
            self._fleet.forget_loss()  # nothing was asked (someone removed our taint, or it recovered)
        deferred = out.plan is not None and out.plan.pod_signals is not None and out.plan.pod_signals.deferred
        complete = out.error is None and out.plan is not None and not out.undelivered and not deferred
        self._last_sig = sig if complete else None
        if complete:  # the first one is dated forward by the jitter: the resyncs' phase
            self._last_full = now + self._resync_offset if self._last_full == float("-inf") else now
        return out

    def _reconcile(self, api: _Api, snapshot: NodeSnapshot, ev: Evaluation, now: float,
                   recheck: bool = False) -> Outcome:
        out = Outcome()
        for _ in range(self.cfg.conflict_retries + 1):
            try:
                node = api.nodes.get(self.node)
            except K8sError as e:
                self.metrics.node(ev.node.unhealthy)  # without the Node, the verdict before its labels' classes
                self.metrics.kubernetes_up(False)
                self.metrics.action("read", "error")
                out.error = f"cannot read node {self.node}: {e}"
                log.warning("health: cannot read the node", extra={"node": self.node, "error": str(e)})
                return out
            self.metrics.kubernetes_up(True)
            self._seen(node)
            book = Book.from_annotation(((node.get("metadata") or {}).get("annotations") or {}).get(
                self.cfg.book_annotation))
            p = out.plan = self._plan(node, snapshot, ev, now, recheck)
            # the node verdict with the devices' classes (a skipped cycle keeps it: nothing changed)
            self.metrics.node(p.verdict.unhealthy if p.verdict is not None else ev.node.unhealthy)
            budget = p.budget
            if budget is not None:
                self.metrics.budget(p.budget_refused, budget.total if budget.error is None else None,
                                    budget.tainted if budget.error is None else None)
            elif not (ev.node.unhealthy or p.node_faults) or (book.taint and book.taint.get("applied")):
                self.metrics.budget(False)
            if p.node_patch is None:
                break
            rv = (node.get("metadata") or {}).get("resourceVersion")
            try:
                api.nodes.patch(self.node, p.node_patch, resource_version=rv)
            except K8sError as e:
                if e.conflict:
                    out.conflicts += 1
                    self.metrics.action("node", "conflict")
                    continue  # someone wrote the node since we read it: read and plan again
                self._count(p, "error")
                out.error = f"cannot patch node {self.node}: {e}"
                log.warning("health: node patch failed; the next cycle re-reads the node",
                            extra={"node": self.node, "error": str(e)})
                return out
            out.wrote_node = True
            self._count(p, None)
            for action, what in p.actions:
                if action in ("taint", "untaint", "cordon", "uncordon"):
                    log.info("health action", extra={"node": self.node, "action": action, "what": what,
                                                    "mode": self.cfg.mode})
            break
        else:
            out.error = f"node {self.node} kept changing under us ({out.conflicts} conflicts); next cycle"
            return out
        self._keep_slot(p)
        if self._lost() and not recheck:
            return out  # its taint landed on a slot taken over: the recheck at once writes the rest
        if p.status_patch is not None:
            try:
                api.nodes.patch_status(self.node, p.status_patch)
                out.wrote_condition = True
                if any(a == "condition" for a, _ in p.actions):
                    self.metrics.action("condition", "ok")
            except K8sError as e:
                self.metrics.action("condition", "error")
                out.error = f"cannot write the condition: {e}"
        out.applied = api.cluster.apply(p)
        self._settle(p, out.applied)
        if out.applied.errors and out.error is None:
            out.error = "; ".join(out.applied.errors[:3])
        out.events_sent, out.undelivered = self._deliver(api, p, now)
        return out

    def _plan(self, node: dict, snapshot: NodeSnapshot, ev: Evaluation, now: float, recheck: bool) -> Plan:
        """The plan against the Node as read; the budget is asked only when the taint would be
        added (black-hole faults included), or kept on a ``recheck``."""
        view = self._view(snapshot, ev)

        def planned(budget: "Budget | Callable[[Mapping[str, float]], Budget]") -> Plan:
            return plan_mod.plan(node, snapshot, ev.verdicts, ev.node, self.policy, self.cfg, now,
                                 budget=budget, sticky=ev.sticky, view=view, overrides=ev.overrides,
                                 occurrences=ev.occurrences, holds=ev.holds, recheck=recheck)
        p = planned(self._budget)
        late = self._fleet.late() if self._fleet is not None and p.budget and p.budget.granted else None
        if late is not None and p.budget is not None:
            # granted, but planning took so long that the taint could land after the others count
            # its slot free (an overloaded node or API server): refused, the slot given back
            p = planned(Budget(p.budget.total, p.budget.tainted, error=late))
        return p

    def _view(self, snapshot: NodeSnapshot, ev: Evaluation) -> ClusterView:
        failing = any(v.state in FAILING for v in ev.verdicts.values())
        return self._writer().cluster.view(snapshot, failing, self._pods_book)

    def _settle(self, p: Plan, applied: Applied) -> None:
        """The pod records the next plan starts from: what the writes really did (a failed
        condition is written again, a refused eviction retried, a gone pod forgotten)."""
        if p.pod_signals is None:
            self._pods_book = None
            return
        settled = pod_signals.settle(p.pod_signals, p.book.pods, applied.failed_conditions,
                                     applied.refused_evictions, applied.failed_evictions, now=self._clock())
        for key in applied.gone:
            settled.pop(key, None)
        self._pods_book = settled if settled != p.book.pods else None

    def _count(self, p: Plan, forced: Optional[str]) -> None:
        for action, what in p.actions:
            if action == "condition" or action in CLUSTER_ACTIONS:
                continue  # counted when the status patch lands, or when applied (remedy_cluster)
            self.metrics.action(action, forced or _result(what))

    def announce_removed(self, removed: Sequence[DeviceIdentity]) -> list[DeviceIdentity]:
        """A Normal ``AcceleratorRemoved`` event per device forgotten as removed (sdk/identity.py);
        the ones not sent (API down) are returned, to be offered again. The event name is the
        device's, so a resend after a restart is AlreadyExists, not a second event."""
        if self._api is None:
            return []
        from hetero_exporter.k8s.events import NodeEvent  # with cluster access only
        events = self._api.events
        now = self._clock()
        for i, ident in enumerate(removed):
            digest = hashlib.sha1(f"{ident.vendor}/{ident.uuid}".encode()).hexdigest()[:10]
            ev = NodeEvent(name=f"{self.node}.removed-{digest}"[:253], type="Normal", reason="AcceleratorRemoved",
                           message=(f"{ident.vendor} {ident.kind} {ident.index} ({ident.uuid}, PCI "
                                    f"{ident.pci_address or 'unknown'}) remembered from an earlier boot is on neither "
                                    f"the PCI bus nor its tool: removed, forgotten"), action="forget", time=now)
            try:
                created = events.create(self.node, ev, now)
            except K8sError as e:
                self.metrics.action("event", "error")
                log.warning("health: removal event not sent; retried next cycle",
                            extra={"node": self.node, "error": str(e)})
                return list(removed[i:])
            self.metrics.action("event", "ok" if created else "exists")
        return []

    def _deliver(self, api: _Api, p: Plan, now: float) -> tuple[int, int]:
        """Send the outbox entries not known to be delivered (a resend is AlreadyExists);
        (sent now, still undelivered)."""
        from hetero_exporter.k8s.events import NodeEvent, ObjectRef  # with cluster access only
        sent = 0
        ids = {e.get("id") for e in p.book.outbox}
        self._delivered &= ids
        for entry in p.book.outbox:
            eid = entry.get("id")
            if not eid or eid in self._delivered:
                continue
            target = entry.get("pod")
            pod = target if isinstance(target, dict) else None
            ev = NodeEvent(name=f"{pod['name'] if pod else self.node}.{eid}"[:253], type=entry.get("type", "Normal"),
                           reason=entry.get("reason", "Accelerator"), message=entry.get("message", ""),
                           action=entry.get("action", ""), time=entry.get("time"))
            here = api.cluster.on_node(str(pod.get("namespace")), str(pod.get("name"))) if pod else True
            if here is None:
                break  # the pod cannot be read now: the event waits for the next cycle
            if not here:  # the API places it on another node, or it is gone: no event of ours on it
                self._delivered.add(eid)
                log.warning("health: pod event not sent: the pod is not on this node",
                            extra={"node": self.node, "pod": f"{pod.get('namespace')}/{pod.get('name')}" if pod else ""})
                continue
            try:
                if pod:
                    uid = api.cluster.uid(str(pod.get("namespace")), str(pod.get("name")), str(pod.get("uid") or ""))
                    ref = ObjectRef("Pod", str(pod.get("name")), str(pod.get("namespace")), uid)
                    created = api.events.create_for(ref, ev, now, host=self.node)
                else:
                    created = api.events.create(self.node, ev, now)
            except K8sError as e:
                if e.status == 403:  # refused for good (RBAC, the admission policy): a retry would block the outbox
                    self._delivered.add(eid)
                    self.metrics.action("event", "refused")
                    log.warning("health: event refused by the API server (403); dropped",
                                extra={"node": self.node, "reason": ev.reason, "error": str(e)})
                    continue
                self.metrics.action("event", "error")
                log.warning("health: event not sent; retried next cycle", extra={"node": self.node, "error": str(e)})
                break
            self._delivered.add(eid)
            self.metrics.action("event", "ok" if created else "exists")
            sent += int(created)
        undelivered = sum(1 for e in p.book.outbox if e.get("id") not in self._delivered)
        return sent, undelivered


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class HealthLoop:
    """Reconciles on its own thread with the latest snapshot (older ones are skipped)."""

    def __init__(self, remedy: Remedy, verdicts: HealthVerdicts, *, boot_id: Optional[str] = None,
                 idle_seconds: float = 1.0):
        self.remedy = remedy
        self.verdicts = verdicts
        key = remedy.cfg.keys.health_override
        remedy.node_seen = lambda meta: verdicts.see_node(_as_dict(meta.get("annotations")), key, remedy.now(),
                                                          labels=_as_dict(meta.get("labels")))
        if verdicts.gates_of is None:  # the recovery gates before the first plan (app/agent.py sets its own)
            verdicts.gates_of = class_gates(remedy.cfg, remedy.resource_of)
        self._boot_id = boot_id
        self._idle = idle_seconds
        self._lock = threading.Lock()
        self._latest: Optional[tuple[NodeSnapshot, Evaluation]] = None  # a snapshot and its evaluation
        self._removed: list[DeviceIdentity] = []  # forgotten devices not yet announced (a snapshot may be skipped)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.last: Optional[Outcome] = None
        self.cycles = 0

    def offer(self, snapshot: NodeSnapshot, evaluation: Optional[Evaluation]) -> None:
        """SnapshotStore subscriber: keep the newest snapshot with the evaluation the judge made
        of it (None: not judged, nothing to act on), wake the loop (called on the sampler thread)."""
        with self._lock:
            self._latest = (snapshot, evaluation) if evaluation is not None else None
            self._removed = (self._removed + list(snapshot.removed))[-MAX_REMOVED:]
        self._wake.set()

    def run_once(self) -> Optional[Outcome]:
        with self._lock:
            latest, self._latest = self._latest, None
            removed, self._removed = self._removed, []
        if removed:
            unsent = self.remedy.announce_removed(removed)
            with self._lock:
                self._removed = (unsent + self._removed)[-MAX_REMOVED:]
        if latest is None:
            return None
        if not self.remedy.restored:
            # Act only on verdicts that include the sticky faults recorded before a restart:
            # restore now (or retry next time the API answers) and act from the next snapshot.
            self.remedy.restore_into(self.verdicts, self._boot_id)
            return None
        snap, ev = latest
        try:
            out = self.remedy.reconcile(snap, ev)
        except Exception:  # noqa: BLE001 - the loop outlives any bug in one cycle
            log.exception("health reconcile failed")
            return None
        self.last = out
        self.cycles += 1
        if out.plan is not None:  # each device's recovery gate, as its class says now (the next judgement's)
            self.verdicts.see_gates(out.plan.classes.gates())
        return out

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._idle)
            self._wake.clear()
            if self._stop.is_set():
                break
            self.run_once()

    def start(self) -> "HealthLoop":
        self._thread = threading.Thread(target=self._loop, name="health-loop", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
