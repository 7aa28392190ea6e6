"""What the ixsmi readers give (parse.py: the default table and the --query-gpu CSV;
query_xml.py: ``ixsmi -q -x``), apart from both so that neither imports the other."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

TOOL = "ixsmi"
MIB = 1 << 20


@dataclass(frozen=True)
class IxGpu:
    """One device (chip) of ixsmi: memory in bytes, power in W, clocks in Hz, temperature in C,
    utilization and fan as ratios 0..1; None where the tool prints N/A or has no such column.
    A BI-V150 board has two chips; ixsmi prints the board's power on one of them and N/A on
    the other (the capture shows every other chip N/A)."""

    index: int
    name: str = ""
    bus_id: Optional[str] = None
    uuid: Optional[str] = None
    serial: Optional[str] = None
    fan_ratio: Optional[float] = None
    temperature_celsius: Optional[float] = None
    perf_state: Optional[str] = None
    power_watts: Optional[float] = None
    power_limit_watts: Optional[float] = None
    memory_used_bytes: Optional[float] = None
    memory_total_bytes: Optional[float] = None
    utilization_ratio: Optional[float] = None
    memory_utilization_ratio: Optional[float] = None
    clock_sm_hertz: Optional[float] = None
    clock_memory_hertz: Optional[float] = None
    compute_mode: Optional[str] = None
    ecc_uncorrected: Optional[float] = None  # "Volatile Uncorr. ECC" where a version prints it
    driver_version: Optional[str] = None  # CSV field driver_version


@dataclass(frozen=True)
class IxProcess:
    gpu: int
    pid: int
    name: str = ""
    memory_bytes: Optional[float] = None


@dataclass(frozen=True)
class IxsmiOutput:
    """A parsed ixsmi output. ``layout``: ``table``, ``xml`` or ``csv``; ``ml_version`` the IX-ML
    (CoreX management library) version of the title, ``cuda_version`` the CUDA API level
    CoreX implements; ``process_section``: the Processes box was printed (so an empty
    process list means none run, not unknown)."""

    layout: str
    gpus: tuple[IxGpu, ...] = ()
    processes: tuple[IxProcess, ...] = ()
    ml_version: Optional[str] = None
    driver_version: Optional[str] = None
    cuda_version: Optional[str] = None
    timestamp: Optional[str] = None
    process_section: bool = False
    fields: tuple[str, ...] = ()  # CSV: the fields of each line

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
