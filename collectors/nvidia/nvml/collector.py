"""NVIDIA GPUs through NVML (nvidia-ml-py, ``import pynvml``).

Thin I/O over the binding: each reading is one NVML call (or one entry of a batched
``nvmlDeviceGetFieldValues`` call), converted to base units and tagged with the quality
declared once in ``QUALITY``. Every call goes through nvml/funnel.py, the one place NVML
errors become outcomes:
- unsupported (NotSupported, FunctionNotFound) -> the field is absent, status
  ``unsupported`` (and not asked again for that GPU: support does not change while the
  driver is loaded);
- lost (GPU_IS_LOST; UNKNOWN once lost) -> that GPU is reported ``failed`` with a
  ``gpu-lost`` fault under the identity first read at its index (sdk IdentityMemory), the
  other GPUs are read normally; so is a pinned GPU whose handle can no longer be had;
- any other NVML error on one field -> that field is absent with status ``error``;
- library missing / driver not loaded / nvmlInit failing -> ``Unavailable`` (``create``
  then falls back to ``nvidia-smi -q -x`` when that works, see nvidia_smi/collector.py).

``identity.runtime_version`` is the CUDA driver API version the driver supports
(nvmlSystemGetCudaDriverVersion_v2, ``12080`` -> ``12.8``).

Beyond the core readings: volatile ECC, retired pages, remapped rows, PCIe link generation
and width (current vs max) and replay counter, clock-event reasons, the GPU recovery
action, NVLink state and traffic, processes (nvml_processes), MIG instances as child
devices (nvml_mig), topology links (nvml_topology) and an event thread for XIDs
(nvml_events). Health is a faithful report, not a policy: failed while a critical fault is
active (lost GPU, a critical XID within the last ``event_hold_seconds``, a recovery action
the driver asks for), degraded for warnings; health/detect/rules.py builds verdicts on top.

The first cycle (the only one of ``inspect``) registers the event set before its reads and
drains every pending event into the snapshot before building it, so an XID that came while it
ran is always in it; the thread then takes the set over (nvml/events.py).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional

from hetero_exporter.sdk import values
from hetero_exporter import validate as v
from hetero_exporter.model import fields as F
from hetero_exporter import profiles
from hetero_exporter.sdk.cli_collector import fall_back
from hetero_exporter.sdk.contract import CollectorOptions, Unavailable
from hetero_exporter.sdk.settings import BindingSettings, integer, seconds, setting
from hetero_exporter.collectors.nvidia import common as C
from hetero_exporter.collectors.nvidia.nvml.events import Event, EventWatcher
from hetero_exporter.collectors.nvidia.nvml.funnel import (UNSUPPORTED, Failed, Funnel, Got, Lost,
                                                           cuda_driver_version)
# modules, not names: their QUALITY tables are this collector's too (docs/metrics.md)
from hetero_exporter.collectors.nvidia.nvml import gpm, mig
from hetero_exporter.collectors.nvidia.nvml.fabric import FabricReader
from hetero_exporter.collectors.nvidia.nvml.processes import ProcessReader, RunningProcess, samples as process_samples
from hetero_exporter.collectors.nvidia.nvml.topology import Topology, normalize_bus_id
from hetero_exporter.sdk.identity import IdentityMemory
from hetero_exporter.sdk.ledger import FaultLedger
from hetero_exporter.model import (DeviceIdentity, DeviceSample, Fault, Health, Quality,
                                   Reading)

log = logging.getLogger(__name__)

__all__ = ["NvmlCollector", "QUALITY", "create", "normalize_bus_id"]

_FV = "nvmlDeviceGetFieldValues"

# Static quality of each field: source (the NVML call), method, window, resolution (the step
# NVML reports in: 1 % -> 0.01, bytes -> 1, 1 C, mW -> 0.001 W, mJ -> 0.001 J, MHz -> 1e6) and
# relative error bound where NVIDIA documents one.
QUALITY: dict[str, Quality] = {
    # NVML API reference, nvmlUtilization_t: percent of time over the past sample period,
    # "between 1 second and 1/6 second, depending on the product" -> the longer bound, 1 s
    F.UTILIZATION: Quality("nvmlDeviceGetUtilizationRates.gpu", "sampled", 1.0, 0.01),
    F.MEMORY_UTILIZATION: Quality("nvmlDeviceGetUtilizationRates.memory", "sampled", 1.0, 0.01),
    # _v2 reports driver-reserved memory apart, so "used" matches nvidia-smi's fb used
    F.MEMORY_USED: Quality("nvmlDeviceGetMemoryInfo_v2.used", "measured", None, 1.0),
    F.MEMORY_TOTAL: Quality("nvmlDeviceGetMemoryInfo_v2.total", "measured", None, 1.0),
    F.TEMP_CORE: Quality("nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)", "measured", None, 1.0),
    F.TEMP_MEMORY: Quality(f"{_FV}(NVML_FI_DEV_MEMORY_TEMP)", "measured", None, 1.0),
    # NVML API reference, nvmlDeviceGetPowerUsage: accurate to within +/- 5 % of the current
    # draw (stated for Fermi and Kepler); averaged over a 1 s interval on Ampere (except
    # GA100) and later, instantaneous before: window 1 s, the longer of the two
    F.POWER: Quality("nvmlDeviceGetPowerUsage", "sampled", 1.0, 0.001, 0.05),
    F.POWER_LIMIT: Quality("nvmlDeviceGetEnforcedPowerLimit", "measured", None, 0.001),
    F.ENERGY: Quality("nvmlDeviceGetTotalEnergyConsumption", "measured", None, 0.001),
    F.CLOCK_COMPUTE: Quality("nvmlDeviceGetClockInfo(NVML_CLOCK_SM)", "measured", None, 1e6),
    F.CLOCK_MEMORY: Quality("nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)", "measured", None, 1e6),
    F.ECC_CORRECTED: Quality("nvmlDeviceGetTotalEccErrors(CORRECTED, AGGREGATE)", "measured", None, 1.0),
    F.ECC_UNCORRECTED: Quality("nvmlDeviceGetTotalEccErrors(UNCORRECTED, AGGREGATE)", "measured", None, 1.0),
    C.ECC_CORRECTED_VOLATILE: Quality(f"{_FV}(NVML_FI_DEV_ECC_SBE_VOL_TOTAL)", "measured", None, 1.0),
    C.ECC_UNCORRECTED_VOLATILE: Quality(f"{_FV}(NVML_FI_DEV_ECC_DBE_VOL_TOTAL)", "measured", None, 1.0),
    C.RETIRED_SBE: Quality(f"{_FV}(NVML_FI_DEV_RETIRED_SBE)", "measured", None, 1.0),
    C.RETIRED_DBE: Quality(f"{_FV}(NVML_FI_DEV_RETIRED_DBE)", "measured", None, 1.0),
    C.RETIREMENT_PENDING: Quality(f"{_FV}(NVML_FI_DEV_RETIRED_PENDING)", "measured", None, 1.0),
    C.REMAPPED_CORRECTABLE: Quality(f"{_FV}(NVML_FI_DEV_REMAPPED_COR)", "measured", None, 1.0),
    C.REMAPPED_UNCORRECTABLE: Quality(f"{_FV}(NVML_FI_DEV_REMAPPED_UNC)", "measured", None, 1.0),
    C.REMAP_PENDING: Quality(f"{_FV}(NVML_FI_DEV_REMAPPED_PENDING)", "measured", None, 1.0),
    C.REMAP_FAILED: Quality(f"{_FV}(NVML_FI_DEV_REMAPPED_FAILURE)", "measured", None, 1.0),
    C.PCIE_REPLAY: Quality(f"{_FV}(NVML_FI_DEV_PCIE_REPLAY_COUNTER)", "measured", None, 1.0),
    C.RECOVERY_ACTION: Quality(f"{_FV}(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)", "measured", None, 1.0),
    C.PCIE_GEN: Quality("nvmlDeviceGetCurrPcieLinkGeneration", "measured", None, 1.0),
    C.PCIE_GEN_MAX: Quality("nvmlDeviceGetMaxPcieLinkGeneration", "measured", None, 1.0),
    C.PCIE_WIDTH: Quality("nvmlDeviceGetCurrPcieLinkWidth", "measured", None, 1.0),
    C.PCIE_WIDTH_MAX: Quality("nvmlDeviceGetMaxPcieLinkWidth", "measured", None, 1.0),
    C.NVLINK_ACTIVE: Quality("nvmlDeviceGetNvLinkState", "measured", None, 1.0),
    C.NVLINK_INACTIVE: Quality("nvmlDeviceGetNvLinkState", "measured", None, 1.0),
    # per-link counters in KiB, summed over the links
    C.NVLINK_RX: Quality(f"{_FV}(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)", "measured", None, 1024.0),
    C.NVLINK_TX: Quality(f"{_FV}(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX)", "measured", None, 1024.0),
}
# The rest of dcgm-exporter's default set that NVML serves (issue 27). NVML API reference:
# nvmlDeviceGetEncoder/DecoderUtilization report a percentage over their own sampling period
# (returned beside it; 1 s or less on current GPUs: the longer bound, as utilization above);
# nvmlDeviceGetPcieThroughput counts KB/s over a 20 ms sample.
QUALITY.update({
    "memory_reserved_bytes": Quality("nvmlDeviceGetMemoryInfo_v2.reserved", "measured", None, 1.0),
    "fan_speed_ratio": Quality("nvmlDeviceGetFanSpeed", "measured", None, 0.01),
    "engine_encoder_utilization_ratio": Quality("nvmlDeviceGetEncoderUtilization", "sampled", 1.0, 0.01),
    "engine_decoder_utilization_ratio": Quality("nvmlDeviceGetDecoderUtilization", "sampled", 1.0, 0.01),
    "pcie_tx_bytes_per_second": Quality("nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_TX_BYTES)", "sampled", 0.02, 1024.0),
    "pcie_rx_bytes_per_second": Quality("nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_RX_BYTES)", "sampled", 0.02, 1024.0),
    "power_management_limit_watts": Quality("nvmlDeviceGetPowerManagementLimit", "measured", None, 0.001),
})
for _bit, _name, _smi in C.CLOCK_REASONS:
    QUALITY[C.clock_reason_field(_name)] = Quality("nvmlDeviceGetCurrentClocksEventReasons", "measured", None, 1.0)

# Fields read through one batched nvmlDeviceGetFieldValues call per GPU: field -> NVML id name
_BATCH: tuple[tuple[str, str], ...] = (
    (F.TEMP_MEMORY, "NVML_FI_DEV_MEMORY_TEMP"),
    (C.ECC_CORRECTED_VOLATILE, "NVML_FI_DEV_ECC_SBE_VOL_TOTAL"),
    (C.ECC_UNCORRECTED_VOLATILE, "NVML_FI_DEV_ECC_DBE_VOL_TOTAL"),
    (C.RETIRED_SBE, "NVML_FI_DEV_RETIRED_SBE"),
    (C.RETIRED_DBE, "NVML_FI_DEV_RETIRED_DBE"),
    (C.RETIREMENT_PENDING, "NVML_FI_DEV_RETIRED_PENDING"),
    (C.REMAPPED_CORRECTABLE, "NVML_FI_DEV_REMAPPED_COR"),
    (C.REMAPPED_UNCORRECTABLE, "NVML_FI_DEV_REMAPPED_UNC"),
    (C.REMAP_PENDING, "NVML_FI_DEV_REMAPPED_PENDING"),
    (C.REMAP_FAILED, "NVML_FI_DEV_REMAPPED_FAILURE"),
    (C.PCIE_REPLAY, "NVML_FI_DEV_PCIE_REPLAY_COUNTER"),
    (C.RECOVERY_ACTION, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"),
)
_NVLINK_BATCH = ((C.NVLINK_RX, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX"),
                 (C.NVLINK_TX, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"))
_FIELD_SCALE = {C.NVLINK_RX: 1024.0, C.NVLINK_TX: 1024.0}
_LINK_STATE = "_nvlink_state"  # batch entries that carry link states, not a reading
_MEMORY_V1 = {  # drivers without nvmlDeviceGetMemoryInfo_v2: "used" includes reserved memory
    F.MEMORY_USED: Quality("nvmlDeviceGetMemoryInfo.used", "measured", None, 1.0),
    F.MEMORY_TOTAL: Quality("nvmlDeviceGetMemoryInfo.total", "measured", None, 1.0),
}

# nvmlInit errors that mean "no usable NVIDIA stack here" rather than a bug
_UNAVAILABLE_ERRORS = ("LibraryNotFound", "DriverNotLoaded", "NoPermission", "LibRmVersionMismatch",
                       "FunctionNotFound", "Unknown", "OperatingSystem")



class NvmlCollector:
    name = "nvml"
    vendor = "nvidia"

    def __init__(self, nvml: Any, clock: Callable[[], float], sysfs_root: str = "/sys", *,
                 wake: Callable[[], None] = lambda: None, events: bool = True,
                 event_wait_ms: int = 1000, event_hold_seconds: float = 10.0,
                 identities: Optional[IdentityMemory] = None, profiling: bool = True, interval: float = 10.0,
                 proc_root: Optional[str] = None):
        self._nv = nvml
        self._f = Funnel(nvml)
        self._clock = clock
        self._sysfs = sysfs_root
        got = self._f.attempt(nvml.nvmlInit)
        if not got.ok:
            raise Unavailable(f"nvmlInit failed: {type(got.error).__name__}: {got.error}")
        self._driver = self._optional_text("nvmlSystemGetDriverVersion")
        self._runtime = cuda_driver_version(self._f)
        # identities pinned at first read, kept while lost (and across a restart with a path)
        self._ids = identities if identities is not None else IdentityMemory()
        self._unsupported: dict[str, set[str]] = {}  # uuid -> fields NVML does not support
        self._ledger = FaultLedger()
        self._conditions = C.ConditionTracker(self._ledger, "nvml")
        self._lost: set[str] = set()  # uuids currently lost (a new loss episode counts once)
        self._static: dict[str, dict[str, Reading]] = {}  # uuid -> readings that never change
        self._clock_dead: set[str] = set()  # clock-reason calls this driver lacks
        self._clock_supported: dict[str, int] = {}
        self._memory_v2: Any = getattr(nvml, "nvmlMemory_v2", None)
        self._procs = ProcessReader(nvml, self._f)
        self._names: dict[int, Optional[str]] = {}
        self._mig = mig.MigReader(nvml, self._f)
        self._topology = Topology(nvml, self._f)
        self._fabric = FabricReader(nvml, self._f, proc_root)  # NVSwitch fabric registration (nvml/fabric.py)
        self._gpm = gpm.GpmReader(nvml, self._f, interval=interval) if profiling else None  # NVML GPM: profiling (nvml/gpm.py)
        self._nvlink_states: dict[str, Optional[list[bool]]] = {}
        self._specs: dict[str, list[tuple[str, Any]]] = {}  # uuid -> batched field-value ids
        # constants looked up once (hot loop of the batched call)
        self._SUCCESS = nvml.NVML_SUCCESS
        self._decode = {nvml.NVML_VALUE_TYPE_DOUBLE: "dVal", nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
                        nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal", nvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
                        nvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal"}
        self._wake = wake
        self._events_enabled = events
        self._event_wait_ms = event_wait_ms
        self._event_hold = event_hold_seconds
        self._watcher: Optional[EventWatcher] = None
        self._watcher_lock = threading.Lock()
        self._draining = False  # delivering pending events inside collect(): no wake-up

    # ------------------------------------------------------------------ plumbing
    def _optional_text(self, name: str, *args: Any) -> Optional[str]:
        """A string NVML may not give (unsupported, error, lost, or a binding without it)."""
        v = self._f.optional(name, *args)
        return None if v is None else values.decoded(v)

    def close(self) -> None:
        if self._gpm is not None:
            self._gpm.close()  # every GPM sample freed
        w = self._watcher
        if w is not None:
            w.stop()
            if not w.started:  # opened for a drain, never handed to a thread
                w.close_set()
        try:
            self._nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass

    # ------------------------------------------------------------------ events
    def event_watcher(self, devices: list[tuple[str, Any]]) -> EventWatcher:
        """The event watcher over ``devices`` (uuid, handle); not started."""
        return EventWatcher(self._nv, devices, on_event=self.record_event, on_lost=self._wake,
                            on_mig_change=self._mig_changed, wait_ms=self._event_wait_ms)

    def record_event(self, ev: Event) -> None:
        """An NVML event: count it in the ledger and ask for a cycle now."""
        fault = C.make_fault(ev.code, ev.message, ev.source)
        self._ledger.record(ev.uuid, fault, self._clock())
        log.warning("NVIDIA fault event", extra={"uuid": ev.uuid, "code": ev.code, "action": fault.action,
                                                 "detail": ev.message})
        if not self._draining:  # drained inside a collection: already in the snapshot it builds
            self._wake()

    def _mig_changed(self) -> None:
        self._mig.invalidate()
        self._wake()

    def _open_events(self, count: int) -> Optional[EventWatcher]:
        """First cycle: the event watcher with its set registered before the reads (every GPU
        that can be identified), not started; None when events are off. A set that cannot be
        opened here is left to the thread, which tries again and says why."""
        if not self._events_enabled or self._watcher is not None:
            return None
        devices = []
        for index in range(count):
            got = self._f.attempt(self._nv.nvmlDeviceGetHandleByIndex, index)
            if not got.ok:
                continue
            try:
                devices.append((self._identity(index, got.value).uuid, got.value))
            except (Lost, Failed):
                continue  # read (and reported) by the loop
        w = self.event_watcher(devices)
        try:
            w.open()
        except Exception as e:  # noqa: BLE001 - EventsUnsupported, Failed: the thread says it
            log.debug("NVML event set not opened before the first reads: %s", e)
            w.close_set()
        with self._watcher_lock:
            self._watcher = w
        return w

    def _drain_events(self, w: Optional[EventWatcher]) -> None:
        """Every event pending in the first cycle's set, into the ledger before the build."""
        if w is None or not w.is_open:
            return
        self._draining = True
        try:
            w.drain()
        except Exception:  # noqa: BLE001 - the thread goes on with the set; the snapshot is built
            log.warning("NVML event drain failed", exc_info=True)
        finally:
            self._draining = False

    def _ensure_watcher(self, devices: list[tuple[str, Any]]) -> None:
        if not self._events_enabled or not devices:
            return
        with self._watcher_lock:
            w = self._watcher
            if w is not None and w.alive:
                w.update(devices)
                return
            if w is not None and w.no_event_calls:
                return  # no event calls on this driver: polling sees the XIDs
            if w is None or w.started:  # none yet, or its thread ended: a new one
                w = self._watcher = self.event_watcher(devices)
            else:  # opened for the first cycle's drain: the thread takes its set over
                w.update(devices)
            w.start()

    def _event_reasons(self, uuid: str, now: float) -> list[Fault]:
        """Event faults seen within the hold window (an event is news for one interval)."""
        return [f for f in self._ledger.faults(uuid)
                if f.source.startswith("nvmlEventSetWait") and f.last_seen is not None
                and now - f.last_seen <= self._event_hold]

    # ------------------------------------------------------------------ identity
    def _identity(self, index: int, handle: Any) -> DeviceIdentity:
        """The GPU's identity, read once and pinned (by index and PCI address); Failed when
        the GPU cannot even be identified."""
        known = self._ids.recall(index=index, restored=False)  # one from the file is read again
        if known is not None:
            return known
        f = self._f
        uuid = values.decoded(f.need(self._nv.nvmlDeviceGetUUID, handle))
        name = values.decoded(f.need(self._nv.nvmlDeviceGetName, handle))
        pci = normalize_bus_id(f.need(self._nv.nvmlDeviceGetPciInfo, handle).busId)
        numa = f.optional("nvmlDeviceGetNumaNodeId", handle)
        numa = self._sysfs_numa(pci) if numa is None else int(numa)
        if numa is not None and numa < 0:
            numa = None
        ident = DeviceIdentity(
            vendor="nvidia", kind="gpu", index=index, uuid=uuid,
            model=profiles.normalize_model("nvidia", name), pci_address=pci, numa_node=numa,
            driver_version=self._driver, runtime_version=self._runtime,
            firmware_version=self._optional_text("nvmlDeviceGetInforomImageVersion", handle),
            name=name, serial=self._optional_text("nvmlDeviceGetSerial", handle))
        return self._ids.remember(ident)

    def _sysfs_numa(self, pci: str) -> Optional[int]:
        try:
            with open(os.path.join(self._sysfs, "bus/pci/devices", pci, "numa_node")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    # ------------------------------------------------------------------ readings
    def _status(self, got: Got, uuid: str, field: str) -> str:
        """Status of a failed call on one field; unsupported is remembered for the GPU."""
        if got.status == UNSUPPORTED:
            self._unsupported.setdefault(uuid, set()).add(field)
        return got.status

    def _read(self, uuid: str, readings: dict, field: str, fn: Callable, *args: Any,
              scale: float = 1.0, pick: Optional[Callable[[Any], Any]] = None) -> Any:
        """One NVML call -> readings[field] in base units; returns the raw result or None."""
        quality = QUALITY[field]
        if field in self._unsupported.get(uuid, ()):
            readings[field] = Reading(None, quality.with_status("unsupported"))
            return None
        got = self._f.call(fn, *args)
        if not got.ok:
            readings[field] = Reading(None, quality.with_status(self._status(got, uuid, field)))
            return None
        raw = got.value
        readings[field] = Reading(float(pick(raw) if pick else raw) * scale, quality)
        return raw

    def _memory(self, uuid: str, r: dict, h: Any) -> None:
        """Used and total from one call: ``_v2`` (reserved memory apart, as nvidia-smi
        shows it) when the driver has it, else v1 (whose "used" includes reserved)."""
        nv, f = self._nv, self._f
        if F.MEMORY_USED in self._unsupported.get(uuid, ()):
            for name in (F.MEMORY_USED, F.MEMORY_TOTAL):
                r[name] = Reading(None, QUALITY[name].with_status("unsupported"))
            return
        quality, got = QUALITY, None
        if self._memory_v2 is not None:
            try:
                got = f.call(nv.nvmlDeviceGetMemoryInfo, h, self._memory_v2)
            except TypeError:  # a binding whose nvmlDeviceGetMemoryInfo takes no version
                got = Got(None, UNSUPPORTED, missing=True)
            if got.missing:
                self._memory_v2, got = None, None  # driver older than _v2
        if got is None:
            got = f.call(nv.nvmlDeviceGetMemoryInfo, h)
            quality = _MEMORY_V1
        if not got.ok:
            status = self._status(got, uuid, F.MEMORY_USED)
            for name in (F.MEMORY_USED, F.MEMORY_TOTAL):
                r[name] = Reading(None, QUALITY[name].with_status(status))
            return
        mem = got.value
        r[F.MEMORY_USED] = Reading(float(mem.used), quality[F.MEMORY_USED])
        r[F.MEMORY_TOTAL] = Reading(float(mem.total), quality[F.MEMORY_TOTAL])
        reserved = getattr(mem, "reserved", None) if quality is QUALITY else None  # _v2 only
        if reserved is not None:
            r["memory_reserved_bytes"] = Reading(float(reserved), QUALITY["memory_reserved_bytes"])

    def _readings(self, ident: DeviceIdentity, h: Any) -> dict[str, Reading]:
        nv, uuid = self._nv, ident.uuid
        r: dict[str, Reading] = {}
        util = self._read(uuid, r, F.UTILIZATION, nv.nvmlDeviceGetUtilizationRates, h,
                          scale=0.01, pick=lambda u: u.gpu)
        if util is not None:
            r[F.MEMORY_UTILIZATION] = Reading(util.memory * 0.01, QUALITY[F.MEMORY_UTILIZATION])
        else:  # same call: same status
            r[F.MEMORY_UTILIZATION] = Reading(None, QUALITY[F.MEMORY_UTILIZATION].with_status(
                r[F.UTILIZATION].quality.status))
        self._memory(uuid, r, h)
        self._read(uuid, r, F.TEMP_CORE, nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        self._read(uuid, r, F.POWER, nv.nvmlDeviceGetPowerUsage, h, scale=1e-3)
        self._read(uuid, r, F.POWER_LIMIT, nv.nvmlDeviceGetEnforcedPowerLimit, h, scale=1e-3)
        self._read(uuid, r, F.ENERGY, nv.nvmlDeviceGetTotalEnergyConsumption, h, scale=1e-3)
        self._read(uuid, r, F.CLOCK_COMPUTE, nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM, scale=1e6)
        self._read(uuid, r, F.CLOCK_MEMORY, nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM, scale=1e6)
        self._read(uuid, r, F.ECC_CORRECTED, nv.nvmlDeviceGetTotalEccErrors, h,
                   nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC)
        self._read(uuid, r, F.ECC_UNCORRECTED, nv.nvmlDeviceGetTotalEccErrors, h,
                   nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC)
        self._read(uuid, r, C.PCIE_GEN, nv.nvmlDeviceGetCurrPcieLinkGeneration, h)
        self._read(uuid, r, C.PCIE_WIDTH, nv.nvmlDeviceGetCurrPcieLinkWidth, h)
        self._dcgm_defaults(uuid, r, h)
        self._static_readings(uuid, r, h)
        self._clock_reasons(uuid, r, h)
        self._topology.discover(uuid, h)  # before the batch: it sizes the per-link fields
        states = self._field_batch(uuid, r, h)
        self._nvlink_states[uuid] = self._nvlink(uuid, r, h, states)
        return r

    def _dcgm_defaults(self, uuid: str, r: dict, h: Any) -> None:
        """Fan, encoder and decoder, PCIe throughput and the power-management limit (GPM's
        sampled values, where the GPU has GPM, replace the codec and PCIe ones)."""
        nv = self._nv
        first = lambda v: v[0]  # noqa: E731 - (utilization, sampling period in us)
        for field, fn, args, scale, pick in (
                ("fan_speed_ratio", "nvmlDeviceGetFanSpeed", (), 0.01, None),
                ("engine_encoder_utilization_ratio", "nvmlDeviceGetEncoderUtilization", (), 0.01, first),
                ("engine_decoder_utilization_ratio", "nvmlDeviceGetDecoderUtilization", (), 0.01, first),
                ("pcie_tx_bytes_per_second", "nvmlDeviceGetPcieThroughput", ("NVML_PCIE_UTIL_TX_BYTES",), 1024.0, None),
                ("pcie_rx_bytes_per_second", "nvmlDeviceGetPcieThroughput", ("NVML_PCIE_UTIL_RX_BYTES",), 1024.0, None),
                ("power_management_limit_watts", "nvmlDeviceGetPowerManagementLimit", (), 1e-3, None)):
            call = getattr(nv, fn, None)
            constants = [getattr(nv, a, None) for a in args]
            if call is None or None in constants:  # a binding without the call: unsupported
                r[field] = Reading(None, QUALITY[field].with_status("unsupported"))
                continue
            self._read(uuid, r, field, call, h, *constants, scale=scale, pick=pick)

    def _static_readings(self, uuid: str, r: dict, h: Any) -> None:
        """Maximum PCIe generation and width: read once per GPU."""
        known = self._static.get(uuid)
        if known is None:
            nv, known = self._nv, {}
            self._read(uuid, known, C.PCIE_GEN_MAX, nv.nvmlDeviceGetMaxPcieLinkGeneration, h)
            self._read(uuid, known, C.PCIE_WIDTH_MAX, nv.nvmlDeviceGetMaxPcieLinkWidth, h)
            if all(x.quality.status != "error" for x in known.values()):
                self._static[uuid] = known  # an error is retried next cycle
        r.update(known)

    def _clock_reasons(self, uuid: str, r: dict, h: Any) -> None:
        """Clock-event reasons: nvmlDeviceGetCurrentClocksEventReasons (R535+), else the
        older ...ClocksThrottleReasons names; a reason the GPU does not support is absent."""
        f = self._f
        fields = [(bit, C.clock_reason_field(name)) for bit, name, _ in C.CLOCK_REASONS]
        status: Optional[str] = "unsupported"
        supported, active, source = 0, 0, ""
        if "clock_reasons" not in self._unsupported.get(uuid, ()):
            for current_fn, supported_fn, name in self._clock_apis():
                cached = self._clock_supported.get(uuid)
                got = f.call(supported_fn, h) if cached is None else Got(cached)
                if got.ok:
                    supported = self._clock_supported[uuid] = int(got.value)
                    got = f.call(current_fn, h)
                if got.missing:
                    self._clock_dead.add(name)  # an older driver: try the older names
                    continue
                if not got.ok:
                    status = self._status(got, uuid, "clock_reasons")
                    break
                status, source, active = None, name, int(got.value)
                break
        for bit, field in fields:
            q = QUALITY[field]
            if status is not None:
                r[field] = Reading(None, q.with_status(status))
            elif not supported & bit:
                r[field] = Reading(None, q.with_status("unsupported"))
            else:
                if source != q.source:
                    q = Quality(source, q.method, q.window_seconds, q.resolution, q.error_bound)
                r[field] = Reading(1.0 if active & bit else 0.0, q)

    def _clock_apis(self) -> list[tuple[Callable, Callable, str]]:
        nv, out = self._nv, []
        for cur, sup in (("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetSupportedClocksEventReasons"),
                         ("nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetSupportedClocksThrottleReasons")):
            if cur not in self._clock_dead and hasattr(nv, cur) and hasattr(nv, sup):
                out.append((getattr(nv, cur), getattr(nv, sup), cur))
        return out

    def _batch_spec(self, uuid: str) -> list[tuple[str, Any]]:
        """(field, field id or (id, link)) of the batched call, built once per GPU."""
        spec = self._specs.get(uuid)
        if spec is not None:
            return spec
        nv, skip = self._nv, self._unsupported.setdefault(uuid, set())
        spec = []
        for field, fid_name in _BATCH:
            fid = getattr(nv, fid_name, None)
            if fid is None:
                skip.add(field)
            elif field not in skip:
                spec.append((field, fid))
        links = self._topology.nvlink_count(uuid)
        for field, fid_name in _NVLINK_BATCH + ((_LINK_STATE, "NVML_FI_DEV_NVLINK_GET_STATE"),):
            fid = getattr(nv, fid_name, None)
            if fid is not None and links and field not in skip:
                spec.extend((field, (fid, link)) for link in range(links))
        self._specs[uuid] = spec
        return spec

    def _field_batch(self, uuid: str, r: dict, h: Any) -> Optional[list[bool]]:
        """The batched nvmlDeviceGetFieldValues call: per-entry errors are per field.
        Returns the NVLink states when the batch carried them."""
        nv = self._nv
        spec = self._batch_spec(uuid)
        skip = self._unsupported.get(uuid, ())
        for field, _ in _BATCH + _NVLINK_BATCH:
            if field in skip:
                r[field] = Reading(None, QUALITY[field].with_status("unsupported"))
        if not spec:
            return None
        got = self._f.call(nv.nvmlDeviceGetFieldValues, h, [fid for _, fid in spec])
        if not got.ok:
            for field, _ in spec:
                if field != _LINK_STATE:
                    r[field] = Reading(None, QUALITY[field].with_status(self._status(got, uuid, field)))
            return None
        values = got.value
        ok, outcome, decode = self._SUCCESS, self._f.outcome, self._decode
        sums: dict[str, float] = {}
        bad: dict[str, str] = {}
        states: list[bool] = []
        for (field, _fid), v in zip(spec, values):
            ret = v.nvmlReturn
            if ret == ok:
                if field is _LINK_STATE:
                    states.append(bool(v.value.uiVal))
                else:
                    sums[field] = sums.get(field, 0.0) + float(getattr(v.value, decode.get(v.valueType, "uiVal")))
                continue
            status = outcome(ret, invalid_is_unsupported=True)
            if status == "lost":
                raise Lost(None)
            bad[field] = status
        for field, status in bad.items():
            if status == "unsupported":
                self._unsupported.setdefault(uuid, set()).add(field)
                self._specs.pop(uuid, None)  # leave it out of the next calls
        for field, total in sums.items():
            if field not in bad:
                r[field] = Reading(total * _FIELD_SCALE.get(field, 1.0), QUALITY[field])
        for field, status in bad.items():
            if field is not _LINK_STATE:
                r[field] = Reading(None, QUALITY[field].with_status(status))
        if _LINK_STATE in bad or not states:
            return None
        return states

    # ------------------------------------------------------------------ processes, NVLink
    def _process_name(self, pid: int) -> Optional[str]:
        if pid not in self._names:
            self._names[pid] = self._optional_text("nvmlSystemGetProcessName", pid)
        return self._names[pid]

    def _nvlink(self, uuid: str, r: dict, h: Any, states: Optional[list[bool]]) -> Optional[list[bool]]:
        """NVLink link counts from the batch's states, else one call per link."""
        if not self._topology.nvlink_count(uuid):
            return None
        if states is None:
            states = self._topology.nvlink_states(uuid, h)
        if states is None:
            return None
        q = QUALITY[C.NVLINK_ACTIVE]
        r[C.NVLINK_ACTIVE] = Reading(float(sum(states)), q)
        r[C.NVLINK_INACTIVE] = Reading(float(len(states) - sum(states)), QUALITY[C.NVLINK_INACTIVE])
        return states

    # ------------------------------------------------------------------ collect
    def collect(self) -> list[DeviceSample]:
        f = self._f
        now = self._clock()
        got = f.attempt(self._nv.nvmlDeviceGetCount)
        if not got.ok:
            raise Unavailable(f"nvmlDeviceGetCount failed: {type(got.error).__name__}: {got.error}")
        count = int(got.value)
        first = self._open_events(count)
        # per index: the parts of a live GPU, or a lost / unreadable one built after the drain
        results: list[Any] = []
        live: list[tuple[DeviceIdentity, Any]] = []
        states: dict[str, list[bool]] = {}
        seen_pids: set[int] = set()
        for index in range(count):
            pinned = self._ids.recall(index=index)
            f.after_loss = pinned is not None and pinned.uuid in self._lost
            try:
                handle = self._handle(index, pinned)
                ident = self._identity(index, handle)
                readings = self._readings(ident, handle)
                self._fabric.read(ident.uuid, handle, now)
                st = self._nvlink_states.get(ident.uuid)
                running = self._procs.running(ident.uuid, handle)
                util, util_q = self._procs.utilization(ident.uuid, handle)
                migs = self._mig.instances(ident, handle)
                mig_samples = [(m, self._mig.readings(m, self._memory_v2)) for m in migs]
            except Lost as e:
                results.append(functools.partial(self._lost_device, index, now, e.args[0] if e.args else None))
                continue
            except Failed as e:
                # cannot even identify this GPU: report it unknown, keep the others
                results.append(functools.partial(self._unreadable, index, now, e.got.error or e))
                continue
            finally:
                f.after_loss = False
            self._lost.discard(ident.uuid)
            if st is not None:
                states[ident.uuid] = st
            live.append((ident, handle))
            seen_pids.update(p.pid for p in running or ())
            results.append((ident, readings, running, util, util_q, mig_samples))
        self._names = {pid: n for pid, n in self._names.items() if pid in seen_pids}
        self._fabric.scan(now)
        self._profile(results, live)
        self._drain_events(first)
        self._ensure_watcher([(i.uuid, h) for i, h in live])
        links = self._topology.links(live, states) if len(live) > 1 else {}
        out: list[DeviceSample] = []
        for item in results:
            if callable(item):
                out.append(item())
                continue
            out.extend(self._build(item, now, links.get(item[0].uuid, ())))
        # a pinned GPU NVML no longer enumerates (the count shrank): lost under its uuid
        for ident in self._ids.missing(d.identity.uuid for d in out):
            out.append(self._lost_device(ident.index, now, None, ident))
        return out

    def _profile(self, results: list, live: list[tuple[DeviceIdentity, Any]]) -> None:
        """The GPM profiling readings of every live GPU and MIG instance, into their readings."""
        if self._gpm is None:
            return
        handles = {ident.uuid: h for ident, h in live}
        targets = [(item[0].uuid, handles[item[0].uuid], item[1],
                    [(m.identity.uuid, m.gpu_instance, r) for m, r in item[5] if m.gpu_instance is not None])
                   for item in results if not callable(item)]
        self._gpm.read(targets)

    def _handle(self, index: int, pinned: Optional[DeviceIdentity]) -> Any:
        """The NVML handle of GPU ``index``. A GPU identified before whose handle can no
        longer be had has fallen off the bus: Lost (its pinned uuid is reported failed)."""
        got = self._f.call(self._nv.nvmlDeviceGetHandleByIndex, index)
        if got.ok:
            return got.value
        if pinned is not None:
            raise Lost(got.error)
        raise Failed(got)

    def _build(self, parts: tuple, now: float, links: tuple) -> list[DeviceSample]:
        ident, readings, running, util, util_q, mig_samples = parts
        found = C.conditions(readings) + self._fabric.conditions(ident.uuid)
        conditions = self._conditions.update(ident.uuid, found, now)
        health = C.health_of(conditions + self._event_reasons(ident.uuid, now))
        by_instance = {(m.gpu_instance, m.compute_instance): m.identity.uuid for m, _ in mig_samples}
        by_gi = {m.gpu_instance: m.identity.uuid for m, _ in mig_samples}
        reported = running is not None
        own: list[RunningProcess] = []
        per_mig: dict[str, list[RunningProcess]] = {m.identity.uuid: [] for m, _ in mig_samples}
        for p in running or ():
            target = by_instance.get((p.gpu_instance, p.compute_instance)) or by_gi.get(p.gpu_instance)
            (per_mig[target] if target else own).append(p)
        gpu = DeviceSample(
            identity=ident, timestamp=now, readings=readings, health=health,
            faults=self._ledger.faults(ident.uuid), links=links, processes_reported=reported,
            processes=tuple(process_samples(ident.uuid, own, util, util_q, self._process_name)))
        out = [gpu]
        for m, r in mig_samples:
            uid = m.identity.uuid
            # an instance cannot be healthier than the GPU it is carved from
            out.append(DeviceSample(
                identity=m.identity, timestamp=now, readings=r, health=health, processes_reported=reported,
                processes=tuple(process_samples(uid, per_mig[uid], util, util_q, self._process_name))))
        return out

    def _placeholder(self, index: int) -> DeviceIdentity:
        return self._ids.recall(index=index) or DeviceIdentity(
            vendor="nvidia", kind="gpu", index=index, uuid=f"nvidia-unidentified-{index}",
            driver_version=self._driver, runtime_version=self._runtime)

    def _lost_device(self, index: int, now: float, why: Optional[BaseException] = None,
                     ident: Optional[DeviceIdentity] = None) -> DeviceSample:
        ident = ident or self._placeholder(index)
        what = "NVML_ERROR_GPU_IS_LOST" if why is None or isinstance(why, self._nv.NVMLError_GpuIsLost) \
            else f"{type(why).__name__}: {why}"
        fault = C.make_fault("gpu-lost", f"GPU {index} ({ident.uuid}) is lost: {what}", "nvml")
        if ident.uuid not in self._lost:  # one event per loss episode, not per poll
            self._lost.add(ident.uuid)
            fault = self._ledger.record(ident.uuid, fault, now)
        else:
            fault = self._ledger.get(ident.uuid, "gpu-lost") or fault
        reasons = (fault,) + tuple(f for f in self._event_reasons(ident.uuid, now) if f.code != "gpu-lost")
        return DeviceSample(identity=ident, timestamp=now, health=Health("failed", reasons),
                            faults=self._ledger.faults(ident.uuid))

    def _unreadable(self, index: int, now: float, e: BaseException) -> DeviceSample:
        ident = self._placeholder(index)
        reason = Fault(code="unreadable", fault_class="unreadable", action="none", severity="info",
                       message=f"GPU {index}: {type(e).__name__}: {e}", first_seen=now, last_seen=now,
                       source="nvml")
        return DeviceSample(identity=ident, timestamp=now, health=Health("unknown", (reason,)),
                            faults=self._ledger.faults(ident.uuid))


@dataclass(frozen=True)
class NvmlSettings(BindingSettings):
    """``collectors.nvml``: ``events`` the XID event thread, ``event_wait_ms`` its wait per
    call, ``event_hold_seconds`` how long an event stays a health reason (default: one
    interval, the window a poll would cover), ``profiling`` NVML GPM where the GPU has it
    (Hopper and later); the ToolSettings keys are nvidia-smi's when it stands in."""

    events: bool = setting(True, v.boolean)
    event_wait_ms: int = setting(1000, integer(1, 60000))
    event_hold_seconds: Optional[float] = setting(None, seconds(86400.0))
    profiling: bool = setting(True, v.boolean)


SETTINGS = NvmlSettings


def _settings(options: CollectorOptions) -> dict[str, Any]:
    s = NvmlSettings.of(options.settings)
    hold = s.event_hold_seconds
    return {"sysfs_root": options.host.sysfs, "wake": options.wake, "events": s.events,
            "event_wait_ms": s.event_wait_ms, "identities": options.identity_memory(NvmlCollector.name),
            "profiling": s.profiling, "interval": options.interval_seconds, "proc_root": options.host.proc,
            "event_hold_seconds": options.interval_seconds if hold is None else hold}


def create(options: CollectorOptions) -> Any:
    """The NVML collector over the real binding, or over the fake when simulating. When
    NVML cannot be used but ``nvidia-smi`` works, the ``nvidia-smi -q -x`` collector
    stands in (its readings say so in their quality source); ``fallback: false`` in the
    collector's settings turns that off."""
    if options.scenario is not None:
        try:  # the fake stands in for NVML but raises pynvml's own error types
            from hetero_exporter.collectors.nvidia.nvml.fake import FakeNvml
        except ImportError as e:
            raise Unavailable(f"simulating NVIDIA GPUs needs nvidia-ml-py ({e}); "
                              "pip install 'hetero-exporter[nvidia]' (or '.[all]')") from None
        # a simulated node has no host process table of its own: the fabric processes are not checked
        return NvmlCollector(FakeNvml(options.scenario, options.clock), options.clock,
                             **{**_settings(options), "proc_root": None})
    try:
        import pynvml
    except ImportError as e:
        return _fallback(options, Unavailable(
            f"nvidia-ml-py is not installed ({e}); pip install 'hetero-exporter[nvidia]'"))
    try:
        return NvmlCollector(pynvml, options.clock, **_settings(options))
    except Unavailable as e:
        return _fallback(options, e)


def _fallback(options: CollectorOptions, why: Unavailable) -> Any:
    return fall_back(options, why, "hetero_exporter.collectors.nvidia.nvidia_smi.collector", "nvidia-smi")
