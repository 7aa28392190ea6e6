"""The recovery gates' self-tests (health/detect/gate.py): a vendor tool run for one device below
the host root, with a deadline, on a thread of its own so the sampler never waits on it.

``ExecGates.result(device, argv, timeout, retry, after)`` answers at once from what it knows: the
result of a run of ``argv`` for the device that started at or after ``after`` (the device stopped
being failed then), else None, and queues a run when none is queued or running (a failed run is
run again ``retry`` seconds after it ended). Runs go through sdk/runner.py (no shell, process
group killed past the deadline, output capped) and sdk/host_tools.py (the tool's host path below
the host root, its vendor's driver libraries, or chroot): one at a time, at most ``MAX_QUEUED``
waiting. Exit 0 passes; the reason shown is the last line the tool printed, or why it failed.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

from hetero_exporter import vendors
from hetero_exporter.model import DeviceSample
from hetero_exporter.model.evaluation import GateResult
from hetero_exporter.model.spec import ToolSpec
from hetero_exporter.sdk import host_tools, runner
from hetero_exporter.sdk.contract import HostPaths, Unavailable

log = logging.getLogger(__name__)
MAX_QUEUED = 64
MAX_KEYS = 1024  # (device, argv) pairs remembered
OUTPUT_BYTES = 1 << 20  # a self-test's report is a few KiB
SHOWN = 200  # characters of the tool's last line kept as the reason


@dataclass(frozen=True)
class _Run:
    started: float
    result: Optional[GateResult] = None  # None while running


class ExecGates:
    """The gate runner of one agent (``HealthVerdicts.gate_runner``); ``close()`` stops its thread."""

    def __init__(self, host: HostPaths, clock: Callable[[], float] = time.time,
                 run: Callable[..., runner.CliResult] = runner.run):
        self.host, self._clock, self._run = host, clock, run
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, tuple[str, ...]], _Run] = {}
        self._queue: "queue.Queue[tuple[tuple[str, tuple[str, ...]], str, float]]" = queue.Queue(MAX_QUEUED)
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()

    def result(self, d: DeviceSample, argv: tuple[str, ...], timeout: float, retry: float,
               after: float) -> Optional[GateResult]:
        key = (d.identity.uuid, argv)
        now = self._clock()
        with self._lock:
            last = self._runs.get(key)
            fresh = last is not None and last.started >= after
            if last is not None and last.result is None:
                return None  # running or queued
            if fresh and last is not None and last.result is not None and (
                    last.result.passed or now - last.result.time < retry):
                return last.result
            if len(self._runs) >= MAX_KEYS and key not in self._runs:
                self._runs.clear()
            try:
                self._queue.put_nowait((key, d.identity.vendor, timeout))
            except queue.Full:
                return last.result if fresh and last is not None else None
            self._runs[key] = _Run(max(now, after))
            self._start()
        return last.result if fresh and last is not None else None

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="recovery-gates", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                key, vendor, timeout = self._queue.get(timeout=1.0)
            except queue.Empty:
                continue
            result = self._one(key[1], vendor, timeout)
            with self._lock:
                started = self._runs.get(key, _Run(result.time)).started
                self._runs[key] = _Run(started, result)
            log.info("recovery gate", extra={"uuid": key[0], "passed": result.passed, "detail": result.detail})

    def _one(self, argv: tuple[str, ...], vendor: str, timeout: float) -> GateResult:
        """Run the self-test once; its result at the time it ended."""
        try:
            command, how = self._command(argv, vendor)
            out = self._run(command, timeout, max_bytes=OUTPUT_BYTES, check=False, **how)
        except runner.CliTimeout:
            return GateResult(False, self._clock(), f"no answer within {timeout:g} s; killed")
        except (runner.CliError, Unavailable, OSError) as e:
            return GateResult(False, self._clock(), str(e)[:SHOWN])
        lines = [x.strip() for x in (out.stdout or out.stderr).splitlines() if x.strip()]
        last = lines[-1][:SHOWN] if lines else ""
        said = f"exit {out.returncode}" + (f": {last}" if last else "")
        return GateResult(out.returncode == 0, self._clock(), ("passed, " if out.returncode == 0 else "failed, ") + said)

    def _command(self, argv: tuple[str, ...], vendor: str) -> tuple[list[str], dict]:
        """(argv as the runner takes it, its keywords): below the host root, with the vendor's
        driver libraries (the spec's tool of that name, else its first), or as it is."""
        root = self.host.root
        if root is None:
            return list(argv), {}
        spec = vendors.spec(vendor)
        tools = spec.tools if spec is not None else ()
        name = os.path.basename(argv[0])
        tool = next((t for t in tools if t.name == name), tools[0] if tools else ToolSpec(name))
        path = host_tools.tool_path(root, argv[0], tool, self.host.exec_mode)
        if path.chroot is not None:
            return [path.host_path, *argv[1:]], {"env": dict(path.env), "chroot": path.chroot}
        return [str(path), *argv[1:]], {"env": dict(path.env) or None}

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
