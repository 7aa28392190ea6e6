"""A loopback Kubernetes API server for tests: the real wire protocol, a small faithful core.

No kube-apiserver can be installed here, so tests run the real ``kubernetes`` Python client
against this server. It speaks what the agent uses, the way the API server (1.37) does it:

- ``GET`` an object or a list (``labelSelector``, ``fieldSelector`` on any dotted field such as
  ``spec.nodeName``, ``status.phase`` or ``involvedObject.name``; the kinds of ``FIELD_LABELS``
  accept only their own field labels, 400 otherwise), lists in pages (``limit``, ``continue``,
  ``remainingItemCount``; a token from before ``compact()`` is 410; ``resourceVersion=0`` reads
  the current state, as the watch cache would; ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``
  answers a ``meta.k8s.io/v1`` Table, the node printer's columns, ``includeObject`` None, Metadata
  or Object; 406 when nothing asked can be served), ``POST`` (``generateName``,
  409 AlreadyExists), ``PUT``, ``DELETE`` (a DeleteOptions body: ``preconditions`` on uid and
  resourceVersion, 409 Conflict when they fail; ``dryRun``), and ``PATCH`` with
  ``application/merge-patch+json`` (RFC 7386),
  ``application/strategic-merge-patch+json`` (merge keys of the Kubernetes types: node
  ``status.conditions`` merge by ``type``, ``spec.taints`` are replaced as a list; ``$patch``,
  ``$retainKeys``, ``$deleteFromPrimitiveList`` and ``$setElementOrder`` directives) and
  ``application/json-patch+json`` (RFC 6902, ``test`` included).
- Resources: core/v1 ``nodes`` (+ ``status``), ``pods`` (+ ``status``, + ``eviction``), ``events``,
  ``namespaces``; ``events.k8s.io/v1`` ``events``; ``coordination.k8s.io/v1`` ``leases``;
  ``resource.k8s.io/v1`` ``resourceslices`` and ``devicetaintrules`` (+ ``status``); ``policy/v1``
  ``poddisruptionbudgets`` (+ ``status``). The main resource ignores status changes and the
  ``status`` subresource ignores everything but status (as the strategies do).
- A custom resource: Node Feature Discovery's ``nfd.k8s-sigs.io/v1alpha1`` ``nodefeatures``
  (namespaced, no status subresource, the CRD of NFD 0.17+: ``spec`` and ``status`` required),
  served as the API server serves a CRD: no strategic merge patch (415), no PUT without a
  resourceVersion (422), ``metadata.generation`` bumped by any change outside metadata, the structural schema's types checked (422 Invalid
  naming the field), unknown fields refused or dropped as above, owner references validated.
  ``KubeAPIServer(nfd=False)``: the CRD is not installed (404 on its paths, absent from discovery).
- Discovery: ``/api``, ``/api/v1``, ``/apis``, ``/apis/{group}``, ``/apis/{group}/{version}``
  (APIVersions, APIGroupList, APIGroup, APIResourceList with subresources such as
  ``pods/eviction``); an unserved group/version is 404. ``KubeAPIServer(dra=False)``: no
  resource.k8s.io at all (a cluster without DRA); ``dra_versions=("v1beta2",)``: an older one.
- Decoding and validation where issue 15 needs them (``SCHEMAS``, ``VALIDATORS``): DeviceTaintRule,
  ResourceSlice, Lease (MicroTime), PodDisruptionBudget, pod condition types. A wrong JSON type
  or an unparseable time is 400; an unknown field is 400 (``fieldValidation=Strict``, this
  server's default) or dropped (``Warn`` with a Warning header, ``Ignore``); a bad value is 422
  Invalid with one ``details.causes`` entry per field. The strategies: ``metadata.generation``
  (1, then +1 per spec change) and a DeviceTaint's ``timeAdded`` (set on create, renewed when
  the effect changes).
- Eviction (``POST pods/{name}/eviction``, policy/v1): 201 and the pod deleted, 429
  TooManyRequests with a ``DisruptionBudget`` cause when the PodDisruptionBudget selecting it
  allows no disruption (computed from minAvailable / maxUnavailable, ints or percentages, and the
  running pods it selects, or its ``status.disruptionsAllowed`` where a test set one), 404 for
  an unknown pod, 500 for a pod under two budgets.
- One cluster-wide ``resourceVersion`` bumped on every write that changes an object (a no-op
  patch writes nothing, as in etcd); a stale ``metadata.resourceVersion`` in a patch or PUT body
  is answered 409 Conflict; ``?dryRun=All`` validates without storing.
- ``?watch=true``: chunked JSON lines ``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR,
  "object": ...}``, from a ``resourceVersion`` (410 Expired after ``compact()``) or from now
  with synthetic ADDED events, selectors applied (an object leaving a selector is DELETED),
  ``timeoutSeconds``, bookmarks with ``allowWatchBookmarks``.
- Bearer-token authentication (401 otherwise), Status bodies for every error. The server's own
  token is a cluster admin (``system:masters``: never authorized or admitted, as the API server
  hard-wires it); ``add_user(token, username, groups, extra)`` adds an identity such as a pod-bound
  ServiceAccount token (``extra["authentication.kubernetes.io/node-name"]``). For those,
  ``authorizer`` (RBAC: ``Attributes`` -> allowed) answers 403 Forbidden with the API server's
  message, and every ``admission`` hook (validating admission: the AdmissionRequest, the object
  and the old object -> None or the ApiError to answer) runs on each write after the strategy's
  validation and before storage: create (before AlreadyExists), update and patch (the object as
  patched), delete (after its preconditions), ``pods/eviction`` (the Eviction; the deletion it
  causes is internal and not admitted again), dry runs included.
- Fault injection for the next N matching requests: an HTTP status (``fail_next``), a delay
  (``delay_next``, for client timeouts), a dropped connection (``drop_next``); each one either
  before the request is applied or after it (``after_apply=True``: the write happened but the
  client never hears of it, the case that tempts a client to write twice).
- Seeding: ``seed_node``, ``seed_pod``, ``seed_resource_slice``, ``seed_pdb``; ``mutate`` writes as
  another client would.

Simplified on purpose: deletion is immediate (no grace period, no finalizers), pages after the
first are cut from the current state, a budget's expected pod count is the pods it selects.

Every request is recorded (``requests``), every stored version of every object is kept
(``versions``), so tests assert on what reached the server and on how state evolved. Every
request is also counted by verb and resource (``tally()``: ``{"get nodes": 3, "patch
nodes/status": 1, "watch pods": 1, ...}``, the verbs as RBAC names them) and by second
(``per_second()``: non-watch requests per whole ``time.monotonic()`` second), per client
(``tally_by_client()``, by User-Agent, with ``count_clients=True``), the bytes answered by the
same key (``sent_bytes()``), and the writes that stored nothing apart (``unchanged_writes()``:
refused, or no-ops); a benchmark of many agents passes
``keep_requests=False`` so that only the counts are kept, not every request nor version.

Use the ``kube_api`` fixture (registered in conftest.py) or ``KubeAPIServer().start()``.
"""

from __future__ import annotations

import base64
import copy
import datetime
import itertools
import json
import math
import queue
import re
import socket
import sys
import threading
import time
import uuid as uuid_mod
from collections import Counter, deque
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
    short_names: tuple[str, ...] = ()
    custom: bool = False  # served from a CustomResourceDefinition

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()


NFD_GROUP = "nfd.k8s-sigs.io"  # Node Feature Discovery's custom resources
RESOURCES: dict[tuple[str, str, str], Resource] = {
    (r.group, r.version, r.plural): r
    for r in (
        Resource("", "v1", "nodes", "Node", namespaced=False, status=True, short_names=("no",)),
        Resource("", "v1", "pods", "Pod", namespaced=True, status=True, short_names=("po",)),
        Resource("", "v1", "events", "Event", namespaced=True, short_names=("ev",)),
        Resource("", "v1", "namespaces", "Namespace", namespaced=False, status=True, short_names=("ns",)),
        Resource("events.k8s.io", "v1", "events", "Event", namespaced=True, short_names=("ev",)),
        Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True),
        Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False),
        Resource("resource.k8s.io", "v1", "devicetaintrules", "DeviceTaintRule", namespaced=False, status=True),
        Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True, status=True,
                 short_names=("pdb",)),
        Resource(NFD_GROUP, "v1alpha1", "nodefeatures", "NodeFeature", namespaced=True,
                 custom=True),
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
NODE_FEATURES = RESOURCES[(NFD_GROUP, "v1alpha1", "nodefeatures")]
DRA_GROUP = "resource.k8s.io"
# resource.k8s.io versions that can be served (KubeAPIServer(dra_versions=...)): the v1beta2 schemas of
# ResourceSlice and DeviceTaintRule are those of v1 (v1beta2 was made to become v1), so one stored
# object is served at either version with only its apiVersion changed, as the API server converts.
DRA_VERSIONS = ("v1", "v1beta2")
# Kinds whose spec changes bump metadata.generation (their strategies'); it starts at 1.
GENERATION_KINDS = frozenset({"DeviceTaintRule", "ResourceSlice", "PodDisruptionBudget"})
# Field selectors a kind supports beyond the generic dotted matcher (the others answer 400, as the
# API server's field label conversion does). Kinds not named here keep the generic matcher.
FIELD_LABELS: dict[str, frozenset] = {
    "ResourceSlice": frozenset({"metadata.name", "spec.nodeName", "spec.driver", "spec.pool.name"}),
    "DeviceTaintRule": frozenset({"metadata.name"}),
    "Lease": frozenset({"metadata.name", "metadata.namespace"}),
    "PodDisruptionBudget": frozenset({"metadata.name", "metadata.namespace"}),
}
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]  # deletecollection is not served
SUBRESOURCE_VERBS = ["get", "patch", "update"]

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


