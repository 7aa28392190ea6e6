"""The DTK version of a Hygon host, from the DTK install's version file.

DTK writes its release into ``/opt/dtk/.info/version`` (``24.04.3``; some releases only
``version-libs`` / ``version-dev``), read below the ``host_root`` setting (``/`` by default).
"""

from __future__ import annotations

from typing import Mapping, Optional

from hetero_exporter.sdk.versions import read_version, write_version_file

DTK_FILES = ("opt/dtk/.info/version", "opt/dtk/.info/version-libs", "opt/dtk/.info/version-dev")


def dtk_version(host_root: str = "/") -> Optional[str]:
    return read_version(host_root, DTK_FILES)


def discover(host_root: str = "/") -> Mapping[str, Optional[str]]:
    """VendorSpec.versions hook of ``hygon``: ``{"runtime_version": DTK version or None}``."""
    return {"runtime_version": dtk_version(host_root)}


def write_fake(root: str, version: str) -> None:
    """The version file of a DTK install below ``root`` (the fakes)."""
    write_version_file(root, DTK_FILES[0], version)
