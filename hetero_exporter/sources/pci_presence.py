"""Missing devices: the PCI bus against what each vendor collector sees.

The sampler enricher ``PciPresence`` scans the bus every cycle (sysfs, cheap) and raises a
fault for an accelerator that is on the bus but that its vendor's collector does not report
(``pci-invisible``: the driver did not bind or did not initialize it), and for one that was on
the bus and is gone (``pci-gone``: fell off the bus, hot-removed). Both are class
``missing-device`` (node-level in the default policy). A device the collector still reports
gets the fault added to its own health; otherwise a placeholder device stands in for it, with
the identity last seen at that PCI address when there was one, failed and with no readings (so
``NodeSnapshot.present()``, hence ``accelerator_devices_present``, does not count it: the
missing-device alert compares it with the bus). Devices bound to a passthrough
driver (vfio-pci...) are meant to be invisible and are left out. When a vendor's collector
failed this cycle, its devices are not compared (cannot read is not missing).

``UdevWatch`` (pyudev, optional) asks the sampler for a cycle at once when a PCI accelerator is
added or removed, so a removal is noticed without waiting for the interval.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional

from hetero_exporter import pci, vendors
from hetero_exporter.sdk import pciaddr
from hetero_exporter.model import DeviceIdentity, DeviceSample, Fault, Health, NodeSnapshot

log = logging.getLogger(__name__)

# PCI class used for simulated devices: 3D controller for GPUs, processing accelerator otherwise
_SIM_CLASS = {"gpu": 0x030200}
_ACCELERATOR_CLASS = 0x120000


def kind(vendor: str) -> str:
    """identity.kind of a vendor's devices (its spec's ``kind``; ``gpu`` for an unknown vendor)."""
    s = vendors.spec(vendor)
    return s.kind if s is not None and s.kind else "gpu"


def _sim_class(vendor: str) -> int:
    return _SIM_CLASS.get(kind(vendor), _ACCELERATOR_CLASS)


@dataclass(frozen=True)
class Missing:
    vendor: str
    address: str
    code: str  # pci-invisible | pci-gone
    message: str
    identity: Optional[DeviceIdentity] = None  # last seen at this address, when known


def compare(on_bus: Mapping[str, list[pci.PciDevice]], snapshot: NodeSnapshot,
            seen_before: Mapping[str, str], known: Mapping[str, DeviceIdentity]) -> list[Missing]:
    """Pure: what is missing. ``on_bus``: host devices per vendor now; ``seen_before``: address
    -> vendor of every device seen on the bus earlier; ``known``: address -> identity the
    collectors reported there earlier."""
    ok_vendors = {c.vendor for c in snapshot.collectors if c.ok and c.vendor}
    reported: dict[str, list[DeviceSample]] = {}
    for d in snapshot.devices:
        if d.identity.parent is None and not _is_placeholder(d):
            reported.setdefault(d.identity.vendor, []).append(d)
    now_on_bus = {dev.address for devs in on_bus.values() for dev in devs}
    out: list[Missing] = []
    for vendor, devs in sorted(on_bus.items()):
        if vendor not in ok_vendors:
            continue
        seen = reported.get(vendor, [])
        addresses = {d.identity.pci_address.lower() for d in seen if d.identity.pci_address}
        if len(addresses) == len(seen):
            for dev in devs:
                if dev.address not in addresses:
                    why = "no driver bound" if dev.driver is None else f"driver {dev.driver} bound"
                    out.append(Missing(vendor, dev.address, "pci-invisible",
                                       f"{vendor} device at PCI {dev.address} is on the bus ({why}) but not "
                                       f"reported by its collector", known.get(dev.address)))
        elif len(devs) > len(seen):  # the collector gives no PCI addresses: count only
            out.append(Missing(vendor, f"{vendor}-count", "pci-invisible",
                               f"{len(devs)} {vendor} devices on the PCI bus, {len(seen)} reported by the "
                               f"collector (it gives no PCI addresses to tell which)"))
    for address, vendor in sorted(seen_before.items()):
        if address not in now_on_bus:
            out.append(Missing(vendor, address, "pci-gone",
                               f"{vendor} device at PCI {address} is gone from the PCI bus", known.get(address)))
    return out


def locate(on_bus: Mapping[str, list[pci.PciDevice]], snapshot: NodeSnapshot) -> dict[str, str]:
    """Pure: uuid -> PCI address for the top-level devices reported without one (a GPU lost
    before its collector ever read it: ``nvidia-unidentified-2``), from the bus. A vendor's
    devices without an address are paired with its bus functions no reported device claims, by
    index and address order (NVML and the other tools number devices in PCI bus order), and only
    when the counts agree: a guess between unequal sets would name the wrong board."""
    out: dict[str, str] = {}
    for vendor, devs in on_bus.items():
        seen = [d for d in snapshot.devices
                if d.identity.vendor == vendor and d.identity.parent is None and not _is_placeholder(d)]
        claimed = {pciaddr.normalize(d.identity.pci_address) for d in seen if d.identity.pci_address}
        bare = sorted((d for d in seen if not d.identity.pci_address), key=lambda d: d.identity.index)
        free = sorted(dev.address for dev in devs if pciaddr.normalize(dev.address) not in claimed)
        if bare and len(bare) == len(free):
            out.update({d.identity.uuid: address for d, address in zip(bare, free)})
    return out


def _addressed(snapshot: NodeSnapshot, found: Mapping[str, str]) -> NodeSnapshot:
    """The snapshot with ``found`` addresses put on those devices' identities."""
    if not found:
        return snapshot
    devices = tuple(dataclasses.replace(d, identity=dataclasses.replace(d.identity, pci_address=found[d.identity.uuid]))
                    if d.identity.uuid in found and d.identity.parent is None else d for d in snapshot.devices)
    return dataclasses.replace(snapshot, devices=devices)


