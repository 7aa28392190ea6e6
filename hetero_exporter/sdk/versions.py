"""Runtime versions from the version files that runtime installs leave on a host.

Vendors' runtimes record their release in a small text file (``<install>/.info/version``,
``version.txt``, ``version.info``...). These helpers read such a file below a host root (``/``
on a node, the mount of the host's / in a container), bounded to its first bytes, and take the
leading dotted number (``6.2.0-66`` -> ``6.2.0``). Which files a vendor writes lives in its
package (``VendorSpec.versions``).
"""

from __future__ import annotations

import os
import re
from typing import Optional, Sequence

from hetero_exporter.sdk import host_tools

_VERSION = re.compile(r"\d+(?:\.\d+)+|\d+")
MAX_BYTES = 4096  # a version file is a line or two; never read a large file whole


def version_text(text: Optional[str]) -> Optional[str]:
    """``6.2.0-66`` -> ``6.2.0``; ``DTK-24.04.3`` -> ``24.04.3``; None when the first line has no number."""
    t = str(text or "").strip()
    if not t:
        return None
    m = _VERSION.search(t.splitlines()[0])
    return m.group(0) if m else None


def below(host_root: str, path: str) -> str:
    """The host's ``path`` below ``host_root``, its symlinks followed as the host would (ROCm's
    ``/opt/rocm -> /etc/alternatives/rocm -> /opt/rocm-6.2.0`` is absolute, and would
    otherwise point into the container)."""
    root = host_root or "/"
    return path if os.path.abspath(root) == "/" else host_tools.inside(root, path)


def read_version(host_root: str, files: Sequence[str]) -> Optional[str]:
    """The version in the first readable file of ``files`` (relative paths) below ``host_root``
    whose first line holds one."""
    for rel in files:
        try:
            with open(below(host_root, "/" + rel.lstrip("/")), encoding="utf-8", errors="replace") as f:
                v = version_text(f.read(MAX_BYTES))
        except OSError:
            continue
        if v:
            return v
    return None


def write_version_file(root: str, relative: str, version: str) -> None:
    """Write ``version`` into ``relative`` below ``root`` (the fakes' host roots)."""
    path = os.path.join(root, relative.lstrip("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(version + "\n")


def _hook_module(vendor: str):
    from hetero_exporter import vendors  # the spec names the vendor's versions module
    spec = vendors.spec(vendor)
    if spec is None or not spec.versions:
        return None, None
    module, _, attr = spec.versions.partition(":")
    return vendors.load(module), attr or "discover"


def discover(vendor: str, host_root: str = "/"):
    """The vendor's ``VendorSpec.versions`` hook run below ``host_root``, as a VersionInfo
    (empty when the vendor declares none)."""
    from hetero_exporter.model.spec import VersionInfo
    module, attr = _hook_module(vendor)
    if module is None:
        return VersionInfo()
    found = getattr(module, attr)(host_root)
    if isinstance(found, VersionInfo):
        return found
    return VersionInfo(**{k: found.get(k) for k in ("runtime_version", "driver_version", "source")})


def write_fake(vendor: str, root: str, runtime_version: str) -> bool:
    """Write the version files the vendor's hook reads below ``root`` (simulation); False when
    the vendor's versions module has no ``write_fake``."""
    module, _ = _hook_module(vendor)
    fn = getattr(module, "write_fake", None) if module is not None else None
    if fn is None:
        return False
    fn(root, runtime_version)
    return True
