"""Pure parsing of Enflame's ``efsmi``; only ParseError escapes.

The default output (``efsmi``, no arguments) is a banner, then one box: a title record
(``EFSMI V1.2.0.301  Driver Ver: 1.2.0.301`` or, from 1.6, ``EFSMI: 1.6.3.12  Driver Ver: ...``),
a two-row header and two rows per device::

    | DEV    NAME                | FW VER          | BUS-ID      ECC           |
    | TEMP   Dpm   Pwr(Usage/Cap)| Mem     GCU Virt| DUsed       SN            |
    |--------------------------------------------------------------------------|
    | 0      S60                 | 33.6.2          | 00:01:00.0  Disable       |
    | 39 C   Sleep    105W  300W | 49120MiB Disable|   0.0%      A073640510015 |

Versions differ in the details, all read by structure: the header labels (``FW VER`` /
``Boot FW VER``, ``Dpm`` / ``Lpm``), the borders (``|----|`` rules or ``+---+---+`` with a
``|====|`` rule), the units (``39 C``, ``34℃``), the power (``105W  300W``, ``68W / 300W``,
``N/A``). Each value goes to the header label whose column is nearest (hetero_exporter.sdk.
tables), so neither widths nor positions are assumed. ``Mem`` is the device memory size (the
``Mem Size`` / ``Total Size`` of ``efsmi -q``); the table prints no memory used. ``DUsed`` is
the device (GCU) busy share.

A process section, where a version prints one, is a box whose header row names ``PID``
(with ``DEV`` and a memory column); no capture at hand shows one, so its layout is read by
labels only (the fake prints the layout assumed here).

``efsmi -q`` (the detail report: ``DEV ID N`` blocks of ``key : value`` lines under section
titles) gives what the table lacks: Dev UUID, memory used, Health, RMA flags, DBE counts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

from hetero_exporter.sdk import pciaddr, tables, values
from hetero_exporter.sdk.contract import ParseError

TOOL = "efsmi"
MIB = 1 << 20

# header labels -> keys, longest first (a found label masks its text)
VOCAB = tuple(sorted((
    ("Pwr(Usage/Cap)", "power"), ("Boot FW VER", "firmware"), ("FW VER", "firmware"),
    ("GCU Virt", "virt"), ("BUS-ID", "bus"), ("DUsed", "util"), ("TEMP", "temp"), ("NAME", "name"),
    ("DEV", "dev"), ("Dpm", "dpm"), ("Lpm", "dpm"), ("Mem", "memory"), ("ECC", "ecc"), ("SN", "serial"),
), key=lambda p: -len(p[0])))
PROC_VOCAB = tuple(sorted((
    ("Process name", "name"), ("Process Name", "name"), ("Mem Usage", "memory"), ("Memory", "memory"),
    ("Usage", "memory"), ("PID", "pid"), ("DEV", "dev"), ("GCU", "dev"), ("Type", "type"),
), key=lambda p: -len(p[0])))
REQUIRED = ("dev", "name", "bus")
STATE_FIELDS = ("dpm", "ecc")  # the table's state columns (power-management state, ECC mode)
_UNIT_GAP = re.compile(r"(\d)(\s+)(C|℃|°C)(?=\s|$)")
# "(?:\s*:)?\s*": an optional colon among blanks with one way to split a blank run (":?" between
# two "\s*" tries every split of a long run before failing: quadratic)
_EFSMI = re.compile(r"EFSMI(?:\s*:)?\s*V?(\d[\w.+-]*)")
_DRIVER = re.compile(r"Driver\s+Ver(?:sion)?(?:\s*:)?\s*V?(\d[\w.+-]*)")


@dataclass(frozen=True)
class GcuDevice:
    """One device of the default table; None where efsmi prints N/A (or nothing).

    memory_total_mib: ``Mem`` (MiB); memory_used_mib only where a version prints
    ``used / total``; util_pct: ``DUsed`` (%); temp_c: ``TEMP`` (C); power_w / power_cap_w:
    ``Pwr(Usage/Cap)`` (W); dpm: ``Dpm``/``Lpm`` state; ecc: ECC mode; virt: ``GCU Virt``."""

    index: int
    name: str
    bus_id: Optional[str]
    firmware: Optional[str]
    ecc: Optional[str]
    temp_c: Optional[float]
    dpm: Optional[str]
    power_w: Optional[float]
    power_cap_w: Optional[float]
    memory_total_mib: Optional[float]
    memory_used_mib: Optional[float]
    virt: Optional[str]
    util_pct: Optional[float]
    serial: Optional[str]
    na_fields: tuple[str, ...] = ()  # table keys printed N/A
    line: int = 0


@dataclass(frozen=True)
class GcuProcess:
    dev: int
    pid: int
    name: str
    memory_mib: Optional[float]


@dataclass(frozen=True)
class EfsmiTable:
    version: Optional[str]
    driver_version: Optional[str]
    devices: tuple[GcuDevice, ...]
    processes: tuple[GcuProcess, ...] = ()
    process_section: bool = False


@dataclass(frozen=True)
class GcuDetail:
    """One ``DEV ID`` block of ``efsmi -q`` (None where absent)."""

    index: int
    uuid: Optional[str] = None
    serial: Optional[str] = None
    name: Optional[str] = None
    driver_version: Optional[str] = None
    bus_id: Optional[str] = None
    health: Optional[str] = None  # "True" / "False" as printed
    rma: Optional[str] = None  # RMA Info / Flags
    total_dbe: Optional[float] = None
    memory_total_mib: Optional[float] = None
    memory_used_mib: Optional[float] = None
    power_w: Optional[float] = None
    power_cap_w: Optional[float] = None
    temp_c: Optional[float] = None
    util_pct: Optional[float] = None


# --------------------------------------------------------------------------- helpers


def _num(text: Optional[str], unit: str, field: str, line: int) -> Optional[float]:
    """A value in the unit efsmi prints it in (the dataclasses keep MiB and % as printed)."""
    try:
        v = values.quantity(text, unit) if unit != "%" else values.number(text)
    except ValueError as e:
        raise ParseError(TOOL, f"{field}: {e}", line) from None
    if v is not None and (not math.isfinite(v) or abs(v) > 1e15):
        raise ParseError(TOOL, f"{field}: {str(text)[:20]!r} is out of range", line)
    if v is not None and unit == "MiB":
        v = v / MIB  # quantity gives bytes; the dataclasses keep MiB as printed
    return v


def _join_units(cell: str) -> str:
    """``39 C`` -> ``39C `` (same length): a unit split from its number by spaces would
    otherwise be a value group of its own."""
    return _UNIT_GAP.sub(lambda m: m.group(1) + m.group(3) + m.group(2), cell)


def _labels(row: tables.BoxLine, vocab) -> list[list[tables.Label]]:
    return [tables.cell_labels(c, vocab) for c in row.cells]


def _keys(labels: list[list[tables.Label]]) -> set[str]:
    return {lab.key for cell in labels for lab in cell}


def _power(text: Optional[str], line: int) -> tuple[Optional[float], Optional[float]]:
    if text is None or values.is_na(text):
        return None, None
    parts = [p for p in re.split(r"\s*/\s*|\s+", text.strip()) if p]
    if len(parts) > 2:
        raise ParseError(TOOL, f"Pwr(Usage/Cap): expected 'USAGE CAP', got {text[:30]!r}", line)
    usage = _num(parts[0], "W", "Pwr(Usage/Cap)", line)
    cap = _num(parts[1], "W", "Pwr(Usage/Cap)", line) if len(parts) == 2 else None
    return usage, cap


def _memory(text: Optional[str], line: int) -> tuple[Optional[float], Optional[float]]:
    """``49120MiB`` (the size) or ``used / total``: (used, total) MiB."""
    if text is None or values.is_na(text):
        return None, None
    parts = [p.strip() for p in text.split("/")]
    if len(parts) == 1:
        return None, _num(parts[0], "MiB", "Mem", line)
    if len(parts) == 2:
        return _num(parts[0], "MiB", "Mem", line), _num(parts[1], "MiB", "Mem", line)
    raise ParseError(TOOL, f"Mem: expected a size, got {text[:30]!r}", line)


def _device(rec: list[tables.BoxLine], header: list[list[list[tables.Label]]]) -> GcuDevice:
    fixed = [tables.BoxLine(r.lineno, r.kind, r.text, tuple(_join_units(c) for c in r.cells)) for r in rec]
    vals = tables.record_values(fixed, header, TOOL)
    line = rec[0].lineno

    def get(key: str) -> Optional[str]:
        return vals[key][0] if key in vals else None

    raw_dev = get("dev")
    try:
        index = int(str(raw_dev))
    except ValueError:
        raise ParseError(TOOL, f"DEV: expected a device index, got {str(raw_dev)[:20]!r}", line) from None
    if not 0 <= index < 4096:
        raise ParseError(TOOL, f"DEV: index {index} out of range", line)
    bus = None
    if not values.is_na(get("bus")):
        bus = pciaddr.normalize(get("bus"))
        if bus is None:
            raise ParseError(TOOL, f"BUS-ID: not a PCI address: {str(get('bus'))[:20]!r}", line)
    power, cap = _power(get("power"), line)
    used, total = _memory(get("memory"), line)
    util = _num(get("util"), "%", "DUsed", line)
    if util is not None and not 0 <= util <= 100:
        raise ParseError(TOOL, f"DUsed: {util:g} % is not a share", line)
    # printed N/A, or nothing under a label the header has
    na = tuple(k for k in ("temp", "dpm", "power", "memory", "util", "ecc", "virt", "serial", "firmware")
               if values.is_na(get(k)) and k in _keys_of(header))
    return GcuDevice(index=index, name=(get("name") or "").strip(), bus_id=bus, firmware=values.present(get("firmware")),
                     ecc=values.present(get("ecc")), temp_c=_num(get("temp"), "C", "TEMP", line), dpm=values.present(get("dpm")),
                     power_w=power, power_cap_w=cap, memory_total_mib=total, memory_used_mib=used,
                     virt=values.present(get("virt")), util_pct=util, serial=values.present(get("serial")), na_fields=na, line=line)


def _keys_of(header: list[list[list[tables.Label]]]) -> set[str]:
    return {lab.key for row in header for cell in row for lab in cell}


def _process(row: tables.BoxLine, labels: list[list[tables.Label]]) -> Optional[GcuProcess]:
    if len(row.cells) == 1 and re.search(r"no\s+running\s+process", row.joined, re.I):
        return None  # efsmi's own "No running processes found" row, one cell across the table
    if len(row.cells) != len(labels):
        raise ParseError(TOOL, f"process row has {len(row.cells)} cells, its header {len(labels)}", row.lineno)
    vals: dict[str, str] = {}
    for cell, labs in zip(row.cells, labels):
        for k, v in tables.cell_values(cell, labs).items():
            vals.setdefault(k, v)
    if "pid" not in vals and re.search(r"no\s+running\s+process", row.joined, re.I):
        return None
    try:
        dev, pid = int(vals.get("dev", "")), int(vals.get("pid", ""))
    except ValueError:
        raise ParseError(TOOL, f"process row without DEV and PID numbers: {row.joined[:40]!r}", row.lineno) from None
    return GcuProcess(dev=dev, pid=pid, name=vals.get("name", "").strip(),
                      memory_mib=_num(vals.get("memory"), "MiB", "process memory", row.lineno))


# --------------------------------------------------------------------------- default table


def parse_table(text: str) -> EfsmiTable:
    """The devices (and processes, where printed) of one default ``efsmi`` output."""
    lines = tables.box_lines(text, TOOL, strict=False)
    recs = tables.records(lines)
    at = None
    for i, r in enumerate(recs):
        if set(REQUIRED) <= _keys(_labels(r[0], VOCAB)):
            at = i
            break
    if at is None:
        raise ParseError(TOOL, "no device table (a header row naming DEV and BUS-ID)")
    header_rec = recs[at]
    header = [_labels(r, VOCAB) for r in header_rec]
    devices: list[GcuDevice] = []
    indexes: set[int] = set()
    processes: list[GcuProcess] = []
    section = False
    proc_labels: Optional[list[list[tables.Label]]] = None
    for rec in recs[at + 1:]:
        if proc_labels is None:
            first = _labels(rec[0], PROC_VOCAB)
            if re.match(r"processes\s*:?$", rec[0].joined, re.I) or {"pid", "dev"} <= _keys(first):
                section = True
                rows = rec
                if re.match(r"processes\s*:?$", rec[0].joined, re.I):
                    rows = rec[1:]
                if not rows:
                    proc_labels = []  # the labels come in the next record
                    continue
                proc_labels = _labels(rows[0], PROC_VOCAB)
                for row in rows[1:]:
                    p = _process(row, proc_labels)
                    if p is not None:
                        processes.append(p)
                continue
            d = _device(rec, header)
            if d.index in indexes:
                raise ParseError(TOOL, f"device {d.index} listed twice", rec[0].lineno)
            indexes.add(d.index)
            devices.append(d)
            continue
        rows = rec
        if not proc_labels:
            proc_labels = _labels(rec[0], PROC_VOCAB)
            if not {"pid", "dev"} <= _keys(proc_labels):
                if re.search(r"no\s+running\s+process", rec[0].joined, re.I):
                    proc_labels = []
                    continue
                raise ParseError(TOOL, "a process section without a header naming DEV and PID", rec[0].lineno)
            rows = rec[1:]
        for row in rows:
            p = _process(row, proc_labels)
            if p is not None:
                processes.append(p)
    if not devices:
        raise ParseError(TOOL, "a device table header with no device rows under it", header_rec[0].lineno)
    known = {d.index for d in devices}
    for p in processes:
        if p.dev not in known:
            raise ParseError(TOOL, f"process {p.pid} on device {p.dev}, which the table does not list")
    head = [ln.text for ln in lines if ln.lineno < header_rec[0].lineno]
    version = driver = None
    for t in head:
        m = _EFSMI.search(t)
        version = version or (m.group(1) if m else None)
        m = _DRIVER.search(t)
        driver = driver or (m.group(1) if m else None)
    return EfsmiTable(version=version, driver_version=driver, devices=tuple(devices),
                      processes=tuple(processes), process_section=section)


# --------------------------------------------------------------------------- efsmi -q

_DEV_ID = re.compile(r"^\s*DEV\s+ID(?:\s*:)?\s*(\d+)\s*$")
# the value is stripped by the caller (a lazy value then "\s*$" retries every blank: quadratic)
_KV = re.compile(r"^\s*([A-Za-z][^:]{0,60}?)\s*:(.*)$")


def parse_query(text: str) -> tuple[GcuDetail, ...]:
    """The ``DEV ID`` blocks of ``efsmi -q`` (sections are the bare title lines above keys)."""
    out: list[GcuDetail] = []
    seen: set[int] = set()
    cur: Optional[dict] = None
    section = ""
    pci: dict[str, str] = {}

    def close() -> None:
        if cur is None:
            return
        if {"domain", "bus", "dev", "func"} <= set(pci):
            cur["bus_id"] = pciaddr.normalize(f"{pci['domain']}:{pci['bus'].zfill(2)}:{pci['dev'].zfill(2)}"
                                              f".{pci['func']}")
        if cur["index"] in seen:
            raise ParseError(TOOL, f"DEV ID {cur['index']} listed twice")
        seen.add(cur["index"])
        out.append(GcuDetail(**cur))

    for i, raw in enumerate(text.splitlines(), 1):
        if len(raw) > tables.MAX_LINE:
            raise ParseError(TOOL, f"a line of {len(raw)} characters", i)
        s = raw.strip()
        if not s or set(s) <= set("-") or s.startswith("-") and s.endswith("-"):
            continue
        m = _DEV_ID.match(raw)
        if m:
            close()
            cur, section, pci = {"index": int(m.group(1))}, "", {}
            continue
        kv = _KV.match(raw)
        if cur is None:
            if kv:
                raise ParseError(TOOL, f"'{s[:40]}' before the first DEV ID", i)
            continue
        if kv is None:
            section = s.lower()
            continue
        key, val = kv.group(1).strip().lower(), kv.group(2).strip()
        if "pcie" in section and key in ("domain", "bus", "dev", "func"):
            pci[key] = val
        elif key == "dev uuid":
            cur["uuid"] = values.present(val)
        elif key == "dev sn":
            cur["serial"] = values.present(val)
        elif key == "dev name":
            cur["name"] = values.present(val)
        elif key == "ver" and "driver" in section:
            cur["driver_version"] = values.present(val)
        elif key == "health":
            cur["health"] = values.present(val)
        elif key == "flags" and "rma" in section:
            cur["rma"] = values.present(val)
        elif key == "total dbe":
            cur["total_dbe"] = _num(val, "", "Total DBE", i)
        elif key in ("total size", "mem size") and "bar" not in section:  # BARn Mem Info: an aperture
            cur["memory_total_mib"] = _num(val, "MiB", key, i)
        elif key in ("used size", "mem usage") and "bar" not in section:
            cur["memory_used_mib"] = _num(val, "MiB", key, i)
        elif key == "cur power":
            cur["power_w"] = _num(val, "W", key, i)
        elif key == "power capa":
            cur["power_cap_w"] = _num(val, "W", key, i)
        elif key == "gcu temp":
            cur["temp_c"] = _num(val, "C", key, i)
        elif key == "gcu usage":
            cur["util_pct"] = _num(val, "%", key, i)
    close()
    if not out:
        raise ParseError(TOOL, "no 'DEV ID' block (efsmi -q)")
    return tuple(out)


def detect(text: str) -> str:
    """``efsmi`` (the default table), ``efsmi -q`` (the detail report) or ``efsmi dmon`` (the
    columnar monitor, dmon.py)."""
    if any(_DEV_ID.match(ln) for ln in text.splitlines()[:4000]):
        return "efsmi -q"
    if any(ln.lstrip().lower().startswith("*dev") for ln in text.splitlines()[:200]):
        return "efsmi dmon"
    return "efsmi"
