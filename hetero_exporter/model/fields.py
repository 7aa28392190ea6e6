"""Names of the readings a DeviceSample may carry, with their base unit.

Collectors key ``DeviceSample.readings`` by these names; exposition maps them to metric
families (model/names.py). A collector may add vendor-specific fields: they travel in
the JSON model and in ``accelerator_field_status``; give them a metric in model/names.py
when dashboards need them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldSpec:
    unit: str  # ratio | bytes | celsius | watts | joules | hertz | count | ...
    counter: bool = False


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


FIELDS: dict[str, FieldSpec] = {
    UTILIZATION: FieldSpec("ratio"),
    MEMORY_UTILIZATION: FieldSpec("ratio"),
    MEMORY_USED: FieldSpec("bytes"),
    MEMORY_TOTAL: FieldSpec("bytes"),
    TEMP_CORE: FieldSpec("celsius"),
    TEMP_MEMORY: FieldSpec("celsius"),
    TEMP_BOARD: FieldSpec("celsius"),
    POWER: FieldSpec("watts"),
    POWER_LIMIT: FieldSpec("watts"),
    ENERGY: FieldSpec("joules", counter=True),
    CLOCK_COMPUTE: FieldSpec("hertz"),
    CLOCK_MEMORY: FieldSpec("hertz"),
    ECC_CORRECTED: FieldSpec("count", counter=True),
    ECC_UNCORRECTED: FieldSpec("count", counter=True),
}
