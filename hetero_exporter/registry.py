"""Static tables of the built-in collectors and offline parsers, plus plugin discovery.

Entries are dotted names, imported only when used, so the core never imports a vendor
module (or its binding) it does not need. Third-party collectors register a module with a
``create(options)`` function under the entry-point group ``hetero_exporter.collectors``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable

ENTRY_POINT_GROUP = "hetero_exporter.collectors"


@dataclass(frozen=True)
class CollectorEntry:
    name: str
    vendor: str
    module: str  # module with create(options) -> Collector
    default: bool = True  # enabled unless --no-collector.NAME (subject to PCI presence)
    description: str = ""


BUILTIN_COLLECTORS: dict[str, CollectorEntry] = {
    e.name: e
    for e in (
        CollectorEntry("nvml", "nvidia", "hetero_exporter.collectors.nvml",
                       description="NVIDIA GPUs through NVML (nvidia-ml-py); falls back to "
                                   "`nvidia-smi -q -x` when NVML cannot be loaded"),
        # Off by default: nvml already falls back to it. Enable it (--collector.nvidia_smi,
        # with --no-collector.nvml) to read the CLI only.
        CollectorEntry("nvidia_smi", "nvidia", "hetero_exporter.collectors.nvidia_smi", default=False,
                       description="NVIDIA GPUs through `nvidia-smi -q -x`"),
        CollectorEntry("amdsmi", "amd", "hetero_exporter.collectors.amdsmi",
                       description="AMD GPUs through the amdsmi library (libamd_smi.so, ROCm 6+)"),
        # Off by default: it would report the same GPUs as amdsmi under other uuids. Enable it
        # (--collector.rocm_smi) on AMD nodes that have rocm-smi but no libamd_smi.so.
        CollectorEntry("rocm_smi", "amd", "hetero_exporter.collectors.rocm_smi", default=False,
                       description="AMD GPUs through `rocm-smi --json` (CLI-only nodes, ROCm < 6)"),
        CollectorEntry("hy_smi", "hygon", "hetero_exporter.collectors.rocm_smi:HY_SMI",
                       description="Hygon DCUs through `hy-smi --json` (DTK)"),
        CollectorEntry("npu_smi", "ascend", "hetero_exporter.collectors.npu_smi",
                       description="Huawei Ascend NPUs through `npu-smi info` (+ slower per-card details)"),
        CollectorEntry("cnmon", "cambricon", "hetero_exporter.collectors.cnmon",
                       description="Cambricon MLUs through `cnmon` (+ `cnmon info` per card)"),
    )
}

# TOOL -> "module:function"; the function takes the captured text and returns a NodeSnapshot
# (or, for non-device tools such as cgroup, a model object with a to_dict()).
PARSERS: dict[str, str] = {
    "cgroup": "hetero_exporter.attribution:parse_cgroup",  # /proc/<pid>/cgroup -> CgroupInfo
    "rocm-smi": "hetero_exporter.collectors.rocm_smi:parse_rocm_smi",  # --json, concise table, GPU[n] lines
    "hy-smi": "hetero_exporter.collectors.rocm_smi:parse_hy_smi",
    "npu-smi": "hetero_exporter.collectors.npu_smi:parse_any",  # info, -m, -l, -t health|usages|board|...
    "cnmon": "hetero_exporter.collectors.cnmon:parse_any",  # the default table, or cnmon info
    "nvidia-smi": "hetero_exporter.collectors.nvidia_smi:parse",  # nvidia-smi -q -x (XML)
}

# PCI vendor ids (sysfs "vendor") -> our vendor name; used to count expected devices and
# to enable by default only the collectors whose hardware is present.
PCI_VENDORS: dict[int, str] = {
    0x10DE: "nvidia",
    0x1002: "amd",
    0x19E5: "ascend",
    0xCABC: "cambricon",
    0x1D94: "hygon",
}


def _load(dotted: str) -> Any:
    module, _, attr = dotted.partition(":")
    mod = importlib.import_module(module)
    return getattr(mod, attr) if attr else mod


def collector_entries() -> dict[str, CollectorEntry]:
    """Built-in collectors plus those registered by installed plugins."""
    entries = dict(BUILTIN_COLLECTORS)
    try:
        eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # a broken plugin distribution must not stop the agent
        eps = ()
    for ep in eps:
        if ep.name not in entries:
            entries[ep.name] = CollectorEntry(ep.name, "", ep.value, default=True,
                                              description=f"plugin {ep.value}")
    return entries


def collector_factory(entry: CollectorEntry) -> Callable[..., Any]:
    """The entry's ``create`` function (ImportError propagates: the caller reports it)."""
    return _load(entry.module).create


def parser(tool: str) -> Callable[[str], Any]:
    try:
        return _load(PARSERS[tool])
    except KeyError:
        known = ", ".join(sorted(PARSERS)) or "none yet"
        raise KeyError(f"no parser for {tool!r}; known tools: {known}") from None
