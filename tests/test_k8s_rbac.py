"""deploy/base/rbac.yaml grants every request the agent makes, and nothing it does not make:
the health loop (and the pod cache) run against the loopback API server, which records each
request; each one maps to an RBAC (apiGroup, resource, verb) that the ClusterRole must grant, and
every grant of the ClusterRole must be one of them (least privilege: no unused verb)."""

from __future__ import annotations

import re
import time

import pytest
import yaml

from conftest import ROOT
from health_agent import make_agent  # noqa: F401

pytest.importorskip("kubernetes")


def _granted() -> set[tuple[str, str, str]]:
    """The ClusterRole's grants and the Roles' (the budget's Leases and the opt-in NodeFeature, in
    the agent's namespace), with the opt-in eviction component's (deploy/components/eviction)."""
    docs = [d for p in ("base/rbac.yaml", "components/eviction/rbac.yaml")
            for d in yaml.safe_load_all((ROOT / "deploy" / p).read_text())]
    roles = [d for d in docs if d and d["kind"] in ("ClusterRole", "Role")]
    assert {d["kind"] for d in roles} == {"ClusterRole", "Role"}
    return {(g, r, v) for role in roles for rule in role["rules"] for g in rule["apiGroups"]
            for r in rule["resources"] for v in rule["verbs"]}


# API discovery (GET /apis/<group>/<version>): every authenticated user may read it
# (the system:discovery ClusterRole), so it needs no grant of ours
DISCOVERY = re.compile(r"^/api(?:/v1)?/?$|^/apis(?:/[^/]+){0,2}/?$")


def _needed(requests) -> set[tuple[str, str, str]]:
    out = set()
    for r in requests:
        if r.method == "GET" and DISCOVERY.match(r.path):
            continue
        m = re.match(r"^/(?:api/v1|apis/([^/]+)/[^/]+)/(?:namespaces/[^/]+/)?([a-z]+)(?:/([^/]+))?(?:/([a-z]+))?$", r.path)
        assert m, r.path
        group, resource, name, sub = m.group(1) or "", m.group(2), m.group(3), m.group(4)
        if sub:
            resource = f"{resource}/{sub}"
        verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(r.method)
        if verb is None:
            verb = "watch" if r.query.get("watch") in ("true", "1", "True") else ("get" if name else "list")
        out.add((group, resource, verb))
    return out


def test_health_loop_requests_are_granted(kube_api, make_agent):
    agent = make_agent("health-xid79.yaml", health={"cordon": True})
    kube_api.seed_node(agent.node)
    agent.run(0, 200)  # failure, taint + cordon, budget check, condition, events, recovery
    needed = _needed(kube_api.requests)
    assert {("", "nodes", "get"), ("", "nodes", "patch"), ("", "nodes", "list"), ("", "nodes/status", "patch"),
            ("", "events", "create")} <= needed
    assert needed <= _granted(), needed - _granted()


