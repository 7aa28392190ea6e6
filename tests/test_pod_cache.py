"""The watch-backed pod cache (k8s/pods.py) against the loopback API server (tests/kubeapi.py):
one list then watch, resync on 410, stale (but still answering) when the API is unreachable,
and the end-to-end promise: metrics keep their last known pod labels and say the cache is stale."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings, strategies as st

pytest.importorskip("kubernetes")

from kubeapi import PODS  # noqa: E402

from hetero_exporter.sources.attribution import Attributor  # noqa: E402
from hetero_exporter.k8s.pods import PodCache, pod_info  # noqa: E402
from hetero_exporter.model import DeviceIdentity, DeviceSample, NodeSnapshot, ProcessSample  # noqa: E402
from hetero_exporter.simulate import procfs  # noqa: E402

NODE = "gpu-node-1"
UID = "5d3c2a1e-0f6b-4b7a-9a51-3f1e2d4c5b60"
CID = "3b1f0c7d9e2a4f6b8c1d3e5f7a9b0c2d4e6f8a1b3c5d7e9f0a2b4c6d8e0f1a3b"


def wait_until(pred, timeout: float = 15.0) -> bool:
    """Poll a condition (bounded); the assertion is on the condition, not on the time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def running(kube_api, ns: str, name: str, uid: str, containers: dict[str, str], node: str = NODE,
            runtime: str = "containerd") -> dict:
    kube_api.seed_pod(ns, name, node, uid=uid, containers=list(containers))

    def status(pod):
        pod["status"] = {"phase": "Running", "qosClass": "Burstable", "containerStatuses": [
            {"name": c, "containerID": f"{runtime}://{cid}", "ready": True} for c, cid in containers.items()]}
    return kube_api.mutate(PODS, ns, name, status)


@pytest.fixture
def cache(kube_api):
    made = []

    def make(**kw) -> PodCache:
        kw.setdefault("backoff", (0.05, 0.2))
        c = PodCache(kube_api.api_client(), NODE, request_timeout=2.0, **kw)
        made.append(c)
        return c
    yield make
    for c in made:
        c.close()


def test_pod_info_reads_uid_names_container_ids_and_qos():
    p = pod_info({"metadata": {"uid": UID, "namespace": "ml", "name": "t"},
                  "status": {"qosClass": "Guaranteed",
                             "initContainerStatuses": [{"name": "init", "containerID": "cri-o://" + "ab" * 32}],
                             "containerStatuses": [{"name": "trainer", "containerID": "containerd://" + CID},
                                                   {"name": "waiting", "containerID": ""}]}})
    assert (p.uid, p.namespace, p.name, p.qos_class) == (UID, "ml", "t", "guaranteed")
    assert p.containers == {CID: "trainer", "ab" * 32: "init"}
    assert pod_info({"metadata": {"name": "no-uid"}}) is None


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                         st.sampled_from(["metadata", "status", "uid", "name", "namespace", "containerStatuses",
                                          "containerID", "qosClass", "x"]), inner, max_size=4), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(_json)
def test_pod_info_never_raises_on_odd_objects(obj):
    p = pod_info(obj) if isinstance(obj, dict) else None
    assert p is None or (isinstance(p.uid, str) and all(isinstance(k, str) for k in p.containers))


def test_lists_this_nodes_pods_then_follows_the_watch(kube_api, cache):
    running(kube_api, "ml-team", "train-0", UID, {"trainer": CID})
    running(kube_api, "other", "elsewhere", "99999999-0000-4000-8000-000000000000", {"c": "cd" * 32}, node="cpu-node")
    c = cache().start(wait_first=10)
    assert c.synced and c.lists == 1
    p = c.by_uid(UID)
    assert (p.namespace, p.name, p.containers) == ("ml-team", "train-0", {CID: "trainer"})
    assert c.by_container(CID) is p
    assert c.by_uid("99999999-0000-4000-8000-000000000000") is None  # another node's pod
    # a pod scheduled later arrives through the watch, without a new list
    uid2, cid2 = "5d3c2a1e-0f6b-4b7a-9a51-3f1e2d4c5b61", "4c" * 32
    running(kube_api, "ml-team", "train-1", uid2, {"trainer": cid2}, runtime="cri-o")
    assert wait_until(lambda: c.by_container(cid2) is not None)
    assert c.by_container(cid2).name == "train-1" and c.lists == 1
    st = c.status()
    assert st.name == "pod-cache" and st.ok and not st.stale and st.items == 2


def test_deleted_pods_keep_their_names_for_the_retention_window(kube_api, cache):
    now = [1000.0]
    running(kube_api, "ml-team", "train-0", UID, {"trainer": CID})
    c = cache(retain_deleted=60, clock=lambda: now[0]).start(wait_first=10)
    kube_api.delete(PODS, "ml-team", "train-0")
    assert wait_until(lambda: c.status().items == 0)
    assert c.by_uid(UID).name == "train-0"  # a process still exiting keeps its labels
    now[0] += 61
    assert c.by_uid(UID) is None and c.by_container(CID) is None


def test_an_expired_watch_410_is_followed_by_a_fresh_list(kube_api, cache, caplog):
    running(kube_api, "ml-team", "train-0", UID, {"trainer": CID})
    c = cache().start(wait_first=10)
    assert c.lists == 1
    # while the cache is disconnected (its resumed watch held 2 s) a pod changes and the
    # history is compacted: the resumed watch gets 410 Expired, and only a new list can
    # bring the change
    kube_api.delay_next(1, seconds=2, watch=True)
    caplog.set_level("INFO")
    kube_api.close_watches()
    kube_api.delete(PODS, "ml-team", "train-0")
    uid2 = "5d3c2a1e-0f6b-4b7a-9a51-3f1e2d4c5b62"
    running(kube_api, "ml-team", "train-2", uid2, {"trainer": "5d" * 32})
    kube_api.compact()
    assert wait_until(lambda: c.lists >= 2 and c.by_uid(uid2) is not None and c.status().items == 1)
    assert c.status().ok
    assert any("410" in r.getMessage() for r in caplog.records), "the relist must come from a 410"


