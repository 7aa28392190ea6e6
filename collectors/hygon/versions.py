"""The DTK version of a Hygon host, from the DTK install's version file below the host root.

Hygon's DTK (its ROCm-derived runtime) installs to ``/opt/dtk-<version>`` with ``/opt/dtk`` a link
to it (as ROCm does; GPUStack's Hygon worker mounts /opt/dtk and sets ROCM_PATH=/opt/dtk) and
writes its release into ``<install>/.info/version`` (``24.04.3``; some releases only
``version-libs`` / ``version-dev``). Read, in order: ``/opt/dtk/.info/version``,
``/opt/dtk/.info/version-libs``, ``/opt/dtk/.info/version-dev``, then ``/opt/dtk-*/.info/version``
(the highest release). Absent -> None: never the hycu driver's version. Read below the
``host_root`` setting (``/`` by default).
"""

from __future__ import annotations

import os
import re
from typing import Mapping, Optional

from hetero_exporter.sdk.versions import below, read_version, write_version_file

DTK_FILES = ("opt/dtk/.info/version", "opt/dtk/.info/version-libs", "opt/dtk/.info/version-dev")


_VERSIONED = re.compile(r"^dtk-(\d+(?:\.\d+)*)$")


def versioned_files(host_root: str) -> tuple[str, ...]:
    """``opt/dtk-<ver>/.info/version[-libs]`` below ``host_root``, highest ``<ver>`` first (vendor
    packages are independent: this mirrors collectors/amd/versions.py for DTK's folders)."""
    try:
        names = os.listdir(below(host_root, "/opt"))
    except OSError:
        return ()
    found = sorted(((tuple(int(x) for x in m.group(1).split(".")), n) for n in names
                    if (m := _VERSIONED.match(n))), reverse=True)
    return tuple(f"opt/{n}/.info/{f}" for _, n in found[:16] for f in ("version", "version-libs"))


def dtk_version(host_root: str = "/") -> Optional[str]:
    """The host's DTK release (``24.04.3``), or None when no DTK version file is below ``host_root``."""
    return read_version(host_root, DTK_FILES) or read_version(host_root, versioned_files(host_root))


def discover(host_root: str = "/") -> Mapping[str, Optional[str]]:
    """VendorSpec.versions hook of ``hygon``: ``{"runtime_version": DTK version or None}``."""
    return {"runtime_version": dtk_version(host_root)}


def write_fake(root: str, version: str) -> None:
    """The version file of a DTK install below ``root`` (the fakes)."""
    write_version_file(root, DTK_FILES[0], version)
