"""Neuware (CNToolkit) version of a Cambricon host, read below ``host_root``.

Neuware installs to ``/usr/local/neuware`` and keeps a ``version.txt`` at its top (the tree
InfiniTensor's env.sh documents for the Cambricon stack); its exact wording is not
documented, so the first version-like token (``1.15.0``, ``v3.7.2``) is taken. Without it
the runtime version is the driver version cnmon prints (the collector falls back to it).
"""

from __future__ import annotations

import os
import re

from hetero_exporter.sdk.spec import VersionInfo
from hetero_exporter.sdk.versions import write_version_file

CANDIDATES = ("usr/local/neuware/version.txt", "usr/local/neuware/version", "usr/local/neuware/VERSION")
_VERSION = re.compile(r"\bv?(\d+\.\d+(?:\.\d+){0,2}(?:[-.][0-9A-Za-z]+)?)")


def discover(host_root: str = "/") -> VersionInfo:
    """The Neuware version below ``host_root`` (None where no file says)."""
    for rel in CANDIDATES:
        path = os.path.join(host_root, rel)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read(65536)
        except OSError:
            continue
        m = _VERSION.search(text)
        if m:
            return VersionInfo(m.group(1), None, path)
    return VersionInfo()


def write_fake(root: str, neuware: str) -> None:
    """The Neuware version file below ``root`` (the fakes and tests)."""
    write_version_file(root, CANDIDATES[0], f"Neuware Version: {neuware}")
