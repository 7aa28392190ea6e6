"""A fake ``acme-smi`` that prints a scenario's Acme devices (hetero_exporter.sdk.fake_tool).

Scenario hooks (vendor ``acme``): ``settings: {acme: {mode: hang|slow|garbage|truncated|exit}}``
(the harness's failure modes); device ``extra.runtime_version`` (default ``2.6``); faults
``kind: missing`` (the device is left out) and the failure kinds between ``at`` and ``until``.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Optional, Sequence

from hetero_exporter.model import fields as F
from hetero_exporter.sdk.fake_tool import fake_main, install_tool

from .parse import COLUMNS, MIB, TOOL

VENDOR = "acme"
VERSION = "1.4.2"


def _fmt(v: Optional[float], fmt: str) -> str:
    return "N/A" if v is None else fmt.format(v)


def render(rows: Sequence[Sequence[str]], driver: str, runtime: str) -> str:
    """The box table of ``rows`` (cells in COLUMNS order), widths fitted to the cells."""
    widths = [max(len(c), *(len(r[i]) for r in rows)) + 2 for i, c in enumerate(COLUMNS)]
    inner = sum(widths) + len(widths) - 1
    border = "+" + "+".join("-" * w for w in widths) + "+"
    title = f" ACME-SMI {VERSION}   Driver Version: {driver}   Runtime Version: {runtime} "

    def line(cells: Sequence[str]) -> str:
        return "|" + "|".join(f" {c} ".rjust(w) if i != 1 else f" {c} ".ljust(w)
                              for i, (c, w) in enumerate(zip(cells, widths))) + "|"

    out = ["+" + "-" * inner + "+", "|" + title.ljust(inner) + "|", border, line(COLUMNS),
           "|" + "+".join("=" * w for w in widths) + "|", *(line(r) for r in rows), border]
    return "\n".join(out) + "\n"


def answer(scenario: Any, t: float, argv: Sequence[str]) -> tuple[int, str, str]:
    if argv:
        return 2, "", f"usage: {TOOL}\n"
    devices = scenario.devices_of(VENDOR)
    lost = {f.index for f in scenario.faults_of(VENDOR) if f.kind == "missing" and f.active(t)}
    rows = []
    for d in devices:
        if d.index in lost:
            continue
        used = d.value(F.MEMORY_USED, t)
        util = d.value(F.UTILIZATION, t)
        rows.append([str(d.index), d.product, d.pci_address.upper(),
                     "N/A" if used is None else f"{used / MIB:.0f}MiB / {d.memory_total_bytes / MIB:.0f}MiB",
                     _fmt(None if util is None else util * 100, "{:.0f}%"),
                     _fmt(d.value(F.TEMP_CORE, t), "{:.0f}C"), _fmt(d.value(F.POWER, t), "{:.0f}W")])
    first = devices[0] if devices else None
    driver = first.driver_version if first else "3.1.0"
    runtime = str(first.extra.get("runtime_version", "2.6")) if first else "2.6"
    return 0, render(rows, driver, runtime), ""


def main(argv: Optional[Sequence[str]] = None) -> int:
    return fake_main(VENDOR, TOOL, answer, argv, detail=lambda a: bool(a),
                     error_message="acme-smi: cannot talk to the Acme driver")


def install(scenario: Any, clock: Any, workdir: Optional[str]) -> tuple[str, Callable[[], dict[str, str]]]:
    """Write the fake acme-smi; returns (its path, the per-call environment).

    This package is not installed (it lives under tests/vendors), so the launcher's
    ``python -m`` needs the folder above it on PYTHONPATH; an installed plugin would not."""
    exe, env = install_tool(scenario, clock, workdir, TOOL, __name__)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return exe, lambda: {**env(), "PYTHONPATH": root}


if __name__ == "__main__":
    sys.exit(main())
