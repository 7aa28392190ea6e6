"""The software the devices need: each vendor's device plugin and DRA kubelet plugin pods on this node.

A device plugin that crash-loops leaves the node Ready and its devices healthy while no new pod can
get one (NVSentinel and AICR users report such nodes unnoticed for weeks). For every vendor whose
devices the snapshot holds and whose spec names its plugins' pods (``VendorSpec.plugin_pods``,
label selectors from the vendors' published manifests), the pods the remedy listed on this node
(``PluginRead``) are judged:

- ``crash-loop``: a container waiting in ``CrashLoopBackOff``, or restarted at least
  ``RESTARTS`` times with its last termination within the grace: at once;
- ``not-ready``: the pod's ``Ready`` condition not True for ``stack_grace_seconds`` (since its
  ``lastTransitionTime``, else since first seen here);
- ``absent``: none of the vendor's plugin pods on the node for ``stack_grace_seconds`` (a
  vendor whose list failed is not judged: never absent for want of an answer).

Each problem is a node reason (``NodeFault``: the ``AcceleratorUnhealthy`` condition names it) with
a Warning event when it starts and a Normal one when it clears, and no device is failed and no
taint is added: the devices are sound, and the kubelet already stops placing pods on them (the
resource's allocatable falls to 0 when its plugin goes; the black-hole check covers a plugin that
lingers and rejects). Pure: the times are passed in; the memory (``seen:`` when a problem was first
seen, ``told:`` since when it was announced) lives in the book's ``black_hole.stack``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from hetero_exporter import vendors as vendor_specs
from hetero_exporter.health.detect.texts import event_id, parse_rfc3339, rfc3339
from hetero_exporter.health.plan.black_hole import NodeFault
from hetero_exporter.health.plan.cluster import ClusterView, NodeFaults
from hetero_exporter.health.plan.config import RemedyConfig
from hetero_exporter.health.plan.device_taints import json_at
from hetero_exporter.health.plan.records import BlackHoleState, OutboxEvent
from hetero_exporter.model import NodeSnapshot

RESTARTS = 3  # restarts that, with the last one within the grace, make a crash loop
MAX_PODS = 32  # pods judged per selector
MAX_STATE = 256  # problems remembered (a node has a few vendors and two components each)
REASONS = {"crash-loop": "AcceleratorPluginCrashLoop", "not-ready": "AcceleratorPluginNotReady",
           "absent": "AcceleratorPluginAbsent"}


@dataclass(frozen=True)
class PluginRead:
    """The pods one selector of a vendor's plugin found on this node; ``pods`` None: the list failed."""

    vendor: str
    component: str  # device-plugin | dra-kubelet-plugin
    selector: str
    pods: Optional[tuple[Mapping[str, Any], ...]]


@dataclass
class StackPlan:
    faults: list[NodeFault] = field(default_factory=list)  # past their grace
    state: dict[str, float] = field(default_factory=dict)  # the book's black_hole.stack
    events: list[OutboxEvent] = field(default_factory=list)
    explain: list[str] = field(default_factory=list)


def _name(pod: Mapping[str, Any]) -> str:
    return f"{json_at(pod, 'metadata', 'namespace')}/{json_at(pod, 'metadata', 'name')}"


def _statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    out = []
    for key in ("initContainerStatuses", "containerStatuses"):
        items = json_at(pod, "status", key)
        out += [c for c in (items[:64] if isinstance(items, list) else ()) if isinstance(c, Mapping)]
    return out


def crash_loop(pod: Mapping[str, Any], grace: float, now: float) -> Optional[str]:
    """Why the pod is crash-looping, or None."""
    for c in _statuses(pod):
        restarts = c.get("restartCount")
        restarts = restarts if isinstance(restarts, int) and not isinstance(restarts, bool) else 0
        if json_at(c, "state", "waiting", "reason") == "CrashLoopBackOff":
            return f"container {str(c.get('name'))[:63]} in CrashLoopBackOff ({restarts} restarts)"
        if restarts < RESTARTS:
            continue  # few restarts: when the last one ended does not matter (not parsed)
        finished = parse_rfc3339(json_at(c, "lastState", "terminated", "finishedAt"))
        if finished is not None and 0 <= now - finished < grace:
            return f"container {str(c.get('name'))[:63]} restarted {restarts} times, last at {rfc3339(finished)}"
    return None


def not_ready_since(pod: Mapping[str, Any]) -> Optional[tuple[Optional[float]]]:
    """None when the pod is Ready; else (since when it is not, None when the pod does not say)."""
    conditions = json_at(pod, "status", "conditions")
    for c in conditions[:32] if isinstance(conditions, list) else ():
        if isinstance(c, Mapping) and c.get("type") == "Ready":
            if c.get("status") == "True":
                return None
            return (parse_rfc3339(c.get("lastTransitionTime")),)
    return (None,)


