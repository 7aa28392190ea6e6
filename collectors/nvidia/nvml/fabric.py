"""NVLink fabric state of NVIDIA GPUs on NVSwitch systems, and the host processes the fabric needs.

On an NVSwitch system (HGX/DGX H100, H200, B200, GB200 NVL) a GPU is usable for CUDA only once
NVIDIA Fabric Manager (``nv-fabricmanager``) has registered it with the fabric. NVML reports
that registration per GPU (NVML API reference, ``nvmlDeviceGetGpuFabricInfoV`` /
``nvmlGpuFabricInfo_v2_t``; the older ``nvmlDeviceGetGpuFabricInfo`` / ``nvmlGpuFabricInfo_t``
on drivers before R550): ``state`` NOT_SUPPORTED (no fabric: PCIe cards, older GPUs),
NOT_STARTED, IN_PROGRESS, COMPLETED, and ``status`` the NVML return code of the registration
once COMPLETED. What the collector makes of it:

- NOT_SUPPORTED (or the call unsupported on this driver): nothing, never asked again for that GPU;
- COMPLETED with ``status`` not SUCCESS: the registration failed; condition ``fabric-manager``
  (fault table: degraded, the GPU cannot run CUDA work across the fabric until Fabric Manager
  registers it again, which takes a reset of the GPUs or a restart of the service);
- NOT_STARTED / IN_PROGRESS: no fault (Fabric Manager starts after the driver; the process
  check below says when it is not running at all).

On a node whose GPUs report a fabric, the host's /proc is scanned for ``nv-fabricmanager`` and
``nvidia-persistenced`` (NVIDIA Fabric Manager User Guide: both run on NVSwitch systems). A
missing fabric manager is the ``fabric-manager`` condition on every fabric GPU (degraded: the
devices still answer, new work across NVLink fails, and an operator must start the service);
a missing persistence daemon is ``persistenced-missing``, info only (the driver state is then
torn down between clients, which slows starts but breaks nothing while Fabric Manager holds the
devices open). The scan runs only where the host's process table is visible (pid 2 is
``kthreadd``: the host's pid namespace); otherwise it says nothing rather than a false alarm.

Both reads run on the collector's detail schedule (``FABRIC_INTERVAL``), through its funnel.
"""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass
from typing import Any, Optional

from hetero_exporter.collectors.nvidia.nvml.funnel import UNSUPPORTED, Funnel
from hetero_exporter.sdk.schedule import DetailSchedule

log = logging.getLogger(__name__)

FABRIC_INTERVAL = 30.0  # seconds between fabric reads of one GPU (registration changes rarely)
PROCESS_INTERVAL = 60.0  # seconds between scans of the host's /proc
MAX_PIDS = 65536  # /proc entries looked at per scan (a bound, not a limit any host reaches)
FABRIC_MANAGER = "nv-fabricmanage"  # /proc/PID/comm: the first 15 characters of the name
PERSISTENCED = "nvidia-persiste"

# nvml.h nvmlGpuFabricState_t
NOT_SUPPORTED, NOT_STARTED, IN_PROGRESS, COMPLETED = 0, 1, 2, 3
STATE_NAMES = {NOT_SUPPORTED: "not-supported", NOT_STARTED: "not-started", IN_PROGRESS: "in-progress",
               COMPLETED: "completed"}
# nvml.h nvmlReturn_t, the codes a registration may report (others: the number)
_RETURNS = {0: "NVML_SUCCESS", 1: "NVML_ERROR_UNINITIALIZED", 2: "NVML_ERROR_INVALID_ARGUMENT",
            3: "NVML_ERROR_NOT_SUPPORTED", 4: "NVML_ERROR_NO_PERMISSION", 6: "NVML_ERROR_NOT_FOUND",
            9: "NVML_ERROR_DRIVER_NOT_LOADED", 10: "NVML_ERROR_TIMEOUT", 11: "NVML_ERROR_IRQ_ISSUE",
            15: "NVML_ERROR_GPU_IS_LOST", 16: "NVML_ERROR_RESET_REQUIRED", 17: "NVML_ERROR_OPERATING_SYSTEM",
            19: "NVML_ERROR_IN_USE", 20: "NVML_ERROR_MEMORY", 23: "NVML_ERROR_INSUFFICIENT_RESOURCES",
            27: "NVML_ERROR_NOT_READY", 29: "NVML_ERROR_INVALID_STATE", 999: "NVML_ERROR_UNKNOWN"}


def return_name(code: int) -> str:
    return _RETURNS.get(code, f"NVML return code {code}")


@dataclass(frozen=True)
class FabricInfo:
    """One GPU's fabric registration as NVML reported it (``health_mask``: the V call's only)."""

    state: int
    status: int
    clique_id: int
    health_mask: Optional[int] = None

    @property
    def failed(self) -> bool:
        return self.state == COMPLETED and self.status != 0