def _is_placeholder(d: DeviceSample) -> bool:
    return d.identity.uuid.startswith("pci-")


def _fault(m: Missing, now: float) -> Fault:
    return Fault(code=m.code, fault_class="missing-device",
                 action="reboot-node" if m.code == "pci-gone" else "reset-device",
                 severity="critical", message=m.message, first_seen=now, last_seen=now, source="pci")


def apply(snapshot: NodeSnapshot, missing: Iterable[Missing]) -> NodeSnapshot:
    """The snapshot with each missing device failed: its own entry when the collector still
    reports it (same uuid), a placeholder otherwise."""
    devices = list(snapshot.devices)
    by_uuid = {d.identity.uuid: i for i, d in enumerate(devices)}
    for m in missing:
        f = _fault(m, snapshot.time)
        ident = m.identity
        if ident is not None and ident.uuid in by_uuid:
            i = by_uuid[ident.uuid]
            d = devices[i]
            devices[i] = dataclasses.replace(d, health=Health("failed", d.health.reasons + (f,)))
            continue
        if ident is None:
            ident = DeviceIdentity(vendor=m.vendor, kind=kind(m.vendor), index=-1,
                                   uuid=f"pci-{m.address}", pci_address=None if m.address.endswith("-count") else m.address)
        devices.append(DeviceSample(identity=ident, timestamp=snapshot.time, health=Health("failed", (f,)),
                                    faults=(f,)))
    return dataclasses.replace(snapshot, devices=tuple(devices))


class PciPresence:
    """Sampler enricher: compare the bus with the collectors, every cycle."""

    __name__ = "pci-presence"

    def __init__(self, scan: Callable[[], list[pci.PciDevice]], vendors: Mapping[int, str]):
        self._scan = scan
        self._vendors = dict(vendors)
        self._lock = threading.Lock()
        self._seen: dict[str, str] = {}  # address -> vendor, ever seen on the bus
        self._known: dict[str, DeviceIdentity] = {}  # address -> identity the collector gave
        self.last: list[Missing] = []

    def __call__(self, snapshot: NodeSnapshot) -> NodeSnapshot:
        try:
            on_bus = pci.host_devices(self._scan(), self._vendors)
        except Exception:  # noqa: BLE001 - presence is advisory: a failing scan changes nothing
            log.warning("PCI scan failed; presence not checked this cycle", exc_info=True)
            return snapshot
        snapshot = _addressed(snapshot, locate(on_bus, snapshot))  # in case PciLocate did not run
        with self._lock:
            for d in snapshot.devices:
                addr = d.identity.pci_address
                if addr and d.identity.parent is None and not _is_placeholder(d):
                    self._known[addr.lower()] = d.identity
            missing = compare(on_bus, snapshot, self._seen, self._known)
            for vendor, devs in on_bus.items():
                for dev in devs:
                    self._seen[dev.address] = vendor
            self.last = missing
        expected = {vendor: len(devs) for vendor, devs in on_bus.items()}
        out = apply(snapshot, missing)
        return dataclasses.replace(out, expected=expected or dict(snapshot.expected))

    def forget(self, address: str) -> None:
        """An operator removed the device for good: stop reporting it gone."""
        with self._lock:
            self._seen.pop(address, None)


