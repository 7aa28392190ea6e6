"""The scheduler extender end to end over HTTP: its own process, its node cache fed by a watch.

`hetero-exporter scheduler-extender --kubeconfig K` runs as a subprocess against the loopback
Kubernetes API server of tests/kubeapi.py, which serves N nodes (5,000, then 20,000) whose
devices annotation is the compact document the agent writes (benchmarks/scoring.py's cluster:
a mix of server shapes, random load, one node in ten with a failed device). Once /readyz says
the cache is loaded, clients call over keep-alive HTTP/1.1 connections (http.client, as
kube-scheduler keeps its connection); a call is timed from sending the request to having read
the whole answer. The clients run in this process, on the same 2 cores as the extender, and
encode and decode JSON with msgspec (kube-scheduler, in Go, decodes its ~1 MB /filter answers on
its own cores; with the standard json module the clients took ~2 ms of CPU a pod from the box);
of a /filter answer they decode only NodeNames (msgspec skips the rest in C: decoding the whole
~1 MB took ~1 ms of the box's CPU a pod, since issue 39). The last column is the extender process's CPU time (user + system, from /proc)
over the case divided by its calls; on the 4-client /filter row, per pod (both calls): on a 2-core
box the clients take the rest, so CPU per call says more than wall time about what one core serves.

Cases, per cluster size:

- /prioritize, all N NodeNames, a pod shape seen before (a batch of alike pods);
- /prioritize, all N NodeNames, a new pod shape each call (per-device memory, policy, topology);
- 4 concurrent clients, each a stream of pods: /filter (new shape) then /prioritize of the nodes
  that passed (at every size since issue 39), pods/s over all clients and the p99 of every call;
- body mode (at the first size only): 1,000 whole Node objects in the request, first sight (names
  never seen: decode all, search the pod's shape) and seen (the same objects again, a new pod
  shape each call).

``--baseline DIR`` measures another checkout's extender too (``git archive COMMIT | tar -x -C
DIR``), first, against the same API server and node list: before and after in one run.

Targets (issue 17): /prioritize over 5,000 nodes p99 < 25 ms (seen and new shapes), < 60 ms at
20,000; 4 clients >= 50 pods/s, p99 < 60 ms; body mode 1,000 nodes first sight p99 < 600 ms,
seen p99 < 150 ms. Issue 39: 4 clients at 5,000 nodes >= 300 pods/s with p99 < 25 ms; p99 < 25 ms
at 20,000.

    python benchmarks/extender_http.py [--sizes 5000,20000] [--rounds 200] [--body-rounds 10] [--baseline DIR]
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
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from kubeapi import KubeAPIServer  # noqa: E402 - the test API server, importable from tests/

_spec = importlib.util.spec_from_file_location("bench_scoring", ROOT / "benchmarks" / "scoring.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)  # cluster(), node_object(), pod(), pct()

ANN = "hetero-exporter.io/devices"

try:  # the clients share the 2 cores with the extender: they encode and decode in C, as Go's would
    import msgspec

    # what a client reads of a /filter answer: the names to send to /prioritize (the ~1 MB of
    # FailedNodes is skipped in C, not built into dicts: kube-scheduler reads it on its own
    # cores, here it would take the extender's); defstruct: no annotation to resolve by name
    FilterResult = msgspec.defstruct("FilterResult", [("NodeNames", Optional[list[str]], None)])
    encode, decode = msgspec.json.encode, msgspec.json.decode
    passed_names = msgspec.json.Decoder(FilterResult).decode
except ModuleNotFoundError:  # pragma: no cover - the extender extra is not installed
    encode, decode = (lambda doc: json.dumps(doc).encode()), json.loads
    passed_names = json.loads


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
        took, status, data = self.call("POST", path, encode(doc))
        assert status == 200, data[:300]
        return took, data


def cycle_pod(gpus: int, memory_mib: int | None, uid: str) -> dict:
    p = bench.pod(gpus, memory_mib)
    p["metadata"].update(uid=uid, resourceVersion="1")
    return p


def row(name: str, secs: list[float], cpu: float) -> str:
    """``cpu``: the extender process's CPU seconds over the case (its calls, shared among verbs)."""
    ms = [s * 1e3 for s in secs]
    return (f"| {name} | {len(ms)} | {bench.pct(ms, 50):.1f} | {bench.pct(ms, 99):.1f} | {max(ms):.1f} | "
            f"{min(ms):.1f} | {cpu * 1e3 / len(ms):.1f} |")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc: 10 ms ticks, fine over a case)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Cpu:
    """The extender's CPU seconds between ``start`` and ``took``."""

    def __init__(self, pid: int):
        self.pid, self.at = pid, cpu_seconds(pid)

    def took(self) -> float:
        now = cpu_seconds(self.pid)
        spent, self.at = now - self.at, now
        return spent


