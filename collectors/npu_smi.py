"""Huawei Ascend NPUs through the ``npu-smi`` command-line tool.

Pure parsers for what ``npu-smi`` prints, a detector that says which command printed a
text, and a collector that runs the tool through the shared runner (hetero_exporter.vendor_cli).

Invocations per cycle (stated, and measured by benchmarks/cli_invocations.py):
- ``npu-smi info``: one call for all NPUs, every cycle (health, power, temperature, AI core
  usage, DDR/HBM memory, bus id, processes);
- ``npu-smi info -t health -i N -c C``: only for chips whose summary health is not OK, to
  read the error codes (at most ``health_calls_per_cycle``, default 4);
- per-card details ``info -t usages|common|memory|ecc -i N``: each kind refreshed every
  ``detail_intervals[kind]`` seconds (defaults below), spread over cycles, at most
  ``detail_calls_per_cycle`` per cycle (default: the steady rate rounded up, plus one);
- identity, once per card in the agent's life: ``info -t board -i N`` (serial, firmware, die
  id on newer releases), ``info -t board -i N -c C`` only when the card-level output has
  neither a serial nor a die id, and ``info -m`` only for multi-chip cards without a
  ``Device`` column (to learn the chip logic ids).

Units: npu-smi's "MB" are binary (an HBM of "65536" MB is 64 GiB): MB -> bytes is x 2**20.
Percentages become ratios 0..1. "NA", "N/A" and "-" are absent values (status unsupported).

Layouts handled by structure (column positions come from the header lines of each cell, not
from fixed offsets): the 310 table (``Chip Device`` second row, no HBM), the 910A/910B
tables with and without ``Hugepages-Usage(page)``, and the newer layout with ``NPU ID |
Name`` cells and ``NPU Util(%)`` (Ascend 950 documentation). Lines of ``...`` (a capture
shortened by hand) are skipped and flagged ``elided``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from hetero_exporter import fields as F
from hetero_exporter import profiles
from hetero_exporter.collector_api import CollectorOptions, ParseError
from hetero_exporter.collectors.cli_collector import (CliCalls, FaultEpisodes, NumaNodes, ParsedOutput,
                                                      Runner, build, reading, table_fault, worst_state)
from hetero_exporter.model import (DeviceIdentity, DeviceSample, Fault, Health, NodeSnapshot,
                                   ProcessSample, Quality, Reading)

log = logging.getLogger(__name__)

TOOL = "npu-smi"
MIB = 1 << 20
_NA = {"", "NA", "N/A", "-", "--"}

# --------------------------------------------------------------------------- parsed structures


@dataclass(frozen=True)
class NpuChip:
    """One chip row pair of the ``npu-smi info`` table (raw vendor units: W, C, %, MB, pages).

    ``npu_id`` is the card ("NPU" column), ``chip_id`` the chip on the card ("Chip" column,
    0 in layouts without it), ``logic_id`` the "Device" column where the layout has one."""

    npu_id: int
    chip_id: int = 0
    name: str = ""
    health: str = "OK"
    bus_id: Optional[str] = None  # lower case, 0000:c1:00.0
    logic_id: Optional[int] = None
    phy_id: Optional[int] = None
    power_w: Optional[float] = None
    temp_c: Optional[float] = None
    aicore_pct: Optional[float] = None  # "AICore(%)" or, in the newer layout, "NPU Util(%)"
    memory_used_mb: Optional[int] = None  # "Memory-Usage(MB)": DDR
    memory_total_mb: Optional[int] = None
    hbm_used_mb: Optional[int] = None
    hbm_total_mb: Optional[int] = None
    hugepages_used: Optional[int] = None
    hugepages_total: Optional[int] = None


@dataclass(frozen=True)
class NpuProcess:
    npu_id: int
    chip_id: Optional[int]  # None where the table has no Chip column
    pid: int
    name: str = ""
    memory_mb: Optional[int] = None


@dataclass(frozen=True)
class NpuSummary:
    """``npu-smi info``: ``tool_version`` is the "npu-smi X" title, ``driver_version`` its
    "Version:"; ``layout`` names the header style (``310``, ``910``, ``new``)."""

    tool_version: str
    driver_version: str
    layout: str
    chips: tuple[NpuChip, ...] = ()
    processes: tuple[NpuProcess, ...] = ()
    elided: bool = False  # the text had "..." lines standing for rows left out
    process_section: bool = False  # the table lists processes (the 310 and oldest layouts do not)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ChipMapping:
    """A row of ``npu-smi info -m``: card, chip, logic id (None for an MCU row: "-")."""

    npu_id: int
    chip_id: int
    logic_id: Optional[int]
    name: str
    phy_id: Optional[int] = None
    slot_id: Optional[int] = None

    @property
    def is_mcu(self) -> bool:
        return self.logic_id is None and self.name.strip().lower() in ("mcu", "-", "")


@dataclass(frozen=True)
class CardListing:
    npu_id: int
    chip_count: Optional[int] = None
    product_name: Optional[str] = None
    serial: Optional[str] = None


@dataclass(frozen=True)
class NpuList:
    """``npu-smi info -l``."""

    total: Optional[int]
    cards: tuple[CardListing, ...] = ()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class DetailDoc:
    """A ``npu-smi info -t TYPE`` output as key/value maps. Keys are normalized (lower case,
    single spaces). ``card`` holds keys outside any chip block (NPU ID, Chip Count, and
    single-chip outputs without a "Chip ID"), ``chips`` the blocks that name a "Chip ID",
    ``mcu`` the block of the board's micro-controller ("Chip Name : MCU")."""

    kind: str
    card: Mapping[str, str] = field(default_factory=dict)
    chips: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    mcu: Mapping[str, str] = field(default_factory=dict)

    @property
    def npu_id(self) -> Optional[int]:
        for block in (self.card, *self.chips.values()):
            v = block.get("npu id")
            if v is not None and v.strip().isdigit():
                return int(v)
        return None

    def get(self, chip_id: Optional[int], *keys: str) -> Optional[str]:
        """The first of ``keys`` found in the chip's block, else at card level."""
        blocks = ([self.chips[chip_id]] if chip_id in self.chips else []) + [self.card]
        if chip_id is None:
            blocks += list(self.chips.values())
        for block in blocks:
            for k in keys:
                if k in block:
                    return block[k]
        return None

    def chip_ids(self) -> list[int]:
        return sorted(self.chips) or [0]

    def to_dict(self) -> dict:
        return {"kind": self.kind, "card": dict(self.card),
                "chips": {str(k): dict(v) for k, v in self.chips.items()}, "mcu": dict(self.mcu)}


@dataclass(frozen=True)
class HealthDetail:
    """``npu-smi info -t health``: state (OK, Warning, Alarm, Critical, UNKNOWN), the error
    codes (8 hex digits, upper case, as npu-smi prints them) and the error information."""

    state: str
    codes: tuple[str, ...] = ()
    information: str = ""


# --------------------------------------------------------------------------- small helpers


def _number(text: str, tool: str, line: Optional[int], what: str) -> Optional[float]:
    t = text.strip()
    if t.upper() in _NA:
        return None
    try:
        v = float(t)
    except ValueError:
        raise ParseError(tool, f"{what}: expected a number or NA, got {t[:40]!r}", line) from None
    if not math.isfinite(v):
        raise ParseError(tool, f"{what}: not a finite number: {t[:40]!r}", line)
    return v


def _int(text: str, tool: str, line: Optional[int], what: str) -> Optional[int]:
    t = text.strip()
    if t.upper() in _NA:
        return None
    if not re.fullmatch(r"[0-9]{1,12}", t):
        raise ParseError(tool, f"{what}: expected a whole number or NA, got {t[:40]!r}", line)
    return int(t)


