"""A fake ``ixsmi`` that prints a scenario's Iluvatar chips (hetero_exporter.sdk.fake_tool).

It answers ``ixsmi`` (the default table, laid out like the IX-ML 4.1 capture) and
``ixsmi --query-gpu=FIELDS --format=csv[,noheader][,nounits]`` (parse.CSV_FIELDS; another field
is refused the way nvidia-smi-style tools do, exit 2). Scenario hooks (vendor ``iluvatar``):
``settings: {iluvatar: {mode: hang|slow|garbage|truncated|exit}}`` (the harness's failure
modes, ``command: summary|detail`` on a fault limits one to the table or the query); device
``extra``: ``ml_version`` (IX-ML, default the driver version), ``cuda_version`` (default 10.2),
``board_chips: 2`` (two-chip boards: the first chip of each board prints Pwr N/A, as the BI-V150
capture does); faults ``kind: missing`` (the chip is left out) and ``kind: memory-over-total``
(Memory-Usage used printed above total), between ``at`` and ``until``.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Sequence

from hetero_exporter.model import fields as F
from hetero_exporter.sdk.fake_tool import tool_entry

from .parse import CSV_FIELDS, MIB, TOOL

VENDOR = "iluvatar"
WIDTHS = (31, 22, 22)  # the capture's cell widths; wider cells widen them


def _n(v: Optional[float], fmt: str) -> str:
    return "N/A" if v is None else fmt.format(v)


def _uuid(u: str) -> str:
    """ixml's chip UUIDs start with GPU- (the scenario adds the spec's prefix where the spec is
    registered in the fake's own process; a test-registered spec is not)."""
    return u if u.startswith("GPU-") else f"GPU-{u}"


def _chips(scenario: Any, t: float) -> list[tuple[Any, dict]]:
    """(device, values in ixsmi units) of every chip listed at ``t``."""
    faults = [f for f in scenario.faults_of(VENDOR) if f.active(t)]
    lost = {f.index for f in faults if f.kind == "missing"}
    over = {f.index for f in faults if f.kind == "memory-over-total"}
    out = []
    for pos, d in enumerate(scenario.devices_of(VENDOR)):
        if d.index in lost:
            continue
        total = d.memory_total_bytes / MIB
        used = d.value(F.MEMORY_USED, t)
        used = None if used is None else used / MIB
        if d.index in over:
            used = total + 1024
        board_first = int(d.extra.get("board_chips", 1)) == 2 and pos % 2 == 0
        power = None if board_first else d.value(F.POWER, t)
        cap = None if board_first else d.value(F.POWER_LIMIT, t)
        util, fan = d.value(F.UTILIZATION, t), d.value("fan_speed_ratio", t)
        clk, mclk = d.value(F.CLOCK_COMPUTE, t), d.value(F.CLOCK_MEMORY, t)
        out.append((d, {
            "index": d.index, "name": d.product, "uuid": _uuid(d.uuid), "serial": d.serial, "bus": d.pci_address,
            "total": total, "used": used, "free": None if used is None else total - used,
            "util": None if util is None else util * 100, "fan": None if fan is None else fan * 100,
            "temp": d.value(F.TEMP_CORE, t), "power": power, "cap": cap,
            "clk": None if clk is None else clk / 1e6, "mclk": None if mclk is None else mclk / 1e6}))
    return out


