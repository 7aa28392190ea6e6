"""Pure parsers for what ``ixsmi`` (Iluvatar CoreX) prints; only ParseError escapes.

Two outputs:

- the default table (``ixsmi`` with no arguments): an nvidia-smi-style box. A title row with
  ``IX-ML: 4.1.0   Driver Version: 4.1.0   CUDA Version: 10.2``, a header record whose rows
  name the labels of each cell (``GPU  Name | Bus-Id | Clock-SM  Clock-Mem`` over ``Fan  Temp
  Perf  Pwr:Usage/Cap | Memory-Usage | GPU-Util  Compute M.``), one record per device with as
  many rows as the header, and a second box ``Processes:`` (``GPU  PID  Process name
  Usage(MiB)`` or ``No running processes found``). Cells are read by their header labels
  (sdk.tables: each value goes to the nearest label), never by position or width, so other
  versions' extra columns (``Volatile Uncorr. ECC``, ``Persistence-M``) or a third header row
  are read or ignored by name.
- ``ixsmi --query-gpu=FIELDS --format=csv[,noheader][,nounits]``: one CSV line per device.
  With a header the field names (``memory.total [MiB]``) come from it; without one the caller
  names the fields (the collector knows what it asked for). Values carry their unit unless
  ``nounits`` (then the header's ``[unit]`` applies).

Values are in base units here (bytes, W, Hz, C, ratio); ``N/A`` and the other NA spellings of
sdk.values are None. Memory used above total (a driver fault seen on other vendors' tools) is
kept as printed: the collector marks that reading ``error``.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

from hetero_exporter.sdk import tables, values
from hetero_exporter.sdk.contract import ParseError

from .output import MIB, TOOL, IxGpu, IxProcess, IxsmiOutput  # noqa: F401 - part of this module's API

MAX_LINES = 20000  # a 64-device table is ~1000 lines; more is not ixsmi's
CELLS = values.Cells(TOOL)


# --------------------------------------------------------------------------- the default table

# header labels, longest first (a found label masks its text, so "GPU" does not match inside
# "GPU-Util"); ixsmi 4.1 prints the first eight, the rest are nvidia-smi's that other ixsmi
# versions may print
_LABELS = (
    ("Volatile Uncorr. ECC", "ecc"), ("Pwr:Usage/Cap", "power"), ("Memory-Usage", "memory"),
    ("Persistence-M", "persistence"), ("Compute M.", "compute"), ("Clock-Mem", "clock_mem"),
    ("Clock-SM", "clock_sm"), ("GPU-Util", "util"), ("Bus-Id", "bus"), ("Disp.A", "disp"),
    ("MIG M.", "mig"), ("Name", "name"), ("Temp", "temp"), ("Perf", "perf"), ("Fan", "fan"),
    ("GPU", "gpu"),
)
_PROC_LABELS = (
    ("Process name", "name"), ("Usage(MiB)", "memory"), ("GPU Memory", "memory"), ("PID", "pid"),
    ("Type", "type"), ("GPU", "gpu"), ("GI", "gi"), ("CI", "ci"),
)
# optional words and colons each behind their own blanks: a blank run splits one way only (with
# "\s*(?:Version)?\s*:?\s*" a failing search tries every split of it, cubic in its length)
_VERSIONS = {
    "ml": re.compile(r"(?:IX-ML|IXML|IXSMI|ixsmi)(?:\s*Version)?(?:\s*:)?\s*v?(\d[\w.+-]*)", re.I),
    "driver": re.compile(r"Driver\s+Version(?:\s*:)?\s*v?(\d[\w.+-]*)", re.I),
    "cuda": re.compile(r"CUDA\s+Version(?:\s*:)?\s*v?(\d[\w.+-]*)", re.I),
}


def _gpu_of(record: Sequence[tables.BoxLine], header: list, line: int) -> IxGpu:
    vals = tables.record_values(record, header, TOOL)

    def get(key: str) -> tuple[str, int]:
        return vals.get(key, ("N/A", line))

    if "gpu" not in vals:
        raise ParseError(TOOL, "a device record without a GPU index", line)
    used, total = CELLS.pair(get("memory")[0], "MiB", "Memory-Usage", get("memory")[1])
    power, cap = CELLS.pair(get("power")[0], "W", "Pwr:Usage/Cap", get("power")[1])
    ecc_text, ecc_line = get("ecc")
    return IxGpu(
        index=CELLS.index(get("gpu")[0], "GPU", get("gpu")[1]),
        name=get("name")[0].strip() if "name" in vals else "",
        bus_id=CELLS.pci(get("bus")[0], "Bus-Id", get("bus")[1]),
        fan_ratio=CELLS.quantity(get("fan")[0], "%", "Fan", get("fan")[1]),
        temperature_celsius=CELLS.quantity(get("temp")[0], "C", "Temp", get("temp")[1]),
        perf_state=values.present(vals.get("perf", (None,))[0]),
        power_watts=power, power_limit_watts=cap, memory_used_bytes=used, memory_total_bytes=total,
        utilization_ratio=CELLS.quantity(get("util")[0], "%", "GPU-Util", get("util")[1]),
        clock_sm_hertz=CELLS.quantity(get("clock_sm")[0], "MHz", "Clock-SM", get("clock_sm")[1]),
        clock_memory_hertz=CELLS.quantity(get("clock_mem")[0], "MHz", "Clock-Mem", get("clock_mem")[1]),
        compute_mode=values.present(vals.get("compute", (None,))[0]),
        ecc_uncorrected=CELLS.quantity(ecc_text, "", "Volatile Uncorr. ECC", ecc_line))


def parse_table(text: str) -> IxsmiOutput:
    """``ixsmi`` (the default table of every device, with its process box; sdk.tables reads it)."""
    if text.count("\n") > MAX_LINES:
        raise ParseError(TOOL, f"more than {MAX_LINES} lines; ixsmi prints a short table")
    table = tables.device_table(text, TOOL, _LABELS)
    found = {k: rx.search(table.title) for k, rx in _VERSIONS.items()}
    timestamp = next((t for t in table.banner() if t.lower().startswith("timestamp")), None)
    gpus = tables.read_devices(table, lambda part: _gpu_of(part, table.header, part[0].lineno),
                               lambda g: g.index, TOOL)
    procs = [IxProcess(gpu=CELLS.index(row.words["gpu"], "process GPU", row.lineno),
                       pid=CELLS.index(row.words["pid"], "process PID", row.lineno), name=row.name,
                       memory_bytes=CELLS.quantity(row.words.get("memory", "N/A"), "MiB", "process memory", row.lineno))
             for row in tables.process_rows(table.rest, TOOL, _PROC_LABELS)]
    return IxsmiOutput(layout="table", gpus=tuple(gpus), processes=tuple(procs),
                       ml_version=found["ml"].group(1) if found["ml"] else None,
                       driver_version=found["driver"].group(1) if found["driver"] else None,
                       cuda_version=found["cuda"].group(1) if found["cuda"] else None,
                       timestamp=timestamp, process_section=bool(table.rest))


# --------------------------------------------------------------------------- --query-gpu CSV

# query field -> (IxGpu attribute, default unit); aliases of other ixsmi releases (4.x renamed
# power.draw to gpu.power.draw; gpu_bus_id / gpu_serial are the query names of older ones)
CSV_FIELDS: dict[str, tuple[str, str]] = {
    "index": ("index", ""), "name": ("name", ""), "gpu_name": ("name", ""),
    "uuid": ("uuid", ""), "gpu_uuid": ("uuid", ""), "serial": ("serial", ""), "gpu_serial": ("serial", ""),
    "pci.bus_id": ("bus_id", ""), "gpu_bus_id": ("bus_id", ""),
    "memory.total": ("memory_total_bytes", "MiB"), "memory.used": ("memory_used_bytes", "MiB"),
    "memory.free": ("", "MiB"),
    "utilization.gpu": ("utilization_ratio", "%"), "utilization.memory": ("memory_utilization_ratio", "%"),
    "temperature.gpu": ("temperature_celsius", "C"),
    "power.draw": ("power_watts", "W"), "gpu.power.draw": ("power_watts", "W"),
    "power.limit": ("power_limit_watts", "W"), "gpu.power.limit": ("power_limit_watts", "W"),
    "enforced.power.limit": ("power_limit_watts", "W"),
    "fan.speed": ("fan_ratio", "%"), "pstate": ("perf_state", ""),
    "clocks.sm": ("clock_sm_hertz", "MHz"), "clocks.current.sm": ("clock_sm_hertz", "MHz"),
    "clocks.mem": ("clock_memory_hertz", "MHz"), "clocks.current.memory": ("clock_memory_hertz", "MHz"),
    "compute_mode": ("compute_mode", ""), "driver_version": ("driver_version", ""),
    "ecc.errors.uncorrected.volatile.total": ("ecc_uncorrected", ""),
}
# the field order of gpustack's ixsmi detector (the noheader capture; SOURCES.md):
# ixsmi --format=csv,noheader --query-gpu=index,name,memory.total,memory.used,utilization.gpu,temperature.gpu
DEFAULT_FIELDS = ("index", "name", "memory.total", "memory.used", "utilization.gpu", "temperature.gpu")
_HEAD = re.compile(r"^\s*([a-z_][a-z0-9_.]*)(?:\s*\[([^\]]*)\])?\s*$", re.I)


def csv_header(line: str) -> Optional[list[tuple[str, str]]]:
    """(field, unit) per column of a CSV header line (``memory.total [MiB]``), or None when
    the line is not one (a data line: it starts with an index)."""
    cells = line.split(",")
    out = []
    for c in cells:
        m = _HEAD.match(c)
        if m is None:
            return None
        out.append((m.group(1).lower(), (m.group(2) or "").strip()))
    return out if any(f in CSV_FIELDS for f, _ in out) else None


def _csv_value(field: str, unit: str, text: str, line: int) -> tuple[str, object]:
    attr, default = CSV_FIELDS.get(field, ("", ""))
    if not attr:
        return "", None
    if attr == "index":
        return attr, CELLS.index(text, field, line)
    if attr == "bus_id":
        return attr, CELLS.pci(text, field, line)
    if attr in ("name", "uuid", "serial", "perf_state", "compute_mode", "driver_version"):
        return attr, values.present(text)
    return attr, CELLS.quantity(text, unit or default, field, line)


def parse_csv(text: str, fields: Optional[Sequence[str]] = None) -> IxsmiOutput:
    """``ixsmi --query-gpu=... --format=csv[,noheader][,nounits]``. ``fields``: the query's
    field list, needed without a header (with one, the header names them and must agree)."""
    rows = [(i, ln.strip()) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    if len(rows) > MAX_LINES:
        raise ParseError(TOOL, f"more than {MAX_LINES} lines")
    if not rows:
        raise ParseError(TOOL, "empty --query-gpu output")
    head = csv_header(rows[0][1])
    if head is not None:
        if fields is not None and [f for f, _ in head] != [f.strip().lower() for f in fields]:
            raise ParseError(TOOL, "the CSV header names other fields than the query asked for", rows[0][0])
        rows = rows[1:]
    elif fields is None:
        raise ParseError(TOOL, "a --query-gpu CSV without header: name its fields (--format=csv,noheader)",
                         rows[0][0])
    else:
        head = [(f.strip().lower(), "") for f in fields]
    unknown = [f for f, _ in head if f not in CSV_FIELDS]
    if len(unknown) == len(head):
        raise ParseError(TOOL, f"none of the CSV fields is an ixsmi --query-gpu field: {', '.join(unknown)[:60]}")
    gpus: list[IxGpu] = []
    indexes: set[int] = set()  # a set: a scan of the GPUs per row is quadratic
    for n, (ln, row) in enumerate(rows):
        cells = row.split(",")
        if len(cells) != len(head):
            raise ParseError(TOOL, f"a CSV line of {len(cells)} values for {len(head)} fields", ln)
        got: dict[str, object] = {}
        for (field, unit), cell in zip(head, cells):
            attr, v = _csv_value(field, unit, cell, ln)
            if attr:
                got.setdefault(attr, v)
        got.setdefault("index", n)
        g = IxGpu(**got)  # type: ignore[arg-type]
        if g.index in indexes:
            raise ParseError(TOOL, f"GPU {g.index} listed twice", ln)
        indexes.add(g.index)
        gpus.append(g)
    drivers = {g.driver_version for g in gpus if g.driver_version}
    return IxsmiOutput(layout="csv", gpus=tuple(gpus), fields=tuple(f for f, _ in head),
                       driver_version=drivers.pop() if len(drivers) == 1 else None)


def detect(text: str) -> str:
    """``table`` (a box with a GPU / Bus-Id header), ``xml`` (``ixsmi -q -x``, query_xml.py)
    or ``csv`` (a --query-gpu answer)."""
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if first.lstrip().startswith("<"):
        return "xml"
    if "|" in text and "Bus-Id" in text:
        return "table"
    if "," in first:
        return "csv"
    raise ParseError(TOOL, "neither the ixsmi table nor a --query-gpu CSV")


def parse_any(text: str) -> IxsmiOutput:
    """Either output; a noheader CSV is read with DEFAULT_FIELDS (gpustack's query) when it
    has as many values per line, else it needs its field list (a clear ParseError)."""
    kind = detect(text)
    if kind == "table":
        return parse_table(text)
    if kind == "xml":
        from .query_xml import parse_xml  # xml.etree only when asked
        return parse_xml(text)
    first = next(ln for ln in text.splitlines() if ln.strip())
    if csv_header(first) is not None:
        return parse_csv(text)
    if len(first.split(",")) != len(DEFAULT_FIELDS):
        raise ParseError(TOOL, f"a --query-gpu CSV without header and {len(first.split(','))} values a line: "
                               f"only the {len(DEFAULT_FIELDS)} fields {','.join(DEFAULT_FIELDS)} are assumed", 1)
    return parse_csv(text, DEFAULT_FIELDS)
