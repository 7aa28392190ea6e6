"""The layout ``nvidia-smi dmon`` and ``pmon`` share: a header of column names (``# gpu  pwr
gtemp ...``), a units line under it (``# Idx  W  C ...``), then one whitespace-separated row
per GPU (dmon) or process (pmon) per sample. ``-s``/``-o`` choose which columns appear and in
what order, so columns are found by their header names, never by position. The header pair is
printed again every so many rows: a repeat is skipped, a different one is a ParseError (two
captures in one file). ``-`` is a value the GPU does not report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hetero_exporter.sdk import tables
from hetero_exporter.sdk.contract import ParseError

_HEADER = re.compile(r"^#[ \t]*(?:Date[ \t]+)?(?:Time[ \t]+)?gpu(?:[ \t]|$)", re.I)
_UNITS = re.compile(r"^#[ \t]*(?:YYYYMMDD[ \t]+)?(?:HH:MM:SS[ \t]+)?Idx(?:[ \t]|$)", re.I)


@dataclass(frozen=True)
class Row:
    lineno: int
    cells: dict[str, str]  # column name (lower case) -> the text printed


@dataclass(frozen=True)
class Monitor:
    names: tuple[str, ...]
    units: dict[str, str]  # column name -> unit word of the units line ("W", "MB/s"; "" when none)
    rows: tuple[Row, ...]


def looks_like(text: str) -> bool:
    """A ``# gpu ...`` header line followed by its ``# Idx ...`` units line."""
    lines = [ln.strip() for ln in text[:8192].splitlines() if ln.strip()][:2]
    return len(lines) == 2 and _HEADER.match(lines[0]) is not None and _UNITS.match(lines[1]) is not None


def read(text: str, tool: str, last: str = "") -> Monitor:
    """The columns and rows of a dmon/pmon output. ``last``: a column whose text may hold
    spaces (pmon's ``command``) when it is the last one: extra words join it, and a row may
    leave it out."""
    lines = tables.lines_of(text, tool)
    body = [(n, ln.strip()) for n, ln in enumerate(lines, 1) if ln.strip()]
    if len(body) < 2 or not _HEADER.match(body[0][1]) or not _UNITS.match(body[1][1]):
        raise ParseError(tool, "no '# gpu ...' header with its '# Idx ...' units line")
    for n, s in body:
        if len(s) > tables.MAX_LINE:
            raise ParseError(tool, f"a line of {len(s)} characters", n)
    header, unit_line = body[0][1], body[1][1]
    names = tuple(w.lower() for w in header[1:].split())
    units_words = unit_line[1:].split()
    if len(set(names)) != len(names):
        raise ParseError(tool, "the header names a column twice", body[0][0])
    # pmon's "command" has the unit "name"; a units line a word short leaves the last unit empty
    units = dict(zip(names, units_words + [""] * (len(names) - len(units_words))))
    rows: list[Row] = []
    joins = bool(last) and names[-1] == last
    for n, s in body[2:]:
        if s.startswith("#"):
            if s in (header, unit_line):
                continue
            raise ParseError(tool, f"another header: {s[:60]!r} (one capture per file)", n)
        words = s.split()
        if joins and len(words) >= len(names) - 1:
            words = words[:len(names) - 1] + [" ".join(words[len(names) - 1:])]
        if len(words) != len(names):
            raise ParseError(tool, f"a row of {len(words)} values under {len(names)} columns", n)
        rows.append(Row(n, dict(zip(names, words))))
    return Monitor(names, units, tuple(rows))