def resource_slice(name: str, node_name: str, devices: Iterable[dict], *, driver: str = "gpu.example.com",
                   pool: Optional[str] = None, generation: int = 1, slice_count: int = 1) -> dict:
    """A resource.k8s.io/v1 ResourceSlice of one node-local pool, as a DRA driver writes it."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": driver, "nodeName": node_name,
                     "pool": {"name": pool or node_name, "generation": generation, "resourceSliceCount": slice_count},
                     "devices": copy.deepcopy(list(devices))}}


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


def field_matcher(selector: Optional[str], allowed: Optional[Iterable[str]] = None) -> Callable[[dict], bool]:
    """``a.b=x,c!=y`` on dotted paths (missing = empty string, as the server compares); with
    ``allowed``, a field label outside it is 400 (the kind's field label conversion)."""
    terms = []
    for term in (selector or "").split(","):
        term = term.strip()
        if not term:
            continue
        m = re.match(r"^([A-Za-z0-9_.\-]+)\s*(==|!=|=)\s*(.*)$", term)
        if not m:
            raise ApiError(400, "BadRequest", f"invalid field selector term {term!r}")
        if allowed is not None and m.group(1) not in allowed:
            only = ", ".join(f'"{a}"' for a in sorted(allowed))
            raise ApiError(400, "BadRequest", f'"{m.group(1)}" is not a known field selector: only {only}')
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
    user: str = ""  # the authenticated username

    @property
    def is_write(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH", "DELETE")

    @property
    def as_table(self) -> bool:
        """Asked for a meta.k8s.io Table (``wants_table``), not the objects."""
        return "as=Table" in self.headers.get("Accept", "")


@dataclass
class _Watcher:
    res: Resource
    namespace: Optional[str]
    match: Callable[[dict], bool]
    events: "queue.Queue[tuple[str, dict]]" = field(default_factory=queue.Queue)
    closed: bool = False


# --------------------------------------------------------------------------- identities


MASTERS = "system:masters"  # the API server's hard-wired superuser group: no authorizer, no admission
SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"  # kubectl auth whoami


@dataclass(frozen=True)
class UserInfo:
    """An authenticated identity, as authentication gives it to authorization and admission."""

    username: str
    groups: tuple[str, ...] = ("system:authenticated",)
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def master(self) -> bool:
        return MASTERS in self.groups

    def as_dict(self) -> dict:
        """The AdmissionRequest's ``userInfo``."""
        return {"username": self.username, "groups": list(self.groups), "extra": {k: list(v) for k, v in self.extra}}


@dataclass(frozen=True)
class Attributes:
    """What the authorizer decides on: a resource request (``resource`` "" for a non-resource
    path such as discovery, which every authenticated user may read)."""

    user: UserInfo
    verb: str  # get list watch create update patch delete
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""


def forbidden(a: Attributes) -> ApiError:
    """The API server's 403 for a request RBAC does not allow."""
    what = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
    where = f'in the namespace "{a.namespace}"' if a.namespace else "at the cluster scope"
    group = f"{a.resource}.{a.group}" if a.group else a.resource
    target = f'{group} "{a.name}"' if a.name else group
    return ApiError(403, "Forbidden", f'{target} is forbidden: User "{a.user.username}" cannot '
                                      f'{a.verb} resource "{what}" in API group "{a.group}" {where}',
                    {"name": a.name, "group": a.group, "kind": a.resource} if a.name else
                    {"group": a.group, "kind": a.resource})


# --------------------------------------------------------------------------- the server


class KubeAPIServer:
    """Loopback API server. ``start()`` it, give clients ``url`` + ``token`` (or
    ``write_kubeconfig(path)``), seed objects, inject faults, inspect what happened."""

    def __init__(self, token: str = "test-token", history: int = 10000,
                 bookmark_seconds: float = 1.0, max_watch_seconds: float = 60.0, *, dra: bool = True,
                 dra_versions: Iterable[str] = ("v1",), field_validation: str = "Strict", nfd: bool = True,
                 keep_requests: bool = True, count_clients: bool = False):
        """``dra=False``: resource.k8s.io is not served at all (a cluster without DRA: 404 on its
        paths, absent from discovery); ``dra_versions``: the resource.k8s.io versions served, of
        ``DRA_VERSIONS`` (``("v1beta2",)``: a cluster from before DeviceTaintRule reached v1);
        ``field_validation``: what an unknown field of a schema'd kind gets when the request
        does not say (``Strict``: 400; ``Warn``: dropped, with a Warning header; ``Ignore``);
        ``nfd=False``: NFD's NodeFeature CRD is not installed (404 on nfd.k8s-sigs.io);
        ``keep_requests=False``: requests are counted (``tally``, ``per_second``), not recorded, and
        the objects' versions are not kept (``versions`` answers []);
        ``count_clients``: counted per client too (``tally_by_client``, by User-Agent)."""
        versions = tuple(dra_versions)
        if not versions or any(v not in DRA_VERSIONS for v in versions):
            raise ValueError(f"dra_versions: some of {DRA_VERSIONS}, not {versions!r}")
        if field_validation not in ("Strict", "Warn", "Ignore"):
            raise ValueError(f"field_validation: Strict, Warn or Ignore, not {field_validation!r}")
        self.dra, self.dra_versions, self.field_validation = dra, versions, field_validation
        self.nfd = nfd
        self._local = threading.local()  # per request: fieldValidation, warnings, the version asked for
        self.token = token
        # bearer token -> identity; the server's own token is a cluster admin
        self.users: dict[str, UserInfo] = {token: UserInfo("kubernetes-admin", (MASTERS, "system:authenticated"))}
        self.authorizer: Optional[Callable[[Attributes], bool]] = None  # None: every identity may do anything
        # validating admission: (AdmissionRequest, object, oldObject) -> None, or the ApiError to answer
        self.admission: list[Callable[[dict, Optional[dict], Optional[dict]], Optional[ApiError]]] = []
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
        self.keep_requests = keep_requests
        self._tally: Counter = Counter()  # "verb resource[/sub]" -> requests
        self._seconds: Counter = Counter()  # whole monotonic second -> non-watch requests
        self._unchanged: Counter = Counter()  # "verb resource code" -> writes that stored nothing
        self._sent: Counter = Counter()  # "verb resource[/sub]" -> bytes of JSON answered (watches apart)
        self.count_clients = count_clients
        self._by_client: dict[str, Counter] = {}  # User-Agent -> its tally (count_clients)
        self._stopping = threading.Event()
        self._httpd: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None
        self._names = itertools.count(1)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "KubeAPIServer":
        api = self

        class Handler(_Handler):
            server_api = api

        class Server(ThreadingHTTPServer):
            request_queue_size = 1024  # the listen backlog: a fleet of agents connects at once (socketserver's is 5)

            def handle_error(self, request: Any, client_address: Any) -> None:
                if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that gave up: nothing to say
                    super().handle_error(request, client_address)

        self._httpd = Server(("127.0.0.1", 0), Handler)
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

    def add_user(self, token: str, username: str, groups: Iterable[str] = (),
                 extra: Optional[dict[str, list[str]]] = None) -> UserInfo:
        """Accept ``token`` as ``username`` (a ServiceAccount's: groups system:serviceaccounts and
        system:serviceaccounts:<ns> are added, as the token authenticator does); ``extra`` such as
        ``{"authentication.kubernetes.io/node-name": [node]}`` of a pod-bound token."""
        g = list(groups)
        if username.startswith("system:serviceaccount:"):
            g += ["system:serviceaccounts", f"system:serviceaccounts:{username.split(':')[2]}"]
        user = UserInfo(username, tuple(dict.fromkeys(g + ["system:authenticated"])),
                        tuple((k, tuple(v)) for k, v in sorted((extra or {}).items())))
        with self._lock:
            self.users[token] = user
        return user

    def _admit(self, operation: str, res: Resource, sub: Optional[str], ns: str, name: str,
               obj: Optional[dict], old: Optional[dict], dry_run: bool = False) -> None:
        """Validating admission of a write by the current request's identity (none: a test's own
        seeding or ``mutate``, which no admission sees); raises the first hook's ApiError."""
        user: Optional[UserInfo] = getattr(self._local, "user", None)
        if user is None or user.master or not self.admission:
            return
        request = {"operation": operation, "name": name, "namespace": ns, "dryRun": dry_run,
                   "resource": {"group": res.group, "version": getattr(self._local, "version", None) or res.version,
                                "resource": res.plural},
                   "subResource": sub or "", "kind": {"group": res.group, "version": res.version, "kind": res.kind},
                   "userInfo": user.as_dict()}
        for hook in list(self.admission):
            err = hook(copy.deepcopy(request), copy.deepcopy(obj), copy.deepcopy(old))
            if err is not None:
                raise err

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

    def seed_resource_slice(self, name: str, node_name: str, devices: Iterable[dict], *,
                            driver: str = "gpu.example.com", pool: Optional[str] = None,
                            generation: int = 1) -> dict:
        """Create a ResourceSlice as a DRA driver publishes it for ``node_name`` (pool = node name
        unless given); ``devices``: ``{"name": ..., "attributes": {...}}`` entries."""
        return self.create(RESOURCE_SLICES, None, resource_slice(name, node_name, devices, driver=driver,
                                                                 pool=pool, generation=generation))

    def seed_pdb(self, namespace: str, name: str, selector: dict, *, min_available: Any = None,
                 max_unavailable: Any = None, status: Optional[dict] = None) -> dict:
        """Create a PodDisruptionBudget (``status`` as the disruption controller would have written
        it, e.g. ``{"disruptionsAllowed": 0}``; without it the eviction computes the budget)."""
        spec: dict = {"selector": copy.deepcopy(selector)}
        if min_available is not None:
            spec["minAvailable"] = min_available
        if max_unavailable is not None:
            spec["maxUnavailable"] = max_unavailable
        obj = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        if status is not None:
            obj["status"] = copy.deepcopy(status)
        return self.create(PDBS, namespace, obj)

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
            obj = self._decode(res, obj)
            meta = obj["metadata"]
            prepare(res, obj, None)
            self._validate(res, obj)
            self._admit("CREATE", res, None, namespace, meta["name"], obj, None, dry_run)
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

    def list(self, res: Resource, namespace: Optional[str] = None,
             match: Optional[Callable[[dict], bool]] = None) -> list[dict]:
        """Copies of the stored objects of ``res`` (of ``namespace``; those ``match`` accepts,
        judged on the stored objects before any copy), by namespace and name."""
        with self._lock:
            found = [(key[1:], o) for key, o in self._objects.items()
                     if key[0] is res and (namespace is None or key[1] == namespace) and (match is None or match(o))]
            return [copy.deepcopy(o) for _, o in sorted(found, key=lambda kv: kv[0])]

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

    def delete(self, res: Resource, namespace: Optional[str], name: str, *,
               preconditions: Optional[dict] = None, admit: bool = True) -> dict:
        """Delete now (no graceful deletion, no finalizers); ``preconditions`` as in DeleteOptions
        (uid, resourceVersion): 409 Conflict when the object is not that one any more.
        ``admit=False``: an internal deletion (an eviction's), not admitted again."""
        with self._lock:
            key = (res, namespace or "", name)
            old = self._objects.get(key)
            if old is None:
                raise _not_found(res, name)
            check_preconditions(res, old, preconditions)
            if admit:
                self._admit("DELETE", res, None, namespace or "", name, None, old)
            self._store(res, namespace or "", name, None, old, "DELETED")
            return copy.deepcopy(old)

    def evict(self, namespace: str, name: str, body: Any) -> dict:
        """``POST pods/{name}/eviction`` (policy/v1 Eviction): the pod is deleted unless the one
        PodDisruptionBudget selecting it allows no disruption (429 TooManyRequests, cause
        DisruptionBudget). Pods that are not running (Pending, Succeeded, Failed) ignore budgets,
        as the eviction REST handler does; an unhealthy pod may go while the budget is met."""
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of an eviction must be a policy/v1 Eviction")
        ev = Decoder("Eviction").value(body, EVICTION, "")
        if ev.get("kind") not in (None, "", "Eviction") or \
                ev.get("apiVersion") not in (None, "", "policy/v1", "policy/v1beta1"):
            raise ApiError(400, "BadRequest", f"the body is not a policy/v1 Eviction (kind {ev.get('kind')!r}, "
                                              f"apiVersion {ev.get('apiVersion')!r})")
        meta = ev.get("metadata") if isinstance(ev.get("metadata"), dict) else {}
        if meta.get("name") != name:
            raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
        if meta.get("namespace") not in (None, "", namespace):
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the "
                                              "namespace sent on the request")
        with self._lock:
            self._admit("CREATE", PODS, "eviction", namespace, name, ev, None)
            pod = self.get(PODS, namespace, name)
            check_preconditions(PODS, pod, (ev.get("deleteOptions") or {}).get("preconditions"))
            running = (pod.get("status") or {}).get("phase") not in ("Pending", "Succeeded", "Failed") \
                and not pod["metadata"].get("deletionTimestamp")
            if running:
                labels = pod["metadata"].get("labels") or {}
                budgets = [b for b in self.list(PDBS, namespace)
                           if selector_matches((b.get("spec") or {}).get("selector"), labels)]
                if len(budgets) > 1:
                    raise ApiError(500, "InternalError", "This pod has more than one PodDisruptionBudget, "
                                                         "which the eviction subresource does not support.")
                if budgets:
                    self._spend_budget(budgets[0], pod, namespace)
            self.delete(PODS, namespace, name, admit=False)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _spend_budget(self, pdb: dict, pod: dict, namespace: str) -> None:
        spec = pdb.get("spec") or {}
        selected = [p for p in self.list(PODS, namespace) if not p["metadata"].get("deletionTimestamp")
                    and selector_matches(spec.get("selector"), p["metadata"].get("labels") or {})]
        allowed, desired, current = disruption_status(pdb, selected)
        if not pod_healthy(pod) and (spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow" or current >= desired):
            return  # an unhealthy pod does not count against a budget that is met
        if allowed < 0:
            raise ApiError(403, "Forbidden", "pdb disruptions allowed is negative")
        if allowed == 0:
            raise ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
                           {"causes": [{"reason": "DisruptionBudget",
                                        "message": f"The disruption budget {pdb['metadata']['name']} needs {desired} "
                                                   f"healthy pods and has {current} currently"}]})
        status = dict(pdb.get("status") or {})
        if "disruptionsAllowed" in status:  # a budget a test set: spend it, as the API server records it
            status["disruptionsAllowed"] = allowed - 1
            status["disruptedPods"] = {**(status.get("disruptedPods") or {}), pod["metadata"]["name"]: now_rfc3339()}
            self._commit(PDBS, namespace, pdb["metadata"]["name"], {**pdb, "status": status})

    # ------------------------------------------------------------------ what is served
    def served_versions(self, group: str) -> list[str]:
        """The versions of ``group`` this server answers ("" is core); [] when not served."""
        if group == DRA_GROUP:
            return list(self.dra_versions) if self.dra else []
        if group == NFD_GROUP and not self.nfd:
            return []
        return sorted({r.version for r in RESOURCES.values() if r.group == group})

    def resolve(self, group: str, version: str, plural: str) -> Optional[Resource]:
        """The stored resource behind a served group/version/plural, or None (404)."""
        if version not in self.served_versions(group):
            return None
        return RESOURCES.get((group, "v1" if group == DRA_GROUP else version, plural))

    # ------------------------------------------------------------------ decoding and validation
    def _decode(self, res: Resource, obj: dict) -> dict:
        schema = SCHEMAS.get(res.kind)
        if schema is None:
            return obj
        if res.custom:  # unstructured JSON: nothing fails to decode, unknown fields are pruned
            unknown: list[str] = []
            out = prune_unknown(obj, {"apiVersion": ANY, "kind": ANY, "metadata": ANY, "spec": schema,
                                      "status": ANY}, "", unknown)
        else:
            decoder = Decoder(res.kind, getattr(self._local, "version", None) or res.version)
            out = decoder.object(obj, schema)
            unknown = decoder.unknown
        if unknown:
            mode = getattr(self._local, "field_validation", None) or self.field_validation
            if mode == "Strict":
                raise unknown_fields_error(unknown)
            if mode == "Warn":
                self._local.warnings = [f'unknown field "{f}"' for f in unknown]
        return out

    @staticmethod
    def _validate(res: Resource, obj: dict) -> None:
        fn = VALIDATORS.get(res.kind)
        if fn is not None:
            errs = FieldErrors()
            fn(obj, errs)
            errs.check(res, str((obj.get("metadata") or {}).get("name") or ""))

    def mutate(self, res: Resource, namespace: Optional[str], name: str, fn: Callable[[dict], None]) -> dict:
        """Change an object in place as another client would (bumps resourceVersion, notifies
        watchers): e.g. a human cordoning the node, or another writer racing the agent."""
        with self._lock:
            new = self.get(res, namespace, name)
            fn(new)
            prepare(res, new, self._objects[(res, namespace or "", name)])  # generation, as a client's write
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

    def node_lists(self, *, table: Optional[bool] = None) -> list[RequestRecord]:
        """Recorded LISTs of the Nodes (not watches); ``table``: only those asked as a Table (True)
        or for the whole Nodes (False)."""
        with self._lock:
            recs = list(self.requests)
        return [r for r in recs if r.method == "GET" and r.path == "/api/v1/nodes" and not _truthy(r.query.get("watch"))
                and (table is None or r.as_table == table)]

    def tally(self) -> dict[str, int]:
        """Requests so far by verb and resource: ``"list nodes"``, ``"patch nodes/status"``,
        ``"create pods/eviction"``, ``"watch pods"``; a path that routes to no resource (discovery,
        /version) is counted under its verb and ``"-"``."""
        with self._lock:
            return dict(self._tally)

    def per_second(self) -> dict[int, int]:
        """Non-watch requests per whole ``time.monotonic()`` second (a system-wide clock on Linux:
        another process can compare its own readings)."""
        with self._lock:
            return dict(self._seconds)

    @staticmethod
    def _key(method: str, path: str, is_watch: bool) -> str:
        """``"verb resource[/sub]"`` of a request, the verbs as RBAC names them."""
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
        segs = [s for s in path.split("/") if s]
        if segs[:1] == ["api"]:
            rest = segs[2:]
        elif segs[:1] == ["apis"]:
            rest = segs[3:]
        else:
            rest = []
        if len(rest) >= 3 and rest[0] == "namespaces":
            rest = rest[2:]
        resource = "/".join([rest[0]] + rest[2:3]) if rest else "-"
        if verb is None:
            verb = "watch" if is_watch else ("get" if len(rest) >= 2 else "list")
        return f"{verb} {resource}"

    def _count(self, method: str, path: str, is_watch: bool, client: str = "") -> str:
        key = self._key(method, path, is_watch)
        with self._lock:
            self._tally[key] += 1
            if not is_watch:
                self._seconds[int(time.monotonic())] += 1
            if self.count_clients:
                self._by_client.setdefault(client, Counter())[key] += 1
        return key

    def _settled(self, key: str, code: int, changed: bool) -> None:
        """A write that stored nothing (refused: 4xx/5xx, or a no-op) is counted apart too."""
        if key.split(" ", 1)[0] in ("create", "update", "patch", "delete") and (code >= 400 or not changed):
            with self._lock:
                self._unchanged[f"{key} {code}"] += 1

    def unchanged_writes(self) -> dict[str, int]:
        """Writes that stored nothing, by ``"verb resource code"`` (``"create leases 409"``: a
        create answered AlreadyExists; ``"patch nodes 200"``: a patch that changed nothing)."""
        with self._lock:
            return dict(self._unchanged)

    def sent_bytes(self) -> dict[str, int]:
        """Bytes of the JSON bodies answered so far, by ``tally()``'s key (a watch's events are
        not counted)."""
        with self._lock:
            return dict(self._sent)

    def tally_by_client(self) -> dict[str, dict[str, int]]:
        """``tally()`` per client (the request's User-Agent), with ``count_clients=True``."""
        with self._lock:
            return {c: dict(t) for c, t in self._by_client.items()}

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
            if self.keep_requests:  # a benchmark keeps counts only, not every version
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
            new = self._decode(res, new)
            prepare(res, new, cur)
            self._validate(res, new)
            self._admit("UPDATE", res, sub, ns, name, new, cur, dry_run)
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


# --------------------------------------------------------------------------- decoding (400) and validation (422)
#
# The API server first decodes the JSON into the Go type (a value of the wrong JSON type or an
# unparseable time is 400 BadRequest; an unknown field is dropped with a warning, or refused with
# ``fieldValidation=Strict``), then runs the kind's strategy (generation, defaults such as a
# DeviceTaint's timeAdded) and its validation (422 Invalid, one StatusCause per field). The
# schemas below cover the kinds whose every field matters to issue 15; other kinds are stored as
# sent. This server refuses unknown fields by default (``KubeAPIServer(field_validation="Strict")``)
# where the real default is ``Warn``: a field the server would drop (a v1alpha3
# ``deviceSelector.deviceClassName``) means the client asks for something it will not get.

STRING, INT, BOOL, TIME, MICRO_TIME, INT_OR_STRING, ANY = "string", "int64", "bool", "Time", "MicroTime", \
    "IntOrString", "any"
_GO_LAYOUT = {TIME: "2006-01-02T15:04:05Z07:00", MICRO_TIME: "2006-01-02T15:04:05.000000Z07:00"}
_TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_MICRO_TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")

_DEVICE_TAINT = {"key": STRING, "value": STRING, "effect": STRING, "timeAdded": TIME}
SCHEMAS: dict[str, dict] = {
    "DeviceTaintRule": {"deviceSelector": {"driver": STRING, "pool": STRING, "device": STRING},
                        "taint": _DEVICE_TAINT},
    "ResourceSlice": {
        "driver": STRING, "pool": {"name": STRING, "generation": INT, "resourceSliceCount": INT},
        "nodeName": STRING, "nodeSelector": ANY, "allNodes": BOOL, "perDeviceNodeSelection": BOOL,
        "sharedCounters": [ANY], "partitionTypeAttribute": STRING, "skipNodeOperations": [STRING],
        "devices": [{
            "name": STRING, "capacity": {"*": ANY}, "consumesCounters": [ANY], "nodeName": STRING,
            "nodeSelector": ANY, "allNodes": BOOL, "taints": [_DEVICE_TAINT], "bindsToNode": BOOL,
            "bindingConditions": [STRING], "bindingFailureConditions": [STRING],
            "allowMultipleAllocations": BOOL, "nodeAllocatableResources": {"*": ANY},
            "attributes": {"*": {"int": INT, "bool": BOOL, "string": STRING, "version": STRING,
                                 "ints": [INT], "bools": [BOOL], "strings": [STRING], "versions": [STRING]}},
        }],
    },
    "Lease": {"holderIdentity": STRING, "leaseDurationSeconds": INT, "acquireTime": MICRO_TIME,
              "renewTime": MICRO_TIME, "leaseTransitions": INT, "preferredHolder": STRING, "strategy": STRING},
    "PodDisruptionBudget": {"minAvailable": INT_OR_STRING, "maxUnavailable": INT_OR_STRING, "selector": ANY,
                            "unhealthyPodEvictionPolicy": STRING},
    # pruning only (unknown fields); the types are the structural schema's, checked with 422 by
    # validate_node_feature, as the API server validates a custom resource
    "NodeFeature": {"features": {"flags": ANY, "attributes": ANY, "instances": ANY}, "labels": ANY},
}
DELETE_OPTIONS = {"kind": STRING, "apiVersion": STRING, "gracePeriodSeconds": INT, "orphanDependents": BOOL,
                  "preconditions": {"uid": STRING, "resourceVersion": STRING}, "propagationPolicy": STRING,
                  "dryRun": [STRING], "ignoreStoreReadErrorWithClusterBreakingPotential": BOOL}
EVICTION = {"kind": STRING, "apiVersion": STRING, "metadata": ANY, "deleteOptions": DELETE_OPTIONS}


def _json_type(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return f"number {v}" if isinstance(v, float) else "number"
    return {str: "string", list: "array", dict: "object"}.get(type(v), "null")


class Decoder:
    """JSON -> the Go type's shape: wrong types are 400 (the message names the field), times are
    normalized as the server writes them back (UTC; Time to the second, MicroTime to the µs),
    unknown fields are collected in ``unknown`` and left out of the result."""

    def __init__(self, kind: str, version: str = "v1"):
        self.kind, self.version = kind, version
        self.unknown: list[str] = []

    def bad(self, path: str, detail: str) -> ApiError:
        return ApiError(400, "BadRequest", f'{self.kind} in version "{self.version}" cannot be handled as a '
                                           f"{self.kind}: {detail}")

    def mismatch(self, v: Any, path: str, want: str) -> ApiError:
        return self.bad(path, f"json: cannot unmarshal {_json_type(v)} into Go struct field {self.kind}.{path} "
                              f"of type {want}")

    def value(self, v: Any, schema: Any, path: str) -> Any:
        if v is None or schema == ANY:
            return v
        if isinstance(schema, list):
            if not isinstance(v, list):
                raise self.mismatch(v, path, "[]" + (schema[0] if isinstance(schema[0], str) else "object"))
            return [self.value(x, schema[0], f"{path}[{i}]") for i, x in enumerate(v)]
        if isinstance(schema, dict):
            if not isinstance(v, dict):
                raise self.mismatch(v, path, "map" if "*" in schema else "object")
            if "*" in schema:
                return {k: self.value(x, schema["*"], f"{path}[{k}]") for k, x in v.items()}
            out = {}
            for k, x in v.items():
                if k in schema:
                    out[k] = self.value(x, schema[k], f"{path}.{k}" if path else k)
                else:
                    self.unknown.append(f"{path}.{k}" if path else k)
            return out
        ok = {STRING: isinstance(v, str), BOOL: isinstance(v, bool),
              INT: isinstance(v, int) and not isinstance(v, bool),
              INT_OR_STRING: isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)),
              TIME: isinstance(v, str), MICRO_TIME: isinstance(v, str)}[schema]
        if not ok:
            raise self.mismatch(v, path, schema)
        return self.time(v, schema, path) if schema in (TIME, MICRO_TIME) else v

    def time(self, v: str, schema: str, path: str) -> str:
        pattern = _MICRO_TIME_RE if schema == MICRO_TIME else _TIME_RE
        try:
            if not pattern.match(v):
                raise ValueError(v)
            t = datetime.datetime.fromisoformat(v.replace("Z", "+00:00")).astimezone(datetime.timezone.utc)
        except ValueError:
            raise self.bad(path, f'{path}: parsing time "{v[:64]}" as "{_GO_LAYOUT[schema]}": cannot parse') from None
        return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if schema == MICRO_TIME else "%Y-%m-%dT%H:%M:%SZ")

    def object(self, obj: dict, spec_schema: dict) -> dict:
        """A whole object: its top-level fields and its spec (metadata and status stored as sent)."""
        top = {"apiVersion": STRING, "kind": STRING, "metadata": ANY, "spec": spec_schema, "status": ANY}
        return self.value(obj, top, "")


