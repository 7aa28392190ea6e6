"""``nvidia-smi`` with no arguments: the default table (sdk.tables box reading) -> devices and
their processes.

Layout (R418 .. R580 print it alike): an optional timestamp line; a title row ``NVIDIA-SMI
<version>  Driver Version: <v>  CUDA Version: <v>`` (-> ``driver_version``,
``runtime_version``); a header record whose rows name the labels of each cell (``GPU  Name
Persistence-M | Bus-Id  Disp.A | Volatile Uncorr. ECC`` over ``Fan  Temp  Perf  Pwr:Usage/Cap |
Memory-Usage | GPU-Util  Compute M.`` and, R450+, ``MIG M.``); one record per GPU with as many
rows as the header; with MIG enabled a ``MIG devices:`` box (``GPU GI CI MIG | Memory-Usage |
...``, two rows per instance); a ``Processes:`` box (``GPU GI CI PID Type Process name GPU
Memory Usage``, or ``No running processes found``).

Cells are read by their header labels (sdk.tables: each value to the nearest label), so extra
or missing columns of other versions are read or ignored by name. The first cell is read by
words (its index, the product name, Persistence-M's On/Off last) because a product name is wider
than its label. Values, in base units (resolution: the step the table prints in):

- ``Memory-Usage`` ``used / total`` MiB -> memory_used_bytes / memory_total_bytes (1 MiB)
- ``GPU-Util`` % -> utilization_ratio (0.01, sampled over NVML's sample period, <= 1 s)
- ``Temp`` C -> temperature_core_celsius (1 C)
- ``Pwr:Usage/Cap`` W -> power_watts (1 W, sampled: 1 s on Ampere+) / power_limit_watts (1 W)
- ``Volatile Uncorr. ECC`` -> ecc_uncorrected_volatile_total (1)
- ``Bus-Id`` -> pci_address (sdk.pciaddr); the product name -> model (normalized)

Not read, no model field: ``Fan`` (%), ``Perf`` (P-state), ``Persistence-M``, ``Disp.A``,
``Compute M.``, ``MIG M.``. ``N/A`` is ``unsupported``; text that is not a value (a truncated
``13583...``) is ``error`` for a device reading and absent for a process's memory. The table
shows no uuid: a GPU is ``nvidia-pci-<bus id>`` (as the -q/CSV readers name a GPU without one), a
MIG instance ``<GPU>/mig-gi<GI>-ci<CI>`` (as the -q -x reader does), model ``<GPU
model>-MIG-<GiB>gb``. A process goes to the MIG instance of its GI/CI, else to its GPU.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

from hetero_exporter.model import fields as F
from hetero_exporter import profiles
from hetero_exporter.collectors.nvidia import common as C
from hetero_exporter.collectors.nvidia.nvidia_smi.layout_common import VENDOR, placeholder_uuid, reading, snapshot
from hetero_exporter.collectors.nvidia.nvidia_smi.parse import _timestamp
from hetero_exporter.model import DeviceIdentity, DeviceSample, NodeSnapshot, ProcessSample, Quality, Reading
from hetero_exporter.sdk import pciaddr, tables, values
from hetero_exporter.sdk.contract import ParseError

TOOL = "nvidia-smi"
CELLS = values.Cells(TOOL)
MIB = float(1 << 20)
_TITLE = re.compile(r"^\s*\|\s*NVIDIA-SMI\s+\S", re.M)
# header labels, longest first (a found label masks its text: "GPU" not inside "GPU-Util")
LABELS = (
    ("Volatile Uncorr. ECC", "ecc"), ("Pwr:Usage/Cap", "power"), ("Memory-Usage", "memory"),
    ("Persistence-M", "persistence"), ("Compute M.", "compute"), ("GPU-Util", "util"),
    ("Bus-Id", "bus"), ("Disp.A", "disp"), ("MIG M.", "mig"), ("Name", "name"), ("Temp", "temp"),
    ("Perf", "perf"), ("Fan", "fan"), ("GPU", "gpu"),
)
PROC_LABELS = (
    ("Process name", "name"), ("GPU Memory", "memory"), ("Usage", "memory"), ("PID", "pid"),
    ("Type", "type"), ("GPU", "gpu"), ("GI", "gi"), ("CI", "ci"),
)
# optional words each behind their own blanks (no nested optional blank runs: linear search)
_DRIVER = re.compile(r"Driver\s+Version(?:\s*:)?\s*(\d[\w.+-]{0,40})", re.I)
_CUDA = re.compile(r"CUDA\s+Version(?:\s*:)?\s*(\d{1,3}\.\d{1,3})", re.I)
_BOXES_AFTER = re.compile(r"(?:Processes|MIG devices)\s*:")  # the GPU records end at either box
QUALITY = {
    F.MEMORY_USED: Quality(f"{TOOL}: Memory-Usage (used)", "measured", None, MIB),
    F.MEMORY_TOTAL: Quality(f"{TOOL}: Memory-Usage (total)", "measured", None, MIB),
    F.UTILIZATION: Quality(f"{TOOL}: GPU-Util", "sampled", 1.0, 0.01),
    F.TEMP_CORE: Quality(f"{TOOL}: Temp", "measured", None, 1.0),
    F.POWER: Quality(f"{TOOL}: Pwr:Usage/Cap (usage)", "sampled", 1.0, 1.0),
    F.POWER_LIMIT: Quality(f"{TOOL}: Pwr:Usage/Cap (cap)", "measured", None, 1.0),
    C.ECC_UNCORRECTED_VOLATILE: Quality(f"{TOOL}: Volatile Uncorr. ECC", "measured", None, 1.0),
}


def looks_like(text: str) -> bool:
    """A ``| NVIDIA-SMI <version> ...`` title row in a box."""
    head = text[:20_000]
    return "+--" in head and _TITLE.search(head) is not None


class _Bad(ValueError):
    pass


def _qty(text: str, unit: str) -> Optional[float]:
    """``81559MiB`` / ``700W`` / ``30C`` / ``68%`` in base units; None for N/A; _Bad otherwise."""
    t = text.strip()
    if values.is_na(t):
        return None
    m = re.fullmatch(r"([0-9]{1,12}(?:\.[0-9]{1,6})?)\s*([A-Za-z%]{0,4})", t)
    if m is None or m.group(2).lower() not in ("", unit.lower()):
        raise _Bad(t)
    return values.quantity(m.group(1), unit)


def _put(r: dict, field: str, text: Optional[str], unit: str) -> None:
    if text is None:
        return
    try:
        r[field] = reading(_qty(text, unit), QUALITY[field])
    except _Bad:
        r[field] = reading(None, QUALITY[field], error=True)


def _put_pair(r: dict, fields: tuple[str, str], text: Optional[str], unit: str) -> None:
    if text is None:
        return
    try:
        a, b = values.halves(text) or ("N/A", "N/A")  # ``used / total``
    except ValueError:
        for f in fields:
            r[f] = reading(None, QUALITY[f], error=True)
        return
    _put(r, fields[0], a, unit)
    _put(r, fields[1], b, unit)


def _first_cell(row: tables.BoxLine, labels: Sequence[tables.Label]) -> tuple[str, str]:
    """(index, product name) of the first cell: index first, Persistence-M's word last."""
    words = row.cells[0].split() if row.cells else []
    keys = [lab.key for lab in labels]
    if not words:
        raise ParseError(TOOL, "a GPU record without an index", row.lineno)
    rest = words[1:]
    if "persistence" in keys and rest and rest[-1].lower() in ("on", "off", "n/a"):
        rest = rest[:-1]
    return words[0], " ".join(rest) if "name" in keys else ""


