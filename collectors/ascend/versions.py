"""CANN / driver package versions of an Ascend host, read below ``host_root``.

Where CANN records its version (hiascend.com, CANN installation guide, "File Paths"): the
toolkit's ``<install>/ascend-toolkit/latest/<arch>-linux/ascend_toolkit_install.info`` (CANN
8.0 and older; ``<install>/cann/<arch>-linux/...`` from 8.5), a ``key=value`` file whose
``version=`` is the CANN version; the NNAE runtime's ``nnae/latest/ascend_nnae_install.info``
likewise. Without CANN (a node that runs only containers bringing their own) there is no
runtime version: ``runtime_version`` is None. The driver package's ``driver/version.info``
(``Version=23.0.3``) is the driver version only, never a stand-in for CANN's.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Optional

from hetero_exporter.model.spec import VersionInfo

_INSTALL = "usr/local/Ascend"
# (glob below the root, what it is), first found wins
CANDIDATES = (
    (f"{_INSTALL}/ascend-toolkit/latest/*-linux/ascend_toolkit_install.info", "cann"),
    (f"{_INSTALL}/ascend-toolkit/latest/ascend_toolkit_install.info", "cann"),
    (f"{_INSTALL}/cann/*-linux/ascend_toolkit_install.info", "cann"),
    (f"{_INSTALL}/nnae/latest/ascend_nnae_install.info", "cann"),
    (f"{_INSTALL}/nnae/latest/*-linux/ascend_nnae_install.info", "cann"),
    (f"{_INSTALL}/driver/version.info", "driver"),
)


def _version_of(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(65536)
    except OSError:
        return None
    m = re.search(r"^\s*version\s*=\s*\[?([0-9A-Za-z][0-9A-Za-z._-]{0,40})", text, re.I | re.M)
    return m.group(1) if m else None


def discover(host_root: str = "/") -> VersionInfo:
    """CANN and driver versions below ``host_root`` (None where no file says); ``source`` is
    the CANN file the runtime version came from."""
    runtime = source = driver = None
    for pattern, what in CANDIDATES:
        for path in sorted(glob.glob(os.path.join(host_root, pattern)))[:4]:
            v = _version_of(path)
            if v is None:
                continue
            if what == "driver" and driver is None:
                driver = v
            if what == "cann" and runtime is None:
                runtime, source = v, path
            break
    return VersionInfo(runtime, driver, source)


def write_fake(root: str, cann: Optional[str], driver: str, arch: str = "x86_64") -> None:
    """The version files of an Ascend host below ``root`` (the fakes and tests); ``cann``
    None writes the driver's only (a node without CANN)."""
    if cann is not None:
        d = os.path.join(root, _INSTALL, "ascend-toolkit", "latest", f"{arch}-linux")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "ascend_toolkit_install.info"), "w") as f:
            f.write(f"package_name=Ascend-cann-toolkit\nversion={cann}\narch={arch}\nos=linux\n"
                    f"path={_INSTALL}/ascend-toolkit/{cann}/{arch}-linux\n")
    dd = os.path.join(root, _INSTALL, "driver")
    os.makedirs(dd, exist_ok=True)
    with open(os.path.join(dd, "version.info"), "w") as f:
        f.write(f"Version={driver}\n")
