"""Issue 25, item 17: a host tool that forks a daemon (``setsid``) holding the stdout pipe left a
process behind every cycle: killing the call's process group does not reach another session.
After a deadline no process of the call is left; the ones killed outside the group are counted."""

from __future__ import annotations

import os
import sys
import time

import pytest

from hetero_exporter.sdk import runner
from hetero_exporter.sdk.runner import CliTimeout

TOOL = r'''#!{python}
import os, sys, time
pid = os.fork()
if pid == 0:
    os.setsid()  # a session of its own: out of the call's process group
    with open({pidfile!r}, "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(1)  # keeps the inherited stdout open
time.sleep(3600)
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not reaped yet by its new parent) is dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_setsid_daemon_holding_stdout_does_not_outlive_the_deadline(tmp_path):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc")
    pidfile = tmp_path / "daemon.pid"
    tool = tmp_path / "hung-smi"
    tool.write_text(TOOL.format(python=sys.executable, pidfile=str(pidfile)))
    tool.chmod(0o755)
    before = runner.killed_total()
    with pytest.raises(CliTimeout):
        runner.run([str(tool)], timeout=2.0)
    for _ in range(100):  # bounded: the daemon wrote its pid before the deadline
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    for _ in range(100):
        if not _alive(pid):
            break
        time.sleep(0.05)
    assert not _alive(pid), "the daemon outlived the call"
    assert runner.killed_total() == before + 1


def test_the_count_is_exported():
    from prometheus_client import CollectorRegistry, generate_latest
    from hetero_exporter.exposition.collector import ToolProcessesCollector
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ToolProcessesCollector(lambda: 3))
    assert "accelerator_tool_processes_killed_total 3.0" in generate_latest(reg).decode()
