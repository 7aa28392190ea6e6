"""Pure parsing of ``rocm-smi`` and Hygon ``hy-smi`` output (text -> Report); only ParseError escapes.

``hy-smi`` is Hygon's fork of ``rocm-smi`` and prints the same family of formats:

- ``--json``: ``{"card0": {key: value, ...}, "system": {...}}`` where every value is a string
  and the keys changed across versions ("GPU ID" -> "Device ID", "Card series" -> "Card Series",
  "VRAM Total Memory (B)" vs Hygon's "vram Total Memory (MiB)", "(Sensor memory)" vs
  "(Sensor mem)"...): fields are found by key patterns, never by position or exact file;
- the default "Concise Info" table (ROCm 4 ``GPU Temp AvgPwr ...``, Hygon DTK ``DCU Temp ...``,
  ROCm 6 two-line headers with ``Partitions`` and a device name line): columns are cut at the
  start offsets of the header words, because the tool left-justifies every cell of a column
  at the same offset as its header word;
- the keyed text of single options (``GPU[0]  : GPU use (%): 0``);
- ``--showpidgpus`` text and the topology (``--showtopo``, see ``parse_topology``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from hetero_exporter.sdk import tables, values
from hetero_exporter.sdk.contract import ParseError

# --------------------------------------------------------------------------- value parsing


def is_na(v: Optional[str]) -> bool:
    """The shared NA spellings, plus rocm-smi's ``N/A (...)`` annotations."""
    return values.is_na(v) or str(v).strip().upper().startswith("N/A")


def number(v: Optional[str]) -> Optional[float]:
    """'45.0' / '41.0°C' / '50.0c' / '(500Mhz)' / '0%' / '23.0W' -> the number; None for N/A
    and for text without one (a cell the tool filled with a word)."""
    if is_na(v):
        return None
    try:
        return values.number(v)
    except ValueError:
        return None


def frequency(v: Optional[str]) -> Optional[float]:
    """'(500Mhz)' / '1319Mhz' / '1.2GHz' -> hertz; None for N/A, another unit, or a number out of
    range once in hertz ('1e308Mhz')."""
    if is_na(v):
        return None
    text = str(v).strip().rstrip("*").strip().strip("()").strip()
    try:
        hz = values.quantity(text)
    except ValueError:
        return None
    unit = re.sub(r"[\d.\s+-]", "", text).lower()
    return hz if unit.endswith("hz") and hz is not None and math.isfinite(hz) else None


def hex_id(v: Optional[str]) -> Optional[str]:
    if is_na(v):
        return None
    m = re.match(r"^\s*(0x[0-9a-fA-F]+)", v or "")
    return m.group(1).lower() if m else None


# --------------------------------------------------------------------------- the report


@dataclass
class Card:
    """One device as the tool printed it: ``index`` (card N / GPU[N]), the raw key/value
    pairs, and (concise tables) values already typed by column."""

    index: int
    raw: dict[str, str] = field(default_factory=dict)
    columns: dict[str, str] = field(default_factory=dict)  # concise: column semantic -> cell
    line: Optional[int] = None


@dataclass
class Report:
    tool: str
    format: str  # json | keyed | concise
    cards: list[Card]
    system: dict[str, str] = field(default_factory=dict)
    dcu_header: bool = False  # the table names devices "DCU" (Hygon)


def _decode_json(text: str, tool: str) -> Any:
    """The first JSON object in the text (rocm-smi may print warnings before it)."""
    m = re.search(r"^[ \t]*\{", text, re.M)
    if m is None:
        raise ParseError(tool, "no JSON object in the output")
    start = m.end() - 1
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except (ValueError, RecursionError) as e:
        raise ParseError(tool, f"--json output is not valid JSON: {e}", text.count("\n", 0, start) + 1) from None
    return doc


_CARD_KEY = re.compile(r"^card(\d+)$", re.I)


