"""`hetero-exporter top` (issue 29): frames recorded with rich's console and compared with the ones
kept in tests/snapshots/top/ (HETERO_UPDATE_SNAPSHOTS=1 rewrites them), the keys, --once, --from
against a running agent, and a hung collector that does not freeze the screen."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("rich", reason="the top extra (rich) is not installed")

from rich.console import Console  # noqa: E402

from agent_proc import Agent  # noqa: E402
from hetero_exporter import cli  # noqa: E402
from hetero_exporter.app import top as top_mod  # noqa: E402
from hetero_exporter.model import snapshot_to_json  # noqa: E402
from hetero_exporter.view import frame, live, render  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "fixtures" / "scenarios"
SNAPSHOTS = Path(__file__).resolve().parent / "snapshots" / "top"
VENDORS = ("nvidia", "amd", "hygon", "ascend", "cambricon", "metax", "iluvatar", "mthreads", "enflame", "kunlunxin")


def _snapshot(scenario: str):
    args, extra = cli.build_parser().parse_known_args(["inspect", "--simulate", str(SCENARIOS / scenario)])
    agent = cli.agent(args, extra)
    try:
        return agent.start().sampler.collect()
    finally:
        agent.close()


def _text(snap, width: int, state: frame.ViewState = frame.ViewState(), message: str = "") -> str:
    console = Console(width=width, color_system=None, record=True, file=io.StringIO())
    console.print(render.render(frame.build(snap, state, snap.time + 2.0 if snap else 0.0, message), width))
    return console.export_text()


def _compare(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if os.environ.get("HETERO_UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no recorded frame {path} (HETERO_UPDATE_SNAPSHOTS=1 records it)"
    assert text == path.read_text(), f"the frame differs from {path} (HETERO_UPDATE_SNAPSHOTS=1 rewrites it)"


def _masked(text: str) -> str:
    """The all-vendors node's fake tools add noise to some values: compare the layout, not the digits."""
    return re.sub(r"[█·]+", "B", re.sub(r"\d", "0", text))


def test_the_all_vendors_frame():
    text = _text(_snapshot("all-vendors.yaml"), 140)
    for vendor in VENDORS:
        assert re.search(rf"^{vendor} +0 ", text, re.M), vendor
    _compare("all-vendors-140.txt", _masked(text))


def test_a_failed_gpu_beside_a_mig_parent():
    text = _text(_snapshot("top-failed-and-mig.yaml"), 120)
    rows = [line for line in text.splitlines() if line.startswith("nvidia")]
    assert [r.split()[1:3] for r in rows[:3]] == [["0", "H100-SXM5-80GB"], ["└", "0"], ["└", "1"]]
    assert "failed" in rows[3] and "gpu-lost" in rows[3]
    assert "nvidia:0/0" in text and "nvidia:0/1" in text  # processes on the MIG instances
    _compare("failed-and-mig-120.txt", text)


def test_an_80_column_terminal_drops_columns_instead_of_wrapping():
    snap = _snapshot("top-failed-and-mig.yaml")
    text = _text(snap, 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    header = next(line for line in text.splitlines() if line.startswith("VENDOR"))
    assert header.split() == ["VENDOR", "IDX", "UTIL", "MEMORY", "TEMP", "POWER", "STATE"]
    assert len([line for line in text.splitlines() if line.startswith("nvidia")]) == 4  # a row stays one line
    _compare("failed-and-mig-80.txt", text)
    narrow = _text(snap, 50)
    assert max(len(line) for line in narrow.splitlines() if not line.startswith(("drivers", "sort"))) <= 50
    assert next(ln for ln in narrow.splitlines() if ln.startswith("VENDOR")).split() == [
        "VENDOR", "IDX", "UTIL", "STATE"]


def test_the_keys_sort_filter_and_toggle():
    snap = _snapshot("all-vendors.yaml")
    state = frame.ViewState()
    vendors = list(frame.build(snap, state, snap.time).vendors)
    assert vendors == sorted(VENDORS)
    state = live.apply_key("2", state, vendors)  # sort by utilization
    rows = frame.build(snap, state, snap.time).devices
    utils = [r.util for r in rows if r.util is not None]
    assert state.sort == "util" and utils == sorted(utils, reverse=True)
    state = live.apply_key("v", state, vendors)
    assert {r.vendor for r in frame.build(snap, state, snap.time).devices} == {"amd"}
    assert {p.device.split(":")[0] for p in frame.build(snap, state, snap.time).processes} == {"amd"}
    for _ in vendors:
        state = live.apply_key("v", state, vendors)
    assert state.vendor is None  # round the cycle: every vendor again
    state = live.apply_key("p", state, vendors)
    assert frame.build(snap, state, snap.time).processes == ()
    assert "PID" not in _text(snap, 140, state)
    assert live.apply_key("s", frame.ViewState(sort="state"), vendors).sort == "vendor"
    assert live.apply_key("x", state, vendors) == state


def test_worst_state_first():
    snap = _snapshot("top-failed-and-mig.yaml")
    rows = frame.build(snap, frame.ViewState(sort="state"), snap.time).devices
    assert rows[0].state == "failed"


def test_a_hung_tool_is_a_row_state_and_the_screen_keeps_refreshing():
    """The view redraws on its tick while the sampler waits on the hung tool, and the tool's
    collector shows as a row (timeout) once the cycle gives up on it."""
    options = cli.options(*cli.build_parser().parse_known_args(
        ["top", "--simulate", str(SCENARIOS / "hygon-hung-cli.yaml"), "--interval", "1"]))
    latest, close, _interval = top_mod._local(options, once=False)
    frames = []

    def stop() -> bool:
        return bool(frames) and any(r.state == "timeout" for r in frames[-1].devices) or len(frames) > 2000

    def observed():
        snap, message = latest()
        frames.append(frame.build(snap, frame.ViewState(), snap.time if snap else 0.0, message))
        return snap, message
    try:
        live.run(observed, Console(file=io.StringIO(), width=100), tick=0.02, stop=stop)
    finally:
        close()
    waiting = [f for f in frames if f.age is None]
    assert waiting, "no frame was drawn while the first cycle waited on the hung tool"
    row = next(r for r in frames[-1].devices if r.state == "timeout")
    assert row.vendor == "hygon" and row.index == "-"
    assert any(r.vendor == "amd" and r.state == "ok" for r in frames[-1].devices)  # the other vendor is served


def test_once_prints_every_vendor_and_no_colour_without_a_terminal():
    done = subprocess.run([sys.executable, "-m", "hetero_exporter", "top", "--once", "--simulate",
                           str(SCENARIOS / "all-vendors.yaml")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "120"})
    assert done.returncode == 0, done.stderr
    for vendor in VENDORS:
        assert re.search(rf"^{vendor} +\d", done.stdout, re.M), vendor
    assert "\x1b[" not in done.stdout
    assert done.stderr == ""  # the screen is the view: no log lines on it


def test_no_color_is_honoured_on_a_terminal(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    console = Console(force_terminal=True, file=io.StringIO(), width=100)
    console.print(render.render(frame.build(_snapshot("top-failed-and-mig.yaml"), frame.ViewState(), 0.0), 100))
    out = console.file.getvalue()
    assert "failed" in out and not re.search(r"\x1b\[[0-9;]*3[0-9]m", out)  # no foreground colours


def test_from_a_running_agent_shows_the_same_devices():
    scenario = str(SCENARIOS / "top-failed-and-mig.yaml")
    local = subprocess.run([sys.executable, "-m", "hetero_exporter", "top", "--once", "--simulate", scenario],
                           capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "120"})
    with Agent(["--simulate", scenario, "--interval", "1"]) as agent:
        agent.wait_metrics(lambda t: "accelerator_device_info" in t)
        remote = subprocess.run([sys.executable, "-m", "hetero_exporter", "top", "--once", "--from", agent.base],
                                capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "120"})
    assert remote.returncode == 0, remote.stderr

    def rows(text):
        return [line.split()[:3] for line in text.splitlines() if line.startswith("nvidia")]
    assert rows(remote.stdout) == rows(local.stdout) and len(rows(local.stdout)) == 4


