"""Identity memory: a device keeps its uuid while it is lost.

A collector pins each device's identity the first time it reads it (uuid, serial, model...)
and remembers it by vendor-local index and by PCI address. When the device later stops
answering (fell off the bus, the tool lists it no more, the binding raises GPU_IS_LOST), the
collector asks ``recall`` and reports it failed under the uuid its pods and dashboards know,
not under a placeholder name; ``missing`` lists the pinned devices absent from this cycle.
"""

from __future__ import annotations

import threading
from typing import Iterable, Optional

from hetero_exporter.model import DeviceIdentity
from hetero_exporter.sdk import pciaddr


class IdentityMemory:
    """Identities seen since start, by uuid, by index and by PCI address (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_uuid: dict[str, DeviceIdentity] = {}
        self._by_index: dict[int, str] = {}
        self._by_pci: dict[str, str] = {}

    def remember(self, identity: DeviceIdentity) -> DeviceIdentity:
        """Pin ``identity`` (top-level devices are indexed; children only by uuid). A new uuid
        at a PCI address pinned to another one replaces it (a placeholder id that got its real
        uuid, a swapped board): the old one is forgotten, so it is not reported lost."""
        with self._lock:
            self._by_uuid[identity.uuid] = identity
            if identity.parent is None:
                key = pciaddr.normalize(identity.pci_address)
                old = self._by_pci.get(key) if key else None
                if old is None and not key:
                    old = self._by_index.get(identity.index)
                if old is not None and old != identity.uuid:
                    self._forget(old)
                self._by_index[identity.index] = identity.uuid
                if key:
                    self._by_pci[key] = identity.uuid
        return identity

    def _forget(self, uuid: str) -> None:
        self._by_uuid.pop(uuid, None)
        for table in (self._by_index, self._by_pci):
            for k in [k for k, v in table.items() if v == uuid]:
                del table[k]

    def recall(self, *, index: Optional[int] = None, pci_address: Optional[str] = None,
               uuid: Optional[str] = None) -> Optional[DeviceIdentity]:
        """The pinned identity for a uuid, else a PCI address, else an index (in that order:
        indexes renumber after a device is lost, PCI addresses do not)."""
        with self._lock:
            if uuid and uuid in self._by_uuid:
                return self._by_uuid[uuid]
            key = pciaddr.normalize(pci_address)
            if key and key in self._by_pci:
                return self._by_uuid[self._by_pci[key]]
            if index is not None and index in self._by_index:
                return self._by_uuid[self._by_index[index]]
        return None

    def missing(self, present_uuids: Iterable[str]) -> list[DeviceIdentity]:
        """Pinned top-level devices whose uuid is not in ``present_uuids``, by index."""
        present = set(present_uuids)
        with self._lock:
            return sorted((d for d in self._by_uuid.values() if d.parent is None and d.uuid not in present),
                          key=lambda d: d.index)

    def known(self) -> list[DeviceIdentity]:
        with self._lock:
            return list(self._by_uuid.values())
