"""Processes on an NVIDIA GPU through NVML: compute, graphics and MPS lists, per-process
device memory, and per-process SM utilization from NVML's process utilization samples.

Every struct version the binding offers is tried newest first (``_v3``, ``_v2``, then the
unversioned call), and the first that the driver has is kept: an older driver lacks the
newer symbols (the funnel's ``missing``: FunctionNotFound, or pynvml's NVMLLibraryMismatchError
for the unversioned wrapper). NotSupported for one list is remembered per GPU; any other
error ends the GPU's read (funnel.Failed), lost raises funnel.Lost.

Utilization comes from ``nvmlDeviceGetProcessesUtilizationInfo`` (R550+) or
``nvmlDeviceGetProcessUtilization``: NVML returns the samples newer than the timestamp we
pass, each an SM busy percentage over the driver's sampling period; we average the samples
of each pid since the previous poll, so the window stated in the quality metadata is the
span between the previous poll's newest sample and this poll's newest sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from hetero_exporter.collectors.nvidia.nvml.funnel import UNSUPPORTED, Failed, Funnel
from hetero_exporter.model import ProcessSample, Quality

_KINDS = ("Compute", "Graphics", "MPSCompute")
_UTIL_APIS = ("nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization")


@dataclass(frozen=True)
class RunningProcess:
    pid: int
    memory_bytes: Optional[int]
    gpu_instance: Optional[int]  # MIG GPU instance id, None outside MIG
    compute_instance: Optional[int]
    kinds: tuple[str, ...]


def _instance(v: Any) -> Optional[int]:
    # NVML reports 0xFFFFFFFF for "not a MIG process"
    if v is None:
        return None
    v = int(v)
    return None if v >= 0xFFFFFFFF else v


class ProcessReader:
    def __init__(self, nv: Any, funnel: Optional[Funnel] = None):
        self._nv = nv
        self._f = funnel or Funnel(nv)
        self._variant: dict[str, Optional[Callable]] = {}  # kind -> chosen function (None: none works)
        self._unsupported: dict[str, set[str]] = {}  # uuid -> kinds / "utilization" NVML does not support
        self._util_api: Optional[str] = None
        self._util_none = False  # neither utilization call exists in this driver
        self._last_seen: dict[str, int] = {}  # uuid -> newest sample timestamp (us) seen

    def _candidates(self, kind: str) -> list[Callable]:
        names = [f"nvmlDeviceGet{kind}RunningProcesses_v3", f"nvmlDeviceGet{kind}RunningProcesses_v2",
                 f"nvmlDeviceGet{kind}RunningProcesses"]
        out: list[Callable] = []
        for n in names:
            fn = getattr(self._nv, n, None)
            if fn is not None and fn not in out:
                out.append(fn)
        return out

    def _list(self, kind: str, uuid: str, h: Any) -> Optional[list]:
        """One kind's processes; None when this driver/GPU cannot list that kind."""
        if kind in self._unsupported.get(uuid, ()):
            return None
        chosen = self._variant.get(kind, ...)
        if chosen is None:
            return None
        fns = [chosen] if chosen is not ... else self._candidates(kind)
        for fn in fns:
            got = self._f.call(fn, h)
            if got.missing:
                continue
            if got.status == UNSUPPORTED:
                self._unsupported.setdefault(uuid, set()).add(kind)
                self._variant.setdefault(kind, fn)
                return None
            if not got.ok:
                raise Failed(got)
            self._variant[kind] = fn
            return list(got.value or ())
        self._variant[kind] = None
        return None

    def running(self, uuid: str, h: Any) -> Optional[list[RunningProcess]]:
        """Every process of every kind on the GPU, merged by pid; None when NVML lists
        neither compute nor graphics processes here (not reported, rather than none).
        GpuIsLost propagates."""
        merged: dict[int, RunningProcess] = {}
        listed = False
        for kind in _KINDS:
            procs = self._list(kind, uuid, h)
            if procs is None:
                continue
            listed = listed or kind != "MPSCompute"
            for p in procs:
                pid = int(p.pid)
                mem = getattr(p, "usedGpuMemory", None)
                mem = None if mem is None else int(mem)
                gi, ci = _instance(getattr(p, "gpuInstanceId", None)), _instance(getattr(p, "computeInstanceId", None))
                prev = merged.get(pid)
                if prev is None:
                    merged[pid] = RunningProcess(pid, mem, gi, ci, (kind,))
                else:  # same process in two lists (C+G): the driver reports the same memory
                    best = prev.memory_bytes if mem is None else max(mem, prev.memory_bytes or 0)
                    merged[pid] = RunningProcess(pid, best, prev.gpu_instance, prev.compute_instance,
                                                 prev.kinds + (kind,))
        return list(merged.values()) if listed else None

    def utilization(self, uuid: str, h: Any) -> tuple[dict[int, float], Optional[Quality]]:
        """pid -> SM busy ratio averaged over the samples since the previous poll, and the
        quality (source, window); ({}, None) when NVML cannot report it for this GPU."""
        if self._util_none or "utilization" in self._unsupported.get(uuid, ()):
            return {}, None
        nv, f = self._nv, self._f
        since = self._last_seen.get(uuid, 0)
        apis = [self._util_api] if self._util_api else list(_UTIL_APIS)
        samples = None
        for name in apis:
            fn = getattr(nv, name, None)
            if fn is None:
                continue
            got = f.call(fn, h, since)
            if got.missing:
                continue
            self._util_api = name
            if got.status == UNSUPPORTED:
                self._unsupported.setdefault(uuid, set()).add("utilization")
                return {}, None
            if got.code == f.NOT_FOUND:  # no sample newer than `since`: nothing ran
                return {}, self._quality(name, None)
            if not got.ok:
                raise Failed(got)
            samples = got.value
            break
        else:
            self._util_none = True
            return {}, None
        sums: dict[int, list[float]] = {}
        newest = since
        for s in samples or ():
            ts = int(s.timeStamp)
            if ts <= since:
                continue
            newest = max(newest, ts)
            sums.setdefault(int(s.pid), []).append(float(s.smUtil))
        self._last_seen[uuid] = newest
        window = (newest - since) / 1e6 if since and newest > since else None
        ratios = {pid: min(1.0, max(0.0, sum(v) / len(v) / 100.0)) for pid, v in sums.items()}
        return ratios, self._quality(self._util_api or "", window)

    @staticmethod
    def _quality(api: str, window: Optional[float]) -> Quality:
        return Quality(f"{api}.smUtil", "sampled", window_seconds=window, resolution=0.01)


def samples(uuid: str, running: list[RunningProcess], util: dict[int, float],
            quality: Optional[Quality], names: Callable[[int], Optional[str]]) -> list[ProcessSample]:
    """ProcessSamples for one device (container/pod are left to the attribution enricher)."""
    out = []
    for p in sorted(running, key=lambda r: r.pid):
        ratio = util.get(p.pid) if quality is not None else None
        out.append(ProcessSample(pid=p.pid, device_uuid=uuid, memory_bytes=p.memory_bytes,
                                 utilization_ratio=ratio, name=names(p.pid),
                                 utilization_quality=quality if ratio is not None else None))
    return out
