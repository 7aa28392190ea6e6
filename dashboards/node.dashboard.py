"""Node drill-down: every device of the chosen nodes with its temperatures, power, clocks,
errors, links and processes."""

from panels import DEVICE_LEGEND, Q, Section, build_dashboard, by_device, increase, rate, sel, table, timeseries

from hetero_exporter.exposition import names as N

DEV = DEVICE_LEGEND
PROC = DEV + " {{namespace}}/{{pod}} pid {{pid}}"

dashboard = build_dashboard(
    title="Accelerators / Node",
    uid="hetero-node",
    description="Every accelerator of the selected nodes, one line per device.",
    var_names=("node", "vendor", "model", "namespace"),
    sections=[
        Section("Devices", [[
            table("Devices", "Identity of every device: index, model, uuid, PCI address, NUMA node, driver, profile.",
                  Q(sel(N.DEVICE_INFO))),
            table("Health", "Current health state of every device.",
                  Q(by_device(f"{sel(N.HEALTH_STATUS)} == 1"))),
        ]], height=7),
        Section("Load and memory", [[
            timeseries("Compute utilization", "Compute busy ratio per device.",
                       Q(by_device(sel(N.UTILIZATION)), DEV), unit="percentunit", max_value=1),
            timeseries("Memory-controller utilization", "Memory-controller busy ratio per device.",
                       Q(by_device(sel(N.MEMORY_UTILIZATION)), DEV), unit="percentunit", max_value=1),
            timeseries("Memory used", "Device memory in use per device, and the device's memory size.",
                       Q(by_device(sel(N.MEMORY_USED)), DEV),
                       Q(by_device(sel(N.MEMORY_TOTAL)), DEV + " size"), unit="bytes"),
        ]]),
        Section("Temperature, power and clocks", [[
            timeseries("Temperature", "Temperature per device and sensor (core, memory, board).",
                       Q(by_device(sel(N.TEMPERATURE)), DEV + " {{sensor}}"), unit="celsius"),
            timeseries("Power", "Power drawn and enforced power limit per device.",
                       Q(by_device(sel(N.POWER)), DEV),
                       Q(by_device(sel(N.POWER_LIMIT)), DEV + " limit"), unit="watt"),
        ], [
            timeseries("Power from the energy counter",
                       "Mean power over the window derived from the energy counter, where the vendor has one; "
                       "it should track the power reading.",
                       Q(by_device(rate(N.ENERGY)), DEV), unit="watt"),
            timeseries("Clocks", "Compute and memory clocks per device.",
                       Q(by_device(sel(N.CLOCK)), DEV + " {{clock}}"), unit="hertz"),
        ]]),
        Section("Errors and links", [[
            timeseries("ECC errors", "ECC errors counted in each interval, corrected and uncorrected.",
                       Q(by_device(increase(N.ECC_ERRORS)), DEV + " {{severity}}")),
            timeseries("Interconnect throughput", "Bytes per second over each link type and direction.",
                       Q(f"sum by (node, uuid, vendor, model, index, link_type, direction) "
                         f"({by_device(rate(N.INTERCONNECT))})", DEV + " {{link_type}} {{direction}}"),
                       unit="Bps"),
        ]]),
        Section("Processes", [[
            table("Processes", "Processes on the devices with the pod they belong to and the memory they hold.",
                  Q(by_device(sel(N.PROCESS_MEMORY)))),
        ], [
            timeseries("Process memory", "Device memory held per process.",
                       Q(by_device(sel(N.PROCESS_MEMORY)), PROC), unit="bytes", stacked=True),
            timeseries("Process utilization", "Compute busy ratio per process, where the vendor reports it.",
                       Q(by_device(sel(N.PROCESS_UTILIZATION)), PROC), unit="percentunit"),
            timeseries("Unattributed memory", "Device memory in use that no reported process explains.",
                       Q(by_device(sel(N.UNATTRIBUTED_MEMORY)), DEV), unit="bytes"),
        ]]),
    ],
)