def parse_json(text: str, tool: str = "rocm-smi") -> Report:
    doc = _decode_json(text, tool)
    if not isinstance(doc, dict):
        raise ParseError(tool, f"--json output is a {type(doc).__name__}, expected an object of cards")
    cards, system = [], {}
    for key, body in doc.items():
        m = _CARD_KEY.match(str(key))
        if m:
            if not isinstance(body, dict):
                raise ParseError(tool, f"{key}: expected an object of fields, got {type(body).__name__}")
            idx = values.integer(m.group(1), 4)
            if idx is None:
                raise ParseError(tool, f"{str(key)[:40]}: not a card index of at most 4 digits")
            cards.append(Card(idx, {str(k): _str(v) for k, v in body.items()}))
            tables.check_devices(len(cards), tool)
        elif str(key).lower() == "system" and isinstance(body, dict):
            system = {str(k): _str(v) for k, v in body.items()}
    if not cards:
        raise ParseError(tool, "--json output has no 'cardN' entries")
    cards.sort(key=lambda c: c.index)
    return Report(tool, "json", cards, system)


def _str(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)


_KEYED = re.compile(r"^\s*(GPU|DCU|HCU)\[(\d+)\]\s*:\s*(.*)$")


def parse_keyed(text: str, tool: str = "rocm-smi") -> Report:
    """``GPU[0]          : VRAM Total Memory (B): 206141652992`` lines (split like the tool's
    own JSON formatter: key before the first ': ', value after it). hy-smi ``--showbus`` puts two
    pairs on one line, joined by `` --> `` (``PCI Bus: <bdf> --> SN: <serial>``): each is read;
    ``SN`` is the serial number."""
    cards: dict[int, Card] = {}
    dcu = False
    for n, line in enumerate(text.splitlines(), 1):
        m = _KEYED.match(line)
        if not m:
            continue
        dcu = dcu or m.group(1) in ("DCU", "HCU")
        idx = values.integer(m.group(2), 4)
        if idx is None:
            raise ParseError(tool, f"{m.group(1)}[{m.group(2)[:20]}]: not an index of at most 4 digits", n)
        card = cards.setdefault(idx, Card(idx, line=n))
        tables.check_devices(len(cards), tool, n)
        # hy-smi --showbus joins two pairs on a line: "PCI Bus: 0000:05:00.0 --> SN: 2500238601000586"
        for part in m.group(3).split(" --> ")[:8]:
            key, sep, value = part.partition(": ")
            if sep:
                key = key.strip()
                card.raw["Serial Number" if key == "SN" else key] = value.strip()
    if not cards:
        raise ParseError(tool, "no 'GPU[n] : key: value' lines")
    return Report(tool, "keyed", [cards[i] for i in sorted(cards)], {}, dcu)


# Concise table column semantics by header word (case-insensitive).
_COLUMNS = (
    ("index", re.compile(r"^(GPU|DCU|HCU|Device)$", re.I)),
    ("model_rev", re.compile(r"^\[Model\s*:\s*Revision\]$", re.I)),
    ("ids", re.compile(r"^IDs$", re.I)),
    ("node", re.compile(r"^Node$", re.I)),
    ("temp", re.compile(r"^Temp", re.I)),
    ("power", re.compile(r"^(AvgPwr|Power)$", re.I)),
    ("partitions", re.compile(r"^Partitions$", re.I)),
    ("sclk", re.compile(r"^SCLK$", re.I)),
    ("mclk", re.compile(r"^MCLK$", re.I)),
    ("fan", re.compile(r"^Fan$", re.I)),
    ("perf", re.compile(r"^Perf$", re.I)),
    ("pwrcap", re.compile(r"^PwrCap$", re.I)),
    ("vram_pct", re.compile(r"^VRAM%$", re.I)),
    ("util", re.compile(r"^(GPU|DCU|HCU)%$", re.I)),
)
_SEPARATOR = re.compile(r"^\s*[=_\-]{3,}")


def _cells(line: str) -> list[tuple[int, str]]:
    """Words separated by two or more spaces, with their start offsets."""
    return [(m.start(), m.group(0)) for m in re.finditer(r"\S+(?: \S+)*", line)]


