"""``nvidia-smi pmon``: per-process monitor rows (monitor.py reads the columns by name) -> one
device per GPU index with the processes of its last sample.

Per process: ``pid``; ``sm`` (%) -> ``utilization_ratio`` (resolution 0.01, sampled over
NVML's process-utilization sample period, the 1 s upper bound the other readers use); ``fb``
(MB, MiB as -q prints them; ``-s m``) -> ``memory_bytes``; ``command`` -> name. Not read, no
model field: ``type`` (C/G/C+G), ``mem`` (memory-controller % per process), ``enc``/``dec``/
``jpg``/``ofa``, ``ccpm``.

pmon prints one row per process per GPU and sample, or one row with ``-`` for pid on a GPU
running none (that GPU gets no process). With several samples (``-c N``) each GPU's last sample
is kept: a new sample starts when the time column (``-o T``) changes, or, without one, when a
pid (or the ``-`` row) seen in the current sample of that GPU comes again. ``-`` values are
absent. GPUs are named by index only (uuid ``nvidia-unidentified-<index>``, layout_common);
their processes are reported (an empty list means none ran). Health is not shown: ``unknown``.
"""

from __future__ import annotations

import re
from typing import Optional

from hetero_exporter.collectors.nvidia.nvidia_smi import dmon, monitor
from hetero_exporter.collectors.nvidia.nvidia_smi.layout_common import VENDOR, placeholder_uuid, snapshot
from hetero_exporter.model import DeviceIdentity, DeviceSample, Health, NodeSnapshot, ProcessSample, Quality
from hetero_exporter.sdk import tables
from hetero_exporter.sdk.contract import ParseError

TOOL = "nvidia-smi pmon"
UTIL_QUALITY = Quality(f"{TOOL}: sm", "sampled", 1.0, 0.01)
MEMORY_QUALITY = Quality(f"{TOOL}: fb", "measured", None, float(1 << 20))


def looks_like(text: str) -> bool:
    return monitor.looks_like(text) and dmon.pmon_columns(text)


def _value(text: Optional[str], unit: str, want: str, factor: float) -> Optional[float]:
    """A cell in base units; None for ``-``, another unit or text that is no number."""
    if text is None:
        return None
    r = dmon.value(text, unit, want, factor, UTIL_QUALITY)
    return r.value


def parse(text: str) -> NodeSnapshot:
    """One device per GPU index with the processes of its last sample."""
    mon = monitor.read(text, TOOL, last="command")
    if "gpu" not in mon.names or "pid" not in mon.names:
        raise ParseError(TOOL, "no gpu or pid column")
    stamp = [c for c in ("date", "time") if c in mon.names]
    current: dict[int, dict[str, monitor.Row]] = {}  # GPU -> pid (or "-") -> its row in the current sample
    when: dict[int, tuple[str, ...]] = {}
    for row in mon.rows:
        gpu = dmon.index_of(row.cells.get("gpu"), TOOL, row.lineno)
        pid = row.cells["pid"]
        if pid != "-" and not re.fullmatch(r"[0-9]{1,10}", pid):
            raise ParseError(TOOL, f"pid {pid[:20]!r} is not a number", row.lineno)
        t = tuple(row.cells[c] for c in stamp)
        sample = current.setdefault(gpu, {})
        if pid in sample or (stamp and when.get(gpu) != t):
            sample.clear()  # the GPU's next sample
        when[gpu] = t
        sample[pid] = row
        tables.check_devices(len(current), TOOL, row.lineno)
    out = []
    unknown = Health("unknown")
    for gpu, sample in current.items():
        uuid = placeholder_uuid(gpu)
        procs = []
        for pid, row in sample.items():
            if pid == "-":
                continue
            util = _value(row.cells.get("sm"), mon.units.get("sm", ""), "%", 0.01)
            mem = _value(row.cells.get("fb"), mon.units.get("fb", ""), "MB", float(1 << 20))
            name = row.cells.get("command", "").strip()
            procs.append(ProcessSample(
                pid=int(pid), device_uuid=uuid, memory_bytes=None if mem is None else int(mem),
                utilization_ratio=util, utilization_quality=UTIL_QUALITY if util is not None else None,
                name=name if name and name != "-" else None))
        ident = DeviceIdentity(vendor=VENDOR, kind="gpu", index=gpu, uuid=uuid)
        out.append(DeviceSample(identity=ident, timestamp=0.0, health=unknown, processes=tuple(procs),
                                processes_reported=True))
    return snapshot(out)