def _pair(text: str, tool: str, line: Optional[int], what: str) -> tuple[Optional[int], Optional[int]]:
    """'2003 / 15039' -> (2003, 15039); 'NA' or '' -> (None, None)."""
    t = text.strip()
    if t.upper() in _NA:
        return None, None
    used, sep, total = t.partition("/")
    if not sep:
        raise ParseError(tool, f"{what}: expected 'used / total', got {t[:40]!r}", line)
    return _int(used, tool, line, what), _int(total, tool, line, what)


def _bus_id(text: str, tool: str, line: Optional[int]) -> Optional[str]:
    t = text.strip()
    if t.upper() in _NA:
        return None
    m = re.fullmatch(r"([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])", t)
    if not m:
        raise ParseError(tool, f"Bus-Id: expected a PCI address like 0000:C1:00.0, got {t[:40]!r}", line)
    return f"{m.group(1)[-4:]}:{m.group(2)}:{m.group(3)}.{m.group(4)}".lower()


_HEALTH_WORDS = {"ok": "OK", "warning": "Warning", "alarm": "Alarm", "critical": "Critical",
                 "unknown": "UNKNOWN"}


def canonical_health(word: str) -> str:
    """npu-smi health words in their documented spelling; other words kept as printed."""
    w = word.strip()
    return _HEALTH_WORDS.get(w.lower(), w)


def _norm_key(key: str) -> str:
    return re.sub(r"\s+", " ", key.strip()).lower()


# --------------------------------------------------------------------------- box tables
#
# The summary is a box table: borders "+----+----+" / "+====+====+", content "| .. | .. |".
# A cell of the header holds one or more labels side by side ("Power(W)    Temp(C)"); the
# value under a label starts near the label's column. Values are taken as groups of
# non-blank text ("2003 / 15039" is one group) and each group goes to the label whose
# start column is nearest, so a value that slid a column or two still lands right.

_BORDER = re.compile(r"^\+[-=+]*\+$")
_ELISION = re.compile(r"^\.{3,}$")
_GROUP = re.compile(r"\S+(?:\s*/\s*\S+)?")

# Known labels, longest first (a found label masks its text so "NPU" does not match
# inside "NPU Util(%)").
_SUMMARY_LABELS = (
    ("Hugepages-Usage(page)", "hugepages"), ("Memory-Usage(MB)", "memory"),
    ("HBM-Usage(MB)", "hbm"), ("NPU Util(%)", "util"), ("AICore(%)", "aicore"),
    ("Power(W)", "power"), ("Temp(C)", "temp"), ("Bus-Id", "bus"), ("Health", "health"),
    ("Phy-ID", "phy"), ("NPU ID", "npu"), ("Device", "device"), ("Chip", "chip"),
    ("Name", "name"), ("NPU", "npu"),
)
_PROCESS_LABELS = (
    ("Process memory(MB)", "memory"), ("Process name", "pname"), ("Process id", "pid"),
    ("NPU ID", "npu"), ("Chip", "chip"), ("NPU", "npu"),
)


@dataclass(frozen=True)
class _Label:
    key: str
    start: int


def _cell_labels(cell: str, vocabulary: Sequence[tuple[str, str]]) -> list[_Label]:
    """Labels of one header cell with their start columns; unknown words become labels
    of their own (``?word``) so their values are not given to a neighbour."""
    masked = cell
    found: list[_Label] = []
    for text, key in vocabulary:
        pos = masked.find(text)
        while pos >= 0:
            found.append(_Label(key, pos))
            masked = masked[:pos] + " " * len(text) + masked[pos + len(text):]
            pos = masked.find(text)
    for m in re.finditer(r"\S+(?: \S+)*", masked):
        found.append(_Label("?" + m.group(0), m.start()))
    return sorted(found, key=lambda lab: lab.start)


def _cell_values(cell: str, labels: Sequence[_Label]) -> dict[str, str]:
    """Value groups of a data cell, each given to the nearest label (joined when several
    groups fall to one label, e.g. a name with a space)."""
    out: dict[str, list[str]] = {}
    if not labels:
        return {}
    for m in _GROUP.finditer(cell):
        best = min(labels, key=lambda lab: (abs(lab.start - m.start()), lab.start))
        out.setdefault(best.key, []).append(m.group(0))
    return {k: " ".join(v) for k, v in out.items()}


def _split_cells(line: str) -> Optional[list[str]]:
    """The cells of a content line '| a | b |', or None when it is not one."""
    s = line.strip()
    if len(s) < 2 or s[0] != "|" or s[-1] != "|":
        return None
    return s[1:-1].split("|")


@dataclass
class _TableLine:
    lineno: int
    kind: str  # border | content | elision
    text: str
    cells: Optional[list[str]] = None


def _table_lines(text: str, tool: str) -> list[_TableLine]:
    out: list[_TableLine] = []
    started = False
    for i, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s:
            continue
        if _BORDER.match(s):
            started = True
            out.append(_TableLine(i, "border", s))
            continue
        cells = _split_cells(s)
        if cells is not None:
            started = True
            out.append(_TableLine(i, "content", s, cells))
        elif _ELISION.match(s):
            out.append(_TableLine(i, "elision", s))
        elif started:
            raise ParseError(tool, f"not a table line: {s[:60]!r}", i)
        # lines before the first border (a banner, a warning) are not part of the table
    return out


# --------------------------------------------------------------------------- npu-smi info


def _is_process_header(cells: Sequence[str]) -> bool:
    joined = "|".join(cells)
    return "Process id" in joined or "Process name" in joined


def _chip_from_rows(a: _TableLine, b: _TableLine, head: tuple[list[list[_Label]], list[list[_Label]]],
                    tool: str) -> NpuChip:
    assert a.cells is not None and b.cells is not None
    values: dict[str, tuple[str, int]] = {}
    for row, labels_per_cell in ((a, head[0]), (b, head[1])):
        assert row.cells is not None
        if len(row.cells) != len(labels_per_cell):
            raise ParseError(tool, f"row has {len(row.cells)} cells, the header {len(labels_per_cell)}",
                             row.lineno)
        for cell, labels in zip(row.cells, labels_per_cell):
            for key, val in _cell_values(cell, labels).items():
                values.setdefault(key, (val, row.lineno))

    def get(key: str) -> tuple[str, Optional[int]]:
        v = values.get(key)
        return (v[0], v[1]) if v else ("", a.lineno)

    npu_text, ln = get("npu")
    npu = _int(npu_text, tool, ln, "NPU")
    if npu is None:
        raise ParseError(tool, "a device row without an NPU id", a.lineno)
    health_text, _ = get("health")
    if not health_text:
        raise ParseError(tool, f"NPU {npu}: no Health value", a.lineno)
    chip_text, ln = get("chip")
    chip = _int(chip_text, tool, ln, "Chip") if chip_text else 0
    def num(key: str, what: str) -> Optional[float]:
        return _number(get(key)[0], tool, get(key)[1], what)

    def pair(key: str, what: str) -> tuple[Optional[int], Optional[int]]:
        return _pair(get(key)[0], tool, get(key)[1], what)

    def whole(key: str, what: str) -> Optional[int]:
        return _int(get(key)[0], tool, get(key)[1], what)

    mem_u, mem_t = pair("memory", "Memory-Usage(MB)")
    hbm_u, hbm_t = pair("hbm", "HBM-Usage(MB)")
    hp_u, hp_t = pair("hugepages", "Hugepages-Usage(page)")
    return NpuChip(
        npu_id=npu, chip_id=0 if chip is None else chip, name=get("name")[0].strip(),
        health=canonical_health(health_text), bus_id=_bus_id(get("bus")[0], tool, get("bus")[1]),
        logic_id=whole("device", "Device"), phy_id=whole("phy", "Phy-ID"),
        power_w=num("power", "Power(W)"), temp_c=num("temp", "Temp(C)"),
        aicore_pct=num("aicore" if "aicore" in values else "util", "AICore(%)"),
        memory_used_mb=mem_u, memory_total_mb=mem_t, hbm_used_mb=hbm_u, hbm_total_mb=hbm_t,
        hugepages_used=hp_u, hugepages_total=hp_t)


