"""core/v1 Events about a Node, written idempotently.

Each event has a name chosen by the caller (``<node>.<id>``, ``id`` derived from what the
event is about), so sending it again after a lost reply, or after an agent restart, is
answered 409 AlreadyExists instead of creating a second event: ``create`` reports that as
delivered. Node events live in the ``default`` namespace and refer to the Node with its name
as uid, as the kubelet's do, so ``kubectl describe node`` lists them.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Optional

from hetero_exporter.k8s.api import Api
from hetero_exporter.k8s.client import Cluster, K8sError

NAMESPACE = "default"
MESSAGE_LIMIT = 1024  # events.k8s.io/v1 limit on note; core/v1 messages are cut to the same


@dataclass(frozen=True)
class NodeEvent:
    name: str  # metadata.name: <node>.<id>, a DNS subdomain
    type: str  # Normal | Warning
    reason: str  # CamelCase
    message: str
    action: str = ""
    time: Optional[float] = None  # Unix seconds of the fact; now when None


def _rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def body(node: str, ev: NodeEvent, component: str, now: float) -> dict:
    ts = _rfc3339(ev.time if ev.time is not None else now)
    msg = ev.message if len(ev.message) <= MESSAGE_LIMIT else ev.message[: MESSAGE_LIMIT - 3] + "..."
    out = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": ev.name, "namespace": NAMESPACE},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
        "reason": ev.reason, "message": msg, "type": ev.type,
        "source": {"component": component, "host": node},
        "reportingComponent": component, "reportingInstance": node,
        "firstTimestamp": ts, "lastTimestamp": ts, "count": 1,
    }
    if ev.action:
        out["action"] = ev.action
    return out


class Events:
    def __init__(self, cluster: Cluster, component: str = "hetero-exporter"):
        self._api = Api(cluster.api_client, cluster.timeout_seconds)
        self.component = component

    def create(self, node: str, ev: NodeEvent, now: float) -> bool:
        """Write the event; True when it was created now, False when it already existed
        (an earlier attempt got through). Other failures raise K8sError."""
        try:
            self._api.post("/api/v1/namespaces/{namespace}/events", {"namespace": NAMESPACE},
                           body=body(node, ev, self.component, now))
            return True
        except K8sError as e:
            if e.already_exists:
                return False
            raise
