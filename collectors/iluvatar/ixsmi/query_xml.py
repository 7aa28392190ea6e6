"""Pure parsing of ``ixsmi -q -x`` (an XML document in nvidia-smi's ``-q -x`` shape, root
``<ixsmi_log>``); only ParseError escapes.

Layout (../shared/fixtures/ixsmi/ixsmi-q-x_*): ``driver_version``, ``cuda_version`` at the
top, then one ``<gpu id="BUS">`` per chip with ``product_name``, ``serial``, ``uuid``,
``minor_number``, ``pci/pci_bus_id``, ``memory_usage/{total,used}`` (``32768 MiB``),
``utilization/{gpu_util,memory_util}`` (``0 %``), ``ecc_errors/double_bit``,
``temperature/gpu_temp`` (``44 C``), ``power_readings/{gpu_power_draw,
current_gpu_power_limit}`` (``37 W``), ``clocks/{sm_clock,mem_clock}`` (``MHz``),
``compute_mode``, ``performance_state`` and ``processes/process_info`` (``pid``,
``process_name``, ``used_memory``). Elements are found by name; a missing one or ``N/A`` is
None. The document prints no IX-ML version. Entity declarations are refused (no ixsmi output
has them; they could expand without bound).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Optional

from hetero_exporter.sdk import tables, values
from hetero_exporter.sdk import xmldoc
from hetero_exporter.sdk.contract import ParseError

from .output import TOOL, IxGpu, IxProcess, IxsmiOutput

CELLS = values.Cells(TOOL)


def _document(text: str) -> ET.Element:
    return xmldoc.document(TOOL, text, "ixsmi_log")


def _t(el: ET.Element, path: str) -> Optional[str]:
    found = el.find(path)
    return None if found is None or found.text is None else found.text.strip()


def _q(el: ET.Element, path: str, unit: str) -> Optional[float]:
    v = _t(el, path)
    return None if v is None else CELLS.quantity(v, unit, path)


def parse_xml(text: str) -> IxsmiOutput:
    """The chips and processes of one ``ixsmi -q -x`` document."""
    root = _document(text)
    gpus: list[IxGpu] = []
    procs: list[IxProcess] = []
    seen: set[int] = set()
    for n, g in enumerate(root.findall("gpu")):
        minor = _t(g, "minor_number")
        index = CELLS.index(minor, "minor_number") if values.present(minor) else n
        if index in seen:
            raise ParseError(TOOL, f"GPU {index} listed twice")
        seen.add(index)
        bus = _t(g, "pci/pci_bus_id") or g.get("id")
        gpus.append(IxGpu(
            index=index, name=values.present(_t(g, "product_name")) or "", bus_id=CELLS.pci(bus, "pci_bus_id"),
            uuid=values.present(_t(g, "uuid")), serial=values.present(_t(g, "serial")),
            fan_ratio=_q(g, "fan_speed", "%"), temperature_celsius=_q(g, "temperature/gpu_temp", "C"),
            perf_state=values.present(_t(g, "performance_state")),
            power_watts=_q(g, "power_readings/gpu_power_draw", "W"),
            power_limit_watts=_q(g, "power_readings/current_gpu_power_limit", "W"),
            memory_used_bytes=_q(g, "memory_usage/used", "MiB"), memory_total_bytes=_q(g, "memory_usage/total", "MiB"),
            utilization_ratio=_q(g, "utilization/gpu_util", "%"),
            memory_utilization_ratio=_q(g, "utilization/memory_util", "%"),
            clock_sm_hertz=_q(g, "clocks/sm_clock", "MHz"), clock_memory_hertz=_q(g, "clocks/mem_clock", "MHz"),
            compute_mode=values.present(_t(g, "compute_mode")), ecc_uncorrected=_q(g, "ecc_errors/double_bit", "")))
        tables.check_devices(len(gpus), TOOL)
        for p in g.findall("processes/process_info"):
            pid = _t(p, "pid") or ""
            if not re.fullmatch(r"\d{1,8}", pid):  # Linux pids reach 4194304 (7 digits)
                raise ParseError(TOOL, f"process pid: expected a number, got {pid[:20]!r}")
            procs.append(IxProcess(gpu=index, pid=int(pid),
                                   name=values.present(_t(p, "process_name")) or "",
                                   memory_bytes=_q(p, "used_memory", "MiB")))
    if not gpus:
        raise ParseError(TOOL, "no <gpu> element")
    return IxsmiOutput(layout="xml", gpus=tuple(gpus), processes=tuple(procs),
                       driver_version=values.present(_t(root, "driver_version")), cuda_version=values.present(_t(root, "cuda_version")),
                       timestamp=_t(root, "timestamp"),
                       process_section=all(g.find("processes") is not None for g in root.findall("gpu")))