def _process_rows(lines: Sequence[_TableLine], header: _TableLine, tool: str) -> list[NpuProcess]:
    assert header.cells is not None
    labels = [_cell_labels(c, _PROCESS_LABELS) for c in header.cells]
    out = []
    for ln in lines:
        if ln.kind != "content":
            continue
        assert ln.cells is not None
        text = " ".join(c.strip() for c in ln.cells).strip()
        if re.match(r"No running processes found", text, re.I):
            continue
        if len(ln.cells) != len(labels):
            raise ParseError(tool, f"process row has {len(ln.cells)} cells, the header {len(labels)}",
                             ln.lineno)
        vals: dict[str, str] = {}
        for cell, labs in zip(ln.cells, labels):
            keys = [lab.key for lab in labs]
            if keys == ["pname"]:  # a process name may contain spaces: take the whole cell
                vals["pname"] = cell.strip()
                continue
            for k, v in _cell_values(cell, labs).items():
                vals.setdefault(k, v)
        npu = _int(vals.get("npu", ""), tool, ln.lineno, "process NPU")
        pid = _int(vals.get("pid", ""), tool, ln.lineno, "Process id")
        if npu is None or pid is None:
            raise ParseError(tool, "process row without NPU or process id", ln.lineno)
        out.append(NpuProcess(
            npu_id=npu, chip_id=_int(vals["chip"], tool, ln.lineno, "process Chip") if "chip" in vals else None,
            pid=pid, name=vals.get("pname", ""),
            memory_mb=_int(vals.get("memory", ""), tool, ln.lineno, "Process memory(MB)")))
    return out


def parse_summary(text: str) -> NpuSummary:
    """Parse ``npu-smi info`` (the table for all NPUs, with its process section)."""
    tool = "npu-smi info"
    lines = _table_lines(text, tool)
    if not lines:
        raise ParseError(tool, "empty output")
    title = None
    for ln in lines:
        if ln.kind == "content":
            m = re.search(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)", ln.text)
            if m:
                title = m
                break
    if title is None:
        raise ParseError(tool, "no title line 'npu-smi X  Version: Y'")
    contents = [i for i, ln in enumerate(lines) if ln.kind == "content"]
    head_at = next((i for i in contents if "Health" in lines[i].text), None)
    if head_at is None:
        raise ParseError(tool, "no device header line (NPU ... Health ...)")
    head2_at = next((i for i in contents if i > head_at), None)
    if head2_at is None or "Bus-Id" not in lines[head2_at].text:
        raise ParseError(tool, "the device header's second line (... Bus-Id ...) is missing",
                         lines[head_at].lineno)
    h1, h2 = lines[head_at], lines[head2_at]
    assert h1.cells is not None and h2.cells is not None
    if len(h1.cells) != len(h2.cells):
        raise ParseError(tool, "the two header lines have different cell counts", h2.lineno)
    head = ([_cell_labels(c, _SUMMARY_LABELS) for c in h1.cells],
            [_cell_labels(c, _SUMMARY_LABELS) for c in h2.cells])
    keys = {lab.key for cell in head[0] + head[1] for lab in cell}
    if "npu" not in keys or "health" not in keys:
        raise ParseError(tool, "device header lacks the NPU or Health column", h1.lineno)
    layout = "new" if "util" in keys else ("910" if "hbm" in keys else "310")

    chips: list[NpuChip] = []
    elided = False
    block: list[_TableLine] = []
    proc_header: Optional[int] = None

    def flush() -> None:
        if len(block) % 2:
            raise ParseError(tool, f"a device block of {len(block)} line(s); rows come in pairs",
                             block[0].lineno)
        for j in range(0, len(block), 2):
            chips.append(_chip_from_rows(block[j], block[j + 1], head, tool))
        block.clear()

    for i in range(head2_at + 1, len(lines)):
        ln = lines[i]
        if ln.kind == "elision":
            elided = True
            flush()
        elif ln.kind == "border":
            flush()
        else:
            assert ln.cells is not None
            if _is_process_header(ln.cells):
                flush()
                proc_header = i
                break
            block.append(ln)
    else:
        flush()
    processes: list[NpuProcess] = []
    if proc_header is not None:
        rest = lines[proc_header + 1:]
        elided = elided or any(ln.kind == "elision" for ln in rest)
        processes = _process_rows(rest, lines[proc_header], tool)
    seen: set[tuple[int, int]] = set()
    for c in chips:
        if (c.npu_id, c.chip_id) in seen:
            raise ParseError(tool, f"NPU {c.npu_id} chip {c.chip_id} is listed twice")
        seen.add((c.npu_id, c.chip_id))
    return NpuSummary(tool_version=title.group(1), driver_version=title.group(2), layout=layout,
                      chips=tuple(chips), processes=tuple(processes), elided=elided,
                      process_section=proc_header is not None)


# --------------------------------------------------------------------------- npu-smi info -m


def parse_mapping(text: str) -> list[ChipMapping]:
    """Parse ``npu-smi info -m`` (card / chip / logic id / chip name; MCU rows have '-')."""
    tool = "npu-smi info -m"
    rows = [(i, ln.strip()) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    if not rows:
        raise ParseError(tool, "empty output")
    lineno, header = rows[0]
    labels = [_norm_key(x) for x in re.split(r"\s{2,}|\t", header) if x.strip()]
    if "npu id" not in labels or "chip id" not in labels:
        raise ParseError(tool, f"header must name 'NPU ID' and 'Chip ID', got {header[:80]!r}", lineno)
    name_last = labels[-1] == "chip name"
    out = []
    for lineno, row in rows[1:]:
        tokens = row.split()
        n = len(labels)
        if len(tokens) < n if not name_last else len(tokens) < n - 1:
            raise ParseError(tool, f"expected {n} columns, got {len(tokens)}", lineno)
        if name_last:
            vals = dict(zip(labels[:-1], tokens[:n - 1]))
            vals["chip name"] = " ".join(tokens[n - 1:])
        else:
            vals = dict(zip(labels, tokens))
        npu = _int(vals["npu id"], tool, lineno, "NPU ID")
        chip = _int(vals["chip id"], tool, lineno, "Chip ID")
        if npu is None or chip is None:
            raise ParseError(tool, "NPU ID and Chip ID must be numbers", lineno)
        out.append(ChipMapping(
            npu_id=npu, chip_id=chip,
            logic_id=_int(vals.get("chip logic id", "-"), tool, lineno, "Chip Logic ID"),
            name=vals.get("chip name", ""),
            phy_id=_int(vals.get("chip phy-id", "-"), tool, lineno, "Chip Phy-ID"),
            slot_id=_int(vals.get("slot id", "-"), tool, lineno, "Slot ID")))
    return out


# --------------------------------------------------------------------------- key : value outputs

_KV = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z][^:]{0,80}?)\s*:(?P<sp>\s?)(?P<value>.*?)\s*$")


