"""Watch-backed cache of the pods on this node: pod uid / container id -> namespace, names.

One thread keeps it current through ``k8s.api.Api`` (the ``kubernetes`` client's ApiClient on
REST paths): a list of the node's pods
(``fieldSelector=spec.nodeName=<node>``), then a watch from the list's resourceVersion
(with bookmarks, ``timeoutSeconds`` per stream, resumed from the last resourceVersion seen).
A watch answered 410 Expired (or any ERROR event) is followed by a fresh list; a failure
(API unreachable, 5xx, timeout) marks the cache stale and retries with a bounded back-off,
while lookups keep answering with the pods last known. Lookups are dictionary reads under a
lock: attribution never waits on the API during a collection cycle.

Deleted pods are kept ``retain_deleted`` seconds, so a process still exiting when its pod
object is gone keeps its labels.

The same watch serves the health loop: this node's failed pods (the black-hole check) and the
pods of the vendors' plugin selectors given at construction (stack health), trimmed, so the remedy
does not list pods every reconcile (issue 39 §1); both answer None while the cache is not in sync.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Mapping, Optional, Sequence

from hetero_exporter.model.pods import PodInfo
from hetero_exporter.k8s.api import Api, WatchStream
from hetero_exporter.k8s.client import K8sError, as_dict, dict_at, list_at
from hetero_exporter.k8s.node_cache import ListWatchThread, list_then_watch
from hetero_exporter.model import SourceStatus

log = logging.getLogger(__name__)

NAME = "pod-cache"
PODS = "/api/v1/pods"  # of every namespace; the field selector keeps this node's


def pod_info(obj: Mapping[str, Any]) -> Optional[PodInfo]:
    """A PodInfo from a pod's JSON (None without a uid). Container ids lose their
    ``containerd://`` / ``cri-o://`` / ``docker://`` scheme, as cgroup paths show them bare."""
    meta = dict_at(obj, "metadata") if isinstance(obj, dict) else {}
    uid = meta.get("uid")
    if not uid or not isinstance(uid, str):
        return None
    status = dict_at(obj, "status")
    containers: dict[str, str] = {}
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for cs in list_at(status, key):
            cid, name = as_dict(cs).get("containerID"), as_dict(cs).get("name")
            if cid and name and isinstance(cid, str) and isinstance(name, str):
                containers[cid.split("://", 1)[-1]] = name
    qos = status.get("qosClass") if isinstance(status.get("qosClass"), str) else None
    return PodInfo(uid=str(uid), namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
                   containers=containers, qos_class=str(qos).lower() if qos else None)


MAX_FAILED = 512  # failed pods kept for the black-hole check (newest kept)


def failed_pod(obj: Any) -> Optional[tuple[str, dict]]:
    """(uid, the fields the black-hole check reads) of a pod in phase Failed; None otherwise.
    Trimmed: the names, the creation time, the containers' resources, the status reason,
    message and start time (a few hundred bytes, whatever the pod object's size)."""
    if not isinstance(obj, dict):
        return None
    meta, spec, status = dict_at(obj, "metadata"), dict_at(obj, "spec"), dict_at(obj, "status")
    uid = meta.get("uid")
    if status.get("phase") != "Failed" or not isinstance(uid, str) or not uid:
        return None
    containers = list_at(spec, "containers")
    return uid, {
        "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "creationTimestamp")},
        "spec": {"nodeName": spec.get("nodeName"),
                 "containers": [{"resources": c.get("resources")} for c in containers[:16] if isinstance(c, dict)]},
        "status": {"phase": "Failed", "reason": status.get("reason"),
                   "message": str(status.get("message") or "")[:1024], "startTime": status.get("startTime")}}


MAX_PLUGIN_PODS = 32  # pods one plugin selector answers, as the remedy's list is limited (a DaemonSet has one)


def selector_terms(selector: str) -> Optional[tuple[tuple[str, str], ...]]:
    """The (key, value) terms of an equality selector ``k=v,k2=v2`` (VendorSpec.plugin_pods' form);
    None for any other form (``!=``, ``in``, existence): such a selector is not served here."""
    terms = []
    for term in selector.split(","):
        key, eq, value = term.partition("=")
        if not eq or not key or not value or "=" in value or any(c in term for c in "!() "):
            return None
        terms.append((key, value))
    return tuple(terms) or None