def _problems(reads: Sequence[PluginRead], vendor: str, grace: float,
              now: float) -> tuple[dict[str, tuple[str, Optional[float]]], list[str]]:
    """problem key -> (message, since when the pod says it began), and explain lines."""
    found: dict[str, tuple[str, Optional[float]]] = {}
    explain: list[str] = []
    pods: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for r in reads:
        for pod in (r.pods or ())[:MAX_PODS]:
            if isinstance(pod, Mapping) and not json_at(pod, "metadata", "deletionTimestamp"):
                pods.setdefault(str(json_at(pod, "metadata", "uid") or _name(pod)), (r.component, pod))
    if any(r.pods is None for r in reads):
        explain.append(f"{vendor}: a plugin pod list failed; its plugins are not judged absent")
    elif not pods:
        selectors = ", ".join(r.selector for r in reads)
        found[f"{vendor}/plugins/absent"] = (f"no {vendor} device plugin or DRA kubelet plugin pod runs on this "
                                             f"node ({selectors})", None)
    for component, pod in sorted(pods.values(), key=lambda x: (x[0], _name(x[1]))):
        looping = crash_loop(pod, grace, now)
        unready = not_ready_since(pod)
        if looping is not None:
            found.setdefault(f"{vendor}/{component}/crash-loop",
                             (f"{vendor} {component} pod {_name(pod)} is crash-looping: {looping}", now))
        elif unready is not None:
            found.setdefault(f"{vendor}/{component}/not-ready",
                             (f"{vendor} {component} pod {_name(pod)} is not Ready", unready[0]))
    return found, explain


def plan_stack(node_name: str, vendors: Sequence[str], reads: Sequence[PluginRead], state: Mapping[str, Any],
               grace: float, now: float) -> StackPlan:
    """The node reasons of the plugin pods of ``vendors`` (those with devices on the node) as read
    (``reads``), with ``state`` the previous plan's; ``grace``: stack_grace_seconds."""
    sp = StackPlan()
    before = {k: float(v) for k, v in list(state.items())[:MAX_STATE]
              if isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= now}
    for vendor in sorted(set(vendors)):
        mine = [r for r in reads if r.vendor == vendor]
        if not mine:
            continue
        found, explain = _problems(mine, vendor, grace, now)
        sp.explain += explain
        for key, (message, pod_since) in sorted(found.items()):
            seen = before.get(f"seen:{key}", now)
            since = min(seen, pod_since) if pod_since is not None and pod_since <= now else seen
            sp.state[f"seen:{key}"] = since
            kind = key.rsplit("/", 1)[1]
            if kind != "crash-loop" and now - since < grace:
                sp.explain.append(f"{message} (since {rfc3339(since)}): within the {grace:g} s grace")
                continue
            sp.faults.append(NodeFault(key, REASONS[kind], f"{message} (since {rfc3339(since)})",
                                       key.rsplit("/", 1)[0]))
            told = before.get(f"told:{key}")
            if told is None:
                told = now
                sp.events.append(OutboxEvent(id=event_id(node_name, "stack", key, since), type="Warning",
                                             reason=REASONS[kind], message=f"{node_name}: {message}",
                                             action="Fault", time=now))
            sp.state[f"told:{key}"] = told
            sp.explain.append(f"stack: {message}")
    for key in sorted(k[len("told:"):] for k in before if k.startswith("told:")):
        if f"told:{key}" not in sp.state:
            sp.events.append(OutboxEvent(id=event_id(node_name, "stack-cleared", key, before[f"told:{key}"]),
                                         type="Normal", reason="AcceleratorPluginRecovered",
                                         message=f"{node_name}: {key} cleared", action="Recover", time=now))
    return sp


def plugin_selectors() -> tuple[str, ...]:
    """Every known vendor's plugin pod selectors, once each: what the pod cache keeps for the
    remedy's reads (``PluginRead``), so they come from its watch instead of a list per reconcile."""
    return tuple(sorted({sel.selector for spec in vendor_specs.specs().values() for sel in spec.plugin_pods}))


def component_up(reads: Sequence[PluginRead], grace: float, now: float) -> dict[tuple[str, str], float]:
    """(vendor, component) -> 1 when its pods are all Ready and none crash-loops, else 0, as read
    now (no grace: the condition has it, the alert its ``for``); (vendor, "plugins") -> 0 when
    none of the vendor's pods runs, 1 otherwise. A vendor whose list failed says nothing."""
    out: dict[tuple[str, str], float] = {}
    for vendor in sorted({r.vendor for r in reads}):
        mine = [r for r in reads if r.vendor == vendor]
        if any(r.pods is None for r in mine):
            continue
        found = False
        for component in sorted({r.component for r in mine}):
            pods = [p for r in mine if r.component == component for p in (r.pods or ())[:MAX_PODS]
                    if isinstance(p, Mapping)]
            if pods:
                found = True
                bad = any(crash_loop(p, grace, now) is not None or not_ready_since(p) is not None for p in pods)
                out[(vendor, component)] = 0.0 if bad else 1.0
        out[(vendor, "plugins")] = 1.0 if found else 0.0
    return out


def with_stack(faults: NodeFaults, name: str, snapshot: NodeSnapshot, view: ClusterView, state: BlackHoleState,
               cfg: RemedyConfig, now: float) -> NodeFaults:
    """The black-hole faults with the stack's reasons, events and memory added; the node verdict
    unchanged (no taint). Without the read (off, observe, no cluster) the memory is kept as it was."""
    old = state.get("stack") if isinstance(state, Mapping) else None
    old = old if isinstance(old, Mapping) else {}
    new_state = BlackHoleState(**faults.state)
    if not cfg.stack or view.stack is None:
        if old:
            new_state["stack"] = dict(old)
        return dataclasses.replace(faults, state=new_state)
    reads = [r for r in view.stack if isinstance(r, PluginRead)]
    vendors = sorted({d.identity.vendor for d in snapshot.devices if d.identity.parent is None})
    sp = plan_stack(name, vendors, reads, old, cfg.stack_grace_seconds, now)
    if sp.state:
        new_state["stack"] = sp.state
    else:
        new_state.pop("stack", None)
    return dataclasses.replace(faults, faults=faults.faults + tuple(sp.faults), state=new_state,
                               events=faults.events + tuple(sp.events), explain=faults.explain + tuple(sp.explain))
