"""``nvidia-smi dmon``: per-GPU monitor rows (monitor.py reads the columns by name) -> one
device per GPU index with its readings.

Columns read (``-s`` selects them; any subset, any order), from the values NVML gives:

==========  =====  ==============================  =====================================
column      unit   field                           resolution / method
==========  =====  ==============================  =====================================
``sm``      %      utilization_ratio               0.01, sampled (NVML sample period, <= 1 s)
``mem``     %      memory_utilization_ratio        0.01, sampled (memory-controller busy)
``pwr``     W      power_watts                     1 W, sampled (1 s on Ampere and later)
``gtemp``   C      temperature_core_celsius        1 C
``mtemp``   C      temperature_memory_celsius      1 C
``pclk``    MHz    clock_compute_hertz             1 MHz (the processor/graphics clock)
``mclk``    MHz    clock_memory_hertz              1 MHz
``fb``      MB     memory_used_bytes               1 MiB (dmon's "MB" are MiB, as -q prints)
==========  =====  ==============================  =====================================

Not read, no model field: ``enc``/``dec``/``jpg``/``ofa`` (%), ``rxpci``/``txpci`` (MB/s, a
rate, not the byte counters the model has), ``pviol``/``tviol``, ``bar1``, ``ccpm``,
``sbecc``/``dbecc`` (errors in the interval, not the cumulative counters).

With several samples (``-c N``, or a capture of several rounds) the last row of each GPU wins:
the newest value. ``-`` (MIG mode prints it for sm/mem) is ``unsupported``; a value that is no
number, or whose units line names another unit, is ``error``. GPUs are named by index only
(uuid ``nvidia-unidentified-<index>``, layout_common). Health is not shown: ``unknown``.
"""

from __future__ import annotations

import re
from typing import Optional

from hetero_exporter.model import fields as F
from hetero_exporter.collectors.nvidia.nvidia_smi import monitor
from hetero_exporter.collectors.nvidia.nvidia_smi.layout_common import VENDOR, placeholder_uuid, reading, snapshot
from hetero_exporter.model import DeviceIdentity, DeviceSample, Health, NodeSnapshot, Quality, Reading
from hetero_exporter.sdk import tables
from hetero_exporter.sdk.contract import ParseError

TOOL = "nvidia-smi dmon"
MIB = float(1 << 20)
# column -> (field, unit the units line shows, factor to base units, quality)
COLUMNS: dict[str, tuple[str, str, float, Quality]] = {
    "sm": (F.UTILIZATION, "%", 0.01, Quality(f"{TOOL}: sm", "sampled", 1.0, 0.01)),
    "mem": (F.MEMORY_UTILIZATION, "%", 0.01, Quality(f"{TOOL}: mem", "sampled", 1.0, 0.01)),
    "pwr": (F.POWER, "W", 1.0, Quality(f"{TOOL}: pwr", "sampled", 1.0, 1.0)),
    "gtemp": (F.TEMP_CORE, "C", 1.0, Quality(f"{TOOL}: gtemp", "measured", None, 1.0)),
    "mtemp": (F.TEMP_MEMORY, "C", 1.0, Quality(f"{TOOL}: mtemp", "measured", None, 1.0)),
    "pclk": (F.CLOCK_COMPUTE, "MHz", 1e6, Quality(f"{TOOL}: pclk", "measured", None, 1e6)),
    "mclk": (F.CLOCK_MEMORY, "MHz", 1e6, Quality(f"{TOOL}: mclk", "measured", None, 1e6)),
    "fb": (F.MEMORY_USED, "MB", MIB, Quality(f"{TOOL}: fb", "measured", None, MIB)),
}
_NUMBER = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,6})?")


def looks_like(text: str) -> bool:
    return monitor.looks_like(text) and not pmon_columns(text)


def pmon_columns(text: str) -> bool:
    """Whether the header is pmon's (it names a ``pid`` column)."""
    first = next((ln for ln in text[:8192].splitlines() if ln.strip()), "")
    return "pid" in first.lower().lstrip("# \t").split()


def value(text: str, unit: str, want: str, factor: float, q: Quality) -> Reading:
    """One cell: ``-`` unsupported; a number in ``want`` units scaled by ``factor``; else error."""
    t = text.strip()
    if t in ("-", "--") or t.upper() == "N/A":
        return reading(None, q)
    if not _NUMBER.fullmatch(t) or (unit and unit.lower() != want.lower()):
        return reading(None, q, error=True)
    return reading(float(t) * factor, q)


def index_of(cell: Optional[str], tool: str, line: int) -> int:
    if cell is None or not re.fullmatch(r"[0-9]{1,6}", cell):
        raise ParseError(tool, f"GPU index {str(cell)[:20]!r} is not a number", line)
    return int(cell)


def parse(text: str) -> NodeSnapshot:
    """One device per GPU index, its readings from its last row."""
    mon = monitor.read(text, TOOL)
    if "gpu" not in mon.names:
        raise ParseError(TOOL, "no gpu column")
    last: dict[int, monitor.Row] = {}
    for row in mon.rows:
        last[index_of(row.cells.get("gpu"), TOOL, row.lineno)] = row
        tables.check_devices(len(last), TOOL, row.lineno)
    out = []
    unknown = Health("unknown")
    for index, row in last.items():
        readings = {field: value(row.cells[col], mon.units.get(col, ""), unit, factor, q)
                    for col, (field, unit, factor, q) in COLUMNS.items() if col in row.cells}
        ident = DeviceIdentity(vendor=VENDOR, kind="gpu", index=index, uuid=placeholder_uuid(index))
        out.append(DeviceSample(identity=ident, timestamp=0.0, readings=readings, health=unknown))
    return snapshot(out)
