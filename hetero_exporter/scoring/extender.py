"""The kube-scheduler extender v1 protocol over the scorer (no HTTP here: see server.py).

Requests are ``ExtenderArgs`` with Go's field names: ``Pod``, and either ``Nodes`` (a NodeList,
nodes-in-request mode) or ``NodeNames`` (nodeCacheCapable mode, resolved from the watch-backed
node table). ``/filter`` answers an ``ExtenderFilterResult`` (``Nodes`` or ``NodeNames``,
``FailedNodes``, ``FailedAndUnresolvableNodes``, ``Error``), ``/prioritize`` a list of
``{"Host", "Score"}`` with scores 0..10. Every evaluation is kept under its trace id for
``/explain``; a pod's /filter and /prioritize of one scheduling cycle share a trace (trace.py), and
the trace id ends every FailedNodes reason, so it shows in the pod's events. A malformed request raises ``BadRequest``; a pod whose accelerator request cannot
be read is not a bad request: every node fails with that reason, so the pod's events say it.

Input is hostile: bodies decode with ``jsonsafe`` (depth limit, no NaN), names longer than
Kubernetes allows are clipped in logs and /explain (a node so named fails), and the /explain
ring is bounded in bytes as well as in calls.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, cast

from hetero_exporter.scoring import explain, jsonsafe, wire
from hetero_exporter.scoring.metrics import ExtenderMetrics
from hetero_exporter.scoring.nodes import NodeState
from hetero_exporter.scoring.nodetable import NodeTable
from hetero_exporter.scoring.request import (NAME_CHARS, Request, RequestError, clip_name, pod_name,
                                             request_from_pod)
from hetero_exporter.scoring.scorer import NO_ACCELERATOR, Decision, Scorer
from hetero_exporter.scoring.trace import PodTraces, replica_name, replica_of
from hetero_exporter.scoring.verdicts import DecisionVerdicts, Verdicts
from hetero_exporter.model.keys import DEFAULT_DOMAIN, Keys

log = logging.getLogger(__name__)

_POINTS = [f"{p}}}" for p in range(11)]
_POINTS_COMMA = [f"{p}}}," for p in range(11)]
REASON_LIMIT = 600  # characters of a FailedNodes reason (the full one is in /explain)
LOG_TEXT_LIMIT = 600  # characters of a request description or error in a log line
RING_BYTES = 8 * 2**20  # the /explain ring's estimated size; the oldest calls go first
NODE_BYTES = 100  # estimated memory a kept call holds per node, besides its name (names mode: shared states)
# the body-mode table of decoded nodes (every distinct name a caller sends): least recently used
# out past either bound, the bytes those of the decoded states (nodes.state_bytes, an estimate at or
# above what tracemalloc measures), not of their text: a 7.7 KB annotation of 64 bare devices
# decodes to 115 KB. ~10,000 nodes of 8 GPUs (~18 KB each), ~20,000 of one.
DECODED_NODES = 20_000
DECODED_BYTES = 192 << 20


class BadRequest(ValueError):
    """The request is not ExtenderArgs (answered 400 with this message)."""


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
    states: Sequence[Optional[NodeState]]
    verdicts: Verdicts
    now: float
    policy: str

    @property
    def decisions(self) -> list[Decision]:
        """Every node's Decision (made now where the answer did not need it)."""
        return self.verdicts.decisions()


def _key(doc: dict, name: str) -> Optional[str]:
    """The key of ``doc`` that Go's encoding/json matches to field ``name``: the exact one, else
    the first that matches case-insensitively."""
    if name in doc:
        return name
    low = name.lower()
    return next((k for k in doc if isinstance(k, str) and k.lower() == low), None)


def _field(doc: dict, name: str) -> Any:
    """Go's encoding/json matches field names case-insensitively; so do we."""
    key = _key(doc, name)
    return None if key is None else doc[key]


def _missing(name: str) -> Decision:
    return Decision(False, reason=f"{clip_name(name)} is not in the extender's node cache (no annotation seen yet)")


def _misnamed(name: str) -> NodeState:
    return NodeState(name=clip_name(name), time=0.0, groups={},
                     error=f"node name of {len(name)} characters, over the {NAME_CHARS} Kubernetes allows")