def prune_unknown(v: Any, schema: Any, path: str, unknown: list[str]) -> Any:
    """A custom resource's structural pruning: fields its schema does not name are dropped (and
    listed in ``unknown``); where the value is not of the schema's shape it is kept for the
    validation to refuse (422), never a decoding error."""
    if schema == ANY or not isinstance(schema, dict) or "*" in schema or not isinstance(v, dict):
        return v
    out = {}
    for k, x in v.items():
        sub = f"{path}.{k}" if path else k
        if k in schema:
            out[k] = prune_unknown(x, schema[k], sub, unknown)
        else:
            unknown.append(sub)
    return out


def unknown_fields_error(unknown: list[str]) -> ApiError:
    listed = ", ".join(f'unknown field "{f}"' for f in unknown)
    return ApiError(400, "BadRequest", f"strict decoding error: {listed}")


_CAUSES = {"Required value": "FieldValueRequired", "Invalid value": "FieldValueInvalid",
           "Unsupported value": "FieldValueNotSupported", "Duplicate value": "FieldValueDuplicate",
           "Too long": "FieldValueTooLong", "Too many": "FieldValueTooMany", "Forbidden": "FieldValueForbidden"}


def _quote(v: Any) -> str:
    return json.dumps(v) if isinstance(v, (str, int, float, bool)) or v is None else json.dumps(v, sort_keys=True)


