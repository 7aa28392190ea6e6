"""A fake ``mthreads-gmi`` that prints a scenario's Moore Threads GPUs (hetero_exporter.sdk.fake_tool).

``mthreads-gmi -q`` prints each GPU's ids (Index, Product Name, GPU UUID: the scenario uuid
without the ``mthreads-`` prefix, Serial Number, MTBios Version: the device's
firmware_version, PCI Bus ID) in the key names of query.py.

It renders the default table in the layouts of the captures: ``2.0`` (gmi 1.14 / 2.0: no rule
between GPUs, no Perf column) or ``2.3`` (gmi 2.3.3: a ``+----+`` rule after each GPU and a
Perf column), with the Processes section; widths are fitted to the cells.

Scenario hooks (vendor ``mthreads``):
- ``settings: {mthreads: {layout: "2.0"|"2.3", mode: hang|slow|garbage|truncated|exit}}``
  (the harness's failure modes; also as faults ``kind: hang|...`` between ``at`` and ``until``);
- values ``pcie_link_width`` / ``pcie_link_width_max`` (lanes; default 16 / 16);
- device ``extra``: ``device_type`` (default ``Physical``), ``ecc_mode`` (default ``N/A``),
  ``perf`` (``P0``), ``musa_version`` (printed nowhere by the real tool's table; unused);
- faults ``kind: missing`` (the GPU is left out), ``kind: memory-over-total`` (used printed
  above total, the driver fault of the Moore Threads FAQ: total shown as 2/3 of the real size).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Optional, Sequence

from hetero_exporter.model import fields as F
from hetero_exporter.sdk.fake_tool import tool_entry

from .parse import MIB, TOOL

VENDOR = "mthreads"
VERSIONS = {"2.0": "2.0.0", "2.3": "2.3.3"}


def _na(v: Optional[float], fmt: str) -> str:
    return "N/A" if v is None else fmt.format(v)


def render(devices: Sequence[dict], processes: Sequence[tuple[int, int, str, Optional[float]]],
           driver: str, layout: str = "2.0", stamp: Optional[str] = None) -> str:
    """The default table. ``devices``: dicts with index, name, bus, type, perf, util (%),
    used / total (MiB), temp (C), width / width_max (lanes), mpc, ecc; ``processes``:
    (gpu index, pid, name, memory MiB)."""
    if layout not in VERSIONS:
        raise ValueError(f"unknown mthreads-gmi layout {layout!r}; one of {sorted(VERSIONS)}")
    perf = layout == "2.3"

    def col0(d: dict) -> tuple[str, str]:
        kind = f"{d['type']:<14}{d['perf']}" if perf else d["type"]
        return f"{d['index']:<5}{d['name']}", f"     {kind}"

    def col2(d: dict) -> tuple[str, str, str]:
        mem = "N/A" if d["used"] is None else f"{d['used']:.0f}MiB({d['total']:.0f}MiB)"
        return (f"{_na(d['util'], '{:.0f}%'):<6}{mem}", f"{_na(d['temp'], '{:.0f}C'):<6}{d['mpc']}",
                f"      {d['ecc']}")

    head0 = ("ID   Name", "     Device Type   Perf" if perf else "     Device Type")
    w0 = max(len(s) for s in [*head0, *(c for d in devices for c in col0(d))]) + 4
    w1 = max(20, *(len(d["bus"]) + 4 for d in devices)) if devices else 20
    w2 = max(len("Temp  MPC Capable"), *(len(c) for d in devices for c in col2(d))) if devices else 17
    width = w0 + w1 + w2 + 2
    rule, plus = "-" * width, "+" + "-" * (width - 2) + "+"

    def rows(a: tuple[str, str], b: tuple[str, str], c: tuple[str, str, str]) -> list[str]:
        return [f"{a[0]:<{w0}}|{b[0]:<{w1}}|{c[0]}", f"{a[1]:<{w0}}|{b[1]:<{w1}}|{c[1]}",
                " " * (w0 + w1 + 1) + f"|{c[2]}"]

    out = [stamp] if stamp else []
    out += [rule, f"    mthreads-gmi:{VERSIONS[layout]:<13}Driver Version:{driver}", rule]
    out += rows(head0, ("PCIe", "Pcie Lane Width"), ("%GPU  Mem", "Temp  MPC Capable", "      ECC Mode"))
    out.append(plus)
    for d in devices:
        lanes = "N/A" if d["width"] is None else f"{d['width']}x({d['width_max']}x)"
        out += rows(col0(d), ("0000" + d["bus"].upper() if d["bus"] != "N/A" else "N/A", lanes), col2(d))
        if perf:
            out.append(plus)
    out += [rule, "", rule, "Processes:"]
    names = max([len("Process name"), *(len(p[2]) for p in processes)]) + 4
    out += [f"{'ID':<5}{'PID':<10}{'Process name':<{names}}GPU Memory", " " * (15 + names + 5) + "Usage", plus]
    if not processes:
        out.append("   No running processes found")
    for gpu, pid, name, mem in processes:
        out.append(f"{gpu:<5}{pid:<10}{name:<{names}}" + _na(mem, "{:.0f}MiB").rjust(10))
    out.append(rule)
    return "\n".join(out) + "\n"


def render_query(devices: Sequence[Any], driver: str, stamp: str = "") -> str:
    """``mthreads-gmi -q`` (the id keys; the rest of the real report is left out)."""
    out = [f"{'Timestamp':<38}: {stamp}", f"{'Driver Version':<38}: {driver}",
           f"{'Attached GPUs':<38}: {len(devices)}"]
    for d in devices:
        uuid = d.uuid[len("mthreads-"):] if d.uuid.startswith("mthreads-") else d.uuid
        out += [f"GPU {'0000' + d.pci_address}", f"    {'Index':<34}: {d.index}",
                f"    {'Product Name':<34}: {d.product}", f"    {'GPU UUID':<34}: {uuid}",
                f"    {'Serial Number':<34}: {d.serial or 'N/A'}",
                f"    {'MTBios Version':<34}: {d.firmware_version or 'N/A'}",
                "    PCI", f"        {'Bus ID':<30}: {'0000' + d.pci_address}"]
    return "\n".join(out) + "\n"


def answer(scenario: Any, t: float, argv: Sequence[str]) -> tuple[int, str, str]:
    if list(argv) == ["-q"]:
        specs = scenario.devices_of(VENDOR)
        listed = [d for d in specs
                  if "missing" not in {f.kind for f in scenario.faults_of(VENDOR, d.index) if f.active(t)}]
        stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(1764400000 + t))
        return 0, render_query(listed, specs[0].driver_version if specs else "3.0.0", stamp), ""
    if argv:
        return 2, "", f"usage: {TOOL} [-q] [-i ID] ...\n(the fake prints the default table and -q)\n"
    cfg = scenario.vendor_settings(VENDOR)
    layout = str(cfg.get("layout", "2.0"))
    devices, procs = [], []
    specs = scenario.devices_of(VENDOR)
    for d in specs:
        active = {f.kind for f in scenario.faults_of(VENDOR, d.index) if f.active(t)}
        if "missing" in active:
            continue
        used, total = d.value(F.MEMORY_USED, t), d.value(F.MEMORY_TOTAL, t)
        if "memory-over-total" in active and total is not None:
            used, total = total * 0.9, total * 2 / 3  # used above the (under-reported) total
        util = d.value(F.UTILIZATION, t)
        width, width_max = d.value("pcie_link_width", t), d.value("pcie_link_width_max", t)
        devices.append({
            "index": d.index, "name": d.product, "bus": d.pci_address,
            "type": str(d.extra.get("device_type", "Physical")), "perf": str(d.extra.get("perf", "P0")),
            "util": None if util is None else round(util * 100),
            "used": None if used is None or total is None else round(used / MIB),
            "total": None if total is None else round(total / MIB),
            "temp": d.value(F.TEMP_CORE, t), "mpc": "YES", "ecc": str(d.extra.get("ecc_mode", "N/A")),
            "width": int(16 if width is None else width), "width_max": int(16 if width_max is None else width_max)})
        for ps in d.processes:
            procs.append((d.index, ps.pid, ps.name, round(ps.memory.at(t) / MIB)))
    driver = specs[0].driver_version if specs else "3.0.0"
    stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(1764400000 + t))
    return 0, render(devices, procs, driver, layout, stamp), ""


# the executable's entry point and its launcher (sdk.fake_tool: failure modes, scenario time)
main, install = tool_entry(VENDOR, TOOL, answer, __name__,
                           error_message="mthreads-gmi: failed to initialize MTML: the Moore Threads driver is not loaded")


if __name__ == "__main__":
    sys.exit(main())


def host_root_files(scenario: Any, root: str) -> None:
    """The MUSA toolkit's version.json of the simulated host (``settings: {mthreads: {musa_version: V}}``,
    default 3.1.0): mthreads-gmi's title prints no MUSA version, so the collector reads it there."""
    from hetero_exporter.collectors.mthreads import versions
    versions.write_fake(root, str(scenario.vendor_settings(VENDOR).get("musa_version", "3.1.0")))
