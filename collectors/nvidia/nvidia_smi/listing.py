"""``nvidia-smi -L``: one line per GPU, ``GPU <index>: <product name> (UUID: GPU-...)``, and
under a MIG-enabled GPU one indented line per MIG device, ``MIG <profile> Device <n>: (UUID:
MIG-...)`` (R470 printed the MIG uuid as ``MIG-GPU-<gpu uuid>/<gi>/<ci>``: kept as printed).

Gives identities only (no readings): a GPU's index, uuid and model (normalized as the other
nvidia-smi readers do); a MIG device's index (its ``Device <n>``), uuid, parent uuid and model
``<GPU model>-MIG-<memory>gb`` from the profile (``3g.40gb`` -> ``-MIG-40gb``, the name the
``-q -x`` reader gives it from the instance's memory). Health is not shown: ``unknown``.
"""

from __future__ import annotations

import re

from hetero_exporter import profiles
from hetero_exporter.collectors.nvidia.nvidia_smi.layout_common import VENDOR, snapshot
from hetero_exporter.model import DeviceIdentity, DeviceSample, Health, NodeSnapshot
from hetero_exporter.sdk import tables
from hetero_exporter.sdk.contract import ParseError

TOOL = "nvidia-smi -L"
GPU_LINE = re.compile(r"^GPU[ \t]+(\d{1,6})[ \t]*:[ \t]*(\S.{0,200}?)[ \t]*\([ \t]*UUID[ \t]*:[ \t]*([^\s()]{1,200})[ \t]*\)$")
_MIG_LINE = re.compile(r"^MIG[ \t]+(\S{1,40})[ \t]+Device[ \t]+(\d{1,6})[ \t]*:[ \t]*"
                       r"\([ \t]*UUID[ \t]*:[ \t]*([^\s()]{1,200})[ \t]*\)$")
_MIG_MEMORY = re.compile(r"(\d{1,6})gb$", re.I)  # "3g.40gb", "1g.10gb+me"


def looks_like(text: str) -> bool:
    first = next((ln.strip() for ln in text[:4096].splitlines() if ln.strip()), "")
    return GPU_LINE.match(first) is not None


def parse(text: str) -> NodeSnapshot:
    """The GPUs and MIG devices of ``nvidia-smi -L``; ParseError for any other line."""
    out: list[DeviceSample] = []
    parent = None
    unknown = Health("unknown")
    seen: set[str] = set()
    for n, s in tables.stripped_lines(text, TOOL):
        g = GPU_LINE.match(s)
        m = _MIG_LINE.match(s) if g is None else None
        if g is None and m is None:
            raise ParseError(TOOL, f"neither a 'GPU N: ... (UUID: ...)' nor a 'MIG ...' line: {s[:60]!r}", n)
        if g is not None:
            name = g.group(2)
            ident = DeviceIdentity(vendor=VENDOR, kind="gpu", index=int(g.group(1)), uuid=g.group(3),
                                   model=profiles.normalize_model(VENDOR, name), name=name)
            parent = ident
        elif m is not None:
            if parent is None:
                raise ParseError(TOOL, "a MIG device before any GPU", n)
            size = _MIG_MEMORY.search(m.group(1).split("+")[0])
            ident = DeviceIdentity(vendor=VENDOR, kind="gpu", index=int(m.group(2)), uuid=m.group(3),
                                   model=f"{parent.model}-MIG" + (f"-{int(size.group(1))}gb" if size else ""),
                                   parent=parent.uuid, name=m.group(1))
        if ident.uuid in seen:
            raise ParseError(TOOL, f"uuid {ident.uuid[:60]} listed twice", n)
        seen.add(ident.uuid)
        out.append(DeviceSample(identity=ident, timestamp=0.0, health=unknown))
        tables.check_devices(len(out), TOOL, n)
    if not out:
        raise ParseError(TOOL, "no GPU line")
    return snapshot(out)
