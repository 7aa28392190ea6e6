"""Issue 35, item 11: a vendor tool that never exits was still running after the agent stopped.
The agent (a subprocess, as on a node) runs a fake hy-smi that hangs (it and a grandchild
``sleep``) with a tool deadline far past the test; SIGTERM stops the agent cleanly, and no
process of the tool is left (the runner kills every call still running at exit)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from agent_proc import Agent
from cli_fakes import alive

SCENARIO = {"name": "hung-tool", "devices": [{"vendor": "hygon", "count": 1, "product": "Z100L",
                                              "memory_total": "32752MiB", "pci_address": "0000:4d:00.0"}],
            "settings": {"hygon": {"mode": "hang"}}}


def _until(cond, what: str, limit: float = 120.0):
    end = time.monotonic() + limit
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < end, f"never: {what}"
        time.sleep(0.1)


@pytest.fixture
def short_tmp():
    """TMPDIR for the agent (its simulation work dir, the fake kubelet's socket: short paths)."""
    d = tempfile.mkdtemp(prefix="hl-")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def test_a_hung_tool_does_not_outlive_the_stopped_agent(tmp_path, short_tmp):
    if not os.path.isdir("/proc/self"):
        pytest.skip("needs /proc")
    scenario = tmp_path / "hung.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    config = tmp_path / "agent.yaml"  # the cycle gives up after 5 s; the tool's own deadline is 600 s
    config.write_text(json.dumps({"collectors": {"hy_smi": {"timeout": 5, "cli_timeout": 600}}}))
    pids: list[int] = []
    agent = Agent(["--simulate", str(scenario), "--config", str(config), "--interval", "60"],
                  env={"TMPDIR": str(short_tmp)}, timeout=120)
    try:
        found = _until(lambda: list(short_tmp.glob("hetero-exporter-*/**/*.hung.pids")), "the fake tool hanging")
        pids = [int(p) for p in _until(lambda: found[0].read_text().split(), "its pids written")]
        assert len(pids) == 2 and all(alive(p) for p in pids)  # the tool and its grandchild
    finally:
        rc = agent.stop()
        end = time.monotonic() + 60  # bounded: SIGKILL is delivered at once, reaping takes a moment
        while any(alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.1)
        left = [p for p in pids if alive(p)]
        for p in left:  # the test's own clean-up: nothing of it stays running
            os.kill(p, 9)
    assert rc == 0, "\n".join(agent._raw[-20:])  # stopped by SIGTERM, not killed by the harness
    assert not left, f"processes of the hung tool outlived the agent: {left}"
