"""k8s/dra.py and k8s/slice_cache.py against the loopback API server (tests/kubeapi.py) with the
real `kubernetes` client: discovery of resource.k8s.io/v1, the node's ResourceSlices (paged,
bounded), the DeviceTaintRule calls with their preconditions, and the slice cache's list + watch
(ADDED / MODIFIED / DELETED, 410 relist, a cluster without DRA)."""

from __future__ import annotations

import logging
import time

import pytest

pytest.importorskip("kubernetes")

from hetero_exporter.k8s.api import Api  # noqa: E402
from hetero_exporter.k8s.client import Cluster, K8sError  # noqa: E402
from hetero_exporter.k8s.dra import SLICES, Dra, list_bounded  # noqa: E402
from hetero_exporter.k8s.slice_cache import SliceCache  # noqa: E402
from kubeapi import DEVICE_TAINT_RULES, RESOURCE_SLICES, KubeAPIServer  # noqa: E402

MANAGED = "app.kubernetes.io/managed-by=hetero-exporter"


def gpu(i: int, uuid: str = "") -> dict:
    return {"name": f"gpu-{i}", "attributes": {"uuid": {"string": uuid or f"GPU-{i}"}, "index": {"int": i}}}


def rule(name: str = "n1-gpu-0", device: str = "gpu-0", effect: str = "NoSchedule") -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "hetero-exporter"}},
            "spec": {"deviceSelector": {"driver": "gpu.example.com", "pool": "n1", "device": device},
                     "taint": {"key": "hetero-exporter.io/accelerator-unhealthy", "value": "xid79", "effect": effect}}}


