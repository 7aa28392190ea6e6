"""Synthetic node snapshots of common accelerator servers, with the link topology their
vendors document, for the ``score`` examples (fixtures/scoring/), tests and the benchmark.

Shapes (8 devices unless named otherwise):

- ``hgx-h100``: 8 x H100-SXM5-80GB, every pair over NVSwitch; PCIe switches pair 0-1, 2-3,
  4-5, 6-7; NUMA node 0 for 0-3, 1 for 4-7 (HGX H100 baseboard).
- ``dgx1-v100``: 8 x V100-SXM2-32GB in the DGX-1 hybrid cube-mesh: NVLink within the quads
  0-3 and 4-7 and between i and i+4; PCIe switches and NUMA as above.
- ``pcie-a100``: 8 x A100-PCIE-80GB without bridges: PCIe switch pairs, two NUMA nodes.
- ``pcie-h100-nvl``: 8 x H100-NVL-94GB, NVLink bridges joining the cards of each PCIe switch pair
  (H100 NVL ships as bridged pairs).
- ``atlas800-910b``: 8 x Ascend910B3, HCCS full mesh (Atlas 800T A2).
- ``mi300x``: 8 x MI300X, XGMI full mesh (AMD Instinct MI300X platform).
"""

from __future__ import annotations

import uuid
from typing import Iterable, Mapping, Optional

from hetero_exporter import profiles
from hetero_exporter.model import (CollectorStatus, DeviceIdentity, DeviceSample, Fault, Health, Link,
                                   NodeSnapshot, Quality, Reading)

_SHAPES: Mapping[str, tuple[str, str, str, str, str]] = {
    # shape: (vendor, kind, model, driver, fabric link type or "")
    "hgx-h100": ("nvidia", "gpu", "H100-SXM5-80GB", "550.54.15", "nvswitch"),
    "dgx1-v100": ("nvidia", "gpu", "V100-SXM2-32GB", "535.104.05", "nvlink"),
    "pcie-a100": ("nvidia", "gpu", "A100-PCIE-80GB", "550.54.15", ""),
    "pcie-h100-nvl": ("nvidia", "gpu", "H100-NVL-94GB", "550.54.15", "nvlink"),
    "atlas800-910b": ("ascend", "npu", "Ascend910B3", "24.1.rc2", "hccs"),
    "mi300x": ("amd", "gpu", "MI300X", "6.7.0", "xgmi"),
}
SHAPES = tuple(_SHAPES)
_Q = Quality(source="synthetic")


def _fabric_pairs(shape: str, n: int) -> Iterable[tuple[int, int]]:
    if shape == "dgx1-v100":
        for a in range(n):
            for b in range(a + 1, n):
                if a // 4 == b // 4 or b == a + 4:
                    yield a, b
    elif shape == "pcie-h100-nvl":
        yield from ((a, a + 1) for a in range(0, n - 1, 2))
    elif _SHAPES[shape][4]:
        for a in range(n):
            for b in range(a + 1, n):
                yield a, b


def device_uuid(node: str, vendor: str, index: int) -> str:
    u = uuid.uuid5(uuid.NAMESPACE_URL, f"hetero-exporter:{node}:{vendor}:{index}")
    return f"GPU-{u}" if vendor == "nvidia" else str(u)


def node(name: str, shape: str, *, time: float, loads: Optional[Mapping[int, float]] = None,
         health: Optional[Mapping[int, str]] = None, driver: Optional[str] = None,
         runtime: Optional[str] = None, count: int = 8) -> NodeSnapshot:
    """A node of ``shape``. ``loads``: index -> 0..1 (utilization and used memory share);
    ``health``: index -> state (failed devices carry an Xid 79 style fault)."""
    vendor, kind, model, default_driver, fabric = _SHAPES[shape]
    prof = profiles.profile_for(vendor, model)
    loads, health = loads or {}, health or {}
    uuids = [device_uuid(name, vendor, i) for i in range(count)]
    links: dict[int, list[Link]] = {i: [] for i in range(count)}
    for a, b in _fabric_pairs(shape, count):
        links[a].append(Link(uuids[b], fabric))
        links[b].append(Link(uuids[a], fabric))
    for a in range(count):
        for b in range(count):
            if a != b:
                kind_ = ("pcie-switch" if a // 2 == b // 2 else "numa" if a // 4 == b // 4 else "cross-numa")
                links[a].append(Link(uuids[b], kind_))
    devices = []
    for i in range(count):
        total = float(prof.memory_bytes or 0)
        load = loads.get(i, 0.0)
        state = health.get(i, "ok")
        faults = (Fault("79", "device-lost", "reset-device", "fell off the bus", time - 60, time, 1,
                        "critical"),) if state == "failed" else ()
        readings = {} if state == "failed" else {
            "utilization_ratio": Reading(load, _Q),
            "memory_total_bytes": Reading(total, _Q),
            "memory_used_bytes": Reading(round(total * load), _Q)}
        ident = DeviceIdentity(vendor=vendor, kind=kind, index=i, uuid=uuids[i], model=model,
                               pci_address=f"0000:{0x18 + 0x10 * i:02x}:00.0", numa_node=i // 4,
                               driver_version=driver or default_driver, runtime_version=runtime)
        devices.append(DeviceSample(identity=ident, timestamp=time, readings=readings,
                                    health=Health(state, faults), faults=faults,
                                    links=tuple(links[i]), profile=prof))
    return NodeSnapshot(node=name, time=time, devices=tuple(devices),
                        collectors=(CollectorStatus(name=f"synthetic-{vendor}", ok=True, vendor=vendor,
                                                    devices=count),),
                        expected={vendor: count})
