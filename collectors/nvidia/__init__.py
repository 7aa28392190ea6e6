"""NVIDIA GPUs: NVML (nvidia-ml-py) with events, processes, topology and MIG; ``nvidia-smi -q -x``
as the fallback and for ``parse nvidia-smi``."""

from hetero_exporter.model.spec import CollectorEntry, PluginSelector, ResourceName, ToolSpec, VendorSpec

_DP = "NVIDIA k8s-device-plugin README (nvidia.com/gpu, MIG strategy 'mixed', time-slicing 'renameByDefault')"
_HAMI = "HAMi docs: nvidia.com/gpumem (MiB per device)"

SPEC = VendorSpec(
    name="nvidia", kind="gpu", display_name="NVIDIA", package=__name__,
    pci_vendor_ids=(0x10DE,),
    model_strip=r"^(NVIDIA|Tesla|Quadro|GeForce)\s+",
    resources=(
        ResourceName(r"nvidia\.com/gpu", "nvidia.com/gpu", "devices", source=_DP),
        ResourceName(r"nvidia\.com/gpu\.shared", "nvidia.com/gpu", "slices", source=_DP),
        ResourceName(r"nvidia\.com/mig-.+", "nvidia.com/gpu", "slices", ("mig",), source=_DP),
        ResourceName(r"nvidia\.com/gpumem", "nvidia.com/gpu", "memory_mib", source=_HAMI),
    ),
    resource_domains=("nvidia.com",),
    # Device plugin and DRA kubelet plugin pods (stack health): the pod template labels of
    # NVIDIA/k8s-device-plugin's Helm chart (templates/_helpers.tpl templateLabels:
    # app.kubernetes.io/name = the chart name), its static manifest
    # (deployments/static/nvidia-device-plugin.yml: name=nvidia-device-plugin-ds), the GPU
    # Operator's (assets/state-device-plugin/0500_daemonset.yaml: app=nvidia-device-plugin-daemonset),
    # and NVIDIA/k8s-dra-driver-gpu's kubelet plugin (templates/_helpers.tpl selectorLabels:
    # <chart>-component=kubelet-plugin, charts nvidia-dra-driver-gpu and dra-driver-nvidia-gpu).
    plugin_pods=(
        PluginSelector("device-plugin", "app.kubernetes.io/name=nvidia-device-plugin", "NVIDIA/k8s-device-plugin Helm chart"),
        PluginSelector("device-plugin", "name=nvidia-device-plugin-ds", "NVIDIA/k8s-device-plugin static manifest"),
        PluginSelector("device-plugin", "app=nvidia-device-plugin-daemonset", "NVIDIA/gpu-operator"),
        PluginSelector("dra-kubelet-plugin", "nvidia-dra-driver-gpu-component=kubelet-plugin",
                       "NVIDIA/k8s-dra-driver-gpu Helm chart nvidia-dra-driver-gpu"),
        PluginSelector("dra-kubelet-plugin", "dra-driver-nvidia-gpu-component=kubelet-plugin",
                       "NVIDIA/k8s-dra-driver-gpu Helm chart dra-driver-nvidia-gpu"),
    ),
    device_resource=lambda model: "nvidia.com/gpu",
    id_prefixes=("GPU-", "MIG-"),
    plugin_device_id=lambda d: d.uuid,  # the device plugin names GPUs by uuid (GPU-...::N replicas)
    uuid_prefix="GPU-",
    volcano_gpu_indices=True,
    fabric_links=("nvlink", "nvswitch"),
    # nvidia-smi and libnvidia-ml.so.1 (NVML) come into the container through the NVIDIA
    # container toolkit (runtimeClassName: nvidia, or NVIDIA_VISIBLE_DEVICES=all with
    # NVIDIA_DRIVER_CAPABILITIES=utility: nvidia-container-toolkit docs, "Driver capabilities"):
    # the driver's libraries live in the host's distribution folder, which cannot go on
    # LD_LIBRARY_PATH from a host root (sdk/host_tools.py).
    tools=(ToolSpec("nvidia-smi", why_missing="NVIDIA driver utilities not installed or not mounted "
                                              "(NVIDIA container toolkit: runtimeClassName nvidia or "
                                              "NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES=utility)"),),
    collectors=(
        CollectorEntry("nvml", "nvidia", "hetero_exporter.collectors.nvidia.nvml.collector",
                       description="NVIDIA GPUs through NVML (nvidia-ml-py); falls back to "
                                   "`nvidia-smi -q -x` when NVML cannot be loaded",
                       source="NVML via `nvidia-ml-py`",
                       notes=("utilization, memory, temperatures, power, energy, clocks, aggregate and volatile ECC, "
                              "retired pages, remapped rows, PCIe link (current vs max) and replays, clock-throttle "
                              "reasons, GPU recovery action, NVLink state and traffic, NVSwitch/PCIe/NUMA topology, "
                              "MIG instances as child devices, processes with per-process utilization; an event "
                              "thread turns XIDs into faults at once; lost GPUs reported failed; falls back to "
                              "`nvidia-smi -q -x` when NVML cannot load")),
        # Off by default: nvml already falls back to it. Enable it (--collector.nvidia_smi,
        # with --no-collector.nvml) to read the CLI only.
        CollectorEntry("nvidia_smi", "nvidia", "hetero_exporter.collectors.nvidia.nvidia_smi.collector",
                       default=False, description="NVIDIA GPUs through `nvidia-smi -q -x`",
                       source="`nvidia-smi -q -x`",
                       notes=("off by default (`nvml` already falls back to it): the same readings from the XML, "
                              "without events, NVLink, energy or per-process utilization; `parse nvidia-smi` also "
                              "reads the `-q` text report and `--query-gpu` / `--query-compute-apps` CSV")),
    ),
    kernel_log="kernel_log.yaml",
    # dcgmi: DCGM's dmon output beside ours for the same GPU (DESIGN.md, "parse dcgmi FILE")
    parsers={"nvidia-smi": "hetero_exporter.collectors.nvidia.nvidia_smi.collector:parse",
             "dcgmi": "hetero_exporter.collectors.nvidia.dcgmi.dmon:parse"},
    unsupported={
        "*": "NVML has no such reading (fields of other vendors' devices)",
    },
)
