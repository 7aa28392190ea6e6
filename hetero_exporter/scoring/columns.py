"""Decisions for all nodes of a NodeTable at once: per-row arrays and per-shape columns.

A ``Rows`` gives each node of a table a row: its state, a version (a new number whenever the
state is replaced, never reused), its annotation time, its floor class (``floor_class``: what an
exclusive request checks of every device group of the node, interned, so that nodes alike share
it) and, for a node of one device group searched at load (the watch cache precomputes), the best
set's score for every set size, policy and topology policy (``best``). A ``ShapeCache`` keeps,
per request shape, one column over the rows: each row's score, points and reason code, the
version they were made for and, once someone asked for it, the Decision. A shape seen before
costs a few array operations over the rows asked for, whatever the number of shapes seen; only
rows whose state changed since are decided again.

A new shape is decided like ``Scorer.decide`` does it, for all rows at once: where every device
meets the per-device constraints (an exclusive request: one check per floor class; a shared one:
one per node) the verdict is that of the request without them, read from its own column (few such
shapes exist: count, vendors, policies); an exclusive request without such constraints reads a
row of one device group from ``best`` (no Python per node); the other rows get the exact per-node
search. Decisions are made when asked (``ColumnVerdicts``: the reasons of /filter's failed
nodes, /explain), by the same per-node path, so they are the ones ``Scorer.decide`` gives. The
cache is bounded in columns and in cells (rows x columns): least recently used shapes go first.

GC (``GcPolicy``): a searched row makes long-lived objects (a Decision, often a Choice). After a
``gc.freeze()`` of the loaded cache they are all that the cyclic GC's full passes scan, and they
trigger them: up to ~100 ms inside one call. With the policy on, the objects a fill made are
frozen at once (a young collection first, so that young garbage is not frozen; frozen objects are
still freed by their reference counts), and ``sweep`` (called by the extender when idle)
unfreezes and collects once, for cycles dropped since (replaced node states).
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import itertools
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from hetero_exporter.scoring import batch
from hetero_exporter.scoring.nodes import Group, NodeState
from hetero_exporter.scoring.request import POLICIES, TOPOLOGIES, Request
from hetero_exporter.scoring.scorer import (EXHAUSTIVE_POOL, MAX_PRIORITY, NO_ACCELERATOR, Decision, Scorer, Staleness,
                                            all_fit, device_problem, device_sig, intern_sig, problems_seen)
from hetero_exporter.scoring.verdicts import (CODE, FEASIBLE_CODES, FIT, NO_REQUEST, NOT_CACHED, REASONS, UNFIT,
                                              Verdicts, reason_of)

MAX_COLUMNS = 256  # shapes kept (each a column over every row)
MAX_CELLS = 2_500_000  # rows x columns kept: 26 bytes a cell, 64 MiB of arrays (decisions referenced besides)
MAX_CLASSES = 100_000  # distinct floor classes interned; beyond, a node is checked on its own
MAX_REFUSALS = 20_000  # distinct refusal ids (~300 bytes each); beyond, a node's refusal is its own
MAX_REFUSED = 50_000  # refusal Decisions kept by (unconstrained shape, refusal id); beyond, starts over
NO_CLASS = -1  # checked on its own: an error, a floor not interned, or too many classes
BEST_SIZES = EXHAUSTIVE_POOL  # set sizes kept in ``best``: 10 x 6 floats, 480 bytes a row
BEST_SHAPES = tuple((p, t) for p in POLICIES for t in TOPOLOGIES)  # (policy, topology policy) of a best column
COMPLEX = -1  # a row's kind: decided node by node (an error, several groups, a group not searched at load)
NO_GROUPS = -2  # a row's kind: a node without accelerators (no group: nothing fits)
_NONE = np.array(None)  # an object cell not made yet, as np.equal compares it
KEEP_NAMES = 1000  # a name list this long is kept with its rows: the next /filter likely sends it again
KNOWN_LISTS = 16  # name lists kept with their rows by identity (the extender hands a list seen again back)
KNOWN_MIN = 256  # ... if at least this long: shorter ones cost little to look up
_MISSING = object()


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


@dataclass
class Gathered:
    """The rows of a call's node names, read under the table's lock. ``fetch(rows, versions)``:
    (kinds, searched, best scores) of rows, read under that lock too (COMPLEX where a row changed
    since)."""

    names: Sequence[str]  # () in a subset
    rows: np.ndarray  # 0 for a name not in the table
    states: Sequence[Optional[NodeState]]  # States; a view (_Picked) in a subset
    versions: np.ndarray
    classes: np.ndarray
    times: np.ndarray  # annotation time (Unix seconds; 0 for no state)
    refusals: np.ndarray  # refusal id (Rows._refusal_of; -1: none)
    devsigs: np.ndarray  # device signature (scorer.device_sig of a node of one group; -1: none)
    size: int  # rows allocated
    class_groups: Callable[[int], tuple]
    fetch: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]
    group_keys: Sequence[tuple[str, str]]  # group id -> (resource, vendor)

    def subset(self, at: np.ndarray) -> "Gathered":
        """The rows at positions ``at`` (an array of them), for a fill: without their names."""
        return dataclasses.replace(self, names=(), rows=self.rows[at], states=_Picked.of(self.states, at),
                                   versions=self.versions[at], classes=self.classes[at], times=self.times[at],
                                   refusals=self.refusals[at], devsigs=self.devsigs[at])


class States(Sequence[Optional[NodeState]]):
    """A call's node states: a read-only object array (one index, no list made), shared by
    the calls that gather one list while no row changes."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, i: Any) -> Any:
        return self.array[i].tolist() if isinstance(i, slice) else self.array[i]  # a slice: a list, as a list's

    def __iter__(self) -> Any:
        return iter(self.array.tolist())


