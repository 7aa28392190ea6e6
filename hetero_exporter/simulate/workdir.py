"""The simulation's work directory (fake executables, the fake /proc, the kubelet socket):
removed however the command ends, by ``remove`` on the normal path, ``remove_all`` in the
command line's ``finally``, and at interpreter exit (a SIGTERM the command line turns into
SystemExit included). Only SIGKILL leaves one behind."""

from __future__ import annotations

import atexit
import shutil
import signal
import tempfile
import threading
from typing import Optional

PREFIX = "hetero-exporter-"

_lock = threading.Lock()
_live: set[str] = set()


def create() -> str:
    """A new private directory under $TMPDIR, removed at exit at the latest."""
    # a stop signal (SystemExit) landing between mkdtemp's mkdir and the registration below would
    # leave the directory behind (seen under load): held back until the path is tracked
    held = _hold_signals()
    try:
        path = tempfile.mkdtemp(prefix=PREFIX)
        with _lock:
            _live.add(path)
    finally:
        if held is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
    return path


def _hold_signals() -> "Optional[set[int | signal.Signals]]":
    """Block the stop signals (SIGTERM, SIGINT, SIGHUP: each ends a command) in the main thread,
    where Python runs its handlers; the mask before, or None where it cannot (another thread, no
    pthread_sigmask)."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


def remove(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    with _lock:
        _live.discard(path)


def remove_all() -> None:
    """Every work directory this process created and has not removed yet."""
    with _lock:
        paths = sorted(_live)
    for path in paths:
        remove(path)


def live() -> list[str]:
    """The work directories not removed yet (for tests)."""
    with _lock:
        return sorted(_live)


atexit.register(remove_all)
