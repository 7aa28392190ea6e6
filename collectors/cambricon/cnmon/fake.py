"""A fake ``cnmon`` executable that prints a scenario's Cambricon devices in cnmon's layouts.

Same mechanism as the fake npu-smi (collectors/npu_smi_fake.py, whose launcher, failure modes
and entry point it shares): a launcher named ``cnmon`` in the collector's workdir runs this
module with the agent's interpreter; the scenario time comes per call in ``HETERO_SIM_T``.

``cnmon`` prints the default table (layout ``v5``: Bus-Id, SR-IOV / Compute-Mode, driver in
the title; ``v4``: Inited / Driver and vMemory-Usage columns), ``cnmon info -c N`` the
per-card sections in the documented structure (no real capture of it exists; see
collectors/cnmon_parse.py).

Scenario hooks (vendor ``cambricon``):
- ``settings: {cambricon: {layout: v5|v4, instance_column: VF|MI, mode: hung|slow|garbage|
  truncated|exit}}``;
- device ``extra``: ``compute_mode`` (Default, Exclusive), ``fan_ratio``,
  ``vmemory_total_mib``, ``vmemory_used_mib``, ``temperature_board_celsius``;
- values ``ecc_corrected_total`` / ``ecc_uncorrected_total``: ECC on (the table's Ecc-Error
  shows their sum; cnmon info splits them); without them the column says N/A (ECC off);
- faults ``kind: not-initialized`` (Inited Off, v4 layout), ``missing`` (card left out),
  ``hung|slow|garbage|truncated|exit`` (the whole tool; ``command: summary|detail``).
"""

from __future__ import annotations

import time
from typing import Any, Optional, Sequence

from hetero_exporter.collectors.cambricon.cnmon.parse import MIB, CnmonTable, MluCard, MluProcess
from hetero_exporter.sdk.fake_tool import fake_main, install_tool

LAYOUTS = ("v5", "v4")
_W = (31, 22, 23)
_INNER = sum(_W) + 2


def _spread(left: str, right: str, width: int) -> str:
    """``left`` and ``right`` at the two ends of a cell of ``width`` (one space at least)."""
    return left + " " * max(1, width - len(left) - len(right)) + right


def _na(v: Optional[float], fmt: str = "{:.0f}") -> str:
    return "N/A" if v is None else fmt.format(v)


def _pair(u: Optional[float], t: Optional[float], unit: str, fmt: str = "{:.0f}") -> str:
    if u is None and t is None:
        return "N/A"
    return f"{_na(u, fmt)} {unit}/ {_na(t, fmt)} {unit}"


def _line(cells: Sequence[str]) -> str:
    return "|" + "|".join(c.ljust(w) for c, w in zip(cells, _W)) + "|"


