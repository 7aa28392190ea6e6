"""Decisions for all nodes of a NodeTable at once: per-row arrays and per-shape columns.

A ``Rows`` gives each node of a table a row: its state, a version (a new number whenever the
state is replaced, never reused) and its floor class (``floor_class``: what an exclusive request
checks of every device group of the node, interned, so that nodes alike share it). A
``ShapeCache`` keeps, per request shape, one column of decisions by row with the version each was
made for: a shape seen before costs a few array operations over the rows asked for, whatever the
number of shapes seen; only rows whose state changed since are decided again.

A new shape is decided like ``Scorer.decide`` does it, for all rows at once: where every device
meets the per-device constraints (an exclusive request: one check per floor class; a shared one:
one per node) the decision is that of the request without them, read from its own column (few such
shapes exist: count, vendors, policies); the other rows get the exact per-node search. The cache
is bounded in columns and in cells (rows x columns): least recently used shapes go first.

GC (``GcPolicy``): a new shape makes thousands of long-lived objects (a Decision, often a Choice,
per node searched). After a ``gc.freeze()`` of the loaded cache they are all that the cyclic GC's
full passes scan, and they trigger them: up to ~100 ms inside one call. With the policy on, the
objects a fill made are frozen at once (a young collection first, so that young garbage is not
frozen; frozen objects are still freed by their reference counts), and ``sweep`` (called by the
extender when idle) unfreezes and collects once, for cycles dropped since (replaced node states).
"""

from __future__ import annotations

import collections
import gc
import itertools
import threading
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from hetero_exporter.scoring.nodes import NodeState
from hetero_exporter.scoring.request import Request
from hetero_exporter.scoring.scorer import NO_ACCELERATOR, Decision, Scorer, all_fit, device_problem

MAX_COLUMNS = 256  # shapes kept (each a column over every row)
MAX_CELLS = 4_000_000  # rows x columns kept: 64 MiB of arrays (decisions still referenced besides)
MAX_CLASSES = 100_000  # distinct floor classes interned; beyond, a node is checked on its own
NO_CLASS = -1  # checked on its own: an error, a floor not interned, or too many classes


class GcPolicy:
    """Freeze what column fills make (off by default: ``scheduler-extender`` turns it on once its
    cache is loaded and frozen). ``min_new``: fills that searched fewer nodes are left to the GC."""

    def __init__(self, min_new: int = 256):
        self.enabled = False
        self.min_new = min_new
        self.last_fill = time.monotonic()  # when a fill last froze objects
        self.last_sweep = time.monotonic()
        self.frozen_fills = 0  # fills frozen since the last sweep
        self.sweeps = 0

    def after_fill(self, searched: int) -> None:
        if self.enabled and searched >= self.min_new:
            gc.collect(1)  # young garbage goes now: only survivors are frozen
            gc.freeze()
            self.frozen_fills += 1
            self.last_fill = time.monotonic()

    def sweep(self, idle_seconds: float = 30.0, max_wait: float = 900.0) -> bool:
        """Collect what froze since the last sweep (a full collection: hundreds of ms over a
        large cache), once no fill froze anything for ``idle_seconds``, or at the latest
        ``max_wait`` seconds after the previous sweep (memory stays bounded under steady load).
        True if it ran."""
        now = time.monotonic()
        if not self.frozen_fills or (now - self.last_fill < idle_seconds and now - self.last_sweep < max_wait):
            return False
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.frozen_fills = 0
        self.sweeps += 1
        self.last_sweep = time.monotonic()
        return True


GC = GcPolicy()


class Rows:
    """Rows of a table's nodes (not thread-safe: its table holds the lock). Row 0 is no node's:
    a name not in the table gathers as row 0 (state None, version 0, which every column holds
    as decided, with no decision)."""

    def __init__(self) -> None:
        self.row: dict[str, int] = {}
        self.states: list[Optional[NodeState]] = [None]
        self.version = np.zeros(64, dtype=np.int64)
        self.klass = np.full(64, NO_CLASS, dtype=np.int32)
        self._free: list[int] = []
        self._next = 1
        self._classes: dict[tuple, int] = {}
        self.class_groups: list[tuple] = []  # class -> ((resource, vendor, floor), ...)

    def __len__(self) -> int:
        return len(self.row)

    def put(self, name: str, state: NodeState) -> None:
        at = self.row.get(name)
        if at is None:
            at = self._free.pop() if self._free else len(self.states)
            if at == len(self.states):
                self.states.append(None)
                if at >= len(self.version):
                    more = len(self.version)
                    self.version = np.concatenate([self.version, np.zeros(more, np.int64)])
                    self.klass = np.concatenate([self.klass, np.full(more, NO_CLASS, np.int32)])
            self.row[name] = at
        self.states[at] = state
        self.version[at] = self._next
        self._next += 1
        self.klass[at] = self._class_of(state)

    def drop(self, name: str) -> None:
        at = self.row.pop(name, None)
        if at is not None:
            self.states[at] = None
            self.version[at] = 0
            self._free.append(at)

    def clear(self) -> None:
        for name in list(self.row):
            self.drop(name)

    def _class_of(self, state: NodeState) -> int:
        if state.error:
            return NO_CLASS
        sig = []
        for g in state.group_list:
            if g.floor is not None and g.floor_id < 0:
                return NO_CLASS
            sig.append((g.resource, g.vendor, g.floor_id))
        key = tuple(sig)
        got = self._classes.get(key)
        if got is None:
            if len(self._classes) >= MAX_CLASSES:
                return NO_CLASS
            got = self._classes[key] = len(self.class_groups)
            self.class_groups.append(tuple((g.resource, g.vendor, g.floor) for g in state.group_list))
        return got

    def gather(self, names: Sequence[str]) -> tuple[np.ndarray, list[Optional[NodeState]], np.ndarray, np.ndarray]:
        """(rows, 0 for a name not here; states; versions; classes) of ``names``."""
        rows = np.array(list(map(self.row.get, names, itertools.repeat(0))), dtype=np.int64)
        states = list(map(self.states.__getitem__, rows.tolist()))
        return rows, states, self.version[rows], self.klass[rows]


