"""Trace ids: one per pod's scheduling cycle, naming the replica that served it.

A trace id is ``<16 hex digits>-<replica>``: the replica is this extender's pod name (``POD_NAME``,
set from the downward API, else the host name, which is the pod name in a pod), so that
``/explain`` on another replica can say where a trace lives instead of "no such trace".

kube-scheduler sends the same pod object (one ``metadata.resourceVersion``) to ``/filter`` and then
``/prioritize`` in one scheduling cycle, and to ``/filter`` twice when it first tries a nominated
node. ``PodTraces`` maps (pod uid, resourceVersion) to the cycle's trace for ``JOIN_SECONDS``, so
those calls share one trace; a retry after a failure sees a new resourceVersion (the scheduler
writes the pod's PodScheduled condition) and gets a new trace. A pod without a resourceVersion
(not from an API server) gets a trace per call.
"""

from __future__ import annotations

import collections
import os
import re
import secrets
import socket
import threading
import time
from typing import Any, Callable, Optional

JOIN_SECONDS = 30.0  # a call this long after the first of its cycle starts a new trace
PODS_KEPT = 4096     # pods remembered (the most recent); a pod gets a trace per call beyond it
REPLICA_CHARS = 63   # a replica name in a trace id is clipped to a DNS label's length
_KEY_CHARS = 128     # of a hostile uid or resourceVersion kept in a key
_BAD = re.compile(r"[^a-z0-9.-]+")


def replica_name(env: Optional[dict] = None) -> str:
    """This extender's name in trace ids: ``POD_NAME``, else the host name; lower case, only
    ``[a-z0-9.-]``, at most ``REPLICA_CHARS``."""
    raw = (os.environ if env is None else env).get("POD_NAME") or socket.gethostname() or "extender"
    return _BAD.sub("-", raw.lower())[:REPLICA_CHARS].strip("-.") or "extender"


def new_trace(replica: str) -> str:
    return f"{secrets.token_hex(8)}-{replica}"


def replica_of(trace: str) -> Optional[str]:
    """The replica named in a trace id (None for an id of another form)."""
    head, sep, replica = trace.partition("-")
    return replica if sep and replica and len(head) == 16 else None


def pod_key(pod: dict) -> Optional[tuple[str, str]]:
    """(uid or namespace/name, resourceVersion) of a pod as the API server sent it; None when it
    has no resourceVersion."""
    meta = pod.get("metadata")
    if not isinstance(meta, dict):
        return None
    rv = meta.get("resourceVersion")
    if not isinstance(rv, str) or not rv:
        return None
    uid = meta.get("uid")
    if not isinstance(uid, str) or not uid:
        ns, name = meta.get("namespace"), meta.get("name")
        uid = f"{ns if isinstance(ns, str) else ''}/{name if isinstance(name, str) else ''}"
    return uid[:_KEY_CHARS], rv[:_KEY_CHARS]


class PodTraces:
    """A bounded map pod key -> (trace, when it began); O(1) under its lock."""

    def __init__(self, replica: str, *, kept: int = PODS_KEPT, join_seconds: float = JOIN_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self.replica = replica
        self._kept, self._join, self._clock = kept, join_seconds, clock
        self._lock = threading.Lock()
        self._pods: "collections.OrderedDict[Any, tuple[str, float]]" = collections.OrderedDict()

    def new(self) -> str:
        return new_trace(self.replica)

    def for_pod(self, pod: dict) -> str:
        """The trace of this pod's scheduling cycle: the one begun by an earlier call of the
        cycle, else a new one."""
        key = pod_key(pod)
        if key is None:
            return self.new()
        now = self._clock()
        with self._lock:
            kept = self._pods.get(key)
            if kept is not None and now - kept[1] <= self._join:
                self._pods.move_to_end(key)
                return kept[0]
            trace = self.new()
            self._pods[key] = (trace, now)
            self._pods.move_to_end(key)
            while len(self._pods) > self._kept:
                self._pods.popitem(last=False)
        return trace
