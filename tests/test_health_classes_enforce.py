"""Issue 38 §1 against the loopback API server in enforce mode: device classes on one mixed node
(two H100s for training, two L40S for inference) give each failed device its class's
DeviceTaintRule effect and taint the node only for the class that wants it; a class's budget share
holds across nodes that fail at once, with the fleet-wide Lease slots and without them; and a
promotion (health.promote) fails a device and taints the node through its class."""

from __future__ import annotations

import json

import pytest

import kubeapi
from health_agent import HealthAgent
from hetero_exporter.health.detect import policy as policy_mod
from hetero_exporter.model import names as N

pytest.importorskip("kubernetes")

KEY = "hetero-exporter.io/accelerator-unhealthy"
NS = "hetero-exporter"
ACCELERATOR = {"hetero-exporter.io/accelerator": "true"}

MIXED = """
name: mixed-classes
node: gpu-mixed-1
devices:
  - vendor: nvidia
    count: 2
    product: "NVIDIA H100 80GB HBM3"
    memory_total: 85520809984
    driver_version: "570.86.15"
    pci_address: "0000:18:00.0"
    pci_stride: 16
    values: {utilization_ratio: 0.8, memory_used_bytes: 40GiB, temperature_core_celsius: 60, power_watts: 500,
             power_limit_watts: 700}
  - vendor: nvidia
    count: 2
    product: "NVIDIA L40S"
    memory_total: 51527024640
    driver_version: "570.86.15"
    pci_address: "0000:98:00.0"
    pci_stride: 16
    values: {utilization_ratio: 0.5, memory_used_bytes: 20GiB, temperature_core_celsius: 50, power_watts: 250,
             power_limit_watts: 350}
faults:
"""
# index 2 (an L40S) falls off the bus at t=60, index 0 (an H100) at t=120
TWO_FAULTS = MIXED + """  - {at: 60, vendor: nvidia, index: 2, kind: xid, code: "79", message: "GPU has fallen off the bus"}
  - {at: 120, vendor: nvidia, index: 0, kind: xid, code: "79", message: "GPU has fallen off the bus"}
"""

CLASSES = [
    {"name": "training", "match": {"vendor": "nvidia", "model": "H100*"}, "device_taint_effect": "NoSchedule",
     "node_taint": True},
    {"name": "inference", "match": {"vendor": "nvidia", "model": "L40S*"}, "device_taint_effect": "NoExecute",
     "node_taint": False},
]


