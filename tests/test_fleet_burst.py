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

import kubeapi

pytest.importorskip("kubernetes")

from hetero_exporter.health.act.remedy import RESYNC_JITTER, Remedy  # noqa: E402
from hetero_exporter.health.detect import policy as policy_mod  # noqa: E402
from hetero_exporter.health.plan import RemedyConfig  # noqa: E402
from hetero_exporter.sampling import START_JITTER_MAX_SECONDS, Sampler, start_offset  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DESIGN_KEYS = {"idle_requests_per_node_per_minute", "writes_per_fault", "fault_to_taint_p50_seconds",
               "fault_to_taint_p99_seconds", "max_tainted_at_once", "budget"}


def _benchmark():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import fleet_burst
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return fleet_burst


@pytest.fixture(scope="module")
def small_run():
    fleet_burst = _benchmark()
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
    burst = small_run["failing_agents_requests"]  # the five failing agents' own requests
    # every failing node writes its pod's condition once and its own condition; DeviceTaintRules
    # only for NVIDIA nodes with a slice, Leases for the slots
    assert burst["patch pods/status"] == 5 and burst["patch nodes/status"] >= 5
    assert 1 <= burst.get("create devicetaintrules", 0) <= 4  # the Ascend node has no ResourceSlice
    assert burst.get("create leases", 0) >= small_run["tainted_in_burst"]
    # one read of its slot per node whose taint landed (the fence); a slot lost to a race is
    # seen in the next listing, not read by name
    assert burst.get("get leases", 0) == small_run["tainted_in_burst"]
    assert set(by_kind) <= {"create devicetaintrules", "create events", "create leases", "patch nodes",
                            "patch nodes/status", "patch pods/status", "update leases", "delete leases"}
    assert small_run["writes_per_fault"] == pytest.approx(sum(by_kind.values()), abs=0.01)
    assert set(small_run["writes_stored_nothing_per_fault"]) <= {"create leases 409"}
    # idle: the Node's resync read and its heartbeats (a watch cache may list again)
    assert set(small_run["idle_requests_per_node_per_minute_by_kind"]) <= {
        "get nodes", "patch nodes", "patch nodes/status", "list pods", "list resourceslices"}
    assert small_run["idle_requests_per_node_per_minute"] > 0
    # the stack health's plugin pods come from the pod watch (issue 39 §1): no list per resync
    # (they were 4 per resync, 2.6 per node and minute); within the goal of 3 beyond the watches
    assert small_run["idle_requests_per_node_per_minute_by_kind"].get("list pods", 0) < 0.5
    assert small_run["idle_requests_per_node_per_minute"] <= 3.0


def test_every_tainted_node_is_untainted_on_recovery(small_run):
    """A lost GPU, NVML's Xid 79, an Ascend SeparateNPU code and a kernel-log Xid 79 (the reboot
    its catalogue action asks for): every node tainted is untainted on recovery. (Before the shapes
    were collected ahead until every GPU answered again, NVML's Xid 79 nodes often were not.)"""
    tainted, untainted = small_run["tainted_by_kind"], small_run["untainted_by_kind"]
    # a shape collected ahead that never showed its recovery would leave its node tainted: said first
    assert small_run["shapes_not_shown"] == {"fault": [], "recovery": []}
    assert tainted and untainted == tainted, small_run["unsettled_agents"]
    assert small_run["untainted_in_recovery"] == sum(tainted.values())
    assert small_run["budget_excess"] == {} and small_run["over_budget_seconds"] == 0
    # 5 failing nodes, 2 slots: the others are refused (no slot), none late or taken back
    assert set(small_run["budget_refusal_events"]) == {"full"} and small_run["taints_taken_back"] == 0


