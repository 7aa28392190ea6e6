"""Pure parsers for what ``npu-smi`` prints, and a detector that says which command printed a
text (collectors/npu_smi.py turns the results into the model and runs the tool).

Layouts are read by structure (column positions come from the header lines of each cell, not
from fixed offsets): the 310 table (``Chip Device`` second row, no HBM), the 910A/910B tables
with and without ``Hugepages-Usage(page)``, and the newer layout with ``NPU ID | Name`` cells
and ``NPU Util(%)`` (Ascend 950 documentation); ``-m`` and ``-l``; the ``key : value``
outputs of ``-t TYPE`` (blank-line separated blocks per chip, multi-line values indented to
the value column, or not starting with a key, continue the value above: real nodes print
multi-line Error Code / Error Information), read by hetero_exporter.sdk.blocks; the box
tables by hetero_exporter.sdk.tables; ``info -t topo`` (the link matrix, read by
sdk.tables.parse_matrix). Lines of ``...`` (a capture shortened by hand) are skipped and
flagged ``elided``. Values stay in npu-smi's units here (W, C, %, MB, pages); the NA
spellings of sdk.values are None. Malformed text raises ParseError naming the command and
the line.

``info -t topo``: NO REAL CAPTURE was at hand. The parser follows the documented layout (an
``nvidia-smi topo -m`` style matrix: a header ``NPU0 NPU1 ... CPU Affinity``, one row per
NPU, the connection words ``X`` (self), ``HCCS``, ``PIX``, ``PXB``, ``PHB``, ``SYS``, ``SIO``,
``HCCS_SW``, then a ``Legend:``; the connection kinds are those of CANN's
aclrtGetDevicesTopo, hiascend.com API reference) and reads it by structure.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from hetero_exporter.sdk import blocks as kvblocks
from hetero_exporter.sdk import pciaddr, tables, values
from hetero_exporter.sdk.contract import ParseError

TOOL = "npu-smi"

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
    # npu-smi 26.0's "Process id in container": the pid in the container's pid namespace
    container_pid: Optional[int] = None


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
    # why the end of the text was not read: its last line cut off mid-row (a published output, or
    # the runner's output cap); what came before it is whole and read. None: nothing was cut.
    cut: Optional[str] = None

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
            v = values.integer(block.get("npu id"))
            if v is not None:
                return v
        return None

    def get(self, chip_id: Optional[int], *keys: str) -> Optional[str]:
        """The first of ``keys`` found in the chip's block, else at card level."""
        own = self.chips.get(chip_id) if chip_id is not None else None
        blocks = ([own] if own is not None else []) + [self.card]
        if chip_id is None:
            blocks += list(self.chips.values())
        for block in blocks:
            for k in keys:
                if k in block:
                    return block[k]
        return None

    def number(self, chip_id: Optional[int], *keys: str) -> Optional[float]:
        """The first of ``keys`` (``get``) as a number; None when absent or NA."""
        return values.checked_number(self.get(chip_id, *keys), f"npu-smi info -t {self.kind}", keys[0])

    def ratio(self, chip_id: Optional[int], *keys: str) -> Optional[float]:
        """A percentage (``number``) as a ratio 0..1."""
        n = self.number(chip_id, *keys)
        return None if n is None else n / 100.0

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


def is_na(text: Optional[str]) -> bool:
    return values.is_na(text)


_HEALTH_WORDS = {"ok": "OK", "warning": "Warning", "alarm": "Alarm", "critical": "Critical",
                 "unknown": "UNKNOWN"}


def canonical_health(word: str) -> str:
    """npu-smi health words in their documented spelling; other words kept as printed."""
    w = word.strip()
    return _HEALTH_WORDS.get(w.lower(), w)


_norm_key = kvblocks.norm_key


# --------------------------------------------------------------------------- box tables
#
# The summary is a box table (hetero_exporter.sdk.tables): a header cell holds labels side
# by side ("Power(W)    Temp(C)"); each value group goes to the label nearest its column.

_BORDER = tables.BORDER
_Label = tables.Label
_cell_labels = tables.cell_labels
_cell_values = tables.cell_values

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
    ("Process id in container", "cpid"), ("Process memory(MB)", "memory"), ("Process name", "pname"),
    ("Process id", "pid"),
    ("NPU ID", "npu"), ("Chip", "chip"), ("NPU", "npu"),
)


def _table_lines(text: str, tool: str) -> list[tables.BoxLine]:
    return tables.box_lines(text, tool, strict=True)


