"""Box tables in the style most vendor SMI tools share, and device link matrices, read by structure.

Most vendor tools print their summary as boxes (the vendor packages' parse.py say which): borders ``+----+----+`` / ``|====+====|`` and content rows ``| a | b |``.
A record takes one or more rows between two borders; a header row names the fields of
each cell, several labels side by side (``Power(W)    Temp(C)``). ``box_lines`` classifies
the lines, ``records`` groups the content rows between borders, ``cell_labels`` finds the
labels of a header cell and their columns, ``cell_values`` gives each group of text in a data
cell to the label whose column is nearest (so a value that slid a column still lands right).

``device_table`` and ``process_rows`` read the nvidia-smi-style summary whole (nvidia-smi,
ixsmi and xpu-smi 5.x print it): the device header, one record per device under it, the
``Processes:`` box after it.

``parse_matrix`` reads a ``topo -m`` style matrix (a header of device names, one row per
device, a ``Legend:`` after it).

Only contract.ParseError escapes, naming the tool and the 1-based line. Time is linear in the
text: a header cell is masked once per label text, a value finds its label by bisection.
Limits every parser shares: MAX_LINE characters a line, MAX_LINES lines (``lines_of``, also
read by sdk.blocks) and MAX_DEVICES devices an output may list (``check_devices``).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Pattern, Sequence, TypeVar

from hetero_exporter.sdk.contract import ParseError

BORDER = re.compile(r"^(?:[+|][-=+|]*[+|]|[-=]{3,})$")  # "+--+--+", "|==+==|", a bare "-----" rule
ELISION = re.compile(r"^\.{3,}$")
GROUP = re.compile(r"\S+(?:\s*/\s*\S+)?")  # "2003 / 15039" is one value
MAX_LINE = 4096  # longer lines are no tool's table (and would make the matching slow)
# Devices one output may list: a node has tens (8 GPUs x 8 partitions is 64). A capture saved
# many times over, or made up, must not turn into a million devices (~5 KiB of model each).
MAX_DEVICES = 1024
MAX_LINES = 100_000  # a table of MAX_DEVICES devices is a few thousand lines


@dataclass(frozen=True)
class BoxLine:
    """One non-blank line: ``kind`` border | row | elision | text (outside the box, or
    between boxes when ``strict`` is off); ``cells`` for rows, without the outer bars."""

    lineno: int
    kind: str
    text: str
    cells: tuple[str, ...] = ()

    @property
    def joined(self) -> str:
        return " ".join(c.strip() for c in self.cells).strip()


def check_devices(count: int, tool: str, line: Optional[int] = None) -> None:
    """ParseError once an output has listed more than MAX_DEVICES devices."""
    if count > MAX_DEVICES:
        raise ParseError(tool, f"more than {MAX_DEVICES} devices; a node has tens (several captures "
                               f"in one file?)", line)


def lines_of(text: str, tool: str, limit: Optional[int] = None) -> list[str]:
    """``text.splitlines()``; ParseError for more than ``limit`` (default MAX_LINES) lines, said
    before splitting when the newlines alone are too many: every line read costs a few hundred
    bytes of structure."""
    limit = MAX_LINES if limit is None else limit
    lines = text.splitlines() if text.count("\n") <= limit else None
    if lines is None or len(lines) > limit:  # splitlines also ends lines at \v, \f, \x1c...
        raise ParseError(tool, f"more than {limit} lines; {tool} prints a few thousand at most")
    return lines


def stripped_lines(text: str, tool: str) -> Iterable[tuple[int, str]]:
    """(1-based line number, the line stripped) of each non-blank line (``lines_of``); a line
    longer than MAX_LINE is a ParseError."""
    for n, raw in enumerate(lines_of(text, tool), 1):
        if len(raw) > MAX_LINE:
            raise ParseError(tool, f"a line of {len(raw)} characters", n)
        s = raw.strip()
        if s:
            yield n, s


def split_cells(line: str) -> Optional[list[str]]:
    """The cells of a content line ``| a | b |``, or None when it is not one."""
    s = line.strip()
    if len(s) < 2 or s[0] != "|" or s[-1] != "|" or BORDER.match(s):
        return None
    return s[1:-1].split("|")


def box_lines(text: str, tool: str, *, strict: bool = True) -> list[BoxLine]:
    """Classify the lines of ``text``. Lines before the first border are ``text`` (a banner,
    a timestamp); after it, a line that is neither border, row nor ``...`` raises ParseError
    when ``strict`` (one box), else is kept as ``text`` (tools that print several boxes)."""
    out: list[BoxLine] = []
    started = False
    for i, raw in enumerate(lines_of(text, tool), 1):
        if len(raw) > MAX_LINE:
            raise ParseError(tool, f"a line of {len(raw)} characters; {tool} prints short lines", i)
        s = raw.strip()
        if not s:
            continue
        if BORDER.match(s):
            started = True
            out.append(BoxLine(i, "border", s))
            continue
        cells = split_cells(s)
        if cells is not None:
            started = True
            out.append(BoxLine(i, "row", s, tuple(cells)))
        elif ELISION.match(s):
            out.append(BoxLine(i, "elision", s))
        elif started and strict:
            raise ParseError(tool, f"not a table line: {s[:60]!r}", i)
        else:
            out.append(BoxLine(i, "text", s))
    return out


def records(lines: Sequence[BoxLine]) -> list[list[BoxLine]]:
    """Content rows grouped between borders (or ``...`` lines, or outside text): each group
    is one record of one or more rows (the title, a header, a device, a process)."""
    groups: list[list[BoxLine]] = [[]]
    for ln in lines:
        if ln.kind == "row":
            groups[-1].append(ln)
        elif groups[-1]:
            groups.append([])
    return [g for g in groups if g]


@dataclass(frozen=True)
class Label:
    key: str
    start: int


def cell_labels(cell: str, vocabulary: Sequence[tuple[str, str]]) -> list[Label]:
    """Labels of one header cell with their start columns. ``vocabulary`` is (text, key)
    pairs, longest first (a found label masks its text so ``NPU`` does not match inside
    ``NPU Util(%)``); unknown words become labels of their own (``?word``) so their values
    are not given to a neighbour."""
    masked = cell
    found: list[Label] = []
    for text, key in vocabulary:
        if not text or text not in masked:
            continue
        # every occurrence, left to right, masked in one rebuild (one per occurrence is quadratic)
        parts, last = [], 0
        pos = masked.find(text)
        while pos >= 0:
            found.append(Label(key, pos))
            parts += [masked[last:pos], " " * len(text)]
            last = pos + len(text)
            pos = masked.find(text, last)
        masked = "".join(parts) + masked[last:]
    for m in re.finditer(r"\S+(?: \S+)*", masked):
        found.append(Label("?" + m.group(0), m.start()))
    return sorted(found, key=lambda lab: lab.start)


def cell_values(cell: str, labels: Sequence[Label]) -> dict[str, str]:
    """Value groups of a data cell, each given to the nearest label (joined with a space
    when several groups fall to one label, e.g. a name with a space)."""
    out: dict[str, list[str]] = {}
    if not labels:
        return {}
    ordered = sorted(labels, key=lambda lab: lab.start)  # stable: among equal starts, the first given
    starts = [lab.start for lab in ordered]
    for m in GROUP.finditer(cell):
        out.setdefault(_nearest(ordered, starts, m.start()).key, []).append(m.group(0))
    return {k: " ".join(v) for k, v in out.items()}


def _nearest(ordered: Sequence[Label], starts: Sequence[int], pos: int) -> Label:
    """The label whose start is nearest ``pos``, the earlier one on a tie (by bisection: a scan
    of every label per value is quadratic in a wide header)."""
    j = bisect.bisect_left(starts, pos)
    if j == len(starts):
        j = bisect.bisect_left(starts, starts[-1])  # the first of the last start
    elif j > 0 and pos - starts[j - 1] <= starts[j] - pos:
        j = bisect.bisect_left(starts, starts[j - 1])  # the first label at the earlier start
    return ordered[j]


def header_labels(rows: Sequence[BoxLine], vocabulary: Sequence[tuple[str, str]]) -> list[list[list[Label]]]:
    """Labels per cell of each header row (a record of several rows has one header row each)."""
    return [[cell_labels(c, vocabulary) for c in r.cells] for r in rows]


def record_values(record: Sequence[BoxLine], header: Sequence[Sequence[Sequence[Label]]],
                  tool: str) -> dict[str, tuple[str, int]]:
    """The values of a multi-row record read under a multi-row header: key -> (text, line).
    Row n of the record is read with header row n; the first occurrence of a key wins."""
    if len(record) != len(header):
        raise ParseError(tool, f"a record of {len(record)} row(s) under a header of {len(header)}",
                         record[0].lineno)
    values: dict[str, tuple[str, int]] = {}
    for row, labels_per_cell in zip(record, header):
        if len(row.cells) != len(labels_per_cell):
            raise ParseError(tool, f"row has {len(row.cells)} cells, the header {len(labels_per_cell)}",
                             row.lineno)
        for cell, labels in zip(row.cells, labels_per_cell):
            for key, val in cell_values(cell, labels).items():
                values.setdefault(key, (val, row.lineno))
    return values


# --------------------------------------------------------------------------- nvidia-smi-style summaries

# where the device records end: the process box (its title or its header row)
PROCESSES = re.compile(r"Processes:|\bPID\b")
_NO_PROCESSES = re.compile(r"No running (?:compute )?processes found", re.I)
_HEADER_REST = re.compile(r"(?:ID|Usage|\s)*")  # "ID  ID  Usage": the process header's second row
_SPLIT_UNIT = re.compile(r"(\d)\s+(MiB|GiB|KiB|MB)\b")  # "500 MiB" is one word


@dataclass(frozen=True)
class DeviceTable:
    """An nvidia-smi-style summary: ``title`` the text of the records above the device header
    (the tool, driver and runtime versions), ``header`` its labels (``header_labels``), ``devices``
    one record part per device (as many rows as the header), ``rest`` the records after the
    devices (a MIG box, the process box), ``lines`` every line (``box_lines``, not strict)."""

    lines: tuple[BoxLine, ...]
    title: str
    header_rows: tuple[BoxLine, ...]
    header: list[list[list[Label]]]
    devices: tuple[tuple[BoxLine, ...], ...]
    rest: tuple[tuple[BoxLine, ...], ...]

    def banner(self) -> list[str]:
        """The text lines above the header (a timestamp line)."""
        return [ln.text for ln in self.lines if ln.kind == "text" and ln.lineno < self.header_rows[0].lineno]


def device_table(text: str, tool: str, labels: Sequence[tuple[str, str]], *, device: str = "GPU",
                 end: Pattern[str] = PROCESSES) -> DeviceTable:
    """Read the device part of an nvidia-smi-style summary. The header is the first record
    naming ``device`` (a word) and ``Bus-Id``; the device records follow it, up to the first
    record with a line ``end`` finds. A record of several devices (no border between them) is
    cut into parts of the header's row count; more than MAX_DEVICES devices is a ParseError."""
    lines = box_lines(text, tool, strict=False)
    recs = records(lines)
    word = re.compile(rf"\b{re.escape(device)}\b")
    at = next((i for i, r in enumerate(recs)
               if any("Bus-Id" in ln.text for ln in r) and any(word.search(ln.text) for ln in r)), None)
    if at is None:
        raise ParseError(tool, f"no device header (a row naming {device} and Bus-Id)")
    head = recs[at]
    if any(len(r.cells) != len(head[0].cells) for r in head):
        raise ParseError(tool, "the header rows have different cell counts", head[-1].lineno)
    n = len(head)
    parts: list[tuple[BoxLine, ...]] = []
    i = at + 1
    while i < len(recs) and not any(end.search(ln.text) for ln in recs[i]):
        rec = recs[i]
        if len(rec) % n:
            raise ParseError(tool, f"a device record of {len(rec)} row(s) under a header of {n}", rec[0].lineno)
        for j in range(0, len(rec), n):
            parts.append(tuple(rec[j:j + n]))
            check_devices(len(parts), tool, rec[j].lineno)
        i += 1
    return DeviceTable(lines=tuple(lines), title=" ".join(ln.text for r in recs[:at] for ln in r),
                       header_rows=tuple(head), header=header_labels(head, labels), devices=tuple(parts),
                       rest=tuple(tuple(r) for r in recs[i:]))