def _kv_blocks(text: str, tool: str) -> list[list[tuple[str, str, int]]]:
    """Blank-line separated blocks of (normalized key, value, line). A line indented to the
    value column of the key above it continues that value (multi-line Error Information)."""
    blocks: list[list[tuple[str, str, int]]] = [[]]
    value_col = None
    for i, raw in enumerate(text.expandtabs(8).splitlines(), 1):
        if not raw.strip():
            if blocks[-1]:
                blocks.append([])
            value_col = None
            continue
        indent = len(raw) - len(raw.lstrip())
        if value_col is not None and blocks[-1] and indent >= value_col - 1:
            key, value, ln = blocks[-1][-1]
            blocks[-1][-1] = (key, f"{value}\n{raw.strip()}" if value else raw.strip(), ln)
            continue
        m = _KV.match(raw)
        if not m:
            raise ParseError(tool, f"not a 'key : value' line: {raw.strip()[:60]!r}", i)
        blocks[-1].append((_norm_key(m.group("key")), m.group("value"), i))
        value_col = m.start("value") if m.group("value") else m.end("sp") + 1
    return [b for b in blocks if b]


def parse_detail(text: str, kind: str) -> DetailDoc:
    """Parse a ``npu-smi info -t KIND`` output into key/value maps (see DetailDoc)."""
    tool = f"npu-smi info -t {kind}"
    blocks = _kv_blocks(text, tool)
    if not blocks:
        raise ParseError(tool, "empty output")
    card: dict[str, str] = {}
    chips: dict[int, dict[str, str]] = {}
    mcu: dict[str, str] = {}
    for block in blocks:
        keys = {k: (v, ln) for k, v, ln in reversed(block)}  # first occurrence wins
        name = keys.get("chip name", ("", 0))[0].strip().lower()
        if name == "mcu":
            target = mcu
        elif "chip id" in keys:
            v, ln = keys["chip id"]
            chip = _int(v, tool, ln, "Chip ID")
            if chip is None:
                raise ParseError(tool, "Chip ID must be a number", ln)
            target = chips.setdefault(chip, {})
        else:
            target = card
        for k, (v, _ln) in keys.items():
            target.setdefault(k, v)
    return DetailDoc(kind=kind, card=card, chips=chips, mcu=mcu)


_CODE = re.compile(r"(?:0x)?([0-9A-Fa-f]{8})\b")


def health_detail(doc: DetailDoc, chip_id: Optional[int] = None) -> HealthDetail:
    """State, error codes and information from a ``-t health`` DetailDoc."""
    tool = "npu-smi info -t health"
    state = doc.get(chip_id, "health status", "health")
    if state is None or not state.strip():
        raise ParseError(tool, "no 'Health Status' (or 'Health') line")
    code_text = doc.get(chip_id, "error code") or ""
    codes: list[str] = []
    if code_text.strip().upper() not in _NA:
        rest = _CODE.sub(" ", code_text)
        if re.search(r"[^\s,;]", rest):
            raise ParseError(tool, f"Error Code: expected 8-digit hex codes or NA, got {code_text[:60]!r}")
        codes = [c.upper() for c in _CODE.findall(code_text)]
    info = doc.get(chip_id, "error information") or ""
    info = "; ".join(x.strip() for x in info.splitlines() if x.strip() and x.strip().upper() not in _NA)
    return HealthDetail(state=canonical_health(state.split()[0]), codes=tuple(dict.fromkeys(codes)),
                        information=info)


def parse_list(text: str) -> NpuList:
    """Parse ``npu-smi info -l``."""
    tool = "npu-smi info -l"
    total: Optional[int] = None
    cards = []
    for block in _kv_blocks(text, tool):
        keys = {k: (v, ln) for k, v, ln in block}
        if "total count" in keys:
            total = _int(keys["total count"][0], tool, keys["total count"][1], "Total Count")
        if "npu id" in keys:
            npu = _int(keys["npu id"][0], tool, keys["npu id"][1], "NPU ID")
            if npu is None:
                raise ParseError(tool, "NPU ID must be a number", keys["npu id"][1])
            cc = keys.get("chip count")
            sn = keys.get("serial number", ("", 0))[0].strip()
            cards.append(CardListing(
                npu_id=npu, chip_count=_int(cc[0], tool, cc[1], "Chip Count") if cc else None,
                product_name=keys.get("product name", (None, 0))[0],
                serial=sn if sn.upper() not in _NA else None))
    if total is None and not cards:
        raise ParseError(tool, "neither 'Total Count' nor any 'NPU ID'")
    return NpuList(total=total, cards=tuple(cards))


def parse_proc_mem(text: str) -> list[NpuProcess]:
    """Parse ``npu-smi info -t proc-mem -i N``: 'Process id:P  Process name:X  Process memory(MB):M'."""
    tool = "npu-smi info -t proc-mem"
    npu: Optional[int] = None
    out = []
    for i, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s:
            continue
        m = re.fullmatch(r"NPU ID\s*:\s*(\S+)", s)
        if m:
            npu = _int(m.group(1), tool, i, "NPU ID")
            continue
        m = re.fullmatch(r"Process id\s*:\s*(\d+)\s+Process name\s*:\s*(.*?)\s+Process memory\(MB\)\s*:\s*(\S+)", s)
        if not m:
            raise ParseError(tool, f"not a process line: {s[:60]!r}", i)
        out.append(NpuProcess(npu_id=npu if npu is not None else 0, chip_id=None, pid=int(m.group(1)),
                              name=m.group(2), memory_mb=_int(m.group(3), tool, i, "Process memory(MB)")))
    return out


# --------------------------------------------------------------------------- detector

# Which `npu-smi info` command printed a text: (kind, keys any of which identify it), tried
# in order. Kinds are the `-t` types; "board-chip" is `-t board -i N -c C`.
_DETAIL_SIGNATURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("list", ("total count",)),
    ("current-fault-event", ("fault event count", "fault event information")),
    ("health", ("health status", "health", "error code")),
    ("flash", ("flash count", "flash id")),
    ("ecc", ("hbm single bit error count", "ddr single bit error count",
             "hbm double bit aggregate total err cnt", "ddr double bit aggregate total err cnt")),
    ("board-chip", ("chip type", "vdie id", "ndie id", "die id")),
    ("board", ("board id", "pcie bus info", "pci device id", "compatibility")),
    ("common", ("aicore freq(mhz)", "aicore count", "aicore curfreq(mhz)")),
    ("usages", ("aicore usage rate(%)", "ddr usage rate(%)", "ctrlcpu usage rate(%)",
                "hbm bandwidth usage rate(%)", "ddr bandwidth usage rate(%)")),
    ("memory", ("hbm clock speed(mhz)", "ddr clock speed(mhz)", "hbm manufacturer id")),
    ("sensors", ("soc max temperature (c)", "ndie temperature (c)")),
    ("temp", ("npu temperature (c)", "temperature (c)", "temperature(c)")),
    ("power", ("npu real-time power(w)",)),
)


# First lines of npu-smi's own error messages ("Invalid card id.", "Error parameter of -i",
# "Usage: npu-smi info ...", "This device does not support ...").
_ERROR_LINE = re.compile(r"^(Invalid\b|Error parameter|Usage:\s*npu-smi|.*\bdoes not exist\b|"
                         r".*\bnot support|.*\bfailed\b|.*\bpermission denied)", re.I)


