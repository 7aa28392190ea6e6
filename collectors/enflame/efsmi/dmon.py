"""Pure parsing of efsmi's columnar monitor output (``efsmi dmon``); only ParseError escapes.

Layout (../shared/fixtures/efsmi/efsmi-dmon_*): the efsmi banner (``----`` lines), then two
header rows starting with ``*``, the field names and their units, and one row per device
and sampling interval, values separated by blanks::

    *Dev Pwr    DTemp  Sip    DUsed  Dpm     MUsed  Mem    Mclk   TxPci   RxPci
    *Idx W      C      %      %      L       %      MiB    MHz    MiB/s   MiB/s
    0    101    36     0.0    0.0    Sleep   84.1   42976  7000   0       0

Columns are found by name (``Dev``, ``Pwr``, ``DTemp``, ``DUsed``, ``Dpm``, ``Mem``), never by
position, in the units the second header row names (W, C, %, MiB); unknown columns are skipped. The output
prints no bus id, serial or version. A device sampled more than once keeps its last row.
``Mem`` is the memory size (MiB), ``DUsed`` the device busy share, ``Pwr`` the power draw.
"""

from __future__ import annotations

import re
from typing import Optional

from hetero_exporter.sdk import tables, values
from hetero_exporter.sdk.contract import ParseError

from .parse import TOOL, EfsmiTable, GcuDevice, _num

# column name (lower case) -> (GcuDevice field, default unit)
_COLUMNS = {"pwr": ("power_w", "W"), "dtemp": ("temp_c", "C"), "dused": ("util_pct", "%"),
            "mem": ("memory_total_mib", "MiB"), "dpm": ("dpm", ""), "lpm": ("dpm", "")}


def parse_dmon(text: str) -> EfsmiTable:
    """The devices of one ``efsmi dmon`` output (the last row of each)."""
    lines = tables.lines_of(text, TOOL)
    names: Optional[list[str]] = None
    units_seen = False
    rows: dict[int, GcuDevice] = {}
    for i, raw in enumerate(lines, 1):
        s = raw.strip()
        if not s or (names is None and s[0] == "-" and s[-1] == "-"):  # the banner's ruled lines
            continue
        if s.startswith("*"):
            words = s[1:].split()
            if names is None:
                names = [w.lower() for w in words]
                if not names or names[0] != "dev":
                    raise ParseError(TOOL, "the dmon header must start '*Dev'", i)
            elif not units_seen:  # the units row: each column's unit is the one named in _COLUMNS
                units_seen = True
            else:
                raise ParseError(TOOL, "a third '*' header row", i)
            continue
        if names is None:
            raise ParseError(TOOL, f"not an efsmi dmon line: {s[:60]!r}", i)
        cells = s.split()
        if len(cells) != len(names):
            raise ParseError(TOOL, f"a row of {len(cells)} values under {len(names)} columns", i)
        if not re.fullmatch(r"\d{1,6}", cells[0]):
            raise ParseError(TOOL, f"Dev: expected a device index, got {cells[0][:20]!r}", i)
        got: dict[str, Optional[float]] = {}
        dpm: Optional[str] = None
        read: set[str] = set()  # the first column of a field wins
        for name, cell in zip(names, cells):
            field, default = _COLUMNS.get(name, ("", ""))
            if not field or field in read:
                continue
            read.add(field)
            if field == "dpm":
                dpm = None if values.is_na(cell) else cell
            else:
                got[field] = _num(cell, default, name, i)
        idx = int(cells[0])
        rows[idx] = GcuDevice(index=idx, name="", bus_id=None, firmware=None, ecc=None,
                              temp_c=got.get("temp_c"), dpm=dpm, power_w=got.get("power_w"),
                              power_cap_w=None, memory_total_mib=got.get("memory_total_mib"), memory_used_mib=None,
                              virt=None, util_pct=got.get("util_pct"), serial=None, line=i)
        tables.check_devices(len(rows), TOOL, i)
    if names is None:
        raise ParseError(TOOL, "no dmon header ('*Dev ...')")
    return EfsmiTable(version=None, driver_version=None, devices=tuple(rows[k] for k in sorted(rows)))
