"""Workloads: accelerator use and cost weight by namespace and pod, across vendors."""

from panels import Q, Section, build_dashboard, by_device, sel, table, timeseries, weighted

from hetero_exporter.model import names as N

NS = "{{namespace}}"
pod_memory = by_device(sel(N.PROCESS_MEMORY), ("model",))
pod_busy = by_device(sel(N.PROCESS_UTILIZATION), ("model",))
allocated = by_device(sel(N.ALLOCATION), ("model",))
POD_KEYS = "namespace, pod, container, vendor, model"
DEVICE_KEYS = "node, vendor, model, index"


def engine(name: str) -> str:
    """One engine's busy share per device (the engine family of names.py)."""
    matcher = 'engine="' + name + '"'
    return f"avg by ({DEVICE_KEYS}) ({by_device(sel(N.ENGINE_UTILIZATION, matcher))})"


dashboard = build_dashboard(
    title="Accelerators / Workloads",
    uid="hetero-workloads",
    description="Who uses the accelerators: device memory, compute, allocated devices and cost weight "
                "by namespace and pod, whatever the vendor. Cost weight and compute units come from the "
                "device profiles, so an hour on an H100 and an hour on a smaller device compare fairly.",
    var_names=("node", "vendor", "model", "namespace"),
    sections=[
        Section("By namespace", [[
            timeseries("Allocated devices", "Devices the kubelet allocated to each namespace, per vendor.",
                       Q(f"count by (namespace, vendor) ({allocated})", NS + " {{vendor}}"), stacked=True),
            timeseries("Allocated cost weight",
                       "Sum of the profile cost weight of the devices allocated to each namespace "
                       "(a shared device counts once per container it is allocated to).",
                       Q(f"sum by (namespace) ({weighted(allocated, N.COST_WEIGHT)})", NS), stacked=True),
            timeseries("Allocated compute units",
                       "Sum of the compute units (relative to the profiles' reference device) allocated to "
                       "each namespace.",
                       Q(f"sum by (namespace) ({weighted(allocated, N.COMPUTE_UNITS)})", NS), stacked=True),
        ], [
            timeseries("Device memory", "Device memory held by the processes of each namespace.",
                       Q(f"sum by (namespace) ({pod_memory})", NS), unit="bytes", stacked=True),
            timeseries("Compute in use", "Compute busy ratio of each namespace's processes, summed over devices "
                       "(1 = one device fully busy).",
                       Q(f"sum by (namespace) ({pod_busy})", NS), stacked=True),
            timeseries("Cost-weighted compute in use",
                       "Busy ratio times the device's cost weight, summed per namespace.",
                       Q(f"sum by (namespace) ({weighted(pod_busy, N.COST_WEIGHT)})", NS), stacked=True),
        ]]),
        Section("Profiling", [[
            timeseries("SM active and occupancy",
                       "Share of SMs busy (engine=compute) and resident warps over the maximum (occupancy), per "
                       "device: NVML GPM on Hopper and later, amdsmi and the NPU tools where they report it.",
                       Q(engine("compute"), "active {{node}} {{vendor}} {{index}}"),
                       Q(f"avg by ({DEVICE_KEYS}) ({by_device(sel(N.COMPUTE_OCCUPANCY))})",
                         "occupancy {{node}} {{vendor}} {{index}}"), unit="percentunit"),
            timeseries("Tensor and DRAM",
                       "Tensor-pipe busy share (any tensor op) and DRAM bandwidth in use over its maximum.",
                       Q(engine("tensor"), "tensor {{node}} {{vendor}} {{index}}"),
                       Q(engine("memory"), "DRAM {{node}} {{vendor}} {{index}}"), unit="percentunit"),
            timeseries("PCIe and NVLink throughput",
                       "Bytes per second over PCIe and the device interconnect (rates the vendor reports).",
                       Q(f"sum by (node, vendor, direction) ({by_device(sel(N.PCIE_THROUGHPUT))})",
                         "PCIe {{direction}} {{node}} {{vendor}}"),
                       Q(f"sum by (node, vendor, link_type, direction) ({by_device(sel(N.INTERCONNECT_THROUGHPUT))})",
                         "{{link_type}} {{direction}} {{node}}"), unit="Bps"),
        ], [
            timeseries("Engines by vendor",
                       "Every engine each vendor reports, one vocabulary (compute, tensor, fp64/32/16, integer, "
                       "memory, encoder, decoder, jpeg, ofa, vector, aicpu): the mean over the devices.",
                       Q(f"avg by (vendor, engine) ({by_device(sel(N.ENGINE_UTILIZATION))})", "{{vendor}} {{engine}}"),
                       unit="percentunit"),
        ]]),
        Section("By pod", [[
            table("Pods", "Per pod and container: allocated devices, their cost weight, device memory and compute "
                  "in use.",
                  Q(f"count by ({POD_KEYS}) ({allocated})", "devices"),
                  Q(f"sum by ({POD_KEYS}) ({weighted(allocated, N.COST_WEIGHT)})", "cost weight"),
                  Q(f"sum by ({POD_KEYS}) ({pod_memory})", "memory"),
                  Q(f"sum by ({POD_KEYS}) ({pod_busy})", "compute")),
        ], [
            timeseries("Device memory by pod", "Device memory held by each pod's processes.",
                       Q(f"sum by (namespace, pod) ({pod_memory})", "{{namespace}}/{{pod}}"), unit="bytes"),
            timeseries("Memory no pod explains",
                       "Device memory in use that no reported process explains, per node and vendor: "
                       "processes outside the node's pid namespace view, or leaks.",
                       Q(f"sum by (node, vendor, model) ({by_device(sel(N.UNATTRIBUTED_MEMORY))})",
                         "{{node}} {{vendor}} {{model}}"), unit="bytes"),
        ]]),
    ],
)
