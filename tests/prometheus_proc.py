"""A real Prometheus (the Debian package's binary) on 127.0.0.1 with its own config and storage in a
temporary folder, removed on stop. Used by tests/test_prometheus_integration.py and
scripts/render_overview.py. Never the packaged daemon on :9090."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import yaml


def free_port() -> int:
    """A port free on 127.0.0.1 right now (Prometheus cannot report a port 0 it bound)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PromError(RuntimeError):
    pass


class Prometheus:
    """``targets`` maps a node name to the agent's HOST:PORT; the node becomes the ``node`` target
    label, as deploy/base/servicemonitor.yaml relabels it from the pod's node name. ``features``:
    ``--enable-feature`` names (``exemplar-storage``; a name this version does not know is a warning
    in its log, not an error)."""

    def __init__(self, binary: str, targets: dict[str, str], rule_files: Sequence[Path] = (),
                 job: str = "hetero-exporter", interval: str = "1s", start_timeout: float = 60,
                 features: Sequence[str] = ()):
        self.dir = Path(tempfile.mkdtemp(prefix="hetero-prom-"))
        self.proc: Optional[subprocess.Popen] = None
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
            "rule_files": [str(Path(p).resolve()) for p in rule_files],
            "scrape_configs": [{
                "job_name": job,
                "static_configs": [{"targets": [addr], "labels": {"node": node}} for node, addr in targets.items()],
            }],
        }
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        try:
            for _attempt in range(3):  # the free port may be taken between the probe and the bind
                self.port = free_port()
                self.base = f"http://127.0.0.1:{self.port}"
                self._log = open(self.dir / "prometheus.log", "w+b")
                self.proc = subprocess.Popen(
                    [binary, f"--config.file={self.dir / 'prometheus.yml'}",
                     f"--storage.tsdb.path={self.dir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                     "--log.level=warn", *([f"--enable-feature={','.join(features)}"] if features else [])],
                    stdout=self._log, stderr=subprocess.STDOUT, cwd=self.dir)
                if self._wait_ready(start_timeout):
                    return
                self._kill()
            raise PromError("prometheus did not become ready:\n" + self.log_tail())
        except BaseException:
            self.stop()
            raise

    # ------------------------------------------------------------------ lifecycle

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.base + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        return False

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()

    def log_tail(self, n: int = 4000) -> str:
        try:
            return (self.dir / "prometheus.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None:
            self._kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Prometheus":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ HTTP API

    def api(self, path: str, **params: Any) -> Any:
        """``data`` of a /api/v1 call; raises PromError with Prometheus' message on error."""
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        url = f"{self.base}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                doc = json.load(r)
        except urllib.error.HTTPError as e:
            try:
                doc = json.load(e)
            except ValueError:
                raise PromError(f"{path}: HTTP {e.code}") from None
        if doc.get("status") != "success":
            raise PromError(f"{doc.get('errorType')}: {doc.get('error')}")
        return doc["data"]

    def query(self, expr: str, at: Optional[float] = None) -> list[dict]:
        """Instant vector (or scalar, as one sample) of ``expr``."""
        data = self.api("query", query=expr, time=at)
        if data["resultType"] == "vector":
            return data["result"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        raise PromError(f"unexpected result type {data['resultType']} for {expr}")

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PromError("prometheus exited:\n" + self.log_tail())
            if predicate():
                return
            time.sleep(0.5)
        raise PromError(f"timed out after {timeout}s waiting for {what}")
