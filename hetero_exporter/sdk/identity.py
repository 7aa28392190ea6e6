"""Identity memory: a device keeps its uuid while it is lost, across agent restarts too.

A collector pins each device's identity the first time it reads it (uuid, serial, model...)
and remembers it by vendor-local index and by PCI address. When the device later stops
answering (fell off the bus, the tool lists it no more, the binding raises GPU_IS_LOST), the
collector asks ``recall`` and reports it failed under the uuid its pods and dashboards know,
not under a placeholder name; ``missing`` lists the pinned devices absent from this cycle.

With a file (``identity_file(state_dir, collector)``, on the DaemonSet's hostPath) the pinned
top-level identities are saved whenever one is new or replaced, and loaded at start: an agent
restarted while a GPU is off the bus still knows that GPU's uuid, so the sticky faults, taint
rules and pod conditions keyed by it go on matching. Only the agent on the real node writes the
file (``IdentityStore.writable``); ``inspect``, ``parse``, ``health --dry-run`` and simulations
read at most, so a diagnostic run never leaves devices for the next run to report.

Memory alone never makes a device failed. The file records the boot and machine it was written
on. A device remembered from another boot (or another machine) that the PCI bus no longer shows
was removed, not lost: it is forgotten at load, said once in the log and handed to
``IdentityStore.removals`` (a counter and a Node event). Lost means the bus still shows it, or
it vanished during this boot. When the bus cannot be read, a device from another boot is kept
but not reported missing: unknown is neither failed nor ok. A board swapped at a PCI address
replaces the old identity when it is read (``remember``), so a stale entry is never reported for
a working board. Restored identities answer ``recall`` and ``missing``, but a collector that
caches identities through ``recall(restored=False)`` reads every answering device again
(indexes may have renumbered, the driver may have changed).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import Counter
import dataclasses
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence, TypeVar

from hetero_exporter import model, smallfile
from hetero_exporter.model import DeviceIdentity
from hetero_exporter.sdk import pciaddr

log = logging.getLogger(__name__)

FILE_FORMAT = "hetero-exporter/identities"
FILE_VERSION = 1
MAX_DEVICES = 1024  # a node has at most a few dozen; more is not our file
MAX_BYTES = 1 << 20  # 1 MiB: ~1 KiB per identity at most
TMP_PREFIX = ".identities-"  # the file's temporary files (smallfile.write_atomically)


def identity_file(state_dir: Optional[str], collector: str) -> Optional[str]:
    """The collector's identity file under ``state_dir`` (None without a state dir)."""
    return os.path.join(state_dir, f"identities-{collector}.json") if state_dir else None


