"""Pure parsing of ``mthreads-gmi`` (Moore Threads' GPU management tool); only ParseError escapes.

The default output (gmi 1.12.2, 1.14.0, 2.0.0, 2.3.3 in ../shared/fixtures/mthreads-gmi) is a
half-box: bare ``-----`` rules around a title, a header of several rows whose columns are
split by ``|``, a ``+----+`` rule, one record per GPU (as many rows as the header, a ``+----+``
rule between GPUs in 2.3.3), a closing bare rule, then a ``Processes:`` section::

    ---------------------------------------------------------------
        mthreads-gmi:2.0.0           Driver Version:3.0.0
    ---------------------------------------------------------------
    ID   Name           |PCIe                |%GPU  Mem
         Device Type    |Pcie Lane Width     |Temp  MPC Capable
                                             |      ECC Mode
    +-------------------------------------------------------------+
    0    MTT S80        |00000000:01:00.0    |0%    662MiB(16384MiB)
         Physical       |16x(16x)            |41C   YES
                                             |      N/A
    ---------------------------------------------------------------

    ---------------------------------------------------------------
    Processes:
    ID   PID       Process name                         GPU Memory
                                                             Usage
    +-------------------------------------------------------------+
    0    1123      /usr/lib/xorg/Xorg                       134MiB
    ---------------------------------------------------------------

Read by structure: header row n reads record row n; within a row the ``|`` segments pair up
with the header's segments in order, and inside a segment each value goes to the nearest
header label (hetero_exporter.sdk.tables.cell_values), so other widths, names and card
counts read the same. Labels are known by their words (``%GPU``, ``Mem``, ``Pcie Lane
Width``...); a label this parser does not know is kept under ``?label`` and ignored.

A shortened output (a capture cut after the first GPU, a literal ``...`` line, no closing rule)
parses what it has and says ``complete=False``, so no GPU is taken as lost for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from hetero_exporter.sdk import values
from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.sdk.tables import Label, cell_values

TOOL = "mthreads-gmi"
CELLS = values.Cells(TOOL)
MIB = 1 << 20
MAX_LINE = 4096
MAX_LINES = 20000
MAX_TITLE = 512  # characters of the title line read for its NAME:VERSION pairs

_BARE_RULE = re.compile(r"^-{3,}$")
_PLUS_RULE = re.compile(r"^\+[-=+]{3,}$")
_ELISION = re.compile(r"^\.{3,}$")
_TITLE = re.compile(r"mthreads-gmi\s*:", re.I)
_PAIR = re.compile(r"([A-Za-z][\w-]*(?: [A-Za-z][\w-]*)*)\s*:\s*(\S+)")
_LANES = re.compile(r"^(\d+)\s*x(?:\s*\(\s*(\d+)\s*x\s*\))?$", re.I)
# USED(TOTAL) or USED / TOTAL; USED holds no "(" or "/" and TOTAL no parenthesis (no quantity
# does), so each part ends in one place (lazy parts retried from every "(": quadratic)
_MEM = re.compile(r"^([^\s(/]+)\s*(?:\(\s*([^\s()]+)\s*\)|/\s*(\S+))$")
_PROC_HEAD = re.compile(r"\s*(\d+)\s+(\d+)")  # ID, PID; the name and memory are read from the right

# header words -> keys (matched whole, case-insensitive)
LABELS = {"id": "id", "name": "name", "pcie": "bus", "bus-id": "bus", "%gpu": "util", "gpu-util": "util",
          "mem": "mem", "memory": "mem", "memory-usage": "mem", "device type": "type", "perf": "perf",
          "pcie lane width": "lanes", "temp": "temp", "mpc capable": "mpc", "ecc mode": "ecc"}


@dataclass(frozen=True)
class GmiDevice:
    """One GPU record. Bytes (printed in MiB), ratio (printed in %), celsius; None where the
    tool prints N/A or the (shortened) output does not reach the row."""

    index: int
    name: str
    bus_id: Optional[str] = None
    device_type: Optional[str] = None  # "Physical" (a whole card) or the tool's word for a virtual one
    perf: Optional[str] = None  # performance state (P0), gmi 2.3.3
    utilization_ratio: Optional[float] = None
    memory_used_bytes: Optional[float] = None
    memory_total_bytes: Optional[float] = None
    temperature_celsius: Optional[float] = None
    pcie_width: Optional[int] = None  # lanes in use ("4x" of "4x(16x)")
    pcie_width_max: Optional[int] = None  # lanes of the link ("16x" of "4x(16x)")
    mpc_capable: Optional[str] = None
    ecc_mode: Optional[str] = None  # "N/A", "On-die, EDC"
    complete: bool = True  # every row of the record was printed
    line: int = 0

    @property
    def memory_over_total(self) -> bool:
        """Used above total: a known driver fault (Moore Threads FAQ: total under-reported
        while the IOMMU is off), not a real figure."""
        return (self.memory_used_bytes is not None and self.memory_total_bytes is not None
                and self.memory_used_bytes > self.memory_total_bytes)


@dataclass(frozen=True)
class GmiProcess:
    gpu: int
    pid: int
    name: str
    memory_bytes: Optional[float]


@dataclass(frozen=True)
class GmiTable:
    version: Optional[str]  # the tool's version (title "mthreads-gmi:2.0.0")
    driver_version: Optional[str]
    runtime_version: Optional[str]  # a MUSA version, where the title prints one
    devices: tuple[GmiDevice, ...]
    processes: tuple[GmiProcess, ...] = ()
    process_section: bool = False  # a complete Processes section was printed
    complete: bool = True  # the device table was printed to its closing rule, nothing elided

    def to_dict(self) -> dict:
        import dataclasses
        return dataclasses.asdict(self)


def detect(text: str) -> str:
    """``mthreads-gmi`` for the default output; ParseError otherwise."""
    for line in text.splitlines()[:50]:
        if _TITLE.search(line[:MAX_LINE]):
            return TOOL
    raise ParseError(TOOL, "not mthreads-gmi output (no 'mthreads-gmi:VERSION  Driver Version:...' title)")


# --------------------------------------------------------------------------- helpers


def _segments(line: str) -> list[str]:
    """The ``|`` segments of a line, without empty trailing ones (some versions close a
    header row with a bar)."""
    segs = line.split("|")
    while len(segs) > 1 and not segs[-1].strip():
        segs.pop()
    return segs


def _labels(segment: str) -> list[Label]:
    """The labels of a header segment: words separated by single spaces form one label
    (``Pcie Lane Width``), two spaces or more separate labels."""
    out = []
    for m in re.finditer(r"\S+(?: \S+)*", segment):
        key = LABELS.get(m.group(0).lower(), "?" + m.group(0))
        out.append(Label(key, m.start()))
    return out


# --------------------------------------------------------------------------- the device table


@dataclass
class _Header:
    rows: list[list[list[Label]]]  # per header row, per segment, its labels
    lineno: int


def _header(lines: Sequence[tuple[int, str]]) -> _Header:
    rows = [[_labels(s) for s in _segments(text)] for _, text in lines]
    keys = {lab.key for row in rows for seg in row for lab in seg}
    if "id" not in keys or not keys & {"bus", "name"}:
        raise ParseError(TOOL, "no device header (a row naming ID and Name / PCIe)", lines[0][0] if lines else None)
    if not rows[0] or not any(lab.key == "id" for lab in rows[0][0]):
        raise ParseError(TOOL, "the device header does not start with the ID column", lines[0][0])
    return _Header(rows, lines[0][0])


def _row_values(header: _Header, n: int, lineno: int, text: str) -> dict[str, str]:
    segs = _segments(text)
    want = header.rows[n]
    if len(segs) != len(want):
        raise ParseError(TOOL, f"a row of {len(segs)} column(s) under a header row of {len(want)}", lineno)
    out: dict[str, str] = {}
    for seg, labels in zip(segs, want):
        for key, val in cell_values(seg, labels).items():
            out.setdefault(key, val)
    return out


def _starts_record(header: _Header, text: str) -> bool:
    """Whether a line is the first row of a GPU record: its ID slot holds a number."""
    segs = _segments(text)
    if not segs or len(segs) != len(header.rows[0]):
        return False
    v = cell_values(segs[0], header.rows[0][0]).get("id", "")
    return bool(re.fullmatch(r"[0-9]+", v))


def _device(header: _Header, rows: Sequence[tuple[int, str]]) -> GmiDevice:
    got: dict[str, tuple[str, int]] = {}
    for n, (lineno, text) in enumerate(rows):
        for k, v in _row_values(header, n, lineno, text).items():
            got.setdefault(k, (v, lineno))
    first = rows[0][0]

    def val(key: str) -> tuple[Optional[str], int]:
        v = got.get(key)
        return (None, first) if v is None else v

    index = CELLS.index(val("id")[0] or "", "ID", first, digits=10)
    bus_text, ln = val("bus")
    bus = CELLS.pci(bus_text, "PCIe", ln)
    used = total = None
    mem_text, ln = val("mem")
    mem = values.present(mem_text)
    if mem is not None:
        m = _MEM.match(mem)
        if m is None:
            raise ParseError(TOOL, f"Mem: expected 'USED(TOTAL)', got {mem[:30]!r}", ln)
        used = CELLS.quantity(m.group(1), "MiB", "Mem used", ln)
        total = CELLS.quantity(m.group(2) or m.group(3), "MiB", "Mem total", ln)
    width = width_max = None
    lanes = values.present(val("lanes")[0])
    ln = val("lanes")[1]
    if lanes is not None:
        m = _LANES.match(lanes)
        if m is None:
            raise ParseError(TOOL, f"Pcie Lane Width: expected 'Nx(Mx)', got {lanes[:20]!r}", ln)
        width = CELLS.index(m.group(1), "Pcie Lane Width", ln, digits=10)
        width_max = CELLS.index(m.group(2), "Pcie Lane Width", ln, digits=10) if m.group(2) else None
    util_text, ln = val("util")
    temp_text, lt = val("temp")
    return GmiDevice(
        index=index, name=(val("name")[0] or "").strip(), bus_id=bus,
        device_type=values.present(val("type")[0]), perf=values.present(val("perf")[0]),
        utilization_ratio=CELLS.quantity(util_text, "%", "%GPU", ln),
        memory_used_bytes=used, memory_total_bytes=total,
        temperature_celsius=CELLS.quantity(temp_text, "C", "Temp", lt),
        pcie_width=width, pcie_width_max=width_max, mpc_capable=values.present(val("mpc")[0]),
        ecc_mode=values.present(val("ecc")[0]), complete=len(rows) == len(header.rows), line=first)


# --------------------------------------------------------------------------- the whole output


def _kind(text: str) -> str:
    s = text.strip()
    if not s:
        return "blank"
    if _BARE_RULE.match(s):
        return "rule"
    if _PLUS_RULE.match(s):
        return "plus"
    if _ELISION.match(s):
        return "elision"
    return "text"


def _processes(lines: Sequence[tuple[int, str, str]], start: int) -> tuple[list[GmiProcess], bool]:
    """The rows of the Processes section from ``lines[start]`` (the line after
    ``Processes:``); (processes, whether the section was printed to its closing rule)."""
    i = start
    header = None
    while i < len(lines) and lines[i][2] != "plus":
        if "PID" in lines[i][1].split():
            header = lines[i]
        i += 1
    if i >= len(lines):
        return [], False  # cut before the section's rule: no rows to read
    if header is None:
        raise ParseError(TOOL, "Processes: no header row naming PID", lines[i][0])
    out: list[GmiProcess] = []
    for lineno, text, kind in lines[i + 1:]:
        if kind == "rule":
            return out, True
        if kind in ("blank", "plus"):
            continue
        if kind == "elision":
            return out, False
        if re.search(r"no running process", text, re.I):
            continue
        row = _proc_row(text)
        if row is None:
            raise ParseError(TOOL, f"Processes: expected 'ID PID NAME MEMORY', got {text.strip()[:40]!r}", lineno)
        gpu, pid, name, memory = row
        out.append(GmiProcess(gpu=CELLS.index(gpu, "process ID", lineno, digits=10),
                              pid=CELLS.index(pid, "PID", lineno, digits=10), name=name,
                              memory_bytes=CELLS.quantity(memory, "MiB", "GPU Memory Usage", lineno)))
    return out, False


def _proc_row(text: str) -> Optional[tuple[str, str, str, str]]:
    """``ID PID NAME... MEMORY`` -> (id, pid, name, memory); the name may hold blanks (or be
    empty, after two blanks), the memory is the last word. Read from the right: a lazy name
    would retry the tail at every character (quadratic in a long row)."""
    m = _PROC_HEAD.match(text)
    if m is None:
        return None
    rest = text[m.end():].rstrip()
    if not rest[:1].isspace():
        return None
    word_at = len(rest)
    while not rest[word_at - 1].isspace():
        word_at -= 1
    before = rest[:word_at]  # blanks, the name, blanks
    name = before.strip()
    if not name and len(before) < 2:
        return None
    return m.group(1), m.group(2), name, rest[word_at:]


def _classified(text: str) -> tuple[list[tuple[int, str, str]], bool]:
    """(line number, the line without trailing blanks, its ``_kind``) of each line, and whether
    the output stops inside its last line (then not read)."""
    raw = text.splitlines()
    cut = bool(raw) and not text.endswith(("\n", "\r")) and _kind(raw[-1].rstrip()) == "text"
    if cut:
        # the output stops inside a line (a capture or an answer cut short): its values may be
        # cut too ("88%" -> "8"), so the line is not read and the table is incomplete
        raw = raw[:-1]
    if len(raw) > MAX_LINES:
        raise ParseError(TOOL, f"{len(raw)} lines: not a mthreads-gmi table")
    lines: list[tuple[int, str, str]] = []
    for i, t in enumerate(raw, 1):
        if len(t) > MAX_LINE:
            raise ParseError(TOOL, f"a line of {len(t)} characters: not a mthreads-gmi table", i)
        t = t.rstrip()
        lines.append((i, t, _kind(t)))
    return lines, cut


def parse_table(text: str) -> GmiTable:
    """The GPUs (and processes) of one default ``mthreads-gmi`` output; ParseError naming the
    line otherwise."""
    lines, cut = _classified(text)
    at = next((k for k, (_, t, kind) in enumerate(lines) if kind == "text" and _TITLE.search(t)), None)
    if at is None:
        detect(text)  # raises the one-line error
        raise ParseError(TOOL, "no title line")  # pragma: no cover - detect raised
    # the title is ~80 characters; _PAIR retries a long run of words at each one (quadratic)
    title = dict((k.strip().lower(), v) for k, v in _PAIR.findall(lines[at][1][:MAX_TITLE]))
    version = title.get("mthreads-gmi")
    driver = title.get("driver version")
    runtime = next((v for k, v in title.items() if k.startswith("musa")), None)
    if driver is None:
        raise ParseError(TOOL, "the title names no Driver Version", lines[at][0])

    # the header: the text rows after the title's closing rule, up to the "+----+" rule
    k = at + 1
    while k < len(lines) and lines[k][2] in ("rule", "blank"):
        k += 1
    head_rows = []
    while k < len(lines) and lines[k][2] == "text":
        head_rows.append((lines[k][0], lines[k][1]))
        k += 1
    if not head_rows:
        return GmiTable(version, driver, runtime, (), complete=False)
    header = _header(head_rows)
    if k >= len(lines) or lines[k][2] != "plus":
        # cut inside the header (or a header without its rule): nothing to read, incomplete
        if k < len(lines) and lines[k][2] not in ("blank",):
            raise ParseError(TOOL, "expected the '+----+' rule under the device header", lines[k][0])
        return GmiTable(version, driver, runtime, (), complete=False)
    k += 1

    devices: list[GmiDevice] = []
    record: list[tuple[int, str]] = []
    closed = elided = False
    while k < len(lines):
        lineno, t, kind = lines[k]
        if kind == "rule":
            closed = True
            break
        if kind == "elision":
            elided = True
        elif kind == "text":
            if not record or len(record) == len(header.rows) or _starts_record(header, t):
                if record:
                    devices.append(_device(header, record))
                record = [(lineno, t)]
                if not _starts_record(header, t):
                    raise ParseError(TOOL, f"expected a GPU row starting with its ID, got {t.strip()[:40]!r}", lineno)
            else:
                record.append((lineno, t))
        k += 1
    if record:
        devices.append(_device(header, record))
    seen: set[int] = set()
    for d in devices:
        if d.index in seen:
            raise ParseError(TOOL, f"GPU {d.index} listed twice", d.line)
        seen.add(d.index)

    procs: list[GmiProcess] = []
    section = False
    for j in range(k + 1, len(lines)):
        if lines[j][2] == "text" and lines[j][1].strip().rstrip(":").lower() == "processes":
            procs, section = _processes(lines, j + 1)
            break
    complete = closed and not elided and not cut and all(d.complete for d in devices)
    return GmiTable(version=version, driver_version=driver, runtime_version=runtime, devices=tuple(devices),
                    processes=tuple(procs), process_section=section and complete, complete=complete)
