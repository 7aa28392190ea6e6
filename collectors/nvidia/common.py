"""What the NVML collector and the ``nvidia-smi -q -x`` parser share: the extra reading
fields they report, clock-event reason names, GPU recovery actions, and the health
conditions derived from readings (row-remap pending/failure, retirement pending, PCIe width
downgrade, recovery action) with their fault-table entries.

Field names are vendor-neutral (another vendor reporting remapped rows uses the same name);
model/names.py maps them to metrics.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

from hetero_exporter.sdk.cli_collector import FaultEpisodes
from hetero_exporter.sdk.ledger import FaultLedger
from hetero_exporter.sdk import faults as fault_tables
from hetero_exporter.model import Fault, Health, Reading

# ---------------------------------------------------------------- extra reading fields
ECC_CORRECTED_VOLATILE = "ecc_corrected_volatile_total"  # since the driver loaded
ECC_UNCORRECTED_VOLATILE = "ecc_uncorrected_volatile_total"
RETIRED_SBE = "memory_retired_pages_single_bit"  # pages, cumulative (inforom)
RETIRED_DBE = "memory_retired_pages_double_bit"
RETIREMENT_PENDING = "memory_retirement_pending"  # 1 / 0
REMAPPED_CORRECTABLE = "memory_remapped_rows_correctable"  # rows, cumulative
REMAPPED_UNCORRECTABLE = "memory_remapped_rows_uncorrectable"
REMAP_PENDING = "memory_remap_pending"  # 1 / 0
REMAP_FAILED = "memory_remap_failed"  # 1 / 0
PCIE_GEN = "pcie_link_generation"
PCIE_GEN_MAX = "pcie_link_generation_max"
PCIE_WIDTH = "pcie_link_width"  # lanes (same name as the AMD collector)
PCIE_WIDTH_MAX = "pcie_link_width_max"
PCIE_REPLAY = "pcie_replay_total"  # link-level replays (retransmissions)
RECOVERY_ACTION = "recovery_action"  # nvmlGpuRecoveryAction_t value (0 = none)
NVLINK_ACTIVE = "interconnect_nvlink_links_active"
NVLINK_INACTIVE = "interconnect_nvlink_links_inactive"
NVLINK_RX = "interconnect_nvlink_rx_bytes_total"
NVLINK_TX = "interconnect_nvlink_tx_bytes_total"

# Clock-event ("throttle") reasons: NVML bit -> neutral reason name. The same bits are
# nvmlClocksThrottleReason* (older drivers) and nvmlClocksEventReason* (R535+); nvidia-smi
# prints them as clocks_throttle_reason_<x> / clocks_event_reason_<x>.
CLOCK_REASONS: tuple[tuple[int, str, str], ...] = (
    # (bit, neutral name, nvidia-smi suffix)
    (0x001, "idle", "gpu_idle"),
    (0x002, "application_setting", "applications_clocks_setting"),
    (0x004, "power_cap", "sw_power_cap"),
    (0x008, "hw_slowdown", "hw_slowdown"),
    (0x010, "sync_boost", "sync_boost"),
    (0x020, "sw_thermal", "sw_thermal_slowdown"),
    (0x040, "hw_thermal", "hw_thermal_slowdown"),
    (0x080, "hw_power_brake", "hw_power_brake_slowdown"),
    (0x100, "display_setting", "display_clocks_setting"),
)


def clock_reason_field(name: str) -> str:
    """Reading field of one clock-event reason: 1 while active, 0 otherwise."""
    return f"clock_throttle_{name}"


# nvmlGpuRecoveryAction_t -> fault code (nvml.h: NVML_GPU_RECOVERY_ACTION_*)
RECOVERY_CODES: dict[int, Optional[str]] = {
    0: None,
    1: "recovery-gpu-reset",
    2: "recovery-node-reboot",
    3: "recovery-drain-p2p",
    4: "recovery-drain-and-reset",
    5: "recovery-imex-domain",
    6: "recovery-bus-reset",
    7: "recovery-system-reboot",
}


def recovery_from_text(text: str) -> Optional[int]:
    """nvidia-smi's ``gpu_recovery_action`` text ("None", "Reset", "Reboot", "Drain P2P",
    "Drain and Reset", ...) -> the NVML value; None when the text is not recognized."""
    t = " ".join(text.lower().replace("_", " ").split())
    if t in ("none", "0"):
        return 0
    if "drain" in t:
        return 4 if "reset" in t else 3
    if "imex" in t:
        return 5
    if "bus" in t and "reset" in t:
        return 6
    if "system" in t and "reboot" in t:
        return 7
    if "reboot" in t:
        return 2
    if "reset" in t:
        return 1
    return None


def make_fault(code: str, message: str, source: str) -> Fault:
    """A Fault filled from the NVIDIA fault table (class, action, severity)."""
    info = fault_tables.lookup("nvidia", code)
    return Fault(code=code, fault_class=info.fault_class, action=info.action, severity=info.severity,
                 message=message or info.description, source=source)


def conditions(readings: Mapping[str, Reading]) -> list[tuple[str, str]]:
    """Health conditions present in a device's readings: (fault code, message)."""

    def val(name: str) -> Optional[float]:
        r = readings.get(name)
        return None if r is None or r.quality.status != "ok" else r.value

    out: list[tuple[str, str]] = []
    if val(REMAP_FAILED) == 1:
        out.append(("remap-failure", "row remapping failed (no spare rows)"))
    if val(REMAP_PENDING) == 1:
        out.append(("remap-pending", "row remapping pending; reset the GPU to activate it"))
    if val(RETIREMENT_PENDING) == 1:
        out.append(("retirement-pending", "page retirement pending; reload the driver / reset the GPU"))
    width, width_max = val(PCIE_WIDTH), val(PCIE_WIDTH_MAX)
    if width is not None and width_max is not None and 0 < width < width_max:
        out.append(("pcie-width-degraded", f"PCIe link x{int(width)} of x{int(width_max)}"))
    action = val(RECOVERY_ACTION)
    if action is not None and action != 0:
        code = RECOVERY_CODES.get(int(action)) or "recovery-unknown"
        out.append((code, f"GPU recovery action {int(action)} ({code[len('recovery-'):]})"))
    return out


def health_of(reasons: Iterable[Fault]) -> Health:
    """Report, not policy: ``sdk.faults.health_of`` (critical failed, warning degraded, info
    decides nothing). Debounce, stickiness and hysteresis belong to health/detect/rules.py."""
    return fault_tables.health_of(reasons)


class ConditionTracker:
    """Conditions (present while they hold, as ``(code, message)``) counted once per episode
    in the collector's ledger: ``sdk.cli_collector.FaultEpisodes`` over nvidia's fault table."""

    def __init__(self, ledger: FaultLedger, source: str):
        self._episodes = FaultEpisodes(ledger)
        self._source = source

    def update(self, uuid: str, found: list[tuple[str, str]], now: float) -> list[Fault]:
        """Record new onsets; return the active condition faults (with ledger counts)."""
        return list(self._episodes.update(uuid, [make_fault(code, message, self._source) for code, message in found],
                                          now))