"""Pure parsers for what ``cnmon`` prints, and a detector (collectors/cnmon.py turns the
results into the model and runs the tool).

Default-table layouts are read by structure (the header names the fields of each cell, and
the values are read in that order, so a value that slid a column does not matter): the older
``Inited  Driver`` / ``vMemory-Usage`` layout (CNMON 1.x, v4.x) and the ``Bus-Id`` / ``SR-IOV
Compute-Mode`` layout (v5.x), with ``VF`` or ``MI`` process columns. Values stay in cnmon's
units here (%, C, W, MiB); "N/A" is None.

``cnmon info``: NO REAL CAPTURE of its output is at hand. Its parser follows the section
structure the vendor documents (a "Card N" header, then "Key : value" lines and indented
sub-sections such as Physical Memory Usage / Total, Used, Free; Utilization / MLU Average;
Temperature / Board, Chip; Power / Usage, Cap; ECC counts) and reads values by key name and
section, not position; its tests use documented-structure samples, not captures.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional

from hetero_exporter.sdk import blocks as kvblocks
from hetero_exporter.sdk import tables, values
from hetero_exporter.sdk.contract import ParseError

TOOL = "cnmon"
MIB = 1 << 20


CELLS = values.Cells(TOOL)

# --------------------------------------------------------------------------- parsed structures


@dataclass(frozen=True)
class MluCard:
    """One card (row pair) of the ``cnmon`` table, in cnmon's units (%, C, W, MiB)."""

    card: int
    name: str
    vf: str = "/"  # "/" for the physical function, else the VF / MLU-instance number
    firmware: Optional[str] = None
    bus_id: Optional[str] = None  # lower case 0000:39:00.0; the older layout has none
    inited: Optional[str] = None  # "On" / "Off" (older layout)
    driver: Optional[str] = None  # per-row driver version (older layout)
    util_pct: Optional[float] = None
    ecc_errors: Optional[int] = None  # "Ecc-Error": N/A while inline ECC is off
    fan_pct: Optional[float] = None
    temp_c: Optional[float] = None
    power_w: Optional[float] = None
    power_cap_w: Optional[float] = None
    memory_used_mib: Optional[int] = None
    memory_total_mib: Optional[int] = None
    vmemory_used_mib: Optional[int] = None
    vmemory_total_mib: Optional[int] = None
    sriov: Optional[str] = None
    compute_mode: Optional[str] = None


@dataclass(frozen=True)
class MluProcess:
    card: int
    instance: str  # the "VF" or "MI" column
    pid: int
    command: str = ""
    memory_mib: Optional[int] = None


@dataclass(frozen=True)
class CnmonTable:
    """``cnmon`` (the default table): ``version`` from "CNMON v5.10.13", ``driver_version``
    from "Driver v5.10.13" (None in layouts without it), ``instance_column`` VF or MI."""

    version: str
    driver_version: Optional[str]
    timestamp: Optional[str] = None
    cards: tuple[MluCard, ...] = ()
    processes: tuple[MluProcess, ...] = ()
    instance_column: str = "VF"
    process_section: bool = False  # the "Processes:" box was printed

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class CardInfo:
    """One card of ``cnmon info``: keys are ``section/sub/key`` paths, lower case."""

    card: int
    values: Mapping[str, str] = field(default_factory=dict)

    def find(self, *names: str, within: str = "") -> Optional[str]:
        """The value of the first key whose last path part is one of ``names`` (and whose
        path contains ``within``), in printing order."""
        for path, v in self.values.items():
            last = path.rsplit("/", 1)[-1]
            if last in names and within in path:
                return v
        return None


@dataclass(frozen=True)
class CnmonInfo:
    cards: tuple[CardInfo, ...] = ()

    def to_dict(self) -> dict:
        return {"cards": [{"card": c.card, "values": dict(c.values)} for c in self.cards]}


# --------------------------------------------------------------------------- value helpers


# A value masked in a published capture ("0 MiB/ xxxxx MiB": the author hid the card's memory,
# keeping the widths). cnmon prints digits there; the masked value is unknown, so absent.
_MASKED = re.compile(r"x{2,}", re.I)


