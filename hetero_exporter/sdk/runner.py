"""The shared runner for vendor command-line tools (every CLI collector calls its tool here).

A vendor CLI can hang (driver stuck in D state), print megabytes of garbage or die with a
message on stderr. This runner makes each of those a clear, bounded failure:

- no shell: argv is a list, nothing is interpolated;
- fixed locale (``LC_ALL=C``), so numbers and headers do not change with the node's locale;
- a minimal environment: PATH, ``LD_LIBRARY_PATH`` and ``HOME`` when the node sets them, the
  variables the caller names in ``passthrough`` (a tool's ``ToolSpec.env``: where its vendor's
  install lives) and ``env``; nothing else of the agent's environment reaches the tool;
- a deadline: past it the whole process group is killed (SIGKILL), grandchildren included,
  and ``CliTimeout`` is raised; so are the tool's descendants that left the group (``setsid``)
  and whatever still holds its output pipes;
- at exit (``atexit``: the agent stopped by SIGTERM, a command ending) every call still running
  is killed the same way (``kill_running``): no tool outlives the agent;
- an output cap: past ``max_bytes`` on stdout the group is killed and ``CliError`` raised;
- a non-zero exit raises ``CliError`` carrying the tail of stderr;
- a missing executable raises ``contract.Unavailable``;
- ``chroot=ROOT``: the tool (argv[0], a path on the host) runs as ``chroot ROOT argv...``
  (sdk/host_tools.py decides when; messages still name the tool).
"""

from __future__ import annotations

import atexit
import errno
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from hetero_exporter.sdk import host_tools
from hetero_exporter.sdk.contract import Unavailable

DEFAULT_MAX_BYTES = 8 << 20  # 8 MiB: a 16-device summary table is ~10 KiB
ALWAYS_PASSED = ("LD_LIBRARY_PATH", "HOME")  # every tool may need these when the node sets them
STDERR_KEEP = 2048
_ETXTBSY_TRIES = 5


class CliError(RuntimeError):
    """The tool ran but failed (non-zero exit, too much output); message has stderr's tail."""


class CliTimeout(TimeoutError):
    """The tool did not finish before its deadline and was killed with its process group."""


@dataclass(frozen=True)
class CliResult:
    argv: tuple[str, ...]
    stdout: str
    stderr: str
    returncode: int
    duration_seconds: float


_counter_lock = threading.Lock()
_invocations: dict[str, int] = {}
_running: dict[int, subprocess.Popen] = {}  # calls not finished yet, by pid: killed at exit


def invocations() -> dict[str, int]:
    """Executions per tool name since start (benchmarks count CLI calls per cycle)."""
    with _counter_lock:
        return dict(_invocations)