class FieldErrors:
    """A field.ErrorList: ``required`` / ``invalid`` / ... collect, ``check`` raises one 422 Invalid
    whose details.causes name each field (``reason``, ``message``, ``field``), as the API server's."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, str, str]] = []  # (field, type, detail)

    def add(self, path: str, kind: str, detail: str = "") -> None:
        self.errors.append((path, kind, detail))

    def required(self, path: str, detail: str = "") -> None:
        self.add(path, "Required value", detail)

    def invalid(self, path: str, value: Any, detail: str) -> None:
        self.add(path, "Invalid value", f"{_quote(value)}: {detail}")

    def unsupported(self, path: str, value: Any, supported: Iterable[str]) -> None:
        self.add(path, "Unsupported value",
                 f"{_quote(value)}: supported values: " + ", ".join(f'"{s}"' for s in sorted(supported)))

    def check(self, res: Resource, name: str) -> None:
        if not self.errors:
            return
        texts = [f"{k}: {d}" if d else k for _, k, d in self.errors]
        whole = [f"{f}: {t}" for (f, _, _), t in zip(self.errors, texts)]
        what = f"{res.kind}.{res.group}" if res.group else res.kind
        listed = whole[0] if len(whole) == 1 else "[" + ", ".join(whole) + "]"
        raise ApiError(422, "Invalid", f'{what} "{name}" is invalid: {listed}', {
            "name": name, "group": res.group, "kind": res.kind,
            "causes": [{"reason": _CAUSES[k], "message": t, "field": f}
                       for (f, k, _), t in zip(self.errors, texts)]})


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                     r"(-(0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(\.(0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*)?"
                     r"(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$")


def _shaped(errs: FieldErrors, path: str, v: str, limit: int, pattern: re.Pattern, rule: str,
            empty: bool = False) -> None:
    """``v`` at most ``limit`` characters matching ``pattern`` (or empty where ``empty``)."""
    if len(v) > limit:
        errs.invalid(path, v, f"must be no more than {limit} characters")
    elif not (empty and not v) and not pattern.match(v):
        errs.invalid(path, v, rule)


def dns_subdomain(errs: FieldErrors, path: str, v: str, limit: int = 253) -> None:
    _shaped(errs, path, v, limit, _DNS_SUBDOMAIN, "a lowercase RFC 1123 subdomain must consist of lower case "
            "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")


def dns_label(errs: FieldErrors, path: str, v: str) -> None:
    _shaped(errs, path, v, 63, _DNS_LABEL, "a lowercase RFC 1123 label must consist of lower case alphanumeric "
            "characters or '-', and must start and end with an alphanumeric character")


def qualified_name(errs: FieldErrors, path: str, v: str) -> None:
    """A label key: ``[prefix/]name``, prefix a DNS subdomain, name <= 63 characters."""
    parts = v.split("/")
    if len(parts) > 2:
        errs.invalid(path, v, "a qualified name must consist of alphanumeric characters, '-', '_' or '.', "
                              "with an optional DNS subdomain prefix and '/'")
        return
    if len(parts) == 2:
        if not parts[0]:
            errs.invalid(path, v, "prefix part must be non-empty")
        else:
            dns_subdomain(errs, path, parts[0])
    name = parts[-1]
    if not name:
        errs.invalid(path, v, "name part must be non-empty")
    elif len(name) > 63:
        errs.invalid(path, v, "name part must be no more than 63 characters")
    elif not _NAME_PART.match(name):
        errs.invalid(path, v, "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
                              "start and end with an alphanumeric character")


def label_value(errs: FieldErrors, path: str, v: str) -> None:
    _shaped(errs, path, v, 63, _NAME_PART, "a valid label must be an empty string or consist of alphanumeric "
            "characters, '-', '_' or '.', and must start and end with an alphanumeric character", empty=True)


def _metadata(errs: FieldErrors, obj: dict) -> None:
    """ObjectMeta of the kinds validated here: a DNS-subdomain name, valid labels."""
    meta = obj.get("metadata") or {}
    dns_subdomain(errs, "metadata.name", str(meta.get("name") or ""))
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        errs.invalid("metadata.labels", labels, "must be a map of strings")
        return
    for k, v in labels.items():
        qualified_name(errs, "metadata.labels", k)
        label_value(errs, f"metadata.labels[{k}]", v if isinstance(v, str) else str(v))


DEVICE_TAINT_EFFECTS = ("None", "NoSchedule", "NoExecute")


def _device_taint(errs: FieldErrors, path: str, taint: dict) -> None:
    if not taint.get("key"):
        errs.required(f"{path}.key")
    else:
        qualified_name(errs, f"{path}.key", taint["key"])
    if taint.get("value"):
        label_value(errs, f"{path}.value", taint["value"])
    if not taint.get("effect"):
        errs.required(f"{path}.effect")
    elif taint["effect"] not in DEVICE_TAINT_EFFECTS:
        errs.unsupported(f"{path}.effect", taint["effect"], DEVICE_TAINT_EFFECTS)


def _pool_name(errs: FieldErrors, path: str, v: str) -> None:
    if len(v) > 253:
        errs.add(path, "Too long", "may not be more than 253 bytes")
        return
    for part in v.split("/"):
        dns_subdomain(errs, path, part)


def validate_device_taint_rule(obj: dict, errs: FieldErrors) -> None:
    _metadata(errs, obj)
    spec = obj.get("spec") or {}
    sel = spec.get("deviceSelector") or {}
    if sel.get("driver"):
        dns_subdomain(errs, "spec.deviceSelector.driver", sel["driver"], limit=63)
    if sel.get("pool"):
        _pool_name(errs, "spec.deviceSelector.pool", sel["pool"])
    if sel.get("device"):
        dns_label(errs, "spec.deviceSelector.device", sel["device"])
    _device_taint(errs, "spec.taint", spec.get("taint") or {})


_NODE_SELECTION = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


def _selection(where: dict, fields: Iterable[str]) -> list[str]:
    return [f for f in fields if where.get(f) not in (None, "", False)]


def validate_resource_slice(obj: dict, errs: FieldErrors) -> None:
    _metadata(errs, obj)
    spec = obj.get("spec") or {}
    if not spec.get("driver"):
        errs.required("spec.driver")
    else:
        dns_subdomain(errs, "spec.driver", spec["driver"], limit=63)
    pool = spec.get("pool") or {}
    if not pool.get("name"):
        errs.required("spec.pool.name")
    else:
        _pool_name(errs, "spec.pool.name", pool["name"])
    if (pool.get("generation") or 0) < 0:
        errs.invalid("spec.pool.generation", pool["generation"], "must be greater than or equal to 0")
    if (pool.get("resourceSliceCount") or 0) <= 0:
        errs.invalid("spec.pool.resourceSliceCount", pool.get("resourceSliceCount") or 0, "must be greater than zero")
    chosen = _selection(spec, _NODE_SELECTION)
    exactly = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
    if not chosen:
        errs.required("spec", exactly)
    elif len(chosen) > 1:
        errs.invalid("spec", chosen, exactly)
    if spec.get("nodeName"):
        dns_subdomain(errs, "spec.nodeName", spec["nodeName"])
    devices = spec.get("devices") or []
    if len(devices) > 128:
        errs.add("spec.devices", "Too many", f"{len(devices)}: must have at most 128 items")
    seen: set = set()
    for i, dev in enumerate(devices):
        _device(errs, f"spec.devices[{i}]", dev, per_device=bool(spec.get("perDeviceNodeSelection")), seen=seen)


def _device(errs: FieldErrors, path: str, dev: dict, *, per_device: bool, seen: set) -> None:
    name = dev.get("name")
    if not name:
        errs.required(f"{path}.name")
    else:
        dns_label(errs, f"{path}.name", name)
        if name in seen:
            errs.add(f"{path}.name", "Duplicate value", _quote(name))
        seen.add(name)
    attrs = dev.get("attributes") or {}
    if len(attrs) + len(dev.get("capacity") or {}) > 32:
        errs.invalid(path, len(attrs), "the total number of attributes and capacities must not exceed 32")
    for key, attr in attrs.items():
        _attribute(errs, f"{path}.attributes[{key}]", key, attr or {})
    chosen = _selection(dev, ("nodeName", "nodeSelector", "allNodes"))
    if per_device and len(chosen) != 1:
        errs.invalid(path, chosen, "exactly one of `nodeName`, `nodeSelector`, `allNodes` is required when "
                                   "`perDeviceNodeSelection` is set")
    elif not per_device and chosen:
        errs.add(f"{path}.{chosen[0]}", "Forbidden", "`perDeviceNodeSelection` is not set")
    for j, taint in enumerate(dev.get("taints") or []):
        _device_taint(errs, f"{path}.taints[{j}]", taint or {})


def _attribute(errs: FieldErrors, path: str, key: str, attr: dict) -> None:
    """An attribute name is a C identifier (<= 32), optionally behind a domain; exactly one value."""
    domain, _, ident = key.rpartition("/")
    if domain:
        dns_subdomain(errs, path, domain, limit=63)
    if not _C_IDENTIFIER.match(ident) or len(ident) > 32:
        errs.invalid(path, key, "must be a C identifier of at most 32 characters, optionally behind a domain and '/'")
    values = [k for k in ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")
              if attr.get(k) is not None]
    if len(values) != 1:
        errs.invalid(path, attr, "exactly one value must be specified")
        return
    v = attr[values[0]]
    for s in ([v] if values[0] in ("string", "version") else v if values[0] in ("strings", "versions") else []):
        if len(s) > 64:
            errs.add(f"{path}.{values[0]}", "Too long", "may not be more than 64 bytes")
        elif values[0].startswith("version") and not _SEMVER.match(s):
            errs.invalid(f"{path}.{values[0]}", s, "must be a string compatible with semver.org spec 2.0.0")


def validate_lease(obj: dict, errs: FieldErrors) -> None:
    _metadata(errs, obj)
    spec = obj.get("spec") or {}
    if spec.get("leaseDurationSeconds") is not None and spec["leaseDurationSeconds"] <= 0:
        errs.invalid("spec.leaseDurationSeconds", spec["leaseDurationSeconds"], "must be greater than 0")
    if spec.get("leaseTransitions") is not None and spec["leaseTransitions"] < 0:
        errs.invalid("spec.leaseTransitions", spec["leaseTransitions"], "must be greater than or equal to 0")
    if spec.get("strategy") and spec["strategy"] != "OldestEmulationVersion":
        errs.unsupported("spec.strategy", spec["strategy"], ["OldestEmulationVersion"])
    if spec.get("preferredHolder") and not spec.get("strategy"):
        errs.add("spec.preferredHolder", "Forbidden", "preferredHolder is only allowed if strategy is set")


_PERCENT = re.compile(r"^(0|[1-9]\d*)%$")


def validate_pdb(obj: dict, errs: FieldErrors) -> None:
    _metadata(errs, obj)
    spec = obj.get("spec") or {}
    for f in ("minAvailable", "maxUnavailable"):
        v = spec.get(f)
        if isinstance(v, str) and not _PERCENT.match(v):
            errs.invalid(f"spec.{f}", v, "must be an integer or percentage (e.g '5%')")
        elif isinstance(v, int) and v < 0:
            errs.invalid(f"spec.{f}", v, "must be greater than or equal to 0")
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        errs.invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in ("IfHealthyBudget", "AlwaysAllow"):
        errs.unsupported("spec.unhealthyPodEvictionPolicy", policy, ["AlwaysAllow", "IfHealthyBudget"])


_POD_SYSTEM_CONDITIONS = ("PodScheduled", "Ready", "Initialized")


def validate_pod(obj: dict, errs: FieldErrors) -> None:
    """What the pod strategies check that issue 15 relies on: a condition type that is not one of
    the system ones is a qualified name (``hetero-exporter.io/AcceleratorHealthy``)."""
    for i, c in enumerate((obj.get("status") or {}).get("conditions") or []):
        ctype = c.get("type") if isinstance(c, dict) else None
        if not isinstance(ctype, str) or ctype in _POD_SYSTEM_CONDITIONS:
            continue
        qualified_name(errs, f"status.conditions[{i}].type", ctype)


def owner_references(errs: FieldErrors, obj: dict) -> None:
    """ValidateOwnerReferences: apiVersion, kind, name and uid each required; at most one controller."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    if not isinstance(refs, list):
        errs.invalid("metadata.ownerReferences", refs, "must be a list")
        return
    controllers = 0
    for i, ref in enumerate(refs):
        path = f"metadata.ownerReferences[{i}]"
        if not isinstance(ref, dict):
            errs.invalid(path, ref, "must be an object")
            continue
        for key in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(key):
                errs.invalid(f"{path}.{key}", ref.get(key) or "", f"{key} must not be empty")
        controllers += ref.get("controller") is True
    if controllers > 1:
        errs.invalid("metadata.ownerReferences", refs, "Only one reference can have Controller set to true")


