"""``hetero-exporter score --pod POD.yaml --nodes NODES.json``: the extender's decision offline.

NODES.json may be a list of schema-1 documents (the node name is their ``node``), a map
node -> document, or a Kubernetes NodeList (``kubectl get nodes -o json``: the annotation is
read from each node). A document may be the compact annotation form, a full ``inspect --json``
document, or either one as a JSON string (an annotation value copied as is).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

from hetero_exporter.scoring import explain
from hetero_exporter.scoring.nodes import NodeState, from_annotation, from_document
from hetero_exporter.scoring.request import RequestError, request_from_pod
from hetero_exporter.scoring.scorer import Scorer
from hetero_exporter.model.keys import DEFAULT_DOMAIN, Keys


def pod_of(doc: Any) -> Any:
    """The pod of a Pod manifest, or the pod template of a workload (Deployment, Job ...)."""
    if isinstance(doc, Mapping) and doc.get("kind") not in (None, "Pod"):
        spec = doc.get("spec") or {}
        if isinstance(spec, Mapping) and isinstance(spec.get("jobTemplate"), Mapping):  # CronJob
            spec = spec["jobTemplate"].get("spec") or {}
        template = spec.get("template") if isinstance(spec, Mapping) else None
        if not isinstance(template, Mapping):
            raise RequestError(f"a {doc.get('kind')} has no pod template (spec.template)")
        meta = {**(doc.get("metadata") or {}), **(template.get("metadata") or {})}
        return {**template, "metadata": meta}
    return doc


def _state(name: str, doc: Any, annotation: str) -> NodeState:
    if isinstance(doc, str):
        return from_annotation(name, doc, annotation)
    return from_document(name, doc)


def node_states(doc: Any, annotation: str = Keys().devices) -> list[tuple[str, NodeState]]:
    """(name, state) of every node in a NODES.json document (see the module docstring)."""
    if isinstance(doc, Mapping) and isinstance(doc.get("items"), list):  # NodeList
        out = []
        for i, node in enumerate(doc["items"]):
            meta = node.get("metadata") if isinstance(node, Mapping) else None
            if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
                raise ValueError(f"items[{i}]: a node without metadata.name")
            text = (meta.get("annotations") or {}).get(annotation)
            out.append((meta["name"], from_annotation(meta["name"], text, annotation)))
        return out
    if isinstance(doc, Mapping) and "schema" not in doc:
        return [(str(name), _state(str(name), d, annotation)) for name, d in doc.items()]
    if isinstance(doc, Mapping):
        doc = [doc]
    if not isinstance(doc, list):
        raise ValueError("NODES.json: expected a list of node documents, a map node -> document, or a NodeList")
    out = []
    for i, d in enumerate(doc):
        if isinstance(d, str):
            try:
                d = json.loads(d)
            except ValueError as e:
                raise ValueError(f"NODES.json[{i}]: a string that is not a JSON document: {e}") from None
        name = d.get("node") if isinstance(d, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"NODES.json[{i}]: no \"node\" name in the document (use a map node -> document)")
        out.append((name, from_document(name, d)))
    return out


def score(pod: Any, nodes: Any, scorer: Scorer, now: float, domain: str = DEFAULT_DOMAIN) -> dict[str, Any]:
    """The decision on every node, as ``/explain`` shows it. RequestError: the pod's request."""
    req = request_from_pod(pod_of(pod), domain)
    pairs = node_states(nodes, Keys(domain).devices)
    names = [n for n, _ in pairs]
    states: list[Optional[NodeState]] = [s for _, s in pairs]
    decisions = [scorer.decide(req, s) for _, s in pairs]
    rows = explain.node_rows(names, states, decisions, now, scorer)
    return explain.document(req, None, req.policy or scorer.policy, now, rows)
