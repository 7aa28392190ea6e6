"""Node state for the scorer: the decoded node annotation, precomputed once per update.

A ``NodeState`` holds, per device group (the extended resource its devices are allocated as),
the devices that may be chosen (health ok or degraded; failed and unknown ones are listed with
their reason, never chosen), their link matrix and what the request-independent scores need.
Everything a request does not change is computed here, when the annotation changes, so that
scoring a node for a request is a few lookups (see scorer.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from hetero_exporter import profiles
from hetero_exporter.model import HOST_LINK_TYPES, DeviceSample, NodeSnapshot, SchemaError, snapshot_from_doc
from hetero_exporter.scoring import jsonsafe
from hetero_exporter.scoring.resources import device_resource
from hetero_exporter.scoring.versions import VersionKey, version_key

# How close two devices are, by the best link between them (0..1). The host-side link types
# are named here; every other link type is a vendor's device-to-device fabric (each vendor
# names its own: spec.fabric_links), all of one class: the ``same-fabric`` set of a request.
# A new fabric needs no edit here.
HOST_LINK_SCORE = {"pcie-switch": 0.6, "pcie-hostbridge": 0.4, "numa": 0.3, "cross-numa": 0.1}
if set(HOST_LINK_SCORE) != set(HOST_LINK_TYPES):  # one vocabulary with the model
    raise ImportError("scoring.nodes: HOST_LINK_SCORE does not match model.HOST_LINK_TYPES")
FABRIC_SCORE = 1.0
NOT_LINKS = frozenset(("", "unknown"))  # pair kinds that are no reported link
SWITCH_SCORE = HOST_LINK_SCORE["pcie-switch"]
UNKNOWN_LINK = 0.25  # no link reported and NUMA unknown: between same- and cross-NUMA
DOWN_LINK_STATES = frozenset(("down", "inactive", "disabled", "error", "failed"))

# Bounds on what a node annotation may hold; beyond them the node fails with the reason.
MAX_ANNOTATION_CHARS = 256 * 1024  # Kubernetes caps all annotations of an object together at 256 KiB
MAX_DEVICES = 64  # whole devices of one node (no server has more; choosing among them costs ~n^3)
# the longest text a field may hold: names and versions the scorer compares and words into reasons
TEXT_CHARS = {"vendor": 64, "model": 256, "uuid": 256, "link type": 64, "version": 128}
REASON_CHARS = 1000  # of an unreadable annotation's reason (paths name keys from the text)


def is_fabric(link_type: str) -> bool:
    """Whether a link type is a device-to-device fabric (not host-side PCIe or NUMA)."""
    return link_type not in HOST_LINK_SCORE and link_type not in NOT_LINKS


def link_score(link_type: str) -> Optional[float]:
    """Closeness (0..1) a link of this type gives; None for no link type."""
    if link_type in NOT_LINKS:
        return None
    return HOST_LINK_SCORE.get(link_type, FABRIC_SCORE)


@dataclass(frozen=True, eq=False)
class Dev:
    """A device as the scorer sees it. Memory in bytes; ``load`` 0..1 is the larger of
    utilization and used memory share (0 when neither is reported)."""

    uuid: str
    index: int
    model: str
    health: str
    compute_units: float
    cost_weight: float
    features: frozenset
    memory_total: Optional[float]
    memory_free: Optional[float]
    load: float
    driver: Optional[str]
    driver_key: Optional[VersionKey]
    runtime: Optional[str]
    runtime_key: Optional[VersionKey]
    numa: Optional[int]

    def label(self) -> str:
        return f"#{self.index}"


@dataclass(eq=False)
class Group:
    """The devices of one extended resource on one node."""

    resource: str
    vendor: str
    devices: tuple[Dev, ...]  # candidates: health ok or degraded
    excluded: tuple[tuple[Dev, str], ...]  # (device, why it is never chosen)
    pair: list[list[float]]  # pair[i][j]: closeness of candidates i and j (0..1)
    pair_kind: list[list[str]]  # the link type behind pair[i][j]
    domain: tuple[int, ...]  # fabric-connected component of each candidate
    load_total: float
    has_links: bool
    floor: Optional[Dev] = None  # the weakest candidate in every respect: if it fits, all do
    floor_id: int = -1  # interned static part of the floor: nodes alike share it (see scorer)
    choices: dict[Any, Any] = field(default_factory=dict)  # scorer memo: see scorer.best_choice

    def __post_init__(self) -> None:
        self.every = tuple(range(len(self.devices)))
        self.loads = [d.load for d in self.devices]

    def describe(self) -> str:
        models = sorted({d.model for d in self.devices} | {d.model for d, _ in self.excluded})
        n = len(self.devices) + len(self.excluded)
        return f"{n} x {self.resource} ({', '.join(models)})"


@dataclass(eq=False)
class NodeState:
    """One node's decoded annotation. ``error`` set: no device can be used (unreadable or
    missing annotation). ``time`` is the snapshot time (Unix seconds), for staleness."""

    name: str
    time: float
    groups: Mapping[str, Group]
    error: Optional[str] = None
    memo: dict[str, Any] = field(default_factory=dict)  # request key -> Decision (scorer.py)

    def __post_init__(self) -> None:
        self.group_list = tuple(self.groups.values())
        self.vendors: dict[str, tuple[Group, ...]] = {}
        for g in self.group_list:
            self.vendors[g.vendor] = self.vendors.get(g.vendor, ()) + (g,)

    def inventory(self) -> str:
        return "; ".join(g.describe() for g in self.groups.values()) or "no accelerators"


def _text(value: Optional[str], what: str, where: str) -> Optional[str]:
    limit = TEXT_CHARS[what]
    if value is not None and len(value) > limit:
        raise SchemaError(f"{where}: {len(value)} characters, over {limit} for a {what}")
    return value


def _version(text: Optional[str], where: str) -> Optional[VersionKey]:
    return version_key(_text(text, "version", where))  # bounded first: int() of 5,000 digits fails


def _not_negative(value: Optional[float], where: str) -> Optional[float]:
    if value is not None and value < 0:
        raise SchemaError(f"{where}: {value:g} is negative")
    return value


def _dev(d: DeviceSample, where: str) -> Dev:
    ident = d.identity
    for what in ("vendor", "model", "uuid"):
        _text(getattr(ident, what), what, f"{where}.identity.{what}")
    for at, link in enumerate(d.links):
        _text(link.type, "link type", f"{where}.links[{at}].type")
        _text(link.peer, "uuid", f"{where}.links[{at}].peer")
    total = _not_negative(d.value("memory_total_bytes"), f"{where}.readings.memory_total_bytes")
    prof = d.profile or profiles.profile_for(ident.vendor, ident.model, kind=ident.kind,
                                             memory_total_bytes=total)
    _text(prof.model, "model", f"{where}.profile.model")
    for name in ("compute_units", "cost_weight", "memory_bytes"):
        _not_negative(getattr(prof, name), f"{where}.profile.{name}")
    for name in ("memory_free_bytes", "memory_used_bytes", "utilization_ratio"):
        _not_negative(d.value(name), f"{where}.readings.{name}")
    if total is None and prof.memory_bytes:
        total = float(prof.memory_bytes)
    free = d.value("memory_free_bytes")
    used = d.value("memory_used_bytes")
    if free is None and used is not None and total:
        free = max(0.0, total - used)
    if used is None and free is not None and total:
        used = max(0.0, total - free)
    shares = [x for x in (d.value("utilization_ratio"), (used / total) if used is not None and total else None)
              if x is not None]
    runtime = ident.runtime_version
    return Dev(uuid=ident.uuid, index=ident.index, model=ident.model or prof.model,
               health=d.health.state, compute_units=float(prof.compute_units),
               cost_weight=float(prof.cost_weight), features=frozenset(prof.features),
               memory_total=total, memory_free=free, load=min(1.0, max(shares, default=0.0)),
               driver=ident.driver_version,
               driver_key=_version(ident.driver_version, f"{where}.identity.driver_version"),
               runtime=runtime, runtime_key=_version(runtime, f"{where}.identity.runtime_version"),
               numa=ident.numa_node)


def _links(devs: list[Dev], samples: list[DeviceSample]) -> tuple[list[list[float]], list[list[str]], bool]:
    pos = {d.uuid: i for i, d in enumerate(devs)}
    n = len(devs)
    pair = [[0.0] * n for _ in range(n)]
    kind = [[""] * n for _ in range(n)]
    has_links = False
    for i, s in enumerate(samples):
        for link in s.links:
            j = pos.get(link.peer)
            score = link_score(link.type or "")
            if j is None or j == i or score is None or (link.state or "").lower() in DOWN_LINK_STATES:
                continue
            has_links = True
            for a, b in ((i, j), (j, i)):  # a link seen from either end serves both
                if score > pair[a][b]:
                    pair[a][b], kind[a][b] = score, link.type
    for i in range(n):
        for j in range(n):
            if i != j and not kind[i][j]:
                a, b = devs[i].numa, devs[j].numa
                if a is None or b is None:
                    pair[i][j], kind[i][j] = UNKNOWN_LINK, "unknown"
                else:
                    pair[i][j], kind[i][j] = (HOST_LINK_SCORE["numa"], "numa") if a == b else \
                        (HOST_LINK_SCORE["cross-numa"], "cross-numa")
    return pair, kind, has_links


def _domains(kind: list[list[str]]) -> tuple[int, ...]:
    """Connected components over fabric links (each device's smallest member index)."""
    n = len(kind)
    comp = list(range(n))
    for i in range(n):
        stack = [i]
        while stack:
            a = stack.pop()
            for b in range(n):
                if is_fabric(kind[a][b]) and comp[b] > comp[i]:
                    comp[b] = comp[i]
                    stack.append(b)
    return tuple(comp)


_FLOORS: dict[tuple, int] = {}
FLOORS_MAX = 100_000  # distinct hardware floors interned; beyond, floors are not shared


def _floor_id(vendor: str, floor: Optional[Dev]) -> int:
    """A small int naming what an exclusive request checks of a floor (not load or free memory),
    the same for every node with the same hardware and versions."""
    if floor is None:
        return -1
    sig = (vendor, floor.compute_units, floor.memory_total, floor.features, floor.driver_key, floor.runtime_key)
    got = _FLOORS.get(sig)
    if got is None:
        if len(_FLOORS) >= FLOORS_MAX:
            return -1
        got = _FLOORS.setdefault(sig, len(_FLOORS))
    return got


def _floor(devs: list[Dev]) -> Optional[Dev]:
    """A device no better than any of ``devs`` in compute, memory, features, load and versions."""
    if not devs:
        return None

    def least(values: list) -> Any:
        return None if any(v is None for v in values) else min(values)
    drivers = [d for d in devs if d.driver_key is not None]
    runtimes = [d for d in devs if d.runtime_key is not None]
    oldest_driver = min(drivers, key=lambda d: d.driver_key) if len(drivers) == len(devs) else None
    oldest_runtime = min(runtimes, key=lambda d: d.runtime_key) if len(runtimes) == len(devs) else None
    return Dev(uuid="", index=-1, model="", health="ok",
               compute_units=min(d.compute_units for d in devs), cost_weight=0.0,
               features=frozenset.intersection(*(d.features for d in devs)),
               memory_total=least([d.memory_total for d in devs]), memory_free=least([d.memory_free for d in devs]),
               load=max(d.load for d in devs),
               driver=oldest_driver.driver if oldest_driver else None,
               driver_key=oldest_driver.driver_key if oldest_driver else None,
               runtime=oldest_runtime.runtime if oldest_runtime else None,
               runtime_key=oldest_runtime.runtime_key if oldest_runtime else None, numa=None)


def _why_excluded(d: Dev) -> Optional[str]:
    if d.health == "failed":
        return "failed"
    if d.health not in ("ok", "degraded"):
        return f"health {d.health}"
    return None


def node_state(name: str, snapshot: NodeSnapshot) -> NodeState:
    """Precompute the scorer's view of a node from its snapshot (SchemaError beyond the bounds
    above, or for a number a device cannot have)."""
    samples: dict[str, list[DeviceSample]] = {}
    position: dict[int, int] = {}  # id(sample) -> its index in $.devices, for error paths
    for at, d in enumerate(snapshot.devices):
        if d.identity.parent is not None:  # partitions (identity.parent) are not whole devices
            continue
        position[id(d)] = at
        samples.setdefault(device_resource(d.identity.vendor, d.identity.model), []).append(d)
    if len(position) > MAX_DEVICES:
        raise SchemaError(f"$.devices: {len(position)} whole devices, over the {MAX_DEVICES} this extender "
                          "scores on one node")
    groups = {}
    for resource, group_samples in sorted(samples.items()):
        group_samples.sort(key=lambda s: s.identity.index)
        devs, cand_samples, excluded = [], [], []
        for s in group_samples:
            dev = _dev(s, f"$.devices[{position[id(s)]}]")
            why = _why_excluded(dev)
            if why is None:
                devs.append(dev)
                cand_samples.append(s)
            else:
                excluded.append((dev, why))
        pair, kind, has_links = _links(devs, cand_samples)
        vendor = group_samples[0].identity.vendor
        floor = _floor(devs)
        groups[resource] = Group(
            resource=resource, vendor=vendor, devices=tuple(devs),
            excluded=tuple(excluded), pair=pair, pair_kind=kind, domain=_domains(kind),
            load_total=sum(d.load for d in devs), has_links=has_links, floor=floor,
            floor_id=_floor_id(vendor, floor))
    return NodeState(name=name, time=snapshot.time, groups=groups)


def _unreadable(name: str, why: str) -> NodeState:
    if len(why) > REASON_CHARS:
        why = why[:REASON_CHARS - 3] + "..."
    return NodeState(name=name, time=0.0, groups={}, error=f"annotation unreadable: {why}")


def from_annotation(name: str, text: Optional[str], annotation: str = "hetero-exporter.io/devices") -> NodeState:
    """The state of a node from its annotation text; an unreadable, oversized or out-of-bounds
    annotation gives a state whose ``error`` says why (never an exception)."""
    if text is None:
        return NodeState(name=name, time=0.0, groups={},
                         error=f"no {annotation} annotation (is the hetero-exporter agent running there?)")
    if len(text) > MAX_ANNOTATION_CHARS:
        return _unreadable(name, f"$: {len(text)} characters, over the {MAX_ANNOTATION_CHARS} Kubernetes "
                                 "allows for all annotations of a node")
    try:
        doc = jsonsafe.loads(text)
    except jsonsafe.JSONRefused as e:
        return _unreadable(name, f"$: not valid JSON: {e}")
    return from_document(name, doc)


def from_document(name: str, doc: Any) -> NodeState:
    """Like ``from_annotation`` for an already parsed document (``score --nodes``)."""
    try:
        return node_state(name, snapshot_from_doc(doc))
    except SchemaError as e:
        return _unreadable(name, str(e))