def _env(extra: Optional[Mapping[str, str]], passthrough: Sequence[str] = ()) -> dict[str, str]:
    env = {"LC_ALL": "C", "LANG": "C", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    # vendor tools locate their libraries through these; keep them if the node sets them
    for key in (*ALWAYS_PASSED, *passthrough):
        if key in os.environ:
            env[key] = os.environ[key]
    if extra:
        env.update(extra)
    return env


_killed = 0  # processes of timed-out calls killed outside the call's own process group


def killed_total() -> int:
    """Processes killed because they outlived a call's deadline in another session (a daemon the
    tool forked with setsid, still holding the call's output pipe); the agent exports it."""
    with _counter_lock:
        return _killed


def _descendants(root: int, proc_root: str = "/proc") -> list[int]:
    """Pids below ``root`` by parent links (a child that left the group with setsid, its own
    children): read before the group is killed, while they are still linked. A /proc walk,
    only when a call is killed."""
    children: dict[int, list[int]] = {}
    try:
        pids = [p for p in os.listdir(proc_root) if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            with open(os.path.join(proc_root, pid, "stat"), "rb") as f:
                state, ppid = f.read(4096).rsplit(b")", 1)[1].split()[:2]  # after the name
        except (OSError, IndexError, ValueError):
            continue
        if state not in (b"Z", b"X") and ppid.isdigit():  # an exited one is not killed (nor counted)
            children.setdefault(int(ppid), []).append(int(pid))
    found: list[int] = []
    todo = [root]
    while todo and len(found) < len(pids):  # bounded: a pid is listed once
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _writes_pipe(fdinfo: str) -> bool:
    """Whether the fd that ``/proc/PID/fdinfo/FD`` describes is open for writing (its ``flags:``
    line, octal). Unreadable is no: only a writer keeps a call's output open."""
    try:
        with open(fdinfo, "rb") as f:
            for line in f.read(4096).splitlines():
                if line.startswith(b"flags:"):
                    return int(line.split()[1], 8) & os.O_ACCMODE != os.O_RDONLY
    except (OSError, IndexError, ValueError):
        pass
    return False


def _pipe_holders(inodes: set[int], proc_root: str = "/proc") -> list[int]:
    """Pids (not ours) holding one of these pipes open for writing: what is left of a call once
    its process group is gone. Only writers: a child another thread of ours has forked and not
    yet exec'd holds copies of our read ends, and is no part of this call. Read only on a
    timeout: a /proc walk, bounded by the number of processes."""
    wanted = {f"pipe:[{i}]" for i in inodes}
    me = os.getpid()
    found = []
    try:
        pids = [p for p in os.listdir(proc_root) if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        if int(pid) == me:
            continue
        fd_dir = os.path.join(proc_root, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                held = os.readlink(os.path.join(fd_dir, fd)) in wanted
            except OSError:
                continue
            if held and _writes_pipe(os.path.join(proc_root, pid, "fdinfo", fd)):
                found.append(int(pid))
                break
    return found


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the call once (``_kill_call``): the one that takes it off ``_running`` kills it. A
    second kill while the first group is still dying (the call's ``finally``, ``kill_running``
    at exit) would count its daemons again: they are not reaped yet, and a kill of a dying
    process succeeds."""
    with _counter_lock:
        if _running.pop(proc.pid, None) is None:
            return
    _kill_call(proc)


def _kill_call(proc: subprocess.Popen) -> None:
    """Kill the call's process group, its descendants in other sessions, then whatever still
    holds its output pipes (a daemon that left the group with setsid would otherwise outlive
    every deadline and pile up each cycle)."""
    global _killed
    below = _descendants(proc.pid) if proc.poll() is None else []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    inodes = set()
    for f in (proc.stdout, proc.stderr):
        if f is None:
            continue
        try:
            inodes.add(os.fstat(f.fileno()).st_ino)
        except (OSError, ValueError):
            continue
    for pid in dict.fromkeys([*below, *(_pipe_holders(inodes) if inodes else ())]):
        try:
            if os.getpgid(pid) == proc.pid:
                continue  # of the group just killed, still dying
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
        with _counter_lock:
            _killed += 1


def kill_running() -> int:
    """Kill every call still running (each as a deadline would); the number of calls. Run at
    exit: a tool within its deadline when the agent stops does not outlive it."""
    with _counter_lock:
        procs = list(_running.values())
    for proc in procs:
        _kill_group(proc)
    return len(procs)


atexit.register(kill_running)


def _launch(exe: str, env: Mapping[str, str], chroot: Optional[str]) -> list[str]:
    """The argv prefix that starts ``exe``: its resolved path, or chroot, the root and the
    tool's host path; Unavailable when either is missing."""
    if chroot is not None:
        cmd = host_tools.chroot_command()
        if cmd is None or not os.path.isabs(exe) or not host_tools.executable(os.path.join(chroot, exe.lstrip("/"))):
            raise Unavailable(f"{exe}: not found or not executable below {chroot} (or no chroot command)")
        return [cmd, chroot, exe]
    resolved = exe if os.sep in exe else shutil.which(exe, path=env["PATH"])
    if resolved is None or not os.access(resolved, os.X_OK):
        raise Unavailable(f"{exe}: not found or not executable")
    return [resolved]


def run(argv: Sequence[str], timeout: float, *, max_bytes: int = DEFAULT_MAX_BYTES,
        env: Optional[Mapping[str, str]] = None, check: bool = True,
        passthrough: Sequence[str] = (), chroot: Optional[str] = None) -> CliResult:
    """Run ``argv`` (no shell) and return its output, or raise CliTimeout / CliError /
    Unavailable as described in the module docstring. ``passthrough``: names of variables
    of the agent's environment the tool also gets (its ``ToolSpec.env``); ``chroot``: the
    host root to run argv[0] (its host path) in."""
    if not argv:
        raise ValueError("empty argv")
    exe = argv[0]
    child_env = _env(env, passthrough)
    launch = _launch(exe, child_env, chroot)
    name = os.path.basename(exe)
    with _counter_lock:
        _invocations[name] = _invocations.get(name, 0) + 1
    t0 = time.monotonic()
    deadline = t0 + timeout
    for attempt in range(_ETXTBSY_TRIES):
        try:
            proc = subprocess.Popen([*launch, *argv[1:]], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=child_env, start_new_session=True,
                                    close_fds=True)
            break
        except OSError as e:
            # ETXTBSY: another thread's fork still holds a just-written executable open for
            # writing (a fake tool's launcher, a tool being upgraded); it clears in moments
            if e.errno == errno.ETXTBSY and attempt + 1 < _ETXTBSY_TRIES and time.monotonic() < deadline:
                time.sleep(0.01 * (attempt + 1))
                continue
            raise Unavailable(f"{exe}: cannot start: {e.strerror}") from None
    with _counter_lock:
        _running[proc.pid] = proc
    out, err = bytearray(), bytearray()
    assert proc.stdout is not None and proc.stderr is not None  # both PIPE
    pipes = (proc.stdout, proc.stderr)
    sel = selectors.DefaultSelector()
    sel.register(pipes[0], selectors.EVENT_READ, out)
    sel.register(pipes[1], selectors.EVENT_READ, err)
    try:
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                _kill_group(proc)
                raise CliTimeout(f"{name}: no answer within {timeout:g} s; killed its process group")
            for key, _ in sel.select(remaining):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = key.data
                buf += chunk
                if buf is out and len(out) > max_bytes:
                    _kill_group(proc)
                    raise CliError(f"{name}: output exceeded {max_bytes} bytes; killed")
                if buf is err and len(err) > 4 * STDERR_KEEP:
                    del err[: len(err) - STDERR_KEEP]
        try:
            rc = proc.wait(max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:  # closed its pipes but kept running
            _kill_group(proc)
            raise CliTimeout(f"{name}: did not exit within {timeout:g} s; killed its process group") from None
    finally:
        sel.close()
        for f in pipes:
            f.close()
        if proc.poll() is None:
            _kill_group(proc)  # ended by something else (an interrupt): the group goes too
            proc.wait()
        with _counter_lock:
            _running.pop(proc.pid, None)
    stdout = out.decode("utf-8", "replace")
    stderr = err[-STDERR_KEEP:].decode("utf-8", "replace").strip()
    result = CliResult(tuple(argv), stdout, stderr, rc, time.monotonic() - t0)
    if check and rc != 0:
        tail = stderr or stdout.strip()[-300:]
        raise CliError(f"{name} {' '.join(argv[1:])}: exit status {rc}: {tail or '(no output)'}")
    return result
