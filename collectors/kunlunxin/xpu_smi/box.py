"""Pure parsing of the xpu-smi 5.x default output (P800, R200 class drivers): an
nvidia-smi-style box; only ParseError escapes.

Layout (the captures ../shared/fixtures/xpu-smi/xpu-smi-default_*P800-OAM*): a title row
``XPU-SMI   Driver Version: 5.0.21.26   XPU-RT Version: 5.0.21``, a header record of three
rows naming the labels of each cell::

    | XPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
    | Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | XPU-Util  Compute M. |
    |                               |             L3-Usage |            SR-IOV M. |

then one record of as many rows per device (``31058MiB / 98304MiB`` memory, ``0MiB / 96MiB``
L3 SRAM), and a ``Processes:`` box (``XPU  XI|GI  CI  PID  Type  Process name  XPU Memory
Usage``; ``No running processes found`` or no row at all when none run). Cells are read by
their header labels (sdk.tables: each value goes to the nearest label), never by position or
width. Values in base units (bytes, W, C, ratio); N/A is None. ``XPU-RT Version`` is the
runtime (XRE) version; the box prints no serial.
"""

from __future__ import annotations

import re
from typing import Sequence

from hetero_exporter.sdk import tables, values
from hetero_exporter.sdk.contract import ParseError

from .output import CELLS, TOOL, XpuDevice, XpuProcess, XpuSmi, cell_text

# header labels, longest first (a found label masks its text: "XPU" inside "XPU-Util")
_LABELS = (
    ("Volatile Uncorr. ECC", "ecc"), ("Pwr:Usage/Cap", "power"), ("Memory-Usage", "memory"),
    ("Persistence-M", "persistence"), ("Compute M.", "compute"), ("SR-IOV M.", "sriov"),
    ("L3-Usage", "l3"), ("XPU-Util", "util"), ("Bus-Id", "bus"), ("Disp.A", "disp"), ("Name", "name"),
    ("Temp", "temp"), ("Perf", "perf"), ("Fan", "fan"), ("XPU", "xpu"),
)
_PROC_LABELS = (
    ("Process name", "name"), ("XPU Memory", "memory"), ("PID", "pid"), ("Type", "type"),
    ("XPU", "xpu"), ("GI", "gi"), ("XI", "gi"), ("CI", "ci"),
)
# optional words each behind their own blanks (one way to split a blank run)
_DRIVER = re.compile(r"Driver\s+Version(?:\s*:)?\s*v?(\d[\w.+-]*)", re.I)
_RUNTIME = re.compile(r"XPU-RT\s+Version(?:\s*:)?\s*(\S+)", re.I)


def _device(record: Sequence[tables.BoxLine], header: list, line: int) -> XpuDevice:
    vals = tables.record_values(record, header, TOOL)

    def get(key: str) -> tuple[str, int]:
        return vals.get(key, ("N/A", line))

    if "xpu" not in vals:
        raise ParseError(TOOL, "a device record without an XPU index", line)
    bus = CELLS.pci(cell_text(get("bus")[0]), "Bus-Id", get("bus")[1])
    mem_used, mem_total = CELLS.pair(get("memory")[0], "MiB", "Memory-Usage", get("memory")[1])
    l3_used, l3_total = CELLS.pair(get("l3")[0], "MiB", "L3-Usage", get("l3")[1])
    power, cap = CELLS.pair(get("power")[0], "W", "Pwr:Usage/Cap", get("power")[1])
    util_text, util_line = get("util")
    return XpuDevice(
        index=CELLS.index(get("xpu")[0], "XPU", get("xpu")[1]), bus_id=bus,
        model=cell_text(vals.get("name", ("",))[0]) or "", serial=None, inode=None, state=None,
        utilization_ratio=CELLS.quantity(util_text, "%", "XPU-Util", util_line),
        l3_used_bytes=l3_used, l3_total_bytes=l3_total, memory_used_bytes=mem_used, memory_total_bytes=mem_total,
        power_watts=power, power_limit_watts=cap,
        temperature_celsius=CELLS.quantity(get("temp")[0], "C", "Temp", get("temp")[1]),
        ecc_uncorrected=CELLS.quantity(get("ecc")[0], "", "Volatile Uncorr. ECC", get("ecc")[1]),
        line=line)


def _process(row: tables.ProcessRow) -> XpuProcess:
    return XpuProcess(index=CELLS.index(row.words["xpu"], "process XPU", row.lineno),
                      pid=CELLS.index(row.words["pid"], "process PID", row.lineno), streams=None, l3_bytes=None,
                      memory_bytes=CELLS.quantity(row.words.get("memory", "N/A"), "MiB", "process memory", row.lineno),
                      command=row.name)


def parse_box(text: str) -> XpuSmi:
    """The devices and processes of one xpu-smi 5.x default box (sdk.tables reads it)."""
    table = tables.device_table(text, TOOL, _LABELS, device="XPU")
    driver, runtime = _DRIVER.search(table.title), _RUNTIME.search(table.title)
    devices = tables.read_devices(table, lambda part: _device(part, table.header, part[0].lineno),
                                  lambda d: d.index, TOOL, "XPU")
    known = {d.index for d in devices}
    lines = table.lines
    if lines and lines[-1].kind != "border":  # a cut output must not drop devices silently
        raise ParseError(TOOL, "the output ends inside a box (no closing border)", lines[-1].lineno)
    # xpu-smi draws no rule under the process header: its rows may share the header's record
    procs = [_process(row) for row in tables.process_rows(table.rest, TOOL, _PROC_LABELS, device="xpu",
                                                           same_record=True)]
    for p in procs:
        if p.index not in known:
            raise ParseError(TOOL, f"a process on XPU {p.index}, which the device box does not list")
    rt = runtime.group(1) if runtime else None
    section = bool(table.rest)
    return XpuSmi(runtime_version=None if rt is None or values.is_na(rt) else rt,
                  driver_version=driver.group(1) if driver else None, devices=tuple(devices),
                  processes=tuple(procs), process_section=section,
                  sections=("DEVICES",) + (("PROCESSES",) if section else ()))
