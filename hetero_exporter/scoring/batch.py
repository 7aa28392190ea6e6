"""One set size searched for many device groups at once (numpy): ``Scorer._exhaustive_size``
for every candidate of each group, an exclusive request, groups of one size.

A node whose annotation arrives in a request is not searched ahead (its first sight would cost
every set size); each new pod shape then searches one size, which node by node is ~60 us of Python
per node. Here the groups of one device count are searched together: the sets of size ``k`` in
the order the node-by-node search visits them (lexicographic), each scored with the same float
operations in the same order (pair sums, per-device sums, fill, weights), and the winner picked
by the same rule (a later set wins only by more than 1e-12), so the result is the very same
(score, set) ``_exhaustive_size`` gives, ties included.
"""

from __future__ import annotations

import functools
import itertools
from typing import Optional, Sequence

import numpy as np

from hetero_exporter.scoring.nodes import SWITCH_SCORE, Group
from hetero_exporter.scoring.scorer import DEGRADED_HEALTH, Scorer

TIE = 1e-12  # a later set wins only by more than this (Scorer._exhaustive_size)


@functools.lru_cache(maxsize=128)
def _combos(n: int, k: int) -> np.ndarray:
    """The sets of ``k`` of ``range(n)`` as rows, in itertools.combinations order."""
    return np.array(list(itertools.combinations(range(n), k)), dtype=np.intp).reshape(-1, k)


def _arrays(g: Group) -> tuple[list, list, list, list]:
    """What the search reads of a group, as lists: pair matrix rows, domains, health (1: ok),
    cost weights (kept in the group's memo: a node in requests is searched again per shape)."""
    got = g.choices.get(("batch-arrays",))
    if got is None:
        got = g.choices[("batch-arrays",)] = (
            [x for row in g.pair for x in row], list(g.domain),
            [1.0 if d.health == "ok" else DEGRADED_HEALTH for d in g.devices],
            [d.cost_weight for d in g.devices])
    return got


def _values(scorer: Scorer, pair: np.ndarray, loads: np.ndarray, health: np.ndarray, cost_weight: np.ndarray,
            binpack: bool) -> np.ndarray:
    """``Scorer._values`` (exclusive requests) of each device of each group: the weighted sum of
    idle, health, cost and affinity, added in that order."""
    w = scorer.weights
    n = loads.shape[1]
    idle = 1.0 - loads
    cost = 1.0 / (1.0 + cost_weight)
    if n > 1:
        near = pair * loads[:, None, :]  # pair[i][j] * load[j]
        near[:, np.arange(n), np.arange(n)] = -np.inf  # j != i
        near_busy = near.max(axis=2)
    else:
        near_busy = np.zeros_like(loads)
    affinity = near_busy if binpack else 1.0 - near_busy
    return w["idle"] * idle + w["health"] * health + w["cost"] * cost + w["affinity"] * affinity


def search(scorer: Scorer, groups: Sequence[Group], k: int, policy: str,
           topology: str) -> list[Optional[tuple[float, tuple[int, ...]]]]:
    """For each group (all with the same number n of candidates, k <= n): the best (score, set)
    of ``k`` of its candidates under ``policy`` and the canonical ``topology`` policy, exclusive
    request, or None where no set meets the policy."""
    n = len(groups[0].devices)
    combos = _combos(n, k)
    arrays = [_arrays(g) for g in groups]
    pair = np.array([a[0] for a in arrays]).reshape(len(groups), n, n)
    domain = np.array([a[1] for a in arrays], dtype=np.int64).reshape(len(groups), n)
    loads = np.array([g.loads for g in groups]).reshape(len(groups), n)
    vals = _values(scorer, pair, loads, np.array([a[2] for a in arrays]).reshape(len(groups), n),
                   np.array([a[3] for a in arrays]).reshape(len(groups), n), policy == "binpack")
    flat = pair.reshape(len(groups), n * n)
    ps = np.zeros((len(groups), len(combos)))
    admit = np.ones((len(groups), len(combos)), dtype=bool)
    b = vals[:, combos[:, 0]]
    ls = loads[:, combos[:, 0]]
    for at in range(1, k):  # the order of _exhaustive_size: row at, then its sum added
        pairs = [flat[:, combos[:, at] * n + combos[:, c]] for c in range(at)]
        if topology == "same-switch":
            for v in pairs:
                admit &= v >= SWITCH_SCORE
        ps = ps + sum(pairs[1:], start=pairs[0])
        b = b + vals[:, combos[:, at]]
        ls = ls + loads[:, combos[:, at]]
    if topology == "same-fabric":
        first = domain[:, combos[:, 0]]
        for at in range(1, k):
            admit &= domain[:, combos[:, at]] == first
    w_topo, w_fill = scorer.weights["topology"], scorer.weights["fill"]
    t = w_topo * (ps / (k * (k - 1) / 2) if k > 1 else 1.0)
    load_total = np.array([g.load_total for g in groups])[:, None]
    fill = np.minimum(1.0, np.maximum(0.0, (load_total - ls + k) / n))
    score = t + b / k + w_fill * (fill if policy == "binpack" else 1.0 - fill)
    score = np.where(admit, score, -np.inf)
    best = _first_records(score)
    rows = np.arange(len(groups))
    won = score[rows, best]
    sets = combos[best].tolist()
    return [(s, tuple(c)) if s != -np.inf else None for s, c in zip(won.tolist(), sets)]


def _first_records(score: np.ndarray) -> np.ndarray:
    """Per row, the column a left-to-right scan keeps: the first, then each later one that beats
    the kept one by more than ``TIE`` (-inf: refused; kept only if all are)."""
    at = np.zeros(len(score), dtype=np.intp)
    columns = np.arange(score.shape[1])
    rows = np.arange(len(score))
    while True:
        kept = score[rows, at]
        beats = (score > (kept + TIE)[:, None]) & (columns > at[:, None])
        more = beats.any(axis=1)
        if not more.any():
            return at
        at = np.where(more, beats.argmax(axis=1), at)