def render_table(t: CnmonTable, layout: str = "v5", timestamp: Optional[str] = None) -> str:
    """The ``cnmon`` default table of ``t`` in one of LAYOUTS."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown cnmon layout {layout!r}; one of {LAYOUTS}")
    border = "+" + "+".join("-" * w for w in _W) + "+"
    title = f" CNMON v{t.version}"
    if layout == "v5" and t.driver_version:
        title = _spread(title, f"Driver v{t.driver_version} ", _INNER)
    out = ([timestamp] if timestamp else []) + ["+" + "-" * _INNER + "+", "|" + title.ljust(_INNER) + "|", border]
    if layout == "v5":
        out += [_line([" Card  VF  Name       Firmware ", "Bus-Id ".rjust(22), " Util        Ecc-Error "]),
                _line([" Fan   Temp      Pwr:Usage/Cap ", "Memory-Usage ".rjust(22), " SR-IOV   Compute-Mode "])]
    else:
        out += [_line([" Card  VF  Name       Firmware ", _spread(" Inited", "Driver ", 22), " Util        Ecc-Error "]),
                _line([" Fan   Temp      Pwr:Usage/Cap ", "Memory-Usage ".rjust(22), "vMemory-Usage ".rjust(23)])]
    out.append("|" + "+".join("=" * w for w in _W) + "|")
    for c in t.cards:
        fan = _na(c.fan_pct, "{:.0f}%")
        a1 = _spread(f" {c.card:<6}{c.vf:<4}{c.name}", f"{c.firmware or 'N/A'} ", _W[0])
        b1 = _spread(f" {fan:>3}   {_na(c.temp_c, '{:.0f}C')}",
                     f"{_pair(c.power_w, c.power_cap_w, 'W', '{:g}')} ", _W[0])
        mem = f"{_pair(c.memory_used_mib, c.memory_total_mib, 'MiB')} ".rjust(_W[1])
        util = _na(c.util_pct, "{:.0f}%")
        if layout == "v5":
            a2 = f"{c.bus_id.upper() if c.bus_id else 'N/A'} ".rjust(_W[1])
            a3 = _spread(f" {util}", f"{_na(c.ecc_errors)} ", _W[2])
            b3 = _spread(f" {c.sriov or 'N/A'}", f"{c.compute_mode or 'N/A'} ", _W[2])
        else:
            a2 = _spread(f" {c.inited or 'N/A'}", f"{c.driver or 'N/A'} ", _W[1])
            a3 = f" {util:<12}{_na(c.ecc_errors):<10}"
            b3 = f"{_pair(c.vmemory_used_mib, c.vmemory_total_mib, 'MiB')} ".rjust(_W[2]).replace(" MiB/ ", " MiB/")
        out += [_line([a1, a2, a3]), _line([b1, mem, b3]), border]
    out += ["", "+" + "-" * _INNER + "+", "|" + " Processes:".ljust(_INNER) + "|",
            "|" + f"  Card  {t.instance_column}  PID     Command Line".ljust(_INNER - 18) + "MLU Memory Usage |",
            "|" + "=" * _INNER + "|"]
    if not t.processes:
        out.append("|" + "  No running processes found".ljust(_INNER) + "|")
    for p in t.processes:
        out.append("|" + _spread(f"  {p.card:<6}{p.instance:<4}{p.pid:<8}{p.command}",
                                 f"{_na(p.memory_mib)} MiB ", _INNER) + "|")
    out.append("+" + "-" * _INNER + "+")
    return "\n".join(out) + "\n"


def render_info(cards: Sequence[tuple[MluCard, dict]]) -> str:
    """``cnmon info``: per card, the documented sections (see collectors/cnmon_parse.py; no real
    capture). ``extra`` per card: serial, uuid, driver, ecc_corrected, ecc_uncorrected,
    temp_board."""
    def kv(key: str, value: Any, indent: int = 0) -> str:
        return " " * indent + f"{key:<{31 - indent}}: {value}"

    out = []
    for c, x in cards:
        out += [f"Card {c.card}", kv("Product Name", c.name), kv("Serial Number", x.get("serial", "N/A")),
                kv("UUID", x.get("uuid", "N/A")), kv("Firmware", c.firmware or "N/A"),
                kv("Driver", x.get("driver", "N/A")), "PCI",
                kv("Bus Id", c.bus_id.upper() if c.bus_id else "N/A", 4),
                kv("Physical Memory Usage", ""),
                kv("Total", f"{_na(c.memory_total_mib)} MiB", 4), kv("Used", f"{_na(c.memory_used_mib)} MiB", 4),
                kv("Free", f"{_na(None if c.memory_total_mib is None or c.memory_used_mib is None else c.memory_total_mib - c.memory_used_mib)} MiB", 4),
                kv("Utilization", ""), kv("MLU Average", f"{_na(c.util_pct)} %", 4),
                kv("Temperature", ""), kv("Board", f"{_na(x.get('temp_board'))} C", 4),
                kv("Chip", f"{_na(c.temp_c)} C", 4),
                kv("Power", ""), kv("Usage", f"{_na(c.power_w, '{:g}')} W", 4),
                kv("Cap", f"{_na(c.power_cap_w, '{:g}')} W", 4),
                kv("ECC", ""), kv("One Bit Error", _na(x.get("ecc_corrected")), 4),
                kv("Multi Bit Error", _na(x.get("ecc_uncorrected")), 4), ""]
    return "\n".join(out)


# --------------------------------------------------------------------------- scenario -> cnmon


def fake_table(scenario: Any, t: float) -> tuple[CnmonTable, list[tuple[MluCard, dict]], str]:
    """The scenario's Cambricon devices at ``t``: the table, per-card info extras, layout."""
    cfg = scenario.vendor_settings("cambricon")
    layout = str(cfg.get("layout", "v5"))
    cards, infos, procs = [], [], []
    devs = scenario.devices_of("cambricon")
    for pos, d in enumerate(devs):
        faults = [f for f in scenario.faults_of("cambricon", d.index) if f.active(t)]
        if any(f.kind == "missing" for f in faults):
            continue
        corr, unc = d.value("ecc_corrected_total", t), d.value("ecc_uncorrected_total", t)
        ecc = None if corr is None and unc is None else int((corr or 0) + (unc or 0))
        mt, mu = d.value("memory_total_bytes", t), d.value("memory_used_bytes", t)
        util, temp = d.value("utilization_ratio", t), d.value("temperature_core_celsius", t)
        pw, cap = d.value("power_watts", t), d.value("power_limit_watts", t)
        drv = d.driver_version.lstrip("v")
        c = MluCard(card=pos, name=d.product, vf="/", firmware=d.firmware_version or None,
                    util_pct=None if util is None else float(round(100 * util)), ecc_errors=ecc,
                    fan_pct=float(round(100 * float(d.extra.get("fan_ratio", 0)))),
                    temp_c=None if temp is None else float(round(temp)),
                    power_w=None if pw is None else float(round(pw)), power_cap_w=None if cap is None else float(round(cap)),
                    memory_used_mib=None if mu is None else int(round(mu / MIB)),
                    memory_total_mib=None if mt is None else int(round(mt / MIB)))
        if layout == "v5":
            c = _replace(c, bus_id=d.pci_address,
                         compute_mode=str(d.extra.get("compute_mode", "Default")))
        else:
            off = any(f.kind == "not-initialized" for f in faults)
            c = _replace(c, inited="Off" if off else "On", driver=f"v{drv}",
                         vmemory_used_mib=int(d.extra.get("vmemory_used_mib", 10240)),
                         vmemory_total_mib=int(d.extra.get("vmemory_total_mib", 1048576)))
        cards.append(c)
        tb = d.extra.get("temperature_board_celsius")
        infos.append((c, {"serial": d.serial, "uuid": f"MLU-{d.uuid}", "driver": f"v{drv}",
                          "ecc_corrected": corr, "ecc_uncorrected": unc,
                          "temp_board": None if tb is None else float(tb)}))
        for ps in d.processes:
            procs.append(MluProcess(card=pos, instance="/", pid=ps.pid, command=ps.name,
                                    memory_mib=int(round(ps.memory.at(t) / MIB))))
    version = devs[0].driver_version.lstrip("v") if devs else "5.10.13"
    table = CnmonTable(version=version, driver_version=version if layout == "v5" else None,
                       cards=tuple(cards), processes=tuple(procs),
                       instance_column=str(cfg.get("instance_column", "VF")))
    return table, infos, layout