def _gpu(part: Sequence[tables.BoxLine], header: list, driver: Optional[str], cuda: Optional[str],
         when: float) -> DeviceSample:
    vals = tables.record_values(part, header, TOOL)
    index_text, name = _first_cell(part[0], header[0][0])
    index = CELLS.index(index_text, "GPU", part[0].lineno)
    bus = pciaddr.normalize(vals["bus"][0], default_function=None) if "bus" in vals else None
    r: dict[str, Reading] = {}
    get = lambda key: vals[key][0] if key in vals else None  # noqa: E731
    _put_pair(r, (F.MEMORY_USED, F.MEMORY_TOTAL), get("memory"), "MiB")
    _put_pair(r, (F.POWER, F.POWER_LIMIT), get("power"), "W")
    _put(r, F.UTILIZATION, get("util"), "%")
    _put(r, F.TEMP_CORE, get("temp"), "C")
    _put(r, C.ECC_UNCORRECTED_VOLATILE, get("ecc"), "")
    ident = DeviceIdentity(vendor=VENDOR, kind="gpu", index=index, uuid=placeholder_uuid(index, bus),
                           model=profiles.normalize_model(VENDOR, name), pci_address=bus,
                           driver_version=driver, runtime_version=cuda, name=name or None)
    return DeviceSample(identity=ident, timestamp=when, readings=r, processes_reported=True)


