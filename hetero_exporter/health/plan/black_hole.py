"""A black-hole node: it looks Ready, the devices answer, yet every accelerator pod sent to it fails.

Two signs, each a node-level fault for the node plan to taint on:

- admission failures: the kubelet rejects pods for an accelerator resource. When the device
  plugin's Allocate fails, the pod ends ``Failed`` with reason ``UnexpectedAdmissionError`` and a
  message such as "Allocate failed due to requested number of devices unavailable for
  nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected" (kubernetes/kubernetes#130145),
  "Allocate failed due to no healthy devices present; cannot allocate unhealthy devices
  amd.com/gpu, which is unexpected" (trueforge-org/truecharts#19201) or one that names no
  resource ("... GetPreferredAllocation rpc failed ... nvml: GPU is lost, which is unexpected",
  kubernetes/kubernetes#97131: then the pod's own requests say which); when the kubelet's
  resource check fails, reason ``OutOf<resource>`` with "Node didn't have enough resource:
  <resource>, requested: ..., used: ..., capacity: ..." (pkg/kubelet/lifecycle/predicate.go).
  At least ``min_failures`` such pods within ``window_seconds`` make the fault.
- an allocatable shortfall: ``status.allocatable[<resource>]`` below the number of devices of that
  resource that the agent finds healthy (ok or degraded), for longer than
  ``allocatable_grace_seconds`` (the device plugin marked healthy devices unhealthy, or lost
  them). A resource absent from allocatable says nothing (no device plugin: a DRA-only node);
  more allocatable than devices is normal (time slicing).

``detect_black_hole(...) -> BlackHole``. Pure: no I/O, no clock (``now`` is passed); ``state``
(when each shortfall was first seen) is returned for the caller to pass back. Malformed pods and
quantities are skipped, never raised on.
"""

from __future__ import annotations

import datetime
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from hetero_exporter.health.plan.device_taints import json_at
from hetero_exporter.health.plan.records import BlackHoleState
from hetero_exporter.health.detect.texts import rfc3339
from hetero_exporter.health.detect.rules import Verdict

MAX_PODS = 1024
MAX_RESOURCES = 64
MAX_CLIP = 320  # the latest pod's text in the fault message
UNEXPECTED_ADMISSION = "UnexpectedAdmissionError"
_QUANTITY = re.compile(r"[0-9]{1,9}")


@dataclass(frozen=True)
class BlackHoleSettings:
    min_failures: int = 3
    window_seconds: float = 600.0
    allocatable_grace_seconds: float = 300.0


@dataclass(frozen=True)
class NodeFault:
    """A node-level fault: ``code`` admission-failures | allocatable-shortfall; ``reason`` a
    CamelCase condition/event reason; ``resource`` the extended resource it concerns."""

    code: str
    reason: str
    message: str
    resource: str


@dataclass
class BlackHole:
    faults: list[NodeFault] = field(default_factory=list)
    state: BlackHoleState = field(default_factory=lambda: BlackHoleState())  # its ``shortfall``
    explain: list[str] = field(default_factory=list)


def _time(text: Any) -> Optional[float]:
    """Unix seconds of an RFC 3339 time, None when it is not one."""
    if not isinstance(text, str) or len(text) > 40:
        return None
    try:
        t = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return t.timestamp()


def _requested(pod: Mapping) -> set[str]:
    """Resource names the pod's containers request or limit."""
    out: set[str] = set()
    for kind in ("containers", "initContainers"):
        containers = json_at(pod, "spec", kind)
        for c in containers[:64] if isinstance(containers, list) else ():
            for part in ("limits", "requests"):
                res = json_at(c, "resources", part)
                if isinstance(res, Mapping):
                    out.update(k for k in res if isinstance(k, str))
    return out


def _admission_resource(pod: Mapping, names: Sequence[str]) -> Optional[str]:
    """The accelerator resource the pod's admission failed for, or None (not such a failure)."""
    reason, message = json_at(pod, "status", "reason"), json_at(pod, "status", "message")
    reason = reason if isinstance(reason, str) else ""
    message = message if isinstance(message, str) else ""
    if reason.startswith("OutOf"):
        return reason[len("OutOf"):] if reason[len("OutOf"):] in names else None
    if reason != UNEXPECTED_ADMISSION:
        return None
    named = [r for r in names if r in message]
    if named:
        return named[0]
    requested = _requested(pod)
    return next((r for r in names if r in requested), None)