def _cut(line: str, starts: list[int]) -> list[str]:
    out = []
    for i, s in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(line)
        out.append(line[s:end].strip() if s < len(line) else "")
    return out


MAX_LINE = 4096  # the concise table is ~150 characters wide
MAX_COLUMNS = 64  # it has ~15: each device row is cut at every column start


def _end_of_log(line: str) -> bool:
    """``... end of ... log`` (the table's closing banner), found without a pattern that would
    rescan the rest of the line from every "end of"."""
    low = line.lower()
    i = low.find("end of ")
    return i >= 0 and "log" in low[i + 7:]


def _in_parentheses(text: str) -> Optional[str]:
    """What the first ``(...)`` of ``text`` holds, else None."""
    i = text.find("(")
    j = text.find(")", i + 1) if i >= 0 else -1
    return text[i + 1:j] if j >= 0 else None


def parse_concise(text: str, tool: str = "rocm-smi") -> Report:
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if len(line) > MAX_LINE:
            raise ParseError(tool, f"a line of {len(line)} characters; {tool} prints short lines", n)
    header_at = None
    for n, line in enumerate(lines):
        words = [w for _, w in _cells(line)]
        if words and re.match(r"^(GPU|DCU|HCU|Device)$", words[0], re.I) and any(
                re.match(r"^Temp", w, re.I) for w in words):
            header_at = n
            break
    if header_at is None:
        raise ParseError(tool, "not rocm-smi/hy-smi output: no JSON object (--json), no 'GPU[n] : key: value' "
                               "lines and no Concise Info header (a line starting with GPU/DCU/Device that names Temp)")
    head = _cells(lines[header_at])
    if len(head) > MAX_COLUMNS:
        raise ParseError(tool, f"a header of {len(head)} columns; {tool} prints about 15", header_at + 1)
    starts = [s for s, _ in head]
    names = [w for _, w in head]
    sub = [""] * len(names)
    n = header_at + 1
    # ROCm 6 prints a second header line: "(Junction)", "(Socket)", "(Mem, Compute)", "Name (20 chars)"
    if n < len(lines) and lines[n].strip() and not _SEPARATOR.match(lines[n]) and not re.match(r"^\s*\d", lines[n]):
        for s, w in _cells(lines[n]):
            col = max((i for i, st in enumerate(starts) if st <= s), default=0)
            sub[col] = (sub[col] + " " + w).strip()
        n += 1
    semantics = []
    for name in names:
        sem = next((k for k, pat in _COLUMNS if pat.match(name)), name.lower())
        semantics.append(sem)
    if semantics[0] != "index":
        raise ParseError(tool, f"the first column is {names[0]!r}, expected GPU, DCU, HCU or Device", header_at + 1)
    name_col = next((i for i, s in enumerate(sub) if s.lower().startswith("name")), None)
    cards: list[Card] = []
    for k in range(n, len(lines)):
        line = lines[k]
        if not line.strip() or _SEPARATOR.match(line):
            continue
        if re.match(r"^\d+\s", line + " "):
            cells = _cut(line, starts)
            try:
                idx = int(cells[0])
            except ValueError:
                raise ParseError(tool, f"device index {cells[0]!r} is not a number", k + 1) from None
            card = Card(idx, line=k + 1)
            for sem, hdr, subhdr, cell in zip(semantics, names, sub, cells):
                card.columns[sem] = cell
                card.raw[f"{hdr} {subhdr}".strip()] = cell
            cards.append(card)
            tables.check_devices(len(cards), tool, k + 1)
        elif cards and name_col is not None and line[: starts[name_col]].strip() == "":
            cards[-1].columns["name"] = line.strip()  # the device's second line: its name
        elif _end_of_log(line):
            break
    if not cards:
        raise ParseError(tool, "the Concise Info table has no device rows", header_at + 1)
    table = Report(tool, "concise", cards, {}, names[0].upper() in ("DCU", "HCU"))
    for card in cards:  # the sensor named by the sub-header "(Junction)" or the header "Temp (DieEdge)"
        if "temp" in semantics:
            i = semantics.index("temp")
            inline = _in_parentheses(names[i])
            card.columns["temp_sensor"] = sub[i] or (f"({inline})" if inline is not None else "")
        else:
            card.columns["temp_sensor"] = ""
        card.columns["power_kind"] = (names[semantics.index("power")] + " " + sub[semantics.index("power")]
                                      if "power" in semantics else "")
        card.columns["partitions_header"] = sub[semantics.index("partitions")] if "partitions" in semantics else ""
    return table