def _clip(text: str, limit: int = LOG_TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _ring_cost(ev: Evaluation, names_chars: int) -> int:
    """Estimated bytes an evaluation holds in the /explain ring (names, request, references)."""
    request = len(ev.request.key) if ev.request is not None else len(ev.request_error or "")
    return 1000 + request + len(ev.pod) + names_chars + NODE_BYTES * len(ev.names)


class Extender:
    """Filter and prioritize over a Scorer. ``table``: the watch-backed node table (None:
    nodes-in-request mode only). ``clock``: Unix seconds, for staleness. ``traces`` and
    ``ring_bytes`` bound the /explain ring in calls and in estimated bytes; a call is kept under
    (trace, verb). ``replica``: this extender's name in trace ids (default ``POD_NAME``, else the
    host name). ``metrics``: where calls and decisions are counted (default a registry of its own)."""

    def __init__(self, scorer: Scorer, table: Optional[NodeTable] = None, *,
                 annotation: str = Keys().devices, domain: str = DEFAULT_DOMAIN,
                 traces: int = 256, ring_bytes: int = RING_BYTES, clock: Callable[[], float] = time.time,
                 replica: Optional[str] = None, metrics: Optional[ExtenderMetrics] = None):
        self.scorer = scorer
        self.table = table
        self.annotation = annotation
        self.domain = domain
        self.clock = clock
        self.metrics = metrics or ExtenderMetrics()
        # nodes-in-request mode: decode on change only
        self.decoded: NodeTable = self.metrics.node_table(scorer, annotation, precompute=False,
                                                          limit=DECODED_NODES, max_bytes=DECODED_BYTES)
        self.metrics.tables["request"] = self.decoded
        if table is not None:
            self.metrics.tables["watch"] = table
        self.metrics.clock = clock
        self.replica = replica or replica_name()
        self.pod_traces = PodTraces(self.replica)
        # (trace, verb) -> (evaluation, estimated bytes); the lock is held for O(1) dict work only
        self._traces: "collections.OrderedDict[tuple[str, str], tuple[Evaluation, int]]" = \
            collections.OrderedDict()
        self._traces_max = traces
        self._ring_max = ring_bytes
        self.ring_bytes = 0  # estimated bytes the ring holds now
        self._lock = threading.Lock()
        self._host_json: dict[str, str] = {}  # node name -> its JSON object's head, for /prioritize
        self.names = wire.NamesCache()  # NodeNames' JSON text -> the list (the same object again)
        self.values = wire.ValueCache()  # a Pod's JSON text -> the pod and its Request, for the next verb

    # ------------------------------------------------------------------ protocol

    def _names_args(self, body: bytes) -> Optional[tuple[dict, wire.NameList]]:
        """(pod, node names) of a node-cache mode request by ``wire``: the names decoded only
        when their bytes are new; None for anything else (``_args`` decodes the body whole)."""
        got = self._names_request(body)
        return (got[0], got[1]) if got is not None else None

    def _names_request(self, body: bytes) -> Optional[tuple[dict, wire.NameList, Optional[wire.Decoded]]]:
        """``_names_args`` and the pod's entry in the values cache: the other values (the Pod)
        decoded only when their bytes are new, the Request read once for them."""
        top = wire.split(body) if self.table is not None else None
        key = _key(top, "NodeNames") if top is not None else None
        if top is None or key is None:
            return None
        listed = self.names.get(top[key])
        if listed is None:
            return None
        doc: dict[str, Any] = {}
        entries: dict[str, wire.Decoded] = {}
        try:  # the object's level is 1: its values may nest one level less
            for k, text in top.items():
                if k == key:
                    doc[k] = listed.names
                    continue
                got = self.values.get(text)
                if got is None:
                    got = self.values.put(text, jsonsafe.loads(text, max_depth=jsonsafe.MAX_DEPTH - 1))
                doc[k], entries[k] = got.value, got
        except jsonsafe.JSONRefused:
            return None
        pod_key = _key(doc, "Pod")
        pod = doc[pod_key] if pod_key is not None else None
        if not isinstance(pod, dict) or _field(doc, "Nodes") is not None:
            return None
        return pod, listed, entries.get(cast(str, pod_key))

    def _args(self, body: bytes) -> tuple[dict, Optional[dict], Optional[list[str]]]:
        try:
            doc = jsonsafe.loads(body)
        except jsonsafe.JSONRefused as e:
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

    def _node_states(self, items: list) -> tuple[list[str], list[NodeState], int]:
        """(names, states, the states' estimated bytes)."""
        names, states, weight = [], [], 0
        for i, item in enumerate(items):
            meta = item.get("metadata") if isinstance(item, dict) else None
            meta = meta if isinstance(meta, dict) else {}
            name = meta.get("name")
            if not isinstance(name, str) or not name:
                raise BadRequest(f"ExtenderArgs.Nodes.items[{i}] has no metadata.name")
            ann = meta.get("annotations") or {}
            text = ann.get(self.annotation) if isinstance(ann, dict) else None
            names.append(name)
            if len(name) > NAME_CHARS:  # not a node Kubernetes can have: fails, never cached
                states.append(_misnamed(name))
                continue
            state = self.decoded.state_for(name, text if isinstance(text, str) else None)
            weight += state.weight
            states.append(state)
        return names, states, weight

    def _remember(self, ev: Evaluation, decoded_bytes: int = 0, listed: Optional[wire.NameList] = None) -> None:
        """Keep ``ev`` for /explain, names clipped, dropping the oldest beyond the bounds.
        ``decoded_bytes``: in body mode, the estimated bytes of the node states it keeps alive.
        ``listed``: ``ev.names`` as the names cache measured them."""
        if listed is not None and listed.names is ev.names and listed.longest <= NAME_CHARS:
            chars = listed.chars
        else:
            lengths = list(map(len, ev.names))  # in C: /prioritize over 5,000 names stays cheap
            if max(lengths, default=0) > NAME_CHARS:
                ev = dataclasses.replace(ev, names=[clip_name(n) for n in ev.names])
                lengths = list(map(len, ev.names))
            chars = sum(lengths)
        cost = _ring_cost(ev, chars)
        cost += decoded_bytes
        key = (ev.trace, ev.verb)
        with self._lock:
            old = self._traces.pop(key, None)
            if old is not None:
                self.ring_bytes -= old[1]
            self._traces[key] = (ev, cost)
            self.ring_bytes += cost
            while len(self._traces) > 1 and (len(self._traces) > self._traces_max
                                             or self.ring_bytes > self._ring_max):
                _, (_, dropped) = self._traces.popitem(last=False)
                self.ring_bytes -= dropped

    def evaluate(self, verb: str, body: bytes, trace: Optional[str] = None) -> tuple[Evaluation, Optional[dict]]:
        """``trace``: the call's trace id (default: the pod's scheduling cycle's, trace.py)."""
        ev, nodes, _ = self._evaluate(verb, body, trace)
        return ev, nodes

    def _evaluate(self, verb: str, body: bytes, trace: Optional[str]
                  ) -> tuple[Evaluation, Optional[dict], Optional[wire.NameList]]:
        fast = self._names_request(body)
        listed: Optional[wire.NameList] = None
        entry: Optional[wire.Decoded] = None
        if fast is not None:
            (pod, listed, entry), nodes = fast, None
            names: Optional[list[str]] = listed.names
        else:
            pod, nodes, names = self._args(body)
        trace = trace or self.pod_traces.for_pod(pod)
        req, error = entry.read if entry is not None and entry.read is not None else self._request(pod)
        if entry is not None:
            entry.read = (req, error)  # the Request is shared by the calls of these Pod bytes
        given: Optional[list[NodeState]] = None
        decoded_bytes = 0
        source: Optional[NodeTable]
        if nodes is not None:
            mode, source = "nodes", self.decoded
            node_names, given, decoded_bytes = self._node_states(nodes.get("items") or [])
        else:
            mode, source = "names", self.table
            # the names cache's list as it is (never changed): the table knows its rows by identity
            node_names = names if listed is not None and names is not None else list(names or [])
        assert source is not None  # _args refused NodeNames without a table
        verdicts = self._verdicts(req, error, source, node_names, given)
        ev = Evaluation(trace, verb, mode, pod_name(pod.get("metadata")), req, error, node_names, verdicts.states,
                        verdicts, self.clock(), (req.policy if req and req.policy else self.scorer.policy))
        self._remember(ev, decoded_bytes, listed)
        self.metrics.count_decisions(verb, verdicts.counts())
        return ev, nodes, listed

    def _request(self, pod: dict) -> tuple[Optional[Request], Optional[str]]:
        """(the pod's request, None) or (None, why it cannot be read)."""
        try:
            return request_from_pod(pod, self.domain), None
        except RequestError as e:
            return None, f"pod request unreadable: {e}"

    def _verdicts(self, req: Optional[Request], error: Optional[str], table: NodeTable, names: list[str],
                  given: Optional[list[NodeState]]) -> Verdicts:
        """The state and verdict of each node: all at once by request shape from ``table``
        (scoring.columns), else node by node. ``given``: the states of nodes in the request
        (one the table does not hold, like a misnamed node or a name listed twice, is decided
        on its own)."""
        if req is None:
            states: list[Optional[NodeState]] = list(given) if given is not None else list(map(table.lookup(), names))
            return DecisionVerdicts([Decision(False, reason=error or "")] * len(names), states, request_ok=False)
        missing = (lambda name: NO_ACCELERATOR) if req.count == 0 else _missing
        fast = table.verdicts(self.scorer, req, names, missing)
        if fast is not None:
            if given is not None:
                for i, (st, held) in enumerate(zip(given, fast.states)):
                    if held is not st:
                        fast.put(i, st, self.scorer.decide(req, st))
            return fast
        opt_states: list[Optional[NodeState]] = list(given) if given is not None else \
            list(map(table.lookup(), names))
        key = self.scorer.memo_key(req)
        decide = self.scorer.decide
        # the memo lookup inlined: /prioritize over thousands of nodes is mostly this loop
        return DecisionVerdicts([(st.memo.get(key) or decide(req, st, key)) if st is not None else missing(n)
                                 for n, st in zip(names, opt_states)], opt_states)

    @staticmethod
    def _log(verb: str, ev: Evaluation, **extra: Any) -> None:
        if not log.isEnabledFor(logging.INFO):  # the words cost more than the call at warning level
            return
        what = ev.request.describe() if ev.request else (ev.request_error or "")
        log.info(verb, extra={"trace": ev.trace, "pod": ev.pod, "mode": ev.mode, "nodes": len(ev.names),
                              **extra, "request": _clip(what)})

    def filter(self, body: bytes, trace: Optional[str] = None) -> tuple[dict, Evaluation]:
        """The ExtenderFilterResult as a dict (``filter_json``: as the bytes served)."""
        result, ev, _, _ = self._filter(body, trace)
        if result["FailedAndUnresolvableNodes"] is None:
            result["FailedAndUnresolvableNodes"] = dict(result["FailedNodes"])
        return result, ev

    def filter_json(self, body: bytes, trace: Optional[str] = None) -> tuple[bytes, Evaluation]:
        """The ExtenderFilterResult as JSON bytes, those of ``jsonsafe.dumps`` of ``filter``'s
        dict: its parts encoded apart, FailedNodes once where FailedAndUnresolvableNodes is the
        same (no failure preemption could resolve). The names that passed go to the names cache
        under the bytes they are answered as: kube-scheduler sends them to /prioritize next."""
        result, ev, passing, listed = self._filter(body, trace)
        failed, unresolvable, passed = result["FailedNodes"], result["FailedAndUnresolvableNodes"], result["NodeNames"]
        parts = [jsonsafe.encode(result["Nodes"]), jsonsafe.encode(passed), jsonsafe.encode(failed)]
        parts.append(parts[2] if unresolvable is None else jsonsafe.encode(unresolvable))
        if None in parts:  # a value msgspec does not write: the whole by dumps, as before
            if unresolvable is None:
                result["FailedAndUnresolvableNodes"] = failed
            return jsonsafe.dumps(result), ev
        if passed is not None and self.table is not None and ev.mode == "names":
            self.names.put(cast(bytes, parts[1]), passed, listed.longest if listed is not None else None)
            self.table.remember_subset(ev.names, passing, passed)
        return (b'{"Nodes":%s,"NodeNames":%s,"FailedNodes":%s,"FailedAndUnresolvableNodes":%s,"Error":""}'
                % cast(tuple[bytes, ...], tuple(parts))), ev

    def _filter(self, body: bytes, trace: Optional[str]
                ) -> tuple[dict[str, Any], Evaluation, list[int], Optional[wire.NameList]]:
        """(the ExtenderFilterResult, FailedAndUnresolvableNodes None where it equals
        FailedNodes; the evaluation; the positions that passed; the request's names as cached)."""
        ev, nodes, listed = self._evaluate("filter", body, trace)
        tag = f" (trace {ev.trace})"  # in the pod's FailedScheduling event: /explain?trace= says more
        limit = REASON_LIMIT - len(tag)
        at, made = ev.verdicts.failing()
        text_of: dict[Decision, str] = {}  # nodes share few decisions: each worded once
        resolvable = set()
        for d in set(made):
            why = d.reason
            text_of[d] = (why if len(why) <= limit else why[:limit - 3] + "...") + tag
            if d.resolvable:
                resolvable.add(d)
        # by maps in C, no list between (thousands of failed nodes a call at fleet size)
        failed = dict(zip(map(ev.names.__getitem__, at), map(text_of.__getitem__, made)))
        unresolvable = ({ev.names[i]: text_of[d] for i, d in zip(at, made) if d not in resolvable}
                        if resolvable else None)
        passing = ev.verdicts.passing()
        result: dict[str, Any] = {"Nodes": None, "NodeNames": None, "FailedNodes": failed,
                                  "FailedAndUnresolvableNodes": unresolvable, "Error": ""}
        if nodes is not None:
            items = nodes.get("items") or []
            result["Nodes"] = {**nodes, "items": [items[i] for i in passing]}
        else:
            result["NodeNames"] = list(map(ev.names.__getitem__, passing))
        self._log("filter", ev, passed=len(passing))
        return result, ev, passing, listed

    def prioritize(self, body: bytes, trace: Optional[str] = None) -> tuple[bytes, Evaluation]:
        """The HostPriorityList as JSON bytes (built as text: over thousands of nodes this is
        several times faster than json.dumps of as many dicts)."""
        ev, _ = self.evaluate("prioritize", body, trace)
        hosts = self._host_json
        if len(hosts) > 200_000:
            hosts.clear()
        # the loops run in C (map, arrays) but over names not seen yet
        points = ev.verdicts.points_at(ev.now, self.scorer.staleness)
        heads = list(map(hosts.get, ev.names))
        if None in heads:
            for i, name in enumerate(ev.names):
                if heads[i] is None:
                    heads[i] = head = '{"Host":%s,"Score":' % json.dumps(name)
                    if len(name) <= NAME_CHARS:  # a real node name: worth keeping
                        hosts[name] = head
        if not heads:
            self._log("prioritize", ev)
            return b"[]", ev
        # heads and points interleaved, joined once: no string made per node
        filled = cast(list[str], heads)  # every None replaced above
        parts = filled * 2  # the length wanted
        parts[0::2] = filled
        parts[1::2] = map(_POINTS_COMMA.__getitem__, points)
        parts[0], parts[-1] = "[" + parts[0], _POINTS[points[-1]] + "]"
        out = "".join(parts).encode()
        self._log("prioritize", ev)
        return out, ev

    # ------------------------------------------------------------------ explain

    def explain(self, trace: Optional[str], verb: Optional[str] = None) -> Optional[dict]:
        """The per-node reasons of one evaluation: the trace's /filter (or ``verb``'s), else its
        /prioritize; without a trace, the recent calls. ``verbs`` lists the trace's calls kept."""
        with self._lock:
            if not trace:
                return {"replica": self.replica,
                        "traces": [{"trace": e.trace, "verb": e.verb, "pod": e.pod, "time": e.now,
                                    "nodes": len(e.names)} for e, _ in reversed(self._traces.values())]}
            calls = {v: self._traces.get((trace, v)) for v in ("filter", "prioritize")}
        kept = calls.get(verb) if verb else (calls["filter"] or calls["prioritize"])
        if kept is None:
            return None
        ev = kept[0]
        rows = explain.node_rows(ev.names, ev.states, ev.decisions, ev.now, self.scorer)
        return explain.document(ev.request, ev.request_error, ev.policy, ev.now, rows,
                                trace=ev.trace, verb=ev.verb, mode=ev.mode, pod=ev.pod,
                                verbs=[v for v, c in calls.items() if c is not None], replica=self.replica)

    def not_found(self, trace: str) -> str:
        """Why /explain has no such trace: served by another replica, or no longer kept."""
        replica = replica_of(trace)
        if replica is not None and replica != self.replica:
            return (f"trace {trace!r} was served by replica {replica} (this is {self.replica}): "
                    f"ask that replica's /explain")
        return f"no trace {trace!r} on replica {self.replica} (only the most recent calls are kept)"
