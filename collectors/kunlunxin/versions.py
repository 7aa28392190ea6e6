"""XRE (Kunlunxin runtime) version of a host, read below ``host_root``.

``xpu_smi`` of XRE 4.x prints it (``Runtime Version: 4.31``), xpu-smi 5.x as ``XPU-RT
Version`` in its title (N/A inside some containers): the collector takes the tool's where
printed. Else the XRE install's ``version`` file: XRE installs to ``/usr/local/xpu`` (a link
to the versioned folder, e.g. ``/usr/local/xpu-4.33.0``) with ``bin``, ``include``,
``lib64``, ``tools``, ``version`` and ``XTDK`` at its top (the tree InfiniTensor's env.sh
documents for the Kunlunxin stack; the file's wording is not documented, so the first
version-like number of its first line is taken). Else None: never the driver version.
"""

from __future__ import annotations

from hetero_exporter.model.spec import VersionInfo
from hetero_exporter.sdk.versions import read_version, write_version_file

CANDIDATES = ("usr/local/xpu/version", "usr/local/xpu/version.txt")


def discover(host_root: str = "/") -> VersionInfo:
    """The XRE version below ``host_root`` (None where no file says)."""
    v = read_version(host_root, CANDIDATES)
    return VersionInfo(v, None, "/usr/local/xpu version file" if v else None)


def write_fake(root: str, xre: str) -> None:
    """The XRE version file below ``root`` (tests)."""
    write_version_file(root, CANDIDATES[0], xre)
