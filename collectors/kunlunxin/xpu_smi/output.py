"""What the xpu-smi readers give (parse.py: the XRE 4.x sections; box.py: the 5.x box;
query.py: ``xpu-smi -q``), apart from all three so that none imports another; and the cell
readers they share."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Optional

from hetero_exporter.sdk import values

TOOL = "xpu-smi"  # the ``parse`` name (and the fixtures folder); the XRE binary is xpu_smi
MIB = 1 << 20
CELLS = values.Cells(TOOL)
_OK_STATES = {"n", "normal", "r", "running", "ok"}


def cell_text(cell: Optional[str]) -> Optional[str]:
    """A text cell stripped; None for NA and for ``...`` (xpu-smi's cut cell)."""
    got = values.present(cell)
    return None if got == "..." else got


@dataclass(frozen=True)
class XpuDevice:
    """One DEVICES row. Bytes for memory / L3 (printed in MB), ratio for UseRate (%), W, C, Hz;
    None where the tool prints N/A or the version has no such column."""

    index: int  # DevID (the /dev/xpuN number)
    bus_id: Optional[str]
    model: str
    serial: Optional[str]
    inode: Optional[str]
    state: Optional[str]  # State column as printed ("N"); None where the layout has none
    utilization_ratio: Optional[float]
    l3_used_bytes: Optional[float]
    l3_total_bytes: Optional[float]
    memory_used_bytes: Optional[float]
    memory_total_bytes: Optional[float]
    power_watts: Optional[float] = None
    temperature_celsius: Optional[float] = None
    clock_hertz: Optional[float] = None
    firmware: Optional[str] = None
    cpld: Optional[str] = None
    line: int = 0
    # the xpu-smi 5.x box (box.py) and ``-q`` (query.py) outputs also print these
    power_limit_watts: Optional[float] = None  # Pwr:Usage/Cap cap, -q Enforced Power Limit (W)
    ecc_uncorrected: Optional[float] = None  # Volatile Uncorr. ECC, -q Volatile DRAM Uncorrectable
    uuid: Optional[str] = None  # -q XPU UUID (printed with a GPU- prefix)

    @property
    def state_ok(self) -> Optional[bool]:
        return None if self.state is None else self.state.strip().lower() in _OK_STATES


@dataclass(frozen=True)
class VideoEngine:
    """One VIDEO cell (``0 %, 0 fps, 800 MHz``): busy ratio, frames per second, clock (Hz)."""

    utilization_ratio: Optional[float]
    fps: Optional[float]
    clock_hertz: Optional[float]


@dataclass(frozen=True)
class XpuProcess:
    index: int  # DevID
    pid: int
    streams: Optional[int]
    l3_bytes: Optional[float]
    memory_bytes: Optional[float]
    command: str


@dataclass(frozen=True)
class XpuSmi:
    """One parsed output. ``process_section``: a PROCESSES table was printed (empty or not)."""

    runtime_version: Optional[str]
    driver_version: Optional[str]
    devices: tuple[XpuDevice, ...]
    video: Mapping[int, Mapping[str, VideoEngine]] = field(default_factory=dict)
    processes: tuple[XpuProcess, ...] = ()
    process_section: bool = False
    sections: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