class RemovalLog:
    """Devices forgotten as removed (thread-safe): ``drain()`` the new ones for an event,
    ``totals()`` per vendor for a counter."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._new: list[DeviceIdentity] = []
        self._totals: Counter[str] = Counter()

    def record(self, identity: DeviceIdentity) -> None:
        with self._lock:
            if len(self._new) < MAX_DEVICES:  # nobody draining: bounded all the same
                self._new.append(identity)
            self._totals[identity.vendor] += 1

    def drain(self) -> tuple[DeviceIdentity, ...]:
        with self._lock:
            out, self._new = tuple(self._new), []
        return out

    def totals(self) -> dict[str, int]:
        with self._lock:
            return dict(self._totals)


@dataclass(frozen=True)
class IdentityStore:
    """Where collectors keep their pinned identities and what tells a lost device from a
    removed one. ``writable``: only the agent (``run``) on the real node saves; everything else
    reads at most. ``bus``: normalized PCI addresses of the accelerators on the bus at start
    (None when the bus cannot be read). ``boot_id`` / ``machine_id``: this boot and machine, to
    tell whether remembered identities are from them."""

    writable: bool = True
    boot_id: Optional[str] = None
    machine_id: Optional[str] = None
    bus: Optional[frozenset[str]] = None
    removals: Optional[RemovalLog] = None

    def memory(self, path: Optional[str]) -> "IdentityMemory":
        """An IdentityMemory over the file at ``path`` (memory only without one)."""
        return IdentityMemory(path, boot_id=self.boot_id,
                              machine_id=self.machine_id, writable=self.writable, bus=self.bus,
                              removals=self.removals)


class IdentityMemory:
    """Identities seen since start (or restored from ``path``), by uuid, by index and by PCI
    address (thread-safe). ``boot_id`` is written into the file, to tell at load whether the
    identities come from this boot."""

    def __init__(self, path: Optional[str] = None, *, boot_id: Optional[str] = None,
                 machine_id: Optional[str] = None, writable: bool = True,
                 bus: Optional[frozenset[str]] = None, removals: Optional[RemovalLog] = None) -> None:
        self._lock = threading.Lock()
        self._by_uuid: dict[str, DeviceIdentity] = {}
        self._by_index: dict[int, str] = {}
        self._by_pci: dict[str, str] = {}
        self._restored: set[str] = set()  # uuids loaded from the file and not read since
        self._unverified: set[str] = set()  # from another boot, the bus unreadable: never reported missing
        self.path = path
        self._writable = writable
        self._boot_id = boot_id
        self._machine_id = machine_id
        self._save_failed = False
        if path and writable:  # what a save killed mid-write left
            smallfile.remove_stale(os.path.dirname(path) or ".", TMP_PREFIX)
        if path:
            self._load(path, bus, removals)

    def remember(self, identity: DeviceIdentity) -> DeviceIdentity:
        """Pin ``identity`` (top-level devices are indexed; children only by uuid). A new uuid
        at a PCI address pinned to another one replaces it (a placeholder id that got its real
        uuid, a swapped board): the old one is forgotten, so it is not reported lost. A new
        or changed top-level identity is saved to the file."""
        with self._lock:
            before = self._by_uuid.get(identity.uuid)
            self._restored.discard(identity.uuid)
            self._unverified.discard(identity.uuid)
            replaced = self._pin(identity)
            if identity.parent is None and (replaced or before != identity):
                self._save()
        return identity

    def _pin(self, identity: DeviceIdentity) -> bool:
        """Pin under the lock; True when another uuid was forgotten for it."""
        self._by_uuid[identity.uuid] = identity
        if identity.parent is not None:
            return False
        key = pciaddr.normalize(identity.pci_address)
        old = self._by_pci.get(key) if key else None
        if old is None and not key:
            old = self._by_index.get(identity.index)
        replaced = old is not None and old != identity.uuid
        if old is not None and replaced:
            self._forget(old)
        for k in [k for k, v in self._by_index.items() if v == identity.uuid and k != identity.index]:
            del self._by_index[k]  # renumbered: its old index is no longer its own
        self._by_index[identity.index] = identity.uuid
        if key:
            self._by_pci[key] = identity.uuid
        return replaced

    def _forget(self, uuid: str) -> None:
        self._by_uuid.pop(uuid, None)
        self._restored.discard(uuid)
        self._unverified.discard(uuid)
        for i in [i for i, v in self._by_index.items() if v == uuid]:
            del self._by_index[i]
        for a in [a for a, v in self._by_pci.items() if v == uuid]:
            del self._by_pci[a]

    def recall(self, *, index: Optional[int] = None, pci_address: Optional[str] = None,
               uuid: Optional[str] = None, restored: bool = True) -> Optional[DeviceIdentity]:
        """The pinned identity for a uuid, else a PCI address, else an index (in that order:
        indexes renumber after a device is lost, PCI addresses do not). ``restored=False``:
        only identities read by this process (not those loaded from the file)."""
        with self._lock:
            found = None
            key = pciaddr.normalize(pci_address)
            if uuid and uuid in self._by_uuid:
                found = uuid
            elif key and key in self._by_pci:
                found = self._by_pci[key]
            elif index is not None and index in self._by_index:
                found = self._by_index[index]
            if found is None or (not restored and found in self._restored):
                return None
            return self._by_uuid[found]

    def missing(self, present_uuids: Iterable[str]) -> list[DeviceIdentity]:
        """Pinned top-level devices whose uuid is not in ``present_uuids``, by index."""
        present = set(present_uuids)
        with self._lock:
            return sorted((d for d in self._by_uuid.values()
                           if d.parent is None and d.uuid not in present and d.uuid not in self._unverified),
                          key=lambda d: d.index)

    def known(self) -> list[DeviceIdentity]:
        with self._lock:
            return list(self._by_uuid.values())

    # ------------------------------------------------------------------ the file
    def _load(self, path: str, bus: Optional[frozenset[str]], removals: Optional[RemovalLog]) -> None:
        try:
            devices, boot_id, machine_id = _read(path)
        except (FileNotFoundError, NotADirectoryError):  # none yet (a bad state dir: the save says it)
            return
        except (OSError, ValueError, RecursionError) as e:
            log.warning("identity file %s unusable (%s): starting empty; it is rewritten at the next save",
                        path, e, extra={"path": path})
            return
        earlier = _differs(boot_id, self._boot_id) or _differs(machine_id, self._machine_id)
        removed: list[DeviceIdentity] = []
        with self._lock:
            for ident in devices:
                self._pin(ident)
            self._restored = set(self._by_uuid)
            if earlier:
                removed = self._sort_earlier(devices, bus)
            if removed:
                self._save()
        if earlier:
            log.info("identities of %d devices kept from an earlier boot", len(devices) - len(removed),
                     extra={"path": path})
        for ident in removed:
            log.warning("%s %s %d (%s, PCI %s) remembered from an earlier boot is on neither the PCI bus nor "
                        "its tool: removed, forgotten", ident.vendor, ident.kind, ident.index, ident.uuid,
                        ident.pci_address, extra={"path": path, "uuid": ident.uuid})
            if removals is not None:
                removals.record(ident)

    def _sort_earlier(self, devices: list[DeviceIdentity], bus: Optional[frozenset[str]]) -> list[DeviceIdentity]:
        """Identities from another boot: those the bus no longer shows are forgotten (returned:
        removed); without a readable bus, or a PCI address to look for, they are kept unverified."""
        removed = []
        for ident in devices:
            key = pciaddr.normalize(ident.pci_address)
            if bus is None or not key:
                self._unverified.add(ident.uuid)
            elif key not in bus:
                self._forget(ident.uuid)
                removed.append(ident)
        return removed

    def _save(self) -> None:
        """Write every pinned top-level identity, atomically (under the lock; rare: on change)."""
        if not self.path or not self._writable:
            return
        devices = sorted((d for d in self._by_uuid.values() if d.parent is None), key=lambda d: d.index)
        doc = {"format": FILE_FORMAT, "version": FILE_VERSION, "boot_id": self._boot_id,
               "machine_id": self._machine_id, "devices": [model.to_dict(d) for d in devices[:MAX_DEVICES]]}
        data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        try:
            if len(data) > MAX_BYTES:
                raise OSError(f"{len(data)} bytes is over the {MAX_BYTES} the loader reads")
            _write_atomically(self.path, data)
        except OSError as e:
            if not self._save_failed:  # once: a read-only state dir stays read-only
                log.warning("identity file %s not saved (%s): identities are kept in memory only",
                            self.path, e, extra={"path": self.path})
            self._save_failed = True
            return
        if self._save_failed:
            log.info("identity file %s saved again", self.path, extra={"path": self.path})
        self._save_failed = False


Device = TypeVar("Device")  # a device as the summary lists it
Listed = TypeVar("Listed")  # a device as the identity call lists it


def resolve(memory: IdentityMemory, devices: Sequence[Device], place: Callable[[Device], tuple[int, Optional[str]]],
            listing: Callable[[], Sequence[Listed]],
            listed_place: Callable[[Listed], tuple[Optional[int], Optional[str]]], has_id: Callable[[Listed], bool],
            make: Callable[[Device, Optional[Listed], Optional[str]], DeviceIdentity]) -> dict[int, DeviceIdentity]:
    """Index -> identity of a summary's devices (``place``: a device's index and PCI address).
    A device pinned by this process keeps its identity (its index updated: indexes renumber);
    the others come from one identity call (``listing``, made only when a device is new, e.g.
    ``mx-smi -L``, ``mthreads-gmi -q``), matched by PCI address where the listing prints
    addresses, else by index. A new device the listing gives no id (``has_id``; the call failed,
    or printed none) keeps the uuid it had at its address before (a restored identity), if any.
    ``make(device, its listing entry or None, that earlier uuid or None)`` builds a new one."""
    out: dict[int, DeviceIdentity] = {}
    new = []
    for d in devices:
        index, bus = place(d)
        pinned = (memory.recall(pci_address=bus, restored=False) if bus
                  else memory.recall(index=index, restored=False))
        if pinned is None:
            new.append(d)
        else:
            out[index] = pinned if pinned.index == index else dataclasses.replace(pinned, index=index)
    if not new:
        return out
    listed = listing()
    by_bus = {bus: x for x in listed for _, bus in [listed_place(x)] if bus}
    by_index = {index: x for x in listed for index, _ in [listed_place(x)] if index is not None}
    for d in new:
        index, bus = place(d)
        hit = by_bus.get(bus) if bus and by_bus else by_index.get(index)
        before = None
        if (hit is None or not has_id(hit)) and bus:  # no id printed: the one it had before, if any
            before = memory.recall(pci_address=bus)
        out[index] = make(d, hit, before.uuid if before is not None else None)
    return out


def _differs(recorded: Optional[str], current: Optional[str]) -> bool:
    """Whether the file's boot (machine) is not this one; unknown on either side is not a change."""
    return bool(recorded and current and recorded != current)