# --------------------------------------------------------------------------- npu-smi info


def _is_process_header(cells: Sequence[str]) -> bool:
    joined = "|".join(cells)
    return "Process id" in joined or "Process name" in joined


def _chip_from_rows(a: tables.BoxLine, b: tables.BoxLine, head: tuple[list[list[_Label]], list[list[_Label]]],
                    tool: str) -> NpuChip:
    vals = tables.record_values([a, b], head, tool)

    def get(key: str) -> tuple[str, Optional[int]]:
        v = vals.get(key)
        return (v[0], v[1]) if v else ("", a.lineno)

    npu_text, ln = get("npu")
    npu = values.checked_integer(npu_text, tool, "NPU", ln)
    if npu is None:
        raise ParseError(tool, "a device row without an NPU id", a.lineno)
    health_text, _ = get("health")
    if not health_text:
        raise ParseError(tool, f"NPU {npu}: no Health value", a.lineno)
    chip_text, ln = get("chip")
    chip = values.checked_integer(chip_text, tool, "Chip", ln) if chip_text else 0
    def num(key: str, what: str) -> Optional[float]:
        return values.checked_number(get(key)[0], tool, what, get(key)[1])

    def pair(key: str, what: str) -> tuple[Optional[int], Optional[int]]:
        """'2003 / 15039' -> (2003, 15039); 'NA' or '' -> (None, None)."""
        text, line = get(key)
        try:
            got = values.halves(text)
        except ValueError:
            raise ParseError(tool, f"{what}: expected 'used / total', got {text.strip()[:40]!r}", line) from None
        return (None, None) if got is None else (whole_of(got[0], line, what), whole_of(got[1], line, what))

    def whole_of(text: str, line: Optional[int], what: str) -> Optional[int]:
        return values.checked_integer(text, tool, what, line)

    def whole(key: str, what: str) -> Optional[int]:
        return whole_of(get(key)[0], get(key)[1], what)

    mem_u, mem_t = pair("memory", "Memory-Usage(MB)")
    hbm_u, hbm_t = pair("hbm", "HBM-Usage(MB)")
    hp_u, hp_t = pair("hugepages", "Hugepages-Usage(page)")
    return NpuChip(
        npu_id=npu, chip_id=0 if chip is None else chip, name=get("name")[0].strip(),
        health=canonical_health(health_text),
        bus_id=values.checked_pci(get("bus")[0], tool, "Bus-Id", get("bus")[1], default_function=None),
        logic_id=whole("device", "Device"), phy_id=whole("phy", "Phy-ID"),
        power_w=num("power", "Power(W)"), temp_c=num("temp", "Temp(C)"),
        aicore_pct=num("aicore" if "aicore" in vals else "util", "AICore(%)"),
        memory_used_mb=mem_u, memory_total_mb=mem_t, hbm_used_mb=hbm_u, hbm_total_mb=hbm_t,
        hugepages_used=hp_u, hugepages_total=hp_t)


def _process_rows(lines: Sequence[tables.BoxLine], header: tables.BoxLine, tool: str) -> list[NpuProcess]:
    labels = [_cell_labels(c, _PROCESS_LABELS) for c in header.cells]
    out = []
    for ln in lines:
        if ln.kind != "row":
            continue
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
        npu = values.checked_integer(vals.get("npu", ""), tool, "process NPU", ln.lineno)
        pid = values.checked_integer(vals.get("pid", ""), tool, "Process id", ln.lineno)
        if npu is None or pid is None:
            raise ParseError(tool, "process row without NPU or process id", ln.lineno)
        out.append(NpuProcess(
            npu_id=npu,
            chip_id=values.checked_integer(vals["chip"], tool, "process Chip", ln.lineno) if "chip" in vals else None,
            pid=pid, name=vals.get("pname", ""),
            memory_mb=values.checked_integer(vals.get("memory", ""), tool, "Process memory(MB)", ln.lineno),
            container_pid=values.checked_integer(vals.get("cpid", ""), tool, "Process id in container", ln.lineno)))
    return out


