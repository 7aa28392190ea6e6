"""Node state for the scorer: the decoded node annotation, precomputed once per update.

A ``NodeState`` holds, per device group (the extended resource its devices are allocated as),
the devices that may be chosen (health ok or degraded; failed, recovering and unknown ones are
listed with their reason, never chosen), their link matrix and what the request-independent scores need.
Everything a request does not change is computed here, when the annotation changes, so that
scoring a node for a request is a few lookups (see scorer.py).

An annotation text is read by ``_light_snapshot`` (msgspec Structs of the fields read here,
~0.1 ms a node) and falls back to the model decoder (model.snapshot_from_doc), which words the
reason, for anything it refuses: a node in a request body seen for the first time costs ~0.35 ms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Hashable, Mapping, Optional, Union

from hetero_exporter import profiles, vendors
from hetero_exporter.model import (HOST_LINK_TYPES, SCHEMA_VERSION, DeviceSample, NodeSnapshot, SchemaError,
                                   snapshot_from_doc)
from hetero_exporter.scoring import jsonsafe
from hetero_exporter.scoring.resources import device_resource
from hetero_exporter.scoring.versions import VersionKey, version_key
from hetero_exporter.model.keys import Keys

try:  # the extender extra: the scorer's fields of an annotation decoded in C (see _light_snapshot)
    import msgspec
except ModuleNotFoundError:  # pragma: no cover - without it every annotation takes the model decoder
    msgspec = None  # type: ignore[assignment]

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
# A decoded state's memory with its node-table row, estimated (issue 35 item 9: a 7.7 KB annotation
# of 64 bare devices decodes to 115 KB, so text bytes are no measure): per state, per device, per
# pair of candidates (the link matrices) and per text character. Fitted over tracemalloc of 1-64
# device annotations, bare and of the synthetic servers with and without links: 7-40% above each.
STATE_BYTES, DEVICE_BYTES, PAIR_BYTES, TEXT_BYTE = 4096, 768, 16, 0.5


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
    memo: dict[Hashable, Any] = field(default_factory=dict)  # request key -> Decision (scorer.py)
    weight: int = 0  # estimated bytes (state_bytes), set by the table that decoded it

    def __post_init__(self) -> None:
        self.group_list = tuple(self.groups.values())
        self.vendors: dict[str, tuple[Group, ...]] = {}
        for g in self.group_list:
            self.vendors[g.vendor] = self.vendors.get(g.vendor, ()) + (g,)

    def inventory(self) -> str:
        got = self.memo.get(("inventory",))  # worded into the node's refusals: once
        if got is None:
            got = self.memo[("inventory",)] = "; ".join(g.describe() for g in self.groups.values()) or "no accelerators"
        return got


def state_bytes(state: NodeState, text_chars: int) -> int:
    """Estimated bytes ``state`` holds (with its node-table row), decoded from ``text_chars``
    characters of annotation: from its devices and its candidates' link matrices."""
    devices = pairs = 0
    for g in state.group_list:
        devices += len(g.devices) + len(g.excluded)
        pairs += len(g.devices) ** 2
    return int(STATE_BYTES + DEVICE_BYTES * devices + PAIR_BYTES * pairs + TEXT_BYTE * max(0, text_chars))


def _text(value: Optional[str], what: str, where: str) -> Optional[str]:
    limit = TEXT_CHARS[what]
    if value is not None and len(value) > limit:
        raise SchemaError(f"{where}: {len(value)} characters, over {limit} for a {what}")
    return value


_VERSION_KEYS: dict[str, Optional[VersionKey]] = {}  # nodes alike share few driver versions


def _known_version(text: Optional[str]) -> Optional[VersionKey]:
    """``version_key`` of a text already bounded to TEXT_CHARS["version"], memoized."""
    if text is None:
        return None
    got = _VERSION_KEYS.get(text, _VERSION_KEYS)
    if got is _VERSION_KEYS:
        if len(_VERSION_KEYS) >= 4096:
            _VERSION_KEYS.clear()
        got = _VERSION_KEYS[text] = version_key(text)
    return got  # type: ignore[return-value]


def _version(text: Optional[str], where: str) -> Optional[VersionKey]:
    return _known_version(_text(text, "version", where))  # bounded first: int() of 5,000 digits fails


def _not_negative(value: Optional[float], where: str) -> Optional[float]:
    if value is not None and value < 0:
        raise SchemaError(f"{where}: {value:g} is negative")
    return value


