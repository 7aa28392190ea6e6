"""Which DRA ``DeviceTaintRule`` objects (resource.k8s.io/v1) this node's failed devices need.

A node taint is too coarse for one bad GPU of eight: a DeviceTaintRule taints one device of a
ResourceSlice, so the scheduler keeps new claims off it (``NoSchedule``) or, opt-in, also evicts
the pods using it (``NoExecute``); a degraded device gets, opt-in, an informational ``None`` taint.

``plan_device_taints(...) -> DeviceTaintPlan``: the rules to create, the merge patches of rules
whose taint or message changed, and the rules to delete (the device recovered), each with the
preconditions that keep a write from clobbering someone else's. Pure: no I/O, no clock (``now``
is passed); health/act/remedy.py writes it through k8s/.

Matching needs no vendor knowledge: a device of a ResourceSlice of this node is the model's device
when one of its string attributes equals the device's uuid or PCI address. NVIDIA's DRA driver
publishes ``uuid`` and ``pcieBusID`` (NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin/deviceinfo.go;
MIG devices add ``parentUUID``, so a failed GPU taints its MIG devices too); AMD's publishes the
standard ``resource.kubernetes.io/pciBusID`` (ROCm/k8s-gpu-dra-driver, cmd/gpu-kubeletplugin/
deviceinfo.go and docs/driver-attributes.md; partitions carry their parent's address, so a failed
GPU taints its partitions). A child device of the model (a MIG instance) is matched by uuid only:
its PCI address is its parent's.

Rules are named from the node and a hash of driver/pool/device, so a restarted agent finds the
rule it made; it touches only rules labelled ``app.kubernetes.io/managed-by: hetero-exporter`` for
its own node. A second plan over the result of the first is empty.
"""

from __future__ import annotations

import hashlib
import re
import string
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from hetero_exporter.health.detect.texts import device_name, fault_text, label_value
from hetero_exporter.health.detect.policy import Policy
from hetero_exporter.health.detect.rules import Verdict
from hetero_exporter.model import DeviceSample
from hetero_exporter.model.keys import DEFAULT_DOMAIN, Keys

API_VERSION = "resource.k8s.io/v1"
KIND = "DeviceTaintRule"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "hetero-exporter"
NAME_PREFIX = "hetero-exporter-"
MAX_DEVICES = 256  # rules this node may want (model devices considered, too)
MAX_SLICES = 1024
MAX_SLICE_DEVICES = 128  # the API server's limit per ResourceSlice
MAX_ATTRIBUTES = 32  # the API server's limit of attributes and capacities per device
MAX_RULES_READ = 4096
MAX_MESSAGE = 1024
_DNS_LABEL_CHARS = re.compile(r"[^a-z0-9-]+")
_HEX = frozenset(string.hexdigits)
# effect severity, to pick one rule when several model devices match one DRA device
_RANK = {"NoExecute": 3, "NoSchedule": 2, "None": 1}


@dataclass(frozen=True)
class DeviceTaintSettings:
    """``domain``: the key and label prefix; ``no_execute``: failed devices get NoExecute
    (evicts pods without a toleration) instead of NoSchedule; ``degraded``: degraded devices
    get an informational ``None`` taint."""

    domain: str = DEFAULT_DOMAIN
    no_execute: bool = False
    degraded: bool = False
    # uuid -> the effect for that device failed, from its class (health.classes; classes.py)
    effects: Mapping[str, str] = field(default_factory=dict)

    @property
    def taint_key(self) -> str:
        return Keys(self.domain).taint


@dataclass(frozen=True)
class RuleUpdate:
    """A JSON merge patch of one of our rules; ``metadata.resourceVersion`` in the patch is the
    precondition (a conflict means: read again and plan again)."""

    name: str
    resource_version: Optional[str]
    patch: dict


@dataclass(frozen=True)
class RuleDelete:
    """Delete with preconditions uid and resourceVersion (DeleteOptions.preconditions)."""

    name: str
    uid: Optional[str]
    resource_version: Optional[str]


@dataclass
class DeviceTaintPlan:
    create: list[dict] = field(default_factory=list)
    update: list[RuleUpdate] = field(default_factory=list)
    delete: list[RuleDelete] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)  # failed uuids that no slice of this node lists
    explain: list[str] = field(default_factory=list)
    actions: list[tuple[str, str]] = field(default_factory=list)  # (action, what) for metrics

    @property
    def writes(self) -> bool:
        return bool(self.create or self.update or self.delete)


@dataclass(frozen=True)
class _Wanted:
    name: str
    driver: str
    pool: str
    device: str
    uuid: str
    effect: str
    value: str
    message: str


