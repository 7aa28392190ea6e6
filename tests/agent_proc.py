"""Start `hetero-exporter run` as a subprocess on 127.0.0.1:0 and find the port it bound."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Optional, Sequence


class Agent:
    def __init__(self, args: Sequence[str], env: Optional[dict] = None, timeout: float = 60):
        cmd = [sys.executable, "-m", "hetero_exporter", "run", "--listen", "127.0.0.1:0",
               "--log-format", "json", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        self.logs: list[dict] = []
        self._raw: list[str] = []
        self._port: Optional[int] = None
        self._cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        with self._cv:
            self._cv.wait_for(lambda: self._port is not None or self.proc.poll() is not None, timeout)
        if self._port is None:
            self.stop()
            raise RuntimeError("agent did not start:\n" + "\n".join(self._raw[-30:]))
        self.base = f"http://127.0.0.1:{self._port}"

    def _read(self) -> None:
        for line in self.proc.stderr:
            with self._cv:
                self._raw.append(line.rstrip())
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                self.logs.append(doc)
                if doc.get("msg") == "serving":
                    self._port = int(doc["listen"].rsplit(":", 1)[1])
                self._cv.notify_all()

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def wait_metrics(self, predicate, timeout: float = 30) -> str:
        """Poll /metrics until predicate(text) holds (bounded); returns the last text."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            code, text = self.get("/metrics")
            if code == 200 and predicate(text):
                return text
            time.sleep(0.2)
        raise AssertionError("condition not met on /metrics within %ss; last:\n%s" % (timeout, text[-3000:]))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