def class_fits(groups: tuple, req: Request) -> bool:
    """``scorer.all_fit`` for an exclusive request on a node of this floor class."""
    for resource, vendor, floor in groups:
        if req.group is not None:
            if resource != req.group or (req.vendors and vendor not in req.vendors):
                continue
        elif req.vendors and vendor not in req.vendors:
            continue
        if floor is not None and device_problem(floor, req, vendor) is not None:
            return False
    return True


class _Column:
    __slots__ = ("decisions", "version")

    def __init__(self, size: int):
        self.decisions = np.empty(size, dtype=object)
        self.version = np.zeros(size, dtype=np.int64)

    def grow(self, size: int) -> None:
        if size > len(self.version):
            more = size - len(self.version)
            self.decisions = np.concatenate([self.decisions, np.empty(more, dtype=object)])
            self.version = np.concatenate([self.version, np.zeros(more, dtype=np.int64)])


class ShapeCache:
    """Columns of decisions by (scorer, request shape), least recently used first out."""

    def __init__(self, max_columns: int = MAX_COLUMNS, max_cells: int = MAX_CELLS):
        self.max_columns, self.max_cells = max_columns, max_cells
        self._columns: "collections.OrderedDict[tuple, _Column]" = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._columns)

    def clear(self) -> None:
        with self._lock:
            self._columns.clear()

    def decide(self, scorer: Scorer, req: Request, rows: np.ndarray, states: Sequence[Optional[NodeState]],
               versions: np.ndarray, classes: np.ndarray, size: int,
               class_groups: Callable[[int], tuple]) -> list[Optional[Decision]]:
        """The decision for each row (None for row 0: a name not in the table)."""
        if req.count == 0:
            return [NO_ACCELERATOR if r else None for r in rows.tolist()]
        return self._decide(scorer, req, rows, states, versions, classes, size, class_groups)

    def _column(self, key: tuple, size: int) -> _Column:
        col = self._columns.get(key)
        if col is None:
            col = self._columns[key] = _Column(size)
            limit = max(2, min(self.max_columns, self.max_cells // max(1, size)))
            while len(self._columns) > limit:
                self._columns.popitem(last=False)
        else:
            self._columns.move_to_end(key)
            col.grow(size)
        return col

    def _decide(self, scorer: Scorer, req: Request, rows: np.ndarray, states: list, versions: np.ndarray,
                classes: np.ndarray, size: int, class_groups: Callable[[int], tuple]) -> list:
        key = (scorer, scorer.memo_key(req))
        with self._lock:
            col = self._column(key, size)
            made = col.decisions[rows]
            todo = np.flatnonzero(col.version[rows] != versions)
        if not len(todo):
            return made.tolist()
        todo_list = todo.tolist()
        new: list[Any] = [None] * len(todo_list)
        exact = list(range(len(todo_list)))  # positions in todo decided by a search
        if req.per_device:
            fits = self._fits(req, [states[i] for i in todo_list], classes[todo], class_groups)
            twin_at = np.flatnonzero(fits).tolist()
            if twin_at:
                picked = todo[twin_at]
                twins = self._decide(scorer, req.unconstrained, rows[picked], [states[i] for i in picked.tolist()],
                                     versions[picked], classes[picked], size, class_groups)
                for j, d in zip(twin_at, twins):
                    new[j] = d
                exact = [j for j in exact if not fits[j]]
        decide = scorer.decide_fresh
        for j in exact:
            new[j] = decide(req, states[todo_list[j]])
        GC.after_fill(len(exact))
        with self._lock:
            arr = np.empty(len(new), dtype=object)
            arr[:] = new
            col.decisions[rows[todo]] = arr
            col.version[rows[todo]] = versions[todo]
        made[todo] = arr
        return made.tolist()

    @staticmethod
    def _fits(req: Request, states: list, classes: np.ndarray, class_groups: Callable[[int], tuple]) -> np.ndarray:
        """Whether every device of each state that the request may use meets its per-device
        constraints (never for a state in error: its decision says why). Exclusive requests:
        one check per floor class; shared ones (free compute and memory) and nodes of no class:
        one per node."""
        if req.shared:
            return np.array([not st.error and all_fit(req, st) for st in states], dtype=bool)
        kinds, where = np.unique(classes, return_inverse=True)
        fit = np.array([class_fits(class_groups(c), req) if c != NO_CLASS else False for c in kinds.tolist()],
                       dtype=bool)
        out = fit[where.reshape(-1)]
        for j in np.flatnonzero(classes == NO_CLASS).tolist():
            st = states[j]
            out[j] = not st.error and all_fit(req, st)
        return out
