"""Vendor tools and driver libraries of the host, seen from a container through a host root.

The DaemonSet mounts the host's / read-only (at /host/root); ``--host-root`` / ``host_root`` /
``HOST_ROOT`` names that folder. A vendor tool found below it (``ToolSpec.dirs``) runs in one
of two ways (``host_exec``):

- ``ld_library_path`` (default): the tool is executed from the mount with the spec's
  ``library_dirs`` (those that exist, globs expanded) below the host root first on
  ``LD_LIBRARY_PATH``, and the install folders of ``ToolSpec.home_env`` below the host root.
  Works on the read-only mount with no extra privilege; the tool runs with the container's
  dynamic loader and C library (a folder holding the host's libc.so.6 is left out: it would
  replace the image's).
- ``chroot``: ``chroot HOSTROOT TOOL ...`` with the library folders as on the host. For a tool
  built against a glibc newer than the image's (which the container's loader cannot satisfy),
  or a script whose interpreter lives on the host. Needs a whole host root (usr, etc, lib or
  lib64) and root with CAP_SYS_CHROOT: probed once per root; when the probe fails the tool runs
  the default way and a warning says why.

Paths below the host root are resolved as the host would resolve them: an absolute symlink
(``/opt/rocm -> /etc/alternatives/rocm -> /opt/rocm-6.2.0``, ``/usr/local/corex ->
/usr/local/corex-4.1.0``) starts again at the host root, ``..`` stops there.
"""

from __future__ import annotations

import fnmatch
import glob
import logging
import os
import shutil
import subprocess
import threading
from typing import Mapping, Optional, Sequence

from hetero_exporter.model.spec import ToolSpec

HOST_ROOT_ENV = "HOST_ROOT"
EXEC_MODES = ("ld_library_path", "chroot")
LIBC = "libc.so.6"
MAX_LINKS = 40  # symlinks followed in one path (the kernel's limit)
MAX_MATCHES = 32  # folders one glob component may add (a library path stays short)
PROBE_TIMEOUT = 5.0  # seconds for the one chroot probe per host root
_WHOLE = (("usr",), ("etc",), ("lib", "lib64"))  # a host root chroot can run in has these

log = logging.getLogger(__name__)


class ToolPath(str):
    """A tool's path in this container (a str: factories, messages and the runner take it as
    one) with how to run it: ``env`` the variables it needs (``LD_LIBRARY_PATH`` with its
    driver libraries, install folders), ``chroot`` the host root to run it in, ``host_path``
    its path on the host (the argv[0] inside the chroot)."""

    env: Mapping[str, str]
    chroot: Optional[str]
    host_path: str

    def __new__(cls, path: str, *, env: Optional[Mapping[str, str]] = None, chroot: Optional[str] = None,
                host_path: Optional[str] = None) -> "ToolPath":
        self = super().__new__(cls, path)
        self.env = dict(env or {})
        self.chroot = chroot
        self.host_path = host_path or path
        return self


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def host_path(root: str, path: str) -> str:
    """``path`` (as on the host) with its symlinks resolved the way the host resolves them,
    reading the links below ``root``; a missing component ends the resolution (the rest is
    kept as written). The result is a host path (starts with /)."""
    todo, links = _parts(path), 0
    done: list[str] = []
    while todo:
        part = todo.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        try:
            target = os.readlink(os.path.join(root, *done, part))
        except OSError:  # not a link, or missing: taken as written
            done.append(part)
            continue
        links += 1
        if links > MAX_LINKS:  # a loop: what is left cannot exist
            return "/" + "/".join([*done, part, *todo])
        if target.startswith("/"):
            done = []
        todo = _parts(target) + todo
    return "/" + "/".join(done)


def inside(root: str, path: str) -> str:
    """Where the host's ``path`` is in this container: below ``root``, symlinks resolved."""
    return os.path.join(root, host_path(root, path).lstrip("/"))


def expand(root: str, pattern: str) -> list[str]:
    """The host folders ``pattern`` names that exist below ``root`` (host paths, resolved); a
    component with ``*``, ``?`` or ``[`` matches the entries of its folder (sorted, at most
    MAX_MATCHES; hidden ones only when the pattern starts with a dot)."""
    found = ["/"]
    for part in _parts(pattern):
        step = []
        for base in found:
            if not glob.has_magic(part):
                step.append(host_path(root, f"{base.rstrip('/')}/{part}"))
                continue
            try:
                names = os.listdir(os.path.join(root, base.lstrip("/")))
            except OSError:
                continue
            names = sorted(n for n in fnmatch.filter(names, part) if part.startswith(".") or not n.startswith("."))
            step += [host_path(root, f"{base.rstrip('/')}/{n}") for n in names[:MAX_MATCHES]]
        found = step
    return [p for p in dict.fromkeys(found) if os.path.isdir(os.path.join(root, p.lstrip("/")))]


