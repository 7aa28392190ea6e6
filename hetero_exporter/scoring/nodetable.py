"""The scorer's node states by node name, built when an annotation changes.

One table is fed by the watch-backed cache (k8s/node_cache.py) for nodeCacheCapable requests;
another one serves as the decode cache of nodes-in-request mode, where the same annotation text
arrives again with every scheduling cycle and is decoded only when it changed.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable, Mapping, Optional, Sequence

from hetero_exporter.scoring.nodes import NodeState, from_annotation, state_bytes
from hetero_exporter.scoring.request import Request
from hetero_exporter.scoring.scorer import Decision, Scorer
from hetero_exporter.scoring.verdicts import Verdicts
from hetero_exporter.model.keys import Keys

try:  # numpy (the extender extra): decisions for all nodes at once, by request shape
    from hetero_exporter.scoring import columns
except ModuleNotFoundError as e:  # pragma: no cover - without it the extender decides node by node
    if e.name != "numpy":
        raise
    columns = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

ANNOTATION = Keys().devices


class NodeTable:
    """Thread-safe map node name -> NodeState. Writers decode and precompute outside the lock;
    readers get whole, immutable-for-them states (a state is replaced, never edited, on change).
    ``precompute``: search every node's best device sets when its annotation changes (the watch
    cache: off the request path); off, searches happen when a request needs them (nodes in the
    request: only what the pod asks is searched)."""

    def __init__(self, scorer: Scorer, annotation: str = ANNOTATION, limit: int = 200_000,
                 precompute: bool = True, max_bytes: Optional[int] = None):
        self.scorer = scorer
        self.precompute = precompute
        self._rows = columns.Rows() if columns is not None else None
        self.shapes = columns.ShapeCache() if columns is not None else None
        self.annotation = annotation
        self.limit = limit
        # with max_bytes: least recently used out, past ``limit`` nodes or ``max_bytes`` of decoded
        # states (estimated: nodes.state_bytes; the body-mode table, whose names come from any
        # caller, must not grow with every name it is ever sent); ``evicted`` counts those out
        self.max_bytes = max_bytes
        self._sizes: dict[str, int] = {}
        self.bytes = 0
        self.evicted = 0
        self._lock = threading.Lock()
        self._states: dict[str, NodeState] = {}
        # name -> (length, hash) of the annotation text the state was built from: enough to see a
        # change, without keeping ~20 KiB of text per node
        self._texts: dict[str, tuple[int, int]] = {}
        self.synced = threading.Event()  # set once a full list has been loaded

    def __len__(self) -> int:
        return len(self._states)

    def get(self, name: str) -> Optional[NodeState]:
        return self._states.get(name)

    def lookup(self) -> Callable[[str], Optional[NodeState]]:
        """``get`` without the method call, for loops over thousands of names (a dict read is
        safe while writers replace entries)."""
        return self._states.get

    def names(self) -> list[str]:
        with self._lock:
            return list(self._states)

    def state_for(self, name: str, text: Optional[str]) -> NodeState:
        """The state of ``name`` for this annotation text, decoded only if the text changed."""
        mark = (-1, 0) if text is None else (len(text), hash(text))
        with self._lock:
            if name in self._states and self._texts.get(name) == mark:
                if self.max_bytes is not None:  # recently used: to the end of the eviction order
                    self._states[name] = self._states.pop(name)
                return self._states[name]
        state = self._decode(name, text)
        if self.max_bytes is not None:
            with self._lock:
                self._put_lru(name, state, mark, state.weight)
            return state
        with self._lock:
            if len(self._states) >= self.limit and name not in self._states:
                self._states.clear()  # a bound, not an eviction policy: the cache refills itself
                self._texts.clear()
                if self._rows is not None:
                    self._rows.clear()
            self._states[name] = state
            self._texts[name] = mark
            if self._rows is not None:
                self._rows.put(name, state, searched=self.precompute)
        return state

    def decide(self, scorer: Scorer, req: Request, names: Sequence[str]
               ) -> Optional[tuple[Sequence[Optional[NodeState]], Sequence[Optional[Decision]]]]:
        """(state, decision) of each of ``names`` for ``req``, all at once (scoring.columns);
        None for a name not in the table. None without numpy: decide node by node."""
        got = self._gather(names)
        if got is None or self.shapes is None:
            return None
        return got.states, self.shapes.decide(scorer, req, got)

    def verdicts(self, scorer: Scorer, req: Request, names: Sequence[str],
                 missing: Callable[[str], Optional[Decision]] = lambda name: None) -> Optional[Verdicts]:
        """The verdict on each of ``names`` for ``req``, all at once (scoring.columns); the
        states are its ``states``. ``missing(name)``: the decision for a name not in the table.
        None without numpy: decide node by node."""
        got = self._gather(names)
        if got is None or self.shapes is None:
            return None
        return self.shapes.verdicts(scorer, req, got, missing)

    def remember_subset(self, names: Sequence[str], at: Sequence[int], subset: list[str]) -> None:
        """``subset`` (``names[at]``, never changed after) will likely be asked for next (the
        nodes /filter passed, which kube-scheduler sends to /prioritize): keep its rows."""
        if self._rows is not None:
            with self._lock:
                self._rows.remember_subset(names, at, subset)

    def _gather(self, names: Sequence[str]) -> "Optional[columns.Gathered]":
        rows_ = self._rows
        if rows_ is None:
            return None
        with self._lock:
            rows, states, versions, classes, times, refusals, devsigs = rows_.gather(names)
            size = len(rows_.version)

        def fetch(at, at_versions):  # under the lock: a row replaced meanwhile reads as changed
            with self._lock:
                return rows_.fetch(at, at_versions)
        # class_groups and group_keys are append-only: read outside the lock
        return columns.Gathered(names, rows, states, versions, classes, times, refusals, devsigs, size,
                                rows_.class_groups.__getitem__, fetch, rows_.group_keys)

    def _decode(self, name: str, text: Optional[str]) -> NodeState:
        """The node's state, precomputed; never raises: one node's annotation, whatever it
        holds, must not stop the table from taking the others (a bug shows in the log)."""
        try:
            state = from_annotation(name, text, self.annotation)
            if self.precompute:
                self.scorer.precompute(state)
            state.weight = state_bytes(state, len(text) if text else 0)
            return state
        except Exception as e:  # noqa: BLE001 - the node fails alone, with the reason
            log.exception("node annotation could not be scored", extra={"node": name[:253]})
            failed = NodeState(name=name, time=0.0, groups={},
                               error=f"annotation unreadable: {type(e).__name__} while scoring it; "
                                     "see the extender log")
            failed.weight = state_bytes(failed, 0)
            return failed

    def update(self, name: str, text: Optional[str]) -> None:
        self.state_for(name, text)

    def remove(self, name: str) -> None:
        with self._lock:
            self._drop(name)

    def _put_lru(self, name: str, state: NodeState, mark: tuple[int, int], size: int) -> None:
        """Insert at the end of the eviction order; drop the least recently used past the bounds."""
        self._drop(name)
        self._states[name], self._texts[name], self._sizes[name] = state, mark, size
        self.bytes += size
        if self._rows is not None:
            self._rows.put(name, state, searched=self.precompute)
        while len(self._states) > 1 and (len(self._states) > self.limit or self.bytes > (self.max_bytes or 0)):
            self._drop(next(iter(self._states)))
            self.evicted += 1

    def _drop(self, name: str) -> None:
        self._states.pop(name, None)
        self._texts.pop(name, None)
        self.bytes -= self._sizes.pop(name, 0)
        if self._rows is not None:
            self._rows.drop(name)

    def replace(self, items: Mapping[str, Optional[str]] | Iterable[tuple[str, Optional[str]]]) -> None:
        """Load a full list (after a re-list): nodes absent from it are dropped; unchanged
        annotations keep their state."""
        pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
        keep = {name for name, _ in pairs}
        for name, text in pairs:
            self.state_for(name, text)
        with self._lock:
            for name in [n for n in self._states if n not in keep]:
                self._drop(name)
        self.synced.set()
