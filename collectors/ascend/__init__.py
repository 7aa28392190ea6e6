"""Huawei Ascend NPUs through ``npu-smi``."""

import re

from hetero_exporter.model.spec import CollectorEntry, PluginSelector, ResourceName, ToolSpec, VendorSpec

_DP = "Ascend device plugin (MindCluster) docs: huawei.com/Ascend910, huawei.com/Ascend310P, vNPU huawei.com/Ascend910-4c"
_HAMI = "HAMi Ascend device support: huawei.com/Ascend910B3 (per chip), huawei.com/Ascend910B3-memory (MiB)"
_FAMILY = re.compile(r"Ascend\d+P?")


def _device_resource(model: str) -> str:
    """The device plugin advertises an NPU by family: Ascend910B3 -> huawei.com/Ascend910."""
    m = _FAMILY.match(model or "")
    return f"huawei.com/{m.group(0)}" if m else "huawei.com/Ascend"


SPEC = VendorSpec(
    name="ascend", kind="npu", display_name="Huawei Ascend", package=__name__,
    pci_vendor_ids=(0x19E5,),
    # 19e5:1711, the Hi171x iBMC's VGA function on Huawei servers (class 0x0300): not an NPU
    # (pci.ids: "Hi1710 [iBMC Intelligent Management system chip w/VGA support]")
    pci_ignored_device_ids=(0x1711,),
    model_strip=r"^(Ascend|Huawei)\s*", model_digit_prefix="Ascend",
    # First match wins: HAMi's per-chip memory names before the vNPU slices they resemble.
    # A per-chip name (huawei.com/Ascend910B3) groups with its family: kube-scheduler's own
    # resource fit keeps the pod to nodes that advertise that chip.
    resources=(
        ResourceName(r"huawei\.com/(Ascend\d+P?)(?:[A-Z]?\d*)-memory", r"huawei.com/\1", "memory_mib", source=_HAMI),
        ResourceName(r"huawei\.com/(Ascend\d+P?)(?:[A-Z]?\d*)", r"huawei.com/\1", "devices", source=_DP + "; " + _HAMI),
        ResourceName(r"huawei\.com/(Ascend\d+P?)-.+", r"huawei.com/\1", "slices", source=_DP),
    ),
    resource_domains=("huawei.com",),
    # Device plugin pods (stack health): Ascend device plugin DaemonSets (ascendplugin-*.yaml of
    # Ascend's mind-cluster / ascend-device-plugin: name=ascend-device-plugin-ds in every variant)
    plugin_pods=(PluginSelector("device-plugin", "name=ascend-device-plugin-ds", "Ascend ascend-device-plugin DaemonSets"),),
    device_resource=_device_resource,
    id_prefixes=("NPU-",),
    plugin_device_id=lambda d: f"Ascend910-{d.index}",  # physical id last
    fabric_links=("hccs",),
    # The driver package installs npu-smi as /usr/local/sbin/npu-smi (older ones
    # /usr/local/bin/npu-smi) and its libraries in /usr/local/Ascend/driver/lib64 and its
    # subfolders common/ and driver/, with the DCMI library in /usr/local/dcmi: Ascend's
    # container instructions mount exactly these for npu-smi ("-v /usr/local/sbin/npu-smi ...
    # -v /usr/local/Ascend/driver/lib64/ -v /usr/local/dcmi", MindSpore / openMind image docs)
    # and its model-zoo env.sh sets LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64/common:
    # /usr/local/Ascend/driver/lib64/driver (Ascend/ModelZoo-TensorFlow).
    tools=(ToolSpec("npu-smi", dirs=("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin"),
                    library_dirs=("/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/lib64/*",
                                  "/usr/local/dcmi"),
                    env=("ASCEND_HOME",), why_missing="Ascend driver tools not installed"),),
    collectors=(CollectorEntry("npu_smi", "ascend", "hetero_exporter.collectors.ascend.npu_smi.collector",
                               description="Huawei Ascend NPUs through `npu-smi info` (+ slower per-card details)",
                               source="`npu-smi info` (+ per-card `-t usages/common/memory/ecc/health/board`)",
                               notes=("AI core usage, HBM/DDR memory, chip temperature, power, hugepages, processes, "
                                      "health state and error codes as faults; HBM bandwidth, AI CPU/ctrl CPU usage, "
                                      "AI core and HBM clocks, HBM temperature, ECC counts at a slower cadence; 310, "
                                      "310P (several chips per card), 910A/910B and the newer layout")),),
    kernel_log="kernel_log.yaml",
    parsers={"npu-smi": "hetero_exporter.collectors.ascend.npu_smi.collector:parse_any"},
    versions="hetero_exporter.collectors.ascend.versions:discover",
    unsupported={
        "*": "npu-smi does not print it",
    },
)
