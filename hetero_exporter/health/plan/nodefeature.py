"""The selection labels as a Node Feature Discovery ``NodeFeature`` (opt-in,
``health.inventory_labels: nodefeature``; docs/nodefeature.md).

Instead of patching its labels onto the Node, the agent publishes them in one
``nfd.k8s-sigs.io/v1alpha1`` NodeFeature in its own namespace, and nfd-master (v0.14 or later)
puts them on the Node. The object:

- is named ``hetero-exporter-<node>`` (a node name too long for that is cut and given a hash),
  labelled ``nfd.node.kubernetes.io/node-name: <node>`` (how nfd-master finds the node) and
  ``app.kubernetes.io/managed-by: hetero-exporter``;
- an object of that name that is not ours (without that label, labelled for another node, owned
  by another Node or another uid of ours: a squatter) is left alone and reported (``foreign``:
  the remedy says so in a Warning event, a log line and a metric); one that is ours but carries
  labels outside the agent's domain, more than ``MAX_LABELS`` or features (tampered) is repaired
  and reported the same way;
- is owned by the Node (``ownerReferences``: v1 Node, its name and uid), so the garbage collector
  deletes it with the Node;
- carries the inventory labels in ``spec.labels``, exactly what ``selection_labels`` computes for
  the Node in labels mode (vendor, count, model, driver major, features);
- is written only when what it says differs from what was read (created when missing, replaced
  with the resourceVersion read, so a concurrent writer is answered 409 and the next cycle reads
  again), and deleted (preconditions on uid and resourceVersion) when there is nothing to publish
  (no accelerator left), as the labels are removed in labels mode. NFD judges no freshness, so
  there is no heartbeat: drift (someone edits or deletes it) is repaired at the next full
  reconcile (at most ``resync_seconds`` later).

``plan_nodefeature(...) -> NodeFeaturePlan`` is pure: the remedy reads the object
(``NodeFeatureRead``, in ``ClusterView.nodefeature``) and writes the plan in enforce mode
(health/act/remedy_cluster.py); dry-run plans, explains and writes nothing; observe reads nothing.
A second plan over the result of the first is empty.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from hetero_exporter.model.keys import DEFAULT_DOMAIN

API_VERSION = "nfd.k8s-sigs.io/v1alpha1"
KIND = "NodeFeature"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"  # nfd-master's key for the node an object targets
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "hetero-exporter"
NAME_PREFIX = "hetero-exporter-"
MAX_NAME = 253  # a DNS subdomain
MAX_LABEL_VALUE = 63
MAX_LABELS = 256  # what the admission policy admits (deploy/base/node-restriction.yaml)
MAX_SHOWN = 63  # characters of a hostile value quoted in a report
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


@dataclass(frozen=True)
class NodeFeatureRead:
    """The NodeFeature as the remedy read it: ``current`` None when there is none; ``domain``:
    the agent's (its labels are the ones under ``<domain>/``)."""

    namespace: str
    current: Optional[Mapping[str, Any]] = None
    domain: str = DEFAULT_DOMAIN


@dataclass
class NodeFeaturePlan:
    namespace: str
    name: str
    create: Optional[dict] = None  # the object to create
    replace: Optional[dict] = None  # the whole object to PUT (carries the resourceVersion read)
    delete: Optional[tuple[Optional[str], Optional[str]]] = None  # (uid, resourceVersion) preconditions
    labels: dict[str, str] = field(default_factory=dict)  # what spec.labels says after the plan
    # why the object of our name is not (only) ours: "" when it is; with nothing to write, a
    # squatter left alone, else tampering that the plan repairs
    foreign: str = ""
    uid: str = ""  # the foreign object's uid (names the report of one squatter once)
    explain: list[str] = field(default_factory=list)
    actions: list[tuple[str, str]] = field(default_factory=list)

    @property
    def writes(self) -> bool:
        return self.create is not None or self.replace is not None or self.delete is not None


def object_name(node: str) -> str:
    """``hetero-exporter-<node>``; a longer name than the API allows keeps its head and a hash."""
    name = NAME_PREFIX + node
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha1(node.encode()).hexdigest()[:10]
    return f"{name[:MAX_NAME - 11].rstrip('.-')}-{digest}"


def can_target(node: str) -> bool:
    """nfd-master finds the node by a label value equal to its name: at most 63 characters."""
    return len(node) <= MAX_LABEL_VALUE and bool(_LABEL_VALUE.match(node))


def ours(obj: Mapping[str, Any]) -> bool:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY) == MANAGER


def _shown(v: object) -> str:
    text = v if isinstance(v, str) else repr(v)
    return repr(text[:MAX_SHOWN] + ("..." if len(text) > MAX_SHOWN else ""))


def _map(v: object) -> dict:
    return v if isinstance(v, dict) else {}


def squatter(obj: Mapping[str, Any], node: str, node_uid: str) -> str:
    """Why the object named after ``node`` is not this agent's ("" when it is): not managed by
    it, labelled for another node, or owned by another Node (or another uid of this one)."""
    meta = _map(obj.get("metadata"))
    labels = _map(meta.get("labels"))
    if labels.get(MANAGED_BY) != MANAGER:
        return f"it has no label {MANAGED_BY}={MANAGER}"
    if labels.get(NODE_NAME_LABEL) != node:
        return f"it is labelled {NODE_NAME_LABEL}={_shown(labels.get(NODE_NAME_LABEL))}, not this node"
    refs = meta.get("ownerReferences")
    for r in refs if isinstance(refs, list) else []:
        r = _map(r)
        if r.get("kind") == "Node" and (r.get("name") != node or (node_uid and r.get("uid") != node_uid)):
            return f"it is owned by Node {_shown(r.get('name'))} (uid {_shown(r.get('uid'))}), not by this node"
    return ""


