"""The sub-plans over what the remedy read from the cluster besides the Node (``ClusterView``):
black-hole node faults (they change the node verdict, so they come first), DRA device taints, pod
signals and scheduler annotations. Each wraps one pure module of health/ with the settings taken
from RemedyConfig; compose.py calls them in that order."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from hetero_exporter.health.plan import black_hole, classes, device_taints, nodefeature, pod_signals, scheduler_annotations
from hetero_exporter.health.plan.config import RemedyConfig
from hetero_exporter.health.plan.inventory import selection_labels
from hetero_exporter.health.plan.records import BlackHoleState, OutboxEvent, PodRecord
from hetero_exporter.health.detect.texts import event_id
from hetero_exporter.health.detect.policy import Policy
from hetero_exporter.health.detect import rules
from hetero_exporter.health.detect.rules import NodeVerdict, Verdict
from hetero_exporter.model import DeviceSample, NodeSnapshot


@dataclass(frozen=True)
class ClusterView:
    """What the remedy read from the cluster besides the Node."""

    slices: Optional[tuple] = None  # this node's ResourceSlices; None: DRA not served or not read
    device_rules: tuple = ()  # the DeviceTaintRules this agent made (by label)
    failed_pods: Optional[tuple] = None  # this node's pods in phase Failed; None: not read
    resources: Mapping[str, str] = field(default_factory=dict)  # device uuid -> extended resource it is allocated as
    pods_book: Optional[Mapping[str, PodRecord]] = None  # pod records settled after the last writes (None: the Node's)
    nodefeature: Optional[nodefeature.NodeFeatureRead] = None  # None: not read (off, not served, or unreadable)
    stack: Optional[tuple] = None  # stack.PluginRead per vendor plugin selector (stack.py); None: not read


@dataclass(frozen=True)
class NodeFaults:
    """Black-hole faults folded into the node verdict, with their announcements."""

    faults: tuple[black_hole.NodeFault, ...]
    verdict: NodeVerdict  # the node verdict with the faults
    state: BlackHoleState  # the book's new ``black_hole``
    events: tuple[OutboxEvent, ...] = ()
    explain: tuple[str, ...] = ()


def plan_classes(name: str, node: Mapping[str, Any], snapshot: NodeSnapshot, verdicts: Mapping[str, Verdict],
                 nv: NodeVerdict, policy: Policy, view: ClusterView, cfg: RemedyConfig) -> tuple[classes.ClassTable, NodeVerdict]:
    """Each device's class and what is done for it (health.classes, from the snapshot, the Node's
    labels and the ResourceSlices read), and the node verdict with the classes' ``node_taint``;
    without classes, the node-wide settings and the verdict as the judge made it."""
    if not cfg.classes:
        return classes.ClassTable(default=cfg.class_default), nv
    by_uuid = {d.identity.uuid: d for d in snapshot.devices}
    pools = device_taints.dra_pools(name, list(view.slices), by_uuid) if view.slices else {}
    labels = (node.get("metadata") or {}).get("labels")
    table = classes.assign(snapshot, cfg.classes, cfg.class_default, labels if isinstance(labels, Mapping) else {},
                           pools, view.resources)
    return table, rules.node_verdict(snapshot, verdicts, policy, table.node_taint())


def plan_node_faults(name: str, node: Mapping[str, Any], view: ClusterView, verdicts: Mapping[str, Verdict],
                     nv: NodeVerdict, state: BlackHoleState, cfg: RemedyConfig, now: float) -> NodeFaults:
    """A node that looks Ready but rejects accelerator pods is unhealthy: its faults name it.
    A Warning event when a fault appears, a Normal one when it clears (``state["announced"]``)."""
    announced = dict(state.get("announced") or {}) if isinstance(state, Mapping) else {}
    if not cfg.black_hole or view.failed_pods is None:
        return NodeFaults((), nv, BlackHoleState(**state) if isinstance(state, Mapping) else BlackHoleState())
    bh = black_hole.detect_black_hole(
        dict(node), list(view.failed_pods), view.resources, verdicts, state,
        black_hole.BlackHoleSettings(cfg.admission_failures_min, cfg.admission_window_seconds,
                                     cfg.allocatable_grace_seconds), now)
    events: list[OutboxEvent] = []
    for f in bh.faults:
        if f.code not in announced:
            announced[f.code] = now
            events.append(OutboxEvent(id=event_id(name, "node-fault", f.code, now), type="Warning", reason=f.reason,
                                      message=f"{name}: {f.message}", action="Fault", time=now))
    current = {f.code for f in bh.faults}
    for code in sorted(set(announced) - current):
        since = announced.pop(code)
        events.append(OutboxEvent(id=event_id(name, "node-fault-cleared", code, since), type="Normal",
                                  reason="AcceleratorNodeFaultCleared", message=f"{name}: {code} cleared",
                                  action="Recover", time=now))
    verdict = nv
    if bh.faults:
        why = "; ".join(f.message for f in bh.faults)
        verdict = dataclasses.replace(nv, unhealthy=True, taint_class=nv.taint_class or bh.faults[0].code,
                                      why=f"{why}; {nv.why}" if nv.unhealthy else why)
    new_state = BlackHoleState(**bh.state)
    if announced:
        new_state["announced"] = announced
    return NodeFaults(tuple(bh.faults), verdict, new_state, tuple(events), tuple(bh.explain))


def plan_device_rules(name: str, view: ClusterView, verdicts: Mapping[str, Verdict],
                      by_uuid: Mapping[str, DeviceSample], policy: Policy, cfg: RemedyConfig,
                      now: float, table: Optional[classes.ClassTable] = None) -> Optional[device_taints.DeviceTaintPlan]:
    """DeviceTaintRules for the failed devices a ResourceSlice of this node lists (the effect of
    each device's class); None when off, in observe mode or without DRA. Dry-run plans them
    (explain) and writes nothing."""
    if not cfg.device_taints or cfg.mode == "observe" or view.slices is None:
        return None
    settings = device_taints.DeviceTaintSettings(cfg.domain, cfg.device_taint_no_execute, cfg.device_taint_degraded,
                                                 table.effects() if table is not None and cfg.classes else {})
    dt = device_taints.plan_device_taints(name, list(view.slices), list(view.device_rules), verdicts, by_uuid,
                                          policy, settings, now)
    if cfg.mode == "dry-run":
        dt.actions = [(a, f"dry-run {what}") for a, what in dt.actions]
    return dt


def plan_pods(name: str, snapshot: NodeSnapshot, verdicts: Mapping[str, Verdict], book_pods: Mapping[str, PodRecord],
              view: ClusterView, policy: Policy, cfg: RemedyConfig, now: float,
              table: Optional[classes.ClassTable] = None) -> Optional[pod_signals.PodSignalPlan]:
    """Conditions, events and (opt-in, by the devices' classes) evictions for the pods holding
    failed devices; None when all are off or in observe mode."""
    evicting = table.evicting() if table is not None and cfg.classes else None
    if cfg.mode == "observe" or not (cfg.pod_conditions or cfg.pod_events or cfg.evict_pods or evicting):
        return None
    settled = view.pods_book if view.pods_book is not None else book_pods
    settings = pod_signals.PodSignalSettings(cfg.domain, cfg.pod_conditions, cfg.pod_events, cfg.evict_pods, evicting)
    ps = pod_signals.plan_pod_signals(name, snapshot, verdicts, settled, policy, settings, now)
    if cfg.mode == "dry-run":
        ps.actions = [(a, f"dry-run {what}") for a, what in ps.actions]
    return ps


def plan_nodefeature(name: str, node: Mapping[str, Any], snapshot: NodeSnapshot, view: ClusterView,
                     cfg: RemedyConfig) -> Optional[nodefeature.NodeFeaturePlan]:
    """The NodeFeature carrying the selection labels (nodefeature mode, dry-run and enforce; the
    remedy writes it in enforce mode only); None when off or when it could not be read."""
    if not cfg.nodefeature or cfg.mode == "observe" or view.nodefeature is None:
        return None
    uid = str((node.get("metadata") or {}).get("uid") or "")
    return nodefeature.plan_nodefeature(name, uid, selection_labels(snapshot, cfg.domain), view.nodefeature, cfg.mode)


def plan_annotations(annotations: Mapping[str, str], verdicts: Mapping[str, Verdict],
                     by_uuid: Mapping[str, DeviceSample], owned: Mapping[str, Sequence[str]],
                     cfg: RemedyConfig) -> Optional[scheduler_annotations.AnnotationPlan]:
    """Volcano's and HAMi's unhealthy-device annotations (enforce mode; configured ones, and the
    removal of what an integration no longer configured had marked)."""
    if cfg.mode != "enforce" or not (cfg.scheduler_annotations or owned):
        return None
    return scheduler_annotations.plan_scheduler_annotations(
        annotations, verdicts, by_uuid, cfg.scheduler_annotations, {k: list(v) for k, v in owned.items()})
