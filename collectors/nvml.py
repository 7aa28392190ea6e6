"""NVIDIA GPUs through NVML (nvidia-ml-py, ``import pynvml``).

Thin I/O over the binding: each reading is one NVML call, converted to base units and
tagged with the quality declared once in ``QUALITY``. Error mapping:
- NVMLError_NotSupported -> the field is absent, status ``unsupported`` (and not asked
  again for that GPU: support does not change while the driver is loaded);
- NVMLError_GpuIsLost -> that GPU is reported ``failed`` with a ``gpu-lost`` fault, the
  other GPUs are read normally;
- any other NVML error on one field -> that field is absent with status ``error``;
- library missing / driver not loaded / nvmlInit failing -> ``Unavailable``.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Optional

from hetero_exporter import fields as F
from hetero_exporter import profiles
from hetero_exporter.collector_api import CollectorOptions, Unavailable
from hetero_exporter.fault_ledger import FaultLedger
from hetero_exporter.model import (DeviceIdentity, DeviceSample, Fault, Health, Quality,
                                   Reading)

log = logging.getLogger(__name__)

# Static quality of each field: source (the NVML call), method, window, resolution and
# relative error bound where NVIDIA documents one.
QUALITY: dict[str, Quality] = {
    # "percent of time over the past sample period (1/6 s .. 1 s, product dependent)"
    F.UTILIZATION: Quality("nvmlDeviceGetUtilizationRates.gpu", "sampled", 1.0, 0.01),
    F.MEMORY_UTILIZATION: Quality("nvmlDeviceGetUtilizationRates.memory", "sampled", 1.0, 0.01),
    F.MEMORY_USED: Quality("nvmlDeviceGetMemoryInfo.used", "measured", None, 1.0),
    F.MEMORY_TOTAL: Quality("nvmlDeviceGetMemoryInfo.total", "measured", None, 1.0),
    F.TEMP_CORE: Quality("nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)", "measured", None, 1.0),
    F.TEMP_MEMORY: Quality("nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)", "measured", None, 1.0),
    # NVML: power "accurate to within +/- 5% of current power draw"; averaged over 1 s on
    # Ampere and later
    F.POWER: Quality("nvmlDeviceGetPowerUsage", "sampled", 1.0, 0.001, 0.05),
    F.POWER_LIMIT: Quality("nvmlDeviceGetEnforcedPowerLimit", "measured", None, 0.001),
    F.ENERGY: Quality("nvmlDeviceGetTotalEnergyConsumption", "measured", None, 0.001),
    F.CLOCK_COMPUTE: Quality("nvmlDeviceGetClockInfo(NVML_CLOCK_SM)", "measured", None, 1e6),
    F.CLOCK_MEMORY: Quality("nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)", "measured", None, 1e6),
    F.ECC_CORRECTED: Quality("nvmlDeviceGetTotalEccErrors(CORRECTED, AGGREGATE)", "measured", None, 1.0),
    F.ECC_UNCORRECTED: Quality("nvmlDeviceGetTotalEccErrors(UNCORRECTED, AGGREGATE)", "measured", None, 1.0),
}

# nvmlInit errors that mean "no usable NVIDIA stack here" rather than a bug
_UNAVAILABLE_ERRORS = ("LibraryNotFound", "DriverNotLoaded", "NoPermission", "LibRmVersionMismatch",
                       "FunctionNotFound", "Unknown", "OperatingSystem")


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def normalize_bus_id(bus_id: Any) -> str:
    """NVML's '00000000:18:00.0' -> '0000:18:00.0' (lower case, 4-digit domain)."""
    s = _text(bus_id).strip().lower()
    domain, _, rest = s.partition(":")
    if rest and len(domain) > 4:
        domain = domain[-4:]
    return f"{domain}:{rest}" if rest else s


class _Lost(Exception):
    """Raised inside one GPU's read when NVML says the GPU is lost."""


