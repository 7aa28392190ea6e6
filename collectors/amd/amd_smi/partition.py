"""``amd-smi partition``: each GPU's current compute (accelerator) and memory partition, the
accelerator partition profiles it offers and the resources each holds.

Layout (amd-smi 24.7+, ROCm 6.3+): sections, each a ``NAME:`` line, a header of column names
and rows, a blank line between them:

- ``CURRENT_PARTITION``: ``GPU_ID MEMORY ACCELERATOR_TYPE ACCELERATOR_PROFILE_INDEX
  PARTITION_ID`` (``0 NPS1 SPX 0 0``);
- ``MEMORY_PARTITION``: ``GPU_ID MEMORY_PARTITION_CAPS CURRENT_MEMORY_PARTITION``;
- ``ACCELERATOR_PARTITION_PROFILES``: a profile per ``PROFILE_INDEX`` (``SPX*``: the ``*`` marks
  the mode in force, the ``Legend:``'s ``* = Current mode``), its ``NUM_PARTITIONS``, and one
  resource per row (``RESOURCE_INDEX RESOURCE_TYPE RESOURCE_INSTANCES RESOURCES_SHARED``: XCC,
  DECODER, DMA, JPEG): a profile's further resources are rows of the last columns only;
- ``ACCELERATOR_PARTITION_RESOURCES``: the resource rows again, by index.

Rows are read by structure, not spacing: a row's words fill the header's columns from the
right, and the columns a row leaves blank on its left are the row's above (a profile's next
resource, a GPU's next profile). So a transcribed capture with other spacing reads the same.
``N/A`` is absent. Another section name, a row with more words than its header has columns,
or a number that is not one is a ParseError.

The model (``snapshot``): a device per GPU of ``CURRENT_PARTITION`` (or ``MEMORY_PARTITION``)
named by its index alone (uuid ``amd-card<N>``, as other amd-smi outputs without a serial or
bus id), with ``partitions_compute`` (the current profile's NUM_PARTITIONS; SPX/DPX/QPX are 1/2/4
where no profile table is printed; CPX's count depends on the XCDs, so only the table gives it)
and ``partitions_memory`` (NPS<n> -> n).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Optional

from hetero_exporter.collectors.amd.fields import PARTITIONS_COMPUTE, PARTITIONS_MEMORY, partition_counts
from hetero_exporter.collectors.amd.identity import device_uuid
from hetero_exporter.model import CollectorStatus, DeviceIdentity, DeviceSample, Health, NodeSnapshot, Quality, Reading
from hetero_exporter.sdk import tables, values
from hetero_exporter.sdk.contract import ParseError

TOOL = "amd-smi partition"
CELLS = values.Cells(TOOL)
VENDOR = "amd"
SECTIONS = ("CURRENT_PARTITION", "MEMORY_PARTITION", "ACCELERATOR_PARTITION_PROFILES",
            "ACCELERATOR_PARTITION_RESOURCES")
_SECTION = re.compile(r"^([A-Z][A-Z_]{2,60}):\s*$")
_COLUMN = re.compile(r"^[A-Z][A-Z0-9_]{0,40}$")
COMPUTE, MEMORY = PARTITIONS_COMPUTE, PARTITIONS_MEMORY


@dataclass(frozen=True)
class Resource:
    index: int
    type: str  # XCC, DECODER, DMA, JPEG
    instances: Optional[int] = None
    shared: Optional[int] = None  # partitions sharing one instance


@dataclass(frozen=True)
class Profile:
    """An accelerator partition profile: its mode, partition count and what each partition holds."""

    gpu: int
    index: int
    type: str  # SPX, DPX, QPX, CPX
    current: bool = False
    memory_caps: Optional[str] = None
    partitions: Optional[int] = None
    resources: tuple[Resource, ...] = ()


@dataclass(frozen=True)
class Current:
    """A GPU's partition in force (CURRENT_PARTITION, MEMORY_PARTITION)."""

    gpu: int
    compute: Optional[str] = None  # SPX ...
    memory: Optional[str] = None  # NPS1 ...
    profile_index: Optional[int] = None
    partition_id: Optional[str] = None  # "0", or "0,1,2,3" in a partitioned mode
    memory_caps: Optional[str] = None


