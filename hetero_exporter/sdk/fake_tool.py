"""The fake-tool harness: a scenario's devices printed by a fake vendor executable.

``install_tool`` writes a launcher named like the tool into the collector's workdir; it runs
the vendor's ``fake`` module with the agent's own interpreter, so the real collector runs the
real runner (hetero_exporter.sdk.runner) and the real parser against it. The scenario file is
baked into the launcher; the scenario time comes with each call in ``HETERO_SIM_T`` (the
collector passes ``clock_env``), so the fake prints the values of that moment.

One vocabulary of failure modes for every fake tool (scenario ``settings: {<vendor>: {mode:
M}}`` for the whole run, or a fault ``kind: M`` active between ``at`` and ``until``; the fault's
``command: summary|detail`` limits it to the main call or to the others):

- ``hang``: never answers (a grandchild ``sleep`` too: the runner must kill the process group;
  both pids are written to ``<tool>.hung.pids`` in the workdir); ``hung`` is the same;
- ``slow``: answers after ``seconds`` (default 2);
- ``truncated``: the first half of the answer;
- ``garbage``: deterministic junk instead of the answer;
- ``exit``: exits with ``status`` (default 255) and ``message`` on stderr.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Mapping, Optional, Sequence

ENV_T = "HETERO_SIM_T"
ENV_SCENARIO = "HETERO_SIM_SCENARIO"
ENV_WORKDIR = "HETERO_SIM_WORKDIR"
FAILURE_KINDS = ("hang", "hung", "slow", "garbage", "truncated", "exit")


def failure(scenario: Any, vendor: str, t: float, detail: bool) -> Optional[tuple[str, Mapping[str, Any]]]:
    """The failure mode in force for a call (``detail``: anything but the main table), from
    the vendor's settings (``mode``) or an active fault of a FAILURE_KINDS kind."""
    cfg = scenario.vendor_settings(vendor)
    if cfg.get("mode") in FAILURE_KINDS:
        return str(cfg["mode"]), cfg
    for f in scenario.faults_of(vendor):
        if f.kind in FAILURE_KINDS and f.active(t):
            which = f.params.get("command", "all")
            if which == "all" or (which == "detail") == detail:
                return f.kind, f.params
    return None


def garbage(t: float) -> str:
    """Deterministic junk: what a crashed or mis-linked tool might spill."""
    h = hashlib.sha256(f"garbage:{t:.3f}".encode()).digest() * 8
    return "".join(chr(32 + b % 95) if b % 7 else "\n" for b in h) + "\x00\x1b[0m\n"


def _hang(workdir: Optional[str], tool: str) -> None:
    child = subprocess.Popen(["sleep", "3600"])  # a grandchild: the runner must kill it too
    if workdir:
        with open(os.path.join(workdir, f"{tool}.hung.pids"), "w") as f:
            f.write(f"{os.getpid()} {child.pid}\n")
    for _ in range(3600):  # bounded: an hour, far past any deadline
        time.sleep(1)


Answer = Callable[[Any, float, Sequence[str]], tuple[int, str, str]]


def fake_main(vendor: str, tool: str, answer_fn: Answer, argv: Optional[Sequence[str]] = None,
              detail: Optional[Callable[[Sequence[str]], bool]] = None, error_message: str = "") -> int:
    """Entry point of a fake tool: load the scenario, apply the failure mode, print."""
    from hetero_exporter import vendors
    from hetero_exporter.model.scenario import load_file
    argv = list(sys.argv[1:] if argv is None else argv)
    try:  # the file the agent wrote into the launcher (Scenario.source), read as the agent read it
        scenario = load_file(os.environ[ENV_SCENARIO], vendors.uuid_prefix)
    except (KeyError, ValueError, OSError) as e:
        sys.stderr.write(f"fake {tool}: cannot load the scenario: {e}\n")
        return 2
    t = float(os.environ.get(ENV_T, "0") or 0)
    mode = failure(scenario, vendor, t, detail(argv) if detail else len(argv) > 1)
    if mode and mode[0] in ("hang", "hung"):
        _hang(os.environ.get(ENV_WORKDIR), tool)
    if mode and mode[0] == "slow":
        time.sleep(float(mode[1].get("seconds", 2.0)))
    if mode and mode[0] == "exit":
        sys.stderr.write(str(mode[1].get("message") or error_message or f"{tool}: simulated failure") + "\n")
        return int(mode[1].get("status", 255))
    status, out, err = answer_fn(scenario, t, argv)
    if mode and mode[0] == "garbage":
        out = garbage(t)
    elif mode and mode[0] == "truncated":
        out = out[: len(out) // 2]
    sys.stdout.write(out)
    sys.stderr.write(err)
    return status


def write_launcher(workdir: str, name: str, module: str, scenario_path: str) -> str:
    """An executable ``workdir/name`` that runs ``python -m module`` with this interpreter.

    It runs from ``workdir``: ``python -m`` puts the current directory first on sys.path, and
    started from a source checkout it would import the checkout's ``hetero_exporter`` (which
    has no ``collectors`` subpackage) instead of the installed one."""
    path = os.path.join(workdir, name)
    script = (f"#!/bin/sh\ncd {shlex.quote(workdir)} || exit 1\n"
              f"{ENV_SCENARIO}={shlex.quote(scenario_path)} {ENV_WORKDIR}={shlex.quote(workdir)} "
              f"exec {shlex.quote(sys.executable)} -m {module} \"$@\"\n")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(script)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
    return path


def clock_env(clock: Any) -> Callable[[], dict[str, str]]:
    """The per-call environment that tells a fake tool the scenario time."""
    t = getattr(clock, "t", None)
    return lambda: {ENV_T: repr(float(t())) if t is not None else "0.0"}


def install_tool(scenario: Any, clock: Any, workdir: Optional[str], tool: str,
                 module: str) -> tuple[str, Callable[[], dict[str, str]]]:
    """Write the fake ``tool`` (running ``module``) for ``scenario``; returns (its path,
    the per-call environment)."""
    from hetero_exporter.sdk.contract import Unavailable
    if not scenario.source or not os.path.isfile(scenario.source):
        raise Unavailable(f"the fake {tool} needs the scenario's file (Scenario.source)")
    wd = workdir or tempfile.mkdtemp(prefix=f"hetero-{tool}-")
    os.makedirs(wd, exist_ok=True)
    return write_launcher(wd, tool, module, os.path.abspath(scenario.source)), clock_env(clock)




def tool_entry(vendor: str, tool: str, answer_fn: Answer, module: str, *, error_message: str = "",
               detail: Optional[Callable[[Sequence[str]], bool]] = None
               ) -> tuple[Callable[..., int], Callable[..., tuple[str, Callable[[], dict[str, str]]]]]:
    """``(main, install)`` of a fake tool module: ``main(argv)`` answers one call through the
    failure modes (any argument makes a call a detail call unless ``detail`` says otherwise);
    ``install(scenario, clock, workdir)`` writes its launcher."""
    def main(argv: Optional[Sequence[str]] = None) -> int:
        return fake_main(vendor, tool, answer_fn, argv, detail=detail or (lambda a: bool(a)),
                         error_message=error_message)

    def install(scenario: Any, clock: Any, workdir: Optional[str]) -> tuple[str, Callable[[], dict[str, str]]]:
        return install_tool(scenario, clock, workdir, tool, module)
    return main, install
