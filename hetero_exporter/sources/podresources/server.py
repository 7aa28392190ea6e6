"""A real kubelet PodResources v1 gRPC server on a unix socket, for tests and simulation.

It serves ``List`` from records given in memory (``set_records``), speaking the same wire
protocol as the kubelet, so the client is exercised end to end. Fault knobs: ``delay``
(seconds before answering, to pass the client's timeout) and ``fail`` (a gRPC status code
name such as ``UNAVAILABLE`` to abort calls with).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent import futures
from typing import Any, Optional, Sequence

import grpc

from hetero_exporter.sources.podresources import api_pb2, api_pb2_grpc
from hetero_exporter.sources.podresources.mapping import ContainerDevices


def response_from_records(records: Sequence[ContainerDevices]) -> Any:
    """The ``ListPodResourcesResponse`` a kubelet would send for these records."""
    pods: dict[tuple[str, str], Any] = {}
    containers: dict[tuple[str, str, str], Any] = {}
    resp = api_pb2.ListPodResourcesResponse()
    for r in records:
        pod = pods.get((r.namespace, r.pod))
        if pod is None:
            pod = resp.pod_resources.add(name=r.pod, namespace=r.namespace)
            pods[(r.namespace, r.pod)] = pod
        c = containers.get((r.namespace, r.pod, r.container))
        if c is None:
            c = pod.containers.add(name=r.container)
            containers[(r.namespace, r.pod, r.container)] = c
        c.devices.add(resource_name=r.resource, device_ids=list(r.device_ids))
    return resp


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, owner: "PodResourcesServer"):
        self._owner = owner

    def List(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC method name
        o = self._owner
        o.calls += 1
        if o.delay:
            o.release.wait(o.delay)
        if o.fail:
            context.abort(getattr(grpc.StatusCode, o.fail), f"injected {o.fail}")
        return o.response

    def GetAllocatableResources(self, request: Any, context: Any) -> Any:  # noqa: N802
        return api_pb2.AllocatableResourcesResponse()


class PodResourcesServer:
    """``with PodResourcesServer(path, records) as srv: ...`` listens on ``unix://path``."""

    def __init__(self, socket_path: str, records: Sequence[ContainerDevices] = (), *, response: Any = None):
        self.socket_path = socket_path
        self.response = response if response is not None else response_from_records(records)
        self.delay = 0.0
        self.fail: Optional[str] = None
        self.calls = 0
        self.release = threading.Event()  # set to end an injected delay early
        self._server: Any = None

    def set_records(self, records: Sequence[ContainerDevices]) -> None:
        self.response = response_from_records(records)

    def start(self) -> "PodResourcesServer":
        os.makedirs(os.path.dirname(self.socket_path) or ".", exist_ok=True)
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="fake-kubelet"))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self), self._server)
        if self._server.add_insecure_port(f"unix://{self.socket_path}") == 0:
            raise OSError(f"cannot listen on unix://{self.socket_path}")
        self._server.start()
        # the socket file appears once the server listens; bounded wait
        deadline = time.monotonic() + 5.0
        while not os.path.exists(self.socket_path) and time.monotonic() < deadline:
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.stop(grace=0).wait(5.0)
            self._server = None

    def __enter__(self) -> "PodResourcesServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# --------------------------------------------------------------------------- separate process
# simulate/kubelet.py ``spawn`` starts this module as the simulated node's kubelet; main() prints
# the socket's path on stdout once the server answers there.


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse
    import json
    import signal
    ap = argparse.ArgumentParser(description="A fake kubelet PodResources server (simulation)")
    ap.add_argument("--socket", required=True)
    ap.add_argument("--records", required=True, help="JSON list of [namespace, pod, container, resource, ids]")
    ap.add_argument("--parent", type=int, help="exit when this process is gone")
    args = ap.parse_args(argv)
    with open(args.records, encoding="utf-8") as f:
        records = [ContainerDevices(ns, pod, c, res, tuple(ids)) for ns, pod, c, res, ids in json.load(f)]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server = PodResourcesServer(args.socket, records).start()
    print(args.socket, flush=True)  # spawn() waits for this line, not for the socket file (see there)
    try:
        while not stop.wait(1.0):
            if args.parent and os.getppid() != args.parent:  # the agent died: do not linger
                break
    finally:
        server.stop()
        if os.path.exists(args.socket):
            os.unlink(args.socket)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