def _admission_faults(node_name: str, pods: Sequence[dict], names: Sequence[str], cfg: BlackHoleSettings,
                      now: float, explain: list[str]) -> list[NodeFault]:
    seen: set[str] = set()
    failures: dict[str, list[tuple[float, str]]] = {}
    skipped: Counter = Counter()
    for pod in list(pods)[:MAX_PODS]:
        if not isinstance(pod, Mapping):
            skipped["not an object"] += 1
            continue
        if json_at(pod, "spec", "nodeName") != node_name or json_at(pod, "status", "phase") != "Failed":
            continue
        resource = _admission_resource(pod, names)
        if resource is None:
            continue
        t = _time(json_at(pod, "status", "startTime"))
        if t is None:
            t = _time(json_at(pod, "metadata", "creationTimestamp"))
        if t is None:
            skipped["no readable startTime or creationTimestamp"] += 1
            continue
        ns, name = json_at(pod, "metadata", "namespace"), json_at(pod, "metadata", "name")
        uid = json_at(pod, "metadata", "uid")
        ident = uid if isinstance(uid, str) and uid else f"{ns}/{name}"
        if ident in seen or now - t > cfg.window_seconds:
            continue
        seen.add(ident)
        reason, message = json_at(pod, "status", "reason"), json_at(pod, "status", "message")
        text = f"{ns}/{name}: {reason}: {message if isinstance(message, str) else ''}"
        failures.setdefault(resource, []).append((min(t, now), text[:MAX_CLIP]))
    for why, n in sorted(skipped.items()):
        explain.append(f"{n} failed pod(s) skipped: {why}")
    out = []
    for resource, items in sorted(failures.items()):
        latest = max(items)[1]
        if len(items) < cfg.min_failures:
            explain.append(f"{len(items)} pod(s) failed admission for {resource} recently "
                           f"(a fault from {cfg.min_failures})")
            continue
        message = (f"{len(items)} pods failed admission for {resource} in the last "
                   f"{cfg.window_seconds / 60:g} min (latest: {latest})")
        explain.append(f"black hole: {message}")
        out.append(NodeFault("admission-failures", "AcceleratorAdmissionFailures", message, resource))
    return out


def _shortfall_faults(node: Mapping, resources: Mapping[str, str], verdicts: Mapping[str, Verdict],
                      names: Sequence[str], state: Mapping, cfg: BlackHoleSettings, now: float,
                      explain: list[str]) -> tuple[list[NodeFault], BlackHoleState]:
    allocatable = json_at(node, "status", "allocatable")
    allocatable = allocatable if isinstance(allocatable, Mapping) else {}
    before = json_at(state, "shortfall")
    before = before if isinstance(before, Mapping) else {}
    since_by: dict[str, float] = {}
    out = []
    for resource in names:
        raw = allocatable.get(resource)
        if raw is None:
            continue  # no device plugin for it (DRA-only): nothing to compare
        if not isinstance(raw, str) or not _QUANTITY.fullmatch(raw):
            explain.append(f"status.allocatable {resource}={str(raw)[:40]!r} is not an integer quantity: skipped")
            continue
        have = int(raw)
        healthy = sum(1 for u, r in resources.items() if r == resource
                      and (v := verdicts.get(u)) is not None and v.state in ("ok", "degraded"))
        if have >= healthy:
            continue
        first = before.get(resource)
        since = now
        if isinstance(first, (int, float)) and not isinstance(first, bool) and 0 <= first <= now:
            since = float(first)
        since_by[resource] = since
        message = (f"status.allocatable {resource} is {have} but {healthy} devices are healthy "
                   f"(since {rfc3339(since)})")
        if now - since < cfg.allocatable_grace_seconds:
            explain.append(f"{message}: within the {cfg.allocatable_grace_seconds:g} s grace")
            continue
        explain.append(f"black hole: {message}")
        out.append(NodeFault("allocatable-shortfall", "AcceleratorAllocatableShortfall", message, resource))
    return out, BlackHoleState(shortfall=since_by) if since_by else BlackHoleState()


def detect_black_hole(node: dict, failed_pods: Sequence[dict], resources: Mapping[str, str],
                      verdicts: Mapping[str, Verdict], state: Mapping, cfg: BlackHoleSettings,
                      now: float) -> BlackHole:
    """Node-level faults of a node that rejects accelerator pods.

    ``node``: the Node as read; ``failed_pods``: this node's pods in phase Failed (others are
    skipped); ``resources``: device uuid -> the extended resource it is allocated as
    (``nvidia.com/gpu``); ``state``: the previous result's ``state``; ``now``: Unix seconds."""
    bh = BlackHole()
    names = sorted({r for r in list(resources.values())[:4096] if isinstance(r, str) and r})[:MAX_RESOURCES]
    if not names:
        bh.explain.append("no device is known as an extended resource: no black-hole check")
        return bh
    node_name = json_at(node, "metadata", "name")
    bh.faults = _admission_faults(node_name, failed_pods, names, cfg, now, bh.explain)
    shortfalls, bh.state = _shortfall_faults(node, resources, verdicts, names, state, cfg, now, bh.explain)
    bh.faults += shortfalls
    return bh
