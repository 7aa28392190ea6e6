"""Synthetic node snapshots of common accelerator servers, for the ``score`` examples
(fixtures/scoring/), tests and the benchmark.

The shapes are data (``shapes.yaml`` beside this module: vendor, kind, model, driver, fabric
link type and layout, with the server each one stands for); the uuids take the vendor spec's
``uuid_prefix`` and the profiles come from the profile table, so this module names no vendor.
"""

from __future__ import annotations

import functools
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

import yaml

from hetero_exporter import profiles, vendors
from hetero_exporter.model import (CollectorStatus, DeviceIdentity, DeviceSample, Fault, Health, Link,
                                   NodeSnapshot, Quality, Reading)

_DATA = Path(__file__).with_name("shapes.yaml")
_Q = Quality(source="synthetic")
LAYOUTS = ("full-mesh", "cube-mesh", "bridged-pairs")


@functools.lru_cache(maxsize=1)
def _doc() -> dict[str, Any]:
    with open(_DATA, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    for name, s in doc["shapes"].items():
        if s.get("fabric") and s.get("layout") not in LAYOUTS:
            raise ValueError(f"shapes.yaml: shape {name}: layout {s.get('layout')!r} is not one of {LAYOUTS}")
    return doc


def shapes() -> dict[str, dict[str, Any]]:
    """Every shape by name (see shapes.yaml)."""
    return dict(_doc()["shapes"])


SHAPES = tuple(shapes())


def _fabric_pairs(shape: Mapping[str, Any], n: int) -> Iterable[tuple[int, int]]:
    if not shape.get("fabric"):
        return
    layout = shape["layout"]
    if layout == "bridged-pairs":
        yield from ((a, a + 1) for a in range(0, n - 1, 2))
        return
    for a in range(n):
        for b in range(a + 1, n):
            if layout == "full-mesh" or a // 4 == b // 4 or b == a + 4:
                yield a, b


def device_uuid(node: str, vendor: str, index: int) -> str:
    u = uuid.uuid5(uuid.NAMESPACE_URL, f"hetero-exporter:{node}:{vendor}:{index}")
    spec = vendors.spec(vendor)
    return f"{spec.uuid_prefix if spec is not None else ''}{u}"


def node(name: str, shape: str, *, time: float, loads: Optional[Mapping[int, float]] = None,
         health: Optional[Mapping[int, str]] = None, driver: Optional[str] = None,
         runtime: Optional[str] = None, count: int = 8) -> NodeSnapshot:
    """A node of ``shape``. ``loads``: index -> 0..1 (utilization and used memory share);
    ``health``: index -> state (failed devices carry the shapes' ``failed_fault``)."""
    s = _doc()["shapes"][shape]
    ff = _doc()["failed_fault"]
    vendor, kind, model, fabric = s["vendor"], s["kind"], s["model"], s.get("fabric") or ""
    prof = profiles.profile_for(vendor, model)
    loads, health = loads or {}, health or {}
    uuids = [device_uuid(name, vendor, i) for i in range(count)]
    links: dict[int, list[Link]] = {i: [] for i in range(count)}
    for a, b in _fabric_pairs(s, count):
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
        faults = (Fault(str(ff["code"]), ff["class"], ff["action"], ff["message"], time - 60, time, 1,
                        "critical"),) if state == "failed" else ()
        readings = {} if state == "failed" else {
            "utilization_ratio": Reading(load, _Q),
            "memory_total_bytes": Reading(total, _Q),
            "memory_used_bytes": Reading(round(total * load), _Q)}
        ident = DeviceIdentity(vendor=vendor, kind=kind, index=i, uuid=uuids[i], model=model,
                               pci_address=f"0000:{0x18 + 0x10 * i:02x}:00.0", numa_node=i // 4,
                               driver_version=driver or str(s["driver"]), runtime_version=runtime)
        devices.append(DeviceSample(identity=ident, timestamp=time, readings=readings,
                                    health=Health(state, faults), faults=faults,
                                    links=tuple(links[i]), profile=prof))
    return NodeSnapshot(node=name, time=time, devices=tuple(devices),
                        collectors=(CollectorStatus(name=f"synthetic-{vendor}", ok=True, vendor=vendor,
                                                    devices=count),),
                        expected={vendor: count})
