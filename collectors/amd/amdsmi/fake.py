"""A fake of the ``amdsmi`` surface that collectors/amdsmi.py calls, driven by a scenario.

It reports in amdsmi's own units and shapes (dicts with the library's key names, ``"N/A"``
strings for values the device lacks, activity in percent, power in W, power cap in uW,
energy as an accumulator times a resolution in uJ, clocks in MHz, xGMI traffic in KB) and
raises amdsmi's exception classes, so the real collector's conversions and error paths run.

Exception classes (``binding_types``): when ``import amdsmi`` works they are the real ones.
Without libamd_smi.so the package cannot be imported (its wrapper indexes the loaded library
at import time), so ``amdsmi/amdsmi_exception.py`` of the installed package is loaded from its
file with its ``from . import amdsmi_wrapper`` answered by a stand-in holding the status
constants read as text (not executed) from ``amdsmi_wrapper.py``. The enums the collector uses are
rebuilt the same way from ``amdsmi_interface.py``. Only without the package at all are
equivalent classes with the same names and attributes used.

Scenario hooks (vendor ``amd``):
- values: model fields in base units; ``temperature_edge_celsius`` feeds the EDGE sensor
  (absent on MI300X, as on the real part); ``energy_start_joules`` the counter at t=0;
- device ``unsupported: [field]``: that call raises AMDSMI_STATUS_NOT_SUPPORTED;
- device ``extra``: ``compute_partition`` (SPX|DPX|QPX|CPX), ``memory_partition`` (NPS1|NPS4),
  ``partitions`` (logical GPUs per physical one), ``xgmi`` (bool: the group forms an xGMI hive),
  ``xgmi_link_gbps`` (Gb/s per link), ``xgmi_bytes_per_second`` (traffic to each peer);
- faults: ``ecc`` (``block``: umc|gfx|..., ``uncorrectable``, ``correctable``, ``deferred``
  added from ``at`` on), ``cper`` (``severity``: fatal|non_fatal_uncorrected|non_fatal_corrected),
  ``reset`` (GPU_PRE_RESET and GPU_POST_RESET events at ``at``), ``unresponsive`` (every call on
  that GPU fails with AMDSMI_STATUS_DRM_ERROR from ``at`` until ``until``), ``lost`` (the GPU is
  not among the processor handles from ``at`` until ``until``: fell off the bus);
- ``asic_serial``: the device's simulated unique id (collectors/amd/identity.py), the value the
  rocm-smi fake prints as "Unique ID", so both collectors give the GPU one uuid;
- settings ``amd: {init_error: STATUS_NAME, hang_seconds: N, runtime_version: "6.2.0"}``;
  ``install_root`` writes that ROCm release into a fake host root (``opt/rocm/.info/version``),
  where the collector reads it as on a node.
"""

from __future__ import annotations

import contextlib
import enum
import importlib.util
import io
import os
import re
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

from hetero_exporter.collectors.amd import versions
from hetero_exporter.collectors.amd.fields import VIOLATIONS
from hetero_exporter.collectors.amd.identity import simulated_unique_id
from hetero_exporter.model.scenario import DeviceSpec, Scenario

# Enums the collector reads, by amdsmi class name (rebuilt from the installed package).
ENUMS = ("AmdSmiInitFlags", "AmdSmiTemperatureType", "AmdSmiTemperatureMetric", "AmdSmiClkType",
         "AmdSmiMemoryType", "AmdSmiGpuBlock", "AmdSmiEvtNotificationType", "AmdSmiLinkType")

