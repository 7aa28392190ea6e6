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

import math
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional

from hetero_exporter.sdk import pciaddr, tables, values
from hetero_exporter.sdk.contract import ParseError

TOOL = "xpu-smi"  # the ``parse`` name (and the fixtures folder); the XRE binary is xpu_smi
MIB = 1 << 20
_TITLE = re.compile(r"^[A-Z][A-Z0-9 _/-]{1,40}$")
_KEY_VALUE = re.compile(r"^([A-Za-z][A-Za-z0-9 ._-]{0,40}?)\s*:\s*(\S.*)$")
_OK_STATES = {"n", "normal", "r", "running", "ok"}


@dataclass(frozen=True)
class XpuDevice:
    """One DEVICES row. Bytes for memory / L3 (printed in MB), ratio for UseRate (%), W, C, Hz;
    None where the tool prints N/A or the version has no such column."""

    index: int  # DevID (the /dev/xpuN number)
    bus_id: Optional[str]
    model: str
    serial: Optional[str]
    inode: Optional[str]
    state: Optional[str]  # State column as printed ("N"); None where the layout has none
    utilization_ratio: Optional[float]
    l3_used_bytes: Optional[float]
    l3_total_bytes: Optional[float]
    memory_used_bytes: Optional[float]
    memory_total_bytes: Optional[float]
    power_watts: Optional[float] = None
    temperature_celsius: Optional[float] = None
    clock_hertz: Optional[float] = None
    firmware: Optional[str] = None
    cpld: Optional[str] = None
    line: int = 0
    # the xpu-smi 5.x box (box.py) and ``-q`` (query.py) outputs also print these
    power_limit_watts: Optional[float] = None  # Pwr:Usage/Cap cap, -q Enforced Power Limit (W)
    ecc_uncorrected: Optional[float] = None  # Volatile Uncorr. ECC, -q Volatile DRAM Uncorrectable
    uuid: Optional[str] = None  # -q XPU UUID (printed with a GPU- prefix)

    @property
    def state_ok(self) -> Optional[bool]:
        return None if self.state is None else self.state.strip().lower() in _OK_STATES


@dataclass(frozen=True)
class VideoEngine:
    """One VIDEO cell (``0 %, 0 fps, 800 MHz``): busy ratio, frames per second, clock (Hz)."""

    utilization_ratio: Optional[float]
    fps: Optional[float]
    clock_hertz: Optional[float]


@dataclass(frozen=True)
class XpuProcess:
    index: int  # DevID
    pid: int
    streams: Optional[int]
    l3_bytes: Optional[float]
    memory_bytes: Optional[float]
    command: str


@dataclass(frozen=True)
class XpuSmi:
    """One parsed output. ``process_section``: a PROCESSES table was printed (empty or not)."""

    runtime_version: Optional[str]
    driver_version: Optional[str]
    devices: tuple[XpuDevice, ...]
    video: Mapping[int, Mapping[str, VideoEngine]] = field(default_factory=dict)
    processes: tuple[XpuProcess, ...] = ()
    process_section: bool = False
    sections: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        import dataclasses
        return dataclasses.asdict(self)


@dataclass
class _Table:
    title: str
    header: Optional[tuple[str, ...]] = None
    header_line: int = 0
    rows: list = field(default_factory=list)  # (lineno, cells)
    rules_after_header: int = 0  # 2 when whole: the rule under the header and the closing one


def _label(text: str) -> str:
    return " ".join(text.split()).lower()


def _finite(v: Optional[float], what: str, line: int) -> Optional[float]:
    if v is not None and not math.isfinite(v):
        raise ParseError(TOOL, f"{what}: value out of range", line)
    return v


def _quantity(text: str, unit: str, what: str, line: int) -> Optional[float]:
    try:
        return _finite(values.quantity(text, unit), what, line)
    except ValueError as e:
        raise ParseError(TOOL, f"{what}: {e}", line) from None


