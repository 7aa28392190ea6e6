"""AMD GPUs through ``rocm-smi`` (nodes without amdsmi): the rocm-smi family's collector
(hetero_exporter/sdk/rocm_family/) with AMD's member tool (member.py). Settings
(``collectors.rocm_smi``): see sdk.rocm_family.collector.
"""

from __future__ import annotations

import functools

from hetero_exporter.model import NodeSnapshot
from hetero_exporter.sdk.contract import CollectorOptions
from hetero_exporter.sdk.rocm_family import FULL_ARGS, MINIMAL_ARGS, TOPO_ARGS  # noqa: F401 - API
from hetero_exporter.sdk.rocm_family import collector as family
from hetero_exporter.sdk.rocm_family import devices
from hetero_exporter.sdk.rocm_family.devices import (MEMORY_USED_RATIO, PCIE_REPLAY,  # noqa: F401 - API
                                                     QUALITY_TABLE, TEMP_EDGE, fabric_links, quality)
from hetero_exporter.sdk.rocm_family.parse import (Card, Hop, Report, frequency, is_na, number,  # noqa: F401 - API
                                                   parse_concise, parse_json, parse_keyed, parse_pid_gpus,
                                                   parse_report, parse_topology)

from .member import ROCM_SMI

SmiSettings = SETTINGS = family.SmiSettings


class RocmSmiCollector(family.SmiCliCollector):
    member = ROCM_SMI
    name, vendor, tool = "rocm_smi", "amd", "rocm-smi"


def create(options: CollectorOptions) -> family.SmiCliCollector:
    """``rocm_smi``: AMD GPUs through ``rocm-smi --json`` (nodes without amdsmi)."""
    return family.create(options, RocmSmiCollector, "hetero_exporter.collectors.amd.rocm_smi.fake")


build_devices = functools.partial(devices.build_devices, member=ROCM_SMI)


def parse(text: str, tool: str = "rocm-smi", now: float = 0.0) -> NodeSnapshot:
    """Captured ``rocm-smi`` output (JSON, concise table or keyed text) -> snapshot; ``tool``:
    the name its messages and sources give."""
    return devices.parse(text, ROCM_SMI, now, tool)


def parse_rocm_smi(text: str) -> NodeSnapshot:
    return parse(text)
