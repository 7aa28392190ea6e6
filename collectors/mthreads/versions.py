"""MUSA (Moore Threads' runtime and toolkit) version of a Moore Threads host, read below ``host_root``.

The MUSA toolkit installs to ``/usr/local/musa`` (``MUSA_INSTALL_PATH``; a link to
``/usr/local/musa-<version>``) and records its release in ``/usr/local/musa/version.json``:
Moore Threads' install guide (docs.mthreads.com, "确认 toolkit 版本号") checks
``grep -m1 -A1 musa_toolkits /usr/local/musa/version.json`` and names that ``version`` field
the authoritative source of the MUSA toolkit version (``"musa_toolkits": {"version": "5.1.0",
...}``). The default mthreads-gmi table prints no MUSA version (captures in
../shared/fixtures/mthreads-gmi), so this file is where the runtime version comes from;
without it the runtime version is None, never the driver version.
"""

from __future__ import annotations

import json
import os

from hetero_exporter.model.spec import VersionInfo
from hetero_exporter.sdk.versions import below, version_text

VERSION_JSON = "usr/local/musa/version.json"
MAX_JSON = 64 * 1024  # the file lists a dozen components; a larger one is not it


def _from_json(text: str):
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    block = doc.get("musa_toolkits") if isinstance(doc, dict) else None
    v = block.get("version") if isinstance(block, dict) else None
    return version_text(v) if isinstance(v, str) else None


def discover(host_root: str = "/") -> VersionInfo:
    """The MUSA toolkit version below ``host_root`` (an empty VersionInfo where none is found)."""
    path = below(host_root, "/" + VERSION_JSON)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(MAX_JSON + 1)
    except OSError:
        return VersionInfo()
    v = _from_json(text) if len(text) <= MAX_JSON else None
    return VersionInfo(v, None, path) if v else VersionInfo()


def write_fake(root: str, musa: str) -> None:
    """A version.json below ``root`` (fakes and tests) in the shape the MUSA toolkit writes."""
    path = os.path.join(root, VERSION_JSON)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"musa_toolkits": {"version": musa, "git_branch": f"release_musa_{musa}"},
                   "musa_runtime": {"version": musa}}, f, indent=4)

