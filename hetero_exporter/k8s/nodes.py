"""Node reads and writes for the health remedy, as plain JSON dicts.

Writes are strategic merge patches (what the generated ``kubernetes`` client methods send for a
dict body, in every client version; sent here by ``k8s.api.Api``, without those classes): ``patch`` changes metadata and spec (maps merge, ``None`` deletes a key;
``spec.taints`` has no merge key, so the list is replaced whole), optionally with the
resourceVersion read before, so a concurrent writer makes it fail with 409 instead of being
overwritten; ``patch_status`` changes ``status.conditions``, whose merge key is ``type``: only our
condition changes. Every call has a request timeout; failures raise ``k8s.client.K8sError``.
"""

from __future__ import annotations

import builtins
from typing import Any, Mapping, Optional

from hetero_exporter.k8s.api import MERGE_PATCH, STRATEGIC_MERGE_PATCH, TABLE, Api
from hetero_exporter.k8s.client import Cluster, K8sError

NODE = "/api/v1/nodes/{name}"


def names_of(answer: Mapping[str, Any]) -> list[str]:
    """The object names of a list answer (hostile input): a Table's cells in its column of format
    ``name``, or a plain list's ``items[].metadata.name``; rows and items without a string name
    are skipped. K8sError when the answer is neither (a Table without a name column)."""
    if answer.get("kind") == "Table":
        columns = answer.get("columnDefinitions")
        at = next((i for i, c in enumerate(columns) if isinstance(c, Mapping) and c.get("format") == "name"),
                  None) if isinstance(columns, list) else None
        rows = answer.get("rows")
        if at is None or not isinstance(rows, list):
            raise K8sError("the Table of the Nodes has no name column or no rows")
        cells = (r.get("cells") for r in rows if isinstance(r, Mapping))
        return [c[at] for c in cells if isinstance(c, list) and len(c) > at and isinstance(c[at], str) and c[at]]
    items = answer.get("items")
    metas = (i.get("metadata") for i in items if isinstance(i, Mapping)) if isinstance(items, list) else ()
    return [m["name"] for m in metas if isinstance(m, Mapping) and isinstance(m.get("name"), str) and m["name"]]


class Nodes:
    def __init__(self, cluster: Cluster):
        self._api = Api(cluster.api_client, cluster.timeout_seconds)

    def get(self, name: str) -> dict:
        return self._api.get(NODE, {"name": name})

    def list(self, label_selector: Optional[str] = None, *, cached: bool = False) -> list[dict]:
        """``cached``: ``resourceVersion=0``, served from the API server's watch cache instead of
        a quorum read of etcd (the fleet budget lists every accelerator Node once per failing
        node; its Lease slots, not this view, keep the budget)."""
        query = {"labelSelector": label_selector or None, "resourceVersion": "0" if cached else None}
        return list(self._api.get("/api/v1/nodes", query=query).get("items") or [])

    def names(self, label_selector: Optional[str] = None, *, cached: bool = False) -> builtins.list[str]:
        """The names of the Nodes, listed as a Table without objects (``includeObject=None``): a
        row of printed columns a node, ~140 bytes instead of the whole Node (tens of KB with its
        annotations and images). A server without Tables answers the plain list, read the same.
        ``cached`` as in ``list``."""
        query = {"labelSelector": label_selector or None, "resourceVersion": "0" if cached else None,
                 "includeObject": "None"}
        return names_of(self._api.get("/api/v1/nodes", query=query, accept=TABLE))

    def patch(self, name: str, patch: Mapping[str, Any], *, resource_version: Optional[str] = None,
              dry_run: bool = False, merge: bool = False) -> dict:
        """Patch the Node; with ``resource_version``, 409 when it moved on since; ``merge``: a JSON
        merge patch (RFC 7386: ``None`` deletes a key; no list merging), else strategic."""
        body = dict(patch)
        if resource_version is not None:
            meta = dict(body.get("metadata") or {})
            meta["resourceVersion"] = resource_version
            body["metadata"] = meta
        return self._api.patch(NODE, {"name": name}, body=body, query={"dryRun": "All" if dry_run else None},
                               content_type=MERGE_PATCH if merge else STRATEGIC_MERGE_PATCH)

    def who_am_i(self) -> str:
        """The user name the API server knows the caller as (a SelfSubjectReview, GA in 1.28);
        K8sError where it cannot say."""
        review = self._api.post("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        user = ((review.get("status") or {}).get("userInfo") or {}).get("username")
        if not isinstance(user, str) or not user:
            raise K8sError("the SelfSubjectReview names no user")
        return user

    def patch_status(self, name: str, patch: Mapping[str, Any]) -> dict:
        """Patch the Node status (conditions merge by type)."""
        return self._api.patch(NODE + "/status", {"name": name}, body=dict(patch))
