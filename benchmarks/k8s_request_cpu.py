"""CPU a Kubernetes request costs the agent: through the kubernetes client, and the same request
over a kept-alive http.client connection (issue 39 §1 and §5: what replacing the client would save).

The loopback API server of tests/kubeapi.py runs in this process with one Node whose annotation
makes it ~12 KB (the size of an accelerator Node's devices annotation); each way GETs it
``--calls`` times after 20 to warm up, and ``time.thread_time`` of the calling thread is the
figure (the server's threads are not counted).

    python benchmarks/k8s_request_cpu.py [--calls 300] [--json]
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
from hetero_exporter.k8s.client import connect  # noqa: E402

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
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    server = KubeAPIServer().start()
    try:
        server.seed_node(NODE, annotations={"example.com/devices": "x" * 12000})
        with tempfile.TemporaryDirectory() as tmp:
            cluster = connect(server.write_kubeconfig(Path(tmp) / "kubeconfig"))
        api = Api(cluster.api_client)
        host, port = server._httpd.server_address[:2]
        conn = http.client.HTTPConnection(host, port, timeout=30)
        headers = {"Authorization": "Bearer test-token", "Accept": "application/json"}

        def plain() -> object:
            conn.request("GET", PATH, headers=headers)
            return json.loads(conn.getresponse().read())

        figures = {"kubernetes_client_ms": round(cpu_ms(lambda: api.get(PATH), args.calls), 3),
                   "http_client_ms": round(cpu_ms(plain, args.calls), 3), "calls": args.calls}
    finally:
        server.close()
    print(f"GET of a ~12 KB Node, CPU of the calling thread a request: kubernetes client "
          f"{figures['kubernetes_client_ms']:.2f} ms, http.client {figures['http_client_ms']:.2f} ms")
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
