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
        ], [
            timeseries("Graphics engine and tensor pipes",
                       "Share of time the graphics (compute) engine is active, and each tensor pipe's busy share "
                       "(dfma, hmma, imma), from NVML GPM where it is on.",
                       Q(by_device(sel(N.GRAPHICS_ACTIVE)), DEV + " graphics"),
                       Q(by_device(sel(N.TENSOR_PIPE)), DEV + " {{pipe}}"), unit="percentunit", max_value=1),
            timeseries("Memory used as a share",
                       "Device memory in use as a share, where the vendor tool prints no byte counts.",
                       Q(by_device(sel(N.MEMORY_USED_RATIO)), DEV), unit="percentunit", max_value=1),
            timeseries("Other memories", "A device's other memories (ddr, virtual, l3) by state, and the device "
                       "memory its driver reserves.",
                       Q(by_device(sel(N.MEMORY_REGION)), DEV + " {{memory}} {{state}}"),
                       Q(by_device(sel(N.MEMORY_RESERVED)), DEV + " reserved"), unit="bytes"),
            timeseries("Host huge pages", "Host huge pages the device's driver uses, and how many it has.",
                       Q(by_device(sel(N.HUGEPAGES)), DEV + " {{state}}")),
        ]]),
        Section("Temperature, power and clocks", [[
            timeseries("Temperature", "Temperature per device and sensor (core, memory, board).",
                       Q(by_device(sel(N.TEMPERATURE)), DEV + " {{sensor}}"), unit="celsius"),
            timeseries("Power", "Power drawn and enforced power limit per device.",
                       Q(by_device(sel(N.POWER)), DEV),
                       Q(by_device(sel(N.POWER_LIMIT)), DEV + " limit"),
                       Q(by_device(sel(N.POWER_MANAGEMENT_LIMIT)), DEV + " management limit"), unit="watt"),
            timeseries("Fan speed", "Fan speed as a share of its maximum, where the device has a fan it reports.",
                       Q(by_device(sel(N.FAN_SPEED)), DEV), unit="percentunit", max_value=1),
            timeseries("Control CPU", "Busy share of the device's own control CPU (Ascend).",
                       Q(by_device(sel(N.CONTROL_CPU)), DEV), unit="percentunit", max_value=1),
        ], [
            timeseries("Power from the energy counter",
                       "Mean power over the window derived from the energy counter, where the vendor has one; "
                       "it should track the power reading.",
                       Q(by_device(rate(N.ENERGY)), DEV), unit="watt"),
            timeseries("Clocks", "Compute and memory clocks per device, and their maximum.",
                       Q(by_device(sel(N.CLOCK)), DEV + " {{clock}}"),
                       Q(by_device(sel(N.CLOCK_MAX)), DEV + " {{clock}} max"), unit="hertz"),
        ]]),
        Section("Errors and links", [[
            timeseries("ECC errors", "ECC errors counted in each interval, corrected and uncorrected.",
                       Q(by_device(increase(N.ECC_ERRORS)), DEV + " {{severity}}")),
            timeseries("Interconnect throughput", "Bytes per second over each link type and direction.",
                       Q(f"sum by (node, uuid, vendor, model, index, link_type, direction) "
                         f"({by_device(rate(N.INTERCONNECT))})", DEV + " {{link_type}} {{direction}}"),
                       unit="Bps"),
            timeseries("Interconnect rated speed", "Rated speed of each device's active links of one type "
                       "together, one direction; a link down or trained slower lowers it.",
                       Q(by_device(sel(N.INTERCONNECT_SPEED)), DEV + " {{link_type}}"), unit="Bps"),
        ], [
            timeseries("ECC errors by RAS block", "ECC errors counted in each interval per RAS block and severity, "
                       "and deferred (poisoned, not yet consumed) errors.",
                       Q(by_device(increase(N.ECC_BLOCK_ERRORS)), DEV + " {{block}} {{severity}}"),
                       Q(by_device(increase(N.ECC_DEFERRED)), DEV + " deferred")),
            table("Partitions", "Partitions each device is split into, by domain (compute: SPX, DPX, QPX, CPX; "
                  "memory: NPS1 to NPS8).",
                  Q(by_device(sel(N.PARTITIONS)))),
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
                  Q(by_device(sel(N.PCIE_WIDTH_MAX)), "lanes max"),
                  Q(by_device(sel(N.PCIE_LINK_SPEED)), "transfers/s a lane")),
            timeseries("PCIe replays", "Link-level retransmissions per second; a steady rate means a bad link.",
                       Q(by_device(rate(N.PCIE_REPLAYS)), DEV), unit="ops"),
            timeseries("Clocks held down", "Devices per reason holding their clocks down (power cap, thermal, "
                       "hardware slowdown, ...).",
                       Q(f"sum by (node, vendor, model, reason) ({by_device(sel(N.CLOCK_THROTTLE))})",
                         "{{node}} {{vendor}} {{model}} {{reason}}"), stacked=True),
            timeseries("Interconnect links", "Links per device, type and state (active, inactive).",
                       Q(by_device(sel(N.INTERCONNECT_LINKS)), DEV + " {{link_type}} {{state}}")),
        ], [
            timeseries("PCIe link errors", "NAKs by direction, transitions from L0 to recovery and replay-counter "
                       "rollovers, per second; any steady rate points at the slot, riser or device.",
                       Q(by_device(rate(N.PCIE_NAKS)), DEV + " NAK {{direction}}"),
                       Q(by_device(rate(N.PCIE_RECOVERIES)), DEV + " recovery"),
                       Q(by_device(rate(N.PCIE_REPLAY_ROLLOVERS)), DEV + " replay rollover"), unit="ops"),
            timeseries("PCIe traffic, both ways", "PCIe traffic both ways together, where the vendor reports no "
                       "direction.",
                       Q(by_device(sel(N.PCIE_BANDWIDTH)), DEV), unit="Bps"),
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
