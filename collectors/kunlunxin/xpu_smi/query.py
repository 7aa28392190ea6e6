"""Pure parsing of ``xpu-smi -q [--id=BUS]`` (xpu-smi 5.x); only ParseError escapes.

Layout (../shared/fixtures/xpu-smi/xpu-smi-q-id_*): a ``==XPUSMI LOG==`` banner, node keys
(``Driver Version``, ``XPU-RT Version``, ``Attached XPUs``), then one block per device opened
by ``XPU 00000000:01:00.0`` with indented ``key : value`` lines and sections (``PCI``,
``Memory Usage``, ``L3 Usage``, ``Utilization``, ``ECC Errors / Volatile``, ``Temperature``,
``Power Readings``, ``Clocks``, ``Firmware Version``), read by key name and section with the
shared block reader (sdk.blocks), never by position. ``Attached XPUs`` counts the node's
devices; ``--id`` prints only the one asked for, so the devices are the blocks printed.
Values in base units (bytes from MiB, W, C, Hz, ratio); N/A is None.
"""

from __future__ import annotations

import re
from typing import Optional

from hetero_exporter.sdk import blocks, pciaddr, tables, values
from hetero_exporter.sdk.contract import ParseError

from .output import CELLS, TOOL, XpuDevice, XpuSmi, cell_text

_XPU = re.compile(r"^XPU[ \t]+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])[ \t]*$")
_BANNER = re.compile(r"^[ \t]*=+XPUSMI LOG=*[ \t]*$", re.M)  # each blank run has one way to match


def _get(paths: dict, *suffixes: str) -> Optional[str]:
    """The value whose ``section/.../key`` path ends with one of ``suffixes`` (first printed)."""
    for path, v in paths.items():
        if any(path == s or path.endswith("/" + s) for s in suffixes):
            return v
    return None


def _device(b: blocks.Block, n: int) -> XpuDevice:
    p = b.paths()
    line = b.line

    def qty(unit: str, what: str, *keys: str) -> Optional[float]:
        v = _get(p, *keys)
        return None if v is None else CELLS.quantity(v, unit, what, line)

    m = _XPU.match(b.header or "")
    bus = pciaddr.normalize(_get(p, "pci/bus id") or (m.group(1) if m else ""))
    if bus is None:
        raise ParseError(TOOL, "an XPU block without a PCI bus id", line)
    minor = cell_text(_get(p, "minor number"))
    return XpuDevice(
        index=CELLS.index(minor, "Minor Number", line) if minor is not None else n, bus_id=bus,
        model=cell_text(_get(p, "product name")) or "", serial=cell_text(_get(p, "serial number")), inode=None,
        state=None, utilization_ratio=qty("%", "Utilization Xpu", "utilization/xpu"),
        l3_used_bytes=qty("MiB", "L3 Used", "l3 usage/used"), l3_total_bytes=qty("MiB", "L3 Total", "l3 usage/total"),
        memory_used_bytes=qty("MiB", "Memory Used", "memory usage/used"),
        memory_total_bytes=qty("MiB", "Memory Total", "memory usage/total"),
        power_watts=qty("W", "Power Draw", "power readings/power draw"),
        power_limit_watts=qty("W", "Enforced Power Limit", "power readings/enforced power limit"),
        temperature_celsius=qty("C", "XPU Current Temp", "temperature/xpu current temp"),
        clock_hertz=qty("MHz", "Clocks Cluster", "clocks/cluster"),
        firmware=cell_text(_get(p, "firmware version/all version")),
        cpld=cell_text(_get(p, "firmware version/cpld version")),
        ecc_uncorrected=qty("", "Volatile DRAM Uncorrectable", "ecc errors/volatile/dram uncorrectable"),
        uuid=cell_text(_get(p, "xpu uuid")), line=line)


def parse_query(text: str) -> XpuSmi:
    """The node versions and the devices of one ``xpu-smi -q`` output."""
    body = _BANNER.sub("", text)  # the banner is no key line; the line count stays
    found = blocks.read_blocks(body, TOOL, blank_separates=False, block_start=_XPU)
    node = next((b for b in found if b.header is None), None)
    head = node.paths() if node is not None else {}
    devices: list[XpuDevice] = []
    known: set[int] = set()
    for b in found:
        if b.header is None:
            continue
        d = _device(b, len(devices))
        if d.index in known:
            raise ParseError(TOOL, f"XPU {d.index} listed twice", b.line)
        known.add(d.index)
        devices.append(d)
        tables.check_devices(len(devices), TOOL, b.line)
    if not devices:
        raise ParseError(TOOL, "no 'XPU <bus id>' block")
    rt = head.get("xpu-rt version")
    # "Processes : None" on every device: none run; a listing is not read (no capture shows
    # one), so then the processes are unknown rather than none
    none_run = all((b.get("processes") or "").strip().lower() == "none" for b in found if b.header is not None)
    return XpuSmi(runtime_version=None if rt is None or values.is_na(rt) else rt,
                  driver_version=cell_text(head.get("driver version")), devices=tuple(devices),
                  process_section=none_run, sections=("XPU",))
