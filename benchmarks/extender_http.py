"""The scheduler extender end to end over HTTP: its own process, its node cache fed by a watch.

`hetero-exporter scheduler-extender --kubeconfig K` runs as a subprocess against the loopback
Kubernetes API server of tests/kubeapi.py, which serves N nodes (5,000, then 20,000) whose
devices annotation is the compact document the agent writes (benchmarks/scoring.py's cluster:
a mix of server shapes, random load, one node in ten with a failed device). Once /readyz says
the cache is loaded, clients call over keep-alive HTTP/1.1 connections (http.client, as
kube-scheduler keeps its connection); a call is timed from sending the request to having read
the whole answer.

Cases, per cluster size:

- /prioritize, all N NodeNames, a pod shape seen before (a batch of alike pods);
- /prioritize, all N NodeNames, a new pod shape each call (per-device memory, policy, topology);
- 4 concurrent clients, each a stream of pods: /filter (new shape) then /prioritize of the nodes
  that passed (only at the first size), pods/s over all clients and the p99 of every call;
- body mode: 1,000 whole Node objects in the request, first sight (names never seen: decode and
  precompute all) and seen (the same objects again).

Targets (issue 17): /prioritize over 5,000 nodes p99 < 25 ms (seen and new shapes), < 60 ms at
20,000; 4 clients >= 50 pods/s, p99 < 60 ms; body mode 1,000 nodes first sight p99 < 600 ms,
seen p99 < 150 ms.

    python benchmarks/extender_http.py [--sizes 5000,20000] [--rounds 200] [--body-rounds 10]
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from kubeapi import KubeAPIServer  # noqa: E402 - the test API server, importable from tests/

_spec = importlib.util.spec_from_file_location("bench_scoring", ROOT / "benchmarks" / "scoring.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)  # cluster(), node_object(), pod(), pct()

ANN = "hetero-exporter.io/devices"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    """One keep-alive connection; ``call`` returns (seconds, status, answer)."""

    def __init__(self, port: int):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)

    def call(self, method: str, path: str, body: bytes = b"") -> tuple[float, int, bytes]:
        start = time.perf_counter()
        self.conn.request(method, path, body=body or None, headers={"Content-Type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        return time.perf_counter() - start, r.status, data

    def post(self, path: str, doc: dict) -> tuple[float, bytes]:
        took, status, data = self.call("POST", path, json.dumps(doc).encode())
        assert status == 200, data[:300]
        return took, data


def cycle_pod(gpus: int, memory_mib: int | None, uid: str) -> dict:
    p = bench.pod(gpus, memory_mib)
    p["metadata"].update(uid=uid, resourceVersion="1")
    return p


def row(name: str, secs: list[float]) -> str:
    ms = [s * 1e3 for s in secs]
    return (f"| {name} | {len(ms)} | {bench.pct(ms, 50):.1f} | {bench.pct(ms, 99):.1f} | {max(ms):.1f} | "
            f"{min(ms):.1f} |")


def start_extender(api: KubeAPIServer, workdir: str, timeout: float) -> tuple[subprocess.Popen, int, float]:
    kubeconfig = api.write_kubeconfig(os.path.join(workdir, "kubeconfig"))
    port = free_port()
    exe = Path(sys.executable).with_name("hetero-exporter")
    cmd = [str(exe) if exe.exists() else sys.executable, *([] if exe.exists() else ["-m", "hetero_exporter.cli"]),
           "scheduler-extender", "--kubeconfig", kubeconfig, "--listen", f"127.0.0.1:{port}", "--log-level", "warning"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(workdir, "extender.log"), "wb"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"extender exited {proc.returncode}: see {workdir}/extender.log")
        try:
            _, status, _ = Client(port).call("GET", "/readyz")
            if status == 200:
                return proc, port, time.perf_counter() - t0
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"extender not ready after {timeout:.0f} s")


def concurrent(port: int, names: list[str], clients: int, pods: int) -> tuple[float, list[float], list[float]]:
    """(pods/s, /filter seconds, /prioritize seconds) of ``clients`` streams of ``pods`` pods."""
    filt: list[float] = []
    prio: list[float] = []
    lock = threading.Lock()

    def stream(k: int) -> None:
        c = Client(port)
        for i in range(pods):
            p = cycle_pod(1 + i % 8, 40_000 + 1000 * k + i, f"c{k}-{i}")
            t1, answer = c.post("/filter", {"Pod": p, "NodeNames": names})
            passed = json.loads(answer)["NodeNames"]
            t2, _ = c.post("/prioritize", {"Pod": p, "NodeNames": passed})
            with lock:
                filt.append(t1)
                prio.append(t2)

    threads = [threading.Thread(target=stream, args=(k,)) for k in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return clients * pods / (time.perf_counter() - start), filt, prio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="5000,20000", help="cluster sizes, comma separated")
    ap.add_argument("--rounds", type=int, default=200, help="calls per single-client case")
    ap.add_argument("--pods", type=int, default=50, help="pods per concurrent client")
    ap.add_argument("--body-nodes", type=int, default=1000)
    ap.add_argument("--body-rounds", type=int, default=10)
    ap.add_argument("--ready-timeout", type=float, default=900.0)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    print(f"# {time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} CPUs, "
          f"{platform.python_implementation()} {platform.python_version()}; extender in its own process, "
          f"node cache from a watch of tests/kubeapi.py on loopback")
    print("| case | calls | p50 ms | p99 ms | max ms | best ms |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        now = time.time()
        texts = bench.cluster(n, now, seed=1)
        with KubeAPIServer() as api, tempfile.TemporaryDirectory() as workdir:
            for name, text in texts.items():
                api.seed_node(name, annotations={ANN: text})
            proc, port, ready = start_extender(api, workdir, args.ready_timeout)
            try:
                print(f"| ({n} nodes: the extender started and loaded its cache in {ready:.1f} s) | | | | | |")
                c = Client(port)
                names = list(texts)
                seen = {"Pod": cycle_pod(4, None, "seen"), "NodeNames": names}
                c.post("/prioritize", seen)  # the first call of this shape fills the memo
                same = [c.post("/prioritize", seen)[0] for _ in range(args.rounds)]
                new = [c.post("/prioritize", {"Pod": cycle_pod(1 + i % 8, 20_000 + i, f"new-{i}"),
                                              "NodeNames": names})[0] for i in range(args.rounds)]
                print(row(f"/prioritize, {n} NodeNames, a pod shape seen before", same))
                print(row(f"/prioritize, {n} NodeNames, a new pod shape each call", new))
                if n == sizes[0]:
                    rate, filt, prio = concurrent(port, names, 4, args.pods)
                    print(row(f"4 clients, {n} NodeNames: /filter (new shape), {rate:.0f} pods/s", filt))
                    print(row(f"4 clients, {n} NodeNames: /prioritize of the passing nodes, {rate:.0f} pods/s", prio))
                    cold, warm = [], []
                    for r in range(args.body_rounds):
                        body_texts = bench.cluster(args.body_nodes, now, seed=2 + r, prefix=f"body{r}")
                        nodes = {"kind": "NodeList", "apiVersion": "v1", "metadata": {},
                                 "items": [bench.node_object(k, v) for k, v in body_texts.items()]}
                        p = cycle_pod(2, 2000 + r, f"body-{r}")
                        cold.append(c.post("/prioritize", {"Pod": p, "Nodes": nodes})[0])
                        for i in range(3):
                            p = cycle_pod(1 + i % 8, 3000 + 10 * r + i, f"body-{r}-{i}")
                            warm.append(c.post("/prioritize", {"Pod": p, "Nodes": nodes})[0])
                    print(row(f"/prioritize, {args.body_nodes} Nodes in the body, first sight", cold))
                    print(row(f"/prioritize, {args.body_nodes} Nodes in the body, seen before", warm))
                _, status, metrics = c.call("GET", "/metrics")
                assert status == 200 and b"accelerator_extender_requests_total" in metrics
            finally:
                proc.terminate()
                proc.wait(timeout=30)


if __name__ == "__main__":
    main()
