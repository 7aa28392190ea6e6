"""Fake ``rocm-smi`` / ``hy-smi`` executables that print a scenario in the tools' real formats.

``FakeSmiCli`` writes a small ``/bin/sh`` program named after the tool into a work folder;
before each cycle ``prepare()`` renders the scenario at the current time into files beside it,
and the program prints them, so the real collector runs the real runner (subprocess, deadline,
process-group kill) and the real parser. Renderings follow the captures in
../shared/fixtures: ``--json`` as rocm-smi's formatJson builds it (every value a string; AMD
keys of ROCm 6, Hygon keys of DTK 24.04 such as "DCU use (%)" and "vram Total Memory (MiB)";
options no Hygon capture shows, e.g. --showbus, are spelled as rocm-smi spells them), the
Concise Info table, and the ``--showpidgpus`` text.

Scenario hooks (vendor ``amd`` for rocm-smi, ``hygon`` for hy-smi), settings ``{cli_mode: M}``:
``ok`` (default), ``hang`` (sleeps, never answers), ``garbage`` (prints binary noise),
``crash`` (exits 1 with a message on stderr), ``legacy`` (rejects options outside
rocm_smi.MINIMAL_ARGS with argparse's exit status 2, as an old tool would). Device values:
``temperature_edge_celsius`` (else 3 C under the core), ``pcie_replay_total``; ``extra``:
``device_id``, ``xgmi`` (the group is an xGMI hive).
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import tempfile
from typing import Any, Optional

from hetero_exporter.collectors.amd.rocm_smi.collector import MINIMAL_ARGS
from hetero_exporter.simulate.scenario import DeviceSpec, Scenario

MIB = 1 << 20
MODES = ("ok", "hang", "garbage", "crash", "legacy")
TOOL_VENDOR = {"rocm-smi": "amd", "hy-smi": "hygon"}

_SCRIPT = """#!/bin/sh
# Fake {tool} written by hetero-exporter's simulation (collectors/rocm_smi_fake.py).
dir={dir}
mode=$(cat "$dir/mode" 2>/dev/null)
case "$mode" in
  hang) sleep 3600; exit 0 ;;
  garbage) head -c 6000 /dev/urandom; exit 0 ;;
  crash) echo "ERROR: GPU[0]: Driver not initialized (amdgpu not found in modules)" >&2; exit 1 ;;
esac
json=""
for a in "$@"; do
  if [ "$mode" = legacy ]; then
    case " {allowed} " in *" $a "*) ;; *) echo "usage: {tool} [-h] ..." >&2
      echo "{tool}: error: unrecognized arguments: $a" >&2; exit 2 ;; esac
  fi
  case "$a" in
    --showpidgpus) cat "$dir/pidgpus.txt"; exit 0 ;;
    --json) json=1 ;;
  esac