def _run_pod_cache(kube_api, tmp_path) -> None:
    """The attribution pod cache until it has listed and started its watch (bounded)."""
    from hetero_exporter.k8s.client import connect
    from hetero_exporter.k8s.pods import PodCache
    kube_api.seed_pod("ml", "train-0", "gpu-node-7")
    cluster = connect(None, env={"KUBECONFIG": kube_api.write_kubeconfig(tmp_path / "kc")})
    cache = PodCache(cluster.api_client, "gpu-node-7", request_timeout=5)
    try:
        cache.start(wait_first=5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(r.query.get("watch") for r in kube_api.requests):
            time.sleep(0.05)
    finally:
        cache.close()


def _run_slice_cache(kube_api, tmp_path) -> None:
    """The node's ResourceSlice cache (cli starts it) until it has listed and started its watch."""
    from hetero_exporter.k8s.client import connect
    from hetero_exporter.k8s.slice_cache import SliceCache
    cluster = connect(None, env={"KUBECONFIG": kube_api.write_kubeconfig(tmp_path / "kc-slices")})
    cache = SliceCache(cluster.api_client, "gpu-node-7", request_timeout=5)
    try:
        cache.start(wait_first=5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
                r.query.get("watch") and "resourceslices" in r.path for r in kube_api.requests):
            time.sleep(0.05)
    finally:
        cache.close()


def test_pod_cache_requests_are_granted(kube_api, tmp_path):
    _run_pod_cache(kube_api, tmp_path)
    needed = _needed(kube_api.requests)
    assert {("", "pods", "list"), ("", "pods", "watch")} <= needed
    assert needed <= _granted(), needed - _granted()


def _run_device_signals(kube_api, make_agent) -> None:
    """Issue 15's paths: DRA device taints, pod condition and event, opt-in eviction, the
    black-hole check (failed pods listed), the fleet-wide budget's Lease slot, all on and used;
    a Lease of the slot's name without the slots' labels (issue 35) is read by name and reclaimed."""
    # a 30 s lease: the slot is renewed (update) within the episode
    agent = make_agent("health-dra-4gpu.yaml", pods={2: ("ml", "train-0")},
                       health={"evict_pods": True, "budget_lease_seconds": 30},
                       environ={"POD_NAMESPACE": "hetero-exporter"})
    import kubeapi
    kube_api.create(kubeapi.LEASES, "hetero-exporter", {"metadata": {"name": "hetero-exporter-taint-slot-0"},
                                                        "spec": {"holderIdentity": "nobody"}})
    kube_api.seed_node(agent.node)
    kube_api.seed_pod("ml", "train-0", agent.node)
    agent.cycle(0)
    kube_api.seed_resource_slice("gpu-dra-1-gpu.nvidia.com", agent.node, [
        {"name": f"gpu-{d.identity.index}", "attributes": {"uuid": {"string": d.identity.uuid}}}
        for d in agent.last_snapshot.devices], driver="gpu.nvidia.com")
    agent.run(10, 90)  # failure: rule, condition, event, eviction, slot
    # someone edits the rule's message: the agent patches its own rule back (whether the fault's
    # reason also moved within the episode depends on when the Xid event was read)
    (rule,) = kube_api.list(kubeapi.DEVICE_TAINT_RULES)
    kube_api.mutate(kubeapi.DEVICE_TAINT_RULES, None, rule["metadata"]["name"],
                    lambda r: r["metadata"]["annotations"].update({"hetero-exporter.io/message": "edited"}))
    agent.remedy._last_sig = None  # re-read at the next cycle, as the resync would
    agent.run(100, 240)  # the rule patched back; recovery: rule deleted, slot freed


def test_device_signal_requests_are_granted(kube_api, make_agent):
    _run_device_signals(kube_api, make_agent)
    needed = _needed(kube_api.requests)
    assert {("resource.k8s.io", "resourceslices", "list"), ("resource.k8s.io", "devicetaintrules", "create"),
            ("resource.k8s.io", "devicetaintrules", "delete"), ("", "pods/status", "patch"),
            ("", "pods/eviction", "create"), ("coordination.k8s.io", "leases", "create")} <= needed
    assert needed <= _granted(), needed - _granted()


def test_nodefeature_requests_are_granted(kube_api, tmp_path):
    """The opt-in nodefeature mode (docs/nodefeature.md): its NodeFeature created, replaced and
    deleted in the agent's namespace."""
    from test_nodefeature import nodefeature_lifecycle
    nodefeature_lifecycle(kube_api, tmp_path)
    needed = _needed(kube_api.requests)
    assert {("nfd.k8s-sigs.io", "nodefeatures", v) for v in ("get", "create", "update", "delete")} <= needed
    assert needed <= _granted(), needed - _granted()


def test_every_grant_is_used_by_the_health_loop_or_the_pod_cache(kube_api, make_agent, tmp_path):
    """The other direction: a verb the agent never uses (nodes watch, once) is not granted."""
    from test_nodefeature import nodefeature_lifecycle
    agent = make_agent("health-xid79.yaml", health={"cordon": True})
    kube_api.seed_node(agent.node)
    agent.run(0, 200)
    _run_device_signals(kube_api, make_agent)
    nodefeature_lifecycle(kube_api, tmp_path)
    _run_pod_cache(kube_api, tmp_path)
    _run_slice_cache(kube_api, tmp_path)
    unused = _granted() - _needed(kube_api.requests)
    assert unused == set(), f"granted but never requested: {sorted(unused)}"
