"""A loopback Kubernetes API server for tests: the real wire protocol, a small faithful core.

No kube-apiserver can be installed here, so tests run the real ``kubernetes`` Python client
against this server. It speaks what the agent uses, the way the API server does it:

- ``GET`` an object or a list (``labelSelector``, ``fieldSelector`` on any dotted field such as
  ``spec.nodeName`` or ``involvedObject.name``), ``POST`` (``generateName``, 409 AlreadyExists),
  ``PUT``, ``DELETE``, and ``PATCH`` with ``application/merge-patch+json`` (RFC 7386),
  ``application/strategic-merge-patch+json`` (merge keys of the Kubernetes types: node
  ``status.conditions`` merge by ``type``, ``spec.taints`` are replaced as a list; ``$patch``,
  ``$retainKeys``, ``$deleteFromPrimitiveList`` and ``$setElementOrder`` directives) and
  ``application/json-patch+json`` (RFC 6902, ``test`` included).
- Resources: core/v1 ``nodes`` (+ ``status``), ``pods`` (+ ``status``), ``events``, ``namespaces``;
  ``events.k8s.io/v1`` ``events``. The main resource ignores status changes and the ``status``
  subresource ignores everything but status (as the node and pod strategies do).
- One cluster-wide ``resourceVersion`` bumped on every write that changes an object (a no-op
  patch writes nothing, as in etcd); a stale ``metadata.resourceVersion`` in a patch or PUT body
  is answered 409 Conflict; ``?dryRun=All`` validates without storing.
- ``?watch=true``: chunked JSON lines ``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR,
  "object": ...}``, from a ``resourceVersion`` (410 Expired after ``compact()``) or from now
  with synthetic ADDED events, selectors applied (an object leaving a selector is DELETED),
  ``timeoutSeconds``, bookmarks with ``allowWatchBookmarks``.
- Bearer-token authentication (401 otherwise), Status bodies for every error.
- Fault injection for the next N matching requests: an HTTP status (``fail_next``), a delay
  (``delay_next``, for client timeouts), a dropped connection (``drop_next``); each one either
  before the request is applied or after it (``after_apply=True``: the write happened but the
  client never hears of it, the case that tempts a client to write twice).

Every request is recorded (``requests``), every stored version of every object is kept
(``versions``), so tests assert on what reached the server and on how state evolved.

Use the ``kube_api`` fixture (registered in conftest.py) or ``KubeAPIServer().start()``.
"""

from __future__ import annotations

import copy
import datetime
import itertools
import json
import queue
import re
import socket
import threading
import time
import uuid as uuid_mod
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterable, Optional
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

# --------------------------------------------------------------------------- resources


@dataclass(frozen=True)
class Resource:
    group: str  # "" for core
    version: str
    plural: str
    kind: str
    namespaced: bool
    status: bool = False  # has a status subresource

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCES: dict[tuple[str, str, str], Resource] = {
    (r.group, r.version, r.plural): r
    for r in (
        Resource("", "v1", "nodes", "Node", namespaced=False, status=True),
        Resource("", "v1", "pods", "Pod", namespaced=True, status=True),
        Resource("", "v1", "events", "Event", namespaced=True),
        Resource("", "v1", "namespaces", "Namespace", namespaced=False, status=True),
        Resource("events.k8s.io", "v1", "events", "Event", namespaced=True),
        Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True),
        Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False),
        Resource("resource.k8s.io", "v1", "devicetaintrules", "DeviceTaintRule", namespaced=False, status=True),
        Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True, status=True),
    )
}
NODES = RESOURCES[("", "v1", "nodes")]
PODS = RESOURCES[("", "v1", "pods")]
EVENTS = RESOURCES[("", "v1", "events")]
EVENTS_V1 = RESOURCES[("events.k8s.io", "v1", "events")]
LEASES = RESOURCES[("coordination.k8s.io", "v1", "leases")]
RESOURCE_SLICES = RESOURCES[("resource.k8s.io", "v1", "resourceslices")]
DEVICE_TAINT_RULES = RESOURCES[("resource.k8s.io", "v1", "devicetaintrules")]
PDBS = RESOURCES[("policy", "v1", "poddisruptionbudgets")]

# Strategic-merge strategy of list fields, per kind (from the Go struct tags
# patchStrategy/patchMergeKey). A merge key of None = merge a list of primitives as a set.
# Lists not named here are replaced, as for Node spec.taints (no patch strategy).
_META_LISTS = {("metadata", "finalizers"): None, ("metadata", "ownerReferences"): "uid"}
MERGE_KEYS: dict[str, dict[tuple[str, ...], Optional[str]]] = {
    "Node": {**_META_LISTS, ("spec", "podCIDRs"): None, ("status", "conditions"): "type",
             ("status", "addresses"): "type"},
    "Pod": {**_META_LISTS, ("spec", "containers"): "name", ("spec", "initContainers"): "name",
            ("spec", "volumes"): "name", ("spec", "containers", "*", "env"): "name",
            ("spec", "containers", "*", "ports"): "containerPort",
            ("spec", "containers", "*", "volumeMounts"): "mountPath",
            ("status", "conditions"): "type"},
    "Event": dict(_META_LISTS),
    "Namespace": {**_META_LISTS, ("status", "conditions"): "type"},
}


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --------------------------------------------------------------------------- errors


