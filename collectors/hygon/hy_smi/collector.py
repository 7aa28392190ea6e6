"""Hygon DCUs through ``hy-smi``, Hygon's fork of rocm-smi: the rocm-smi family's collector
(hetero_exporter/sdk/rocm_family/) with Hygon's member tool (member.py). Settings
(``collectors.hy_smi``): see sdk.rocm_family.collector.
"""

from __future__ import annotations

from hetero_exporter.model import NodeSnapshot
from hetero_exporter.sdk.contract import CollectorOptions
from hetero_exporter.sdk.rocm_family import collector as family
from hetero_exporter.sdk.rocm_family import devices

from .member import HY_SMI

SmiSettings = SETTINGS = family.SmiSettings


class HySmiCollector(family.SmiCliCollector):
    member = HY_SMI
    name, vendor, tool = "hy_smi", "hygon", "hy-smi"


def create(options: CollectorOptions) -> family.SmiCliCollector:
    """``hy_smi``: Hygon DCUs through ``hy-smi --json``."""
    return family.create(options, HySmiCollector, "hetero_exporter.collectors.hygon.hy_smi.fake")


def parse_hy_smi(text: str, now: float = 0.0) -> NodeSnapshot:
    """Captured ``hy-smi`` output (JSON, concise table or keyed text) -> snapshot."""
    return devices.parse(text, HY_SMI, now)