done
if [ -n "$json" ]; then cat "$dir/out.json"; else cat "$dir/concise.txt"; fi
"""


def _bus(pci: str) -> str:
    """rocm-smi prints the bus id with an upper-case '0000:1E:00.0'."""
    return pci.upper()


def _f1(v: Optional[float]) -> str:
    return "N/A" if v is None else f"{v:.1f}"


def _edge(spec: DeviceSpec, t: float) -> Optional[float]:
    if "temperature_edge_celsius" in spec.values or "temperature_edge_celsius" in spec.unsupported:
        return spec.value("temperature_edge_celsius", t)
    core = spec.value("temperature_core_celsius", t)
    return None if core is None else core - 3.0


def render_card(spec: DeviceSpec, t: float, vendor: str) -> dict[str, str]:
    """One card's --json fields for the scenario device at time t."""
    junction = spec.value("temperature_core_celsius", t)
    mem_t = spec.value("temperature_memory_celsius", t)
    power = spec.value("power_watts", t)
    cap = spec.value("power_limit_watts", t)
    util = spec.value("utilization_ratio", t)
    mutil = spec.value("memory_utilization_ratio", t)
    total = spec.memory_total_bytes
    used = spec.value("memory_used_bytes", t)
    sclk = spec.value("clock_compute_hertz", t)
    mclk = spec.value("clock_memory_hertz", t)
    replay = spec.value("pcie_replay_total", t)
    unique = f"0x{int(spec.uuid.replace('-', '')[:16], 16):x}"
    if vendor == "hygon":
        card = {
            "Device ID": str(spec.extra.get("device_id", "0x55b7")),
            "Card Series": spec.product,
            "Card Vendor": "Chengdu Haiguang IC Design Co., Ltd.",
            "Serial Number": spec.serial,
            "Unique ID": unique.removeprefix("0x").zfill(16),
            "Average Graphics Package Power (W)": _f1(power),
            "Temperature (Sensor edge) (C)": _f1(_edge(spec, t)),
            "Temperature (Sensor junction) (C)": _f1(junction),
            "Temperature (Sensor mem) (C)": _f1(mem_t),
            "DCU use (%)": "N/A" if util is None else f"{100 * util:.1f}",
            "vram Total Memory (MiB)": str(int(total // MIB)),
            "vram Total Used Memory (MiB)": "N/A" if used is None else str(int(min(used, total) // MIB)),
        }
    else:
        card = {
            "Device Name": spec.product,
            "Device ID": str(spec.extra.get("device_id", "0x74a1")),
            "Device Rev": "0x00",
            "Unique ID": unique,
            "VBIOS version": spec.firmware_version or "N/A",
            "Temperature (Sensor edge) (C)": _f1(_edge(spec, t)),
            "Temperature (Sensor junction) (C)": _f1(junction),
            "Temperature (Sensor memory) (C)": _f1(mem_t),
            "Average Graphics Package Power (W)": _f1(power),
            "GPU use (%)": "N/A" if util is None else str(int(round(100 * util))),
            "GPU memory use (%)": "N/A" if mutil is None else str(int(round(100 * mutil))),
            "VRAM Total Memory (B)": str(int(total)),
            "VRAM Total Used Memory (B)": "N/A" if used is None else str(int(min(used, total))),
            "Card Series": spec.product,
            "Card Vendor": "Advanced Micro Devices, Inc. [AMD/ATI]",
        }
    # options both tools share, with rocm-smi's key names
    card.update({
        "Max Graphics Package Power (W)": _f1(cap),
        "sclk clock speed:": "N/A" if sclk is None else f"({int(round(sclk / 1e6))}Mhz)",
        "mclk clock speed:": "N/A" if mclk is None else f"({int(round(mclk / 1e6))}Mhz)",
        "PCIe Replay Count": "0" if replay is None else str(int(replay)),
        "Serial Number": spec.serial,
        "PCI Bus": _bus(spec.pci_address),
        "(Topology) Numa Node": str(spec.numa_node),
        "(Topology) Numa Affinity": str(spec.numa_node),
    })
    return card


def render_json(devices: list[DeviceSpec], t: float, vendor: str) -> str:
    doc: dict[str, Any] = {f"card{i}": render_card(d, t, vendor) for i, d in enumerate(devices)}
    system: dict[str, str] = {"Driver version": devices[0].driver_version if devices else "N/A"}
    for i, d in enumerate(devices):
        for p in d.processes:
            # rocm-smi --showpids: "name, GPU count, VRAM bytes, SDMA, CU occupancy"
            system[f"PID{p.pid}"] = f"{p.name}, 1, {int(p.memory.at(t))}, 0, 0"
    hive = [i for i, d in enumerate(devices) if d.extra.get("xgmi")]
    for a in range(len(devices)):
        for b in range(a + 1, len(devices)):
            linked = a in hive and b in hive
            system[f"(Topology) Link type between DRM devices {a} and {b}"] = "XGMI" if linked else "PCIE"
            system[f"(Topology) Hops between DRM devices {a} and {b}"] = "1" if linked else "2"
    doc["system"] = system
    return json.dumps(doc, indent=4) + "\n"


def render_pid_gpus(devices: list[DeviceSpec]) -> str:
    """``--showpidgpus`` text: each process on the card of its scenario device."""
    lines = ["=" * 24 + " GPUs Indexed by PID " + "=" * 25]
    for i, d in enumerate(devices):
        for p in d.processes:
            lines.append(f"PID {p.pid} is using 1 DRM device(s):")
            lines.append(f"{i} ")
    lines.append("=" * 70)
    return "\n".join(lines) + "\n"


def render_concise(devices: list[DeviceSpec], t: float, vendor: str) -> str:
    """The DTK-style table (hy-smi) or ROCm 4 table (rocm-smi), columns left-justified."""
    first = "DCU" if vendor == "hygon" else "GPU"
    header = [first, "Temp", "AvgPwr", "SCLK", "MCLK", "Fan", "Perf", "PwrCap", "VRAM%", f"{first}%"]
    rows = []
    for i, d in enumerate(devices):
        used, util = d.value("memory_used_bytes", t), d.value("utilization_ratio", t)
        sclk, mclk = d.value("clock_compute_hertz", t), d.value("clock_memory_hertz", t)
        edge, power, cap = _edge(d, t), d.value("power_watts", t), d.value("power_limit_watts", t)
        rows.append([str(i), "N/A" if edge is None else f"{edge:.1f}c", "N/A" if power is None else f"{power:.1f}W",
                     "N/A" if sclk is None else f"{int(sclk / 1e6)}Mhz", "N/A" if mclk is None else f"{int(mclk / 1e6)}Mhz",
                     "0.0%", "auto", "N/A" if cap is None else f"{cap:.1f}W",
                     "N/A" if used is None else f"{100 * used / d.memory_total_bytes:3.0f}%",
                     "N/A" if util is None else f"{100 * util:3.0f}%"])
    widths = [max(len(h) + 2, *(len(r[c]) + 2 for r in rows)) for c, h in enumerate(header)]
    out = ["=" * 20 + " ROCm System Management Interface " + "=" * 20, "=" * 30 + " Concise Info " + "=" * 30,
           "".join(h.ljust(w) for h, w in zip(header, widths))]
    out += ["".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    out += ["=" * 74, "=" * 27 + " End of ROCm SMI Log " + "=" * 26]
    return "\n".join(out) + "\n"


class FakeSmiCli:
    """The fake executable for one tool; ``path`` is what the collector runs."""

    def __init__(self, scenario: Scenario, clock: Any, workdir: Optional[str], tool: str):
        if tool not in TOOL_VENDOR:
            raise ValueError(f"no fake for {tool!r}")
        self._scenario = scenario
        self._clock = clock
        self._tool = tool
        self._vendor = TOOL_VENDOR[tool]
        base = workdir or tempfile.mkdtemp(prefix="hetero-exporter-smi-")
        self.dir = os.path.join(base, f"fake-{tool}")
        os.makedirs(self.dir, exist_ok=True)
        self.path = os.path.join(self.dir, tool)
        script = _SCRIPT.format(tool=tool, dir=shlex.quote(self.dir), allowed=" ".join(MINIMAL_ARGS))
        with open(self.path, "w", encoding="utf-8") as f:
            f.write(script)
        os.chmod(self.path, os.stat(self.path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self.set_mode(str(scenario.vendor_settings(self._vendor).get("cli_mode", "ok")))
        self.prepare()

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"cli_mode {mode!r} is not one of {MODES}")
        self._write("mode", mode + "\n")

    def _write(self, name: str, text: str) -> None:
        tmp = os.path.join(self.dir, f".{name}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, os.path.join(self.dir, name))  # a running fake never reads half a file

    def prepare(self) -> None:
        """Render the scenario at the current time for the next run of the executable."""
        t = self._clock.t()
        devices = self._scenario.devices_of(self._vendor)
        self._write("out.json", render_json(devices, t, self._vendor))
        self._write("pidgpus.txt", render_pid_gpus(devices))
        self._write("concise.txt", render_concise(devices, t, self._vendor))