class ApiError(Exception):
    """Answered as a metav1.Status with this code and reason."""

    def __init__(self, code: int, reason: str, message: str, details: Optional[dict] = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> dict:
        return status_body(self.code, self.reason, self.message, self.details)


def status_body(code: int, reason: str, message: str, details: Optional[dict] = None) -> dict:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


def _not_found(res: Resource, name: str) -> ApiError:
    what = f"{res.plural}.{res.group}" if res.group else res.plural
    return ApiError(404, "NotFound", f'{what} "{name}" not found',
                    {"name": name, "group": res.group, "kind": res.plural})


def _conflict(res: Resource, name: str) -> ApiError:
    what = f"{res.plural}.{res.group}" if res.group else res.plural
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {what} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                    {"name": name, "group": res.group, "kind": res.plural})


# --------------------------------------------------------------------------- patches

_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"
_SET_ORDER = "$setElementOrder/"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, null deletes, the rest replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def strategic_merge_patch(target: Any, patch: Any, kind: str) -> Any:
    """Kubernetes strategic merge patch over ``target`` for an object of ``kind``."""
    return _smp(target, patch, MERGE_KEYS.get(kind, {}), ())


def _strategy(keys: dict, path: tuple[str, ...]) -> tuple[bool, Optional[str]]:
    for pattern, key in keys.items():
        if len(pattern) == len(path) and all(p in ("*", q) for p, q in zip(pattern, path)):
            return True, key
    return False, None


def _smp(target: Any, patch: Any, keys: dict, path: tuple[str, ...]) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys") or k.startswith(_SET_ORDER):
            continue
        if k.startswith(_DELETE_PRIMITIVE):
            name = k[len(_DELETE_PRIMITIVE):]
            if isinstance(out.get(name), list):
                out[name] = [x for x in out[name] if x not in (v or [])]
            continue
        if v is None:
            out.pop(k, None)
            continue
        sub = path + (k,)
        cur = out.get(k)
        if isinstance(v, list):
            merge, key = _strategy(keys, sub)
            out[k] = _smp_list(cur if isinstance(cur, list) else [], v, key, keys, sub) if merge else copy.deepcopy(v)
        elif isinstance(v, dict):
            merged = _smp(cur, v, keys, sub)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        else:
            out[k] = copy.deepcopy(v)
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _smp_list(cur: list, patch: list, key: Optional[str], keys: dict, path: tuple[str, ...]) -> list:
    if any(isinstance(x, dict) and x.get("$patch") == "replace" and len(x) == 1 for x in patch):
        return [copy.deepcopy(x) for x in patch if not (isinstance(x, dict) and x.get("$patch"))]
    if key is None:  # a set of primitives
        out = list(cur)
        for x in patch:
            if x not in out:
                out.append(copy.deepcopy(x))
        return out
    out = [copy.deepcopy(x) for x in cur]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise ApiError(422, "Invalid", f"{'.'.join(path)}: list item has no merge key {key!r}")
        at = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if at is not None:
                out.pop(at)
            continue
        if at is None:
            out.append(_smp({}, item, keys, path + ("*",)))
        else:
            out[at] = _smp(out[at], item, keys, path + ("*",))
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"json patch path {path!r} does not start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], create: bool = False) -> Any:
    for p in parts:
        if isinstance(doc, dict):
            if p not in doc:
                raise ApiError(422, "Invalid", f"json patch: no such path element {p!r}")
            doc = doc[p]
        elif isinstance(doc, list):
            try:
                doc = doc[int(p)]
            except (ValueError, IndexError):
                raise ApiError(422, "Invalid", f"json patch: bad list index {p!r}") from None
        else:
            raise ApiError(422, "Invalid", f"json patch: cannot descend into {p!r}")
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch; a failed ``test`` or a bad path is 422 Invalid."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "json patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiError(400, "BadRequest", f"bad json patch operation {op!r}")
        kind, parts = op["op"], _pointer(op["path"])
        if kind == "test":
            if _walk(doc, parts) != op.get("value"):
                raise ApiError(422, "Invalid", f"json patch test failed at {op['path']}")
            continue
        if kind in ("move", "copy"):
            src = _pointer(op.get("from", ""))
            value = copy.deepcopy(_walk(doc, src))
            if kind == "move":
                doc = _remove(doc, src)
            doc = _add(doc, parts, value)
        elif kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc = _remove(doc, parts)
        elif kind == "replace":
            _walk(doc, parts)  # must exist
            doc = _remove(doc, parts)
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        else:
            raise ApiError(400, "BadRequest", f"unknown json patch op {kind!r}")
    return doc


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        idx = len(parent) if last == "-" else int(last)
        if not 0 <= idx <= len(parent):
            raise ApiError(422, "Invalid", f"json patch: index {last} out of range")
        parent.insert(idx, value)
    else:
        raise ApiError(422, "Invalid", "json patch: parent is not a container")
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return None
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise ApiError(422, "Invalid", f"json patch: nothing to remove at {last!r}")
        del parent[last]
    elif isinstance(parent, list):
        try:
            parent.pop(int(last))
        except (ValueError, IndexError):
            raise ApiError(422, "Invalid", f"json patch: bad list index {last!r}") from None
    return doc


# --------------------------------------------------------------------------- selectors


def _field(obj: dict, dotted: str) -> str:
    cur: Any = obj
    for part in dotted.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def field_matcher(selector: Optional[str]) -> Callable[[dict], bool]:
    """``a.b=x,c!=y`` on dotted paths (missing = empty string, as the server compares)."""
    terms = []
    for term in (selector or "").split(","):
        term = term.strip()
        if not term:
            continue
        m = re.match(r"^([A-Za-z0-9_.\-]+)\s*(==|!=|=)\s*(.*)$", term)
        if not m:
            raise ApiError(400, "BadRequest", f"invalid field selector term {term!r}")
        terms.append((m.group(1), m.group(2) != "!=", m.group(3)))
    return lambda obj: all((_field(obj, k) == v) == eq for k, eq, v in terms)


