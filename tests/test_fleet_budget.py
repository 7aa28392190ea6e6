"""The fleet-wide taint budget (issue 15 item 5): taint slots as Leases on the loopback API server,
through the real kubernetes client. Agents that fail in the same minute never overshoot it."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("kubernetes")

from kubeapi import LEASES  # noqa: E402

from hetero_exporter.health.act.fleet_budget import (  # noqa: E402
    SLOT_PREFIX, FleetBudget, micro_time, parse_slot, parse_time, refusal, usable_slots)
from hetero_exporter.health.plan import RemedyConfig  # noqa: E402
from hetero_exporter.k8s.client import Cluster, K8sError  # noqa: E402
from hetero_exporter.k8s.leases import Leases  # noqa: E402

NS = "hetero-exporter"
DOMAIN = "hetero-exporter.io"
T0 = 1_800_000_000.0


class Clock:
    def __init__(self, t: float = T0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def agents(kube_api, clock):
    """agent(node) -> FleetBudget on its own ApiClient (one per agent, as on 20 nodes)."""
    clients = []

    def make(node: str, **kw) -> FleetBudget:
        api_client = kube_api.api_client()
        clients.append(api_client)
        return FleetBudget(Leases(Cluster(api_client=api_client, source="test"), NS), node, domain=DOMAIN,
                           clock=kw.pop("clock", clock), **kw)
    yield make
    for c in clients:
        c.close()


def slots(kube_api) -> dict[str, str]:
    """slot name -> holder, as stored."""
    return {o["metadata"]["name"]: o["spec"].get("holderIdentity") for o in kube_api.list(LEASES, NS)}


def seed_slot(kube_api, index: int, holder: str, renewed: float, seconds: int = 600) -> dict:
    return kube_api.create(LEASES, NS, {
        "metadata": {"name": f"{SLOT_PREFIX}{index}",
                     "labels": {"app.kubernetes.io/managed-by": "hetero-exporter", f"{DOMAIN}/budget": "taint"}},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds, "renewTime": micro_time(renewed)}})


# --------------------------------------------------------------------------- the race


def test_twenty_agents_failing_at_once_never_overshoot(kube_api, agents):
    fleet = [agents(f"gpu-{i}") for i in range(20)]
    for round_ in range(5):
        barrier = threading.Barrier(len(fleet), timeout=30)
        results: dict[str, object] = {}

        def fail(b: FleetBudget) -> None:
            barrier.wait()
            results[b.node] = b.acquire(2, tainted=())  # each saw "0 tainted" a moment ago

        threads = [threading.Thread(target=fail, args=(b,), daemon=True) for b in fleet]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
        granted = sorted(n for n, r in results.items() if r.granted)
        assert len(granted) == 2, (round_, results)
        assert sorted(slots(kube_api).values()) == granted
        for node, r in results.items():
            if node not in granted:
                assert not r.granted and r.error is None and r.held_by_others == 2
                assert r.why == f"2 of 2 taint slots are held by {', '.join(sorted(granted, key=slot_of(kube_api)))}"
        for b in fleet:
            if b.node in granted:
                assert b.release() is None
        assert slots(kube_api) == {}
    # never more than two slots held at any moment: only slots 0 and 1 were ever written, and
    # each round created exactly two (the losers were answered AlreadyExists or saw them held)
    writes = kube_api.writes(path="leases")
    assert {r.body["metadata"]["name"] for r in writes if r.method in ("POST", "PUT")} <= {
        f"{SLOT_PREFIX}0", f"{SLOT_PREFIX}1"}
    assert sum(1 for r in writes if r.method == "POST" and r.status == 201) == 10


def slot_of(kube_api):
    by_holder = {h: n for n, h in slots(kube_api).items()}
    return lambda node: by_holder[node]


# --------------------------------------------------------------------------- expiry


def test_an_expired_slot_is_taken_over_and_its_old_holder_knows(kube_api, agents, clock):
    a, b = agents("gpu-a"), agents("gpu-b")
    assert a.acquire(1, ()).granted
    a.carrying()  # its taint landed
    clock.t += 599
    refused = b.acquire(1, ())
    assert not refused.granted and refused.why == "1 of 1 taint slots are held by gpu-a"
    clock.t += 2  # by gpu-a's clock its lease ran out; gpu-b has watched it for 0 s: still live
    assert not b.acquire(1, ()).granted
    clock.t += 599  # gpu-a's agent died: no renewal seen by gpu-b for a whole lease
    took = b.acquire(1, ())
    assert took.granted and took.why.startswith("taint slot 0 taken")
    lease = kube_api.get(LEASES, NS, f"{SLOT_PREFIX}0")
    assert lease["spec"]["holderIdentity"] == "gpu-b" and lease["spec"]["leaseTransitions"] == 1
    assert lease["spec"]["renewTime"] == micro_time(clock.t)
    assert a.renew() == "this node holds no taint slot"
    assert a.renew() == "this node holds no taint slot"  # said again, without asking again
    again = a.acquire(1, ())
    assert not again.granted and again.why == "1 of 1 taint slots are held by gpu-b"


def test_an_expired_slot_of_a_node_still_tainted_stays_its_own(kube_api, agents, clock):
    assert agents("gpu-a").acquire(1, ()).granted
    clock.t += 3600  # gpu-a's agent is gone, its taint is still on the Node
    refused = agents("gpu-b").acquire(1, tainted={"gpu-a"})
    assert not refused.granted and refused.why == "1 of 1 taint slots are held by gpu-a"
    restarted = agents("gpu-a").acquire(1, tainted={"gpu-a"})  # a new agent on gpu-a: same slot
    assert restarted.granted and restarted.why == "this node holds taint slot 0 (renewed)"
    assert slots(kube_api) == {f"{SLOT_PREFIX}0": "gpu-a"}


def test_renew_writes_at_most_once_per_third_of_the_lease(kube_api, agents, clock):
    a = agents("gpu-a")
    assert a.acquire(1, ()).granted
    puts = lambda: [r for r in kube_api.writes(path="leases") if r.method == "PUT"]  # noqa: E731
    assert a.renew() is None and puts() == []
    clock.t += 199
    assert a.renew() is None and puts() == []
    clock.t += 2
    assert a.renew() is None and len(puts()) == 1
    assert kube_api.get(LEASES, NS, f"{SLOT_PREFIX}0")["spec"]["renewTime"] == micro_time(clock.t)
    # another process of the same node (a restart) finds its slot by listing
    assert agents("gpu-a").renew() is None and len(puts()) == 2


def test_renew_after_a_takeover_says_the_slot_is_lost(kube_api, agents, clock):
    a = agents("gpu-a")
    assert a.acquire(1, ()).granted
    b = agents("gpu-b")
    assert not b.acquire(1, ()).granted  # gpu-b starts watching the slot
    clock.t += 700  # no renewal seen for longer than the lease
    assert b.acquire(1, ()).granted
    assert a.renew() == "this node holds no taint slot"  # its PUT got 409, the read shows gpu-b
    assert slots(kube_api) == {f"{SLOT_PREFIX}0": "gpu-b"}


def test_a_slot_deleted_between_read_and_takeover_is_created_again(kube_api, agents):
    seed_slot(kube_api, 0, "gpu-x", T0 - 3600)  # expired, gpu-x no longer a node of the cluster
    kube_api.before_next(lambda: kube_api.delete(LEASES, NS, f"{SLOT_PREFIX}0"), methods=["PUT"], path="leases")
    r = agents("gpu-a").acquire(1, (), nodes={"gpu-a"})
    assert r.granted and slots(kube_api) == {f"{SLOT_PREFIX}0": "gpu-a"}
    assert [(w.method, w.status) for w in kube_api.writes(path="leases")] == [("PUT", 404), ("POST", 201)]


# --------------------------------------------------------------------------- release


def test_release_gives_back_every_slot_of_the_node(kube_api, agents):
    seed_slot(kube_api, 0, "gpu-a", T0)
    seed_slot(kube_api, 1, "gpu-a", T0)  # two: no agent writes that, a hostile one or a bug could
    a = agents("gpu-a")
    assert a.acquire(2, ()).why == "this node holds taint slot 0 (renewed)"
    assert a.release() is None and slots(kube_api) == {}


def test_release_never_deletes_a_slot_taken_over_after_it_was_read(kube_api, agents, clock):
    a = agents("gpu-a")
    assert a.acquire(1, ()).granted
    clock.t += 700
    name = f"{SLOT_PREFIX}0"

    def taken_over() -> None:  # gpu-b takes the expired slot between gpu-a's read and its DELETE
        kube_api.mutate(LEASES, NS, name, lambda o: o["spec"].update(holderIdentity="gpu-b",
                                                                      renewTime=micro_time(clock.t)))
    kube_api.before_next(taken_over, methods=["DELETE"], path="leases")
    assert a.release() is None  # the precondition failed: not ours any more, nothing to give back
    assert slots(kube_api) == {name: "gpu-b"}
    deletes = [r for r in kube_api.writes(path="leases") if r.method == "DELETE"]
    assert len(deletes) == 1 and deletes[0].status == 409


def test_delete_sends_uid_and_resource_version_preconditions(kube_api, agents):
    leases = Leases(Cluster(api_client=kube_api.api_client(), source="test"), NS)
    lease = seed_slot(kube_api, 0, "gpu-a", T0)
    meta = lease["metadata"]
    with pytest.raises(K8sError) as stale:
        leases.delete(meta["name"], meta["uid"], str(int(meta["resourceVersion"]) - 1))
    assert stale.value.conflict
    with pytest.raises(K8sError) as other:
        leases.delete(meta["name"], "not-its-uid", meta["resourceVersion"])
    assert other.value.conflict
    assert leases.get(meta["name"]) is not None
    assert leases.delete(meta["name"], meta["uid"], meta["resourceVersion"]) is True
    assert leases.get(meta["name"]) is None
    assert leases.delete(meta["name"], meta["uid"], meta["resourceVersion"]) is False
    body = [r for r in kube_api.writes(path="leases") if r.method == "DELETE"][0].body
    assert body["preconditions"] == {"uid": meta["uid"], "resourceVersion": str(int(meta["resourceVersion"]) - 1)}


def test_leases_client_create_replace_and_list(kube_api):
    leases = Leases(Cluster(api_client=kube_api.api_client(), source="test"), NS)
    seed_slot(kube_api, 0, "gpu-a", T0)
    kube_api.create(LEASES, NS, {"metadata": {"name": "unrelated"}, "spec": {}})
    assert [o["metadata"]["name"] for o in leases.list(f"{DOMAIN}/budget=taint")] == [f"{SLOT_PREFIX}0"]
    with pytest.raises(K8sError) as dup:
        leases.create({"metadata": {"name": f"{SLOT_PREFIX}0"}, "spec": {}})
    assert dup.value.already_exists
    cur = leases.get(f"{SLOT_PREFIX}0")
    with pytest.raises(ValueError, match="resourceVersion"):
        leases.replace(f"{SLOT_PREFIX}0", {"metadata": {"name": f"{SLOT_PREFIX}0"}, "spec": {}})
    stale = {"metadata": {"name": f"{SLOT_PREFIX}0", "resourceVersion": "1"}, "spec": {"holderIdentity": "x"}}
    with pytest.raises(K8sError) as conflict:
        leases.replace(f"{SLOT_PREFIX}0", stale)
    assert conflict.value.conflict and not conflict.value.already_exists
    cur["spec"]["holderIdentity"] = "gpu-b"
    assert leases.replace(f"{SLOT_PREFIX}0", cur)["spec"]["holderIdentity"] == "gpu-b"


# --------------------------------------------------------------------------- what uses the budget


def test_tainted_nodes_without_a_slot_use_the_budget(kube_api, agents):
    tainted = {"old-1", "old-2"}  # tainted by an older agent, no slot
    a = agents("gpu-a").acquire(3, tainted)
    assert a.granted and a.held_by_others == 2
    assert slots(kube_api) == {f"{SLOT_PREFIX}0": "gpu-a"}
    b = agents("gpu-b").acquire(3, tainted | {"gpu-a"})
    assert not b.granted and b.held_by_others == 3
    assert b.why == ("1 of 3 taint slots are held by gpu-a; "
                     "2 nodes carry the taint without a slot (old-1, old-2)")
    assert not agents("gpu-c").acquire(2, {"old-1", "old-2", "old-3"}).granted  # no slot usable at all
    assert slots(kube_api) == {f"{SLOT_PREFIX}0": "gpu-a"}


def test_a_smaller_limit_keeps_held_slots_and_stops_new_grants(kube_api, agents):
    a, b, c, d = (agents(f"gpu-{x}") for x in "abcd")
    for x in (a, b, c):
        assert x.acquire(3, ()).granted
    assert slots(kube_api) == {f"{SLOT_PREFIX}{i}": f"gpu-{x}" for i, x in enumerate("abc")}
    assert a.acquire(1, ()).granted and c.acquire(1, ()).granted  # fewer accelerator nodes: kept
    refused = d.acquire(1, ())
    assert not refused.granted and refused.why == "3 (the budget allows 1) taint slots are held by gpu-a, gpu-b, gpu-c"
    assert a.release() is None and b.release() is None
    assert not d.acquire(1, ()).granted  # gpu-c at slot 2 still uses the one slot allowed
    assert c.release() is None
    assert d.acquire(1, ()).granted and slots(kube_api) == {f"{SLOT_PREFIX}0": "gpu-d"}


def test_usable_slots():
    assert usable_slots(2, 0, []) == 2
    assert usable_slots(2, 1, []) == 1
    assert usable_slots(2, 1, [1]) == 0  # slot 0 free, but slot 1 and one unslotted node fill it
    assert usable_slots(1, 0, [2]) == 0
    assert usable_slots(3, 0, [0, 5]) == 2
    assert usable_slots(0, 0, []) == 0 and usable_slots(1, 5, []) == 0


def test_refusal_names_a_bounded_list():
    why = refusal(30, [f"gpu-{i}" for i in range(25)], [])
    assert why.startswith("25 of 30 taint slots are held by gpu-0, gpu-1,") and why.endswith("and 15 more")
    assert refusal(0, [], []) == "no taint slot could be taken (the budget allows 0)"


# --------------------------------------------------------------------------- failures: the safe side


@pytest.mark.parametrize("method,status", [("GET", 503), ("POST", 403), ("POST", 500)])
def test_api_errors_refuse_with_the_error(kube_api, agents, method, status):
    kube_api.fail_next(1, status, methods=[method], path="leases")
    r = agents("gpu-a").acquire(2, ())
    assert not r.granted and r.error is not None and f"HTTP {status}" in r.why
    assert slots(kube_api) == {}


def test_a_dropped_connection_refuses(kube_api, agents):
    kube_api.drop_next(5, methods=["GET"], path="leases")  # urllib3 retries a dropped GET
    r = agents("gpu-a").acquire(2, ())
    assert not r.granted and "could not be read" in r.why


def test_renew_and_release_errors_are_reported_not_raised(kube_api, agents, clock):
    a = agents("gpu-a")
    assert a.acquire(1, ()).granted
    clock.t += 300
    kube_api.fail_next(1, 503, methods=["PUT"], path="leases")
    assert "HTTP 503" in a.renew()
    assert a.renew() is None  # the next reconcile renews
    kube_api.fail_next(1, 503, methods=["DELETE"], path="leases")
    assert "HTTP 503" in a.release()
    assert a.release() is None and slots(kube_api) == {}


def test_more_leases_than_one_page_refuses(kube_api, agents, monkeypatch):
    a = agents("gpu-a")
    a.acquire(1, ())
    assert [r.query.get("limit") for r in kube_api.requests if r.path.endswith("/leases")][0] == "500"
    monkeypatch.setattr(a.leases._api, "get", lambda *args, **kw: {"metadata": {"continue": "x"}, "items": []})
    r = a.acquire(1, ())
    assert not r.granted and "more than 500 leases" in r.why


# --------------------------------------------------------------------------- hostile slots


def hostile(kube_api, index: int, spec: object) -> None:
    """A slot Lease rewritten into something no agent writes (as a hostile client could)."""
    seed_slot(kube_api, index, "placeholder", T0)
    kube_api.mutate(LEASES, NS, f"{SLOT_PREFIX}{index}", lambda o: o.__setitem__("spec", spec))


def test_hostile_slots_are_taken_over_by_resource_version_never_crash(kube_api, agents):
    hostile(kube_api, 0, {"holderIdentity": 12345, "renewTime": "garbage", "leaseDurationSeconds": "600"})
    hostile(kube_api, 1, {"holderIdentity": "evil", "renewTime": "9999-12-31T23:59:59.000000Z",
                          "leaseDurationSeconds": 600})  # renewed in the future: would hold forever
    hostile(kube_api, 2, "not an object")
    hostile(kube_api, 3, {"holderIdentity": "evil", "renewTime": micro_time(T0), "leaseDurationSeconds": True})
    hostile(kube_api, 4, {"holderIdentity": "x" * 10000, "renewTime": micro_time(T0),
                          "leaseDurationSeconds": 10**12})
    kube_api.create(LEASES, NS, {"metadata": {"name": f"{SLOT_PREFIX}007", "labels": {
        "app.kubernetes.io/managed-by": "hetero-exporter", f"{DOMAIN}/budget": "taint"}},
        "spec": {"holderIdentity": "evil", "renewTime": micro_time(T0), "leaseDurationSeconds": 600}})
    nodes = {f"gpu-{i}" for i in range(10)}  # "evil" is no node of the cluster
    for i in range(5):
        r = agents(f"gpu-{i}").acquire(5, (), nodes=nodes)
        assert r.granted and r.why.startswith(f"taint slot {i} taken"), r
    assert not agents("gpu-9").acquire(5, (), nodes=nodes).granted
    held = slots(kube_api)
    assert all(held[f"{SLOT_PREFIX}{i}"] == f"gpu-{i}" for i in range(5))
    assert held[f"{SLOT_PREFIX}007"] == "evil"  # not a slot name: ignored, left alone


def test_a_live_slot_by_an_unknown_holder_counts(kube_api, agents):
    seed_slot(kube_api, 0, "someone-else", T0)
    r = agents("gpu-a").acquire(1, ())
    assert not r.granted and r.why == "1 of 1 taint slots are held by someone-else"


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=20), inner,
                                                                                       max_size=4), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(spec=json_values, meta=st.dictionaries(st.sampled_from(["name", "resourceVersion", "uid"]), json_values))
def test_parse_slot_never_raises(spec, meta):
    meta.setdefault("name", f"{SLOT_PREFIX}1")
    slot = parse_slot({"metadata": meta, "spec": spec}, T0)
    if slot is not None:
        assert slot.index == 1 and (slot.holder is None or isinstance(slot.holder, str))
    for obj in (None, [], "x", {"metadata": "x"}, {"metadata": {"name": 5}}):
        assert parse_slot(obj, T0) is None


def test_times_round_trip_and_reject_garbage():
    assert parse_time(micro_time(T0 + 0.25)) == T0 + 0.25
    assert parse_time("2027-01-15T08:00:00Z") is not None
    for bad in (None, 5, "", "yesterday", "2027-13-01T00:00:00Z", "9" * 100):
        assert parse_time(bad) is None


# --------------------------------------------------------------------------- for the plan


def test_check_gives_the_plan_a_budget_decided_by_the_slots(kube_api, agents):
    cfg = RemedyConfig(budget_min_nodes=1, budget_max_fraction=0.1)  # 20 nodes: 2 may carry the taint
    a, b, c = agents("gpu-a"), agents("gpu-b"), agents("gpu-c")
    budget, result = a.check(cfg, 20, tainted=())
    assert result.granted and budget.granted and budget.allows(cfg)
    assert b.check(cfg, 20, tainted={"gpu-a"})[0].allows(cfg)
    budget, result = c.check(cfg, 20, tainted={"gpu-a", "gpu-b"})
    assert not budget.allows(cfg) and budget.tainted == 2 and result.why == "2 of 2 taint slots are held by gpu-a, gpu-b"
    kube_api.fail_next(1, 503, methods=["GET"], path="leases")
    failed, _ = c.check(cfg, 20, tainted=())
    assert not failed.allows(cfg) and "503" in failed.describe(cfg)


def test_lease_seconds_is_checked(kube_api, agents):
    with pytest.raises(ValueError, match="lease_seconds"):
        agents("gpu-a", lease_seconds=0)


# --------------------------------------------------------------------------- issue 25, item 4


@pytest.mark.parametrize("skew", [660.0, -660.0])
def test_a_skewed_clock_never_takes_a_slot_another_agent_holds(kube_api, agents, clock, skew):
    """gpu-b's wall clock is 11 minutes ahead (or behind): gpu-a's renewTime looks long expired
    (or in the future) to it. Expiry is measured on gpu-b's own clock since it saw the slot move."""
    a = agents("gpu-a")
    skewed = Clock(clock.t + skew)
    b = agents("gpu-b", clock=skewed)
    nodes = {"gpu-a", "gpu-b"}
    assert a.acquire(1, (), nodes=nodes).granted  # gpu-a is tainting now (not yet on its Node)
    for i in range(20):  # 20 reconciles, 10 s apart: gpu-a renews every lease/3 = 200 s
        tainted = {"gpu-a"} if i >= 5 else set()  # its taint lands after a few cycles
        assert not b.acquire(1, tainted, nodes=nodes).granted
        clock.t += 10
        skewed.t += 10
        a.renew()
    assert slots(kube_api) == {f"{SLOT_PREFIX}0": "gpu-a"}