Device = TypeVar("Device")


def read_devices(table: DeviceTable, build: Callable[[tuple[BoxLine, ...]], Device],
                 index: Callable[[Device], int], tool: str, noun: str = "GPU") -> list[Device]:
    """``build`` each device part of ``table``, in order; ParseError when two have one index."""
    out: list[Device] = []
    seen: set[int] = set()
    for part in table.devices:
        device = build(part)
        if index(device) in seen:
            raise ParseError(tool, f"{noun} {index(device)} listed twice", part[0].lineno)
        seen.add(index(device))
        out.append(device)
    return out


@dataclass(frozen=True)
class ProcessRow:
    """One process row: ``words`` label key -> the word under it, ``name`` the words between
    the labels before and after the name column (a process name may hold blanks)."""

    words: dict[str, str]
    name: str
    lineno: int


def process_rows(recs: Sequence[Sequence[BoxLine]], tool: str, labels: Sequence[tuple[str, str]], *,
                 device: str = "gpu", name_required: bool = True, same_record: bool = False) -> list[ProcessRow]:
    """The rows under the process header (the first row naming PID; it must name ``device``
    and ``pid`` among ``labels``), read in the header's order; ``No running processes found``
    rows are skipped. ``name_required``: a row must hold a word for the name column;
    ``same_record``: process rows may follow the header in its own record (xpu-smi draws no
    rule under it), else the rest of the header's record is its title and units."""
    head: Optional[list[str]] = None
    out: list[ProcessRow] = []
    for rec in recs:
        rows: Sequence[BoxLine] = rec
        if head is None:
            row = next((r for r in rec if re.search(r"\bPID\b", r.joined)), None)
            if row is None:
                continue
            head = [lab.key for lab in cell_labels(" ".join(row.cells), labels) if not lab.key.startswith("?")]
            if "pid" not in head or device not in head:
                raise ParseError(tool, f"process header without {device.upper()} and PID", row.lineno)
            rows = [r for r in rec[rec.index(row) + 1:] if same_record and not _HEADER_REST.fullmatch(r.joined)]
        out += [_process_row(row, head, tool, name_required) for row in rows
                if not _NO_PROCESSES.match(row.joined)]
    return out


