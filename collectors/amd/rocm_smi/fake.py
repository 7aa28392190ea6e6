"""The fake ``rocm-smi``: the rocm-smi family's fake (hetero_exporter/sdk/rocm_family/fake.py)
printing AMD's card keys of ROCm 6 (``GPU use (%)``, ``VRAM Total Memory (B)``, ``Card Vendor``
Advanced Micro Devices) and ROCm 4's concise table; its install's runtime is ROCm 6.2.0 unless
the scenario's ``amd: {runtime_version: ...}`` says."""

from __future__ import annotations

import sys
from typing import Any, Optional

from hetero_exporter.model.scenario import DeviceSpec, Scenario
from hetero_exporter.sdk.rocm_family import fake as family
from hetero_exporter.sdk.rocm_family.fake import MODES, f1, edge  # noqa: F401 - API

from .member import ROCM_SMI


def card(spec: DeviceSpec, t: float, unique: str) -> dict[str, str]:
    """rocm-smi's own --json keys of a card (ROCm 6)."""
    util, mutil = spec.value("utilization_ratio", t), spec.value("memory_utilization_ratio", t)
    total, used = spec.memory_total_bytes, spec.value("memory_used_bytes", t)
    return {
        "Device Name": spec.product,
        "Device ID": str(spec.extra.get("device_id", "0x74a1")),
        "Device Rev": "0x00",
        "Unique ID": unique,
        "VBIOS version": spec.firmware_version or "N/A",
        "Temperature (Sensor edge) (C)": f1(edge(spec, t)),
        "Temperature (Sensor junction) (C)": f1(spec.value("temperature_core_celsius", t)),
        "Temperature (Sensor memory) (C)": f1(spec.value("temperature_memory_celsius", t)),
        "Average Graphics Package Power (W)": f1(spec.value("power_watts", t)),
        "GPU use (%)": "N/A" if util is None else str(int(round(100 * util))),
        "GPU memory use (%)": "N/A" if mutil is None else str(int(round(100 * mutil))),
        "VRAM Total Memory (B)": str(int(total)),
        "VRAM Total Used Memory (B)": "N/A" if used is None else str(int(min(used, total))),
        "Card Series": spec.product,
        "Card Vendor": "Advanced Micro Devices, Inc. [AMD/ATI]",
    }


STYLE = family.Style(ROCM_SMI, card, device_word="GPU", in_hive=False, runtime="6.2.0")
main, install = family.entry(STYLE, __name__)


def render_json(devices: list[DeviceSpec], t: float, topology: bool = True) -> str:
    return family.render_json(devices, t, STYLE, topology)


class FakeSmiCli(family.FakeSmiCli):
    """The fake ``rocm-smi`` (``path``) for tests that drive it directly."""

    def __init__(self, scenario: Scenario, clock: Any, workdir: Optional[str], tool: str = ROCM_SMI.tool) -> None:
        if tool != ROCM_SMI.tool:
            raise ValueError(f"no fake for {tool!r} here")
        super().__init__(scenario, clock, workdir, STYLE, __name__)


if __name__ == "__main__":
    sys.exit(main())
