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

``drain()`` is the one-shot path (the collector's first cycle, all that ``inspect`` has): the
set is opened before the reads and every event already pending is delivered before the
snapshot is built, waiting ``DRAIN_WAIT_MS`` at a time until NVML says timeout, at most
``DRAIN_MAX_EVENTS`` events and ``DRAIN_MAX_SECONDS``. The thread then takes the open set over.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from hetero_exporter.collectors.nvidia.common import RECOVERY_CODES
from hetero_exporter.collectors.nvidia.nvml.funnel import LOST, UNSUPPORTED, Funnel

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

# drain(): each wait's timeout (ms), and the bounds of one drain (events, seconds)
DRAIN_WAIT_MS = 10
DRAIN_MAX_EVENTS = 256
DRAIN_MAX_SECONDS = 1.0


class EventsUnsupported(Exception):
    """This driver / GPU set has no NVML events (NotSupported, or no event symbols)."""


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
        self._f = Funnel(nv)  # its own: the collector's is used from the sampler's thread
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
        """Create the event set and register every GPU that answers. A lost GPU is left
        out; no event support for the set itself raises EventsUnsupported (no events here),
        another failure funnel.Failed."""
        nv, f = self._nv, self._f
        got = f.attempt(nv.nvmlEventSetCreate)
        if got.status == UNSUPPORTED:
            raise EventsUnsupported(str(got.error))
        self._set = f.unwrap(got)
        self._by_handle = {}
        self.registered = {}
        for uuid, h in self._devices:
            got = f.attempt(nv.nvmlDeviceGetSupportedEventTypes, h)
            mask = int(got.value) & self._wanted if got.ok else 0
            if got.ok and not mask:
                self.unsupported.add(uuid)
                continue
            if got.ok:
                got = f.attempt(nv.nvmlDeviceRegisterEvents, h, mask, self._set)
            if not got.ok:
                if got.status == UNSUPPORTED:
                    self.unsupported.add(uuid)
                elif got.status != LOST:
                    log.warning("NVML event registration failed for %s: %s", uuid, got.error)
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

    @property
    def is_open(self) -> bool:
        return self._set is not None

    def close_set(self) -> None:
        if self._set is None:
            return
        self._f.attempt(self._nv.nvmlEventSetFree, self._set)  # best effort
        self._set = None

    # ------------------------------------------------------------------ one wait
    def step(self) -> Optional[Event]:
        """Wait once; handle what came. Returns the fault event delivered, if any."""
        nv, f = self._nv, self._f
        if self._rebuild:
            self._rebuild = False
            self.close_set()
        if self._set is None:
            self.open()
        wait = nv.nvmlEventSetWait_v2 if hasattr(nv, "nvmlEventSetWait_v2") else nv.nvmlEventSetWait
        got = f.attempt(wait, self._set, self._wait_ms)
        if got.code == f.TIMEOUT:
            return None
        if got.status == UNSUPPORTED:
            raise EventsUnsupported(str(got.error))
        if got.status == LOST:
            self._on_lost()
            self.close_set()
            self.open()  # without the lost GPU (its registration fails)
            self._stop.wait(self._wait_ms / 1000.0)  # do not spin if it keeps failing
            return None
        data = f.unwrap(got)
        self.events_seen += 1
        return self._dispatch(data)

    def drain(self, max_events: int = DRAIN_MAX_EVENTS, max_seconds: float = DRAIN_MAX_SECONDS,
              wait_ms: int = DRAIN_WAIT_MS) -> int:
        """Deliver the events already pending in the open set (not from the thread): wait
        ``wait_ms`` at a time until NVML says timeout, at most ``max_events`` events and
        ``max_seconds``. A lost GPU in the set is left out (the set is rebuilt without it, as the
        thread does, without the thread's back-off); another failure ends the drain. Returns
        the number of events delivered."""
        nv, f = self._nv, self._f
        wait = nv.nvmlEventSetWait_v2 if hasattr(nv, "nvmlEventSetWait_v2") else nv.nvmlEventSetWait
        deadline = time.monotonic() + max_seconds
        delivered = rebuilt = 0
        while self._set is not None and delivered < max_events and time.monotonic() < deadline:
            got = f.attempt(wait, self._set, wait_ms)
            if got.code == f.TIMEOUT:
                break
            if got.status == LOST and rebuilt < len(self._devices):  # each rebuild drops one lost GPU
                rebuilt += 1
                self.close_set()
                try:
                    self.open()
                except Exception as e:  # noqa: BLE001 - the thread opens it again and says why
                    log.debug("NVML event drain ended: %s", e)
                    break
                continue
            if not got.ok:
                log.debug("NVML event drain ended: %s", got.error)
                break
            self.events_seen += 1
            delivered += 1
            self._dispatch(got.value)
        return delivered

    def _uuid_of(self, h: Any) -> Optional[str]:
        uuid = self._by_handle.get(handle_key(h))
        if uuid is not None:
            return uuid
        raw = self._f.optional("nvmlDeviceGetUUID", h)
        if raw is None:
            return None
        return raw.decode() if isinstance(raw, bytes) else str(raw)

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
            recovery = RECOVERY_CODES.get(value, "recovery-unknown")
            if recovery is None:  # recovery action back to none: nothing to report
                return None
            code, msg = recovery, f"GPU recovery action {value}{where}"
        else:
            code = EVENT_CODES.get(name) or f"event-0x{etype:x}"
            msg = f"{name or hex(etype)}{where}" + (f" data={value}" if value else "")
        ev = Event(uuid=uuid, code=code, message=msg, source=f"nvmlEventSetWait({name or hex(etype)})")
        self._on_event(ev)
        return ev

    # ------------------------------------------------------------------ thread
    no_event_calls = False  # the driver has no event calls (set by the thread; it then ends)

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def started(self) -> bool:
        return self._thread is not None

    def _run(self) -> None:
        nv, f = self._nv, self._f
        got = f.attempt(nv.nvmlInit)  # NVML counts inits: the set stays valid while the collector closes
        if not got.ok:
            log.warning("NVML events disabled: nvmlInit failed: %s", got.error)
            return
        try:
            while not self._stop.is_set():
                try:
                    self.step()
                except EventsUnsupported:
                    # said once: the collector does not start another watcher after this one
                    self.no_event_calls = True
                    log.info("NVML events are not supported here; XIDs are seen at poll time only")
                    return
                except Exception:  # noqa: BLE001 - the thread must outlive a bad event
                    log.warning("NVML event wait failed; retrying", exc_info=True)
                    self.close_set()
                    self._stop.wait(self._wait_ms / 1000.0)
        finally:
            self.close_set()
            f.attempt(nv.nvmlShutdown)

    def stop(self, join_seconds: float = 0.0) -> None:
        """Ask the thread to end (it finishes its current wait, at most ``wait_ms``)."""
        self._stop.set()
        t = self._thread
        if t is not None and join_seconds > 0:
            t.join(join_seconds)
