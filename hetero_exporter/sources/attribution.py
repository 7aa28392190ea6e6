"""Who uses a device: process -> container -> pod.

Three layers, each usable alone:

1. ``parse_cgroup(text)``: pure. What a ``/proc/<pid>/cgroup`` file says about its process:
   cgroup version (1, 2, hybrid), container runtime, container id, pod uid, Kubernetes QoS
   class and the kubelet's cgroup driver. It reads the layouts of cgroup v1 and v2 under the
   systemd driver (``kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope``) and the
   cgroupfs driver (``/kubepods/burstable/pod<uid>/<id>``), for containerd, CRI-O and docker
   (plus standalone docker/podman, Cloud Foundry garden and ECS), and tolerates the ``..``
   components a reader in its own cgroup namespace sees. ``hetero-exporter parse cgroup FILE``.
2. ``CgroupCache``: reads ``/proc/<pid>/stat`` (start time) and ``/proc/<pid>/cgroup`` under an
   injectable proc root, once per (pid, start time): a pid is read once in its lifetime, a
   reused pid (new start time) is read again.
3. ``Attributor``: the sampler enricher. Fills every device's ``ProcessSample`` with container
   id, pod uid, namespace, pod and container names (``attribution="cgroup"``), and the
   device's ``allocations`` from kubelet PodResources. Names come from a ``PodDirectory``
   (the watch-backed pod cache of k8s/pods.py, or the scenario's pods when simulating) and
   allocations from an ``AllocationSource`` (podresources/client.py); both are refreshed in
   their own threads, so a cycle never waits on the Kubernetes API or the kubelet.

A process in no pod keeps empty pod fields and is still reported. A process whose
``/proc`` entry cannot be read (agent without hostPID) falls back to PodResources: when the
kubelet gave its device to exactly one container, that container is named
(``attribution="podresources"``); otherwise it stays unattributed.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.model import (Allocation, DeviceIdentity, NodeSnapshot,
                                   ProcessSample, SourceStatus)
from hetero_exporter.model.pods import PodInfo  # noqa: F401 (part of this module's API)

log = logging.getLogger(__name__)

TOOL = "cgroup"
QOS_CLASSES = ("guaranteed", "burstable", "besteffort")
RUNTIMES = ("containerd", "cri-o", "docker", "podman", "garden", "ecs")

# --------------------------------------------------------------------------- parsing

_LINE = re.compile(r"^([0-9]{1,10}):([^:]*):(.*)$")
_UID_DASHED = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_UID_SYSTEMD = r"[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}"
_HASH32 = r"[0-9a-f]{32}"  # static (mirror) pods have a config hash as their uid
# cgroupfs driver: /kubepods[/burstable|/besteffort]/pod<uid>
_POD_CGROUPFS = re.compile(rf"^pod({_UID_DASHED}|{_HASH32})$")
# systemd driver: kubepods[-burstable|-besteffort]-pod<uid_with_underscores>.slice, also with a
# prefix (kind: kubelet-kubepods-...)
_POD_SYSTEMD = re.compile(rf"(?:^|-)kubepods(?:-(burstable|besteffort))?-pod({_UID_SYSTEMD}|{_HASH32})\.slice$")
_HEX64 = r"[0-9a-f]{64}"
# <prefix>-<id>[.scope]: systemd scopes of each runtime; cgroupfs CRI-O uses crio-<id> too
_PREFIXED = re.compile(rf"^(cri-containerd|crio|docker|libpod|nerdctl)-({_HEX64})(?:\.scope)?$")
_CONMON = re.compile(rf"^crio-conmon-({_HEX64})(?:\.scope)?$")
_BARE = re.compile(rf"^({_HEX64})$")
_GARDEN_ID = re.compile(r"^[0-9a-f]{8}(?:-[0-9a-f]{4}){2,4}(?:-[0-9a-f]{4,12})?$")
_ECS_TASK = re.compile(rf"^{_HASH32}$")
_ECS_CONTAINER = re.compile(rf"^{_HASH32}-\d+$")
_PREFIX_RUNTIME = {"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker",
                   "libpod": "podman", "cri-o": "cri-o", "containerd": "containerd",
                   "nerdctl": "containerd"}
_SERVICE_RUNTIME = {"containerd.service": "containerd", "crio.service": "cri-o",
                    "docker.service": "docker", "cri-docker.service": "docker"}
# v1 controllers in the order their path is trusted when lines disagree
_CONTROLLER_RANK = ("memory", "cpu", "cpuacct", "pids", "name=systemd", "devices")


@dataclass(frozen=True)
class CgroupInfo:
    """What ``/proc/<pid>/cgroup`` says about a process (fields None when the path does not
    say). ``cgroup_version`` is 1 or 2; ``hybrid`` marks v1 controllers plus a v2 unified
    line. ``qos_class`` is the Kubernetes QoS class, ``cgroup_driver`` the kubelet's/runtime's
    cgroup driver (``systemd`` | ``cgroupfs``), ``path`` the line attribution was read from."""

    cgroup_version: int
    hybrid: bool = False
    runtime: Optional[str] = None
    container_id: Optional[str] = None
    pod_uid: Optional[str] = None
    qos_class: Optional[str] = None
    cgroup_driver: Optional[str] = None
    path: str = "/"
    note: str = ""

    @property
    def in_container(self) -> bool:
        return self.container_id is not None

    def to_dict(self) -> dict[str, Any]:
        return {"runtime": self.runtime, "container_id": self.container_id, "pod_uid": self.pod_uid,
                "qos_class": self.qos_class, "cgroup_version": self.cgroup_version,
                "hybrid": self.hybrid, "cgroup_driver": self.cgroup_driver, "path": self.path,
                "note": self.note}


@dataclass
class _Found:
    runtime: Optional[str] = None
    container_id: Optional[str] = None
    pod_uid: Optional[str] = None
    qos: Optional[str] = None
    driver: Optional[str] = None
    service_runtime: Optional[str] = None
    ecs: bool = False  # the path starts with /ecs/

    @property
    def score(self) -> int:
        return (2 if self.pod_uid else 0) + (2 if self.container_id else 0) + (1 if self.runtime else 0)


def _container(comp: str, prev: str, found: _Found) -> bool:
    """Recognize a container component; fills ``found`` and returns True."""
    m = _PREFIXED.match(comp)
    if m:
        found.runtime = _PREFIX_RUNTIME[m.group(1)]
        found.container_id = m.group(2)
        found.driver = found.driver or ("systemd" if comp.endswith(".scope") else "cgroupfs")
        return True
    m = _BARE.match(comp)
    if m:
        found.container_id = m.group(1)
        if prev == "docker":  # standalone docker, cgroupfs driver: /docker/<id>
            found.runtime = "docker"
            found.driver = found.driver or "cgroupfs"
        elif _ECS_TASK.match(prev) and found.ecs:  # ECS on EC2: /ecs/<task>/<container id>
            found.runtime = "ecs"
        return True
    if prev == "garden" and _GARDEN_ID.match(comp):
        found.runtime, found.container_id = "garden", comp
        return True
    if _ECS_CONTAINER.match(comp) and _ECS_TASK.match(prev):
        found.runtime, found.container_id = "ecs", comp
        return True
    return False


def _scan_path(path: str) -> _Found:
    """Attribution facts in one cgroup path (components scanned left to right)."""
    found = _Found()
    comps = [c for c in path.split("/") if c and c not in (".", "..")]
    found.ecs = bool(comps) and comps[0] == "ecs"
    prev = ""
    for comp in comps:
        if comp in _SERVICE_RUNTIME:
            found.service_runtime = _SERVICE_RUNTIME[comp]
        head, colon, rest = comp.partition(":")
        m = _POD_SYSTEMD.search(head)
        if m and found.pod_uid is None:
            found.pod_uid = m.group(2).replace("_", "-")
            found.qos = m.group(1) or "guaranteed"
            found.driver = "systemd"
        else:
            m = _POD_CGROUPFS.match(head)
            if m and found.pod_uid is None:
                found.pod_uid = m.group(1)
                found.qos = prev if prev in ("burstable", "besteffort") else "guaranteed"
                found.driver = "cgroupfs"
        if colon:
            # "<slice>:<runtime prefix>:<id>": a systemd-style cgroupsPath kept literally
            prefix, _, cid = rest.partition(":")
            if found.container_id is None and prefix in _PREFIX_RUNTIME and re.fullmatch(_HEX64, cid):
                found.runtime = _PREFIX_RUNTIME[prefix]
                found.container_id = cid
                found.driver = found.driver or "systemd"
        elif found.container_id is None and not _CONMON.match(comp):
            # below a pod, only the first container-like component counts (sub-cgroups a
            # container made for itself follow it); outside pods, the same rule
            _container(comp, prev, found)
        prev = comp
    return found


def parse_cgroup(text: str) -> CgroupInfo:
    """Parse ``/proc/<pid>/cgroup`` (``hierarchy-ID:controller-list:cgroup-path`` per line).

    Raises ParseError on anything that is not that format. The path may itself contain
    colons (``...slice:cri-containerd:<id>``), so each line is split on its first two only.
    """
    if not isinstance(text, str):
        raise ParseError(TOOL, f"expected text, got {type(text).__name__}")
    entries: list[tuple[int, str, str]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        m = _LINE.match(line)
        if m is None:
            raise ParseError(TOOL, f"expected 'hierarchy-ID:controllers:path', got {line[:80]!r}", n)
        path = m.group(3)
        if not path.startswith("/"):
            raise ParseError(TOOL, f"cgroup path must start with '/', got {path[:80]!r}", n)
        entries.append((int(m.group(1)), m.group(2), path))
    if not entries:
        raise ParseError(TOOL, "no cgroup lines: /proc/<pid>/cgroup has at least one "
                               "'hierarchy-ID:controllers:path' line")
    unified = [e for e in entries if e[0] == 0 and e[1] == ""]
    legacy = [e for e in entries if not (e[0] == 0 and e[1] == "")]
    version = 1 if legacy else 2
    hybrid = bool(legacy and unified)

    def rank(e: tuple[int, str, str]) -> int:
        ctrls = e[1].split(",")
        for r, name in enumerate(_CONTROLLER_RANK):
            if name in ctrls:
                return r
        return len(_CONTROLLER_RANK) + (1 if e[0] == 0 else 0)  # unified last in hybrid mode

    best: Optional[tuple[_Found, str]] = None
    service_runtime = None
    for e in sorted(legacy, key=rank) + unified:
        f = _scan_path(e[2])
        service_runtime = service_runtime or f.service_runtime
        if best is None or f.score > best[0].score:
            best = (f, e[2])
    assert best is not None
    found, path = best
    runtime = found.runtime
    if runtime is None and found.container_id is not None and service_runtime is not None:
        runtime = service_runtime  # cgroupfs path is bare hex; the runtime's service tells
    note = ""
    if found.container_id is None and found.pod_uid is None:
        if all(p == "/" for _, _, p in entries):
            note = ("root cgroup of the reader's cgroup namespace: the process is in the reader's "
                    "own cgroup, or a cgroup namespace hides its path")
        else:
            note = "not in a container"
    elif found.container_id is None:
        note = "pod cgroup without a container below it"
    return CgroupInfo(cgroup_version=version, hybrid=hybrid, runtime=runtime,
                      container_id=found.container_id, pod_uid=found.pod_uid,
                      qos_class=found.qos, cgroup_driver=found.driver if found.pod_uid or found.container_id else None,
                      path=path, note=note)


def parse_stat_start_time(text: str) -> int:
    """Field 22 of ``/proc/<pid>/stat`` (starttime, clock ticks after boot).

    The command name (field 2) is in parentheses and may hold spaces and parentheses, so
    fields are counted after the last ``)``."""
    if not isinstance(text, str):
        raise ParseError("/proc/<pid>/stat", f"expected text, got {type(text).__name__}")
    close = text.rfind(")")
    if close < 0 or "(" not in text[:close]:
        raise ParseError("/proc/<pid>/stat", "no '(comm)' field")
    rest = text[close + 1:].split()
    # rest[0] is field 3 (state); starttime is field 22
    if len(rest) < 20:
        raise ParseError("/proc/<pid>/stat", f"expected at least 22 fields, got {len(rest) + 2}")
    value = rest[19]
    if not (value.isascii() and value.isdigit() and len(value) <= 20):
        raise ParseError("/proc/<pid>/stat", f"starttime (field 22) is not a number: {value[:40]!r}")
    return int(value)


# --------------------------------------------------------------------------- the pid cache


@dataclass(frozen=True)
class Lookup:
    """Result of one pid: ``info`` or ``why`` it is missing (``gone`` = no /proc entry)."""

    info: Optional[CgroupInfo] = None
    why: str = ""


_GONE = Lookup(why="gone")


class CgroupCache:
    """``(pid, start time) -> CgroupInfo`` read from ``<proc_root>/<pid>/{stat,cgroup}``.

    Each lookup reads ``stat`` (one small read) to learn the start time; ``cgroup`` is read
    only when the pid is new or its start time changed (pid reused). Entries of pids not
    looked up for ``forget_after`` sweeps are dropped; the size is bounded by ``max_entries``.
    """

    def __init__(self, proc_root: str = "/proc", *, forget_after: int = 3, max_entries: int = 65536):
        self.proc_root = proc_root
        self._prefix = os.path.join(proc_root, "")
        self._forget_after = forget_after
        self._max = max_entries
        self._entries: dict[int, tuple[int, Lookup]] = {}  # pid -> (start time, lookup)
        self._last_used: dict[int, int] = {}
        self._sweep = 0
        self.reads = 0  # cgroup files read (for tests and the benchmark)
        self.misses_gone = 0  # lookups of the current sweep that found no /proc entry

    def __len__(self) -> int:
        return len(self._entries)

    def _read(self, pid: int, name: str, limit: int = 65536) -> Optional[str]:
        # raw os.read: half the cost of a text-mode open() per file, and /proc files are tiny
        try:
            fd = os.open(f"{self._prefix}{pid}/{name}", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        chunks: list[bytes] = []
        try:
            size = 0
            while size < limit:
                chunk = os.read(fd, 8192)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError:
            return None
        finally:
            os.close(fd)
        return b"".join(chunks).decode("utf-8", "replace")

    def lookup(self, pid: int) -> Lookup:
        self._last_used[pid] = self._sweep
        stat = self._read(pid, "stat")
        if stat is None:
            self._entries.pop(pid, None)
            self.misses_gone += 1
            return _GONE
        try:
            start = parse_stat_start_time(stat)
        except ParseError as e:
            return Lookup(why=str(e))
        cached = self._entries.get(pid)
        if cached is not None and cached[0] == start:
            return cached[1]
        text = self._read(pid, "cgroup")
        self.reads += 1
        if text is None:
            self.misses_gone += 1
            return _GONE  # exited between the two reads: not cached
        try:
            result = Lookup(info=parse_cgroup(text))
        except ParseError as e:
            result = Lookup(why=str(e))
        if len(self._entries) >= self._max:
            self._evict(force=True)
        self._entries[pid] = (start, result)
        return result

    def sweep(self) -> None:
        """End of a cycle: forget pids not looked up for ``forget_after`` cycles."""
        self._sweep += 1
        self.misses_gone = 0
        self._evict(force=False)

    def _evict(self, force: bool) -> None:
        limit = self._sweep - self._forget_after
        old = [pid for pid, seen in self._last_used.items() if seen < limit or (force and seen < self._sweep)]
        for pid in old:
            self._entries.pop(pid, None)
            self._last_used.pop(pid, None)


# --------------------------------------------------------------------------- names and allocations


class PodDirectory(Protocol):
    """Where pod names come from; lookups are in-memory and never block."""

    def by_uid(self, uid: str) -> Optional[PodInfo]: ...

    def by_container(self, container_id: str) -> Optional[PodInfo]: ...

    def status(self) -> SourceStatus: ...


class AllocationSource(Protocol):
    """Device allocations per device uuid, mapped against the devices of this cycle."""

    def allocations(self, devices: Sequence[DeviceIdentity]) -> Mapping[str, Sequence[Allocation]]: ...

    def status(self) -> SourceStatus: ...


class StaticPods:
    """A fixed set of pods (a simulation scenario's, or tests'): never stale."""

    def __init__(self, pods: Sequence[PodInfo], name: str = "scenario-pods",
                 clock: Callable[[], float] = time.time):
        self._by_uid = {p.uid: p for p in pods}
        self._by_container = {cid: p for p in pods for cid in p.containers}
        self._name = name
        self._clock = clock

    def by_uid(self, uid: str) -> Optional[PodInfo]:
        return self._by_uid.get(uid)

    def by_container(self, container_id: str) -> Optional[PodInfo]:
        return self._by_container.get(container_id)

    def status(self) -> SourceStatus:
        return SourceStatus(self._name, ok=True, last_success=self._clock(), items=len(self._by_uid))


# --------------------------------------------------------------------------- the enricher


class Attributor:
    """Sampler enricher: ``snapshot -> snapshot`` with processes attributed and allocations set.

    Never raises for a bad /proc entry (the process stays unattributed) and never blocks on
    the pod directory or allocation source (both answer from memory)."""

    __name__ = "attribution"

    def __init__(self, proc_root: str = "/proc", pods: Optional[PodDirectory] = None,
                 allocations: Optional[AllocationSource] = None,
                 clock: Callable[[], float] = time.time):
        self.cache = CgroupCache(proc_root)
        self.pods = pods
        self.allocation_source = allocations
        self._clock = clock
        self._lock = threading.Lock()  # one cycle at a time owns the cache
        self._hinted = False

    def __call__(self, snap: NodeSnapshot) -> NodeSnapshot:
        with self._lock:
            return self._enrich(snap)

    def _enrich(self, snap: NodeSnapshot) -> NodeSnapshot:
        allocs: Mapping[str, Sequence[Allocation]] = {}
        if self.allocation_source is not None:
            allocs = self.allocation_source.allocations([d.identity for d in snap.devices])
        devices = []
        looked_up = gone = 0
        for d in snap.devices:
            dev_allocs = tuple(allocs.get(d.identity.uuid, ()))
            procs = []
            for p in d.processes:
                looked_up += 1
                q, was_gone = self._attribute(p, dev_allocs)
                gone += was_gone
                procs.append(q)
            if procs or dev_allocs:
                d = dataclasses.replace(d, processes=tuple(procs), allocations=dev_allocs or d.allocations)
            devices.append(d)
        sources = [self._procfs_status(looked_up, gone)]
        if self.pods is not None:
            sources.append(self.pods.status())
        if self.allocation_source is not None:
            sources.append(self.allocation_source.status())
        self.cache.sweep()
        return dataclasses.replace(snap, devices=tuple(devices),
                                   attribution_sources=snap.attribution_sources + tuple(sources))

    def _attribute(self, p: ProcessSample, dev_allocs: Sequence[Allocation]) -> tuple[ProcessSample, bool]:
        if p.attribution != "none" and (p.pod or p.container_id):
            return p, False  # a collector that already knows (a vendor tool reporting containers)
        found = self.cache.lookup(p.pid)
        info = found.info
        if info is not None:
            if info.container_id is None and info.pod_uid is None:
                return p, False  # a host process: reported with empty pod labels
            pod = None
            if self.pods is not None:
                pod = (self.pods.by_uid(info.pod_uid) if info.pod_uid else None) or \
                      (self.pods.by_container(info.container_id) if info.container_id else None)
            container = pod.containers.get(info.container_id) if pod is not None and info.container_id else None
            return dataclasses.replace(
                p, container_id=info.container_id, pod_uid=info.pod_uid or (pod.uid if pod else None),
                namespace=pod.namespace if pod else None, pod=pod.name if pod else None,
                container=container, attribution="cgroup"), False
        if found is _GONE:
            # no /proc entry (pid namespace without hostPID, or the process just ended):
            # the kubelet's allocation names the container when it is unambiguous
            owners = {(a.namespace, a.pod, a.container) for a in dev_allocs}
            if len(owners) == 1:
                ns, pod_name, cname = next(iter(owners))
                return dataclasses.replace(p, namespace=ns, pod=pod_name, container=cname,
                                           attribution="podresources"), True
            return p, True
        return p, False

    def _procfs_status(self, looked_up: int, gone: int) -> SourceStatus:
        ok = os.path.isdir(self.cache.proc_root)
        error = None
        if not ok:
            error = f"{self.cache.proc_root} is not readable"
        elif looked_up and gone == looked_up:
            error = (f"none of {looked_up} device processes has an entry under {self.cache.proc_root}: "
                     "the agent needs the host PID namespace (hostPID: true)")
            if not self._hinted:
                log.warning("process attribution: no /proc entry for any device process",
                            extra={"proc_root": self.cache.proc_root, "processes": looked_up})
                self._hinted = True
        return SourceStatus("procfs", ok=ok and error is None, last_success=self._clock() if ok else None,
                            error=error, items=len(self.cache))
