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
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "base" / "rbac.yaml").read_text()))
    role = next(d for d in docs if d and d["kind"] == "ClusterRole")
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def _needed(requests) -> set[tuple[str, str, str]]:
    out = set()
    for r in requests:
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


def test_pod_cache_requests_are_granted(kube_api, tmp_path):
    _run_pod_cache(kube_api, tmp_path)
    needed = _needed(kube_api.requests)
    assert {("", "pods", "list"), ("", "pods", "watch")} <= needed
    assert needed <= _granted(), needed - _granted()


def test_every_grant_is_used_by_the_health_loop_or_the_pod_cache(kube_api, make_agent, tmp_path):
    """The other direction: a verb the agent never uses (nodes watch, once) is not granted."""
    agent = make_agent("health-xid79.yaml", health={"cordon": True})
    kube_api.seed_node(agent.node)
    agent.run(0, 200)
    _run_pod_cache(kube_api, tmp_path)
    unused = _granted() - _needed(kube_api.requests)
    assert unused == set(), f"granted but never requested: {sorted(unused)}"