def _crd_type(errs: FieldErrors, path: str, v: Any, want: str) -> bool:
    """The structural schema's type check, as the API server words it; False when it fails."""
    ok = {"string": isinstance(v, str), "object": isinstance(v, dict), "array": isinstance(v, list),
          "integer": isinstance(v, int) and not isinstance(v, bool)}[want]
    if not ok:
        got = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array", dict: "object"}.get(
            type(v), "null")
        errs.add(path, "Invalid value", f'"{got}": {path} in body must be of type {want}: "{got}"')
    return ok


def _string_map(errs: FieldErrors, path: str, v: Any) -> None:
    if v is None or not _crd_type(errs, path, v, "object"):
        return
    for k, x in v.items():
        _crd_type(errs, f"{path}.{k}", x, "string")


def validate_node_feature(obj: dict, errs: FieldErrors) -> None:
    """NFD's NodeFeature CRD (deployment/base/nfd-crds/nfd-api-crds.yaml of NFD 0.17+): spec and
    status required; spec.labels and the feature sets' elements maps of strings."""
    _metadata(errs, obj)
    owner_references(errs, obj)
    for key in ("spec", "status"):
        if key not in obj or obj[key] is None:
            errs.required(key)
        else:
            _crd_type(errs, key, obj[key], "object")
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    for key, want in (("lastAppliedAt", "string"), ("numberOfFeatures", "integer"),
                      ("numberOfFeatureErrors", "integer"), ("numberOfLabels", "integer")):
        if status.get(key) is not None:
            _crd_type(errs, f"status.{key}", status[key], want)
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    _string_map(errs, "spec.labels", spec.get("labels"))
    features = spec.get("features")
    if features is None or not _crd_type(errs, "spec.features", features, "object"):
        return
    for kind in ("flags", "attributes", "instances"):
        sets = features.get(kind)
        if sets is None or not _crd_type(errs, f"spec.features.{kind}", sets, "object"):
            continue
        for name, fs in sets.items():
            path = f"spec.features.{kind}.{name}"
            if not _crd_type(errs, path, fs, "object"):
                continue
            if "elements" not in fs:
                errs.required(f"{path}.elements")
                continue
            elements = fs["elements"]
            if kind == "attributes":
                _string_map(errs, f"{path}.elements", elements)
            elif kind == "flags":
                if _crd_type(errs, f"{path}.elements", elements, "object"):
                    for k, x in elements.items():
                        _crd_type(errs, f"{path}.elements.{k}", x, "object")
            elif _crd_type(errs, f"{path}.elements", elements, "array"):
                for i, inst in enumerate(elements):
                    if _crd_type(errs, f"{path}.elements[{i}]", inst, "object"):
                        if "attributes" not in inst:
                            errs.required(f"{path}.elements[{i}].attributes")
                        else:
                            _string_map(errs, f"{path}.elements[{i}].attributes", inst["attributes"])


