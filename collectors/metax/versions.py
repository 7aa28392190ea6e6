"""MACA (MetaX's CUDA-like runtime and SDK) version of a MetaX host, read below ``host_root``.

The MACA SDK installs to ``/opt/maca`` (``MACA_PATH``, default /opt/maca: MetaX's container
images set ``PATH=/opt/mxdriver/bin:${MACA_PATH}/bin``) and writes its release into
``/opt/maca/Version.txt`` (PaddlePaddle's MetaX build scripts read it as
``cat /opt/maca/Version.txt | cut -d':' -f2``; flash-attn's MetaX build notes name the same
file, ``/opt/hpcc/Version.txt`` on HPCC stacks); lower-case ``version.txt`` is what some
MetaX guides cat. The first dotted number of the first line is taken (``3.3.0.15``).

mx-smi's own title prints ``MACA Version: <v>`` where the runtime is visible to it, and that
wins in the collector; this file is the fallback (inside a pod mx-smi prints ``MACA Version:
unknown``). Neither found: None, never the driver version.
"""

from __future__ import annotations

from hetero_exporter.model.spec import VersionInfo
from hetero_exporter.sdk.versions import below, read_version, write_version_file

CANDIDATES = ("opt/maca/Version.txt", "opt/maca/version.txt", "opt/hpcc/Version.txt")


def discover(host_root: str = "/") -> VersionInfo:
    """The MACA version below ``host_root`` (an empty VersionInfo where no file says)."""
    for rel in CANDIDATES:
        v = read_version(host_root, [rel])
        if v:
            return VersionInfo(v, None, below(host_root, "/" + rel))
    return VersionInfo()


def write_fake(root: str, maca: str) -> None:
    """The MACA version file below ``root`` (fakes and tests), in Version.txt's ``NAME:VERSION`` form."""
    write_version_file(root, CANDIDATES[0], f"MACA:{maca}")
