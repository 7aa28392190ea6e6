"""The node condition ``AcceleratorUnhealthy``: True with the failed devices and their faults,
False (degraded or healthy) otherwise; written in enforce mode when it changes or its heartbeat
(``condition_heartbeat_seconds``) is due."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from hetero_exporter.health.plan.config import CONDITION_TYPE, RemedyConfig
from hetero_exporter.health.detect.texts import device_name, fault_text, parse_rfc3339, rfc3339
from hetero_exporter.health.detect.policy import Policy
from hetero_exporter.health.detect.rules import NodeVerdict, Verdict
from hetero_exporter.model import Fault, NodeSnapshot

MAX_MESSAGE = 1024  # characters of the condition message


@dataclass(frozen=True)
class ConditionPlan:
    condition: dict  # the condition we want (whether or not it is written)
    status_patch: Optional[dict]  # strategic merge patch of status.conditions, None: no write
    explain: tuple[str, ...] = ()
    actions: tuple[tuple[str, str], ...] = ()


def plan_condition(conditions: Sequence[Any], snapshot: NodeSnapshot, verdicts: Mapping[str, Verdict],
                   nv: NodeVerdict, policy: Policy, cfg: RemedyConfig, now: float,
                   refused: bool = False, node_faults: Sequence[Any] = ()) -> ConditionPlan:
    """``conditions``: the node's status.conditions; ``refused``: the budget refused the taint;
    ``node_faults``: black-hole faults (health/plan/black_hole.py NodeFault: reason, message)."""
    status, reason, message = _state(snapshot, verdicts, nv, policy, refused, node_faults)
    current = next((c for c in conditions if isinstance(c, dict) and c.get("type") == CONDITION_TYPE), None)
    same = current is not None and (current.get("status"), current.get("reason"), current.get("message")) == (
        status, reason, message)
    beat = parse_rfc3339(current.get("lastHeartbeatTime")) if current else None
    due = beat is None or now - beat >= cfg.condition_heartbeat_seconds
    transition = current.get("lastTransitionTime") if current and current.get("status") == status else None
    cond = {"type": CONDITION_TYPE, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": rfc3339(now), "lastTransitionTime": transition or rfc3339(now)}
    if cfg.mode != "enforce" or (same and not due):
        return ConditionPlan(cond, None)
    return ConditionPlan(cond, {"status": {"conditions": [cond]}},
                         actions=() if same else (("condition", f"{status} {reason}"),))


def _state(snapshot: NodeSnapshot, verdicts: Mapping[str, Verdict], nv: NodeVerdict, policy: Policy,
           refused: bool, node_faults: Sequence[Any] = ()) -> tuple[str, str, str]:
    """(status, reason, message): the first failed device's fault names the reason; a node that
    rejects accelerator pods (node faults) without a failed device is named by its first fault."""
    by_uuid = {d.identity.uuid: d for d in snapshot.devices}
    failed = [by_uuid[u] for u in nv.failed if u in by_uuid]
    node_text = " | ".join(f.message for f in node_faults)
    if not failed and node_faults:
        message = f"{node_text}. Node: {nv.why}" + (" (taint refused by the blast-radius budget)" if refused else "")
        return "True", node_faults[0].reason, message[:MAX_MESSAGE]
    held = [(d, verdicts[d.identity.uuid]) for d in snapshot.devices if d.identity.uuid in verdicts]
    recovering = [(d, v.reasons[0].message if v.reasons else "") for d, v in held if v.state == "recovering"]
    if not failed and recovering:  # held by a recovery gate (health/detect/gate.py): what it waits for
        message = " | ".join(f"{device_name(d)}: {said}" for d, said in recovering)
        return "True" if nv.unhealthy else "False", "AcceleratorsRecovering", f"{message}. Node: {nv.why}"[:MAX_MESSAGE]
    if not failed:
        return "False", "AcceleratorsDegraded" if nv.degraded else "AcceleratorsHealthy", nv.why[:MAX_MESSAGE]
    first = failed[0]
    v = verdicts[first.identity.uuid]
    head = v.reasons[0] if v.reasons else Fault(code="failed")
    reason = policy.condition_reason(first.identity.vendor, head.code)
    parts = [f"{device_name(d)}: " + "; ".join(fault_text(d.identity.vendor, f, policy, d.identity.uuid)
                                                for f in verdicts[d.identity.uuid].reasons[:3])
             for d in failed]
    message = " | ".join(parts + ([node_text] if node_text else [])) + f". Node: {nv.why}"
    if refused:
        message += " (taint refused by the blast-radius budget)"
    return "True", reason, message[:MAX_MESSAGE]
