"""The inventory on the Node (dry-run and enforce, ``health.inventory``): the devices annotation
(compact schema-1 JSON the scheduler extender reads) and the selection labels (vendor, count,
model, driver major, features). Labels someone else set are left alone; ours go when they no
longer apply.

With ``health.inventory_labels: nodefeature`` the selection labels go to an NFD NodeFeature
(nodefeature.py) and no label of ours is written on the Node: the ones this agent set before
(the book's ``labels``) are removed once, in enforce mode, in the cycle whose NodeFeature could
be read (so it is written right after); dry-run and a NodeFeature that cannot be read leave them
as they are."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from hetero_exporter import model
from hetero_exporter.health.plan.config import RemedyConfig
from hetero_exporter.health.detect.texts import label_value
from hetero_exporter.model import DeviceSample, NodeSnapshot
from hetero_exporter.model.keys import Keys

_KEPT_READINGS = ("memory_free_bytes", "utilization_ratio")  # what the scorer reads when space is short


@dataclass(frozen=True)
class InventoryPlan:
    annotations: dict[str, str]  # annotations to write (the devices annotation when due)
    labels: dict[str, Optional[str]]  # labels to set (None: remove)
    owned: list[str]  # the book's: label keys this agent owns
    inventory_hash: str  # the book's: fingerprint of the annotation last written
    inventory_time: float  # the book's: when it was written
    explain: tuple[str, ...] = ()
    actions: tuple[tuple[str, str], ...] = ()


def _dumps(doc: dict) -> str:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True, allow_nan=False)


def _shrinks():
    """What is left out, in order, until the document fits."""
    return (
        ("links", lambda d: [dev.update(links=[]) for dev in d["devices"]]),
        ("collectors", lambda d: d.update(collectors=[])),
        ("fault history", lambda d: [dev.update(faults=[]) for dev in d["devices"]]),
        ("readings", lambda d: [dev.update(readings={k: v for k, v in dev["readings"].items() if k in _KEPT_READINGS})
                                for dev in d["devices"]]),
        ("profiles", lambda d: [dev.update(profile=None) for dev in d["devices"]]))


def inventory(snapshot: NodeSnapshot, max_bytes: int) -> tuple[str, str, list[str]]:
    """The devices annotation (compact schema-1 JSON within ``max_bytes``), its fingerprint
    (what matters for change: not the time or moving readings) and what was left out to fit."""
    doc = model.compact_document(snapshot)
    dropped: list[str] = []
    text = _dumps(doc)
    for what, shrink in _shrinks():
        if len(text.encode()) <= max_bytes:
            break
        shrink(doc)
        dropped.append(what)
        text = _dumps(doc)
    if len(text.encode()) > max_bytes:
        doc = {"schema": model.SCHEMA_VERSION, "node": snapshot.node, "time": snapshot.time, "devices": [],
               "truncated": f"{len(snapshot.devices)} devices do not fit in {max_bytes} bytes"}
        dropped.append("devices")
        text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    # What makes a change worth a write: who is there and how they are, not moving values.
    significant = {
        "expected": snapshot.expected,
        "collectors": sorted((c.name, c.ok) for c in snapshot.collectors),
        "devices": [(d.identity, d.profile, d.links, d.health.state,
                     sorted((f.code, f.fault_class, f.action) for f in d.health.reasons),
                     sorted((f.code, f.count) for f in d.faults)) for d in snapshot.devices],
        "dropped": dropped,
    }
    fingerprint = hashlib.sha1(repr(significant).encode()).hexdigest()[:16]
    return text, fingerprint, dropped


def selection_labels(snapshot: NodeSnapshot, domain: str) -> dict[str, str]:
    """Vendor presence and count, model, driver major version, profile features."""
    by_vendor: dict[str, list[DeviceSample]] = {}
    for d in snapshot.devices:
        if d.identity.parent is None:
            by_vendor.setdefault(d.identity.vendor, []).append(d)
    keys = Keys(domain)
    out: dict[str, str] = {}
    if by_vendor:
        out[keys.accelerator] = "true"
    for vendor, devs in sorted(by_vendor.items()):
        v = label_value(vendor).lower()
        out[keys.key(v)] = "true"
        out[keys.key(f"{v}.count")] = str(len(devs))
        models = sorted({d.identity.model for d in devs if d.identity.model})
        if models:
            common = max(models, key=lambda m: sum(d.identity.model == m for d in devs))
            out[keys.key(f"{v}.model")] = label_value(common)
        drivers = sorted({d.identity.driver_version for d in devs if d.identity.driver_version})
        if drivers:
            out[keys.key(f"{v}.driver-major")] = label_value(drivers[0].lstrip("v").split(".")[0])
        for feat in sorted({f for d in devs if d.profile for f in d.profile.features}):
            out[keys.key(f"feature.{label_value(feat).lower()}")] = "true"
    return out


def plan_inventory(snapshot: NodeSnapshot, labels: Mapping[str, str], annotations: Mapping[str, str],
                   owned: Sequence[str], inventory_hash: str, inventory_time: float, cfg: RemedyConfig,
                   now: float, *, nodefeature_ready: bool = False) -> InventoryPlan:
    """``labels``, ``annotations``: the node's; ``owned``, ``inventory_hash``, ``inventory_time``:
    the book's. The annotation is rewritten when what it says changed, when it is missing, or
    every ``inventory_heartbeat_seconds`` (its readers judge freshness by its time).
    ``nodefeature_ready``: in nodefeature mode, the NodeFeature was read and will be written."""
    if not cfg.inventory or cfg.mode == "observe":
        return InventoryPlan({}, {}, list(owned), inventory_hash, inventory_time)
    explain: list[str] = []
    actions: list[tuple[str, str]] = []
    new_annotations: dict[str, str] = {}
    text, fp, dropped = inventory(snapshot, cfg.inventory_max_bytes)
    if fp != inventory_hash or now - inventory_time >= cfg.inventory_heartbeat_seconds \
            or cfg.devices_annotation not in annotations:
        new_annotations[cfg.devices_annotation] = text
        inventory_hash, inventory_time = fp, now
        actions.append(("annotation", f"{len(text.encode())} bytes"))
        if dropped:
            explain.append(f"devices annotation: left out {', '.join(dropped)} to stay within "
                           f"{cfg.inventory_max_bytes} bytes")
    if cfg.nodefeature:
        new_labels, kept = _handover(labels, owned, cfg.mode, nodefeature_ready, explain)
    else:
        new_labels, kept = _labels(selection_labels(snapshot, cfg.domain), labels, owned, explain)
    if new_labels:
        actions.append(("labels", ",".join(sorted(new_labels))))
    return InventoryPlan(new_annotations, new_labels, kept, inventory_hash, inventory_time,
                         explain=tuple(explain), actions=tuple(actions))


def _labels(want: Mapping[str, str], labels: Mapping[str, str], owned: Sequence[str],
            explain: list[str]) -> tuple[dict[str, Optional[str]], list[str]]:
    """(labels to write, label keys owned after): ours that no longer apply are removed."""
    new_labels: dict[str, Optional[str]] = {}
    mine = set(owned)
    for k, val in want.items():
        if labels.get(k) == val:
            continue
        if k in labels and k not in mine:
            explain.append(f"label {k} is set by someone else: leaving it")
            continue
        new_labels[k] = val
        mine.add(k)
    for k in sorted(mine - set(want)):
        if k in labels:
            new_labels[k] = None
        mine.discard(k)
    return new_labels, sorted(mine & (set(want) | set(new_labels)))


def _handover(labels: Mapping[str, str], owned: Sequence[str], mode: str, ready: bool,
              explain: list[str]) -> tuple[dict[str, Optional[str]], list[str]]:
    """Nodefeature mode: no label of ours is added or changed on the Node; the ones this agent set
    (and still finds there) are removed once, in enforce mode, when the NodeFeature takes over."""
    mine = sorted(k for k in set(owned) if k in labels)
    if not mine:
        return {}, []
    listed = ", ".join(mine)
    if mode == "enforce" and ready:
        explain.append(f"labels: the {len(mine)} Node labels this agent set move to its NodeFeature: removed ({listed})")
        return {k: None for k in mine}, []
    if mode == "dry-run":
        explain.append(f"[dry-run] labels: the {len(mine)} Node labels this agent set would move to its "
                       f"NodeFeature and be removed ({listed})")
    else:
        explain.append(f"labels: the {len(mine)} Node labels this agent set stay until its NodeFeature "
                       f"can be read ({listed})")
    return {}, mine
