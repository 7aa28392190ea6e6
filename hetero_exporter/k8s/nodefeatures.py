"""Node Feature Discovery ``NodeFeature`` objects (nfd.k8s-sigs.io/v1alpha1, namespaced) of one
namespace, as plain JSON dicts through ``k8s.api.Api`` (the health remedy's inventory labels in
nodefeature mode: health/plan/nodefeature.py, docs/nodefeature.md).

- ``NodeFeatures(cluster, namespace).served()``: None when the cluster serves the NodeFeature
  resource (NFD's CRDs are installed), else why not in one line; discovery needs no grant.
- ``get(name)``: the object, None when there is none.
- ``create(body)``: 409 AlreadyExists (``K8sError.already_exists``) when the name is taken.
- ``replace(name, body)``: PUT of the whole object; its ``metadata.resourceVersion`` must be the
  one read (409 Conflict when another writer moved it on). A custom resource takes no strategic
  merge patch, and a PUT replaces ``spec.labels`` whole (a removed label is gone, no nulls).
- ``delete(name, uid, resource_version)``: DeleteOptions preconditions; False when already gone.

Every call has a request timeout; failures raise ``k8s.client.K8sError``.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from hetero_exporter.k8s.api import Api
from hetero_exporter.k8s.client import Cluster, K8sError, list_at

GROUP_VERSION = "nfd.k8s-sigs.io/v1alpha1"
DISCOVERY = "/apis/nfd.k8s-sigs.io/v1alpha1"
NODEFEATURES = "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{namespace}/nodefeatures"
NODEFEATURE = NODEFEATURES + "/{name}"


class NodeFeatures:
    def __init__(self, cluster: Cluster, namespace: str):
        self._api = Api(cluster.api_client, cluster.timeout_seconds)
        self.namespace = namespace

    def _at(self, name: Optional[str] = None) -> dict:
        return {"namespace": self.namespace} if name is None else {"namespace": self.namespace, "name": name}

    def served(self) -> Optional[str]:
        """None when nfd.k8s-sigs.io/v1alpha1 serves nodefeatures; else the reason."""
        try:
            doc = self._api.get(DISCOVERY)
        except K8sError as e:
            if e.not_found:
                return f"{GROUP_VERSION} is not served by this cluster (404: NFD's CRDs are not installed)"
            raise
        resources = list_at(doc, "resources")
        if not any(isinstance(r, dict) and r.get("name") == "nodefeatures" for r in resources):
            return f"{GROUP_VERSION} is served without nodefeatures (NFD older than v0.12, or its CRD is missing)"
        return None

    def get(self, name: str) -> Optional[dict]:
        try:
            return self._api.get(NODEFEATURE, self._at(name))
        except K8sError as e:
            if e.not_found:
                return None
            raise

    def create(self, body: Mapping[str, Any]) -> dict:
        return self._api.post(NODEFEATURES, self._at(), body=dict(body))

    def replace(self, name: str, body: Mapping[str, Any]) -> dict:
        if not (body.get("metadata") or {}).get("resourceVersion"):
            raise ValueError("body: metadata.resourceVersion is required (a replace without it overwrites blindly)")
        return self._api.request("PUT", NODEFEATURE, self._at(name), body=dict(body))

    def delete(self, name: str, uid: Optional[str] = None, resource_version: Optional[str] = None) -> bool:
        """Delete the object if it is still the one read: True when deleted now, False when
        already gone; 409 (K8sError) when it is not that one any more."""
        pre = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        body: dict = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if pre:
            body["preconditions"] = pre
        try:
            self._api.request("DELETE", NODEFEATURE, self._at(name), body=body)
            return True
        except K8sError as e:
            if e.not_found:
                return False
            raise
