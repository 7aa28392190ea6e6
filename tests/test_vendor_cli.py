"""The shared vendor-CLI runner: no shell, fixed locale, deadline with a process-group kill
(grandchildren included), output cap, stderr in the error, missing tools, call counting."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from cli_fakes import alive as _alive
from hetero_exporter.sdk import runner as vendor_cli
from hetero_exporter.sdk.contract import Unavailable
from hetero_exporter.sdk.runner import CliError, CliTimeout


def tool(tmp_path: Path, name: str, body: str) -> str:
    p = tmp_path / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return str(p)


def test_arguments_reach_the_tool_verbatim_without_a_shell(tmp_path):
    exe = tool(tmp_path, "echoargs", 'for a in "$@"; do echo "[$a]"; done\n')
    res = vendor_cli.run([exe, "info; touch pwned", "$(id)", "-t", "a b"], 5)
    assert res.stdout.splitlines() == ["[info; touch pwned]", "[$(id)]", "[-t]", "[a b]"]
    assert res.returncode == 0 and not (tmp_path / "pwned").exists()


def test_locale_is_fixed_and_only_the_needed_environment_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    monkeypatch.setenv("HETERO_TEST_SECRET", "do-not-leak")
    exe = tool(tmp_path, "showenv", 'echo "LC_ALL=$LC_ALL LANG=$LANG SECRET=$HETERO_TEST_SECRET EXTRA=$EXTRA"\n')
    out = vendor_cli.run([exe], 5, env={"EXTRA": "x"}).stdout.strip()
    assert out == "LC_ALL=C LANG=C SECRET= EXTRA=x"


def test_non_zero_exit_carries_the_status_and_stderr_tail(tmp_path):
    exe = tool(tmp_path, "fails", 'echo "partial"; echo "dcmi init failed, ret is -8020" >&2; exit 3\n')
    with pytest.raises(CliError, match=r"exit status 3: dcmi init failed, ret is -8020"):
        vendor_cli.run([exe, "info"], 5)
    res = vendor_cli.run([exe], 5, check=False)
    assert (res.returncode, res.stdout.strip()) == (3, "partial")
    noisy = tool(tmp_path, "noisy", 'i=0; while [ $i -lt 3000 ]; do echo "err line $i" >&2; i=$((i+1)); done; exit 1\n')
    with pytest.raises(CliError) as e:
        vendor_cli.run([noisy], 10)
    assert "err line 2999" in str(e.value) and len(str(e.value)) < vendor_cli.STDERR_KEEP + 200


def test_a_hung_tool_and_its_grandchild_are_killed_at_the_deadline(tmp_path):
    pidfile = tmp_path / "pids"
    exe = tool(tmp_path, "hangs", f'sleep 300 & echo "$$ $!" > {pidfile}; wait\n')
    t0 = time.monotonic()
    with pytest.raises(CliTimeout, match="no answer within 0.5 s; killed its process group"):
        vendor_cli.run([exe], 0.5)
    assert time.monotonic() - t0 < 3
    pids = [int(x) for x in pidfile.read_text().split()]
    for _ in range(50):
        if not any(_alive(p) for p in pids):
            break
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


def test_a_tool_that_closes_its_output_but_keeps_running_is_killed(tmp_path):
    exe = tool(tmp_path, "lingers", "echo done; exec >/dev/null 2>&1; sleep 300\n")
    with pytest.raises(CliTimeout, match="did not exit"):
        vendor_cli.run([exe], 0.7)


def test_output_is_capped(tmp_path):
    exe = tool(tmp_path, "spews", "while :; do echo 0123456789012345678901234567890123456789; done\n")
    with pytest.raises(CliError, match="output exceeded 100000 bytes; killed"):
        vendor_cli.run([exe], 10, max_bytes=100_000)


def test_missing_or_not_executable_tools_are_unavailable(tmp_path):
    with pytest.raises(Unavailable, match="not found"):
        vendor_cli.run([str(tmp_path / "npu-smi")], 5)
    with pytest.raises(Unavailable):
        vendor_cli.run(["surely-not-a-vendor-tool-xyz"], 5)
    plain = tmp_path / "cnmon"
    plain.write_text("not executable")
    with pytest.raises(Unavailable, match="not executable"):
        vendor_cli.run([str(plain)], 5)


def test_invocations_are_counted_per_tool(tmp_path):
    exe = tool(tmp_path, "counted-tool", "echo ok\n")
    before = vendor_cli.invocations().get("counted-tool", 0)
    for _ in range(3):
        vendor_cli.run([exe], 5)
    with pytest.raises(CliError):
        vendor_cli.run([tool(tmp_path, "counted-tool", "exit 1\n")], 5)
    assert vendor_cli.invocations()["counted-tool"] - before == 4
    assert os.path.basename(exe) in vendor_cli.invocations()
