"""The TLS files an export section names (``otlp.tls.ca_file``, ``cert_file``, ``key_file``), read once.

Each is read at start through ``smallfile.read_regular``: a regular file (a mounted Secret's
links are followed) of at most ``MAX_PEM`` bytes; a FIFO, a device or a directory is refused with
one line naming the key (exit 2), as the web config refuses its certificates, instead of the
agent never becoming ready. A library that opens certificate files by path at each connection
(requests, for OTLP/HTTP) is given ``path(key)``: an anonymous in-memory copy
(``/proc/self/fd/N`` of a memfd), which nobody can swap for a FIFO afterwards.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

from hetero_exporter import smallfile
from hetero_exporter.validate import ValidationError

MAX_PEM = 1 << 20  # a PEM bundle; more is not a certificate file
SECTION = "otlp.tls"
FILE_KEYS = ("ca_file", "cert_file", "key_file")


class TlsFiles:
    """The contents of the named files, by key; ``close()`` releases their in-memory copies."""

    def __init__(self, contents: Mapping[str, bytes]) -> None:
        self._contents = dict(contents)
        self._fds: dict[str, int] = {}

    @classmethod
    def read(cls, paths: Mapping[str, Optional[str]]) -> "TlsFiles":
        """Each named file's bytes (keys with no path are left out); ValidationError naming the key."""
        contents = {}
        for key, path in paths.items():
            if not path:
                continue
            try:
                contents[key] = smallfile.read_regular(path, MAX_PEM)
            except ValueError as e:
                raise ValidationError(f"{SECTION}.{key}", f"{path} is {e}",
                                      f"a regular file of at most {MAX_PEM >> 20} MiB") from None
            except OSError as e:
                raise ValidationError(f"{SECTION}.{key}", f"cannot read {path}: {e.strerror}") from None
        return cls(contents)

    @property
    def contents(self) -> Mapping[str, bytes]:
        return dict(self._contents)

    def data(self, key: str) -> Optional[bytes]:
        return self._contents.get(key)

    def path(self, key: str) -> Optional[str]:
        """A path to an in-memory copy of the file (None where the key named none)."""
        if key not in self._contents:
            return None
        if key not in self._fds:
            fd = os.memfd_create(f"hetero-exporter-{key}", os.MFD_CLOEXEC)
            view = memoryview(self._contents[key])
            while view:
                view = view[os.write(fd, view):]
            self._fds[key] = fd
        return f"/proc/self/fd/{self._fds[key]}"

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
