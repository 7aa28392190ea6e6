"""Fleet overview: how many accelerators of which vendor and model, their health, load, memory,
power and faults. The first dashboard to open."""

from panels import (Q, Section, build_dashboard, by_device, count_or_zero, in_state, increase, sel, stat,
                    table, timeseries)

from hetero_exporter.model import names as N

VM = "{{vendor}} {{model}}"

core_temp = sel(N.TEMPERATURE, 'sensor="core"')
not_ok = sel(N.HEALTH_STATUS, 'state!="ok"')
missing = f"sum(clamp_min({sel(N.DEVICES_EXPECTED)} - {sel(N.DEVICES_PRESENT)}, 0)) or vector(0)"

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
