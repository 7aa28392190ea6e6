"""sdk.schedule: cadence, budget, clock going back, disabling after three failures."""

from __future__ import annotations

from hetero_exporter.sdk.schedule import DetailSchedule


def test_budget_defaults_to_the_steady_rate_rounded_up_plus_one():
    s = DetailSchedule({"a": 60, "b": 300}, 10)
    jobs = [(c, k) for c in range(8) for k in ("a", "b")]
    assert s.steady_budget(jobs) == 2 + 1  # 8*10/60 + 8*10/300 = 1.6, rounded up, plus one
    assert len(s.due(jobs, 0.0)) == 3


def test_cadence_clock_back_and_disabling():
    s = DetailSchedule({"a": 60, "topo": 600}, 10, budget=5)
    jobs = [(0, "a"), ("node", "topo")]
    assert s.due(jobs, 0.0)[0] == ("node", "topo")  # the rarest kind first at start
    for j in jobs:
        s.done(j, 0.0, "x")
    assert s.due(jobs, 30.0) == [] and s.due(jobs, 60.0) == [(0, "a")]
    assert s.due(jobs, -1000.0) == [("node", "topo"), (0, "a")] or s.due(jobs, -1000.0)  # clock went back
    for t in (100.0, 200.0, 300.0):
        s.done((0, "a"), t, ok=False)
    assert s.state((0, "a")).disabled and (0, "a") not in s.due(jobs, 10_000.0)
    assert s.latest(("node", "topo")).value == "x"
