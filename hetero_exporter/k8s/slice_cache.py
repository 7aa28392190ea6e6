"""Watch-backed cache of this node's ResourceSlices (resource.k8s.io/v1), for device taints.

One thread lists the slices (``fieldSelector=spec.nodeName=<node>``, paged, at most
``max_slices``) and watches from the list's resourceVersion (``k8s.api.Api.watch``: bookmarks,
``timeoutSeconds`` per stream, each event line bounded), the reflector loop of
``k8s.node_cache.list_then_watch``: 410 Gone lists again, other failures back off and keep the
slices last known (``status()`` says stale). A list answered 404 means the cluster does not serve
DRA: said once in the log, the thread ends, ``served`` is False, and the rest of the agent runs.

Reads (``slices()``) are memory only: the health loop never waits on the API.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from typing import Any, Callable, Mapping, Optional

from hetero_exporter.k8s.api import Api, WatchStream
from hetero_exporter.k8s.client import K8sError
from hetero_exporter.k8s.dra import GROUP_VERSION, MAX_SLICES, SLICES, list_slices, node_selector
from hetero_exporter.k8s.node_cache import ListWatchThread, list_then_watch
from hetero_exporter.model import SourceStatus

log = logging.getLogger(__name__)

NAME = "resource-slices"
NOT_SYNCED = "not synced yet"


def _name(obj: Any) -> Optional[str]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) and name else None


def _resource_version(obj: Any) -> Optional[str]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return str(rv) if isinstance(rv, (str, int)) and rv else None


class SliceCache(ListWatchThread):
    """The ResourceSlices of ``node_name``; ``start()`` it, then ``slices()`` / ``status()``."""

    thread_name = "slice-cache"

    def __init__(self, api_client: Any, node_name: str, *, request_timeout: float, watch_seconds: int = 300,
                 max_slices: int = MAX_SLICES, backoff: tuple[float, float] = (1.0, 30.0),
                 clock: Callable[[], float] = time.time):
        self.node_name = node_name
        self.request_timeout = request_timeout
        self.watch_seconds = int(watch_seconds)
        self.max_slices = max_slices
        self._backoff = backoff
        self._clock = clock
        self._api = Api(api_client, request_timeout)
        self._lock = threading.Lock()
        self._slices: dict[str, dict] = {}
        self._rv: Optional[str] = None
        self._synced = False
        self._served = True
        self._error: Optional[str] = NOT_SYNCED
        self._last_success: Optional[float] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._stream: Optional[WatchStream] = None
        self.lists = 0  # successful lists (tests, logs)

    # ------------------------------------------------------------------ reads (memory only)

    def slices(self) -> list[dict]:
        """A copy of the slices, by name."""
        with self._lock:
            return [copy.deepcopy(self._slices[n]) for n in sorted(self._slices)]

    @property
    def synced(self) -> bool:
        with self._lock:
            return self._synced and self._error is None

    @property
    def served(self) -> bool:
        """False once the cluster answered that it does not serve resource.k8s.io/v1."""
        with self._lock:
            return self._served

    def status(self) -> SourceStatus:
        with self._lock:
            return SourceStatus(NAME, ok=self._served and self._synced and self._error is None,
                                stale=self._served and self._synced and self._error is not None,
                                last_success=self._last_success, error=self._error, items=len(self._slices))

    # ------------------------------------------------------------------ state changes

    def _ours(self, obj: Mapping[str, Any]) -> bool:
        spec = obj.get("spec")
        return isinstance(spec, dict) and spec.get("nodeName") == self.node_name

    def _replace_all(self, items: list[dict], rv: Optional[str]) -> None:
        fresh = {n: obj for obj in items if (n := _name(obj)) is not None and self._ours(obj)}
        with self._lock:
            self._slices = fresh
            self._rv = rv
            self._synced = True
            self._error = None
            self._last_success = self._clock()
        self.lists += 1

    def _apply(self, etype: str, obj: Mapping[str, Any]) -> None:
        name = _name(obj)
        with self._lock:
            rv = _resource_version(obj)
            if rv:
                self._rv = rv
            self._last_success = self._clock()
            if name is None or etype == "BOOKMARK":
                return
            if etype == "DELETED" or not self._ours(obj):  # a slice moved off this node leaves too
                self._slices.pop(name, None)
            elif name in self._slices or len(self._slices) < self.max_slices:
                self._slices[name] = dict(obj)
            else:  # a list then says so too, and retries with a back-off, the slices kept
                raise K8sError(f"ResourceSlices of node {self.node_name}: more than {self.max_slices}; "
                               "refusing to hold them")

    def _failed(self, error: BaseException, _delay: float) -> None:
        if isinstance(error, K8sError) and error.not_found:
            with self._lock:
                self._served = False
                self._error = f"{GROUP_VERSION} is not served by this cluster (404)"
            log.info("ResourceSlices not served: per-device taints off, the rest runs",
                     extra={"reason": self._error})
            self._stop.set()  # list_then_watch ends: nothing to watch on this cluster
            return
        why = str(error) if isinstance(error, K8sError) else f"{type(error).__name__}: {error}"
        with self._lock:
            changed = self._error != why
            self._error = why
        if changed:
            log.warning("ResourceSlice cache stale: serving the slices last known", extra={"error": why})

    # ------------------------------------------------------------------ API side

    def list_once(self) -> None:
        """List the node's slices (K8sError on failure) and replace the cache with them."""
        items, rv = list_slices(self._api, self.node_name, max_slices=self.max_slices, timeout=self.request_timeout)
        self._replace_all(items, rv)

    def _watch_once(self) -> None:
        stream = self._api.watch(SLICES, query={"fieldSelector": node_selector(self.node_name)},
                                 resource_version=self._rv, timeout_seconds=self.watch_seconds,
                                 request_timeout=self.request_timeout)
        self._follow(stream, self._apply)

    def _run(self) -> None:
        list_then_watch(self._stop, self.list_once, self._watch_once, self._failed, self._backoff)

    def _answered(self) -> bool:
        with self._lock:
            return self._synced or self._error != NOT_SYNCED