def test_fifty_slots_of_made_up_holders_starve_no_agent(kube_api, agents):
    for i in range(50):
        seed_slot(kube_api, i, f"made-up-{i}", T0)
    r = agents("gpu-a").acquire(2, (), nodes={"gpu-a", "gpu-b"})
    assert r.granted and r.why.startswith("taint slot 0 taken"), r


def test_a_slot_held_without_the_taint_past_the_grace_is_free(kube_api, agents, clock):
    a, b = agents("gpu-a"), agents("gpu-b")
    nodes = {"gpu-a", "gpu-b"}
    assert a.acquire(1, (), nodes=nodes).granted
    assert not b.acquire(1, (), nodes=nodes).granted  # gpu-a is tainting now: within the grace
    for _ in range(15):  # gpu-a keeps renewing but never carries the taint (a broken or hostile agent)
        clock.t += 10
        a.renew()
    assert b.acquire(1, (), nodes=nodes).granted


def test_a_holder_whose_taint_has_not_landed_near_the_grace_does_not_taint_on_its_slot(kube_api, agents, clock):
    """Seen at 1,000 agents on 2 CPUs (issue 39): Node patches took minutes, other agents counted
    the slot of a node whose taint had not landed free after the grace and took it over, then
    both taints landed: 106 nodes tainted against a budget of 100."""
    a, b = agents("gpu-a"), agents("gpu-b")
    nodes = {"gpu-a", "gpu-b"}
    assert a.acquire(1, (), nodes=nodes).granted  # slot taken; its Node patch times out (overloaded API)
    assert not b.acquire(1, (), nodes=nodes).granted  # gpu-b sees gpu-a holding untainted from now on
    clock.t += 80
    assert a.acquire(1, (), nodes=nodes).granted  # still within grace - landing (120 - 30 s)
    clock.t += 15
    late = a.acquire(1, (), nodes=nodes)
    assert not late.granted and "without its taint landing" in late.why
    clock.t += 30
    assert b.acquire(1, (), nodes=nodes).granted  # gpu-b counts it free now: gpu-a never tainted on it
    clock.t += 3600
    assert not a.acquire(1, (), nodes=nodes).granted  # the others' count of it goes on: not before 6 h


