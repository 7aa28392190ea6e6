"""Extended resource names of the vendors' device plugins, both ways.

A device belongs to the group of the extended resource its vendor's device plugin exposes it
as (``nvidia.com/gpu``, ``huawei.com/Ascend910`` ...): devices of different groups never
serve one allocation. A pod's extended resource tells which group it wants and how much:

- whole devices: ``nvidia.com/gpu``, ``amd.com/gpu``, ``huawei.com/Ascend910``,
  ``huawei.com/Ascend310P``, ``cambricon.com/mlu``, ``hygon.com/dcu`` (HAMi: ``hygon.com/dcunum``);
- slices of one device (MIG, vNPU, time-slicing, Cambricon sMLU/MIM/env-share):
  ``nvidia.com/mig-1g.10gb``, ``nvidia.com/gpu.shared``, ``huawei.com/Ascend910-4c``,
  ``cambricon.com/mlu.smlu.vcore`` ...: one device with room is needed;
- memory per device in MiB (HAMi): ``nvidia.com/gpumem``, ``hygon.com/dcumem``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

_WHOLE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "cambricon": "cambricon.com/mlu",
          "hygon": "hygon.com/dcu"}
_ASCEND_FAMILY = re.compile(r"Ascend\d+P?")


def device_resource(vendor: str, model: str) -> str:
    """The extended resource a device is allocated as (its group on a node)."""
    if vendor == "ascend":
        m = _ASCEND_FAMILY.match(model or "")
        return f"huawei.com/{m.group(0)}" if m else "huawei.com/Ascend"
    return _WHOLE.get(vendor, f"{vendor}/accelerator")


@dataclass(frozen=True)
class ResourceSpec:
    """What one extended resource of a pod asks for.

    ``unit``: ``devices`` (the quantity counts whole devices), ``slices`` (a share of one
    device), ``memory_mib`` (memory per device, MiB)."""

    vendor: str
    group: str
    unit: str
    features: tuple[str, ...] = ()


_RULES: tuple[tuple[re.Pattern, str, str, str, tuple[str, ...]], ...] = tuple(
    (re.compile(pattern), vendor, group, unit, features)
    for pattern, vendor, group, unit, features in (
        (r"nvidia\.com/gpu", "nvidia", "nvidia.com/gpu", "devices", ()),
        (r"nvidia\.com/gpu\.shared", "nvidia", "nvidia.com/gpu", "slices", ()),
        (r"nvidia\.com/mig-.+", "nvidia", "nvidia.com/gpu", "slices", ("mig",)),
        (r"nvidia\.com/gpumem", "nvidia", "nvidia.com/gpu", "memory_mib", ()),
        (r"amd\.com/gpu", "amd", "amd.com/gpu", "devices", ()),
        (r"huawei\.com/(Ascend\d+P?)", "ascend", r"huawei.com/\1", "devices", ()),
        (r"huawei\.com/(Ascend\d+P?)-.+", "ascend", r"huawei.com/\1", "slices", ()),
        (r"cambricon\.com/mlu", "cambricon", "cambricon.com/mlu", "devices", ()),
        (r"cambricon\.com/mlu\..+", "cambricon", "cambricon.com/mlu", "slices", ()),
        (r"hygon\.com/dcu(?:num)?", "hygon", "hygon.com/dcu", "devices", ()),
        (r"hygon\.com/dcumem", "hygon", "hygon.com/dcu", "memory_mib", ()),
    ))


def parse_resource(name: str) -> Optional[ResourceSpec]:
    """The spec of an accelerator extended resource; None for any other resource."""
    for pattern, vendor, group, unit, features in _RULES:
        m = pattern.fullmatch(name)
        if m:
            return ResourceSpec(vendor, m.expand(group), unit, features)
    return None
