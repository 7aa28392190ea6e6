"""Reading field names of AMD GPUs beyond the common ones (hetero_exporter/fields.py), shared
by the amdsmi (library) and amd_smi (CLI) collectors so both name a reading alike."""

from hetero_exporter import fields as F

MEDIA_UTILIZATION = "media_utilization_ratio"
TEMP_EDGE = "temperature_edge_celsius"
ECC_DEFERRED = "ecc_deferred_total"
PCIE_WIDTH = "pcie_link_width"
PCIE_SPEED = "pcie_link_speed_transfers_per_second"
PCIE_BANDWIDTH = "pcie_bandwidth_bytes_per_second"
PCIE_REPLAY = "pcie_replay_total"
PCIE_REPLAY_ROLLOVER = "pcie_replay_rollover_total"
PCIE_RECOVERY = "pcie_l0_to_recovery_total"
PCIE_NAK_SENT = "pcie_nak_sent_total"
PCIE_NAK_RECEIVED = "pcie_nak_received_total"
XGMI_RX = F.interconnect_field("xgmi", "rx")
XGMI_TX = F.interconnect_field("xgmi", "tx")