def test_an_excess_over_the_budget_is_explained_by_the_slots_taken_over():
    fleet_burst = _benchmark()
    marks = [(1.0, "n1", True), (3.0, "n2", True)]
    slots = [(0.5, "slot-0", "n1"), (2.0, "slot-0", "n2")]  # n2 took n1's slot before n1's taint landed
    excess = fleet_burst.over_budget(marks, slots, budget=1)
    assert excess["tainted"] == 2 and excess["slots_held"] == 1 and excess["tainted_holding_no_slot"] == 1
    assert excess["their_slots_taken_over"] == {"n1": [(1.5, "slot-0", "n2")]}
    assert fleet_burst.over_budget(marks[:1], slots[:1], budget=1) == {}
    kind = fleet_burst.refusal_kind
    assert kind("taking the taint off n1 (xid 79): its taint slot was taken over ...") == "taken-back"
    assert kind("not tainting n1 (xid 79): the budget could not be checked (this node has held taint slots "
                "for 95 s without its taint landing: ...)") == "late"
    assert kind("not tainting n1 (xid 79): 2 of 20 ...: no fleet-wide taint slot is free") == "full"
    back = marks + [(4.5, "n1", False)]  # n1's recheck found its slot taken: its taint came off
    assert fleet_burst.seconds_over(back, budget=1) == 1.5  # from 3.0 to 4.5
    assert fleet_burst.taken_back(back, {"n1": 10.0, "n2": 10.0}) == 1
    assert fleet_burst.taken_back(back, {"n1": 4.0, "n2": 4.0}) == 0  # after its recovery: an untaint


def test_a_taint_granted_after_the_first_reconcile_is_counted_apart():
    fleet_burst = _benchmark()
    marks = [(2.0, "n1", True), (9.0, "n2", True), (12.0, "n3", False)]
    handed = {"n1": 1.0, "n2": 1.0, "n3": 1.0}
    # n1's taint landed within its first reconcile (done at 2.5), n2's at a later one (done at 3.0),
    # n3 was never tainted
    assert fleet_burst.after_first(marks, {"n1": 2.5, "n2": 3.0, "n3": 4.0}, handed) == 1
    assert fleet_burst.after_first(marks, {"n1": 2.5}, handed) == 0  # n2 never finished a reconcile


def test_the_json_has_the_keys_design_names(small_run):
    assert DESIGN_KEYS <= set(small_run)
    assert small_run["fault_kinds"] == {"gpu-lost": 2, "xid79": 1, "ascend-separate-npu": 1, "kernel-log": 1}
    deciles = small_run["fault_to_taint_deciles_seconds"]
    assert len(deciles) == 9 and deciles == sorted(deciles)
    assert 0 <= small_run["tainted_after_first_reconcile"] <= small_run["tainted_in_burst"]
    assert 0 <= small_run["fault_reconcile_wait_p50_seconds"] <= small_run["fault_reconcile_wait_p99_seconds"]
    cpu = small_run["fault_phase_cpu_seconds"]  # the agents' process and the API server's, apart
    assert set(cpu) == {"agents", "api_server"} and min(cpu.values()) >= 0 and cpu["agents"] > 0, cpu
    # the budget's LIST of every accelerator Node is in the bytes the burst was answered
    answered = small_run["fault_phase_answered_megabytes"]
    assert answered.get("list nodes", 0) > 0, answered


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


# --------------------------------------------------------------------------- the budget's API bill


SLOT_LABELS = {"app.kubernetes.io/managed-by": "hetero-exporter", "hetero-exporter.io/budget": "taint"}


def _racers(kube_api, count: int, limit: int) -> dict:
    from hetero_exporter.health.act.fleet_budget import FleetBudget
    from hetero_exporter.k8s.client import Cluster
    from hetero_exporter.k8s.leases import Leases
    clients = [kube_api.api_client() for _ in range(count)]
    fleet = [FleetBudget(Leases(Cluster(api_client=c, source="test"), "hetero-exporter"), f"gpu-{i}",
                         domain="hetero-exporter.io") for i, c in enumerate(clients)]
    barrier, results = threading.Barrier(count, timeout=60), {}

    def fail(b) -> None:
        barrier.wait()
        results[b.node] = b.acquire(limit, ())
    threads = [threading.Thread(target=fail, args=(b,), daemon=True) for b in fleet]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for c in clients:
        c.close()
    assert not any(t.is_alive() for t in threads)
    return results


