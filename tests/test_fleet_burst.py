"""The fleet burst benchmark at a small size (issue 39 §1), and the agents' start jitter.

benchmarks/fleet_burst.py runs N agents' real health code against one loopback API server; here
20 nodes and 5 faults: the budget is never exceeded, the writes per device fault are counted from
the API server's tally (not timed), and the JSON carries the keys DESIGN.md names. The jitter:
two samplers' first cycles (and two remedies' first resyncs) start at different, bounded offsets.
"""

from __future__ import annotations

import random
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")

from hetero_exporter.health.act.remedy import RESYNC_JITTER, Remedy  # noqa: E402
from hetero_exporter.health.detect import policy as policy_mod  # noqa: E402
from hetero_exporter.health.plan import RemedyConfig  # noqa: E402
from hetero_exporter.sampling import START_JITTER_MAX_SECONDS, Sampler, start_offset  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DESIGN_KEYS = {"idle_requests_per_node_per_minute", "writes_per_fault", "fault_to_taint_p50_seconds",
               "fault_to_taint_p99_seconds", "max_tainted_at_once", "budget"}


@pytest.fixture(scope="module")
def small_run():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import fleet_burst
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    s = fleet_burst.Settings(nodes=20, faults=5, resync=3.0, interval=10.0, idle_periods=2, ascend_nodes=2,
                             seed=39, settle_timeout=240.0)
    return fleet_burst.run(s)


def test_the_budget_is_never_exceeded(small_run):
    assert small_run["budget"] == 2  # 10 % of 20 nodes
    assert 1 <= small_run["max_tainted_at_once"] <= small_run["budget"]
    assert small_run["budget_exceeded"] is False
    assert small_run["tainted_in_burst"] == small_run["max_tainted_at_once"]  # the others were refused


def test_writes_per_fault_are_counted_by_kind(small_run):
    by_kind = small_run["writes_per_fault_by_kind"]
    burst = small_run["burst_requests"]
    # every failing node writes its pod's condition once and its own condition (the idle nodes'
    # shrunk condition heartbeats fall in the window too); DeviceTaintRules only for NVIDIA nodes
    # with a slice, Leases for the slots
    assert burst["patch pods/status"] == 5 and burst["patch nodes/status"] >= 5
    assert 1 <= burst.get("create devicetaintrules", 0) <= 4  # the Ascend node has no ResourceSlice
    assert burst.get("create leases", 0) >= small_run["tainted_in_burst"]
    assert set(by_kind) <= {"create devicetaintrules", "create events", "create leases", "patch nodes",
                            "patch nodes/status", "patch pods/status", "update leases", "delete leases"}
    assert small_run["writes_per_fault"] == pytest.approx(sum(by_kind.values()), abs=0.01)
    # idle: the Node's resync read and its heartbeats (a watch cache may list again), under the goal
    assert set(small_run["idle_requests_per_node_per_minute_by_kind"]) <= {
        "get nodes", "patch nodes", "patch nodes/status", "list pods", "list resourceslices"}
    assert small_run["idle_requests_per_node_per_minute"] > 0


def test_the_json_has_the_keys_design_names(small_run):
    assert DESIGN_KEYS <= set(small_run)
    assert small_run["fault_kinds"] == {"gpu-lost": 2, "xid79": 1, "ascend-separate-npu": 1, "kernel-log": 1}


# --------------------------------------------------------------------------- jitter


def test_start_offsets_differ_between_agents_and_are_bounded():
    a, b = start_offset(10.0, random.Random(1)), start_offset(10.0, random.Random(2))
    assert a != b
    draws = [start_offset(10.0, random.Random(i)) for i in range(500)]
    assert all(0.0 <= d < START_JITTER_MAX_SECONDS for d in draws)
    assert max(draws) > START_JITTER_MAX_SECONDS / 2  # spread, not all at once
    assert all(0.0 <= start_offset(0.5, random.Random(i)) < 0.5 for i in range(100))  # never past the interval


class _Wake(threading.Event):
    """The sampler's wake event, noting the waits asked of it (none really waited)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout=None):  # type: ignore[override]
        self.waits.append(timeout)
        return False


def _first_wait(seed: int) -> float:
    wake, stop = _Wake(), threading.Event()
    sampler = Sampler([], "node-a", wake=wake, rng=random.Random(seed))
    sampler.run(10.0, lambda snap, ev: stop.set(), stop)
    return wake.waits[0]


def test_two_samplers_first_cycles_wait_different_bounded_offsets():
    first, second = _first_wait(1), _first_wait(2)
    assert first == start_offset(10.0, random.Random(1)) and second == start_offset(10.0, random.Random(2))
    assert first != second and 0 <= first < START_JITTER_MAX_SECONDS and 0 <= second < START_JITTER_MAX_SECONDS


def test_two_remedies_first_resyncs_differ_and_are_bounded():
    cfg = RemedyConfig(resync_seconds=60.0)
    offsets = [Remedy(None, "n", policy_mod.load(), cfg, rng=random.Random(i))._resync_offset for i in range(50)]
    assert len(set(offsets)) == 50
    assert all(0.0 <= o < RESYNC_JITTER * 60.0 for o in offsets)
