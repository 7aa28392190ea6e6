"""Every metric name, type, help text and label set: the single source of truth.

Dashboards, alert rules and tests import these; nothing else spells a metric name.
Identity lives on ``accelerator_device_info``; value series carry only ``vendor`` and
``uuid`` plus the few labels named in DESIGN.md, so queries join on ``uuid``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Mapping, Optional

from hetero_exporter.model import fields as F


# Series profiles (``metrics.profile``, docs/metrics-guide.md: Profiles), smallest first: each serves
# every family the ones before it serve. fleet: at most 32 series per GPU, no per-process series;
# standard: the default (what /metrics served before profiles); full: also the families tagged full.
FLEET, STANDARD, FULL = "fleet", "standard", "full"
PROFILES = (FLEET, STANDARD, FULL)


@dataclass(frozen=True)
class Metric:
    name: str  # the full exposition name (counters end in _total)
    type: str  # gauge | counter
    help: str
    labels: tuple[str, ...]
    profile: str = STANDARD  # the smallest profile that serves the family
    # a fleet family of which fleet serves only some series: (label, its values fleet serves)
    fleet_only: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def family(self) -> str:
        """Name given to prometheus_client, which appends _total to counters itself."""
        return self.name[: -len("_total")] if self.type == "counter" else self.name

    def served_by(self, profile: str, labels: Optional[Mapping[str, str]] = None) -> bool:
        """Whether ``profile`` serves this family (``labels``: one series of it, else any)."""
        if PROFILES.index(profile) < PROFILES.index(self.profile):
            return False
        return profile != FLEET or labels is None or all(labels.get(k) in vs for k, vs in self.fleet_only)


DEV = ("vendor", "uuid")
PROC = DEV + ("pid", "namespace", "pod", "container")

DEVICE_INFO = Metric("accelerator_device_info", "gauge", "Identity of an accelerator; always 1.",
                     DEV + ("index", "kind", "model", "pci_address", "numa_node", "driver_version", "profile"),
                     profile=FLEET)
UTILIZATION = Metric("accelerator_utilization_ratio", "gauge", "Compute busy ratio (0..1).", DEV, profile=FLEET)
MEMORY_UTILIZATION = Metric("accelerator_memory_utilization_ratio", "gauge",
                            "Memory-controller busy ratio (0..1).", DEV, profile=FLEET)
MEMORY_USED = Metric("accelerator_memory_used_bytes", "gauge", "Device memory in use, bytes.", DEV, profile=FLEET)
MEMORY_TOTAL = Metric("accelerator_memory_total_bytes", "gauge", "Device memory size, bytes.", DEV, profile=FLEET)
TEMPERATURE = Metric("accelerator_temperature_celsius", "gauge",
                     "Temperature by sensor (core, memory, board), degrees Celsius.", DEV + ("sensor",), profile=FLEET)
POWER = Metric("accelerator_power_watts", "gauge", "Power draw, watts.", DEV, profile=FLEET)
POWER_LIMIT = Metric("accelerator_power_limit_watts", "gauge", "Enforced power limit, watts.", DEV)
ENERGY = Metric("accelerator_energy_joules_total", "counter",
                "Energy consumed, joules: the vendor's counter (since the driver loaded), else the agent's "
                "integral of power over its cycles (quality derived, since the device's last restart).",
                DEV, profile=FLEET)
CLOCK = Metric("accelerator_clock_hertz", "gauge", "Current clock (compute, memory), hertz.", DEV + ("clock",))
ECC_ERRORS = Metric("accelerator_ecc_errors_total", "counter",
                    "ECC errors by severity (corrected, uncorrected), as the vendor counts them.",
                    DEV + ("severity",), profile=FLEET)
INTERCONNECT = Metric("accelerator_interconnect_bytes_total", "counter",
                      "Bytes over device interconnects by link type and direction.",
                      DEV + ("link_type", "direction"), profile=FLEET)
FAULT_EVENTS = Metric("accelerator_fault_events_total", "counter",
                      "Vendor fault events seen since the agent started.", DEV + ("code", "action"), profile=FLEET)
FAULT_LAST = Metric("accelerator_fault_last_timestamp_seconds", "gauge",
                    "Unix time of the latest event of a fault code.", DEV + ("code", "action"), profile=FLEET)
HEALTH_STATUS = Metric("accelerator_health_status", "gauge",
                       "Health state set: 1 on the current state (ok, degraded, failed, unknown).",
                       DEV + ("state",), profile=FLEET)
HEALTH_REASON = Metric("accelerator_health_reason_info", "gauge",
                       "One series per active health reason; always 1.", DEV + ("code", "reason"), profile=FLEET)
HEALTH_OVERRIDE_UNTIL = Metric("accelerator_health_override_until_timestamp_seconds", "gauge",
                               "Unix time an operator's override of the device's health ends (hetero-exporter "
                               "health override), by the state it holds the device in (ok, failed); absent "
                               "without one.", DEV + ("state",))
FIELD_STATUS = Metric("accelerator_field_status", "gauge",
                      "Quality status of each reading that has no value (unsupported, error, stale); always 1. "
                      "An ok reading is its value series.",
                      DEV + ("field", "status"), profile=FLEET)
QUALITY_INFO = Metric("accelerator_metric_quality_info", "gauge",
                      "Where a field comes from and how it is measured, per vendor: the window a sampled "
                      "value averages over, the step the source reports in, the documented error bound; always 1.",
                      ("vendor", "field", "source", "method", "window_seconds", "resolution", "error_bound"),
                      profile=FLEET)
COMPUTE_UNITS = Metric("accelerator_compute_units", "gauge",
                       "Compute capacity relative to the reference device of the profiles.", DEV)
COST_WEIGHT = Metric("accelerator_cost_weight", "gauge", "Relative cost weight from the profile.", DEV)
PROCESS_MEMORY = Metric("accelerator_process_memory_used_bytes", "gauge",
                        "Device memory used by a process, bytes.", PROC)
PROCESS_UTILIZATION = Metric("accelerator_process_utilization_ratio", "gauge",
                             "Compute busy ratio attributed to a process (0..1).", PROC)
ALLOCATION = Metric("accelerator_allocation_info", "gauge",
                    "Device allocated to a container by the kubelet; always 1.",
                    DEV + ("namespace", "pod", "container"), profile=FLEET)
PRICE_PER_HOUR = Metric("accelerator_price_per_hour", "gauge",
                        "Price of the device per hour, in the currency of accelerator_finops_info; "
                        "basis=configured (priced in finops.prices) or cost-weight (reference price x "
                        "the profile's cost weight). Partition children are priced on their parent.",
                        DEV + ("basis",), profile=FLEET)
FINOPS_INFO = Metric("accelerator_finops_info", "gauge",
                     "Currency of the prices and the reference profile model; always 1.",
                     ("currency", "reference"), profile=FLEET)
ALLOCATION_SHARE = Metric("accelerator_allocation_share_ratio", "gauge",
                          "Share of the device a container holds (1 for a whole device; shared devices "
                          "split by memory used; MIG children on the parent's uuid); sums to at most 1.",
                          DEV + ("namespace", "pod", "container"), profile=FLEET)
CONTAINER_ENERGY = Metric("accelerator_container_energy_joules_total", "counter",
                          "Energy of the device charged to a container since the device's energy run began, "
                          "joules: each cycle's increment times the container's allocation share.",
                          DEV + ("namespace", "pod", "container"), profile=FLEET)
UNATTRIBUTED_ENERGY = Metric("accelerator_unattributed_energy_joules_total", "counter",
                             "Energy of the device no container's share explains, joules (no holder, shares "
                             "under 1, what its counter held when the agent first saw it); with the "
                             "containers' it equals the device's.", DEV, profile=FLEET)
UNATTRIBUTED_MEMORY = Metric("accelerator_unattributed_memory_bytes", "gauge",
                             "Device memory in use that no reported process explains, bytes.", DEV, profile=FLEET)
ATTRIBUTION_SOURCE_UP = Metric("accelerator_attribution_source_up", "gauge",
                               "1 when an attribution source (procfs, pod-cache, podresources) "
                               "answered its last refresh.", ("source",), profile=FLEET)
ATTRIBUTION_SOURCE_STALE = Metric("accelerator_attribution_source_stale", "gauge",
                                  "1 when an attribution source serves what it last knew (e.g. "
                                  "pod-cache with the Kubernetes API unreachable).", ("source",), profile=FLEET)
ATTRIBUTION_SOURCE_LAST_SUCCESS = Metric("accelerator_attribution_source_last_success_timestamp_seconds",
                                         "gauge", "Unix time of an attribution source's last "
                                         "successful refresh.", ("source",), profile=FLEET)
ATTRIBUTION_SOURCE_ITEMS = Metric("accelerator_attribution_source_items", "gauge",
                                  "What an attribution source holds (pods, allocated devices, "
                                  "cached pids).", ("source",), profile=FLEET)
DEVICES_EXPECTED = Metric("accelerator_devices_expected", "gauge",
                          "Accelerators of a vendor on the PCI bus.", ("vendor",), profile=FLEET)
DEVICES_PRESENT = Metric("accelerator_devices_present", "gauge",
                         "Accelerators of a vendor that its tool reports.", ("vendor",), profile=FLEET)
DEVICES_REMOVED = Metric("accelerator_devices_removed_total", "counter",
                         "Remembered accelerators forgotten as removed: from an earlier boot, on neither "
                         "the PCI bus nor their tool.", ("vendor",), profile=FLEET)
COLLECTOR_SUCCESS = Metric("accelerator_collector_success", "gauge",
                           "1 when the collector's last cycle succeeded.", ("collector",), profile=FLEET)
COLLECTOR_DURATION = Metric("accelerator_collector_duration_seconds", "gauge",
                            "Duration of the collector's last cycle, seconds.", ("collector",), profile=FLEET)
COLLECTOR_LAST_SUCCESS = Metric("accelerator_collector_last_success_timestamp_seconds", "gauge",
                                "Unix time of the collector's last successful cycle.", ("collector",), profile=FLEET)
COLLECTOR_ERRORS = Metric("accelerator_collector_errors_total", "counter",
                          "Failed cycles by kind (unavailable, timeout, late, busy, parse, exception).",
                          ("collector", "kind"), profile=FLEET)
COLLECTOR_ERROR_INFO = Metric("accelerator_collector_error_info", "gauge",
                              "Why the collector's last cycle failed; always 1, absent on success.",
                              ("collector", "kind", "reason"), profile=FLEET)
TOOL_PROCESSES_KILLED = Metric("accelerator_tool_processes_killed_total", "counter",
                               "Processes of vendor-tool calls killed past the deadline outside the call's "
                               "process group (a daemon the tool forked with setsid).", (), profile=FLEET)
TLS_CERTIFICATE_EXPIRY = Metric("accelerator_tls_certificate_expiry_timestamp_seconds", "gauge",
                                "Unix time the served TLS certificate (--web.config.file) expires; absent "
                                "without TLS or where its dates cannot be read.", (), profile=FLEET)
EXPORT_FAILURES = Metric("accelerator_export_failures_total", "counter",
                         "Exports to a pipeline (otlp, nvsentinel) that failed or were dropped; 0 from the start "
                         "for each configured exporter.", ("exporter",), profile=FLEET)
# The local health stream (issue 38 §5, health/act/stream/, config health_stream)
HEALTH_STREAM_CLIENTS = Metric("accelerator_health_stream_clients", "gauge",
                               "Clients watching the local health stream, by stream (health: WatchDeviceHealth, "
                               "events: WatchDeviceEvents).", ("stream",), profile=FLEET)
HEALTH_STREAM_MESSAGES_DROPPED = Metric(
    "accelerator_health_stream_messages_dropped_total", "counter",
    "Updates of the local health stream a client did not get, by stream and reason: superseded (a slow reader "
    "got the device's later state instead), slow-reader (queued for a client dropped for falling behind), "
    "stalled (queued for a client dropped for reading nothing), untracked (episodes past the bound).",
    ("stream", "reason"), profile=FLEET)
HEALTH_STREAM_CLIENTS_DROPPED = Metric(
    "accelerator_health_stream_clients_dropped_total", "counter",
    "Clients of the local health stream dropped or refused, by stream and reason: slow-reader (its event "
    "queue overflowed), stalled (read nothing for stall_seconds), refused (past max_clients).",
    ("stream", "reason"), profile=FLEET)
SNAPSHOT_AGE = Metric("accelerator_snapshot_age_seconds", "gauge",
                      "Seconds since the snapshot being served was taken.", (), profile=FLEET)
HEALTH_ACTIONS = Metric("accelerator_health_actions_total", "counter",
                        "Kubernetes actions taken by the health loop (taint, untaint, condition, "
                        "event, cordon) by result.", ("action", "result"), profile=FLEET)
HEALTH_BUDGET_EXHAUSTED = Metric("accelerator_health_budget_exhausted", "gauge",
                                 "1 while the blast-radius budget refuses to taint this node.", (), profile=FLEET)
HEALTH_BUDGET_NODES = Metric("accelerator_health_budget_nodes", "gauge",
                             "Accelerator nodes seen at the last budget check, by state (total, tainted).",
                             ("state",), profile=FLEET)
HEALTH_NODE_UNHEALTHY = Metric("accelerator_health_node_unhealthy", "gauge",
                               "1 when the node policy finds the node unhealthy (whatever the mode).", (),
                               profile=FLEET)
HEALTH_FOREIGN_OBJECTS = Metric("accelerator_health_foreign_objects", "gauge",
                                 "Objects under the health loop's own names (its NodeFeature, taint slot "
                                 "Leases) that another writer holds or changed, at the last check, by kind; "
                                 "left alone or reclaimed, and reported in an event.", ("kind",), profile=FLEET)
HEALTH_KUBERNETES_UP = Metric("accelerator_health_kubernetes_up", "gauge",
                              "1 when the health loop's last Kubernetes round trip succeeded; 0 also in "
                              "dry-run or enforce mode without cluster access; absent in observe mode.", (),
                              profile=FLEET)
HEALTH_PROMOTIONS = Metric("accelerator_health_promotions_total", "counter",
                           "Devices whose fault code was promoted (health.promote: N occurrences in a window) "
                           "since the agent started, by vendor, code and the state it promoted to.",
                           ("vendor", "code", "to"), profile=FLEET)
# The software the devices need (issue 38 §4, health/plan/stack.py)
STACK_COMPONENT_UP = Metric("accelerator_stack_component_up", "gauge",
                            "1 when a vendor's plugin pods on this node are all Ready and none crash-loops, 0 "
                            "otherwise, at the health loop's last read, by vendor and component (device-plugin, "
                            "dra-kubelet-plugin as found; plugins: 0 when none of the vendor's runs); only "
                            "vendors with devices here and published plugin selectors.",
                            ("vendor", "component"), profile=FLEET)

# Device memory health, PCIe link, clock-event reasons, interconnect links (issue 3)
ECC_VOLATILE_ERRORS = Metric("accelerator_ecc_volatile_errors_total", "counter",
                             "ECC errors since the driver loaded, by severity (corrected, uncorrected).",
                             DEV + ("severity",))
RETIRED_PAGES = Metric("accelerator_memory_retired_pages", "gauge",
                       "Device memory pages retired, by cause (single_bit, double_bit).", DEV + ("cause",))
RETIREMENT_PENDING = Metric("accelerator_memory_retirement_pending", "gauge",
                            "1 while a page retirement waits for a driver reload / device reset.", DEV)
REMAPPED_ROWS = Metric("accelerator_memory_remapped_rows", "gauge",
                       "Device memory rows remapped, by cause (correctable, uncorrectable).", DEV + ("cause",))
REMAP_PENDING = Metric("accelerator_memory_remap_pending", "gauge",
                       "1 while a row remap waits for a device reset.", DEV)
REMAP_FAILED = Metric("accelerator_memory_remap_failed", "gauge",
                      "1 when a row remap failed (no spare rows left).", DEV, profile=FLEET)
PCIE_GENERATION = Metric("accelerator_pcie_link_generation", "gauge", "Current PCIe link generation.", DEV)
PCIE_GENERATION_MAX = Metric("accelerator_pcie_link_generation_max", "gauge",
                             "Highest PCIe generation the device and its slot support.", DEV)
PCIE_WIDTH = Metric("accelerator_pcie_link_width_lanes", "gauge", "Current PCIe link width, lanes.", DEV, profile=FLEET)
PCIE_WIDTH_MAX = Metric("accelerator_pcie_link_width_max_lanes", "gauge",
                        "Widest PCIe link the device and its slot support, lanes.", DEV, profile=FLEET)
PCIE_REPLAYS = Metric("accelerator_pcie_replay_errors_total", "counter",
                      "PCIe link-level replays (retransmitted TLPs).", DEV)
CLOCK_THROTTLE = Metric("accelerator_clock_throttle_active", "gauge",
                        "1 while a reason holds the clocks down (power_cap, hw_thermal, sw_thermal, "
                        "hw_slowdown, hw_power_brake, sync_boost, idle, application_setting, display_setting).",
                        DEV + ("reason",))
INTERCONNECT_LINKS = Metric("accelerator_interconnect_links", "gauge",
                            "Device interconnect links by type and state (active, inactive).",
                            DEV + ("link_type", "state"))

# Parity with the vendors' own exporters (issue 27): engines, profiling, the readings collectors had dropped
ENGINE_UTILIZATION = Metric("accelerator_engine_utilization_ratio", "gauge",
                            "Busy share of an engine over the window (compute, tensor, fp64, fp32, fp16, integer, "
                            "memory = DRAM bandwidth, encoder, decoder, jpeg, ofa, vector, aicpu).", DEV + ("engine",),
                            profile=FLEET, fleet_only=(("engine", ("compute", "tensor", "memory")),))
COMPUTE_OCCUPANCY = Metric("accelerator_compute_occupancy_ratio", "gauge",
                           "Resident warps over the maximum the SMs hold (NVML GPM SM occupancy).", DEV)
GRAPHICS_ACTIVE = Metric("accelerator_graphics_engine_active_ratio", "gauge",
                         "Share of time the graphics (compute) engine is active (NVML GPM).", DEV)
TENSOR_PIPE = Metric("accelerator_tensor_pipe_utilization_ratio", "gauge",
                     "Busy share of one tensor pipe (dfma, hmma, imma; any pipe is engine=tensor).", DEV + ("pipe",))
PCIE_THROUGHPUT = Metric("accelerator_pcie_throughput_bytes_per_second", "gauge",
                         "PCIe throughput by direction (rx, tx), bytes per second.", DEV + ("direction",),
                         profile=FLEET)
PCIE_BANDWIDTH = Metric("accelerator_pcie_bandwidth_bytes_per_second", "gauge",
                        "PCIe traffic both ways together, bytes per second (where no direction is reported).", DEV,
                        profile=FLEET)
PCIE_LINK_SPEED = Metric("accelerator_pcie_link_speed_transfers_per_second", "gauge",
                         "Current PCIe link speed per lane, transfers per second.", DEV)
PCIE_REPLAY_ROLLOVERS = Metric("accelerator_pcie_replay_rollovers_total", "counter",
                               "PCIe replay-counter rollovers.", DEV)
PCIE_NAKS = Metric("accelerator_pcie_naks_total", "counter", "PCIe NAKs by direction (sent, received).",
                   DEV + ("direction",))
PCIE_RECOVERIES = Metric("accelerator_pcie_recoveries_total", "counter",
                         "PCIe link transitions from L0 to recovery.", DEV)
INTERCONNECT_THROUGHPUT = Metric("accelerator_interconnect_throughput_bytes_per_second", "gauge",
                                 "Interconnect throughput by link type and direction, where a vendor reports a "
                                 "rate, not a counter; bytes per second.", DEV + ("link_type", "direction"),
                                 profile=FLEET)
INTERCONNECT_SPEED = Metric("accelerator_interconnect_speed_bytes_per_second", "gauge",
                            "Rated speed of a device's active links of one type together, one direction, bytes "
                            "per second (a link down or trained slower lowers it).", DEV + ("link_type",))
PARTITIONS = Metric("accelerator_partitions", "gauge",
                    "Partitions the device is split into by domain: compute (AMD SPX 1, DPX 2, QPX 4, CPX one "
                    "per XCD) and memory (AMD NPS1, NPS2, NPS4, NPS8).", DEV + ("domain",))
FAN_SPEED = Metric("accelerator_fan_speed_ratio", "gauge", "Fan speed as a share of its maximum (0..1).", DEV)
MEMORY_USED_RATIO = Metric("accelerator_memory_used_ratio", "gauge",
                           "Device memory in use as a share, where the tool prints no byte counts.", DEV)
MEMORY_RESERVED = Metric("accelerator_memory_reserved_bytes", "gauge", "Device memory the driver reserves, bytes.", DEV)
MEMORY_REGION = Metric("accelerator_memory_region_bytes", "gauge",
                       "Other memories of a device (ddr, virtual, l3) by state (used, total), bytes.",
                       DEV + ("memory", "state"))
HUGEPAGES = Metric("accelerator_hugepages", "gauge", "Host huge pages the device's driver uses, by state (used, total).",
                   DEV + ("state",))
POWER_MANAGEMENT_LIMIT = Metric("accelerator_power_management_limit_watts", "gauge",
                                "Power-management limit set, watts (the enforced limit may be lower).", DEV)
CLOCK_MAX = Metric("accelerator_clock_max_hertz", "gauge", "Maximum clock (compute, memory), hertz.", DEV + ("clock",))
ECC_DEFERRED = Metric("accelerator_ecc_deferred_errors_total", "counter",
                      "Deferred (poisoned, not yet consumed) ECC errors.", DEV)
ECC_BLOCK_ERRORS = Metric("accelerator_ecc_block_errors_total", "counter",
                          "ECC errors per RAS block by severity (corrected, uncorrected, deferred).",
                          DEV + ("block", "severity"))
CONTROL_CPU = Metric("accelerator_control_cpu_utilization_ratio", "gauge",
                     "Busy share of the device's control CPU (Ascend).", DEV)

# The kernel log follower (issue 14, hetero_exporter/sources/kernel_log.py)
KERNEL_LOG_UP = Metric("accelerator_kernel_log_up", "gauge",
                       "1 when the kernel log (/dev/kmsg or the configured file) is being followed.", (), profile=FLEET)
KERNEL_LOG_RECORDS = Metric("accelerator_kernel_log_records_total", "counter",
                            "Kernel log records read since the agent started.", (), profile=FLEET)
KERNEL_LOG_EVENTS = Metric("accelerator_kernel_log_events_total", "counter",
                           "Device faults the kernel log stated, by vendor and code.", ("vendor", "code"),
                           profile=FLEET)
KERNEL_LOG_DROPPED = Metric("accelerator_kernel_log_dropped_total", "counter",
                            "Kernel log records or events lost: overwritten in the ring buffer before "
                            "they were read (estimated under syslog(2)), past the bounded queue in a storm "
                            "(queue-full), info-only records past the rule budget (rate-limited), events "
                            "of a device not seen in time (unresolved), or counted under code other past "
                            "a device's code bound (code-cap).", ("reason",), profile=FLEET)
KERNEL_LOG_LAG = Metric("accelerator_kernel_log_lag_seconds", "gauge",
                        "Seconds the follower has been behind the kernel log (0 when caught up).", (), profile=FLEET)

ALL: tuple[Metric, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Metric))
BY_NAME: dict[str, Metric] = {m.name: m for m in ALL}



@functools.lru_cache(maxsize=4096)  # per reading name, for every build of the families (the scrape path)
def metric_for_field(field: str) -> Optional[tuple[Metric, tuple[str, ...]]]:
    """The metric a reading field is exported as, with its extra label values (in the metric's
    label order), or None for a field the catalogue (model/fields.py) marks JSON-only or does
    not declare."""
    found = F.lookup(field)
    if found is None or found[0].family is None:
        return None
    metric = BY_NAME[found[0].family]
    values = found[1]
    return metric, tuple(values[label] for label in metric.labels[2:])
