"""What the readers of nvidia-smi's human layouts share (default table, ``topo -m``, ``-L``,
``dmon``, ``pmon``): identities for GPUs a layout names only by index, readings with their
quality, ANSI clean-up and the snapshot they all return.

A GPU without a uuid gets the placeholder the rest of the NVIDIA code uses: ``nvidia-pci-<bus
id>`` when the layout shows its PCI address (as the ``-q``/CSV parsers do), else
``nvidia-unidentified-<index>`` (as the NVML collector names a GPU it cannot identify). Both are
stable for one node and one driver load, so links between GPUs of one ``topo -m`` point at
devices of the same snapshot.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

from hetero_exporter.model import CollectorStatus, DeviceSample, NodeSnapshot, Quality, Reading

VENDOR = "nvidia"
# ESC [ ... m (SGR: topo -m underlines its header) and the residue "[4m" a paste leaves when
# the ESC byte is lost
_ANSI = re.compile(r"\x1b\[[0-9;]{0,16}[A-Za-z]|\[[0-9;]{1,16}m")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def placeholder_uuid(index: int, pci_address: Optional[str] = None) -> str:
    return f"nvidia-pci-{pci_address}" if pci_address else f"nvidia-unidentified-{index}"


def reading(value: Optional[float], quality: Quality, *, error: bool = False) -> Reading:
    """``value`` in base units under ``quality``; None is ``unsupported`` (what nvidia-smi
    prints as ``N/A`` / ``-``), ``error`` a value present but unreadable."""
    if error:
        return Reading(None, quality.with_status("error"))
    if value is None:
        return Reading(None, quality.with_status("unsupported"))
    return Reading(value, quality)


def snapshot(devices: Iterable[DeviceSample], when: float = 0.0) -> NodeSnapshot:
    devs = tuple(devices)
    return NodeSnapshot(node="", time=when, devices=devs,
                        collectors=(CollectorStatus("nvidia_smi", True, vendor=VENDOR, devices=len(devs)),))
