"""Issue 35, item 6: the fleet-wide taint budget against Leases a stolen agent token writes, on the
loopback API server with deploy/base's RBAC and admission policy in front (tests/admission.py).

- 50 slot Leases naming real nodes of the cluster (none tainted) with 7-day leases, rewritten
  every minute with the holders rotated, no longer block the taint of a failing node for good;
  made-up holders never did and still do not; no refusal event ever counts more nodes than the
  cluster has.
- A Lease with a slot's name but without the slots' labels no longer blocks tainting for good
  under a message saying "0 of N": it is read by name and reclaimed, and counted in
  ``accelerator_health_foreign_objects{kind="Lease"}``.
"""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import kubeapi
from admission import deploy_objects, install
from health_agent import HealthAgent
from test_hardening_k8s_writes import AGENT_NS, OWN_TAINT, denied, thief

pytest.importorskip("kubernetes")
pytest.importorskip("celpy", reason="cel-python evaluates the policy's CEL (pip install cel-python)")

from hetero_exporter.health.act.fleet_budget import SLOT_PREFIX  # noqa: E402
from hetero_exporter.model import names as N  # noqa: E402

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
SLOT_LABELS = {"app.kubernetes.io/managed-by": "hetero-exporter", "hetero-exporter.io/budget": "taint"}
ACCELERATOR = {"hetero-exporter.io/accelerator": "true"}
WEEK = 7 * 86400


def failing_agent(kube_api, tmp_path) -> HealthAgent:
    """gpu-node-xid79's agent (XID 79 at t=30, never reset) on its own token, enforce mode."""
    token = install(kube_api, deploy_objects(), "gpu-node-xid79")
    agent = HealthAgent("nvidia-xid79.yaml", kube_api.write_kubeconfig(tmp_path / "agent", token=token),
                        environ={"POD_NAMESPACE": AGENT_NS})
    kube_api.seed_node(agent.node, labels=ACCELERATOR)
    return agent


def tainted(kube_api, node: str) -> bool:
    return any(t["key"] == OWN_TAINT for t in kube_api.node(node)["spec"].get("taints") or [])


def refusals(kube_api, node: str) -> list[str]:
    return [e["message"] for e in kube_api.events(involved_name=node, reason="AcceleratorTaintBudgetExhausted")]


def lease(name: str, holder: str, labels: dict | None = SLOT_LABELS) -> dict:
    meta: dict = {"name": name, **({"labels": dict(labels)} if labels else {})}
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": WEEK, "renewTime": kubeapi.now_micro()}}


def test_fifty_rotating_slots_of_real_untainted_nodes_do_not_block_the_taint_for_good(kube_api, tmp_path):
    agent = failing_agent(kube_api, tmp_path)
    try:
        others = [f"gpu-{i}" for i in range(9)]
        for n in others:
            kube_api.seed_node(n, labels=ACCELERATOR)  # 10 accelerator nodes: the budget allows 1
        api = thief(kube_api, tmp_path)  # gpu-node-3's stolen agent token
        at = {"namespace": AGENT_NS}
        for i in range(50):
            api.post(LEASES, at, body=lease(f"{SLOT_PREFIX}{i}", others[i % 9]))
        first = None
        for t in range(0, 1200, 10):  # bounded: 20 minutes of cycles
            agent.cycle(t)
            if tainted(kube_api, agent.node):
                first = t
                break
            if t % 60 == 50:  # the thief rotates every holder each minute, with the stolen token
                for i in range(50):
                    name = f"{SLOT_PREFIX}{i}"
                    cur = kube_api.get(kubeapi.LEASES, AGENT_NS, name)
                    if cur["spec"]["holderIdentity"] == agent.node:
                        continue
                    cur["spec"].update(holderIdentity=others[(i + t // 60) % 9], renewTime=kubeapi.now_micro())
                    api.request("PUT", LEASES + "/{name}", {**at, "name": name}, body=cur)
        assert first is not None, refusals(kube_api, agent.node)
        # with Lease slots, the budget's listing of every accelerator Node is a watch-cache read
        listed = [r for r in kube_api.requests if r.method == "GET" and r.path == "/api/v1/nodes"]
        assert listed and all(r.query.get("resourceVersion") == "0" for r in listed), [r.target for r in listed]
        for text in refusals(kube_api, agent.node):  # never "50 of 10"
            held, total = map(int, re.search(r": (\d+) of (\d+) accelerator nodes", text).groups())
            assert held <= 9 and total == 10, text
        assert [r for r in denied(kube_api) if r.user.endswith(":hetero-exporter") and "leases" not in r.path] == []
    finally:
        agent.close()


@pytest.mark.parametrize("holder", ["made-up", "gpu-node-xid79"])
def test_an_unlabelled_lease_of_a_slots_name_is_reclaimed(kube_api, tmp_path, holder):
    """One accelerator node (the budget allows 1): slot 0's name taken by a Lease without the
    slots' labels, made by the stolen token. It used to block the taint for good with the event
    "0 of 1 accelerator nodes already carry the taint or hold a taint slot ... no slot is free"."""
    agent = failing_agent(kube_api, tmp_path)
    try:
        thief(kube_api, tmp_path).post(LEASES, {"namespace": AGENT_NS}, body=lease(f"{SLOT_PREFIX}0", holder, None))
        agent.run(0, 120)
        assert tainted(kube_api, agent.node), refusals(kube_api, agent.node)
        assert refusals(kube_api, agent.node) == []
        slot = kube_api.get(kubeapi.LEASES, AGENT_NS, f"{SLOT_PREFIX}0")
        assert slot["spec"]["holderIdentity"] == agent.node and slot["metadata"]["labels"] == SLOT_LABELS
        reg = CollectorRegistry()
        reg.register(agent.metrics)
        text = generate_latest(reg).decode()
        assert re.search(rf'{N.HEALTH_FOREIGN_OBJECTS.name}{{kind="Lease"}} [01]\.0', text), text
    finally:
        agent.close()

