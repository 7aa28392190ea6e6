"""The fleet budget's fence (issue 39 §1): at 1,000 agents on 2 CPUs a taint sent in time landed
after its slot had been counted free and taken over, and 104 to 106 nodes carried the taint
against a budget of 100. The node that takes a slot over reads the old holder's Node after its
write; the node whose taint landed reads its slot back. Whatever the order of those four
requests, at least one of the two backs off: the taker gives the slot back, or the late node
takes another slot or takes its taint off (the remedy's recheck)."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("kubernetes")

import kubeapi  # noqa: E402
from kubeapi import LEASES  # noqa: E402
from health_agent import HealthAgent  # noqa: E402

from hetero_exporter.health.act.fleet_budget import SLOT_PREFIX, FleetBudget  # noqa: E402
from hetero_exporter.k8s.client import Cluster  # noqa: E402
from hetero_exporter.k8s.leases import Leases  # noqa: E402

NS = "hetero-exporter"
DOMAIN = "hetero-exporter.io"
KEY = f"{DOMAIN}/accelerator-unhealthy"
T0 = 1_800_000_000.0
NODES = {"gpu-v", "gpu-x"}


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def fleet(kube_api):
    """budget(node, carries=None) -> FleetBudget on its own ApiClient; one shared clock."""
    clock, clients = Clock(), []

    def make(node: str, carries=None) -> FleetBudget:
        client = kube_api.api_client()
        clients.append(client)
        return FleetBudget(Leases(Cluster(api_client=client, source="test"), NS), node, domain=DOMAIN,
                           clock=clock, carries=carries)
    make.clock = clock  # type: ignore[attr-defined]
    yield make
    for c in clients:
        c.close()


def holders(kube_api) -> dict[str, str]:
    return {o["metadata"]["name"]: o["spec"]["holderIdentity"] for o in kube_api.list(LEASES, NS)}


def past_the_grace(fleet, v: FleetBudget, x: FleetBudget) -> None:
    """gpu-v holds slot 0 and gpu-x has watched it hold it untainted past the grace (120 s)."""
    assert v.acquire(1, (), nodes=NODES).granted
    assert not x.acquire(1, (), nodes=NODES).granted
    fleet.clock.t += 130


@pytest.mark.parametrize("carried, why", [(True, "carries the taint now"), (None, "could not be read")])
def test_a_takeover_whose_old_holder_carries_the_taint_now_gives_the_slot_back(kube_api, fleet, carried, why):
    v = fleet("gpu-v")
    x = fleet("gpu-x", carries={"gpu-v": carried}.get)
    past_the_grace(fleet, v, x)
    got = x.acquire(1, (), nodes=NODES)
    assert not got.granted
    assert got.why == f"taint slot 0 was taken over from gpu-v, which {why}: given back"
    assert got.fenced and holders(kube_api) == {}  # deleted, with the takeover's uid and resourceVersion
    assert x.renew() == "this node holds no taint slot" and not x.lost  # not carrying: nothing to recheck


def test_a_takeover_whose_old_holder_carries_no_taint_keeps_the_slot(kube_api, fleet):
    v = fleet("gpu-v")
    x = fleet("gpu-x", carries={"gpu-v": False}.get)
    past_the_grace(fleet, v, x)
    assert x.acquire(1, (), nodes=NODES).granted
    assert holders(kube_api) == {f"{SLOT_PREFIX}0": "gpu-x"}


def test_confirm_after_the_taint_landed(kube_api, fleet):
    v, x = fleet("gpu-v"), fleet("gpu-x", carries={"gpu-v": False}.get)
    assert v.acquire(1, (), nodes=NODES).granted
    assert v.carrying() is True and v.confirm() is None and not v.lost  # still its own
    assert v.carrying() is False  # said once: confirmed only when the taint has just landed
    gets = [r for r in kube_api.requests if r.method == "GET" and r.path.endswith(f"{SLOT_PREFIX}0")]
    assert len(gets) == 1
    assert v.release() is None
    past_the_grace(fleet, v, x)
    assert x.acquire(1, (), nodes=NODES).granted  # gpu-v's taint had not landed when gpu-x read it
    assert v.carrying() is True  # now it has
    assert v.confirm() == f"taint slot {SLOT_PREFIX}0 was taken over by gpu-x before this node's taint landed"
    assert v.lost
    refused = v.acquire(1, {"gpu-x"}, nodes=NODES)
    assert not refused.granted and v.lost  # full: the remedy takes its taint off
    assert v.release() is None and not v.lost


def test_confirm_of_a_deleted_slot_and_a_failed_read(kube_api, fleet):
    v = fleet("gpu-v")
    assert v.acquire(1, (), nodes=NODES).granted
    v.carrying()
    kube_api.fail_next(1, 503, methods=["GET"], path="leases/")
    assert v.confirm().startswith(f"cannot read back taint slot {SLOT_PREFIX}0: ")
    assert not v.lost  # unknown is not lost
    kube_api.delete(LEASES, NS, f"{SLOT_PREFIX}0")
    assert v.confirm() == f"taint slot {SLOT_PREFIX}0 was deleted before this node's taint landed"
    assert v.lost
    again = v.acquire(1, (), nodes=NODES)
    assert again.granted and not v.lost  # a free slot: taken again, the taint may stay


# the four requests: gpu-v's taint lands (W_v) then it reads its slot back (R_v); gpu-x takes the
# slot over (W_x) then reads gpu-v's Node (R_x). Every order that keeps each node's own order.
ORDERS = sorted({o for o in itertools.permutations(["Wv", "Rv", "Wx", "Rx"])
                 if o.index("Wv") < o.index("Rv") and o.index("Wx") < o.index("Rx")})


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(o) for o in ORDERS])
def test_whatever_the_order_never_two_taints_on_one_slot(kube_api, fleet, order):
    taints: dict[str, bool] = {}
    steps = list(order)
    done: list[str] = []
    v = fleet("gpu-v")
    verdict: dict[str, object] = {}

    def run_v(until: str) -> None:  # gpu-v's steps due before ``until``
        while steps and steps[0] in ("Wv", "Rv") and steps[0] != until:
            step = steps.pop(0)
            done.append(step)
            if step == "Wv":
                taints["gpu-v"] = True
                assert v.carrying() is True
            else:
                verdict["v"] = v.confirm()

    def carries(node: str):  # R_x: gpu-v's steps due before it run first
        run_v("Rx")
        assert steps.pop(0) == "Rx"
        done.append("Rx")
        return taints.get(node, False)

    x = fleet("gpu-x", carries=carries)
    past_the_grace(fleet, v, x)
    run_v("Wx")
    assert steps[0] == "Wx"
    done.append(steps.pop(0))
    got = x.acquire(1, (), nodes=NODES)
    run_v("")
    assert done == list(order) and not steps
    x_on_slot = got.granted
    v_on_slot = verdict["v"] is None
    assert not (x_on_slot and v_on_slot), (order, got, verdict)
    assert x_on_slot or v_on_slot or (not x_on_slot and v.lost)  # at most both back off, never both stay
    if v_on_slot:
        assert holders(kube_api).get(f"{SLOT_PREFIX}0") in (None, "gpu-v")
    else:
        assert v.lost


# --------------------------------------------------------------------------- the agent's recheck


def tainted(kube_api, node: str) -> bool:
    return any(t["key"] == KEY for t in kube_api.node(node)["spec"].get("taints") or [])


def fleet_agent(kube_api, tmp_path, scenario: str = "health-xid79.yaml", budget_nodes: int = 1) -> HealthAgent:
    """The scenario's node in a fleet of 10 accelerator nodes (gpu-0 .. gpu-8 beside it), budget
    ``budget_nodes``."""
    agent = HealthAgent(scenario, kube_api.write_kubeconfig(tmp_path / "kc"), environ={"POD_NAMESPACE": NS},
                        health={"budget_max_fraction": budget_nodes / 10, "budget_min_nodes": 1})
    for name in [agent.node] + [f"gpu-{i}" for i in range(9)]:
        kube_api.seed_node(name, labels={f"{DOMAIN}/accelerator": "true"})
    return agent


def late_taint(kube_api, tmp_path, budget_nodes: int) -> HealthAgent:
    """gpu-node-7 (XID 79 at t=60) in a fleet of 10 accelerator nodes, budget ``budget_nodes``.
    Just before its taint lands, gpu-0 takes its slot over and carries the taint: as when an
    overloaded API server applies a Node patch after the others counted its slot free."""
    agent = fleet_agent(kube_api, tmp_path, budget_nodes=budget_nodes)
    agent.run(0, 50)
    assert not tainted(kube_api, agent.node)

    def takeover() -> None:
        def to_gpu0(lease: dict) -> None:
            lease["spec"]["holderIdentity"] = "gpu-0"
            lease["spec"]["renewTime"] = kubeapi.now_micro()
        kube_api.mutate(LEASES, NS, f"{SLOT_PREFIX}0", to_gpu0)
        kube_api.mutate_node("gpu-0", lambda n: n["spec"].setdefault("taints", []).append(
            {"key": KEY, "value": "device-lost", "effect": "NoSchedule"}))
    kube_api.before_next(takeover, methods=["PATCH"], path=f"/api/v1/nodes/{agent.node}$")
    agent.cycle(60)
    return agent


def test_a_node_whose_slot_was_taken_before_its_taint_landed_takes_the_taint_off_when_the_budget_is_full(
        kube_api, tmp_path):
    agent = late_taint(kube_api, tmp_path, budget_nodes=1)
    try:
        assert not tainted(kube_api, agent.node) and tainted(kube_api, "gpu-0")
        assert holders(kube_api) == {f"{SLOT_PREFIX}0": "gpu-0"}
        (ev,) = kube_api.events(involved_name=agent.node, reason="AcceleratorTaintBudgetExhausted")
        assert ev["message"].startswith(f"taking the taint off {agent.node} (")
        assert "its taint slot was taken over before its taint landed and none is free now" in ev["message"]
        assert agent.metrics.actions().get(("taint", "refused"))
        cond = next(c for c in kube_api.node(agent.node)["status"]["conditions"]
                    if c["type"] == "AcceleratorUnhealthy")
        assert cond["status"] == "True"  # still unhealthy: only the taint is refused
        # every stored version: the node carried the taint only between its patch and the recheck
        history = [any(t["key"] == KEY for t in v["spec"].get("taints") or [])
                   for v in kube_api.node_versions(agent.node)]
        on = "".join("T" if h else "." for h in history)
        assert on.count("T") >= 1 and on.rstrip(".").lstrip(".").count(".") == 0 and not history[-1], on
        agent.run(70, 120)  # later cycles: refused while gpu-0 holds the only slot, no churn
        assert not tainted(kube_api, agent.node) and not agent.remedy._lost()
        assert len(kube_api.events(involved_name=agent.node, reason="AcceleratorTaintBudgetExhausted")) == 1
    finally:
        agent.close()


def test_a_node_whose_slot_was_taken_before_its_taint_landed_takes_another_free_slot(kube_api, tmp_path):
    agent = late_taint(kube_api, tmp_path, budget_nodes=2)
    try:
        assert tainted(kube_api, agent.node) and tainted(kube_api, "gpu-0")
        assert sorted(holders(kube_api).values()) == ["gpu-0", agent.node]
        assert not kube_api.events(involved_name=agent.node, reason="AcceleratorTaintBudgetExhausted")
        assert not agent.remedy._lost()
    finally:
        agent.close()


def test_a_slot_lost_while_someone_removed_the_taint_is_not_asked_about_every_cycle(kube_api, tmp_path):
    """An operator removed the taint (respected until recovery), then the slot was taken over:
    there is no taint to keep or take off, so the loss is forgotten and quiet cycles stay quiet."""
    agent = fleet_agent(kube_api, tmp_path, "nvidia-xid79.yaml")
    try:
        agent.run(0, 40)
        assert tainted(kube_api, agent.node) and holders(kube_api) == {f"{SLOT_PREFIX}0": agent.node}
        kube_api.mutate_node(agent.node, lambda n: n["spec"].update(taints=[]))  # an operator
        agent.cycle(50)
        assert not tainted(kube_api, agent.node)

        def to_gpu0(lease: dict) -> None:
            lease["spec"]["holderIdentity"] = "gpu-0"
        kube_api.mutate(LEASES, NS, f"{SLOT_PREFIX}0", to_gpu0)
        agent.cycle(300)  # a resync, and the renewal (a third of the lease) finds the slot gone
        assert not tainted(kube_api, agent.node) and not agent.remedy._lost()
        assert not kube_api.events(involved_name=agent.node, reason="AcceleratorTaintBudgetExhausted")
        before = len(kube_api.requests)
        out = agent.cycle(310)
        assert out is not None and out.skipped == "nothing changed since the last reconcile"
        assert len(kube_api.requests) == before
    finally:
        agent.close()


def test_a_grant_that_planning_made_late_is_not_sent(kube_api, tmp_path):
    """The deadline is asked again right before the Node patch: an agent starved of CPU between
    its grant and its send (115 s here) would send a taint the others may count free."""
    agent = fleet_agent(kube_api, tmp_path)
    try:
        agent.run(0, 50)
        granted = agent.remedy._budget

        def starved(*args, **kw):
            budget = granted(*args, **kw)
            agent.clock.advance(115)  # planning on a starved CPU, past grace less landing (120 - 2 x 5 s)
            return budget
        agent.remedy._budget = starved  # type: ignore[method-assign]
        agent.cycle(60)
        assert not tainted(kube_api, agent.node)
        assert holders(kube_api) == {}  # the slot was given back
        (ev,) = kube_api.events(involved_name=agent.node, reason="AcceleratorTaintBudgetExhausted")
        assert ev["message"].startswith(f"not tainting {agent.node} (") and "without its taint landing" in ev["message"]
    finally:
        agent.close()


def test_the_takers_refusal_event_names_the_fence(kube_api, tmp_path):
    """gpu-0's slot Lease is malformed (no duration: free to a writer that replaces it by its
    resourceVersion); gpu-0's taint lands just before the takeover's write: the fence gives the
    slot back and the refusal says so, not "no slot is free"."""
    agent = fleet_agent(kube_api, tmp_path)
    try:
        kube_api.create(LEASES, NS, {"metadata": {"name": f"{SLOT_PREFIX}0", "labels": {
            "app.kubernetes.io/managed-by": "hetero-exporter", f"{DOMAIN}/budget": "taint"}},
            "spec": {"holderIdentity": "gpu-0", "renewTime": kubeapi.now_micro()}})
        agent.run(0, 50)
        kube_api.before_next(lambda: kube_api.mutate_node("gpu-0", lambda n: n["spec"].setdefault("taints", []).append(
            {"key": KEY, "value": "device-lost", "effect": "NoSchedule"})), methods=["PUT"], path=f"{SLOT_PREFIX}0$")
        agent.cycle(60)
        assert not tainted(kube_api, agent.node) and holders(kube_api) == {}
        (ev,) = kube_api.events(involved_name=agent.node, reason="AcceleratorTaintBudgetExhausted")
        assert ev["message"].endswith(": taint slot 0 was taken over from gpu-0, which carries the taint now: given back")
    finally:
        agent.close()