class _Picked(Sequence[Optional[NodeState]]):
    """``base[at[j]]``: the states of a subset, not copied (a fill reads few of thousands)."""

    def __init__(self, base: Sequence[Optional[NodeState]], at: np.ndarray):
        self.base, self.at = base, at

    @classmethod
    def of(cls, seq: Sequence[Optional[NodeState]], at: np.ndarray) -> "_Picked":
        return cls(seq.base, seq.at[at]) if isinstance(seq, _Picked) else cls(seq, at)

    def __len__(self) -> int:
        return len(self.at)

    def __getitem__(self, j: Any) -> Any:
        return self.base[int(self.at[j])]

    def __iter__(self) -> Any:
        if isinstance(self.base, States):
            return iter(self.base.array[self.at].tolist())
        return map(self.base.__getitem__, self.at.tolist())


def _inner(got: Any) -> float:
    """The score of a set as a group's memo holds it: (score, set) or a Choice."""
    return got[0] if type(got) is tuple else got.inner


class Rows:
    """Rows of a table's nodes (not thread-safe: its table holds the lock). Row 0 is no node's:
    a name not in the table gathers as row 0 (state None, version 0, which every column holds
    as decided, with no decision)."""

    def __init__(self) -> None:
        self.row: dict[str, int] = {}
        # an object array, not a list: a call's states are one fancy index and tolist() in C
        self.states = np.empty(64, dtype=object)  # None: no node's row
        self._end = 1  # rows ever used (row 0 included)
        self.version = np.zeros(64, dtype=np.int64)
        self.klass = np.full(64, NO_CLASS, dtype=np.int32)
        self.time = np.zeros(64)
        self.kind = np.full(64, COMPLEX, dtype=np.int32)  # COMPLEX, NO_GROUPS or the group's id
        self.searched = np.zeros(64, dtype=bool)  # ``best`` holds the row's scores
        self.best = np.full((64, BEST_SIZES * len(BEST_SHAPES)), np.nan)  # NaN: no such set
        self._free: list[int] = []
        self._next = 1
        self._classes: dict[tuple, int] = {}
        self.class_groups: list[tuple] = []  # class -> ((resource, vendor, floor), ...)
        self._group_ids: dict[tuple[str, str], int] = {}
        self.group_keys: list[tuple[str, str]] = []  # group id -> (resource, vendor); append-only
        # what the refusals of a row of one group read of it (interned): alike nodes refuse alike
        self.refusal = np.full(64, -1, dtype=np.int32)
        self._refusals: dict[tuple, int] = {}
        self.devsig = np.full(64, -1, dtype=np.int64)  # scorer.device_sig of a row of one group
        # the last names gathered and their rows: kube-scheduler's /filter lists every node, each pod
        self._last: Optional[tuple[list[str], np.ndarray]] = None
        # id -> (name list, its rows): lists the extender's names cache (scoring.wire) hands out
        # again for the same request bytes, and /filter's passing names that /prioritize sends next
        self._known: "collections.OrderedDict[int, tuple[list[str], np.ndarray, Optional[tuple[int, tuple]]]]" = \
            collections.OrderedDict()  # (the list, its rows, (``_changes`` at, what ``gather`` read then) or None)
        self._changes = 0  # puts and drops so far: a gather read before the last one is not reused

    def __len__(self) -> int:
        return len(self.row)

    def _grow(self) -> None:
        more = len(self.version)
        self.version = np.concatenate([self.version, np.zeros(more, np.int64)])
        self.klass = np.concatenate([self.klass, np.full(more, NO_CLASS, np.int32)])
        self.time = np.concatenate([self.time, np.zeros(more)])
        self.kind = np.concatenate([self.kind, np.full(more, COMPLEX, np.int32)])
        self.searched = np.concatenate([self.searched, np.zeros(more, dtype=bool)])
        self.best = np.concatenate([self.best, np.full((more, self.best.shape[1]), np.nan)])
        self.refusal = np.concatenate([self.refusal, np.full(more, -1, np.int32)])
        self.devsig = np.concatenate([self.devsig, np.full(more, -1, np.int64)])
        self.states = np.concatenate([self.states, np.empty(more, dtype=object)])

    def put(self, name: str, state: NodeState, searched: bool = False) -> None:
        """``searched``: the state's groups were searched for every set size (Scorer.precompute)."""
        at = self.row.get(name)
        if at is None:
            at = self._free.pop() if self._free else self._end
            if at == self._end:
                self._end += 1
                if at >= len(self.version):
                    self._grow()
            self.row[name] = at
            self._forget_lists()  # names map to other rows now
        self.states[at] = state
        self._changes += 1
        self.version[at] = self._next
        self._next += 1
        self.klass[at] = self._class_of(state)
        self.time[at] = state.time
        self.kind[at] = kind = self._kind_of(state)
        self.searched[at] = searched and kind >= 0 and self._keep_best(state.group_list[0], at)
        self.refusal[at] = self._refusal_of(state) if kind != COMPLEX else -1
        self.devsig[at] = device_sig(state.group_list[0], False) if kind >= 0 else -1

    def drop(self, name: str) -> None:
        at = self.row.pop(name, None)
        if at is not None:
            self._forget_lists()
            self._changes += 1
            self.states[at] = None
            self.version[at] = 0
            self.kind[at] = COMPLEX
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

    def _kind_of(self, state: NodeState) -> int:
        """COMPLEX, NO_GROUPS, or the id of the node's one group of at most BEST_SIZES devices."""
        if state.error:
            return COMPLEX
        if not state.group_list:
            return NO_GROUPS
        if len(state.group_list) > 1 or len(state.group_list[0].devices) > BEST_SIZES:
            return COMPLEX
        g = state.group_list[0]
        key = (g.resource, g.vendor)
        gid = self._group_ids.get(key)
        if gid is None:
            if len(self.group_keys) >= MAX_CLASSES:
                return COMPLEX
            gid = self._group_ids[key] = len(self.group_keys)
            self.group_keys.append(key)
        return gid

    def _keep_best(self, g: Group, at: int) -> bool:
        """Copy the group's searched best scores (Scorer.precompute) to ``best[at]``; False if
        some were not searched."""
        found = []
        for k in range(1, len(g.devices) + 1):
            for p, t in BEST_SHAPES:
                got = g.choices.get((g.every, k, p, t, False), _MISSING)
                if got is _MISSING:
                    return False
                found.append(np.nan if got is None else _inner(got))
        best = self.best[at]
        best[:] = np.nan
        best[:len(found)] = found
        return True

    def _refusal_of(self, state: NodeState) -> int:
        """The id of all that a refusal of an exclusive request without per-device constraints
        reads of a node of one group (or none): its words (inventory, failed devices, usable
        count) and its links (the largest set under a topology policy)."""
        if state.group_list:
            g = state.group_list[0]
            key: tuple = (g.resource, g.vendor, g.describe(), tuple((d.index, why) for d, why in g.excluded),
                          len(g.devices), intern_sig((tuple(map(tuple, g.pair)), tuple(map(tuple, g.pair_kind)),
                                                      g.domain)))
        else:
            key = ()
        got = self._refusals.get(key)
        if got is None:
            if len(self._refusals) >= MAX_REFUSALS:
                return -1
            got = self._refusals[key] = len(self._refusals)
        return got

    def _forget_lists(self) -> None:
        self._last = None
        self._known.clear()

    def gather(self, names: Sequence[str]) -> tuple[np.ndarray, "States", np.ndarray, np.ndarray,
                                                    np.ndarray, np.ndarray, np.ndarray]:
        """(rows, 0 for a name not here; states, an object array; versions; classes; annotation
        times; refusal ids; device signatures) of ``names``, all read-only. A list kept by identity
        (``_known``) gathers once while no row changes: kube-scheduler sends every name for
        each pod, and the object array alone costs ~0.1 ms at 5,000 rows (a reference taken on
        each state)."""
        rows = self._rows_of(names)
        known = self._known.get(id(names))
        held = known if known is not None and known[0] is names else None
        if held is not None and held[2] is not None and held[2][0] == self._changes:
            return held[2][1]
        arrays = (self.states[rows], self.version[rows], self.klass[rows], self.time[rows], self.refusal[rows],
                  self.devsig[rows])
        for a in arrays:
            a.flags.writeable = False
        out = (rows, States(arrays[0]), *arrays[1:])
        if held is not None:
            self._known[id(names)] = (held[0], rows, (self._changes, out))
        return out

    def _rows_of(self, names: Sequence[str]) -> np.ndarray:
        known = self._known.get(id(names))
        if known is not None and known[0] is names:  # the same list object: no hashing, no compare
            self._known.move_to_end(id(names))
            return known[1]
        last = self._last
        if last is not None and len(last[0]) == len(names) and last[0] == names:  # no hashing, no lookups
            return last[1]
        # a list, then an array: several times faster than np.fromiter over the same map
        rows = np.array(list(map(self.row.get, names, itertools.repeat(0))), dtype=np.int64)
        rows.flags.writeable = False  # may be shared by the calls that gather these names
        if len(names) >= KEEP_NAMES:
            self._last = (list(names), rows)
        if type(names) is list:
            self._keep(names, rows)
        return rows

    def _keep(self, names: list[str], rows: np.ndarray) -> None:
        if len(names) >= KNOWN_MIN:
            self._known[id(names)] = (names, rows, None)  # the list is held: its id is not reused meanwhile
            self._known.move_to_end(id(names))
            while len(self._known) > KNOWN_LISTS:
                self._known.popitem(last=False)

    def remember_subset(self, names: Sequence[str], at: Sequence[int], subset: list[str]) -> None:
        """``subset`` is ``names[at]`` (a new list, never changed after): its rows are those of
        ``names`` at ``at`` if ``names`` is a list held now (the mapping has not changed since)."""
        known = self._known.get(id(names))
        if known is not None and known[0] is names and len(subset) >= KNOWN_MIN:
            rows = known[1][np.asarray(at, dtype=np.int64)]
            rows.flags.writeable = False
            self._keep(subset, rows)

    def fetch(self, rows: np.ndarray, versions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(kinds, searched, best scores) of ``rows``; COMPLEX for a row no longer at ``versions``."""
        kinds = self.kind[rows]
        kinds[self.version[rows] != versions] = COMPLEX
        return kinds, self.searched[rows], self.best[rows]


def _search(scorer: Scorer, k: int, policy: str, topology: str, groups: list[Group], at: list[int],
            inner: np.ndarray) -> int:
    """``inner[at[j]]``: the best score of ``k`` devices of ``groups[j]`` (NaN: no such set),
    from its memo or searched (groups of one size together) and kept there. Returns how many
    groups were searched."""
    key_of: dict[int, tuple] = {}  # candidates -> memo key
    todo: dict[int, list[int]] = {}  # candidates -> positions in groups to search
    for j, g in enumerate(groups):
        n = len(g.devices)
        key = key_of.get(n)
        if key is None:
            key = key_of[n] = (g.every, k, policy, topology, False)
        got = g.choices.get(key, _MISSING)
        if got is _MISSING:
            if n >= k:
                todo.setdefault(n, []).append(j)
        elif got is not None:
            inner[at[j]] = _inner(got)
    for n, js in todo.items():
        found = batch.search(scorer, [groups[j] for j in js], k, policy, topology)
        key = key_of[n]
        for j, f in zip(js, found):
            got = scorer.remember(groups[j], key, f)
            if got is not None:
                inner[at[j]] = _inner(got)
    return sum(map(len, todo.values()))


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


def reference(scorer: Scorer, req: Request, state: NodeState) -> Decision:
    """``Scorer.decide`` without its per-node memo: what a column's verdict stands for."""
    if req.per_device and not state.error and all_fit(req, state):
        return scorer.decide_fresh(req.unconstrained, state)
    return scorer.decide_fresh(req, state)


def points_of(score: np.ndarray) -> np.ndarray:
    """``scorer.extender_score`` of each score (NaN: 0)."""
    out = np.trunc(np.nan_to_num(score, nan=0.0) * MAX_PRIORITY + 0.5)
    return np.clip(out, 0, MAX_PRIORITY).astype(np.int8)


def confidences(staleness: Staleness, ages: np.ndarray) -> np.ndarray:
    """``Staleness.confidence`` of each age (seconds), the same floats."""
    span = staleness.floor_seconds - staleness.fresh_seconds
    falling = 1.0 - (1.0 - staleness.floor) * (ages - staleness.fresh_seconds) / span
    return np.where(ages <= staleness.fresh_seconds, 1.0,
                    np.where(ages >= staleness.floor_seconds, staleness.floor, falling))


class _Column:
    __slots__ = ("decisions", "version", "score", "points", "code", "__weakref__")

    def __init__(self, size: int):
        self.decisions = np.empty(size, dtype=object)  # None: not made yet
        self.version = np.zeros(size, dtype=np.int64)
        self.score = np.full(size, np.nan)  # NaN: infeasible
        self.points = np.zeros(size, dtype=np.int8)
        self.code = np.full(size, CODE[NOT_CACHED], dtype=np.int8)

    def grow(self, size: int) -> None:
        if size > len(self.version):
            more = size - len(self.version)
            self.decisions = np.concatenate([self.decisions, np.empty(more, dtype=object)])
            self.version = np.concatenate([self.version, np.zeros(more, dtype=np.int64)])
            self.score = np.concatenate([self.score, np.full(more, np.nan)])
            self.points = np.concatenate([self.points, np.zeros(more, dtype=np.int8)])
            self.code = np.concatenate([self.code, np.full(more, CODE[NOT_CACHED], dtype=np.int8)])


class _Cells:
    """A column's cells for some rows (copies): decisions (None: not made), score, points, code."""

    __slots__ = ("made", "score", "points", "code")

    def __init__(self, made: np.ndarray, score: np.ndarray, points: np.ndarray, code: np.ndarray):
        self.made, self.score, self.points, self.code = made, score, points, code

    @classmethod
    def empty(cls, n: int) -> "_Cells":
        return cls(np.empty(n, dtype=object), np.full(n, np.nan), np.zeros(n, dtype=np.int8),
                   np.full(n, CODE[UNFIT], dtype=np.int8))

    @classmethod
    def of(cls, col: _Column, rows: np.ndarray) -> "_Cells":
        return cls(col.decisions[rows], col.score[rows], col.points[rows], col.code[rows])

    def take(self, at: np.ndarray, other: "_Cells") -> None:
        """Cells ``at`` from ``other`` (as many, in order)."""
        self.made[at], self.score[at] = other.made, other.score
        self.points[at], self.code[at] = other.points, other.code

    def set(self, j: int, d: Decision, st: Optional[NodeState]) -> None:
        self.made[j] = d
        self.score[j] = d.score if d.feasible else np.nan
        self.points[j] = d.points
        self.code[j] = CODE[reason_of(d, st)]


class ColumnVerdicts(Verdicts):
    """Verdicts read from a column (arrays by position); Decisions are made when asked, by
    ``reference``, and kept in the column (``keep``). ``missing(name)``: the decision for a name
    the table does not hold (default None)."""

    def __init__(self, scorer: Scorer, req: Request, got: Gathered, cells: _Cells,
                 keep: Callable[[np.ndarray, np.ndarray], None],
                 missing: Callable[[str], Optional[Decision]] = lambda name: None,
                 refused: Optional[dict[tuple, Decision]] = None):
        # a call's rows (shared, read-only: put() copies them first), never a subset's view
        self.states: Sequence[Optional[NodeState]] = got.states
        self.scorer, self.req, self.names, self.times = scorer, req, got.names, got.times
        self.refusals, self.got_rows = got.refusals, got.rows
        self.cells, self._keep, self._missing = cells, keep, missing
        self._refused = refused if refused is not None else {}

    def points(self) -> list[int]:
        return self.cells.points.tolist()

    def score(self, i: int) -> float:
        return float(self.cells.score[i])

    def points_at(self, now: float, staleness: Staleness) -> list[int]:
        points = self.cells.points
        stale = np.flatnonzero((self.times < now - staleness.fresh_seconds) & (points > 0))
        if len(stale):
            points = points.copy()
            points[stale] = points_of(self.cells.score[stale] * confidences(staleness, now - self.times[stale]))
        return points.tolist()

    def passing(self) -> list[int]:
        return np.flatnonzero(self.cells.code <= max(FEASIBLE_CODES)).tolist()

    def failing(self) -> tuple[list[int], list[Decision]]:
        at = np.flatnonzero(self.cells.code > max(FEASIBLE_CODES))
        return at.tolist(), self._make(at)

    def counts(self) -> dict[str, int]:
        counts = np.bincount(self.cells.code, minlength=len(REASONS)).tolist()
        return {r: n for r, n in zip(REASONS, counts) if n}

    def decisions(self) -> list[Decision]:
        return self._make(np.arange(len(self.states)))

    def put(self, i: int, state: Optional[NodeState], decision: Decision) -> None:
        if not isinstance(self.states, list):  # shared with other calls until now
            self.states, self.times = list(self.states), self.times.copy()
        self.states[i] = state
        self.times[i] = state.time if state is not None else 0.0
        self.cells.set(i, decision, state)

    def _make(self, at: np.ndarray) -> list:
        """The decisions at positions ``at``, made where not made yet: once per refusal id for
        infeasible nodes (alike nodes refuse alike), node by node for the others."""
        cells = self.cells
        todo = at[np.equal(cells.made[at], _NONE)]
        if len(todo):
            made = 0
            alike = todo[(cells.code[todo] > max(FEASIBLE_CODES)) & (self.refusals[todo] >= 0)]
            if len(alike):
                ids, first, where = np.unique(self.refusals[alike], return_index=True, return_inverse=True)
                refusals = np.empty(len(first), dtype=object)
                refusals[:] = list(map(self._refusal, alike[first].tolist(), ids.tolist()))
                cells.made[alike] = refusals[where.reshape(-1)]
                made += len(first)
            for i in todo[np.equal(cells.made[todo], _NONE)].tolist():
                st = self.states[i]
                cells.made[i] = reference(self.scorer, self.req, st) if st is not None else self._missing(self.names[i])
                made += 1
            held = todo[np.not_equal(self.got_rows[todo], 0)]
            if len(held):
                self._keep(held, cells.made[held])
                GC.after_fill(made)  # kept in the column: long-lived
        return cells.made[at].tolist()

    def _refusal(self, i: int, refusal: int) -> Decision:
        """``reference``'s decision on the node at ``i``, of refusal id ``refusal``: where it is the
        decision of an exclusive request without per-device constraints (the request itself, or
        its twin where every device meets them), kept by (that request's shape, refusal id),
        for every later shape of that twin (a stream of pods alike but for their memory asks the
        same twins: count, policy, topology policy)."""
        st, req, scorer = self.states[i], self.req, self.scorer
        assert st is not None  # a refusal id is a held row's
        if req.per_device and (st.error or not all_fit(req, st)):
            return scorer.decide_fresh(req, st)
        twin = req.unconstrained if req.per_device else req
        if twin.shared:  # what a refusal id reads is an exclusive request's
            return scorer.decide_fresh(twin, st)
        key = (scorer, scorer.memo_key(twin), refusal)
        got = self._refused.get(key)
        if got is None:
            if len(self._refused) >= MAX_REFUSED:
                self._refused.clear()
            got = self._refused[key] = scorer.decide_fresh(twin, st)
        return got


class ShapeCache:
    """Columns of verdicts by (scorer, request shape), least recently used first out."""

    def __init__(self, max_columns: int = MAX_COLUMNS, max_cells: int = MAX_CELLS):
        self.max_columns, self.max_cells = max_columns, max_cells
        self._columns: "collections.OrderedDict[tuple, _Column]" = collections.OrderedDict()
        self._lock = threading.Lock()
        # (scorer, unconstrained exclusive shape, refusal id) -> its Decision (ColumnVerdicts._refusal)
        self._refused: dict[tuple, Decision] = {}

    def __len__(self) -> int:
        return len(self._columns)

    def clear(self) -> None:
        with self._lock:
            self._columns.clear()
            self._refused.clear()

    def verdicts(self, scorer: Scorer, req: Request, got: Gathered,
                 missing: Callable[[str], Optional[Decision]] = lambda name: None) -> ColumnVerdicts:
        """The verdict on each of ``got``'s rows (row 0: a name not in the table, NOT_CACHED)."""
        if req.count == 0:  # no accelerator asked: every node passes, cached or not
            n = len(got.rows)
            cells = _Cells(np.full(n, NO_ACCELERATOR, dtype=object), np.zeros(n), np.zeros(n, dtype=np.int8),
                           np.full(n, CODE[NO_REQUEST], dtype=np.int8))
            return ColumnVerdicts(scorer, req, got, cells, lambda at, made: None, missing)
        key = (scorer, scorer.memo_key(req))
        cells, col = self._cells(scorer, req, key, got)
        column, rows_of, versions_of = weakref.ref(col), got.rows, got.versions  # what ``keep`` holds

        def keep(at: np.ndarray, made: np.ndarray) -> None:
            kept = column()
            if kept is None:  # evicted since
                return
            with self._lock:
                rows = rows_of[at]
                same = kept.version[rows] == versions_of[at]
                kept.decisions[rows[same]] = made[same]
        return ColumnVerdicts(scorer, req, got, cells, keep, missing, self._refused)

    def decide(self, scorer: Scorer, req: Request, got: Gathered) -> Sequence[Optional[Decision]]:
        """The decision for each row (None for row 0: a name not in the table)."""
        if req.count == 0:
            return [NO_ACCELERATOR if r else None for r in got.rows.tolist()]
        return self.verdicts(scorer, req, got).decisions()

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

    def _cells(self, scorer: Scorer, req: Request, key: tuple, got: Gathered) -> tuple[_Cells, _Column]:
        """The cells of ``got``'s rows in the column of ``key``, rows not decided for their
        current version decided first."""
        with self._lock:
            col = self._column(key, got.size)
            todo = np.flatnonzero(col.version[got.rows] != got.versions)
            every = 0 < len(todo) == len(got.rows)  # a new shape: all rows filled, none read
            cells = _Cells.of(col, got.rows) if not every else None
        if not len(todo):
            assert cells is not None
            return cells, col
        new = self._fill(scorer, req, got.subset(todo) if not every else got)
        with self._lock:
            rows = got.rows[todo]
            col.decisions[rows], col.score[rows], col.points[rows], col.code[rows] = \
                new.made, new.score, new.points, new.code
            col.version[rows] = got.versions[todo]
        if cells is None:
            return new, col
        cells.take(todo, new)
        return cells, col

    def _fill(self, scorer: Scorer, req: Request, got: Gathered) -> _Cells:
        """Verdicts on rows not decided yet: from the unconstrained shape's column where every
        device fits, from ``best`` for rows of one searched group, else node by node."""
        n = len(got.rows)
        new = _Cells.empty(n)
        exact = np.ones(n, dtype=bool)
        if req.per_device:
            fits = self._fits(req, got.states, got.classes, got.class_groups)
            at = np.flatnonzero(fits)
            if len(at):
                twin, _ = self._cells(scorer, req.unconstrained, (scorer, scorer.memo_key(req.unconstrained)),
                                      got.subset(at))
                new.take(at, twin)
                exact[at] = False
            if not req.shared:
                self._alike_refusals(scorer, req, got, new, exact)
        elif not req.shared:
            exact &= ~self._one_group(scorer, req, got, new)
        decide = scorer.decide_fresh
        searched = np.flatnonzero(exact).tolist()
        for j in searched:
            st = got.states[j]
            assert st is not None  # a row of the table: it holds a state
            new.set(j, decide(req, st), st)
        GC.after_fill(len(searched))
        return new

    @staticmethod
    def _alike_refusals(scorer: Scorer, req: Request, got: Gathered, new: _Cells, exact: np.ndarray) -> None:
        """Rows of one group where too few devices meet the per-device constraints refuse alike:
        one decision per device signature (what the check reads), from a node of it, given to
        every row of it (``exact`` cleared there); the others stay to be searched."""
        at = np.flatnonzero(exact & (got.devsigs >= 0))
        if len(at) < 2:
            return
        sigs, first, where = np.unique(got.devsigs[at], return_index=True, return_inverse=True)
        where = where.reshape(-1)
        seen = problems_seen(req)
        for u, (sig, j) in enumerate(zip(sigs.tolist(), at[first].tolist())):
            st = got.states[j]
            d = scorer.decide_fresh(req, st)
            new.set(j, d, st)
            exact[j] = False
            found = seen.get(sig)
            if found is not None and found[1] is not None:  # refused by the per-device check alone
                alike = at[where == u]
                new.made[alike] = d
                new.score[alike], new.points[alike], new.code[alike] = new.score[j], new.points[j], new.code[j]
                exact[alike] = False

    @staticmethod
    def _one_group(scorer: Scorer, req: Request, got: Gathered, new: _Cells) -> np.ndarray:
        """Fill ``new`` where a row is of one group (or none): the group serves the request if its
        resource and vendor are asked for (the rank of its vendor sets the band) and it holds a
        set of the size under the topology policy, whose score is read from ``best`` or, for a
        group not searched at load, searched now for all such rows at once (scoring.batch) and
        kept in the group's memo. Returns where it filled."""
        kinds, searched, best = got.fetch(got.rows, got.versions)
        done = kinds != COMPLEX
        if not done.any():
            return done
        tiers = req.vendors or (None,)
        band = []  # by group id: the band of its vendor, -1 if not asked for
        for resource, vendor in list(got.group_keys):
            rank = next((r for r, v in enumerate(tiers) if v in (None, vendor)), None)
            band.append(-1 if rank is None or req.group not in (None, resource) else len(tiers) - 1 - rank)
        bands = np.full(len(kinds), -1, dtype=np.int64)
        grouped = kinds >= 0
        if band:
            bands[grouped] = np.array(band, dtype=np.int64)[kinds[grouped]]
        inner = np.full(len(kinds), np.nan)
        if req.count <= BEST_SIZES:
            policy = req.policy or scorer.policy
            column = (req.count - 1) * len(BEST_SHAPES) + BEST_SHAPES.index((policy, req.topology_policy))
            inner[searched] = best[searched, column]
            lazy = np.flatnonzero(grouped & ~searched & (bands >= 0)).tolist()
            if lazy:
                groups = [got.states[j].group_list[0] for j in lazy]  # type: ignore[union-attr]
                GC.after_fill(_search(scorer, req.count, policy, req.topology_policy, groups, lazy, inner))
        ok = done & (bands >= 0) & ~np.isnan(inner)
        score = np.full(len(kinds), np.nan)
        score[ok] = (bands[ok] + inner[ok]) / len(tiers)  # Scorer._feasible's (band + inner) / tiers
        new.score[done] = score[done]
        new.points[done] = points_of(score[done])
        new.code[done] = np.where(ok[done], CODE[FIT], CODE[UNFIT])
        return done

    @staticmethod
    def _fits(req: Request, states: Sequence[Optional[NodeState]], classes: np.ndarray,
              class_groups: Callable[[int], tuple]) -> np.ndarray:
        """Whether every device of each state that the request may use meets its per-device
        constraints (never for a state in error: its decision says why). Exclusive requests:
        one check per floor class; shared ones (free compute and memory) and nodes of no class:
        one per node."""
        if req.shared:
            return np.array([st is not None and not st.error and all_fit(req, st) for st in states], dtype=bool)
        # classes are dense ids (NO_CLASS: -1): the ones present by a count, not a sort
        present = np.flatnonzero(np.bincount(classes + 1))
        fit = np.zeros(present[-1] + 1 if len(present) else 1, dtype=bool)  # by class id + 1
        fit[present] = [class_fits(class_groups(c - 1), req) if c else False for c in present.tolist()]
        out = fit[classes + 1]
        for j in np.flatnonzero(classes == NO_CLASS).tolist():
            st = states[j]
            out[j] = st is not None and not st.error and all_fit(req, st)
        return out
