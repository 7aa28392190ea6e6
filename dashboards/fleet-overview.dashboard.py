"""Fleet overview: how many accelerators of which vendor and model, their health, load, memory,
power and faults. The first dashboard to open.

The "Fleet health" row computes from the raw series what the recording rules of alerts/rules.py
(group hetero-exporter.fleet, docs/fleet-rules.md) record, so that the node and vendor variables
filter it: the healthy share (devices in state ok over the devices expected: the PCI bus's count, or
the tool's where that is more), and the number of nodes per fault code within 10 minutes, which
AcceleratorFaultOnManyNodes alerts on at 5."""

import attr
from panels import (Q, Section, build_dashboard, by_device, count_or_zero, in_state, increase, sel, stat,
                    table, timeseries)

from hetero_exporter.model import names as N

VM = "{{vendor}} {{model}}"

core_temp = sel(N.TEMPERATURE, 'sensor="core"')
not_ok = sel(N.HEALTH_STATUS, 'state!="ok"')
missing = f"sum(clamp_min({sel(N.DEVICES_EXPECTED)} - {sel(N.DEVICES_PRESENT)}, 0)) or vector(0)"

# The fleet health SLI, as alerts/rules.py records it (NODE_EXPECTED, NODE_HEALTHY, VENDOR_SLI, CLUSTER_SLI).
_expected, _present = sel(N.DEVICES_EXPECTED), sel(N.DEVICES_PRESENT)
expected_nv = f"max by (node, vendor) (({_expected} >= {_present}) or {_present} or {_expected})"
_ok = sel(N.HEALTH_STATUS, 'state="ok"')
_ok_nv = f"count by (node, vendor) (max by (node, vendor, uuid) ({_ok}) == 1)"
healthy_nv = f"({_ok_nv} <= {expected_nv}) or ({expected_nv} < {_ok_nv}) or (0 * {expected_nv})"
fleet_sli = f"sum({healthy_nv}) / (sum({expected_nv}) > 0)"
vendor_sli = f"sum by (vendor) ({healthy_nv}) / (sum by (vendor) ({expected_nv}) > 0)"

# Cross-node correlation, as AcceleratorFaultOnManyNodes counts it: nodes per vendor and fault code
# with an event of that code in the last 10 minutes (the latest event's timestamp, or the counter grew).
CORRELATED_NODES = 5
recent = (f"time() - {sel(N.FAULT_LAST)} <= 600"
          f" or increase({sel(N.FAULT_EVENTS)}[10m]) > 0")
nodes_per_code = f"count by (vendor, code) (count by (node, vendor, code) ({recent}))"


def sli_stat(title: str, description: str, expr: str):
    """A share: red below 0.9, orange below 0.98, green from 0.98."""
    steps = [{"color": "red", "value": None}, {"color": "orange", "value": 0.9}, {"color": "green", "value": 0.98}]
    return attr.evolve(stat(title, description, expr, unit="percentunit"), colorMode="background", extraJson={
        "fieldConfig": {"defaults": {"min": 0, "max": 1, "thresholds": {"mode": "absolute", "steps": steps}}}})