def library_dirs(root: str, patterns: Sequence[str]) -> list[str]:
    """The host library folders of ``patterns`` that exist below ``root``, in order, once each."""
    out: list[str] = []
    for pattern in patterns:
        out += [p for p in expand(root, pattern) if p not in out]
    return out


def executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_below(root: str, name: str, dirs: Sequence[str]) -> Optional[str]:
    """The host path of the first executable ``name`` in ``dirs`` below ``root``, else None."""
    for d in dirs:
        candidate = host_path(root, f"{d.rstrip('/')}/{name}")
        if executable(os.path.join(root, candidate.lstrip("/"))):
            return candidate
    return None


def tool_path(root: str, found: str, spec: ToolSpec, mode: str = "ld_library_path") -> ToolPath:
    """The ToolPath of ``found`` (a host path below ``root``) run the ``mode`` way (module
    docstring); ``chroot`` falls back to ``ld_library_path`` with a warning when the probe fails."""
    if mode == "chroot":
        why = chroot_unusable(root)
        if why is None:
            return ToolPath(inside(root, found), env=_env(root, spec, chrooted=True), chroot=root, host_path=found)
        _warn_once(root, f"host_exec chroot: cannot chroot into {root} ({why}); running host tools "
                         f"with their libraries on LD_LIBRARY_PATH instead")
    return ToolPath(inside(root, found), env=_env(root, spec, chrooted=False), host_path=found)


def _env(root: str, spec: ToolSpec, *, chrooted: bool) -> dict[str, str]:
    """``LD_LIBRARY_PATH`` (the existing library folders, before the agent's own outside a
    chroot) and each install variable the agent's environment leaves unset."""
    libs = library_dirs(root, spec.library_dirs)
    env: dict[str, str] = {}
    if chrooted:
        env["LD_LIBRARY_PATH"] = ":".join(libs)  # the agent's folders mean nothing on the host
    else:
        own = os.environ.get("LD_LIBRARY_PATH")
        paths = [os.path.join(root, p.lstrip("/")) for p in libs]
        # a folder with the host's C library would replace the image's (whose loader cannot
        # use it): such libraries need the vendor's container runtime or chroot
        paths = [p for p in paths if not os.path.exists(os.path.join(p, LIBC))] + ([own] if own else [])
        if paths:
            env["LD_LIBRARY_PATH"] = ":".join(paths)
    for var, folder in spec.home_env:
        if var in os.environ:
            continue  # set for the agent on purpose: passed through as it is (ToolSpec.env)
        resolved = host_path(root, folder)
        if os.path.isdir(os.path.join(root, resolved.lstrip("/"))):
            env[var] = resolved if chrooted else os.path.join(root, resolved.lstrip("/"))
    return env


# --------------------------------------------------------------------------- chroot


def chroot_command() -> Optional[str]:
    return shutil.which("chroot") or next((p for p in ("/usr/sbin/chroot", "/usr/bin/chroot") if executable(p)), None)


def _has_cap_sys_chroot() -> bool:
    """Whether CAP_SYS_CHROOT (bit 18) is in this process's effective set (/proc/self/status)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> 18 & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


_probed: dict[str, Optional[str]] = {}
_warned: set[str] = set()
_lock = threading.Lock()


def chroot_unusable(root: str) -> Optional[str]:
    """None when tools can run through ``chroot root``, else why not; probed once per root
    (a whole root, root with CAP_SYS_CHROOT, then ``chroot root /bin/sh -c 'exit 0'``)."""
    with _lock:
        if root not in _probed:
            _probed[root] = _probe(root)
        return _probed[root]


def _probe(root: str) -> Optional[str]:
    missing = [alts[0] for alts in _WHOLE if not any(os.path.isdir(os.path.join(root, a)) for a in alts)]
    if missing:
        return f"not a whole root: no {', '.join(missing)}"
    if os.geteuid() != 0 or not _has_cap_sys_chroot():
        return "needs root with CAP_SYS_CHROOT"
    cmd = chroot_command()
    if cmd is None:
        return "no chroot command in the image"
    try:
        done = subprocess.run([cmd, root, "/bin/sh", "-c", "exit 0"], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=PROBE_TIMEOUT, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"probe failed: {e}"
    if done.returncode != 0:
        return f"probe exited {done.returncode}: {done.stderr.decode('utf-8', 'replace').strip()[-200:]}"
    return None


def _warn_once(key: str, message: str) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message)
