"""The ROCm version from the runtime install's version file.

ROCm writes its release into ``/opt/rocm/.info/version`` (``6.2.0-66``). It is read below a host root (the ``host_root`` setting, ``/`` by default; ``/host`` when the
agent runs in a container with the host's / mounted there). The leading dotted number is the
version (``6.2.0``); the build suffix is dropped.
"""

from __future__ import annotations

from typing import Mapping, Optional

from hetero_exporter.sdk.versions import read_version, version_text, write_version_file  # noqa: F401 - part of this API

ROCM_FILES = ("opt/rocm/.info/version", "opt/rocm/.info/version-dev")

def rocm_version(host_root: str = "/") -> Optional[str]:
    return read_version(host_root, ROCM_FILES)


def discover(host_root: str = "/") -> Mapping[str, Optional[str]]:
    """VendorSpec.versions hook of ``amd``: ``{"runtime_version": ROCm version or None}``."""
    return {"runtime_version": rocm_version(host_root)}


def write_fake(root: str, version: str) -> None:
    """The version file of a ROCm install below ``root`` (the fakes)."""
    write_version_file(root, ROCM_FILES[0], version)
