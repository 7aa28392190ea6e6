"""CPU a Kubernetes request costs the agent: through the kubernetes client, and the same request
over a kept-alive http.client connection (issue 39 §1 and §5: what replacing the client would save);
and decoding the budget's whole listing of ``--nodes`` accelerator Nodes, by ``json.loads`` and by
``k8s.client.decode_json`` (msgspec where installed).

The loopback API server of tests/kubeapi.py runs in this process with Nodes whose annotation
makes each ~17 KB (about the size of an accelerator Node's devices annotation); each way GETs one
``--calls`` times after 20 to warm up, and ``time.thread_time`` of the calling thread is the
figure (the server's threads are not counted).

    python benchmarks/k8s_request_cpu.py [--calls 300] [--nodes 300] [--json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from kubeapi import KubeAPIServer  # noqa: E402

from hetero_exporter.k8s.api import Api  # noqa: E402
from hetero_exporter.k8s import client as k8s_client  # noqa: E402
from hetero_exporter.k8s.client import connect, decode_json  # noqa: E402

NODE = "gpu-1"
PATH = f"/api/v1/nodes/{NODE}"
WARM_UP = 20


def cpu_ms(call: Callable[[], object], calls: int) -> float:
    """Milliseconds of this thread's CPU per call."""
    for _ in range(WARM_UP):
        call()
    t0 = time.thread_time()
    for _ in range(calls):
        call()
    return (time.thread_time() - t0) / calls * 1000


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--nodes", type=int, default=300, help="accelerator Nodes in the listing decoded")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    server = KubeAPIServer().start()
    try:
        devices = json.dumps([{"index": i, "uuid": f"GPU-{i:08x}", "model": "H100 80GB HBM3",
                                "samples": {f"f{k}": {"value": k * 1.5, "source": "nvml"} for k in range(40)}}
                               for i in range(8)])  # escaped JSON text, as the devices annotation is
        for i in range(max(1, args.nodes)):
            server.seed_node(NODE if i == 0 else f"gpu-{i + 1}", annotations={"example.com/devices": devices})
        with tempfile.TemporaryDirectory() as tmp:
            cluster = connect(server.write_kubeconfig(Path(tmp) / "kubeconfig"))
        api = Api(cluster.api_client)
        host, port = server._httpd.server_address[:2]
        conn = http.client.HTTPConnection(host, port, timeout=30)
        headers = {"Authorization": "Bearer test-token", "Accept": "application/json"}

        def plain() -> object:
            conn.request("GET", PATH, headers=headers)
            return json.loads(conn.getresponse().read())

        conn.request("GET", "/api/v1/nodes", headers=headers)
        listing = conn.getresponse().read()
        rounds = max(5, args.calls // 20)
        decoder = k8s_client._json_decoder
        k8s_client._json_decoder = lambda: json.loads  # type: ignore[assignment]  # the decoder before msgspec
        before = round(cpu_ms(lambda: api.get(PATH), args.calls), 3)
        k8s_client._json_decoder = decoder
        figures = {"kubernetes_client_json_loads_ms": before,
                   "kubernetes_client_ms": round(cpu_ms(lambda: api.get(PATH), args.calls), 3),
                   "http_client_ms": round(cpu_ms(plain, args.calls), 3), "calls": args.calls,
                   "node_bytes": len(json.dumps(api.get(PATH))), "listing_bytes": len(listing),
                   "listing_json_loads_ms": round(cpu_ms(lambda: json.loads(listing), rounds), 2),
                   "listing_decode_json_ms": round(cpu_ms(lambda: decode_json(listing), rounds), 2)}
    finally:
        server.close()
    print(f"GET of a ~17 KB Node, CPU of the calling thread a request: kubernetes client "
          f"{figures['kubernetes_client_ms']:.2f} ms (decoded by json.loads: "
          f"{figures['kubernetes_client_json_loads_ms']:.2f} ms), http.client {figures['http_client_ms']:.2f} ms "
          f"(the Node: {figures['node_bytes']} bytes)")
    print(f"a listing of {args.nodes} such Nodes ({figures['listing_bytes'] / 1e6:.1f} MB) decoded: json.loads "
          f"{figures['listing_json_loads_ms']:.1f} ms, decode_json {figures['listing_decode_json_ms']:.1f} ms")
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
