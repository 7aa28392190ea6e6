"""The fake ``hy-smi``: the rocm-smi family's fake (hetero_exporter/sdk/rocm_family/fake.py)
printing Hygon's card keys of DTK 24.04 (``DCU use (%)``, ``vram Total Memory (MiB)``, a Unique
ID without ``0x``, ``Card Vendor`` Chengdu Haiguang) and the DTK-style concise table (``DCU``);
its DCUs are in the xGMI hive unless a device's ``extra.xgmi`` says otherwise; the install's
runtime is DTK 24.04.3 unless the scenario's ``hygon: {runtime_version: ...}`` says."""

from __future__ import annotations

import sys

from hetero_exporter.model.scenario import DeviceSpec
from hetero_exporter.sdk.rocm_family import fake as family
from hetero_exporter.sdk.rocm_family.fake import MODES, f1, edge  # noqa: F401 - API

from .member import HY_SMI

MIB = 1 << 20


def card(spec: DeviceSpec, t: float, unique: str) -> dict[str, str]:
    """hy-smi's own --json keys of a card (DTK 24.04)."""
    util, total, used = spec.value("utilization_ratio", t), spec.memory_total_bytes, spec.value("memory_used_bytes", t)
    return {
        "Device ID": str(spec.extra.get("device_id", "0x55b7")),
        "Card Series": spec.product,
        "Card Vendor": "Chengdu Haiguang IC Design Co., Ltd.",
        "Serial Number": spec.serial,
        "Unique ID": unique.removeprefix("0x").zfill(16),
        "Average Graphics Package Power (W)": f1(spec.value("power_watts", t)),
        "Temperature (Sensor edge) (C)": f1(edge(spec, t)),
        "Temperature (Sensor junction) (C)": f1(spec.value("temperature_core_celsius", t)),
        "Temperature (Sensor mem) (C)": f1(spec.value("temperature_memory_celsius", t)),
        "DCU use (%)": "N/A" if util is None else f"{100 * util:.1f}",
        "vram Total Memory (MiB)": str(int(total // MIB)),
        "vram Total Used Memory (MiB)": "N/A" if used is None else str(int(min(used, total) // MIB)),
    }


STYLE = family.Style(HY_SMI, card, device_word="DCU", in_hive=True, runtime="24.04.3")
main, install = family.entry(STYLE, __name__)


def render_json(devices: list[DeviceSpec], t: float, topology: bool = True) -> str:
    return family.render_json(devices, t, STYLE, topology)


if __name__ == "__main__":
    sys.exit(main())
