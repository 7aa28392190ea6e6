"""A fake of the pynvml surface that nvml/collector.py calls, driven by a scenario.

It raises pynvml's real exception classes (``pynvml.NVMLError(code)`` builds the matching
subclass), returns objects with the attribute names of pynvml's ctypes structures, and
reports in NVML's units (mW, mJ, MHz, percent, KiB), so the real collector's conversions
are exercised. Every function the collector calls must exist here: a missing one is a test
failure, not a silent skip. It is kept cheap (dictionary lookups, no per-call allocation
beyond the result) so benchmarks measure the collector, not the fake.

Scenario hooks (vendor ``nvidia``):
- device ``values``: the model fields of nvml/collector.py and nvidia/common.py in base
  units, plus ``memory_reserved_bytes``, ``clock_event_reasons`` (NVML bit mask) and
  ``nvlink_rx_bytes_per_second`` / ``nvlink_tx_bytes_per_second`` (mean rates: the KiB
  counters grow at rate(0) x t, split evenly over the links). A value not given is
  NotSupported.
- device ``unsupported: [field, ...]``: the call reading that field raises NotSupported;
  also ``events``, ``processes``, ``process_utilization``, ``nvlink``, ``mig``,
  ``clock_reasons``, ``topology``, ``pcie``.
- device ``extra``: ``nvlink_links`` (count), ``nvlink_peer`` (``nvswitch`` default, or
  ``mesh``: link i goes to the (i mod n-1)-th other GPU), ``nvlink_down`` (link ids),
  ``nvlink_speed_mbps`` (default 25781), ``pcie_switch_group`` (GPUs per PCIe switch,
  default 2), ``graphics_pids`` (pids listed as graphics processes), ``mig``: list of
  ``{profile: 3g.40gb, memory: 40GiB, used: 1GiB, gi: 2, ci: 0, pids: [..]}`` (MIG on).
- fault kinds: ``lost`` (and ``xid`` code 79, "fallen off the bus"): every call on that GPU
  raises NVMLError_GpuIsLost until a later ``reset`` on the same index (param
  ``handle_error: Unknown|GpuIsLost|...``: nvmlDeviceGetHandleByIndex fails too, with that
  error, as drivers do once the GPU is off the bus; an ``xid`` 79 with ``lost: false`` is the
  event alone: a critical code from a GPU that goes on answering); ``xid`` (code = the XID)
  and ``ecc-dbe``, ``sbe-storm``, ``dram-retirement``, ``dram-retirement-failure``,
  ``poison``, ``poison-fatal``, ``gpu-unavailable``, ``mig-change``, ``recovery`` (code =
  NVML recovery action number or name such as ``node-reboot``; the recovery field holds it
  from ``at`` to ``until``) are delivered once to each event set created before ``at``, by
  nvmlEventSetWait, when the scenario clock passes ``at``; ``nvlink-down`` (param ``link``) takes a link down from ``at`` to ``until``.
- GPM (profiling, nvml/gpm.py): a device supports it when its product is Hopper or later
  (H100, H200, H20, H800, GH200, B100, B200, GB200) unless ``unsupported: [gpm]``, or as
  ``extra: {gpm: true|false}`` says. Its metrics are the device ``values`` of the GPM fields
  (``engine_compute_utilization_ratio``, ``sm_occupancy_ratio``, ``engine_tensor_utilization_ratio``,
  ``pcie_rx_bytes_per_second``, ... nvml/gpm.py FIELDS; absent: NotSupported per metric), at the
  second sample's time; a MIG instance's are its ``mig`` entry's ``values``, else its GPU's.
  ``extra: {nvdec: N, nvjpg: N}`` engines answer (default 7); fault kind ``gpm-error`` (code: an
  NVML error name, default InUse) fails nvmlGpmSampleGet / nvmlGpmMigSampleGet from ``at`` to
  ``until``. ``gpm_held`` is the set of samples allocated and not freed.
- the rest of dcgm-exporter's default set: ``fan_speed_ratio``, ``engine_encoder_utilization_ratio``,
  ``engine_decoder_utilization_ratio``, ``pcie_rx/tx_bytes_per_second`` (nvmlDeviceGetPcieThroughput, KB/s)
  and ``power_management_limit_watts`` (default: the power limit) from the device values.
- settings ``nvidia``: ``init_error: DriverNotLoaded|LibraryNotFound|...`` (nvmlInit fails),
  ``cuda_driver_version: 12080`` (nvmlSystemGetCudaDriverVersion[_v2]; default 12080, i.e.
  CUDA 12.8; ``none``: the call is NotSupported),
  ``hang_seconds: N`` (enumeration sleeps), ``process_api: v3|v2|v1`` (newest running-process
  call the "driver" has), ``process_utilization_api: info|samples|none``,
  ``clock_reasons_api: event|throttle``, ``memory_api: v2|v1``, ``nvlink_state_field: false``
  (no NVML_FI_DEV_NVLINK_GET_STATE: link states by nvmlDeviceGetNvLinkState only).
- NVSwitch fabric (nvml/fabric.py): device ``extra: {fabric: {state: completed, status: Success}}``
  (state ``not-supported`` (the default: no fabric), ``not-started``, ``in-progress``,
  ``completed``; status an NVML error name, or Success) answers nvmlDeviceGetGpuFabricInfoV and
  nvmlDeviceGetGpuFabricInfo; fault kind ``fabric`` (code: the status name, default Unknown;
  param ``state``, default completed) holds from ``at`` to ``until``; settings ``nvidia:
  fabric_api: legacy`` (no V call: FunctionNotFound) or ``none`` (neither).
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any, Optional

import pynvml

from hetero_exporter.collectors.nvidia.common import CLOCK_REASONS
from hetero_exporter.model.scenario import DeviceSpec, Scenario, parse_size

# Model field each NVML call reads, so `unsupported: [field]` in a scenario maps to calls.
_CALL_FIELD = {
    "nvmlDeviceGetUtilizationRates": "utilization_ratio",
    "nvmlDeviceGetMemoryInfo": "memory_used_bytes",
    "nvmlDeviceGetTemperature": "temperature_core_celsius",
    "nvmlDeviceGetPowerUsage": "power_watts",
    "nvmlDeviceGetEnforcedPowerLimit": "power_limit_watts",
    "nvmlDeviceGetTotalEnergyConsumption": "energy_joules_total",
    "nvmlDeviceGetTotalEccErrors": "ecc_corrected_total",
    "nvmlDeviceGetCurrPcieLinkGeneration": "pcie",
    "nvmlDeviceGetCurrPcieLinkWidth": "pcie",
    "nvmlDeviceGetMaxPcieLinkGeneration": "pcie",
    "nvmlDeviceGetMaxPcieLinkWidth": "pcie",
    "nvmlDeviceGetCurrentClocksEventReasons": "clock_reasons",
    "nvmlDeviceGetSupportedClocksEventReasons": "clock_reasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons": "clock_reasons",
    "nvmlDeviceGetSupportedClocksThrottleReasons": "clock_reasons",
    "nvmlDeviceGetSupportedEventTypes": "events",
    "nvmlDeviceGetProcessesUtilizationInfo": "process_utilization",
    "nvmlDeviceGetProcessUtilization": "process_utilization",
    "nvmlDeviceGetNvLinkState": "nvlink",
    "nvmlDeviceGetNvLinkRemotePciInfo": "nvlink",
    "nvmlDeviceGetNvLinkRemoteDeviceType": "nvlink",
    "nvmlDeviceGetMigMode": "mig",
    "nvmlDeviceGetTopologyCommonAncestor": "topology",
}

# Field-value ids -> (model field or fake-only key, how to produce the value)
_FI = pynvml
_FIELD_IDS = {
    _FI.NVML_FI_DEV_MEMORY_TEMP: "temperature_memory_celsius",
    _FI.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: "ecc_corrected_volatile_total",
    _FI.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: "ecc_uncorrected_volatile_total",
    _FI.NVML_FI_DEV_RETIRED_SBE: "memory_retired_pages_single_bit",
    _FI.NVML_FI_DEV_RETIRED_DBE: "memory_retired_pages_double_bit",
    _FI.NVML_FI_DEV_RETIRED_PENDING: "memory_retirement_pending",
    _FI.NVML_FI_DEV_REMAPPED_COR: "memory_remapped_rows_correctable",
    _FI.NVML_FI_DEV_REMAPPED_UNC: "memory_remapped_rows_uncorrectable",
    _FI.NVML_FI_DEV_REMAPPED_PENDING: "memory_remap_pending",
    _FI.NVML_FI_DEV_REMAPPED_FAILURE: "memory_remap_failed",
    _FI.NVML_FI_DEV_PCIE_REPLAY_COUNTER: "pcie_replay_total",
    _FI.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: "recovery_action",
}

_EVENT_KINDS = {
    "xid": pynvml.nvmlEventTypeXidCriticalError,
    "ecc-dbe": pynvml.nvmlEventTypeDoubleBitEccError,
    "sbe-storm": pynvml.nvmlEventTypeSingleBitEccErrorStorm,
    "dram-retirement": pynvml.nvmlEventTypeDramRetirementEvent,
    "dram-retirement-failure": pynvml.nvmlEventTypeDramRetirementFailure,
    "poison": pynvml.nvmlEventTypeNonFatalPoisonError,
    "poison-fatal": pynvml.nvmlEventTypeFatalPoisonError,
    "gpu-unavailable": pynvml.nvmlEventTypeGpuUnavailableError,
    "recovery": pynvml.nvmlEventTypeGpuRecoveryAction,
    "mig-change": pynvml.nvmlEventMigConfigChange,
}
_RECOVERY_NAMES = {"none": 0, "gpu-reset": 1, "reset": 1, "node-reboot": 2, "reboot": 2, "drain-p2p": 3,
                   "drain-and-reset": 4, "imex-domain": 5, "bus-reset": 6, "system-reboot": 7}
_PROCESS_API_LEVEL = {"v1": 1, "v2": 2, "v3": 3}
_FABRIC_STATES = {"not-supported": pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED,
                  "not-started": pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED,
                  "in-progress": pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS,
                  "completed": pynvml.NVML_GPU_FABRIC_STATE_COMPLETED}
_NOT_MIG = 0xFFFFFFFF


def _err(name: str) -> pynvml.NVMLError:
    """pynvml's real exception for an error name like 'NotSupported' or 'GpuIsLost'."""
    cls = getattr(pynvml, f"NVMLError_{name}", None)
    if cls is None:
        raise ValueError(f"pynvml has no NVMLError_{name}")
    return cls()