def _table(scenario: Any, t: float) -> str:
    chips = _chips(scenario, t)
    rows = []
    for _, v in chips:
        pwr = "N/A / N/A" if v["power"] is None and v["cap"] is None else \
            f"{_n(v['power'], '{:.0f}W')} / {_n(v['cap'], '{:.0f}W')}"
        mem = f"{_n(v['used'], '{:.0f}MiB')} / {v['total']:.0f}MiB"
        rows.append(((f"{v['index']:<4} {v['name']}", f"{v['bus'].upper().replace('0000:', '00000000:', 1)}",
                      f"{_n(v['clk'], '{:.0f}MHz'):<9} {_n(v['mclk'], '{:.0f}MHz')}"),
                     (f"{_n(v['fan'], '{:.0f}%'):<4} {_n(v['temp'], '{:.0f}C'):<5} P0    {pwr}", mem,
                      f"{_n(v['util'], '{:.0f}%'):<9} Default")))
    heads = (("GPU  Name", "Bus-Id", "Clock-SM  Clock-Mem"),
             ("Fan  Temp  Perf  Pwr:Usage/Cap", "     Memory-Usage", "GPU-Util  Compute M."))
    w = [max(WIDTHS[i], *(len(r[k][i]) + 2 for r in rows for k in (0, 1)), len(heads[1][i]) + 1) for i in range(3)]
    inner = sum(w) + 2

    def line(cells: Sequence[str]) -> str:
        return "|" + "|".join(f" {c}".ljust(w[i]) for i, c in enumerate(cells)) + "|"

    devs = scenario.devices_of(VENDOR)
    first = devs[0] if devs else None
    driver = first.driver_version if first else "4.1.0"
    ml = str(first.extra.get("ml_version", driver)) if first else driver
    cuda = str(first.extra.get("cuda_version", "10.2")) if first else "10.2"
    title = f"  IX-ML: {ml:<12}Driver Version: {driver:<12}CUDA Version: {cuda}"
    sep = "+" + "+".join("-" * x for x in w) + "+"
    out = ["Timestamp    Thu Jan  1 00:00:00 1970", "+" + "-" * inner + "+", "|" + title.ljust(inner) + "|",
           "|" + "+".join("-" * x for x in w) + "|", line(heads[0]), line(heads[1]),
           "|" + "+".join("=" * x for x in w) + "|"]
    for r in rows:
        out += [line(r[0]), line(r[1]), sep]
    out += ["", "+" + "-" * inner + "+", "|" + " Processes:".ljust(inner - 11) + "GPU Memory |",
            "|" + "  GPU        PID      Process name".ljust(inner - 11) + "Usage(MiB) |",
            "|" + "=" * inner + "|"]
    procs = [(v["index"], p) for d, v in chips for p in d.processes]
    if not procs:
        out.append("|" + "  No running processes found".ljust(inner) + "|")
    for gpu, p in procs:
        mem = p.memory.at(t)
        text = f"  {gpu:<5}  {p.pid:>9}      {p.name:<30}"
        out.append("|" + text + f"{_n(None if mem is None else mem / MIB, '{:.0f}')} ".rjust(inner - len(text)) + "|")
    out.append("+" + "-" * inner + "+")
    return "\n".join(out) + "\n"


_CSV_KEYS = {"index": "index", "name": "name", "uuid": "uuid", "serial": "serial", "bus_id": "bus",
             "memory_total_bytes": "total", "memory_used_bytes": "used", "utilization_ratio": "util",
             "temperature_celsius": "temp", "power_watts": "power", "power_limit_watts": "cap",
             "fan_ratio": "fan", "clock_sm_hertz": "clk", "clock_memory_hertz": "mclk"}
_UNIT_TEXT = {"MiB": "MiB", "%": "%", "C": "C", "W": "W", "MHz": "MHz"}


def _csv(scenario: Any, t: float, fields: Sequence[str], header: bool, units: bool) -> str:
    lines = []
    if header:
        lines.append(", ".join(f"{f} [{CSV_FIELDS[f][1]}]" if CSV_FIELDS[f][1] else f for f in fields))
    for d, v in _chips(scenario, t):
        cells = []
        for f in fields:
            attr, unit = CSV_FIELDS[f]
            if f == "memory.free":
                val: Any = v["free"]
            elif attr == "bus_id":
                val = v["bus"].upper().replace("0000:", "00000000:", 1)
            elif attr in ("perf_state", "compute_mode", "driver_version", "memory_utilization_ratio",
                          "ecc_uncorrected"):
                val = {"perf_state": "P0", "compute_mode": "Default", "driver_version": d.driver_version}.get(attr)
            else:
                val = v[_CSV_KEYS[attr]]
            if val is None:
                cells.append("N/A" if unit else "[N/A]")
            elif isinstance(val, str) or not unit:
                cells.append(str(val))
            else:
                cells.append(f"{val:.0f}" + (f" {_UNIT_TEXT[unit]}" if units else ""))
        lines.append(", ".join(cells))
    return "\n".join(lines) + "\n"


def answer(scenario: Any, t: float, argv: Sequence[str]) -> tuple[int, str, str]:
    if not argv:
        return 0, _table(scenario, t), ""
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    fmt = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), None)
    if query is None or fmt is None or not fmt.split(",")[0] == "csv":
        return 2, "", f"usage: {TOOL} [--query-gpu=FIELDS --format=csv[,noheader][,nounits]]\n"
    fields = [f.strip().lower() for f in query.split(",") if f.strip()]
    bad = [f for f in fields if f not in CSV_FIELDS]
    if bad or not fields:
        return 2, "", f'Field "{bad[0] if bad else ""}" is not a valid field to query.\n'
    opts = set(fmt.split(",")[1:])
    return 0, _csv(scenario, t, fields, "noheader" not in opts, "nounits" not in opts), ""


# the executable's entry point and its launcher (sdk.fake_tool: failure modes, scenario time)
main, install = tool_entry(VENDOR, TOOL, answer, __name__,
                           error_message="ixsmi: failed to initialize IXML: driver not loaded")


if __name__ == "__main__":
    sys.exit(main())