@dataclass(frozen=True)
class Partitions:
    current: tuple[Current, ...] = ()
    profiles: tuple[Profile, ...] = ()
    resources: tuple[Resource, ...] = ()

    def to_dict(self) -> dict:
        return {"command": TOOL, **dataclasses.asdict(self)}


def looks_like(text: str) -> bool:
    """The first line names one of the partition sections."""
    first = next((ln.strip() for ln in text[:4096].splitlines() if ln.strip()), "")
    m = _SECTION.match(first)
    return m is not None and m.group(1) in SECTIONS


Rows = list[tuple[int, list[str]]]  # (line, words), the header row first


def _sections(text: str) -> dict[str, Rows]:
    """Section -> its rows."""
    out: dict[str, Rows] = {}
    current: Optional[Rows] = None
    for n, s in tables.stripped_lines(text, TOOL):
        if s.lower().startswith("legend:"):
            current = None  # the legend and its lines ("* = Current mode") end the tables
            continue
        m = _SECTION.match(s)
        if m is not None:
            if m.group(1) not in SECTIONS:
                raise ParseError(TOOL, f"unknown section {m.group(1)[:40]!r}", n)
            if m.group(1) in out:
                raise ParseError(TOOL, f"section {m.group(1)} twice (one capture per file)", n)
            current = out[m.group(1)] = []
            continue
        if current is None:
            if out:  # after the legend
                continue
            raise ParseError(TOOL, f"a line before any section: {s[:60]!r}", n)
        current.append((n, s.split()))
    if not out:
        raise ParseError(TOOL, "no partition section")
    return out


def _rows(section: str, rows: Rows) -> list[tuple[int, dict[str, str]]]:
    """Each row as column -> word: words fill the columns from the right, and the columns a row
    leaves blank on its left are the row's above."""
    if not rows:
        raise ParseError(TOOL, f"{section}: no header")
    head_line, columns = rows[0]
    if not all(_COLUMN.match(c) for c in columns) or len(set(columns)) != len(columns):
        raise ParseError(TOOL, f"{section}: a header of column names expected, got {' '.join(columns)[:60]!r}",
                         head_line)
    out: list[tuple[int, dict[str, str]]] = []
    above: dict[str, str] = {}
    for n, words in rows[1:]:
        if len(words) > len(columns):
            raise ParseError(TOOL, f"{section}: a row of {len(words)} words under {len(columns)} columns", n)
        missing = columns[:len(columns) - len(words)]
        if missing and not above:
            raise ParseError(TOOL, f"{section}: the first row lacks {missing[0]}", n)
        row = {c: above[c] for c in missing}
        row.update(zip(columns[len(columns) - len(words):], words))
        out.append((n, row))
        above = row
        tables.check_devices(len(out), TOOL, n)
    return out


def _int(row: dict[str, str], key: str, n: int) -> Optional[int]:
    return CELLS.integer(row.get(key, "").rstrip("*"), key, n)  # a profile's '*': the current one


def _word(row: dict[str, str], key: str) -> Optional[str]:
    return values.present(row.get(key))


def _gpu(row: dict[str, str], n: int) -> int:
    gpu = _int(row, "GPU_ID", n)
    if gpu is None:
        raise ParseError(TOOL, "a row without a GPU_ID", n)
    return gpu