def _num(text: str, line: Optional[int], what: str, unit: str = "") -> Optional[float]:
    t = text.strip()
    if unit and t.upper().endswith(unit.upper()):
        t = t[: -len(unit)].strip()
    if values.is_na(t) or _MASKED.fullmatch(t):
        return None
    try:
        v = float(t)
    except ValueError:
        raise ParseError(TOOL, f"{what}: expected a number{(' in ' + unit) if unit else ''} or N/A, "
                               f"got {text.strip()[:40]!r}", line) from None
    if not math.isfinite(v):
        raise ParseError(TOOL, f"{what}: not a finite number: {text.strip()[:40]!r}", line)
    return v


def _whole(v: Optional[float]) -> Optional[int]:
    return None if v is None else int(v)


def _split_pair(text: str, line: Optional[int], what: str, unit: str) -> tuple[Optional[float], Optional[float]]:
    """'106 W/ 250 W' or '0 MiB/ 23374 MiB' -> (106, 250); 'N/A' -> (None, None)."""
    t = text.strip()
    if values.is_na(t):
        return None, None
    m = re.fullmatch(r"(\S+?)\s*(?:%s)?\s*/\s*(\S+?)\s*(?:%s)?" % (unit, unit), t)
    if not m:
        raise ParseError(TOOL, f"{what}: expected 'used {unit}/ total {unit}', got {t[:40]!r}", line)
    return _num(m.group(1), line, what), _num(m.group(2), line, what)


# --------------------------------------------------------------------------- cnmon (default table)

_BORDER = tables.BORDER
_ANY = r"\S+"  # a label this parser does not know: one word
# What each header label's value looks like (labels are case-insensitive).
_VALUE_RX = {
    "card": r"\d+",
    "vf": r"/|\d+|-|N/A", "mi": r"/|\d+|-|N/A",
    "name": r"\S+(?: \S+)*?",
    "firmware": r"\S+", "inited": r"\S+", "driver": r"\S+",
    "fan": r"\d+(?:\.\d+)?%|N/A", "temp": r"-?\d+(?:\.\d+)?C|N/A",
    "pwr:usage/cap": r"(?:[\d.]+|N/A)(?:\s*W)?\s*/\s*(?:[\d.]+|N/A)(?:\s*W)?|N/A",
    "bus-id": r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]|N/A",
    "memory-usage": r"(?:\d+|N/A|x+)(?:\s*MiB)?\s*/\s*(?:\d+|N/A|x+)(?:\s*MiB)?|N/A",
    "vmemory-usage": r"(?:\d+|N/A|x+)(?:\s*MiB)?\s*/\s*(?:\d+|N/A|x+)(?:\s*MiB)?|N/A",
    "util": r"\d+(?:\.\d+)?%|N/A", "ecc-error": r"\d+|N/A",
    "sr-iov": r"\S+", "compute-mode": r"\S+",
}


_cells = tables.split_cells


def _cell_pattern(header_cell: str) -> tuple[list[str], re.Pattern]:
    """The labels of a header cell and the pattern of its data cells (read stripped). Values
    are separated by blanks, as cnmon prints them: with optional blanks between them, two
    one-word values could split a long word in any place, and a failing match would try each
    (quadratic, cubic with three); no value pattern ends or starts with optional blanks."""
    labels = [x.lower() for x in re.split(r"\s{2,}", header_cell.strip()) if x]
    parts = ["(?P<g%d>%s)" % (i, _VALUE_RX.get(lab, _ANY)) for i, lab in enumerate(labels)]
    return labels, re.compile(r"\s+".join(parts))


def _cell_values(cell: str, spec: tuple[list[str], re.Pattern], line: int) -> dict[str, str]:
    labels, rx = spec
    m = rx.fullmatch(cell.strip())
    if not m:
        raise ParseError(TOOL, f"cell {cell.strip()[:50]!r} does not match its header "
                               f"({', '.join(labels) or 'empty'})", line)
    return {lab: m.group(f"g{i}") for i, lab in enumerate(labels)}