dashboard = build_dashboard(
    title="Accelerators / Fleet overview",
    uid="hetero-fleet-overview",
    description="Every accelerator of every vendor in the fleet: inventory, health, load, memory, "
                "power and faults.",
    sections=[
        Section("Fleet", [[
            stat("Accelerators", "Devices reported by the agents.", count_or_zero(sel(N.DEVICE_INFO))),
            stat("Nodes", "Nodes with at least one accelerator.",
                 f"count(count by (node) ({sel(N.DEVICE_INFO)}))"),
            stat("Failed", "Devices whose health state is failed.", count_or_zero(in_state("failed")),
                 red_above=0),
            stat("Degraded", "Devices whose health state is degraded.", count_or_zero(in_state("degraded")),
                 red_above=0),
            stat("Missing from the bus", "Devices the PCI bus shows but the vendor tool does not report.",
                 missing, red_above=0),
            stat("Collectors failing", "Collectors whose last cycle failed.",
                 count_or_zero(f"{sel(N.COLLECTOR_SUCCESS)} == 0"), red_above=0),
        ]]),
        Section("Fleet health", [[
            sli_stat("Healthy share",
                     "The fleet health SLI: devices in health state ok over the devices expected (the PCI "
                     "bus's count per node, or the vendor tool's where that is more), over the selected nodes "
                     "and vendors. Degraded, failed, unknown and devices missing from the tool count against "
                     "it. The cluster-wide recording rule of docs/fleet-rules.md records the same.", fleet_sli),
            timeseries("Healthy share by vendor",
                       "The fleet health SLI per vendor: devices in state ok over devices expected, summed "
                       "over the selected nodes. A vendor with no expected device has no line.",
                       Q(vendor_sli, "{{vendor}}"), Q(fleet_sli, "fleet"), unit="percentunit", max_value=1),
            timeseries("Nodes per fault code (10 min)",
                       f"Nodes on which a device reported the fault code within the last 10 minutes, per vendor "
                       f"and code. {CORRELATED_NODES} or more nodes with the same code raise "
                       "AcceleratorFaultOnManyNodes: a driver, firmware or software rollout rather than broken "
                       "hardware (docs/fleet-rules.md).",
                       Q(nodes_per_code, "{{vendor}} {{code}}"),
                       Q(f"vector({CORRELATED_NODES})", "alert threshold")),
        ]]),
        Section("Inventory and health", [[
            table("Devices by vendor and model",
                  "Count, memory and compute capacity (relative to the profiles' reference device) per model.",
                  Q(f"count by (vendor, model) ({sel(N.DEVICE_INFO)})", "devices"),
                  Q(f"sum by (vendor, model) ({by_device(sel(N.MEMORY_TOTAL))})", "memory"),
                  Q(f"sum by (vendor, model) ({by_device(sel(N.COMPUTE_UNITS))})", "compute units")),
            timeseries("Devices by health state", "Devices in each health state (ok, degraded, failed, unknown).",
                       Q(f"count by (state) ({in_state('.*')})", "{{state}}"), stacked=True),
        ]]),
        Section("Load", [[
            timeseries("Compute utilization", "Mean compute busy ratio per vendor and model.",
                       Q(f"avg by (vendor, model) ({by_device(sel(N.UTILIZATION))})", VM),
                       unit="percentunit", max_value=1),
            timeseries("Memory in use", "Device memory in use over device memory size, per vendor and model.",
                       Q(f"sum by (vendor, model) ({by_device(sel(N.MEMORY_USED))})"
                         f" / sum by (vendor, model) ({by_device(sel(N.MEMORY_TOTAL))})", VM),
                       unit="percentunit", max_value=1),
        ], [
            timeseries("Power", "Power drawn and enforced power limit, summed per vendor and model.",
                       Q(f"sum by (vendor, model) ({by_device(sel(N.POWER))})", VM + " draw"),
                       Q(f"sum by (vendor, model) ({by_device(sel(N.POWER_LIMIT))})", VM + " limit"),
                       unit="watt"),
            timeseries("Hottest core", "Highest core temperature per vendor and model.",
                       Q(f"max by (vendor, model) ({by_device(core_temp)})", VM),
                       unit="celsius"),
        ]]),
        Section("Faults", [[
            timeseries("Fault events", "Vendor fault events per vendor, model and fault code.",
                       Q(f"sum by (vendor, model, code) ({by_device(increase(N.FAULT_EVENTS), ('model',))})",
                         VM + " {{code}}"), stacked=True),
            table("Devices not ok", "Devices whose health state is not ok, with where to find them.",
                  Q(by_device(f"{not_ok} == 1",
                              ("model", "index", "pci_address")))),
        ]]),
    ],
)