def tampered(obj: Mapping[str, Any], domain: str) -> str:
    """Why an object of ours carries what the agent never writes ("" when it does not)."""
    spec = _map(obj.get("spec"))
    labels = _map(spec.get("labels"))
    alien = sorted(str(k) for k in labels if not str(k).startswith(f"{domain}/"))
    if alien:
        more = f" and {len(alien) - 3} more" if len(alien) > 3 else ""
        return f"it carries labels outside {domain}/ ({', '.join(_shown(k) for k in alien[:3])}{more})"
    if len(labels) > MAX_LABELS:
        return f"it carries {len(labels)} labels (the agent writes at most {MAX_LABELS})"
    if any(_map(spec.get("features")).get(k) for k in ("flags", "attributes", "instances")):
        return "it carries features (the agent writes none)"
    return ""


def desired(node: str, node_uid: str, namespace: str, labels: Mapping[str, str]) -> dict:
    """The NodeFeature this node's inventory asks for (``status: {}``: NFD's newer CRDs require
    the field, older ones drop it)."""
    meta: dict[str, Any] = {"name": object_name(node), "namespace": namespace,
                            "labels": {NODE_NAME_LABEL: node, MANAGED_BY: MANAGER}}
    if node_uid:
        meta["ownerReferences"] = [_owner(node, node_uid)]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta,
            "spec": {"labels": dict(sorted(labels.items()))}, "status": {}}


def _owner(node: str, uid: str) -> dict:
    # no blockOwnerDeletion: that would need the right to update the Node's finalizers
    return {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}


def _owners(current: list, node: str, uid: str) -> list:
    """The current owner references with ours in place of any to a Node of this name."""
    kept = [dict(r) for r in current if isinstance(r, dict) and not (r.get("kind") == "Node" and r.get("name") == node)]
    return kept + ([_owner(node, uid)] if uid else [])


def plan_nodefeature(node: str, node_uid: str, labels: Mapping[str, str], read: NodeFeatureRead,
                     mode: str) -> NodeFeaturePlan:
    """What to write so that the NodeFeature says ``labels`` (empty: the object goes)."""
    name = object_name(node)
    where = f"{read.namespace}/{name}"
    p = NodeFeaturePlan(read.namespace, name)
    dry = "[dry-run] " if mode == "dry-run" else ""
    done = (lambda verb: f"would be {verb}") if dry else (lambda verb: verb)
    cur = read.current
    if not can_target(node):
        p.explain.append(f"NodeFeature: node name {node!r} is not a label value of at most {MAX_LABEL_VALUE} "
                         f"characters, which nfd-master needs to find the node: nothing published")
        return p
    if len(labels) > MAX_LABELS:
        p.explain.append(f"NodeFeature {where}: {len(labels)} labels, more than the {MAX_LABELS} the admission "
                         f"policy admits: nothing published")
        return p
    if cur is not None:
        p.foreign = squatter(cur, node, node_uid)
        p.uid = str(_map(cur.get("metadata")).get("uid") or "")
        if p.foreign:
            p.explain.append(f"NodeFeature {where} is not this agent's ({p.foreign}): left alone, the inventory "
                             f"labels are not published until it is removed")
            return p
        p.foreign = tampered(cur, read.domain)
        if p.foreign:
            p.explain.append(f"NodeFeature {where} was changed by someone else ({p.foreign}): repaired")
    if not labels:
        if cur is not None:
            meta = cur.get("metadata") or {}
            p.delete = (meta.get("uid"), meta.get("resourceVersion"))
            p.actions.append(("nodefeature", f"{'dry-run ' if dry else ''}delete {where}"))
            p.explain.append(f"{dry}NodeFeature {where}: no accelerator labels to publish; {done('deleted')}")
        return p
    want = desired(node, node_uid, read.namespace, labels)
    p.labels = dict(want["spec"]["labels"])
    shown = ", ".join(f"{k}={v}" for k, v in p.labels.items())
    if cur is None:
        p.create = want
        p.actions.append(("nodefeature", f"{'dry-run ' if dry else ''}create {where}"))
        p.explain.append(f"{dry}NodeFeature {where}: {done('created')} with {len(p.labels)} labels ({shown})")
        return p
    new = copy.deepcopy(dict(cur))
    meta = new.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **want["metadata"]["labels"]}
    owners = _owners(list(meta.get("ownerReferences") or []), node, node_uid)
    if owners:
        meta["ownerReferences"] = owners
    spec = new["spec"] = dict(new.get("spec") or {})
    spec["labels"] = dict(want["spec"]["labels"])
    if any(_map(spec.get("features")).get(k) for k in ("flags", "attributes", "instances")):
        del spec["features"]  # the agent writes none (and the admission policy admits none)
    new.setdefault("status", {})
    if new == dict(cur):
        return p
    p.replace = new
    before = dict(((cur.get("spec") or {}).get("labels")) or {})
    changed = sorted(k for k in set(before) | set(p.labels) if before.get(k) != p.labels.get(k))
    what = f"labels {', '.join(changed)}" if changed else "its metadata"
    p.actions.append(("nodefeature", f"{'dry-run ' if dry else ''}update {where}"))
    p.explain.append(f"{dry}NodeFeature {where}: {what} {done('updated')} ({shown})")
    return p
