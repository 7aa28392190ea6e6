"""``plan(...) -> Plan``: what the agent should do to its Node now, composed from the typed
sub-plans in a fixed order: announcements, taint (with the budget), cordon, condition,
inventory, bookkeeping. Each is a pure function of what it is given; this module only reads the
Node apart and merges their explain lines, actions, events and patch parts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from hetero_exporter.health.plan.announce import Announcements, announce, with_node_actions
from hetero_exporter.health.plan.book import Book
from hetero_exporter.health.plan.bookkeeping import bookkeeping
from hetero_exporter.health.plan.budget import Budget, needs_budget
from hetero_exporter.health.plan.classes import ClassTable
from hetero_exporter.health.plan.cluster import (ClusterView, plan_annotations, plan_classes, plan_device_rules,
                                                 plan_node_faults, plan_nodefeature, plan_pods)
from hetero_exporter.health.plan.condition import plan_condition
from hetero_exporter.health.plan.config import RemedyConfig
from hetero_exporter.health.plan.black_hole import NodeFault
from hetero_exporter.health.plan.cordon import CordonPlan, plan_cordon
from hetero_exporter.health.plan.device_taints import DeviceTaintPlan
from hetero_exporter.health.plan.inventory import InventoryPlan, plan_inventory, selection_labels
from hetero_exporter.health.plan.nodefeature import NodeFeaturePlan
from hetero_exporter.health.plan.overrides import plan_overrides
from hetero_exporter.health.plan.pod_signals import PodSignalPlan
from hetero_exporter.health.plan.records import OutboxEvent, PodTarget
from hetero_exporter.health.plan.scheduler_annotations import AnnotationPlan
from hetero_exporter.health.plan.stack import with_stack
from hetero_exporter.health.plan.taint import TaintPlan, plan_taint, taint_label, with_classes
from hetero_exporter.health.detect.policy import Policy
from hetero_exporter.health.detect.rules import NodeVerdict, StickyFault, Verdict
from hetero_exporter.health.detect.texts import device_name
from hetero_exporter.model import NodeSnapshot
from hetero_exporter.model.evaluation import GateHold, OccurrenceBook, OverrideNote


@dataclass
class Plan:
    node: str
    mode: str
    node_patch: Optional[dict] = None  # strategic merge patch of metadata/spec (with the book)
    status_patch: Optional[dict] = None  # strategic merge patch of status.conditions
    condition: Optional[dict] = None  # the condition we want (whether or not it is written)
    events: list[OutboxEvent] = field(default_factory=list)  # outbox entries added by this plan
    actions: list[tuple[str, str]] = field(default_factory=list)  # (action, what) for the metrics
    explain: list[str] = field(default_factory=list)
    budget_refused: bool = False
    budget: Optional[Budget] = None  # the budget asked (None: the taint did not need it)
    book: Book = field(default_factory=Book)
    # The per-device outputs of issue 15 (cluster.py: None when off, or in a mode that has none)
    device_taints: Optional[DeviceTaintPlan] = None  # DRA DeviceTaintRules (device_taints.py)
    pod_signals: Optional[PodSignalPlan] = None  # pod conditions, events, evictions (pod_signals.py)
    scheduler_annotations: Optional[AnnotationPlan] = None  # Volcano's and HAMi's (scheduler_annotations.py)
    nodefeature: Optional[NodeFeaturePlan] = None  # the selection labels for NFD (nodefeature.py)
    node_faults: list[NodeFault] = field(default_factory=list)  # black-hole faults (black_hole.py)
    classes: ClassTable = field(default_factory=ClassTable)  # each device's class and policy (classes.py)
    verdict: Optional[NodeVerdict] = None  # the node verdict the plan acted on (classes and black-hole faults in)

    @property
    def writes(self) -> bool:
        return self.node_patch is not None or self.status_patch is not None


def plan(node: Mapping[str, Any], snapshot: NodeSnapshot, verdicts: Mapping[str, Verdict], nv: NodeVerdict,
         policy: Policy, cfg: RemedyConfig, now: float, *,
         budget: Union[Budget, Callable[[Mapping[str, float]], Budget], None] = None,
         sticky: Optional[Mapping[str, list[StickyFault]]] = None, view: Optional[ClusterView] = None,
         overrides: Sequence[OverrideNote] = (), occurrences: Optional[OccurrenceBook] = None,
         holds: Optional[Mapping[str, GateHold]] = None, recheck: bool = False) -> Plan:
    """The plan against ``node`` as read (a dict as the API server sends it). ``budget``: the
    budget, or a function asked for it only when the taint would be added (``needs_budget``, on
    the node verdict with the black-hole faults); ``view``: the rest of the cluster the remedy
    read (ResourceSlices, its DeviceTaintRules, failed pods); without it the plan is the Node's alone;
    ``overrides``: the operators' overrides the evaluation read (their events, overrides.py);
    ``occurrences``: what health.promote counted and ``holds`` the devices the recovery gates
    watch (kept in the book, as the sticky faults; None: as the book has them); ``recheck``: ask
    the budget again for our taint already on (its fleet slot was lost): a refusal takes it off."""
    meta = node.get("metadata") or {}
    name = meta.get("name") or snapshot.node
    annotations = dict(meta.get("annotations") or {})
    spec = node.get("spec") or {}
    book = Book.from_annotation(annotations.get(cfg.book_annotation))
    p = Plan(node=name, mode=cfg.mode, book=dataclasses.replace(book, broken=""))
    if book.broken:
        p.explain.append(book.broken)
    if not snapshot.devices and cfg.book_annotation not in annotations:
        # a node without accelerators (the DaemonSet runs everywhere): nothing to say about it
        p.explain.append("no accelerator on this node and nothing of this agent's on the Node: nothing to write")
        return p
    book = p.book
    view = view or ClusterView()
    by_uuid = {d.identity.uuid: d for d in snapshot.devices}
    p.classes, nv = plan_classes(name, node, snapshot, verdicts, nv, policy, view, cfg)
    faults = with_stack(plan_node_faults(name, node, view, verdicts, nv, book.black_hole, cfg, now), name,
                        snapshot, view, book.black_hole, cfg, now)  # plugin pods: reasons, no taint (stack.py)
    p.verdict = nv = faults.verdict
    p.node_faults = list(faults.faults)
    p.device_taints = plan_device_rules(name, view, verdicts, by_uuid, policy, cfg, now, p.classes)
    p.pod_signals = plan_pods(name, snapshot, verdicts, book.pods, view, policy, cfg, now, p.classes)
    p.scheduler_annotations = plan_annotations(annotations, verdicts, by_uuid, book.scheduler, cfg)
    p.nodefeature = plan_nodefeature(name, node, snapshot, view, cfg)
    news = announce(name, snapshot, verdicts, book.devices, policy, now, sticky)
    ovr = plan_overrides(name, overrides, book.overrides, {u: device_name(d) for u, d in by_uuid.items()}, now)
    taints = [dict(t) for t in spec.get("taints") or [] if isinstance(t, dict)]
    if callable(budget):
        budget = budget(p.classes.shares(nv.culprits)) if needs_budget(nv, book, cfg, recheck) else None
    p.budget = budget
    taint = plan_taint(name, taints, book.taint, book.suppressed, book.refused_since, nv, cfg, now, budget,
                       recheck=recheck)
    taint = with_classes(taint, p.classes.names(nv.culprits)) if cfg.classes else taint
    cordon = plan_cordon(name, bool(spec.get("unschedulable")), nv, book.cordoned, taint.suppressed,
                         taint.refused, cfg, p.classes.cordon(nv.culprits) if cfg.classes else None)
    condition = plan_condition((node.get("status") or {}).get("conditions") or [], snapshot, verdicts, nv,
                               policy, cfg, now, taint.refused, node_faults=faults.faults)
    ready = p.nodefeature is not None and (p.nodefeature.writes or bool(p.nodefeature.labels)
                                           or not selection_labels(snapshot, cfg.domain))
    inv = plan_inventory(snapshot, dict(meta.get("labels") or {}), annotations, book.labels, book.inventory_hash,
                         book.inventory_time, cfg, now, nodefeature_ready=ready)
    mirror = taint_label(meta.get("labels") or {}, taint.taints, cfg)  # the budget lists tainted nodes by it
    cluster_parts = [x for x in (p.device_taints, p.pod_signals, p.scheduler_annotations, p.nodefeature)
                     if x is not None]
    for part in (faults, news, ovr, taint, cordon, condition, inv, *cluster_parts):
        p.explain.extend(part.explain)
        p.actions.extend(getattr(part, "actions", ()))
    p.budget_refused = taint.refused
    node_events = with_node_actions(list(faults.events) + list(news.events), taint.notes + cordon.notes, name, nv,
                                    now, cfg.mode == "dry-run")
    p.events = node_events + list(ovr.events) + list(taint.events) + _pod_outbox(p.pod_signals, book.outbox, cfg, now)
    p.condition, p.status_patch = condition.condition, condition.status_patch
    book = _merged(book, news, taint, cordon, inv)
    book = dataclasses.replace(
        book, black_hole=faults.state, overrides=ovr.honoured,
        pods=p.pod_signals.book if p.pod_signals is not None else book.pods,
        scheduler=p.scheduler_annotations.owned if p.scheduler_annotations is not None else book.scheduler)
    new_annotations: dict[str, Optional[str]] = dict(inv.annotations)  # None: remove the annotation
    if p.scheduler_annotations is not None:
        new_annotations.update(p.scheduler_annotations.patch)
    said = {u: v.reasons[0].message or "" for u, v in verdicts.items() if v.state == "recovering" and v.reasons}
    kept = bookkeeping(book, annotations, p.events, snapshot.boot_id, sticky, cfg, now, occurrences=occurrences,
                       holds=holds, said=said, new_annotations=new_annotations, new_labels={**inv.labels, **mirror},
                       spec={**taint.spec, **cordon.spec})
    p.book, p.node_patch = kept.book, kept.node_patch
    return p


def _merged(book: Book, news: Announcements, taint: TaintPlan, cordon: CordonPlan, inv: InventoryPlan) -> Book:
    """The book with what each sub-plan decided (the cordon has the last word on suppression)."""
    return dataclasses.replace(
        book, devices=news.devices, taint=taint.taint, refused_since=taint.refused_since,
        suppressed=cordon.suppressed, cordoned=cordon.cordoned, labels=inv.owned,
        inventory_hash=inv.inventory_hash, inventory_time=inv.inventory_time)


def _pod_outbox(ps: Optional[PodSignalPlan], outbox: Sequence[OutboxEvent], cfg: RemedyConfig,
                now: float) -> list[OutboxEvent]:
    """The pod events as outbox entries (delivered with the node's, restart-safe on the Node);
    ``pod`` names the involved Pod; one already in the outbox is not added again. Dry-run sends
    none: the node's explain lines say what it would do."""
    if ps is None or cfg.mode != "enforce" or not cfg.pod_events:
        return []
    queued = {e.get("id") for e in outbox}
    return [OutboxEvent(id=f"pod-{e.id}", type=e.type, reason=e.reason, message=e.message,
                        action="Fault" if e.type == "Warning" else "Recover", time=now,
                        pod=PodTarget(namespace=e.namespace, name=e.name, uid=e.uid))
            for e in ps.events if f"pod-{e.id}" not in queued]
