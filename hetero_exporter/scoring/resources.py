"""Extended resource names of the vendors' device plugins, both ways (from the vendor specs).

A device belongs to the group of the extended resource its vendor's device plugin exposes it
as (``spec.device_resource(model)``): devices of different groups never serve one allocation.
A pod's extended resource tells which group it wants and how much, by the first
``ResourceName`` rule of a spec (``spec.resources``) that matches it whole:

- ``devices``: whole devices;
- ``slices``: a share of one device (partitions, time-slicing replicas, virtual devices): one
  device with room is needed;
- ``memory_mib``: memory per device in MiB (HAMi-style memory resources).

The vendor packages' ``__init__`` modules declare the rules, with the plugin docs they cite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from hetero_exporter import vendors


def device_resource(vendor: str, model: str) -> str:
    """The extended resource a device is allocated as (its group on a node)."""
    return vendors.device_resource(vendor, model) or f"{vendor}/accelerator"


@dataclass(frozen=True)
class ResourceSpec:
    """What one extended resource of a pod asks for.

    ``unit``: ``devices`` (the quantity counts whole devices), ``slices`` (a share of one
    device), ``memory_mib`` (memory per device, MiB)."""

    vendor: str
    group: str
    unit: str
    features: tuple[str, ...] = ()


def parse_resource(name: str) -> Optional[ResourceSpec]:
    """The spec of an accelerator extended resource; None for any other resource."""
    for spec in vendors.specs().values():
        found = spec.resource_group(name)
        if found is not None:
            rule, group = found
            return ResourceSpec(spec.name, group, rule.unit, tuple(rule.features))
    return None
