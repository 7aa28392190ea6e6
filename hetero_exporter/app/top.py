"""``hetero-exporter top``: the live view, over this node's sampler or a running agent's /snapshot.

The snapshot source runs on a thread of its own and the view only reads what it published
last, so a hung vendor tool (the sampler marks its collector late) or an unreachable agent
(the poller keeps the last snapshot and says why) never freezes the screen. rich (the ``top``
extra) is imported by this command only.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Optional
from urllib.parse import urlsplit

from hetero_exporter.model import NodeSnapshot, SchemaError, snapshot_from_json
from hetero_exporter.model.errors import EXIT_OK, ExitError, InputError
from hetero_exporter.terminal import printable

# A /snapshot body past this is refused, not read: an 8-GPU node's is ~0.25 MiB, a 128-device
# node with 10,000 processes ~7 MiB; decoding 16 MiB holds the interpreter ~0.2 s, so keys stay live.
MAX_SNAPSHOT_BYTES = 16 << 20
HTTP_TIMEOUT_MAX = 5.0  # seconds one socket read may wait (less where the interval is shorter)
BODY_DEADLINE = 10.0  # seconds the whole body may take: a peer trickling bytes does not hold a poll
CHUNK = 1 << 16

Latest = Callable[[], tuple[Optional[NodeSnapshot], str]]


def from_url(text: str) -> str:
    """The agent's base URL (``http(s)://HOST:PORT``): InputError naming ``--from`` otherwise."""
    url = urlsplit(text)
    try:
        url.port
    except ValueError:
        url = urlsplit("")
    if url.scheme not in ("http", "https") or not url.hostname or any(c.isspace() for c in text):
        raise InputError(f"--from: not an agent URL: {text[:80]!r}; allowed: http://HOST:PORT (the agent's "
                         "/snapshot is read)")
    return text.rstrip("/")


class SnapshotPoller:
    """GET ``<base>/snapshot`` every ``interval`` seconds on a thread; keeps the last good one."""

    def __init__(self, base: str, interval: float, opener: Callable[..., Any] = urllib.request.urlopen) -> None:
        self.url = base + "/snapshot"
        self.interval, self._open = interval, opener
        self._timeout = min(HTTP_TIMEOUT_MAX, max(0.5, interval))
        self._lock = threading.Lock()
        self._snap: Optional[NodeSnapshot] = None
        self._error = "connecting to " + self.url
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _body(self) -> bytes:
        """The answer's body: at most MAX_SNAPSHOT_BYTES, whole within BODY_DEADLINE (ValueError else)."""
        deadline = time.monotonic() + BODY_DEADLINE
        chunks: list[bytes] = []
        size = 0
        with self._open(self.url, timeout=self._timeout) as r:
            while size <= MAX_SNAPSHOT_BYTES:
                chunk = r.read(min(CHUNK, MAX_SNAPSHOT_BYTES + 1 - size))
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
                size += len(chunk)
                if time.monotonic() > deadline:
                    raise ValueError(f"the snapshot took longer than {BODY_DEADLINE:.0f}s to arrive")
        raise ValueError(f"the snapshot is larger than {MAX_SNAPSHOT_BYTES} bytes")

    def fetch(self) -> None:
        """One request; the snapshot, or the reason it failed, replaces what was there. The reason
        is one printable line: the peer's words (its HTTP reason phrase) never act on the terminal."""
        try:
            snap, error = snapshot_from_json(self._body()), ""
        except urllib.error.HTTPError as e:
            snap, error = None, f"{self.url}: HTTP {e.code} {e.reason}"
        except (OSError, ValueError, SchemaError) as e:  # URLError and timeouts are OSErrors
            snap, error = None, f"{self.url}: {getattr(e, 'reason', None) or e}"
        except Exception as e:  # noqa: BLE001 - a bug decoding one answer must not end the poller
            snap, error = None, f"{self.url}: {type(e).__name__}: {e}"
        with self._lock:
            if snap is not None:
                self._snap = snap
            self._error = printable(error, 500) if snap is None else ""

    def latest(self) -> tuple[Optional[NodeSnapshot], str]:
        with self._lock:
            message = self._error and (self._error + ("; showing the last snapshot" if self._snap else ""))
            return self._snap, message

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                self.fetch()
                self._stop.wait(self.interval)
        self._thread = threading.Thread(target=loop, name="top-snapshot", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()


def _console() -> Any:
    try:
        from rich.console import Console
    except ImportError:
        raise ExitError("top needs the rich library: pip install 'hetero-exporter[top]'") from None
    return Console()  # rich leaves colour out where NO_COLOR is set or stdout is not a terminal


def _local(options: Any, once: bool) -> tuple[Latest, Callable[[], None], float]:
    """This node's sampler: one cycle (``--once``), or cycles on a thread, as ``run`` has them."""
    from hetero_exporter.app.agent import Agent
    from hetero_exporter.store import SnapshotStore
    agent = Agent.build(options)
    interval = agent.config.interval
    sampler = agent.start().sampler
    if once:
        snap = sampler.collect()
        return (lambda: (snap, "")), agent.close, interval
    store, stop = SnapshotStore(), threading.Event()
    thread = threading.Thread(target=sampler.run, args=(interval, store.publish, stop), name="top-sampler",
                              daemon=True)
    thread.start()

    def latest() -> tuple[Optional[NodeSnapshot], str]:
        snap = store.latest()
        if snap is not None and time.time() - snap.time > 3 * interval + 5:
            return snap, f"no new snapshot for {time.time() - snap.time:.0f}s (the sampler is behind)"
        return snap, ""

    def close() -> None:
        stop.set()
        agent.close()
    return latest, close, interval


def top(options: Any, source: Optional[str], once: bool) -> int:
    """The view: one frame and exit (``once``), or live until ``q``."""
    console = _console()
    from hetero_exporter.view import live
    if source is not None:
        poller = SnapshotPoller(from_url(source), options.interval or 2.0)
        if once:
            poller.fetch()
            snap, message = poller.latest()
            if snap is None:
                raise ExitError(message)
        else:
            poller.start()
        latest, close, tick = poller.latest, poller.close, poller.interval
    else:
        latest, close, tick = _local(options, once)
    try:
        if once:
            live.once(latest, console)
        else:
            live.run(latest, console, tick=min(tick, 2.0))
    finally:
        close()
    return EXIT_OK