def _process_row(row: BoxLine, head: Sequence[str], tool: str, name_required: bool) -> ProcessRow:
    words = _SPLIT_UNIT.sub(r"\1\2", row.joined).split()
    named = "name" in head
    k = head.index("name") if named else len(head)
    before, after = head[:k], head[k + 1:]
    if len(words) < len(before) + len(after) + (1 if named and name_required else 0):
        raise ParseError(tool, f"process row with {len(words)} words under {len(head)} labels", row.lineno)
    got = dict(zip(before, words))
    got.update(zip(after, words[len(words) - len(after):] if after else []))
    return ProcessRow(got, " ".join(words[len(before):len(words) - len(after)]) if named else "", row.lineno)


# --------------------------------------------------------------------------- link matrices


@dataclass(frozen=True)
class Matrix:
    """A ``topo -m`` matrix: ``names`` the device columns in order (``NPU0``...), ``cells``
    (row name, column name) -> the connection word (``X`` on the diagonal), ``extra`` per
    row the columns after the devices (``CPU Affinity``...)."""

    names: tuple[str, ...]
    cells: dict[tuple[str, str], str]
    extra: dict[str, dict[str, str]]
    legend: dict[str, str]


def parse_matrix(text: str, tool: str, device: str = r"[A-Za-z]+[-_]?\d+") -> Matrix:
    """Read a device link matrix: the first line made of device names (``device`` matches
    each) is the header; each following line starting with one of those names is its row,
    its words in the header's column order; trailing header words (``CPU Affinity``) become
    ``extra``; a ``Legend:`` section (``WORD = meaning``) ends it. Banner lines before the
    header are skipped."""
    rx = re.compile(device)
    lines = text.splitlines()
    head_at = None
    names: list[str] = []
    for i, raw in enumerate(lines):
        if len(raw) > MAX_LINE:
            raise ParseError(tool, f"a line of {len(raw)} characters", i + 1)
        words = raw.split()
        # the header: device names only at its start (a row starts with one name, then X or a link word)
        if words and rx.fullmatch(words[0]) and (len(words) > 1 and rx.fullmatch(words[1]) or raw[:1].isspace()):
            n = 0
            while n < len(words) and rx.fullmatch(words[n]):
                n += 1
            head_at, names = i, words[:n]
            extras = re.split(r"\s{2,}", raw.strip())[n:]
            break
    if head_at is None:
        raise ParseError(tool, "no matrix header (an indented line of device names)")
    cells: dict[tuple[str, str], str] = {}
    extra: dict[str, dict[str, str]] = {}
    legend: dict[str, str] = {}
    in_legend = False
    for j in range(head_at + 1, len(lines)):
        raw = lines[j]
        s = raw.strip()
        if not s:
            continue
        if re.match(r"Legend\s*:?$", s, re.I):
            in_legend = True
            continue
        if in_legend:
            m = re.match(r"(\S+)\s*=\s*(.*)$", s)
            if m:
                legend[m.group(1)] = m.group(2).strip()
            continue
        words = s.split()
        if words[0] not in names:
            raise ParseError(tool, f"a matrix row must start with one of {', '.join(names)}: {s[:60]!r}", j + 1)
        if words[0] in extra:
            raise ParseError(tool, f"{words[0]} has two rows", j + 1)
        if len(words) < len(names) + 1:
            raise ParseError(tool, f"{words[0]}: {len(words) - 1} columns, the header names {len(names)}", j + 1)
        for col, word in zip(names, words[1:]):
            cells[(words[0], col)] = word
        rest = words[1 + len(names):]
        extra[words[0]] = dict(zip(extras, rest)) if len(rest) == len(extras) else (
            {extras[0]: " ".join(rest)} if extras and rest else {})
    if not extra:
        raise ParseError(tool, "a matrix header without rows", head_at + 1)
    return Matrix(tuple(names), cells, extra, legend)


def pairs(m: Matrix, words: Iterable[str]) -> list[tuple[str, str, str]]:
    """(row, column, word) for each off-diagonal cell whose word is one of ``words``
    (case-insensitive), in row then column order."""
    want = {w.upper() for w in words}
    return [(r, c, w) for (r, c), w in m.cells.items() if r != c and w.upper() in want]
