"""The detail-call schedule of a CLI collector: which slow per-device calls to make this cycle.

A vendor tool answers the fast summary for all devices in one call; the rest (per-card
details, identity, topology) is asked per (target, kind) at the kind's own cadence
(``intervals[kind]`` seconds; 0 or absent: never), spread over cycles so that a cycle makes
at most ``budget`` of them: by default the steady rate (the sum over the jobs of cycle /
interval) rounded up, plus one to drain the start-up backlog. Every job is due at its first
sight; the most overdue go first. A job whose clock went back (the due time more than two
intervals ahead: the host clock was set back, a simulation restarted) is due now rather than
in a long while. A job that fails ``max_failures`` times in a row is disabled: the tool does
not support it on this product or driver.

The times are the collector's clock (the scenario clock when simulating), so a simulated node
refreshes at the same cadence in scenario time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Mapping, Optional

Job = tuple[Hashable, str]  # (target, kind): (card 3, "usages"), ("node", "topo")
# seconds between a node's link-topology calls (``topo -m``, ``info -t topo``, ``--showtopo``):
# node-wide and rarely changing; every CLI collector's ``topo_interval`` default
DEFAULT_TOPO_INTERVAL = 600.0


@dataclass
class JobState:
    value: Any = None  # the last good result
    fetched_at: float = 0.0
    due: float = 0.0
    failures: int = 0
    disabled: bool = False
    seen: bool = False  # asked at least once

    def age(self, now: float) -> float:
        return max(0.0, now - self.fetched_at)


class DetailSchedule:
    """Due detail jobs per cycle under a budget (see the module docstring)."""

    def __init__(self, intervals: Mapping[str, float], cycle_seconds: float,
                 budget: Optional[int] = None, max_failures: int = 3):
        self.intervals = {k: float(v) for k, v in intervals.items() if v and float(v) > 0}
        self.cycle = max(0.1, float(cycle_seconds))
        self.budget = None if budget is None else max(0, int(budget))
        self.max_failures = max(1, int(max_failures))
        self._jobs: dict[Job, JobState] = {}

    def steady_budget(self, jobs: Iterable[Job]) -> int:
        """The steady rate of ``jobs`` rounded up, plus one (0 when none is scheduled)."""
        rate = sum(self.cycle / self.intervals[k] for _, k in jobs if k in self.intervals)
        return math.ceil(rate) + 1 if rate else 0

    def due(self, jobs: Iterable[Job], now: float) -> list[Job]:
        """The jobs to run this cycle, most overdue first, at most the budget."""
        wanted = [j for j in dict.fromkeys(jobs) if j[1] in self.intervals]
        ready = []
        for job in wanted:
            st = self._jobs.setdefault(job, JobState(due=now))
            if st.due - now > 2 * self.intervals[job[1]]:  # the clock went back
                st.due = now
            if not st.disabled and st.due <= now:
                ready.append(job)
        budget = self.budget if self.budget is not None else self.steady_budget(wanted)
        # most overdue first; among equals the rarest kind (a topology call at start)
        ready.sort(key=lambda j: (self._jobs[j].due, -self.intervals[j[1]], type(j[0]).__name__, j[0], j[1]))
        return ready[:budget]

    def done(self, job: Job, now: float, value: Any = None, ok: bool = True) -> JobState:
        """Record a run of ``job`` at ``now``: its result, or a failure (the third in a row
        disables it). The next run is one interval later either way."""
        st = self._jobs.setdefault(job, JobState())
        st.seen = True
        st.due = now + self.intervals.get(job[1], math.inf)
        if ok:
            st.value, st.fetched_at, st.failures = value, now, 0
        else:
            st.failures += 1
            if st.failures >= self.max_failures:
                st.disabled = True
        return st

    def state(self, job: Job) -> Optional[JobState]:
        return self._jobs.get(job)

    def latest(self, job: Job) -> Optional[JobState]:
        """The job's state when it has a good result, else None."""
        st = self._jobs.get(job)
        return st if st is not None and st.value is not None else None

    def interval(self, kind: str) -> float:
        return self.intervals.get(kind, math.inf)