def pci_key(text: Any) -> Optional[str]:
    """``0000:3b:00.0`` for ``0000:3B:00.0``, ``3b:00.0`` or nvidia-smi's ``00000000:3B:00.0``;
    None for anything else. The low 16 bits of the domain are kept (Linux domains fit them)."""
    if not isinstance(text, str) or len(text) > 32:
        return None
    parts = text.strip().lower().split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    if len(parts) != 3:
        return None
    slot, dot, function = parts[2].partition(".")
    fields = (parts[0], parts[1], slot, function)
    if not dot or not all(f and set(f) <= _HEX for f in fields) or len(parts[0]) > 8:
        return None
    domain, bus, dev, fn = (int(f, 16) for f in fields)
    if bus > 0xFF or dev > 0x1F or fn > 7:
        return None
    return f"{domain & 0xFFFF:04x}:{bus:02x}:{dev:02x}.{fn}"


def _name_prefix(node: str) -> str:
    labels = (_DNS_LABEL_CHARS.sub("-", label).strip("-")[:63] for label in node.lower().split("."))
    part = ".".join(label for label in labels if label)[:253 - len(NAME_PREFIX) - 11].strip(".-") or "node"
    return f"{NAME_PREFIX}{part}-"


def rule_name(node: str, driver: str, pool: str, device: str) -> str:
    """``hetero-exporter-<node>-<10 hex>``: a DNS subdomain (<= 253), the same after a restart."""
    return _name_prefix(node) + hashlib.sha1(f"{driver}/{pool}/{device}".encode()).hexdigest()[:10]


def json_at(obj: Any, *path: str) -> Any:
    """The value at ``path`` in a decoded JSON object, None where a step is missing or not an object."""
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _identity_keys(devices: Mapping[str, DeviceSample]) -> dict[str, str]:
    """uuid (lower case) and PCI address -> model uuid; children by uuid only."""
    keys: dict[str, str] = {}
    for uuid, d in list(devices.items())[:MAX_DEVICES]:
        keys.setdefault(uuid.lower(), uuid)
        pci = pci_key(d.identity.pci_address) if d.identity.parent is None else None
        if pci:
            keys.setdefault(pci, uuid)
    return keys


def _slice_devices(node: str, slices: Sequence[dict], explain: list[str]):
    """(driver, pool, device name, matched-against values) of the slices of this node.

    A rule selects by driver, pool and device cluster-wide, so a slice on this node that names
    another pool (a buggy or hostile DRA driver) would make this agent taint another node's
    device: only the pool this node owns counts, the one named after the node, as the DRA
    kubelet plugins publish their node-local pool (k8s.io/dynamic-resource-allocation
    resourceslice: the pool of a node's devices carries the node's name), which is also what the
    admission policy (deploy/base/node-restriction.yaml) lets a node's token select."""
    other = foreign = 0
    for s in list(slices)[:MAX_SLICES]:
        spec = json_at(s, "spec")
        if not isinstance(spec, Mapping):
            continue
        if spec.get("nodeName") != node:
            other += 1
            continue
        driver, pool = _str(spec.get("driver")), _str(json_at(spec, "pool", "name"))
        devs = spec.get("devices")
        if not driver or not pool or not isinstance(devs, list):
            continue
        if pool != node:
            foreign += 1
            continue
        for dev in devs[:MAX_SLICE_DEVICES]:
            name = _str(json_at(dev, "name"))
            attrs = json_at(dev, "attributes")
            if not name or not isinstance(attrs, Mapping):
                continue
            values = [a.get("string") for _, a in sorted(attrs.items(), key=lambda kv: str(kv[0]))[:MAX_ATTRIBUTES]
                      if isinstance(a, Mapping) and isinstance(a.get("string"), str) and len(a["string"]) <= 256]
            yield driver, pool, name, values
    if other:
        explain.append(f"{other} ResourceSlice(s) of other nodes skipped")
    if foreign:
        explain.append(f"{foreign} ResourceSlice(s) of this node naming a pool that is not this node's skipped "
                       "(a rule selects a pool cluster-wide: it could taint another node's devices)")


def _want(verdict: Optional[Verdict], cfg: DeviceTaintSettings) -> Optional[str]:
    """The effect a device's verdict asks for (its class's, when failed), or None."""
    state = verdict.state if verdict is not None else "ok"
    if state == "failed":
        return cfg.effects.get(verdict.uuid) if verdict is not None and verdict.uuid in cfg.effects else (
            "NoExecute" if cfg.no_execute else "NoSchedule")
    if state == "recovering":  # its recovery gate has not passed: no new work, nothing evicted
        return "NoSchedule"
    if state == "degraded" and cfg.degraded:
        return "None"
    return None


