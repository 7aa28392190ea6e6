"""Issue 35, items 2 and 3: what an OTLP receiver answers, and the files the otlp section names.

- An answer of 100 MiB, or 100 KiB of gzip that inflates to 100 MiB, is not read whole: the
  export fails and is counted, and the agent's memory stays far below the answer's size.
- A FIFO named as ``otlp.tls.ca_file`` (or as the config file, a scenario or the kubeconfig) is
  refused with one line at start instead of hanging it.
"""

from __future__ import annotations

import gzip
import http.server
import io
import os
import subprocess
import sys
import threading
import time
import tracemalloc
import zlib

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.metric_exporter")

from hetero_exporter.exposition.export import bounded_http  # noqa: E402
from hetero_exporter.exposition.export.tls_files import TlsFiles  # noqa: E402
from hetero_exporter.validate import ValidationError  # noqa: E402
from test_otlp import _export_once, _settings, snapshot  # noqa: E402,F401 - the module's fixture

BIG = 100 << 20


class _Answering:
    """A loopback OTLP/HTTP endpoint that takes the request and answers 200 with ``body`` (bytes,
    or a size: that many zero bytes streamed in 1 MiB pieces) and the given Content-Encoding."""

    def __init__(self, body, encoding: str = ""):
        outer = self
        self.posts = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.posts += 1
                size = body if isinstance(body, int) else len(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(size))
                if encoding:
                    self.send_header("Content-Encoding", encoding)
                self.end_headers()
                try:
                    if isinstance(body, bytes):
                        self.wfile.write(body)
                    else:
                        piece = bytes(1 << 20)
                        for _ in range(size >> 20):  # bounded: the answer's size in MiB
                            self.wfile.write(piece)
                except OSError:
                    pass  # the client stopped reading: what it should do

            def log_message(self, *args):
                pass
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> int:
        self._thread.start()
        return self._server.server_address[1]

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def _export_measured(snapshot, port):
    settings = _settings(endpoint=f"http://127.0.0.1:{port}", protocol="http", interval=60, timeout=20)
    tracemalloc.start()
    try:
        failures = _export_once(snapshot, settings)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return failures, peak


def test_a_huge_answer_is_a_counted_failure_not_a_memory_spike(snapshot):
    with _Answering(BIG) as port:
        failures, peak = _export_measured(snapshot, port)
    assert failures.value("otlp") >= 1
    assert peak < 32 << 20, f"peak {peak >> 20} MiB while the receiver answered {BIG >> 20} MiB"


def test_a_gzip_bomb_is_not_inflated(snapshot):
    bomb = gzip.compress(bytes(BIG), compresslevel=9)
    assert len(bomb) < 1 << 20
    with _Answering(bomb, "gzip") as port:
        failures, peak = _export_measured(snapshot, port)
    assert failures.value("otlp") >= 1
    assert peak < 32 << 20, f"peak {peak >> 20} MiB for a gzip body inflating to {BIG >> 20} MiB"


def test_a_small_gzip_answer_is_a_success(snapshot):
    with _Answering(gzip.compress(b""), "gzip") as port:
        failures, _ = _export_measured(snapshot, port)
    assert failures.value("otlp") == 0


class _Raw(io.BytesIO):
    """urllib3's response as read_bounded reads it."""

    def read(self, n=-1, decode_content=False):
        assert decode_content is False  # inflating is read_bounded's business, bounded
        return super().read(n)


def test_read_bounded_decodes_what_it_may_and_refuses_the_rest():
    far = time.monotonic() + 60
    assert bounded_http.read_bounded(_Raw(b"ok"), "", 64, far) == b"ok"
    assert bounded_http.read_bounded(_Raw(gzip.compress(b"ok")), "gzip", 64, far) == b"ok"
    assert bounded_http.read_bounded(_Raw(zlib.compress(b"ok")), "Deflate ", 64, far) == b"ok"
    for raw, encoding, why in [(b"x" * 65, "", "larger than"), (gzip.compress(b"x" * 65), "gzip", "inflates to"),
                               (b"ok", "br", "encoding"), (b"\x1f\x8b garbage", "gzip", "corrupt")]:
        with pytest.raises(bounded_http.AnswerRefused, match=why):
            bounded_http.read_bounded(_Raw(raw), encoding, 64, far)
    with pytest.raises(bounded_http.AnswerRefused, match="longer than"):
        bounded_http.read_bounded(_Raw(b"slow"), "", 64, time.monotonic() - 1)


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo.pem"
    os.mkfifo(path)
    return str(path)


def test_tls_files_are_regular_files_read_once(tmp_path, fifo):
    pem = tmp_path / "ca.pem"
    pem.write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    files = TlsFiles.read({"ca_file": str(pem), "cert_file": None})
    path = files.path("ca_file")
    pem.unlink()
    os.mkfifo(pem)  # swapped afterwards: the copy the library opens is not
    with open(path, "rb") as f:
        assert f.read() == b"-----BEGIN CERTIFICATE-----\n"
    assert files.path("cert_file") is None and files.data("cert_file") is None
    files.close()
    with pytest.raises(ValidationError, match=r"^otlp\.tls\.ca_file: .*not a regular file"):
        TlsFiles.read({"ca_file": fifo})
    big = tmp_path / "big.pem"
    big.write_bytes(b"x" * ((1 << 20) + 1))
    with pytest.raises(ValidationError, match=r"^otlp\.tls\.key_file: .*over"):
        TlsFiles.read({"key_file": str(big)})


def _start(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    """The agent started with ``args``; it must exit at once (a hang is the old bug: the timeout fails the test)."""
    return subprocess.run([sys.executable, "-m", "hetero_exporter", "run", "--listen", "127.0.0.1:0", *args],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "KUBECONFIG": ""})


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_fifo_as_the_ca_file_is_exit_2_with_one_line(tmp_path, fifo, protocol):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"otlp:\n  endpoint: https://127.0.0.1:4318\n  protocol: {protocol}\n  tls:\n    ca_file: {fifo}\n")
    done = _start(["--simulate", "--config", str(cfg)], tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "otlp.tls.ca_file" in done.stderr and "regular file" in done.stderr


def test_a_fifo_as_the_config_or_the_scenario_is_exit_2_with_one_line(tmp_path, fifo):
    for args, why in ((["--simulate", "--config", fifo], "regular file"), (["--simulate", fifo], "not a file")):
        done = _start(args, tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.count("\n") == 1 and why in done.stderr, done.stderr


def test_a_fifo_as_the_kubeconfig_is_said_not_waited_for(fifo):
    pytest.importorskip("kubernetes")
    from hetero_exporter.k8s import client
    cluster = client.connect(fifo)  # old code: load_kube_config blocked in open() for ever
    assert not cluster.enabled and "not a regular file" in cluster.reason
