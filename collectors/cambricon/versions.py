"""Neuware (CNToolkit) version of a Cambricon host, read below ``host_root``.

Neuware installs to ``/usr/local/neuware`` and keeps a ``version.txt`` at its top (the tree
InfiniTensor's env.sh documents for the Cambricon stack); its exact wording is not
documented, so the first version-like number of its first line is taken (sdk.versions).
cnmon prints only its own and the driver's version, so without the file the runtime version
is unknown (None): the driver version is not the runtime's.
"""

from __future__ import annotations

from hetero_exporter.model.spec import VersionInfo
from hetero_exporter.sdk.versions import read_version, write_version_file

CANDIDATES = ("usr/local/neuware/version.txt", "usr/local/neuware/version", "usr/local/neuware/VERSION")


def discover(host_root: str = "/") -> VersionInfo:
    """The Neuware version below ``host_root`` (None where no file says)."""
    v = read_version(host_root, CANDIDATES)
    return VersionInfo(v, None, "/usr/local/neuware version file" if v else None)


def write_fake(root: str, neuware: str) -> None:
    """The Neuware version file below ``root`` (the fakes and tests)."""
    write_version_file(root, CANDIDATES[0], f"Neuware Version: {neuware}")
