"""A real OTLP metrics receiver for the tests: the collector's MetricsService over gRPC and
OTLP/HTTP (protobuf, POST /v1/metrics), both from the opentelemetry-proto messages, on 127.0.0.1.

It keeps every ExportMetricsServiceRequest it was sent and can hang (``hold``) or refuse
(``refuse``) to play a slow or broken collector. ``exported_snapshot`` is what the OTLP tests send.
"""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as svc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc as svc_grpc

MAX_BODY = 64 << 20


def exported_snapshot(scenario: Path) -> Any:
    """The second cycle of a simulated node (counters and rates have their values then)."""
    from hetero_exporter import cli

    args, extra = cli.build_parser().parse_known_args(["inspect", "--simulate", str(scenario)])
    agent = cli.agent(args, extra)
    try:
        sampler = agent.start().sampler
        sampler.collect()
        return sampler.collect()
    finally:
        agent.close()


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return None if kind is None else getattr(v, kind)


@dataclass(frozen=True)
class Point:
    metric: str
    kind: str  # gauge | sum
    monotonic: Optional[bool]
    unit: str
    value: float
    attributes: dict
    resource: dict


class Receiver:
    """Both transports; ``requests`` holds what arrived, ``arrived`` is set on each request."""

    def __init__(self) -> None:
        self.requests: list[svc.ExportMetricsServiceRequest] = []
        self.arrived = threading.Event()
        self.hold = threading.Event()  # set: requests wait until released (a hung collector)
        self.release = threading.Event()
        self.refuse = False
        self._lock = threading.Lock()
        self._grpc: Any = None
        self._http: Optional[ThreadingHTTPServer] = None
        self.grpc_port = self.http_port = 0

    def _take(self, req: svc.ExportMetricsServiceRequest) -> bool:
        if self.hold.is_set():
            self.release.wait(30)
        if self.refuse:
            return False
        with self._lock:
            self.requests.append(req)
        self.arrived.set()
        return True

    # ---- servers

    def start(self) -> "Receiver":
        receiver = self

        class Metrics(svc_grpc.MetricsServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - the service's method name
                if not receiver._take(request):
                    context.abort(grpc.StatusCode.UNAVAILABLE, "refused by the test")
                return svc.ExportMetricsServiceResponse()

        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        svc_grpc.add_MetricsServiceServicer_to_server(Metrics(), self._grpc)
        self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._grpc.start()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                if self.path != "/v1/metrics" or not 0 <= length <= MAX_BODY:
                    self.send_error(404 if self.path != "/v1/metrics" else 413)
                    return
                req = svc.ExportMetricsServiceRequest.FromString(self.rfile.read(length))
                if not receiver._take(req):
                    self.send_error(503)
                    return
                body = svc.ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http_port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.release.set()
        if self._grpc is not None:
            self._grpc.stop(0)
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()

    # ---- what arrived

    def points(self) -> list[Point]:
        out = []
        with self._lock:
            requests = list(self.requests)
        for req in requests:
            for rm in req.resource_metrics:
                resource = {a.key: _value(a.value) for a in rm.resource.attributes}
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        kind = m.WhichOneof("data")
                        data = getattr(m, kind)
                        monotonic = data.is_monotonic if kind == "sum" else None
                        for dp in data.data_points:
                            value = dp.as_double if dp.WhichOneof("value") == "as_double" else dp.as_int
                            out.append(Point(m.name, kind, monotonic, m.unit, value,
                                             {a.key: _value(a.value) for a in dp.attributes}, resource))
        return out
