"""``amd-smi`` layouts that are not ``KEY: value`` blocks or JSON, read by structure into the same
per-GPU trees as parse.py (``AmdGpu.tree``; only ParseError escapes):

- the default view (``amd-smi`` alone, 25.x/26.x+): an nvidia-smi-like box. A title record
  (``AMD-SMI <v>  amdgpu version: <driver>  ROCm version: <v>``, an optional ``VBIOS version:``
  line, ``Platform:``), a two-row header (``BDF GPU-Name | Mem-Uti Temp UEC Power-Usage`` over
  ``GPU HIP-ID OAM-ID Partition-Mode | GFX-Uti Fan Mem-Usage``), two rows per GPU, then a
  ``Processes:`` box (``GPU PID Process Name GTT_MEM VRAM_MEM MEM_USAGE CU %``). Cells are read
  by the header's names: each value group (``0 %``, ``37 °C``, ``135/750 W``, ``N/A``) goes to the
  next name; the GPU name takes what is left between the BDF and the next cell.
- ``process --csv``: a ``gpu,name,pid,...,vram_mem,...`` header and a row per process (bytes).
- ``topology`` text: ``ACCESS TABLE:``, ``WEIGHT TABLE:``, ``HOPS TABLE:``, ``LINK TYPE TABLE:``,
  ``NUMA BW TABLE:`` sections, each a matrix of GPUs named by BDF (header line, one row each).
- ``xgmi`` text: ``LINK METRIC TABLE:``, a ``GPUn  bdf  bit_rate  max_bandwidth  link_type`` row
  per GPU then its ``Read`` / ``Write`` rows with one cell (``1259 KB``, ``N/A``) per peer column.
"""

from __future__ import annotations

import csv
import re
from typing import Any, Optional

from hetero_exporter.sdk import pciaddr, tables, values
from hetero_exporter.sdk.contract import ParseError

TOOL = "amd-smi"
MAX_PEERS = 64
# units amd-smi prints after a number (a value group is a number or "a/b" and one of these)
UNITS = frozenset(u.lower() for u in ("W", "mW", "°C", "C", "%", "MHz", "GHz", "B", "KB", "MB", "GB", "TB",
                                      "Mb/s", "Gb/s", "GT/s", "mV", "J", "uJ", "ns", "us", "ms", "s"))
_NUMISH = re.compile(r"^(?:[-+]?\d+(?:\.\d*)?|N/A)(?:/\s*(?:[-+]?\d+(?:\.\d*)?|N/A)?)?$", re.I)
_BDF = r"(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_TITLE = re.compile(r"AMD-SMI\s+(?P<tool>\S+)(?:.*?amdgpu version:\s*(?P<driver>\S+))?", re.I)
TABLE_HEAD = re.compile(r"^(?P<name>[A-Z][A-Z ]{0,40}?)\s+TABLE\s*:\s*$")


def groups(text: str) -> list[str]:
    """Value groups of a cell: ``0 %``, ``37 °C``, ``135/750 W``, ``2.9/ 15.9 GB``, ``N/A``, a word."""
    tokens = text.split()
    out: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.endswith("/") and i + 1 < len(tokens) and _NUMISH.match(tok + tokens[i + 1]):
            tok, i = tok + tokens[i + 1], i + 1  # "2.9/ 15.9 GB": one value with an inner blank
        if i + 1 < len(tokens) and _NUMISH.match(tok) and tokens[i + 1].lower() in UNITS:
            out.append(f"{tok} {tokens[i + 1]}")
            i += 2
        else:
            out.append(tok)
            i += 1
    return out


