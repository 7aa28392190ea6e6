"""Issue 35, item 1: `top` shows what a snapshot says as text, whoever wrote it.

Escape sequences and rich markup in model, driver, node, collector, pod and process names and in
an HTTP reason phrase never reach the terminal as such; a deep or huge body is refused with one
line (never a traceback), never kills the poller, and a huge snapshot is drawn a screenful at a
time."""

from __future__ import annotations

import http.server
import io
import json
import os
import re
import subprocess
import sys
import threading

import pytest

pytest.importorskip("rich", reason="the top extra (rich) is not installed")

from rich.console import Console  # noqa: E402

from hetero_exporter import terminal  # noqa: E402
from hetero_exporter.app import top as top_mod  # noqa: E402
from hetero_exporter.model import snapshot_from_json, snapshot_to_json  # noqa: E402
from hetero_exporter.view import frame, render  # noqa: E402
from test_top import _Body, _snapshot  # noqa: E402

TITLE = "\x1b]0;pwned\x07"  # rewrites the terminal's (or tmux pane's) title
CLIPBOARD = "\x1b]52;c;ZXZpbA==\x07"  # writes the clipboard
CLEAR = "\x1b[2J\x1b[H"
C1_CSI = "\x9b2J"  # the same as one C1 character
BIDI = "\u202egnp.exe"  # shown reversed
LINK = "[link=https://example.invalid]CLICK[/link]"
MARKUP = ("[blink]x[/blink]", "[/bold]")  # the second ended top with a MarkupError
EVIL = (TITLE, CLIPBOARD, CLEAR, C1_CSI, BIDI, LINK, *MARKUP)


def _hostile_doc() -> dict:
    """The failed-and-MIG node with a hostile string in every place a frame shows one."""
    doc = json.loads(snapshot_to_json(_snapshot("top-failed-and-mig.yaml")))
    doc["node"] = "node" + TITLE
    for n, d in enumerate(doc["devices"]):
        evil = EVIL[n % len(EVIL)]
        d["identity"]["model"] = "H100" + evil
        d["identity"]["driver_version"] = "550" + CLIPBOARD
        d["identity"]["runtime_version"] = "12.8" + LINK
        d["health"]["reasons"] = [{"code": "79" + MARKUP[1], "message": "fallen off" + CLEAR, "class": "hardware"}]
        for p in d["processes"]:
            p.update(name="trainer" + C1_CSI + MARKUP[1], namespace="ml" + BIDI, pod="pod" + LINK,
                     container="c" + TITLE)
    doc["collectors"].append({"name": "evil" + CLEAR, "vendor": "acme" + MARKUP[1], "ok": False,
                              "error_kind": "parse", "error": "bad" + CLIPBOARD + MARKUP[0], "devices": 0})
    return doc


def _terminal_text(snap, width: int = 160) -> str:
    """What a colour terminal receives for the frame of ``snap``."""
    console = Console(width=width, force_terminal=True, color_system="truecolor", file=io.StringIO())
    console.print(render.render(frame.build(snap, frame.ViewState(), snap.time + 1.0), width))
    return console.file.getvalue()


def _assert_inert(out: str) -> None:
    """Only SGR colour sequences (ESC [ ... m) may reach the terminal: no OSC, no other CSI,
    no BEL, no C1 control, no bidi override."""
    without_sgr = re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert "\x1b" not in without_sgr, repr(without_sgr[max(0, without_sgr.find("\x1b") - 40):][:120])
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", without_sgr)


def test_printable_escapes_what_the_terminal_would_act_on():
    assert terminal.printable("H100 80GB") == "H100 80GB"
    assert terminal.printable(TITLE) == "\\x1b]0;pwned\\x07"
    assert terminal.printable(C1_CSI + BIDI) == "\\x9b2J\\u202egnp.exe"
    assert terminal.printable("a\u00a0b\nc") == "a b\\x0ac"  # a no-break space shows as a space; a newline is escaped
    assert terminal.printable("x" * 1000, 10) == "x" * 10 + "…"
    assert terminal.printable(LINK) == LINK  # printable: markup is the renderer's business, not this one's


def test_hostile_names_reach_the_terminal_as_text():
    snap = snapshot_from_json(json.dumps(_hostile_doc()))
    out = _terminal_text(snap)  # old code: MarkupError on "[/bold]"
    _assert_inert(out)
    assert "\x1b]8;" not in out  # no hyperlink made of a name
    assert "CLICK" in out and "[link=" in out  # the markup is shown as the characters it is
    assert "\\x1b]0;pwned\\x07" in out  # the title sequence is shown escaped


def test_remote_hostile_snapshot_and_reason_phrase(tmp_path):
    body = json.dumps(_hostile_doc()).encode()
    with _Server({"/snapshot": (200, "OK", body)}) as url:
        done = _top_once(url)
    assert done.returncode == 0, done.stderr
    _assert_inert(done.stdout)
    assert "[link=" in done.stdout
    with _Server({"/snapshot": (503, "Unavailable" + CLIPBOARD + TITLE, b"")}) as url:
        done = _top_once(url)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr and "Unavailable" in done.stderr