def _read(path: str) -> tuple[list[DeviceIdentity], Optional[str], Optional[str]]:
    """The identities, boot id and machine id of an identity file; ValueError/OSError naming what is wrong.
    The file must be a regular file of this user, writable by no one else (the state dir is a
    host path): whoever else wrote it could name any device."""
    data = smallfile.read_regular(path, MAX_BYTES, follow_links=False, check=smallfile.owned_by_this_agent)
    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT:
        raise ValueError(f"format: not {FILE_FORMAT!r}")
    if doc.get("version") != FILE_VERSION:
        raise ValueError(f"version: {doc.get('version')!r:.20} is not {FILE_VERSION}")
    rows = doc.get("devices")
    if not isinstance(rows, list) or len(rows) > MAX_DEVICES:
        raise ValueError(f"devices: not a list of at most {MAX_DEVICES}")
    devices = []
    for i, row in enumerate(rows):
        ident = model.from_dict(DeviceIdentity, row, f"devices[{i}]")
        if ident.parent is not None or not ident.uuid or isinstance(ident.index, bool) or ident.index < 0:
            raise ValueError(f"devices[{i}]: not a top-level device with a uuid and an index >= 0")
        devices.append(ident)
    boot_id, machine_id = doc.get("boot_id"), doc.get("machine_id")
    return (devices, boot_id if isinstance(boot_id, str) else None,
            machine_id if isinstance(machine_id, str) else None)


def _write_atomically(path: str, data: bytes) -> None:
    """``data`` at ``path`` (mode 0600) through a temporary file and a rename."""
    smallfile.write_atomically(path, data, prefix=TMP_PREFIX)
