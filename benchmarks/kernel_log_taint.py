"""From a kernel-log line to the node taint in the (loopback) Kubernetes API server.

An agent (`hetero-exporter run --simulate --health-mode enforce`, the real health loop and
client) follows a text kernel log on the simulated default node, against tests/kubeapi.py's
loopback API server (real wire protocol). Once the agent has written its first inventory (it is
reconciling), an Xid 79 line for GPU 1 (PCI 0000:28:00) is appended; the Node is polled every
20 ms until it carries the `hetero-exporter.io/accelerator-unhealthy` taint. One round per agent
start (the taint stays until reset evidence); ``--rounds`` fresh agents.

    python benchmarks/kernel_log_taint.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from agent_proc import Agent  # noqa: E402
from kubeapi import KubeAPIServer  # noqa: E402

NODE = "sim-node-1"
TAINT = "hetero-exporter.io/accelerator-unhealthy"
LINE = "[ 1234.567890] NVRM: Xid (PCI:0000:28:00): 79, pid=4242, name=python, GPU has fallen off the bus.\n"


def one_round(work: Path) -> float:
    log = work / "kern.log"
    log.write_text("[    0.000000] Linux version 6.8.0 (buildd@lcy02) #1 SMP\n")
    with KubeAPIServer() as api:
        api.seed_node(NODE, labels={"kubernetes.io/hostname": NODE})
        kubeconfig = api.write_kubeconfig(work / "kubeconfig")
        with Agent(["--simulate", "--node-name", NODE, "--health-mode", "enforce", "--kubeconfig", kubeconfig,
                    "--kernel-log", str(log), "--interval", "10"], env={"KUBECONFIG": ""}) as agent:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # the health loop has reconciled once
                if "hetero-exporter.io/devices" in (api.node(NODE)["metadata"].get("annotations") or {}):
                    break
                time.sleep(0.1)
            else:
                raise RuntimeError("the agent never wrote its inventory:\n" + "\n".join(agent._raw[-20:]))
            t0 = time.monotonic()
            with log.open("a") as f:
                f.write(LINE)
            deadline = t0 + 60
            while time.monotonic() < deadline:  # bounded
                taints = api.node(NODE)["spec"].get("taints") or []
                if any(t["key"] == TAINT for t in taints):
                    return time.monotonic() - t0
                time.sleep(0.02)
            raise RuntimeError("no taint within 60 s:\n" + "\n".join(agent._raw[-20:]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    seconds = [one_round(Path(tempfile.mkdtemp(prefix="bench-taint-"))) for _ in range(args.rounds)]
    print(f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, CPython {platform.python_version()}, "
          f"{args.rounds} rounds\n")
    print("| measure | median | max |\n|---|---|---|")
    print(f"| kernel-log line -> node taint in the API server | {statistics.median(seconds) * 1000:.0f} ms | "
          f"{max(seconds) * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