def _card_from_rows(a: tuple[int, list[str]], b: tuple[int, list[str]], head: tuple[list, list]) -> MluCard:
    vals: dict[str, tuple[str, int]] = {}
    for (ln, cells), specs in ((a, head[0]), (b, head[1])):
        if len(cells) != len(specs):
            raise ParseError(TOOL, f"row has {len(cells)} cells, the header {len(specs)}", ln)
        for cell, spec in zip(cells, specs):
            for k, v in _cell_values(cell, spec, ln).items():
                vals.setdefault(k, (v, ln))

    def get(k: str) -> tuple[str, int]:
        return vals.get(k, ("N/A", a[0]))

    card = int(get("card")[0]) if "card" in vals else None
    if card is None:
        raise ParseError(TOOL, "a card row without a Card number", a[0])
    pu, pc = _split_pair(*get("pwr:usage/cap"), "Pwr:Usage/Cap", "W")
    mu, mt = _split_pair(*get("memory-usage"), "Memory-Usage", "MiB")
    vu, vt = _split_pair(*get("vmemory-usage"), "vMemory-Usage", "MiB")

    def text(k: str) -> Optional[str]:
        return values.present(get(k)[0])

    return MluCard(
        card=card, name=get("name")[0].strip(), vf=get("vf" if "vf" in vals else "mi")[0].strip() or "/",
        firmware=text("firmware"), inited=text("inited"), driver=text("driver"),
        bus_id=CELLS.pci(get("bus-id")[0], "Bus-Id", get("bus-id")[1], default_function=None),
        util_pct=_num(get("util")[0], get("util")[1], "Util", "%"),
        ecc_errors=_whole(_num(*get("ecc-error"), "Ecc-Error")),
        fan_pct=_num(get("fan")[0], get("fan")[1], "Fan", "%"),
        temp_c=_num(get("temp")[0], get("temp")[1], "Temp", "C"),
        power_w=pu, power_cap_w=pc, memory_used_mib=_whole(mu), memory_total_mib=_whole(mt),
        vmemory_used_mib=_whole(vu), vmemory_total_mib=_whole(vt),
        sriov=text("sr-iov"), compute_mode=text("compute-mode"))


_PROC_HEAD = re.compile(r"\s*(\d+)\s+(\S+)\s+(\d+)\s+")  # card, instance, pid; the rest is read below


def _proc_row(row: str) -> Optional[tuple[int, str, int, str, Optional[int]]]:
    """``card instance pid command... memory MiB`` -> (card, instance, pid, command, MiB or
    None for N/A); None when the row is not one. The command may hold blanks and digits: the
    memory is the last number before ``MiB`` (read from the right: a pattern with a lazy
    command would retry the tail at every character, quadratic on a long row)."""
    m = _PROC_HEAD.match(row)
    if m is None:
        return None
    rest = row[m.end():].rstrip()
    if not rest.endswith("MiB"):
        return None
    rest = rest[:-3].rstrip()
    digits = len(rest) - len(rest.rstrip("0123456789"))
    if digits:
        memory, command = int(rest[len(rest) - digits:]), rest[:len(rest) - digits]
    elif rest.endswith("N/A"):
        memory, command = None, rest[:-3]
    else:
        return None
    return int(m.group(1)), m.group(2), int(m.group(3)), command.strip(), memory


MAX_LINE = 4096  # longer lines are not cnmon's (and would make the cell patterns slow)


def _check_lines(text: str, tool: str) -> list[str]:
    lines = tables.lines_of(text, tool)  # at most tables.MAX_LINES
    for i, ln in enumerate(lines, 1):
        if len(ln) > MAX_LINE:
            raise ParseError(tool, f"a line of {len(ln)} characters; cnmon prints short lines", i)
    return lines


def _title(joined: str, ln: int) -> tuple[str, Optional[str]]:
    """(version, driver version) of the ``CNMON <version> ... Driver <version>`` title line."""
    m = re.search(r"CNMON\s+v?(\S+)", joined)
    if not m:
        raise ParseError(TOOL, "the first table line must be the 'CNMON <version>' title", ln)
    d = re.search(r"Driver\s+v?(\S+)", joined)
    return m.group(1), d.group(1) if d else None


def _card_header(rows: list[tuple[int, list[str]]]) -> tuple[list, list]:
    """The cell patterns of the two card header lines (``Card  VF  Name ...``)."""
    (l1, c1), (_l2, c2) = rows
    if not re.search(r"\bCard\b", "|".join(c1)) or len(c1) != len(c2):
        raise ParseError(TOOL, "the card header must be two lines starting 'Card ...' with the same cells", l1)
    return [_cell_pattern(c) for c in c1], [_cell_pattern(c) for c in c2]


