"""core/v1 Events about a Node or any other object (a Pod), written idempotently.

Each event has a name chosen by the caller (``<node>.<id>``, ``<pod>.<id>``, ``id`` derived
from what the event is about), so sending it again after a lost reply, or after an agent
restart, is answered 409 AlreadyExists instead of creating a second event: ``create`` and
``create_for`` report that as delivered. Node events live in the ``default`` namespace and refer
to the Node with its name as uid, as the kubelet's do, so ``kubectl describe node`` lists them;
an event about a namespaced object lives in that object's namespace (the API server refuses it
elsewhere) and names its uid, so ``kubectl describe pod`` lists it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from hetero_exporter.k8s.api import Api
from hetero_exporter.k8s.client import Cluster, K8sError, dict_at

NAMESPACE = "default"
MESSAGE_LIMIT = 1024  # events.k8s.io/v1 limit on note; core/v1 messages are cut to the same


@dataclass(frozen=True)
class NodeEvent:
    """One event (about a Node, or about any object with ``Events.create_for``)."""

    name: str  # metadata.name: <node>.<id> / <pod>.<id>, a DNS subdomain
    type: str  # Normal | Warning
    reason: str  # CamelCase
    message: str
    action: str = ""
    time: Optional[float] = None  # Unix seconds of the fact; now when None


@dataclass(frozen=True)
class ObjectRef:
    """The object an event is about (its ``involvedObject``)."""

    kind: str
    name: str
    namespace: str = ""  # "" for a cluster-scoped object
    uid: str = ""
    api_version: str = "v1"

    @classmethod
    def node(cls, name: str) -> "ObjectRef":
        return cls("Node", name, uid=name)  # the kubelet's node events carry the name as uid

    @classmethod
    def pod(cls, pod: Mapping[str, Any]) -> "ObjectRef":
        """The reference of a Pod's JSON (its metadata's name, namespace and uid)."""
        meta = dict_at(pod, "metadata")
        return cls("Pod", str(meta.get("name") or ""), str(meta.get("namespace") or ""), str(meta.get("uid") or ""))

    def as_dict(self) -> dict:
        out = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.uid:
            out["uid"] = self.uid
        return out


def _rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def body_for(ref: ObjectRef, ev: NodeEvent, component: str, now: float, host: str = "") -> dict:
    """The core/v1 Event about ``ref``, in its namespace (``default`` for cluster-scoped ones);
    ``host`` is the reporting node."""
    ts = _rfc3339(ev.time if ev.time is not None else now)
    msg = ev.message if len(ev.message) <= MESSAGE_LIMIT else ev.message[: MESSAGE_LIMIT - 3] + "..."
    out: dict = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": ev.name, "namespace": ref.namespace or NAMESPACE},
        "involvedObject": ref.as_dict(),
        "reason": ev.reason, "message": msg, "type": ev.type,
        "source": {"component": component, **({"host": host} if host else {})},
        "reportingComponent": component, **({"reportingInstance": host} if host else {}),
        "firstTimestamp": ts, "lastTimestamp": ts, "count": 1,
    }
    if ev.action:
        out["action"] = ev.action
    return out


def body(node: str, ev: NodeEvent, component: str, now: float) -> dict:
    return body_for(ObjectRef.node(node), ev, component, now, host=node)


class Events:
    def __init__(self, cluster: Cluster, component: str = "hetero-exporter"):
        self._api = Api(cluster.api_client, cluster.timeout_seconds)
        self.component = component

    def create(self, node: str, ev: NodeEvent, now: float) -> bool:
        """Write the event about ``node``; True when it was created now, False when it already
        existed (an earlier attempt got through). Other failures raise K8sError."""
        return self._post(body(node, ev, self.component, now))

    def create_for(self, ref: ObjectRef, ev: NodeEvent, now: float, *, host: str = "") -> bool:
        """Write the event about ``ref`` (a Pod: ``ObjectRef.pod(pod)``) in its namespace; as
        ``create`` otherwise. ``host``: the node reporting it."""
        return self._post(body_for(ref, ev, self.component, now, host=host))

    def _post(self, doc: dict) -> bool:
        try:
            self._api.post("/api/v1/namespaces/{namespace}/events", {"namespace": doc["metadata"]["namespace"]},
                           body=doc)
            return True
        except K8sError as e:
            if e.already_exists:
                return False
            raise