def test_a_slow_api_server_stretches_the_grace_before_a_slot_is_taken_over(kube_api, agents, clock):
    """A server that answers late applies writes late: a holder's taint sent in time may land
    after the plain grace. Listings that took 50 s stretch it by 100 s (for 10 minutes)."""
    a, b = agents("gpu-a"), agents("gpu-b")
    nodes = {"gpu-a", "gpu-b"}
    assert a.acquire(1, (), nodes=nodes).granted
    listing = b.leases.list

    def slow(*args, **kw):
        clock.t += 50  # the answer came 50 s later
        return listing(*args, **kw)
    b.leases.list = slow  # type: ignore[method-assign]
    assert not b.acquire(1, (), nodes=nodes).granted  # first seen at T0 + 50
    b.leases.list = listing  # type: ignore[method-assign]
    clock.t += 130  # past the plain grace, within the stretched one
    assert not b.acquire(1, (), nodes=nodes).granted
    clock.t += 100
    assert b.acquire(1, (), nodes=nodes).granted


def test_carrying_the_taint_resets_the_holders_own_count(kube_api, agents, clock):
    a = agents("gpu-a")
    assert a.acquire(1, ()).granted
    a.carrying()  # its taint landed
    clock.t += 500
    assert a.acquire(1, ()).granted  # renewed while tainted: no deadline
    assert a.release() is None
    clock.t += 3600  # a new failure an hour later
    assert a.acquire(1, ()).granted
    clock.t += 100
    assert not a.acquire(1, ()).granted  # that taint did not land within grace - landing


