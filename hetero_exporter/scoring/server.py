"""The scheduler extender's HTTP endpoints.

``POST /filter``, ``POST /prioritize`` (kube-scheduler extender v1 JSON), ``GET /explain?trace=ID``
(per-node reasons of one call; without ``trace``, the recent calls), ``/healthz``, ``/readyz``
(the node cache has loaded its first list, or there is no cache). Every answer carries its trace
id in the ``X-Trace-Id`` header and every log line of the call names it. A request that is not
ExtenderArgs gets 400 with a message saying what is wrong; an unexpected failure gets 500 with
the trace id only (the stack trace goes to the log, never to the client).

Served by ``web.server.HttpServer``: bounded connections and timeouts, a request body limit
(413 before reading it), optional TLS (kube-scheduler's ``enableHTTPS`` + ``tlsConfig``) from the
web configuration.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any, Callable, Optional
from urllib.parse import parse_qs

from hetero_exporter.scoring.extender import BadRequest, Extender, new_trace
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
EXTENDER_LIMITS = Limits(max_body_bytes=DEFAULT_MAX_BODY, body_timeout=60.0)
TEXT = "text/plain; charset=utf-8"
PROBES = ("/healthz", "/readyz")


def _json(code: int, doc: Any, trace: str = "") -> Response:
    return _reply(code, json.dumps(doc, separators=(",", ":")).encode(), trace)


def _reply(code: int, body: bytes, trace: str = "", ctype: str = "application/json") -> Response:
    return Response(code, body, ctype, headers=(("X-Trace-Id", trace),) if trace else ())


class ExtenderServer(ServerFace):
    """Serves an Extender on (host, port) in a background thread; port 0 picks a free one
    (``address``, ``start``, ``stop``). ``max_body_bytes`` overrides ``limits.max_body_bytes``."""

    def __init__(self, address: tuple[str, int], extender: Extender,
                 ready: Callable[[], bool] = lambda: True, web: Optional[WebSettings] = None,
                 max_body_bytes: int = DEFAULT_MAX_BODY, limits: Optional[Limits] = None):
        self.extender = extender
        self.ready = ready
        limits = dataclasses.replace(limits or EXTENDER_LIMITS, max_body_bytes=max_body_bytes)
        self._http = HttpServer(address, self.handle, limits=limits, web=web, public_paths=PROBES,
                                name="extender-http")

    def handle(self, req: Request) -> Response:
        if req.method == "POST":
            return self._post(req)
        if req.method in ("GET", "HEAD"):
            return self._get(req)
        return _json(405, {"Error": f"method {req.method} not allowed: POST /filter /prioritize, GET the rest"})

    def _post(self, req: Request) -> Response:
        trace = new_trace()
        path = req.path.rstrip("/")
        verb = path[1:]
        start = time.perf_counter()
        try:
            if path not in ("/filter", "/prioritize"):
                return _json(404, {"Error": f"no such endpoint {path!r}: POST /filter or /prioritize"}, trace)
            if "chunked" in req.headers.get("transfer-encoding", "").lower() or "content-length" not in req.headers:
                raise BadRequest("a Content-Length header is required (chunked bodies are not accepted)")
            if path == "/filter":
                result, _ = self.extender.filter(req.body, trace)
                answer = _json(200, result, trace)
            else:
                encoded, _ = self.extender.prioritize(req.body, trace)
                answer = _reply(200, encoded, trace)
            log.debug("answered", extra={"trace": trace, "verb": verb,
                                         "ms": round((time.perf_counter() - start) * 1e3, 2)})
            return answer
        except BadRequest as e:
            log.warning("bad request", extra={"trace": trace, "verb": verb, "error": str(e)})
            return _json(400, {"Error": str(e), "Trace": trace}, trace)
        except Exception:  # noqa: BLE001 - answer 500 with the trace id, keep serving
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
                trace = (parse_qs(req.query).get("trace") or [""])[0]
                doc = self.extender.explain(trace)
                if doc is None:
                    return _json(404, {"Error": f"no trace {trace!r} (only the most recent calls are kept)"})
                return _json(200, doc, trace)
            if path == "/":
                return _reply(200, b"hetero-exporter scheduler extender: POST /filter /prioritize; "
                                   b"GET /explain?trace=ID /healthz /readyz\n", ctype=TEXT)
            return _json(404, {"Error": f"no such endpoint {path!r}"})
        except Exception:  # noqa: BLE001
            log.exception("error serving %s", path)
            return _json(500, {"Error": "internal error; see the extender log", "Trace": ""})
