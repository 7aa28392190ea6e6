"""Hygon DCUs through ``hy-smi`` (DTK), Hygon's fork of rocm-smi."""

from hetero_exporter.model.spec import CollectorEntry, PluginSelector, ResourceName, ToolSpec, VendorSpec

_DP = "Hygon DCU device plugin (hygon.com/dcu); HAMi: hygon.com/dcunum, hygon.com/dcumem"

SPEC = VendorSpec(
    name="hygon", kind="dcu", display_name="Hygon", package=__name__,
    pci_vendor_ids=(0x1D94,),
    model_strip=r"^(Hygon|DCU)\s*",
    resources=(
        ResourceName(r"hygon\.com/dcu(?:num)?", "hygon.com/dcu", "devices", source=_DP),
        ResourceName(r"hygon\.com/dcumem", "hygon.com/dcu", "memory_mib", source=_DP),
    ),
    resource_domains=("hygon.com",),
    # Device plugin pods (stack health): HAMi's DCU device plugin (Project-HAMi/dcu-vgpu-device-plugin
    # k8s-dcu-plugin.yaml: name=dcu-dp-ds). Hygon's own DCU-Device-Plugin manifests are published on
    # developer.sourcefind.cn, not found in a public repository: not listed.
    plugin_pods=(PluginSelector("device-plugin", "name=dcu-dp-ds", "Project-HAMi/dcu-vgpu-device-plugin"),),
    device_resource=lambda model: "hygon.com/dcu",
    id_prefixes=("DCU-",),
    plugin_device_id=lambda d: str(d.index),
    fabric_links=("xgmi",),  # hy-smi --showtopo: DCUs of one hive, rocm-smi style
    # hy-smi ships with hyhal (/opt/hyhal/bin/hy-smi, its librocm_smi64 in /opt/hyhal/lib), the DTK
    # in /opt/dtk: GPUStack's Hygon worker mounts /opt/hyhal and /opt/dtk with ROCM_PATH=/opt/dtk
    # and ROCM_SMI_LIB_PATH=/opt/hyhal/lib (the variable the rocm-smi bindings hy-smi forks load
    # their library from).
    tools=(ToolSpec("hy-smi", dirs=("/opt/hyhal/bin", "/opt/dtk/bin", "/usr/local/bin", "/usr/bin"),
                    library_dirs=("/opt/hyhal/lib", "/opt/dtk/lib"), env=("ROCM_PATH", "ROCM_SMI_LIB_PATH"),
                    home_env=(("ROCM_SMI_LIB_PATH", "/opt/hyhal/lib"), ("ROCM_PATH", "/opt/dtk")),
                    why_missing="Hygon DTK (hyhal) not installed"),),
    collectors=(CollectorEntry("hy_smi", "hygon", "hetero_exporter.collectors.hygon.hy_smi.collector",
                               description="Hygon DCUs through `hy-smi --json` (DTK)",
                               source="`hy-smi --json` (DTK)",
                               notes=("DCU utilization, VRAM, temperatures, power, clocks, PCIe replays, processes, "
                                      "xGMI links (`--showtopo`, every 600 s)")),),
    versions="hetero_exporter.collectors.hygon.versions:discover",  # DTK: /opt/dtk/.info/version
    parsers={"hy-smi": "hetero_exporter.collectors.hygon.hy_smi.collector:parse_hy_smi"},
    field_sources={
        "temperature_{sensor}_celsius": "hy-smi 'Temperature (Sensor junction / edge / mem) (C)'",
        "power_watts": "hy-smi 'Average Graphics Package Power (W)'",
        "power_limit_watts": "hy-smi 'Max Graphics Package Power (W)'",
        "utilization_ratio": "hy-smi 'DCU use (%)'",
        "memory_total_bytes": "hy-smi 'vram Total Memory (MiB)'",
        "memory_used_bytes": "hy-smi 'vram Total Used Memory (MiB)'",
        "clock_{clock}_hertz": "hy-smi 'sclk clock speed:' / 'mclk clock speed:'",
        "pcie_replay_total": "hy-smi 'PCIe Replay Count'",
    },
    unsupported={
        "*": "hy-smi --json does not print it",
    },
)
