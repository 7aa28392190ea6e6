"""Reading a small file that someone else may have replaced: a regular file only, size-capped;
and writing one so that a reader never sees half of it (``write_atomically``).

A state file, a certificate or a cursor lives on a host path or a mounted Secret; swapped for a
FIFO it must not hang the reader, pointed at /dev/zero it must not fill memory. Opened
non-blocking (the open of a FIFO returns at once), checked on the descriptor (no race with a
check by name), read up to the cap plus one byte. Like ``validate``, this module imports nothing of the project,
so every layer may use it.
"""

from __future__ import annotations

import os
import stat
import tempfile
from typing import Callable, Optional


def read_regular(path: str, limit: int, *, follow_links: bool = True,
                 check: Optional[Callable[[os.stat_result], None]] = None) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit``. ValueError (one line) for a
    FIFO, device, socket or directory, or a file over ``limit`` bytes; OSError as the open or
    read raises it. ``follow_links=False`` refuses a symbolic link as well (a state dir the agent
    owns); mounted Secrets are links (``..data/tls.crt``), so certificates follow them. ``check``
    sees the open file's stat (owner, mode) and raises ValueError to refuse it."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    if not follow_links:
        flags |= os.O_NOFOLLOW
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if check is not None:
            check(st)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise ValueError(f"over {limit} bytes")
    return b"".join(chunks)


def write_atomically(path: str, data: bytes, prefix: str = ".state-") -> None:
    """``data`` at ``path`` (mode 0600, its folder 0700 if made) through a temporary file beside
    it, fsync'd, then renamed over it; OSError as raised, the temporary file removed."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
