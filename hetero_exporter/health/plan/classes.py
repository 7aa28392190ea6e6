"""Device classes (``health.classes``): what the plan does for a failed device, by the class it
belongs to. The first class whose ``match`` a device meets is its class; a device that meets none
keeps the node-wide settings (``health.device_taint_no_execute``, ``cordon``, ``evict_pods``, the
node policy's taint rule and the fleet budget), as before classes.

A class says, each key optional (absent: the node-wide setting):

- ``device_taint_effect``: the effect of the DRA DeviceTaintRule of a failed device of the class
  (NoSchedule, NoExecute, or None: informational);
- ``node_taint``: true, a failed device of the class taints the node by itself; false, it never
  does, and it counts as serving for the node policy's too-few-healthy rule; absent, the node
  policy decides as before (a node-level fault, too few healthy devices);
- ``cordon``, ``evict_pods``: the node is cordoned when a device whose class wants it makes the
  node unhealthy; the pods holding a failed device of a class that wants it are evicted;
- ``budget_share``: the share of the fleet's accelerator nodes that may carry the taint for a
  device of the class (fleet-wide taint slots per class, health/act/fleet_budget.py; at least
  ``budget_min_nodes`` when above 0). A share bounds a class inside the fleet budget, never past it.

``match`` keys (all given must hold; globs are case-insensitive ``fnmatch`` patterns): ``vendor``,
``model`` (the normalized model), ``kind``, ``profile`` (the Device Profile's model), ``pool`` (the
DRA pool that lists the device, as ``<driver>/<pool>``), ``resource`` (the device-plugin resource
the device is allocated as) and ``node_labels`` (label -> value glob, the Node's). A child device
(a MIG instance, a partition) that matches no class has its parent's class.

Pure: ``parse`` checks the config (one line naming the entry); ``assign`` gives each device its
policy from the facts the plan has (the snapshot, the Node's labels, the ResourceSlices).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from hetero_exporter import validate as v
from hetero_exporter.health.detect.gate import RecoveryGate, parse as parse_gate
from hetero_exporter.model import DeviceSample, NodeSnapshot

EFFECTS = ("NoSchedule", "NoExecute", "None")
CLASS_NAME = r"[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?"  # a DNS label of at most 40: it names Leases and labels
MAX_CLASSES = 64
MAX_NODE_LABELS = 32
MATCH_KEYS = ("vendor", "model", "kind", "profile", "pool", "resource", "node_labels")
CLASS_KEYS = ("name", "match", "device_taint_effect", "node_taint", "cordon", "evict_pods", "budget_share",
              "recovery_gate")


@dataclass(frozen=True)
class ClassMatch:
    """What a device must be to belong to a class (None: anything)."""

    vendor: Optional[str] = None
    model: Optional[str] = None
    kind: Optional[str] = None
    profile: Optional[str] = None
    pool: Optional[str] = None
    resource: Optional[str] = None
    node_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceClass:
    """One entry of ``health.classes`` (None: the node-wide setting)."""

    name: str
    match: ClassMatch = ClassMatch()
    device_taint_effect: Optional[str] = None
    node_taint: Optional[bool] = None
    cordon: Optional[bool] = None
    evict_pods: Optional[bool] = None
    budget_share: Optional[float] = None
    recovery_gate: Optional[RecoveryGate] = None  # the check a failed device passes before it is cleared


@dataclass(frozen=True)
class DeviceFacts:
    """What a match reads of one device; ``pools``: ``<driver>/<pool>`` of the DRA devices that list it."""

    vendor: str
    model: str
    kind: str
    profile: str = ""
    pools: tuple[str, ...] = ()
    resource: str = ""


@dataclass(frozen=True)
class DevicePolicy:
    """What the plan does for one device when it fails: its class ("" none) and the settings,
    the class's where it sets them, else the node-wide ones."""

    device_class: str = ""
    device_taint_effect: str = "NoSchedule"
    node_taint: Optional[bool] = None  # None: the node policy decides (node-level fault, too few healthy)
    cordon: bool = False
    evict_pods: bool = False
    budget_share: Optional[float] = None
    recovery_gate: Optional[RecoveryGate] = None  # its class's (health/detect/gate.py)