def test_a_deep_body_is_one_line_not_a_traceback():
    deep = b"[" * 100_000 + b"]" * 100_000
    with _Server({"/snapshot": (200, "OK", deep)}) as url:
        done = _top_once(url)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr and "nested" in done.stderr


def test_a_bad_body_does_not_end_the_poller():
    """The live view's poller goes on after a body that the decoder cannot take (old code: the
    RecursionError ended its thread and the screen froze on the old snapshot)."""
    good = snapshot_to_json(_snapshot("top-failed-and-mig.yaml")).encode()
    answers = [b"[" * 100_000, b"\xff\xfe", None, good]

    def opener(url, timeout):
        body = answers.pop(0) if len(answers) > 1 else answers[0]
        if body is None:
            raise RuntimeError("a bug in the transport")
        return _Body(body)

    poller = top_mod.SnapshotPoller("http://agent:9400", 0.01, opener=opener)
    poller.start()
    try:
        done = threading.Event()
        for _ in range(3000):  # bounded: 30 s at most
            if poller.latest()[0] is not None:
                done.set()
                break
            threading.Event().wait(0.01)
        assert done.is_set(), poller.latest()[1]
    finally:
        poller.close()


def test_a_trickled_body_is_given_up_at_the_deadline(monkeypatch):
    monkeypatch.setattr(top_mod, "BODY_DEADLINE", 0.3)

    class Trickle(io.RawIOBase):
        def read(self, n=-1):
            threading.Event().wait(0.05)
            return b" "
    poller = top_mod.SnapshotPoller("http://agent:9400", 1.0, opener=lambda url, timeout: Trickle())
    poller.fetch()
    snap, message = poller.latest()
    assert snap is None and "took longer than" in message


def _with_processes(count: int):
    doc = json.loads(snapshot_to_json(_snapshot("top-failed-and-mig.yaml")))
    holder = doc["devices"][1]
    proto = holder["processes"][0]
    holder["processes"] = [{**proto, "pid": 10_000 + i} for i in range(count)]
    return snapshot_from_json(json.dumps(doc))


def test_a_huge_snapshot_is_drawn_a_screenful_at_a_time():
    snap = _with_processes(20_000)
    f = frame.build(snap, frame.ViewState(), snap.time, max_rows=40)
    assert len(f.devices) + len(f.processes) == 40
    total = sum(len(d.processes) for d in snap.devices)
    assert total > 20_000 and f.hidden == (0, total - len(f.processes))
    console = Console(width=120, color_system=None, record=True, file=io.StringIO())
    console.print(render.render(f, 120))
    assert f"+{f.hidden[1]} processes not shown" in console.export_text()
    once = frame.build(snap, frame.ViewState(), snap.time)  # --once: MAX_ROWS
    assert len(once.devices) + len(once.processes) == frame.MAX_ROWS


def test_q_quits_the_live_view_of_a_huge_remote_snapshot():
    """On a pseudo-terminal, over an agent answering a 12 MiB snapshot at every poll: the frame
    shows what fits and says what does not, and q ends top with status 0."""
    import fcntl
    import pty
    import select
    import struct
    import termios
    import time
    body = snapshot_to_json(_with_processes(20_000)).encode()
    assert len(body) < top_mod.MAX_SNAPSHOT_BYTES
    with _Server({"/snapshot": (200, "OK", body)}) as url:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
        proc = subprocess.Popen([sys.executable, "-m", "hetero_exporter", "top", "--from", url, "--interval", "0.5"],
                                stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                                env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "30"})
        os.close(slave)
        out = bytearray()
        try:
            end = time.monotonic() + 120  # a bound, not a speed claim
            while b"processes not shown" not in out:
                assert time.monotonic() < end and proc.poll() is None, bytes(out[-400:])
                if select.select([master], [], [], 0.1)[0]:
                    out.extend(os.read(master, 1 << 16))
            os.write(master, b"q")
            assert proc.wait(60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(master)


def _top_once(url: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hetero_exporter", "top", "--once", "--from", url],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "160"})


class _Server:
    """A loopback HTTP server answering path -> (status, reason phrase, body), the reason sent as given."""

    def __init__(self, answers: dict):
        answers_ = answers

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                status, reason, body = answers_.get(self.path, (404, "Not Found", b""))
                self.wfile.write(f"HTTP/1.1 {status} ".encode() + reason.encode("utf-8", "surrogateescape")
                                 + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

            def log_message(self, *args):
                pass
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()



def test_inspect_table_shows_hostile_names_as_text():
    from hetero_exporter import table
    out = table.render(snapshot_from_json(json.dumps(_hostile_doc())))
    _assert_inert(out)
    assert "\\x1b]52;c;ZXZpbA==\\x07" in out  # the driver's clipboard write, escaped