def _dev(d: DeviceSample, where: str, texts_checked: bool = False) -> Dev:
    """``texts_checked``: the text bounds were checked by the decoder (_light_snapshot)."""
    ident = d.identity
    if not texts_checked:
        for what in ("vendor", "model", "uuid"):
            _text(getattr(ident, what), what, f"{where}.identity.{what}")
        for at, link in enumerate(d.links):
            _text(link.type, "link type", f"{where}.links[{at}].type")
            _text(link.peer, "uuid", f"{where}.links[{at}].peer")
    value = d.value
    total = _not_negative(value("memory_total_bytes"), f"{where}.readings.memory_total_bytes")
    prof = d.profile or profiles.profile_for(ident.vendor, ident.model, kind=ident.kind,
                                             memory_total_bytes=total)
    _text(prof.model, "model", f"{where}.profile.model")
    for name, v in (("compute_units", prof.compute_units), ("cost_weight", prof.cost_weight),
                    ("memory_bytes", prof.memory_bytes)):
        if v is not None and v < 0:  # the path worded only then: a few f-strings a device add up
            _not_negative(v, f"{where}.profile.{name}")
    free, used, util = value("memory_free_bytes"), value("memory_used_bytes"), value("utilization_ratio")
    for name, v in (("memory_free_bytes", free), ("memory_used_bytes", used), ("utilization_ratio", util)):
        if v is not None and v < 0:
            _not_negative(v, f"{where}.readings.{name}")
    if total is None and prof.memory_bytes:
        total = float(prof.memory_bytes)
    if free is None and used is not None and total:
        free = max(0.0, total - used)
    if used is None and free is not None and total:
        used = max(0.0, total - free)
    shares = [x for x in (util, (used / total) if used is not None and total else None)
              if x is not None]
    runtime = ident.runtime_version
    if texts_checked:
        driver_key, runtime_key = _known_version(ident.driver_version), _known_version(runtime)
    else:
        driver_key = _version(ident.driver_version, f"{where}.identity.driver_version")
        runtime_key = _version(runtime, f"{where}.identity.runtime_version")
    return Dev(uuid=ident.uuid, index=ident.index, model=ident.model or prof.model,
               health=d.health.state, compute_units=float(prof.compute_units),
               cost_weight=float(prof.cost_weight), features=frozenset(prof.features),
               memory_total=total, memory_free=free, load=min(1.0, max(shares, default=0.0)),
               driver=ident.driver_version, driver_key=driver_key, runtime=runtime, runtime_key=runtime_key,
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
            if j is None or j == i or link.type in NOT_LINKS:
                continue
            state = link.state
            if state and state.lower() in DOWN_LINK_STATES:
                continue
            score = HOST_LINK_SCORE.get(link.type, FABRIC_SCORE)  # link_score, inlined
            has_links = True
            if score > pair[i][j]:  # a link seen from either end serves both
                pair[i][j], kind[i][j] = score, link.type
            if score > pair[j][i]:
                pair[j][i], kind[j][i] = score, link.type
    numas = [d.numa for d in devs]
    same_numa, cross_numa = HOST_LINK_SCORE["numa"], HOST_LINK_SCORE["cross-numa"]
    for i in range(n):
        a, row_pair, row_kind = numas[i], pair[i], kind[i]
        for j in range(n):
            if i != j and not row_kind[j]:
                b = numas[j]
                if a is None or b is None:
                    row_pair[j], row_kind[j] = UNKNOWN_LINK, "unknown"
                elif a == b:
                    row_pair[j], row_kind[j] = same_numa, "numa"
                else:
                    row_pair[j], row_kind[j] = cross_numa, "cross-numa"
    return pair, kind, has_links


def _domains(kind: list[list[str]]) -> tuple[int, ...]:
    """Connected components over fabric links (each device's smallest member index)."""
    n = len(kind)
    comp = list(range(n))
    fabric = [[b for b, k in enumerate(row) if is_fabric(k)] for row in kind]
    for i in range(n):
        stack = [i]
        while stack:
            a = stack.pop()
            for b in fabric[a]:
                if comp[b] > comp[i]:
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
    drivers = [(d.driver_key, d) for d in devs if d.driver_key is not None]
    runtimes = [(d.runtime_key, d) for d in devs if d.runtime_key is not None]
    oldest_driver = min(drivers, key=lambda kd: kd[0])[1] if len(drivers) == len(devs) else None
    oldest_runtime = min(runtimes, key=lambda kd: kd[0])[1] if len(runtimes) == len(devs) else None
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
    if d.health == "recovering":
        return "recovering (its recovery gate has not passed: no new work)"
    if d.health not in ("ok", "degraded"):
        return f"health {d.health}"
    return None


_RESOURCES: dict[tuple[str, str], str] = {}  # (vendor, model) -> device_resource, for one specs generation
_RESOURCES_OF = [-1]  # the vendors.generation() _RESOURCES holds


def _resource(vendor: str, model: str) -> str:
    if _RESOURCES_OF[0] != vendors.generation():  # a spec (un)registered: its plugin's names may differ
        _RESOURCES.clear()
        _RESOURCES_OF[0] = vendors.generation()
    got = _RESOURCES.get((vendor, model))
    if got is None:
        if len(_RESOURCES) >= 4096:
            _RESOURCES.clear()
        got = _RESOURCES[(vendor, model)] = device_resource(vendor, model)
    return got


def node_state(name: str, snapshot: NodeSnapshot, texts_checked: bool = False) -> NodeState:
    """Precompute the scorer's view of a node from its snapshot (SchemaError beyond the bounds
    above, or for a number a device cannot have). ``texts_checked``: ``snapshot`` is a
    _light_snapshot, whose decoder checked the text bounds."""
    samples: dict[str, list[DeviceSample]] = {}
    position: dict[int, int] = {}  # id(sample) -> its index in $.devices, for error paths
    for at, d in enumerate(snapshot.devices):
        if d.identity.parent is not None:  # partitions (identity.parent) are not whole devices
            continue
        position[id(d)] = at
        samples.setdefault(_resource(d.identity.vendor, d.identity.model), []).append(d)
    if len(position) > MAX_DEVICES:
        raise SchemaError(f"$.devices: {len(position)} whole devices, over the {MAX_DEVICES} this extender "
                          "scores on one node")
    groups = {}
    for resource, group_samples in sorted(samples.items()):
        group_samples.sort(key=lambda s: s.identity.index)
        devs, cand_samples, excluded = [], [], []
        for s in group_samples:
            dev = _dev(s, f"$.devices[{position[id(s)]}]", texts_checked)
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


if msgspec is not None:
    _VendorText = Annotated[str, msgspec.Meta(max_length=TEXT_CHARS["vendor"])]
    _ModelText = Annotated[str, msgspec.Meta(max_length=TEXT_CHARS["model"])]
    _UuidText = Annotated[str, msgspec.Meta(max_length=TEXT_CHARS["uuid"])]
    _LinkText = Annotated[str, msgspec.Meta(max_length=TEXT_CHARS["link type"])]
    _VersionText = Annotated[str, msgspec.Meta(max_length=TEXT_CHARS["version"])]

    class _Quality(msgspec.Struct, frozen=True, gc=False):
        source: str
        status: str = "ok"

    _NO_QUALITY = _Quality(source="")

    class _Reading(msgspec.Struct, gc=False):
        value: Optional[float]
        quality: _Quality = _NO_QUALITY

    class _Identity(msgspec.Struct, gc=False):
        vendor: _VendorText
        kind: str
        index: int
        uuid: _UuidText
        model: _ModelText = ""
        numa_node: Optional[int] = None
        driver_version: Optional[_VersionText] = None
        parent: Optional[str] = None
        runtime_version: Optional[_VersionText] = None

    class _Link(msgspec.Struct, gc=False):
        peer: _UuidText
        type: _LinkText
        state: Optional[str] = None

    class _Health(msgspec.Struct, frozen=True, gc=False):
        state: str = "ok"

    class _Profile(msgspec.Struct, gc=False):
        model: _ModelText
        vendor: str = ""
        kind: str = ""
        compute_units: float = 1.0
        memory_bytes: Optional[int] = None
        features: tuple[str, ...] = ()
        cost_weight: float = 1.0

    class _Device(msgspec.Struct, gc=False):
        identity: _Identity
        timestamp: float
        readings: dict[str, _Reading] = msgspec.field(default_factory=dict)
        health: _Health = _Health()
        links: tuple[_Link, ...] = ()
        profile: Optional[_Profile] = None

        value = DeviceSample.value

    class _Snapshot(msgspec.Struct, gc=False):
        schema: Union[int, float]
        node: str
        time: float
        devices: tuple[_Device, ...] = ()

    _LIGHT = msgspec.json.Decoder(_Snapshot)


def _light_snapshot(text: str) -> Optional[Any]:
    """The fields of an annotation the scorer reads (duck-typed like a NodeSnapshot), decoded and
    checked in C: types and nullability as the model decoder checks them, the text bounds
    above. None for anything it refuses: the model decoder then says why. The fields the scorer
    does not read (faults, processes, collectors, quality but its status...) are skipped, not
    checked: a node is not refused for them (nor for nesting in them below msgspec's own
    recursion limit, where ``jsonsafe`` stops at MAX_DEPTH)."""
    if msgspec is None:
        return None
    try:
        snap = _LIGHT.decode(text)
    except (msgspec.MsgspecError, RecursionError, UnicodeError):
        return None
    return snap if int(snap.schema) == SCHEMA_VERSION else None


def from_annotation(name: str, text: Optional[str], annotation: str = Keys().devices) -> NodeState:
    """The state of a node from its annotation text; an unreadable, oversized or out-of-bounds
    annotation gives a state whose ``error`` says why (never an exception)."""
    if text is None:
        return NodeState(name=name, time=0.0, groups={},
                         error=f"no {annotation} annotation (is the hetero-exporter agent running there?)")
    if len(text) > MAX_ANNOTATION_CHARS:
        return _unreadable(name, f"$: {len(text)} characters, over the {MAX_ANNOTATION_CHARS} Kubernetes "
                                 "allows for all annotations of a node")
    light = _light_snapshot(text)
    if light is not None:
        try:
            return node_state(name, light, texts_checked=True)
        except SchemaError as e:
            return _unreadable(name, str(e))
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
