"""Issue 15 end to end: the health agent (fake NVML -> rules -> remedy) against the loopback API
server with resource.k8s.io/v1 served. One GPU of four falls off the bus: a DeviceTaintRule for
that device only, the pod holding it gets hetero-exporter.io/AcceleratorHealthy=False and a
Warning event; the GPU comes back: the rule is deleted and the condition is True. A restart of the
agent mid-episode duplicates nothing and loses nothing. Also: a cluster without DRA, a black-hole
node (pods failing admission for nvidia.com/gpu), 20 agents failing at once under one budget, and
opt-in eviction through a PodDisruptionBudget."""

from __future__ import annotations

import logging
import threading

import pytest

import kubeapi
from health_agent import HealthAgent

pytest.importorskip("kubernetes")

SCENARIO = "health-dra-4gpu.yaml"
KEY = "hetero-exporter.io/accelerator-unhealthy"
COND = "hetero-exporter.io/AcceleratorHealthy"


def _agent(api, tmp_path, **kw) -> HealthAgent:
    kw.setdefault("pods", {2: ("ml", "train-0")})
    # identities pinned at first read survive a restart here (a GPU lost keeps its uuid)
    kw.setdefault("state_dir", str(tmp_path / "state"))
    return HealthAgent(SCENARIO, api.write_kubeconfig(tmp_path / "kc"), **kw)


def _seed(api, agent: HealthAgent) -> list[str]:
    """The node, the pod holding GPU 2, and a ResourceSlice listing the four GPUs by uuid (as
    NVIDIA's DRA driver publishes them: device names gpu-<index>, a string attribute uuid)."""
    api.seed_node(agent.node)
    api.seed_pod("ml", "train-0", agent.node, labels={"app": "train"})
    agent.cycle(0)
    uuids = [d.identity.uuid for d in agent.last_snapshot.devices]
    api.seed_resource_slice(f"{agent.node}-gpu.nvidia.com", agent.node, [
        {"name": f"gpu-{i}", "attributes": {"uuid": {"string": u}, "index": {"int": i},
                                            "productName": {"string": "NVIDIA H100 80GB HBM3"}}}
        for i, u in enumerate(uuids)], driver="gpu.nvidia.com")
    return uuids


def _rules(api) -> list[dict]:
    return api.list(kubeapi.DEVICE_TAINT_RULES)


def _pod_condition(api) -> dict | None:
    pod = api.get(kubeapi.PODS, "ml", "train-0")
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == COND), None)


def _pod_events(api, type_: str | None = None) -> list[dict]:
    return [e for e in api.list(kubeapi.EVENTS, "ml") if e["involvedObject"].get("kind") == "Pod"
            and e["involvedObject"]["name"] == "train-0" and (type_ is None or e["type"] == type_)]


