"""HTTP endpoints: ``/metrics`` (Prometheus text or OpenMetrics), ``/healthz`` (the process
answers), ``/readyz`` (a first snapshot has been taken), ``/snapshot`` (its schema-1 JSON).

Served by ``web.server.HttpServer`` (bounded connections, timeouts, optional TLS and basic auth
from the web configuration; the probes ``/healthz`` and ``/readyz`` need no password). Handlers
only read the published snapshot, so a slow vendor can never hold a scrape; the body of an
unchanged snapshot is rendered once (``exposition.cache``).
"""

from __future__ import annotations

import gzip
import threading
from typing import Callable, Optional

from prometheus_client import CollectorRegistry

from hetero_exporter.exposition.cache import Exposition
from hetero_exporter.model import NodeSnapshot, snapshot_to_json
from hetero_exporter.web.server import HttpServer, Limits, Request, Response, ServerFace, WebSettings

GZIP_MIN = 1024  # bytes: smaller bodies go out as they are
PROBES = ("/healthz", "/readyz")
# GET-only endpoints: no request carries a body worth more than a few KiB
AGENT_LIMITS = Limits(max_body_bytes=16 * 1024, body_timeout=10.0)


def parse_listen(text: str) -> tuple[str, int]:
    """'HOST:PORT', ':PORT' or '[v6]:PORT' -> (host, port). ValueError with a clear message."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen expects HOST:PORT, got {text!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def accepts_gzip(header: Optional[str]) -> bool:
    """Accept-Encoding names gzip (or *) without q=0."""
    for item in (header or "").lower().split(","):
        coding, *params = (p.strip() for p in item.split(";"))
        if coding in ("gzip", "*"):
            q = next((p[2:] for p in params if p.startswith("q=")), "1")
            try:
                if float(q) > 0:
                    return True
            except ValueError:
                continue
    return False


class MetricsServer(ServerFace):
    """Serves a registry on HOST:PORT in a background thread (``address``, ``start``, ``stop``)."""

    def __init__(self, listen: str, registry: CollectorRegistry,
                 latest: Callable[[], Optional[NodeSnapshot]],
                 web: Optional[WebSettings] = None, limits: Optional[Limits] = None):
        self.exposition = Exposition(registry)
        self._latest = latest
        self._json_lock = threading.Lock()
        self._json: tuple[Optional[NodeSnapshot], bytes, Optional[bytes]] = (None, b"", None)
        self._http = HttpServer(parse_listen(listen), self.handle, limits=limits or AGENT_LIMITS, web=web,
                                public_paths=PROBES, name="http")

    def handle(self, req: Request) -> Response:
        if req.method not in ("GET", "HEAD"):
            return Response.text(405, "only GET and HEAD\n", headers=(("Allow", "GET, HEAD"),))
        gz = accepts_gzip(req.headers.get("accept-encoding"))
        if req.path == "/metrics":
            chunks, ctype, gzipped = self.exposition.render(req.headers.get("accept"), gz, GZIP_MIN)
            return _encoded(chunks, ctype, gzipped, vary="Accept, Accept-Encoding")
        if req.path == "/healthz":
            return Response.text(200, "ok\n")
        if req.path == "/readyz":
            if self._latest() is None:
                return Response.text(503, "no snapshot yet\n")
            return Response.text(200, "ready\n")
        if req.path == "/snapshot":
            snap = self._latest()
            if snap is None:
                return Response(503, b'{"error": "no snapshot yet"}\n', "application/json")
            body, compressed = self._snapshot_json(snap, gz)
            return _encoded([compressed or body], "application/json", compressed is not None,
                            vary="Accept-Encoding")
        if req.path == "/":
            return Response.text(200, "hetero-exporter: /metrics /healthz /readyz /snapshot\n")
        return Response.text(404, "not found\n")

    def _snapshot_json(self, snap: NodeSnapshot, gz: bool) -> tuple[bytes, Optional[bytes]]:
        """The snapshot's JSON (and its gzip when asked and worth it), made once per snapshot."""
        with self._json_lock:
            cached, body, compressed = self._json
            if cached is not snap:
                body, compressed = snapshot_to_json(snap).encode(), None
            if gz and compressed is None and len(body) > GZIP_MIN:
                compressed = gzip.compress(body, compresslevel=1)
            self._json = (snap, body, compressed)
        return body, compressed if gz else None


def _encoded(chunks: list[bytes], ctype: str, gz: bool, vary: str) -> Response:
    headers = [("Vary", vary)]
    if gz:
        headers.append(("Content-Encoding", "gzip"))
    return Response(200, chunks, ctype, headers=headers)