def parse(text: str) -> Partitions:
    """The sections of one ``amd-smi partition`` output."""
    if not isinstance(text, str):
        raise ParseError(TOOL, f"expected text, got {type(text).__name__}")
    sections = _sections(text)
    current: dict[int, Current] = {}
    for n, row in _rows("CURRENT_PARTITION", sections.get("CURRENT_PARTITION", [(0, ["GPU_ID"])])):
        gpu = _gpu(row, n)
        current[gpu] = Current(gpu, compute=_word(row, "ACCELERATOR_TYPE"), memory=_word(row, "MEMORY"),
                               profile_index=_int(row, "ACCELERATOR_PROFILE_INDEX", n),
                               partition_id=_word(row, "PARTITION_ID"))
    for n, row in _rows("MEMORY_PARTITION", sections.get("MEMORY_PARTITION", [(0, ["GPU_ID"])])):
        gpu = _gpu(row, n)
        was = current.get(gpu, Current(gpu))
        current[gpu] = dataclasses.replace(was, memory=was.memory or _word(row, "CURRENT_MEMORY_PARTITION"),
                                           memory_caps=_word(row, "MEMORY_PARTITION_CAPS"))
    profiles: dict[tuple[int, int], Profile] = {}
    for n, row in _rows("ACCELERATOR_PARTITION_PROFILES",
                        sections.get("ACCELERATOR_PARTITION_PROFILES", [(0, ["GPU_ID"])])):
        gpu, index = _gpu(row, n), _int(row, "PROFILE_INDEX", n)
        if index is None:
            raise ParseError(TOOL, "a profile row without a PROFILE_INDEX", n)
        kind = (_word(row, "ACCELERATOR_TYPE") or "").strip()
        key = (gpu, index)
        if key not in profiles:
            profiles[key] = Profile(gpu, index, kind.rstrip("*"), current=kind.endswith("*"),
                                    memory_caps=_word(row, "MEMORY_PARTITION_CAPS"),
                                    partitions=_int(row, "NUM_PARTITIONS", n))
        res = _resource(row, n)
        if res is not None:
            profiles[key] = dataclasses.replace(profiles[key], resources=profiles[key].resources + (res,))
    resources = [r for n, row in _rows("ACCELERATOR_PARTITION_RESOURCES",
                                       sections.get("ACCELERATOR_PARTITION_RESOURCES", [(0, ["RESOURCE_INDEX"])]))
                 for r in [_resource(row, n)] if r is not None]
    return Partitions(tuple(current.values()), tuple(profiles.values()), tuple(resources))


def _resource(row: dict[str, str], n: int) -> Optional[Resource]:
    index = _int(row, "RESOURCE_INDEX", n)
    if index is None:
        return None
    return Resource(index, _word(row, "RESOURCE_TYPE") or "", _int(row, "RESOURCE_INSTANCES", n),
                    _int(row, "RESOURCES_SHARED", n))


def counts(parts: Partitions, gpu: int) -> tuple[Optional[int], Optional[int]]:
    """(compute partitions, memory partitions) of one GPU; None where the output does not say."""
    cur = next((c for c in parts.current if c.gpu == gpu), None)
    mine = [p for p in parts.profiles if p.gpu == gpu]
    profile = next((p for p in mine if p.current), None)
    if profile is None and cur is not None:
        profile = next((p for p in mine if cur.profile_index is not None and p.index == cur.profile_index), None)
    mode = cur.compute if cur and cur.compute else profile.type if profile else None
    return partition_counts(mode, cur.memory if cur else None, profile.partitions if profile else None)


def snapshot(parts: Partitions) -> NodeSnapshot:
    """A device per GPU the output names, with its partition counts."""
    gpus = list(dict.fromkeys([c.gpu for c in parts.current] + [p.gpu for p in parts.profiles]))
    q = Quality(f"{TOOL}: CURRENT_PARTITION, ACCELERATOR_PARTITION_PROFILES NUM_PARTITIONS", "measured", None, 1.0)
    devices = []
    for gpu in gpus:
        compute, memory = counts(parts, gpu)
        readings = {name: Reading(float(v), q) for name, v in ((COMPUTE, compute), (MEMORY, memory)) if v is not None}
        ident = DeviceIdentity(vendor=VENDOR, kind="gpu", index=gpu, uuid=device_uuid(VENDOR, gpu))
        devices.append(DeviceSample(identity=ident, timestamp=0.0, readings=readings, health=Health("unknown")))
    return NodeSnapshot(node="", time=0.0, devices=tuple(devices),
                        collectors=(CollectorStatus("amd_smi", True, vendor=VENDOR, devices=len(devices)),))
