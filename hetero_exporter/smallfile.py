"""Reading a small file that someone else may have replaced: a regular file only, size-capped;
writing one so that a reader never sees half of it (``write_atomically``); and removing the
temporary files of writes a SIGKILL cut short (``remove_stale``, each state file's owner at start).

A state file, a certificate or a cursor lives on a host path or a mounted Secret; swapped for a
FIFO it must not hang the reader, pointed at /dev/zero it must not fill memory. Opened
non-blocking (the open of a FIFO returns at once), checked on the descriptor (no race with a
check by name), read up to the cap plus one byte. Like ``validate``, this module imports nothing of the project,
so every layer may use it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import stat
import tempfile
from typing import Callable, Optional

log = logging.getLogger(__name__)

TMP_SUFFIX = ".tmp"  # of write_atomically's temporary files: <prefix><random><TMP_SUFFIX>
MAX_SCAN = 100_000  # entries of a folder remove_stale looks at (a state dir holds a handful)
_TRIES = 3


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


def owned_by_this_agent(st: os.stat_result) -> None:
    """``read_regular``'s ``check`` for a state file: ValueError unless this process's user owns
    it and neither group nor others may write it (the state dir is a host path: whoever else wrote
    the file could say anything in it)."""
    if st.st_uid != os.geteuid():
        raise ValueError(f"owned by uid {st.st_uid}, not by this agent's uid {os.geteuid()}")
    if st.st_mode & 0o022:
        raise ValueError(f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o})")


def _locked_temporary(folder: str, prefix: str) -> tuple[int, str]:
    """A new temporary file (mode 0600) holding an exclusive flock until closed: ``remove_stale``
    of another process, or of another owner in this one, leaves a locked file alone."""
    for _ in range(_TRIES):
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=TMP_SUFFIX)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_nlink:
            return fd, tmp
        os.close(fd)  # removed by a clean-up between its creation and the lock: make another
    raise OSError(f"{folder}: temporary files removed as soon as made")


def write_atomically(path: str, data: bytes, prefix: str = ".state-", fsync: bool = True) -> None:
    """``data`` at ``path`` (mode 0600, its folder 0700 if made) through a temporary file beside
    it (``<prefix>XXXXXXXX.tmp``, locked while written), fsync'd (unless ``fsync`` is False: a
    file written often whose loss costs little), then renamed over it; OSError as raised, the
    temporary file removed."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = _locked_temporary(folder, prefix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
            os.replace(tmp, path)  # still locked: no clean-up takes it before the rename
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def remove_stale(folder: str, prefix: str) -> int:
    """Remove the temporary files ``write_atomically(..., prefix)`` left in ``folder`` when its
    process was killed mid-write: names ``<prefix><letters, digits, _ or -><TMP_SUFFIX>`` only,
    regular files of this user (never a link, a folder or anyone else's file), and none a writer
    holds locked now. The number removed; a folder that cannot be read removes nothing."""
    pattern = re.compile(re.escape(prefix) + r"[A-Za-z0-9_-]{1,64}" + re.escape(TMP_SUFFIX))
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return 0
    removed = 0
    try:
        with os.scandir(dir_fd) as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_SCAN:
                    break
                # is_file without following: no open of a link, FIFO or device named like ours
                if (pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False)
                        and _remove_unlocked(dir_fd, entry.name)):
                    removed += 1
    except OSError:
        pass
    finally:
        os.close(dir_fd)
    if removed:
        log.info("removed %d temporary file(s) of an interrupted save", removed,
                 extra={"path": folder, "prefix": prefix})
    return removed


def _remove_unlocked(dir_fd: int, name: str) -> bool:
    """Unlink ``name`` if it is a regular file of ours that no writer holds locked (checked on
    the open descriptor, and unlinked while locked: no writer can take it meanwhile)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0),
                     dir_fd=dir_fd)
    except OSError:  # a link (ELOOP), gone already, not ours to read
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a write in progress
        os.unlink(name, dir_fd=dir_fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