def test_a_refused_holder_may_taint_again_once_it_held_nothing_for_the_forget_time(kube_api, agents, clock):
    a = agents("gpu-a")
    assert a.acquire(1, ()).granted
    clock.t += 100
    assert not a.acquire(1, ()).granted
    assert a.release() is None
    clock.t += 6 * 3600 + 1
    assert a.acquire(1, ()).granted


# --------------------------------------------------------------------------- issue 35, item 6


def unlabelled(kube_api, index: int, holder: str, renewed: float = T0, seconds: int = 604800) -> dict:
    """A Lease with a slot's name but none of the slots' labels (a stolen token's, or anyone's)."""
    return kube_api.create(LEASES, NS, {"metadata": {"name": f"{SLOT_PREFIX}{index}"},
                                        "spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds,
                                                 "renewTime": micro_time(renewed)}})


def test_slots_of_real_untainted_holders_rewritten_with_7_day_leases_starve_no_agent(kube_api, agents, clock):
    """50 slot Leases naming real nodes (none tainted), 7-day leases, rewritten every minute with
    the holders rotated (each rewrite used to restart the grace): free once the holders' grace is
    over, whatever the rewrites."""
    nodes = {f"gpu-{i}" for i in range(9)} | {"gpu-a"}
    for i in range(50):
        seed_slot(kube_api, i, f"gpu-{i % 9}", clock.t, seconds=7 * 86400)
    a = agents("gpu-a")
    granted_at = None
    for step in range(60):  # 10 minutes of reconciles, 10 s apart
        r = a.acquire(1, (), nodes=nodes)
        if r.granted:
            granted_at = step * 10
            break
        assert r.held_by_others <= 9, r  # a node counts once, however many slots name it
        clock.t += 10
        if step % 6 == 5:  # the thief rewrites every slot with the next node's name
            for i in range(50):
                kube_api.mutate(LEASES, NS, f"{SLOT_PREFIX}{i}", lambda o, i=i, s=step: o["spec"].update(
                    holderIdentity=f"gpu-{(i + s) % 9}", renewTime=micro_time(clock.t)))
    assert granted_at is not None and granted_at <= 130, granted_at