def recovery_value(code: Any) -> int:
    """A scenario's recovery action (number or name) -> nvmlGpuRecoveryAction_t."""
    s = str(code).strip().lower()
    if s.isdigit():
        return int(s)
    if s not in _RECOVERY_NAMES:
        raise ValueError(f"unknown recovery action {code!r}; one of {sorted(_RECOVERY_NAMES)}")
    return _RECOVERY_NAMES[s]


class _Handle:
    __slots__ = ("spec",)

    def __init__(self, spec: DeviceSpec):
        self.spec = spec


class _MigHandle:
    __slots__ = ("spec", "index", "mig")

    def __init__(self, spec: DeviceSpec, index: int, mig: dict):
        self.spec = spec
        self.index = index
        self.mig = mig


class _GpmSample:
    __slots__ = ("spec", "mig", "t", "freed")

    def __init__(self) -> None:
        self.spec: Optional[DeviceSpec] = None
        self.mig: Optional[dict] = None
        self.t = 0.0
        self.freed = False


class _GpmMetric:
    __slots__ = ("metricId", "nvmlReturn", "value")

    def __init__(self) -> None:
        self.metricId, self.nvmlReturn, self.value = 0, 0, 0.0


class GpmMetricsGet:
    """pynvml's c_nvmlGpmMetricsGet_t, with room for every metric id."""

    def __init__(self) -> None:
        self.version, self.numMetrics = 0, 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [_GpmMetric() for _ in range(pynvml.NVML_GPM_METRIC_MAX)]


_GPM_GENERATIONS = ("H100", "H200", "H20", "H800", "GH200", "B100", "B200", "GB200")


class _EventSet:
    def __init__(self, created: float) -> None:
        self.masks: dict[int, tuple[_Handle, int]] = {}  # device index -> (handle, mask)
        self.delivered: set[int] = set()  # indexes into the fake's event list
        self.created = created  # scenario time: earlier events are not delivered (as NVML)
        self.freed = False