def _replace(c: MluCard, **kw: Any) -> MluCard:
    import dataclasses
    return dataclasses.replace(c, **kw)


def render_topo(cards: Sequence[int], fabric: str = "mlulink") -> str:
    """``cnmon topo`` in the matrix layout parse_topo reads (no real capture): ``MLULINK``
    between every two cards (``fabric`` mlulink, an MLU370-X8 pair's MLU-Link bridge) or
    ``PHB`` (pcie)."""
    names = [f"MLU{n}" for n in cards]
    word = "MLULINK" if fabric == "mlulink" else "PHB"
    lines = [" " * 10 + "".join(n.ljust(10) for n in names) + "CPU Affinity"]
    for a in names:
        lines.append(a.ljust(10) + "".join(("X" if a == b else word).ljust(10) for b in names) + "0-23")
    lines += ["", "Legend:", "  X       = Self", "  MLULINK = Connection traversing MLU-Link",
              "  PHB     = Connection traversing PCIe and a PCIe host bridge"]
    return "\n".join(lines) + "\n"


USAGE = "Usage: cnmon [info|top|set|...] [-c card] ...\n"


def answer(scenario: Any, t: float, argv: Sequence[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``cnmon ARGV`` for the scenario at ``t``."""
    table, infos, layout = fake_table(scenario, t)
    args = list(argv)
    if not args:
        stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(1764400000 + t))
        return 0, render_table(table, layout, stamp), ""
    if args == ["topo"]:
        fabric = str(scenario.vendor_settings("cambricon").get("topology", "mlulink"))
        return 0, render_topo([c.card for c in table.cards], fabric), ""
    if args[0] == "info":
        opts = dict(zip(args[1::2], args[2::2]))
        if "-c" in opts:
            if not opts["-c"].isdigit():
                return 1, "", USAGE
            mine = [x for x in infos if x[0].card == int(opts["-c"])]
            if not mine:
                return 1, "", f"Card {opts['-c']} is not found.\n"
            return 0, render_info(mine), ""
        return 0, render_info(infos), ""
    return 1, "", USAGE


def main(argv: Optional[Sequence[str]] = None) -> int:
    return fake_main("cambricon", "cnmon", answer, argv, detail=lambda a: bool(a),
                     error_message="Failed to initialize CNDev: the Cambricon driver is not loaded")


def host_root(exe: str) -> str:
    """The fake host root beside the fake cnmon (its Neuware version file)."""
    import os
    return os.path.join(os.path.dirname(exe), "host-root-cambricon")


def install(scenario: Any, clock: Any, workdir: Optional[str]):
    """Write the fake cnmon for ``scenario`` and the Neuware version file of its host root
    (``settings: {cambricon: {neuware_version: V}}``, default 1.15.0); returns (its path,
    the per-call environment)."""
    from hetero_exporter.collectors.cambricon import versions
    exe, env = install_tool(scenario, clock, workdir, "cnmon", __name__)
    versions.write_fake(host_root(exe), str(scenario.vendor_settings("cambricon").get("neuware_version", "1.15.0")))
    return exe, env


if __name__ == "__main__":
    import sys
    sys.exit(main())
