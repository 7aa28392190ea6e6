"""Pure parsing of the xpu-smi 5.x default output (P800, R200 class drivers): an
nvidia-smi-style box; only ParseError escapes.

Layout (the captures ../shared/fixtures/xpu-smi/xpu-smi-default_*P800-OAM*): a title row
``XPU-SMI   Driver Version: 5.0.21.26   XPU-RT Version: 5.0.21``, a header record of three
rows naming the labels of each cell::

    | XPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
    | Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | XPU-Util  Compute M. |
    |                               |             L3-Usage |            SR-IOV M. |

then one record of as many rows per device (``31058MiB / 98304MiB`` memory, ``0MiB / 96MiB``
L3 SRAM), and a ``Processes:`` box (``XPU  XI|GI  CI  PID  Type  Process name  XPU Memory
Usage``; ``No running processes found`` or no row at all when none run). Cells are read by
their header labels (sdk.tables: each value goes to the nearest label), never by position or
width. Values in base units (bytes, W, C, ratio); N/A is None. ``XPU-RT Version`` is the
runtime (XRE) version; the box prints no serial.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

from hetero_exporter.sdk import pciaddr, tables, values
from hetero_exporter.sdk.contract import ParseError

from .parse import TOOL, XpuDevice, XpuProcess, XpuSmi, _int, _quantity, _text

# header labels, longest first (a found label masks its text: "XPU" inside "XPU-Util")
_LABELS = (
    ("Volatile Uncorr. ECC", "ecc"), ("Pwr:Usage/Cap", "power"), ("Memory-Usage", "memory"),
    ("Persistence-M", "persistence"), ("Compute M.", "compute"), ("SR-IOV M.", "sriov"),
    ("L3-Usage", "l3"), ("XPU-Util", "util"), ("Bus-Id", "bus"), ("Disp.A", "disp"), ("Name", "name"),
    ("Temp", "temp"), ("Perf", "perf"), ("Fan", "fan"), ("XPU", "xpu"),
)
_PROC_LABELS = (
    ("Process name", "name"), ("XPU Memory", "memory"), ("PID", "pid"), ("Type", "type"),
    ("XPU", "xpu"), ("GI", "gi"), ("XI", "gi"), ("CI", "ci"),
)
# optional words each behind their own blanks (one way to split a blank run)
_DRIVER = re.compile(r"Driver\s+Version(?:\s*:)?\s*v?(\d[\w.+-]*)", re.I)
_RUNTIME = re.compile(r"XPU-RT\s+Version(?:\s*:)?\s*(\S+)", re.I)


def _pair(text: str, unit: str, what: str, line: int) -> tuple[Optional[float], Optional[float]]:
    """``31058MiB / 98304MiB`` or ``91W / 400W`` -> (used, total); N/A halves are None."""
    if values.is_na(text):
        return None, None
    parts = re.sub(r"(?i)\bn/a\b", "NA", text).split("/")
    if len(parts) != 2:
        raise ParseError(TOOL, f"{what}: expected 'USED / TOTAL', got {text.strip()[:40]!r}", line)
    return _quantity(parts[0], unit, what, line), _quantity(parts[1], unit, what, line)


def _device(record: Sequence[tables.BoxLine], header: list, line: int) -> XpuDevice:
    vals = tables.record_values(record, header, TOOL)

    def get(key: str) -> tuple[str, int]:
        return vals.get(key, ("N/A", line))

    if "xpu" not in vals:
        raise ParseError(TOOL, "a device record without an XPU index", line)
    raw_bus = _text(get("bus")[0])
    bus = None
    if raw_bus is not None:
        bus = pciaddr.normalize(raw_bus)
        if bus is None:
            raise ParseError(TOOL, f"Bus-Id: not a PCI address: {raw_bus[:20]!r}", get("bus")[1])
    mem_used, mem_total = _pair(*get("memory")[:1], "MiB", "Memory-Usage", get("memory")[1])
    l3_used, l3_total = _pair(get("l3")[0], "MiB", "L3-Usage", get("l3")[1])
    power, cap = _pair(get("power")[0], "W", "Pwr:Usage/Cap", get("power")[1])
    util_text, util_line = get("util")
    return XpuDevice(
        index=_int(get("xpu")[0], "XPU", get("xpu")[1]), bus_id=bus, model=_text(vals.get("name", ("",))[0]) or "",
        serial=None, inode=None, state=None,
        utilization_ratio=_quantity(util_text, "%", "XPU-Util", util_line),
        l3_used_bytes=l3_used, l3_total_bytes=l3_total, memory_used_bytes=mem_used, memory_total_bytes=mem_total,
        power_watts=power, power_limit_watts=cap,
        temperature_celsius=_quantity(get("temp")[0], "C", "Temp", get("temp")[1]),
        ecc_uncorrected=_quantity(get("ecc")[0], "", "Volatile Uncorr. ECC", get("ecc")[1]),
        line=line)


def _processes(recs: Sequence[Sequence[tables.BoxLine]]) -> list[XpuProcess]:
    """Rows under the process header (the row naming PID), words in the header's order; the
    process name may hold blanks (the labels around it take one word each)."""
    head: Optional[list[str]] = None
    out: list[XpuProcess] = []
    for rec in recs:
        if head is None:
            row = next((r for r in rec if re.search(r"\bPID\b", r.joined)), None)
            if row is not None:
                labels = [lab for lab in tables.cell_labels(" ".join(row.cells), _PROC_LABELS)
                          if not lab.key.startswith("?")]
                head = [lab.key for lab in labels]
                if "pid" not in head or "xpu" not in head:
                    raise ParseError(TOOL, "process header without XPU and PID", row.lineno)
                rec = rec[rec.index(row) + 1:]  # the header's second row ("ID  ID  Usage") follows
                rec = [r for r in rec if not re.fullmatch(r"(?:ID|Usage|\s)*", r.joined)]
            else:
                continue
        for row in rec:
            text = row.joined
            if re.match(r"No running (?:compute )?processes found", text, re.I):
                continue
            words = re.sub(r"(\d)\s+(MiB|GiB|KiB|MB)\b", r"\1\2", text).split()
            k = head.index("name") if "name" in head else len(head)
            before, after = head[:k], head[k + 1:]
            if len(words) < len(before) + len(after) + (1 if "name" in head else 0):
                raise ParseError(TOOL, f"process row with {len(words)} words under {len(head)} labels", row.lineno)
            got = dict(zip(before, words))
            got.update(zip(after, words[len(words) - len(after):] if after else []))
            out.append(XpuProcess(index=_int(got["xpu"], "process XPU", row.lineno),
                                  pid=_int(got["pid"], "process PID", row.lineno), streams=None, l3_bytes=None,
                                  memory_bytes=_quantity(got.get("memory", "N/A"), "MiB", "process memory",
                                                         row.lineno),
                                  command=" ".join(words[len(before):len(words) - len(after)])))
    return out


def parse_box(text: str) -> XpuSmi:
    """The devices and processes of one xpu-smi 5.x default box."""
    lines = tables.box_lines(text, TOOL, strict=False)
    recs = tables.records(lines)
    at = next((i for i, r in enumerate(recs)
               if any("Bus-Id" in ln.text for ln in r) and any(re.search(r"\bXPU\b", ln.text) for ln in r)), None)
    if at is None:
        raise ParseError(TOOL, "no device header (a row naming XPU and Bus-Id)")
    header_rows = recs[at]
    if any(len(r.cells) != len(header_rows[0].cells) for r in header_rows):
        raise ParseError(TOOL, "the header rows have different cell counts", header_rows[-1].lineno)
    header = tables.header_labels(header_rows, _LABELS)
    title = " ".join(ln.text for r in recs[:at] for ln in r)
    driver, runtime = _DRIVER.search(title), _RUNTIME.search(title)
    devices: list[XpuDevice] = []
    known: set[int] = set()
    proc_at = None
    n = len(header_rows)
    for i in range(at + 1, len(recs)):
        rec = recs[i]
        if any("Processes:" in ln.text or re.search(r"\bPID\b", ln.text) for ln in rec):
            proc_at = i
            break
        if len(rec) % n:
            raise ParseError(TOOL, f"a device record of {len(rec)} row(s) under a header of {n}", rec[0].lineno)
        for j in range(0, len(rec), n):  # devices printed without a border between them
            d = _device(rec[j:j + n], header, rec[j].lineno)
            if d.index in known:
                raise ParseError(TOOL, f"XPU {d.index} listed twice", rec[j].lineno)
            known.add(d.index)
            devices.append(d)
            tables.check_devices(len(devices), TOOL, rec[j].lineno)
    if lines and lines[-1].kind != "border":  # a cut output must not drop devices silently
        raise ParseError(TOOL, "the output ends inside a box (no closing border)", lines[-1].lineno)
    procs = _processes(recs[proc_at:]) if proc_at is not None else []
    for p in procs:
        if p.index not in known:
            raise ParseError(TOOL, f"a process on XPU {p.index}, which the device box does not list")
    rt = runtime.group(1) if runtime else None
    return XpuSmi(runtime_version=None if rt is None or values.is_na(rt) else rt,
                  driver_version=driver.group(1) if driver else None, devices=tuple(devices),
                  processes=tuple(procs), process_section=proc_at is not None,
                  sections=("DEVICES",) + (("PROCESSES",) if proc_at is not None else ()))