# Used only where the amdsmi package is not installed at all (values of amdsmi 7.0).
_FALLBACK_CONSTANTS = {
    "AMDSMI_STATUS_SUCCESS": 0, "AMDSMI_STATUS_INVAL": 1, "AMDSMI_STATUS_NOT_SUPPORTED": 2,
    "AMDSMI_STATUS_NOT_YET_IMPLEMENTED": 3, "AMDSMI_STATUS_FAIL_LOAD_MODULE": 4,
    "AMDSMI_STATUS_DRM_ERROR": 6, "AMDSMI_STATUS_API_FAILED": 7, "AMDSMI_STATUS_TIMEOUT": 8,
    "AMDSMI_STATUS_RETRY": 9, "AMDSMI_STATUS_NO_PERM": 10, "AMDSMI_STATUS_IO": 12,
    "AMDSMI_STATUS_INIT_ERROR": 18, "AMDSMI_STATUS_NOT_FOUND": 31, "AMDSMI_STATUS_NOT_INIT": 32,
    "AMDSMI_STATUS_DRIVER_NOT_LOADED": 34, "AMDSMI_STATUS_MORE_DATA": 39, "AMDSMI_STATUS_NO_DATA": 40,
    "AMDSMI_STATUS_NO_DRV": 51,
}
_FALLBACK_ENUMS = {
    "AmdSmiInitFlags": {"INIT_ALL_PROCESSORS": 0xFFFFFFFF, "INIT_AMD_CPUS": 1, "INIT_AMD_GPUS": 2},
    "AmdSmiTemperatureType": {"EDGE": 0, "HOTSPOT": 1, "JUNCTION": 1, "VRAM": 2},
    "AmdSmiTemperatureMetric": {"CURRENT": 0},
    "AmdSmiClkType": {"SYS": 0, "GFX": 0, "DF": 1, "DCEF": 2, "SOC": 3, "MEM": 4},
    "AmdSmiMemoryType": {"VRAM": 0, "VIS_VRAM": 1, "GTT": 2},
    "AmdSmiGpuBlock": {"INVALID": 0, "UMC": 1, "SDMA": 2, "GFX": 4, "MMHUB": 8, "ATHUB": 16,
                       "PCIE_BIF": 32, "HDP": 64, "XGMI_WAFL": 128, "DF": 256, "SMN": 512,
                       "SEM": 1024, "MP0": 2048, "MP1": 4096, "FUSE": 8192, "MCA": 16384,
                       "VCN": 32768, "JPEG": 65536, "IH": 131072, "MPIO": 262144},
    "AmdSmiEvtNotificationType": {"NONE": 0, "VMFAULT": 1, "THERMAL_THROTTLE": 2, "GPU_PRE_RESET": 3,
                                  "GPU_POST_RESET": 4},
    "AmdSmiLinkType": {"AMDSMI_LINK_TYPE_INTERNAL": 0, "AMDSMI_LINK_TYPE_PCIE": 1,
                       "AMDSMI_LINK_TYPE_XGMI": 2, "AMDSMI_LINK_TYPE_NOT_APPLICABLE": 3,
                       "AMDSMI_LINK_TYPE_UNKNOWN": 4},
}
_SHIM = "_hetero_exporter_amdsmi_shim"


# --------------------------------------------------------------------------- binding types


def _package_dir() -> Optional[Path]:
    """Folder of the installed amdsmi package, found without executing it."""
    try:
        spec = importlib.util.find_spec("amdsmi")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


_CONSTANT = re.compile(r"^([A-Za-z_]\w*) = (-?\d+)\s*$", re.M)
_ENUM_CLASS = re.compile(r"^class (\w+)\((?:enum\.)?IntEnum\):\n((?:(?:[ \t]+.*)?\n)*)", re.M)
_ENUM_MEMBER = re.compile(r"^[ \t]+(\w+) = (?:amdsmi_wrapper\.(\w+)|(-?\d+))\b", re.M)


def _int_constants(source: str) -> dict[str, int]:
    """``NAME = <int>`` lines at module level (amdsmi_wrapper's generated enum values). Read
    as text, not executed: executing the wrapper is what fails without the library."""
    return {name: int(value) for name, value in _CONSTANT.findall(source)}


def _enum_members(source: str, constants: dict[str, int]) -> dict[str, dict[str, int]]:
    """``class X(IntEnum): NAME = amdsmi_wrapper.CONST`` bodies, resolved to integers."""
    out: dict[str, dict[str, int]] = {}
    for m in _ENUM_CLASS.finditer(source):
        if m.group(1) not in ENUMS:
            continue
        members = {}
        for name, const, literal in _ENUM_MEMBER.findall(m.group(2)):
            if const in constants:
                members[name] = constants[const]
            elif literal:
                members[name] = int(literal)
        out[m.group(1)] = members
    return out


