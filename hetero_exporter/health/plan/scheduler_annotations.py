"""The node annotations through which Volcano and HAMi learn that a device is unhealthy.

Opt-in per integration (``integrations``: "volcano", "hami"). Both annotations are shared with
others, so the plan merges: it keeps what others wrote, adds this agent's ids, and on recovery
removes only the ids this agent added (``owned``: annotation key -> ids, kept by the caller
between cycles and across restarts).

- Volcano: ``volcano.sh/gpu-unhealthy-ids``, comma-separated GPU indices, which Volcano's device
  share plugin parses with ``strconv.Atoi`` and leaves out of scheduling (volcano-sh/volcano,
  pkg/scheduler/api/devices/nvidia/gpushare: ``getUnhealthyGPUs``). The indices are the NVIDIA
  device plugin's, so only the GPUs of a vendor whose spec says ``volcano_gpu_indices`` go in
  (NVIDIA's): on a mixed node another vendor's index 0 would name the wrong GPU.
- HAMi: its device plugin registers each device in ``hami.io/node-<type>-register`` (or
  ``hami.io/node-register-<type>``), either a JSON list of objects with ``id`` and ``health``
  (pkg/device/devices.go ``MarshalNodeDevices``/``UnMarshalNodeDevices``; ``health`` is omitted
  when false) or, older, ``uuid,count,mem,cores,type,numa,healthy[,index,mode]`` entries joined by
  ':' (docs/develop/protocol.md, ``DecodeNodeDevices``); the scheduler tries JSON first. The plan
  sets ``health`` false for a failed device and back to true on recovery only where it set it
  false. HAMi's device plugin rewrites the annotation every ~30 s from its own view of the
  devices, so the plan re-applies it while the device stays failed (a write per rewrite).

``plan_scheduler_annotations(...) -> AnnotationPlan``: a patch of node annotations (None deletes a
key) and the new ``owned``. Pure: no I/O. Only valid values are written; an annotation over
``MAX_ANNOTATION_BYTES`` is never rewritten.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from hetero_exporter import vendors
from hetero_exporter.health.detect.rules import Verdict
from hetero_exporter.model import DeviceSample

VOLCANO_KEY = "volcano.sh/gpu-unhealthy-ids"
INTEGRATIONS = ("volcano", "hami")
MAX_ANNOTATION_BYTES = 65536
MAX_DEVICES = 256
MAX_KEYS = 512
_HAMI_KEY = re.compile(r"hami\.io/(?:node-[A-Za-z0-9_.-]+-register|node-register-[A-Za-z0-9_.-]+)")
_INDEX = re.compile(r"[0-9]{1,9}")
# Go's strconv.ParseBool spellings (HAMi parses the healthy field with it)
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


@dataclass
class AnnotationPlan:
    patch: dict[str, Optional[str]] = field(default_factory=dict)  # annotation -> value, None deletes
    owned: dict[str, list[str]] = field(default_factory=dict)  # annotation -> ids this agent set
    explain: list[str] = field(default_factory=list)
    actions: list[tuple[str, str]] = field(default_factory=list)  # (action, what) for metrics

    @property
    def writes(self) -> bool:
        return bool(self.patch)


def _failed(verdicts: Mapping[str, Verdict], devices: Mapping[str, DeviceSample]) -> dict[str, DeviceSample]:
    return {u: d for u, d in list(devices.items())[:MAX_DEVICES]
            if (v := verdicts.get(u)) is not None and v.state in ("failed", "recovering")}


def _volcano_indexed(vendor: str) -> bool:
    """The vendor's spec says Volcano's annotation names its devices' indices (NVIDIA's does)."""
    spec = vendors.spec(vendor)
    return spec is not None and spec.volcano_gpu_indices


def _owned(owned: Mapping[str, Any], key: str) -> set[str]:
    ids = owned.get(key) if isinstance(owned, Mapping) else None
    return {str(i) for i in ids[:MAX_DEVICES]} if isinstance(ids, list) else set()


def _volcano(p: AnnotationPlan, annotations: Mapping[str, str], failed: Mapping[str, DeviceSample],
             prev_owned: set[str], enabled: bool) -> None:
    current = annotations.get(VOLCANO_KEY)
    want = {str(d.identity.index) for d in failed.values()
            if enabled and _volcano_indexed(d.identity.vendor) and d.identity.kind == "gpu"
            and d.identity.parent is None}
    if not isinstance(current, str) and current is not None:
        p.explain.append(f"{VOLCANO_KEY} is not a string: leaving it")
        p.owned[VOLCANO_KEY] = sorted(prev_owned)
        return
    tokens = [t.strip() for t in current.split(",")] if current else []
    if current and (len(current.encode()) > MAX_ANNOTATION_BYTES or not all(_INDEX.fullmatch(t) for t in tokens)):
        p.explain.append(f"{VOLCANO_KEY}={current[:80]!r} is not a list of GPU indices (or is too long): "
                         "leaving it as it is")
        if prev_owned:
            p.owned[VOLCANO_KEY] = sorted(prev_owned)
        return
    present = {str(int(t)) for t in tokens}
    others = present - prev_owned
    mine = want - others  # an id someone else wrote too stays theirs
    result = others | want
    if mine:
        p.owned[VOLCANO_KEY] = sorted(mine, key=int)
    if result == present:
        return
    if result:
        value = ",".join(sorted(result, key=int))
        p.patch[VOLCANO_KEY] = value
        p.actions.append(("annotation", f"{VOLCANO_KEY}={value}"))
        p.explain.append(f"{VOLCANO_KEY}={value} (unhealthy GPU indices; {', '.join(sorted(mine, key=int)) or 'none'} "
                         "from this agent)")
    else:
        p.patch[VOLCANO_KEY] = None
        p.actions.append(("annotation", f"{VOLCANO_KEY} removed"))
        p.explain.append(f"{VOLCANO_KEY} removed: the GPUs this agent listed recovered and nobody else listed any")


def _hami_entries(value: str) -> Optional[tuple[str, list]]:
    """("json", objects) or ("colon", [fields | raw segment]), None when malformed."""
    try:
        doc = json.loads(value)
    except ValueError:
        doc = None
    if isinstance(doc, list):
        if all(isinstance(e, dict) and isinstance(e.get("id"), str) and isinstance(e.get("health", False), bool)
               for e in doc):
            return "json", doc
        return None
    if ":" not in value:
        return None
    out: list = []
    for segment in value.split(":"):
        if not segment:
            out.append(segment)
            continue
        items = segment.split(",")
        if len(items) not in (7, 9) or items[6] not in _TRUE | _FALSE:
            return None
        out.append(items)
    return "colon", out


def _hami_one(p: AnnotationPlan, key: str, value: Any, failed: Mapping[str, DeviceSample],
              prev_owned: set[str], enabled: bool) -> None:
    if not isinstance(value, str) or len(value.encode()) > MAX_ANNOTATION_BYTES:
        p.explain.append(f"{key} is over {MAX_ANNOTATION_BYTES} bytes or not a string: not rewritten")
        if prev_owned:
            p.owned[key] = sorted(prev_owned)
        return
    parsed = _hami_entries(value)
    if parsed is None:
        p.explain.append(f"{key} is neither HAMi's JSON nor its ':'-separated register format: leaving it")
        if prev_owned:
            p.owned[key] = sorted(prev_owned)
        return
    form, entries = parsed
    failed_ids = {u.lower(): u for u in failed} if enabled else {}
    mine: set[str] = set()
    changed: list[str] = []
    for e in entries:
        if form == "json":
            uid, healthy = e["id"], e.get("health", False)
        elif isinstance(e, list):
            uid, healthy = e[0], e[6] in _TRUE
        else:
            continue
        bad = uid.lower() in failed_ids
        if bad and (healthy or uid in prev_owned):
            mine.add(uid)  # ours while it stays failed, even where HAMi's rewrite said healthy
        if bad == (not healthy) or (not bad and uid not in prev_owned):
            continue  # already right, or someone else's unhealthy mark
        changed.append(f"{uid} {'unhealthy' if bad else 'healthy again'}")
        if form == "json":
            e["health"] = not bad
        else:
            e[6] = "false" if bad else "true"
    if mine:
        p.owned[key] = sorted(mine)
    if not changed:
        return
    if form == "json":
        new = json.dumps(entries, separators=(",", ":"), ensure_ascii=False)
    else:
        new = ":".join(e if isinstance(e, str) else ",".join(e) for e in entries)
    if len(new.encode()) > MAX_ANNOTATION_BYTES:
        p.explain.append(f"{key} would exceed {MAX_ANNOTATION_BYTES} bytes: not rewritten")
        return
    p.patch[key] = new
    p.actions.append(("annotation", f"{key} {', '.join(changed)}"))
    p.explain.append(f"{key}: {', '.join(changed)} (HAMi rewrites this every ~30 s; re-applied while failed)")


def plan_scheduler_annotations(annotations: Mapping[str, str], verdicts: Mapping[str, Verdict],
                               devices: Mapping[str, DeviceSample], integrations: Sequence[str],
                               owned: Mapping[str, list[str]]) -> AnnotationPlan:
    """The annotation patch that tells the configured schedulers which devices failed.

    ``annotations``: the Node's; ``devices``: uuid -> the snapshot's device; ``owned``: the
    previous plan's ``owned``. An integration that is no longer configured has its ids removed."""
    p = AnnotationPlan()
    annotations = annotations if isinstance(annotations, Mapping) else {}
    owned = owned if isinstance(owned, Mapping) else {}
    unknown = sorted(set(integrations) - set(INTEGRATIONS))
    if unknown:
        p.explain.append(f"unknown scheduler integration(s) {unknown}; known: {list(INTEGRATIONS)}")
    failed = _failed(verdicts, devices)
    volcano = "volcano" in integrations
    if volcano or _owned(owned, VOLCANO_KEY):
        _volcano(p, annotations, failed, _owned(owned, VOLCANO_KEY), volcano)
    hami = "hami" in integrations
    keys = [k for k in list(annotations)[:MAX_KEYS] if isinstance(k, str) and _HAMI_KEY.fullmatch(k)]
    for key in sorted(keys):
        if hami or _owned(owned, key):
            _hami_one(p, key, annotations[key], failed, _owned(owned, key), hami)
    return p