def label_matcher(selector: Optional[str]) -> Callable[[dict], bool]:
    """Equality (``=``, ``==``, ``!=``), set (``in``, ``notin``) and existence (``k``, ``!k``)."""
    terms: list[Callable[[dict], bool]] = []
    for term in re.split(r",(?![^()]*\))", selector or ""):
        term = term.strip()
        if not term:
            continue
        m = re.match(r"^([\w./\-]+)\s+(in|notin)\s+\(([^)]*)\)$", term)
        if m:
            k, op, vals = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in":
                terms.append(lambda lb, k=k, vals=vals: lb.get(k) in vals)
            else:
                terms.append(lambda lb, k=k, vals=vals: lb.get(k) not in vals)
            continue
        m = re.match(r"^([\w./\-]+)\s*(==|!=|=)\s*([\w.\-]*)$", term)
        if m:
            k, op, v = m.groups()
            if op == "!=":
                terms.append(lambda lb, k=k, v=v: lb.get(k) != v)
            else:
                terms.append(lambda lb, k=k, v=v: lb.get(k) == v)
            continue
        m = re.match(r"^(!?)([\w./\-]+)$", term)
        if m:
            neg, k = m.groups()
            terms.append(lambda lb, k=k, neg=neg: (k in lb) != bool(neg))
            continue
        raise ApiError(400, "BadRequest", f"invalid label selector term {term!r}")
    return lambda obj: all(t((obj.get("metadata") or {}).get("labels") or {}) for t in terms)


# --------------------------------------------------------------------------- faults & records


@dataclass
class InjectedFault:
    kind: str  # status | delay | drop | call
    remaining: int
    status: int = 503
    seconds: float = 0.0
    methods: Optional[frozenset] = None
    path: Optional[re.Pattern] = None
    after_apply: bool = False
    watch: Optional[bool] = None  # None: any request; True/False: only (non-)watch requests
    fn: Optional[Callable[[], None]] = None  # kind "call": run before the request is handled

    def matches(self, method: str, path: str, is_watch: bool) -> bool:
        return (self.remaining > 0 and (self.methods is None or method in self.methods)
                and (self.path is None or self.path.search(path) is not None)
                and (self.watch is None or self.watch == is_watch))


