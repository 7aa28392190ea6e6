"""k8s/pod_writes.py and the pod events of k8s/events.py against the loopback API server
(tests/kubeapi.py) with the real `kubernetes` client: the pod condition merged by type, eviction
through the Eviction API (evicted / blocked by a PodDisruptionBudget / gone, a throttling 429
not taken for a budget), the node's Failed pods, and idempotent events about a pod."""

from __future__ import annotations

import pytest

pytest.importorskip("kubernetes")

from hetero_exporter.k8s.client import Cluster, K8sError  # noqa: E402
from hetero_exporter.k8s.events import MESSAGE_LIMIT, Events, NodeEvent, ObjectRef, body  # noqa: E402
from hetero_exporter.k8s.pod_writes import PodWrites  # noqa: E402
from kubeapi import EVENTS, PODS  # noqa: E402

CONDITION = "hetero-exporter.io/AcceleratorHealthy"


@pytest.fixture
def cluster(kube_api):
    return Cluster(api_client=kube_api.api_client(), source="test", timeout_seconds=5.0)


@pytest.fixture
def writes(cluster):
    return PodWrites(cluster)


def test_get_and_patch_status_changes_only_our_condition(kube_api, writes):
    kube_api.seed_pod("ml", "train-0", "n1")
    kube_api.mutate(PODS, "ml", "train-0", lambda p: p["status"].update(conditions=[
        {"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]))
    down = {"type": CONDITION, "status": "False", "reason": "NvidiaXid79",
            "message": "GPU 2 (GPU-abc, 0000:3b:00.0): fallen off the bus (Xid 79)"}
    writes.patch_status("ml", "train-0", {"status": {"conditions": [down]}})
    pod = writes.patch_status("ml", "train-0", {"status": {"conditions": [{**down, "status": "True", "reason": "Recovered"}]}})
    assert [c["type"] for c in pod["status"]["conditions"]] == ["Ready", "ContainersReady", CONDITION]
    assert pod["status"]["conditions"][2]["reason"] == "Recovered"
    assert kube_api.requests[-1].content_type == "application/strategic-merge-patch+json"
    assert kube_api.requests[-1].path == "/api/v1/namespaces/ml/pods/train-0/status"
    assert writes.get("ml", "train-0")["status"]["conditions"] == pod["status"]["conditions"]


def test_evict_without_a_budget(kube_api, writes):
    kube_api.seed_pod("ml", "train-0", "n1")
    assert writes.evict("ml", "train-0") == "evicted"
    assert kube_api.list(PODS) == []
    rec = kube_api.requests[-1]
    assert rec.body == {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "train-0", "namespace": "ml"}}


def test_evict_blocked_by_a_budget_says_which(kube_api, writes):
    for i in range(2):
        kube_api.seed_pod("ml", f"train-{i}", "n1", labels={"job": "llm"})
    kube_api.seed_pdb("ml", "llm-budget", {"matchLabels": {"job": "llm"}}, max_unavailable=0)
    outcome = writes.evict("ml", "train-0")
    assert outcome == "blocked" and "llm-budget" in outcome.message
    assert len(kube_api.list(PODS)) == 2


def test_evict_gone(writes):
    assert writes.evict("ml", "absent") == "gone"


def test_a_throttling_429_is_not_a_budget(kube_api, writes):
    kube_api.seed_pod("ml", "train-0", "n1")
    kube_api.fail_next(1, 429, path="/eviction")
    with pytest.raises(K8sError) as e:
        writes.evict("ml", "train-0")
    assert e.value.status == 429 and e.value.retryable
    assert len(kube_api.list(PODS)) == 1


def test_failed_on_node(kube_api, writes):
    kube_api.seed_pod("ml", "ok", "n1")
    for i in range(3):
        kube_api.seed_pod("ml", f"rejected-{i}", "n1", phase="Failed")
    kube_api.seed_pod("ml", "elsewhere", "n2", phase="Failed")
    assert [p["metadata"]["name"] for p in writes.failed_on_node("n1")] == ["rejected-0", "rejected-1", "rejected-2"]
    assert kube_api.requests[-1].query == {"fieldSelector": "spec.nodeName=n1,status.phase=Failed", "limit": "500"}
    assert len(writes.failed_on_node("n1", limit=2)) == 2


# --------------------------------------------------------------------------- pod events


def test_a_pod_event_sent_twice_is_one_event_in_the_pods_namespace(kube_api, cluster):
    pod = kube_api.seed_pod("ml", "train-0", "n1")
    events = Events(cluster)
    ev = NodeEvent(name="train-0.gpu2-xid79", type="Warning", reason="NvidiaXid79",
                   message="GPU 2 (GPU-abc): fallen off the bus", time=1.7e9)
    ref = ObjectRef.pod(pod)
    assert events.create_for(ref, ev, 1.7e9, host="n1") is True
    assert events.create_for(ref, ev, 1.7e9, host="n1") is False  # AlreadyExists = delivered
    stored = kube_api.events(involved_name="train-0")
    assert len(stored) == 1
    assert stored[0]["metadata"]["namespace"] == "ml"
    assert stored[0]["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "train-0", "namespace": "ml",
                                           "uid": pod["metadata"]["uid"]}
    assert stored[0]["source"] == {"component": "hetero-exporter", "host": "n1"}
    assert [r.status for r in kube_api.writes(path="/events")] == [201, 409]


def test_pod_event_message_is_cut_at_the_limit(kube_api, cluster):
    pod = kube_api.seed_pod("ml", "train-0", "n1")
    Events(cluster).create_for(ObjectRef.pod(pod), NodeEvent("train-0.long", "Warning", "R", "x" * 5000), 1.7e9)
    msg = kube_api.list(EVENTS, "ml")[0]["message"]
    assert len(msg) == MESSAGE_LIMIT and msg.endswith("...")


def test_node_events_are_unchanged(kube_api, cluster):
    ev = NodeEvent(name="n1.abc", type="Warning", reason="Xid", message="m", time=1.7e9)
    assert body("n1", ev, "hetero-exporter", 1.7e9)["involvedObject"] == {"apiVersion": "v1", "kind": "Node",
                                                                          "name": "n1", "uid": "n1"}
    assert Events(cluster).create("n1", ev, 1.7e9) is True
    assert kube_api.list(EVENTS, "default")[0]["reportingInstance"] == "n1"
