"""The scheduler extender's HTTP endpoints.

``POST /filter``, ``POST /prioritize`` (kube-scheduler extender v1 JSON), ``GET /explain?trace=ID``
(per-node reasons of one call; without ``trace``, the recent calls), ``/healthz``, ``/readyz``
(the node cache has loaded its first list, or there is no cache). Every answer carries its trace
id in the ``X-Trace-Id`` header and every log line of the call names it. A request that is not
ExtenderArgs gets 400 with a message saying what is wrong; an unexpected failure gets 500 with
the trace id only (the stack trace goes to the log, never to the client).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from hetero_exporter.scoring.extender import BadRequest, Extender, new_trace

log = logging.getLogger(__name__)

MAX_BODY = 512 * 2**20  # a 5,000-node NodeList with annotations is ~100 MiB


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], extender: Extender, ready: Callable[[], bool]):
        if ":" in addr[0]:
            import socket
            self.address_family = socket.AF_INET6
        super().__init__(addr, _Handler)
        self.extender = extender
        self.ready = ready


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # kube-scheduler keeps its connections alive
    disable_nagle_algorithm = True  # headers and body go out at once: no delayed-ACK stall per call

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("http %s", fmt % args)

    def _send(self, code: int, body: bytes, trace: str = "", ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if trace:
            self.send_header("X-Trace-Id", trace)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, doc: Any, trace: str = "") -> None:
        self._send(code, json.dumps(doc, separators=(",", ":")).encode(), trace)

    def _body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked" or length is None:
            self.close_connection = True
            raise BadRequest("a Content-Length header is required (chunked bodies are not accepted)")
        if not length.isdigit():
            self.close_connection = True
            raise BadRequest(f"bad Content-Length {length!r}")
        n = int(length)
        if n > MAX_BODY:
            self.close_connection = True
            raise BadRequest(f"body of {n} bytes is over the limit of {MAX_BODY}")
        return self.rfile.read(n)

    def do_POST(self) -> None:
        trace = new_trace()
        path = urlsplit(self.path).path.rstrip("/")
        start = time.perf_counter()
        try:
            if path not in ("/filter", "/prioritize"):
                self._json(404, {"Error": f"no such endpoint {path!r}: POST /filter or /prioritize"}, trace)
                return
            body = self._body()
            ext = self.server.extender
            if path == "/filter":
                result, _ = ext.filter(body, trace)
                self._json(200, result, trace)
            else:
                encoded, _ = ext.prioritize(body, trace)
                self._send(200, encoded, trace)
            log.debug("answered", extra={"trace": trace, "verb": path[1:],
                                         "ms": round((time.perf_counter() - start) * 1e3, 2)})
        except BadRequest as e:
            log.warning("bad request", extra={"trace": trace, "verb": path[1:], "error": str(e)})
            self._reply_error(400, str(e), trace)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception:  # noqa: BLE001 - answer 500 with the trace id, keep serving
            log.exception("error serving request", extra={"trace": trace, "verb": path[1:]})
            self._reply_error(500, f"internal error; see the extender log for trace {trace}", trace)

    def _reply_error(self, code: int, message: str, trace: str) -> None:
        try:
            self._json(code, {"Error": message, "Trace": trace}, trace)
        except OSError:
            pass

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        try:
            if path == "/healthz":
                self._send(200, b"ok\n", ctype="text/plain; charset=utf-8")
            elif path == "/readyz":
                if self.server.ready():
                    self._send(200, b"ready\n", ctype="text/plain; charset=utf-8")
                else:
                    self._send(503, b"node cache not loaded yet\n", ctype="text/plain; charset=utf-8")
            elif path == "/explain":
                trace = (parse_qs(url.query).get("trace") or [""])[0]
                doc = self.server.extender.explain(trace)
                if doc is None:
                    self._json(404, {"Error": f"no trace {trace!r} (only the most recent calls are kept)"})
                else:
                    self._json(200, doc, trace)
            elif path == "/":
                self._send(200, b"hetero-exporter scheduler extender: POST /filter /prioritize; "
                                b"GET /explain?trace=ID /healthz /readyz\n", ctype="text/plain; charset=utf-8")
            else:
                self._json(404, {"Error": f"no such endpoint {path!r}"})
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception:  # noqa: BLE001
            log.exception("error serving %s", path)
            self._reply_error(500, "internal error; see the extender log", "")


class ExtenderServer:
    """Serves an Extender on (host, port) in a background thread; port 0 picks a free one."""

    def __init__(self, address: tuple[str, int], extender: Extender,
                 ready: Callable[[], bool] = lambda: True):
        self._httpd = _Server(address, extender, ready)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="extender-http", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        return self._httpd.server_address[:2]

    def start(self) -> "ExtenderServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
