"""coordination.k8s.io/v1 Leases of one namespace, as plain JSON dicts (the fleet taint budget's slots).

The API server's optimistic concurrency is the whole coordination: ``create`` is answered 409
AlreadyExists when another client created the name first, ``replace`` (PUT carrying the
``metadata.resourceVersion`` read before) 409 Conflict when the object changed since, and
``delete`` sends DeleteOptions preconditions (uid and resourceVersion), so a Lease that another
client took over since it was read is not deleted. Every call has a request timeout; failures
raise ``k8s.client.K8sError``.
"""

from __future__ import annotations

from typing import Optional

from hetero_exporter.k8s.api import Api
from hetero_exporter.k8s.client import Cluster, K8sError

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
LEASE = LEASES + "/{name}"
MAX_LIST = 500  # leases asked for in one list: a namespace holding more of ours is not ours alone


class Leases:
    def __init__(self, cluster: Cluster, namespace: str):
        self._api = Api(cluster.api_client, cluster.timeout_seconds)
        self.namespace = namespace

    def _at(self, name: Optional[str] = None) -> dict:
        return {"namespace": self.namespace} if name is None else {"namespace": self.namespace, "name": name}

    def list(self, label_selector: Optional[str] = None) -> list[dict]:
        """The Leases matching the selector; K8sError when there are more than ``MAX_LIST``
        (one page is all we read: the rest would be silently unknown)."""
        out = self._api.get(LEASES, self._at(), query={"labelSelector": label_selector or None, "limit": MAX_LIST})
        if (out.get("metadata") or {}).get("continue"):
            raise K8sError(f"more than {MAX_LIST} leases match {label_selector!r} in namespace {self.namespace}")
        items = out.get("items")
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    def get(self, name: str) -> Optional[dict]:
        """The Lease, None when there is none."""
        try:
            return self._api.get(LEASE, self._at(name))
        except K8sError as e:
            if e.not_found:
                return None
            raise

    def create(self, body: dict) -> dict:
        """Create the Lease; 409 AlreadyExists (``K8sError.already_exists``) when the name is taken."""
        return self._api.post(LEASES, self._at(), body=body)

    def replace(self, name: str, body: dict) -> dict:
        """PUT the whole Lease; its ``metadata.resourceVersion`` must be the current one (409 otherwise)."""
        if not (body.get("metadata") or {}).get("resourceVersion"):
            raise ValueError("body: metadata.resourceVersion is required (a replace without it overwrites blindly)")
        return self._api.request("PUT", LEASE, self._at(name), body=body)

    def delete(self, name: str, uid: Optional[str], resource_version: str) -> bool:
        """Delete the Lease if it is still the version read (uid and resourceVersion preconditions:
        409 Conflict otherwise; a uid of None is not checked); False when it was already gone."""
        preconditions = {"resourceVersion": resource_version, **({"uid": uid} if uid else {})}
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions}
        try:
            self._api.request("DELETE", LEASE, self._at(name), body=options)
            return True
        except K8sError as e:
            if e.not_found:
                return False
            raise