def _scenario(tmp_path, text: str, name: str = "s.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _seed_slices(api, agent: HealthAgent) -> list[str]:
    """The node and a ResourceSlice listing its four GPUs by uuid (NVIDIA's DRA driver's way)."""
    agent.cycle(0)
    uuids = [d.identity.uuid for d in agent.last_snapshot.devices]
    api.seed_resource_slice(f"{agent.node}-gpu.nvidia.com", agent.node, [
        {"name": f"gpu-{i}", "attributes": {"uuid": {"string": u}}} for i, u in enumerate(uuids)],
        driver="gpu.nvidia.com")
    return uuids


def _effects(api) -> dict[str, str]:
    """DRA device name -> the effect of its DeviceTaintRule."""
    return {r["spec"]["deviceSelector"]["device"]: r["spec"]["taint"]["effect"]
            for r in api.list(kubeapi.DEVICE_TAINT_RULES)}


def _tainted(api, node: str) -> bool:
    return any(t["key"] == KEY for t in api.node(node)["spec"].get("taints") or [])


def test_one_node_two_classes_two_device_taint_effects_and_the_node_taint_only_for_training(kube_api, tmp_path):
    agent = HealthAgent(_scenario(tmp_path, TWO_FAULTS), kube_api.write_kubeconfig(tmp_path / "kc"),
                        health={"classes": CLASSES}, state_dir=str(tmp_path / "state"))
    try:
        kube_api.seed_node(agent.node, labels=ACCELERATOR)
        _seed_slices(kube_api, agent)
        agent.run(10, 110)
        # the L40S is lost (a node-level fault by the policy), but its class keeps the node untainted
        assert _effects(kube_api) == {"gpu-2": "NoExecute"}
        assert not _tainted(kube_api, agent.node)
        gauge = next(m for m in agent.metrics.collect() if m.name == N.HEALTH_NODE_UNHEALTHY.name)
        assert gauge.samples[0].value == 0.0  # the policy alone would say 1: the class says no
        agent.run(120, 160)
        assert _effects(kube_api) == {"gpu-0": "NoSchedule", "gpu-2": "NoExecute"}
        assert _tainted(kube_api, agent.node)
        book = json.loads(kube_api.node(agent.node)["metadata"]["annotations"]["hetero-exporter.io/agent-state"])
        assert book["taint"]["classes"] == ["training"]  # what other nodes count the class's share by
    finally:
        agent.close()


def _share_agents(kube_api, tmp_path, fleet_budget: bool, whole_up_to: int = 500) -> list[HealthAgent]:
    """Three nodes whose H100 0 falls off the bus at t=60 (training: share 1 of 3 nodes), and a
    fourth whose L40S 2 does (inference: share 0.5 -> 2, node_taint true here)."""
    kc = kube_api.write_kubeconfig(tmp_path / "kc")
    training = _scenario(tmp_path, MIXED + '  - {at: 60, vendor: nvidia, index: 0, kind: xid, code: "79"}\n', "t.yaml")
    inference = _scenario(tmp_path, MIXED + '  - {at: 60, vendor: nvidia, index: 2, kind: xid, code: "79"}\n', "i.yaml")
    classes = [{**CLASSES[0], "budget_share": 0.25},
               {**CLASSES[1], "node_taint": True, "budget_share": 0.5}]
    health = {"classes": classes, "budget_max_fraction": 1.0, "budget_min_nodes": 1, "fleet_budget": fleet_budget,
              "budget_whole_listing_max_nodes": whole_up_to}
    agents = [HealthAgent(training if i < 3 else inference, kc, node=f"gpu-{i}", health=health,
                          environ={"POD_NAMESPACE": NS}, state_dir=str(tmp_path / f"state-{i}")) for i in range(4)]
    for a in agents:
        kube_api.seed_node(a.node, labels=ACCELERATOR)
    return agents


@pytest.mark.parametrize("fleet_budget,whole_up_to", [(True, 500), (True, 0), (False, 500)],
                         ids=["lease-slots", "lease-slots-names-and-labelled", "counted"])
def test_a_class_share_holds_while_another_class_still_taints(kube_api, tmp_path, fleet_budget, whole_up_to):
    """``whole_up_to`` 0: the budget lists the names and the labelled nodes, these whole (their
    books say which classes their taint is for)."""
    agents = _share_agents(kube_api, tmp_path, fleet_budget, whole_up_to)
    try:
        for t in range(10, 130, 10):  # bounded: the agents in step, every 10 s
            for a in agents:
                a.cycle(t)
        tainted = [a.node for a in agents if _tainted(kube_api, a.node)]
        # 4 accelerator nodes: training's share 0.25 allows 1, inference's 0.5 allows 2, the fleet 4
        assert tainted == ["gpu-0", "gpu-3"], tainted
        for a in agents[1:3]:
            assert a.metrics.actions().get(("taint", "refused")), a.node
            (ev,) = kube_api.events(involved_name=a.node, reason="AcceleratorTaintBudgetExhausted")
            assert "class training" in ev["message"]
        if fleet_budget:
            slots = {s["metadata"]["name"]: s["spec"]["holderIdentity"] for s in kube_api.list(kubeapi.LEASES, NS)}
            assert slots["hetero-exporter-taint-slot-training-0"] == "gpu-0"
            assert slots["hetero-exporter-taint-slot-inference-0"] == "gpu-3"
            assert sorted(v for k, v in slots.items() if k[len("hetero-exporter-taint-slot-"):].isdigit()) == \
                ["gpu-0", "gpu-3"]
            assert len(slots) == 4  # no class slot left behind by a refused node
        whole = {r.query.get("labelSelector") for r in kube_api.node_lists(table=False)}
        assert whole == ({f"hetero-exporter.io/accelerator=true,{KEY}"} if whole_up_to == 0
                         else {"hetero-exporter.io/accelerator=true"})
    finally:
        for a in agents:
            a.close()


def test_a_promotion_fails_a_device_and_its_class_taints_the_node(kube_api, tmp_path):
    """XID 13 three times in ten minutes on H100 1 (an application error: alone it fails nothing):
    promoted to failed, a training device: its DeviceTaintRule and the node taint."""
    text = MIXED + "".join(f'  - {{at: {t}, vendor: nvidia, index: 1, kind: xid, code: "13"}}\n' for t in (30, 90, 150))
    agent = HealthAgent(_scenario(tmp_path, text), kube_api.write_kubeconfig(tmp_path / "kc"),
                        health={"classes": CLASSES},
                        state_dir=str(tmp_path / "state"))
    promoting = policy_mod.load(None, [{"vendor": "nvidia", "code": "13", "count": 3, "window_seconds": 600,
                                        "to": "failed"}])
    agent.policy = agent.verdicts.policy = agent.remedy.policy = promoting  # the judge and the plan read it
    try:
        kube_api.seed_node(agent.node, labels=ACCELERATOR)
        _seed_slices(kube_api, agent)
        agent.run(10, 140)
        assert _effects(kube_api) == {} and not _tainted(kube_api, agent.node)
        agent.run(150, 170)
        t = 180.0
        while not _effects(kube_api) and t <= 300:  # bounded; the fake NVML's event thread may hand
            agent.run(t, t)  # the third XID to a later cycle on a loaded machine (still in the window)
            t += 10
        assert _effects(kube_api) == {"gpu-1": "NoSchedule"} and _tainted(kube_api, agent.node)
        promoted = [m for m in agent.metrics.collect() if m.name == N.HEALTH_PROMOTIONS.family]
        assert [(s.labels, s.value) for s in promoted[0].samples if s.name.endswith("_total")] == [
            ({"vendor": "nvidia", "code": "13", "to": "failed"}, 1.0)]
        cond = next(c for c in kube_api.node(agent.node)["status"]["conditions"] if c["type"] == "AcceleratorUnhealthy")
        assert cond["reason"] == "NvidiaXid13" and "promoted: 3 x 13 in 600 s" in cond["message"]
    finally:
        agent.close()
