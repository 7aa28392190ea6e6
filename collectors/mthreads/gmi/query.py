"""Pure parsing of ``mthreads-gmi -q`` (the per-GPU query report) for identities; only
ParseError escapes.

``-q`` prints nvidia-smi -q style ``key : value`` lines: the node's ``Driver Version`` and
``Attached GPUs``, then per GPU an ``Index``, ``Product Name``, ``GPU UUID``, ``Serial Number``,
``MTBios Version`` and a ``PCI`` section with ``Bus ID`` (``00000000:2a:00.0``). These key
names are those of ``mthreads-gmi --query --json`` (the same tree; an 8x MTT S5000 excerpt
quoted in a public exporter's tests: "GPU UUID": "399282a8-...", "Serial Number":
"MY10YL225BF06077", "MTBios Version": "4.3.41", PCI "Bus ID"), and scripts grep ``-q`` for
``MTBios`` / ``Product Name`` / ``FB Memory Usage`` lines. No real ``-q`` text is at hand
(SOURCES.md: only edited excerpts), so it is read leniently, by key and not by layout: every
line's first ``:`` followed by a blank (or the line's end) splits key and value, a GPU
starts at a ``GPU ...`` line without a value or at an ``Index`` key when the current GPU
already has one, and unknown keys are ignored.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Optional

from hetero_exporter.sdk import pciaddr, values
from hetero_exporter.sdk.contract import ParseError

TOOL = "mthreads-gmi"
MAX_LINE = 4096
MAX_LINES = 20000

_GPU_HEAD = re.compile(r"^GPU\b[^:]{0,64}$")
_SEP = re.compile(r":(?=\s|$)")  # the first colon followed by a blank: "Bus ID : 00000000:2a:00.0"


@dataclass(frozen=True)
class GmiQueried:
    """One GPU of ``-q``: its ids as printed (None where not printed or N/A)."""

    index: Optional[int]
    name: Optional[str] = None  # Product Name
    uuid: Optional[str] = None  # GPU UUID (MTML's device UUID)
    serial: Optional[str] = None  # Serial Number
    bus_id: Optional[str] = None  # PCI / Bus ID, normalized
    mtbios: Optional[str] = None  # MTBios Version (firmware)


@dataclass(frozen=True)
class GmiQuery:
    driver_version: Optional[str]
    gpus: tuple[GmiQueried, ...]

    def to_dict(self) -> dict:
        return asdict(self)


_KEYS = {"index": "index", "minor number": None, "product name": "name", "gpu uuid": "uuid", "uuid": "uuid",
         "serial number": "serial", "bus id": "bus_id", "bus-id": "bus_id", "mtbios version": "mtbios"}


def is_query(text: str) -> bool:
    """Whether ``text`` reads as ``-q``: a ``GPU UUID`` or ``MTBios Version`` key."""
    return bool(re.search(r"^[ \t]*(?:GPU UUID|MTBios Version)[ \t]*:", text[:200000], re.M | re.I))


def parse_query(text: str) -> GmiQuery:
    """The GPUs of ``mthreads-gmi -q`` (ParseError when it shows none)."""
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise ParseError(TOOL, f"{len(lines)} lines: not a mthreads-gmi -q output")
    driver = None
    gpus: list[dict] = []
    cur: Optional[dict] = None
    for lineno, raw in enumerate(lines, 1):
        if len(raw) > MAX_LINE:
            raise ParseError(TOOL, f"a line of {len(raw)} characters: not a mthreads-gmi -q output", lineno)
        s = raw.strip()
        if not s:
            continue
        m = _SEP.search(s)
        if m is None:
            if _GPU_HEAD.match(s):
                cur = {"line": lineno}
                gpus.append(cur)
            continue
        key = re.sub(r"\s+", " ", s[:m.start()]).strip().lower()
        val = values.present(s[m.end():])
        if key == "driver version" and cur is None:
            driver = val
            continue
        field = _KEYS.get(key)
        if field is None:
            continue
        if field == "index" and (cur is None or "index" in cur):
            cur = {"line": lineno}
            gpus.append(cur)
        if cur is None:
            cur = {"line": lineno}
            gpus.append(cur)
        cur.setdefault(field, (val, lineno))
    out: list[GmiQueried] = []
    seen: set[int] = set()
    for g in gpus:
        index = None
        if g.get("index", (None,))[0] is not None:
            text_i, ln = g["index"]
            if not re.fullmatch(r"\d{1,4}", text_i):
                raise ParseError(TOOL, f"Index: expected a number, got {text_i[:20]!r}", ln)
            index = int(text_i)
            if index in seen:
                raise ParseError(TOOL, f"GPU {index} listed twice", ln)
            seen.add(index)
        bus = None
        if g.get("bus_id", (None,))[0] is not None:
            bus = pciaddr.normalize(g["bus_id"][0])
            if bus is None:
                raise ParseError(TOOL, f"Bus ID: not a PCI address: {g['bus_id'][0][:24]!r}", g["bus_id"][1])

        def get(k: str) -> Optional[str]:
            return g.get(k, (None,))[0]

        if index is None and bus is None and get("uuid") is None and get("serial") is None:
            continue  # a "GPU ..." line with nothing of a GPU under it
        out.append(GmiQueried(index=index, name=get("name"), uuid=get("uuid"), serial=get("serial"),
                              bus_id=bus, mtbios=get("mtbios")))
    if not out:
        raise ParseError(TOOL, "no GPU in the -q output (no Index / GPU UUID / Bus ID keys)")
    return GmiQuery(driver_version=driver, gpus=tuple(out))
