"""``hetero-exporter health --dry-run``: what the agent would do on this node now, and why.

``build`` makes the typed report (``DryRun``: per device its class, state, reasons and what would
be done for it, per node the taint, condition, cordon and evictions); ``to_json`` serializes it
once (``--json``, schema ``version`` 1: fields are added, never renamed); ``render`` prints it with
the plan's explanation for a person.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from hetero_exporter.health.detect.policy import Policy
from hetero_exporter.health.detect.verdicts import Evaluation
from hetero_exporter.health.plan import Plan, RemedyConfig, fault_text
from hetero_exporter.health.plan.book import said_in
from hetero_exporter.health.plan.device_taints import DeviceTaintPlan, json_at
from hetero_exporter.model import DeviceSample, Fault, NodeSnapshot

REPORT_VERSION = 1
_JSON_NAMES = {"device_class": "class", "fault_class": "class"}  # Python names -> the report's keys


@dataclass(frozen=True)
class Reason:
    code: str
    fault_class: str
    action: str
    severity: str
    message: str
    text: str  # as the node condition words it


@dataclass(frozen=True)
class DeviceReport:
    """One device: its class (None: none), state and reasons, and what would be done for it."""

    uuid: str
    vendor: str
    kind: str
    index: int
    model: str
    pci_address: Optional[str]
    parent: Optional[str]
    device_class: Optional[str]
    state: str
    reasons: tuple[Reason, ...]
    pending: Mapping[str, int]  # warning code -> polls seen, not yet confirmed
    occurrences: Mapping[str, int]  # code -> occurrences health.promote counts now
    device_taint_effect: Optional[str]  # the DeviceTaintRule effect it would carry (None: no taint)
    device_taint_rule: Optional[str]  # create | update | keep | not-listed | dra-not-read (None: no taint)
    taints_node: bool  # it is one of the devices that make the node unhealthy
    cordon: bool  # its failure cordons the node (its class, else health.cordon)
    evict_pods: bool  # its failure evicts the pods holding it


@dataclass(frozen=True)
class TaintReport:
    key: str
    value: Optional[str]
    effects: tuple[str, ...]
    action: str  # add | keep | remove | refused | none


@dataclass(frozen=True)
class ConditionReport:
    type: str
    status: str
    reason: str
    message: str
    write: bool  # False: the Node already carries it


@dataclass(frozen=True)
class EventReport:
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class NodeReport:
    name: str
    source: str  # where the Node compared against came from
    unhealthy: bool
    why: str
    taint: TaintReport
    condition: Optional[ConditionReport]
    cordon: str  # cordon | uncordon | keep | none
    evictions: tuple[str, ...]  # "namespace/name"
    budget: Optional[str]  # what the budget said, when asked
    events: tuple[EventReport, ...]
    explain: tuple[str, ...]


@dataclass(frozen=True)
class DryRun:
    node: NodeReport
    devices: tuple[DeviceReport, ...]
    mode: str = "enforce"  # the dry-run plans as the enforce mode would
    version: int = REPORT_VERSION
    classes: tuple[str, ...] = field(default_factory=tuple)  # the configured classes, in match order


def _reason(d: DeviceSample, f: Fault, policy: Policy) -> Reason:
    return Reason(str(f.code), f.fault_class, f.action, f.severity, f.message or "",
                  fault_text(d.identity.vendor, f, policy, d.identity.uuid))


def _rules(dt: Optional[DeviceTaintPlan], device_key: str) -> dict[str, str]:
    """uuid -> what the DeviceTaintRule plan does for it (create, update, not-listed)."""
    if dt is None:
        return {}
    out = {u: "not-listed" for u in dt.unmatched}
    for body in dt.create:
        out[str(json_at(body, "metadata", "annotations", device_key))] = "create"
    for u in dt.update:
        out[str(json_at(u.patch, "metadata", "annotations", device_key))] = "update"
    return out


def _device(d: DeviceSample, ev: Evaluation, p: Plan, policy: Policy, cfg: RemedyConfig,
            rules: Mapping[str, str]) -> DeviceReport:
    uuid, i = d.identity.uuid, d.identity
    v = ev.verdicts.get(uuid)
    state = v.state if v else d.health.state
    parent = ev.verdicts.get(i.parent) if i.parent else None
    own = p.classes.of(uuid)
    failed = state == "failed" or (parent is not None and parent.state == "failed")
    # recovering (its recovery gate has not passed): no new work, nothing evicted (device_taints.py)
    effect = own.device_taint_effect if failed else "NoSchedule" if state == "recovering" else (
        "None" if state == "degraded" and cfg.device_taint_degraded else None)
    effect = effect if cfg.device_taints else None
    rule = None if effect is None else rules.get(uuid) or ("keep" if p.device_taints is not None else "dra-not-read")
    occurred = {c: len(o.times) for c, o in sorted((ev.occurrences.get(uuid) or {}).items()) if o.times}
    culprits = p.verdict.culprits if p.verdict is not None else ev.node.culprits
    return DeviceReport(
        uuid=uuid, vendor=i.vendor, kind=i.kind, index=i.index, model=i.model, pci_address=i.pci_address,
        parent=i.parent, device_class=own.device_class or None, state=state,
        reasons=tuple(_reason(d, f, policy) for f in (v.reasons if v else d.health.reasons)),
        pending=dict(sorted(v.pending.items())) if v else {}, occurrences=occurred,
        device_taint_effect=effect, device_taint_rule=rule, taints_node=uuid in culprits,
        cordon=own.cordon, evict_pods=own.evict_pods)


def _taint(p: Plan, cfg: RemedyConfig) -> TaintReport:
    acts = {a for a, _ in p.actions}
    action = ("refused" if p.budget_refused else "add" if "taint" in acts else "remove" if "untaint" in acts
              else "keep" if p.book.taint else "none")
    rec = p.book.taint
    value = rec.get("value") if rec else None
    effects = tuple(rec.get("effects") or ()) if rec else ()
    if action in ("refused", "none") and p.verdict is not None and p.verdict.unhealthy:
        value, effects = value or p.verdict.taint_class, effects or cfg.effects
    return TaintReport(cfg.taint_key, value, effects, action)


def _node(snapshot: NodeSnapshot, ev: Evaluation, p: Plan, cfg: RemedyConfig, source: str) -> NodeReport:
    nv = p.verdict or ev.node
    c = p.condition
    condition = None if c is None else ConditionReport(str(c["type"]), str(c["status"]), str(c["reason"]),
                                                       str(c["message"]), p.status_patch is not None)
    acts = [a for a, _ in p.actions]
    cordon = next((a for a in acts if a in ("cordon", "uncordon")), "keep" if p.book.cordoned else "none")
    evictions = tuple(f"{r.namespace}/{r.name}" for r in (p.pod_signals.evictions if p.pod_signals else ()))
    return NodeReport(
        name=p.node, source=source, unhealthy=nv.unhealthy, why=nv.why, taint=_taint(p, cfg), condition=condition,
        cordon=cordon, evictions=evictions, budget=p.budget.describe(cfg) if p.budget is not None else None,
        events=tuple(EventReport(e["type"], e["reason"], e["message"]) for e in p.events), explain=tuple(p.explain))


def build(snapshot: NodeSnapshot, ev: Evaluation, p: Plan, policy: Policy, cfg: RemedyConfig,
          source: str) -> DryRun:
    """The dry-run's report of one plan."""
    rules = _rules(p.device_taints, cfg.keys.device)
    devices = tuple(_device(d, ev, p, policy, cfg, rules) for d in snapshot.devices)
    return DryRun(node=_node(snapshot, ev, p, cfg, source), devices=devices,
                  classes=tuple(c.name for c in cfg.classes))


