"""The stream's socket file: its directory made, a stale socket removed, nothing else touched.

``prepare(path)`` before the server binds: the directory is created ``0750`` where it is missing
(an existing one keeps its owner and mode: it is the operator's, a hostPath maybe); at the path
itself only a socket nobody listens on is removed. A socket in use, a regular file, a link (never
followed) or a directory there is refused in one line naming the key (exit 2). ``Bound`` remembers
the socket the server made, so that ``remove`` at close deletes that one and nothing that has
replaced it since.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from dataclasses import dataclass
from typing import Optional

from hetero_exporter.model.errors import InputError

KEY = "health_stream.socket"
DIR_MODE = 0o750
PROBE_SECONDS = 1.0  # a connect to a socket file: refused at once when nobody listens


class SocketPathError(InputError):
    """The socket cannot be made at the configured path (one line naming the key)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device")):
        if test(mode):
            return name
    return "not a socket"


def _listening(path: str) -> bool:
    """Whether a process accepts connections on the socket file ``path``."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_SECONDS)
    try:
        probe.connect(path)
        return True
    except socket.timeout:
        return True  # its backlog is full: someone is there
    except OSError as e:
        if e.errno in (errno.ECONNREFUSED, errno.ENOENT):
            return False
        raise SocketPathError(f"{KEY}: cannot probe the socket {path}: {e.strerror}") from None
    finally:
        probe.close()


def prepare(path: str) -> None:
    """Make ``path`` free for the server to bind (see the module's docstring)."""
    parent = os.path.dirname(path) or "/"
    try:
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=DIR_MODE)
            os.chmod(parent, DIR_MODE)  # the umask may have taken bits off: exactly 0750
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise SocketPathError(f"{KEY}: cannot prepare {path}: {e.strerror or e}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketPathError(f"{KEY}: {path} is {_kind(st.st_mode)}, not a socket: left alone "
                              "(remove it, or configure another path)")
    if _listening(path):
        raise SocketPathError(f"{KEY}: {path} is in use: another process listens on it")
    try:
        os.unlink(path)  # a stale socket of an earlier agent
    except FileNotFoundError:
        pass
    except OSError as e:
        raise SocketPathError(f"{KEY}: cannot remove the stale socket {path}: {e.strerror}") from None


@dataclass(frozen=True)
class Bound:
    """The socket file the server made: its path and identity (device, inode)."""

    path: str
    dev: int
    ino: int

    @classmethod
    def made(cls, path: str, mode: int) -> "Bound":
        """The socket just bound at ``path``, given ``mode``."""
        os.chmod(path, mode)
        st = os.lstat(path)
        return cls(path, st.st_dev, st.st_ino)

    def remove(self) -> Optional[str]:
        """Delete the socket if it is still this one; why not otherwise (None: deleted or gone)."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return None
        except OSError as e:
            return str(e)
        if not stat.S_ISSOCK(st.st_mode) or (st.st_dev, st.st_ino) != (self.dev, self.ino):
            return "another file is at the path now"
        try:
            os.unlink(self.path)
        except OSError as e:
            return str(e)
        return None