def _pair(text: str, what: str, line: int) -> tuple[Optional[float], Optional[float]]:
    """``0 / 32768 MB`` (the unit after the total applies to both; MB when none)."""
    if values.is_na(text):
        return None, None
    parts = re.sub(r"(?i)\bn/a\b", "NA", text).split("/")  # "N/A / 16384 MB"
    if len(parts) != 2:
        raise ParseError(TOOL, f"{what}: expected 'USED / TOTAL MB', got {text[:30]!r}", line)
    right = parts[1].strip()
    unit = _unit_after_number(right) or "MB"
    left = parts[0].strip()
    left_has_unit = bool(re.search(r"[A-Za-z]", left)) and not values.is_na(left)
    used = _quantity(left, "" if left_has_unit else unit, what, line)
    total = _quantity(right, unit, what, line)
    return used, total


def _unit_after_number(text: str) -> str:
    """The letters after the leading number of ``32768 MB`` (``MB``); "" when there are none or
    the text is no number and letters. Read by index: the number's ``e`` is also a letter, and a
    pattern for both would try each split of a long run of them."""
    n = len(text) - len(text.lstrip("-+0123456789.eE"))
    rest = text[n:].strip()
    return rest if n and _LETTERS.fullmatch(rest) else ""


_LETTERS = re.compile(r"[A-Za-z]+")


def _text(cell: Optional[str]) -> Optional[str]:
    if cell is None:
        return None
    s = cell.strip()
    return None if values.is_na(s) or s in ("...",) else s


def _int(text: str, what: str, line: int) -> int:
    s = text.strip()
    if not re.fullmatch(r"\d{1,6}", s):
        raise ParseError(TOOL, f"{what}: expected a number, got {s[:20]!r}", line)
    return int(s)


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

    index = _int(cell("devid") or "", "DevID", line)
    bus = None
    raw_bus = _text(cell("pci addr"))
    if raw_bus is not None:
        bus = pciaddr.normalize(raw_bus)
        if bus is None:
            raise ParseError(TOOL, f"PCI Addr: not a PCI address: {raw_bus[:20]!r}", line)
    l3_used, l3_total = _pair(cell("l3") or "N/A", "L3", line)
    mem_used, mem_total = _pair(cell("memory") or "N/A", "Memory", line)
    util = _quantity(cell("userate") or "N/A", "%", "UseRate", line)
    extra: dict[str, Optional[float]] = {}
    for key, (i, unit, default) in (extra_cols or _extra_columns(cols)).items():
        extra[key] = None if i is None else _quantity(cells[i], unit or default, key, line)
    return XpuDevice(index=index, bus_id=bus, model=_text(cell("model")) or "", serial=_text(cell("sn")),
                     inode=_text(cell("inode")), state=_text(cell("state")), utilization_ratio=util,
                     l3_used_bytes=l3_used, l3_total_bytes=l3_total, memory_used_bytes=mem_used,
                     memory_total_bytes=mem_total, power_watts=extra["power"],
                     temperature_celsius=extra["temp"], clock_hertz=extra["freq"],
                     firmware=_text(cell("firmware version")), cpld=_text(cell("cpld version")), line=line)


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
                fps = _quantity(p[:-3], "", what, line)
            elif low.endswith("%"):
                util = _quantity(p, "%", what, line)
            elif low.endswith("hz"):
                clock = _quantity(p, "MHz", what, line)
            else:
                raise ParseError(TOOL, f"{what}: unexpected part {p[:20]!r}", line)
    return VideoEngine(util, fps, clock)


def _process(cells: tuple[str, ...], cols: Mapping[str, int], line: int) -> XpuProcess:
    def cell(name: str) -> str:
        i = cols.get(name)
        return "N/A" if i is None else cells[i]

    streams = _text(cell("streams"))
    return XpuProcess(index=_int(cell("devid"), "DevID", line), pid=_int(cell("pid"), "PID", line),
                      streams=None if streams is None else _int(streams, "Streams", line),
                      l3_bytes=_quantity(cell("l3"), "MB", "L3", line),
                      memory_bytes=_quantity(cell("memory"), "MB", "Memory", line),
                      command=_text(cell("command")) or "")


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
        from .box import parse_box  # the modules build on this one's structures
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
                idx = _int(cells[cols["devid"]], "DevID", line)
                video[idx] = {label: _video_cell(cells[i], label.upper(), line) for label, i in engines}
    return XpuSmi(runtime_version=head.get("runtime version"), driver_version=head.get("driver version"),
                  devices=tuple(devices), video=video, processes=tuple(processes),
                  process_section=process_section, sections=tuple(t.title for t in found if t.title))
