"""DRA device taints: this node's ResourceSlices and the DeviceTaintRules the agent writes
(resource.k8s.io/v1), as plain JSON dicts through ``k8s.api.Api``.

Why a DeviceTaintRule and not a taint in the ResourceSlice: a slice belongs to its DRA driver,
which republishes it whole (a taint written into it would be overwritten, or would fight the
driver's own taints), and a node's agent may not write other writers' slices. A DeviceTaintRule
is the API's object for a third party tainting devices it does not publish (KEP 5055 names this
case: an external health monitor taking devices offline): it selects driver, pool and device, the
scheduler and the eviction controller apply it as if the driver had tainted the device, and it is
deleted on recovery without touching the slice.

- ``Dra(cluster).served()``: None when resource.k8s.io/v1 serves resourceslices and
  devicetaintrules, else why not in one line (a cluster without DRA answers 404).
- ``slices(node)``: the node's slices (``fieldSelector=spec.nodeName=<node>``, paged with
  ``limit``), at most ``max_slices`` (more is refused: no DRA driver publishes that many).
- ``rules`` / ``create_rule`` / ``patch_rule`` (JSON merge patch, optionally with the
  resourceVersion read before: 409 when another writer moved it on) / ``delete_rule`` (DeleteOptions
  preconditions on uid and resourceVersion; False when already gone).

Failures raise ``k8s.client.K8sError``.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from hetero_exporter.k8s.api import MERGE_PATCH, Api
from hetero_exporter.k8s.client import Cluster, K8sError, list_at

GROUP_VERSION = "resource.k8s.io/v1"
DISCOVERY = "/apis/resource.k8s.io/v1/"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
RULES = "/apis/resource.k8s.io/v1/devicetaintrules"
RULE = RULES + "/{name}"
NEEDED = ("resourceslices", "devicetaintrules")
MAX_SLICES = 1024  # a node publishes a few slices per driver (at most 128 devices each)
MAX_RULES = 4096  # rules carrying our label, cluster-wide
PAGE_SIZE = 256


def node_selector(node: str) -> str:
    return f"spec.nodeName={node}"


def list_bounded(api: Api, path: str, *, query: Mapping[str, Optional[str]], max_items: int, what: str,
                 page_size: int = PAGE_SIZE, timeout: Optional[float] = None) -> tuple[list[dict], Optional[str]]:
    """Every item of a paged list and the list's resourceVersion; more than ``max_items`` items
    (or a server that never ends its pages) is a K8sError: nothing unbounded is held."""
    items: list[dict] = []
    token: Optional[str] = None
    rv: Optional[str] = None
    for _ in range(max_items // max(1, page_size) + 2):
        doc = api.get(path, query={**query, "limit": str(page_size), "continue": token}, timeout=timeout)
        page, meta = doc.get("items"), doc.get("metadata")
        if not isinstance(page if page is not None else [], list) or not isinstance(meta if meta is not None else {}, dict):
            raise K8sError(f"{what}: the answer is not a list (items a list, metadata an object)")
        items.extend(i for i in page or [] if isinstance(i, dict))
        if len(items) > max_items:
            raise K8sError(f"{what}: more than {max_items}; refusing to hold them")
        meta = meta or {}
        version, token = meta.get("resourceVersion"), meta.get("continue")
        rv = str(version) if isinstance(version, (str, int)) and version else rv
        if not (token and isinstance(token, str)):
            return items, rv
    raise K8sError(f"{what}: the list did not end after {max_items // max(1, page_size) + 2} pages")


def list_slices(api: Api, node: str, *, max_slices: int = MAX_SLICES,
                timeout: Optional[float] = None) -> tuple[list[dict], Optional[str]]:
    """The ResourceSlices of ``node`` and the list's resourceVersion (for a watch from there)."""
    return list_bounded(api, SLICES, query={"fieldSelector": node_selector(node)}, max_items=max_slices,
                        what=f"ResourceSlices of node {node}", page_size=min(PAGE_SIZE, max_slices), timeout=timeout)


class Dra:
    def __init__(self, cluster: Cluster, *, max_slices: int = MAX_SLICES):
        self._api = Api(cluster.api_client, cluster.timeout_seconds)
        self.max_slices = max_slices

    def served(self) -> Optional[str]:
        """None when resource.k8s.io/v1 serves what device taints need; else the reason."""
        try:
            doc = self._api.get(DISCOVERY)
        except K8sError as e:
            if e.not_found:
                return f"{GROUP_VERSION} is not served by this cluster (404)"
            raise
        resources = list_at(doc, "resources")
        names = {r.get("name") for r in resources if isinstance(r, dict)}
        missing = [n for n in NEEDED if n not in names]
        if missing:
            return f"{GROUP_VERSION} is served without {' and '.join(missing)} (DeviceTaintRule is off on this cluster)"
        return None

    def slices(self, node: str) -> list[dict]:
        return list_slices(self._api, node, max_slices=self.max_slices)[0]

    def rules(self, label_selector: Optional[str] = None) -> list[dict]:
        return list_bounded(self._api, RULES, query={"labelSelector": label_selector or None}, max_items=MAX_RULES,
                            what="DeviceTaintRules")[0]

    def create_rule(self, body: Mapping[str, Any]) -> dict:
        return self._api.post(RULES, body=dict(body))

    def patch_rule(self, name: str, patch: Mapping[str, Any], resource_version: Optional[str] = None) -> dict:
        """JSON merge patch (a DeviceTaintRule has no strategic merge keys; ``None`` deletes)."""
        body = dict(patch)
        if resource_version is not None:
            body["metadata"] = {**dict(body.get("metadata") or {}), "resourceVersion": resource_version}
        return self._api.patch(RULE, {"name": name}, body=body, content_type=MERGE_PATCH)

    def delete_rule(self, name: str, uid: Optional[str] = None, resource_version: Optional[str] = None) -> bool:
        """Delete the rule if it is still the one read (uid / resourceVersion given): True when
        deleted now, False when already gone; 409 (K8sError) when it is not that one any more."""
        pre = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v is not None}
        body: dict = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if pre:
            body["preconditions"] = pre
        try:
            self._api.request("DELETE", RULE, {"name": name}, body=body)
            return True
        except K8sError as e:
            if e.not_found:
                return False
            raise
