"""Node reads and writes for the health remedy, as plain JSON dicts.

Writes are strategic merge patches (what the ``kubernetes`` client sends for a dict body, in
every client version): ``patch`` changes metadata and spec (maps merge, ``None`` deletes a key;
``spec.taints`` has no merge key, so the list is replaced whole), optionally with the
resourceVersion read before, so a concurrent writer makes it fail with 409 instead of being
overwritten; ``patch_status`` changes ``status.conditions``, whose merge key is ``type``: only our
condition changes. Every call has a request timeout; failures raise ``k8s.client.K8sError``.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from hetero_exporter.k8s.client import Cluster, call


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
        """Patch the Node; with ``resource_version``, 409 when it moved on since."""
        body = dict(patch)
        if resource_version is not None:
            meta = dict(body.get("metadata") or {})
            meta["resourceVersion"] = resource_version
            body["metadata"] = meta
        kwargs = {"dry_run": "All"} if dry_run else {}
        return call(self._core.patch_node, name, body, timeout=self._timeout, **kwargs)

    def patch_status(self, name: str, patch: Mapping[str, Any]) -> dict:
        """Patch the Node status (conditions merge by type)."""
        return call(self._core.patch_node_status, name, dict(patch), timeout=self._timeout)