@dataclass
class RequestRecord:
    method: str
    path: str
    query: dict
    content_type: str
    body: Any
    status: int = 0
    changed: bool = False  # a write that changed stored state
    injected: Optional[str] = None  # the fault answered instead of / after the request
    resource_version: Optional[str] = None  # after the request
    target: str = ""  # the request target as sent: path and query string, undecoded
    headers: dict = field(default_factory=dict)  # Accept, Content-Type, Authorization scheme, User-Agent

    @property
    def is_write(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH", "DELETE")


@dataclass
class _Watcher:
    res: Resource
    namespace: Optional[str]
    match: Callable[[dict], bool]
    events: "queue.Queue[tuple[str, dict]]" = field(default_factory=queue.Queue)
    closed: bool = False


# --------------------------------------------------------------------------- the server


class KubeAPIServer:
    """Loopback API server. ``start()`` it, give clients ``url`` + ``token`` (or
    ``write_kubeconfig(path)``), seed objects, inject faults, inspect what happened."""

    def __init__(self, token: str = "test-token", history: int = 10000,
                 bookmark_seconds: float = 1.0, max_watch_seconds: float = 60.0):
        self.token = token
        self.bookmark_seconds = bookmark_seconds
        self.max_watch_seconds = max_watch_seconds  # bound on a watch without timeoutSeconds
        self._lock = threading.RLock()
        self._rv = 100
        self._objects: dict[tuple[Resource, str, str], dict] = {}
        self._history: deque = deque(maxlen=history)  # (rv, res, ns, type, obj, old)
        self._oldest_rv = self._rv  # resumes from before this answer 410
        self._versions: dict[tuple[str, str, str], list[dict]] = {}
        self._watchers: list[_Watcher] = []
        self._faults: list[InjectedFault] = []
        self.requests: list[RequestRecord] = []
        self._stopping = threading.Event()
        self._httpd: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None
        self._names = itertools.count(1)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "KubeAPIServer":
        api = self

        class Handler(_Handler):
            server_api = api

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="kubeapi", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stopping.set()
        self.close_watches()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "KubeAPIServer":
        return self.start() if self._httpd is None else self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() the server first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def write_kubeconfig(self, path: str | Path, *, context: str = "test", token: Optional[str] = None) -> str:
        """A kubeconfig pointing at this server (plain HTTP, bearer token); returns the path."""
        doc = {
            "apiVersion": "v1", "kind": "Config", "current-context": context, "preferences": {},
            "clusters": [{"name": "loopback", "cluster": {"server": self.url}}],
            "users": [{"name": "agent", "user": {"token": token or self.token}}],
            "contexts": [{"name": context, "context": {"cluster": "loopback", "user": "agent"}}],
        }
        Path(path).write_text(json.dumps(doc, indent=2), encoding="utf-8")  # JSON is valid YAML
        return str(path)

    def api_client(self, request_timeout: Optional[float] = None) -> Any:
        """A ``kubernetes.client.ApiClient`` for this server (imports kubernetes lazily)."""
        from kubernetes import client
        cfg = client.Configuration()
        cfg.host = self.url
        cfg.api_key = {"authorization": self.token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(cfg)

    # ------------------------------------------------------------------ seeding & reading
    def seed_node(self, name: str, *, labels: Optional[dict] = None, annotations: Optional[dict] = None,
                  taints: Optional[list] = None, conditions: Optional[list] = None,
                  unschedulable: bool = False, capacity: Optional[dict] = None) -> dict:
        """Create a Ready node like the kubelet registers it; returns the stored object."""
        ts = now_rfc3339()
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "kubelet is posting ready status", "lastHeartbeatTime": ts,
                 "lastTransitionTime": ts}
        spec: dict = {}
        if taints:
            spec["taints"] = copy.deepcopy(taints)
        if unschedulable:
            spec["unschedulable"] = True
        obj = {"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                            "annotations": dict(annotations or {})},
               "spec": spec,
               "status": {"conditions": [ready] + copy.deepcopy(conditions or []),
                          "addresses": [{"type": "Hostname", "address": name}],
                          "capacity": dict(capacity or {"cpu": "64", "memory": "512Gi", "pods": "110"}),
                          "allocatable": dict(capacity or {"cpu": "64", "memory": "512Gi", "pods": "110"}),
                          "nodeInfo": {"bootID": str(uuid_mod.uuid4()), "kubeletVersion": "v1.30.0",
                                       "architecture": "amd64", "containerRuntimeVersion": "containerd://1.7.0",
                                       "kernelVersion": "6.1.0", "kubeProxyVersion": "v1.30.0",
                                       "machineID": "m", "operatingSystem": "linux", "osImage": "Debian",
                                       "systemUUID": "s"}}}
        return self.create(NODES, None, obj)

    def seed_pod(self, namespace: str, name: str, node_name: Optional[str], *, uid: Optional[str] = None,
                 labels: Optional[dict] = None, containers: Iterable[str] = ("main",),
                 phase: str = "Running", annotations: Optional[dict] = None) -> dict:
        obj = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {}),
                            "annotations": dict(annotations or {})},
               "spec": {"containers": [{"name": c, "image": "busybox"} for c in containers]},
               "status": {"phase": phase}}
        if node_name:
            obj["spec"]["nodeName"] = node_name
        if uid:
            obj["metadata"]["uid"] = uid
        return self.create(PODS, namespace, obj)

    def create(self, res: Resource, namespace: Optional[str], obj: dict, dry_run: bool = False) -> dict:
        with self._lock:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            if res.namespaced:
                namespace = namespace or meta.get("namespace") or "default"
                if meta.get("namespace") not in (None, "", namespace):
                    raise ApiError(400, "BadRequest", "the namespace of the provided object does not "
                                                      "match the namespace sent on the request")
                meta["namespace"] = namespace
            else:
                namespace = ""
                meta.pop("namespace", None)
            if not meta.get("name"):
                if not meta.get("generateName"):
                    raise ApiError(422, "Invalid", f"{res.kind}: metadata.name or generateName is required")
                meta["name"] = f"{meta['generateName']}{uuid_mod.uuid4().hex[:5]}{next(self._names)}"
            key = (res, namespace, meta["name"])
            if key in self._objects:
                raise ApiError(409, "AlreadyExists", f'{res.plural} "{meta["name"]}" already exists',
                               {"name": meta["name"], "kind": res.plural})
            if meta.get("resourceVersion"):
                raise ApiError(400, "BadRequest", "resourceVersion should not be set on objects to be created")
            if res is EVENTS:
                _validate_core_event(obj)
            obj["apiVersion"], obj["kind"] = res.api_version, res.kind
            meta.setdefault("uid", str(uuid_mod.uuid4()))
            meta["creationTimestamp"] = now_rfc3339()
            if dry_run:
                meta["resourceVersion"] = str(self._rv)
                return copy.deepcopy(obj)
            self._store(res, namespace, meta["name"], obj, None, "ADDED")
            return copy.deepcopy(obj)

    def get(self, res: Resource, namespace: Optional[str], name: str) -> dict:
        with self._lock:
            obj = self._objects.get((res, namespace or "", name))
            if obj is None:
                raise _not_found(res, name)
            return copy.deepcopy(obj)

    def node(self, name: str) -> dict:
        """The stored Node (a copy)."""
        return self.get(NODES, None, name)

    def list(self, res: Resource, namespace: Optional[str] = None) -> list[dict]:
        with self._lock:
            return [copy.deepcopy(o) for (r, ns, _), o in sorted(self._objects.items(), key=lambda kv: kv[0][1:])
                    if r is res and (namespace is None or ns == namespace)]

    def events(self, *, involved_name: Optional[str] = None, type: Optional[str] = None,
               reason: Optional[str] = None) -> list[dict]:
        """core/v1 and events.k8s.io/v1 events (by creation order), optionally filtered."""
        out = []
        with self._lock:
            objs = [o for (r, _, _), o in self._objects.items() if r in (EVENTS, EVENTS_V1)]
        for o in sorted(objs, key=lambda o: int(o["metadata"]["resourceVersion"])):
            ref = o.get("involvedObject") or o.get("regarding") or {}
            if involved_name is not None and ref.get("name") != involved_name:
                continue
            if type is not None and o.get("type") != type:
                continue
            if reason is not None and o.get("reason") != reason:
                continue
            out.append(copy.deepcopy(o))
        return out

    def versions(self, res: Resource, namespace: Optional[str], name: str) -> list[dict]:
        """Every stored version of an object, oldest first (the last is the current one)."""
        with self._lock:
            return copy.deepcopy(self._versions.get((res.plural, namespace or "", name), []))

    def node_versions(self, name: str) -> list[dict]:
        return self.versions(NODES, None, name)

    def delete(self, res: Resource, namespace: Optional[str], name: str) -> dict:
        with self._lock:
            key = (res, namespace or "", name)
            old = self._objects.get(key)
            if old is None:
                raise _not_found(res, name)
            self._store(res, namespace or "", name, None, old, "DELETED")
            return copy.deepcopy(old)

    def mutate(self, res: Resource, namespace: Optional[str], name: str, fn: Callable[[dict], None]) -> dict:
        """Change an object in place as another client would (bumps resourceVersion, notifies
        watchers): e.g. a human cordoning the node, or another writer racing the agent."""
        with self._lock:
            new = self.get(res, namespace, name)
            fn(new)
            return self._commit(res, namespace or "", name, new)

    def mutate_node(self, name: str, fn: Callable[[dict], None]) -> dict:
        return self.mutate(NODES, None, name, fn)

    @property
    def resource_version(self) -> str:
        with self._lock:
            return str(self._rv)

    def compact(self) -> None:
        """Forget the watch history: a watch resuming from any resourceVersion handed out so far
        gets 410 Expired (deterministically, as after a compaction and a long disconnect); a list
        made afterwards returns a newer resourceVersion that can be watched from."""
        with self._lock:
            self._history.clear()
            self._rv += 1
            self._oldest_rv = self._rv

    def close_watches(self) -> None:
        """End every open watch stream (as an API server restart or a load balancer would)."""
        with self._lock:
            for w in self._watchers:
                w.closed = True
                w.events.put(("__close__", {}))
            self._watchers.clear()

    # ------------------------------------------------------------------ fault injection
    def _add_fault(self, f: InjectedFault, methods: Optional[Iterable[str]], path: Optional[str]) -> None:
        f.methods = frozenset(m.upper() for m in methods) if methods else None
        f.path = re.compile(path) if path else None
        with self._lock:
            self._faults.append(f)

    def fail_next(self, n: int = 1, status: int = 503, *, methods: Optional[Iterable[str]] = None,
                  path: Optional[str] = None, after_apply: bool = False, watch: Optional[bool] = None) -> None:
        """Answer the next ``n`` matching requests with ``status`` (a Status body). With
        ``after_apply`` the request is carried out first (the write happens, the reply is lost).
        ``path`` is a regular expression searched in the URL path."""
        self._add_fault(InjectedFault("status", n, status=status, after_apply=after_apply, watch=watch),
                        methods, path)

    def delay_next(self, n: int = 1, seconds: float = 1.0, *, methods: Optional[Iterable[str]] = None,
                   path: Optional[str] = None, after_apply: bool = False, watch: Optional[bool] = None) -> None:
        """Hold the next ``n`` matching requests ``seconds`` before answering (client timeouts)."""
        self._add_fault(InjectedFault("delay", n, seconds=seconds, after_apply=after_apply, watch=watch),
                        methods, path)

    def drop_next(self, n: int = 1, *, methods: Optional[Iterable[str]] = None, path: Optional[str] = None,
                  after_apply: bool = False, watch: Optional[bool] = None) -> None:
        """Close the connection of the next ``n`` matching requests without an answer."""
        self._add_fault(InjectedFault("drop", n, after_apply=after_apply, watch=watch), methods, path)

    def before_next(self, fn: Callable[[], None], n: int = 1, *, methods: Optional[Iterable[str]] = None,
                    path: Optional[str] = None) -> None:
        """Run ``fn`` (e.g. another client's write through ``mutate_node``) just before the next
        ``n`` matching requests are handled: a genuine race, answered as the server would."""
        self._add_fault(InjectedFault("call", n, fn=fn), methods, path)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _take_fault(self, method: str, path: str, is_watch: bool) -> Optional[InjectedFault]:
        with self._lock:
            for f in self._faults:
                if f.matches(method, path, is_watch):
                    f.remaining -= 1
                    return f
            return None

    # ------------------------------------------------------------------ request records
    def writes(self, *, path: Optional[str] = None, changed: Optional[bool] = None) -> list[RequestRecord]:
        """Recorded write requests (POST/PUT/PATCH/DELETE), optionally by path regex and by
        whether they changed stored state."""
        with self._lock:
            recs = list(self.requests)
        return [r for r in recs if r.is_write and (path is None or re.search(path, r.path))
                and (changed is None or r.changed == changed)]

    # ------------------------------------------------------------------ storage core
    def _store(self, res: Resource, ns: str, name: str, obj: Optional[dict], old: Optional[dict], etype: str) -> None:
        """Write one change: bump the resourceVersion, keep the version, notify watchers."""
        self._rv += 1
        key = (res, ns, name)
        if obj is None:
            del self._objects[key]
            snap = copy.deepcopy(old)
            snap["metadata"]["resourceVersion"] = str(self._rv)
        else:
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self._objects[key] = obj
            snap = copy.deepcopy(obj)
            self._versions.setdefault((res.plural, ns, name), []).append(copy.deepcopy(obj))
        self._history.append((self._rv, res, ns, etype, snap, copy.deepcopy(old)))
        for w in list(self._watchers):
            self._notify(w, res, ns, etype, snap, old)

    def _commit(self, res: Resource, ns: str, name: str, new: dict) -> dict:
        """Store ``new`` over the current object unless nothing changed (no write, no bump)."""
        old = self._objects[(res, ns, name)]
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        for k in ("uid", "creationTimestamp", "name", "namespace"):
            if k in old["metadata"]:
                new["metadata"][k] = old["metadata"][k]
        new["apiVersion"], new["kind"] = res.api_version, res.kind
        if new == old:
            return copy.deepcopy(old)
        self._store(res, ns, name, new, copy.deepcopy(old), "MODIFIED")
        return copy.deepcopy(new)

    @staticmethod
    def _notify(w: _Watcher, res: Resource, ns: str, etype: str, obj: dict, old: Optional[dict]) -> None:
        if w.closed or w.res is not res or (w.namespace not in (None, ns)):
            return
        now_in = w.match(obj) if etype != "DELETED" else False
        was_in = w.match(old) if old is not None else False
        if etype == "DELETED":
            if was_in:
                w.events.put(("DELETED", obj))
        elif now_in and was_in:
            w.events.put(("MODIFIED", obj))
        elif now_in:
            w.events.put(("ADDED", obj))
        elif was_in:  # left the selector: the server sends DELETED with the new state
            w.events.put(("DELETED", obj))

    def _update(self, res: Resource, ns: str, name: str, sub: Optional[str], change: Callable[[dict], dict],
                dry_run: bool) -> tuple[dict, bool]:
        """Apply ``change`` to the current object with the checks of the API server: the
        resourceVersion precondition and what the main resource / status may change."""
        with self._lock:
            cur = self._objects.get((res, ns, name))
            if cur is None:
                raise _not_found(res, name)
            new = change(copy.deepcopy(cur))
            if not isinstance(new, dict) or not isinstance(new.get("metadata", {}), dict):
                raise ApiError(422, "Invalid", "the patched object is not an object")
            new.setdefault("metadata", {})
            want_rv = new["metadata"].get("resourceVersion")
            if want_rv not in (None, "") and str(want_rv) != cur["metadata"]["resourceVersion"]:
                raise _conflict(res, name)
            if new["metadata"].get("name", name) != name:
                raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
            if res.status:
                if sub == "status":  # status strategy: only status changes
                    for k in ("labels", "annotations", "finalizers", "ownerReferences"):
                        if k in cur["metadata"]:
                            new["metadata"][k] = copy.deepcopy(cur["metadata"][k])
                        else:
                            new["metadata"].pop(k, None)
                    if "spec" in cur:
                        new["spec"] = copy.deepcopy(cur["spec"])
                    else:
                        new.pop("spec", None)
                elif "status" in cur:  # main resource: status changes are ignored
                    new["status"] = copy.deepcopy(cur["status"])
                else:
                    new.pop("status", None)
            if res.kind == "Node":
                _validate_node(new)
            if dry_run:
                return new, False
            before = self._rv
            stored = self._commit(res, ns, name, new)
            return stored, self._rv != before

    # ------------------------------------------------------------------ watch
    def _open_watch(self, res: Resource, ns: Optional[str], match: Callable[[dict], bool],
                    rv: Optional[str]) -> tuple[_Watcher, list[tuple[str, dict]], Optional[ApiError]]:
        with self._lock:
            w = _Watcher(res, ns, match)
            backlog: list[tuple[str, dict]] = []
            if rv in (None, "", "0"):
                for (r, ons, _), o in sorted(self._objects.items(), key=lambda kv: kv[0][1:]):
                    if r is res and ns in (None, ons) and match(o):
                        backlog.append(("ADDED", copy.deepcopy(o)))
            else:
                try:
                    since = int(rv)
                except ValueError:
                    return w, [], ApiError(400, "BadRequest", f"invalid resourceVersion {rv!r}")
                if since < self._oldest_rv:
                    return w, [], ApiError(410, "Expired", f"too old resource version: {since} ({self._oldest_rv})")
                probe = _Watcher(res, ns, match)
                for hrv, hres, hns, etype, obj, old in self._history:
                    if hrv > since:
                        self._notify(probe, hres, hns, etype, obj, old)
                while not probe.events.empty():
                    backlog.append(probe.events.get_nowait())
            self._watchers.append(w)
            return w, backlog, None

    def _close_watch(self, w: _Watcher) -> None:
        with self._lock:
            w.closed = True
            if w in self._watchers:
                self._watchers.remove(w)


