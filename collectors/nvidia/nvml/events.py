"""A thread that waits on NVML events so faults between polls are never missed.

One event set covers every GPU: each GPU registers the event types it supports among the
wanted ones (``nvmlDeviceGetSupportedEventTypes`` & wanted). The thread blocks in
``nvmlEventSetWait`` for at most ``wait_ms``; each event becomes a call of ``on_event`` with
the GPU uuid and a fault code (the XID number for XID events, a named code for the other
types, see collectors/nvidia/faults.yaml). The collector records it in its FaultLedger and
asks the sampler for a cycle at once, so an XID shows in a snapshot within one event wait,
not one poll interval.

NVML answers NVML_ERROR_GPU_IS_LOST from the wait while a registered GPU is lost, which
would hide the events of the others: the thread then rebuilds its set without the lost GPU
(and calls ``on_lost``, so the collector polls at once). Every loop is bounded by ``stop``;
any other failure backs off one ``wait_ms`` and tries again.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from hetero_exporter.collectors.nvidia.common import RECOVERY_CODES

log = logging.getLogger(__name__)

# NVML event type (pynvml constant name) -> fault code; None: the code comes from the data
EVENT_CODES: dict[str, Optional[str]] = {
    "nvmlEventTypeXidCriticalError": None,  # eventData = the XID
    "nvmlEventTypeDoubleBitEccError": "ecc-dbe",
    "nvmlEventTypeSingleBitEccErrorStorm": "ecc-sbe-storm",
    "nvmlEventTypeDramRetirementEvent": "dram-retirement",
    "nvmlEventTypeDramRetirementFailure": "dram-retirement-failure",
    "nvmlEventTypeNonFatalPoisonError": "poison-nonfatal",
    "nvmlEventTypeFatalPoisonError": "poison-fatal",
    "nvmlEventTypeGpuUnavailableError": "gpu-unavailable",
    "nvmlEventTypeGpuRecoveryAction": None,  # eventData = nvmlGpuRecoveryAction_t
    "nvmlEventMigConfigChange": None,  # not a fault: the MIG layout must be read again
}
# Single-bit ECC, P-state and clock events are left out on purpose: they fire constantly
# and their counters are polled anyway.

_NOT_MIG = 0xFFFFFFFF


@dataclass(frozen=True)
class Event:
    uuid: str
    code: str  # fault code
    message: str
    source: str


def handle_key(h: Any) -> Any:
    """A hashable identity for an NVML device handle (a ctypes pointer in pynvml)."""
    try:
        return ctypes.cast(h, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return id(h)


class EventWatcher:
    def __init__(self, nv: Any, devices: Sequence[tuple[str, Any]], *,
                 on_event: Callable[[Event], None], on_lost: Callable[[], None],
                 on_mig_change: Callable[[], None] = lambda: None, wait_ms: int = 1000):
        self._nv = nv
        self._devices = list(devices)  # (uuid, handle)
        self._on_event = on_event
        self._on_lost = on_lost
        self._on_mig_change = on_mig_change
        self._wait_ms = max(1, int(wait_ms))
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._set: Any = None
        self._by_handle: dict[Any, str] = {}
        self._types = {getattr(nv, name): name for name in EVENT_CODES if getattr(nv, name, None) is not None}
        self._wanted = 0
        for bit in self._types:
            self._wanted |= bit
        self._rebuild = False
        self.registered: dict[str, int] = {}  # uuid -> event mask registered
        self.unsupported: set[str] = set()  # uuids that support none of the wanted types
        self.events_seen = 0

    # ------------------------------------------------------------------ set management
    def open(self) -> None:
        """Create the event set and register every GPU that answers. GpuIsLost on one
        GPU leaves it out; NotSupported for the set itself raises (no events here)."""
        nv = self._nv
        self._set = nv.nvmlEventSetCreate()
        self._by_handle = {}
        self.registered = {}
        for uuid, h in self._devices:
            try:
                mask = int(nv.nvmlDeviceGetSupportedEventTypes(h)) & self._wanted
                if not mask:
                    self.unsupported.add(uuid)
                    continue
                nv.nvmlDeviceRegisterEvents(h, mask, self._set)
            except nv.NVMLError as e:
                if not isinstance(e, (nv.NVMLError_GpuIsLost, nv.NVMLError_NotSupported)):
                    log.warning("NVML event registration failed for %s: %s", uuid, e)
                if isinstance(e, nv.NVMLError_NotSupported):
                    self.unsupported.add(uuid)
                continue
            self._by_handle[handle_key(h)] = uuid
            self.registered[uuid] = mask

    def update(self, devices: Sequence[tuple[str, Any]]) -> None:
        """The GPUs the collector reads now; the set is rebuilt (in the thread, before its
        next wait) when they differ from those registered, e.g. a GPU back after a reset."""
        wanted = {u for u, _ in devices} - self.unsupported
        if wanted != set(self.registered):
            self._devices = list(devices)
            self._rebuild = True

    def close_set(self) -> None:
        if self._set is None:
            return
        try:
            self._nv.nvmlEventSetFree(self._set)
        except self._nv.NVMLError:
            pass
        self._set = None

    # ------------------------------------------------------------------ one wait
    def step(self) -> Optional[Event]:
        """Wait once; handle what came. Returns the fault event delivered, if any."""
        nv = self._nv
        if self._rebuild:
            self._rebuild = False
            self.close_set()
        if self._set is None:
            self.open()
        try:
            data = nv.nvmlEventSetWait_v2(self._set, self._wait_ms) if hasattr(nv, "nvmlEventSetWait_v2") \
                else nv.nvmlEventSetWait(self._set, self._wait_ms)
        except nv.NVMLError_Timeout:
            return None
        except nv.NVMLError_GpuIsLost:
            self._on_lost()
            self.close_set()
            self.open()  # without the lost GPU (its registration fails)
            self._stop.wait(self._wait_ms / 1000.0)  # do not spin if it keeps failing
            return None
        self.events_seen += 1
        return self._dispatch(data)

    def _uuid_of(self, h: Any) -> Optional[str]:
        uuid = self._by_handle.get(handle_key(h))
        if uuid is not None:
            return uuid
        try:
            raw = self._nv.nvmlDeviceGetUUID(h)
            return raw.decode() if isinstance(raw, bytes) else str(raw)
        except self._nv.NVMLError:
            return None

    def _dispatch(self, data: Any) -> Optional[Event]:
        etype = int(data.eventType)
        name = self._types.get(etype, "")
        if name == "nvmlEventMigConfigChange":
            self._on_mig_change()
            return None
        uuid = self._uuid_of(data.device)
        if uuid is None:
            log.warning("NVML event 0x%x for a device this agent does not know", etype)
            return None
        value = int(data.eventData)
        where = ""
        gi = getattr(data, "gpuInstanceId", _NOT_MIG)
        if gi is not None and int(gi) != _NOT_MIG:
            where = f" (GPU instance {int(gi)}, compute instance {int(getattr(data, 'computeInstanceId', 0))})"
        if name == "nvmlEventTypeXidCriticalError":
            code, msg = str(value), f"XID {value}{where}"
        elif name == "nvmlEventTypeGpuRecoveryAction":
            code = RECOVERY_CODES.get(value, "recovery-unknown")
            if code is None:  # recovery action back to none: nothing to report
                return None
            msg = f"GPU recovery action {value}{where}"
        else:
            code = EVENT_CODES.get(name) or f"event-0x{etype:x}"
            msg = f"{name or hex(etype)}{where}" + (f" data={value}" if value else "")
        ev = Event(uuid=uuid, code=code, message=msg, source=f"nvmlEventSetWait({name or hex(etype)})")
        self._on_event(ev)
        return ev

    # ------------------------------------------------------------------ thread
    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        nv = self._nv
        try:
            nv.nvmlInit()  # NVML counts inits: the set stays valid while the collector closes
        except nv.NVMLError as e:
            log.warning("NVML events disabled: nvmlInit failed: %s", e)
            return
        try:
            while not self._stop.is_set():
                try:
                    self.step()
                except nv.NVMLError_NotSupported:
                    log.info("NVML events are not supported here; XIDs are seen at poll time only")
                    return
                except Exception:  # noqa: BLE001 - the thread must outlive a bad event
                    log.warning("NVML event wait failed; retrying", exc_info=True)
                    self.close_set()
                    self._stop.wait(self._wait_ms / 1000.0)
        finally:
            self.close_set()
            try:
                nv.nvmlShutdown()
            except nv.NVMLError:
                pass

    def stop(self, join_seconds: float = 0.0) -> None:
        """Ask the thread to end (it finishes its current wait, at most ``wait_ms``)."""
        self._stop.set()
        t = self._thread
        if t is not None and join_seconds > 0:
            t.join(join_seconds)