def test_thirty_nodes_racing_for_twenty_slots_lose_few_creates_and_read_none_by_name(kube_api):
    """All racing for the lowest slot, each loser trying every slot it had read free and reading
    each by name, cost ~100 lost creates and ~100 GETs here; spread and re-read, a few dozen
    (8 to 47 over 16 runs on this 2-core box, idle and loaded: how many are lost depends on how
    the threads interleave, so the bound sits between that spread and the old ~100)."""
    results = _racers(kube_api, 30, 20)
    assert sum(1 for r in results.values() if r.granted) == 20
    tally, lost = kube_api.tally(), kube_api.unchanged_writes()
    assert tally.get("get leases", 0) == 0  # the winners' slots show in the next listing
    assert lost.get("create leases 409", 0) <= 75, lost
    assert set(lost) <= {"create leases 409"}


def _remedy(kube_api, node: str, clock=None):
    from hetero_exporter.health.act.remedy import Remedy
    from hetero_exporter.k8s.client import Cluster
    cfg = RemedyConfig.from_mapping({}, mode="enforce")
    cluster = Cluster(api_client=kube_api.api_client(), source="test")
    return Remedy(cluster, node, policy_mod.load(), cfg, environ={"POD_NAMESPACE": "hetero-exporter"},
                  **({"clock": clock} if clock is not None else {}))


def _taint(kube_api, node: str) -> None:
    kube_api.mutate_node(node, lambda n: n["spec"].setdefault("taints", []).append(
        {"key": "hetero-exporter.io/accelerator-unhealthy", "effect": "NoSchedule"}))


def _whole_lists(kube_api) -> int:
    """LISTs of the whole Nodes (not as a Table of their names)."""
    return len(kube_api.node_lists(table=False))


def test_a_refused_node_asks_again_without_listing_every_node_until_a_slot_frees(kube_api):
    nodes = [f"gpu-{i}" for i in range(10)]  # the budget allows 1
    for n in nodes:
        kube_api.seed_node(n, labels={"hetero-exporter.io/accelerator": "true"})
    holder, refused = _remedy(kube_api, "gpu-0"), _remedy(kube_api, "gpu-1")
    assert holder._budget().granted is True
    _taint(kube_api, "gpu-0")
    first = refused._budget()
    assert first.granted is False and _whole_lists(kube_api) == 2
    for _ in range(3):  # its retries: the slots alone say no; nothing written, no node listing
        again = refused._budget()
        assert again.granted is False and again.tainted == 1 and again.total == 10
    assert _whole_lists(kube_api) == 2 and kube_api.tally()["create leases"] == 1
    assert holder._fleet.release() is None  # gpu-0 recovered: its slot given back
    kube_api.mutate_node("gpu-0", lambda n: n["spec"].pop("taints"))
    assert refused._budget().granted is True  # listed again, and granted
    assert _whole_lists(kube_api) == 3


class _Clock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_the_slots_alone_count_a_holder_as_acquire_would_and_list_again_past_its_grace(kube_api):
    """A holder not yet tainted when listed counts within its grace, as ``acquire`` counts it;
    past the grace the old listing cannot tell whether it carries the taint now: listed again."""
    for n in ("gpu-0", "gpu-1", "gpu-2"):
        kube_api.seed_node(n, labels={"hetero-exporter.io/accelerator": "true"})
    clock = _Clock(1_800_000_000.0)
    a, b = _remedy(kube_api, "gpu-0", clock), _remedy(kube_api, "gpu-1", clock)
    assert a._budget().granted is True  # tainting now: not on its Node yet
    assert b._budget().granted is False and _whole_lists(kube_api) == 2  # within its grace
    assert b._budget().granted is False and _whole_lists(kube_api) == 2  # the slots alone say so
    _taint(kube_api, "gpu-0")
    clock.t += 130  # past the grace: untainted by the listing, so not counted from it
    assert b._budget().granted is False and _whole_lists(kube_api) == 3  # listed again: tainted
    assert b._budget().granted is False and _whole_lists(kube_api) == 3  # counted from the new one
    assert [o["spec"]["holderIdentity"] for o in kube_api.list(kubeapi.LEASES, "hetero-exporter")] == ["gpu-0"]
