"""``hetero-exporter health --dry-run``: what the agent would do on this node now, and why."""

from __future__ import annotations

from typing import Optional

from hetero_exporter.health.plan import Plan, RemedyConfig, device_name, fault_text
from hetero_exporter.health.detect.policy import Policy
from hetero_exporter.health.detect.verdicts import Evaluation
from hetero_exporter.model import NodeSnapshot


def render(snapshot: NodeSnapshot, ev: Evaluation, p: Plan, policy: Policy, cfg: RemedyConfig,
           source: str, node_taints: Optional[list] = None) -> str:
    lines = [f"Node {p.node}: {source}", "", "Devices:"]
    for d in snapshot.devices:
        v = ev.verdicts.get(d.identity.uuid)
        state = v.state if v else d.health.state
        why = "; ".join(fault_text(d.identity.vendor, f, policy, d.identity.uuid)
                        for f in (v.reasons if v else d.health.reasons))
        lines.append(f"  {device_name(d):<60} {state:<9} {why}".rstrip())
        if v and v.pending:
            pend = ", ".join(f"{c} seen {n} of the last {policy.n} polls, {policy.k} needed" for c, n in sorted(v.pending.items()))
            lines.append(f"  {'':<60} {'':<9} pending: {pend}")
    if not snapshot.devices:
        lines.append("  (no accelerator found)")
    lines += ["", f"Node verdict: {'UNHEALTHY' if ev.node.unhealthy else 'healthy'}: {ev.node.why}", "",
              "Would do (mode enforce):"]
    did = False
    for action, what in p.actions:
        if action in ("taint", "untaint", "cordon", "uncordon"):
            lines.append(f"  {action:<11} {what}")
            did = True
    if p.condition is not None:
        c = p.condition
        change = "write" if p.status_patch is not None else "unchanged"
        lines.append(f"  {'condition':<11} {c['type']}={c['status']} reason {c['reason']} ({change}): {c['message']}")
        did = True
    for e in p.events:
        lines.append(f"  {'event':<11} {e['type']} {e['reason']}: {e['message']}")
        did = True
    patch_ann = ((p.node_patch or {}).get("metadata") or {}).get("annotations") or {}
    if cfg.devices_annotation in patch_ann:
        size = len(patch_ann[cfg.devices_annotation].encode())
        lines.append(f"  {'annotation':<11} {cfg.devices_annotation} ({size} bytes of schema-1 JSON)")
        did = True
    labels = ((p.node_patch or {}).get("metadata") or {}).get("labels") or {}
    if labels:
        shown = ", ".join(f"{k}={'(remove)' if v is None else v}" for k, v in sorted(labels.items()))
        lines.append(f"  {'labels':<11} {shown}")
        did = True
    nf = p.nodefeature
    if nf is not None and nf.writes:
        verb = "create" if nf.create is not None else "update" if nf.replace is not None else "delete"
        shown = ", ".join(f"{k}={v}" for k, v in sorted(nf.labels.items())) if nf.delete is None else ""
        lines.append(f"  {'nodefeature':<11} {verb} {nf.namespace}/{nf.name}" + (f": {shown}" if shown else ""))
        did = True
    if not did:
        lines.append("  nothing: the node is already as it should be")
    if p.explain:
        lines += ["", "Why:"] + [f"  - {x}" for x in p.explain]
    return "\n".join(lines) + "\n"