def _cut_tail(text: str, tool: str) -> tuple[str, Optional[str]]:
    """``text`` without a last line cut off mid-row (``| No running processes found in NPU 0``
    with no closing bar: a published output that stops there, or the runner's output cap), and
    the reason it was left out; (text, None) when the last line is whole. Only the last
    non-blank line is judged: a broken line with whole lines after it is still a ParseError."""
    lines = tables.lines_of(text, tool)
    last = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].strip()), None)
    if last is None:
        return text, None
    s = lines[last].strip()
    if len(s) > tables.MAX_LINE or not s.startswith(("|", "+")) or tables.BORDER.match(s) \
            or tables.split_cells(s) is not None:
        return text, None
    reason = f"line {last + 1} is cut off (no closing '|'): {s[:60]!r}; the lines before it were read"
    return "\n".join(lines[:last]), reason


def parse_summary(text: str) -> NpuSummary:
    """Parse ``npu-smi info`` (the table for all NPUs, with its process section)."""
    tool = "npu-smi info"
    text, cut = _cut_tail(text, tool)
    lines = _table_lines(text, tool)
    if not lines:
        raise ParseError(tool, "empty output")
    title = None
    for ln in lines:
        if ln.kind == "row":
            m = re.search(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)", ln.text)
            if m:
                title = m
                break
    if title is None:
        raise ParseError(tool, "no title line 'npu-smi X  Version: Y'")
    contents = [i for i, ln in enumerate(lines) if ln.kind == "row"]
    head_at = next((i for i in contents if "Health" in lines[i].text), None)
    if head_at is None:
        raise ParseError(tool, "no device header line (NPU ... Health ...)")
    head2_at = next((i for i in contents if i > head_at), None)
    if head2_at is None or "Bus-Id" not in lines[head2_at].text:
        raise ParseError(tool, "the device header's second line (... Bus-Id ...) is missing",
                         lines[head_at].lineno)
    h1, h2 = lines[head_at], lines[head2_at]
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
    block: list[tables.BoxLine] = []
    proc_header: Optional[int] = None

    def flush() -> None:
        if len(block) % 2:
            raise ParseError(tool, f"a device block of {len(block)} line(s); rows come in pairs",
                             block[0].lineno)
        for j in range(0, len(block), 2):
            chips.append(_chip_from_rows(block[j], block[j + 1], head, tool))
            tables.check_devices(len(chips), tool, block[j].lineno)
        block.clear()

    for i in range(head2_at + 1, len(lines)):
        ln = lines[i]
        if ln.kind == "elision":
            elided = True
            flush()
        elif ln.kind == "border":
            flush()
        else:
            if _is_process_header(ln.cells):
                flush()
                proc_header = i
                break
            block.append(ln)
    else:
        if cut is not None and len(block) % 2:  # the cut took a device's second row: that device is not whole
            cut += f"; the device row at line {block[-1].lineno} lost its second row and was left out"
            block.pop()
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
                      process_section=proc_header is not None, cut=cut)


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
        npu = values.checked_integer(vals["npu id"], tool, "NPU ID", lineno)
        chip = values.checked_integer(vals["chip id"], tool, "Chip ID", lineno)
        if npu is None or chip is None:
            raise ParseError(tool, "NPU ID and Chip ID must be numbers", lineno)
        out.append(ChipMapping(
            npu_id=npu, chip_id=chip,
            logic_id=values.checked_integer(vals.get("chip logic id", "-"), tool, "Chip Logic ID", lineno),
            name=vals.get("chip name", ""),
            phy_id=values.checked_integer(vals.get("chip phy-id", "-"), tool, "Chip Phy-ID", lineno),
            slot_id=values.checked_integer(vals.get("slot id", "-"), tool, "Slot ID", lineno)))
    return out


# --------------------------------------------------------------------------- key : value outputs

# A continuation line of npu-smi's -t outputs: optional blanks, then ':' and more of the value
# above (multi-line Error Code / Error Information / Fault Event Information print each further
# item as "<blanks>: item", on real nodes with blank lines between them).
_CONTINUATION = re.compile(r"^[ \t]*:(.*)$")


def _join_continuations(text: str) -> tuple[str, list[int]]:
    """``text`` with each ``: ...`` continuation line turned into a line indented under the
    key above it (what hetero_exporter.sdk.blocks reads as a continuation) and the blank lines
    before it dropped (they sit inside the entry, not between blocks); a continuation of a key
    with an empty value joins that key's line. Returns the text and, per output line, its line
    number in ``text``. A continuation with no key above is left for the block reader to
    reject. Linear: each line is appended once and dropped at most once."""
    out: list[str] = []
    where: list[int] = []
    key_at: Optional[int] = None  # index in out of the last key line
    key_indent = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.expandtabs(8)
        m = _CONTINUATION.match(line)
        if m is not None and key_at is not None:
            while out and not out[-1].strip():  # blank lines inside the entry
                out.pop()
                where.pop()
            item = m.group(1).strip()
            if not item:
                continue
            kv = kvblocks.KV.match(out[key_at])
            if len(out) - 1 == key_at and kv is not None and not (kv.group("value") or "").strip():
                out[key_at] = out[key_at].rstrip() + " " + item  # "Error Code :" then ": 80E18402"
            else:
                out.append(" " * (key_indent + 4) + item)
                where.append(lineno)
            continue
        if line.strip() and kvblocks.KV.match(line):
            key_at, key_indent = len(out), len(line) - len(line.lstrip())
        out.append(line)  # other lines (blank ones too) keep the key: a continuation may follow
        where.append(lineno)
    return "\n".join(out), where


