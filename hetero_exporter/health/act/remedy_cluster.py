"""The remedy's writes beyond the Node (issue 15), through k8s/: what it reads for the plan's
``ClusterView`` (this node's ResourceSlices and its own DeviceTaintRules, this node's failed pods,
its NodeFeature in nodefeature mode) and how it applies the per-device and per-pod outputs
(DeviceTaintRules, pod conditions, evictions) and the NodeFeature carrying the selection labels.
health/act/remedy.py calls it after the Node patch; like the Node's, every write here is
idempotent, so a lost answer or a restart repeats nothing that landed: rule names are fixed, rule
updates carry the resourceVersion read, pod conditions merge by type, pod events have fixed names.

A cluster without resource.k8s.io/v1 is said once; device taints stay off until a later probe
(every ``DRA_PROBE_SECONDS``) finds it, and the rest works. Likewise a cluster without NFD's
NodeFeature CRD (nodefeature mode): said once, asked again every ``NFD_PROBE_SECONDS``; meanwhile
no selection label is published (and the Node labels an earlier labels-mode agent set stay).

Said once too, each as a Warning event on the Node, a log line (and for the NodeFeature, the
``accelerator_health_foreign_objects`` gauge): a NodeFeature of this node's name that is not the
agent's (left alone) or that someone changed (repaired); evictions configured but refused by the
API server (403: RBAC without deploy/components/eviction).
"""

from __future__ import annotations

import functools
import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from hetero_exporter.health.act.metrics import HealthMetrics
from hetero_exporter.health.plan import ClusterView, NodeFeatureRead, RemedyConfig, label_value, rfc3339
from hetero_exporter.health.plan import Plan
from hetero_exporter.health.plan.device_taints import DeviceTaintPlan
from hetero_exporter.health.plan.nodefeature import NodeFeaturePlan, object_name
from hetero_exporter.health.plan.pod_signals import PodSignalPlan
from hetero_exporter.health.plan.stack import PluginRead, component_up
from hetero_exporter import vendors
from hetero_exporter.k8s.api import Api
from hetero_exporter.k8s.client import Cluster, K8sError
from hetero_exporter.k8s.dra import Dra
from hetero_exporter.k8s.events import Events, NodeEvent
from hetero_exporter.k8s.nodefeatures import NodeFeatures
from hetero_exporter.k8s.pod_writes import PodWrites
from hetero_exporter.model import DeviceSample, NodeSnapshot
from hetero_exporter.model.keys import Keys

log = logging.getLogger(__name__)

DRA_PROBE_SECONDS = 3600.0  # a cluster without DRA is asked again this often (an upgrade may add it)
NFD_PROBE_SECONDS = 600.0  # a cluster without the NodeFeature CRD (nodefeature mode) is asked again this often
MANAGED_BY = "app.kubernetes.io/managed-by=hetero-exporter"
MAX_KNOWN_PODS = 4096  # pods whose uid and node are remembered
MAX_QUOTED = 300  # characters of an API answer quoted in an event
MAX_PLUGIN_PODS = 32  # pods one plugin selector lists on this node (a DaemonSet has one; a rollout two)
PODS = "/api/v1/pods"


@dataclass
class Applied:
    """What applying the cluster-side outputs did, for the next plan (``settle``) and the outcome."""

    failed_conditions: list[str] = field(default_factory=list)  # "ns/name" whose condition write failed
    refused_evictions: list[str] = field(default_factory=list)  # blocked by a PodDisruptionBudget
    failed_evictions: list[str] = field(default_factory=list)  # the call failed (500, 403...): backed off
    gone: list[str] = field(default_factory=list)  # pods the API says no longer exist
    foreign: list[str] = field(default_factory=list)  # pods the API places on another node: never written
    errors: list[str] = field(default_factory=list)


