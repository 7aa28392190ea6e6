"""A fake of the pynvml surface that collectors/nvml.py calls, driven by a scenario.

It raises pynvml's real exception classes (``pynvml.NVMLError(code)`` builds the matching
subclass), returns objects with the attribute names of pynvml's ctypes structures, and
reports in NVML's units (mW, mJ, MHz, percent), so the real collector's conversions are
exercised. Every function the collector calls must exist here: a missing one is a test
failure, not a silent skip.

Scenario hooks (vendor ``nvidia``):
- device ``unsupported: [field, ...]``: the matching call raises NVMLError_NotSupported;
- fault kinds ``lost`` (and ``xid`` code 79, "fallen off the bus"): every call on that GPU
  raises NVMLError_GpuIsLost until a later ``reset`` fault on the same index;
- settings ``nvidia: {init_error: DriverNotLoaded|LibraryNotFound|..., hang_seconds: N}``:
  nvmlInit fails with that error; device enumeration sleeps N seconds (timeout tests).
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any, Optional

import pynvml

from hetero_exporter.simulate.scenario import DeviceSpec, Scenario

# Model field each NVML call reads, so `unsupported: [field]` in a scenario maps to calls.
_CALL_FIELD = {
    "nvmlDeviceGetUtilizationRates": "utilization_ratio",
    "nvmlDeviceGetMemoryInfo": "memory_used_bytes",
    "nvmlDeviceGetTemperature": "temperature_core_celsius",
    "nvmlDeviceGetPowerUsage": "power_watts",
    "nvmlDeviceGetEnforcedPowerLimit": "power_limit_watts",
    "nvmlDeviceGetTotalEnergyConsumption": "energy_joules_total",
    "nvmlDeviceGetTotalEccErrors": "ecc_corrected_total",
}


def _err(name: str) -> pynvml.NVMLError:
    """pynvml's real exception for an error name like 'NotSupported' or 'GpuIsLost'."""
    cls = getattr(pynvml, f"NVMLError_{name}", None)
    if cls is None:
        raise ValueError(f"pynvml has no NVMLError_{name}")
    return cls()


class _Handle:
    __slots__ = ("spec",)

    def __init__(self, spec: DeviceSpec):
        self.spec = spec