def detect(text: str) -> str:
    """Which command printed ``text``: ``info``, ``info -m``, ``info -l`` or ``info -t KIND``
    (``info -t board-chip`` for ``-t board -c``). Raises ParseError for an npu-smi error
    message or a text that is none of these."""
    stripped = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not stripped:
        raise ParseError(TOOL, "empty output")
    if any(_BORDER.match(s) for s in stripped) and any("npu-smi" in s or "Bus-Id" in s for s in stripped):
        return "info"
    first = stripped[0]
    if _ERROR_LINE.match(first):
        raise ParseError(TOOL, f"npu-smi printed an error: {' / '.join(stripped[:3])[:200]}")
    if re.match(r"NPU ID\s{2,}", first) and "Chip" in first and ":" not in first:
        return "info -m"
    if any(re.match(r"Process id\s*:\s*\d+\s+Process name", s) for s in stripped):
        return "info -t proc-mem"
    keys = set()
    for s in stripped:
        m = _KV.match(s)
        if m:
            keys.add(_norm_key(m.group("key")))
    for kind, sig in _DETAIL_SIGNATURES:
        if keys.intersection(sig):
            return "info -l" if kind == "list" else f"info -t {kind}"
    raise ParseError(TOOL, f"not an npu-smi output I recognize (first line {first[:60]!r})")


# --------------------------------------------------------------------------- normalizing

# Static quality of each field: source (the npu-smi command and column), method, window,
# resolution (in base units) and error bound where Huawei documents one (none is documented).
QUALITY: dict[str, Quality] = {
    F.UTILIZATION: Quality("npu-smi info: AICore(%) (NPU Util(%) in the newer layout)", "sampled", None, 0.01),
    F.MEMORY_USED: Quality("npu-smi info: HBM-Usage(MB) used (Memory-Usage(MB) on chips without HBM)", "measured", None, MIB),
    F.MEMORY_TOTAL: Quality("npu-smi info: HBM-Usage(MB) total (Memory-Usage(MB) on chips without HBM)", "measured", None, MIB),
    "memory_ddr_used_bytes": Quality("npu-smi info: Memory-Usage(MB) used, on chips that also have HBM", "measured", None, MIB),
    "memory_ddr_total_bytes": Quality("npu-smi info: Memory-Usage(MB) total, on chips that also have HBM", "measured", None, MIB),
    F.TEMP_CORE: Quality("npu-smi info: Temp(C)", "measured", None, 1.0),
    F.POWER: Quality("npu-smi info: Power(W)", "measured", None, 0.1),
    "hugepages_used_pages": Quality("npu-smi info: Hugepages-Usage(page) used", "measured", None, 1.0),
    "hugepages_total_pages": Quality("npu-smi info: Hugepages-Usage(page) total", "measured", None, 1.0),
    # per-card details, refreshed at their own cadence (age_seconds says how old)
    F.MEMORY_UTILIZATION: Quality("npu-smi info -t usages: HBM Bandwidth Usage Rate(%) (DDR on chips without HBM)", "sampled", None, 0.01),
    "aicpu_utilization_ratio": Quality("npu-smi info -t usages: Aicpu Usage Rate(%)", "sampled", None, 0.01),
    "ctrlcpu_utilization_ratio": Quality("npu-smi info -t usages: Ctrlcpu Usage Rate(%)", "sampled", None, 0.01),
    "vector_utilization_ratio": Quality("npu-smi info -t usages: Aivector/Vectorcore Usage Rate(%)", "sampled", None, 0.01),
    F.CLOCK_COMPUTE: Quality("npu-smi info -t common: Aicore curFreq(MHZ)", "measured", None, 1e6),
    "clock_compute_max_hertz": Quality("npu-smi info -t common: Aicore Freq(MHZ)", "measured", None, 1e6),
    "aicore_count": Quality("npu-smi info -t common: Aicore Count", "measured", None, 1.0),
    F.CLOCK_MEMORY: Quality("npu-smi info -t memory: HBM Clock Speed(MHz) (DDR on chips without HBM)", "measured", None, 1e6),
    F.TEMP_MEMORY: Quality("npu-smi info -t memory: HBM Temperature(C)", "measured", None, 1.0),
    F.TEMP_BOARD: Quality("npu-smi info -t temp: hottest MCU board sensor (LM75*)", "measured", None, 1.0),
    F.ECC_CORRECTED: Quality("npu-smi info -t ecc: HBM+DDR Single Bit Aggregate Total Err Cnt", "measured", None, 1.0),
    F.ECC_UNCORRECTED: Quality("npu-smi info -t ecc: HBM+DDR Double Bit Aggregate Total Err Cnt", "measured", None, 1.0),
}


def _put(out: dict[str, Reading], name: str, value: Optional[float], age: float = 0.0) -> None:
    out[name] = reading(QUALITY, name, value, age)


def summary_readings(chip: NpuChip) -> dict[str, Reading]:
    """Readings of one chip from the summary table, in base units."""
    r: dict[str, Reading] = {}
    _put(r, F.UTILIZATION, None if chip.aicore_pct is None else chip.aicore_pct / 100.0)
    has_hbm = bool(chip.hbm_total_mb)
    used, total = ((chip.hbm_used_mb, chip.hbm_total_mb) if has_hbm
                   else (chip.memory_used_mb, chip.memory_total_mb))
    _put(r, F.MEMORY_USED, None if used is None else used * MIB)
    _put(r, F.MEMORY_TOTAL, None if total is None else total * MIB)
    if has_hbm and chip.memory_total_mb:
        _put(r, "memory_ddr_used_bytes", None if chip.memory_used_mb is None else chip.memory_used_mb * MIB)
        _put(r, "memory_ddr_total_bytes", chip.memory_total_mb * MIB)
    _put(r, F.TEMP_CORE, chip.temp_c)
    _put(r, F.POWER, chip.power_w)
    if chip.hugepages_total is not None:
        _put(r, "hugepages_used_pages", chip.hugepages_used)
        _put(r, "hugepages_total_pages", chip.hugepages_total)
    return r


def _pct(doc: DetailDoc, chip: int, *keys: str) -> Optional[float]:
    v = doc.get(chip, *keys)
    if v is None:
        return None
    n = _number(v, f"npu-smi info -t {doc.kind}", None, keys[0])
    return None if n is None else n / 100.0


def _num_key(doc: DetailDoc, chip: int, *keys: str) -> Optional[float]:
    v = doc.get(chip, *keys)
    return None if v is None else _number(v, f"npu-smi info -t {doc.kind}", None, keys[0])


# Fields the summary table already gives: the collector takes them from the summary only
# (one source per field); ``parse npu-smi FILE`` of a single -t output shows them from there.
DETAIL_ONLY_QUALITY: dict[str, Quality] = {
    F.POWER: Quality("npu-smi info -t power|common: NPU Real-time Power(W)", "measured", None, 0.1),
    F.TEMP_CORE: Quality("npu-smi info -t temp|common: NPU Temperature (C)", "measured", None, 1.0),
}