def _migs(recs: Sequence[Sequence[tables.BoxLine]], gpus: dict[int, DeviceSample],
          when: float) -> dict[tuple[int, int, int], DeviceSample]:
    """MIG instances: a row whose first cell is ``GPU GI CI MIG-Dev`` (four numbers) starts one;
    its second cell is the instance's ``used / total`` memory."""
    out: dict[tuple[int, int, int], DeviceSample] = {}
    for rec in recs:
        for row in rec:
            words = row.cells[0].split() if row.cells else []
            if len(words) != 4 or not all(re.fullmatch(r"[0-9]{1,6}", w) for w in words):
                continue
            gpu, gi, ci, dev = (int(w) for w in words)
            parent = gpus.get(gpu)
            if parent is None:
                raise ParseError(TOOL, f"a MIG device of GPU {gpu}, which the table does not list", row.lineno)
            r: dict[str, Reading] = {}
            _put_pair(r, (F.MEMORY_USED, F.MEMORY_TOTAL), row.cells[1] if len(row.cells) > 1 else None, "MiB")
            total = r.get(F.MEMORY_TOTAL)
            size = f"-{round(total.value / (1 << 30))}gb" if total is not None and total.value else ""
            p = parent.identity
            ident = DeviceIdentity(vendor=VENDOR, kind="gpu", index=dev, uuid=f"{p.uuid}/mig-gi{gi}-ci{ci}",
                                   model=f"{p.model}-MIG{size}", pci_address=p.pci_address,
                                   driver_version=p.driver_version, runtime_version=p.runtime_version,
                                   parent=p.uuid)
            if (gpu, gi, ci) in out:
                raise ParseError(TOOL, f"MIG instance GI {gi} CI {ci} of GPU {gpu} listed twice", row.lineno)
            out[(gpu, gi, ci)] = DeviceSample(identity=ident, timestamp=when, readings=r, processes_reported=True)
    return out


def _processes(recs: Sequence[Sequence[tables.BoxLine]]) -> list[tuple[int, Optional[int], Optional[int], ProcessSample]]:
    """(GPU, GI, CI, process) per row of the process box (sdk.tables.process_rows)."""
    out = []
    for row in tables.process_rows(recs, TOOL, PROC_LABELS, name_required=False):
        got = row.words
        try:
            mem = _qty(got.get("memory", "N/A"), "MiB")
        except _Bad:  # "13583..." (R580 truncates 6-digit MiB): not a value
            mem = None
        gi, ci = (int(got[k]) if re.fullmatch(r"[0-9]{1,6}", got.get(k, "")) else None for k in ("gi", "ci"))
        proc = ProcessSample(pid=CELLS.index(got["pid"], "process PID", row.lineno), name=row.name or None,
                             memory_bytes=None if mem is None else int(mem))
        out.append((CELLS.index(got["gpu"], "process GPU", row.lineno), gi, ci, proc))
    return out


def parse(text: str) -> NodeSnapshot:
    """The GPUs (and MIG instances) of the default table with their processes."""
    table = tables.device_table(text, TOOL, LABELS, end=_BOXES_AFTER)
    driver, cuda = _DRIVER.search(table.title), _CUDA.search(table.title)
    stamp = next(iter(table.banner()), None)
    when = _timestamp(stamp) or 0.0
    versions = (driver.group(1) if driver else None, cuda.group(1) if cuda else None)
    gpus = {g.identity.index: g for g in tables.read_devices(
        table, lambda part: _gpu(part, table.header, *versions, when), lambda g: g.identity.index, TOOL)}
    rest = table.rest
    proc_at = next((k for k in range(len(rest)) if any("Processes" in ln.text for ln in rest[k])), len(rest))
    migs = _migs(rest[:proc_at], gpus, when)
    tables.check_devices(len(gpus) + len(migs), TOOL)
    owned: dict[str, list[ProcessSample]] = {}
    for gpu, gi, ci, proc in _processes(rest[proc_at:]):
        if gpu not in gpus:
            raise ParseError(TOOL, f"a process on GPU {gpu}, which the table does not list")
        mig = migs.get((gpu, gi, ci)) if gi is not None and ci is not None else None
        uuid = (mig or gpus[gpu]).identity.uuid
        owned.setdefault(uuid, []).append(ProcessSample(pid=proc.pid, device_uuid=uuid, name=proc.name,
                                                        memory_bytes=proc.memory_bytes))
    reported = proc_at < len(rest)
    by_gpu: dict[int, list[DeviceSample]] = {}
    for (gpu, _gi, _ci), m in migs.items():
        by_gpu.setdefault(gpu, []).append(m)
    out = []
    for g in gpus.values():
        found = [C.make_fault(code, msg, TOOL) for code, msg in C.conditions(g.readings)]
        health = C.health_of(found)
        out.append(_with(g, owned, reported, health, tuple(found)))
        # an instance is as healthy as its GPU
        out += [_with(m, owned, reported, health, ()) for m in by_gpu.get(g.identity.index, ())]
    return snapshot(out, when)


def _with(d: DeviceSample, owned: dict, reported: bool, health, faults) -> DeviceSample:
    return DeviceSample(identity=d.identity, timestamp=d.timestamp, readings=d.readings, health=health,
                        faults=faults, processes=tuple(owned.get(d.identity.uuid, ())), processes_reported=reported)