def _load_exception_module(pkg: Path, constants: dict[str, int]) -> types.ModuleType:
    """amdsmi's own amdsmi_exception.py, its relative import answered by a constants stand-in."""
    name = f"{_SHIM}.amdsmi_exception"
    if name in sys.modules:
        return sys.modules[name]
    wrapper = types.ModuleType(f"{_SHIM}.amdsmi_wrapper")
    wrapper.__dict__.update(constants)
    package = types.ModuleType(_SHIM)
    package.__path__ = []  # a package, so "from . import amdsmi_wrapper" resolves
    vars(package)["amdsmi_wrapper"] = wrapper
    sys.modules[_SHIM] = package
    sys.modules[wrapper.__name__] = wrapper
    spec = importlib.util.spec_from_file_location(name, pkg / "amdsmi_exception.py")
    if spec is None or spec.loader is None:
        raise ImportError("cannot load amdsmi_exception.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def _equivalent_exceptions(constants: dict[str, int]) -> types.ModuleType:
    """Classes with amdsmi's names and attributes, for hosts without the package."""
    mod = types.ModuleType("amdsmi_exception_equivalent")
    names = {v: k for k, v in constants.items() if k.startswith("AMDSMI_STATUS_")}

    class AmdSmiException(Exception):
        """Base smi exception class"""

    class AmdSmiLibraryException(AmdSmiException):
        def __init__(self, err_code):
            err_code = abs(err_code)
            super().__init__(err_code)
            self.err_code = err_code
            self.err_info = names.get(err_code, "AMDSMI_STATUS_UNKNOWN_ERROR")

        def __str__(self):
            return f"Error code:\n\t{self.err_code} | {self.err_info}"

        def get_error_code(self):
            return self.err_code

        def get_error_info(self, detailed=True):
            return self.err_info

    class AmdSmiRetryException(AmdSmiLibraryException):
        def __init__(self):
            super().__init__(constants["AMDSMI_STATUS_RETRY"])

    class AmdSmiTimeoutException(AmdSmiLibraryException):
        def __init__(self):
            super().__init__(constants["AMDSMI_STATUS_TIMEOUT"])

    class AmdSmiParameterException(AmdSmiException):
        def __init__(self, receivedValue, expectedType, msg=None):
            super().__init__(msg)
            self.err_code = None
            self.err_msg = msg or f"Invalid parameter: {type(receivedValue)} (expected {expectedType})"

        def __str__(self):
            return self.err_msg

    for cls in (AmdSmiException, AmdSmiLibraryException, AmdSmiRetryException,
                AmdSmiTimeoutException, AmdSmiParameterException):
        setattr(mod, cls.__name__, cls)
    return mod


class BindingTypes(SimpleNamespace):
    """Exceptions, status constants (``amdsmi_wrapper``) and enums of the amdsmi binding.
    ``origin`` says where the exception classes come from: ``amdsmi`` (the imported package),
    ``amdsmi-source`` (its exception file loaded without the library) or ``equivalent``."""


_TYPES: Optional[BindingTypes] = None
_TYPES_LOCK = threading.Lock()


def binding_types() -> BindingTypes:
    global _TYPES
    with _TYPES_LOCK:
        if _TYPES is None:
            _TYPES = _binding_types()
        return _TYPES


def _binding_types() -> BindingTypes:
    # The real package first: where libamd_smi.so loads, its classes are the ones to raise.
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # its wrapper prints on failure
            import amdsmi  # noqa: PLC0415
        return BindingTypes(origin="amdsmi", exceptions=amdsmi, wrapper=amdsmi.amdsmi_wrapper,
                            enums={n: getattr(amdsmi, n) for n in ENUMS if hasattr(amdsmi, n)})
    except Exception:  # noqa: BLE001 - KeyError('libamd_smi.so'), OSError, ImportError...
        pass
    pkg = _package_dir()
    constants = dict(_FALLBACK_CONSTANTS)
    enum_values = dict(_FALLBACK_ENUMS)
    exceptions: Optional[types.ModuleType] = None
    origin = "equivalent"
    if pkg is not None:
        try:
            constants = _int_constants((pkg / "amdsmi_wrapper.py").read_text(encoding="utf-8"))
            parsed = _enum_members((pkg / "amdsmi_interface.py").read_text(encoding="utf-8"), constants)
            enum_values.update({k: v for k, v in parsed.items() if v})
            exceptions = _load_exception_module(pkg, constants)
            origin = "amdsmi-source"
        except (OSError, ImportError, KeyError, AttributeError):
            constants = dict(_FALLBACK_CONSTANTS)
            exceptions = None
    if exceptions is None:
        exceptions = _equivalent_exceptions(constants)
    wrapper = SimpleNamespace(**constants)
    enums = {name: enum.IntEnum(name, members) for name, members in enum_values.items()}
    return BindingTypes(origin=origin, exceptions=exceptions, wrapper=wrapper, enums=enums)


# --------------------------------------------------------------------------- the fake


class _Handle:
    """A processor handle: one logical GPU (a partition, or the whole GPU in SPX mode).
    ``value`` stands in for the ctypes handle's address (events name devices by it)."""

    __slots__ = ("spec", "partition", "count", "value")

    def __init__(self, spec: DeviceSpec, partition: int, count: int, value: int):
        self.spec = spec
        self.partition = partition
        self.count = count
        self.value = value


# amdsmi call -> model field, so `unsupported: [field]` in a scenario maps to calls.
_CALL_FIELD = {
    "amdsmi_get_power_info": "power_watts",
    "amdsmi_get_power_cap_info": "power_limit_watts",
    "amdsmi_get_energy_count": "energy_joules_total",
    "amdsmi_get_gpu_total_ecc_count": "ecc_uncorrected_total",
    "amdsmi_get_gpu_ecc_count": "ecc_uncorrected_total",
    "amdsmi_get_gpu_ecc_enabled": "ecc_uncorrected_total",
    "amdsmi_get_gpu_process_list": "processes",
    "amdsmi_get_link_metrics": "interconnect",
    "amdsmi_get_gpu_cper_entries": "cper",
    "amdsmi_get_pcie_info": "pcie",
    "amdsmi_get_violation_status": "violations",
}
ENERGY_RESOLUTION_UJ = 15.259  # amdsmi's counter_resolution on MI200/MI300 (15.3 uJ per count)
_CPER_SEVERITIES = ("non_fatal_uncorrected", "fatal", "non_fatal_corrected")


class FakeAmdSmi:
    """Module-like object: ``fake.amdsmi_get_processor_handles()`` etc., plus the exception
    classes, ``amdsmi_wrapper`` status constants and enums of the real package."""

    def __init__(self, scenario: Scenario, clock: Any):
        self._types = binding_types()
        exc = self._types.exceptions
        for name in ("AmdSmiException", "AmdSmiLibraryException", "AmdSmiRetryException",
                     "AmdSmiTimeoutException", "AmdSmiParameterException"):
            setattr(self, name, getattr(exc, name))
        self.amdsmi_wrapper = self._types.wrapper
        for name, cls in self._types.enums.items():
            setattr(self, name, cls)
        self._scenario = scenario
        self._clock = clock
        self._settings = scenario.vendor_settings("amd")
        self._devices = scenario.devices_of("amd")
        self._handles: list[_Handle] = []
        for spec in self._devices:
            n = max(1, int(spec.extra.get("partitions", 1)))
            for k in range(n):
                self._handles.append(_Handle(spec, k, n, 0x1000 + len(self._handles)))
        self._initialized = 0
        self._lock = threading.Lock()
        self._energy: dict[int, tuple[float, float]] = {}  # device index -> (t, joules)
        self._gfx_ns: dict[tuple[int, int], tuple[float, float]] = {}  # (index, pid) -> (t, ns)
        self._events_sent: set[tuple[int, float]] = set()
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"FakeAmdSmi does not implement {name}; add it to collectors/amdsmi_fake.py")

    # ------------------------------------------------------------------ helpers
    def _err(self, status: str) -> BaseException:
        return self.AmdSmiLibraryException(getattr(self.amdsmi_wrapper, f"AMDSMI_STATUS_{status}"))

    def _t(self) -> float:
        return self._clock.t()

    def _dev(self, h: _Handle, call: str) -> tuple[DeviceSpec, float]:
        self.calls += 1
        if self._initialized <= 0:
            raise self._err("NOT_INIT")
        if not isinstance(h, _Handle):
            raise self.AmdSmiParameterException(h, _Handle)
        t = self._t()
        if any(f.kind == "unresponsive" and f.active(t) for f in self._scenario.faults_of("amd", h.spec.index)):
            raise self._err("DRM_ERROR")  # the driver no longer answers for this GPU
        field = _CALL_FIELD.get(call)
        if field is not None and field in h.spec.unsupported:
            raise self._err("NOT_SUPPORTED")
        return h.spec, t

    def _value(self, spec: DeviceSpec, field: str, t: float) -> float:
        v = spec.value(field, t)
        if v is None:
            raise self._err("NOT_SUPPORTED")
        return v

    def _bdf(self, h: _Handle) -> str:
        # partitions of one GPU appear as functions of its PCI device, as amd-smi lists them
        base = h.spec.pci_address[:-1]
        return f"{base}{h.partition}"

    def _ecc(self, spec: DeviceSpec, t: float) -> dict[str, dict[str, int]]:
        """Per-block counts: the scenario's ecc_*_total on UMC plus injected ``ecc`` faults."""
        blocks: dict[str, dict[str, int]] = {}
        corr = spec.value("ecc_corrected_total", t) or 0
        unc = spec.value("ecc_uncorrected_total", t) or 0
        blocks["UMC"] = {"correctable_count": int(corr), "uncorrectable_count": int(unc), "deferred_count": 0}
        for f in self._scenario.faults_of("amd", spec.index):
            if f.kind != "ecc" or not f.active(t):
                continue
            b = blocks.setdefault(str(f.params.get("block", "umc")).upper(),
                                  {"correctable_count": 0, "uncorrectable_count": 0, "deferred_count": 0})
            b["uncorrectable_count"] += int(f.params.get("uncorrectable", 0))
            b["correctable_count"] += int(f.params.get("correctable", 0))
            b["deferred_count"] += int(f.params.get("deferred", 0))
        return blocks

    # ------------------------------------------------------------------ library
    def amdsmi_init(self, flag: Any = None) -> None:
        err = self._settings.get("init_error")
        if err:
            raise self._err(str(err).upper().removeprefix("AMDSMI_STATUS_"))
        self._initialized += 1

    def amdsmi_shut_down(self) -> None:
        if self._initialized <= 0:
            raise self._err("NOT_INIT")
        self._initialized -= 1

    def amdsmi_get_processor_handles(self) -> list:
        if self._initialized <= 0:
            raise self._err("NOT_INIT")
        hang = float(self._settings.get("hang_seconds", 0) or 0)
        if hang:
            time.sleep(hang)
        t = self._t()
        gone = {f.index for f in self._scenario.faults_of("amd") if f.kind == "lost" and f.active(t)}
        return [h for h in self._handles if h.spec.index not in gone]  # fallen off the bus: not listed

    def amdsmi_get_rocm_version(self) -> tuple:  # the binding's own ROCm: the collector does not ask
        """(True, "6.2.0") as amdsmi 6.2+ returns it (librocm-core's getROCmVersion)."""
        return True, str(self._settings.get("runtime_version", "6.2.0"))

    # ------------------------------------------------------------------ identity
    def amdsmi_get_gpu_device_uuid(self, h: _Handle) -> str:
        spec, _ = self._dev(h, "amdsmi_get_gpu_device_uuid")
        if h.count == 1:
            return spec.uuid
        # each partition is its own logical GPU with its own uuid
        return f"{spec.uuid[:-2]}{h.partition:02x}"

    def amdsmi_get_gpu_device_bdf(self, h: _Handle) -> str:
        self._dev(h, "amdsmi_get_gpu_device_bdf")
        return self._bdf(h)

    def amdsmi_get_gpu_asic_info(self, h: _Handle) -> dict:
        spec, _ = self._dev(h, "amdsmi_get_gpu_asic_info")
        market = spec.product.removeprefix("AMD ").removeprefix("Instinct ").strip()
        return {"market_name": market or "N/A", "vendor_id": "0x1002", "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
                "subvendor_id": "0x1002", "device_id": str(spec.extra.get("device_id", "0x74a1")),
                "rev_id": "0x00", "asic_serial": f"0x{simulated_unique_id(spec):016X}",  # rocm-smi's Unique ID
                "oam_id": spec.index, "num_compute_units": int(spec.extra.get("compute_units", 304)) // h.count,
                "target_graphics_version": "gfx942", "subsystem_id": "0x74a1"}

    def amdsmi_get_gpu_board_info(self, h: _Handle) -> dict:
        spec, _ = self._dev(h, "amdsmi_get_gpu_board_info")
        return {"model_number": "102-G30211-00", "product_serial": spec.serial, "fru_id": "N/A",
                "product_name": f"Aqua Vanjaram [{spec.product.removeprefix('AMD ').strip()}]",
                "manufacturer_name": "Advanced Micro Devices, Inc. [AMD/ATI]"}

    def amdsmi_get_gpu_driver_info(self, h: _Handle) -> dict:
        spec, _ = self._dev(h, "amdsmi_get_gpu_driver_info")
        return {"driver_name": "amdgpu", "driver_version": spec.driver_version or "N/A", "driver_date": "2015/01/01 00:00"}

    def amdsmi_get_gpu_vbios_info(self, h: _Handle) -> dict:
        spec, _ = self._dev(h, "amdsmi_get_gpu_vbios_info")
        return {"name": "AMD MI300X", "build_date": "2024/03/01 00:00", "part_number": "113-M3000100-102",
                "version": spec.firmware_version or "N/A"}

    def amdsmi_topo_get_numa_node_number(self, h: _Handle) -> int:
        return self._dev(h, "amdsmi_topo_get_numa_node_number")[0].numa_node

    def amdsmi_get_gpu_kfd_info(self, h: _Handle) -> dict:
        self._dev(h, "amdsmi_get_gpu_kfd_info")
        return {"kfd_id": 40000 + h.value, "node_id": 2 + self._handles.index(h), "current_partition_id": h.partition}

    def amdsmi_get_gpu_compute_partition(self, h: _Handle) -> str:
        spec, _ = self._dev(h, "amdsmi_get_gpu_compute_partition")
        return str(spec.extra.get("compute_partition", "SPX" if h.count == 1 else "CPX"))

    def amdsmi_get_gpu_memory_partition(self, h: _Handle) -> str:
        spec, _ = self._dev(h, "amdsmi_get_gpu_memory_partition")
        return str(spec.extra.get("memory_partition", "NPS1"))

    # ------------------------------------------------------------------ readings
    def amdsmi_get_gpu_activity(self, h: _Handle) -> dict:
        spec, t = self._dev(h, "amdsmi_get_gpu_activity")
        out = {}
        for key, field in (("gfx_activity", "utilization_ratio"), ("umc_activity", "memory_utilization_ratio"),
                           ("mm_activity", "media_utilization_ratio")):
            v = spec.value(field, t)
            out[key] = "N/A" if v is None else int(round(100 * v))
        return out

    def _memory_share(self, h: _Handle) -> float:
        # NPS1: every partition sees the whole HBM; NPSn: each sees its share
        nps = str(h.spec.extra.get("memory_partition", "NPS1")).upper()
        return 1.0 if nps == "NPS1" else 1.0 / h.count

    def amdsmi_get_gpu_memory_total(self, h: _Handle, mem_type: Any) -> int:
        spec, _ = self._dev(h, "amdsmi_get_gpu_memory_total")
        if int(mem_type) != int(self.AmdSmiMemoryType.VRAM):
            raise self._err("NOT_SUPPORTED")
        return int(spec.memory_total_bytes * self._memory_share(h))

    def amdsmi_get_gpu_memory_usage(self, h: _Handle, mem_type: Any) -> int:
        spec, t = self._dev(h, "amdsmi_get_gpu_memory_usage")
        if int(mem_type) != int(self.AmdSmiMemoryType.VRAM):
            raise self._err("NOT_SUPPORTED")
        used = min(spec.memory_total_bytes, self._value(spec, "memory_used_bytes", t))
        return int(used / h.count)

    def amdsmi_get_temp_metric(self, h: _Handle, sensor: Any, metric: Any) -> int:
        spec, t = self._dev(h, "amdsmi_get_temp_metric")
        T = self.AmdSmiTemperatureType
        field = {int(T.EDGE): "temperature_edge_celsius", int(T.HOTSPOT): "temperature_core_celsius",
                 int(T.VRAM): "temperature_memory_celsius"}.get(int(sensor))
        if field is None or int(metric) != int(self.AmdSmiTemperatureMetric.CURRENT):
            raise self._err("NOT_SUPPORTED")
        return int(round(self._value(spec, field, t)))

    def amdsmi_get_power_info(self, h: _Handle) -> dict:
        spec, t = self._dev(h, "amdsmi_get_power_info")
        p = int(round(self._value(spec, "power_watts", t)))
        cap = spec.value("power_limit_watts", t)
        # MI300: current_socket_power; average_socket_power is the MI200-and-earlier field
        return {"socket_power": p, "current_socket_power": p, "average_socket_power": "N/A",
                "gfx_voltage": "N/A", "soc_voltage": "N/A", "mem_voltage": "N/A",
                "power_limit": "N/A" if cap is None else int(cap)}

    def amdsmi_get_power_cap_info(self, h: _Handle) -> dict:
        spec, t = self._dev(h, "amdsmi_get_power_cap_info")
        cap = int(round(self._value(spec, "power_limit_watts", t) * 1e6))  # uW
        return {"power_cap": cap, "default_power_cap": cap, "dpm_cap": 0, "min_power_cap": 0, "max_power_cap": cap}

    def amdsmi_get_energy_count(self, h: _Handle) -> dict:
        """Accumulator in counts of ENERGY_RESOLUTION_UJ: the start value plus the integral of power."""
        spec, t = self._dev(h, "amdsmi_get_energy_count")
        with self._lock:
            t0, e = self._energy.get(spec.index, (0.0, spec.value("energy_start_joules", 0) or 0.0))
            while t0 < t:  # <= 1 s steps: monotone whatever the power signal does
                dt = min(1.0, t - t0)
                e += (spec.value("power_watts", t0 + dt / 2) or 0.0) * dt
                t0 += dt
            self._energy[spec.index] = (max(t0, t), e)
        return {"energy_accumulator": int(e * 1e6 / ENERGY_RESOLUTION_UJ),
                "counter_resolution": ENERGY_RESOLUTION_UJ, "timestamp": int(t * 1e9)}

    def amdsmi_get_clock_info(self, h: _Handle, clock_type: Any) -> dict:
        spec, t = self._dev(h, "amdsmi_get_clock_info")
        C = self.AmdSmiClkType
        field = {int(C.GFX): "clock_compute_hertz", int(C.MEM): "clock_memory_hertz"}.get(int(clock_type))
        if field is None:
            raise self._err("NOT_SUPPORTED")
        mhz = int(round(self._value(spec, field, t) / 1e6))
        return {"clk": mhz, "min_clk": min(mhz, 500), "max_clk": max(mhz, 2100), "clk_locked": False,
                "clk_deep_sleep": 0}

    def amdsmi_get_gpu_ecc_enabled(self, h: _Handle) -> int:
        spec, t = self._dev(h, "amdsmi_get_gpu_ecc_enabled")
        mask = 0
        for name in self._ecc(spec, t):
            mask |= int(getattr(self.AmdSmiGpuBlock, name))
        return mask | int(self.AmdSmiGpuBlock.GFX) | int(self.AmdSmiGpuBlock.SDMA)

    def amdsmi_get_gpu_ecc_count(self, h: _Handle, block: Any) -> dict:
        spec, t = self._dev(h, "amdsmi_get_gpu_ecc_count")
        name = self.AmdSmiGpuBlock(int(block)).name
        return dict(self._ecc(spec, t).get(name, {"correctable_count": 0, "uncorrectable_count": 0,
                                                  "deferred_count": 0}))

    def amdsmi_get_gpu_total_ecc_count(self, h: _Handle) -> dict:
        spec, t = self._dev(h, "amdsmi_get_gpu_total_ecc_count")
        out = {"correctable_count": 0, "uncorrectable_count": 0, "deferred_count": 0}
        for counts in self._ecc(spec, t).values():
            for k in out:
                out[k] += counts[k]
        return out

    def amdsmi_get_violation_status(self, h: _Handle) -> dict:
        """Throttle flags from the device values clock_throttle_<reason> (0/1); "N/A" where absent."""
        spec, t = self._dev(h, "amdsmi_get_violation_status")
        out: dict = {}
        for reason, key in VIOLATIONS:
            v = spec.value(f"clock_throttle_{reason}", t)
            out[key] = "N/A" if v is None else bool(v)
            out[key.replace("active_", "per_")] = "N/A" if v is None else 100.0 * bool(v)
        return out

    def amdsmi_get_pcie_info(self, h: _Handle) -> dict:
        spec, t = self._dev(h, "amdsmi_get_pcie_info")
        replays = int(spec.value("pcie_replay_total", t) or 0)
        return {"pcie_static": {"max_pcie_width": 16, "max_pcie_speed": 32000, "pcie_interface_version": 5,
                                "slot_type": "OAM"},
                "pcie_metric": {"pcie_width": int(spec.value("pcie_link_width", t) or 16), "pcie_speed": 32000,
                                "pcie_bandwidth": 18,
                                "pcie_replay_count": replays, "pcie_l0_to_recovery_count": 0,
                                "pcie_replay_roll_over_count": 0, "pcie_nak_sent_count": 0,
                                "pcie_nak_received_count": 0, "pcie_lc_perf_other_end_recovery_count": 0}}

    # ------------------------------------------------------------------ topology
    def _peers(self, spec: DeviceSpec) -> list[DeviceSpec]:
        if not spec.extra.get("xgmi"):
            return []
        return [d for d in self._devices if d.index != spec.index and d.extra.get("xgmi")]

    def amdsmi_topo_get_link_type(self, src: _Handle, dst: _Handle) -> dict:
        spec, _ = self._dev(src, "amdsmi_topo_get_link_type")
        self._dev(dst, "amdsmi_topo_get_link_type")
        L = self.AmdSmiLinkType
        if dst.spec.index == spec.index:
            return {"hops": 0, "type": int(L.AMDSMI_LINK_TYPE_INTERNAL)}
        if dst.spec in self._peers(spec):
            return {"hops": 1, "type": int(L.AMDSMI_LINK_TYPE_XGMI)}
        return {"hops": 2, "type": int(L.AMDSMI_LINK_TYPE_PCIE)}

    def amdsmi_get_link_metrics(self, h: _Handle) -> dict:
        """Per-peer xGMI links: bit rate and max bandwidth in Gb/s, traffic in KB since load."""
        spec, t = self._dev(h, "amdsmi_get_link_metrics")
        gbps = int(spec.extra.get("xgmi_link_gbps", 512))
        rate = float(spec.extra.get("xgmi_bytes_per_second", 0))
        links = []
        for peer in self._peers(spec):
            kb = int(rate * t / 1024)
            links.append({"bdf": peer.pci_address, "bit_rate": gbps, "max_bandwidth": gbps,
                          "link_type": int(self.AmdSmiLinkType.AMDSMI_LINK_TYPE_XGMI), "read": kb, "write": kb})
        return {"num_links": len(links), "links": links}

    # ------------------------------------------------------------------ processes
    def amdsmi_get_gpu_process_list(self, h: _Handle) -> list:
        spec, t = self._dev(h, "amdsmi_get_gpu_process_list")
        out = []
        for j, p in enumerate(spec.processes):
            if j % h.count != h.partition:  # processes spread over the partitions
                continue
            mem = int(p.memory.at(t))
            util = p.utilization.at(t) if p.utilization is not None else 0.0
            with self._lock:  # gfx engine time in ns, cumulative like fdinfo's drm-engine-gfx
                t0, ns = self._gfx_ns.get((spec.index, p.pid), (0.0, 0.0))
                ns += max(0.0, util) * max(0.0, t - t0) * 1e9
                self._gfx_ns[(spec.index, p.pid)] = (max(t0, t), ns)
            out.append({"name": p.name, "pid": p.pid, "mem": mem,
                        "engine_usage": {"gfx": int(ns), "enc": 0},
                        "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": mem},
                        "cu_occupancy": "N/A"})
        return out

    # ------------------------------------------------------------------ RAS / events
    def amdsmi_get_gpu_cper_entries(self, h: _Handle, severity_mask: int, buffer_size: int = 4 << 20,
                                    cursor: int = 0) -> tuple:
        """(entries by index, new cursor, raw records, status) like amdsmi 6.4+."""
        spec, t = self._dev(h, "amdsmi_get_gpu_cper_entries")
        records = [f for f in sorted(self._scenario.faults_of("amd", spec.index), key=lambda f: f.at)
                   if f.kind == "cper" and f.at <= t]
        entries, data = {}, []
        for n, f in enumerate(records[cursor:]):
            sev = str(f.params.get("severity", "fatal"))
            if sev not in _CPER_SEVERITIES or not severity_mask & (1 << _CPER_SEVERITIES.index(sev)):
                continue
            stamp = time.gmtime(self._clock() - (t - f.at))
            entries[n] = {"error_severity": sev, "notify_type": "MCE" if sev == "fatal" else "CMC",
                          "timestamp": time.strftime("%Y/%m/%d %H:%M:%S", stamp), "signature": b"CPER",
                          "revision": 256, "signature_end": "0xffffffff", "sec_cnt": 1, "record_length": 256,
                          "platform_id": "", "creator_id": "amdgpu", "record_id": f"{spec.index}:{cursor + n}",
                          "flags": 0, "persistence_info": 0, "message": f.message}
            data.append({"bytes": [], "size": 256})
        return entries, len(records), data, self.amdsmi_wrapper.AMDSMI_STATUS_SUCCESS

    def AmdSmiEventReader(self, handle: _Handle, event_types: Any) -> "_FakeEventReader":  # noqa: N802
        self._dev(handle, "AmdSmiEventReader")
        return _FakeEventReader(self, handle, event_types)

    def _pending_events(self, wanted: set[str]) -> list[dict]:
        t = self._t()
        out = []
        with self._lock:
            for h in self._handles:
                if h.partition:
                    continue
                for f in self._scenario.faults_of("amd", h.spec.index):
                    key = (h.spec.index, f.at)
                    if f.kind != "reset" or f.at > t or key in self._events_sent:
                        continue
                    self._events_sent.add(key)
                    for ev in ("GPU_PRE_RESET", "GPU_POST_RESET"):
                        if ev in wanted:
                            out.append({"processor_handle": h, "event": ev,
                                        "message": f.message or f"reset of GPU {h.spec.index} ({ev.lower()})"})
        return out


class _FakeEventReader:
    """amdsmi.AmdSmiEventReader: ``read(timeout_ms, num_elem)`` returns events of every GPU."""

    def __init__(self, fake: FakeAmdSmi, handle: _Handle, event_types: Any):
        self._fake = fake
        self.processor_handle = handle
        self._wanted = {fake.AmdSmiEvtNotificationType(int(e)).name for e in event_types}
        self._stopped = False

    def read(self, timestamp: int, num_elem: int = 10) -> list:
        if self._stopped:
            raise self._fake._err("NOT_INIT")
        return self._fake._pending_events(self._wanted)[:num_elem]

    def stop(self) -> None:
        self._stopped = True


def install_root(scenario: Scenario, workdir: Optional[str]) -> str:
    """A fake host root holding the simulated node's ROCm install (``opt/rocm/.info/version``
    with the ``amd.runtime_version`` setting, default 6.2.0); returns its path."""
    root = os.path.join(workdir or tempfile.mkdtemp(prefix="hetero-amdsmi-"), "fake-amdsmi-root")
    version = str(dict(scenario.vendor_settings("amd")).get("runtime_version") or "6.2.0")
    versions.write_fake(root, version)
    return root
