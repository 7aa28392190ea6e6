"""Pure parsing of two more ``mx-smi`` outputs: the GPU list (``mx-smi -L``) and the per-GPU
report of ``mx-smi --show-temperature --show-usage --show-memory``; only ParseError escapes.

``mx-smi -L`` prints one line per GPU after the version banner (MetaX day-2 checks quote it,
e.g. mx-smi 2.2.9 on a C500 host; mxtop parses the same form)::

    mx-smi  version: 2.2.9
    GPU#0    MXC500      0000:08:00.0   Available (UUID: GPU-e702f06b-bbd6-bc06-5196-90a5554a24ba)
    GPU#1    MXC550      0000:2b:00.0   Not Available(MetaX Sysfs File Unaccessible)

so index, name, bus id, state and the GPU's UUID (the only device id mx-smi prints: no serial
in any output at hand); a GPU that is not available prints no UUID.

The ``--show-*`` report (captures in ../shared/fixtures/mx-smi, mx-smi 2.2.6 / 2.2.12 / 2.3.4)
is the banner, then per GPU a ``GPU#0  MXN260  0000:0f:00.0`` line and indented ``key : value``
sections (``Chip Temperature`` / ``hotspot``, ``Memory`` / ``vram total : 67108864 KB``,
``Utilization`` / ``GPU : 0 %``), then ``End of Log``. KB are KiB (67108864 KB is the 64 GiB of
an N260). The sections are read by sdk.blocks, so other sensors and keys read the same.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Optional

from hetero_exporter.sdk import blocks, pciaddr, values
from hetero_exporter.sdk.contract import ParseError

from .parse import CELLS

TOOL = "mx-smi"
MAX_LINE = 4096
MAX_LINES = 20000

_GPU_LINE = re.compile(r"^[ \t]*GPU[ \t]*#[ \t]*(\d{1,4})\b(.*)$")
_BUS = re.compile(r"\b[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\b")
_UUID = re.compile(r"\(\s*UUID\s*:\s*([^\s()]{1,128})\s*\)", re.I)
_END = re.compile(r"^[ \t]*End of Log[ \t]*$", re.I | re.M)


@dataclass(frozen=True)
class MxListed:
    """One line of ``mx-smi -L``: ``uuid`` as printed (``GPU-...``), None where not printed."""

    index: int
    name: str
    bus_id: Optional[str]
    state: Optional[str]
    uuid: Optional[str]


def _lines(text: str) -> list[str]:
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise ParseError(TOOL, f"{len(lines)} lines: not an mx-smi output")
    for i, ln in enumerate(lines, 1):
        if len(ln) > MAX_LINE:
            raise ParseError(TOOL, f"a line of {len(ln)} characters; mx-smi prints short lines", i)
    return lines


def _head(rest: str) -> tuple[str, Optional[str], str]:
    """(name, bus id, what follows the bus id) of the text after ``GPU#N``."""
    m = _BUS.search(rest)
    before, after = (rest[:m.start()], rest[m.end():]) if m else (rest, "")
    bus = pciaddr.normalize(m.group(0)) if m else None
    return before.strip(), bus, after


def parse_list(text: str) -> tuple[MxListed, ...]:
    """The GPUs of ``mx-smi -L`` (ParseError when it lists none, or one twice)."""
    out: list[MxListed] = []
    seen: set[int] = set()
    for lineno, line in enumerate(_lines(text), 1):
        m = _GPU_LINE.match(line)
        if m is None:
            continue
        index = int(m.group(1))
        if index in seen:
            raise ParseError(TOOL, f"GPU#{index} listed twice", lineno)
        seen.add(index)
        name, bus, after = _head(m.group(2))
        u = _UUID.search(after)
        state = (after[:u.start()] if u else after).split("(")[0].strip() or None
        out.append(MxListed(index=index, name=name, bus_id=bus, state=state, uuid=u.group(1) if u else None))
    if not out:
        raise ParseError(TOOL, "no 'GPU#N ...' line (not an mx-smi -L output)")
    return tuple(out)