def _validate_node(node: dict) -> None:
    for i, t in enumerate((node.get("spec") or {}).get("taints") or []):
        if not isinstance(t, dict) or not t.get("key"):
            raise ApiError(422, "Invalid", f"spec.taints[{i}].key: Required value")
        if t.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ApiError(422, "Invalid", f"spec.taints[{i}].effect: Unsupported value: {t.get('effect')!r}")
    seen = set()
    for t in (node.get("spec") or {}).get("taints") or []:
        k = (t["key"], t["effect"])
        if k in seen:
            raise ApiError(422, "Invalid", f"spec.taints: Duplicate value: {t['key']}:{t['effect']}")
        seen.add(k)
    for i, c in enumerate((node.get("status") or {}).get("conditions") or []):
        if not isinstance(c, dict) or not c.get("type") or c.get("status") not in ("True", "False", "Unknown"):
            raise ApiError(422, "Invalid", f"status.conditions[{i}]: type and status True|False|Unknown required")


def _validate_core_event(ev: dict) -> None:
    """legacyValidateEvent: an event about a cluster-scoped object lives in 'default'."""
    ref = ev.get("involvedObject")
    if not isinstance(ref, dict):
        raise ApiError(422, "Invalid", "involvedObject: Required value")
    ns = ev["metadata"].get("namespace", "")
    if not ev.get("eventTime"):
        if not ref.get("namespace"):
            if ns not in ("", "default"):
                raise ApiError(422, "Invalid", "involvedObject.namespace: does not match event.namespace")
        elif ns != ref.get("namespace"):
            raise ApiError(422, "Invalid", "involvedObject.namespace: does not match event.namespace")
    elif not ev.get("reportingComponent") and not ev.get("reportingController"):
        raise ApiError(422, "Invalid", "reportingController: Required value")
    if ev.get("type") not in (None, "", "Normal", "Warning"):
        raise ApiError(422, "Invalid", f"type: Unsupported value: {ev.get('type')!r}")


