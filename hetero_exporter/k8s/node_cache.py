"""Watch-backed cache of the nodes' ``<domain>/devices`` annotation, for the scheduler
extender's nodeCacheCapable mode.

One thread lists the nodes (in pages, ``limit``/``continue``) and hands every node's annotation to
a sink, then watches from the list's resourceVersion (``k8s.api.Api.watch``: bookmarks on,
``timeoutSeconds`` per stream, resumed from the last resourceVersion seen, each event line
bounded). A watch answered 410 Gone is followed by a fresh list; any other failure is retried with
a bounded back-off, the sink keeping what it knew. The sink (``scoring.NodeTable``) decodes and
precomputes only when a node's annotation text changed, so the kubelet's status heartbeats
cost a string comparison.

Sink protocol: ``replace([(name, text)])`` after a list, ``update(name, text)``,
``remove(name)``; ``text`` is None for a node without the annotation. A sink is expected to
take any text (``NodeTable`` fails the node with the reason); should ``update`` raise anyway,
that node's event is logged and skipped, and the watch goes on with the others.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterable, Optional, Protocol

from hetero_exporter.k8s.api import Api, WatchExpired, WatchStream
from hetero_exporter.k8s.client import K8sError
from hetero_exporter.model.keys import Keys

log = logging.getLogger(__name__)

ANNOTATION = Keys().devices
MAX_PAGES = 100_000  # bound on one paged list (500 nodes a page)
NODES = "/api/v1/nodes"


def list_then_watch(stop: threading.Event, list_once: Callable[[], None], watch_once: Callable[[], None],
                    on_error: Callable[[BaseException, float], None],
                    backoff: tuple[float, float] = (1.0, 30.0)) -> None:
    """The reflector loop: list, then watch stream after stream until ``stop``; a
    ``WatchExpired`` lists again at once; any other failure is reported to ``on_error`` and
    retried (list included) after a back-off doubling from ``backoff[0]`` up to ``backoff[1]``."""
    delay = backoff[0]
    need_list = True
    while not stop.is_set():
        try:
            if need_list:
                list_once()
                need_list = False
            opened = time.monotonic()
            watch_once()
            delay = backoff[0]
            if time.monotonic() - opened < 1.0:
                stop.wait(delay)  # a server ending streams at once must not spin us
        except WatchExpired:
            log.info("watch expired (410 Gone): listing again")
            need_list = True
        except Exception as e:  # noqa: BLE001 - the cache thread outlives any failure
            if stop.is_set():
                break
            on_error(e, delay)
            need_list = True
            stop.wait(delay)
            delay = min(backoff[1], delay * 2)


class Sink(Protocol):
    def replace(self, items: Iterable[tuple[str, Optional[str]]]) -> None: ...
    def update(self, name: str, text: Optional[str]) -> None: ...
    def remove(self, name: str) -> None: ...


def annotation_of(node: Any, annotation: str = ANNOTATION) -> tuple[Optional[str], Optional[str]]:
    """(node name, annotation text or None) of a Node's JSON; (None, None) if it has no name."""
    meta = node.get("metadata") if isinstance(node, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None, None
    ann = meta.get("annotations")
    text = ann.get(annotation) if isinstance(ann, dict) else None
    return meta["name"], text if isinstance(text, str) else None


def list_pages(list_fn: Callable[..., dict], *, page_size: int, timeout: float,
               label_selector: Optional[str] = None) -> tuple[list[dict], Optional[str]]:
    """All items of a paged list and the resourceVersion of the list (``call`` semantics:
    ``list_fn`` returns the decoded JSON body)."""
    items: list[dict] = []
    token: Optional[str] = None
    rv: Optional[str] = None
    for _ in range(MAX_PAGES):
        kwargs: dict[str, Any] = {"limit": page_size}
        if token:
            kwargs["_continue"] = token
        if label_selector:
            kwargs["label_selector"] = label_selector
        doc = list_fn(timeout=timeout, **kwargs)
        if not isinstance(doc, dict):
            raise K8sError(f"node list page is not a NodeList but {type(doc).__name__}")
        page, meta = doc.get("items"), doc.get("metadata")
        page, meta = [] if page is None else page, {} if meta is None else meta
        if not isinstance(page, list) or not isinstance(meta, dict):
            raise K8sError("node list page is not a NodeList (items a list, metadata an object)")
        items.extend(i for i in page if isinstance(i, dict))
        version, token = meta.get("resourceVersion"), meta.get("continue")
        rv = str(version) if version and isinstance(version, (str, int)) else rv
        token = token if token and isinstance(token, str) else None
        if not token:
            return items, rv
    raise K8sError(f"node list did not end after {MAX_PAGES} pages")


class ListWatchThread:
    """The thread of a list+watch cache (NodeCache, k8s.pods.PodCache, k8s.slice_cache.SliceCache):
    ``start`` runs ``_run`` (``list_then_watch`` over the subclass's list and watch), ``close``
    ends the open watch stream at once and joins. Subclasses set ``_stop``, ``_thread``,
    ``_stream``, ``request_timeout`` and ``thread_name``, and say when the first list has
    answered (``_answered``: listed or failed) for ``start(wait_first)``."""

    thread_name = "list-watch"
    _stop: threading.Event
    _thread: Optional[threading.Thread]
    _stream: Optional[WatchStream]
    request_timeout: float

    def _run(self) -> None:
        raise NotImplementedError

    def _answered(self) -> bool:
        return True

    def _follow(self, stream: WatchStream, on_event: Callable[[str, dict], None]) -> None:
        """Hand the stream's events to ``on_event`` until it ends or ``close`` is called."""
        self._stream = stream
        try:
            if self._stop.is_set():
                return
            for etype, obj in stream:
                if self._stop.is_set():
                    return
                on_event(etype, obj)
        finally:
            self._stream = None

    def start(self, wait_first: float = 0.0) -> Any:
        """Start the thread; wait up to ``wait_first`` s for the first list to answer."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()
        deadline = time.monotonic() + wait_first
        while time.monotonic() < deadline and not self._stop.is_set() and not self._answered():
            self._stop.wait(0.01)
        return self

    def close(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.close()  # ends a blocking read at once instead of waiting for the stream's timeout
        if self._thread is not None:
            self._thread.join(timeout=self.request_timeout + 1.0)


class NodeCache(ListWatchThread):
    """``start()`` it; ``synced`` tells when the first list has reached the sink."""

    thread_name = "node-cache"

    def __init__(self, api_client: Any, sink: Sink, *, annotation: str = ANNOTATION,
                 label_selector: Optional[str] = None, watch_seconds: int = 300,
                 request_timeout: float = 10.0, page_size: int = 500,
                 backoff: tuple[float, float] = (1.0, 30.0)):
        self._api = Api(api_client, request_timeout)
        self.sink = sink
        self.annotation = annotation
        self.label_selector = label_selector
        self.watch_seconds = int(watch_seconds)
        self.request_timeout = request_timeout
        self.page_size = page_size
        self._backoff = backoff
        self._rv: Optional[str] = None
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._stream: Optional[WatchStream] = None
        self.error: Optional[str] = None
        self.lists = 0  # full lists done (tests, logs)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def list_once(self) -> None:
        """List every node (K8sError on failure) and load the sink with their annotations."""
        def list_fn(timeout: float, limit: int, _continue: Optional[str] = None,
                    label_selector: Optional[str] = None) -> dict:
            return self._api.get(NODES, query={"limit": limit, "continue": _continue, "labelSelector": label_selector},
                                 timeout=timeout)
        items, rv = list_pages(list_fn, page_size=self.page_size, timeout=self.request_timeout,
                               label_selector=self.label_selector)
        pairs = [p for p in (annotation_of(i, self.annotation) for i in items) if p[0] is not None]
        self.sink.replace(pairs)  # type: ignore[arg-type]
        self._rv = rv
        self.lists += 1
        self._synced.set()
        log.info("node cache listed", extra={"nodes": len(pairs), "annotated": sum(1 for _, t in pairs if t),
                                             "resource_version": rv})

    def _watch_once(self) -> None:
        """One watch stream from the last resourceVersion; WatchExpired on 410 Gone."""
        stream = self._api.watch(NODES, query={"labelSelector": self.label_selector}, resource_version=self._rv,
                                 timeout_seconds=self.watch_seconds, request_timeout=self.request_timeout)
        self._follow(stream, self._event)

    def _event(self, etype: str, obj: dict) -> None:
        meta = obj.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if rv and isinstance(rv, (str, int)):
            self._rv = str(rv)
        if etype != "BOOKMARK":
            name, text = annotation_of(obj, self.annotation)
            if name is None:
                return
            self._apply(etype, name, text)
        self.error = None

    def _apply(self, etype: str, name: str, text: Optional[str]) -> None:
        """One node's event into the sink; a sink failing on it costs that node only."""
        try:
            if etype == "DELETED":
                self.sink.remove(name)
            else:
                self.sink.update(name, text)
        except Exception:  # noqa: BLE001 - one node must not stop the watch of the others
            log.exception("node cache: could not take a node's annotation; skipped",
                          extra={"node": name[:253], "event": etype})

    def _run(self) -> None:
        list_then_watch(self._stop, self.list_once, self._watch_once, self._failed, self._backoff)

    def _failed(self, error: BaseException, delay: float) -> None:
        why = f"{type(error).__name__}: {error}"
        if why != self.error:
            log.warning("node cache: API call failed; serving the annotations last known",
                        extra={"error": why, "retry_seconds": delay})
        self.error = why

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