def _named(items: list[tuple[str, Any]]) -> dict[str, Any]:
    return {_JSON_NAMES.get(k, k): v for k, v in items}


def to_json(report: DryRun) -> str:
    """The report as JSON (``health --dry-run --json``)."""
    doc = dataclasses.asdict(report, dict_factory=_named)
    return json.dumps({k: doc[k] for k in ("version", "mode", "classes", "node", "devices")}, indent=2) + "\n"


def _would(r: DeviceReport) -> str:
    """What would be done for a device, in words."""
    parts = [f"class {r.device_class}" if r.device_class else "no class"]
    if r.device_taint_effect:
        parts.append(f"device taint {r.device_taint_effect} ({r.device_taint_rule})")
    parts.append("taints the node" if r.taints_node else "no node taint")
    parts += [f"cordon {'on' if r.cordon else 'off'}", f"evict pods {'on' if r.evict_pods else 'off'}"]
    if r.occurrences:
        parts.append("counted " + ", ".join(f"{n} x {c}" for c, n in r.occurrences.items()))
    return "; ".join(parts)


def render(snapshot: NodeSnapshot, ev: Evaluation, p: Plan, policy: Policy, cfg: RemedyConfig,
           source: str, node_taints: Optional[list] = None) -> str:
    report = build(snapshot, ev, p, policy, cfg, source)
    lines = [f"Node {p.node}: {source}", "", "Devices:"]
    for r in report.devices:
        why = "; ".join(x.text for x in r.reasons)
        lines.append(f"  {f'{r.vendor} {r.kind.upper()} {r.index} ({r.uuid})':<60} {r.state:<9} {why}".rstrip())
        if r.pending:
            pend = ", ".join(f"{c} seen {n} of the last {policy.n} polls, {policy.k} needed" for c, n in r.pending.items())
            lines.append(f"  {'':<60} {'':<9} pending: {pend}")
        if cfg.classes or r.state in ("failed", "degraded") or r.occurrences:
            lines.append(f"      -> {_would(r)}")
        said = said_in(p.book.holds, r.uuid) if r.state == "recovering" else ""
        if said and all(x.message != said for x in r.reasons):  # a self-test the dry-run does not run
            lines.append(f"      -> recovery gate, as the agent last said: {said}")
    if not snapshot.devices:
        lines.append("  (no accelerator found)")
    lines += ["", f"Node verdict: {'UNHEALTHY' if report.node.unhealthy else 'healthy'}: {report.node.why}", "",
              "Would do (mode enforce):"]
    lines += _actions(p, cfg)
    if p.explain:
        lines += ["", "Why:"] + [f"  - {x}" for x in p.explain]
    return "\n".join(lines) + "\n"


