"""What `run` loads (issue 18): a node without cluster access never imports the Kubernetes client
(~19 MiB of RSS with its dependencies in a node install) nor grpc/protobuf; a node with a kubeconfig does.

Each case runs a fresh interpreter (this test process has long imported everything) that builds
what `cmd_run` builds up to the first snapshot: the Wiring, the sampler with its enrichers
(attribution, PCI presence, kernel log, verdicts) and the health loop, collects once, and prints
which of the watched packages are in ``sys.modules``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "benchmarks" / "scenarios" / "h100x8.yaml"
CLUSTER_CLIENT = ("kubernetes", "pydantic", "requests", "urllib3", "oauthlib")
GRPC = ("grpc", "google.protobuf")

UP_TO_FIRST_SNAPSHOT = textwrap.dedent("""
    import json, sys
    from prometheus_client import CollectorRegistry
    from hetero_exporter import cli
    args, extra = cli.build_parser().parse_known_args(sys.argv[1:])
    w = cli.agent(args, extra)
    sampler = w.start().sampler
    CollectorRegistry(auto_describe=False).register(w.parts.health.metrics)
    try:
        snap = sampler.collect()
    finally:
        sampler.close()
        w.close()
    watched = %r
    print(json.dumps({"devices": len(snap.devices), "loaded": [m for m in watched if m in sys.modules]}))
""" % (CLUSTER_CLIENT + GRPC + ("h2", "hpack", "hetero_exporter.sources.podresources.client")
       + ("importlib.metadata",),))


def _no_cluster_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "NODE_NAME")}
    return env


def _run(argv: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-c", UP_TO_FIRST_SNAPSHOT, *argv], cwd=ROOT, env=_no_cluster_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _fake_node(tmp_path: Path) -> Path:
    """A config for a node with 8 NVIDIA functions on a fake PCI bus (no NVML library: the
    collector fails, which is irrelevant here), no kubelet socket, no udev, no kernel log."""
    for i in range(8):
        d = tmp_path / "sys" / "bus" / "pci" / "devices" / f"0000:{0x18 + 16 * i:02x}:00.0"
        d.mkdir(parents=True)
        for name, value in (("vendor", "0x10de"), ("device", "0x2330"), ("class", "0x030200"), ("numa_node", "0")):
            (d / name).write_text(value + "\n")
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(json.dumps({
        "sysfs_root": str(tmp_path / "sys"), "health": {"udev": False},
        "attribution": {"podresources_socket": str(tmp_path / "absent" / "kubelet.sock"), "pod_cache_wait": 0},
        "collectors": {"nvml": {"fallback": False, "events": False}}}))  # JSON is YAML
    return cfg


def test_connect_without_credentials_does_not_import_the_client():
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from hetero_exporter.k8s.client import connect; "
                               "c = connect(None, env={}); print(c.enabled, 'kubernetes' in sys.modules)"],
        capture_output=True, text=True, timeout=60, env=_no_cluster_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_simulated_node_without_cluster_loads_no_cluster_client_and_no_grpc():
    got = _run(["run", "--simulate", str(SCENARIO), "--interval", "10"])
    assert got["devices"] == 8
    # the simulated kubelet (a grpc server) is its own process; the agent speaks HTTP/2 to it
    assert not set(got["loaded"]) & set(CLUSTER_CLIENT + GRPC), got["loaded"]


def test_node_without_cluster_or_kubelet_socket_loads_neither_client(tmp_path):
    """Nor importlib.metadata (~0.8 MiB): no distribution on the path declares a vendor plugin."""
    got = _run(["run", "--config", str(_fake_node(tmp_path)), "--kernel-log", "off", "--node-name", "gpu-1"])
    assert got["loaded"] == [], got["loaded"]


def test_node_with_a_kubeconfig_loads_the_cluster_client(kube_api, tmp_path):
    pytest.importorskip("kubernetes")
    kube_api.seed_node("gpu-1")
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "kubeconfig")
    got = _run(["run", "--config", str(_fake_node(tmp_path)), "--kernel-log", "off", "--node-name", "gpu-1",
                "--kubeconfig", kubeconfig])
    assert "kubernetes" in got["loaded"]
    assert not set(got["loaded"]) & set(GRPC + ("h2", "hpack")), got["loaded"]
