"""Reading field names of AMD GPUs beyond the common ones (hetero_exporter/model/fields.py), shared
by the amdsmi (library) and amd_smi (CLI) collectors so both name a reading alike."""

import re
from typing import Optional

from hetero_exporter.model import fields as F

MEDIA_UTILIZATION = "media_utilization_ratio"
TEMP_EDGE = "temperature_edge_celsius"
ECC_DEFERRED = "ecc_deferred_total"
PCIE_WIDTH = "pcie_link_width"
PCIE_WIDTH_MAX = "pcie_link_width_max"
PCIE_SPEED = "pcie_link_speed_transfers_per_second"
PCIE_BANDWIDTH = "pcie_bandwidth_bytes_per_second"
PCIE_REPLAY = "pcie_replay_total"
PCIE_REPLAY_ROLLOVER = "pcie_replay_rollover_total"
PCIE_RECOVERY = "pcie_l0_to_recovery_total"
PCIE_NAK_SENT = "pcie_nak_sent_total"
PCIE_NAK_RECEIVED = "pcie_nak_received_total"
XGMI_RX = F.interconnect_field("xgmi", "rx")
XGMI_TX = F.interconnect_field("xgmi", "tx")
# amd-smi list: the KFD's ids of a GPU (KFD_ID = the KFD gpu_id, NODE_ID = its KFD topology node,
# PARTITION_ID = the compute partition); ids, not quantities (resolution 1)
KFD_ID = "kfd_gpu_id"
KFD_NODE_ID = "kfd_node_id"
PARTITION_ID = "partition_id"
# amd-smi metric THROTTLE / POWER: 1 while clocks are throttled (THROTTLE_STATUS THROTTLED), 0 otherwise
THROTTLE_ACTIVE = "clock_throttle_active"
THROTTLE_ACCUMULATION = "throttle_accumulation_total"  # ACCUMULATION_COUNTER: samples counted

# amdsmi_get_violation_status (ROCm 6.4+): which limit holds the clocks down now, as
# clock_throttle_<reason> (1 while active); the reasons in the vocabulary nvml uses where they
# mean the same (power_cap, hw_thermal), AMD's own otherwise. A field amdsmi answers "N/A" for
# is unsupported. (Here, not in amdsmi/collector.py: its fake answers the same keys.)
VIOLATIONS: tuple[tuple[str, str], ...] = (
    ("power_cap", "active_ppt_pwr"),           # package power tracking (PVIOL)
    ("socket_thermal", "active_socket_thrm"),  # socket temperature limit (TVIOL)
    ("hw_thermal", "active_prochot_thrm"),     # PROCHOT: the hardware thermal signal
    ("vr_thermal", "active_vr_thrm"),          # voltage regulator temperature
    ("hbm_thermal", "active_hbm_thrm"),        # HBM temperature
)


def throttle_active_field(reason: str) -> str:
    """``<REASON>_VIOLATION_STATUS`` (ACTIVE -> 1, NOT ACTIVE -> 0), named as NVIDIA's clock reasons."""
    return f"clock_throttle_{reason}"


def throttle_ratio_field(reason: str) -> str:
    """``<REASON>_VIOLATION_ACTIVITY``: share of the accumulation window the reason held, 0..1."""
    return f"throttle_{reason}_violation_ratio"


def throttle_count_field(reason: str) -> str:
    """``<REASON>_ACCUMULATED``: samples of ACCUMULATION_COUNTER during which the reason held."""
    return f"throttle_{reason}_accumulated_total"


# the partition mode: partitions the GPU is split into (compute: SPX 1, DPX 2, TPX 3, QPX 4, CPX one per
# XCD; memory: NPS<n>), from amd-smi partition and amdsmi_get_gpu_compute/memory_partition alike
PARTITIONS_COMPUTE = "partitions_compute"
PARTITIONS_MEMORY = "partitions_memory"
MODE_PARTITIONS = {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4}  # CPX's count depends on the XCDs
_NPS = re.compile(r"NPS(\d{1,2})", re.I)


def partition_counts(compute: Optional[str], memory: Optional[str],
                     listed: Optional[int] = None) -> tuple[Optional[int], Optional[int]]:
    """(compute partitions, memory partitions) of a GPU in ``compute`` / ``memory`` mode; ``listed``:
    the count the tool states (a profile's NUM_PARTITIONS, the partition handles amdsmi lists),
    which CPX needs. None where the mode does not say."""
    mode = (compute or "").strip().rstrip("*").upper()
    count = listed if listed else MODE_PARTITIONS.get(mode)
    m = _NPS.fullmatch((memory or "").strip())
    return count, (int(m.group(1)) if m else None)