class PciLocate:
    """Sampler enricher, first of all: a device reported without a PCI address gets the one the
    bus shows for it (``locate``), before attribution (PodResources ids by PCI address) and the
    health remedy (DeviceTaintRules matched on ``pcieBusID``) read it."""

    __name__ = "pci-locate"

    def __init__(self, scan: Callable[[], list[pci.PciDevice]], vendors: Mapping[int, str]):
        self._scan = scan
        self._vendors = dict(vendors)

    def __call__(self, snapshot: NodeSnapshot) -> NodeSnapshot:
        if not any(d.identity.parent is None and not d.identity.pci_address for d in snapshot.devices):
            return snapshot  # the usual cycle: no scan
        try:
            on_bus = pci.host_devices(self._scan(), self._vendors)
        except Exception:  # noqa: BLE001 - advisory, as PciPresence
            log.warning("PCI scan failed; devices without an address keep none", exc_info=True)
            return snapshot
        return _addressed(snapshot, locate(on_bus, snapshot))


def simulated_scan(scenario: Any, clock: Any, vendors: Mapping[int, str]) -> Callable[[], list[pci.PciDevice]]:
    """The PCI bus of a scenario: its devices, ``settings.pci_extra`` ({vendor: n}: devices on
    the bus that the vendor tool does not show) and faults of kind ``pci-remove`` (the device is
    off the bus from ``at`` until ``until``)."""
    ids = {v: k for k, v in vendors.items()}

    def scan() -> list[pci.PciDevice]:
        t = clock.t() if hasattr(clock, "t") else 0.0
        gone = {(f.vendor, f.index) for f in scenario.faults if f.kind == "pci-remove" and f.active(t)}
        out = []
        for d in scenario.devices:
            if (d.vendor, d.index) in gone or d.vendor not in ids:
                continue
            out.append(pci.PciDevice(address=d.pci_address, vendor_id=ids[d.vendor], device_id=0,
                                     class_code=_sim_class(d.vendor),
                                     numa_node=d.numa_node, driver=f"{d.vendor}-sim"))
        for n, (vendor, count) in enumerate(sorted((scenario.settings.get("pci_extra") or {}).items())):
            for i in range(int(count)):
                if vendor in ids:
                    out.append(pci.PciDevice(address=f"0000:{0xe0 + 16 * n + i:02x}:00.0", vendor_id=ids[vendor],
                                             device_id=0, class_code=_sim_class(vendor),
                                             numa_node=None, driver=None))
        return out

    return scan


class UdevWatch:
    """Kernel uevents for PCI accelerators (pyudev): ``on_change()`` on add/remove/bind/unbind."""

    def __init__(self, vendors: Mapping[int, str], on_change: Callable[[], None]):
        self._vendors = {f"{k:04X}" for k in vendors}
        self._on_change = on_change
        self._observer: Any = None
        self.reason = ""
        self.events = 0

    def start(self) -> bool:
        """True when watching; False (with ``reason``) without pyudev or netlink access."""
        try:
            import pyudev
        except ImportError:
            self.reason = "pyudev not installed (pip install 'hetero-exporter[udev]')"
            return False
        try:
            monitor = pyudev.Monitor.from_netlink(pyudev.Context(), source="kernel")
            monitor.filter_by("pci")
            self._observer = pyudev.MonitorObserver(monitor, callback=self.handle, name="udev-pci")
            self._observer.daemon = True
            self._observer.start()
        except Exception as e:  # noqa: BLE001 - no netlink socket in this container, no udev...
            self.reason = f"cannot watch udev: {type(e).__name__}: {e}"
            return False
        return True

    def handle(self, device: Any) -> None:
        """One uevent; ``device`` has ``action`` and ``properties`` (PCI_ID=10DE:2330, PCI_CLASS)."""
        action = getattr(device, "action", None)
        if action not in ("add", "remove", "bind", "unbind"):
            return
        props = getattr(device, "properties", None) or {}
        pci_id = str(props.get("PCI_ID", "")).upper()
        pci_class = str(props.get("PCI_CLASS", ""))
        vendor = pci_id.split(":")[0] if pci_id else ""
        if vendor not in self._vendors:
            return
        try:
            base = int(pci_class, 16) >> 16 if pci_class else None
        except ValueError:
            base = None
        if base is not None and base not in (0x03, 0x12):
            return  # the vendor's audio function, bridge or NIC
        self.events += 1
        log.info("PCI accelerator uevent", extra={"action": action, "pci_id": pci_id,
                                                  "slot": props.get("PCI_SLOT_NAME")})
        self._on_change()

    def stop(self) -> None:
        if self._observer is not None:
            try:
                self._observer.stop()
            except Exception:  # noqa: BLE001 - shutting down anyway
                pass
