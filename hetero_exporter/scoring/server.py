"""The scheduler extender's HTTP endpoints.

``POST /filter``, ``POST /prioritize`` (kube-scheduler extender v1 JSON), ``GET /explain?trace=ID``
(per-node reasons of one call, ``&verb=prioritize`` for that call of the trace; without ``trace``,
the recent calls; a trace of another replica is answered 404 naming it), ``/metrics`` (the
extender's own, scoring/metrics.py), ``/healthz``, ``/readyz`` (the node cache has loaded its
first list, or there is no cache). Every answer carries its trace id in the ``X-Trace-Id`` header
and every log line of the call names it. A request that is not
ExtenderArgs gets 400 with a message saying what is wrong; an unexpected failure gets 500 with
the trace id only (the stack trace goes to the log, never to the client).

Served by ``web.server.HttpServer``: bounded connections and timeouts, a request body limit
(413 before reading it), optional TLS (kube-scheduler's ``enableHTTPS`` + ``tlsConfig``) from the
web configuration. ``metrics_address`` adds a port serving ``/metrics`` and the probes only, so that
a NetworkPolicy can admit Prometheus there and kube-scheduler alone to the extender port.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable, Optional
from urllib.parse import parse_qs

from hetero_exporter.scoring import jsonsafe
from hetero_exporter.scoring.extender import BadRequest, Extender
from hetero_exporter.web.server import HttpServer, Limits, Request, Response, ServerFace, WebSettings

log = logging.getLogger(__name__)

# Body limit. In node-cache mode (nodeCacheCapable) kube-scheduler sends NodeNames only: 5,000
# names are ~150 KB. In body mode it sends whole Node objects as its informer holds them: 10-30
# KiB each (status.images up to 50 entries, conditions, labels, our devices annotation of ~13
# KiB); benchmarks/scoring.py's 1,000 nodes are 22 MiB. 64 MiB fits ~2,000-3,000 nodes in body
# mode while keeping a hostile body (and the JSON tree decoded from it, several times larger)
# bounded; larger clusters use node-cache mode (body mode is too slow there anyway: BENCHMARKS.md).
# --max-body-bytes raises it.
DEFAULT_MAX_BODY = 64 * 2**20
MAX_BODY = DEFAULT_MAX_BODY  # the former name
# a 64 MiB body takes seconds even on a slow link; kube-scheduler's own timeout is 5 s by default
# kube-scheduler gives up on an extender call after its httpTimeout (5 s by default): a body
# still arriving after that is answered to nobody, so it holds its slot no longer
EXTENDER_LIMITS = Limits(max_body_bytes=DEFAULT_MAX_BODY, body_timeout=5.0)
TEXT = "text/plain; charset=utf-8"
PROBES = ("/healthz", "/readyz")
VERBS = {"/filter": "filter", "/prioritize": "prioritize"}


def _json(code: int, doc: Any, trace: str = "") -> Response:
    return _reply(code, jsonsafe.dumps(doc), trace)


def _reply(code: int, body: bytes, trace: str = "", ctype: str = "application/json") -> Response:
    return Response(code, body, ctype, headers=(("X-Trace-Id", trace),) if trace else ())


class ExtenderServer(ServerFace):
    """Serves an Extender on (host, port) in a background thread; port 0 picks a free one
    (``address``, ``start``, ``stop``). ``max_body_bytes`` overrides ``limits.max_body_bytes``."""

    def __init__(self, address: tuple[str, int], extender: Extender,
                 ready: Callable[[], bool] = lambda: True, web: Optional[WebSettings] = None,
                 max_body_bytes: int = DEFAULT_MAX_BODY, limits: Optional[Limits] = None,
                 metrics_address: Optional[tuple[str, int]] = None):
        self.extender = extender
        self.ready = ready
        limits = dataclasses.replace(limits or EXTENDER_LIMITS, max_body_bytes=max_body_bytes)
        # /filter and /prioritize one at a time, in order: their work is Python and numpy under one
        # GIL, and four workers contending for it (numpy releases it between operations) cost a
        # fifth of the throughput at 5,000 nodes (BENCHMARKS.md "One scoring lane"); the
        # probes, /metrics and /explain keep the other workers
        self._http = HttpServer(address, self.handle, limits=limits, web=web, public_paths=PROBES,
                                serial_paths=tuple(VERBS), name="extender-http")
        self.metrics_http: Optional[HttpServer] = None
        if metrics_address is not None:
            self.metrics_http = HttpServer(metrics_address, self._handle_metrics_port, web=web,
                                           public_paths=PROBES, name="extender-metrics")

    def start(self) -> "ExtenderServer":
        super().start()
        if self.metrics_http is not None:
            self.metrics_http.start()
        return self

    def stop(self) -> None:
        if self.metrics_http is not None:
            self.metrics_http.stop()
        super().stop()

    def _handle_metrics_port(self, req: Request) -> Response:
        path = req.path.rstrip("/")
        if req.method in ("GET", "HEAD") and path in ("/metrics", *PROBES):
            return self._get(req)
        return _json(404, {"Error": "this port serves GET /metrics, /healthz and /readyz only"})

    def handle(self, req: Request) -> Response:
        if req.method == "POST":
            return self._post(req)
        if req.method in ("GET", "HEAD"):
            return self._get(req)
        return _json(405, {"Error": f"method {req.method} not allowed: POST /filter /prioritize, GET the rest"})

    def _post(self, req: Request) -> Response:
        start = time.perf_counter()
        path = req.path.rstrip("/")
        verb = VERBS.get(path)
        if verb is None:
            return _json(404, {"Error": f"no such endpoint {path!r}: POST /filter or /prioritize"})
        answer = self._call(verb, req)
        self.extender.metrics.observe(verb, answer.status, time.perf_counter() - start)
        return answer

    def _call(self, verb: str, req: Request) -> Response:
        try:  # the trace is the pod's cycle's (extender.py); a bad request gets a fresh one
            if "chunked" in req.headers.get("transfer-encoding", "").lower() or "content-length" not in req.headers:
                raise BadRequest("a Content-Length header is required (chunked bodies are not accepted)")
            if verb == "filter":
                encoded, ev = self.extender.filter_json(req.body)
                return _reply(200, encoded, ev.trace)
            encoded, ev = self.extender.prioritize(req.body)
            return _reply(200, encoded, ev.trace)
        except BadRequest as e:
            trace = self.extender.pod_traces.new()
            log.warning("bad request", extra={"trace": trace, "verb": verb, "error": str(e)})
            return _json(400, {"Error": str(e), "Trace": trace}, trace)
        except Exception:  # noqa: BLE001 - answer 500 with the trace id, keep serving
            trace = self.extender.pod_traces.new()
            log.exception("error serving request", extra={"trace": trace, "verb": verb})
            return _json(500, {"Error": f"internal error; see the extender log for trace {trace}", "Trace": trace},
                         trace)

    def _get(self, req: Request) -> Response:
        path = req.path.rstrip("/") or "/"
        try:
            if path == "/healthz":
                return _reply(200, b"ok\n", ctype=TEXT)
            if path == "/readyz":
                if self.ready():
                    return _reply(200, b"ready\n", ctype=TEXT)
                return _reply(503, b"node cache not loaded yet\n", ctype=TEXT)
            if path == "/explain":
                start = time.perf_counter()
                answer = self._explain(req)
                self.extender.metrics.observe("explain", answer.status, time.perf_counter() - start)
                return answer
            if path == "/metrics":
                body, ctype = self.extender.metrics.render()
                return _reply(200, body, ctype=ctype)
            if path == "/":
                return _reply(200, b"hetero-exporter scheduler extender: POST /filter /prioritize; "
                                   b"GET /explain?trace=ID /metrics /healthz /readyz\n", ctype=TEXT)
            return _json(404, {"Error": f"no such endpoint {path!r}"})
        except Exception:  # noqa: BLE001
            log.exception("error serving %s", path)
            return _json(500, {"Error": "internal error; see the extender log", "Trace": ""})

    def _explain(self, req: Request) -> Response:
        query = parse_qs(req.query)
        trace = (query.get("trace") or [""])[0][:200]
        verb = (query.get("verb") or [""])[0]
        if verb not in ("", "filter", "prioritize"):
            return _json(400, {"Error": f"verb {verb[:40]!r}: filter or prioritize"})
        doc = self.extender.explain(trace, verb or None)
        if doc is None:
            return _json(404, {"Error": self.extender.not_found(trace)})
        return _json(200, doc, trace)