def detail_readings(doc: DetailDoc, chip: int, age: float = 0.0, *,
                    summary_fields: bool = False) -> dict[str, Reading]:
    """Readings a ``-t usages|common|memory|ecc|temp`` output adds for one chip (fields the
    summary does not carry; with ``summary_fields`` also power and chip temperature). Keys
    the output lacks give no entry."""
    r: dict[str, Reading] = {}

    def put(name: str, value: Optional[float], present: bool) -> None:
        if present:
            _put(r, name, value, age)

    if summary_fields:
        for name, keys in ((F.POWER, ("npu real-time power(w)",)),
                           (F.TEMP_CORE, ("npu temperature (c)", "temperature(c)", "temperature (c)"))):
            if doc.get(chip, *keys) is not None:
                v = _num_key(doc, chip, *keys)
                q = DETAIL_ONLY_QUALITY[name]
                r[name] = Reading(v, q) if v is not None else Reading(None, q.with_status("unsupported"))

    if doc.kind == "usages":
        bw_key = "hbm bandwidth usage rate(%)" if _num_key(doc, chip, "hbm capacity(mb)") else "ddr bandwidth usage rate(%)"
        put(F.MEMORY_UTILIZATION, _pct(doc, chip, bw_key), doc.get(chip, bw_key) is not None)
        for name, keys in (("aicpu_utilization_ratio", ("aicpu usage rate(%)",)),
                           ("ctrlcpu_utilization_ratio", ("ctrlcpu usage rate(%)",)),
                           ("vector_utilization_ratio", ("aivector usage rate(%)", "vectorcore usage rate(%)"))):
            put(name, _pct(doc, chip, *keys), doc.get(chip, *keys) is not None)
    elif doc.kind == "common":
        for name, key, scale in ((F.CLOCK_COMPUTE, "aicore curfreq(mhz)", 1e6),
                                 ("clock_compute_max_hertz", "aicore freq(mhz)", 1e6),
                                 ("aicore_count", "aicore count", 1.0)):
            v = _num_key(doc, chip, key)
            put(name, None if v is None else v * scale, doc.get(chip, key) is not None)
    elif doc.kind == "memory":
        hbm = _num_key(doc, chip, "hbm capacity(mb)")
        key = "hbm clock speed(mhz)" if hbm else "ddr clock speed(mhz)"
        clk = _num_key(doc, chip, key)
        put(F.CLOCK_MEMORY, clk * 1e6 if clk else None, doc.get(chip, key) is not None)  # 0 MHz: none fitted
        if hbm:
            put(F.TEMP_MEMORY, _num_key(doc, chip, "hbm temperature(c)", "hbm temperature (c)"),
                doc.get(chip, "hbm temperature(c)", "hbm temperature (c)") is not None)
    elif doc.kind == "ecc":
        for name, what in ((F.ECC_CORRECTED, "single"), (F.ECC_UNCORRECTED, "double")):
            keys = [f"{mem} {what} bit aggregate total err cnt" for mem in ("hbm", "ddr")]
            vals = [_num_key(doc, chip, k) for k in keys]
            present = [doc.get(chip, k) is not None for k in keys]
            known = [v for v in vals if v is not None]
            put(name, sum(known) if known else None, any(present))
    elif doc.kind == "temp":
        temps = [_number(v, "npu-smi info -t temp", None, k) for k, v in doc.mcu.items()
                 if re.search(r"\(c\)$", k) and k != "temperature(c)"]
        known = [t for t in temps if t is not None]
        put(F.TEMP_BOARD, max(known) if known else None, bool(doc.mcu))
    return r


def chip_uuid(chip: NpuChip, board: Optional[DetailDoc], board_chip: Optional[DetailDoc],
              multi_chip: bool) -> str:
    """A stable id: the die id (VDie/Die/DDie ID) where npu-smi prints one, else the board
    serial (plus the chip number on multi-chip cards), else the PCI address."""
    for doc in (board_chip, board):
        if doc is None:
            continue
        die = doc.get(chip.chip_id, "vdie id", "die id", "ddie id")
        if die:
            hexes = re.findall(r"[0-9A-Fa-f]{8}", die)
            if hexes and not all(set(h) == {"0"} for h in hexes):
                return "ascend-" + "-".join(h.lower() for h in hexes)
    if board is not None:
        sn = (board.get(chip.chip_id, "serial number") or "").strip()
        if sn and sn.upper() not in _NA and not re.fullmatch(r"x+", sn, re.I):
            return f"ascend-sn-{sn}" + (f"-c{chip.chip_id}" if multi_chip else "")
    if chip.bus_id:
        return f"ascend-pci-{chip.bus_id}" + (f"-c{chip.chip_id}" if multi_chip else "")
    return f"ascend-npu{chip.npu_id}-c{chip.chip_id}"


# --------------------------------------------------------------------------- health


def _fault(code: str, message: str, source: str) -> Fault:
    return table_fault("ascend", code, message, source)


def health_state(reasons: Sequence[Fault], vendor_state: str) -> str:
    """The model's health from the vendor state and the active faults: the worst severity
    (critical -> failed, warning -> degraded, info -> ok); UNKNOWN (device absent or not
    started, per npu-smi) with no fault worse than info is ``unknown``, never failed."""
    worst = worst_state(reasons)
    if worst == "ok" and vendor_state not in ("OK", "Warning", "Alarm", "Critical"):
        return "unknown"  # UNKNOWN: the device is absent or not started; cannot tell
    return worst


# --------------------------------------------------------------------------- parse npu-smi FILE


def _sample(ident: DeviceIdentity, readings: Mapping[str, Reading], now: float,
            health: Health = Health(), processes: tuple = (), reported: bool = False) -> DeviceSample:
    return DeviceSample(identity=ident, timestamp=now, readings=dict(readings), health=health,
                        faults=tuple(health.reasons), processes=processes, processes_reported=reported)


def summary_snapshot(summary: NpuSummary, node: str = "", now: float = 0.0) -> NodeSnapshot:
    """The model of one ``npu-smi info`` text (what ``parse npu-smi FILE`` prints)."""
    multi = _multi_chip_cards(summary.chips)
    devices = []
    for ordinal, chip in enumerate(sorted(summary.chips, key=lambda c: (c.npu_id, c.chip_id))):
        uuid = chip_uuid(chip, None, None, chip.npu_id in multi)
        ident = _identity(chip, uuid, _logic_index(chip, ordinal, multi), summary.driver_version)
        reasons = () if chip.health == "OK" else (_fault(chip.health, f"NPU {chip.npu_id} chip {chip.chip_id}",
                                                         "npu-smi info"),)
        procs = tuple(_process(p, uuid) for p in summary.processes if _owns(chip, p, multi))
        devices.append(_sample(ident, summary_readings(chip), now,
                               Health(health_state(reasons, chip.health), reasons), procs,
                               summary.process_section))
    return NodeSnapshot(node=node, time=now, devices=tuple(devices))


def _multi_chip_cards(chips: Iterable[NpuChip]) -> set[int]:
    count: dict[int, int] = {}
    for c in chips:
        count[c.npu_id] = count.get(c.npu_id, 0) + 1
    return {n for n, k in count.items() if k > 1}


def _logic_index(chip: NpuChip, ordinal: int, multi: set[int]) -> int:
    if chip.logic_id is not None:
        return chip.logic_id
    return chip.npu_id if chip.npu_id not in multi else ordinal


def _identity(chip: NpuChip, uuid: str, index: int, driver: str, *, firmware: Optional[str] = None,
              serial: Optional[str] = None, numa: Optional[int] = None, name: Optional[str] = None) -> DeviceIdentity:
    raw = name or chip.name
    return DeviceIdentity(vendor="ascend", kind="npu", index=index, uuid=uuid,
                          model=profiles.normalize_model("ascend", raw), pci_address=chip.bus_id,
                          numa_node=numa, driver_version=driver if driver and driver.upper() not in _NA else None,
                          firmware_version=firmware, name=raw or None, serial=serial)


def _owns(chip: NpuChip, p: NpuProcess, multi: set[int]) -> bool:
    if p.npu_id != chip.npu_id:
        return False
    return p.chip_id == chip.chip_id if p.chip_id is not None else (chip.chip_id == 0 or chip.npu_id not in multi)


def _process(p: NpuProcess, uuid: str) -> ProcessSample:
    return ProcessSample(pid=p.pid, device_uuid=uuid, name=p.name or None,
                         memory_bytes=None if p.memory_mb is None else p.memory_mb * MIB)


