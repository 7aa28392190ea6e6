"""The extender's memory under many distinct node names (body mode, ``nodeCacheCapable: false``).

The extender runs as kube-scheduler calls it, without cluster access: each /filter call carries
whole Node objects, each with its ``hetero-exporter.io/devices`` annotation (an 8-GPU HGX H100
node, ~16 KB of JSON). Calls of ``--per-call`` nodes with names never sent before, until
``--names`` names were seen; the extender's resident memory (VmRSS) after each call. Before
issue 25 the table of decoded nodes kept every name ever seen (~18 KiB each: 56,000 names took
1.1 GiB); it now keeps at most 20,000 nodes and 192 MiB of decoded states (estimated; issue 35).

    python benchmarks/extender_names.py [--names 60000] [--per-call 2000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hetero_exporter.scoring import synthetic  # noqa: E402
from hetero_exporter.model import compact_json  # noqa: E402

ANN = "hetero-exporter.io/devices"
MEMORY_LIMIT_MIB = 1024  # deploy/extender: the Deployment's memory limit


def vm_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def body(first: int, n: int, text: str) -> bytes:
    nodes = [{"apiVersion": "v1", "kind": "Node",
              "metadata": {"name": f"node-{i:06d}", "annotations": {ANN: text}},
              "status": {"allocatable": {"nvidia.com/gpu": "8"}}} for i in range(first, first + n)]
    pod = {"metadata": {"name": "trainer", "namespace": "ml", "uid": "u1"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 4}}}]}}
    return json.dumps({"Pod": pod, "Nodes": {"items": nodes}}).encode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", type=int, default=60_000)
    ap.add_argument("--per-call", type=int, default=2_000)
    args = ap.parse_args()
    text = compact_json(synthetic.node("template", "hgx-h100", time=time.time()))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hetero_exporter", "scheduler-extender", "--listen",
                             f"127.0.0.1:{port}", "--log-format", "json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        print(f"# {platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}; "
              f"annotation {len(text)} bytes, {args.per_call} nodes a call")
        base = vm_rss_mib(proc.pid)
        peak, sent = base, 0
        while sent < args.names:
            data = body(sent, args.per_call, text)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            conn.request("POST", "/filter", body=data, headers={"Content-Type": "application/json"})
            status = conn.getresponse().status
            conn.close()
            sent += args.per_call
            rss = vm_rss_mib(proc.pid)
            peak = max(peak, rss)
            if sent % (10 * args.per_call) == 0 or sent >= args.names:
                print(f"{sent:>7} names: HTTP {status}, RSS {rss:.0f} MiB")
        print(f"RSS: {base:.0f} MiB at start, peak {peak:.0f} MiB after {sent} distinct names "
              f"({peak / MEMORY_LIMIT_MIB:.0%} of the {MEMORY_LIMIT_MIB} MiB limit); before: 1.1 GiB at 56,000")
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
