"""A fake ``mx-smi`` that prints a scenario's MetaX GPUs in mx-smi's layouts
(hetero_exporter.sdk.fake_tool: launcher, scenario time per call, failure modes).

``mx-smi`` prints the default table in one of LAYOUTS (the header and cell placement of the
real versions, see parse.py) and the process table; ``mx-smi -L`` the GPU list with each GPU's
scenario uuid (``GPU#0  MXC500  0000:0e:00.0  Available (UUID: GPU-...)``); ``mx-smi topo -m`` the link matrix
(MetaXLink ``MX`` inside groups of ``extra.metaxlink_group`` GPUs, ``NODE`` across groups on
one NUMA node, ``SYS`` across nodes) and ``topo -n`` the same with ``settings.nics`` NICs.

Scenario hooks (vendor ``metax``):
- ``settings: {metax: {layout: 2.1.6|2.2.4|2.2.6|2.2.9, nics: N, mode: hang|slow|garbage|
  truncated|exit}}`` (``mode``: the harness's failure modes, also as faults with ``command:
  summary|detail``);
- device ``extra``: ``maca_version`` (title's MACA Version, default 2.32.0.6), ``gpu_state``
  (default Available), ``metaxlink_group`` (default 4; 0: no MetaXLink);
- faults ``kind: missing`` (the GPU is left out), ``na`` (its row prints N/A), ``state`` (its
  GPU-State is ``params.state``, default Unavailable), between ``at`` and ``until``;
- values ``memory_used_bytes`` above ``memory_total`` print as such (the driver fault).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Optional, Sequence

from hetero_exporter.model import fields as F
from hetero_exporter.sdk.fake_tool import tool_entry

from .parse import MIB, TOOL

VENDOR = "metax"
VERSIONS = {"2.1.6": "2.1.6", "2.2.4": "2.2.4", "2.2.6": "2.2.6", "2.2.9": "2.2.9"}
LAYOUTS = tuple(VERSIONS)

# per layout: cell widths, then per header row per cell the (label, slot start, slot end, align)
# a value of that key is placed in: 'l' starts at the slot, 'r' ends at it
_L3 = (36, 21, 22)
_SPEC: dict[str, tuple[tuple[int, ...], list[list[list[tuple[str, str, int, int, str]]]]]] = {
    "2.1.6": (_L3, [
        [[("GPU", "gpu", 1, 12, "l"), ("NAME", "name", 13, 35, "l")], [("Bus-id", "bus", 1, 20, "l")],
         [("GPU-Util", "util", 1, 21, "l")]],
        [[("Temp", "temp", 1, 12, "l"), ("Power", "power", 13, 35, "l")], [("Memory-Usage", "memory", 1, 20, "l")], []]]),
    "2.2.4": (_L3, [
        [[("GPU", "gpu", 1, 12, "l"), ("NAME", "name", 13, 35, "l")], [("Bus-id", "bus", 1, 20, "l")],
         [("GPU-Util", "util", 1, 21, "l")]],
        [[("Temp", "temp", 1, 12, "l"), ("Pwr:Usage/Cap", "power", 13, 35, "l")],
         [("Memory-Usage", "memory", 1, 20, "l")], [("GPU-State", "state", 1, 21, "l")]]]),
    "2.2.6": (_L3, [
        [[("GPU", "gpu", 1, 8, "l"), ("NAME", "name", 9, 21, "l"), ("Persistence-M", "persistence", 22, 35, "r")],
         [("Bus-id", "bus", 1, 20, "l")], [("GPU-Util", "util", 1, 14, "l"), ("sGPU-M", "sgpu", 15, 21, "r")]],
        [[("Temp", "temp", 1, 8, "l"), ("Pwr:Usage/Cap", "power", 9, 30, "l"), ("Perf", "perf", 31, 35, "r")],
         [("Memory-Usage", "memory", 1, 20, "l")], [("GPU-State", "state", 1, 21, "l")]]]),
    "2.2.9": ((18, 17, 21, 22), [
        [[("Board", "board", 1, 7, "l"), ("Name", "name", 8, 17, "r")],
         [("GPU", "gpu", 1, 7, "l"), ("Persist-M", "persistence", 7, 16, "r")],
         [("Bus-id", "bus", 1, 20, "l")], [("GPU-Util", "util", 1, 14, "l"), ("sGPU-M", "sgpu", 15, 21, "r")]],
        [[("Pwr:Usage/Cap", "power", 1, 17, "l")], [("Temp", "temp", 1, 7, "l"), ("Perf", "perf", 8, 16, "r")],
         [("Memory-Usage", "memory", 1, 20, "l")], [("GPU-State", "state", 1, 21, "l")]]]),
}


def _place(width: int, items: Sequence[tuple[str, int, int, str]]) -> str:
    """A cell of ``width`` with each text at its slot (left from start or right to end)."""
    s = ""
    for text, start, end, align in items:
        if not text:
            continue
        if align == "l":
            s = s.ljust(start) + text
        else:
            s = s.ljust(max(len(s) + 1, end - len(text))) + text
    return s.ljust(width)


def _title(left: str, right: str, inner: int) -> str:
    """A title line: the second item at column 36 (as every captured version prints it)."""
    return (left.ljust(max(36, len(left) + 1)) + right).ljust(inner)


def _row(widths: Sequence[int], cells: Sequence[str]) -> str:
    return "|" + "|".join(cells) + "|"


def render_table(rows: Sequence[dict[str, str]], procs: Sequence[tuple[int, int, str, str]], layout: str,
                 kmd: str, maca: str, bios: str, stamp: str) -> str:
    """The default output: banner, GPU box in ``layout``, process box. ``rows``: per GPU the
    cell values by key (gpu, name, bus, util, temp, power, memory, state, ...); ``procs``:
    (gpu, pid, name, memory MiB text)."""
    if layout not in _SPEC:
        raise ValueError(f"unknown mx-smi layout {layout!r}; one of {LAYOUTS}")
    widths, header = _SPEC[layout]
    inner = sum(widths) + len(widths) - 1
    version = VERSIONS[layout]
    out = [f"mx-smi  version: {version}", "",
           "=================== MetaX System Management Interface Log ===================",
           f"{'Timestamp':<50}: {stamp}", "", f"{'Attached GPUs':<50}: {len(rows)}",
           "+" + "-" * inner + "+",
           "|" + _title(f" MX-SMI {version}", f"Kernel Mode Driver Version: {kmd}", inner) + "|",
           "|" + _title(f" MACA Version: {maca}", f"BIOS Version: {bios}", inner) + "|",
           "|" + "+".join("-" * w for w in widths) + ("|" if len(widths) == 4 else "+")]
    for hrow in header:
        out.append(_row(widths, [_place(w, [(lab, s, e, a) for lab, _, s, e, a in cell])
                                 for w, cell in zip(widths, hrow)]))
    out.append("|" + "+".join("=" * w for w in widths) + "|")
    border = "+" + "+".join("-" * w for w in widths) + "+"
    for r in rows:
        for hrow in header:
            out.append(_row(widths, [_place(w, [(r.get(k, ""), s, e, a) for _, k, s, e, a in cell])
                                     for w, cell in zip(widths, hrow)]))
        out.append(border)
    out += ["", "+" + "-" * inner + "+", "|" + " Process:".ljust(inner) + "|",
            "|" + "  GPU                    PID         Process Name                 GPU Memory".ljust(inner) + "|",
            "|" + (" " * 66 + "Usage(MiB)").ljust(inner) + "|", "|" + "=" * inner + "|"]
    if not procs:
        out.append("|" + "  no process found".ljust(inner) + "|")
    for gpu, pid, name, mem in procs:
        s = f"  {gpu}"
        s = s.ljust(max(len(s) + 1, 27 - len(str(pid)))) + str(pid)
        s = s.ljust(37) + name
        s = s.ljust(max(len(s) + 1, 66)) + mem
        out.append("|" + s.ljust(inner) + "|")
    out.append("+" + "-" * inner + "+")
    return "\n".join(out) + "\n"


def render_topo(gpus: Sequence[tuple[int, int]], group: int, nics: int = 0, stamp: str = "") -> str:
    """``mx-smi topo -m`` (``nics`` 0) or ``-n``: ``gpus`` (index, NUMA node) in order."""
    names = [f"GPU{i}" for i, _ in gpus] + [f"NIC{n}" for n in range(nics)]
    numa = {f"GPU{i}": node for i, node in gpus}
    pos = {f"GPU{i}": p for p, (i, _) in enumerate(gpus)}

    def word(a: str, b: str) -> str:
        if a == b:
            return "X"
        if a.startswith("NIC") or b.startswith("NIC"):
            na = numa.get(a, int(a[3:]) % 2 if a.startswith("NIC") else 0)
            nb = numa.get(b, int(b[3:]) % 2 if b.startswith("NIC") else 0)
            return "PIX" if na == nb else "SYS"
        if group and pos[a] // group == pos[b] // group:
            return "MX"
        return "NODE" if numa[a] == numa[b] else "SYS"

    lines = [("=================== MetaX System Management Interface Log ==================="),
             f"{'Timestamp':<50}: {stamp}", "", f"{'Attached GPUs':<50}: {len(gpus)}", "Device link type matrix",
             " " * 8 + "".join(n.ljust(8) for n in names) + "Node Affinity  CPU Affinity"]
    for a in names:
        row = a.ljust(8) + "".join(word(a, b).ljust(8) for b in names)
        if a.startswith("GPU"):
            n = numa[a]
            row += f"{n:<15}{n * 32}-{n * 32 + 31}"
        lines.append(row.rstrip())
    lines += ["", "Legend:", "  X    = Self",
              "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
              "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
              "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
              "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
              "  PIX  = Connection traversing at most a single PCIe bridge",
              "  MX   = Connection traversing MetaXLink", "  ETH  = Connection traversing Eth",
              "  NA   = Connection type is unknown"]
    if nics:
        lines += ["", "NIC Legend:", ""] + [f"  NIC{n}: mlx5_{n}" for n in range(nics)]
    return "\n".join(lines) + "\n"


def render_list(devices: Sequence[Any], version: str = "2.2.9") -> str:
    """``mx-smi -L``: the banner, then one line per GPU with its uuid (a GPU whose
    ``extra.gpu_state`` is not Available prints no UUID, as the real tool does)."""
    out = [f"mx-smi  version: {version}"]
    for d in devices:
        state = str(d.extra.get("gpu_state", "Available"))
        head = f"GPU#{d.index:<4} {_short(d.product):<11} {d.pci_address}   "
        out.append(head + (f"Available (UUID: {d.uuid})" if state == "Available" else f"Not Available({state})"))
    return "\n".join(out) + "\n"


def _short(product: str) -> str:
    """-L prints the short board name (``MXC500``) where the table prints ``MetaX C500``."""
    name = product.replace("MetaX ", "MX").replace(" ", "")
    return name or "MX"


def _num(v: Optional[float], fmt: str) -> str:
    return "N/A" if v is None else fmt.format(v)


def gpu_rows(scenario: Any, t: float) -> tuple[list[dict[str, str]], list[tuple[int, int, str, str]], list[Any]]:
    """The scenario's MetaX GPUs at ``t`` as cell values, their processes, the GPUs listed."""
    rows, procs, listed = [], [], []
    for pos, d in enumerate(scenario.devices_of(VENDOR)):
        active = [f for f in scenario.faults_of(VENDOR, d.index) if f.active(t)]
        if any(f.kind == "missing" for f in active):
            continue
        listed.append(d)
        na = any(f.kind == "na" for f in active)
        state = next((str(f.params.get("state", "Unavailable")) for f in active if f.kind == "state"),
                     str(d.extra.get("gpu_state", "Available")))
        util, temp = d.value(F.UTILIZATION, t), d.value(F.TEMP_CORE, t)
        power, cap = d.value(F.POWER, t), d.value(F.POWER_LIMIT, t)
        used = d.value(F.MEMORY_USED, t)
        total = d.value(F.MEMORY_TOTAL, t)
        if na:
            util = temp = power = used = None
        pw = _num(power, "{:.0f}W") if cap is None else f"{_num(power, '{:.0f}W')} / {cap:.0f}W"
        mem = "N/A" if used is None or total is None else f"{used / MIB:.0f}/{total / MIB:.0f} MiB"
        rows.append({"gpu": str(d.index), "board": str(d.index), "name": d.product, "bus": d.pci_address,
                     "util": _num(None if util is None else 100 * util, "{:.0f}%"),
                     "temp": _num(temp, "{:.0f}C"), "power": pw, "memory": mem, "state": state,
                     "persistence": "Off", "perf": "P0", "sgpu": "Native"})
        for p in d.processes:
            procs.append((d.index, p.pid, p.name, f"{p.memory.at(t) / MIB:.0f}"))
    return rows, procs, listed