def parse_report(text: str, tool: str = "rocm-smi") -> Report:
    """Any of the three formats, recognised by structure."""
    if not isinstance(text, str):
        raise ParseError(tool, f"expected text, got {type(text).__name__}")
    if re.search(r"^[ \t]*\{", text, re.M):
        return parse_json(text, tool)
    if any(_KEYED.match(line) for line in text.splitlines()):
        return parse_keyed(text, tool)
    return parse_concise(text, tool)


_PID_GPUS = re.compile(r"^\s*PID ([0-9]{1,20}) is using ([0-9]{1,4}) DRM device\(s\):?\s*$")


def parse_pid_gpus(text: str) -> dict[int, tuple[int, ...]]:
    """``rocm-smi --showpidgpus`` (text): 'PID 5100 is using 2 DRM device(s):' then the indices."""
    out: dict[int, tuple[int, ...]] = {}
    lines = text.splitlines()
    for n, line in enumerate(lines):
        m = _PID_GPUS.match(line)
        if not m:
            continue
        want, got = int(m.group(2)), list[int]()
        k = n + 1  # by index: a slice of the rest per PID line copies it each time
        while k < len(lines) and len(got) < want and re.fullmatch(r"[\d\s]+", lines[k].strip() or "x"):
            got.extend(i for i in map(values.integer, lines[k].split()) if i is not None)
            k += 1
        out[int(m.group(1))] = tuple(got[:want])
    return out



# --------------------------------------------------------------------------- topology

_TOPO_KEY = re.compile(r"^\(Topology\) (Link type|Hops|Weight) between DRM devices ([0-9]{1,4}) and ([0-9]{1,4})$", re.I)


@dataclass(frozen=True)
class Hop:
    """What the topology says about one pair of devices (DRM indexes ``a < b``): ``type``
    (``XGMI``, ``PCIE``...), ``hops`` and ``weight`` (the KFD link weight), None when absent."""

    a: int
    b: int
    type: Optional[str] = None
    hops: Optional[float] = None
    weight: Optional[float] = None


def parse_topology(system: Mapping[str, str]) -> dict[frozenset, Hop]:
    """The pairs of ``rocm-smi --showtopo --json`` (or ``--showtopotype --showtopohops
    --showtopoweight``): system keys ``(Topology) Link type between DRM devices 0 and 1`` ->
    ``XGMI``, ``... Hops ...`` -> ``1``, ``... Weight ...`` -> ``15`` (the layout of the ROCm 5.7
    MI100 capture in ../shared/fixtures/rocm-smi). No Hygon ``hy-smi --showtopo`` capture exists:
    hy-smi, a fork of rocm-smi, is read as printing the same keys (its --json formatter is
    rocm-smi's); pairs whose key does not match are ignored."""
    raw: dict[frozenset, dict[str, Any]] = {}
    for key, value in system.items():
        m = _TOPO_KEY.match(str(key).strip())
        if not m:
            continue
        a, b = int(m.group(2)), int(m.group(3))
        if a == b:
            continue
        entry = raw.setdefault(frozenset((a, b)), {"a": min(a, b), "b": max(a, b)})
        what = m.group(1).lower()
        if what == "link type":
            entry["type"] = None if is_na(value) else str(value).strip().upper()
        else:
            entry["hops" if what == "hops" else "weight"] = number(value)
    return {k: Hop(**v) for k, v in raw.items()}

