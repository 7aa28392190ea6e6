"""The field catalogue: every reading a DeviceSample may carry, declared once.

Collectors key ``DeviceSample.readings`` by these names. Each ``Field`` says its base unit, its
kind (gauge or counter), the metric family it is exported as (model/names.py) with the label
values its name carries, and what it means; a field no family fits says why it travels in the
JSON model only (``json_only``). A name may hold ``{label}`` placeholders: ``temperature_{sensor}_celsius``
is every sensor, each value one series of the family. docs/metrics.md is generated from this
table and the vendors' quality tables (tests/test_catalogue.py keeps it current, and fails on a
reading a collector produces that no field declares).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional


UTILIZATION = "utilization_ratio"
MEMORY_USED = "memory_used_bytes"
MEMORY_TOTAL = "memory_total_bytes"
TEMP_CORE = "temperature_core_celsius"
TEMP_MEMORY = "temperature_memory_celsius"
TEMP_BOARD = "temperature_board_celsius"
POWER = "power_watts"
POWER_LIMIT = "power_limit_watts"
ENERGY = "energy_joules_total"
CLOCK_COMPUTE = "clock_compute_hertz"
CLOCK_MEMORY = "clock_memory_hertz"
ECC_CORRECTED = "ecc_corrected_total"
ECC_UNCORRECTED = "ecc_uncorrected_total"
MEMORY_UTILIZATION = "memory_utilization_ratio"  # memory-controller busy ratio
MEMORY_FREE = "memory_free_bytes"  # derived (total - used) in the compact annotation form


def interconnect_field(link_type: str, direction: str) -> str:
    """Counter of bytes over a link type (``nvlink``, ``pcie``, ``xgmi``, ``hccs``...),
    direction ``rx`` or ``tx``: e.g. ``interconnect_nvlink_rx_bytes_total``."""
    return f"interconnect_{link_type}_{direction}_bytes_total"


@dataclass(frozen=True)
class Field:
    """One normalized field. ``family`` is a metric name of model/names.py, None with ``json_only`` (the reason)."""

    name: str  # the reading's name; {label} placeholders carry label values
    unit: str  # ratio | bytes | celsius | watts | joules | hertz | count | lanes | pages | bytes_per_second | ...
    description: str
    family: Optional[str] = None
    kind: str = "gauge"  # gauge | counter (a counter's name ends in _total)
    labels: Mapping[str, str] = field(default_factory=dict)  # fixed label values (engine=decoder)
    values: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # a placeholder's known values
    json_only: str = ""

    @property
    def placeholders(self) -> tuple[str, ...]:
        return tuple(re.findall(r"\{([a-z_]+)\}", self.name))

    def pattern(self) -> "re.Pattern[str]":
        """The reading names this field stands for (a placeholder with known values matches only those)."""
        parts = re.split(r"(\{[a-z_]+\})", self.name)
        out = []
        for part in parts:
            m = re.fullmatch(r"\{([a-z_]+)\}", part)
            if m is None:
                out.append(re.escape(part))
            elif m.group(1) in self.values:
                out.append("(" + "|".join(re.escape(v) for v in self.values[m.group(1)]) + ")")
            else:
                out.append("([a-z0-9][a-z0-9_-]*?)")
        return re.compile("^" + "".join(out) + "$")


def _g(name: str, unit: str, family: Optional[str], description: str, **kw) -> Field:
    return Field(name, unit, description, family, **kw)


def _c(name: str, unit: str, family: Optional[str], description: str, **kw) -> Field:
    return Field(name, unit, description, family, kind="counter", **kw)


def _engine(name: str, engine: str, description: str) -> Field:
    return _g(name, "ratio", "accelerator_engine_utilization_ratio", description, labels={"engine": engine})


ENGINES = ("compute", "tensor", "fp64", "fp32", "fp16", "integer", "memory", "encoder", "decoder", "jpeg", "ofa",
           "vector", "aicpu")
SENSORS = ("core", "memory", "board", "edge")
_STATE = {"state": ("used", "total")}

# Every field, grouped by family. Vendor-specific spellings of an engine map onto the one vocabulary.
CATALOGUE: tuple[Field, ...] = (
    _g(UTILIZATION, "ratio", "accelerator_utilization_ratio",
       "the headline busy share each vendor documents (NVML utilization.gpu, amdsmi gfx_activity, npu-smi AI core, ...)"),
    _g(MEMORY_UTILIZATION, "ratio", "accelerator_memory_utilization_ratio",
       "memory-controller (DRAM/HBM) busy share over the vendor's window"),
    _g(MEMORY_USED, "bytes", "accelerator_memory_used_bytes", "device memory in use"),
    _g(MEMORY_TOTAL, "bytes", "accelerator_memory_total_bytes", "device memory size"),
    _g("memory_used_ratio", "ratio", "accelerator_memory_used_ratio",
       "device memory in use as a share, where the tool prints no byte counts (rocm-smi's concise VRAM%)"),
    _g("memory_reserved_bytes", "bytes", "accelerator_memory_reserved_bytes",
       "device memory the driver reserves (NVML memory_info v2 reserved)"),
    _g(MEMORY_FREE, "bytes", None, "total minus used", json_only="derived for the node annotation; total - used in PromQL"),
    _g("memory_{memory}_{state}_bytes", "bytes", "accelerator_memory_region_bytes",
       "other memories a device has, used and total (Ascend DDR, Cambricon virtual memory, Kunlunxin L3 SRAM)",
       values={"memory": ("ddr",), **_STATE}),
    _g("virtual_memory_{state}_bytes", "bytes", "accelerator_memory_region_bytes",
       "Cambricon virtual memory (cnmon vMemory), used and total", labels={"memory": "virtual"}, values=_STATE),
    _g("l3_{state}_bytes", "bytes", "accelerator_memory_region_bytes",
       "Kunlunxin L3 SRAM, used and total", labels={"memory": "l3"}, values=_STATE),
    _g("hugepages_{state}_pages", "pages", "accelerator_hugepages",
       "host huge pages the device's driver uses (npu-smi Hugepages-Usage)", values=_STATE),
    _g("temperature_{sensor}_celsius", "celsius", "accelerator_temperature_celsius",
       "temperature by sensor: core (die or hotspot), memory, board, edge (AMD's die-edge sensor)",
       values={"sensor": SENSORS}),
    _g(POWER, "watts", "accelerator_power_watts", "power draw"),
    _g(POWER_LIMIT, "watts", "accelerator_power_limit_watts", "the enforced power limit"),
    _g("power_management_limit_watts", "watts", "accelerator_power_management_limit_watts",
       "the power-management limit set (NVML power management limit; the enforced one may be lower)"),
    _c(ENERGY, "joules", "accelerator_energy_joules_total", "energy since the driver loaded"),
    _g("clock_{clock}_hertz", "hertz", "accelerator_clock_hertz", "current clock", values={"clock": ("compute", "memory")}),
    _g("clock_{clock}_max_hertz", "hertz", "accelerator_clock_max_hertz", "the clock's maximum",
       values={"clock": ("compute", "memory")}),
    _g("clock_throttle_{reason}", "state", "accelerator_clock_throttle_active",
       "1 while a reason holds the clocks down (NVML clock event reasons)"),
    _g("fan_speed_ratio", "ratio", "accelerator_fan_speed_ratio", "fan speed as a share of its maximum"),
    _c(ECC_CORRECTED, "count", "accelerator_ecc_errors_total", "corrected ECC errors (aggregate)",
       labels={"severity": "corrected"}),
    _c(ECC_UNCORRECTED, "count", "accelerator_ecc_errors_total", "uncorrected ECC errors (aggregate)",
       labels={"severity": "uncorrected"}),
    _c("ecc_deferred_total", "count", "accelerator_ecc_deferred_errors_total",
       "deferred (poisoned, not yet consumed) ECC errors (amdsmi)"),
    _c("ecc_{block}_{severity}_total", "count", "accelerator_ecc_block_errors_total",
       "ECC errors per RAS block (amdsmi: umc, gfx, sdma, mmhub, xgmi_wafl, ...)",
       values={"severity": ("corrected", "uncorrected", "deferred")}),
    _c("ecc_errors_total", "count", None, "all ECC errors (cnmon Ecc-Error)",
       json_only="the sum of the corrected and uncorrected counts cnmon prints beside it (exported by severity)"),
    _c("ecc_{severity}_volatile_total", "count", "accelerator_ecc_volatile_errors_total",
       "ECC errors since the driver loaded", values={"severity": ("corrected", "uncorrected")}),
    _g("memory_retired_pages_{cause}", "pages", "accelerator_memory_retired_pages", "retired pages by cause",
       values={"cause": ("single_bit", "double_bit")}),
    _g("memory_retirement_pending", "state", "accelerator_memory_retirement_pending", "1 while a retirement waits"),
    _g("memory_remapped_rows_{cause}", "count", "accelerator_memory_remapped_rows", "remapped rows by cause",
       values={"cause": ("correctable", "uncorrectable")}),
    _g("memory_remap_pending", "state", "accelerator_memory_remap_pending", "1 while a row remap waits for a reset"),
    _g("memory_remap_failed", "state", "accelerator_memory_remap_failed", "1 when a row remap failed"),
    _g("pcie_link_generation", "count", "accelerator_pcie_link_generation", "current PCIe generation"),
    _g("pcie_link_generation_max", "count", "accelerator_pcie_link_generation_max", "highest PCIe generation"),
    _g("pcie_link_width", "lanes", "accelerator_pcie_link_width_lanes", "current PCIe link width"),
    _g("pcie_link_width_max", "lanes", "accelerator_pcie_link_width_max_lanes", "widest PCIe link"),
    _g("pcie_link_speed_transfers_per_second", "transfers_per_second", "accelerator_pcie_link_speed_transfers_per_second",
       "current PCIe link speed per lane (amdsmi pcie_speed)"),
    _c("pcie_replay_total", "count", "accelerator_pcie_replay_errors_total", "PCIe replays"),
    _c("pcie_replay_rollover_total", "count", "accelerator_pcie_replay_rollovers_total",
       "PCIe replay-counter rollovers (amdsmi pcie_replay_roll_over_count)"),
    _c("pcie_nak_{direction}_total", "count", "accelerator_pcie_naks_total", "PCIe NAKs sent and received (amdsmi)",
       values={"direction": ("sent", "received")}),
    _c("pcie_l0_to_recovery_total", "count", "accelerator_pcie_recoveries_total",
       "PCIe link transitions from L0 to recovery (amdsmi pcie_l0_to_recovery_count)"),
    _g("pcie_bandwidth_bytes_per_second", "bytes_per_second", "accelerator_pcie_bandwidth_bytes_per_second",
       "PCIe traffic both ways together (amdsmi pcie_bandwidth, instantaneous)"),
    _g("pcie_{direction}_bytes_per_second", "bytes_per_second", "accelerator_pcie_throughput_bytes_per_second",
       "PCIe throughput by direction (NVML GPM PCIe TX/RX, else nvmlDeviceGetPcieThroughput)",
       values={"direction": ("rx", "tx")}),
    _c("interconnect_{link_type}_{direction}_bytes_total", "bytes", "accelerator_interconnect_bytes_total",
       "bytes over a device interconnect", values={"direction": ("rx", "tx")}),
    _g("interconnect_{link_type}_{direction}_bytes_per_second", "bytes_per_second",
       "accelerator_interconnect_throughput_bytes_per_second",
       "interconnect throughput where a vendor reports a rate, not a counter (NVML GPM NVLink)",
       values={"direction": ("rx", "tx")}),
    _g("interconnect_{link_type}_links_{state}", "count", "accelerator_interconnect_links",
       "interconnect links by state", values={"state": ("active", "inactive")}),
    _g("interconnect_{link_type}_speed_bytes_per_second", "bytes_per_second",
       "accelerator_interconnect_speed_bytes_per_second",
       "the rated speed of the active links of a type together, one direction (nvidia-smi nvlink -s: the sum "
       "of the links' GB/s)"),
    _g("interconnect_{link_type}_link_{link}_speed_bytes_per_second", "bytes_per_second", None,
       "one link's rated speed, one direction (nvidia-smi nvlink -s Link N)",
       json_only="per-link detail (up to 18 links a GPU); the links together are exported"),
    _g("partitions_{domain}", "count", "accelerator_partitions",
       "partitions the device is split into: compute (AMD SPX 1, DPX 2, QPX 4, CPX one per XCD: amd-smi "
       "partition's current accelerator profile) and memory (NPS1 1 .. NPS8 8)",
       values={"domain": ("compute", "memory")}),
    _g("engine_{engine}_utilization_ratio", "ratio", "accelerator_engine_utilization_ratio",
       "busy share of an engine over the window (NVML GPM, amdsmi activity, npu-smi, ...); memory = DRAM bandwidth",
       values={"engine": ENGINES}),
    _engine("media_utilization_ratio", "decoder", "AMD VCN (video codec) activity (amdsmi vcn_activity / mm_activity)"),
    _engine("decoder_utilization_ratio", "decoder", "video decoder busy share (xpu_smi)"),
    _engine("encoder_utilization_ratio", "encoder", "video encoder busy share (xpu_smi)"),
    _engine("image_processor_utilization_ratio", "jpeg", "image (JPEG) processor busy share (xpu_smi)"),
    _engine("vector_utilization_ratio", "vector", "Ascend vector core busy share (npu-smi -t usages)"),
    _engine("aicpu_utilization_ratio", "aicpu", "Ascend AI CPU busy share (npu-smi -t usages)"),
    _g("ctrlcpu_utilization_ratio", "ratio", "accelerator_control_cpu_utilization_ratio",
       "Ascend control CPU busy share (npu-smi -t usages)"),
    _g("graphics_active_ratio", "ratio", "accelerator_graphics_engine_active_ratio",
       "share of time the graphics engine is active (NVML GPM graphics activity)"),
    _g("sm_occupancy_ratio", "ratio", "accelerator_compute_occupancy_ratio",
       "resident warps over the maximum (NVML GPM SM occupancy)"),
    _g("tensor_{pipe}_utilization_ratio", "ratio", "accelerator_tensor_pipe_utilization_ratio",
       "busy share of one tensor pipe (NVML GPM DFMA, HMMA, IMMA)", values={"pipe": ("dfma", "hmma", "imma")}),
    _g("aicore_count", "count", None, "AI cores on the chip (npu-smi -t common)",
       json_only="a static count; the profile's compute units carry capacity"),
    _g("recovery_action", "state", None, "NVML GPU recovery action code",
       json_only="an enum; a non-zero action is the recovery-* fault (accelerator_health_reason_info)"),
)


@functools.lru_cache(maxsize=None)
def _compiled() -> tuple[tuple[Field, "re.Pattern[str]"], ...]:
    exact = [f for f in CATALOGUE if not f.placeholders]
    patterned = sorted((f for f in CATALOGUE if f.placeholders), key=lambda f: -len(f.name))
    return tuple((f, f.pattern()) for f in exact + patterned)


@functools.lru_cache(maxsize=4096)
def lookup(name: str) -> Optional[tuple[Field, dict[str, str]]]:
    """The field a reading name stands for, with the label values its name carries (fixed ones
    included); None for a name the catalogue does not declare."""
    for f, pat in _compiled():
        m = pat.match(name)
        if m is not None:
            return f, {**dict(zip(f.placeholders, m.groups())), **f.labels}
    return None