def parse_table(text: str) -> CnmonTable:
    """Parse ``cnmon`` (the default table for all cards, with its process section)."""
    lines = [(i, ln.rstrip()) for i, ln in enumerate(_check_lines(text, TOOL), 1) if ln.strip()]
    if not lines:
        raise ParseError(TOOL, "empty output")
    timestamp = None
    started = False
    version = driver = None
    head_rows: list[tuple[int, list[str]]] = []
    head: Optional[tuple[list, list]] = None
    block: list[tuple[int, list[str]]] = []
    cards: list[MluCard] = []
    procs: list[MluProcess] = []
    section = "title"  # title -> header -> cards -> processes
    instance = "VF"

    def flush() -> None:
        if head is None:
            return
        if len(block) % 2:
            raise ParseError(TOOL, f"a card block of {len(block)} line(s); rows come in pairs", block[0][0])
        for j in range(0, len(block), 2):
            cards.append(_card_from_rows(block[j], block[j + 1], head))
            tables.check_devices(len(cards), TOOL, block[j][0])
        block.clear()

    for ln, raw in lines:
        s = raw.strip()
        if _BORDER.match(s):
            started = True
            if section == "cards":
                flush()
            continue
        cells = _cells(s)
        if cells is None:
            if not started:
                timestamp = s  # e.g. "Wed Jun 21 10:27:01 2023"
                continue
            raise ParseError(TOOL, f"not a table line: {s[:60]!r}", ln)
        started = True
        joined = "|".join(cells)
        if section == "title":
            version, driver = _title(joined, ln)
            section = "header"
        elif section == "header":
            head_rows.append((ln, cells))
            if len(head_rows) == 2:
                head = _card_header(head_rows)
                section = "cards"
        elif section == "cards":
            if re.match(r"\s*Processes:", joined):
                flush()
                section = "processes"
            else:
                block.append((ln, cells))
        else:  # processes
            row = " ".join(c.strip() for c in cells).strip()
            if re.match(r"Card\s+(VF|MI)\b", row):
                instance = row.split()[1]
                continue
            if re.match(r"No running processes found", row, re.I):
                continue
            proc = _proc_row(row)
            if proc is None:
                raise ParseError(TOOL, f"not a process row: {row[:60]!r}", ln)
            card, inst, pid, command, memory = proc
            procs.append(MluProcess(card=card, instance=inst, pid=pid, command=command, memory_mib=memory))
    if section == "cards":
        flush()
    if version is None:
        raise ParseError(TOOL, "no 'CNMON <version>' title")
    if head is None:
        raise ParseError(TOOL, "no card header ('Card  VF  Name ...')")
    if len({(c.card, c.vf) for c in cards}) < len(cards):
        twice = next(c for i, c in enumerate(cards) if any((c.card, c.vf) == (o.card, o.vf) for o in cards[:i]))
        raise ParseError(TOOL, f"card {twice.card} ({twice.vf}) is listed twice")
    return CnmonTable(version=version, driver_version=driver, timestamp=timestamp, cards=tuple(cards),
                      processes=tuple(procs), instance_column=instance, process_section=section == "processes")


# --------------------------------------------------------------------------- cnmon info

# an optional colon with optional blanks around it, written so that a blank run has one split
_CARD_HEAD = re.compile(r"^\s*Card(?:\s*:)?\s*(\d+)(?:\s*:)?\s*$", re.I)


def parse_info(text: str) -> CnmonInfo:
    """Parse ``cnmon info [-c N]`` (structure from the vendor documentation; no real capture
    at hand) with the shared block reader (hetero_exporter.sdk.blocks): "Card N" starts a
    card; "Key : value" lines; a "Key :" with no value (or a bare "Section" line) opens a
    section for the lines indented under it; a line that is no new key continues the value
    above it. ``cnmon info -c N`` of one card may print no "Card" line (card 0)."""
    tool = "cnmon info"
    _check_lines(text, tool)
    cards: list[CardInfo] = []
    for b in kvblocks.read_blocks(text, tool, blank_separates=False, block_start=_CARD_HEAD):
        head = _CARD_HEAD.match(b.header) if b.header else None
        cards.append(CardInfo(int(head.group(1)) if head else 0, b.paths()))
    if not any(c.values for c in cards):
        raise ParseError(tool, "no 'key : value' line")
    return CnmonInfo(tuple(cards))


_INFO_NUMBER = re.compile(r"(-?[\d.]+|N/A|NA)(?:\s*([A-Za-z%°]+))?")  # read stripped: one split of blanks