VALIDATORS: dict[str, Callable[[dict, FieldErrors], None]] = {
    "DeviceTaintRule": validate_device_taint_rule, "ResourceSlice": validate_resource_slice,
    "Lease": validate_lease, "PodDisruptionBudget": validate_pdb, "Pod": validate_pod,
    "NodeFeature": validate_node_feature,
}


def prepare(res: Resource, new: dict, old: Optional[dict]) -> None:
    """The strategies' PrepareForCreate / PrepareForUpdate: generation, DeviceTaint.timeAdded."""
    meta = new.setdefault("metadata", {})
    if res.custom and not res.status:
        # a custom resource without a status subresource: any change outside metadata is a new generation
        outside = lambda o: {k: v for k, v in (o or {}).items() if k not in ("metadata", "apiVersion", "kind")}  # noqa: E731
        if old is None:
            meta["generation"] = 1
        else:
            gen = int((old.get("metadata") or {}).get("generation") or 1)
            meta["generation"] = gen + 1 if outside(new) != outside(old) else gen
    if res.kind in GENERATION_KINDS:
        if old is None:
            meta["generation"] = 1
        else:
            gen = int((old.get("metadata") or {}).get("generation") or 1)
            meta["generation"] = gen + 1 if new.get("spec") != old.get("spec") else gen
    if res.kind == "DeviceTaintRule":
        taint = (new.get("spec") or {}).get("taint")
        if not isinstance(taint, dict):
            return
        before = ((old or {}).get("spec") or {}).get("taint") or {}
        if not taint.get("timeAdded"):
            taint["timeAdded"] = now_rfc3339()
        elif old is not None and taint.get("effect") != before.get("effect") \
                and taint["timeAdded"] == before.get("timeAdded"):
            taint["timeAdded"] = now_rfc3339()  # a new effect starts its own time


def check_preconditions(res: Resource, obj: dict, pre: Optional[dict]) -> None:
    """DeleteOptions.preconditions (uid, resourceVersion): 409 Conflict when they do not hold."""
    meta = obj.get("metadata") or {}
    for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
        want = (pre or {}).get(key)
        if want is not None and want != meta.get(key):
            what = f"{res.plural}.{res.group}" if res.group else res.plural
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {what} "{meta.get("name")}": '
                                            f"Precondition failed: {label} in precondition: {want}, "
                                            f"{label} in object meta: {meta.get(key)}",
                           {"name": meta.get("name"), "group": res.group, "kind": res.plural})


# --------------------------------------------------------------------------- disruption budgets