# --------------------------------------------------------------------------- HTTP


def _truthy(v: Optional[str]) -> bool:
    return v is not None and v.lower() in ("1", "true", "yes")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_api: KubeAPIServer  # set by KubeAPIServer.start

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # ------------------------------------------------------------------ plumbing
    def _send_json(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (timeout): nothing to answer
            self.close_connection = True

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _read_body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ApiError(400, "BadRequest", "the body is not valid JSON") from None

    def _dispatch(self, method: str) -> None:
        api = self.server_api
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        is_watch = method == "GET" and _truthy(query.get("watch"))
        rec = RequestRecord(method, path, query, self.headers.get("Content-Type", ""), None)
        rec.target = self.path
        rec.headers = {k: self.headers[k] for k in ("Accept", "Content-Type", "User-Agent") if k in self.headers}
        if "Authorization" in self.headers:  # the scheme only: tests compare it, the token stays out of logs
            rec.headers["Authorization"] = self.headers["Authorization"].split(" ", 1)[0]
        try:
            rec.body = self._read_body()
        except ApiError as e:
            rec.status = e.code
            self._send_json(e.code, e.status())
            return
        with api._lock:
            api.requests.append(rec)
        fault = api._take_fault(method, path, is_watch)
        if fault is not None:
            rec.injected = fault.kind
        if fault is not None and not fault.after_apply:
            if self._inject(fault, rec):
                return
        auth = self.headers.get("Authorization", "")
        if api.token and auth != f"Bearer {api.token}":
            rec.status = 401
            self._send_json(401, status_body(401, "Unauthorized", "Unauthorized"))
            return
        try:
            if is_watch:
                rec.status = 200
                self._watch(path, query)
                return
            code, body, changed = self._handle(method, path, query, rec.body, rec.content_type)
        except ApiError as e:
            code, body, changed = e.code, e.status(), False
        rec.status, rec.changed, rec.resource_version = code, changed, api.resource_version
        if fault is not None and fault.after_apply:
            if self._inject(fault, rec):
                return
        self._send_json(code, body)

    def _inject(self, fault: InjectedFault, rec: RequestRecord) -> bool:
        """Carry out an injected fault; True when the request is answered (or dropped)."""
        api = self.server_api
        if fault.kind == "call":
            fault.fn()
            return False
        if fault.kind == "delay":
            api._stopping.wait(fault.seconds)
            return False  # then answer normally (the client may have given up)
        if fault.kind == "drop":
            rec.status = 0
            self._drop()
            return True
        rec.status = fault.status
        reason = {500: "InternalError", 502: "BadGateway", 503: "ServiceUnavailable",
                  504: "Timeout", 429: "TooManyRequests", 409: "Conflict"}.get(fault.status, "InternalError")
        self._send_json(fault.status, status_body(fault.status, reason, f"injected fault: {fault.status}"))
        return True

    # ------------------------------------------------------------------ routing
    def _route(self, path: str) -> tuple[Resource, Optional[str], Optional[str], Optional[str]]:
        segs = [s for s in path.split("/") if s]
        if segs[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", segs[2:]
        elif len(segs) >= 3 and segs[0] == "apis":
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if not rest:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        res = RESOURCES.get((group, version, rest[0]))
        if res is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        if res.namespaced is False and ns is not None:
            raise ApiError(404, "NotFound", f"{res.plural} is not namespaced")
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) >= 3 else None
        if sub is not None and (sub != "status" or not res.status):
            raise ApiError(404, "NotFound", f"no subresource {sub!r} on {res.plural}")
        return res, ns, name, sub

    def _handle(self, method: str, path: str, query: dict, body: Any, ctype: str) -> tuple[int, Any, bool]:
        api = self.server_api
        if path in ("/version", "/version/"):
            return 200, {"major": "1", "minor": "30", "gitVersion": "v1.30.0-kubeapi-test"}, False
        if path in ("/healthz", "/readyz", "/livez"):
            return 200, "ok", False
        res, ns, name, sub = self._route(path)
        dry = query.get("dryRun") == "All"
        key_ns = ns or ""
        if name is None:
            if method == "GET":
                return 200, self._list(res, ns, query), False
            if method == "POST":
                if not isinstance(body, dict):
                    raise ApiError(400, "BadRequest", "the body of a create must be an object")
                before = api._rv
                obj = api.create(res, ns, body, dry_run=dry)
                return 201, obj, api._rv != before
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on a collection here")
        if method == "GET":
            return 200, api.get(res, ns, name), False
        if method == "DELETE":
            if dry:
                return 200, api.get(res, ns, name), False
            return 200, api.delete(res, ns, name), True
        if method == "PUT":
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the body of a replace must be an object")
            obj, changed = api._update(res, key_ns, name, sub, lambda cur: copy.deepcopy(body), dry)
            return 200, obj, changed
        if method == "PATCH":
            mt = ctype.split(";")[0].strip().lower()
            if mt == "application/merge-patch+json":
                fn = lambda cur: merge_patch(cur, body)  # noqa: E731
            elif mt == "application/strategic-merge-patch+json":
                fn = lambda cur: strategic_merge_patch(cur, body, res.kind)  # noqa: E731
            elif mt == "application/json-patch+json":
                fn = lambda cur: json_patch(cur, body)  # noqa: E731
            else:
                raise ApiError(415, "UnsupportedMediaType",
                               f"the body of the request was in an unknown format - accepted media types "
                               f"include: application/json-patch+json, application/merge-patch+json, "
                               f"application/strategic-merge-patch+json (got {mt!r})")
            if body is None:
                raise ApiError(400, "BadRequest", "empty patch")
            obj, changed = api._update(res, key_ns, name, sub, fn, dry)
            return 200, obj, changed
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported")

    def _list(self, res: Resource, ns: Optional[str], query: dict) -> dict:
        api = self.server_api
        fm, lm = field_matcher(query.get("fieldSelector")), label_matcher(query.get("labelSelector"))
        with api._lock:
            items = [o for o in api.list(res, ns) if fm(o) and lm(o)]
            rv = str(api._rv)
        return {"kind": f"{res.kind}List", "apiVersion": res.api_version,
                "metadata": {"resourceVersion": rv}, "items": items}

    def _watch(self, path: str, query: dict) -> None:
        api = self.server_api
        res, ns, name, sub = self._route(path)
        if name is not None:
            raise ApiError(405, "MethodNotAllowed", "watch a collection (use fieldSelector metadata.name=...)")
        fm, lm = field_matcher(query.get("fieldSelector")), label_matcher(query.get("labelSelector"))
        w, backlog, err = api._open_watch(res, ns, lambda o: fm(o) and lm(o), query.get("resourceVersion"))
        timeout = float(query.get("timeoutSeconds") or api.max_watch_seconds)
        deadline = time.monotonic() + min(timeout, api.max_watch_seconds)
        bookmarks = _truthy(query.get("allowWatchBookmarks"))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            if err is not None:
                self._chunk({"type": "ERROR", "object": err.status()})
                return
            for etype, obj in backlog:
                self._chunk({"type": etype, "object": obj})
            next_bookmark = time.monotonic() + api.bookmark_seconds
            while not api._stopping.is_set():
                now = time.monotonic()
                if now >= deadline:
                    break
                wait = min(deadline, next_bookmark if bookmarks else deadline) - now
                try:
                    etype, obj = w.events.get(timeout=max(0.01, min(wait, 0.25)))
                except queue.Empty:
                    if bookmarks and time.monotonic() >= next_bookmark:
                        self._chunk({"type": "BOOKMARK", "object": {
                            "kind": res.kind, "apiVersion": res.api_version,
                            "metadata": {"resourceVersion": api.resource_version}}})
                        next_bookmark = time.monotonic() + api.bookmark_seconds
                    continue
                if etype == "__close__":
                    break
                self._chunk({"type": etype, "object": obj})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        finally:
            api._close_watch(w)
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def _chunk(self, event: dict) -> None:
        data = (json.dumps(event) + "\n").encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


# --------------------------------------------------------------------------- fixture


@pytest.fixture
def kube_api():
    """A started KubeAPIServer on 127.0.0.1 (port 0), closed after the test."""
    server = KubeAPIServer().start()
    try:
        yield server
    finally:
        server.close()


# --------------------------------------------------------------------------- standalone


def main(argv: Optional[list] = None) -> int:
    """Serve on 127.0.0.1 as a process of its own (benchmarks: the API server's CPU and memory
    then stay out of the agent's figures): seed nodes and pods, write a kubeconfig, print one
    JSON line ``{"url", "kubeconfig", "pid"}``, serve until SIGTERM / SIGINT.

        python tests/kubeapi.py --kubeconfig /tmp/kc --node gpu-1 [--pods 8] [--pods-json pods.json]
    """
    import argparse
    import os
    import signal

    ap = argparse.ArgumentParser(prog="python tests/kubeapi.py", description=main.__doc__.split("\n\n")[0])
    ap.add_argument("--kubeconfig", required=True, help="where to write the kubeconfig for this server")
    ap.add_argument("--node", action="append", default=[], help="a node to seed (repeatable)")
    ap.add_argument("--pods", type=int, default=0, help="pods to seed on each node (at most 10000)")
    ap.add_argument("--namespace", default="ml-team")
    ap.add_argument("--pods-json", help="a JSON file: a list of Pod objects to create as they are (status too)")
    args = ap.parse_args(argv)
    if not 0 <= args.pods <= 10000:
        ap.error("--pods: 0 to 10000")
    extra = json.loads(Path(args.pods_json).read_text(encoding="utf-8")) if args.pods_json else []
    if not isinstance(extra, list) or not all(isinstance(p, dict) for p in extra):
        ap.error("--pods-json: a JSON list of Pod objects")
    server = KubeAPIServer().start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        for node in args.node:
            server.seed_node(node)
            for i in range(args.pods):
                server.seed_pod(args.namespace, f"{node}-pod-{i}", node, containers=["main"])
        for pod in extra:
            server.create(PODS, None, pod)
        print(json.dumps({"url": server.url, "kubeconfig": server.write_kubeconfig(args.kubeconfig),
                          "pid": os.getpid()}), flush=True)
        stop.wait()
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