def _detail_snapshot(doc: DetailDoc, node: str = "") -> NodeSnapshot:
    npu = doc.npu_id if doc.npu_id is not None else 0
    devices = []
    for chip in doc.chip_ids():
        bus = doc.get(chip, "pcie bus info")
        fake = NpuChip(npu_id=npu, chip_id=chip, name=doc.get(chip, "chip name", "npu name") or "",
                       bus_id=_bus_id(bus, f"npu-smi info -t {doc.kind}", None) if bus else None)
        uuid = chip_uuid(fake, doc if doc.kind == "board" else None, doc if doc.kind == "board-chip" else None,
                         len(doc.chips) > 1)
        ident = _identity(fake, uuid, npu, doc.get(chip, "software version") or "",
                          firmware=doc.get(chip, "firmware version"))
        readings = detail_readings(doc, chip, summary_fields=True)
        health = Health()
        if doc.kind == "health":
            h = health_detail(doc, chip)
            reasons = tuple(_fault(c, h.information, "npu-smi info -t health")
                            for c in ((h.state,) if h.state != "OK" else ()) + h.codes)
            health = Health(health_state(reasons, h.state), reasons)
        devices.append(_sample(ident, readings, 0.0, health))
    return NodeSnapshot(node=node, time=0.0, devices=tuple(devices))


def parse_any(text: str) -> Any:
    """``hetero-exporter parse npu-smi FILE``: detect the command, parse it. Device outputs
    (the summary, ``-t`` details) give a NodeSnapshot; ``-m``, ``-l`` and the others a
    ParsedOutput naming the command."""
    kind = detect(text)
    if kind == "info":
        return summary_snapshot(parse_summary(text))
    if kind == "info -m":
        return ParsedOutput(kind, [dataclasses.asdict(m) for m in parse_mapping(text)])
    if kind == "info -l":
        return ParsedOutput(kind, parse_list(text))
    t = kind.split()[-1]
    if t == "proc-mem":
        return ParsedOutput(kind, [dataclasses.asdict(p) for p in parse_proc_mem(text)])
    doc = parse_detail(text, t)
    if t in ("health", "usages", "common", "memory", "ecc", "temp", "board", "board-chip", "power"):
        return _detail_snapshot(doc)
    return ParsedOutput(kind, doc)


# --------------------------------------------------------------------------- collector

# Seconds between refreshes of each per-card detail kind (0 disables a kind).
DEFAULT_DETAIL_INTERVALS = {"usages": 60.0, "common": 60.0, "memory": 300.0, "ecc": 300.0}
_TOOL_DIRS = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"


@dataclass
class _Detail:
    doc: Optional[DetailDoc] = None
    fetched_at: float = 0.0  # clock() time of the fetch
    due: float = 0.0  # clock() time of the next refresh
    failures: int = 0
    disabled: bool = False


@dataclass
class _Known:
    """What the collector pinned about a chip the first time it saw it."""

    identity: DeviceIdentity
    chip: NpuChip