def plugin_view(obj: Mapping[str, Any]) -> dict:
    """What the stack health reads of a plugin pod (health/plan/stack.py): names, uid, labels,
    deletion time, node, phase, conditions and container statuses; the rest (spec, managed
    fields, annotations) dropped."""
    meta, spec, status = dict_at(obj, "metadata"), dict_at(obj, "spec"), dict_at(obj, "status")
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "uid", "labels", "deletionTimestamp") if k in meta},
            "spec": {"nodeName": spec.get("nodeName")},
            "status": {k: status[k] for k in ("phase", "conditions", "initContainerStatuses", "containerStatuses")
                       if k in status}}


def _matches(pod: Mapping[str, Any], terms: tuple[tuple[str, str], ...]) -> bool:
    labels = dict_at(pod, "metadata").get("labels")
    return isinstance(labels, dict) and all(labels.get(k) == v for k, v in terms)


def _resource_version(obj: Any) -> Optional[str]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return str(rv) if rv else None


class PodCache(ListWatchThread):
    """The pods of ``node_name``; ``start()`` it, then ``by_uid`` / ``by_container`` / ``status``
    (``start(wait_first)`` waits for the first list: a one-shot ``inspect`` then has names)."""

    thread_name = "pod-cache"

    def __init__(self, api_client: Any, node_name: str, *, watch_seconds: int = 300,
                 request_timeout: float = 10.0, backoff: tuple[float, float] = (1.0, 30.0),
                 retain_deleted: float = 300.0, clock: Callable[[], float] = time.time,
                 plugin_selectors: Sequence[str] = ()):
        self.node_name = node_name
        self.watch_seconds = int(watch_seconds)
        self.request_timeout = request_timeout
        self._backoff = backoff
        self._retain = retain_deleted
        self._clock = clock
        self._lock = threading.Lock()
        self._pods: dict[str, PodInfo] = {}
        self._deleted: dict[str, tuple[PodInfo, float]] = {}
        self._by_container: dict[str, str] = {}
        self._failed: dict[str, dict] = {}  # uid -> trimmed pod in phase Failed (black-hole check)
        # selector -> its terms, and uid -> trimmed pod matching one of them (stack health); a
        # subset of this node's pods, so bounded as the cache is
        self._plugin_terms = {s: t for s in plugin_selectors if (t := selector_terms(s)) is not None}
        self._plugins: dict[str, dict] = {}
        self._rv: Optional[str] = None
        self._synced = False
        self._error: Optional[str] = "not synced yet"
        self._last_success: Optional[float] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._api = Api(api_client, request_timeout)
        self._selector = f"spec.nodeName={node_name}"
        self._stream: Optional[WatchStream] = None
        self.lists = 0  # successful lists (tests, logs)

    # ------------------------------------------------------------------ lookups (memory only)

    def by_uid(self, uid: str) -> Optional[PodInfo]:
        with self._lock:
            p = self._pods.get(uid)
            if p is None:
                gone = self._deleted.get(uid)
                if gone is not None and self._clock() - gone[1] <= self._retain:
                    p = gone[0]
            return p

    def by_container(self, container_id: str) -> Optional[PodInfo]:
        with self._lock:
            uid = self._by_container.get(container_id)
        return self.by_uid(uid) if uid else None

    def status(self) -> SourceStatus:
        with self._lock:
            return SourceStatus(NAME, ok=self._synced and self._error is None,
                                stale=self._error is not None, last_success=self._last_success,
                                error=self._error, items=len(self._pods))

    def failed_pods(self) -> Optional[list[dict]]:
        """This node's pods in phase Failed (trimmed, at most MAX_FAILED, newest kept), as the
        watch last saw them; None while not in sync (the caller then lists them itself)."""
        with self._lock:
            if not self._synced or self._error is not None:
                return None
            return list(self._failed.values())

    def plugin_pods(self, selector: str) -> Optional[list[dict]]:
        """This node's pods that ``selector`` (one of ``plugin_selectors``) matches, trimmed
        (``plugin_view``), by namespace and name as a list orders them, at most MAX_PLUGIN_PODS;
        None while not in sync or for a selector not watched (the caller then lists them)."""
        terms = self._plugin_terms.get(selector)
        with self._lock:
            if terms is None or not self._synced or self._error is not None:
                return None
            found = [p for p in self._plugins.values() if _matches(p, terms)]
        found.sort(key=lambda p: (str(p["metadata"].get("namespace")), str(p["metadata"].get("name"))))
        return found[:MAX_PLUGIN_PODS]

    def _keep_plugin(self, obj: Any, etype: str) -> None:
        uid = dict_at(obj, "metadata").get("uid") if isinstance(obj, dict) else None
        if not isinstance(uid, str) or not uid:
            return
        if etype != "DELETED" and any(_matches(obj, t) for t in self._plugin_terms.values()):
            self._plugins[uid] = plugin_view(obj)
        else:
            self._plugins.pop(uid, None)

    def _keep_failed(self, obj: Any, etype: str) -> None:
        got = failed_pod(obj)
        uid = dict_at(obj, "metadata").get("uid") if isinstance(obj, dict) else None
        if got is None or etype == "DELETED":
            if isinstance(uid, str):
                self._failed.pop(uid, None)
            return
        self._failed.pop(got[0], None)
        self._failed[got[0]] = got[1]
        while len(self._failed) > MAX_FAILED:
            del self._failed[next(iter(self._failed))]

    @property
    def synced(self) -> bool:
        with self._lock:
            return self._synced and self._error is None

    # ------------------------------------------------------------------ state changes

    def _index(self) -> None:
        self._by_container = {cid: uid for uid, p in self._pods.items() for cid in p.containers}
        for uid, (p, _) in self._deleted.items():
            for cid in p.containers:
                self._by_container.setdefault(cid, uid)

    def _expire(self, now: float) -> None:
        for uid in [u for u, (_, t) in self._deleted.items() if now - t > self._retain]:
            del self._deleted[uid]

    def _replace_all(self, items: list, rv: Optional[str]) -> None:
        now = self._clock()
        fresh = {}
        for obj in items:
            p = pod_info(obj) if isinstance(obj, dict) else None
            if p is not None:
                fresh[p.uid] = p
        with self._lock:
            self._failed, self._plugins = {}, {}
            for obj in items:
                self._keep_failed(obj, "ADDED")
                self._keep_plugin(obj, "ADDED")
            for uid, p in self._pods.items():
                if uid not in fresh:
                    self._deleted[uid] = (p, now)
            for uid in fresh:
                self._deleted.pop(uid, None)
            self._pods = fresh
            self._expire(now)
            self._index()
            self._rv = rv
            self._synced = True
            if self._error is not None and self._error != "not synced yet":
                log.info("pod cache in sync again", extra={"pods": len(fresh)})
            self._error = None
            self._last_success = now

    def _apply(self, etype: str, obj: Mapping[str, Any]) -> None:
        p = pod_info(obj)
        now = self._clock()
        with self._lock:
            self._keep_failed(obj, etype)
            self._keep_plugin(obj, etype)
            if p is not None:
                if etype == "DELETED":
                    old = self._pods.pop(p.uid, None)
                    self._deleted[p.uid] = (old or p, now)
                else:
                    self._pods[p.uid] = p
                    self._deleted.pop(p.uid, None)
                self._expire(now)
                self._index()
            rv = _resource_version(obj)
            if rv:
                self._rv = str(rv)
            self._last_success = now

    def _fail(self, why: str) -> None:
        with self._lock:
            changed = self._error != why
            self._error = why
        if changed:
            log.warning("pod cache stale: serving the pods last known", extra={"error": why})

    # ------------------------------------------------------------------ API side

    def list_once(self) -> None:
        """List the node's pods (K8sError on failure) and replace the cache with them."""
        doc = self._api.get(PODS, query={"fieldSelector": self._selector}, timeout=self.request_timeout)
        items = doc.get("items")
        self._replace_all(list(items) if isinstance(items, list) else [], _resource_version(doc))
        self.lists += 1

    def _watch_once(self) -> None:
        """One watch stream from the current resourceVersion until it ends or fails."""
        stream = self._api.watch(PODS, query={"fieldSelector": self._selector}, resource_version=self._rv,
                                 timeout_seconds=self.watch_seconds, request_timeout=self.request_timeout)
        with self._lock:
            self._error = None  # the stream is open: the cache is current again
            self._last_success = self._clock()
        self._follow(stream, self._event)

    def _event(self, etype: str, obj: dict) -> None:
        if etype == "BOOKMARK":
            rv = _resource_version(obj)
            with self._lock:
                if rv:
                    self._rv = str(rv)
                self._last_success = self._clock()
        else:
            self._apply(etype, obj)

    def _run(self) -> None:
        list_then_watch(self._stop, self.list_once, self._watch_once,
                        lambda e, _delay: self._fail(str(e) if isinstance(e, K8sError) else f"{type(e).__name__}: {e}"),
                        self._backoff)

    def _answered(self) -> bool:
        with self._lock:
            return self._synced or (self._error not in (None, "not synced yet"))