@dataclass(frozen=True)
class ClassTable:
    """Every device's policy (``default`` for a device the table does not know)."""

    devices: Mapping[str, DevicePolicy] = field(default_factory=dict)
    default: DevicePolicy = DevicePolicy()

    def of(self, uuid: str) -> DevicePolicy:
        return self.devices.get(uuid, self.default)

    def node_taint(self) -> dict[str, bool]:
        """uuid -> its class's node_taint, where a class sets it (rules.node_verdict reads it)."""
        return {u: p.node_taint for u, p in self.devices.items() if p.node_taint is not None}

    def effects(self) -> dict[str, str]:
        """uuid -> the DeviceTaintRule effect of the device failed."""
        return {u: p.device_taint_effect for u, p in self.devices.items()}

    def evicting(self) -> frozenset[str]:
        """The devices whose failure evicts the pods holding them."""
        return frozenset(u for u, p in self.devices.items() if p.evict_pods)

    def cordon(self, culprits: Iterable[str]) -> bool:
        """Whether the devices that make the node unhealthy want it cordoned (none named, as for
        a black-hole fault: the node-wide setting)."""
        named = list(culprits)
        return any(self.of(u).cordon for u in named) if named else self.default.cordon

    def shares(self, uuids: Iterable[str]) -> dict[str, float]:
        """class -> budget share of the classes of ``uuids`` that set one."""
        out: dict[str, float] = {}
        for u in uuids:
            p = self.of(u)
            if p.device_class and p.budget_share is not None:
                out[p.device_class] = p.budget_share
        return out

    def names(self, uuids: Iterable[str]) -> list[str]:
        return sorted({self.of(u).device_class for u in uuids} - {""})

    def gates(self) -> dict[str, RecoveryGate]:
        """uuid -> its class's recovery gate, where the class has one (the judge holds those devices)."""
        return {u: p.recovery_gate for u, p in self.devices.items() if p.recovery_gate is not None}


# --------------------------------------------------------------------------- the config

def _glob(path: str, value: Any) -> str:
    return v.string(path, value, max_length=253, non_empty=True)


def _vendor(path: str, value: Any) -> str:
    from hetero_exporter import vendors
    return v.string(path, value, choices=sorted(vendors.specs()))


def _match(path: str, value: Any) -> ClassMatch:
    doc = v.mapping(path, value, MATCH_KEYS)
    if not doc:
        raise v.ValidationError(path, "matches every device: name at least one key", ", ".join(MATCH_KEYS))
    labels = v.mapping(v.join(path, "node_labels"), doc.get("node_labels") or {}, max_items=MAX_NODE_LABELS)
    return ClassMatch(
        vendor=v.optional(doc, path, "vendor", _vendor), model=v.optional(doc, path, "model", _glob),
        kind=v.optional(doc, path, "kind", _glob), profile=v.optional(doc, path, "profile", _glob),
        pool=v.optional(doc, path, "pool", _glob), resource=v.optional(doc, path, "resource", _glob),
        node_labels={k: _glob(v.join(v.join(path, "node_labels"), k), x) for k, x in labels.items()})


def _entry(path: str, value: Any) -> DeviceClass:
    doc = v.mapping(path, value, CLASS_KEYS)
    if doc.get("name") is None or doc.get("match") is None:
        raise v.ValidationError(path, "a class needs a name and a match", ", ".join(CLASS_KEYS))
    return DeviceClass(
        name=v.string(v.join(path, "name"), doc["name"], pattern=CLASS_NAME, max_length=40),
        match=_match(v.join(path, "match"), doc["match"]),
        device_taint_effect=v.optional(doc, path, "device_taint_effect", v.string, choices=EFFECTS),
        node_taint=v.optional(doc, path, "node_taint", v.boolean),
        cordon=v.optional(doc, path, "cordon", v.boolean),
        evict_pods=v.optional(doc, path, "evict_pods", v.boolean),
        budget_share=v.optional(doc, path, "budget_share", v.number, minimum=0, maximum=1),
        recovery_gate=v.optional(doc, path, "recovery_gate", parse_gate))


