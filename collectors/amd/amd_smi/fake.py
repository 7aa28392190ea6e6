"""A fake ``amd-smi`` that prints a scenario's AMD devices as ``amd-smi ... --json``
(hetero_exporter.sdk.fake_tool).

Answers ``metric --json``, ``static --json``, ``process --json`` and ``list --json`` in the
newer form (a list of ``{"gpu": N, ...}`` objects, quantities as ``{"value", "unit"}``), with
``asic_serial`` the device's simulated unique id (collectors/amd/identity.py), the value the
amdsmi fake prints, so both collectors give a simulated GPU one uuid. Failure modes: the
harness's (settings ``{amd: {mode: hang|slow|garbage|truncated|exit}}``, or a fault of that
kind; ``command: detail`` limits it to everything but ``metric``); faults ``kind: lost`` leave
a device out between ``at`` and ``until``.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Optional, Sequence

from hetero_exporter.model import fields as F
from hetero_exporter.collectors.amd.identity import simulated_unique_id
from hetero_exporter.sdk.fake_tool import fake_main, install_tool

VENDOR = "amd"
TOOL = "amd-smi"
MIB = 1 << 20
ERROR = "ERROR:root:Unable to detect any GPU devices, check amdgpu version and module status (sudo modprobe amdgpu)"


def _q(v: Optional[float], unit: str, scale: float = 1.0, digits: int = 0) -> Any:
    if v is None:
        return "N/A"
    x = round(v / scale, digits)
    return {"value": int(x) if digits == 0 else x, "unit": unit}


def metric(d: Any, t: float) -> dict:
    util, mutil = d.value(F.UTILIZATION, t), d.value(F.MEMORY_UTILIZATION, t)
    used = d.value(F.MEMORY_USED, t)
    total = d.memory_total_bytes
    return {
        "usage": {"gfx_activity": _q(None if util is None else util * 100, "%"),
                  "umc_activity": _q(None if mutil is None else mutil * 100, "%"), "mm_activity": "N/A"},
        "power": {"socket_power": _q(d.value(F.POWER, t), "W"), "gfx_voltage": "N/A",
                  "power_management": "ENABLED", "throttle_status": "UNTHROTTLED"},
        "clock": {"gfx_0": {"clk": _q(d.value(F.CLOCK_COMPUTE, t), "MHz", 1e6)},
                  "mem_0": {"clk": _q(d.value(F.CLOCK_MEMORY, t), "MHz", 1e6)}},
        "temperature": {"edge": "N/A", "hotspot": _q(d.value(F.TEMP_CORE, t), "\u00b0C"),
                        "mem": _q(d.value(F.TEMP_MEMORY, t), "\u00b0C")},
        "pcie": {"width": 16, "speed": {"value": 32, "unit": "GT/s"},
                 "replay_count": int(d.value("pcie_replay_total", t) or 0)},
        "ecc": {"total_correctable_count": int(d.value(F.ECC_CORRECTED, t) or 0),
                "total_uncorrectable_count": int(d.value(F.ECC_UNCORRECTED, t) or 0),
                "total_deferred_count": 0},
        "mem_usage": {"total_vram": _q(total, "MB", MIB), "used_vram": _q(used, "MB", MIB),
                      "free_vram": "N/A" if used is None else _q(max(0.0, total - used), "MB", MIB)},
    }


def static(d: Any, t: float) -> dict:
    cap = d.value(F.POWER_LIMIT, t)
    return {
        "asic": {"market_name": d.product, "vendor_id": "0x1002", "device_id": str(d.extra.get("device_id", "0x74a1")),
                 "asic_serial": f"0x{simulated_unique_id(d):016X}", "oam_id": d.index},
        "bus": {"bdf": d.pci_address.lower(), "max_pcie_width": 16, "max_pcie_speed": {"value": 32, "unit": "GT/s"}},
        "vbios": {"name": "N/A", "part_number": d.firmware_version or "N/A", "version": d.firmware_version or "N/A"},
        "limit": {"socket_power": _q(cap, "W")},
        "driver": {"name": "amdgpu", "version": d.driver_version or "N/A"},
        "board": {"product_serial": d.serial, "product_name": d.product},
        "numa": {"node": d.numa_node, "affinity": d.numa_node},
        "vram": {"type": "HBM", "size": _q(d.memory_total_bytes, "MB", MIB)},
    }


def process(d: Any, t: float) -> dict:
    procs: list[dict[str, Any]] = [{"process_info": {"name": p.name, "pid": p.pid,
                               "memory_usage": {"vram_mem": {"value": int(p.memory.at(t)), "unit": "B"}}}}
             for p in d.processes]
    return {"process_list": procs or [{"process_info": "No running processes detected"}]}


RENDER: dict[str, Callable[[Any, float], dict]] = {
    "metric": metric, "static": static, "process": process,
    "list": lambda d, t: {"bdf": d.pci_address.lower(), "uuid": d.uuid, "kfd_id": 1000 + d.index,
                          "node_id": d.index + 1, "partition_id": 0},
}


def render(devices: Sequence[Any], t: float, command: str) -> str:
    """``amd-smi COMMAND --json`` of the scenario devices at t."""
    return json.dumps([{"gpu": i, **RENDER[command](d, t)} for i, d in enumerate(devices)], indent=4) + "\n"


def answer(scenario: Any, t: float, argv: Sequence[str]) -> tuple[int, str, str]:
    args = list(argv)
    if not args or args[0] not in RENDER or "--json" not in args:
        return 2, "", f"usage: {TOOL} [{'|'.join(RENDER)}] --json (fake)\n"
    gone = {f.index for f in scenario.faults_of(VENDOR) if f.kind in ("lost", "missing") and f.active(t)}
    devices = [d for d in scenario.devices_of(VENDOR) if d.index not in gone]
    if not devices:
        return 255, "", ERROR + "\n"
    return 0, render(devices, t, args[0]), ""


def main(argv: Optional[Sequence[str]] = None) -> int:
    return fake_main(VENDOR, TOOL, answer, argv, detail=lambda a: bool(a) and a[0] != "metric",
                     error_message=ERROR)


def install(scenario: Any, clock: Any, workdir: Optional[str]) -> tuple[str, Callable[[], dict[str, str]]]:
    """Write the fake amd-smi; returns (its path, the per-call environment)."""
    return install_tool(scenario, clock, workdir, TOOL, __name__)


if __name__ == "__main__":
    sys.exit(main())
