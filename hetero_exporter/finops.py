"""FinOps: a price per device-hour and the share of each device a container holds (issue 19).

Pure functions over the model, called at exposition time from the snapshot being served, like
every other family. Nothing here calls a vendor or the kubelet.

Prices (``accelerator_price_per_hour{vendor,uuid,basis}``): a device whose profile model has a
configured price gets it (``basis="configured"``); any other device with a profile (estimated
profiles included) gets the reference price times its profile's ``cost_weight`` relative to the
reference profile's (``basis="cost-weight"``). MIG / partition children (``identity.parent``
set) get no price of their own: the parent is priced once.

Shares (``accelerator_allocation_share_ratio{vendor,uuid,namespace,pod,container}``), per
top-level device:

* one container holds the device (PodResources allocation and/or its processes): 1;
* several containers on one device (time-slicing replicas, HAMi memory slices, several pods'
  processes): the model carries no allocated slice size (PodResources gives device ids only),
  so the split is each container's process memory over the memory attributed to containers;
  with no process memory known at all, an equal split;
* MIG / partition children: the child's share of its parent is child memory total / parent
  memory total, split among the child's containers as above and reported on the PARENT's uuid
  (so cost joins on the priced parent); containers holding the parent directly share what the
  children leave.

The shares of one device always sum to at most 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from hetero_exporter.model import fields as F
from hetero_exporter.model import DeviceSample, NodeSnapshot
from hetero_exporter.model.errors import InputError

DEFAULT_CURRENCY = "USD"
DEFAULT_REFERENCE = "A100-SXM4-80GB"
# An example list price per device-hour for the reference device (cloud on-demand order of
# magnitude); override it with your own rates under ``finops.prices``.
DEFAULT_PRICES: Mapping[str, float] = {DEFAULT_REFERENCE: 2.0}
FINOPS_KEYS = {"currency", "reference", "prices"}
MAX_CURRENCY = 16  # ISO 4217 codes are 3 letters; a label value, so bounded

Owner = tuple[str, str, str]  # (namespace, pod, container)


class FinOpsError(InputError):
    """The ``finops`` section cannot be used (the message names the field)."""


@dataclass(frozen=True)
class FinOps:
    currency: str = DEFAULT_CURRENCY
    reference: str = DEFAULT_REFERENCE
    prices: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    reference_cost_weight: float = 1.0  # the reference profile's cost_weight (1.0 for the A100)

    @property
    def reference_price(self) -> float:
        return self.prices[self.reference]

    def with_reference_cost_weight(self, weight: Optional[float]) -> "FinOps":
        if weight is None or not (weight > 0) or math.isinf(weight):
            return self
        return FinOps(self.currency, self.reference, self.prices, float(weight))


def _price(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise FinOpsError(f"{where} must be a number (price per device-hour), got {v!r}")
    try:
        p = float(v)
    except ValueError:
        raise FinOpsError(f"{where} must be a number (price per device-hour), got {v!r}") from None
    if math.isnan(p) or math.isinf(p):
        raise FinOpsError(f"{where} must be a finite number, got {v!r}")
    if p < 0:
        raise FinOpsError(f"{where} must not be negative, got {v!r}")
    return p


def parse(doc: Any) -> FinOps:
    """The ``finops:`` section -> FinOps; absent keys take the shipped defaults. A configured
    ``prices`` mapping replaces the default one (so the reference must be priced in it)."""
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        raise FinOpsError(f"finops must be a mapping, got {type(doc).__name__}")
    unknown = sorted(str(k) for k in set(doc) - FINOPS_KEYS)
    if unknown:
        raise FinOpsError(f"unknown keys finops.{unknown}; known: {sorted(FINOPS_KEYS)}")
    currency = doc.get("currency", DEFAULT_CURRENCY)
    if not isinstance(currency, str) or not currency.strip():
        raise FinOpsError(f"finops.currency must be a non-empty string, got {currency!r:.40}")
    if len(currency.strip()) > MAX_CURRENCY:
        raise FinOpsError(f"finops.currency: {len(currency)} characters long, at most {MAX_CURRENCY} (a code like USD)")
    reference = doc.get("reference", DEFAULT_REFERENCE)
    if not isinstance(reference, str) or not reference.strip():
        raise FinOpsError(f"finops.reference must be a profile model, got {reference!r}")
    raw = doc.get("prices", DEFAULT_PRICES)
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise FinOpsError(f"finops.prices must be a mapping of profile model -> price, got {raw!r}")
    prices = {str(k): _price(v, f"finops.prices.{k}") for k, v in raw.items()}
    if reference not in prices:
        raise FinOpsError(f"finops.reference {reference!r} has no price in finops.prices "
                          f"(priced: {sorted(prices)})")
    return FinOps(currency.strip(), reference, prices)


def price(device: DeviceSample, fin: FinOps) -> Optional[tuple[float, str]]:
    """(price per device-hour, basis) of a top-level device; None for a partition child or a
    device without a profile."""
    if device.identity.parent:
        return None
    prof = device.profile
    if prof is None:
        return None
    if not prof.estimated and prof.model in fin.prices:
        return fin.prices[prof.model], "configured"
    return fin.reference_price * prof.cost_weight / fin.reference_cost_weight, "cost-weight"


def _memory_total(d: DeviceSample) -> Optional[float]:
    v = d.value(F.MEMORY_TOTAL)
    if v is None and d.profile is not None and d.profile.memory_bytes:
        v = float(d.profile.memory_bytes)
    return v if v is not None and v > 0 else None


def device_shares(d: DeviceSample) -> dict[Owner, float]:
    """The containers on one device (ignoring its partitions) and the share each holds."""
    owners: list[Owner] = []
    for a in d.allocations:
        o = (a.namespace, a.pod, a.container)
        if o not in owners:
            owners.append(o)
    mem: dict[Owner, float] = {}
    for p in d.processes:
        if not p.pod:
            continue  # a host process is in no container: nobody is charged for it
        o = (p.namespace or "", p.pod, p.container or "")
        if o not in owners:
            owners.append(o)
        if p.memory_bytes is not None and p.memory_bytes > 0:
            mem[o] = mem.get(o, 0.0) + float(p.memory_bytes)
    if not owners:
        return {}
    if len(owners) == 1:
        return {owners[0]: 1.0}
    attributed = sum(mem.values())
    if attributed <= 0:
        return {o: 1.0 / len(owners) for o in owners}
    return {o: mem.get(o, 0.0) / attributed for o in owners}


def node_shares(snap: NodeSnapshot) -> dict[tuple[str, str], dict[Owner, float]]:
    """(vendor, uuid) of each charged device -> {owner: share}; partition children are folded
    into their parent (when the parent is in the snapshot)."""
    by_uuid = {d.identity.uuid: d for d in snap.devices}
    children: dict[str, list[DeviceSample]] = {}
    for d in snap.devices:
        parent = d.identity.parent
        if parent and parent in by_uuid:
            children.setdefault(parent, []).append(d)
    out: dict[tuple[str, str], dict[Owner, float]] = {}
    for d in snap.devices:
        ident = d.identity
        if ident.parent and ident.parent in by_uuid:
            continue  # charged on the parent
        kids = children.get(ident.uuid, [])
        if not kids:
            shares = device_shares(d)
        else:
            shares = {}
            total = _memory_total(d)
            sizes = [_memory_total(k) for k in kids]
            if total is not None and all(s is not None for s in sizes):
                fracs = [s / total for s in sizes]  # type: ignore[operator]
            else:
                fracs = [1.0 / len(kids)] * len(kids)
            used = sum(fracs)
            if used > 1.0:
                fracs = [f / used for f in fracs]
                used = 1.0
            for k, frac in zip(kids, fracs):
                for o, s in device_shares(k).items():
                    shares[o] = shares.get(o, 0.0) + frac * s
            rest = max(0.0, 1.0 - used)
            for o, s in device_shares(d).items():
                shares[o] = shares.get(o, 0.0) + rest * s
        if shares:
            out[(ident.vendor, ident.uuid)] = shares
    return out