def _info_number(v: Optional[str], what: str) -> Optional[float]:
    if v is None:
        return None
    m = _INFO_NUMBER.fullmatch(v.strip())
    if not m:
        raise ParseError("cnmon info", f"{what}: expected a number with a unit, got {v.strip()[:40]!r}")
    n = _num(m.group(1), None, what)
    unit = (m.group(2) or "").lower()
    if n is not None and unit in ("kib", "mib", "gib", "tib", "b", "kb", "mb", "gb"):
        n *= {"b": 1, "kib": 1 << 10, "mib": MIB, "gib": 1 << 30, "tib": 1 << 40,
              "kb": 1 << 10, "mb": MIB, "gb": 1 << 30}[unit]  # cnmon's units are binary
    return n


@dataclass(frozen=True)
class InfoReadings:
    serial: Optional[str] = None
    uuid: Optional[str] = None
    product: Optional[str] = None
    firmware: Optional[str] = None
    ecc_corrected: Optional[float] = None
    ecc_uncorrected: Optional[float] = None
    temp_board: Optional[float] = None
    memory_total: Optional[float] = None


def info_readings(c: CardInfo) -> InfoReadings:
    """What the collector takes from one ``cnmon info`` card (keys by name and section)."""
    def text(*names: str) -> Optional[str]:
        return values.present(c.find(*names))

    corrected = uncorrected = None
    for path, v in c.values.items():
        if "ecc" not in path:
            continue
        last = path.rsplit("/", 1)[-1]
        n = _info_number(v, path)
        if n is None:
            continue
        if re.search(r"one bit|single bit|\b1 ?bit|corrected(?! )|sbe", last) and "uncorrect" not in last:
            corrected = (corrected or 0.0) + n
        elif re.search(r"multi|two bit|double bit|\b2 ?bit|uncorrect|dbe", last):
            uncorrected = (uncorrected or 0.0) + n
    return InfoReadings(
        serial=text("serial number", "board serial number", "sn"), uuid=text("uuid"),
        product=text("product name"), firmware=text("firmware", "firmware version", "mcu firmware"),
        ecc_corrected=corrected, ecc_uncorrected=uncorrected,
        temp_board=_info_number(c.find("board", within="temperature"), "Temperature Board"),
        memory_total=_info_number(c.find("total", within="physical memory"), "Physical Memory Total"))


# --------------------------------------------------------------------------- cnmon topo

# connection words of the matrix -> Link.type; the PCIe words (PIX, PXB, PHB, SYS, NODE) and
# X (self) are no fabric link
TOPO_FABRIC = {"MLULINK": "mlulink", "MLU-LINK": "mlulink", "MLK": "mlulink"}


@dataclass(frozen=True)
class CnmonTopo:
    """``cnmon topo``: (card, peer card, word) for every MLU-Link cell of the matrix."""

    cards: tuple[int, ...]
    links: tuple[tuple[int, int, str], ...] = ()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def parse_topo(text: str) -> CnmonTopo:
    """Parse ``cnmon topo``. NO REAL CAPTURE was at hand: the layout read is the
    ``nvidia-smi topo -m`` style matrix (a header ``MLU0 MLU1 ...``, one row per card, ``X``
    on the diagonal, ``MLULINK`` between cards joined by MLU-Link, PCIe words otherwise, then
    a ``Legend:``), by structure (sdk.tables.parse_matrix)."""
    m = tables.parse_matrix(text, "cnmon topo", r"MLU\d{1,4}")
    num = {n: int(n[3:]) for n in m.names}
    links = tuple((num[r], num[c], w.upper()) for r, c, w in tables.pairs(m, TOPO_FABRIC))
    return CnmonTopo(cards=tuple(num[n] for n in m.names), links=links)


# --------------------------------------------------------------------------- detector


def detect(text: str) -> str:
    """``cnmon`` (the default table) or ``cnmon info``; ParseError otherwise."""
    stripped = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not stripped:
        raise ParseError(TOOL, "empty output")
    if any("CNMON" in s and s.startswith("|") for s in stripped):
        return "cnmon"
    if re.match(r"MLU\d+(\s+MLU\d+)*(\s+CPU Affinity)?$", stripped[0]):
        return "cnmon topo"
    if any(_CARD_HEAD.match(s) for s in stripped) or any(
            re.match(r"(Product Name|Physical Memory Usage|MLU Average)\s*:", s) for s in stripped):
        return "cnmon info"
    if re.search(r"command not found|no such device|error|failed", stripped[0], re.I):
        raise ParseError(TOOL, f"cnmon printed an error: {' / '.join(stripped[:3])[:200]}")
    raise ParseError(TOOL, f"not a cnmon output I recognize (first line {stripped[0][:60]!r})")
