"""The simulation's work directory (fake executables, the fake /proc, the kubelet socket):
removed however the command ends, by ``remove`` on the normal path, ``remove_all`` in the
command line's ``finally``, and at interpreter exit (a SIGTERM the command line turns into
SystemExit included). Only SIGKILL leaves one behind."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading

PREFIX = "hetero-exporter-"

_lock = threading.Lock()
_live: set[str] = set()


def create() -> str:
    """A new private directory under $TMPDIR, removed at exit at the latest."""
    path = tempfile.mkdtemp(prefix=PREFIX)
    with _lock:
        _live.add(path)
    return path


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
