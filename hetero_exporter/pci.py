"""Accelerators on the PCI bus, read from sysfs (``/sys/bus/pci/devices/*``).

This is what the hardware says is there, independent of any vendor tool: the agent
compares it with what each collector sees (``accelerator_devices_expected`` vs
``_present``). The sysfs root is injectable so tests and simulation use a fake tree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional

from hetero_exporter import vendors as _vendors

# PCI base classes that accelerators use: 0x03 display (VGA 0x0300, 3D 0x0302, other 0x0380)
# and 0x12 processing accelerators. Excludes the vendors' NICs, bridges (NVSwitch is 0x0680)
# and audio functions, which share the vendor id.
_ACCEL_BASE_CLASSES = (0x03, 0x12)


@dataclass(frozen=True)
class PciDevice:
    address: str  # 0000:3b:00.0, lower case
    vendor_id: int
    device_id: int
    class_code: int  # 24-bit class, e.g. 0x030200
    numa_node: Optional[int]
    driver: Optional[str]


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _hex(s: Optional[str]) -> Optional[int]:
    try:
        return int(s, 16) if s else None
    except ValueError:
        return None


def readable(sysfs_root: str = "/sys") -> bool:
    """Whether the PCI bus can be listed at all (an empty ``scan`` then means no accelerator,
    not "cannot tell")."""
    try:
        os.listdir(os.path.join(sysfs_root, "bus", "pci", "devices"))
    except OSError:
        return False
    return True


def scan(sysfs_root: str = "/sys") -> list[PciDevice]:
    """All accelerator-class PCI functions; an unreadable sysfs gives an empty list."""
    base = os.path.join(sysfs_root, "bus", "pci", "devices")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    out = []
    for name in names:
        d = os.path.join(base, name)
        cls = _hex(_read(os.path.join(d, "class")))
        vendor = _hex(_read(os.path.join(d, "vendor")))
        if cls is None or vendor is None or (cls >> 16) not in _ACCEL_BASE_CLASSES:
            continue
        numa = _read(os.path.join(d, "numa_node"))
        drv = os.path.join(d, "driver")
        driver = os.path.basename(os.path.realpath(drv)) if os.path.exists(drv) else None
        out.append(PciDevice(
            address=name.lower(), vendor_id=vendor,
            device_id=_hex(_read(os.path.join(d, "device"))) or 0, class_code=cls,
            numa_node=int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None,
            driver=driver))
    return out


def _vendor_of(d: PciDevice, vendors: Mapping[int, str]) -> Optional[str]:
    """The vendor name of an accelerator function; None for an unknown vendor id and for the
    functions a spec says are no accelerator (``pci_ignored_device_ids``: BMC graphics)."""
    if (d.vendor_id, d.device_id) in _vendors.pci_ignored():
        return None
    return vendors.get(d.vendor_id)


def expected_by_vendor(devices: list[PciDevice], vendors: Mapping[int, str]) -> dict[str, int]:
    """Count of accelerator functions per vendor name (unknown vendor ids are ignored)."""
    counts: dict[str, int] = {}
    for d in devices:
        v = _vendor_of(d, vendors)
        if v:
            counts[v] = counts.get(v, 0) + 1
    return counts


# Drivers that hold a device for a virtual machine or keep it away from the host on purpose:
# such a device is invisible to the vendor tool by design, not missing.
PASSTHROUGH_DRIVERS = frozenset({"vfio-pci", "pci-stub", "pciback", "xen-pciback"})


def host_devices(devices: list[PciDevice], vendors: Mapping[int, str]) -> dict[str, list[PciDevice]]:
    """Accelerator functions a vendor tool on this host should see, per vendor name: known
    vendor ids, not bound to a passthrough driver."""
    out: dict[str, list[PciDevice]] = {}
    for d in devices:
        v = _vendor_of(d, vendors)
        if v and d.driver not in PASSTHROUGH_DRIVERS:
            out.setdefault(v, []).append(d)
    return out
