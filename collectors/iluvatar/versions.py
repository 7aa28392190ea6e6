"""CoreX SDK (Iluvatar's runtime and toolkit) version of a host, read below ``host_root``.

ixsmi's title prints ``IX-ML: 4.0.0`` (the management library, shipped with and numbered as
the CoreX SDK: Iluvatar's device-plugin README shows IX-ML 4.0.0 inside a corex:4.0.0 image
on a 4.1.0 driver host), and the collector takes it where printed. ``CUDA Version`` is the
CUDA API level CoreX implements (10.2), not its release. Else CoreX's install: it installs to
``/usr/local/corex`` (a link to ``/usr/local/corex-<version>``); the ``version`` file read
here at its top is an assumption (not publicly documented), its first line's first
version-like number taken (sdk.versions). Else None: never the driver version.
"""

from __future__ import annotations

from hetero_exporter.model.spec import VersionInfo
from hetero_exporter.sdk.versions import read_version, write_version_file

CANDIDATES = ("usr/local/corex/version", "usr/local/corex/version.txt")


def discover(host_root: str = "/") -> VersionInfo:
    """The CoreX version below ``host_root`` (None where no file says)."""
    v = read_version(host_root, CANDIDATES)
    return VersionInfo(v, None, "/usr/local/corex version file" if v else None)


def write_fake(root: str, corex: str) -> None:
    """The CoreX version file below ``root`` (tests)."""
    write_version_file(root, CANDIDATES[0], corex)
