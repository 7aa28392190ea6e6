"""Pod reads and writes for the health remedy's pod signals, as plain JSON dicts.

- ``patch_status``: a strategic merge patch on ``pods/status``; ``status.conditions`` merge by
  ``type``, so only our condition (``<domain>/AcceleratorHealthy``) changes and the
  kubelet's stay.
- ``evict``: the Eviction API (policy/v1), which honours PodDisruptionBudgets: ``"evicted"``
  (201), ``"blocked"`` (429 with a DisruptionBudget cause; ``.message`` names the budget),
  ``"gone"`` (404). A 429 without that cause is the API server throttling, not a budget: it
  raises like every other failure (``K8sError``, retryable).
- ``failed_on_node``: the node's Failed pods (``spec.nodeName`` and ``status.phase`` field
  selectors), at most ``limit`` (one page): the evidence of pods that fail admission.
"""

from __future__ import annotations

from typing import Any, Mapping

from hetero_exporter.k8s.api import Api
from hetero_exporter.k8s.client import Cluster, K8sError, dict_at, list_at

POD = "/api/v1/namespaces/{namespace}/pods/{name}"
PODS = "/api/v1/pods"
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
MAX_FAILED = 500


class EvictOutcome(str):
    """``"evicted"``, ``"blocked"`` or ``"gone"``, with the API server's ``message``."""

    message: str

    def __new__(cls, outcome: str, message: str = "") -> "EvictOutcome":
        out = super().__new__(cls, outcome)
        out.message = message
        return out


def _budget_message(e: K8sError) -> str:
    """The DisruptionBudget cause's message of a 429, "" when the 429 is not a budget's."""
    causes = list_at(dict_at(e.body, "details"), "causes")
    for c in causes:
        if isinstance(c, dict) and c.get("reason") == DISRUPTION_BUDGET_CAUSE:
            return str(c.get("message") or e.body.get("message") or "a PodDisruptionBudget")[:512]
    return ""


class PodWrites:
    def __init__(self, cluster: Cluster):
        self._api = Api(cluster.api_client, cluster.timeout_seconds)

    def get(self, namespace: str, name: str) -> dict:
        return self._api.get(POD, {"namespace": namespace, "name": name})

    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict:
        """Strategic merge on pods/status (conditions merge by type)."""
        return self._api.patch(POD + "/status", {"namespace": namespace, "name": name}, body=dict(patch))

    def evict(self, namespace: str, name: str) -> EvictOutcome:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        try:
            self._api.post(POD + "/eviction", {"namespace": namespace, "name": name}, body=body)
            return EvictOutcome("evicted")
        except K8sError as e:
            if e.not_found:
                return EvictOutcome("gone", str(e))
            message = _budget_message(e) if e.status == 429 else ""
            if message:
                return EvictOutcome("blocked", message)
            raise

    def failed_on_node(self, node: str, limit: int = MAX_FAILED) -> list[dict]:
        doc = self._api.get(PODS, query={"fieldSelector": f"spec.nodeName={node},status.phase=Failed",
                                         "limit": str(max(1, int(limit)))})
        items = doc.get("items")
        return [p for p in items if isinstance(p, dict)][:limit] if isinstance(items, list) else []