def start_extender(api: KubeAPIServer, workdir: str, timeout: float, tree: Optional[str] = None
                   ) -> tuple[subprocess.Popen, int, float]:
    """The extender of this checkout, or of ``tree`` (another checkout: its package first on
    PYTHONPATH, run by this interpreter), its cache loaded: (process, port, seconds to ready)."""
    kubeconfig = api.write_kubeconfig(os.path.join(workdir, "kubeconfig"))
    port = free_port()
    exe = Path(sys.executable).with_name("hetero-exporter")
    cmd = [str(exe) if exe.exists() else sys.executable, *([] if exe.exists() else ["-m", "hetero_exporter.cli"]),
           "scheduler-extender", "--kubeconfig", kubeconfig, "--listen", f"127.0.0.1:{port}", "--log-level", "warning"]
    env = dict(os.environ)
    if tree is not None:
        cmd = [sys.executable, "-m", "hetero_exporter.cli", *cmd[1 if exe.exists() else 3:]]
        env["PYTHONPATH"] = os.pathsep.join([str(Path(tree).resolve()), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    t0 = time.perf_counter()
    # the other tree's directory as the working one: ``python -m`` puts the working directory
    # first on sys.path, ahead of PYTHONPATH (run from this checkout, the baseline imported this
    # checkout's package, not its own: figures before this fix compared a tree with itself)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(workdir, "extender.log"), "wb"),
                            env=env, cwd=str(Path(tree).resolve()) if tree is not None else None)
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
            got = passed_names(answer)
            passed = got["NodeNames"] if isinstance(got, dict) else got.NodeNames
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


def cases(port: int, pid: int, names: list[str], args: argparse.Namespace, first: bool, now: float, tag: str) -> None:
    """Every case against one running extender; ``first``: the cluster size that also runs body mode."""
    c = Client(port)
    n = len(names)
    seen = {"Pod": cycle_pod(4, None, "seen"), "NodeNames": names}
    c.post("/prioritize", seen)  # the first call of this shape fills the memo
    cpu = Cpu(pid)
    same = [c.post("/prioritize", seen)[0] for _ in range(args.rounds)]
    print(row(f"{tag}/prioritize, {n} NodeNames, a pod shape seen before", same, cpu.took()))
    new = [c.post("/prioritize", {"Pod": cycle_pod(1 + i % 8, 20_000 + i, f"new-{i}"),
                                  "NodeNames": names})[0] for i in range(args.rounds)]
    print(row(f"{tag}/prioritize, {n} NodeNames, a new pod shape each call", new, cpu.took()))
    rate, filt, prio = concurrent(port, names, args.clients, args.pods)
    spent = cpu.took()  # of both verbs: given per pod on the /filter row
    print(row(f"{tag}{args.clients} clients, {n} NodeNames: /filter (new shape), {rate:.0f} pods/s (CPU: a pod)",
              filt, spent))
    print(row(f"{tag}{args.clients} clients, {n} NodeNames: /prioritize of the passing nodes, {rate:.0f} pods/s",
              prio, 0.0))
    if first and args.body_rounds:
        cold, warm = [], []
        cold_cpu = warm_cpu = 0.0
        for r in range(args.body_rounds):
            body_texts = bench.cluster(args.body_nodes, now, seed=2 + r, prefix=f"body{r}")
            nodes = {"kind": "NodeList", "apiVersion": "v1", "metadata": {},
                     "items": [bench.node_object(k, v) for k, v in body_texts.items()]}
            p = cycle_pod(2, 2000 + r, f"body-{r}")
            cpu.took()
            cold.append(c.post("/prioritize", {"Pod": p, "Nodes": nodes})[0])
            cold_cpu += cpu.took()
            for i in range(3):
                p = cycle_pod(1 + i % 8, 3000 + 10 * r + i, f"body-{r}-{i}")
                warm.append(c.post("/prioritize", {"Pod": p, "Nodes": nodes})[0])
            warm_cpu += cpu.took()
        print(row(f"{tag}/prioritize, {args.body_nodes} Nodes in the body, first sight", cold, cold_cpu))
        print(row(f"{tag}/prioritize, {args.body_nodes} Nodes in the body, seen before", warm, warm_cpu))
    _, status, metrics = c.call("GET", "/metrics")
    assert status == 200 and b"accelerator_extender_requests_total" in metrics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="5000,20000", help="cluster sizes, comma separated")
    ap.add_argument("--rounds", type=int, default=200, help="calls per single-client case")
    ap.add_argument("--clients", type=int, default=4, help="concurrent clients (run at every size)")
    ap.add_argument("--pods", type=int, default=50, help="pods per concurrent client")
    ap.add_argument("--body-nodes", type=int, default=1000)
    ap.add_argument("--body-rounds", type=int, default=10, help="body-mode rounds: 1 first sight, 3 seen calls each "
                                                                "(at the first size only; 0: none)")
    ap.add_argument("--ready-timeout", type=float, default=900.0)
    ap.add_argument("--baseline", metavar="DIR", help="also measure the extender of this checkout (e.g. `git "
                                                      "archive` of an older commit), first, against the same "
                                                      "API server, each size: before/after side by side")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    print(f"# {time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} CPUs, "
          f"{platform.python_implementation()} {platform.python_version()}; extender in its own process, "
          f"node cache from a watch of tests/kubeapi.py on loopback")
    print("| case | calls | p50 ms | p99 ms | max ms | best ms | extender CPU ms a call |")
    print("|---|---|---|---|---|---|---|")
    trees = [("before: ", args.baseline), ("after: " if args.baseline else "", None)]
    for n in sizes:
        now = time.time()
        texts = bench.cluster(n, now, seed=1)
        with KubeAPIServer() as api, tempfile.TemporaryDirectory() as workdir:
            for name, text in texts.items():
                api.seed_node(name, annotations={ANN: text})
            for tag, tree in trees:
                if tag.startswith("before") and tree is None:
                    continue
                proc, port, ready = start_extender(api, workdir, args.ready_timeout, tree)
                try:
                    print(f"| {tag}({n} nodes: the extender started and loaded its cache in {ready:.1f} s) "
                          f"| | | | | | |")
                    cases(port, proc.pid, list(texts), args, n == sizes[0], now, tag)
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)


if __name__ == "__main__":
    main()