def _kv_blocks(text: str, tool: str) -> list[list[tuple[str, str, int]]]:
    """Blank-line separated blocks of (normalized key, value, line), read by
    hetero_exporter.sdk.blocks: lines that do not start a new key (deeper indented, or with
    no key) continue the value above (multi-line Error Code / Error Information), and so do
    ``: ...`` lines, also after blank lines (_join_continuations). Lines are those of ``text``."""
    joined, where = _join_continuations(text)

    def original(line: Optional[int]) -> Optional[int]:
        return where[line - 1] if line is not None and 0 < line <= len(where) else line

    try:
        blocks = kvblocks.read_blocks(joined, tool)
    except ParseError as e:
        if e.line is None or original(e.line) == e.line:
            raise
        msg = str(e).removeprefix(f"{e.tool}: ").removesuffix(f" (line {e.line})")
        raise ParseError(e.tool, msg, original(e.line)) from None
    return [[(e.key, e.value, original(e.line) or e.line) for e in b.entries] for b in blocks]


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
            chip = values.checked_integer(v, tool, "Chip ID", ln)
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
    if not values.is_na(code_text):
        rest = _CODE.sub(" ", code_text)
        if re.search(r"[^\s,;]", rest):
            raise ParseError(tool, f"Error Code: expected 8-digit hex codes or NA, got {code_text[:60]!r}")
        codes = [c.upper() for c in _CODE.findall(code_text)]
    info = doc.get(chip_id, "error information") or ""
    info = "; ".join(x.strip() for x in info.splitlines() if x.strip() and not values.is_na(x))
    return HealthDetail(state=canonical_health(state.split()[0]), codes=tuple(dict.fromkeys(codes)),
                        information=info)


@dataclass(frozen=True)
class FaultEvent:
    """One active fault event of ``npu-smi info -t current-fault-event``: ``code`` the event
    id as 8 upper-case hex digits (the code space of ``-t health``'s Error Code), ``severity``
    the DCMI event severity (0 notice, 1 minor, 2 major, 3 critical) where printed, ``time``
    the raise time as printed, ``description`` the event name / description where printed,
    ``details`` the other ``key=value`` pairs (node type ex, node id, ...) in printing order;
    ``chip_id`` the chip block it was printed in (None: a card-level output)."""

    code: str
    severity: Optional[int] = None
    time: Optional[str] = None
    description: str = ""
    details: tuple[tuple[str, str], ...] = ()
    chip_id: Optional[int] = None


@dataclass(frozen=True)
class FaultEvents:
    """``npu-smi info -t current-fault-event -i N``: the "Fault Event Count" (None where not
    printed) and the events listed under "Fault Event Information"."""

    count: Optional[int]
    events: tuple[FaultEvent, ...] = ()
    npu_id: Optional[int] = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# an event is "key=value, key=value, ..."; a comma followed by a new "key=" starts the next pair
# (a description may hold commas). Lines are at most sdk.blocks.MAX_LINE long.
_EVENT_PAIR_SPLIT = re.compile(r",\s*(?=[A-Za-z][A-Za-z0-9 _()-]{0,40}=)")
_EVENT_ID = re.compile(r"(?:0[xX])?([0-9A-Fa-f]{1,8})")
_EVENT_TIME_KEYS = ("alarm raised time", "raised time", "alarm time", "time", "occur time")
_EVENT_TEXT_KEYS = ("event name", "description", "fault description", "event description", "additional info")