def parse(path: str, value: Any) -> tuple[DeviceClass, ...]:
    """``health.classes``, each entry checked (``health.classes[1].match.vendor: ...``); names are
    unique. Classes already parsed pass through (the config is parsed twice)."""
    if isinstance(value, tuple) and all(isinstance(c, DeviceClass) for c in value):
        return value
    out = tuple(v.list_of(path, value, _entry, max_items=MAX_CLASSES))
    for i, c in enumerate(out):
        if any(c.name == o.name for o in out[:i]):
            raise v.ValidationError(f"{path}[{i}].name", f"{c.name!r} names an earlier class too", "unique names")
    return out


# --------------------------------------------------------------------------- matching

def _is(pattern: Optional[str], value: str) -> bool:
    return pattern is None or fnmatch.fnmatchcase(value.lower(), pattern.lower())


def matches(m: ClassMatch, facts: DeviceFacts, node_labels: Mapping[str, str]) -> bool:
    if m.vendor is not None and m.vendor != facts.vendor:
        return False
    if not (_is(m.model, facts.model) and _is(m.kind, facts.kind) and _is(m.profile, facts.profile)
            and _is(m.resource, facts.resource)):
        return False
    if m.pool is not None and not any(_is(m.pool, p) for p in facts.pools):
        return False
    return all(k in node_labels and _is(g, str(node_labels[k])) for k, g in m.node_labels.items())


def facts_of(d: DeviceSample, pools: Iterable[str] = (), resource: str = "") -> DeviceFacts:
    i = d.identity
    return DeviceFacts(vendor=i.vendor, model=i.model or "", kind=i.kind, profile=d.profile.model if d.profile else "",
                       pools=tuple(sorted(pools)), resource=resource)


def default_policy(no_execute: bool, cordon: bool, evict_pods: bool) -> DevicePolicy:
    """The node-wide settings, for a device of no class."""
    return DevicePolicy("", "NoExecute" if no_execute else "NoSchedule", None, cordon, evict_pods, None)


def _policy(c: DeviceClass, base: DevicePolicy) -> DevicePolicy:
    def pick(mine: Any, theirs: Any) -> Any:
        return theirs if mine is None else mine
    return DevicePolicy(c.name, pick(c.device_taint_effect, base.device_taint_effect), c.node_taint,
                        pick(c.cordon, base.cordon), pick(c.evict_pods, base.evict_pods), c.budget_share,
                        c.recovery_gate)


def assign(snapshot: NodeSnapshot, classes: tuple[DeviceClass, ...], base: DevicePolicy,
           node_labels: Mapping[str, str], pools: Mapping[str, Iterable[str]],
           resources: Mapping[str, str]) -> ClassTable:
    """Each device's policy: its first matching class over ``base``; a child that matches none
    takes its parent's. ``pools``/``resources``: uuid -> what the cluster side knows of it."""
    out: dict[str, DevicePolicy] = {}
    for d in sorted(snapshot.devices, key=lambda d: d.identity.parent is not None):  # parents first
        uuid = d.identity.uuid
        facts = facts_of(d, pools.get(uuid, ()), resources.get(uuid, ""))
        found = next((c for c in classes if matches(c.match, facts, node_labels)), None)
        if found is not None:
            out[uuid] = _policy(found, base)
        elif d.identity.parent is not None and d.identity.parent in out:
            out[uuid] = out[d.identity.parent]
        else:
            out[uuid] = base
    return ClassTable(out, base)
