"""The kube-scheduler extender v1 protocol over the scorer (no HTTP here: see server.py).

Requests are ``ExtenderArgs`` with Go's field names: ``Pod``, and either ``Nodes`` (a NodeList,
nodes-in-request mode) or ``NodeNames`` (nodeCacheCapable mode, resolved from the watch-backed
node table). ``/filter`` answers an ``ExtenderFilterResult`` (``Nodes`` or ``NodeNames``,
``FailedNodes``, ``FailedAndUnresolvableNodes``, ``Error``), ``/prioritize`` a list of
``{"Host", "Score"}`` with scores 0..10. Every evaluation is kept under its trace id for
``/explain``. A malformed request raises ``BadRequest``; a pod whose accelerator request cannot
be read is not a bad request: every node fails with that reason, so the pod's events say it.
"""

from __future__ import annotations

import collections
import json
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from hetero_exporter.scoring import explain
from hetero_exporter.scoring.nodes import NodeState
from hetero_exporter.scoring.nodetable import NodeTable
from hetero_exporter.scoring.request import DEFAULT_DOMAIN, Request, RequestError, request_from_pod
from hetero_exporter.scoring.scorer import NO_ACCELERATOR, Decision, Scorer, extender_score

log = logging.getLogger(__name__)

_POINTS = [f"{p}}}" for p in range(11)]
REASON_LIMIT = 600  # characters of a FailedNodes reason (the full one is in /explain)


class BadRequest(ValueError):
    """The request is not ExtenderArgs (answered 400 with this message)."""


def new_trace() -> str:
    return secrets.token_hex(8)


@dataclass(eq=False)
class Evaluation:
    """One /filter or /prioritize call: what was asked and the verdict on every node."""

    trace: str
    verb: str
    mode: str  # "nodes" (in the request) | "names" (from the cache)
    pod: str
    request: Optional[Request]
    request_error: Optional[str]
    names: list[str]
    states: list[Optional[NodeState]]
    decisions: list[Decision]
    now: float
    policy: str


def _field(doc: dict, name: str) -> Any:
    """Go's encoding/json matches field names case-insensitively; so do we."""
    if name in doc:
        return doc[name]
    low = name.lower()
    for k, v in doc.items():
        if isinstance(k, str) and k.lower() == low:
            return v
    return None


def _missing(name: str) -> Decision:
    return Decision(False, reason=f"{name} is not in the extender's node cache (no annotation seen yet)")