def selector_matches(selector: Optional[dict], labels: dict) -> bool:
    """A metav1.LabelSelector: matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist).
    A PodDisruptionBudget's empty selector selects every pod of its namespace, a missing one none."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        ok = {"In": labels.get(key) in values, "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}.get(op)
        if ok is None:
            raise ApiError(400, "BadRequest", f"{op!r} is not a valid label selector operator")
        if not ok:
            return False
    return True


def pod_healthy(pod: dict) -> bool:
    """Running and not reported unready (a seeded pod without conditions counts as ready)."""
    status = pod.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "Ready"), None)
    return status.get("phase") == "Running" and (ready is None or ready.get("status") == "True")


def _scaled(v: Any, total: int) -> int:
    """An int, or a percentage of ``total`` rounded up (GetScaledValueFromIntOrPercent, roundUp)."""
    if isinstance(v, str):
        return math.ceil(int(v.rstrip("%")) * total / 100)
    return int(v)


def disruption_status(pdb: dict, pods: list[dict]) -> tuple[int, int, int]:
    """(disruptionsAllowed, desiredHealthy, currentHealthy) as the disruption controller computes
    them, the expected count being the selected pods; a status a test set wins."""
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    expected = len(pods)
    current = sum(1 for p in pods if pod_healthy(p))
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    elif spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected)
    else:
        desired = 0  # neither set: the controller desires nothing (policy/v1 has no default)
    allowed = max(0, current - desired)
    if "disruptionsAllowed" in status:
        allowed = int(status["disruptionsAllowed"])
        desired, current = int(status.get("desiredHealthy", desired)), int(status.get("currentHealthy", current))
    return allowed, desired, current


# --------------------------------------------------------------------------- discovery, versions, paging


def api_group(group: str, versions: list[str]) -> dict:
    """An APIGroup entry: its served versions and the preferred one (v1 when served)."""
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    preferred = next((x for x in listed if x["version"] == "v1"), listed[0])
    return {"name": group, "versions": listed, "preferredVersion": preferred}


def api_resource_list(group: str, version: str) -> dict:
    """The APIResourceList of a served group/version: each resource, then its subresources."""
    stored = "v1" if group == DRA_GROUP else version
    resources: list[dict] = []
    for r in RESOURCES.values():
        if r.group != group or r.version != stored:
            continue
        entry = {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
                 "verbs": list(VERBS)}
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        resources.append(entry)
        if r.status:
            resources.append({"name": f"{r.plural}/status", "singularName": "", "namespaced": r.namespaced,
                              "kind": r.kind, "verbs": list(SUBRESOURCE_VERBS)})
        if r is PODS:
            resources.append({"name": "pods/eviction", "singularName": "", "namespaced": True, "group": "policy",
                              "version": "v1", "kind": "Eviction", "verbs": ["create"]})
    doc = {"kind": "APIResourceList", "groupVersion": f"{group}/{version}" if group else version,
           "resources": resources}
    return doc if not group else {"kind": "APIResourceList", "apiVersion": "v1", **doc}


def _at_version(body: Any, version: Optional[str]) -> Any:
    """An answer of resource.k8s.io as the version asked for (the schemas served are the same)."""
    if version in (None, "v1") or not isinstance(body, dict):
        return body
    stored = f"{DRA_GROUP}/v1"
    if body.get("apiVersion") != stored:
        return body
    out = {**body, "apiVersion": f"{DRA_GROUP}/{version}"}
    if isinstance(body.get("items"), list):
        out["items"] = [_at_version(i, version) for i in body["items"]]
    return out


TABLE_MEDIA = ("Table", "meta.k8s.io", ("v1", "v1beta1"))
INCLUDE_OBJECT = ("None", "Metadata", "Object")


def wants_table(accept: str) -> bool:
    """The API server's negotiation of a list's ``Accept`` header: True when the first media type
    it can serve is a ``meta.k8s.io`` Table (``application/json;as=Table;v=v1;g=meta.k8s.io``),
    False for the plain list (``application/json``, ``*/*``, no header); a header it can serve
    nothing of is 406. A type with an ``as`` it does not serve is skipped, so a client adds a
    plain ``application/json`` after it to fall back (what servers without Tables answer)."""
    if not accept.strip():
        return False
    for clause in accept.split(","):
        kind, *params = [x.strip() for x in clause.split(";")]
        if kind not in ("application/json", "application/*", "*/*"):
            continue
        opts = dict(p.split("=", 1) for p in params if "=" in p)
        if "as" not in opts:
            return False
        as_, group, versions = TABLE_MEDIA
        if opts["as"] == as_ and opts.get("g") == group and opts.get("v") in versions:
            return True
    raise ApiError(406, "NotAcceptable", f"only the following media types are accepted: application/json, "
                                         f"application/json;as=Table;v=v1;g=meta.k8s.io (asked: {accept!r})")


def _age(stamp: Any) -> str:
    """kubectl's short age of an RFC 3339 time (``5m``, ``3h``, ``2d``), ``<unknown>`` when none."""
    try:
        then = datetime.datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return "<unknown>"
    s = int((datetime.datetime.now(datetime.timezone.utc) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{max(s, 0)}s"


# (name, type, format, priority): the node printer's columns (priority 1: ``-o wide``'s)
NODE_COLUMNS = [("Name", "string", "name", 0), ("Status", "string", "", 0), ("Roles", "string", "", 0),
                ("Age", "string", "", 0), ("Version", "string", "", 0), ("Internal-IP", "string", "", 1),
                ("External-IP", "string", "", 1), ("OS-Image", "string", "", 1), ("Kernel-Version", "string", "", 1),
                ("Container-Runtime", "string", "", 1)]
DEFAULT_COLUMNS = [("Name", "string", "name", 0), ("Created At", "date", "", 0)]


def _node_cells(node: dict) -> list:
    """A Node's row as the API server's node printer writes it."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    state = {"True": "Ready", "False": "NotReady"}.get(str(ready), "Unknown")
    if spec.get("unschedulable"):
        state += ",SchedulingDisabled"
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix):] for k in meta.get("labels") or {} if k.startswith(prefix) and k[len(prefix):])
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or [] if isinstance(a, dict)}
    info = status.get("nodeInfo") or {}
    return [meta.get("name"), state, ",".join(roles) or "<none>", _age(meta.get("creationTimestamp")),
            info.get("kubeletVersion", ""), addresses.get("InternalIP", "<none>"),
            addresses.get("ExternalIP", "<none>"), info.get("osImage", "<unknown>"),
            info.get("kernelVersion", "<unknown>"), info.get("containerRuntimeVersion", "<unknown>")]


def table(res: "Resource", listed: dict, include: Optional[str]) -> dict:
    """A list as a ``meta.k8s.io/v1`` Table: the node printer's columns for Nodes, the default
    convertor's (Name, Created At) for the rest; each row's ``object`` by ``includeObject``
    (``Metadata``, the default: a PartialObjectMetadata; ``Object``: the object; ``None``: null)."""
    include = include or "Metadata"
    if include not in INCLUDE_OBJECT:
        raise ApiError(400, "BadRequest", f"includeObject: Unsupported value: {include!r}: supported values: "
                                          + ", ".join(f'"{v}"' for v in INCLUDE_OBJECT))
    if res.kind == "Node":
        columns, cells = NODE_COLUMNS, _node_cells
    else:
        columns = DEFAULT_COLUMNS

        def cells(o: dict) -> list:
            return [(o.get("metadata") or {}).get("name"), (o.get("metadata") or {}).get("creationTimestamp")]
    rows = []
    for obj in listed.get("items") or []:
        inner = None if include == "None" else obj if include == "Object" else {
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata") or {}}
        rows.append({"cells": cells(obj), "object": inner})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": listed.get("metadata") or {},
            "columnDefinitions": [{"name": n, "type": t, "format": f, "description": "", "priority": prio}
                                  for n, t, f, prio in columns],
            "rows": rows}


def _list_key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _continue_token(rv: int, after: tuple[str, str]) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": list(after)}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _continue_position(token: str, oldest_rv: int) -> tuple[int, tuple[str, str]]:
    try:
        doc = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        rv, (ns, name) = int(doc["rv"]), doc["start"]
    except (ValueError, KeyError, TypeError):
        raise ApiError(400, "BadRequest", "continue key is not valid: the token is not one this server gave") from None
    if rv < oldest_rv:
        raise ApiError(410, "Expired", "The provided continue parameter is too old to display a consistent list "
                                       "result. You can start a new list without the continue parameter.")
    return rv, (str(ns), str(name))


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
        api = self.server_api
        data = json.dumps(_at_version(body, getattr(api._local, "version", None))).encode()
        key = getattr(api._local, "key", None)
        if key is not None:
            with api._lock:
                api._sent[key] += len(data)
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            for text in getattr(api._local, "warnings", None) or ():
                self.send_header("Warning", f"299 - {json.dumps(text)}")
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
        api._local.version, api._local.warnings, api._local.user = None, [], None
        api._local.key = None
        api._local.field_validation = query.get("fieldValidation")
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
        key = api._local.key = api._count(method, path, is_watch, self.headers.get("User-Agent", ""))
        if api.keep_requests:
            with api._lock:
                api.requests.append(rec)
        fault = api._take_fault(method, path, is_watch)
        if fault is not None:
            rec.injected = fault.kind
        if fault is not None and not fault.after_apply:
            if self._inject(fault, rec):
                return
        auth = self.headers.get("Authorization", "")
        with api._lock:
            user = api.users.get(auth[len("Bearer "):]) if auth.startswith("Bearer ") else None
        if user is None and api.token:
            rec.status = 401
            self._send_json(401, status_body(401, "Unauthorized", "Unauthorized"))
            return
        rec.user = user.username if user is not None else ""
        try:
            self._authorize(user, method, path, query, is_watch)
            api._local.user = user
            if is_watch:
                rec.status = 200
                self._watch(path, query)
                return
            code, body, changed = self._handle(method, path, query, rec.body, rec.content_type)
        except ApiError as e:
            code, body, changed = e.code, e.status(), False
        rec.status, rec.changed, rec.resource_version = code, changed, api.resource_version
        api._settled(key, code, changed)
        if fault is not None and fault.after_apply:
            if self._inject(fault, rec):
                return
        self._send_json(code, body)

    def _authorize(self, user: Optional[UserInfo], method: str, path: str, query: dict, is_watch: bool) -> None:
        """RBAC's say on a resource request (403 Forbidden); discovery and other non-resource
        paths are every authenticated user's (system:discovery), so is a SelfSubjectReview
        (system:basic-user); a path that routes nowhere is left to the handler's 404."""
        api = self.server_api
        if api.authorizer is None or user is None or user.master or self._discovery_path(path) \
                or path.rstrip("/") == SELF_SUBJECT_REVIEWS:
            return
        try:
            res, ns, name, sub = self._route(path)
        except ApiError:
            return
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
        if verb is None:
            verb = "watch" if is_watch else ("get" if name else "list")
        if sub == "eviction":
            verb = "create"
        a = Attributes(user, verb, res.group, res.plural, sub or "", ns or "", name or "")
        if not api.authorizer(a):
            raise forbidden(a)

    @staticmethod
    def _discovery_path(path: str) -> bool:
        segs = [s for s in path.split("/") if s]
        return segs in (["api"], ["api", "v1"], ["apis"]) or (len(segs) in (2, 3) and segs[0] == "apis") \
            or path.rstrip("/") in ("/version", "/healthz", "/readyz", "/livez")

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
        res = self.server_api.resolve(group, version, rest[0])
        if res is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        self.server_api._local.version = version
        if res.namespaced is False and ns is not None:
            raise ApiError(404, "NotFound", f"{res.plural} is not namespaced")
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) >= 3 else None
        if sub is not None and not ((sub == "status" and res.status) or (sub == "eviction" and res is PODS)):
            raise ApiError(404, "NotFound", f"no subresource {sub!r} on {res.plural}")
        return res, ns, name, sub

    def _discovery(self, path: str) -> Optional[dict]:
        """The discovery documents (``/api``, ``/apis``, ``/apis/{group}``, ``/api/v1``,
        ``/apis/{group}/{version}``); None for any other path, 404 for an unserved group/version."""
        api = self.server_api
        segs = [s for s in path.split("/") if s]
        if segs == ["api"]:
            host, port = self.server.server_address[:2]
            return {"kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"{host}:{port}"}]}
        if segs == ["api", "v1"]:
            return api_resource_list("", "v1")
        if segs == ["apis"]:
            groups = [api_group(g, api.served_versions(g)) for g in dict.fromkeys(r.group for r in RESOURCES.values())
                      if g and api.served_versions(g)]
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        if len(segs) in (2, 3) and segs[0] == "apis":
            versions = api.served_versions(segs[1])
            if not versions or (len(segs) == 3 and segs[2] not in versions):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if len(segs) == 2:
                return {"kind": "APIGroup", "apiVersion": "v1", **api_group(segs[1], versions)}
            return api_resource_list(segs[1], segs[2])
        return None

    def _self_subject_review(self, method: str, body: Any) -> tuple[int, Any, bool]:
        """``kubectl auth whoami``: the caller's identity as authentication gave it (every
        authenticated user may ask: system:basic-user); nothing is stored."""
        if method != "POST":
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on selfsubjectreviews")
        if not isinstance(body, dict) or body.get("kind") != "SelfSubjectReview":
            raise ApiError(400, "BadRequest", "the body must be a SelfSubjectReview")
        user: Optional[UserInfo] = self.server_api._local.user
        info = user.as_dict() if user is not None else {"username": "system:anonymous", "groups": ["system:unauthenticated"]}
        info = {k: v for k, v in info.items() if v}
        return 201, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                     "metadata": {"creationTimestamp": None}, "status": {"userInfo": info}}, False

    def _handle(self, method: str, path: str, query: dict, body: Any, ctype: str) -> tuple[int, Any, bool]:
        api = self.server_api
        if path in ("/version", "/version/"):
            return 200, {"major": "1", "minor": "37", "gitVersion": "v1.37.0-kubeapi-test"}, False
        if path in ("/healthz", "/readyz", "/livez"):
            return 200, "ok", False
        doc = self._discovery(path) if method == "GET" else None
        if doc is not None:
            return 200, doc, False
        if path.rstrip("/") == SELF_SUBJECT_REVIEWS:
            return self._self_subject_review(method, body)
        res, ns, name, sub = self._route(path)
        dry = query.get("dryRun") == "All"
        key_ns = ns or ""
        if name is None:
            if method == "GET":
                as_table = wants_table(self.headers.get("Accept", ""))
                listed = self._list(res, ns, query)
                return 200, table(res, listed, query.get("includeObject")) if as_table else listed, False
            if method == "POST":
                if not isinstance(body, dict):
                    raise ApiError(400, "BadRequest", "the body of a create must be an object")
                before = api._rv
                obj = api.create(res, ns, body, dry_run=dry)
                return 201, obj, api._rv != before
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on a collection here")
        if sub == "eviction":
            if method != "POST":
                raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on pods/eviction")
            return 201, api.evict(key_ns, name, body), True
        if method == "GET":
            return 200, api.get(res, ns, name), False
        if method == "DELETE":
            opts = Decoder("DeleteOptions").value(body, DELETE_OPTIONS, "") if body is not None else {}
            if not isinstance(opts, dict):
                raise ApiError(400, "BadRequest", "the body of a delete must be a DeleteOptions object")
            if dry or "All" in (opts.get("dryRun") or []):
                obj = api.get(res, ns, name)
                check_preconditions(res, obj, opts.get("preconditions"))
                return 200, obj, False
            return 200, api.delete(res, ns, name, preconditions=opts.get("preconditions")), True
        if method == "PUT":
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the body of a replace must be an object")
            if res.custom and not (body.get("metadata") or {}).get("resourceVersion"):
                # a custom resource allows no unconditional update (AllowUnconditionalUpdate: false)
                raise ApiError(422, "Invalid", f'{res.kind}.{res.group} "{name}" is invalid: metadata.resourceVersion: '
                                               "Invalid value: 0x0: must be specified for an update",
                               {"name": name, "group": res.group, "kind": res.kind,
                                "causes": [{"reason": "FieldValueInvalid", "field": "metadata.resourceVersion",
                                            "message": "Invalid value: 0x0: must be specified for an update"}]})
            obj, changed = api._update(res, key_ns, name, sub, lambda cur: copy.deepcopy(body), dry)
            return 200, obj, changed
        if method == "PATCH":
            mt = ctype.split(";")[0].strip().lower()
            if mt == "application/merge-patch+json":
                fn = lambda cur: merge_patch(cur, body)  # noqa: E731
            elif mt == "application/strategic-merge-patch+json" and not res.custom:
                fn = lambda cur: strategic_merge_patch(cur, body, res.kind)  # noqa: E731
            elif mt == "application/json-patch+json":
                fn = lambda cur: json_patch(cur, body)  # noqa: E731
            elif res.custom:  # a CRD's handler accepts no strategic merge patch (no Go struct tags)
                raise ApiError(415, "UnsupportedMediaType",
                               "the body of the request was in an unknown format - accepted media types "
                               "include: application/json-patch+json, application/merge-patch+json, "
                               f"application/apply-patch+yaml (got {mt!r})")
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
        """A list, in pages when asked (``limit``; ``continue`` from the page before). Pages after
        the first are cut from the current state (the API server reads them at the first page's
        resourceVersion) and carry that first resourceVersion; a token from before ``compact()``
        is 410 Expired."""
        api = self.server_api
        fm = field_matcher(query.get("fieldSelector"), FIELD_LABELS.get(res.kind))
        lm = label_matcher(query.get("labelSelector"))
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise ApiError(400, "BadRequest", f"limit: not an integer: {query.get('limit')!r}") from None
        asked_rv = query.get("resourceVersion") or ""
        if asked_rv and not (asked_rv.isascii() and asked_rv.isdigit()):  # "0" (any: the watch cache) or a version
            raise ApiError(400, "BadRequest", f"invalid resourceVersion {asked_rv!r}")
        with api._lock:
            rv, after = api._rv, None
            if query.get("continue"):
                rv, after = _continue_position(query["continue"], api._oldest_rv)
            items = api.list(res, ns, lambda o: (after is None or _list_key(o) > after) and fm(o) and lm(o))
        meta: dict = {"resourceVersion": str(rv)}
        if 0 < limit < len(items):
            left = len(items) - limit
            items = items[:limit]
            meta["continue"] = _continue_token(rv, _list_key(items[-1]))
            if not query.get("fieldSelector") and not query.get("labelSelector"):
                meta["remainingItemCount"] = left
        return {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta, "items": items}

    def _watch(self, path: str, query: dict) -> None:
        api = self.server_api
        res, ns, name, sub = self._route(path)
        if name is not None:
            raise ApiError(405, "MethodNotAllowed", "watch a collection (use fieldSelector metadata.name=...)")
        fm = field_matcher(query.get("fieldSelector"), FIELD_LABELS.get(res.kind))
        lm = label_matcher(query.get("labelSelector"))
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
                    # close() and close_watches() wake it with "__close__": no need to poll often (a
                    # thousand idle watches polling 4 times a second are the server's whole CPU)
                    etype, obj = w.events.get(timeout=max(0.01, min(wait, 5.0)))
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
        event = {**event, "object": _at_version(event.get("object"), getattr(self.server_api._local, "version", None))}
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
