"""The verdicts of one /filter or /prioritize call, node by node, as the answers need them.

An answer needs little of each node's Decision: /prioritize its points (0..10 for a fresh
annotation) and, for a stale annotation, its score; /filter which nodes pass and, for the others,
the reason text and whether preemption could help; the metrics a bounded reason per node. A
``Verdicts`` holds those by position (the request's node names) and makes the Decisions
themselves (reasons, devices, parts) only where asked: scoring.columns gives them for all nodes
at once from arrays (``columns.ColumnVerdicts``); ``DecisionVerdicts`` wraps Decisions made node
by node (no numpy, or nodes decided on their own).

The reason labels (``REASONS``) are those of the metric ``decisions_total`` (scoring.metrics).
"""

from __future__ import annotations

from typing import Optional, Sequence

from hetero_exporter.scoring.nodes import NodeState
from hetero_exporter.scoring.scorer import NO_ACCELERATOR, Decision, Staleness, extender_score

# decisions_total's reason label: a bounded enum (the text is in /explain); codes are indices
FIT = "fit"                                  # feasible: devices chosen
NO_REQUEST = "no-accelerator-requested"      # feasible: the pod asks for none
REQUEST_UNREADABLE = "request-unreadable"    # the pod's accelerator request cannot be read
NOT_CACHED = "not-cached"                    # no annotation of that node seen yet (node-cache mode)
ANNOTATION = "annotation-error"              # no annotation on the node, or one that cannot be read
BUSY = "busy"                                # devices taken: preemption could make it fit
UNFIT = "unfit"                              # the node's devices do not meet the request
REASONS = (FIT, NO_REQUEST, REQUEST_UNREADABLE, NOT_CACHED, ANNOTATION, BUSY, UNFIT)
CODE = {r: i for i, r in enumerate(REASONS)}
FEASIBLE_CODES = (CODE[FIT], CODE[NO_REQUEST])


def reason_of(d: Optional[Decision], st: Optional[NodeState]) -> str:
    """The ``REASONS`` label of a decision on a node (``d`` None: the node is not cached)."""
    if d is not None and d.feasible:
        return NO_REQUEST if d is NO_ACCELERATOR else FIT
    if st is None:
        return NOT_CACHED
    if st.error:
        return ANNOTATION
    return BUSY if d is not None and d.resolvable else UNFIT


def reason_counts(decisions: Sequence[Decision], states: Sequence[Optional[NodeState]],
                  request_ok: bool) -> dict[str, int]:
    """Per-node verdicts of one call by ``REASONS`` value (one pass, no text looked at)."""
    if not request_ok:
        return {REQUEST_UNREADABLE: len(decisions)} if decisions else {}
    counts = dict.fromkeys(REASONS, 0)
    for d, st in zip(decisions, states):
        if d.feasible:
            counts[NO_REQUEST if d is NO_ACCELERATOR else FIT] += 1
        elif st is None:
            counts[NOT_CACHED] += 1
        elif st.error:
            counts[ANNOTATION] += 1
        else:
            counts[BUSY if d.resolvable else UNFIT] += 1
    return {k: v for k, v in counts.items() if v}


class Verdicts:
    """The interface the extender reads (positions are those of the request's node names)."""

    states: Sequence[Optional[NodeState]]

    def __len__(self) -> int:
        return len(self.states)

    def points(self) -> list[int]:
        """Each node's 0..10 for a fresh annotation (0: infeasible)."""
        raise NotImplementedError

    def score(self, i: int) -> float:
        """The score (0..1, before staleness) of a feasible node."""
        raise NotImplementedError

    def points_at(self, now: float, staleness: Staleness) -> list[int]:
        """Each node's 0..10 at ``now`` (Unix seconds): a stale annotation's points fall with its
        age (``Staleness``)."""
        points = self.points()
        fresh_after = now - staleness.fresh_seconds  # annotations newer than this: confidence 1
        for i, p in enumerate(points):
            st = self.states[i]
            if p and st is not None and st.time < fresh_after:
                points[i] = extender_score(self.score(i) * staleness.confidence(now - st.time))
        return points

    def passing(self) -> list[int]:
        """Positions of the feasible nodes, in order."""
        raise NotImplementedError

    def failing(self) -> tuple[list[int], list[Decision]]:
        """(positions, decisions) of the infeasible nodes, in order."""
        raise NotImplementedError

    def counts(self) -> dict[str, int]:
        """Nodes by ``REASONS`` label (labels with none left out)."""
        raise NotImplementedError

    def decisions(self) -> list[Decision]:
        """Every node's Decision (made where not made yet)."""
        raise NotImplementedError

    def put(self, i: int, state: Optional[NodeState], decision: Decision) -> None:
        """Node ``i`` decided on its own (a state the table does not hold)."""
        raise NotImplementedError


class DecisionVerdicts(Verdicts):
    """Verdicts over Decisions made node by node. ``request_ok`` False: the pod's request could
    not be read (every decision says why)."""

    def __init__(self, decisions: list[Decision], states: list[Optional[NodeState]], request_ok: bool = True):
        self._decisions, self.request_ok = decisions, request_ok
        self.states: list[Optional[NodeState]] = states

    def points(self) -> list[int]:
        return [d.points for d in self._decisions]

    def score(self, i: int) -> float:
        return self._decisions[i].score

    def passing(self) -> list[int]:
        return [i for i, d in enumerate(self._decisions) if d.feasible]

    def failing(self) -> tuple[list[int], list[Decision]]:
        at = [i for i, d in enumerate(self._decisions) if not d.feasible]
        return at, list(map(self._decisions.__getitem__, at))

    def counts(self) -> dict[str, int]:
        return reason_counts(self._decisions, self.states, self.request_ok)

    def decisions(self) -> list[Decision]:
        return self._decisions

    def put(self, i: int, state: Optional[NodeState], decision: Decision) -> None:
        self.states[i], self._decisions[i] = state, decision
