"""A fake ``npu-smi`` executable that prints a scenario's Ascend devices in npu-smi's layouts.

``install()`` writes a small launcher named ``npu-smi`` into the collector's workdir; the
launcher runs this module with the agent's own interpreter, so the real collector runs the
real runner (hetero_exporter.sdk.runner) and the real parsers against it. The scenario file
is baked into the launcher; the scenario time comes with each call in the environment
variable ``HETERO_SIM_T`` (the collector's simulation branch passes it), so the fake prints
the values of that moment and the real code path knows nothing of simulation.

The renderers are pure functions of collectors/npu_smi_parse.py's parsed structures (NpuSummary,
DetailDoc-like key lists), which is what the render -> parse round-trip tests rely on.

Scenario hooks (vendor ``ascend``):
- ``settings: {ascend: {layout: 910|910-22|910-old|310|new, chips_per_card: N,
  npu_id_base: N, topology: hccs|pcie, cann_version: V, mode: hung|slow|garbage|truncated|exit,
  seconds: S, status: N}}``; ``topology`` (``info -t topo``) defaults to ``hccs`` (every chip
  linked to every other, as on an Atlas 800 training server) except on 310 products (PCIe);
  ``cann_version`` (default: the driver version) is written to the fake host root's
  ascend_toolkit_install.info, so identity.runtime_version appears in simulation;
  ``cann_version: none`` (or null) writes no CANN file (a node without CANN);
  ``layout`` defaults to ``310`` for a 310 product and ``910`` otherwise;
- device ``extra``: ``ddr_total_mb``, ``hugepages_total``, ``aicore_count``,
  ``aicore_max_mhz``, ``board_name``, ``aicpu_utilization_ratio``, ``ctrlcpu_utilization_ratio``;
- faults ``kind: health`` (``state`` Warning|Alarm|Critical|UNKNOWN, ``code`` and/or
  ``codes: [...]``, ``message``) on a device index; ``kind: missing`` (the chip is left out
  of the table); ``kind: fault-event`` (``code`` the event id, ``severity`` 0..3, default 2,
  ``message`` the event name) is listed by ``info -t current-fault-event`` only (the summary
  health stays as it is); the codes of ``kind: health`` faults are listed there too, with
  the severity of their state (Warning 1, Alarm 2, Critical 3);
  ``kind: hung|slow|garbage|truncated|exit`` (the whole tool, any index;
  ``command: summary|detail`` limits it to ``npu-smi info`` or to the ``-t``/``-m`` calls).
A hung fake starts a grandchild ``sleep`` and writes both pids to ``npu-smi.hung.pids`` in
its workdir, so tests can see the runner kill the whole process group.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from hetero_exporter.collectors.ascend.npu_smi.parse import NpuChip, NpuProcess, NpuSummary
from hetero_exporter.sdk import fake_tool
from hetero_exporter.sdk.fake_tool import fake_main, install_tool

MIB = 1 << 20

FAILURE_KINDS = fake_tool.FAILURE_KINDS
LAYOUTS = ("910", "910-22", "910-old", "310", "new")

# --------------------------------------------------------------------------- table renderer


def _num(v: Optional[float], fmt: str = "{:.1f}") -> str:
    return "NA" if v is None else fmt.format(v)


def _i(v: Optional[int]) -> str:
    return "NA" if v is None else str(v)


def _row(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "|" + "|".join(c.ljust(w) for c, w in zip(cells, widths)) + "|"


def _border(widths: Sequence[int], ch: str) -> str:
    return "+" + "+".join(ch * w for w in widths) + "+"


@dataclass(frozen=True)
class _Style:
    widths: tuple[int, ...]
    head1: tuple[str, ...]
    head2: tuple[str, ...]
    processes: bool


def _style(layout: str) -> _Style:
    if layout in ("910", "910-22"):
        w1 = 27 if layout == "910" else 22
        return _Style((w1, 15, 52), (" NPU   Name", " Health", " Power(W)    Temp(C)           Hugepages-Usage(page)"),
                      (" Chip", " Bus-Id", " AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)"), True)
    if layout == "910-old":
        return _Style((22, 15, 45), (" NPU   Name", " Health", " Power(W)   Temp(C)"),
                      (" Chip", " Bus-Id", " AICore(%)  Memory-Usage(MB)  HBM-Usage(MB)"), False)
    if layout == "310":
        return _Style((19, 17, 40), (" NPU     Name", " Health", " Power(W)          Temp(C)"),
                      (" Chip    Device", " Bus-Id", " AICore(%)         Memory-Usage(MB)"), False)
    if layout == "new":
        return _Style((8, 18, 15, 53), (" NPU ID", " Name", " Health", " Power(W)    Temp(C)           Hugepages-Usage(page) "),
                      ("", "", " Bus-Id", " NPU Util(%) Memory-Usage(MB)  HBM-Usage(MB)"), True)
    raise ValueError(f"unknown npu-smi layout {layout!r}; one of {LAYOUTS}")


def _bus(b: Optional[str]) -> str:
    return "NA" if b is None else b.upper()


def _pair(u: Optional[int], t: Optional[int], w: int) -> str:
    if u is None and t is None:
        return "NA"
    return f"{_i(u):<{w}}/ {_i(t)}"


def _chip_rows(c: NpuChip, layout: str) -> tuple[list[str], list[str]]:
    pw, tp, ai = _num(c.power_w), _num(c.temp_c, "{:.0f}"), _num(c.aicore_pct, "{:.0f}")
    if layout in ("910", "910-22"):
        w1 = 27 if layout == "910" else 22
        return ([f" {c.npu_id:<6}{c.name:<{w1 - 7}}", f" {c.health:<14}",
                 f" {pw:<12}{tp:<18}{_pair(c.hugepages_used, c.hugepages_total, 5)}"],
                [f" {c.chip_id:<{w1 - 1}}", f" {_bus(c.bus_id):<14}",
                 f" {ai:<12}{_pair(c.memory_used_mb, c.memory_total_mb, 5):<18}"
                 f"{_pair(c.hbm_used_mb, c.hbm_total_mb, 5)}"])
    if layout == "910-old":
        return ([f" {c.npu_id:<6}{c.name:<15}", f" {c.health:<14}", f" {pw:<11}{tp}"],
                [f" {c.chip_id:<21}", f" {_bus(c.bus_id):<14}",
                 f" {ai:<11}{_pair(c.memory_used_mb, c.memory_total_mb, 5):<18}"
                 f"{_pair(c.hbm_used_mb, c.hbm_total_mb, 5)}"])
    if layout == "310":
        return ([f" {c.npu_id:<8}{c.name:<10}", f" {c.health:<16}", f" {pw:<18}{tp}"],
                [f" {c.chip_id:<8}{_i(c.logic_id):<10}", f" {_bus(c.bus_id):<16}",
                 f" {ai:<18}{_pair(c.memory_used_mb, c.memory_total_mb, 5)}"])
    return ([f" {c.npu_id:<7}", f" {c.name:<17}", f" {c.health:<14}",
             f" {pw:<12}{tp:<18}{_pair(c.hugepages_used, c.hugepages_total, 6)}"],
            ["", "", f" {_bus(c.bus_id):<14}",
             f" {ai:<12}{_pair(c.memory_used_mb, c.memory_total_mb, 5):<18}{_pair(c.hbm_used_mb, c.hbm_total_mb, 6)}"])


def render_summary(s: NpuSummary, layout: str = "910") -> str:
    """``npu-smi info`` for ``s`` in one of LAYOUTS (fields a layout has no column for are
    not printed: the 310 and 910-old layouts have no process section)."""
    st = _style(layout)
    inner = sum(st.widths) + len(st.widths) - 1
    title_widths = st.widths if layout != "new" else (27, 15, 53)
    lines = ["+" + "-" * inner + "+",
             "|" + f" npu-smi {s.tool_version:<24} Version: {s.driver_version}".ljust(inner) + "|",
             _border(title_widths, "-"), _row(st.head1, st.widths), _row(st.head2, st.widths),
             _border(st.widths, "=")]
    chips = sorted(s.chips, key=lambda c: (c.npu_id, c.chip_id))
    for i, c in enumerate(chips):
        a, b = _chip_rows(c, layout)
        lines += [_row(a, st.widths), _row(b, st.widths)]
        same_card = i + 1 < len(chips) and chips[i + 1].npu_id == c.npu_id
        lines.append(_border(st.widths, "-" if same_card else "="))
    if st.processes:
        lines += _process_section(s, layout, st, inner)
    return "\n".join(lines) + "\n"


def _process_section(s: NpuSummary, layout: str, st: _Style, inner: int) -> list[str]:
    w1 = st.widths[0] if layout != "new" else 27
    pw = (w1, 15, 26, inner - w1 - 15 - 26 - 3)
    border = _border(st.widths if layout != "new" else (27, 15, 53), "=")
    first = " NPU     Chip" if layout != "new" else " NPU ID"
    lines = [_border(st.widths if layout != "new" else (27, 15, 53), "-"),
             _row((first, " Process id", " Process name", " Process memory(MB)"), pw), border]
    for npu in sorted({c.npu_id for c in s.chips}):
        procs = [p for p in s.processes if p.npu_id == npu]
        if not procs:
            lines += ["|" + f" No running processes found in NPU {npu}".ljust(inner) + "|", border]
        for p in procs:
            head = f" {p.npu_id:<8}{_i(p.chip_id):<{w1 - 9}}" if layout != "new" else f" {p.npu_id:<{w1 - 1}}"
            lines += [_row((head, f" {p.pid:<14}", f" {p.name:<25}", f" {_i(p.memory_mb):<{pw[3] - 1}}"), pw),
                      border]
    return lines


def render_mapping(chips: Sequence[NpuChip], mcu_cards: Sequence[int] = ()) -> str:
    """``npu-smi info -m``: card, chip, logic id, chip name (and an Mcu row per card listed)."""
    w = 31
    lines = ["NPU ID".ljust(w) + "Chip ID".ljust(w) + "Chip Logic ID".ljust(w) + "Chip Name"]
    by_card: dict[int, list[NpuChip]] = {}
    for c in sorted(chips, key=lambda c: (c.npu_id, c.chip_id)):
        by_card.setdefault(c.npu_id, []).append(c)
    for card, cs in by_card.items():
        for c in cs:
            lines.append(f"{c.npu_id:<{w}}{c.chip_id:<{w}}{_i(c.logic_id):<{w}}Ascend {c.name}")
        if card in mcu_cards:
            lines.append(f"{card:<{w}}{len(cs):<{w}}{'-':<{w}}Mcu")
    return "\n".join(lines) + "\n"


def render_kv(blocks: Sequence[Sequence[tuple[str, str]]], indent: str = "\t") -> str:
    """Blocks of ``key : value`` lines as npu-smi prints them (``\\t%-30s : %s``), blank
    lines between blocks; a value with newlines continues under the value column."""
    out = []
    width = max([30] + [len(k) for block in blocks for k, _ in block])
    for bi, block in enumerate(blocks):
        if bi:
            out.append("")
        for key, value in block:
            first, *rest = str(value).split("\n")
            out.append(f"{indent}{key:<{width}} : {first}")
            pad = " " * (len(indent.expandtabs(8)) + width + 3)
            out += [pad + r for r in rest]
    return "\n".join(out) + "\n"


def render_items(blocks: Sequence[Sequence[tuple[str, Sequence[str]]]], indent: str = "\t") -> str:
    """``key : value`` blocks whose values are lists: the first item on the key's line, each
    further one on a ``: item`` line under the colon after a blank line (how npu-smi prints
    multi-line Error Information and Fault Event Information)."""
    out = []
    for bi, block in enumerate(blocks):
        if bi:
            out.append("")
        for key, items in block:
            first, *rest = list(items) or ["NA"]
            out.append(f"{indent}{key:<30} : {first}")
            for item in rest:
                out += ["", f"{indent}{'':<30} : {item}"]
    return "\n".join(out) + "\n"


def render_health(state: str, codes: Sequence[str] = (), information: Sequence[str] = ()) -> str:
    """``npu-smi info -t health -i N -c C`` (further information lines as ``: ...`` lines)."""
    return render_items([[("Health Status", [state]), ("Error Code", [" ".join(codes) if codes else "NA"]),
                          ("Error Information", list(information) or ["NA"])]])


def render_fault_events(per_chip: Sequence[tuple[Optional[int], Sequence[tuple[str, int, str]]]]) -> str:
    """``npu-smi info -t current-fault-event -i N``: per chip (None: a card-level output, as on
    the Ascend 950 documentation) its events (event id 8 hex digits, severity, event name)."""
    blocks = []
    for chip, events in per_chip:
        items = [f"event id=0x{code}, severity={sev}, node type ex=0, node id=0, sub node type ex=0, sub node id=0"
                 + (f", event name={name}" if name else "") for code, sev, name in events]
        blocks.append(([("Chip ID", [str(chip)])] if chip is not None else [])
                      + [("Fault Event Count", [str(len(events))])]
                      + ([("Fault Event Information", items)] if items else []))
    return render_items(blocks)


# --------------------------------------------------------------------------- scenario -> npu-smi


@dataclass(frozen=True)
class FakeChip:
    chip: NpuChip
    spec: Any  # model.scenario.DeviceSpec
    codes: tuple[str, ...] = ()
    information: tuple[str, ...] = ()
    events: tuple[tuple[str, int, str], ...] = ()  # current fault events: (event id, severity, name)


# health state -> the severity its codes are listed with by -t current-fault-event
_STATE_SEVERITY = {"Warning": 1, "Alarm": 2, "Critical": 3}


def _event_id(code: Any) -> str:
    c = str(code).strip()
    return (c[2:] if c[:2].lower() == "0x" else c).upper()


def _mb(v: Optional[float]) -> Optional[int]:
    return None if v is None else int(round(v / MIB))


def _pct(v: Optional[float]) -> Optional[float]:
    return None if v is None else float(round(100 * v))


def _layout(scenario: Any) -> str:
    cfg = scenario.vendor_settings("ascend")
    if cfg.get("layout"):
        return str(cfg["layout"])
    devs = scenario.devices_of("ascend")
    return "310" if devs and devs[0].product.startswith("310") and not devs[0].product.startswith("310P") else "910"


def fake_chips(scenario: Any, t: float) -> tuple[list[FakeChip], list[NpuProcess], str]:
    """The scenario's Ascend devices at ``t`` as npu-smi rows (vendor units), with their
    processes and the layout to print them in."""
    cfg = scenario.vendor_settings("ascend")
    layout = _layout(scenario)
    per_card = max(1, int(cfg.get("chips_per_card", 1)))
    base = int(cfg.get("npu_id_base", 0))
    chips, procs = [], []
    for pos, d in enumerate(scenario.devices_of("ascend")):
        faults = [f for f in scenario.faults_of("ascend", d.index) if f.active(t)]
        if any(f.kind == "missing" for f in faults):
            continue
        state, codes, info, events = "OK", [], [], []
        for f in faults:
            if f.kind == "health":
                state = str(f.params.get("state", "Alarm"))
                mine = ([f.code] if f.code else []) + [str(c) for c in f.params.get("codes", [])]
                codes += mine
                events += [(_event_id(c), _STATE_SEVERITY.get(state, 2), f.message) for c in mine]
                if f.message:
                    info.append(f.message)
            elif f.kind == "fault-event" and f.code:
                events.append((_event_id(f.code), int(f.params.get("severity", 2)), f.message))
        npu, chip = base + pos // per_card, pos % per_card
        total, used = _mb(d.value("memory_total_bytes", t)), _mb(d.value("memory_used_bytes", t))
        ddr_total = d.extra.get("ddr_total_mb")
        hp = d.extra.get("hugepages_total")
        p = d.value("power_watts", t)
        temp = d.value("temperature_core_celsius", t)
        c = NpuChip(npu_id=npu, chip_id=chip, name=d.product, health=state, bus_id=d.pci_address,
                    logic_id=pos if layout == "310" else None,
                    power_w=None if p is None else round(p, 1), temp_c=None if temp is None else float(round(temp)),
                    aicore_pct=_pct(d.value("utilization_ratio", t)))
        if layout == "310":
            c = _replace(c, memory_used_mb=used, memory_total_mb=total)
        else:
            ddr = int(ddr_total or 0)
            c = _replace(c, memory_used_mb=min(ddr, int(d.extra.get("ddr_used_mb", 0))) if ddr else 0,
                         memory_total_mb=ddr, hbm_used_mb=used, hbm_total_mb=total)
            if layout != "910-old":
                c = _replace(c, hugepages_used=0, hugepages_total=int(hp or 0))
        chips.append(FakeChip(c, d, tuple(codes), tuple(info), tuple(dict.fromkeys(events))))
        if layout in ("910", "910-22", "new"):
            for ps in d.processes:
                procs.append(NpuProcess(npu_id=npu, chip_id=None if layout == "new" else chip, pid=ps.pid,
                                        name=ps.name, memory_mb=_mb(ps.memory.at(t))))
    return chips, procs, layout


def _replace(c: NpuChip, **kw: Any) -> NpuChip:
    import dataclasses
    return dataclasses.replace(c, **kw)


def _die_id(uuid: str) -> str:
    h = hashlib.sha1(uuid.encode()).hexdigest().upper()
    return " ".join(h[i:i + 8] for i in range(0, 40, 8))


def _detail(kind: str, card: int, chip_id: Optional[int], chips: Sequence[FakeChip], t: float,
            layout: str) -> Optional[str]:
    mine = [fc for fc in chips if fc.chip.npu_id == card and (chip_id is None or fc.chip.chip_id == chip_id)]
    if not mine:
        return None
    if kind == "health":
        fc = mine[0]
        return render_health(fc.chip.health, fc.codes, fc.information)
    if kind == "current-fault-event":
        on_card = [fc for fc in chips if fc.chip.npu_id == card]
        if len(on_card) == 1:
            return render_fault_events([(None, mine[0].events)])
        return render_fault_events([(fc.chip.chip_id, fc.events) for fc in mine])
    head = [("NPU ID", str(card)), ("Chip Count", str(len([f for f in chips if f.chip.npu_id == card])))]
    blocks: list[list[tuple[str, str]]] = [head]
    for fc in mine:
        c, d = fc.chip, fc.spec

        def val(field: str, scale: float = 1.0, fmt: str = "{:.0f}") -> str:
            v = None if field in d.unsupported else d.value(field, t)
            return "NA" if v is None else fmt.format(v * scale)

        hbm = c.hbm_total_mb or 0
        if kind == "usages":
            rows = [("DDR Capacity(MB)", _i(c.memory_total_mb or 0)),
                    ("DDR Usage Rate(%)", "0"), ("DDR Hugepages Total(page)", _i(c.hugepages_total or 0)),
                    ("DDR Hugepages Usage Rate(%)", "0")]
            if hbm:
                rows += [("HBM Capacity(MB)", str(hbm)),
                         ("HBM Usage Rate(%)", str(round(100 * (c.hbm_used_mb or 0) / hbm)))]
            rows += [("Aicore Usage Rate(%)", _num(c.aicore_pct, "{:.0f}")),
                     ("Aicpu Usage Rate(%)", f"{round(100 * float(d.extra.get('aicpu_utilization_ratio', 0)))}"),
                     ("Ctrlcpu Usage Rate(%)", f"{round(100 * float(d.extra.get('ctrlcpu_utilization_ratio', 0)))}"),
                     ("DDR Bandwidth Usage Rate(%)", val("memory_utilization_ratio", 100) if not hbm else "0")]
            if hbm:
                rows.append(("HBM Bandwidth Usage Rate(%)", val("memory_utilization_ratio", 100)))
        elif kind == "common":
            rows = [("Memory Usage Rate(%)", "0"),
                    ("HBM Usage Rate(%)", str(round(100 * (c.hbm_used_mb or 0) / hbm)) if hbm else "0"),
                    ("Aicore Usage Rate(%)", _num(c.aicore_pct, "{:.0f}")),
                    ("Aicore Freq(MHZ)", str(int(d.extra.get("aicore_max_mhz", 1800)))),
                    ("Aicore curFreq(MHZ)", val("clock_compute_hertz", 1e-6)),
                    ("Aicore Count", str(int(d.extra.get("aicore_count", 20)))),
                    ("Temperature(C)", _num(c.temp_c, "{:.0f}")), ("NPU Real-time Power(W)", _num(c.power_w))]
        elif kind == "memory":
            rows = [("DDR Capacity(MB)", _i(c.memory_total_mb or 0)), ("DDR Clock Speed(MHz)", "0"),
                    ("HBM Capacity(MB)", str(hbm)), ("HBM Clock Speed(MHz)", val("clock_memory_hertz", 1e-6)),
                    ("HBM Temperature(C)", val("temperature_memory_celsius")), ("HBM Manufacturer ID", "0x57")]
        elif kind == "ecc":
            rows = []
            for what, field in (("Single", "ecc_corrected_total"), ("Double", "ecc_uncorrected_total")):
                rows += [(f"HBM {what} Bit Error Count", val(field)),
                         (f"HBM {what} Bit Aggregate Total Err Cnt", val(field))]
            rows += [("HBM Single Bit Isolated Pages Count", "0"), ("HBM Double Bit Isolated Pages Count", "0")]
        elif kind == "board":
            return render_kv([[("NPU ID", str(card)), ("Product Name", str(d.extra.get("board_name", "IT21HMDC_Bin5"))),
                               ("Model", "NA"), ("Manufacturer", "Huawei"), ("Serial Number", d.serial),
                               ("Software Version", d.driver_version), ("Firmware Version", d.firmware_version),
                               ("Compatibility", "OK"), ("Board ID", "0x60"), ("PCIe Bus Info", _bus(c.bus_id)),
                               ("PCI Vendor ID", "0x19E5"), ("PCI Device ID", "0xD802"),
                               ("Chip Count", head[1][1])]
                              + ([("DDie ID", _die_id(d.uuid))] if layout == "new" else [])])
        elif kind == "board-chip":
            return render_kv([[("NPU ID", str(card)), ("Chip ID", str(c.chip_id)), ("Chip Type", "Ascend"),
                               ("Chip Name", c.name), ("Chip Version", "V1"), ("Board ID", "0x02"),
                               ("VDie ID", _die_id(d.uuid)), ("Chip Position ID", str(c.chip_id)),
                               ("PCIe Bus Info", _bus(c.bus_id)), ("Firmware Version", d.firmware_version)]])
        else:
            return None
        blocks.append(rows + [("Chip ID", str(c.chip_id))])
    return render_kv(blocks)


def render_topo(labels: Sequence[int], fabric: str = "hccs") -> str:
    """``npu-smi info -t topo`` in the documented matrix layout: ``HCCS`` between every two
    NPUs (``fabric`` hccs) or ``PHB`` (pcie), ``X`` on the diagonal, then the legend."""
    names = [f"NPU{n}" for n in labels]
    w = max([10] + [len(n) + 2 for n in names])
    word = "HCCS" if fabric == "hccs" else "PHB"
    lines = [" " * w + "".join(n.ljust(w) for n in names) + "CPU Affinity"]
    for a in names:
        lines.append(a.ljust(w) + "".join(("X" if a == b else word).ljust(w) for b in names) + "0-23")
    lines += ["", "Legend:", "", "  X    = Self", "  SYS  = Path traversing PCIe and NUMA nodes (SMP)",
              "  PHB  = Path traversing PCIe and the PCIe host bridge of a CPU",
              "  PIX  = Path traversing a single PCIe switch", "  PXB  = Path traversing several PCIe switches",
              "  HCCS = Connection traversing HCCS", "  NA   = Unknown relationship"]
    return "\n".join(lines) + "\n"


def _topo_labels(chips: Sequence[FakeChip], per_card: int) -> list[int]:
    """The NPU numbers of the matrix: the chip's logic id (what the collector's index is)."""
    return [fc.chip.logic_id if fc.chip.logic_id is not None else (fc.chip.npu_id if per_card == 1 else i)
            for i, fc in enumerate(chips)]


USAGE = "Usage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n"


def answer(scenario: Any, t: float, argv: Sequence[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``npu-smi ARGV`` for the scenario at ``t``."""
    chips, procs, layout = fake_chips(scenario, t)
    args = list(argv)
    if args[:1] != ["info"]:
        return 1, "", USAGE
    rest = args[1:]
    if not rest:
        drv = scenario.devices_of("ascend")[0].driver_version if scenario.devices_of("ascend") else "23.0.0"
        summary = NpuSummary(tool_version=drv, driver_version=drv, layout=layout,
                             chips=tuple(fc.chip for fc in chips), processes=tuple(procs))
        return 0, render_summary(summary, layout), ""
    if rest == ["-m"]:
        return 0, render_mapping([_replace(fc.chip, logic_id=i) for i, fc in enumerate(chips)]), ""
    if rest == ["-l"]:
        cards = sorted({fc.chip.npu_id for fc in chips})
        blocks = [[("Total Count", str(len(cards)))]]
        for npu in cards:
            blocks.append([("NPU ID", str(npu)),
                           ("Chip Count", str(len([f for f in chips if f.chip.npu_id == npu])))])
        return 0, render_kv(blocks), ""
    if rest == ["-t", "topo"]:
        cfg = scenario.vendor_settings("ascend")
        fabric = str(cfg.get("topology") or ("pcie" if layout == "310" else "hccs"))
        return 0, render_topo(_topo_labels(chips, max(1, int(cfg.get("chips_per_card", 1)))), fabric), ""
    opts = dict(zip(rest[::2], rest[1::2])) if len(rest) % 2 == 0 else {}
    kind, card, chip = opts.get("-t"), opts.get("-i"), opts.get("-c")
    if kind is None or card is None or not card.isdigit() or (chip is not None and not chip.isdigit()):
        return 1, "", USAGE
    if kind == "board" and chip is not None:
        kind = "board-chip"
    text = _detail(kind, int(card), None if chip is None else int(chip), chips, t, layout)
    if text is None:
        return 1, "Invalid card id.\nError parameter of -i\n" + USAGE, ""
    return 0, text, ""


def main(argv: Optional[Sequence[str]] = None) -> int:
    return fake_main("ascend", "npu-smi", answer, argv,
                     error_message="dcmi model initialized failed, because the device is used. ret is -8020")


def host_root(exe: str) -> str:
    """The fake host root beside the fake npu-smi (its CANN and driver version files)."""
    return os.path.join(os.path.dirname(exe), "host-root-ascend")


def install(scenario: Any, clock: Any, workdir: Optional[str]) -> tuple[str, Callable[[], dict[str, str]]]:
    """Write the fake npu-smi for ``scenario`` and the version files of its host root;
    returns (its path, the per-call environment)."""
    from hetero_exporter.collectors.ascend import versions
    exe, env = install_tool(scenario, clock, workdir, "npu-smi", __name__)
    devs = scenario.devices_of("ascend")
    drv = devs[0].driver_version if devs and devs[0].driver_version else "23.0.3"
    cfg = scenario.vendor_settings("ascend")
    raw = cfg.get("cann_version", drv)
    cann = None if raw is None or str(raw).strip().lower() == "none" else str(raw or drv)
    versions.write_fake(host_root(exe), cann, drv)
    return exe, env


if __name__ == "__main__":
    sys.exit(main())
