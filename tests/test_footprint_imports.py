"""What the running agent loads (issue 39 §5, its RSS beside nvitop-exporter's): a node without
cluster access never imports the cluster-only code of the health loop (the remedy's writes beyond
the Node, the fleet budget, the k8s modules behind them), nor the web config's parser and
certificate code without ``--web-config-file``; with a kubeconfig in a mode that writes, it does.

Each case runs ``hetero-exporter run`` (cli.main, the real path) in a fresh interpreter on a fake
8-GPU PCI bus; a thread there waits until /metrics shows the health loop's first verdict (so the
sampler and one reconcile have run), then prints which watched modules are in ``sys.modules``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_lazy_imports import _fake_node  # 8 NVIDIA functions on a fake PCI bus, a JSON config

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_ONLY = ("kubernetes", "hetero_exporter.health.act.remedy_cluster", "hetero_exporter.health.act.fleet_budget",
                "hetero_exporter.k8s.api", "hetero_exporter.k8s.dra", "hetero_exporter.k8s.events",
                "hetero_exporter.k8s.leases", "hetero_exporter.k8s.nodes", "hetero_exporter.k8s.nodefeatures",
                "hetero_exporter.k8s.pod_writes")
WEB_CONFIG = ("hetero_exporter.web.config", "hetero_exporter.web.certificates")
# 1.7 MiB resident: the packaged tables come parsed (hetero_exporter/tables.jsonl), a JSON config by json
YAML = ("yaml",)
# loaded on every node: the controls that the run got as far as the health loop's reconcile
ALWAYS = ("hetero_exporter.health.act.remedy", "hetero_exporter.health.plan.compose", "hetero_exporter.web.server")

RUN_UNTIL_FIRST_VERDICT = textwrap.dedent("""
    import json, os, sys, threading, time, urllib.request
    from hetero_exporter import cli
    port, watched = int(sys.argv[1]), %r

    def watch():
        deadline = time.monotonic() + 120  # generous: a loaded 2-core machine
        while time.monotonic() < deadline:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
                if b"accelerator_health_node_unhealthy " in body:  # the health loop has reconciled once
                    print(json.dumps([m for m in watched if m in sys.modules]), flush=True)
                    os._exit(0)
            except OSError:
                pass
            time.sleep(0.2)
        print("no health verdict on /metrics in time", file=sys.stderr, flush=True)
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()
    cli.main(sys.argv[2:] + ["--listen", f"127.0.0.1:{port}"])
    os._exit(4)  # run returned before the verdict was seen
""" % (CLUSTER_ONLY + WEB_CONFIG + YAML + ALWAYS,))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(argv: list[str]) -> list[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "NODE_NAME")}
    done = subprocess.run([sys.executable, "-c", RUN_UNTIL_FIRST_VERDICT, str(_free_port()), *argv], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_node_without_cluster_access_loads_no_cluster_only_module_and_no_web_config(tmp_path):
    for mode in ("observe", "dry-run"):  # dry-run connects (and finds no access); observe does not try
        loaded = _run(["run", "--config", str(_fake_node(tmp_path / mode)), "--kernel-log", "off",
                       "--node-name", "gpu-1", "--health-mode", mode])
        assert set(ALWAYS) <= set(loaded), (mode, loaded)
        assert not set(loaded) & set(CLUSTER_ONLY + WEB_CONFIG + YAML), (mode, loaded)


def test_node_with_cluster_access_in_dry_run_loads_the_remedy_cluster_side(kube_api, tmp_path):
    pytest.importorskip("kubernetes")
    kube_api.seed_node("gpu-1")
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "kubeconfig")
    loaded = _run(["run", "--config", str(_fake_node(tmp_path)), "--kernel-log", "off", "--node-name", "gpu-1",
                   "--health-mode", "dry-run", "--kubeconfig", kubeconfig])
    assert set(ALWAYS) <= set(loaded), loaded
    assert {"kubernetes", "hetero_exporter.health.act.remedy_cluster", "hetero_exporter.k8s.events"} <= set(loaded)
    assert not set(loaded) & set(WEB_CONFIG), loaded