def _message(d: DeviceSample, v: Verdict, policy: Policy) -> str:
    faults = "; ".join(fault_text(d.identity.vendor, f, policy, d.identity.uuid) for f in v.reasons[:3])
    return f"{device_name(d)} {v.state}: {faults or 'no fault reported'}"[:MAX_MESSAGE]


def dra_pools(node: str, slices: Sequence[dict], devices: Mapping[str, DeviceSample]) -> dict[str, set[str]]:
    """uuid -> ``<driver>/<pool>`` of the DRA devices of this node's pool that list it (a class's
    ``match.pool``); a child is listed where its parent is."""
    keys = _identity_keys(devices)
    out: dict[str, set[str]] = {}
    for driver, pool, _, values in _slice_devices(node, slices, []):
        for u in {keys[k] for val in values for k in (val.lower(), pci_key(val)) if k in keys}:
            out.setdefault(u, set()).add(f"{driver}/{pool}")
    for uuid, d in devices.items():
        parent = d.identity.parent
        if parent in out and uuid not in out:
            out[uuid] = set(out[parent])
    return out


def _wanted_rules(node: str, slices: Sequence[dict], verdicts: Mapping[str, Verdict],
                  devices: Mapping[str, DeviceSample], policy: Policy, cfg: DeviceTaintSettings,
                  explain: list[str]) -> tuple[dict[str, _Wanted], dict[str, tuple[str, str, str]]]:
    """The rules this node should carry (by name), and the uuids some slice lists -> the DRA
    device (driver, pool, name) that lists them."""
    keys = _identity_keys(devices)
    wanted: dict[str, _Wanted] = {}
    listed: dict[str, tuple[str, str, str]] = {}
    for driver, pool, name, values in _slice_devices(node, slices, explain):
        matches = {keys[k] for v in values for k in (v.lower(), pci_key(v)) if k in keys}
        listed.update((u, (driver, pool, name)) for u in matches)
        best = None
        for uuid in sorted(matches):
            effect = _want(verdicts.get(uuid), cfg)
            if effect is not None and (best is None or _RANK[effect] > _RANK[best[1]]):
                best = (uuid, effect)
        if best is None:
            continue
        rname = rule_name(node, driver, pool, name)
        if rname in wanted:  # one DRA device in two slices (a pool generation roll-over): one rule
            continue
        if len(wanted) >= MAX_DEVICES:
            explain.append(f"more than {MAX_DEVICES} DRA devices to taint: the rest wait for the next cycle")
            break
        uuid, effect = best
        v, d = verdicts[uuid], devices[uuid]
        head = v.reasons[0].fault_class if v.reasons else v.state
        wanted[rname] = _Wanted(rname, driver, pool, name, uuid, effect, label_value(head),
                                _message(d, v, policy))
        explain.append(f"{device_name(d)} is {v.state}: DRA device {driver}/{pool}/{name} -> taint "
                       f"{cfg.taint_key}={label_value(head)}:{effect}")
    return wanted, listed


def _rule(w: _Wanted, node: str, cfg: DeviceTaintSettings) -> dict:
    keys = Keys(cfg.domain)
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": w.name,
                     "labels": {MANAGED_BY: MANAGER, keys.node: label_value(node)},
                     # the full node name (the label is cut to 63 characters): the admission
                     # policy (deploy/base/node-restriction.yaml) admits only rules of the caller's node
                     "annotations": {keys.node: node, keys.device: w.uuid, keys.message: w.message}},
        "spec": {"deviceSelector": {"driver": w.driver, "pool": w.pool, "device": w.device},
                 "taint": {"key": cfg.taint_key, "value": w.value, "effect": w.effect}},
    }


def _ours(rule: Mapping, node: str, cfg: DeviceTaintSettings) -> Optional[str]:
    """None when the rule is ours for this node, else why it is not."""
    labels = json_at(rule, "metadata", "labels")
    labels = labels if isinstance(labels, Mapping) else {}
    if labels.get(MANAGED_BY) != MANAGER:
        return "not labelled as made by this agent"
    name = _str(json_at(rule, "metadata", "name"))
    made_for = labels.get(Keys(cfg.domain).node)
    if made_for != label_value(node) or not name.startswith(_name_prefix(node)):
        return f"made for node {made_for!r}"
    return None


def _meta(rule: Mapping, key: str) -> Optional[str]:
    v = json_at(rule, "metadata", key)
    return v if isinstance(v, str) else None


