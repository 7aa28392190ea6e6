"""Node reads and writes for the health remedy, as plain JSON dicts.

Writes are patches: ``patch`` (metadata and spec, JSON merge patch, optionally with the
resourceVersion read before, so a concurrent writer makes it fail with 409 instead of being
overwritten: ``spec.taints`` is a list the API server replaces whole) and ``patch_status``
(strategic merge on ``status.conditions``, whose merge key is ``type``: only our condition
changes). Every call has a request timeout; failures raise ``k8s.client.K8sError``.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from hetero_exporter.k8s.client import Cluster, call

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class Nodes:
    def __init__(self, cluster: Cluster):
        from kubernetes import client
        self._core = client.CoreV1Api(cluster.api_client)
        self._timeout = cluster.timeout_seconds

    def get(self, name: str) -> dict:
        return call(self._core.read_node, name, timeout=self._timeout)

    def list(self, label_selector: Optional[str] = None) -> list[dict]:
        kwargs = {"label_selector": label_selector} if label_selector else {}
        return list(call(self._core.list_node, timeout=self._timeout, **kwargs).get("items") or [])

    def patch(self, name: str, patch: Mapping[str, Any], *, resource_version: Optional[str] = None,
              dry_run: bool = False) -> dict:
        """JSON merge patch of the Node; with ``resource_version``, 409 when it moved on."""
        body = dict(patch)
        if resource_version is not None:
            meta = dict(body.get("metadata") or {})
            meta["resourceVersion"] = resource_version
            body["metadata"] = meta
        kwargs = {"dry_run": "All"} if dry_run else {}
        return call(self._core.patch_node, name, body, _content_type=MERGE_PATCH,
                    timeout=self._timeout, **kwargs)

    def patch_status(self, name: str, patch: Mapping[str, Any]) -> dict:
        """Strategic merge patch of the Node status (conditions merge by type)."""
        return call(self._core.patch_node_status, name, dict(patch), _content_type=STRATEGIC_MERGE_PATCH,
                    timeout=self._timeout)