@pytest.mark.parametrize("url", ["ftp://h:1", "h:9400", "http://", "http://h:99999", "http://h 1:9400"])
def test_a_bad_from_url_is_exit_2_with_one_line(url):
    done = subprocess.run([sys.executable, "-m", "hetero_exporter", "top", "--once", "--from", url],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--from" in done.stderr, done.stderr


def test_an_unreachable_agent_is_exit_1_with_one_line():
    done = subprocess.run([sys.executable, "-m", "hetero_exporter", "top", "--once", "--from",
                           "http://127.0.0.1:9"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "127.0.0.1:9/snapshot" in done.stderr


class _Body(io.BytesIO):
    """An HTTP answer's body as urlopen gives it: read(n) in pieces, until b''."""


def test_the_poller_keeps_the_last_snapshot_and_says_why_it_is_old():
    snap = _snapshot("top-failed-and-mig.yaml")
    bodies = [snapshot_to_json(snap).encode(), b"{not json", b"x" * (top_mod.MAX_SNAPSHOT_BYTES + 10)]
    poller = top_mod.SnapshotPoller("http://agent:9400", 1.0, opener=lambda url, timeout: _Body(bodies.pop(0)))
    poller.fetch()
    assert poller.latest() == (snap, "")
    poller.fetch()
    got, message = poller.latest()
    assert got == snap and message.startswith("http://agent:9400/snapshot: ") and "last snapshot" in message
    poller.fetch()
    assert "larger than" in poller.latest()[1]


def test_no_snapshot_yet_is_said():
    text = _text(None, 100, message="connecting to http://agent:9400/snapshot")
    assert "connecting to http://agent:9400/snapshot" in text and "VENDOR" not in text


def test_the_live_view_on_a_terminal_takes_keys_and_gives_the_screen_back():
    """On a pseudo-terminal: the alternate screen is entered and left, s / v / p change the
    header, q quits with status 0."""
    import fcntl
    import pty
    import select
    import struct
    import termios
    import time
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "hetero_exporter", "top", "--simulate",
                             str(SCENARIOS / "top-failed-and-mig.yaml"), "--interval", "1"],
                            stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                            env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"})
    os.close(slave)
    out = bytearray()

    def until(text: bytes, limit: float = 60.0) -> None:  # a bound, not a speed claim
        end = time.monotonic() + limit
        while text not in out:
            assert time.monotonic() < end and proc.poll() is None, f"never showed {text!r}"
            if select.select([master], [], [], 0.1)[0]:
                try:
                    out.extend(os.read(master, 65536))
                except OSError:
                    return
    try:
        until(b"collectors  1 ok")  # the first snapshot is in (before it, there is no vendor to filter by)
        os.write(master, b"s")
        until(b"sort util")
        os.write(master, b"v")
        until(b"vendor nvidia")
        os.write(master, b"q")
        assert proc.wait(30) == 0
        while select.select([master], [], [], 0.5)[0]:  # what it wrote on its way out
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out.extend(chunk)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert b"\x1b[?1049h" in out and b"\x1b[?1049l" in out  # the alternate screen, entered and left
