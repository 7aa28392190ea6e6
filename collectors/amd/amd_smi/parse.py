"""``amd-smi`` output, read by structure: ``static``, ``metric``, ``process``, ``monitor``,
``list`` and ``topology``, as text or ``--json``.

- Text (``static``/``metric``/``process``/``list``): ``GPU: N`` blocks (``CPU: N`` blocks of an
  APU host are skipped) of indented ``KEY: value`` lines; a key without a value opens a section
  for the deeper lines; a key seen again in one section (``PROCESS_INFO``, ``POLICY_ID``) makes
  a list. Values keep their units (``113 MHz``, ``64289 MB``, ``41 °C``).
- ``--json``: a list of ``{"gpu": N, ...}`` objects (ROCm 6.0-6.3), or an object holding that
  list (``{"gpu_data": [...]}``, later releases); leaves are ``{"value": v, "unit": u}`` in newer
  versions, plain numbers or strings ("N/A") in older ones.
- the default ``amd-smi`` box, ``process --csv``, ``topology`` / ``xgmi`` tables: layouts.py.
- ``monitor`` text: a header of column names (``GPU  POWER  GPU_TEMP ...``) and a row per GPU
  whose cells are ``N/A``, a number or a number and a unit (``139 W``, ``0.3/192.0 GB``).

Everything becomes one tree per GPU index (``AmdGpu.tree``: lower-case keys, leaves as printed
text, ``{value, unit}`` flattened to ``"v u"``), so each field is looked up by its key path
whatever the form. amd-smi's ``MB``/``GB`` are binary (it divides bytes by 1024**2), as
sdk.values reads them. Only ParseError escapes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from hetero_exporter.sdk import pciaddr, values
from hetero_exporter.sdk.contract import ParseError

from . import layouts
from .layouts import groups

TOOL = "amd-smi"
MAX_LINE = 4096
MAX_DEPTH = 32
_BLOCK = re.compile(r"^(?P<kind>GPU|CPU|CORE|NIC)\s*:\s*(?P<index>[0-9]{1,4})\s*$")
# read from right-stripped lines; the value is all after the blanks that follow the colon (a lazy
# value then a trailing-blank test would try every split of a long blank run: quadratic)
_KV = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z][\w .()/%\-]{0,80}?)\s*:(?:\s+(?P<value>.*))?$")
_MONITOR_FIRST = re.compile(r"^\s*(GPU|gpu)\s+[A-Za-z_%]")


@dataclass
class AmdGpu:
    """One GPU of an amd-smi output: its index and every key it printed."""

    index: int
    tree: dict = field(default_factory=dict)


@dataclass
class AmdOutput:
    """A parsed amd-smi output: the GPUs by index, in printing order, and its form."""

    gpus: dict[int, AmdGpu]
    form: str  # "text", "json", "monitor", "default" (the plain ``amd-smi`` box), "csv" or "tables"


def _key(k: Any) -> str:
    return re.sub(r"\s+", "_", str(k).strip()).lower()


def _put(section: dict, key: str, value: Any) -> None:
    if key in section:
        old = section[key]
        if isinstance(old, list):  # made here: append in place (a copy per repeat is quadratic)
            old.append(value)
        else:
            section[key] = [old, value]
    else:
        section[key] = value


# --------------------------------------------------------------------------- text
def _text_blocks(text: str) -> dict[int, AmdGpu]:
    gpus: dict[int, AmdGpu] = {}
    current: Optional[dict] = None  # the tree of the GPU block being read; None in other blocks
    in_block = False
    stack: list[tuple[int, dict]] = []
    open_list: Optional[tuple[dict, str]] = None  # a "[a, b," value amd-smi wrapped onto the next lines
    for lineno, raw in enumerate(text.expandtabs(8).splitlines(), 1):
        if len(raw) > MAX_LINE:
            raise ParseError(TOOL, f"a line of {len(raw)} characters; amd-smi prints short lines", lineno)
        line = raw.rstrip()
        if not line.strip() or line.strip() in ("...", "…"):
            continue
        head = _BLOCK.match(line)
        if head and not line[:1].isspace():
            in_block = True
            if head.group("kind") == "GPU":
                idx = int(head.group("index"))
                if idx in gpus:
                    raise ParseError(TOOL, f"GPU: {idx} printed twice", lineno)
                gpus[idx] = AmdGpu(idx)
                current = gpus[idx].tree
                stack = [(-1, current)]
            else:
                current, stack = None, []
            continue
        if not in_block:
            raise ParseError(TOOL, f"expected a 'GPU: N' line, got {line.strip()[:60]!r}", lineno)
        if current is None:
            continue  # a CPU block of an APU host: not a device of this model
        if open_list is not None and line[:1].isspace():
            section, key = open_list
            old = section[key]
            if isinstance(old, str) and len(old) + len(line) <= MAX_LINE * 4:
                section[key] = f"{old} {line.strip()}"
                if line.rstrip().endswith("]"):
                    open_list = None
                continue
        open_list = None
        m = _KV.match(line)
        if m is None:
            raise ParseError(TOOL, f"not a 'KEY: value' line: {line.strip()[:60]!r}", lineno)
        indent = len(m.group("indent"))
        if indent == 0:
            raise ParseError(TOOL, f"a key outside a 'GPU: N' block: {line.strip()[:60]!r}", lineno)
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        if len(stack) > MAX_DEPTH:
            raise ParseError(TOOL, "sections nested too deep", lineno)
        section = stack[-1][1]
        key, value = _key(m.group("key")), m.group("value")
        if value:
            _put(section, key, value)
            if value.startswith("[") and not value.endswith("]") and isinstance(section.get(key), str):
                open_list = (section, key)
        else:
            sub: dict = {}
            _put(section, key, sub)
            stack.append((indent, sub))
    if not in_block:
        raise ParseError(TOOL, "no 'GPU: N' block: not amd-smi output")
    return gpus


# --------------------------------------------------------------------------- monitor
def _cells(line: str) -> list[str]:
    """A monitor row's cells: ``N/A``, a number, or a number and its unit (``139 W``,
    ``N/A Mb/s``, ``2.9/ 15.9 GB``): layouts.groups."""
    return groups(line)


def _monitor(text: str) -> dict[int, AmdGpu]:
    lines = [ln for ln in text.expandtabs(8).splitlines() if ln.strip()]
    header = [_key(h) for h in lines[0].split()]
    if len(set(header)) != len(header):
        raise ParseError(TOOL, "monitor header names a column twice", 1)
    gpus: dict[int, AmdGpu] = {}
    for lineno, line in enumerate(lines[1:], 2):
        if len(line) > MAX_LINE:
            raise ParseError(TOOL, "a line too long for amd-smi monitor", lineno)
        if _MONITOR_FIRST.match(line):  # the header again (monitor -w repeats it)
            continue
        cells = _cells(line)
        if len(cells) != len(header):
            raise ParseError(TOOL, f"monitor row has {len(cells)} cells, the header {len(header)}", lineno)
        row = dict(zip(header, cells))
        gpu = row.pop("gpu")
        idx = values.integer(gpu, 4)
        if idx is None:
            raise ParseError(TOOL, f"monitor row's GPU is {gpu[:20]!r}, not a number", lineno)
        if "xcp" in row and gpus.get(idx):
            continue  # a second XCP of a partitioned GPU: the device row is the first
        gpus[idx] = AmdGpu(idx, {"monitor": row})
    return gpus


# --------------------------------------------------------------------------- JSON
def _flatten(v: Any, depth: int = 0) -> Any:
    """JSON leaves as the text prints them: ``{"value": 10, "unit": "W"}`` -> ``"10 W"``."""
    if depth > MAX_DEPTH:
        raise ParseError(TOOL, "JSON nested too deep")
    if isinstance(v, dict):
        if "value" in v and set(v) <= {"value", "unit"} and not isinstance(v["value"], (dict, list)):
            unit = v.get("unit")
            val = v["value"]
            return f"{val} {unit}" if unit not in (None, "") and not values.is_na(str(val)) else str(val)
        return {_key(k): _flatten(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [_flatten(x, depth + 1) for x in v]
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, (int, float)):
        return repr(v) if isinstance(v, float) else str(v)
    return "N/A" if v is None else str(v)


def _json_gpus(doc: Any) -> dict[int, AmdGpu]:
    items = doc
    if isinstance(doc, dict):  # {"gpu_data": [...], "cpu_data": [...]} (newer), or one GPU
        lists = [v for k, v in doc.items() if "gpu" in str(k).lower() and isinstance(v, list)]
        items = lists[0] if lists else [doc]
    if not isinstance(items, list):
        raise ParseError(TOOL, "JSON is not a list of GPUs")
    gpus: dict[int, AmdGpu] = {}
    for n, item in enumerate(items):
        if not isinstance(item, dict) or "gpu" not in item:
            raise ParseError(TOOL, f"JSON item {n} is not an object with a 'gpu' index")
        raw = item["gpu"]
        idx = None if isinstance(raw, bool) or not isinstance(raw, (int, str)) else values.integer(str(raw), 4)
        if idx is None:
            raise ParseError(TOOL, f"JSON item {n}: 'gpu' is {str(raw)[:20]!r}, not an index of at most 4 digits")
        tree = _flatten({k: v for k, v in item.items() if k != "gpu"})
        if idx in gpus:  # partitions/XCPs print an object each: the first is the device
            continue
        gpus[idx] = AmdGpu(idx, tree)
    return gpus


def parse_output(text: str) -> AmdOutput:
    """Any amd-smi output this module reads (the form picked by structure)."""
    if not isinstance(text, str):
        raise ParseError(TOOL, f"expected text, got {type(text).__name__}")
    body = text.lstrip("\ufeff \t\r\n")
    if not body:
        raise ParseError(TOOL, "empty output")
    if body[0] in "[{":
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError) as e:
            raise ParseError(TOOL, f"not valid JSON: {str(e)[:80]}") from None
        return AmdOutput(_json_gpus(doc), "json")
    if layouts.is_default_view(body):
        gpus, _procs = layouts.default_view(body)
        return AmdOutput({i: AmdGpu(i, t) for i, t in gpus.items()}, "default")
    if layouts.is_process_csv(body):
        return AmdOutput({i: AmdGpu(i, t) for i, t in layouts.process_csv(body).items()}, "csv")
    if layouts.is_tables(body):
        return AmdOutput({i: AmdGpu(i, t) for i, t in layouts.topology_tables(body).items()}, "tables")
    if _MONITOR_FIRST.match(body.splitlines()[0]) and ":" not in body.splitlines()[0]:
        return AmdOutput(_monitor(body), "monitor")
    return AmdOutput(_text_blocks(body), "text")


# --------------------------------------------------------------------------- lookups
def find(tree: Any, *paths: str) -> Optional[str]:
    """The first leaf found at one of ``paths`` (``"asic/asic_serial"``); a list's first item."""
    for path in paths:
        node = tree
        for part in path.split("/"):
            if isinstance(node, list):
                node = node[0] if node else None
            node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                break
        if isinstance(node, list):
            node = node[0] if node else None
        if isinstance(node, str):
            return node
    return None


def quantity(text: Optional[str], default_unit: str = "") -> Optional[float]:
    """A value in base units; None for N/A; ValueError for unreadable text. amd-smi's
    ``°C``, ``MB`` (MiB), ``GT/s``, ``mV`` are understood."""
    if text is None or values.is_na(text):
        return None
    t = text.strip()
    m = re.match(r"^([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*)$", t)
    if m is None:
        raise ValueError(f"expected a number, got {t[:40]!r}")
    unit = (m.group(2).strip() or default_unit).lower()
    extra = {"gt/s": 1e9, "mt/s": 1e6, "mv": 1e-3, "v": 1.0, "mb/s": 125000.0, "ns": 1e-9, "us": 1e-6,
             "ms": 1e-3, "s": 1.0, "uw": 1e-6, "c": 1.0, "°c": 1.0}
    if unit in extra:
        return float(m.group(1)) * extra[unit]
    return values.quantity(m.group(1), unit) if unit else values.quantity(m.group(1))


def bdf(tree: Any) -> Optional[str]:
    return pciaddr.normalize(find(tree, "bus/bdf", "bdf", "pcie/bdf", "list/bdf"))
