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

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Optional, Sequence

from hetero_exporter.sdk import pciaddr, tables, values
from hetero_exporter.sdk.contract import ParseError

TOOL = "ixsmi"
MIB = 1 << 20
MAX_LINES = 20000  # a 64-device table is ~1000 lines; more is not ixsmi's


@dataclass(frozen=True)
class IxGpu:
    """One device (chip) of ixsmi: memory in bytes, power in W, clocks in Hz, temperature in C,
    utilization and fan as ratios 0..1; None where the tool prints N/A or has no such column.
    A BI-V150 board has two chips; ixsmi prints the board's power on one of them and N/A on
    the other (the capture shows every other chip N/A)."""

    index: int
    name: str = ""
    bus_id: Optional[str] = None
    uuid: Optional[str] = None
    serial: Optional[str] = None
    fan_ratio: Optional[float] = None
    temperature_celsius: Optional[float] = None
    perf_state: Optional[str] = None
    power_watts: Optional[float] = None
    power_limit_watts: Optional[float] = None
    memory_used_bytes: Optional[float] = None
    memory_total_bytes: Optional[float] = None
    utilization_ratio: Optional[float] = None
    memory_utilization_ratio: Optional[float] = None
    clock_sm_hertz: Optional[float] = None
    clock_memory_hertz: Optional[float] = None
    compute_mode: Optional[str] = None
    ecc_uncorrected: Optional[float] = None  # "Volatile Uncorr. ECC" where a version prints it
    driver_version: Optional[str] = None  # CSV field driver_version


@dataclass(frozen=True)
class IxProcess:
    gpu: int
    pid: int
    name: str = ""
    memory_bytes: Optional[float] = None


@dataclass(frozen=True)
class IxsmiOutput:
    """A parsed ixsmi output. ``layout``: ``table``, ``xml`` or ``csv``; ``ml_version`` the IX-ML
    (CoreX management library) version of the title, ``cuda_version`` the CUDA API level
    CoreX implements; ``process_section``: the Processes box was printed (so an empty
    process list means none run, not unknown)."""

    layout: str
    gpus: tuple[IxGpu, ...] = ()
    processes: tuple[IxProcess, ...] = ()
    ml_version: Optional[str] = None
    driver_version: Optional[str] = None
    cuda_version: Optional[str] = None
    timestamp: Optional[str] = None
    process_section: bool = False
    fields: tuple[str, ...] = ()  # CSV: the fields of each line

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------- values


def _finite(v: Optional[float], what: str, line: Optional[int]) -> Optional[float]:
    if v is not None and not math.isfinite(v):  # 1e308 MiB overflows once in bytes
        raise ParseError(TOOL, f"{what}: out of range", line)
    return v


def _qty(text: str, unit: str, what: str, line: Optional[int]) -> Optional[float]:
    t = text.strip()
    if unit == "%" and t.endswith("%"):
        t = t[:-1].strip()
    try:
        v = values.quantity(t, unit)
    except ValueError as e:
        raise ParseError(TOOL, f"{what}: {e}", line) from None
    return _finite(v, what, line)


def _pair(text: str, unit: str, what: str, line: Optional[int]) -> tuple[Optional[float], Optional[float]]:
    """``116MiB / 32768MiB`` or ``93W / 350W`` -> (used, total); ``N/A`` -> (None, None)."""
    if values.is_na(text):
        return None, None
    parts = text.split("/")
    if len(parts) == 3 and values.is_na(parts[0] + "/" + parts[1]):  # "N/A / 350W"
        parts = ["N/A", parts[2]]
    elif len(parts) == 3 and values.is_na(parts[1] + "/" + parts[2]):  # "93W / N/A"
        parts = [parts[0], "N/A"]
    elif len(parts) == 4 and values.is_na(parts[0] + "/" + parts[1]) and values.is_na(parts[2] + "/" + parts[3]):
        return None, None  # "N/A / N/A"
    if len(parts) != 2:
        raise ParseError(TOOL, f"{what}: expected 'USED / TOTAL', got {text.strip()[:40]!r}", line)
    return _qty(parts[0], unit, what, line), _qty(parts[1], unit, what, line)