def test_one_gpu_of_four_off_the_bus_taints_that_device_and_signals_its_pod(kube_api, tmp_path):
    agent = _agent(kube_api, tmp_path)
    try:
        uuids = _seed(kube_api, agent)
        agent.run(10, 50)
        assert _rules(kube_api) == [] and _pod_condition(kube_api) is None
        agent.run(60, 60)
        first = _pod_condition(kube_api)
        assert first["status"] == "False"
        agent.run(70, 90)
        # the reason moved (gpu-lost, then the Xid 79 event): no transition, the time stays
        assert _pod_condition(kube_api)["lastTransitionTime"] == first["lastTransitionTime"]
        (rule,) = _rules(kube_api)
        assert rule["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": agent.node, "device": "gpu-2"}
        assert rule["spec"]["taint"]["key"] == KEY and rule["spec"]["taint"]["effect"] == "NoSchedule"
        assert rule["spec"]["taint"]["timeAdded"]  # set by the server
        assert rule["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "hetero-exporter"
        assert rule["metadata"]["annotations"]["hetero-exporter.io/node"] == agent.node
        assert rule["metadata"]["annotations"]["hetero-exporter.io/device"] == uuids[2]
        assert "79" in rule["metadata"]["annotations"]["hetero-exporter.io/message"]
        cond = _pod_condition(kube_api)
        assert cond["status"] == "False" and cond["reason"] == "NvidiaXid79"
        assert "GPU 2" in cond["message"] and uuids[2] in cond["message"]
        (warning,) = _pod_events(kube_api, "Warning")
        assert warning["involvedObject"]["namespace"] == "ml" and warning["involvedObject"]["uid"]
        assert warning["reason"] == "AcceleratorFailed" and "GPU 2" in warning["message"]
        # the node's own signals as before: taint (XID 79 is node-level) and condition
        node = kube_api.node(agent.node)
        assert any(t["key"] == KEY for t in node["spec"]["taints"])

        agent.run(180, 220)
        assert _rules(kube_api) == []
        cond = _pod_condition(kube_api)
        assert cond["status"] == "True" and cond["reason"] == "AcceleratorsHealthy"
        assert len(_pod_events(kube_api, "Warning")) == 1 and len(_pod_events(kube_api, "Normal")) == 1
        assert not any(t["key"] == KEY for t in kube_api.node(agent.node)["spec"].get("taints") or [])
        rule_writes = [r.method for r in kube_api.requests if "/devicetaintrules" in r.path and r.is_write]
        # one create, a patch when the reason moved from gpu-lost to Xid 79, one delete
        assert rule_writes.count("POST") == 1 and rule_writes.count("DELETE") == 1
        assert agent.metrics.actions()[("device-taint", "ok")] == len(rule_writes)
        assert agent.metrics.actions()[("pod-condition", "ok")] >= 2
    finally:
        agent.close()


def test_a_restart_mid_episode_duplicates_nothing_and_loses_nothing(kube_api, tmp_path):
    first = _agent(kube_api, tmp_path)
    _seed(kube_api, first)
    first.run(10, 90)
    rule_before = _rules(kube_api)
    writes_before = len(kube_api.writes(changed=True))
    first.close()
    # a new process: nothing in memory, the same node; it reads its bookkeeping back first
    second = _agent(kube_api, tmp_path, clock=first.clock)
    try:
        second.run(100, 170)
        assert [r["metadata"]["uid"] for r in _rules(kube_api)] == [r["metadata"]["uid"] for r in rule_before]
        assert len(_pod_events(kube_api)) == 1 and _pod_condition(kube_api)["status"] == "False"
        node_warnings = kube_api.events(involved_name=second.node, type="Warning")
        assert len(node_warnings) == 1, [e["message"] for e in node_warnings]
        # no rule, pod or event was written again (only the Node's bookkeeping heartbeat and the
        # budget slot's renewal may move)
        changed = [w for w in kube_api.writes(changed=True)[writes_before:]
                   if "/nodes/" not in w.path and "/leases/" not in w.path]
        assert changed == [], [(w.method, w.path) for w in changed]
        second.run(180, 200)
        assert _rules(kube_api) == [] and _pod_condition(kube_api)["status"] == "True"
        assert len(_pod_events(kube_api, "Normal")) == 1
    finally:
        second.close()


def test_without_dra_the_node_signals_work_and_it_says_so_once(tmp_path, caplog):
    api = kubeapi.KubeAPIServer(dra=False).start()
    agent = _agent(api, tmp_path)
    try:
        api.seed_node(agent.node)
        api.seed_pod("ml", "train-0", agent.node)
        with caplog.at_level(logging.INFO, logger="hetero_exporter.health.act.remedy_cluster"):
            agent.run(0, 120)
        said = [r for r in caplog.records if "does not serve DRA" in r.getMessage()]
        assert len(said) == 1
        assert _pod_condition(api)["status"] == "False"
        assert any(t["key"] == KEY for t in api.node(agent.node)["spec"]["taints"])
        assert not [r for r in api.requests if "devicetaintrules" in r.path or "resourceslices" in r.path]
        assert agent.loop.last is None or agent.loop.last.error is None
    finally:
        agent.close()
        api.close()


def _admission_failure(api, node: str, i: int) -> None:
    """A pod as the kubelet leaves it when the device plugin's Allocate fails (kubelet
    pkg/kubelet/cm/devicemanager: 'Allocate failed due to ..., which is unexpected')."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"job-{i}", "namespace": "ml"},
           "spec": {"nodeName": node, "containers": [{"name": "main", "image": "cuda",
                                                      "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
           "status": {"phase": "Failed", "reason": "UnexpectedAdmissionError",
                      "message": "Pod was rejected: Allocate failed due to rpc error: code = Unknown desc = "
                                 "failed to get device nvidia.com/gpu, which is unexpected",
                      "startTime": kubeapi.now_rfc3339()}}
    api.create(kubeapi.PODS, "ml", pod)


def test_a_node_whose_pods_fail_admission_for_gpus_is_tainted_naming_it(kube_api, tmp_path):
    agent = HealthAgent("health-xid79.yaml", kube_api.write_kubeconfig(tmp_path / "kc"))
    try:
        kube_api.seed_node(agent.node)
        agent.run(0, 20)
        assert not kube_api.node(agent.node)["spec"].get("taints")
        for i in range(4):
            _admission_failure(kube_api, agent.node, i)
        agent.clock.set_t(30)
        agent.remedy._last_sig = None  # the next reconcile re-reads at once (resync would, within 60 s)
        agent.run(30, 40)
        node = kube_api.node(agent.node)
        (taint,) = [t for t in node["spec"]["taints"] if t["key"] == KEY]
        assert taint["value"] == "admission-failures"
        cond = next(c for c in node["status"]["conditions"] if c["type"] == "AcceleratorUnhealthy")
        assert cond["status"] == "True" and cond["reason"] == "AcceleratorAdmissionFailures"
        assert "nvidia.com/gpu" in cond["message"] and "4 pods failed admission" in cond["message"]
        (ev,) = kube_api.events(involved_name=agent.node, reason="AcceleratorAdmissionFailures")
        assert "nvidia.com/gpu" in ev["message"]
    finally:
        agent.close()


@pytest.mark.parametrize("whole_up_to", [500, 0], ids=["whole-listing", "names-and-labelled"])
def test_twenty_agents_failing_at_once_never_taint_more_nodes_than_the_budget(kube_api, tmp_path, whole_up_to):
    """20 nodes of a 20-node fleet hit XID 79 in the same cycle; budget 10 % = 2 nodes. Each
    failing node lists every Node whole, or (``budget_whole_listing_max_nodes`` below the fleet)
    the names as a Table and the nodes labelled as tainted: the slots keep the budget either way."""
    kc = kube_api.write_kubeconfig(tmp_path / "kc")
    env = {"POD_NAMESPACE": "hetero-exporter"}
    agents = [HealthAgent("health-xid79.yaml", kc, node=f"gpu-{i:02d}", environ=env,
                          health={"budget_max_fraction": 0.1, "budget_min_nodes": 1,
                                  "budget_whole_listing_max_nodes": whole_up_to}) for i in range(20)]
    try:
        for a in agents:
            kube_api.seed_node(a.node, labels={"hetero-exporter.io/accelerator": "true"})
        barrier = threading.Barrier(len(agents))
        errors: list[BaseException] = []
        counts: list[int] = []

        def run(a: HealthAgent) -> None:
            try:
                for t in range(50, 110, 10):  # bounded: six cycles, all agents in step
                    barrier.wait(timeout=60)
                    a.cycle(t)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                barrier.abort()

        def tainted() -> int:
            return sum(any(t["key"] == KEY for t in kube_api.node(a.node)["spec"].get("taints") or [])
                       for a in agents)

        threads = [threading.Thread(target=run, args=(a,)) for a in agents]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
            counts.append(tainted())
        assert not errors, errors
        assert tainted() == 2 and max(counts) <= 2
        refused = [a for a in agents if a.metrics.actions().get(("taint", "refused"))]
        assert len(refused) == 18
        slots = kube_api.list(kubeapi.LEASES, "hetero-exporter")
        assert sorted(s["spec"]["holderIdentity"] for s in slots) == sorted(
            a.node for a in agents if a not in refused)
        # every stored version of every node: never more than 2 carried the taint at once
        history = sorted((int(v["metadata"]["resourceVersion"]), v["metadata"]["name"],
                          any(t["key"] == KEY for t in v["spec"].get("taints") or []))
                         for a in agents for v in kube_api.node_versions(a.node))
        state: dict[str, bool] = {}
        for _, name, on in history:
            state[name] = on
            assert sum(state.values()) <= 2
        whole = [r for r in kube_api.node_lists(table=False) if KEY not in r.query.get("labelSelector", "")]
        assert bool(whole) is (whole_up_to >= 20)
        for a in agents:  # the taint's mirror label, on the tainted nodes only
            node = kube_api.node(a.node)
            assert (KEY in node["metadata"]["labels"]) is any(t["key"] == KEY for t in node["spec"].get("taints") or [])
    finally:
        for a in agents:
            a.close()


def test_opt_in_eviction_honours_the_pod_disruption_budget(kube_api, tmp_path):
    agent = _agent(kube_api, tmp_path, health={"evict_pods": True})
    try:
        _seed(kube_api, agent)
        kube_api.seed_pdb("ml", "train", {"matchLabels": {"app": "train"}}, min_available=1)
        agent.run(10, 90)
        pod = kube_api.get(kubeapi.PODS, "ml", "train-0")  # the budget forbids it: still there
        assert pod["metadata"]["name"] == "train-0"
        blocked = [r for r in kube_api.requests if r.path.endswith("/eviction")]
        assert blocked and all(r.status == 429 for r in blocked)
        kube_api.delete(kubeapi.PDBS, "ml", "train")
        agent.remedy._last_sig = None
        agent.run(100, 110)
        with pytest.raises(kubeapi.ApiError):
            kube_api.get(kubeapi.PODS, "ml", "train-0")
    finally:
        agent.close()


def _validate(obj: dict) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(obj, "1.37.0", strict=True)  # raises naming the field


def test_what_the_agent_creates_validates_against_the_kubernetes_1_37_schemas(kube_api, tmp_path):
    """The DeviceTaintRules, Lease slots and pod events the agent POSTs, as the real API server's
    OpenAPI schema of 1.37 (resource.k8s.io/v1 is GA there) defines them, strictly."""
    agent = _agent(kube_api, tmp_path, environ={"POD_NAMESPACE": "hetero-exporter"})
    try:
        _seed(kube_api, agent)
        agent.run(10, 90)
    finally:
        agent.close()
    posted = {}
    for r in kube_api.requests:
        if r.method == "POST" and isinstance(r.body, dict):
            posted.setdefault(r.body.get("kind"), []).append(r.body)
    assert {"DeviceTaintRule", "Lease", "Event"} <= set(posted)
    for kind in ("DeviceTaintRule", "Lease", "Event"):
        for body in posted[kind]:
            _validate(body)


def test_the_readme_job_example_restarts_on_the_pod_condition(tmp_path):
    """README's checkpoint-linked retry: a valid batch/v1 Job whose podFailurePolicy ignores the
    pod condition this agent writes."""
    import re

    import yaml
    from conftest import ROOT
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "kind: Job" in b)
    job = yaml.safe_load(block)
    _validate(job)
    (rule,) = [r for r in job["spec"]["podFailurePolicy"]["rules"] if r["action"] == "Ignore"]
    assert rule["onPodConditions"] == [{"type": COND, "status": "False"}]


def test_hami_health_is_put_back_soon_after_hamis_device_plugin_rewrites_it(kube_api, tmp_path):
    """HAMi's device plugin rewrites hami.io/node-nvidia-register from its own view every ~30 s;
    with the hami integration on and a device failed, the agent re-reads the Node every 10 s."""
    agent = _agent(kube_api, tmp_path, health={"scheduler_annotations": ["hami"]})
    try:
        kube_api.seed_node(agent.node)
        agent.cycle(0)
        uuids = [d.identity.uuid for d in agent.last_snapshot.devices]
        register = ":".join(f"{u},10,81559,100,NVIDIA-H100,0,true" for u in uuids) + ":"
        key = "hami.io/node-nvidia-register"
        kube_api.mutate_node(agent.node, lambda n: n["metadata"]["annotations"].update({key: register}))
        agent.run(10, 70)
        marked = kube_api.node(agent.node)["metadata"]["annotations"][key]
        assert f"{uuids[2]},10,81559,100,NVIDIA-H100,0,false" in marked
        assert f"{uuids[1]},10,81559,100,NVIDIA-H100,0,true" in marked
        kube_api.mutate_node(agent.node, lambda n: n["metadata"]["annotations"].update({key: register}))  # HAMi
        agent.run(80, 80)
        assert f"{uuids[2]},10,81559,100,NVIDIA-H100,0,false" in kube_api.node(agent.node)["metadata"]["annotations"][key]
        agent.run(180, 220)  # recovered: set back to true, only what the agent set
        assert kube_api.node(agent.node)["metadata"]["annotations"][key] == register
    finally:
        agent.close()
