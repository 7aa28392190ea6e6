"""Steady-state CPU and memory of `hetero-exporter run --simulate` at a 10 s interval.

Starts the agent on 127.0.0.1 (default scenario), lets it warm up, scrapes /metrics every
15 s as Prometheus would, and reads the process's CPU time (utime + stime from
/proc/PID/stat) and resident memory (VmRSS, VmHWM from /proc/PID/status) over the window.

Targets (issue 2): under 0.5 % of one core, under 60 MiB resident.

    python benchmarks/footprint.py [--seconds 120] [--interval 10] [--scenario default]

`--realistic` (issue 16) is the configuration a deployed agent runs: 8 H100
(benchmarks/scenarios/h100x8.yaml, the fake NVML), `--health-mode enforce`, the pod cache
listing and watching a loopback API server (tests/kubeapi.py, run as its own process with the
scenario's node and pods, so its CPU and memory are not the agent's), PodResources from the
simulated kubelet (its own process too). `--agent-python` runs the agent with another
interpreter, e.g. a venv with a regular install of the tree (what a node has; the repo's
editable .venv adds its import finder and test-only packages).

    python benchmarks/footprint.py --realistic --seconds 60 [--agent-python /tmp/venv/bin/python]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
REALISTIC_SCENARIO = str(ROOT / "benchmarks" / "scenarios" / "h100x8.yaml")
QOS_CLASSES = {"guaranteed": "Guaranteed", "burstable": "Burstable", "besteffort": "BestEffort"}


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the agent's own CPU seconds, CPU seconds of its exited children: the simulated
    vendor CLIs, which a real node's npu-smi/cnmon/hy-smi would spend instead)."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(parts[11]) + int(parts[12])) / tick, (int(parts[13]) + int(parts[14])) / tick


def memory_kib(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0])
    return out


def scenario_pods(scenario: str, node: str) -> tuple[str, list[dict]]:
    """(the scenario's node name or ``node``, its pods as Pod objects on that node, running,
    with container ids: what the pod cache lists from a real API server)."""
    from hetero_exporter.simulate import load
    sc = load(scenario)
    node = node or sc.node
    pods = []
    for p in sc.pods:
        pods.append({"metadata": {"name": p.name, "namespace": p.namespace, "uid": p.uid},
                     "spec": {"nodeName": node, "containers": [{"name": c, "image": "trainer"} for c in p.containers]},
                     "status": {"phase": "Running", "qosClass": QOS_CLASSES.get(p.qos or "", "BestEffort"),
                                "containerStatuses": [{"name": c, "containerID": f"containerd://{cid}", "ready": True}
                                                      for c, cid in p.containers.items()]}})
    return node, pods


class LoopbackCluster:
    """tests/kubeapi.py as its own process, seeded with ``node`` and ``pods``."""

    def __init__(self, workdir: Path, node: str, pods: list[dict]):
        (workdir / "pods.json").write_text(json.dumps(pods))
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "kubeapi.py"), "--kubeconfig",
                                      str(workdir / "kubeconfig"), "--node", node, "--pods-json",
                                      str(workdir / "pods.json")], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # one JSON line once it serves
        if not line:
            sys.exit(f"tests/kubeapi.py exited with {self.proc.wait(10)} before serving")
        self.kubeconfig = json.loads(line)["kubeconfig"]

    def close(self) -> None:
        stop(self.proc, 10)


def stop(proc: subprocess.Popen, seconds: float) -> None:
    """SIGTERM, then SIGKILL if it is still there after ``seconds``."""
    proc.terminate()
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def drain(stream: Any, keep: collections.deque, serving: threading.Event, found: dict) -> None:
    """Read the agent's log lines for as long as it runs (a full pipe would stop it), keeping
    the last few and the "serving" line."""
    for line in stream:
        keep.append(line.rstrip())
        if not serving.is_set():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if doc.get("msg") == "serving":
                found.update(doc)
                serving.set()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--interval", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=25)
    ap.add_argument("--scrape-every", type=float, default=15)
    ap.add_argument("--scenario", default="default")
    ap.add_argument("--config", help="agent config file (e.g. to switch PodResources off)")
    ap.add_argument("--agent-python", default=sys.executable, help="interpreter that runs the agent")
    ap.add_argument("--cluster", action="store_true",
                    help="a loopback API server (tests/kubeapi.py, own process) with the scenario's node and pods; "
                         "the agent gets --kubeconfig and --node-name, so its pod cache lists and watches")
    ap.add_argument("--health-mode", choices=["observe", "dry-run", "enforce"])
    ap.add_argument("--realistic", action="store_true",
                    help=f"= --scenario {REALISTIC_SCENARIO} --cluster --health-mode enforce")
    ap.add_argument("--label", default="", help="name of this run in the printed row")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    args = ap.parse_args()
    if args.realistic:
        args.scenario, args.cluster, args.health_mode = REALISTIC_SCENARIO, True, args.health_mode or "enforce"
    if args.seconds < 2 * args.scrape_every:
        ap.error("--seconds: at least two scrapes (2 x --scrape-every)")
    if os.path.exists(args.scenario):  # a file: the agent runs in a folder of its own
        args.scenario = os.path.abspath(args.scenario)
    workdir = Path(tempfile.mkdtemp(prefix="footprint-"))
    cluster: Optional[LoopbackCluster] = None
    argv = [args.agent_python, "-m", "hetero_exporter", "run", "--simulate", args.scenario,
            "--listen", "127.0.0.1:0", "--interval", str(args.interval),
            *(["--config", args.config] if args.config else []),
            *(["--health-mode", args.health_mode] if args.health_mode else [])]
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "NODE_NAME")}
    if args.cluster:
        node, pods = scenario_pods(args.scenario, "")
        cluster = LoopbackCluster(workdir, node, pods)
        argv += ["--kubeconfig", cluster.kubeconfig, "--node-name", node]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env, cwd=workdir)
    logs: collections.deque = collections.deque(maxlen=20)
    serving, doc = threading.Event(), {}
    threading.Thread(target=drain, args=(proc.stderr, logs, serving, doc), daemon=True).start()
    try:
        if not serving.wait(120):
            sys.exit("the agent did not serve within 120 s; its last log lines:\n" + "\n".join(logs))
        port = int(doc["listen"].rsplit(":", 1)[1])
        collectors = doc.get("collectors")
        url = f"http://127.0.0.1:{port}/metrics"
        time.sleep(args.warmup)
        urllib.request.urlopen(url, timeout=10).read()
        c0, t0 = cpu_seconds(proc.pid), time.monotonic()
        scrapes, rss_max = 0, 0
        while time.monotonic() - t0 < args.seconds:
            time.sleep(args.scrape_every)
            body = urllib.request.urlopen(url, timeout=10).read()
            scrapes += 1
            rss_max = max(rss_max, memory_kib(proc.pid)["VmRSS"])
        c1, t1 = cpu_seconds(proc.pid), time.monotonic()
        mem = memory_kib(proc.pid)
    finally:
        stop(proc, 20)
        if cluster is not None:
            cluster.close()
        shutil.rmtree(workdir, ignore_errors=True)
    share = (c1[0] - c0[0]) / (t1 - t0)
    children = (c1[1] - c0[1]) / (t1 - t0)
    text = body.decode()
    checks = {"pod names on device metrics": 'pod="train-llama-0"' in text,
              "pod cache up": 'accelerator_attribution_source_up{source="pod-cache"} 1.0' in text,
              "podresources up": 'accelerator_attribution_source_up{source="podresources"} 1.0' in text,
              "kubernetes up (health loop)": "accelerator_health_kubernetes_up 1.0" in text}
    print(f"scenario {args.scenario} (collectors: {collectors}), interval {args.interval:g} s, "
          f"{scrapes} scrapes of {len(body)} bytes over {t1 - t0:.0f} s after {args.warmup:g} s warm-up; "
          f"agent: {args.agent_python}; cluster: {'loopback API server' if cluster else 'none'}, "
          f"health mode {args.health_mode or 'observe'}")
    if args.cluster:
        print("checks: " + ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in checks.items()))
    print(f"| CPU, share of one core | {share * 100:.2f} % | target < 0.5 % |")
    print(f"| CPU of the simulated vendor CLIs it ran | {children * 100:.2f} % | (simulation cost) |")
    print(f"| resident memory (VmRSS at the end / max in window / peak VmHWM) | {mem['VmRSS'] / 1024:.1f} / "
          f"{rss_max / 1024:.1f} / {mem['VmHWM'] / 1024:.1f} MiB | target < 60 MiB |")
    if args.json:
        print(json.dumps({"label": args.label, "cpu_share": share, "children_cpu_share": children,
                          "rss_mib": mem["VmRSS"] / 1024, "rss_max_mib": rss_max / 1024,
                          "hwm_mib": mem["VmHWM"] / 1024, "scrapes": scrapes, "bytes": len(body),
                          "seconds": t1 - t0, "checks": checks}))


if __name__ == "__main__":
    main()