def _actions(p: Plan, cfg: RemedyConfig) -> list[str]:
    lines = [f"  {action:<11} {what}" for action, what in p.actions if action in ("taint", "untaint", "cordon", "uncordon")]
    if p.condition is not None:
        c = p.condition
        change = "write" if p.status_patch is not None else "unchanged"
        lines.append(f"  {'condition':<11} {c['type']}={c['status']} reason {c['reason']} ({change}): {c['message']}")
    lines += [f"  {'event':<11} {e['type']} {e['reason']}: {e['message']}" for e in p.events]
    patch_ann = ((p.node_patch or {}).get("metadata") or {}).get("annotations") or {}
    if cfg.devices_annotation in patch_ann:
        size = len(patch_ann[cfg.devices_annotation].encode())
        lines.append(f"  {'annotation':<11} {cfg.devices_annotation} ({size} bytes of schema-1 JSON)")
    labels = ((p.node_patch or {}).get("metadata") or {}).get("labels") or {}
    if labels:
        shown = ", ".join(f"{k}={'(remove)' if v is None else v}" for k, v in sorted(labels.items()))
        lines.append(f"  {'labels':<11} {shown}")
    nf = p.nodefeature
    if nf is not None and nf.writes:
        verb = "create" if nf.create is not None else "update" if nf.replace is not None else "delete"
        shown = ", ".join(f"{k}={v}" for k, v in sorted(nf.labels.items())) if nf.delete is None else ""
        lines.append(f"  {'nodefeature':<11} {verb} {nf.namespace}/{nf.name}" + (f": {shown}" if shown else ""))
    return lines or ["  nothing: the node is already as it should be"]
