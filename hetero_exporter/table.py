"""``hetero-exporter inspect``: one readable table for every accelerator on the node.

Every string from a vendor tool or the kubelet is shown through ``terminal.printable``."""

from __future__ import annotations

from typing import Optional

from hetero_exporter.model import fields as F
from hetero_exporter.model import DeviceSample, NodeSnapshot
from hetero_exporter.terminal import printable

GIB = 1 << 30


def _num(v: Optional[float], fmt: str, scale: float = 1.0) -> str:
    return "-" if v is None else format(v / scale, fmt)


def _row(d: DeviceSample) -> list[str]:
    i = d.identity
    used, total = d.value(F.MEMORY_USED), d.value(F.MEMORY_TOTAL)
    mem = "-" if total is None else f"{_num(used, '.1f', GIB)}/{_num(total, '.1f', GIB)} GiB"
    power, limit = d.value(F.POWER), d.value(F.POWER_LIMIT)
    pw = "-" if power is None else f"{power:.0f}" + ("" if limit is None else f"/{limit:.0f} W")
    if power is not None and limit is None:
        pw += " W"
    util = d.value(F.UTILIZATION)
    health = d.health.state
    if d.health.reasons:
        health += " (" + ", ".join(r.code for r in d.health.reasons) + ")"
    index = f"{i.index}" if i.parent is None else f"  {i.index}"
    return [
        i.vendor, index, i.model or "-", i.uuid, i.pci_address or "-", health,
        "-" if util is None else f"{util * 100:.0f}%", mem,
        _num(d.value(F.TEMP_CORE), ".0f") + ("" if d.value(F.TEMP_CORE) is None else "C"), pw,
        _num(d.value(F.CLOCK_COMPUTE), ".0f", 1e6) + ("" if d.value(F.CLOCK_COMPUTE) is None else " MHz"),
        str(len(d.processes)),
    ]


HEADER = ["VENDOR", "IDX", "MODEL", "UUID", "BUS", "HEALTH", "UTIL", "MEMORY", "TEMP", "POWER",
          "CLOCK", "PROCS"]


def render(snap: NodeSnapshot) -> str:
    rows = [HEADER] + [[printable(c) for c in _row(d)] for d in snap.devices]
    widths = [max(len(r[c]) for r in rows) for c in range(len(HEADER))]
    lines = [f"node {printable(snap.node)}: {len(snap.devices)} device(s)"]
    for r in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    procs = [(d, p) for d in snap.devices for p in d.processes]
    if procs:
        lines.append("")
        lines.append("PROCESSES")
        prow = [["VENDOR", "IDX", "PID", "NAME", "MEMORY", "UTIL", "NAMESPACE/POD", "CONTAINER"]]
        for d, p in procs:
            pod = f"{p.namespace}/{p.pod}" if p.pod else "-"
            prow.append([printable(c) for c in (
                d.identity.vendor, str(d.identity.index), str(p.pid), p.name or "-",
                _num(p.memory_bytes, ".2f", GIB) + ("" if p.memory_bytes is None else " GiB"),
                "-" if p.utilization_ratio is None else f"{p.utilization_ratio * 100:.0f}%",
                pod, p.container or "-")])
        pw = [max(len(r[c]) for r in prow) for c in range(len(prow[0]))]
        for r in prow:
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(r, pw)).rstrip())
    lines.append("")
    lines.append("COLLECTORS")
    for c in snap.collectors:
        state = "ok" if c.ok else f"FAILED ({c.error_kind}): {c.error}"
        lines.append(printable(f"  {c.name:<12} {state}  [{c.duration_seconds * 1000:.1f} ms, {c.devices} device(s)]",
                               1000))
    if snap.expected:
        present = snap.present()
        for vendor, n in sorted(snap.expected.items()):
            mark = "" if present.get(vendor, 0) == n else "  <-- mismatch"
            lines.append(f"  pci: {vendor} expected {n}, present {present.get(vendor, 0)}{mark}")
    return "\n".join(lines) + "\n"
