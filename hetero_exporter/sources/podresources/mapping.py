"""Pure mapping of kubelet PodResources answers onto our devices.

The kubelet reports, per container, ``resource_name`` + ``device_ids`` exactly as the vendor's
device plugin advertised them. Each vendor names both differently; its spec says how
(hetero_exporter.vendors):

- ``spec.resource_domains``: the domains of its extended resources (``<domain>/<name>``) and
  of its DRA drivers (``<class>.<domain>``), which tell the resource's vendor;
- ``spec.id_prefixes``: uuid prefixes a plugin may drop or add;
- ``spec.plugin_device_id``: the id its plugin gives a device (a uuid, a PCI address, the
  index, or a name ending in the index); DRA drivers name devices ``<class>-<index>``.

So a device id is tried, within the resource's vendor only, as: uuid (with or without one of
the specs' prefixes, and without a ``::N``/``--N`` replica suffix), PCI address (any domain
width, or bus:device.function alone), serial, the index itself, and finally a trailing ``-N``
of a name-like id (``<family>-3``, ``gpu-0``) as the index. An id that matches nothing is
reported as unmatched, never guessed.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping, Optional, Sequence

from hetero_exporter import vendors as vendor_specs
from hetero_exporter.model import Allocation, DeviceIdentity
from hetero_exporter.model.pods import ContainerDevices  # noqa: F401 (part of this module's API)

_REPLICA = re.compile(r"(?:::|--)\d+$")
_PCI = re.compile(r"^(?:([0-9a-f]{4,8}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")
_TRAILING_INDEX = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9.]+)*?-(\d{1,3})$")


def vendor_of(resource: str, extra: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """Our vendor for a resource name (``<domain>/<name>``) or DRA driver (``<class>.<domain>``);
    None for resources that are not accelerators (cpu, memory, hugepages, other vendors).
    ``extra`` maps a full resource name or a domain to a vendor (config overrides)."""
    extra = extra or {}
    if resource in extra:
        return extra[resource]
    domain = resource.partition("/")[0].lower() if "/" in resource else resource.lower()
    if "." not in domain:
        return None  # cpu, memory, hugepages-2Mi ...
    for table in (extra, vendor_specs.resource_domains()):
        for key, vendor in table.items():
            if domain == key or domain.endswith("." + key):
                return vendor
    return None


def _pci_key(s: str) -> Optional[str]:
    m = _PCI.match(s)
    if m is None:
        return None
    domain = int(m.group(1) or "0", 16)
    return f"{domain:04x}:{m.group(2)}:{m.group(3)}.{m.group(4)}"


def _id_forms(s: str) -> list[str]:
    """The forms a device id or uuid may be compared in (lower case)."""
    s = s.strip().lower()
    forms = [s]
    for p in vendor_specs.id_prefixes():
        if s.startswith(p) and len(s) > len(p):
            forms.append(s[len(p):])
            break
    return forms


class DeviceIndex:
    """Our devices keyed by every form a device plugin may name them in, per vendor."""

    def __init__(self, devices: Iterable[DeviceIdentity]):
        self._keys: dict[tuple[str, str], DeviceIdentity] = {}
        self._index: dict[tuple[str, int], DeviceIdentity] = {}
        for d in devices:
            for form in _id_forms(d.uuid):
                self._keys.setdefault((d.vendor, form), d)
            if d.serial:
                self._keys.setdefault((d.vendor, d.serial.strip().lower()), d)
            if d.pci_address and d.parent is None:
                pk = _pci_key(d.pci_address.strip().lower())
                if pk:
                    self._keys.setdefault((d.vendor, "pci:" + pk), d)
            if d.parent is None:  # partitions share their parent's index space
                self._index.setdefault((d.vendor, d.index), d)

    def match(self, vendor: str, device_id: str) -> Optional[DeviceIdentity]:
        raw = device_id.strip().lower()
        if not raw:
            return None
        candidates = [raw]
        stripped = _REPLICA.sub("", raw)
        if stripped != raw:
            candidates.append(stripped)
        for c in candidates:
            for form in _id_forms(c):
                d = self._keys.get((vendor, form))
                if d is not None:
                    return d
            pk = _pci_key(c)
            if pk is not None:
                d = self._keys.get((vendor, "pci:" + pk))
                if d is not None:
                    return d
            if c.isascii() and c.isdigit() and len(c) <= 4:  # "²".isdigit() is True
                d = self._index.get((vendor, int(c)))
                if d is not None:
                    return d
            m = _TRAILING_INDEX.match(c)
            if m is not None:
                d = self._index.get((vendor, int(m.group(1))))
                if d is not None:
                    return d
        return None


def map_allocations(records: Sequence[ContainerDevices], devices: Sequence[DeviceIdentity],
                    extra_vendors: Optional[Mapping[str, str]] = None
                    ) -> tuple[dict[str, list[Allocation]], list[tuple[str, str]]]:
    """Allocations per device uuid, and the (resource, device id) pairs of accelerator
    resources that matched no device of this snapshot."""
    index = DeviceIndex(devices)
    out: dict[str, list[Allocation]] = {}
    seen: set[tuple[str, str, str, str, str]] = set()
    unmatched: list[tuple[str, str]] = []
    for r in records:
        vendor = vendor_of(r.resource, extra_vendors)
        if vendor is None:
            continue
        for dev_id in r.device_ids:
            d = index.match(vendor, dev_id)
            if d is None:
                unmatched.append((r.resource, dev_id))
                continue
            key = (d.uuid, r.namespace, r.pod, r.container, r.resource)
            if key in seen:
                continue  # replicas of one GPU given to one container
            seen.add(key)
            out.setdefault(d.uuid, []).append(Allocation(
                namespace=r.namespace, pod=r.pod, container=r.container, resource=r.resource,
                device_id=dev_id, method="podresources"))
    return out, unmatched