class FakeNvml:
    """Module-like object: ``fake.nvmlDeviceGetCount()`` etc., plus pynvml's constants."""

    NVMLError = pynvml.NVMLError

    def __init__(self, scenario: Scenario, clock: Any):
        self._scenario = scenario
        self._clock = clock
        self._devices = scenario.devices_of("nvidia")
        self._handles = [_Handle(d) for d in self._devices]
        self._settings = scenario.vendor_settings("nvidia")
        self._initialized = 0
        self._energy: dict[int, tuple[float, float]] = {}  # index -> (t, joules)
        self._lock = threading.Lock()
        self.calls = 0  # for benchmarks: NVML calls made

    def __getattr__(self, name: str) -> Any:
        # constants (NVML_TEMPERATURE_GPU, NVML_FI_...) come from the real binding
        if name.startswith("NVML") and not name.startswith("nvml"):
            return getattr(pynvml, name)
        raise AttributeError(f"FakeNvml does not implement {name}; add it to collectors/nvml_fake.py")

    # ------------------------------------------------------------------ helpers
    def _t(self) -> float:
        return self._clock.t()

    def _check(self) -> None:
        self.calls += 1
        if self._initialized <= 0:
            raise _err("Uninitialized")

    def _lost(self, index: int, t: float) -> bool:
        lost_since: Optional[float] = None
        for f in sorted(self._scenario.faults_of("nvidia", index), key=lambda f: f.at):
            if f.at > t:
                break
            if f.kind == "lost" or (f.kind == "xid" and f.code == "79"):
                if f.until is None or t < f.until:
                    lost_since = f.at
            elif f.kind == "reset":
                lost_since = None
        return lost_since is not None

    def _dev(self, handle: _Handle, call: str) -> tuple[DeviceSpec, float]:
        self._check()
        t = self._t()
        spec = handle.spec
        if self._lost(spec.index, t):
            raise _err("GpuIsLost")
        field = _CALL_FIELD.get(call)
        if field is not None and field in spec.unsupported:
            raise _err("NotSupported")
        return spec, t

    def _value(self, spec: DeviceSpec, field: str, t: float) -> float:
        v = spec.value(field, t)
        if v is None:
            raise _err("NotSupported")
        return v

    # ------------------------------------------------------------------ library
    def nvmlInit(self) -> None:
        err = self._settings.get("init_error")
        if err:
            raise _err(str(err))
        self._initialized += 1

    def nvmlShutdown(self) -> None:
        self._check()
        self._initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check()
        return self._devices[0].driver_version if self._devices else "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        hang = float(self._settings.get("hang_seconds", 0) or 0)
        if hang:
            time.sleep(hang)
        return len(self._handles)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check()
        if not 0 <= index < len(self._handles):
            raise _err("InvalidArgument")
        return self._handles[index]

    # ------------------------------------------------------------------ identity
    def nvmlDeviceGetUUID(self, h: _Handle) -> str:
        return self._dev(h, "nvmlDeviceGetUUID")[0].uuid

    def nvmlDeviceGetName(self, h: _Handle) -> str:
        return self._dev(h, "nvmlDeviceGetName")[0].product

    def nvmlDeviceGetSerial(self, h: _Handle) -> str:
        return self._dev(h, "nvmlDeviceGetSerial")[0].serial

    def nvmlDeviceGetPciInfo(self, h: _Handle) -> SimpleNamespace:
        spec, _ = self._dev(h, "nvmlDeviceGetPciInfo")
        domain, rest = spec.pci_address.split(":", 1)
        # NVML prints an 8-digit domain: "00000000:18:00.0"
        bus_id = f"{int(domain, 16):08X}:{rest.upper()}"
        bus = int(rest.split(":")[0], 16)
        return SimpleNamespace(busId=bus_id, busIdLegacy=bus_id[4:], domain=int(domain, 16), bus=bus,
                               device=0, pciDeviceId=0x233010DE, pciSubSystemId=0x16C110DE)

    def nvmlDeviceGetNumaNodeId(self, h: _Handle) -> int:
        return self._dev(h, "nvmlDeviceGetNumaNodeId")[0].numa_node

    def nvmlDeviceGetInforomImageVersion(self, h: _Handle) -> str:
        spec, _ = self._dev(h, "nvmlDeviceGetInforomImageVersion")
        if not spec.firmware_version:
            raise _err("NotSupported")
        return spec.firmware_version

    # ------------------------------------------------------------------ readings
    def nvmlDeviceGetUtilizationRates(self, h: _Handle) -> SimpleNamespace:
        spec, t = self._dev(h, "nvmlDeviceGetUtilizationRates")
        gpu = round(100 * self._value(spec, "utilization_ratio", t))
        mem = spec.value("memory_utilization_ratio", t)
        return SimpleNamespace(gpu=int(gpu), memory=int(round(100 * mem)) if mem is not None else 0)

    def nvmlDeviceGetMemoryInfo(self, h: _Handle, version: Any = None) -> SimpleNamespace:
        spec, t = self._dev(h, "nvmlDeviceGetMemoryInfo")
        total = int(spec.memory_total_bytes)
        used = int(min(total, self._value(spec, "memory_used_bytes", t)))
        return SimpleNamespace(total=total, used=used, free=total - used, reserved=0)

    def nvmlDeviceGetTemperature(self, h: _Handle, sensor: int) -> int:
        spec, t = self._dev(h, "nvmlDeviceGetTemperature")
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _err("InvalidArgument")
        return int(round(self._value(spec, "temperature_core_celsius", t)))

    def nvmlDeviceGetFieldValues(self, h: _Handle, field_ids: list) -> list:
        spec, t = self._dev(h, "nvmlDeviceGetFieldValues")
        out = []
        for fid in field_ids:
            fid = fid[0] if isinstance(fid, tuple) else fid
            value, ret = 0, pynvml.NVML_SUCCESS
            if fid == pynvml.NVML_FI_DEV_MEMORY_TEMP:
                v = spec.value("temperature_memory_celsius", t)
                if v is None:
                    ret = pynvml.NVML_ERROR_NOT_SUPPORTED
                else:
                    value = int(round(v))
            else:
                ret = pynvml.NVML_ERROR_NOT_SUPPORTED
            out.append(SimpleNamespace(
                fieldId=fid, scopeId=0, timestamp=int(self._clock() * 1e6), latencyUsec=0,
                valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, nvmlReturn=ret,
                value=SimpleNamespace(uiVal=value, ulVal=value, ullVal=value, dVal=float(value),
                                      sllVal=value, siVal=value, usVal=value)))
        return out

    def nvmlDeviceGetPowerUsage(self, h: _Handle) -> int:
        spec, t = self._dev(h, "nvmlDeviceGetPowerUsage")
        return int(round(1000 * self._value(spec, "power_watts", t)))

    def nvmlDeviceGetEnforcedPowerLimit(self, h: _Handle) -> int:
        spec, t = self._dev(h, "nvmlDeviceGetEnforcedPowerLimit")
        return int(round(1000 * self._value(spec, "power_limit_watts", t)))

    def nvmlDeviceGetTotalEnergyConsumption(self, h: _Handle) -> int:
        """mJ since driver load: the scenario's start value plus the integral of power."""
        spec, t = self._dev(h, "nvmlDeviceGetTotalEnergyConsumption")
        with self._lock:
            t0, e = self._energy.get(spec.index, (0.0, spec.value("energy_start_joules", 0) or 0.0))
            step = 1.0
            while t0 < t:  # integrate in <= 1 s steps; monotone whatever the power signal
                dt = min(step, t - t0)
                e += (spec.value("power_watts", t0 + dt / 2) or 0.0) * dt
                t0 += dt
            self._energy[spec.index] = (max(t0, t), e)
        return int(e * 1000)

    def nvmlDeviceGetClockInfo(self, h: _Handle, clock_type: int) -> int:
        field = {pynvml.NVML_CLOCK_SM: "clock_compute_hertz",
                 pynvml.NVML_CLOCK_GRAPHICS: "clock_compute_hertz",
                 pynvml.NVML_CLOCK_MEM: "clock_memory_hertz"}.get(clock_type)
        spec, t = self._dev(h, "nvmlDeviceGetClockInfo")
        if field is None or field in spec.unsupported:
            raise _err("NotSupported")
        return int(round(self._value(spec, field, t) / 1e6))

    def nvmlDeviceGetTotalEccErrors(self, h: _Handle, error_type: int, counter_type: int) -> int:
        spec, t = self._dev(h, "nvmlDeviceGetTotalEccErrors")
        field = ("ecc_corrected_total" if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
                 else "ecc_uncorrected_total")
        if field in spec.unsupported:
            raise _err("NotSupported")
        return int(self._value(spec, field, t))