def is_list(text: str) -> bool:
    """Whether ``text`` reads as ``mx-smi -L`` (GPU lines carrying ``(UUID: ...)`` or a state)."""
    for line in text.splitlines()[:200]:
        m = _GPU_LINE.match(line[:MAX_LINE])
        if m and (_UUID.search(m.group(2)) or re.search(r"\bAvailable\b", m.group(2))):
            return True
    return False


# --------------------------------------------------------------------------- --show-* report


@dataclass(frozen=True)
class MxShown:
    """One GPU of the ``--show-*`` report, in base units (bytes, ratio, celsius); None where
    the report has no such key."""

    index: int
    name: str
    bus_id: Optional[str]
    memory_total_bytes: Optional[float] = None  # Memory / vram total (KB = KiB)
    memory_used_bytes: Optional[float] = None  # Memory / vram used
    utilization_ratio: Optional[float] = None  # Utilization / GPU (%)
    temperature_celsius: Optional[float] = None  # Chip Temperature / hotspot (the first sensor)
    line: int = 0


@dataclass(frozen=True)
class MxReport:
    tool_version: Optional[str]
    attached: Optional[int]
    gpus: tuple[MxShown, ...]
    complete: bool  # the report ends with its End of Log line

    def to_dict(self) -> dict:
        return asdict(self)


def is_report(text: str) -> bool:
    """Whether ``text`` is a ``--show-*`` report: a ``GPU#N  NAME  BUS`` line with no box."""
    for line in text.splitlines()[:200]:
        m = _GPU_LINE.match(line[:MAX_LINE])
        if m and _BUS.search(m.group(2)) and not _UUID.search(m.group(2)):
            return True
    return False


def parse_report(text: str) -> MxReport:
    """The GPUs of a ``--show-temperature --show-usage --show-memory`` report."""
    lines = _lines(text)
    start = next((i for i, ln in enumerate(lines) if _GPU_LINE.match(ln)), None)
    if start is None:
        raise ParseError(TOOL, "no 'GPU#N NAME BUS' line (not an mx-smi --show-* report)")
    head = lines[:start]
    version = next((m.group(1) for m in (re.search(r"-smi\s+version\s*:\s*v?(\d[\w.-]{0,40})", h, re.I)
                                          for h in head) if m), None)
    attached = next((int(m.group(1)) for m in (re.search(r"Attached GPUs\s*:\s*(\d{1,4})\b", h)
                                               for h in head) if m), None)
    body = "\n".join(lines[start:])
    end = _END.search(body)
    if end is not None:
        body = body[:end.start()]
    out: list[MxShown] = []
    seen: set[int] = set()
    for b in blocks.read_blocks(body, TOOL, blank_separates=False, block_start=_GPU_LINE):
        if b.header is None:
            raise ParseError(TOOL, "values before the first GPU#N line", b.line + start)
        m = _GPU_LINE.match(b.header)
        if m is None:  # the blocks start at such lines: not reached
            raise ParseError(TOOL, "a block without its GPU#N line", b.line + start)
        index = int(m.group(1))
        if index in seen:
            raise ParseError(TOOL, f"GPU#{index} listed twice", b.line + start)
        seen.add(index)
        name, bus, _ = _head(m.group(2))
        p = b.paths()
        ln = b.line + start

        def first(prefix: str) -> Optional[str]:
            return next((v for k, v in p.items() if k.startswith(prefix)), None)

        out.append(MxShown(
            index=index, name=name, bus_id=bus,
            # mx-smi's KB are KiB (see the module docstring)
            memory_total_bytes=CELLS.quantity(p.get("memory/vram total"), "KiB", "vram total", ln),
            memory_used_bytes=CELLS.quantity(p.get("memory/vram used"), "KiB", "vram used", ln),
            utilization_ratio=CELLS.quantity(p.get("utilization/gpu"), "%", "Utilization GPU", ln),
            # 2.2.6 prints "44.00 \u00b0C"
            temperature_celsius=CELLS.quantity(first("chip temperature/hotspot"), "C", "hotspot", ln), line=ln))
    return MxReport(tool_version=version, attached=attached, gpus=tuple(out), complete=end is not None)
