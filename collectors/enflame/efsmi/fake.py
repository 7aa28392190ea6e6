"""A fake ``efsmi`` that prints a scenario's Enflame devices (hetero_exporter.sdk.fake_tool).

``efsmi`` prints the default table in the layout of the 1.2 capture (banner, title with the
EFSMI and driver versions, two header rows, two rows per device, ``|---|`` rules), widths fitted
to the values; then a process section (its layout assumed: no capture shows one, see
parse.py). ``efsmi -q`` prints the ``DEV ID`` detail blocks.

Scenario hooks (vendor ``enflame``): ``settings: {enflame: {mode: hang|slow|garbage|truncated|exit}}``
(the harness's failure modes; a fault's ``command: detail`` limits one to ``-q``); device
``extra``: ``ecc`` (Enable|Disable, default Enable), ``virt`` (default Disable), ``efsmi_version``;
faults ``kind: missing`` (left out of both outputs), ``state-na`` (Dpm N/A on that chip),
``unhealthy`` (``-q`` Health False), ``rma`` (``-q`` RMA Flags True), between ``at`` and ``until``.
Memory used (``-q`` Used Size) and Total DBE come from ``memory_used_bytes`` and
``ecc_uncorrected_total``.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Sequence

from hetero_exporter.model import fields as F
from hetero_exporter.sdk.fake_tool import tool_entry

from .parse import MIB, TOOL

VENDOR = "enflame"
VERSION = "1.2.0.301"
BANNER = ("Enflame System Management Interface", "Enflame Tech, All Rights Reserved. 2024 Copyright (C)")


def _na(v: Optional[float], fmt: str) -> str:
    return "N/A" if v is None else fmt.format(v)


def _place(parts: Sequence[tuple[int, str]]) -> str:
    """Texts at their start columns (a text that runs into the next start pushes it on)."""
    out = ""
    for start, text in parts:
        out = out.ljust(start) if len(out) < start else out + " "
        out += text
    return out


# sub-column starts of each cell (row 1, row 2), as in the capture
STARTS = (((1, "DEV"), (8, "NAME")), ((1, "TEMP"), (8, "Dpm"), (14, "Pwr(Usage/Cap)")),
          ((1, "FW VER"),), ((1, "Mem"), (10, "GCU Virt")),
          ((1, "BUS-ID"), (13, "ECC")), ((1, "DUsed"), (13, "SN")))


def _bus(address: str) -> str:
    """``0000:01:00.0`` as efsmi prints it: ``00:01:00.0`` (two domain digits, the capture)."""
    dom, rest = address.split(":", 1)
    return f"{int(dom, 16):02x}:{rest.lower()}"


def _active(scenario: Any, t: float, index: int, kind: str) -> bool:
    return any(f.kind == kind and f.index == index and f.active(t) for f in scenario.faults_of(VENDOR))


def render_table(rows: Sequence[Sequence[Sequence[str]]], driver: str, version: str = VERSION,
                 processes: Sequence[tuple[int, int, str, Optional[float]]] = (),
                 stamp: str = "2024-12-06, 11:33:56 CST") -> str:
    """``rows``: per device, the values of the six (cell, row) groups of STARTS in order."""
    def cells(values: Sequence[Sequence[str]]) -> list[str]:
        return [_place([(s, v) for (s, _), v in zip(STARTS[i], values[i])]) for i in range(6)]

    head = cells([[lab for _, lab in g] for g in STARTS])
    bodies = [cells(r) for r in rows]
    widths = [max(len(c) for c in [head[i], head[i + 1]] + [b[i] for b in bodies] + [b[i + 1] for b in bodies]) + 1
              for i in (0, 2, 4)]
    inner = sum(widths) + 2
    rule = "|" + "-" * inner + "|"

    def pair(c: list[str]) -> list[str]:
        return ["|" + "|".join(c[i + j].ljust(w) for i, w in zip((0, 2, 4), widths)) + "|" for j in (0, 1)]

    title = f"EFSMI    V{version}       Driver Ver: {driver}"
    out = ["-" * (inner + 2), *(f" {b} ".center(inner + 2, "-") for b in BANNER), "-" * (inner + 2), "",
           "+" + stamp.ljust(inner, "-") + "+", "|" + title.ljust(inner) + "|", rule, rule, *pair(head), rule]
    for i, b in enumerate(bodies):
        out += pair(b)
        out.append("+" + "-" * inner + "+")
        if i + 1 < len(bodies):
            out.append(rule)
    out += ["", "+" + "-" * inner + "+", "|" + " Processes:".ljust(inner) + "|"]
    ph = _place([(1, "DEV"), (8, "PID"), (20, "Process name"), (48, "Mem Usage")])
    out += ["|" + ph.ljust(inner) + "|", "|" + "=" * inner + "|"]
    if not processes:
        out.append("|" + " No running processes found".ljust(inner) + "|")
    for dev, pid, name, mem in processes:
        line = _place([(1, str(dev)), (8, str(pid)), (20, name or "-"), (48, _na(mem, "{:.0f}MiB"))])
        out.append("|" + line.ljust(inner) + "|")
    out.append("+" + "-" * inner + "+")
    return "\n".join(out) + "\n"


def table(scenario: Any, t: float) -> str:
    devices = [d for d in scenario.devices_of(VENDOR) if not _active(scenario, t, d.index, "missing")]
    rows, procs = [], []
    for d in devices:
        util = d.value(F.UTILIZATION, t)
        power, cap = d.value(F.POWER, t), d.value(F.POWER_LIMIT, t)
        temp = d.value(F.TEMP_CORE, t)
        dpm = "N/A" if _active(scenario, t, d.index, "state-na") else (
            "Active" if util is not None and util > 0.05 else "Sleep")
        pwr = "N/A" if power is None else (f"{power:.0f}W  {cap:.0f}W" if cap is not None else f"{power:.0f}W")
        rows.append([[str(d.index), d.product], [_na(temp, "{:.0f} C"), dpm, pwr], [d.firmware_version or "N/A"],
                     [f"{d.memory_total_bytes / MIB:.0f}MiB", str(d.extra.get("virt", "Disable"))],
                     [_bus(d.pci_address), str(d.extra.get("ecc", "Enable"))],
                     [_na(None if util is None else util * 100, "{:.1f}%"), d.serial or "N/A"]])
        for p in d.processes:
            procs.append((d.index, p.pid, p.name, p.memory.at(t) / MIB))
    first = devices[0] if devices else None
    driver = first.driver_version if first else VERSION
    version = str(first.extra.get("efsmi_version", driver)) if first else VERSION
    return render_table(rows, driver, version, procs)


def query(scenario: Any, t: float) -> str:
    out = ["-" * 80, " Enflame System Management Interface ".center(80, "-"), "-" * 80]
    for d in scenario.devices_of(VENDOR):
        if _active(scenario, t, d.index, "missing"):
            continue
        dom, bus, rest = d.pci_address.split(":")
        dev, func = rest.split(".")
        used = d.value(F.MEMORY_USED, t)
        power, cap = d.value(F.POWER, t), d.value(F.POWER_LIMIT, t)
        util, temp, dbe = d.value(F.UTILIZATION, t), d.value(F.TEMP_CORE, t), d.value(F.ECC_UNCORRECTED, t)

        def kv(k: str, v: str) -> str:
            return f"        {k:<24}: {v}"

        out += [f"DEV ID {d.index}", "    Driver Info", kv("Ver", d.driver_version), "    Device Info",
                kv("Dev Name", d.product), kv("Dev UUID", d.uuid), kv("Dev SN", d.serial or "N/A"),
                kv("Health", "False" if _active(scenario, t, d.index, "unhealthy") else "True"),
                "    PCIe Info", kv("Vendor ID", "1e36"), kv("Domain", dom), kv("Bus", bus), kv("Dev", dev),
                kv("Func", func), "    Power Info", kv("Power Capa", _na(cap, "{:.0f} W")),
                kv("Cur Power", _na(power, "{:.0f} W")), "    Device Mem Info",
                kv("Total Size", f"{d.memory_total_bytes / MIB:.0f} MiB"),
                kv("Used Size", _na(None if used is None else used / MIB, "{:.0f} MiB")),
                "    Temperature Info", kv("GCU Temp", _na(temp, "{:.0f} ℃")), "    Device Usage Info",
                kv("GCU Usage", _na(None if util is None else util * 100, "{:.1f} %")), "    RMA Info",
                kv("Flags", "True" if _active(scenario, t, d.index, "rma") else "False"),
                kv("Total DBE", _na(dbe, "{:.0f}"))]
    return "\n".join(out) + "\n"


def answer(scenario: Any, t: float, argv: Sequence[str]) -> tuple[int, str, str]:
    if not argv:
        return 0, table(scenario, t), ""
    if list(argv) == ["-q"]:
        return 0, query(scenario, t), ""
    return 2, "", f"{TOOL}: unsupported arguments {' '.join(argv)}\n"


# the executable's entry point and its launcher (sdk.fake_tool: failure modes, scenario time)
main, install = tool_entry(VENDOR, TOOL, answer, __name__,
                           error_message="efsmi: failed to open the Enflame device (driver not loaded?)")


if __name__ == "__main__":
    sys.exit(main())


def host_root_files(scenario: Any, root: str) -> None:
    """The TopsRider version file of the simulated host (``settings: {enflame: {topsrider_version: V}}``,
    default 3.2.0): efsmi prints no runtime version, so the collector reads it there."""
    from hetero_exporter.collectors.enflame import versions
    versions.write_fake(root, str(scenario.vendor_settings(VENDOR).get("topsrider_version", "3.2.0")))
