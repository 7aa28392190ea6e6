"""Certificate files as the TLS servers load them: read safely, loaded from what was read, and
watched for expiry.

- A certificate, key or CA file is read as a regular file of at most ``MAX_PEM`` bytes
  (``hetero_exporter.smallfile``): a FIFO swapped in neither hangs the start nor a reload, /dev/zero does
  not fill memory. Secrets mounted by Kubernetes are symbolic links (``..data/tls.crt``), so
  links are followed.
- ``ssl`` loads chains from paths only; the bytes read are handed to it through an anonymous
  memory file (``memfd_create``, ``/proc/self/fd/N``), so what is loaded is what was checked
  and no key is written to disk (a private temp file where memfd is missing).
- ``not_after`` is the leaf certificate's expiry (``cryptography``, the ``web`` extra; without
  it the expiry is unknown, never guessed). ``Expiry`` says in the log when a certificate is
  expired, not yet valid or within ``WARN_BEFORE`` of expiry: at load, at each reload and then
  at most once a day.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from typing import Callable, Iterator, Optional

from hetero_exporter import smallfile

log = logging.getLogger(__name__)

MAX_PEM = 1 << 20           # bytes: a chain, key or CA bundle (hundreds of certificates)
WARN_BEFORE = 7 * 86400.0   # seconds before expiry from which the agent warns
REPEAT_EVERY = 86400.0      # seconds between two warnings about the same certificate


def read_pem(path: str) -> bytes:
    """The bytes of a PEM file; ValueError (one line, naming the path) when it is not a regular
    file of at most MAX_PEM bytes or cannot be read."""
    try:
        return smallfile.read_regular(path, MAX_PEM)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise ValueError(f"cannot read {path}: {e}") from None


@contextlib.contextmanager
def pem_path(data: bytes) -> Iterator[str]:
    """A path whose content is ``data``, for ``ssl`` calls that take paths only; gone after."""
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None and os.path.isdir("/proc/self/fd"):
        fd = memfd("hetero-exporter-pem", getattr(os, "MFD_CLOEXEC", 0))
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, name = tempfile.mkstemp(prefix="web-config-", suffix=".pem")  # 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield name
    finally:
        os.unlink(name)


def validity(pem: bytes) -> Optional[tuple[float, float]]:
    """(not before, not after) of the first (leaf) certificate in ``pem``, Unix seconds; None
    when ``cryptography`` is not installed or the text holds no certificate it can read."""
    try:
        from cryptography import x509
    except ImportError:
        return None
    try:
        leaf = x509.load_pem_x509_certificates(pem)[0]
    except (ValueError, IndexError):
        return None
    return leaf.not_valid_before_utc.timestamp(), leaf.not_valid_after_utc.timestamp()


class Expiry:
    """The served certificate's validity, and what the log says about it."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self.not_before: Optional[float] = None
        self.not_after: Optional[float] = None
        self._said: Optional[tuple[str, float]] = None  # (what, when)

    def update(self, pem: bytes) -> None:
        """A certificate was (re)loaded: its dates, and a word now if it needs one."""
        dates = validity(pem)
        self.not_before, self.not_after = dates if dates else (None, None)
        self._said = None
        self.check()

    def problem(self) -> Optional[str]:
        """What is wrong with the certificate now, or None (also when its dates are unknown)."""
        if self.not_after is None or self.not_before is None:
            return None
        now = self._clock()
        if now >= self.not_after:
            return f"expired {_ago(now - self.not_after)} ago"
        if now < self.not_before:
            return f"not valid for another {_ago(self.not_before - now)}"
        if self.not_after - now <= WARN_BEFORE:
            return f"expires in {_ago(self.not_after - now)}"
        return None

    def check(self) -> None:
        """Log the problem, if any: once when it appears or changes kind, then once a day."""
        problem = self.problem()
        if problem is None:
            self._said = None
            return
        kind, now = problem.split()[0], self._clock()
        if self._said is not None and self._said[0] == kind and now - self._said[1] < REPEAT_EVERY:
            return
        self._said = (kind, now)
        level = logging.ERROR if kind in ("expired", "not") else logging.WARNING
        log.log(level, "TLS certificate %s: clients that check it refuse the connection; renew it "
                "(it is reloaded without a restart)", problem,
                extra={"not_after": self.not_after, "not_before": self.not_before})


def _ago(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.0f} hours"
    return f"{max(seconds, 0) / 60:.0f} minutes"