class NvmlCollector:
    name = "nvml"
    vendor = "nvidia"

    def __init__(self, nvml: Any, clock: Callable[[], float], sysfs_root: str = "/sys"):
        self._nv = nvml
        self._clock = clock
        self._sysfs = sysfs_root
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            raise Unavailable(f"nvmlInit failed: {type(e).__name__}: {e}") from None
        self._driver = self._call_optional(nvml.nvmlSystemGetDriverVersion)
        self._identities: dict[int, DeviceIdentity] = {}  # index -> identity (static)
        self._unsupported: dict[str, set[str]] = {}  # uuid -> fields NVML does not support
        self._ledger = FaultLedger()
        self._lost: set[str] = set()  # uuids currently lost (a new loss episode counts once)

    # ------------------------------------------------------------------ plumbing
    def _is(self, e: BaseException, name: str) -> bool:
        return isinstance(e, getattr(self._nv, f"NVMLError_{name}"))

    def _call_optional(self, fn: Callable, *args: Any) -> Optional[str]:
        try:
            return _text(fn(*args))
        except self._nv.NVMLError:
            return None

    def close(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass

    # ------------------------------------------------------------------ identity
    def _identity(self, index: int, handle: Any) -> DeviceIdentity:
        known = self._identities.get(index)
        if known is not None:
            return known
        nv = self._nv
        uuid = _text(nv.nvmlDeviceGetUUID(handle))
        name = _text(nv.nvmlDeviceGetName(handle))
        pci = normalize_bus_id(nv.nvmlDeviceGetPciInfo(handle).busId)
        numa: Optional[int]
        try:
            numa = int(nv.nvmlDeviceGetNumaNodeId(handle))
        except (nv.NVMLError, AttributeError):
            numa = self._sysfs_numa(pci)
        if numa is not None and numa < 0:
            numa = None
        ident = DeviceIdentity(
            vendor="nvidia", kind="gpu", index=index, uuid=uuid,
            model=profiles.normalize_model("nvidia", name), pci_address=pci, numa_node=numa,
            driver_version=self._driver,
            firmware_version=self._call_optional(nv.nvmlDeviceGetInforomImageVersion, handle),
            name=name, serial=self._call_optional(nv.nvmlDeviceGetSerial, handle))
        self._identities[index] = ident
        return ident

    def _sysfs_numa(self, pci: str) -> Optional[int]:
        try:
            with open(os.path.join(self._sysfs, "bus/pci/devices", pci, "numa_node")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    # ------------------------------------------------------------------ readings
    def _read(self, uuid: str, readings: dict, field: str, fn: Callable, *args: Any,
              scale: float = 1.0, pick: Optional[Callable[[Any], Any]] = None) -> Any:
        """One NVML call -> readings[field] in base units; returns the raw result or None."""
        unsupported = self._unsupported.setdefault(uuid, set())
        quality = QUALITY[field]
        if field in unsupported:
            readings[field] = Reading(None, quality.with_status("unsupported"))
            return None
        try:
            raw = fn(*args)
            value = pick(raw) if pick else raw  # pick may raise too (field-value errors)
        except self._nv.NVMLError as e:
            if self._is(e, "GpuIsLost"):
                raise _Lost() from None
            if self._is(e, "NotSupported"):
                unsupported.add(field)
                readings[field] = Reading(None, quality.with_status("unsupported"))
            else:
                readings[field] = Reading(None, quality.with_status("error"))
            return None
        readings[field] = Reading(float(value) * scale, quality)
        return raw

    def _readings(self, ident: DeviceIdentity, h: Any) -> dict:
        nv, uuid, r = self._nv, ident.uuid, {}
        util = self._read(uuid, r, F.UTILIZATION, nv.nvmlDeviceGetUtilizationRates, h,
                          scale=0.01, pick=lambda u: u.gpu)
        if util is not None:
            r[F.MEMORY_UTILIZATION] = Reading(util.memory * 0.01, QUALITY[F.MEMORY_UTILIZATION])
        else:  # same call: same status
            r[F.MEMORY_UTILIZATION] = Reading(None, QUALITY[F.MEMORY_UTILIZATION].with_status(
                r[F.UTILIZATION].quality.status))
        mem = self._read(uuid, r, F.MEMORY_USED, nv.nvmlDeviceGetMemoryInfo, h, pick=lambda m: m.used)
        if mem is not None:
            r[F.MEMORY_TOTAL] = Reading(float(mem.total), QUALITY[F.MEMORY_TOTAL])
        self._read(uuid, r, F.TEMP_CORE, nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        self._read(uuid, r, F.TEMP_MEMORY, nv.nvmlDeviceGetFieldValues, h, [nv.NVML_FI_DEV_MEMORY_TEMP],
                   pick=self._field_value)
        self._read(uuid, r, F.POWER, nv.nvmlDeviceGetPowerUsage, h, scale=1e-3)
        self._read(uuid, r, F.POWER_LIMIT, nv.nvmlDeviceGetEnforcedPowerLimit, h, scale=1e-3)
        self._read(uuid, r, F.ENERGY, nv.nvmlDeviceGetTotalEnergyConsumption, h, scale=1e-3)
        self._read(uuid, r, F.CLOCK_COMPUTE, nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM, scale=1e6)
        self._read(uuid, r, F.CLOCK_MEMORY, nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM, scale=1e6)
        self._read(uuid, r, F.ECC_CORRECTED, nv.nvmlDeviceGetTotalEccErrors, h,
                   nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC)
        self._read(uuid, r, F.ECC_UNCORRECTED, nv.nvmlDeviceGetTotalEccErrors, h,
                   nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC)
        return r

    def _field_value(self, values: Any) -> float:
        """First entry of an nvmlDeviceGetFieldValues result; raises NotSupported through
        the binding's own error type when NVML returned an error for it."""
        v = values[0]
        if v.nvmlReturn != self._nv.NVML_SUCCESS:
            raise self._nv.NVMLError(v.nvmlReturn)
        vt = v.valueType
        nv = self._nv
        if vt == nv.NVML_VALUE_TYPE_DOUBLE:
            return v.value.dVal
        if vt == nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
            return v.value.ullVal
        if vt == nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
            return v.value.sllVal
        if vt == nv.NVML_VALUE_TYPE_UNSIGNED_LONG:
            return v.value.ulVal
        return v.value.uiVal

    # ------------------------------------------------------------------ collect
    def collect(self) -> list[DeviceSample]:
        nv = self._nv
        now = self._clock()
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as e:
            raise Unavailable(f"nvmlDeviceGetCount failed: {type(e).__name__}: {e}") from None
        out = []
        for index in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                ident = self._identity(index, handle)
                readings = self._readings(ident, handle)
            except _Lost:
                out.append(self._lost_device(index, now))
                continue
            except nv.NVMLError as e:
                if self._is(e, "GpuIsLost"):
                    out.append(self._lost_device(index, now))
                    continue
                # cannot even identify this GPU: report it unknown, keep the others
                out.append(self._unreadable(index, now, e))
                continue
            self._lost.discard(ident.uuid)
            out.append(DeviceSample(identity=ident, timestamp=now, readings=readings,
                                    faults=self._ledger.faults(ident.uuid)))
        return out

    def _placeholder(self, index: int) -> DeviceIdentity:
        return self._identities.get(index) or DeviceIdentity(
            vendor="nvidia", kind="gpu", index=index, uuid=f"nvidia-unidentified-{index}",
            driver_version=self._driver)

    def _lost_device(self, index: int, now: float) -> DeviceSample:
        ident = self._placeholder(index)
        fault = Fault(code="gpu-lost", fault_class="device-lost", action="reset-device",
                      severity="critical", source="nvml",
                      message=f"GPU {index} ({ident.uuid}) is lost: NVML_ERROR_GPU_IS_LOST")
        if ident.uuid not in self._lost:  # one event per loss episode, not per poll
            self._lost.add(ident.uuid)
            fault = self._ledger.record(ident.uuid, fault, now)
        else:
            fault = self._ledger.get(ident.uuid, "gpu-lost") or fault
        return DeviceSample(identity=ident, timestamp=now, health=Health("failed", (fault,)),
                            faults=self._ledger.faults(ident.uuid))

    def _unreadable(self, index: int, now: float, e: BaseException) -> DeviceSample:
        ident = self._placeholder(index)
        reason = Fault(code="unreadable", fault_class="unreadable", action="none", severity="info",
                       message=f"GPU {index}: {type(e).__name__}: {e}", first_seen=now, last_seen=now,
                       source="nvml")
        return DeviceSample(identity=ident, timestamp=now, health=Health("unknown", (reason,)))


def create(options: CollectorOptions) -> NvmlCollector:
    """The NVML collector over the real binding, or over the fake when simulating."""
    if options.scenario is not None:
        from hetero_exporter.collectors.nvml_fake import FakeNvml
        return NvmlCollector(FakeNvml(options.scenario, options.clock), options.clock,
                             sysfs_root=options.settings.get("sysfs_root", "/sys"))
    try:
        import pynvml
    except ImportError as e:
        raise Unavailable(f"nvidia-ml-py is not installed ({e}); pip install 'hetero-exporter[nvidia]'") from None
    return NvmlCollector(pynvml, options.clock, sysfs_root=options.settings.get("sysfs_root", "/sys"))
