"""AMD Instinct GPUs: the amdsmi library (ROCm 6+), ``rocm-smi`` on CLI-only nodes."""

from hetero_exporter.model.spec import CollectorEntry, PluginSelector, ResourceName, ToolSpec, VendorSpec

_DP = "ROCm k8s-device-plugin README (amd.com/gpu; partitions as amd.com/<partition resource>)"

SPEC = VendorSpec(
    name="amd", kind="gpu", display_name="AMD", package=__name__,
    pci_vendor_ids=(0x1002,),
    # ATI server BMC/onboard graphics (class 0x0300) beside Instinct GPUs on older servers:
    # 1002:515e ES1000, 1002:5159 RV100 Radeon 7000/VE (pci.ids)
    pci_ignored_device_ids=(0x515E, 0x5159),
    model_strip=r"^(AMD|Instinct)\s+",
    resources=(ResourceName(r"amd\.com/gpu", "amd.com/gpu", "devices", source=_DP),),
    resource_domains=("amd.com",),
    # Device plugin pods (stack health): ROCm/k8s-device-plugin's static manifest
    # (k8s-ds-amdgpu-dp.yaml: name=amdgpu-dp-ds) and its Helm chart amd-gpu
    # (helm/amd-gpu/templates/deviceplugin-daemonset.yaml: name=<chart>-dp-ds). AMD's DRA driver
    # (ROCm/k8s-gpu-dra-driver): no published kubelet plugin label found, not listed.
    plugin_pods=(
        PluginSelector("device-plugin", "name=amdgpu-dp-ds", "ROCm/k8s-device-plugin k8s-ds-amdgpu-dp.yaml"),
        PluginSelector("device-plugin", "name=amd-gpu-dp-ds", "ROCm/k8s-device-plugin Helm chart amd-gpu"),
    ),
    device_resource=lambda model: "amd.com/gpu",
    plugin_device_id=lambda d: d.pci_address or str(d.index),  # the plugin names GPUs by PCI address
    fabric_links=("xgmi",),
    # ROCm installs to /opt/rocm (a link to /opt/rocm-<version>, through /etc/alternatives on
    # Debian/Ubuntu), tools in bin/, libraries in lib/ (GPUStack's AMD worker mounts /opt/rocm).
    # rocm-smi's bindings load librocm_smi64.so from ROCM_SMI_LIB_PATH when set (rsmiBindings.py);
    # amdsmi loads $ROCM_PATH/lib/libamd_smi.so (ml-energy/amdsmi README, "search order"). NVML's
    # counterpart, libamd_smi.so for the amdsmi collector, is the agent's own: README, Vendor
    # tools from the host.
    tools=(ToolSpec("rocm-smi", dirs=("/opt/rocm/bin", "/usr/bin", "/usr/local/bin"),
                    library_dirs=("/opt/rocm/lib",), env=("ROCM_PATH", "ROCM_SMI_LIB_PATH"),
                    home_env=(("ROCM_PATH", "/opt/rocm"), ("ROCM_SMI_LIB_PATH", "/opt/rocm/lib")),
                    why_missing="ROCm SMI not installed"),
           # amd-smi (ROCm 6+, package amd-smi-lib): /opt/rocm/bin/amd-smi, /usr/bin/amd-smi
           # (ROCm docs, "AMD SMI CLI tool" install page)
           ToolSpec("amd-smi", dirs=("/opt/rocm/bin", "/usr/bin", "/usr/local/bin"),
                    library_dirs=("/opt/rocm/lib",), env=("ROCM_PATH",), home_env=(("ROCM_PATH", "/opt/rocm"),),
                    why_missing="AMD SMI CLI not installed (ROCm amd-smi-lib)")),
    collectors=(
        CollectorEntry("amdsmi", "amd", "hetero_exporter.collectors.amd.amdsmi.collector",
                       description="AMD GPUs through the amdsmi library (libamd_smi.so, ROCm 6+)",
                       source="`amdsmi` Python package (libamd_smi.so, ROCm 6+)",
                       notes=("GFX/UMC/media activity, VRAM, hotspot/edge/memory temperatures, power and energy "
                              "counter, clocks, ECC per RAS block, PCIe link and replays, xGMI links and traffic, "
                              "partitions as child devices, processes; uncorrectable ECC -> failed; falls back to "
                              "`amd_smi` when the library cannot load")),
        # Off by default: it would report the same GPUs as amdsmi. Enable it
        # (--collector.rocm_smi) on AMD nodes that have rocm-smi but no libamd_smi.so.
        CollectorEntry("rocm_smi", "amd", "hetero_exporter.collectors.amd.rocm_smi.collector", default=False,
                       description="AMD GPUs through `rocm-smi --json` (CLI-only nodes, ROCm < 6)",
                       source="`rocm-smi --json`",
                       notes=("off by default (it would duplicate `amdsmi`): enable with `--collector.rocm_smi` on "
                              "CLI-only nodes (ROCm < 6)")),
        # Off by default: amdsmi falls back to it when the binding cannot load or does not
        # match the host ROCm. Enable it (--collector.amd_smi, with --no-collector.amdsmi)
        # to read the CLI only.
        CollectorEntry("amd_smi", "amd", "hetero_exporter.collectors.amd.amd_smi.collector", default=False,
                       description="AMD GPUs through `amd-smi metric --json` (ROCm 6+ CLI)",
                       source="`amd-smi metric --json` (+ `static --json` at first sight)",
                       notes=("off by default: the fallback of `amdsmi` (same uuids); `parse amd-smi` reads `static`, "
                              "`metric`, `process`, `monitor`, `list`, `topology` text and `--json`")),
    ),
    versions="hetero_exporter.collectors.amd.versions:discover",  # the .info/version file of the runtime install
    kernel_log="kernel_log.yaml",
    parsers={"rocm-smi": "hetero_exporter.collectors.amd.rocm_smi.collector:parse_rocm_smi",
             "amd-smi": "hetero_exporter.collectors.amd.amd_smi.collector:parse_any"},
    field_sources={
        "ecc_{block}_{severity}_total": "amdsmi_get_gpu_ecc_count(<RAS block>).correctable_count / uncorrectable_count / deferred_count, per ECC-enabled block",
    },
    unsupported={
        "*": "neither amdsmi nor amd-smi / rocm-smi reports it",
    },
)
