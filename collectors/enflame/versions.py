"""TopsRider (Enflame's software stack: runtime, compilers, driver package) version of a host,
read below ``host_root``.

efsmi prints only its own and the driver's version (``EFSMI: 1.7.2.14  Driver Ver:
1.7.2.14``), so the runtime version comes from the TopsRider install. TopsRider installs
below ``/usr/local/topsrider`` (its layout is not publicly documented: the file names read
here, ``version`` / ``version.txt`` / ``VERSION`` at its top, are an assumption); the first
version-like number of the file's first line is taken (sdk.versions). Without one the
runtime version is unknown (None): never the driver version.
"""

from __future__ import annotations

from hetero_exporter.model.spec import VersionInfo
from hetero_exporter.sdk.versions import read_version, write_version_file

CANDIDATES = ("usr/local/topsrider/version", "usr/local/topsrider/version.txt", "usr/local/topsrider/VERSION")


def discover(host_root: str = "/") -> VersionInfo:
    """The TopsRider version below ``host_root`` (None where no file says)."""
    v = read_version(host_root, CANDIDATES)
    return VersionInfo(v, None, "/usr/local/topsrider version file" if v else None)


def write_fake(root: str, topsrider: str) -> None:
    """The TopsRider version file below ``root`` (tests)."""
    write_version_file(root, CANDIDATES[0], topsrider)