def _fault_event(item: str, chip: Optional[int], tool: str, line: int) -> FaultEvent:
    pairs: list[tuple[str, str]] = []
    for part in _EVENT_PAIR_SPLIT.split(item.strip()):
        key, sep, value = part.partition("=")
        if not sep:
            raise ParseError(tool, f"a fault event field without '=': {part.strip()[:60]!r}", line)
        pairs.append((_norm_key(key), value.strip()))
    found = dict(reversed(pairs))  # first occurrence wins
    raw_id = found.get("event id")
    if raw_id is None:
        raise ParseError(tool, f"a fault event without an event id: {item.strip()[:60]!r}", line)
    m = _EVENT_ID.fullmatch(raw_id)
    if m is None:
        raise ParseError(tool, f"event id: expected a hex number like 0x81AF8000, got {raw_id[:40]!r}", line)
    sev_text = found.get("severity")
    severity = values.checked_integer(sev_text, tool, "severity", line) if sev_text is not None else None
    time_text = next((found[k] for k in _EVENT_TIME_KEYS if k in found and not values.is_na(found[k])), None)
    text = next((found[k] for k in _EVENT_TEXT_KEYS if k in found and not values.is_na(found[k])), "")
    used = {"event id", "severity", *_EVENT_TIME_KEYS, *_EVENT_TEXT_KEYS}
    return FaultEvent(code=m.group(1).upper().rjust(8, "0"), severity=severity, time=time_text,
                      description=text, details=tuple((k, v) for k, v in pairs if k not in used), chip_id=chip)


def parse_fault_events(text: str) -> FaultEvents:
    """Parse ``npu-smi info -t current-fault-event -i N`` (see FaultEvents): one event per line
    of the "Fault Event Information" value (further events continue it on ``: ...`` lines);
    "NA" or an absent value is no event."""
    tool = "npu-smi info -t current-fault-event"
    blocks = _kv_blocks(text, tool)
    if not blocks:
        raise ParseError(tool, "empty output")
    count: Optional[int] = None
    npu: Optional[int] = None
    events: list[FaultEvent] = []
    seen_key = False
    for block in blocks:
        chip: Optional[int] = None
        for k, v, ln in block:
            if k == "chip id":
                chip = values.checked_integer(v, tool, "Chip ID", ln)
        for k, v, ln in block:
            if k == "fault event count":
                seen_key = True
                n = values.checked_integer(v, tool, "Fault Event Count", ln)
                count = n if count is None or n is None else count + n
            elif k == "npu id" and npu is None:
                npu = values.checked_integer(v, tool, "NPU ID", ln)
            elif k == "fault event information":
                seen_key = True
                for item in v.splitlines():
                    if item.strip() and not values.is_na(item):
                        events.append(_fault_event(item, chip, tool, ln))
    if not seen_key:
        raise ParseError(tool, "neither 'Fault Event Count' nor 'Fault Event Information'")
    return FaultEvents(count=count, events=tuple(events), npu_id=npu)


def parse_list(text: str) -> NpuList:
    """Parse ``npu-smi info -l``."""
    tool = "npu-smi info -l"
    total: Optional[int] = None
    cards = []
    for block in _kv_blocks(text, tool):
        keys = {k: (v, ln) for k, v, ln in block}
        if "total count" in keys:
            total = values.checked_integer(keys["total count"][0], tool, "Total Count", keys["total count"][1])
        if "npu id" in keys:
            npu = values.checked_integer(keys["npu id"][0], tool, "NPU ID", keys["npu id"][1])
            if npu is None:
                raise ParseError(tool, "NPU ID must be a number", keys["npu id"][1])
            cc = keys.get("chip count")
            sn = keys.get("serial number", ("", 0))[0].strip()
            cards.append(CardListing(
                npu_id=npu, chip_count=values.checked_integer(cc[0], tool, "Chip Count", cc[1]) if cc else None,
                product_name=keys.get("product name", (None, 0))[0],
                serial=sn if not values.is_na(sn) else None))
    if total is None and not cards:
        raise ParseError(tool, "neither 'Total Count' nor any 'NPU ID'")
    return NpuList(total=total, cards=tuple(cards))


_PROC_MEM_HEAD = re.compile(r"Process id\s*:\s*([0-9]{1,20})\s+Process name\s*:")  # int() refuses 4,300 digits
_PROC_MEM_TAIL = re.compile(r"\s*:\s*(\S+)")
_PROC_MEM_KEY = "Process memory(MB)"