class NpuSmiCollector:
    name = "npu_smi"
    vendor = "ascend"

    def __init__(self, exe: str, *, clock: Callable[[], float] = time.time, timeout: float = 5.0,
                 interval: float = 10.0, settings: Optional[Mapping[str, Any]] = None,
                 runner: Optional[Runner] = None, extra_env: Callable[[], Mapping[str, str]] = dict):
        settings = dict(settings or {})
        self._clock = clock
        # per-call environment additions (the simulation's clock) travel with each call
        self._cli = CliCalls(exe, TOOL, runner=runner, extra_env=extra_env,
                             workers=int(settings.get("parallel_calls", 4)))
        # finish before the sampler's deadline, so a hung npu-smi is killed by us, not abandoned
        self._budget = max(0.2, float(settings.get("budget_fraction", 0.9)) * timeout)
        self._interval = max(0.1, interval)
        self._intervals = {k: float(v) for k, v in
                           {**DEFAULT_DETAIL_INTERVALS, **(settings.get("detail_intervals") or {})}.items()
                           if float(v) > 0}
        self._detail_budget = settings.get("detail_calls_per_cycle")
        self._health_budget = int(settings.get("health_calls_per_cycle", 4))
        self._numa = NumaNodes(str(settings.get("sysfs_root", "/sys")))
        self._episodes = FaultEpisodes()
        self._known: dict[tuple[int, int], _Known] = {}
        self._boards: dict[int, Optional[DetailDoc]] = {}  # card -> board output (None: failed)
        self._board_chips: dict[tuple[int, int], Optional[DetailDoc]] = {}
        self._mapping: Optional[dict[tuple[int, int], ChipMapping]] = None
        self._late_tries: dict[int, int] = {}  # card -> identity calls that ran out of time
        self._details: dict[tuple[int, str], _Detail] = {}
        self._health: dict[tuple[int, int], HealthDetail] = {}
        self._health_at: dict[tuple[int, int], float] = {}

    @property
    def calls(self) -> int:
        """npu-smi runs made by this collector (benchmarks)."""
        return self._cli.calls

    # ------------------------------------------------------------------ identity
    def _learn_identities(self, summary: NpuSummary, deadline: float) -> None:
        new = [c for c in summary.chips if (c.npu_id, c.chip_id) not in self._known]
        if not new:
            return
        multi = _multi_chip_cards(summary.chips)
        cards = sorted({c.npu_id for c in new if c.npu_id not in self._boards})
        late: set[int] = set()  # cards whose identity calls ran out of time: asked again next cycle
        for card, out in self._cli.map([(n, ["info", "-t", "board", "-i", str(n)]) for n in cards], deadline):
            if isinstance(out, TimeoutError) and self._late_tries.get(card, 0) < 2:
                self._late_tries[card] = self._late_tries.get(card, 0) + 1
                late.add(card)
                continue
            self._boards[card] = self._parsed(out, "board", f"card {card}")
        new = [c for c in new if c.npu_id not in late]
        chip_jobs = []
        for c in new:
            board = self._boards.get(c.npu_id)
            has_id = board is not None and (board.get(c.chip_id, "ddie id", "vdie id", "die id")
                                            or (board.get(c.chip_id, "serial number") or "NA").upper() not in _NA)
            if not has_id and summary.layout != "new" and (c.npu_id, c.chip_id) not in self._board_chips:
                chip_jobs.append(((c.npu_id, c.chip_id),
                                  ["info", "-t", "board", "-i", str(c.npu_id), "-c", str(c.chip_id)]))
        for key, out in self._cli.map(chip_jobs, deadline):
            if isinstance(out, TimeoutError) and self._late_tries.get(key[0], 0) < 2:
                self._late_tries[key[0]] = self._late_tries.get(key[0], 0) + 1
                late.add(key[0])
                continue
            self._board_chips[key] = self._parsed(out, "board-chip", f"card {key[0]} chip {key[1]}")
        new = [c for c in new if c.npu_id not in late]
        if self._mapping is None and any(c.logic_id is None for c in new if c.npu_id in multi):
            try:
                self._mapping = {(m.npu_id, m.chip_id): m for m in parse_mapping(self._cli.call(["info", "-m"], deadline))}
            except Exception as e:  # noqa: BLE001 - logic ids then fall back to the ordinal
                log.warning("npu-smi info -m failed: %s", e)
                self._mapping = {}
        ordinal = {(c.npu_id, c.chip_id): i for i, c in
                   enumerate(sorted(summary.chips, key=lambda c: (c.npu_id, c.chip_id)))}
        for c in new:
            key = (c.npu_id, c.chip_id)
            board, board_chip = self._boards.get(c.npu_id), self._board_chips.get(key)
            uuid = chip_uuid(c, board, board_chip, c.npu_id in multi)
            m = (self._mapping or {}).get(key)
            logic = c.logic_id if c.logic_id is not None else (m.logic_id if m is not None else None)
            index = logic if logic is not None else _logic_index(c, ordinal[key], multi)
            fw = next((d.get(c.chip_id, "firmware version") for d in (board_chip, board)
                       if d is not None and d.get(c.chip_id, "firmware version")), None)
            sn = board.get(c.chip_id, "serial number") if board is not None else None
            ident = _identity(c, uuid, index, summary.driver_version, firmware=fw,
                              serial=sn if sn and sn.upper() not in _NA else None,
                              numa=self._numa(c.bus_id), name=c.name or (m.name if m else None))
            self._known[key] = _Known(ident, c)

    @staticmethod
    def _parsed(out: Any, kind: str, what: str) -> Optional[DetailDoc]:
        if isinstance(out, Exception):
            log.warning("npu-smi info -t %s (%s) failed: %s", kind, what, out)
            return None
        try:
            return parse_detail(out, kind)
        except ParseError as e:
            log.warning("npu-smi info -t %s (%s): %s", kind, what, e)
            return None

    # ------------------------------------------------------------------ details
    def _detail_jobs(self, cards: Sequence[int], now: float) -> list[tuple[tuple[int, str], list[str]]]:
        due = []
        for card in cards:
            for kind, every in self._intervals.items():
                d = self._details.setdefault((card, kind), _Detail(due=now))
                if d.due - now > 2 * every:  # the clock went back: do not wait for it
                    d.due = now
                if not d.disabled and d.due <= now:
                    due.append((d.due, card, kind))
        if self._detail_budget is not None:
            budget = int(self._detail_budget)
        else:  # the steady rate, rounded up, plus one to drain the start-up backlog
            rate = sum(len(cards) * self._interval / every for every in self._intervals.values())
            budget = math.ceil(rate) + 1 if rate else 0
        due.sort()
        return [((card, kind), ["info", "-t", kind, "-i", str(card)]) for _, card, kind in due[:budget]]

    def _refresh_details(self, cards: Sequence[int], deadline: float) -> None:
        # scheduled on the collector's clock (the scenario clock when simulating), so a
        # simulated node refreshes at the same cadence in scenario time
        now = self._clock()
        for (card, kind), out in self._cli.map(self._detail_jobs(cards, now), deadline):
            d = self._details[(card, kind)]
            d.due = now + self._intervals[kind]
            doc = self._parsed(out, kind, f"card {card}")
            try:
                for chip in doc.chip_ids() if doc is not None else ():  # values must be readable too
                    detail_readings(doc, chip)
            except ParseError as e:
                log.warning("npu-smi info -t %s -i %d: %s", kind, card, e)
                doc = None
            if doc is None:
                d.failures += 1
                if d.failures >= 3:  # not supported on this product/driver: stop asking
                    d.disabled = True
                    log.warning("npu-smi info -t %s -i %d failed 3 times; not asked again", kind, card)
                continue
            d.doc, d.fetched_at, d.failures = doc, now, 0

    def _refresh_health(self, summary: NpuSummary, deadline: float) -> None:
        for c in summary.chips:
            if c.health == "OK":
                self._health.pop((c.npu_id, c.chip_id), None)
        bad = sorted((c for c in summary.chips if c.health != "OK"),
                     key=lambda c: self._health_at.get((c.npu_id, c.chip_id), 0.0))
        jobs = []
        for c in bad[:self._health_budget]:
            args = ["info", "-t", "health", "-i", str(c.npu_id)]
            if summary.layout != "new":
                args += ["-c", str(c.chip_id)]
            jobs.append(((c.npu_id, c.chip_id), args))
        for key, out in self._cli.map(jobs, deadline):
            self._health_at[key] = time.monotonic()
            doc = self._parsed(out, "health", f"NPU {key[0]} chip {key[1]}")
            try:
                if doc is not None:
                    self._health[key] = health_detail(doc, None)
            except ParseError as e:
                log.warning("npu-smi health for NPU %d chip %d: %s", key[0], key[1], e)

    def _details_of(self, c: NpuChip, now: float) -> dict[str, Reading]:
        out: dict[str, Reading] = {}
        for kind, every in self._intervals.items():
            d = self._details.get((c.npu_id, kind))
            if d is None or d.doc is None:
                continue
            age = max(0.0, now - d.fetched_at)
            try:
                extra = detail_readings(d.doc, c.chip_id, age)
            except ParseError as e:  # a chip block the refresh did not check
                log.warning("npu-smi info -t %s -i %d: %s", kind, c.npu_id, e)
                continue
            for name, rd in extra.items():
                out[name] = rd if age <= 3 * every else Reading(rd.value, rd.quality.with_status("stale", age))
        return out

    # ------------------------------------------------------------------ collect
    def collect(self) -> list[DeviceSample]:
        deadline = time.monotonic() + self._budget
        now = self._clock()
        summary = parse_summary(self._cli.call(["info"], deadline))
        self._learn_identities(summary, deadline)
        self._refresh_health(summary, deadline)
        if deadline - time.monotonic() > 0.25 * self._budget:  # details never cost the summary
            self._refresh_details(sorted({c.npu_id for c in summary.chips}), deadline)
        multi = _multi_chip_cards(summary.chips)
        out = []
        for c in summary.chips:
            k = self._known.get((c.npu_id, c.chip_id))
            ident = k.identity if k is not None else _identity(  # no identity in time: by bus id
                c, chip_uuid(c, None, None, c.npu_id in multi), c.npu_id, summary.driver_version,
                numa=self._numa(c.bus_id))
            readings = summary_readings(c)
            for name, rd in self._details_of(c, now).items():
                readings.setdefault(name, rd)
            detail = self._health.get((c.npu_id, c.chip_id))
            info = detail.information if detail else ""
            where = f"NPU {c.npu_id} chip {c.chip_id}" + (f" ({info})" if info else "")
            codes = () if c.health == "OK" else (c.health,) + (detail.codes if detail else ())
            reasons = self._episodes.update(ident.uuid, [_fault(code, where, "npu-smi") for code in dict.fromkeys(codes)],
                                            now)
            procs = tuple(_process(p, ident.uuid) for p in summary.processes if _owns(c, p, multi))
            out.append(DeviceSample(identity=ident, timestamp=now, readings=readings,
                                    health=Health(health_state(reasons, c.health), reasons),
                                    faults=self._episodes.faults(ident.uuid), processes=procs,
                                    processes_reported=summary.process_section))
        if not summary.elided:  # a shortened capture does not mean chips were lost
            present = {(c.npu_id, c.chip_id) for c in summary.chips}
            for key, k in self._known.items():
                if key not in present:
                    out.append(self._episodes.lost(
                        k.identity, _fault("missing", f"NPU {key[0]} chip {key[1]}", "npu-smi info"), now))
        return out


def _install_fake(scenario: Any, clock: Any, workdir: Optional[str]) -> Any:
    from hetero_exporter.collectors import npu_smi_fake  # simulation only
    return npu_smi_fake.install(scenario, clock, workdir)


def create(options: CollectorOptions) -> NpuSmiCollector:
    """The npu-smi collector: the real tool (``settings.path``, default ``npu-smi`` on PATH or in
    /usr/local/sbin), or, when simulating, a fake npu-smi executable written into
    ``options.workdir``."""
    return build(options, NpuSmiCollector, _install_fake, "npu-smi", _TOOL_DIRS, "Ascend driver tools not installed")