class Extender:
    """Filter and prioritize over a Scorer. ``table``: the watch-backed node table (None:
    nodes-in-request mode only). ``clock``: Unix seconds, for staleness."""

    def __init__(self, scorer: Scorer, table: Optional[NodeTable] = None, *,
                 annotation: str = "hetero-exporter.io/devices", domain: str = DEFAULT_DOMAIN,
                 traces: int = 256, clock: Callable[[], float] = time.time):
        self.scorer = scorer
        self.table = table
        self.annotation = annotation
        self.domain = domain
        self.clock = clock
        self.decoded = NodeTable(scorer, annotation)  # nodes-in-request mode: decode on change only
        self._traces: "collections.OrderedDict[str, Evaluation]" = collections.OrderedDict()
        self._traces_max = traces
        self._lock = threading.Lock()
        self._host_json: dict[str, str] = {}  # node name -> its JSON object's head, for /prioritize

    # ------------------------------------------------------------------ protocol

    def _args(self, body: bytes) -> tuple[dict, Optional[dict], Optional[list[str]]]:
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise BadRequest(f"body is not JSON: {e}") from None
        if not isinstance(doc, dict):
            raise BadRequest(f"expected ExtenderArgs (a JSON object with Pod and Nodes or NodeNames), "
                             f"got {type(doc).__name__}")
        pod = _field(doc, "Pod")
        if not isinstance(pod, dict):
            raise BadRequest("ExtenderArgs.Pod is missing or not an object")
        nodes, names = _field(doc, "Nodes"), _field(doc, "NodeNames")
        if nodes is None and names is None:
            raise BadRequest("ExtenderArgs has neither Nodes nor NodeNames")
        if names is not None and nodes is None:
            if not isinstance(names, list) or not set(map(type, names)) <= {str}:
                raise BadRequest("ExtenderArgs.NodeNames must be a list of node names")
            if self.table is None:
                raise BadRequest("NodeNames given, but this extender runs without cluster access "
                                 "(nodes-in-request mode only): register it with nodeCacheCapable: false, "
                                 "or start it with --kubeconfig / in-cluster credentials")
            return pod, None, names
        if not isinstance(nodes, dict) or not isinstance(nodes.get("items", []), list):
            raise BadRequest("ExtenderArgs.Nodes must be a NodeList object with an items list")
        return pod, nodes, None

    def _node_states(self, items: list) -> tuple[list[str], list[NodeState]]:
        names, states = [], []
        for i, item in enumerate(items):
            meta = item.get("metadata") if isinstance(item, dict) else None
            name = meta.get("name") if isinstance(meta, dict) else None
            if not isinstance(name, str) or not name:
                raise BadRequest(f"ExtenderArgs.Nodes.items[{i}] has no metadata.name")
            ann = meta.get("annotations") or {}
            text = ann.get(self.annotation) if isinstance(ann, dict) else None
            names.append(name)
            states.append(self.decoded.state_for(name, text if isinstance(text, str) else None))
        return names, states

    def evaluate(self, verb: str, body: bytes, trace: str) -> tuple[Evaluation, Optional[dict]]:
        pod, nodes, names = self._args(body)
        meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
        pod_name = f"{meta.get('namespace') or 'default'}/{meta.get('name') or '?'}"
        try:
            req: Optional[Request] = request_from_pod(pod, self.domain)
            error = None
        except RequestError as e:
            req, error = None, f"pod request unreadable: {e}"
        if nodes is not None:
            mode = "nodes"
            node_names, states = self._node_states(nodes.get("items") or [])
            opt_states: list[Optional[NodeState]] = list(states)
        else:
            mode = "names"
            node_names = list(names or [])
            table = self.table
            assert table is not None  # _args refused NodeNames without a table
            get = table.lookup()
            opt_states = [get(n) for n in node_names]
        if req is None:
            decisions = [Decision(False, reason=error or "")] * len(node_names)
        else:
            key = self.scorer.memo_key(req)
            decide = self.scorer.decide
            # the memo lookup inlined: /prioritize over thousands of nodes is mostly this loop
            decisions = [(st.memo.get(key) or decide(req, st, key)) if st is not None else
                         (NO_ACCELERATOR if req.count == 0 else _missing(n))
                         for n, st in zip(node_names, opt_states)]
        ev = Evaluation(trace, verb, mode, pod_name, req, error, node_names, opt_states, decisions,
                        self.clock(), (req.policy if req and req.policy else self.scorer.policy))
        with self._lock:
            self._traces[trace] = ev
            while len(self._traces) > self._traces_max:
                self._traces.popitem(last=False)
        return ev, nodes

    def filter(self, body: bytes, trace: str) -> tuple[dict, Evaluation]:
        ev, nodes = self.evaluate("filter", body, trace)
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        passing = []
        for i, (name, d) in enumerate(zip(ev.names, ev.decisions)):
            if d.feasible:
                passing.append(i)
            else:
                reason = d.reason if len(d.reason) <= REASON_LIMIT else d.reason[:REASON_LIMIT - 3] + "..."
                failed[name] = reason
                if not d.resolvable:
                    unresolvable[name] = reason
        result: dict[str, Any] = {"Nodes": None, "NodeNames": None, "FailedNodes": failed,
                                  "FailedAndUnresolvableNodes": unresolvable, "Error": ""}
        if nodes is not None:
            items = nodes.get("items") or []
            result["Nodes"] = {**nodes, "items": [items[i] for i in passing]}
        else:
            result["NodeNames"] = [ev.names[i] for i in passing]
        log.info("filter", extra={"trace": trace, "pod": ev.pod, "mode": ev.mode, "nodes": len(ev.names),
                                  "passed": len(passing), "request": ev.request.describe() if ev.request else ev.request_error})
        return result, ev

    def prioritize(self, body: bytes, trace: str) -> tuple[bytes, Evaluation]:
        """The HostPriorityList as JSON bytes (built as text: over thousands of nodes this is
        several times faster than json.dumps of as many dicts)."""
        ev, _ = self.evaluate("prioritize", body, trace)
        conf_of, now = self.scorer.staleness.confidence, ev.now
        fresh_after = now - self.scorer.staleness.fresh_seconds  # annotations newer than this: confidence 1
        hosts = self._host_json
        if len(hosts) > 200_000:
            hosts.clear()
        items = []
        for name, d, st in zip(ev.names, ev.decisions, ev.states):
            if not d.feasible or st is None:
                points = 0
            elif st.time >= fresh_after:
                points = d.points
            else:
                points = extender_score(d.score * conf_of(now - st.time))
            head = hosts.get(name)
            if head is None:
                head = hosts[name] = '{"Host":%s,"Score":' % json.dumps(name)
            items.append(head + _POINTS[points])
        out = ("[" + ",".join(items) + "]").encode()
        log.info("prioritize", extra={"trace": trace, "pod": ev.pod, "mode": ev.mode, "nodes": len(ev.names),
                                      "request": ev.request.describe() if ev.request else ev.request_error})
        return out, ev

    # ------------------------------------------------------------------ explain

    def explain(self, trace: Optional[str]) -> Optional[dict]:
        """The per-node reasons of one evaluation; without a trace, the recent ones."""
        with self._lock:
            if not trace:
                return {"traces": [{"trace": e.trace, "verb": e.verb, "pod": e.pod, "time": e.now,
                                    "nodes": len(e.names)} for e in reversed(self._traces.values())]}
            ev = self._traces.get(trace)
        if ev is None:
            return None
        rows = explain.node_rows(ev.names, ev.states, ev.decisions, ev.now, self.scorer)
        return explain.document(ev.request, ev.request_error, ev.policy, ev.now, rows,
                                trace=ev.trace, verb=ev.verb, mode=ev.mode, pod=ev.pod)