def _proc_mem_line(s: str) -> Optional[tuple[int, str, str]]:
    """``Process id:P  Process name:NAME  Process memory(MB):M`` (stripped) -> (P, NAME, M); the
    name may hold blanks. Read around the last "Process memory(MB)": a lazy name pattern retries
    the tail at every character (quadratic on a long line)."""
    head = _PROC_MEM_HEAD.match(s)
    at = s.rfind(_PROC_MEM_KEY)
    if head is None or at < head.end() or not s[at - 1].isspace():
        return None
    tail = _PROC_MEM_TAIL.fullmatch(s, at + len(_PROC_MEM_KEY))
    if tail is None:
        return None
    return int(head.group(1)), s[head.end():at].strip(), tail.group(1)


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
            npu = values.checked_integer(m.group(1), tool, "NPU ID", i)
            continue
        got = _proc_mem_line(s)
        if got is None:
            raise ParseError(tool, f"not a process line: {s[:60]!r}", i)
        pid, name, memory = got
        out.append(NpuProcess(npu_id=npu if npu is not None else 0, chip_id=None, pid=pid,
                              name=name, memory_mb=values.checked_integer(memory, tool, "Process memory(MB)", i)))
    return out


# --------------------------------------------------------------------------- npu-smi info -t topo

# connection words of the matrix -> Link.type (CANN aclrtGetDevicesTopo kinds); others
# (PIX, PXB, PHB, SYS, SIO, X) are no fabric link
TOPO_FABRIC = {"HCCS": "hccs", "HCCS_SW": "hccs"}


@dataclass(frozen=True)
class NpuTopo:
    """``npu-smi info -t topo``: ``links`` (npu, peer npu, connection word) for every
    off-diagonal HCCS cell; NPUn is the chip's logic id; ``affinity`` NPU -> CPU list."""

    npus: tuple[int, ...]
    links: tuple[tuple[int, int, str], ...] = ()
    affinity: Mapping[int, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def parse_topo(text: str) -> NpuTopo:
    """Parse ``npu-smi info -t topo`` (the documented matrix; no real capture was at hand)."""
    tool = "npu-smi info -t topo"
    m = tables.parse_matrix(text, tool, r"NPU\d{1,4}")
    num = {n: int(n[3:]) for n in m.names}
    links = tuple((num[r], num[c], w.upper()) for r, c, w in tables.pairs(m, TOPO_FABRIC))
    aff = {num[r]: x.get("CPU Affinity", "") for r, x in m.extra.items() if x.get("CPU Affinity")}
    return NpuTopo(npus=tuple(num[n] for n in m.names), links=links, affinity=aff)


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
    ("power", ("npu real-time power(w)", "power dissipation(w)")),
    ("product", ("product type",)),
)


# First lines of npu-smi's own error messages ("Invalid card id.", "Error parameter of -i",
# "Usage: npu-smi info ...", "This device does not support ...").
_ERROR_LINE = re.compile(r"^(Invalid\b|Error parameter|Usage:\s*npu-smi|.*\bdoes not exist\b|"
                         r".*\bnot support|.*\bfailed\b|.*\bpermission denied)", re.I)


def detect(text: str) -> str:
    """Which command printed ``text``: ``info``, ``info -m``, ``info -l`` or ``info -t KIND``
    (``info -t board-chip`` for ``-t board -c``). Raises ParseError for an npu-smi error
    message or a text that is none of these."""
    stripped = [ln.strip() for ln in tables.lines_of(text, TOOL) if ln.strip()]  # at most MAX_LINES
    if not stripped:
        raise ParseError(TOOL, "empty output")
    if any(_BORDER.match(s) for s in stripped) and any("npu-smi" in s or "Bus-Id" in s for s in stripped):
        return "info"
    first = stripped[0]
    if re.match(r"NPU\d+\s+NPU\d+", first) or (re.fullmatch(r"NPU\d+(\s+CPU Affinity)?", first)):
        return "info -t topo"
    if _ERROR_LINE.match(first):
        raise ParseError(TOOL, f"npu-smi printed an error: {' / '.join(stripped[:3])[:200]}")
    if re.match(r"NPU ID\s{2,}", first) and "Chip" in first and ":" not in first:
        return "info -m"
    if any(re.match(r"Process id\s*:\s*\d+\s+Process name", s) for s in stripped):
        return "info -t proc-mem"
    keys = set()
    for s in stripped:
        k = kvblocks.key_of(s)
        if k:
            keys.add(k)
    for kind, sig in _DETAIL_SIGNATURES:
        if keys.intersection(sig):
            return "info -l" if kind == "list" else f"info -t {kind}"
    raise ParseError(TOOL, f"not an npu-smi output I recognize (first line {first[:60]!r})")