def test_a_node_holding_many_slots_uses_one(kube_api, agents):
    for i in range(3):
        seed_slot(kube_api, i, "gpu-b", T0)
    r = agents("gpu-a").acquire(3, (), nodes={"gpu-a", "gpu-b"})
    assert r.granted and r.held_by_others == 1 and r.why.startswith("taint slot 1 taken"), r


def test_a_long_lease_of_an_untainted_holder_counts_for_our_own_lease_at_most(kube_api, agents, clock):
    """A 7-day lease never renewed, by a real node within its (here endless) grace: free after
    this agent's own lease_seconds (600), not after 7 days."""
    seed_slot(kube_api, 0, "gpu-b", T0, seconds=7 * 86400)
    a = agents("gpu-a", untainted_grace=10**9)
    nodes = {"gpu-a", "gpu-b"}
    assert not a.acquire(1, (), nodes=nodes).granted
    clock.t += 599
    assert not a.acquire(1, (), nodes=nodes).granted
    clock.t += 2
    assert a.acquire(1, (), nodes=nodes).granted


def test_an_unlabelled_lease_of_a_slot_name_is_read_and_reclaimed(kube_api, agents):
    """It used to block slot 0 for good ("no taint slot could be taken"): now read by name, judged
    as a slot (its holder is no node: free) and replaced by this node's slot, labels and all."""
    unlabelled(kube_api, 0, "made-up")
    r = agents("gpu-a").acquire(1, (), nodes={"gpu-a", "gpu-b"})
    assert r.granted and r.why.startswith("taint slot 0 taken") and r.foreign == 1, r
    lease = kube_api.get(LEASES, NS, f"{SLOT_PREFIX}0")
    assert lease["spec"]["holderIdentity"] == "gpu-a" and lease["spec"]["leaseDurationSeconds"] == 600
    assert lease["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "hetero-exporter", f"{DOMAIN}/budget": "taint"}
    gets = lambda: [r for r in kube_api.requests if r.method == "GET" and r.path.endswith(f"/{SLOT_PREFIX}0")]  # noqa: E731
    read = len(gets())
    assert read >= 1  # read by name: the listing by label does not show it
    # labelled now: listed, no longer read by name, no longer foreign
    a = agents("gpu-a")
    assert a.acquire(1, (), nodes={"gpu-a"}).foreign == 0 and len(gets()) == read


def test_an_unlabelled_lease_of_a_tainted_node_counts_once_and_says_so(kube_api, agents):
    """gpu-b is tainted and holds slot 0 in an unlabelled Lease: it uses the budget once (as a
    slot holder, not also as a node tainted without a slot), and a refusal says where."""
    unlabelled(kube_api, 0, "gpu-b")
    a = agents("gpu-a")
    nodes = {"gpu-a", "gpu-b"}
    r = a.acquire(2, {"gpu-b"}, nodes=nodes)  # slot 0 answered AlreadyExists: read, held by gpu-b
    assert r.granted and r.held_by_others == 1 and r.why.startswith("taint slot 1 taken"), r
    assert a.release() is None
    r = a.acquire(1, {"gpu-b"}, nodes=nodes)
    assert not r.granted and r.held_by_others == 1 and r.error is None, r
    assert r.why == "1 of 1 taint slots are held by gpu-b (gpu-b in a Lease without the slots' labels)", r.why
    assert kube_api.get(LEASES, NS, f"{SLOT_PREFIX}0")["spec"]["holderIdentity"] == "gpu-b"


def test_an_unreadable_unlabelled_lease_refuses_naming_it(kube_api, agents):
    unlabelled(kube_api, 0, "gpu-b")
    kube_api.fail_next(5, 403, methods=["GET"], path=f"/leases/{SLOT_PREFIX}0$")
    r = agents("gpu-a").acquire(1, (), nodes={"gpu-a", "gpu-b"})
    assert not r.granted and r.error, r
    assert r.why.startswith(f"a Lease without the taint slots' labels occupies {SLOT_PREFIX}0 and could not be read")