USAGE = "Usage: mx-smi [topo -m|-n] [--show-process] ...\n"


def answer(scenario: Any, t: float, argv: Sequence[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``mx-smi ARGV`` for the scenario at ``t``."""
    cfg = scenario.vendor_settings(VENDOR)
    stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(1764400000 + t))
    rows, procs, listed = gpu_rows(scenario, t)
    first = scenario.devices_of(VENDOR)[0] if scenario.devices_of(VENDOR) else None
    args = list(argv)
    if not args:
        layout = str(cfg.get("layout", "2.2.4"))
        if layout not in _SPEC:
            return 2, "", f"fake mx-smi: unknown layout {layout!r}\n"
        return 0, render_table(rows, procs, layout, first.driver_version if first else "2.15.9",
                               str(first.extra.get("maca_version", "2.32.0.6")) if first else "2.32.0.6",
                               (first.firmware_version if first else "") or "1.25.1.0", stamp), ""
    if args == ["-L"]:
        return 0, render_list(listed, version=VERSIONS.get(str(cfg.get("layout", "2.2.4")), "2.2.4")), ""
    if args in (["topo", "-m"], ["topo", "-n"]):
        group = int(first.extra.get("metaxlink_group", 4)) if first else 4
        nics = int(cfg.get("nics", 2)) if args[1] == "-n" else 0
        return 0, render_topo([(d.index, d.numa_node) for d in listed], group, nics, stamp), ""
    return 2, "", USAGE


# the executable's entry point and its launcher (sdk.fake_tool: failure modes, scenario time)
main, install = tool_entry(VENDOR, TOOL, answer, __name__,
                           error_message="mx-smi: failed to initialize the MetaX driver (mxgvm not loaded)")


if __name__ == "__main__":
    sys.exit(main())