def split_fraction(text: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """``135/750 W`` -> (``135 W``, ``750 W``); ``N/A/0 W`` -> (``N/A``, ``0 W``)."""
    if not text:
        return None, None
    num, _, unit = text.partition(" ")
    m = re.fullmatch(r"(N/A|[-+\d.]+)/(N/A|[-+\d.]+)", num.replace(" ", ""), re.I)
    if m is None:
        return None, None
    def one(v: str) -> str:
        return v if values.is_na(v) or not unit else f"{v} {unit}"
    return one(m.group(1)), one(m.group(2))


def _names(cell: str) -> list[str]:
    """The column names of a header cell (``Process Name`` and ``CU %`` are one name each)."""
    cell = re.sub(r"Process Name", "Process_Name", cell)
    cell = re.sub(r"CU %", "CU%", cell)
    return [n.lower() for n in cell.split()]


def _assign(names: list[str], cell: str, lineno: int, rest: str = "gpu-name") -> dict[str, str]:
    got = groups(cell)
    if len(got) > len(names) and rest in names:  # a name with blanks: the leftover groups are it
        at = names.index(rest)
        extra = len(got) - len(names)
        got = got[:at] + [" ".join(got[at:at + extra + 1])] + got[at + extra + 1:]
    if len(got) != len(names):
        raise ParseError(TOOL, f"a cell of {len(got)} values under {len(names)} names ({' '.join(names)[:60]})", lineno)
    return dict(zip(names, got))


# --------------------------------------------------------------------------- the default view
def is_default_view(text: str) -> bool:
    head = text.lstrip()[:400]
    return head.startswith("+") and "AMD-SMI" in head


def default_view(text: str) -> tuple[dict[int, dict], list[dict]]:
    """(GPU index -> tree, process items) of the default view."""
    lines = tables.box_lines(text, TOOL, strict=False)
    recs = tables.records(lines)
    driver = vbios = None
    header: Optional[list[list[list[str]]]] = None
    gpus: dict[int, dict] = {}
    procs: list[dict] = []
    proc_names: Optional[list[str]] = None
    saw_processes = False
    for rec in recs:
        joined = [r.joined for r in rec]
        if any(_TITLE.search(j) for j in joined):
            for j in joined:
                m = _TITLE.search(j)
                if m and m.group("driver"):
                    driver = m.group("driver")
                v = re.match(r"VBIOS version\s*:\s*(\S+)", j, re.I)
                if v:
                    vbios = v.group(1)
            continue
        if rec[0].cells and rec[0].cells[0].split()[:1] == ["BDF"]:
            header = [[_names(c) for c in r.cells] for r in rec]
            continue
        if joined[0].startswith("Processes:"):
            saw_processes = True
            if len(rec) > 1:
                proc_names = _names(rec[1].cells[0])
            continue
        if saw_processes:
            for r in rec:
                if proc_names is None or not r.joined or not r.joined.split()[0].isdigit():
                    continue  # "No running processes found"
                procs.append(_process_row(proc_names, r.cells[0], r.lineno))
            continue
        if header is None:
            raise ParseError(TOOL, "a GPU record before the BDF / GPU-Name header", rec[0].lineno)
        if len(rec) != len(header):
            raise ParseError(TOOL, f"a GPU record of {len(rec)} rows under a header of {len(header)}", rec[0].lineno)
        cells: dict[str, str] = {}
        for row, names in zip(rec, header):
            if len(row.cells) != len(names):
                raise ParseError(TOOL, f"row has {len(row.cells)} cells, the header {len(names)}", row.lineno)
            for cell, n in zip(row.cells, names):
                cells.update(_assign(n, cell, row.lineno))
        idx = values.integer(cells.get("gpu"), 4)
        if idx is None:
            raise ParseError(TOOL, f"GPU index {cells.get('gpu', '')[:20]!r} is not a number", rec[-1].lineno)
        if idx in gpus:
            raise ParseError(TOOL, f"GPU {idx} printed twice", rec[0].lineno)
        tables.check_devices(len(gpus) + 1, TOOL, rec[0].lineno)
        gpus[idx] = _gpu_tree(cells, driver, vbios)
    if header is None:
        raise ParseError(TOOL, "an amd-smi box without its BDF / GPU-Name header")
    by_gpu: dict[int, list] = {i: [] for i in gpus} if saw_processes else {}
    for p in procs:
        by_gpu.setdefault(p.pop("_gpu"), []).append({"process_info": p})
    for i, items in by_gpu.items():
        if i in gpus:
            gpus[i]["process_list"] = items
    return gpus, procs


def _gpu_tree(c: dict[str, str], driver: Optional[str], vbios: Optional[str]) -> dict:
    power, cap = split_fraction(c.get("power-usage"))
    used, total = split_fraction(c.get("mem-usage"))
    tree: dict[str, Any] = {
        "bus": {"bdf": c.get("bdf", "N/A")},
        "asic": {"market_name": c.get("gpu-name", "N/A").lstrip(".")},  # "...Radeon AI PRO R9700": cut
        "usage": {"gfx_activity": c.get("gfx-uti", "N/A"), "umc_activity": c.get("mem-uti", "N/A")},
        "temperature": {"hotspot": c.get("temp", "N/A")},
        "ecc": {"total_uncorrectable_count": c.get("uec", "N/A")},
        "power": {"socket_power": power or "N/A"},
        "limit": {"power_cap": cap or "N/A"},
        "mem_usage": {"used_vram": used or "N/A", "total_vram": total or "N/A"},
        "fan": {"usage": c.get("fan", "N/A")},
        "default": {k: v for k, v in c.items() if k in ("hip-id", "oam-id", "partition-mode")},
    }
    if driver:
        tree["driver"] = {"version": driver}
    if vbios:
        tree["vbios"] = {"version": vbios}
    return tree


def _process_row(names: list[str], cell: str, lineno: int) -> dict:
    got = groups(cell)
    if len(got) < len(names) or "pid" not in names or "gpu" not in names:
        raise ParseError(TOOL, f"a process row of {len(got)} values under {len(names)} names", lineno)
    at = names.index("process_name") if "process_name" in names else None
    if at is not None and len(got) > len(names):  # a name with blanks
        extra = len(got) - len(names)
        got = got[:at] + [" ".join(got[at:at + extra + 1])] + got[at + extra + 1:]
    row = dict(zip(names, got))
    gpu = values.integer(row["gpu"], 4)
    if gpu is None or values.integer(row["pid"]) is None:
        raise ParseError(TOOL, f"a process row without GPU and PID numbers: {cell.strip()[:60]!r}", lineno)
    return {"_gpu": gpu, "pid": row["pid"], "name": row.get("process_name", "N/A"),
            "memory_usage": {"gtt_mem": row.get("gtt_mem", "N/A"), "vram_mem": row.get("vram_mem", "N/A")}}


# --------------------------------------------------------------------------- process --csv
def is_process_csv(text: str) -> bool:
    first = text.lstrip().split("\n", 1)[0].strip().lower()
    return first.startswith("gpu,") and "pid" in first.split(",")


def _csv_rows(lines: list[str]) -> list[list[str]]:
    """The CSV records of ``lines``; ParseError for a line over ``tables.MAX_LINE`` (the csv
    module's own field limit would raise its csv.Error) or one the csv module refuses."""
    for n, line in enumerate(lines, 1):
        if len(line) > tables.MAX_LINE:
            raise ParseError(TOOL, f"a CSV line of {len(line)} characters; amd-smi prints short lines", n)
    try:
        return list(csv.reader(lines))
    except csv.Error as e:
        raise ParseError(TOOL, f"not CSV: {e}") from None


def process_csv(text: str) -> dict[int, dict]:
    lines = tables.lines_of(text.strip(), TOOL)
    rows = _csv_rows(lines)
    head = [h.strip().lower() for h in rows[0]] if rows else []
    if "gpu" not in head or "pid" not in head:
        raise ParseError(TOOL, "a process CSV header without gpu and pid", 1)
    gpus: dict[int, dict] = {}
    for n, row in enumerate(rows[1:], 2):
        if not row:
            continue
        if len(row) != len(head):
            raise ParseError(TOOL, f"a CSV row of {len(row)} fields, the header {len(head)}", n)
        r = dict(zip(head, (c.strip() for c in row)))
        gpu = values.integer(r["gpu"], 4)
        if gpu is None or values.integer(r["pid"]) is None:
            raise ParseError(TOOL, "a CSV row whose gpu and pid are not numbers", n)
        tree = gpus.setdefault(gpu, {"process_list": []})
        tables.check_devices(len(gpus), TOOL, n)
        sizes = {k: values.integer(r.get(k)) for k in ("gtt_mem", "cpu_mem", "vram_mem")}
        mem = {k: "N/A" if b is None else f"{b} B" for k, b in sizes.items()}
        tree["process_list"].append({"process_info": {"pid": r["pid"], "name": r.get("name", "N/A"),
                                                      "memory_usage": mem}})
    return gpus


# --------------------------------------------------------------------------- topology / xgmi tables
def is_tables(text: str) -> bool:
    first = text.lstrip().split("\n", 1)[0].strip()
    return bool(TABLE_HEAD.match(first))


def _sections(text: str) -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = {}
    current: Optional[list] = None
    for n, raw in enumerate(tables.lines_of(text, TOOL), 1):
        if len(raw) > tables.MAX_LINE:
            raise ParseError(TOOL, f"a line of {len(raw)} characters", n)
        m = TABLE_HEAD.match(raw.strip())
        if m:
            current = out.setdefault(m.group("name").strip().upper(), [])
            continue
        if raw.strip() in ("", "...", "[output truncated]"):
            continue
        if current is None:
            raise ParseError(TOOL, f"a line before any 'NAME TABLE:' header: {raw.strip()[:60]!r}", n)
        current.append((n, raw))
    return out


def _matrix(rows: list[tuple[int, str]]) -> tuple[list[str], dict[tuple[str, str], str]]:
    names = rows[0][1].split()
    if not names or not all(re.fullmatch(_BDF, x) or re.fullmatch(r"GPU\d+", x) for x in names):
        raise ParseError(TOOL, "a table header that is not a row of GPU names", rows[0][0])
    if len(names) > MAX_PEERS:
        raise ParseError(TOOL, f"a table of {len(names)} GPUs", rows[0][0])
    cells: dict[tuple[str, str], str] = {}
    for n, raw in rows[1:]:
        words = raw.split()
        if words[0] not in names or len(words) != len(names) + 1:
            raise ParseError(TOOL, f"a table row that is not a GPU name and {len(names)} cells: {raw.strip()[:60]!r}", n)
        for col, w in zip(names, words[1:]):
            cells[(words[0], col)] = w
    return names, cells


def topology_tables(text: str) -> dict[int, dict]:
    """GPU index (its position in the header) -> tree with ``bdf`` and ``links`` (as the JSON
    layout's ``links`` list: gpu, link_type, weight, num_hops, bandwidth)."""
    sections = _sections(text)
    if "LINK METRIC" in sections:
        return _xgmi(sections["LINK METRIC"])
    order: Optional[list[str]] = None
    mats: dict[str, dict] = {}
    for name, rows in sections.items():
        if not rows:
            continue
        names, cells = _matrix(rows)
        if order is not None and names != order:
            raise ParseError(TOOL, f"the {name} TABLE names other GPUs than the first table", rows[0][0])
        order = names
        mats[name] = cells
    if order is None:
        raise ParseError(TOOL, "topology tables without rows")
    gpus: dict[int, dict] = {}
    for i, a in enumerate(order):
        links = []
        for j, b in enumerate(order):
            if i == j:
                continue
            link = {"gpu": str(j)}
            for table, key in (("LINK TYPE", "link_type"), ("WEIGHT", "weight"), ("HOPS", "num_hops"),
                               ("NUMA BW", "bandwidth"), ("ACCESS", "link_status")):
                if (a, b) in mats.get(table, {}):
                    link[key] = mats[table][(a, b)]
            links.append(link)
        gpus[i] = {"bdf": a if re.fullmatch(_BDF, a) else "N/A", "links": links}
    return gpus


def _xgmi(rows: list[tuple[int, str]]) -> dict[int, dict]:
    """The ``xgmi`` LINK METRIC TABLE: per GPU its bdf, link bit rate, max bandwidth, type and the
    Read / Write data per peer column; the peers named by the header's short BDFs."""
    if not rows:
        raise ParseError(TOOL, "a LINK METRIC TABLE without its 'bdf' header")
    head = rows[0][1].split()
    if head[:1] != ["bdf"]:
        raise ParseError(TOOL, "a LINK METRIC TABLE without its 'bdf' header", rows[0][0])
    peers = [h for h in head if re.fullmatch(_BDF, h)]
    if len(peers) > MAX_PEERS:
        raise ParseError(TOOL, f"a table of {len(peers)} GPUs", rows[0][0])
    gpus: dict[int, dict] = {}
    current: Optional[dict] = None
    for n, raw in rows[1:]:
        words = raw.split()
        m = re.fullmatch(r"GPU(\d{1,4})", words[0])
        if m:
            row = groups(raw.strip())
            if len(row) < 5:
                raise ParseError(TOOL, f"a GPU row without bdf, bit rate, bandwidth and type: {raw.strip()[:60]!r}", n)
            current = {"bdf": row[1], "xgmi": {"bit_rate": row[2], "max_bandwidth": row[3], "link_type": row[4]},
                       "links": []}
            gpus[int(m.group(1))] = current
            tables.check_devices(len(gpus), TOOL, n)
            continue
        if current is None or words[0].lower() not in ("read", "write"):
            raise ParseError(TOOL, f"not a GPU, Read or Write row: {raw.strip()[:60]!r}", n)
        cells = groups(" ".join(words[1:]))
        if len(cells) != len(peers):
            raise ParseError(TOOL, f"a {words[0]} row of {len(cells)} cells, the header names {len(peers)} GPUs", n)
        current["xgmi"][words[0].lower()] = dict(zip(peers, cells))
    bus = {pciaddr.bus_key(pciaddr.normalize(g["bdf"])): i for i, g in gpus.items()}
    for i, g in gpus.items():
        x = g["xgmi"]
        for peer in peers:
            j = bus.get(pciaddr.bus_key(pciaddr.normalize(peer)))
            cells = [x.get(k, {}).get(peer, "N/A") for k in ("read", "write")]
            if j is None or j == i or all(values.is_na(c) for c in cells):
                continue  # self, or a peer this (truncated) table has no row for
            g["links"].append({"gpu": str(j), "link_type": x["link_type"], "max_bandwidth": x["max_bandwidth"]})
    return gpus
