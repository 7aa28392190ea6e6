"""Pure parsing of ``acme-smi`` (the test vendor's tool); only ParseError escapes.

``acme-smi`` prints one box table in the nvidia-smi style: a title line with the tool,
driver and runtime versions, a header row naming the columns, a ``=`` rule, one row per
device, a closing border::

    +-------------------------------------------------------------------------+
    | ACME-SMI 1.4.2   Driver Version: 3.1.0   Runtime Version: 2.6           |
    +-----+---------+--------------+--------------------+------+------+-------+
    | Idx | Name    |       Bus-Id |       Memory-Usage | Util | Temp | Power |
    |=====+=========+==============+====================+======+======+=======|
    |   0 | Acme X1 | 0000:3B:00.0 | 6160MiB / 16384MiB |  23% |  45C |  135W |
    +-----+---------+--------------+--------------------+------+------+-------+

Columns are found by their header names, never by position or width; a value the device
does not report is ``N/A`` (absent, never 0).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

from hetero_exporter.sdk import pciaddr, tables, values
from hetero_exporter.sdk.contract import ParseError

TOOL = "acme-smi"
MIB = 1 << 20
COLUMNS = ("Idx", "Name", "Bus-Id", "Memory-Usage", "Util", "Temp", "Power")


@dataclass(frozen=True)
class AcmeDevice:
    """One row: memory in bytes (printed in MiB), utilization as a ratio (printed in %),
    temperature in C, power in W; None where the tool prints N/A."""

    index: int
    name: str
    bus_id: Optional[str]
    memory_used_bytes: Optional[float]
    memory_total_bytes: Optional[float]
    utilization_ratio: Optional[float]
    temperature_celsius: Optional[float]
    power_watts: Optional[float]


@dataclass(frozen=True)
class AcmeTable:
    version: Optional[str]
    driver_version: Optional[str]
    runtime_version: Optional[str]
    devices: tuple[AcmeDevice, ...]


def _title(lines: list[str], key: str) -> Optional[str]:
    for line in lines:
        m = re.search(rf"{key}\s*:?\s*([0-9A-Za-z][\w.+-]*)", line)
        if m:
            return m.group(1)
    return None


def _value(text: str, unit: str, line: int, column: str) -> Optional[float]:
    try:
        v = values.quantity(text, unit)
    except ValueError as e:
        raise ParseError(TOOL, f"column {column}: {e}", line) from None
    if v is not None and not math.isfinite(v):  # 1e308 MiB overflows once in bytes
        raise ParseError(TOOL, f"column {column}: {text[:20]!r} is out of range", line)
    return v


def _row(cells: list[str], col: dict[str, int], line: int) -> AcmeDevice:
    def cell(name: str) -> str:
        return cells[col[name]]

    try:
        index = int(cell("Idx"))
    except ValueError:
        raise ParseError(TOOL, f"column Idx: expected a device index, got {cell('Idx')[:20]!r}", line) from None
    bus = None
    if not values.is_na(cell("Bus-Id")):
        bus = pciaddr.normalize(cell("Bus-Id"))
        if bus is None:
            raise ParseError(TOOL, f"column Bus-Id: not a PCI address: {cell('Bus-Id')[:20]!r}", line)
    used = total = None
    if not values.is_na(cell("Memory-Usage")):
        parts = cell("Memory-Usage").split("/")
        if len(parts) != 2:
            raise ParseError(TOOL, "column Memory-Usage: expected 'USED / TOTAL'", line)
        used = _value(parts[0], "MiB", line, "Memory-Usage")
        total = _value(parts[1], "MiB", line, "Memory-Usage")
    return AcmeDevice(index=index, name=cell("Name"), bus_id=bus, memory_used_bytes=used,
                      memory_total_bytes=total, utilization_ratio=_value(cell("Util"), "%", line, "Util"),
                      temperature_celsius=_value(cell("Temp"), "C", line, "Temp"),
                      power_watts=_value(cell("Power"), "W", line, "Power"))


def parse_table(text: str) -> AcmeTable:
    """The devices of one ``acme-smi`` output (ParseError naming the line otherwise).

    The box is read with the SDK's box-table reader: records are the rows between borders
    (title, header, devices); the header record is the one naming Idx and Bus-Id."""
    lines = tables.box_lines(text, TOOL, strict=True)
    recs = tables.records(lines)
    at = next((i for i, r in enumerate(recs) if {"Idx", "Bus-Id"} <= {c.strip() for c in r[0].cells}), None)
    if at is None:
        raise ParseError(TOOL, "no device table (a header row naming Idx and Bus-Id)")
    header = recs[at][0]
    names = [c.strip() for c in header.cells]
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise ParseError(TOOL, f"header without column(s) {', '.join(missing)}", header.lineno)
    col = {name: names.index(name) for name in COLUMNS}
    devices: list[AcmeDevice] = []
    for row in (recs[at + 1] if at + 1 < len(recs) else []):
        cells = [c.strip() for c in row.cells]
        if len(cells) != len(names):
            raise ParseError(TOOL, f"a row with {len(cells)} cells under a header of {len(names)}", row.lineno)
        d = _row(cells, col, row.lineno)
        if any(o.index == d.index for o in devices):
            raise ParseError(TOOL, f"device {d.index} listed twice", row.lineno)
        devices.append(d)
    head = [ln.text for ln in lines if ln.lineno < header.lineno]
    return AcmeTable(version=_title(head, "ACME-SMI"), driver_version=_title(head, "Driver Version"),
                     runtime_version=_title(head, "Runtime Version"), devices=tuple(devices))
