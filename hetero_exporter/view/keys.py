"""Single key presses from the terminal, without echo or Enter (POSIX termios).

``Keys`` puts stdin in cbreak mode while it is open and restores it on close, whatever
happened; ``read(timeout)`` waits at most ``timeout`` seconds for a key (the refresh tick), so
the screen is redrawn whether or not anyone types. Where stdin is not a terminal there are no
keys: the view refreshes until SIGINT.
"""

from __future__ import annotations

import os
import select
import sys
from typing import Any, Optional


class Keys:
    def __init__(self, stream: Any = None) -> None:
        self._stream = stream if stream is not None else sys.stdin
        self._saved: Any = None
        self._fd: Optional[int] = None

    def __enter__(self) -> "Keys":
        try:
            fd = self._stream.fileno()
        except (AttributeError, OSError, ValueError):
            return self
        if not os.isatty(fd):
            return self
        import termios
        import tty
        self._fd, self._saved = fd, termios.tcgetattr(fd)
        tty.setcbreak(fd)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._fd is not None and self._saved is not None:
            import termios
            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)
            self._fd = self._saved = None

    @property
    def interactive(self) -> bool:
        return self._fd is not None

    def read(self, timeout: float) -> Optional[str]:
        """One key (a character), or None when none came within ``timeout`` seconds."""
        if self._fd is None:
            return None
        ready, _, _ = select.select([self._fd], [], [], max(0.0, timeout))
        if not ready:
            return None
        data = os.read(self._fd, 16)  # an escape sequence (an arrow key) arrives whole; its first byte is ignored
        return data[:1].decode("ascii", "replace") if data else None