def _bus(text: str, what: str, line: Optional[int]) -> Optional[str]:
    if values.is_na(text):
        return None
    bus = pciaddr.normalize(text.strip())
    if bus is None:
        raise ParseError(TOOL, f"{what}: not a PCI address: {text.strip()[:30]!r}", line)
    return bus


def _index(text: str, what: str, line: Optional[int]) -> int:
    t = text.strip()
    if not re.fullmatch(r"\d{1,6}", t):
        raise ParseError(TOOL, f"{what}: expected a device index, got {t[:20]!r}", line)
    return int(t)


def _word(text: Optional[str]) -> Optional[str]:
    return None if text is None or values.is_na(text) else text.strip()


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
    used, total = _pair(*get("memory")[:1], "MiB", "Memory-Usage", get("memory")[1])
    power, cap = _pair(get("power")[0], "W", "Pwr:Usage/Cap", get("power")[1])
    ecc_text, ecc_line = get("ecc")
    return IxGpu(
        index=_index(*get("gpu")[:1], "GPU", get("gpu")[1]),
        name=get("name")[0].strip() if "name" in vals else "",
        bus_id=_bus(get("bus")[0], "Bus-Id", get("bus")[1]),
        fan_ratio=_qty(get("fan")[0], "%", "Fan", get("fan")[1]),
        temperature_celsius=_qty(get("temp")[0], "C", "Temp", get("temp")[1]),
        perf_state=_word(vals.get("perf", (None,))[0]),
        power_watts=power, power_limit_watts=cap, memory_used_bytes=used, memory_total_bytes=total,
        utilization_ratio=_qty(get("util")[0], "%", "GPU-Util", get("util")[1]),
        clock_sm_hertz=_qty(get("clock_sm")[0], "MHz", "Clock-SM", get("clock_sm")[1]),
        clock_memory_hertz=_qty(get("clock_mem")[0], "MHz", "Clock-Mem", get("clock_mem")[1]),
        compute_mode=_word(vals.get("compute", (None,))[0]),
        ecc_uncorrected=_qty(ecc_text, "", "Volatile Uncorr. ECC", ecc_line))


def _processes(recs: Sequence[Sequence[tables.BoxLine]]) -> list[IxProcess]:
    """The rows after the process header (the row naming PID), read in the header's order;
    a process name may hold spaces (the labels around it take one word each)."""
    head = None
    out: list[IxProcess] = []
    for rec in recs:
        if head is None:  # the header record (its other rows: "Processes:", "ID  ID  Usage")
            row = next((r for r in rec if re.search(r"\bPID\b", r.joined)), None)
            if row is not None:
                labels = [lab for lab in tables.cell_labels(" ".join(row.cells), _PROC_LABELS)
                          if not lab.key.startswith("?")]
                head = [lab.key for lab in labels]
                if "pid" not in head or "gpu" not in head:
                    raise ParseError(TOOL, "process header without GPU and PID", row.lineno)
            continue
        for row in rec:
            text = row.joined
            if re.match(r"No running (?:compute )?processes found", text, re.I):
                continue
            words = re.sub(r"(\d)\s+(MiB|GiB|KiB)\b", r"\1\2", text).split()
            k = head.index("name") if "name" in head else len(head)
            before, after = head[:k], head[k + 1:]
            if len(words) < len(before) + len(after) + (1 if "name" in head else 0):
                raise ParseError(TOOL, f"process row with {len(words)} words under {len(head)} labels", row.lineno)
            got = dict(zip(before, words))
            got.update(zip(after, words[len(words) - len(after):] if after else []))
            name = " ".join(words[len(before):len(words) - len(after)])
            out.append(IxProcess(gpu=_index(got["gpu"], "process GPU", row.lineno),
                                 pid=_index(got["pid"], "process PID", row.lineno), name=name,
                                 memory_bytes=_qty(got.get("memory", "N/A"), "MiB", "process memory", row.lineno)))
    return out


