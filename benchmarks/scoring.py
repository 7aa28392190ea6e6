"""Latency of the scheduler extender's /prioritize (and /filter), end to end over HTTP.

Cluster: N nodes of 8 devices each, a mix of documented server shapes (scoring.synthetic: HGX H100,
DGX-1 V100, A100 PCIe, Atlas 800T A2, MI300X), random load, one node in ten with a failed device.
Each node's annotation is the compact document the agent writes.

Cases (the client keeps one HTTP/1.1 connection, as kube-scheduler does; a call is timed from
sending the request to having read the whole answer):

- nodeCacheCapable, 5,000 NodeNames, the warm node cache:
  - a pod shape seen before (a batch of alike pods: verdicts kept per shape, scoring.columns);
  - a new pod shape (per-device memory that changes each call, 1-8 GPUs, both policies, the three
    topology policies), as kube-scheduler sends it: /filter, then /prioritize of the same pod;
  - a new pod shape sent to /prioritize directly (the per-node work on the precomputed state);
  - a /filter where nothing fits, so that every node words its reason;
- nodes/warm: 1,000 Node objects in the request body (nodes-in-request mode), annotations
  unchanged since the previous call (decoded once, reused); a new pod shape each call;
- nodes/cold: the same, the first time those annotations are seen (decode + precompute);
- filter: /filter in both modes (the nodes mode echoes the passing Node objects back);
- concurrent: 4 clients (threads, one connection each) scheduling pods at once, each pod a new
  shape: /filter, then /prioritize; pods/s over all of them and each pod's latency (issue 17).

Besides wall-clock percentiles, the CPU time this process spent per call (client and extender
thread together) is given: on a shared machine it is the figure other jobs disturb least.

Targets (issue 8): /prioritize over 5,000 nodes from the warm cache, p50 < 20 ms, p99 < 50 ms.
Issue 17: p99 < 25 ms for a seen and for a new shape (< 60 ms at 20,000 nodes); 4 concurrent
clients >= 50 pods/s, p99 < 60 ms; body mode, 1,000 Nodes: first sight p99 < 600 ms, seen before
p99 < 150 ms.

    python benchmarks/scoring.py [--nodes 5000] [--body-nodes 1000] [--rounds 200] [--clients 4] [--no-body]

``--per-pod`` (issue 39): no HTTP, one thread: the extender's CPU (``time.thread_time``) a pod of the
4-client stream of benchmarks/extender_http.py (/filter by ``filter_json`` of a new shape over every
name, then /prioritize of the names that passed, bodies encoded as its clients do), several runs,
the best run's mean. It imports ``hetero_exporter`` from PYTHONPATH: run it with
``PYTHONPATH=DIR`` to measure another checkout (``git archive``) on the same cluster.

    python benchmarks/scoring.py --per-pod [--nodes 5000] [--rounds 100] [--runs 3]
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import platform
import random
import threading
import time

from hetero_exporter.model import compact_json
from hetero_exporter.scoring import columns, synthetic
from hetero_exporter.scoring.extender import Extender
from hetero_exporter.scoring.nodetable import NodeTable
from hetero_exporter.scoring.scorer import Scorer
from hetero_exporter.scoring.server import ExtenderServer

SHAPES = (("hgx-h100", 4), ("dgx1-v100", 1), ("pcie-a100", 2), ("atlas800-910b", 2), ("mi300x", 1))
ANN = "hetero-exporter.io/devices"


def cluster(n: int, now: float, seed: int, prefix: str = "node") -> dict[str, str]:
    rnd = random.Random(seed)
    shapes = [s for s, w in SHAPES for _ in range(w)]
    out = {}
    for i in range(n):
        name = f"{prefix}-{i:05d}"
        loads = {d: rnd.choice((0.0, 0.0, 0.3, 0.9)) for d in range(8)}
        health = {rnd.randrange(8): "failed"} if rnd.random() < 0.1 else {}
        snap = synthetic.node(name, shapes[i % len(shapes)], time=now - rnd.uniform(0, 120), loads=loads,
                              health=health)
        out[name] = compact_json(snap)
    return out


def node_object(name: str, text: str) -> dict:
    """A Node as kube-scheduler sends it in nodes-in-request mode (status trimmed to the usual keys)."""
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1",
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64"},
                         "annotations": {ANN: text}},
            "spec": {"podCIDR": "10.0.0.0/24"},
            "status": {"capacity": {"cpu": "128", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": "8"},
                       "allocatable": {"cpu": "126", "memory": "2000Gi", "pods": "110", "nvidia.com/gpu": "8"},
                       "conditions": [{"type": t, "status": "False"} for t in
                                      ("MemoryPressure", "DiskPressure", "PIDPressure")] +
                                     [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                       "nodeInfo": {"kubeletVersion": "v1.30.0", "containerRuntimeVersion": "containerd://1.7.0"}}}


TOPOLOGIES = ("same-node", "same-switch", "same-fabric")


def pod(gpus: int, memory_mib: int | None = None) -> dict:
    """A pod of ``gpus`` NVIDIA GPUs; with ``memory_mib``, a request annotation that makes the
    shape new (memory per device), and varies the policy and the topology policy with it."""
    meta: dict = {"name": "bench", "namespace": "ml"}
    if memory_mib is not None:
        meta["annotations"] = {"hetero-exporter.io/request": json.dumps({
            "memory_per_device": f"{memory_mib}Mi", "policy": ("binpack", "spread")[memory_mib % 2],
            "topology": TOPOLOGIES[memory_mib % 3]})}
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}


class Client:
    def __init__(self, address):
        self.conn = http.client.HTTPConnection(*address, timeout=120)

    def call(self, path: str, body: bytes) -> tuple[tuple[float, float], bytes]:
        """((wall seconds, CPU seconds of this process: client and server thread), answer)."""
        start, cpu = time.perf_counter(), time.process_time()
        self.conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        took = time.perf_counter() - start, time.process_time() - cpu
        assert r.status == 200, data[:300]
        return took, data


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def row(name: str, xs: list[tuple[float, float]]) -> str:
    ms = [w * 1e3 for w, _ in xs]
    cpu = [c * 1e3 for _, c in xs]
    return (f"| {name} | {len(ms)} | {pct(ms, 50):.1f} | {pct(ms, 99):.1f} | {min(ms):.1f} | "
            f"{pct(cpu, 50):.1f} | {pct(cpu, 99):.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--body-nodes", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--clients", type=int, default=4, help="concurrent clients of the concurrent case")
    ap.add_argument("--no-body", action="store_true", help="skip the nodes-in-request cases")
    ap.add_argument("--no-gc-policy", action="store_true", help="leave column fills to the GC (columns.GC off)")
    ap.add_argument("--per-pod", action="store_true", help="in process, no HTTP: CPU ms a pod of /filter + "
                                                           "/prioritize (issue 39)")
    ap.add_argument("--runs", type=int, default=3, help="--per-pod: runs of --rounds pods (best kept)")
    args = ap.parse_args()
    if args.per_pod:
        per_pod(args)
        return
    now = time.time()

    t = time.perf_counter()
    texts = cluster(args.nodes, now, seed=1)
    build = time.perf_counter() - t
    scorer = Scorer("binpack")
    table = NodeTable(scorer)
    t = time.perf_counter()
    table.replace(texts)
    load = time.perf_counter() - t
    gc.freeze()  # as `scheduler-extender` does once its cache is loaded
    if not args.no_gc_policy:
        columns.GC.enabled = True  # and freezes what each new shape's column makes
    size = sum(len(x) for x in texts.values()) / len(texts)
    ext = Extender(scorer, table, traces=64)
    server = ExtenderServer(("127.0.0.1", 0), ext).start()
    client = Client(server.address)
    names = list(texts)

    results: dict[str, list[tuple[float, float]]] = {
        k: [] for k in ("filter/new", "prio/after-filter", "prio/same", "prio/new", "filter/none")}
    same = json.dumps({"Pod": pod(4), "NodeNames": names}).encode()
    client.call("/prioritize", same)  # the first call of this shape fills the memo
    for i in range(args.rounds):
        # what kube-scheduler does for one pod: /filter, then /prioritize with the same pod
        body = json.dumps({"Pod": pod(1 + i % 8, 1000 + i), "NodeNames": names}).encode()
        results["filter/new"].append(client.call("/filter", body)[0])
        results["prio/after-filter"].append(client.call("/prioritize", body)[0])
        results["prio/same"].append(client.call("/prioritize", same)[0])
        fresh = json.dumps({"Pod": pod(1 + i % 8, 20_000 + i), "NodeNames": names}).encode()
        results["prio/new"].append(client.call("/prioritize", fresh)[0])
        if i % 10 == 0:  # 488+ GiB per device: no node fits, each one says why
            none = json.dumps({"Pod": pod(1 + i % 8, 500_000 + i), "NodeNames": names}).encode()
            results["filter/none"].append(client.call("/filter", none)[0])
    _, answer = client.call("/prioritize", same)
    scores = [h["Score"] for h in json.loads(answer)]
    assert len(scores) == args.nodes and max(scores) > 0
    pods, rate = concurrent(server.address, names, args.clients, max(8, args.rounds // 2))
    if args.no_body:
        server.stop()
        report(args, build, load, size, 0, results, pods, rate, [], [], [])
        return

    # nodes in the request body: a fresh extender (empty decode cache) for the cold calls
    body_texts = cluster(args.body_nodes, now, seed=2, prefix="body")
    nodes = {"kind": "NodeList", "apiVersion": "v1", "metadata": {},
             "items": [node_object(n, x) for n, x in body_texts.items()]}
    cold: list[tuple[float, float]] = []
    warm: list[tuple[float, float]] = []
    filter_nodes: list[tuple[float, float]] = []
    body_size = 0
    for c in range(max(3, args.rounds // 40)):
        ext2 = Extender(scorer, None, traces=8)
        server2 = ExtenderServer(("127.0.0.1", 0), ext2).start()
        client2 = Client(server2.address)
        body = json.dumps({"Pod": pod(2, 2000 + c), "Nodes": nodes}).encode()
        body_size = len(body)
        cold.append(client2.call("/prioritize", body)[0])
        for i in range(max(1, args.rounds // 4 // max(3, args.rounds // 40))):
            body = json.dumps({"Pod": pod(1 + i % 8, 3000 + 100 * c + i), "Nodes": nodes}).encode()
            warm.append(client2.call("/prioritize", body)[0])
            filter_nodes.append(client2.call("/filter", body)[0])
        server2.stop()
    server.stop()
    report(args, build, load, size, body_size, results, pods, rate, cold, warm, filter_nodes)


def per_pod(args: argparse.Namespace) -> None:
    """CPU ms a pod (``time.thread_time``) of /filter and /prioritize, in process: each run a
    stream of new shapes as the 4 clients of extender_http.py send them (pods of 39-43 GiB a
    device, 1-8 GPUs), the best run's mean and p99 per call."""
    import msgspec
    import hetero_exporter
    texts = cluster(args.nodes, time.time(), seed=1)
    scorer = Scorer("binpack")
    table = NodeTable(scorer)
    table.replace(texts)
    gc.freeze()
    columns.GC.enabled = not args.no_gc_policy
    ext = Extender(scorer, table, traces=256)
    names = list(texts)
    passed_of = msgspec.json.Decoder(dict).decode
    best: dict[str, list[float]] = {}
    for run in range(args.runs):
        took: dict[str, list[float]] = {"filter": [], "prioritize": []}
        for i in range(args.rounds):
            k = i % 4
            p = pod(1 + (i // 4) % 8, 40_000 + 1000 * k + run * args.rounds + i)
            p["metadata"].update(uid=f"r{run}-{i}", resourceVersion="1")
            body = msgspec.json.encode({"Pod": p, "NodeNames": names})
            t = time.thread_time()
            answer, _ = ext.filter_json(body)
            took["filter"].append(time.thread_time() - t)
            passed = passed_of(answer)["NodeNames"]
            body = msgspec.json.encode({"Pod": p, "NodeNames": passed})
            t = time.thread_time()
            ext.prioritize(body)
            took["prioritize"].append(time.thread_time() - t)
        total = sum(took["filter"]) + sum(took["prioritize"])
        if not best or total < sum(best["filter"]) + sum(best["prioritize"]):
            best = took
        print(f"run {run}: {total / args.rounds * 1e3:.2f} ms a pod")
    print(f"# per pod, in process ({hetero_exporter.__file__}), {args.nodes} nodes, {args.rounds} pods, "
          f"best of {args.runs} runs; load average {' '.join(f'{x:.1f}' for x in __import__('os').getloadavg())}")
    for verb, xs in best.items():
        ms = [x * 1e3 for x in xs]
        print(f"{verb}: mean {sum(ms) / len(ms):.2f} ms, p50 {pct(ms, 50):.2f}, p99 {pct(ms, 99):.2f}")
    print(f"pod: {(sum(best['filter']) + sum(best['prioritize'])) / args.rounds * 1e3:.2f} ms CPU")


def concurrent(address, names: list[str], clients: int, per_client: int) -> tuple[list[tuple[float, float]], float]:
    """Each pod's (wall, CPU) for /filter then /prioritize, ``clients`` at once; pods per second."""
    took: list[tuple[float, float]] = []
    lock = threading.Lock()

    def one(c: int) -> None:
        client = Client(address)
        for i in range(per_client):
            body = json.dumps({"Pod": pod(1 + i % 8, 40_000 + 1000 * c + i), "NodeNames": names}).encode()
            (w1, c1), _ = client.call("/filter", body)
            (w2, c2), _ = client.call("/prioritize", body)
            with lock:
                took.append((w1 + w2, c1 + c2))

    threads = [threading.Thread(target=one, args=(c,)) for c in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return took, len(took) / (time.perf_counter() - start)


def report(args, build, load, size, body_size, results, pods, rate, cold, warm, filter_nodes) -> None:
    print(f"# {time.strftime('%Y-%m-%d')}, {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}; cache: {args.nodes} nodes x 8 devices, annotation {size / 1024:.1f} KiB "
          f"avg, built in {build:.1f} s, loaded (decode + precompute) in {load:.1f} s "
          f"({load / args.nodes * 1e3:.2f} ms/node); body mode: {args.body_nodes} nodes, "
          f"{body_size / 2**20:.1f} MiB request")
    print("| case | calls | p50 ms | p99 ms | best ms | CPU p50 ms | CPU p99 ms |")
    print("|---|---|---|---|---|---|---|")
    n = args.nodes
    print(row(f"/prioritize, {n} NodeNames, a pod shape seen before (batch of alike pods)", results["prio/same"]))
    print(row(f"/filter, {n} NodeNames, a new pod shape", results["filter/new"]))
    print(row(f"/prioritize, {n} NodeNames, the same pod after its /filter", results["prio/after-filter"]))
    print(row(f"/prioritize, {n} NodeNames, a new pod shape without /filter first", results["prio/new"]))
    print(row(f"/filter, {n} NodeNames, nothing fits (every node says why)", results["filter/none"]))
    print(row(f"{args.clients} clients at once, {n} NodeNames, a new shape: /filter + /prioritize of one pod "
              f"({rate:.0f} pods/s; CPU: all threads)", pods))
    if warm:
        print(row(f"/prioritize, {args.body_nodes} Nodes in the body, annotations seen before", warm))
        print(row(f"/filter, {args.body_nodes} Nodes in the body (echoed back), annotations seen before",
                  filter_nodes))
        print(row(f"/prioritize, {args.body_nodes} Nodes in the body, first sight (decode all)", cold))


if __name__ == "__main__":
    main()