def test_api_unreachable_keeps_last_known_pods_and_says_stale_then_recovers(kube_api, cache):
    running(kube_api, "ml-team", "train-0", UID, {"trainer": CID})
    c = cache().start(wait_first=10)
    assert c.status().ok
    kube_api.fail_next(1000, 503)  # every request now fails, watches included
    kube_api.close_watches()
    assert wait_until(lambda: c.status().stale)
    st = c.status()
    assert not st.ok and st.stale and "503" in st.error and st.last_success is not None
    assert c.by_uid(UID).name == "train-0"  # still answering from memory
    kube_api.clear_faults()
    assert wait_until(lambda: c.status().ok)
    assert not c.status().stale and c.status().error is None


def test_lookups_answer_while_the_api_hangs(kube_api, cache):
    running(kube_api, "ml-team", "train-0", UID, {"trainer": CID})
    c = cache().start(wait_first=10)
    kube_api.delay_next(5, seconds=30)  # the next requests hang (the cache thread waits on them)
    kube_api.close_watches()
    # a lookup is a dictionary read: it does not wait for the hung request
    for _ in range(100):
        assert c.by_uid(UID).name == "train-0"
    c.close()  # ends the hung request's wait without waiting 30 s (bounded by the timeouts)


def test_first_list_failing_leaves_an_empty_stale_cache_that_retries(kube_api, cache):
    kube_api.fail_next(2, 500, watch=False)
    running(kube_api, "ml-team", "train-0", UID, {"trainer": CID})
    c = cache(backoff=(1.0, 1.0)).start(wait_first=10)  # returns at the first failed list
    st = c.status()
    assert c.by_uid(UID) is None and st.stale and not st.ok and "500" in st.error
    assert wait_until(lambda: c.status().ok and c.by_uid(UID) is not None)
    assert c.lists >= 1


def test_metrics_keep_last_known_labels_and_report_the_stale_cache(kube_api, cache, tmp_path):
    """The issue's promise, end to end: API down -> same pod labels, stale self-metric."""
    from prometheus_client import CollectorRegistry, generate_latest

    from hetero_exporter.exposition.collector import SnapshotCollector

    running(kube_api, "ml-team", "train-0", UID, {"trainer": CID})
    c = cache().start(wait_first=10)
    d = tmp_path / "4242"
    d.mkdir()
    (d / "cgroup").write_text(procfs.cgroup_text(procfs.pod_cgroup_path(UID, "burstable", "containerd", CID, "systemd"), 2))
    (d / "stat").write_text(procfs.stat_text(4242, "python", 100))
    attr = Attributor(str(tmp_path), pods=c)
    ident = DeviceIdentity("nvidia", "gpu", 0, "GPU-0")

    def scrape() -> str:
        snap = attr(NodeSnapshot("n", time.time(), (DeviceSample(ident, 0.0, processes=(ProcessSample(4242, "GPU-0", 1 << 30),)),)))
        reg = CollectorRegistry(auto_describe=False)
        reg.register(SnapshotCollector(lambda: snap))
        return generate_latest(reg).decode()

    series = ('accelerator_process_memory_used_bytes{container="trainer",namespace="ml-team",pid="4242",'
              'pod="train-0",uuid="GPU-0",vendor="nvidia"}')
    before = scrape()
    assert series in before and 'accelerator_attribution_source_stale{source="pod-cache"} 0.0' in before
    kube_api.fail_next(1000, 503)
    kube_api.close_watches()
    assert wait_until(lambda: c.status().stale)
    after = scrape()
    assert series in after
    assert 'accelerator_attribution_source_stale{source="pod-cache"} 1.0' in after
    assert 'accelerator_attribution_source_up{source="pod-cache"} 0.0' in after


def test_agent_keeps_pod_labels_when_the_api_goes_away(kube_api, tmp_path):
    """`run --simulate --kubeconfig`: names come from the API server; when it stops answering,
    /metrics keeps the last known labels and says the pod cache is stale."""
    from agent_proc import Agent
    from hetero_exporter.simulate import load

    scenario = load("default")
    for p in scenario.pods:
        running(kube_api, p.namespace, p.name, p.uid, dict(p.containers), node=scenario.node)
    kc = kube_api.write_kubeconfig(tmp_path / "kubeconfig")
    labelled = 'namespace="ml-team",pid="4242",pod="train-llama-0"'
    with Agent(["--simulate", "--interval", "1", "--kubeconfig", kc]) as agent:
        text = agent.wait_metrics(lambda t: labelled in t and
                                  'accelerator_attribution_source_up{source="pod-cache"} 1.0' in t)
        assert labelled in text, "\n".join(l for l in text.splitlines() if "process_memory" in l)
        assert f'accelerator_attribution_source_items{{source="pod-cache"}} {float(len(scenario.pods))}' in text
        kube_api.fail_next(100000, 503)
        kube_api.close_watches()
        text = agent.wait_metrics(lambda t: 'accelerator_attribution_source_stale{source="pod-cache"} 1.0' in t)
        assert 'accelerator_attribution_source_stale{source="pod-cache"} 1.0' in text
        assert labelled in text  # the labels last known
        assert 'accelerator_collector_success{collector="nvml"} 1.0' in text  # metrics keep flowing
        assert agent.stop() == 0
