"""A fake ``xpu_smi`` that prints a scenario's Kunlunxin devices (hetero_exporter.sdk.fake_tool).

It prints the default output in one of two layouts, widths fitted to the cells:
``full`` (XRE 4.0 as documented: DevID, PCI Addr, Model, SN, INODE, State, UseRate, L3,
Memory, Power(W), Temp, Freq(MHz), Firmware Version, CPLD Version) or ``compact`` (the R300
capture of XRE 4.31: no State / power / temperature / clock / firmware columns), then VIDEO
(unless ``video: false``) and PROCESSES.

Scenario hooks (vendor ``kunlunxin``):
- ``settings: {kunlunxin: {layout: full|compact, video: true|false, mode: hang|slow|garbage|
  truncated|exit}}`` (the modes: the harness's failure modes);
- device ``extra``: ``runtime_version`` (default 5.0.21), ``l3_total_mib`` (default 96),
  ``cpld_version``, ``state`` (default N), ``freq_mhz``;
- values as model fields (utilization_ratio, memory_used_bytes, power_watts,
  temperature_core_celsius, clock_compute_hertz, decoder_utilization_ratio ...);
- faults ``kind: missing`` (the device is left out), ``kind: state-error`` (State E) and
  ``kind: state`` (``state:`` param printed) between ``at`` and ``until``.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Sequence

from hetero_exporter.model import fields as F
from hetero_exporter.sdk.fake_tool import tool_entry

from .output import MIB

VENDOR = "kunlunxin"
TOOL = "xpu_smi"
LAYOUTS = ("full", "compact")
FULL = ("DevID", "PCI Addr", "Model", "SN", "INODE", "State", "UseRate", "L3", "Memory", "Power(W)", "Temp",
        "Freq(MHz)", "Firmware Version", "CPLD Version")
COMPACT = ("DevID", "PCI Addr", "Model", "SN", "INODE", "UseRate", "L3", "Memory")
PROCESS_COLUMNS = ("DevID", "PID", "Streams", "L3", "Memory", "Command")


def _na(v: Optional[float], fmt: str = "{:.0f}") -> str:
    return "N/A" if v is None else fmt.format(v)


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """One titled section: rule, header, rule, rows, rule (cells right-aligned, one space of margin)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths)) + " |"

    rule = "-" * (sum(widths) + 3 * len(widths) + 1)
    return [f"  {title}", rule, line(header), rule, *(line(r) for r in rows), rule]


def render(runtime: str, driver: str, devices: Sequence[dict], processes: Sequence[dict],
           layout: str = "full", video: bool = True) -> str:
    """The default output. ``devices``: dicts of the row's values in tool units (MB, W, C,
    MHz, %), None for N/A; ``processes``: dicts devid, pid, streams, memory_mib, command."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown xpu_smi layout {layout!r}; one of {LAYOUTS}")
    header = FULL if layout == "full" else COMPACT
    rows = []
    for d in devices:
        cell = {
            "DevID": str(d["index"]), "PCI Addr": d["bus"], "Model": d["model"], "SN": d["serial"],
            "INODE": f"/dev/xpu{d['index']}", "State": d.get("state", "N"),
            "UseRate": _na(d.get("util_pct"), "{:.0f} %"),
            "L3": f"{_na(d.get('l3_used_mib'))} / {d.get('l3_total_mib', 96):.0f} MB",
            "Memory": f"{_na(d.get('mem_used_mib'))} / {d['mem_total_mib']:.0f} MB",
            "Power(W)": _na(d.get("power_w")), "Temp": _na(d.get("temp_c")), "Freq(MHz)": _na(d.get("freq_mhz")),
            "Firmware Version": d.get("firmware") or "N/A", "CPLD Version": d.get("cpld") or "N/A",
        }
        rows.append([cell[h] for h in header])
    out = [f"Runtime Version: {runtime}", f"Driver Version: {driver}", *table("DEVICES", header, rows)]
    if video:
        vrows = []
        for d in devices:
            def eng(key: str) -> str:
                pct = d.get(key)
                return f"{_na(pct, '{:.0f} %')}, 0 fps, {d.get('video_mhz', 800):.0f} MHz"
            vrows.append([str(d["index"]), d["model"], eng("dec_pct"), eng("enc_pct"), eng("img_pct")])
        out += table("VIDEO", ("DevID", "Model", "DEC", "ENC", "IMGPROC"), vrows)
    prows = [[str(p["devid"]), str(p["pid"]), str(p.get("streams", 1)), f"{p.get('l3_mib', 0):.0f} MB",
              f"{p['memory_mib']:.0f} MB", p["command"]] for p in processes]
    out += table("PROCESSES", PROCESS_COLUMNS, prows)
    return "\n".join(out) + "\n"


def _pct(v: Optional[float]) -> Optional[float]:
    return None if v is None else v * 100.0


def answer(scenario: Any, t: float, argv: Sequence[str]) -> tuple[int, str, str]:
    if argv:
        return 2, "", f"{TOOL}: this fake prints the default output only\n"
    cfg = scenario.vendor_settings(VENDOR)
    devices = scenario.devices_of(VENDOR)
    faults = [f for f in scenario.faults_of(VENDOR) if f.active(t)]
    lost = {f.index for f in faults if f.kind == "missing"}
    rows, procs = [], []
    for d in devices:
        if d.index in lost:
            continue
        state = str(d.extra.get("state", "N"))
        for f in faults:
            if f.index == d.index and f.kind == "state-error":
                state = "E"
            elif f.index == d.index and f.kind == "state":
                state = str(f.params.get("state", "E"))
        used = d.value(F.MEMORY_USED, t)
        clock = d.value(F.CLOCK_COMPUTE, t)
        rows.append({
            "index": d.index, "bus": d.pci_address, "model": d.product, "serial": d.serial, "state": state,
            "util_pct": _pct(d.value(F.UTILIZATION, t)), "l3_used_mib": 0.0,
            "l3_total_mib": float(d.extra.get("l3_total_mib", 96)),
            "mem_used_mib": None if used is None else used / MIB, "mem_total_mib": d.memory_total_bytes / MIB,
            "power_w": d.value(F.POWER, t), "temp_c": d.value(F.TEMP_CORE, t),
            "freq_mhz": clock / 1e6 if clock is not None else d.extra.get("freq_mhz"),
            "firmware": d.firmware_version, "cpld": str(d.extra.get("cpld_version", "103")),
            "dec_pct": _pct(d.value("decoder_utilization_ratio", t)),
            "enc_pct": _pct(d.value("encoder_utilization_ratio", t)),
            "img_pct": _pct(d.value("image_processor_utilization_ratio", t)),
        })
        for p in d.processes:
            procs.append({"devid": d.index, "pid": p.pid, "memory_mib": p.memory.at(t) / MIB, "command": p.name})
    first = devices[0] if devices else None
    driver = (first.driver_version if first else "") or "5.0.21"
    runtime = str(first.extra.get("runtime_version", "5.0.21")) if first else "5.0.21"
    text = render(runtime, driver, rows, procs, str(cfg.get("layout", "full")), bool(cfg.get("video", True)))
    return 0, text, ""


# the executable's entry point and its launcher (sdk.fake_tool: failure modes, scenario time)
main, install = tool_entry(VENDOR, TOOL, answer, __name__,
                           error_message="xpu_smi: open /dev/xpuctrl failed (simulated)")


if __name__ == "__main__":
    sys.exit(main())