def wait_until(pred, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not pred():
        time.sleep(0.01)
    return pred()


def cluster_of(server: KubeAPIServer) -> Cluster:
    return Cluster(api_client=server.api_client(), source="test", timeout_seconds=5.0)


@pytest.fixture
def dra(kube_api):
    return Dra(cluster_of(kube_api))


# --------------------------------------------------------------------------- Dra


def test_served_when_the_cluster_serves_resource_v1(dra):
    assert dra.served() is None


@pytest.mark.parametrize("kwargs", [{"dra": False}, {"dra_versions": ("v1beta2",)}])
def test_not_served_says_why_in_one_line(kwargs):
    with KubeAPIServer(**kwargs) as server:
        assert Dra(cluster_of(server)).served() == "resource.k8s.io/v1 is not served by this cluster (404)"


def test_served_raises_when_the_api_server_does_not_answer(kube_api, dra):
    kube_api.drop_next(10, path="/apis/resource.k8s.io")  # the client retries a dropped connection
    with pytest.raises(K8sError) as e:
        dra.served()
    assert e.value.status is None


def test_slices_of_the_node_only(kube_api, dra):
    kube_api.seed_resource_slice("n1-gpus", "n1", [gpu(0), gpu(1)])
    kube_api.seed_resource_slice("n2-gpus", "n2", [gpu(0)])
    assert [s["metadata"]["name"] for s in dra.slices("n1")] == ["n1-gpus"]
    rec = kube_api.requests[-1]
    assert rec.query["fieldSelector"] == "spec.nodeName=n1" and rec.query["limit"] == "256"


def test_list_follows_pages_and_refuses_too_many(kube_api):
    for i in range(5):
        kube_api.seed_resource_slice(f"n1-s{i}", "n1", [gpu(i)])
    api = Api(kube_api.api_client())
    items, rv = list_bounded(api, SLICES, query={"fieldSelector": "spec.nodeName=n1"}, max_items=10,
                             what="slices", page_size=2)
    assert [s["metadata"]["name"] for s in items] == [f"n1-s{i}" for i in range(5)] and rv
    assert [r.query.get("continue") is not None for r in kube_api.requests[-3:]] == [False, True, True]
    with pytest.raises(K8sError, match="more than 4; refusing"):
        Dra(cluster_of(kube_api), max_slices=4).slices("n1")


def test_rules_create_patch_delete(kube_api, dra):
    kube_api.create(DEVICE_TAINT_RULES, None, {**rule("someone-elses"), "metadata": {"name": "someone-elses"}})
    made = dra.create_rule(rule())
    assert made["spec"]["taint"]["timeAdded"] and made["metadata"]["generation"] == 1
    assert [r["metadata"]["name"] for r in dra.rules(MANAGED)] == ["n1-gpu-0"]
    patched = dra.patch_rule("n1-gpu-0", {"spec": {"taint": {"value": "xid48"}}},
                             resource_version=made["metadata"]["resourceVersion"])
    assert patched["spec"]["taint"]["value"] == "xid48" and patched["spec"]["deviceSelector"]["device"] == "gpu-0"
    assert kube_api.requests[-1].content_type == "application/merge-patch+json"
    with pytest.raises(K8sError) as e:  # the resourceVersion read before the last write
        dra.patch_rule("n1-gpu-0", {"spec": {"taint": {"value": "x"}}}, resource_version=made["metadata"]["resourceVersion"])
    assert e.value.conflict
    with pytest.raises(K8sError) as e:
        dra.delete_rule("n1-gpu-0", uid=made["metadata"]["uid"], resource_version=made["metadata"]["resourceVersion"])
    assert e.value.conflict and kube_api.get(DEVICE_TAINT_RULES, None, "n1-gpu-0")
    assert dra.delete_rule("n1-gpu-0", uid=made["metadata"]["uid"], resource_version=patched["metadata"]["resourceVersion"])
    assert kube_api.requests[-1].body["preconditions"] == {"uid": made["metadata"]["uid"],
                                                           "resourceVersion": patched["metadata"]["resourceVersion"]}
    assert dra.delete_rule("n1-gpu-0") is False  # already gone
    assert [r["metadata"]["name"] for r in kube_api.list(DEVICE_TAINT_RULES)] == ["someone-elses"]


def test_an_invalid_rule_is_refused_naming_the_field(dra):
    with pytest.raises(K8sError) as e:
        dra.create_rule(rule(effect="PreferNoSchedule"))
    assert e.value.status == 422 and "spec.taint.effect" in str(e.value)


# --------------------------------------------------------------------------- SliceCache


@pytest.fixture
def cache(kube_api):
    caches = []

    def make(**kwargs):
        kwargs.setdefault("request_timeout", 5.0)
        kwargs.setdefault("watch_seconds", 5)
        c = SliceCache(kube_api.api_client(), "n1", backoff=(0.05, 0.1), **kwargs)
        caches.append(c)
        return c
    yield make
    for c in caches:
        c.close()


def names(c: SliceCache) -> list[str]:
    return [s["metadata"]["name"] for s in c.slices()]


def watching(server: KubeAPIServer) -> int:
    return sum(1 for r in server.requests if r.query.get("watch") and "resourceslices" in r.path)


def test_list_then_watch_added_modified_deleted(kube_api, cache):
    kube_api.seed_resource_slice("n1-b", "n1", [gpu(0)])
    kube_api.seed_resource_slice("n2-a", "n2", [gpu(0)])
    c = cache().start(wait_first=5)
    assert c.synced and names(c) == ["n1-b"] and c.status().name == "resource-slices" and c.status().ok
    assert wait_until(lambda: watching(kube_api) >= 1)
    kube_api.seed_resource_slice("n1-a", "n1", [gpu(1)])
    assert wait_until(lambda: names(c) == ["n1-a", "n1-b"])
    kube_api.mutate(RESOURCE_SLICES, None, "n1-a", lambda s: s["spec"]["devices"].append(gpu(2)))
    assert wait_until(lambda: len(c.slices()[0]["spec"]["devices"]) == 2)
    kube_api.delete(RESOURCE_SLICES, None, "n1-b")
    assert wait_until(lambda: names(c) == ["n1-a"])
    c.slices()[0]["spec"]["devices"].clear()  # a copy: the cache keeps its own
    assert len(c.slices()[0]["spec"]["devices"]) == 2 and c.status().items == 1
    watch = next(r for r in kube_api.requests if r.query.get("watch"))
    assert watch.query["fieldSelector"] == "spec.nodeName=n1" and watch.query["allowWatchBookmarks"] == "true"


def test_expired_watch_lists_again(kube_api, cache, caplog):
    kube_api.seed_resource_slice("n1-a", "n1", [gpu(0)])
    c = cache().start(wait_first=5)
    assert wait_until(lambda: watching(kube_api) >= 1)
    # while the cache is disconnected (its resumed watch held 1 s) the slices change and the
    # history is compacted: the resumed watch gets 410 Expired, and only a new list brings them
    kube_api.delay_next(1, seconds=1, watch=True)
    caplog.set_level("INFO")
    kube_api.close_watches()
    kube_api.delete(RESOURCE_SLICES, None, "n1-a")
    kube_api.seed_resource_slice("n1-b", "n1", [gpu(1)])
    kube_api.compact()
    assert wait_until(lambda: c.lists >= 2 and names(c) == ["n1-b"])
    assert c.synced and any("410" in r.getMessage() for r in caplog.records)


def test_a_cluster_without_dra_is_said_once_and_the_thread_ends(caplog):
    with KubeAPIServer(dra=False) as server:
        c = SliceCache(server.api_client(), "n1", request_timeout=5.0, backoff=(0.01, 0.02))
        with caplog.at_level(logging.INFO, logger="hetero_exporter.k8s.slice_cache"):
            c.start(wait_first=5)
            assert wait_until(lambda: not c._thread.is_alive())
        c.close()
        assert c.served is False and c.slices() == [] and not c.synced
        assert c.status().error == "resource.k8s.io/v1 is not served by this cluster (404)"
        assert len([r for r in caplog.records if "not served" in r.getMessage()]) == 1
        assert len(server.requests) == 1  # one list, no retries


def test_failures_keep_the_slices_last_known(kube_api, cache):
    kube_api.seed_resource_slice("n1-a", "n1", [gpu(0)])
    c = cache().start(wait_first=5)
    assert wait_until(lambda: watching(kube_api) >= 1)
    kube_api.fail_next(1000, 503, path="resourceslices")  # until cleared: lists and watches fail
    kube_api.close_watches()
    assert wait_until(lambda: c.status().stale)
    assert names(c) == ["n1-a"] and c.served and "503" in c.status().error
    kube_api.clear_faults()
    assert wait_until(lambda: c.synced) and c.lists >= 2


def test_more_slices_than_the_bound_are_refused(kube_api, cache):
    for i in range(2):
        kube_api.seed_resource_slice(f"n1-{i}", "n1", [gpu(i)])
    c = cache(max_slices=2).start(wait_first=5)
    assert names(c) == ["n1-0", "n1-1"]
    assert wait_until(lambda: watching(kube_api) >= 1)
    kube_api.seed_resource_slice("n1-2", "n1", [gpu(2)])
    assert wait_until(lambda: c.status().stale)
    assert "more than 2" in c.status().error and names(c) == ["n1-0", "n1-1"]