class FakeNvml:
    """Module-like object: ``fake.nvmlDeviceGetCount()`` etc., plus pynvml's constants."""

    NVMLError = pynvml.NVMLError
    c_nvmlGpmMetricsGet_t = GpmMetricsGet
    c_nvmlGpuFabricInfoV_t = pynvml.c_nvmlGpuFabricInfoV_t
    c_nvmlGpuFabricInfo_t = pynvml.c_nvmlGpuFabricInfo_t

    def __init__(self, scenario: Scenario, clock: Any):
        self._scenario = scenario
        self._clock = clock
        self._devices = scenario.devices_of("nvidia")
        self._handles = [_Handle(d) for d in self._devices]
        self._settings = scenario.vendor_settings("nvidia")
        self._initialized = 0
        self._energy: dict[int, tuple[float, float]] = {}  # index -> (t, joules)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self.calls = 0  # NVML calls made by the collector (the event thread's waits are not counted)
        # lost intervals per index, computed once: [(from, to or None)]
        self._lost_spans: dict[int, list[tuple[float, Optional[float]]]] = {}
        self._handle_errors: dict[int, str] = {}  # index -> error of the handle lookup while lost
        for d in self._devices:
            spans: list[tuple[float, Optional[float]]] = []
            start: Optional[float] = None
            for f in sorted(scenario.faults_of("nvidia", d.index), key=lambda f: f.at):
                off_bus = f.kind == "xid" and f.code == "79" and f.params.get("lost", True) is not False
                if f.kind == "lost" or off_bus:
                    if f.params.get("handle_error"):
                        _err(str(f.params["handle_error"]))  # a bad name fails at load
                        self._handle_errors[d.index] = str(f.params["handle_error"])
                    if start is None:
                        start = f.at
                    if f.until is not None:
                        spans.append((start, f.until))
                        start = None
                elif f.kind == "reset" and start is not None:
                    spans.append((start, f.at))
                    start = None
            if start is not None:
                spans.append((start, None))
            self._lost_spans[d.index] = spans
        self._events = [f for f in scenario.faults_of("nvidia") if f.kind in _EVENT_KINDS]
        self._events.sort(key=lambda f: f.at)
        for f in self._events:
            if f.kind == "recovery":
                recovery_value(f.code)  # a bad name fails at load, not in the event thread
        self._nvlink_down = [f for f in scenario.faults_of("nvidia") if f.kind == "nvlink-down"]
        self._by_pci = {d.pci_address: d for d in self._devices}
        self._process_level = _PROCESS_API_LEVEL.get(str(self._settings.get("process_api", "v3")), 3)
        self._gpm_errors = [f for f in scenario.faults_of("nvidia") if f.kind == "gpm-error"]
        for f in self._gpm_errors:
            _err(str(f.code or "InUse"))  # a bad error name fails at load
        self.gpm_held: set[int] = set()  # ids of GPM samples allocated and not freed
        self._mig_handles: dict[int, list[_MigHandle]] = {
            d.index: [_MigHandle(d, i, m) for i, m in enumerate(d.extra.get("mig") or ())] for d in self._devices}

    def __getattr__(self, name: str) -> Any:
        # constants (NVML_TEMPERATURE_GPU, nvmlEventTypeXidCriticalError, nvmlMemory_v2, the
        # NVMLError_* classes) come from the real binding; functions must be faked here
        if name.startswith("NVML") or (name.startswith("nvml") and not callable(getattr(pynvml, name, None))):
            try:
                value = getattr(pynvml, name)
            except AttributeError:
                pass
            else:
                setattr(self, name, value)  # found once: later lookups are plain attributes
                return value
        raise AttributeError(f"FakeNvml does not implement {name}; add it to collectors/nvidia/nvml/fake.py")

    # ------------------------------------------------------------------ helpers
    def _t(self) -> float:
        return self._clock.t()

    def _check(self, count: bool = True) -> None:
        if count:
            self.calls += 1
        if self._initialized <= 0:
            raise _err("Uninitialized")

    def _lost(self, index: int, t: float) -> bool:
        for start, end in self._lost_spans.get(index, ()):
            if start <= t and (end is None or t < end):
                return True
        return False

    def _dev(self, handle: Any, call: str, count: bool = True) -> tuple[DeviceSpec, float]:
        self._check(count)
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

    def _missing_before(self, level: int) -> None:
        """FunctionNotFound when the scenario's "driver" is older than this call."""
        if self._process_level < level:
            raise _err("FunctionNotFound")

    # ------------------------------------------------------------------ library
    def nvmlInit(self) -> None:
        err = self._settings.get("init_error")
        if err:
            raise _err(str(err))
        with self._lock:
            self._initialized += 1

    def nvmlShutdown(self) -> None:
        self._check(count=False)
        with self._lock:
            self._initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check()
        return self._devices[0].driver_version if self._devices else "550.54.15"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._check()
        v = self._settings.get("cuda_driver_version", 12080)
        if v is None or str(v).lower() == "none":
            raise _err("NotSupported")
        return int(v)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.nvmlSystemGetCudaDriverVersion_v2()

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        self._check()
        for d in self._devices:
            for p in d.processes:
                if p.pid == pid:
                    return p.name
        raise _err("NotFound")

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
        if index in self._handle_errors and self._lost(index, self._t()):
            raise _err(self._handle_errors[index])
        return self._handles[index]

    # ------------------------------------------------------------------ identity
    def nvmlDeviceGetUUID(self, h: Any) -> str:
        spec, _ = self._dev(h, "nvmlDeviceGetUUID")
        if isinstance(h, _MigHandle):
            return h.mig.get("uuid") or f"MIG-{spec.uuid[4:12]}-{h.index:04x}-{spec.uuid[-12:]}"
        return spec.uuid

    def nvmlDeviceGetName(self, h: Any) -> str:
        spec, _ = self._dev(h, "nvmlDeviceGetName")
        if isinstance(h, _MigHandle):
            return f"{spec.product} MIG {h.mig.get('profile', '1g.10gb')}"
        return spec.product

    def nvmlDeviceGetSerial(self, h: _Handle) -> str:
        return self._dev(h, "nvmlDeviceGetSerial")[0].serial

    def nvmlDeviceGetPciInfo(self, h: _Handle) -> SimpleNamespace:
        spec, _ = self._dev(h, "nvmlDeviceGetPciInfo")
        return self._pci_info(spec.pci_address)

    @staticmethod
    def _pci_info(address: str) -> SimpleNamespace:
        domain, rest = address.split(":", 1)
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

    # ------------------------------------------------------------------ NVSwitch fabric
    def _fabric(self, spec: DeviceSpec, t: float) -> tuple[int, int]:
        """(state, status) of the GPU's fabric registration at scenario time ``t``."""
        base = spec.extra.get("fabric") or {}
        state, status = str(base.get("state", "not-supported")), str(base.get("status", "Success"))
        for f in self._scenario.faults_of("nvidia", spec.index):
            if f.kind == "fabric" and f.at <= t and (f.until is None or t < f.until):
                state, status = str(f.params.get("state", "completed")), str(f.code or "Unknown")
        code = 0 if status.lower() == "success" else int(_err(status).value)
        return _FABRIC_STATES[state], code

    def _fabric_info(self, h: Any, ref: Any, call: str) -> int:
        spec, t = self._dev(h, call)
        info = ref._obj  # ctypes.byref(struct): the struct the caller reads back
        state, status = self._fabric(spec, t)
        info.state, info.status, info.cliqueId = state, status, (1 if state else 0)
        if hasattr(info, "healthMask"):
            info.healthMask = 0
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetGpuFabricInfoV(self, h: Any, ref: Any) -> int:
        if self._settings.get("fabric_api") in ("legacy", "none"):
            self._check()
            raise _err("FunctionNotFound")
        return self._fabric_info(h, ref, "nvmlDeviceGetGpuFabricInfoV")

    def nvmlDeviceGetGpuFabricInfo(self, h: Any, ref: Any) -> int:
        if self._settings.get("fabric_api") == "none":
            self._check()
            raise _err("FunctionNotFound")
        return self._fabric_info(h, ref, "nvmlDeviceGetGpuFabricInfo")

    # ------------------------------------------------------------------ readings
    def nvmlDeviceGetUtilizationRates(self, h: Any) -> SimpleNamespace:
        spec, t = self._dev(h, "nvmlDeviceGetUtilizationRates")
        if isinstance(h, _MigHandle):
            raise _err("NotSupported")  # as on real MIG devices
        gpu = round(100 * self._value(spec, "utilization_ratio", t))
        mem = spec.value("memory_utilization_ratio", t)
        return SimpleNamespace(gpu=int(gpu), memory=int(round(100 * mem)) if mem is not None else 0)

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: Any = None) -> SimpleNamespace:
        spec, t = self._dev(h, "nvmlDeviceGetMemoryInfo")
        if version is not None and self._settings.get("memory_api") == "v1":
            raise _err("FunctionNotFound")
        if isinstance(h, _MigHandle):
            total = int(parse_size(h.mig.get("memory", "10GiB"), "mig.memory"))
            used = int(parse_size(h.mig.get("used", 0), "mig.used"))
            reserved = 0
        else:
            total = int(spec.memory_total_bytes)
            used = int(min(total, self._value(spec, "memory_used_bytes", t)))
            reserved = int(spec.value("memory_reserved_bytes", t) or 0)
        if version is None:  # v1: "used" includes the driver-reserved memory
            return SimpleNamespace(total=total, used=used + reserved, free=total - used - reserved)
        return SimpleNamespace(version=version, total=total, reserved=reserved, used=used,
                               free=total - used - reserved)

    def nvmlDeviceGetTemperature(self, h: _Handle, sensor: int) -> int:
        spec, t = self._dev(h, "nvmlDeviceGetTemperature")
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _err("InvalidArgument")
        return int(round(self._value(spec, "temperature_core_celsius", t)))

    def _field(self, spec: DeviceSpec, fid: int, scope: int, t: float) -> tuple[int, int]:
        """(nvmlReturn, value) of one field id."""
        name = _FIELD_IDS.get(fid)
        if name == "recovery_action":
            given = spec.value(name, t) is not None or any(
                f.kind == "recovery" for f in self._scenario.faults_of("nvidia", spec.index))
            return (pynvml.NVML_SUCCESS, self._recovery(spec, t)) if given else (pynvml.NVML_ERROR_NOT_SUPPORTED, 0)
        if name is not None:
            if name.startswith("ecc_") and "ecc_corrected_total" in spec.unsupported:
                return pynvml.NVML_ERROR_NOT_SUPPORTED, 0  # no ECC on this GPU: no ECC counter at all
            v = spec.value(name, t)
            return (pynvml.NVML_ERROR_NOT_SUPPORTED, 0) if v is None else (pynvml.NVML_SUCCESS, int(round(v)))
        links = int(spec.extra.get("nvlink_links", 0) or 0)
        if not links or "nvlink" in spec.unsupported:
            return pynvml.NVML_ERROR_NOT_SUPPORTED, 0
        if fid == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
            return pynvml.NVML_SUCCESS, links
        if fid == pynvml.NVML_FI_DEV_NVLINK_GET_STATE:
            if self._settings.get("nvlink_state_field") is False or scope >= links:
                return pynvml.NVML_ERROR_NOT_SUPPORTED, 0  # older drivers: per-link calls only
            return pynvml.NVML_SUCCESS, self._link_state(spec, scope, t)
        if fid == pynvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON:
            return pynvml.NVML_SUCCESS, int(spec.extra.get("nvlink_speed_mbps", 25781))
        if fid in (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX):
            key = "nvlink_rx_bytes_per_second" if fid == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX \
                else "nvlink_tx_bytes_per_second"
            rate = spec.value(key, 0.0)
            if rate is None or scope >= links:
                return pynvml.NVML_ERROR_NOT_SUPPORTED, 0
            return pynvml.NVML_SUCCESS, int(rate * t / links / 1024)  # KiB on this link
        return pynvml.NVML_ERROR_NOT_SUPPORTED, 0

    def nvmlDeviceGetFieldValues(self, h: _Handle, field_ids: list) -> list:
        spec, t = self._dev(h, "nvmlDeviceGetFieldValues")
        out = []
        stamp = int(self._clock() * 1e6)
        for fid in field_ids:
            fid, scope = fid if isinstance(fid, tuple) else (fid, 0)
            ret, value = self._field(spec, fid, scope, t)
            out.append(SimpleNamespace(
                fieldId=fid, scopeId=scope, timestamp=stamp, latencyUsec=0,
                valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, nvmlReturn=ret,
                value=SimpleNamespace(uiVal=value, ulVal=value, ullVal=value, dVal=float(value),
                                      sllVal=value, siVal=value, usVal=value)))
        return out

    def _recovery(self, spec: DeviceSpec, t: float) -> int:
        action = int(spec.value("recovery_action", t) or 0)
        for f in self._scenario.faults_of("nvidia", spec.index):
            if f.kind == "recovery" and f.active(t):
                action = recovery_value(f.code)
        return action

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
        if counter_type == pynvml.NVML_VOLATILE_ECC:
            field = field.replace("_total", "_volatile_total")
        if field in spec.unsupported:
            raise _err("NotSupported")
        return int(self._value(spec, field, t))

    # ------------------------------------------------------------------ PCIe, clock reasons
    def _pcie(self, h: _Handle, call: str, field: str) -> int:
        spec, t = self._dev(h, call)
        return int(self._value(spec, field, t))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: _Handle) -> int:
        return self._pcie(h, "nvmlDeviceGetCurrPcieLinkGeneration", "pcie_link_generation")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: _Handle) -> int:
        return self._pcie(h, "nvmlDeviceGetMaxPcieLinkGeneration", "pcie_link_generation_max")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: _Handle) -> int:
        return self._pcie(h, "nvmlDeviceGetCurrPcieLinkWidth", "pcie_link_width")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: _Handle) -> int:
        return self._pcie(h, "nvmlDeviceGetMaxPcieLinkWidth", "pcie_link_width_max")

    def _reasons(self, h: _Handle, call: str, supported: bool) -> int:
        if (self._settings.get("clock_reasons_api", "event") == "throttle") == ("Event" in call):
            raise _err("FunctionNotFound")
        spec, t = self._dev(h, call)
        if supported:
            return 0x1FF
        return int(self._value(spec, "clock_event_reasons", t))

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: _Handle) -> int:
        return self._reasons(h, "nvmlDeviceGetCurrentClocksEventReasons", False)

    def nvmlDeviceGetSupportedClocksEventReasons(self, h: _Handle) -> int:
        return self._reasons(h, "nvmlDeviceGetSupportedClocksEventReasons", True)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: _Handle) -> int:
        return self._reasons(h, "nvmlDeviceGetCurrentClocksThrottleReasons", False)

    def nvmlDeviceGetSupportedClocksThrottleReasons(self, h: _Handle) -> int:
        return self._reasons(h, "nvmlDeviceGetSupportedClocksThrottleReasons", True)

    # ------------------------------------------------------------------ processes
    def _processes(self, h: Any, call: str, graphics: bool, mps: bool = False) -> list:
        spec, t = self._dev(h, call)
        if "processes" in spec.unsupported or mps:
            if mps:
                return []
            raise _err("NotSupported")
        gpids = set(spec.extra.get("graphics_pids") or ())
        owner = {}
        for m in spec.extra.get("mig") or ():
            for pid in m.get("pids") or ():
                owner[pid] = (int(m.get("gi", 0)), int(m.get("ci", 0)))
        out = []
        for p in spec.processes:
            if (p.pid in gpids) != graphics:
                continue
            gi, ci = owner.get(p.pid, (_NOT_MIG, _NOT_MIG))
            out.append(SimpleNamespace(pid=p.pid, usedGpuMemory=int(p.memory.at(t)),
                                       gpuInstanceId=gi, computeInstanceId=ci))
        return out

    def nvmlDeviceGetComputeRunningProcesses_v3(self, h: Any) -> list:
        self._missing_before(3)
        return self._processes(h, "nvmlDeviceGetComputeRunningProcesses_v3", False)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: Any) -> list:
        self._missing_before(2)
        return self._processes(h, "nvmlDeviceGetComputeRunningProcesses_v2", False)

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list:
        if self._process_level < 3:  # pynvml's unversioned wrapper calls _v3
            raise pynvml.NVMLLibraryMismatchError("Unversioned function called (fake)")
        return self._processes(h, "nvmlDeviceGetComputeRunningProcesses", False)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, h: Any) -> list:
        self._missing_before(3)
        return self._processes(h, "nvmlDeviceGetGraphicsRunningProcesses_v3", True)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, h: Any) -> list:
        self._missing_before(2)
        return self._processes(h, "nvmlDeviceGetGraphicsRunningProcesses_v2", True)

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: Any) -> list:
        if self._process_level < 3:
            raise pynvml.NVMLLibraryMismatchError("Unversioned function called (fake)")
        return self._processes(h, "nvmlDeviceGetGraphicsRunningProcesses", True)

    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, h: Any) -> list:
        self._missing_before(3)
        return self._processes(h, "nvmlDeviceGetMPSComputeRunningProcesses_v3", False, mps=True)

    def _utilization_samples(self, h: _Handle, call: str, since: int) -> list:
        api = self._settings.get("process_utilization_api", "info")
        wanted = "info" if call == "nvmlDeviceGetProcessesUtilizationInfo" else "samples"
        if api == "none" or (api == "samples" and wanted == "info"):
            raise _err("FunctionNotFound")
        spec, t = self._dev(h, call)
        stamp = int(self._clock() * 1e6)
        if stamp <= since:
            raise _err("NotFound")
        out = []
        for p in spec.processes:
            if p.utilization is None:
                continue
            out.append(SimpleNamespace(pid=p.pid, timeStamp=stamp, smUtil=int(round(100 * p.utilization.at(t))),
                                       memUtil=0, encUtil=0, decUtil=0, jpgUtil=0, ofaUtil=0))
        if not out:
            raise _err("NotFound")
        return out

    def nvmlDeviceGetProcessesUtilizationInfo(self, h: _Handle, since: int) -> list:
        return self._utilization_samples(h, "nvmlDeviceGetProcessesUtilizationInfo", since)

    def nvmlDeviceGetProcessUtilization(self, h: _Handle, since: int) -> list:
        return self._utilization_samples(h, "nvmlDeviceGetProcessUtilization", since)

    # ------------------------------------------------------------------ NVLink, topology
    def _link(self, h: _Handle, call: str, link: int) -> tuple[DeviceSpec, float]:
        spec, t = self._dev(h, call)
        links = int(spec.extra.get("nvlink_links", 0) or 0)
        if not links:
            raise _err("NotSupported")
        if not 0 <= link < links:
            raise _err("InvalidArgument")
        return spec, t

    def nvmlDeviceGetNvLinkState(self, h: _Handle, link: int) -> int:
        spec, t = self._link(h, "nvmlDeviceGetNvLinkState", link)
        return self._link_state(spec, link, t)

    def _link_state(self, spec: DeviceSpec, link: int, t: float) -> int:
        if link in (spec.extra.get("nvlink_down") or ()):
            return 0
        for f in self._nvlink_down:
            if f.index == spec.index and int(f.params.get("link", -1)) == link and f.active(t):
                return 0
        return 1

    def _peer(self, spec: DeviceSpec, link: int) -> Optional[DeviceSpec]:
        if spec.extra.get("nvlink_peer", "nvswitch") != "mesh":
            return None
        others = [d for d in self._devices if d.index != spec.index]
        return others[link % len(others)] if others else None

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: _Handle, link: int) -> SimpleNamespace:
        spec, _ = self._link(h, "nvmlDeviceGetNvLinkRemotePciInfo", link)
        peer = self._peer(spec, link)
        # NVSwitch systems: 4 switches, each GPU's links spread over them
        return self._pci_info(peer.pci_address if peer else f"0000:{0xc0 + link % 4:02x}:00.0")

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: _Handle, link: int) -> int:
        spec, _ = self._link(h, "nvmlDeviceGetNvLinkRemoteDeviceType", link)
        return pynvml.NVML_NVLINK_DEVICE_TYPE_GPU if self._peer(spec, link) else pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH

    def nvmlDeviceGetTopologyCommonAncestor(self, h1: _Handle, h2: _Handle) -> int:
        a, _ = self._dev(h1, "nvmlDeviceGetTopologyCommonAncestor")
        b, _ = self._dev(h2, "nvmlDeviceGetTopologyCommonAncestor")
        group = int(a.extra.get("pcie_switch_group", 2) or 1)
        if a.index == b.index:
            return pynvml.NVML_TOPOLOGY_INTERNAL
        if a.numa_node == b.numa_node and a.index // group == b.index // group:
            return pynvml.NVML_TOPOLOGY_SINGLE
        if a.numa_node == b.numa_node:
            return pynvml.NVML_TOPOLOGY_NODE
        return pynvml.NVML_TOPOLOGY_SYSTEM

    # ------------------------------------------------------------------ MIG
    def nvmlDeviceGetMigMode(self, h: _Handle) -> list:
        spec, _ = self._dev(h, "nvmlDeviceGetMigMode")
        on = 1 if spec.extra.get("mig") else 0
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: _Handle) -> int:
        self._dev(h, "nvmlDeviceGetMaxMigDeviceCount")
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: _Handle, index: int) -> _MigHandle:
        spec, _ = self._dev(h, "nvmlDeviceGetMigDeviceHandleByIndex")
        migs = self._mig_handles.get(spec.index, [])
        if not 0 <= index < len(migs):
            raise _err("NotFound")
        return migs[index]

    def nvmlDeviceGetGpuInstanceId(self, h: _MigHandle) -> int:
        self._dev(h, "nvmlDeviceGetGpuInstanceId")
        return int(h.mig.get("gi", h.index + 1))

    def nvmlDeviceGetComputeInstanceId(self, h: _MigHandle) -> int:
        self._dev(h, "nvmlDeviceGetComputeInstanceId")
        return int(h.mig.get("ci", 0))

    # ------------------------------------------------------------------ dcgm-exporter's default set
    def nvmlDeviceGetFanSpeed(self, h: _Handle) -> int:
        spec, t = self._dev(h, "nvmlDeviceGetFanSpeed")
        return int(round(100 * self._value(spec, "fan_speed_ratio", t)))

    def _codec(self, h: _Handle, call: str, field: str) -> list:
        spec, t = self._dev(h, call)
        return [int(round(100 * self._value(spec, field, t))), 167000]  # (percent, sampling period us)

    def nvmlDeviceGetEncoderUtilization(self, h: _Handle) -> list:
        return self._codec(h, "nvmlDeviceGetEncoderUtilization", "engine_encoder_utilization_ratio")

    def nvmlDeviceGetDecoderUtilization(self, h: _Handle) -> list:
        return self._codec(h, "nvmlDeviceGetDecoderUtilization", "engine_decoder_utilization_ratio")

    def nvmlDeviceGetPcieThroughput(self, h: _Handle, counter: int) -> int:
        spec, t = self._dev(h, "nvmlDeviceGetPcieThroughput")
        field = "pcie_tx_bytes_per_second" if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else "pcie_rx_bytes_per_second"
        return int(self._value(spec, field, t) / 1024)  # KB/s

    def nvmlDeviceGetPowerManagementLimit(self, h: _Handle) -> int:
        spec, t = self._dev(h, "nvmlDeviceGetPowerManagementLimit")
        v = spec.value("power_management_limit_watts", t)
        return int(round(1000 * (v if v is not None else self._value(spec, "power_limit_watts", t))))

    # ------------------------------------------------------------------ GPM
    def nvmlGpmQueryDeviceSupport(self, h: _Handle) -> SimpleNamespace:
        spec, _ = self._dev(h, "nvmlGpmQueryDeviceSupport")
        if "gpm" in spec.unsupported:
            supported = False
        elif "gpm" in spec.extra:
            supported = bool(spec.extra["gpm"])
        else:
            supported = any(g in (spec.product or "") for g in _GPM_GENERATIONS)
        return SimpleNamespace(version=pynvml.NVML_GPM_SUPPORT_VERSION, isSupportedDevice=int(supported))

    def nvmlGpmSampleAlloc(self) -> _GpmSample:
        self._check()
        sample = _GpmSample()
        self.gpm_held.add(id(sample))
        return sample

    def nvmlGpmSampleFree(self, sample: _GpmSample) -> None:
        self._check()
        if sample.freed or id(sample) not in self.gpm_held:
            raise _err("InvalidArgument")  # a double free is a bug of the collector
        sample.freed = True
        self.gpm_held.discard(id(sample))

    def _gpm_failing(self, spec: DeviceSpec, t: float) -> None:
        for f in self._gpm_errors:
            if f.index == spec.index and f.active(t):
                raise _err(str(f.code or "InUse"))

    def nvmlGpmSampleGet(self, h: _Handle, sample: _GpmSample) -> _GpmSample:
        spec, t = self._dev(h, "nvmlGpmSampleGet")
        self._gpm_failing(spec, t)
        sample.spec, sample.mig, sample.t = spec, None, t
        return sample

    def nvmlGpmMigSampleGet(self, h: _Handle, gpu_instance: int, sample: _GpmSample) -> _GpmSample:
        spec, t = self._dev(h, "nvmlGpmMigSampleGet")
        self._gpm_failing(spec, t)
        for m in self._mig_handles.get(spec.index, ()):
            if int(m.mig.get("gi", m.index + 1)) == int(gpu_instance):
                sample.spec, sample.mig, sample.t = spec, m.mig, t
                return sample
        raise _err("NotFound")

    def nvmlGpmMetricsGet(self, req: GpmMetricsGet) -> GpmMetricsGet:
        self._check()
        s1, s2 = req.sample1, req.sample2
        if any(s is None or s.freed or s.spec is None for s in (s1, s2)) or s1.spec is not s2.spec:
            raise _err("InvalidArgument")
        if req.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise _err("ArgumentVersionMismatch")
        for i in range(req.numMetrics):
            m = req.metrics[i]
            value = self._gpm_value(s2, m.metricId)
            m.nvmlReturn, m.value = (pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0) if value is None else (pynvml.NVML_SUCCESS, value)
        return req

    def _gpm_value(self, sample: _GpmSample, metric_id: int) -> Optional[float]:
        """A metric in GPM's units (percent, MiB/s): the scenario value of its field at the sample's time."""
        from hetero_exporter.collectors.nvidia.nvml.gpm import FIELDS
        spec = sample.spec
        assert spec is not None, "a GPM sample is filled (nvmlGpmSampleGet) before it is read"
        for f in FIELDS:
            ids = [getattr(pynvml, n) for n in f.metrics]
            if metric_id not in ids:
                continue
            kind = "nvdec" if "NVDEC" in f.metrics[0] else "nvjpg" if "NVJPG" in f.metrics[0] else None
            if kind is not None and ids.index(metric_id) >= int(spec.extra.get(kind, 7)):
                return None  # an engine this GPU does not have
            own = (sample.mig or {}).get("values") or {}
            value = own.get(f.field) if f.field in own else spec.value(f.field, sample.t)
            return None if value is None else float(value) / f.scale
        return None

    # ------------------------------------------------------------------ events
    def nvmlEventSetCreate(self) -> _EventSet:
        if self._initialized <= 0:
            raise _err("Uninitialized")
        return _EventSet(self._t())

    def nvmlDeviceGetSupportedEventTypes(self, h: _Handle) -> int:
        spec, _ = self._dev(h, "nvmlDeviceGetSupportedEventTypes", count=False)  # event thread
        mask = 0
        for bit in _EVENT_KINDS.values():
            mask |= bit
        return mask

    def nvmlDeviceRegisterEvents(self, h: _Handle, mask: int, event_set: _EventSet) -> None:
        if self._lost(h.spec.index, self._t()):
            raise _err("GpuIsLost")
        with self._lock:
            event_set.masks[h.spec.index] = (h, int(mask))

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:
        event_set.freed = True

    def _pending(self, event_set: _EventSet, t: float) -> tuple[Optional[int], bool]:
        """(index of the next deliverable event, whether later ones exist)."""
        later = False
        for i, f in enumerate(self._events):
            if i in event_set.delivered or f.index not in event_set.masks or f.at < event_set.created:
                continue
            if f.at > t:
                later = True
                continue
            if _EVENT_KINDS[f.kind] & event_set.masks[f.index][1]:
                return i, later
        return None, later

    def nvmlEventSetWait_v2(self, event_set: _EventSet, timeout_ms: int) -> SimpleNamespace:
        """The next scenario event whose time has come, else Timeout after ``timeout_ms``
        of real time. GpuIsLost while a registered GPU is lost (as NVML does)."""
        if event_set.freed:
            raise _err("InvalidArgument")
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            t = self._t()
            with self._lock:
                i, later = self._pending(event_set, t)
                if i is not None:
                    event_set.delivered.add(i)
            if i is not None:
                f = self._events[i]
                h = event_set.masks[f.index][0]
                data = 0
                if f.kind == "xid":
                    data = int(f.code or 0)
                elif f.kind == "recovery":
                    data = recovery_value(f.code)
                gi = int(f.params.get("gpu_instance", _NOT_MIG))
                ci = int(f.params.get("compute_instance", _NOT_MIG if gi == _NOT_MIG else 0))
                return SimpleNamespace(device=h, eventType=_EVENT_KINDS[f.kind], eventData=data,
                                       gpuInstanceId=gi, computeInstanceId=ci)
            if any(self._lost(idx, t) for idx in event_set.masks):
                raise _err("GpuIsLost")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _err("Timeout")
            # scenario time may move (ManualClock in tests): look again soon while events
            # are still due; otherwise sleep the whole wait
            with self._cond:
                self._cond.wait(min(remaining, 0.02) if later else remaining)

    def nvmlEventSetWait(self, event_set: _EventSet, timeout_ms: int) -> SimpleNamespace:
        return self.nvmlEventSetWait_v2(event_set, timeout_ms)

    def notify(self) -> None:
        """Tests: the scenario clock moved; wake event waits now."""
        with self._cond:
            self._cond.notify_all()