class _ServedProbe:
    """Whether the cluster serves an optional API (DRA, NFD's NodeFeature): asked once, then
    again every ``every`` seconds while it is not (an upgrade may add it); said once per reason."""

    def __init__(self, served: Callable[[], Optional[str]], every: float, clock: Callable[[], float], node: str, what: str,
                 off_message: str, level: int) -> None:
        self._served, self._every, self._clock, self._node = served, every, clock, node
        self._what, self._off_message, self._level = what, off_message, level
        self._off: Optional[str] = None  # why it is off ("" served); None: not asked yet
        self._asked = float("-inf")

    def __call__(self) -> bool:
        now = self._clock()
        if self._off == "" or (self._off is not None and now - self._asked < self._every):
            return self._off == ""
        try:
            why = self._served()
        except K8sError as e:
            log.warning(f"health: cannot ask whether the cluster serves {self._what}", extra={"error": str(e)})
            return False
        self._asked = now
        if why and self._off != why:
            log.log(self._level, self._off_message, extra={"node": self._node, "reason": why})
        self._off = why or ""
        return not why



class ClusterSide:
    """Reads and writes of one node's per-device and per-pod signals."""

    def __init__(self, cluster: Cluster, node: str, cfg: RemedyConfig, metrics: HealthMetrics,
                 resource_of: Callable[[DeviceSample], str], slices: Any = None,
                 clock: Callable[[], float] = lambda: 0.0,
                 failed_pods: Optional[Callable[[], Optional[list]]] = None, nodefeature_namespace: str = "",
                 plugin_pods: Optional[Callable[[str], Optional[list[dict[str, Any]]]]] = None):
        self.node, self.cfg, self.metrics = node, cfg, metrics
        self._clock = clock
        self._resource_of = resource_of
        self._slice_cache = slices  # a started k8s.slice_cache.SliceCache, or None: list per reconcile
        # the pod cache's failed pods (watched); None, or it answering None: list them per reconcile
        self._failed_pods = failed_pods
        # the pod cache's pods of a plugin selector (watched); None, or it answering None: list them
        self._watched_plugins = plugin_pods
        self._dra = Dra(cluster) if cfg.device_taints else None
        self._pods = PodWrites(cluster)
        self._reads = Api(cluster.api_client, cluster.timeout_seconds) if cfg.stack else None
        self._stack_failed: set[str] = set()  # selectors whose last list failed (said once per episode)
        self._dra_served = None if self._dra is None else _ServedProbe(
            self._dra.served, DRA_PROBE_SECONDS, clock, node, "DRA", "device taints off: the cluster does not serve "
            "DRA; the node taint, condition and pod signals work without it", logging.INFO)
        # nodefeature mode: the NodeFeature of this node in the agent's namespace
        self._nf = NodeFeatures(cluster, nodefeature_namespace or cfg.nodefeature_home()) if cfg.nodefeature else None
        self._nf_served = None if self._nf is None else _ServedProbe(
            self._nf.served, NFD_PROBE_SECONDS, clock, node, "NodeFeature", "inventory labels not published: "
            "nodefeature mode, and the cluster does not serve NFD's NodeFeature", logging.WARNING)
        self._events = Events(cluster)
        self._nf_said: Optional[str] = None  # the foreign NodeFeature last reported ("" none); None: not yet
        self._eviction_refused = False  # a 403 on an eviction was said
        self._rules_known: Optional[bool] = None  # did the last listing find rules of ours
        self._uids: dict[str, str] = {}
        self._nodes_of: dict[str, str] = {}  # "ns/name" -> spec.nodeName as the API server said

    # ------------------------------------------------------------------ reading the view
    def view(self, snapshot: NodeSnapshot, failing: bool, pods_book: Optional[Mapping[str, Any]]) -> ClusterView:
        """The ClusterView for this reconcile. ``failing``: some device is failed or degraded
        (otherwise slices and rules are read only when rules of ours may still exist)."""
        slices, rules = self._device_side(failing)
        failed_pods = None
        if self.cfg.black_hole:
            watched = self._failed_pods() if self._failed_pods is not None else None
            try:
                failed_pods = tuple(watched if watched is not None else self._pods.failed_on_node(self.node))
            except K8sError as e:
                log.warning("health: cannot list this node's failed pods; black-hole check skipped",
                            extra={"node": self.node, "error": str(e)})
        resources = {}
        for d in snapshot.devices:
            if d.identity.parent is None:
                r = self._resource_of(d)
                if r:
                    resources[d.identity.uuid] = r
        return ClusterView(slices=slices, device_rules=rules, failed_pods=failed_pods, resources=resources,
                           pods_book=pods_book, nodefeature=self._nodefeature(), stack=self._stack(snapshot))

    def _stack(self, snapshot: NodeSnapshot) -> Optional[tuple[PluginRead, ...]]:
        """The plugin pods on this node of each vendor with devices here (stack health,
        health/plan/stack.py), per selector of the vendor's spec: from the pod cache's watch when
        it is in sync, else one list (label selector and spec.nodeName, bounded); a failed list
        is a read of None (nothing is judged absent)."""
        if self._reads is None or self.cfg.mode == "observe":
            return None
        reads: list[PluginRead] = []
        known = vendors.specs()
        for name in sorted({d.identity.vendor for d in snapshot.devices if d.identity.parent is None}):
            spec = known.get(name)
            for sel in spec.plugin_pods if spec is not None else ():
                reads.append(PluginRead(name, sel.component, sel.selector, self._plugin_pods(sel.selector)))
        self.metrics.stack(component_up(reads, self.cfg.stack_grace_seconds, self._clock()))
        return tuple(reads)

    def _plugin_pods(self, selector: str) -> Optional[tuple[dict, ...]]:
        assert self._reads is not None
        watched = self._watched_plugins(selector) if self._watched_plugins is not None else None
        if watched is not None:
            self._stack_failed.discard(selector)
            return tuple(p for p in watched[:MAX_PLUGIN_PODS] if isinstance(p, dict))
        try:
            doc = self._reads.get(PODS, query={"labelSelector": selector, "fieldSelector": f"spec.nodeName={self.node}",
                                               "limit": str(MAX_PLUGIN_PODS)})
        except K8sError as e:
            if selector not in self._stack_failed:
                log.warning("health: cannot list plugin pods; their stack health waits", extra={
                    "node": self.node, "selector": selector, "error": str(e)[:MAX_QUOTED]})
            self._stack_failed.add(selector)
            return None
        self._stack_failed.discard(selector)
        items = doc.get("items") if isinstance(doc, dict) else None
        return tuple(p for p in items[:MAX_PLUGIN_PODS] if isinstance(p, dict)) if isinstance(items, list) else ()

    def _nodefeature(self) -> Optional[NodeFeatureRead]:
        """This node's NodeFeature as read (nodefeature mode); None when the API is not served or
        the read failed (then nothing is planned for it, and no Node label of ours is removed)."""
        nf = self._nf
        if nf is None or self._nf_served is None or self.cfg.mode == "observe" or not self._nf_served():
            return None
        try:
            return NodeFeatureRead(nf.namespace, nf.get(object_name(self.node)), self.cfg.domain)
        except K8sError as e:
            log.warning("health: cannot read this node's NodeFeature; the inventory labels wait",
                        extra={"node": self.node, "namespace": nf.namespace, "error": str(e)})
            return None

    def _device_side(self, failing: bool) -> tuple[Optional[tuple], tuple]:
        if self._dra is None or self.cfg.mode == "observe" or not (failing or self._rules_known is not False):
            return None, ()
        if self._dra_served is None or not self._dra_served():
            return None, ()
        try:
            rules = tuple(self._dra.rules(f"{MANAGED_BY},{Keys(self.cfg.domain).node}={label_value(self.node)}"))
            if self._slice_cache is not None and self._slice_cache.served and self._slice_cache.synced:
                slices = tuple(self._slice_cache.slices())
            else:
                slices = tuple(self._dra.slices(self.node))
        except K8sError as e:
            # without both lists the rules are not planned (never delete what could not be listed)
            log.warning("health: cannot read ResourceSlices or DeviceTaintRules; device taints wait",
                        extra={"node": self.node, "error": str(e)})
            return None, ()
        self._rules_known = bool(rules)
        return slices, rules

    # ------------------------------------------------------------------ applying the plan
    def apply(self, p: Plan) -> Applied:
        """Write the plan's device taints, pod conditions and evictions (enforce mode only); in
        dry-run too, say what stands in the NodeFeature's way."""
        done = Applied()
        if p.nodefeature is not None:
            self._report_foreign(p.nodefeature)
        if self.cfg.mode != "enforce":
            return done
        if p.device_taints is not None:
            self._apply_rules(p.device_taints, done)
        if p.pod_signals is not None:
            self._apply_pods(p.pod_signals, done)
        if p.nodefeature is not None and self._nf is not None:
            self._apply_nodefeature(self._nf, p.nodefeature, done)
        return done

    def _apply_nodefeature(self, api: NodeFeatures, nf: NodeFeaturePlan, done: Applied) -> None:
        """Create, replace or delete the NodeFeature as planned. A 409 (another writer, or an
        earlier create that did land) or a 404 (deleted since it was read) is an error of this
        cycle: the next one reads the object again and plans from what is there."""
        call: Callable[[], Any]
        if nf.create is not None:
            what, call = "create", functools.partial(api.create, nf.create)
        elif nf.replace is not None:
            what, call = "update", functools.partial(api.replace, nf.name, nf.replace)
        elif nf.delete is not None:
            what, call = "delete", functools.partial(api.delete, nf.name, *nf.delete)
        else:
            return
        try:
            call()
        except K8sError as e:
            result = "exists" if e.already_exists else "conflict" if e.conflict else "error"
            self.metrics.action("nodefeature", result)
            done.errors.append(f"NodeFeature {nf.namespace}/{nf.name} {what}: {e}")
            log.warning("health: NodeFeature write failed; the next cycle reads and plans again",
                        extra={"node": self.node, "what": what, "namespace": nf.namespace, "error": str(e)})
            return
        self.metrics.action("nodefeature", "ok")
        log.info("health: NodeFeature written", extra={"node": self.node, "what": what, "namespace": nf.namespace,
                                                        "object": nf.name, "labels": len(nf.labels)})

    def _report_foreign(self, nf: NodeFeaturePlan) -> None:
        """A NodeFeature of this node's name that is not ours (a squatter: nothing published) or
        that someone changed (repaired): a Warning event on the Node and a log line once per
        object and reason, the gauge at every plan."""
        self.metrics.foreign("NodeFeature", 1 if nf.foreign else 0)
        if nf.foreign == self._nf_said:
            return
        self._nf_said = nf.foreign
        if not nf.foreign:
            return
        where = f"{nf.namespace}/{nf.name}"
        squat = not nf.writes
        what = ("is not this agent's" if squat else "was changed by someone else")
        done = ("left alone: the inventory labels are not published until it is removed" if squat
                else "the agent repairs it")
        log.warning(f"health: NodeFeature {what}; {done}", extra={"node": self.node, "namespace": nf.namespace,
                                                                  "object": nf.name, "why": nf.foreign})
        digest = hashlib.sha1(f"{nf.uid}/{nf.foreign}".encode()).hexdigest()[:10]
        self._warn(NodeEvent(name=f"{self.node}.nodefeature-{digest}", type="Warning",
                             reason="AcceleratorNodeFeatureForeign", action="Publish",
                             message=f"NodeFeature {where} {what} ({nf.foreign}); {done}"))

    def _warn(self, ev: NodeEvent) -> None:
        """Send a Warning about this node now (a fixed name: a resend after a restart is
        AlreadyExists); a failure is logged, not retried (the log line already said it)."""
        try:
            created = self._events.create(self.node, ev, self._clock())
            self.metrics.action("event", "ok" if created else "exists")
        except K8sError as e:
            self.metrics.action("event", "error")
            log.warning("health: event not sent", extra={"node": self.node, "why": ev.reason, "error": str(e)})

    def _eviction_forbidden(self, key: str, e: K8sError) -> None:
        """Evictions are configured (health.evict_pods) but the API server refuses them: said
        once, clearly; the other pod signals go on."""
        if self._eviction_refused:
            return
        self._eviction_refused = True
        why = str(e)[:MAX_QUOTED]
        text = (f"health.evict_pods is on, but the API server refused to evict {key} (403: {why}); evictions "
                "need the grant of deploy/components/eviction (docs/security.md), and none are admitted in "
                "kube-* namespaces: grant it, or turn evict_pods off")
        log.error(f"health: {text}", extra={"node": self.node, "pod": key, "error": str(e)})
        self._warn(NodeEvent(name=f"{self.node}.eviction-forbidden", type="Warning",
                             reason="AcceleratorEvictionForbidden", action="Evict", message=text))

    def _apply_rules(self, dt: DeviceTaintPlan, done: Applied) -> None:
        dra = self._dra
        if dra is None:  # device taints off: compose plans none
            return
        for body in dt.create:
            self._rule_write("create", lambda: dra.create_rule(body), done)
        for u in dt.update:
            self._rule_write("update", lambda: dra.patch_rule(u.name, u.patch, u.resource_version), done)
        for d in dt.delete:
            self._rule_write("delete", lambda: dra.delete_rule(d.name, d.uid, d.resource_version), done)
        if dt.create or dt.update:
            self._rules_known = True

    def _rule_write(self, what: str, call: Callable[[], Any], done: Applied) -> None:
        try:
            call()
            self.metrics.action("device-taint", "ok")
        except K8sError as e:
            if e.already_exists:  # an earlier attempt got through: the next plan sees it
                self.metrics.action("device-taint", "exists")
                return
            self.metrics.action("device-taint", "conflict" if e.conflict else "error")
            done.errors.append(f"DeviceTaintRule {what}: {e}")
            log.warning("health: DeviceTaintRule write failed; the next cycle lists and plans again",
                        extra={"node": self.node, "what": what, "error": str(e)})

    def uid(self, namespace: str, name: str, known: str = "") -> str:
        """The pod's uid (asked once per pod; '' when it cannot be read)."""
        key = f"{namespace}/{name}"
        if known:
            self._uids[key] = known
            return known
        if key not in self._uids:
            try:
                self._remember(key, self._pods.get(namespace, name))
            except K8sError:
                return ""
        return self._uids[key]

    def on_node(self, namespace: str, name: str) -> Optional[bool]:
        """Whether the API server places the pod on this node (read once per pod; None when it
        cannot be read now, False when the pod is gone). Attribution
        (PodResources, cgroups) names the holder of a device; only the pod object says where it
        runs, and a pod of another node is never written to (nor evicted, nor given an event)."""
        key = f"{namespace}/{name}"
        if key not in self._nodes_of:
            try:
                self._remember(key, self._pods.get(namespace, name))
            except K8sError as e:
                return False if e.not_found else None
        return self._nodes_of.get(key) == self.node

    def _remember(self, key: str, pod: Mapping[str, Any]) -> None:
        self._uids[key] = str(((pod.get("metadata") or {}).get("uid")) or "")
        self._nodes_of[key] = str((pod.get("spec") or {}).get("nodeName") or "")
        if len(self._nodes_of) > MAX_KNOWN_PODS:  # pods come and go: keep the newest
            for k in list(self._nodes_of)[:len(self._nodes_of) - MAX_KNOWN_PODS]:
                self._nodes_of.pop(k, None)
                self._uids.pop(k, None)

    def _foreign(self, key: str, node_name: str, done: Applied) -> None:
        done.gone.append(key)
        done.foreign.append(key)
        self.metrics.action("pod-condition", "refused")
        log.warning("health: a pod holding a failed device of this node is placed on another node; not written",
                    extra={"pod": key, "node": self.node, "pod_node": node_name})

    def _apply_pods(self, ps: PodSignalPlan, done: Applied) -> None:
        now = self._clock()
        for c in ps.conditions:
            key = f"{c.namespace}/{c.name}"
            try:
                pod = self._pods.get(c.namespace, c.name)
                meta = pod.get("metadata") or {}
                if c.uid and meta.get("uid") and meta["uid"] != c.uid:
                    done.gone.append(key)  # another pod of that name now: not the one that held the device
                    continue
                self._remember(key, pod)
                if self._nodes_of[key] != self.node:
                    self._foreign(key, self._nodes_of[key], done)
                    continue
                cond = {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
                        "lastTransitionTime": _transition(pod, c, now), "lastProbeTime": rfc3339(now)}
                self._pods.patch_status(c.namespace, c.name, {"status": {"conditions": [cond]}})
                self.metrics.action("pod-condition", "ok")
            except K8sError as e:
                if e.not_found:
                    done.gone.append(key)
                    continue
                self.metrics.action("pod-condition", "error")
                done.failed_conditions.append(key)
                done.errors.append(f"pod {key} condition: {e}")
        for ref in ps.evictions:
            key = f"{ref.namespace}/{ref.name}"
            if key in done.gone:
                continue
            try:
                pod = self._pods.get(ref.namespace, ref.name)  # where it runs now, read before evicting
                self._remember(key, pod)
                if self._nodes_of[key] != self.node:
                    self._foreign(key, self._nodes_of[key], done)
                    continue
                outcome = self._pods.evict(ref.namespace, ref.name)
            except K8sError as e:
                if e.not_found:
                    done.gone.append(key)
                    continue
                done.failed_evictions.append(key)
                done.errors.append(f"pod {key} eviction: {e}")
                self.metrics.action("evict", "refused" if e.status == 403 else "error")
                if e.status == 403:
                    self._eviction_forbidden(key, e)
                continue
            if outcome == "blocked":
                done.refused_evictions.append(key)
                log.info("health: eviction refused by a PodDisruptionBudget; retried next cycle",
                         extra={"pod": key, "why": getattr(outcome, "message", "")})
            elif outcome == "gone":
                self._evicted_gone(ref.namespace, ref.name, str((pod.get("metadata") or {}).get("uid") or ""),
                                   getattr(outcome, "message", ""), done)
            else:
                log.info("health: evicted a pod on a failed device", extra={"pod": key, "node": self.node})

    def _evicted_gone(self, namespace: str, name: str, uid: str, why: str, done: Applied) -> None:
        """An eviction answered 404. The pod is gone only when the pod itself now reads 404 (or
        another pod holds its name): a 404 of the eviction for a pod that is still there (an API
        server or proxy that does not serve the subresource) is a failed eviction, retried with
        the back-off, and the pod keeps its record (its condition goes back to True on recovery)."""
        key = f"{namespace}/{name}"
        current: Optional[Mapping[str, Any]] = None
        try:
            current = self._pods.get(namespace, name)
        except K8sError as e:
            if e.not_found:
                done.gone.append(key)
                return
        if current is not None:
            now_uid = str((current.get("metadata") or {}).get("uid") or "")
            if uid and now_uid and now_uid != uid:
                done.gone.append(key)  # another pod of that name: the one that held the device is gone
                return
        done.failed_evictions.append(key)
        done.errors.append(f"pod {key} eviction: answered 404 ({why[:MAX_QUOTED]}) while the pod is there")
        self.metrics.action("evict", "error")
        log.warning("health: the Eviction API answered 404 for a pod that is still there; retried with a back-off",
                    extra={"pod": key, "node": self.node, "error": why[:MAX_QUOTED]})


def _transition(pod: Mapping[str, Any], c: Any, now: float) -> str:
    """The condition's lastTransitionTime: kept while its status stays (a new message is no
    transition), now when the status changes or the condition is new."""
    for cur in ((pod.get("status") or {}).get("conditions") or []):
        if isinstance(cur, dict) and cur.get("type") == c.type and cur.get("status") == c.status \
                and isinstance(cur.get("lastTransitionTime"), str):
            return cur["lastTransitionTime"]
    return rfc3339(now)
