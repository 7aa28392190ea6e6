"""What a pod asks for: its accelerator extended resources and the vendor-neutral request
annotation ``<domain>/request`` (default domain: model.keys.DEFAULT_DOMAIN).

The annotation is a JSON object; every key is optional::

    {"count": 4,                          # devices
     "vendors": ["<vendor>", "<vendor>"],  # acceptable vendors (identity.vendor), most preferred first
     "compute_units": 0.9,                 # per device, relative to the profiles' reference device
     "memory_per_device": "64Gi",          # bytes, or a Kubernetes quantity
     "features": ["rdma"],                 # profile features every device must have
     "topology": "same-fabric",            # same-node | same-switch | same-fabric
     "min_driver_version": "550.54",       # or {"<vendor>": "550.54", "<vendor>": "24.1"}
     "min_runtime_version": {"<vendor>": "12.4"},
     "policy": "spread",                   # binpack | spread (default: the service's)
     "shared": false}                      # true: devices may already be in use (slices)

``same-fabric``: the devices form one set connected by the vendor's device-to-device fabric
(any link type that is not host-side PCIe/NUMA; see scoring.nodes). ``same-nvlink-domain`` is
its older name and stays accepted (``Request.topology`` keeps the spelling the pod used;
``Request.topology_policy`` is the canonical name).

When the pod also requests an accelerator extended resource, that resource decides the vendor,
the device group and the count (the device plugin allocates from it); the annotation then adds
its constraints and must agree with it. Anything malformed raises ``RequestError`` naming where.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from hetero_exporter import vendors as vendor_specs
from hetero_exporter.scoring import jsonsafe
from hetero_exporter.scoring.resources import parse_resource
from hetero_exporter.scoring.versions import VersionKey, version_key
from hetero_exporter.model.keys import DEFAULT_DOMAIN, Keys

TOPOLOGIES = ("same-node", "same-switch", "same-fabric")  # the topology policies, loosest first
TOPOLOGY_ALIASES = {"same-nvlink-domain": "same-fabric"}  # older names, still accepted
# every accepted spelling, in the order error messages list them
ACCEPTED_TOPOLOGIES = ("same-node", "same-switch", *TOPOLOGY_ALIASES, "same-fabric")
POLICIES = ("binpack", "spread")
MAX_COUNT = 64  # more devices than any node has: a typo, not a request
MAX_ANNOTATION_CHARS = 256 * 1024  # Kubernetes caps all annotations of an object together at 256 KiB
MAX_VERSION_CHARS = 128
NAME_CHARS = 253  # the longest Kubernetes object name (DNS subdomain); longer ones are clipped in logs

_ANNOTATION_KEYS = ("count", "vendors", "compute_units", "memory_per_device", "features", "topology",
                    "min_driver_version", "min_runtime_version", "policy", "shared")


def canonical_topology(name: str) -> str:
    """The topology policy a spelling names (an alias gives its policy's name)."""
    return TOPOLOGY_ALIASES.get(name, name)


class RequestError(ValueError):
    """A pod's accelerator request cannot be read (message says where and why)."""


def clip_name(value: Any, default: str = "?") -> str:
    """An object name as logs and explanations show it: ``default`` if it is not a non-empty
    string, cut to ``NAME_CHARS`` with a marker saying how much was left out if longer."""
    if not isinstance(value, str) or not value:
        return default
    if len(value) <= NAME_CHARS:
        return value
    return f"{value[:NAME_CHARS]}...(+{len(value) - NAME_CHARS} chars)"


def pod_name(meta: Any) -> str:
    """``namespace/name`` of a pod's metadata (``generateName`` when it has no name yet)."""
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name") or meta.get("generateName")
    return f"{clip_name(meta.get('namespace'), 'default')}/{clip_name(name)}"


@dataclass(frozen=True)
class Request:
    """A pod's accelerator request, normalized. ``count`` 0: the pod asks for no accelerator.

    ``vendors`` lists acceptable vendors, most preferred first (empty: any vendor);
    ``group`` is the extended resource the devices must come from (None: any group of an
    acceptable vendor). ``min_driver``/``min_runtime`` hold (vendor or ``*``, version text)."""

    count: int = 0
    vendors: tuple[str, ...] = ()
    group: Optional[str] = None
    shared: bool = False
    compute_units: Optional[float] = None
    memory_bytes: Optional[int] = None
    features: tuple[str, ...] = ()
    topology: str = "same-node"
    min_driver: tuple[tuple[str, str], ...] = ()
    min_runtime: tuple[tuple[str, str], ...] = ()
    policy: Optional[str] = None
    pod: str = ""  # namespace/name, for logs and explanations

    @functools.cached_property
    def key(self) -> str:
        """Identity of what is asked (not of the pod): decisions are memoized on it."""
        return repr((self.count, self.vendors, self.group, self.shared, self.compute_units,
                     self.memory_bytes, self.features, self.topology_policy, self.min_driver,
                     self.min_runtime, self.policy))

    @functools.cached_property
    def topology_policy(self) -> str:
        """The canonical topology policy (``same-fabric`` for its alias)."""
        return canonical_topology(self.topology)

    @functools.cached_property
    def per_device(self) -> bool:
        """Whether some devices may not qualify (a per-device constraint is asked)."""
        return bool(self.compute_units is not None or self.memory_bytes is not None or self.features
                    or self.min_driver or self.min_runtime)

    @functools.cached_property
    def unconstrained(self) -> "Request":
        """The same request without per-device constraints: where every device meets them,
        its decision is this request's decision (and is likely memoized already)."""
        return dataclasses.replace(self, compute_units=None, memory_bytes=None, features=(),
                                   min_driver=(), min_runtime=())

    @functools.cached_property
    def scratch(self) -> dict:
        """Per-request memo of the scorer (its memo keys)."""
        return {}

    @functools.cached_property
    def floor_fits(self) -> dict:
        """Per-request memo of the scorer: interned device floor -> whether it fits."""
        return {}

    def min_version(self, which: str, vendor: str) -> Optional[tuple[VersionKey, str]]:
        """The minimum driver (``which="driver"``) or runtime version for ``vendor``."""
        table = self.min_driver if which == "driver" else self.min_runtime
        for v, text in table:
            if v == vendor or v == "*":
                key = version_key(text)
                return (key, text) if key is not None else None
        return None

    def describe(self) -> str:
        if self.count == 0:
            return "no accelerator"
        what = self.group or "/".join(self.vendors) or "any accelerator"
        parts = [f"{self.count} x {what}" + (" (shared)" if self.shared else "")]
        if self.compute_units is not None:
            parts.append(f">= {self.compute_units:g} compute units")
        if self.memory_bytes is not None:
            parts.append(f">= {self.memory_bytes / 2**30:.1f} GiB")
        if self.features:
            parts.append("features " + ",".join(self.features))
        if self.topology != "same-node":
            parts.append(self.topology)
        for which, table in (("driver", self.min_driver), ("runtime", self.min_runtime)):
            for v, text in table:
                parts.append(f"{which} >= {text}" + ("" if v == "*" else f" ({v})"))
        return ", ".join(parts)


# --------------------------------------------------------------------------- quantities

# ASCII digits only: "٣" (Arabic-Indic three) is a digit to \d, not to the API server
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
MAX_DEVICES_PER_POD = 1024  # no node has more; a larger count is a typo or an attack, refused with a reason
_SUFFIX = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def parse_quantity(value: Any, where: str) -> float:
    """A Kubernetes quantity (``4``, ``"64Gi"``, ``"500m"``) as a number."""
    if isinstance(value, bool):
        raise RequestError(f"{where}: expected a quantity, got {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        m = _QUANTITY.match(value.strip())
        if not m:
            raise RequestError(f"{where}: {value!r:.40} is not a Kubernetes quantity (like 4, 64Gi, 500m)")
        number = float(m.group(1)) * _SUFFIX[m.group(2)]
    else:
        raise RequestError(f"{where}: expected a quantity, got {type(value).__name__}")
    if not math.isfinite(number) or number < 0:
        raise RequestError(f"{where}: expected a non-negative quantity, got {value!r:.40}")
    return number


def _whole(value: Any, where: str) -> int:
    number = parse_quantity(value, where)
    if number != int(number):
        raise RequestError(f"{where}: accelerators come whole; got {value!r:.40}")
    return int(number)


# --------------------------------------------------------------------------- pod


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RequestError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _containers(spec: Mapping[str, Any], key: str) -> list[tuple[str, dict[str, Any]]]:
    items = spec.get(key)
    items = [] if items is None else items
    if not isinstance(items, list):
        raise RequestError(f"spec.{key}: expected a list, got {type(items).__name__}")
    out = []
    for i, c in enumerate(items):
        where = f"spec.{key}[{i}]"
        res = _mapping(_mapping(c, where).get("resources"), f"{where}.resources")
        limits = _mapping(res.get("limits"), f"{where}.resources.limits")
        requests = _mapping(res.get("requests"), f"{where}.resources.requests")
        # extended resources: requests default to limits and may not differ from them
        out.append((f"{where}.resources", {**requests, **limits}))
    return out


@dataclass
class _Accelerators:
    vendor: str = ""  # set with the group: of the resource the pod asks for
    group: Optional[str] = None
    devices: int = 0
    slices: int = 0
    memory_bytes: Optional[int] = None
    features: tuple[str, ...] = ()
    names: tuple[str, ...] = ()


def _resources(spec: Mapping[str, Any]) -> _Accelerators:
    """Sum the accelerator resources of a pod: app containers add up, init containers run
    one at a time (the pod needs the largest of them, or the sum of the app containers)."""
    totals: dict[str, list[int]] = {}  # group -> [app devices, app slices, max init devices, max init slices]
    acc = _Accelerators()
    for key in ("containers", "initContainers"):
        init = key == "initContainers"
        for where, resources in _containers(spec, key):
            for name, qty in resources.items():
                rs = parse_resource(str(name))
                if rs is None:
                    continue
                if acc.group is not None and rs.group != acc.group:
                    raise RequestError(
                        f"{where}: the pod asks for {acc.names[0]} and {name}; devices of one pod "
                        "come from one device group")
                acc.vendor, acc.group = rs.vendor, rs.group
                acc.features = tuple(sorted(set(acc.features) | set(rs.features)))
                if name not in acc.names:
                    acc.names += (str(name),)
                n = _whole(qty, f"{where}['{name}']")
                if rs.unit != "memory_mib" and n > MAX_DEVICES_PER_POD:
                    raise RequestError(f"{where}['{name}']: {qty!r:.40} is more devices than any node has "
                                       f"(at most {MAX_DEVICES_PER_POD})")
                t = totals.setdefault(rs.group, [0, 0, 0, 0])
                if rs.unit == "memory_mib":
                    acc.memory_bytes = max(acc.memory_bytes or 0, n * 2**20)
                else:
                    slot = (2 if init else 0) + (1 if rs.unit == "slices" else 0)
                    t[slot] = max(t[slot], n) if init else t[slot] + n
    for app_dev, app_sl, init_dev, init_sl in totals.values():
        acc.devices = max(app_dev, init_dev)
        acc.slices = max(app_sl, init_sl)
    return acc


def _vendors(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        known = list(vendor_specs.specs())[:2] or ["<vendor>"]
        raise RequestError(f"{where}: expected a list of vendor names, e.g. {json.dumps(known)}")
    names = tuple(v.strip().lower() for v in value)
    if len(set(names)) != len(names):
        raise RequestError(f"{where}: a vendor is listed twice")
    return names


def _min_versions(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if isinstance(value, str):
        pairs = [("*", value)]
    elif isinstance(value, Mapping):
        pairs = [(str(k).lower(), v) for k, v in value.items()]
    else:
        raise RequestError(f"{where}: expected a version string or {{vendor: version}}")
    for vendor, text in pairs:
        if isinstance(text, str) and len(text) > MAX_VERSION_CHARS:
            raise RequestError(f"{where}: {len(text)} characters, over {MAX_VERSION_CHARS} for a version")
        if not isinstance(text, str) or version_key(text) is None:
            raise RequestError(f"{where}: {text!r:.40} is not a version (like 550.54 or 24.1.rc2)")
    return tuple(sorted(pairs))


def _annotation(text: Any, where: str) -> dict[str, Any]:
    if not isinstance(text, str):
        raise RequestError(f"{where}: annotation values are strings, got {type(text).__name__}")
    if len(text) > MAX_ANNOTATION_CHARS:
        raise RequestError(f"{where}: {len(text)} characters, over the {MAX_ANNOTATION_CHARS} Kubernetes "
                           "allows for all annotations of a pod")
    try:
        doc = jsonsafe.loads(text)
    except jsonsafe.JSONRefused as e:
        raise RequestError(f"{where}: not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise RequestError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    unknown = sorted(set(doc) - set(_ANNOTATION_KEYS))
    if unknown:
        listed = ", ".join(clip_name(k, "''")[:40] for k in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        raise RequestError(f"{where}: unknown key(s) {listed}; known: {', '.join(_ANNOTATION_KEYS)}")
    out: dict[str, Any] = {}
    w = lambda k: f"{where}.{k}"  # noqa: E731 - local shorthand for error paths
    if "count" in doc:
        c = doc["count"]
        if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= MAX_COUNT:
            raise RequestError(f"{w('count')}: expected a whole number 1..{MAX_COUNT}, got {c!r:.40}")
        out["count"] = c
    if "vendors" in doc:
        out["vendors"] = _vendors(doc["vendors"], w("vendors"))
    if "compute_units" in doc:
        cu = doc["compute_units"]
        if isinstance(cu, bool) or not isinstance(cu, (int, float)) or not (0 < cu < 1000):
            raise RequestError(f"{w('compute_units')}: expected a positive number, got {cu!r:.40}")
        out["compute_units"] = float(cu)
    if "memory_per_device" in doc:
        out["memory_bytes"] = int(parse_quantity(doc["memory_per_device"], w("memory_per_device")))
    if "features" in doc:
        f = doc["features"]
        if not isinstance(f, list) or not all(isinstance(x, str) and x for x in f):
            raise RequestError(f"{w('features')}: expected a list of feature names, e.g. [\"rdma\"]")
        out["features"] = tuple(sorted(set(f)))
    if "topology" in doc:
        if doc["topology"] not in ACCEPTED_TOPOLOGIES:
            alias = ", ".join(f"{a} = {c}" for a, c in TOPOLOGY_ALIASES.items())
            raise RequestError(f"{w('topology')}: expected one of {', '.join(ACCEPTED_TOPOLOGIES)} ({alias}), "
                               f"got {doc['topology']!r:.40}")
        out["topology"] = doc["topology"]
    for key, field in (("min_driver_version", "min_driver"), ("min_runtime_version", "min_runtime")):
        if key in doc:
            out[field] = _min_versions(doc[key], w(key))
    if "policy" in doc:
        if doc["policy"] not in POLICIES:
            raise RequestError(f"{w('policy')}: expected one of {', '.join(POLICIES)}, got {doc['policy']!r:.40}")
        out["policy"] = doc["policy"]
    if "shared" in doc:
        if not isinstance(doc["shared"], bool):
            raise RequestError(f"{w('shared')}: expected true or false")
        out["shared"] = doc["shared"]
    return out


def request_from_pod(pod: Any, domain: str = DEFAULT_DOMAIN) -> Request:
    """The accelerator request of a Pod object (a dict as the API serves it, or from YAML)."""
    if not isinstance(pod, Mapping):
        raise RequestError(f"Pod: expected an object, got {type(pod).__name__}")
    meta = _mapping(pod.get("metadata"), "metadata")
    spec = _mapping(pod.get("spec"), "spec")
    name = pod_name(meta)
    annotations = _mapping(meta.get("annotations"), "metadata.annotations")
    key = Keys(domain).request
    ann = _annotation(annotations[key], f"metadata.annotations['{key}']") if key in annotations else {}
    acc = _resources(spec)

    fields: dict[str, Any] = {k: v for k, v in ann.items() if k not in ("count", "vendors")}
    if acc.group is not None:
        count = acc.devices or (1 if acc.slices else 0)
        if "count" in ann and acc.devices and ann["count"] != acc.devices:
            raise RequestError(f"metadata.annotations['{key}'].count is {ann['count']} but the pod asks "
                               f"for {acc.devices} {acc.group}")
        if "vendors" in ann and acc.vendor not in ann["vendors"]:
            raise RequestError(f"metadata.annotations['{key}'].vendors leaves out {acc.vendor}, "
                               f"the vendor of {acc.names[0]} that the pod asks for")
        shared = bool(acc.slices or acc.memory_bytes) or ann.get("shared", False)
        if acc.memory_bytes is not None:
            fields["memory_bytes"] = max(acc.memory_bytes, ann.get("memory_bytes", 0))
        if count == 0:  # only a memory resource (HAMi gpumem without gpu): one shared device
            count = 1
        fields["features"] = tuple(sorted(set(ann.get("features", ())) | set(acc.features)))
        return Request(count=count, vendors=(acc.vendor,), group=acc.group, pod=name,
                       **{**fields, "shared": shared})
    if not ann:
        return Request(pod=name)
    return Request(count=ann.get("count", 1), vendors=ann.get("vendors", ()), pod=name, **fields)
