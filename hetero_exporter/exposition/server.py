"""HTTP endpoints: ``/metrics`` (Prometheus text or OpenMetrics), ``/healthz`` (the process
answers), ``/readyz`` (a first snapshot has been taken), ``/snapshot`` (its schema-1 JSON).

Each request is served on its own thread and only reads the published snapshot, so a slow
vendor can never hold a scrape.
"""

from __future__ import annotations

import gzip
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from hetero_exporter.model import NodeSnapshot, snapshot_to_json

log = logging.getLogger(__name__)


def parse_listen(text: str) -> tuple[str, int]:
    """'HOST:PORT', ':PORT' or '[v6]:PORT' -> (host, port). ValueError with a clear message."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen expects HOST:PORT, got {text!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, registry: CollectorRegistry,
                 latest: Callable[[], Optional[NodeSnapshot]]):
        if ":" in addr[0]:
            import socket
            self.address_family = socket.AF_INET6
        super().__init__(addr, _Handler)
        self.registry = registry
        self.latest = latest


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # Keep-alive scrapes: without TCP_NODELAY each answer waits ~40 ms on delayed ACK.
    disable_nagle_algorithm = True

    def log_message(self, fmt: str, *args) -> None:  # noqa: D401 - quiet access log
        log.debug("http %s", fmt % args)

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        if "gzip" in self.headers.get("Accept-Encoding", "") and len(body) > 1024:
            body = gzip.compress(body, compresslevel=1)
            self.send_response(code)
            self.send_header("Content-Encoding", "gzip")
        else:
            self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            if path == "/metrics":
                encoder, ctype = choose_encoder(self.headers.get("Accept", ""))
                self._send(200, encoder(self.server.registry), ctype)
            elif path == "/healthz":
                self._send(200, b"ok\n", "text/plain; charset=utf-8")
            elif path == "/readyz":
                if self.server.latest() is None:
                    self._send(503, b"no snapshot yet\n", "text/plain; charset=utf-8")
                else:
                    self._send(200, b"ready\n", "text/plain; charset=utf-8")
            elif path == "/snapshot":
                snap = self.server.latest()
                if snap is None:
                    self._send(503, b'{"error": "no snapshot yet"}\n', "application/json")
                else:
                    self._send(200, snapshot_to_json(snap).encode(), "application/json")
            elif path == "/":
                self._send(200, b"hetero-exporter: /metrics /healthz /readyz /snapshot\n",
                           "text/plain; charset=utf-8")
            else:
                self._send(404, b"not found\n", "text/plain; charset=utf-8")
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception:  # noqa: BLE001 - answer 500, keep serving
            log.exception("error serving %s", path)
            try:
                self._send(500, b"internal error\n", "text/plain; charset=utf-8")
            except OSError:
                pass


class MetricsServer:
    """Serves a registry on HOST:PORT in a background thread."""

    def __init__(self, listen: str, registry: CollectorRegistry,
                 latest: Callable[[], Optional[NodeSnapshot]]):
        self._httpd = _Server(parse_listen(listen), registry, latest)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="http", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        return self._httpd.server_address[:2]

    def start(self) -> "MetricsServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
