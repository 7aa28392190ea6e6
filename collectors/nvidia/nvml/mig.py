"""MIG instances of an NVIDIA GPU as devices of their own (identity.parent = the GPU uuid).

NVML exposes each MIG device through a handle of its own: ``nvmlDeviceGetMigDeviceHandleByIndex``
for index 0 .. ``nvmlDeviceGetMaxMigDeviceCount`` - 1 (NotFound for empty slots). Per instance
NVML offers the UUID (``MIG-...``), the name (``NVIDIA H100 80GB HBM3 MIG 3g.40gb``), GPU and
compute instance ids, and memory; utilization is NotSupported on MIG devices (reported as
such). Temperatures, power and clocks belong to the whole GPU and stay on the parent.

The layout only changes with a MIG reconfiguration, so it is cached per GPU and read again
when the MIG mode changes or the event thread reports nvmlEventMigConfigChange.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any, Optional

from hetero_exporter.sdk import values
from hetero_exporter.model import fields as F
from hetero_exporter.collectors.nvidia.nvml.funnel import UNSUPPORTED, Funnel
from hetero_exporter.model import DeviceIdentity, Quality, Reading

_PROFILE = re.compile(r"\bMIG\s+(\S+)")

QUALITY: dict[str, Quality] = {
    F.MEMORY_USED: Quality("nvmlDeviceGetMemoryInfo(MIG handle).used", "measured", None, 1.0),
    F.MEMORY_TOTAL: Quality("nvmlDeviceGetMemoryInfo(MIG handle).total", "measured", None, 1.0),
    F.UTILIZATION: Quality("nvmlDeviceGetUtilizationRates(MIG handle).gpu", "sampled", 1.0, 0.01),
}


@dataclass(frozen=True)
class MigInstance:
    identity: DeviceIdentity
    handle: Any
    gpu_instance: Optional[int]
    compute_instance: Optional[int]



def mig_model(parent_model: str, name: str, gpu_instance: Optional[int]) -> str:
    """'H100-SXM5-80GB' + 'NVIDIA H100 80GB HBM3 MIG 3g.40gb' -> 'H100-SXM5-80GB-MIG-3g.40gb'."""
    m = _PROFILE.search(name or "")
    slice_ = m.group(1) if m else (f"gi{gpu_instance}" if gpu_instance is not None else "instance")
    return f"{parent_model}-MIG-{slice_}"


class MigReader:
    def __init__(self, nv: Any, funnel: Optional[Funnel] = None):
        self._nv = nv
        self._f = funnel or Funnel(nv)
        self._layout: dict[str, tuple[int, tuple[MigInstance, ...]]] = {}  # parent uuid -> (mode, instances)
        self._no_mig: set[str] = set()  # GPUs without MIG support
        self._unsupported: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def invalidate(self) -> None:
        """Forget every layout (a MIG configuration changed)."""
        with self._lock:
            self._layout.clear()

    def instances(self, parent: DeviceIdentity, h: Any) -> tuple[MigInstance, ...]:
        """The MIG instances of a GPU (empty when MIG is off or unsupported)."""
        nv, f = self._nv, self._f
        if parent.uuid in self._no_mig:
            return ()
        mode = getattr(nv, "nvmlDeviceGetMigMode", None)
        got = f.call(mode, h) if mode is not None else None
        if got is None or got.status == UNSUPPORTED:
            self._no_mig.add(parent.uuid)
            return ()
        current = int(f.unwrap(got)[0])
        with self._lock:
            cached = self._layout.get(parent.uuid)
        if cached is not None and cached[0] == current:
            return cached[1]
        found: list[MigInstance] = []
        if current == getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
            for i in range(int(f.need(nv.nvmlDeviceGetMaxMigDeviceCount, h))):
                slot = f.call(nv.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
                if slot.code == f.NOT_FOUND:
                    continue  # empty slot
                found.append(self._describe(parent, i, f.unwrap(slot)))
        with self._lock:
            self._layout[parent.uuid] = (current, tuple(found))
        return tuple(found)

    def _describe(self, parent: DeviceIdentity, index: int, mh: Any) -> MigInstance:
        nv, f = self._nv, self._f
        uuid = values.decoded(f.need(nv.nvmlDeviceGetUUID, mh))
        name = f.optional("nvmlDeviceGetName", mh)
        name = "" if name is None else values.decoded(name)
        gi = f.optional("nvmlDeviceGetGpuInstanceId", mh)
        ci = f.optional("nvmlDeviceGetComputeInstanceId", mh) if gi is not None else None
        gi, ci = (None if gi is None else int(gi)), (None if ci is None else int(ci))
        ident = DeviceIdentity(
            vendor="nvidia", kind="gpu", index=index, uuid=uuid,
            model=mig_model(parent.model, name, gi), pci_address=parent.pci_address,
            numa_node=parent.numa_node, driver_version=parent.driver_version,
            runtime_version=parent.runtime_version, firmware_version=parent.firmware_version, parent=parent.uuid, name=name or None,
            serial=parent.serial)
        return MigInstance(ident, mh, gi, ci)

    def readings(self, inst: MigInstance, memory_v2: Any) -> dict[str, Reading]:
        """Memory (and utilization where NVML offers it) of one MIG instance."""
        nv, f, uuid, r = self._nv, self._f, inst.identity.uuid, {}
        unsupported = self._unsupported.setdefault(uuid, set())
        got = f.call(nv.nvmlDeviceGetMemoryInfo, inst.handle, memory_v2) if memory_v2 else \
            f.call(nv.nvmlDeviceGetMemoryInfo, inst.handle)
        for field in (F.MEMORY_USED, F.MEMORY_TOTAL):
            r[field] = Reading(float(getattr(got.value, "used" if field == F.MEMORY_USED else "total")),
                               QUALITY[field]) if got.ok else Reading(None, QUALITY[field].with_status(got.status))
        if F.UTILIZATION in unsupported:
            r[F.UTILIZATION] = Reading(None, QUALITY[F.UTILIZATION].with_status("unsupported"))
            return r
        got = f.call(nv.nvmlDeviceGetUtilizationRates, inst.handle)
        if got.ok:
            r[F.UTILIZATION] = Reading(got.value.gpu * 0.01, QUALITY[F.UTILIZATION])
        else:
            if got.status == UNSUPPORTED:
                unsupported.add(F.UTILIZATION)
            r[F.UTILIZATION] = Reading(None, QUALITY[F.UTILIZATION].with_status(got.status))
        return r
