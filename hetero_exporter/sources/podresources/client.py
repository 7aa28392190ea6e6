"""Client of the kubelet PodResources v1 API (``List``) over its unix socket.

``list_pod_resources()`` makes one call under a timeout. ``PodResourcesPoller`` calls it in
a background thread every ``interval`` seconds and keeps the last answer, so a collection
cycle reads allocations from memory and never waits on the kubelet. When the kubelet stops
answering, the last answer is kept and the status says ``stale``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Mapping, Optional, Sequence

from hetero_exporter.model import Allocation, DeviceIdentity, SourceStatus
from hetero_exporter.sources.podresources.mapping import ContainerDevices, map_allocations, vendor_of

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# the kubelet's own server limit for this API (16 MiB); a node with many pods can exceed 4 MiB
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
NAME = "podresources"


class PodResourcesError(RuntimeError):
    """The kubelet did not answer ``List`` (message says why: socket missing, timeout...)."""


def records_from_response(resp: Any) -> list[ContainerDevices]:
    """Flatten a ``ListPodResourcesResponse``: one record per (container, resource), for
    device-plugin devices and for DRA claim devices (resource = the claim's driver name)."""
    out: list[ContainerDevices] = []
    for pod in resp.pod_resources:
        for c in pod.containers:
            for dev in c.devices:
                if dev.device_ids:
                    out.append(ContainerDevices(pod.namespace, pod.name, c.name, dev.resource_name,
                                                tuple(dev.device_ids)))
            for dyn in c.dynamic_resources:
                by_driver: dict[str, list[str]] = {}
                for cr in dyn.claim_resources:
                    if cr.device_name:
                        by_driver.setdefault(cr.driver_name, []).append(cr.device_name)
                for driver, names in by_driver.items():
                    out.append(ContainerDevices(pod.namespace, pod.name, c.name, driver, tuple(names)))
    return out


LIST_METHOD = "/v1.PodResourcesLister/List"
INSTALL_HINT = "pip install 'hetero-exporter[attribution]'"


def _list(socket_path: str, timeout: float) -> list[ContainerDevices]:
    """One ``List`` call over the socket (h2.py: no grpc runtime in the agent). The HTTP/2
    library is imported here, on the first call, so a node without the socket never loads it."""
    try:
        from hetero_exporter.sources.podresources import h2, wire
    except ImportError as e:
        raise PodResourcesError(f"the HTTP/2 library '{e.name or e}' is missing ({INSTALL_HINT})") from None
    try:
        # ListPodResourcesRequest has no fields: its serialization is empty
        raw = h2.unary_call(socket_path, LIST_METHOD, b"", timeout, MAX_MESSAGE_BYTES)
        resp = wire.decode_list_response(raw)
    except h2.CallError as e:
        raise PodResourcesError(f"List on {socket_path}: {e}") from None
    except wire.WireError as e:
        raise PodResourcesError(f"List on {socket_path}: unreadable answer: {e}") from None
    return records_from_response(resp)


def list_pod_resources(socket_path: str = DEFAULT_SOCKET, timeout: float = 2.0) -> list[ContainerDevices]:
    """One ``List`` call; PodResourcesError when the kubelet does not answer in ``timeout`` s."""
    if not os.path.exists(socket_path):
        raise PodResourcesError(f"kubelet pod-resources socket {socket_path} not found "
                                "(mount /var/lib/kubelet/pod-resources read-only into the agent)")
    return _list(socket_path, timeout)


class PodResourcesPoller:
    """Background ``List`` every ``interval`` seconds; answers from memory.

    ``allocations(devices)`` maps the last answer onto this cycle's devices (cached until
    either changes); ``status()`` is the ``podresources`` attribution source status."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, *, interval: float = 10.0,
                 timeout: float = 2.0, extra_vendors: Optional[Mapping[str, str]] = None,
                 clock: Callable[[], float] = time.time):
        self.socket_path = socket_path
        self.interval = interval
        self.timeout = timeout
        self._extra = dict(extra_vendors or {})
        self._clock = clock
        self._lock = threading.Lock()
        self._records: Optional[tuple[ContainerDevices, ...]] = None
        self._version = 0  # bumped on each successful answer (keys the mapping cache)
        self._last_success: Optional[float] = None
        self._error: Optional[str] = None
        self._stop = threading.Event()
        self._kick = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._mapped_key: Any = None
        self._mapped: Mapping[str, Sequence[Allocation]] = {}
        self._logged_unmatched: set[tuple[str, str]] = set()
        self.calls = 0

    # ---- background side

    def refresh(self) -> bool:
        """One ``List``; True on success. Keeps the last answer on failure."""
        self.calls += 1
        try:
            if not os.path.exists(self.socket_path):
                raise PodResourcesError(
                    f"kubelet pod-resources socket {self.socket_path} not found "
                    "(mount /var/lib/kubelet/pod-resources read-only into the agent)")
            records = tuple(_list(self.socket_path, self.timeout))
        except PodResourcesError as e:
            self._failed(str(e))
            return False
        except Exception as e:  # noqa: BLE001 - a bad answer must not end the poller
            self._failed(f"{type(e).__name__}: {e}", unexpected=True)
            return False
        with self._lock:
            self._records = records
            self._version += 1
            self._last_success = self._clock()
            if self._error is not None:
                log.info("kubelet PodResources answering again", extra={"socket": self.socket_path})
            self._error = None
        return True

    def _failed(self, error: str, unexpected: bool = False) -> None:
        """Keep ``error`` for the status; one warning line when it is new, debug while it
        persists (a kubelet down for an hour must not fill the log). A traceback only for an
        error this module did not foresee, and only the first time."""
        with self._lock:
            fresh = self._error != error
            self._error = error
        if fresh:
            log.warning("kubelet PodResources unavailable", extra={"error": error}, exc_info=unexpected)
        else:
            log.debug("kubelet PodResources still unavailable", extra={"error": error})

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._kick.wait(self.interval)
            self._kick.clear()

    def start(self, wait_first: float = 0.0) -> "PodResourcesPoller":
        """Start polling; wait up to ``wait_first`` s for the first answer (before any cycle)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="podresources", daemon=True)
            self._thread.start()
        deadline = time.monotonic() + wait_first
        while time.monotonic() < deadline and self.calls == 0:
            time.sleep(0.01)
        while time.monotonic() < deadline and self._records is None and self._error is None:
            time.sleep(0.01)
        return self

    def close(self) -> None:
        self._stop.set()
        self._kick.set()
        t = self._thread
        if t is not None:
            t.join(timeout=self.timeout + 1.0)

    # ---- cycle side (memory only)

    def records(self) -> tuple[ContainerDevices, ...]:
        with self._lock:
            return self._records or ()

    def allocations(self, devices: Sequence[DeviceIdentity]) -> Mapping[str, Sequence[Allocation]]:
        with self._lock:
            records, version = self._records, self._version
        if not records:
            return {}
        key = (version, tuple(devices))
        if key != self._mapped_key:
            mapped, unmatched = map_allocations(records, devices, self._extra)
            fresh = [u for u in unmatched if u not in self._logged_unmatched]
            if fresh:
                self._logged_unmatched.update(fresh)
                log.info("PodResources devices that match no device of this node",
                         extra={"devices": ", ".join(f"{r}={i}" for r, i in fresh[:20])})
            self._mapped, self._mapped_key = mapped, key
        return self._mapped

    def status(self) -> SourceStatus:
        with self._lock:
            n = sum(len(r.device_ids) for r in self._records or () if vendor_of(r.resource, self._extra))
            return SourceStatus(NAME, ok=self._error is None and self._records is not None,
                                stale=self._error is not None and self._records is not None,
                                last_success=self._last_success, error=self._error, items=n)