# --------------------------------------------------------------------------- nvidia-smi


def _x(s: Any) -> str:
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _opt(fn: Any, *args: Any, fmt: str = "{}") -> str:
    """``fmt`` of the call's answer; N/A where NVML raises (as nvidia-smi prints it)."""
    try:
        return fmt.format(fn(*args))
    except pynvml.NVMLError:
        return "N/A"


def _mib(b: float) -> str:
    return f"{int(b) >> 20} MiB"


def render_smi_xml(fake: FakeNvml) -> str:
    """The fake's GPUs as ``nvidia-smi -q -x`` prints them (DTD v12 layout, R535+ power
    and clock-event elements), from the same NVML calls, so the CLI path round-trips the
    scenario. A lost GPU is left out, as nvidia-smi cannot open it."""
    t = fake._t()
    lines = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
             "<nvidia_smi_log>", f"\t<timestamp>{time.strftime('%a %b %d %H:%M:%S %Y', time.gmtime(fake._clock()))}</timestamp>",
             f"\t<driver_version>{_x(fake.nvmlSystemGetDriverVersion())}</driver_version>",
             f"\t<cuda_version>{_opt(lambda: _cuda_text(fake.nvmlSystemGetCudaDriverVersion_v2()))}</cuda_version>"]
    gpus = [h for h in fake._handles if not fake._lost(h.spec.index, t)]
    lines.append(f"\t<attached_gpus>{len(gpus)}</attached_gpus>")
    for h in gpus:
        lines += _SmiGpu(fake, h, t).lines()
    lines.append("</nvidia_smi_log>")
    return "\n".join(lines) + "\n"


