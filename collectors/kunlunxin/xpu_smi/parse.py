"""Pure parsing of Kunlunxin ``xpu_smi`` / ``xpu-smi`` default output; only ParseError escapes.

The default output (XRE 4.x; the capture ../shared/fixtures/xpu-smi/xpu_smi_2x-kunlunxin-r300.txt
and the layouts in Kunlunxin's XRE and PaddlePaddle docs) is a few ``Key: value`` lines
(``Runtime Version``, ``Driver Version``), then sections, each a title line (``DEVICES``,
``VIDEO``, ``PROCESSES``) and a table ruled with bare ``-----`` lines::

    Runtime Version: 4.31
    Driver Version: 4.0
      DEVICES
    -------------------------------------------------------------------------------------------
    | DevID |   PCI Addr   | Model |   SN   |    INODE   | UseRate |    L3     |    Memory    |
    -------------------------------------------------------------------------------------------
    |     0 | 0000:53:00.0 | R300  | 02Kxxx | /dev/xpu0  |     0 % | 0 / 63 MB | 0 / 32768 MB |
    -------------------------------------------------------------------------------------------

Versions differ in their columns (the documented 4.0 layout adds ``State``, ``Power(W)``,
``Temp``, ``Freq(MHz)``, ``Firmware Version``, ``CPLD Version``; some print no VIDEO section;
SR-IOV turns a card into ``R200-PF`` plus ``R200-VF-5G`` rows; a K200 lists its two chips with
one PCI address and serial). Columns are found by header label, never by position or width;
the unit comes from the cell (``63 MB``) or the label (``Power(W)``). N/A and friends are
absent. Memory is printed in MB, binary multiples in practice (32768 MB on a 32 GiB card).

No real capture shows a PROCESSES row (every one prints the empty table); the row is read
under its header (DevID, PID, Streams, L3, Memory, Command) with MB assumed where a cell has
no unit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping, Optional

from hetero_exporter.sdk import tables, values
from hetero_exporter.sdk.contract import ParseError

from .output import (CELLS, MIB, TOOL, VideoEngine, XpuDevice, XpuProcess, XpuSmi,  # noqa: F401 - API
                     cell_text)

_TITLE = re.compile(r"^[A-Z][A-Z0-9 _/-]{1,40}$")
_KEY_VALUE = re.compile(r"^([A-Za-z][A-Za-z0-9 ._-]{0,40}?)\s*:\s*(\S.*)$")


@dataclass
class _Table:
    title: str
    header: Optional[tuple[str, ...]] = None
    header_line: int = 0
    rows: list = field(default_factory=list)  # (lineno, cells)
    rules_after_header: int = 0  # 2 when whole: the rule under the header and the closing one


def _label(text: str) -> str:
    return " ".join(text.split()).lower()


def _tables(text: str) -> tuple[dict[str, str], list[_Table]]:
    """Key: value lines before the first table, and the titled tables in order."""
    lines = tables.box_lines(text, TOOL, strict=False)
    head: dict[str, str] = {}
    found: list[_Table] = []
    cur: Optional[_Table] = None
    started = False
    for ln in lines:
        if ln.kind == "text":
            s = ln.text.strip()
            kv = _KEY_VALUE.match(s)
            if _TITLE.match(s) and not kv:
                cur = _Table(s.upper())
                found.append(cur)
                started = True
            elif kv and not started:
                head.setdefault(_label(kv.group(1)), kv.group(2).strip())
            elif not started:
                continue  # a banner (timestamp) before the tables
            else:
                raise ParseError(TOOL, f"not a table line: {s[:60]!r}", ln.lineno)
        elif ln.kind == "row":
            started = True
            if cur is None:  # a table printed without its title (cut output): devices, if anything
                cur = _Table("")
                found.append(cur)
            cells = tuple(c.strip() for c in ln.cells)
            if cur.header is None:
                cur.header, cur.header_line = cells, ln.lineno
            else:
                if len(cells) != len(cur.header):
                    raise ParseError(TOOL, f"a row of {len(cells)} cells under a header of {len(cur.header)}",
                                     ln.lineno)
                if cur.rules_after_header >= 2:
                    raise ParseError(TOOL, f"a row after the end of the {cur.title or 'untitled'} table",
                                     ln.lineno)
                cur.rows.append((ln.lineno, cells))
        elif ln.kind == "border":
            started = True
            if cur is not None and cur.header is not None:
                cur.rules_after_header += 1
        else:
            raise ParseError(TOOL, "an elided ('...') output is not a whole table", ln.lineno)
    for t in found:  # a cut output (the tool killed, a short read) must not drop devices silently
        if t.header is None or t.rules_after_header < 2:
            raise ParseError(TOOL, f"the output ends inside the {t.title or 'untitled'} table (no closing rule)")
    return head, found


def _columns(t: _Table) -> dict[str, int]:
    out: dict[str, int] = {}
    for i, c in enumerate(t.header or ()):
        out.setdefault(_label(c), i)
    return out


def _device_table(t: _Table) -> bool:
    cols = _columns(t)
    return "devid" in cols and ("pci addr" in cols or "memory" in cols) and "pid" not in cols


def _unit_label(label: str) -> tuple[str, str]:
    """``power(w)`` -> (``power``, ``w``): the text before the last parenthesis group and what it
    holds; (label, "") without one. Read by index (a lazy pattern would retry the tail from
    every character: quadratic in a long header cell)."""
    r = label.rstrip()
    if not r.endswith(")"):
        return label, ""
    j = len(r) - 1
    i = r.find("(", r.rfind(")", 0, j) + 1, j)
    return (r[:i].rstrip(), r[i + 1:j]) if i >= 0 else (label, "")


def _labelled(cols: Mapping[str, int], name: str) -> tuple[Optional[int], str]:
    """Column index of label ``name`` with or without a unit suffix, and that unit."""
    for label, i in cols.items():
        base, unit = _unit_label(label)
        if base == name:
            return i, unit
    return None, ""


_EXTRA = (("power", "power", "W"), ("temp", "temp", "C"), ("freq", "freq", "MHz"))


def _extra_columns(cols: Mapping[str, int]) -> dict[str, tuple[Optional[int], str, str]]:
    """key -> (column, unit, default unit) of the readings whose label may carry a unit."""
    return {key: (*_labelled(cols, name), default) for key, name, default in _EXTRA}


def _device(cells: tuple[str, ...], cols: Mapping[str, int], line: int,
            extra_cols: Optional[Mapping[str, tuple[Optional[int], str, str]]] = None) -> XpuDevice:
    def cell(name: str) -> Optional[str]:
        i = cols.get(name)
        return None if i is None else cells[i]

    index = CELLS.index(cell("devid") or "", "DevID", line)
    bus = CELLS.pci(cell_text(cell("pci addr")), "PCI Addr", line)
    # the unit after the total applies to both; MB when none
    l3_used, l3_total = CELLS.pair(cell("l3") or "N/A", "MB", "L3", line, shared_unit=True)
    mem_used, mem_total = CELLS.pair(cell("memory") or "N/A", "MB", "Memory", line, shared_unit=True)
    util = CELLS.quantity(cell("userate") or "N/A", "%", "UseRate", line)
    extra: dict[str, Optional[float]] = {}
    for key, (i, unit, default) in (extra_cols or _extra_columns(cols)).items():
        extra[key] = None if i is None else CELLS.quantity(cells[i], unit or default, key, line)
    return XpuDevice(index=index, bus_id=bus, model=cell_text(cell("model")) or "", serial=cell_text(cell("sn")),
                     inode=cell_text(cell("inode")), state=cell_text(cell("state")), utilization_ratio=util,
                     l3_used_bytes=l3_used, l3_total_bytes=l3_total, memory_used_bytes=mem_used,
                     memory_total_bytes=mem_total, power_watts=extra["power"],
                     temperature_celsius=extra["temp"], clock_hertz=extra["freq"],
                     firmware=cell_text(cell("firmware version")), cpld=cell_text(cell("cpld version")), line=line)


def _video_cell(text: str, what: str, line: int) -> VideoEngine:
    """``0 %, 0 fps, 800 MHz``: the parts found by their units, in any order."""
    util = fps = clock = None
    if not values.is_na(text):
        for part in text.split(","):
            p = part.strip()
            if values.is_na(p):
                continue
            low = p.lower()
            if low.endswith("fps"):
                fps = CELLS.quantity(p[:-3], "", what, line)
            elif low.endswith("%"):
                util = CELLS.quantity(p, "%", what, line)
            elif low.endswith("hz"):
                clock = CELLS.quantity(p, "MHz", what, line)
            else:
                raise ParseError(TOOL, f"{what}: unexpected part {p[:20]!r}", line)
    return VideoEngine(util, fps, clock)


def _process(cells: tuple[str, ...], cols: Mapping[str, int], line: int) -> XpuProcess:
    def cell(name: str) -> str:
        i = cols.get(name)
        return "N/A" if i is None else cells[i]

    streams = cell_text(cell("streams"))
    return XpuProcess(index=CELLS.index(cell("devid"), "DevID", line), pid=CELLS.index(cell("pid"), "PID", line),
                      streams=None if streams is None else CELLS.index(streams, "Streams", line),
                      l3_bytes=CELLS.quantity(cell("l3"), "MB", "L3", line),
                      memory_bytes=CELLS.quantity(cell("memory"), "MB", "Memory", line),
                      command=cell_text(cell("command")) or "")


# blanks as [ \t]: a \s run could span lines and be retried from each of them
_BOX_TITLE = re.compile(r"^[ \t]*\|[ \t]*XPU-SMI\b", re.M)
_QUERY = re.compile(r"XPUSMI LOG|^XPU[ \t]+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:", re.M)


def detect(text: str) -> str:
    """The output kind: ``xpu-smi`` (the XRE 4.x sectioned default output with its DevID
    column), ``xpu-smi box`` (the 5.x nvidia-smi-style default box whose title row is
    ``XPU-SMI  Driver Version ...``, box.py), ``xpu-smi -q`` (``==XPUSMI LOG==`` and ``XPU
    <bus id>`` blocks, query.py), or ParseError."""
    t = text or ""
    if re.search(r"\|\s*DevID\s*\|", t):
        return "xpu-smi"
    if _BOX_TITLE.search(t):
        return "xpu-smi box"
    if _QUERY.search(t):
        return "xpu-smi -q"
    raise ParseError(TOOL, "not xpu-smi output (no table with a DevID column, no XPU-SMI box, no XPUSMI LOG)")


def parse(text: str) -> XpuSmi:
    """The devices (and video engines and processes where printed) of one ``xpu_smi`` /
    ``xpu-smi`` output of any of the kinds ``detect`` names."""
    kind = detect(text)
    if kind == "xpu-smi box":
        from .box import parse_box  # each reader only when asked
        return parse_box(text)
    if kind == "xpu-smi -q":
        from .query import parse_query
        return parse_query(text)
    return parse_sections(text)


def parse_sections(text: str) -> XpuSmi:
    """The devices, video engines and processes of one XRE 4.x default ``xpu_smi`` output."""
    head, found = _tables(text)
    dev_tables = [t for t in found if t.header is not None and _device_table(t)]
    if not dev_tables:
        raise ParseError(TOOL, "no DEVICES table (a header naming DevID and PCI Addr or Memory)")
    skip = {id(t) for t in dev_tables}  # by identity: "t in dev_tables" compares whole tables
    known: set[int] = set()
    devices: list[XpuDevice] = []
    for t in dev_tables[:1]:
        cols = _columns(t)
        extra_cols = _extra_columns(cols)  # once per table, not per row
        for line, cells in t.rows:
            d = _device(cells, cols, line, extra_cols)
            if d.index in known:
                raise ParseError(TOOL, f"DevID {d.index} listed twice", line)
            known.add(d.index)
            devices.append(d)
            tables.check_devices(len(devices), TOOL, line)
    video: dict[int, dict[str, VideoEngine]] = {}
    processes: list[XpuProcess] = []
    process_section = False
    for t in found:
        if t.header is None or id(t) in skip:
            continue
        cols = _columns(t)
        if "pid" in cols and "devid" in cols:
            process_section = True
            for line, cells in t.rows:
                p = _process(cells, cols, line)
                if p.index not in known:
                    raise ParseError(TOOL, f"a process on DevID {p.index}, which DEVICES does not list", line)
                processes.append(p)
        elif t.title == "VIDEO" and "devid" in cols:
            engines = [(label, i) for label, i in cols.items() if label not in ("devid", "model")]
            for line, cells in t.rows:
                idx = CELLS.index(cells[cols["devid"]], "DevID", line)
                video[idx] = {label: _video_cell(cells[i], label.upper(), line) for label, i in engines}
    return XpuSmi(runtime_version=head.get("runtime version"), driver_version=head.get("driver version"),
                  devices=tuple(devices), video=video, processes=tuple(processes),
                  process_section=process_section, sections=tuple(t.title for t in found if t.title))
