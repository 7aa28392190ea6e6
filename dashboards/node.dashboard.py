"""Node drill-down: every device of the chosen nodes with its temperatures, power, clocks,
errors, links and processes."""

from panels import DEVICE_LEGEND, Q, Section, build_dashboard, by_device, increase, rate, sel, table, timeseries

from hetero_exporter.model import names as N

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
        Section("Memory health, PCIe and clocks held down", [[
            timeseries("Retired pages and remapped rows",
                       "Device memory pages retired (single/double bit) and rows remapped (correctable/uncorrectable).",
                       Q(by_device(sel(N.RETIRED_PAGES)), DEV + " retired {{cause}}"),
                       Q(by_device(sel(N.REMAPPED_ROWS)), DEV + " remapped {{cause}}")),
            timeseries("Memory repairs pending or failed",
                       "1 while a page retirement or row remap waits for a reset; 1 when a remap failed (no spare "
                       "rows left: replace the device).",
                       Q(by_device(sel(N.RETIREMENT_PENDING)), DEV + " retirement pending"),
                       Q(by_device(sel(N.REMAP_PENDING)), DEV + " remap pending"),
                       Q(by_device(sel(N.REMAP_FAILED)), DEV + " remap failed"), max_value=1),
            timeseries("ECC errors since the driver loaded", "The volatile ECC counters, by severity.",
                       Q(by_device(sel(N.ECC_VOLATILE_ERRORS)), DEV + " {{severity}}")),
        ], [
            table("PCIe link", "Current and maximum PCIe generation and width per device; a link below its "
                  "width points at the slot or riser (a lower generation at idle is power saving).",
                  Q(by_device(sel(N.PCIE_GENERATION)), "generation"),
                  Q(by_device(sel(N.PCIE_GENERATION_MAX)), "generation max"),
                  Q(by_device(sel(N.PCIE_WIDTH)), "lanes"),
                  Q(by_device(sel(N.PCIE_WIDTH_MAX)), "lanes max")),
            timeseries("PCIe replays", "Link-level retransmissions per second; a steady rate means a bad link.",
                       Q(by_device(rate(N.PCIE_REPLAYS)), DEV), unit="ops"),
            timeseries("Clocks held down", "Devices per reason holding their clocks down (power cap, thermal, "
                       "hardware slowdown, ...).",
                       Q(f"sum by (node, vendor, model, reason) ({by_device(sel(N.CLOCK_THROTTLE))})",
                         "{{node}} {{vendor}} {{model}} {{reason}}"), stacked=True),
            timeseries("Interconnect links", "Links per device, type and state (active, inactive).",
                       Q(by_device(sel(N.INTERCONNECT_LINKS)), DEV + " {{link_type}} {{state}}")),
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