class _SmiGpu:
    """The ``<gpu>`` element of one fake GPU in ``nvidia-smi -q -x`` (render_smi_xml), section by section."""

    def __init__(self, fake: FakeNvml, h: Any, t: float):
        self.fake, self.h, self.t, self.spec = fake, h, t, h.spec
        self.fv = {f.fieldId: f for f in fake.nvmlDeviceGetFieldValues(h, list(_FIELD_IDS))}

    def field(self, fid: int, fmt: str = "{}") -> str:
        v = self.fv[fid]
        return fmt.format(v.value.ullVal) if v.nvmlReturn == pynvml.NVML_SUCCESS else "N/A"

    def flag(self, fid: int) -> str:
        v = self.fv[fid]
        return ("Yes" if v.value.ullVal else "No") if v.nvmlReturn == pynvml.NVML_SUCCESS else "N/A"

    def lines(self) -> list[str]:
        return [*self._pci(), *self._reasons_and_usage(), *self._ecc(), *self._sensors(), *self._processes(),
                *self._migs(), "\t</gpu>"]

    def _pci(self) -> list[str]:
        fake, h, spec, t = self.fake, self.h, self.spec, self.t
        pci = fake.nvmlDeviceGetPciInfo(h).busId
        return [f'\t<gpu id="{pci}">', f"\t\t<product_name>{_x(spec.product)}</product_name>",
                f"\t\t<serial>{_x(spec.serial)}</serial>", f"\t\t<uuid>{spec.uuid}</uuid>",
                "\t\t<inforom_version>", f"\t\t\t<img_version>{_x(spec.firmware_version or 'N/A')}</img_version>",
                "\t\t</inforom_version>",
                f"\t\t<gpu_recovery_action>{_RECOVERY_TEXT.get(fake._recovery(spec, t), 'Unknown')}</gpu_recovery_action>",
                "\t\t<pci>", f"\t\t\t<pci_bus_id>{pci}</pci_bus_id>", "\t\t\t<pci_gpu_link_info>", "\t\t\t\t<pcie_gen>",
                f"\t\t\t\t\t<max_link_gen>{_opt(fake.nvmlDeviceGetMaxPcieLinkGeneration, h)}</max_link_gen>",
                f"\t\t\t\t\t<current_link_gen>{_opt(fake.nvmlDeviceGetCurrPcieLinkGeneration, h)}</current_link_gen>",
                "\t\t\t\t</pcie_gen>", "\t\t\t\t<link_widths>",
                f"\t\t\t\t\t<max_link_width>{_opt(fake.nvmlDeviceGetMaxPcieLinkWidth, h, fmt='{}x')}</max_link_width>",
                f"\t\t\t\t\t<current_link_width>{_opt(fake.nvmlDeviceGetCurrPcieLinkWidth, h, fmt='{}x')}</current_link_width>",
                "\t\t\t\t</link_widths>", "\t\t\t</pci_gpu_link_info>",
                f"\t\t\t<replay_counter>{self.field(pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER)}</replay_counter>",
                "\t\t</pci>"]

    def _reasons_and_usage(self) -> list[str]:
        fake, h, spec = self.fake, self.h, self.spec
        mem = (fake.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2) if "memory_used_bytes" not in spec.unsupported
               else None)
        util = None
        try:
            util = fake.nvmlDeviceGetUtilizationRates(h)
        except pynvml.NVMLError:
            pass
        try:
            reasons = fake.nvmlDeviceGetCurrentClocksEventReasons(h)
        except pynvml.NVMLError:
            reasons = None
        lines = ["\t\t<clocks_event_reasons>"]
        for bit, _name, suffix in _SMI_REASONS:
            text = "N/A" if reasons is None else ("Active" if reasons & bit else "Not Active")
            lines.append(f"\t\t\t<clocks_event_reason_{suffix}>{text}</clocks_event_reason_{suffix}>")
        return lines + ["\t\t</clocks_event_reasons>", "\t\t<fb_memory_usage>",
                        f"\t\t\t<total>{_mib(mem.total) if mem else 'N/A'}</total>",
                        f"\t\t\t<reserved>{_mib(mem.reserved) if mem else 'N/A'}</reserved>",
                        f"\t\t\t<used>{_mib(mem.used) if mem else 'N/A'}</used>",
                        f"\t\t\t<free>{_mib(mem.free) if mem else 'N/A'}</free>", "\t\t</fb_memory_usage>",
                        "\t\t<utilization>", f"\t\t\t<gpu_util>{f'{util.gpu} %' if util else 'N/A'}</gpu_util>",
                        f"\t\t\t<memory_util>{f'{util.memory} %' if util else 'N/A'}</memory_util>",
                        "\t\t</utilization>"]

    def _ecc(self) -> list[str]:
        nv, fake, h = pynvml, self.fake, self.h
        lines = ["\t\t<ecc_errors>"]
        for section, ctype in (("volatile", nv.NVML_VOLATILE_ECC), ("aggregate", nv.NVML_AGGREGATE_ECC)):
            corr = _opt(fake.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, ctype)
            unc = _opt(fake.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, ctype)
            lines += [f"\t\t\t<{section}>", "\t\t\t\t<sram_correctable>0</sram_correctable>" if corr != "N/A" else
                      "\t\t\t\t<sram_correctable>N/A</sram_correctable>",
                      "\t\t\t\t<sram_uncorrectable_parity>0</sram_uncorrectable_parity>" if unc != "N/A" else
                      "\t\t\t\t<sram_uncorrectable_parity>N/A</sram_uncorrectable_parity>",
                      f"\t\t\t\t<dram_correctable>{corr}</dram_correctable>",
                      f"\t\t\t\t<dram_uncorrectable>{unc}</dram_uncorrectable>", f"\t\t\t</{section}>"]
        lines += ["\t\t</ecc_errors>", "\t\t<retired_pages>", "\t\t\t<multiple_single_bit_retirement>",
                  f"\t\t\t\t<retired_count>{self.field(nv.NVML_FI_DEV_RETIRED_SBE)}</retired_count>",
                  "\t\t\t</multiple_single_bit_retirement>", "\t\t\t<double_bit_retirement>",
                  f"\t\t\t\t<retired_count>{self.field(nv.NVML_FI_DEV_RETIRED_DBE)}</retired_count>",
                  "\t\t\t</double_bit_retirement>",
                  f"\t\t\t<pending_retirement>{self.flag(nv.NVML_FI_DEV_RETIRED_PENDING)}</pending_retirement>",
                  "\t\t</retired_pages>"]
        if self.fv[nv.NVML_FI_DEV_REMAPPED_COR].nvmlReturn != nv.NVML_SUCCESS:
            return lines + ["\t\t<remapped_rows>N/A</remapped_rows>"]
        return lines + ["\t\t<remapped_rows>",
                        f"\t\t\t<remapped_row_corr>{self.field(nv.NVML_FI_DEV_REMAPPED_COR)}</remapped_row_corr>",
                        f"\t\t\t<remapped_row_unc>{self.field(nv.NVML_FI_DEV_REMAPPED_UNC)}</remapped_row_unc>",
                        f"\t\t\t<remapped_row_pending>{self.flag(nv.NVML_FI_DEV_REMAPPED_PENDING)}</remapped_row_pending>",
                        f"\t\t\t<remapped_row_failure>{self.flag(nv.NVML_FI_DEV_REMAPPED_FAILURE)}</remapped_row_failure>",
                        "\t\t</remapped_rows>"]

    def _sensors(self) -> list[str]:
        nv, fake, h = pynvml, self.fake, self.h
        power = _opt(lambda: fake.nvmlDeviceGetPowerUsage(h) / 1000, fmt='{:.2f} W')
        limit = _opt(lambda: fake.nvmlDeviceGetEnforcedPowerLimit(h) / 1000, fmt='{:.2f} W')
        return ["\t\t<temperature>",
                f"\t\t\t<gpu_temp>{_opt(fake.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU, fmt='{} C')}</gpu_temp>",
                f"\t\t\t<memory_temp>{self.field(nv.NVML_FI_DEV_MEMORY_TEMP, '{} C')}</memory_temp>",
                "\t\t</temperature>", "\t\t<gpu_power_readings>",
                f"\t\t\t<average_power_draw>{power}</average_power_draw>",
                f"\t\t\t<current_power_limit>{limit}</current_power_limit>",
                "\t\t</gpu_power_readings>", "\t\t<clocks>",
                f"\t\t\t<sm_clock>{_opt(fake.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM, fmt='{} MHz')}</sm_clock>",
                f"\t\t\t<mem_clock>{_opt(fake.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM, fmt='{} MHz')}</mem_clock>",
                "\t\t</clocks>"]

    def _processes(self) -> list[str]:
        spec, t = self.spec, self.t
        owner = {pid: (int(m.mig.get("gi", m.index + 1)), int(m.mig.get("ci", 0)))
                 for m in self.fake._mig_handles.get(spec.index, []) for pid in m.mig.get("pids") or ()}
        gpids = set(spec.extra.get("graphics_pids") or ())
        lines = ["\t\t<processes>"]
        for p in spec.processes:
            gi, ci = owner.get(p.pid, ("N/A", "N/A"))
            lines += ["\t\t\t<process_info>", f"\t\t\t\t<gpu_instance_id>{gi}</gpu_instance_id>",
                      f"\t\t\t\t<compute_instance_id>{ci}</compute_instance_id>", f"\t\t\t\t<pid>{p.pid}</pid>",
                      f"\t\t\t\t<type>{'G' if p.pid in gpids else 'C'}</type>",
                      f"\t\t\t\t<process_name>{_x(p.name)}</process_name>",
                      f"\t\t\t\t<used_memory>{int(p.memory.at(t)) >> 20} MiB</used_memory>", "\t\t\t</process_info>"]
        return lines + ["\t\t</processes>"]

    def _migs(self) -> list[str]:
        fake = self.fake
        migs = fake._mig_handles.get(self.spec.index, [])
        if not migs:
            return ["\t\t<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>"]
        lines = ["\t\t<mig_devices>"]
        for m in migs:
            mm = fake.nvmlDeviceGetMemoryInfo(m, pynvml.nvmlMemory_v2)
            lines += ["\t\t\t<mig_device>", f"\t\t\t\t<index>{m.index}</index>",
                      f"\t\t\t\t<gpu_instance_id>{fake.nvmlDeviceGetGpuInstanceId(m)}</gpu_instance_id>",
                      f"\t\t\t\t<compute_instance_id>{fake.nvmlDeviceGetComputeInstanceId(m)}</compute_instance_id>",
                      "\t\t\t\t<fb_memory_usage>", f"\t\t\t\t\t<total>{_mib(mm.total)}</total>",
                      f"\t\t\t\t\t<used>{_mib(mm.used)}</used>", "\t\t\t\t</fb_memory_usage>", "\t\t\t</mig_device>"]
        return lines + ["\t\t</mig_devices>"]


def _cuda_text(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


_RECOVERY_TEXT = {0: "None", 1: "Reset", 2: "Reboot", 3: "Drain P2P", 4: "Drain and Reset"}
_SMI_REASONS = CLOCK_REASONS