class FabricReader:
    """Reads each GPU's fabric state on its schedule and the host's fabric processes."""

    def __init__(self, nv: Any, funnel: Funnel, proc_root: Optional[str] = "/proc", max_gpus: int = 256):
        self._nv, self._f, self._proc = nv, funnel, proc_root
        self._schedule = DetailSchedule({"fabric": FABRIC_INTERVAL, "processes": PROCESS_INTERVAL}, 1.0,
                                        budget=max_gpus + 1)
        self._none: set[str] = set()  # GPUs without a fabric (or without the call): never asked again
        self._api: Optional[str] = None  # the call that answered (V, else the older one)
        self._info: dict[str, FabricInfo] = {}
        self._missing: tuple[str, ...] = ()  # fabric processes not running (last scan)
        self._said_hidden = False

    def read(self, uuid: str, handle: Any, now: float) -> None:
        """Ask NVML for this GPU's fabric state when due (Lost propagates: the GPU's read ends)."""
        job = (uuid, "fabric")
        if uuid in self._none or not self._schedule.due([job], now):
            return
        info, unsupported = self._call(handle)
        self._schedule.done(job, now, info, ok=info is not None)
        if unsupported or (info is not None and info.state == NOT_SUPPORTED):
            self._none.add(uuid)
            self._info.pop(uuid, None)
        elif info is not None:
            self._info[uuid] = info

    def _call(self, handle: Any) -> tuple[Optional[FabricInfo], bool]:
        """(the GPU's fabric info or None, whether no call of this driver has it)."""
        nv, f = self._nv, self._f
        for name, struct in (("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
                             ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t")):
            if self._api not in (None, name):
                continue
            fn, cls = getattr(nv, name, None), getattr(nv, struct, None)
            if fn is None or cls is None:
                continue
            raw = cls()
            got = f.call(fn, handle, ctypes.byref(raw))
            if got.ok:
                self._api = name
                mask = getattr(raw, "healthMask", None)
                return FabricInfo(int(raw.state), int(raw.status), int(raw.cliqueId),
                                  int(mask) if mask is not None else None), False
            if got.status != UNSUPPORTED:
                return None, False  # an error: asked again at the next due time
            if not got.missing:
                return None, True  # NOT_SUPPORTED: no fabric on this GPU
        return None, True

    def scan(self, now: float) -> None:
        """The host's fabric processes, when some GPU reports a fabric and the scan is due."""
        job = ("node", "processes")
        if not self._info or self._proc is None or not self._schedule.due([job], now):
            return
        names = running_names(self._proc)
        self._schedule.done(job, now, names, ok=names is not None)
        if names is None:
            if not self._said_hidden:
                self._said_hidden = True
                log.info("fabric processes not checked: the host's process table is not visible "
                         "(mount the host's /proc, or hostPID)", extra={"proc": self._proc})
            self._missing = ()
            return
        self._missing = tuple(n for n in (FABRIC_MANAGER, PERSISTENCED) if n not in names)

    def conditions(self, uuid: str) -> list[tuple[str, str]]:
        """The GPU's fabric conditions (fault code, message) as of the last reads."""
        info = self._info.get(uuid)
        if info is None:
            return []
        out = []
        if info.failed:
            out.append(("fabric-manager", f"NVLink fabric registration failed: {return_name(info.status)} "
                                          f"(state completed, clique {info.clique_id})"))
        if FABRIC_MANAGER in self._missing:
            out.append(("fabric-manager", "nv-fabricmanager is not running on this NVSwitch system "
                                          f"(fabric state {STATE_NAMES.get(info.state, info.state)})"))
        if PERSISTENCED in self._missing:
            out.append(("persistenced-missing", "nvidia-persistenced is not running on this NVSwitch system"))
        return list({code: (code, text) for code, text in reversed(out)}.values())[::-1]  # one per code, the first


def running_names(proc: str) -> Optional[set[str]]:
    """The ``comm`` names of the processes under ``proc`` (at most MAX_PIDS looked at); None when
    that is not the host's process table (no ``kthreadd`` as pid 2: a container's own namespace)."""
    if _comm(os.path.join(proc, "2")) != "kthreadd":
        return None
    names: set[str] = set()
    try:
        with os.scandir(proc) as it:
            for i, entry in enumerate(it):
                if i >= MAX_PIDS:
                    break
                if entry.name.isdigit():
                    name = _comm(entry.path)
                    if name:
                        names.add(name)
    except OSError:
        return None
    return names


def _comm(pid_dir: str) -> str:
    try:
        with open(os.path.join(pid_dir, "comm"), "rb") as f:
            return f.read(64).decode("utf-8", "replace").strip()
    except OSError:
        return ""
