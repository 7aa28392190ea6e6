"""The ROCm version of an AMD host, from the ROCm install's version file below the host root.

ROCm installs to ``/opt/rocm-<version>`` with ``/opt/rocm`` a link to it (ROCm docs, "ROCm Linux
Filesystem Hierarchy Standard reorganization"; through /etc/alternatives on Debian/Ubuntu), and
writes its release into ``<install>/.info/version`` (``6.2.0-66``; ``version-dev`` in some
packagings). Read, in order: ``/opt/rocm/.info/version``, ``/opt/rocm/.info/version-dev``, then
``/opt/rocm-*/.info/version`` (a host without the /opt/rocm link: the highest release). The
leading dotted number is the version (``6.2.0``). Absent file -> None: never the amdgpu driver's
version, never the agent's own libraries' (the amdsmi binding's ``amdsmi_get_rocm_version``
reads the librocm-core next to the binding, i.e. in the agent's image, not the host's ROCm).
Read below a host root (the ``host_root`` setting, ``/`` by default; ``/host`` when the agent runs
in a container with the host's / mounted there).
"""

from __future__ import annotations

import os
import re
from typing import Mapping, Optional

from hetero_exporter.sdk.versions import below, read_version, version_text, write_version_file  # noqa: F401 - part of this API

ROCM_FILES = ("opt/rocm/.info/version", "opt/rocm/.info/version-dev")


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def versioned_files(host_root: str, prefix: str, files: tuple[str, ...] = (".info/version",)) -> tuple[str, ...]:
    """``opt/<prefix>-<ver>/<file>`` paths below ``host_root``, highest ``<ver>`` first."""
    rx = re.compile(rf"^{re.escape(prefix)}-(\d+(?:\.\d+)*)$")
    try:
        names = os.listdir(below(host_root, "/opt"))
    except OSError:
        return ()
    found = sorted(((_key(m.group(1)), n) for n in names if (m := rx.match(n))), reverse=True)
    return tuple(f"opt/{n}/{f}" for _, n in found[:16] for f in files)


def rocm_version(host_root: str = "/") -> Optional[str]:
    """The host's ROCm release (``6.2.0``), or None when no ROCm version file is below ``host_root``."""
    return read_version(host_root, ROCM_FILES) or read_version(host_root, versioned_files(host_root, "rocm"))


def discover(host_root: str = "/") -> Mapping[str, Optional[str]]:
    """VendorSpec.versions hook of ``amd``: ``{"runtime_version": ROCm version or None}``."""
    return {"runtime_version": rocm_version(host_root)}


def write_fake(root: str, version: str) -> None:
    """The version file of a ROCm install below ``root`` (the fakes)."""
    write_version_file(root, ROCM_FILES[0], version)