def _retire(p: DeviceTaintPlan, rule: Mapping, name: str, verdicts: Mapping[str, Verdict],
            devices: Mapping[str, DeviceSample], wanted_uuids: set[str], listed: Mapping[str, tuple],
            cfg: DeviceTaintSettings) -> None:
    """One of our rules that no wanted rule names: deleted, unless its device still wants a taint
    and no slice lists it now (the DRA driver restarting, say): a failed device stays tainted."""
    device = _str(json_at(rule, "metadata", "annotations", Keys(cfg.domain).device))
    still = _want(verdicts.get(device), cfg) is not None and device in devices
    if still and device not in wanted_uuids:
        p.explain.append(f"DeviceTaintRule {name} kept: {device} is still unhealthy but no slice lists it now")
        return
    selector = json_at(rule, "spec", "deviceSelector")
    selected = tuple(_str(json_at(selector, k)) for k in ("driver", "pool", "device"))
    if device and device not in devices and selected not in listed.values():
        # not seen this cycle (a lost GPU an agent restarted without knowing): unknown is not
        # recovered. Deleted once the DRA device it selects lists a device that is seen.
        p.explain.append(f"DeviceTaintRule {name} kept: {device} is not seen this cycle")
        return
    p.delete.append(RuleDelete(name, _meta(rule, "uid"), _meta(rule, "resourceVersion")))
    p.actions.append(("device-taint", f"delete {name}"))
    p.explain.append(f"DeviceTaintRule {name} deleted: {device or 'its device'} "
                     f"{'is listed under another DRA device now' if still else 'no longer needs a taint'}")


def _refresh(p: DeviceTaintPlan, rule: Mapping, w: _Wanted, node: str, cfg: DeviceTaintSettings) -> None:
    """One merge patch when our rule's taint or annotations differ from the wanted ones."""
    want = _rule(w, node, cfg)
    taint = json_at(rule, "spec", "taint")
    have = {k: taint.get(k) for k in ("key", "value", "effect")} if isinstance(taint, Mapping) else {}
    annotations = json_at(rule, "metadata", "annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    want_ann = want["metadata"]["annotations"]
    if have == want["spec"]["taint"] and all(annotations.get(k) == v for k, v in want_ann.items()):
        return
    rv = _meta(rule, "resourceVersion")
    patch: dict = {"metadata": {"annotations": want_ann}, "spec": {"taint": want["spec"]["taint"]}}
    if rv is not None:
        patch["metadata"]["resourceVersion"] = rv
    p.update.append(RuleUpdate(w.name, rv, patch))
    p.actions.append(("device-taint", f"update {w.name} {w.value}:{w.effect}"))
    p.explain.append(f"DeviceTaintRule {w.name} updated: taint {w.value}:{w.effect}, {w.message}")


def plan_device_taints(node: str, slices: Sequence[dict], rules: Sequence[dict], verdicts: Mapping[str, Verdict],
                       devices: Mapping[str, DeviceSample], policy: Policy, cfg: DeviceTaintSettings,
                       now: float) -> DeviceTaintPlan:
    """The DeviceTaintRule writes that make this node's rules match its devices' verdicts.

    ``slices``: ResourceSlices (any node's are skipped); ``rules``: DeviceTaintRules as listed by
    the managed-by label; ``devices``: uuid -> the snapshot's device; ``now``: Unix seconds
    (kept for symmetry with the other sub-plans: the server sets the taint's timeAdded)."""
    del now  # nothing here depends on the time: timeAdded is the server's
    p = DeviceTaintPlan()
    wanted, listed = _wanted_rules(node, slices, verdicts, devices, policy, cfg, p.explain)
    p.unmatched = sorted(u for u, v in verdicts.items() if v.state == "failed" and u in devices
                         and u not in listed)[:MAX_DEVICES]
    for uuid in p.unmatched:
        p.explain.append(f"{device_name(devices[uuid])} is failed but no ResourceSlice of {node} lists it "
                         f"(no DRA driver publishes it): no device taint")
    existing: set[str] = set()
    for rule in list(rules)[:MAX_RULES_READ]:
        name = _str(json_at(rule, "metadata", "name"))
        if not name or name in existing:
            continue
        why_not = _ours(rule, node, cfg)
        if why_not is None:
            existing.add(name)
            if name in wanted:
                _refresh(p, rule, wanted[name], node, cfg)
            else:
                _retire(p, rule, name, verdicts, devices, {w.uuid for w in wanted.values()}, listed, cfg)
        elif name in wanted:
            existing.add(name)
            p.explain.append(f"DeviceTaintRule {name} exists but is {why_not}: leaving it, not creating ours")
    for name, w in wanted.items():
        if name not in existing:
            p.create.append(_rule(w, node, cfg))
            p.actions.append(("device-taint", f"create {name} {w.value}:{w.effect}"))
    return p