def parse_table(text: str) -> IxsmiOutput:
    """``ixsmi`` (the default table of every device, with its process box)."""
    if text.count("\n") > MAX_LINES:
        raise ParseError(TOOL, f"more than {MAX_LINES} lines; ixsmi prints a short table")
    lines = tables.box_lines(text, TOOL, strict=False)
    recs = tables.records(lines)
    if not recs:
        raise ParseError(TOOL, "no table (no '| ... |' rows)")
    at = next((i for i, r in enumerate(recs)
               if any("Bus-Id" in ln.text for ln in r) and any(re.search(r"\bGPU\b", ln.text) for ln in r)), None)
    if at is None:
        raise ParseError(TOOL, "no device header (a row naming GPU and Bus-Id)")
    header_rows = recs[at]
    if any(len(r.cells) != len(header_rows[0].cells) for r in header_rows):
        raise ParseError(TOOL, "the header rows have different cell counts", header_rows[-1].lineno)
    header = tables.header_labels(header_rows, _LABELS)
    before = " ".join(ln.text for r in recs[:at] for ln in r)
    found = {k: rx.search(before) for k, rx in _VERSIONS.items()}
    timestamp = next((ln.text for ln in lines if ln.kind == "text" and ln.lineno < header_rows[0].lineno
                      and ln.text.lower().startswith("timestamp")), None)
    gpus: list[IxGpu] = []
    indexes: set[int] = set()
    proc_at = None
    for i in range(at + 1, len(recs)):
        rec = recs[i]
        if any("Processes:" in ln.text or re.search(r"\bPID\b", ln.text) for ln in rec):
            proc_at = i
            break
        if len(rec) % len(header_rows):
            raise ParseError(TOOL, f"a device record of {len(rec)} row(s) under a header of {len(header_rows)}",
                             rec[0].lineno)
        for j in range(0, len(rec), len(header_rows)):  # records of several devices without borders between
            part = rec[j:j + len(header_rows)]
            g = _gpu_of(part, header, part[0].lineno)
            if g.index in indexes:
                raise ParseError(TOOL, f"GPU {g.index} listed twice", part[0].lineno)
            indexes.add(g.index)
            gpus.append(g)
    procs = _processes(recs[proc_at:]) if proc_at is not None else []
    return IxsmiOutput(layout="table", gpus=tuple(gpus), processes=tuple(procs),
                       ml_version=found["ml"].group(1) if found["ml"] else None,
                       driver_version=found["driver"].group(1) if found["driver"] else None,
                       cuda_version=found["cuda"].group(1) if found["cuda"] else None,
                       timestamp=timestamp, process_section=proc_at is not None)


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
        return attr, _index(text, field, line)
    if attr == "bus_id":
        return attr, _bus(text, field, line)
    if attr in ("name", "uuid", "serial", "perf_state", "compute_mode", "driver_version"):
        return attr, _word(text)
    return attr, _qty(text, unit or default, field, line)


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
        from .query_xml import parse_xml  # builds on this module's structures
        return parse_xml(text)
    first = next(ln for ln in text.splitlines() if ln.strip())
    if csv_header(first) is not None:
        return parse_csv(text)
    if len(first.split(",")) != len(DEFAULT_FIELDS):
        raise ParseError(TOOL, f"a --query-gpu CSV without header and {len(first.split(','))} values a line: "
                               f"only the {len(DEFAULT_FIELDS)} fields {','.join(DEFAULT_FIELDS)} are assumed", 1)
    return parse_csv(text, DEFAULT_FIELDS)
