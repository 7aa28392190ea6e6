"""Cambricon MLUs through ``cnmon``."""

from hetero_exporter.model.spec import CollectorEntry, PluginSelector, ResourceName, ToolSpec, VendorSpec

_DP = "Cambricon device plugin README (cambricon.com/mlu; sMLU/env-share: cambricon.com/mlu.smlu.vcore ...)"

SPEC = VendorSpec(
    name="cambricon", kind="mlu", display_name="Cambricon", package=__name__,
    pci_vendor_ids=(0xCABC,),
    model_strip=r"^(Cambricon)\s*",
    resources=(
        ResourceName(r"cambricon\.com/mlu", "cambricon.com/mlu", "devices", source=_DP),
        ResourceName(r"cambricon\.com/mlu\..+", "cambricon.com/mlu", "slices", source=_DP),
        ResourceName(r"cambricon\.com/vmlu", "cambricon.com/mlu", "slices",
                     source="HAMi Cambricon support: cambricon.com/vmlu (a share of one MLU)"),
    ),
    resource_domains=("cambricon.com",),
    # Device plugin pods (stack health): Cambricon/cambricon-k8s-device-plugin
    # device-plugin/examples/cambricon-device-plugin-daemonset.yaml (name=cambricon-device-plugin-ds)
    plugin_pods=(PluginSelector("device-plugin", "name=cambricon-device-plugin-ds",
                                "Cambricon/cambricon-k8s-device-plugin examples"),),
    device_resource=lambda model: "cambricon.com/mlu",
    id_prefixes=("MLU-",),
    plugin_device_id=lambda d: d.uuid if d.uuid.upper().startswith("MLU-") else f"MLU-{d.uuid}",
    fabric_links=("mlulink",),
    # The driver package installs /usr/bin/cnmon (Cambricon's model-zoo containers mount
    # "-v /usr/bin/cnmon:/usr/bin/cnmon"); Neuware (CNToolkit) lives in /usr/local/neuware with
    # its libraries in lib64 (NEUWARE_HOME=/usr/local/neuware, LD_LIBRARY_PATH=$NEUWARE_HOME/lib64
    # in Cambricon's CNNL samples; GPUStack's worker mounts /usr/local/neuware and /usr/bin/cnmon).
    tools=(ToolSpec("cnmon", dirs=("/usr/bin", "/usr/local/neuware/bin", "/usr/local/bin"),
                    library_dirs=("/usr/local/neuware/lib64",), env=("NEUWARE_HOME",),
                    home_env=(("NEUWARE_HOME", "/usr/local/neuware"),),
                    why_missing="Cambricon Neuware tools not installed"),),
    collectors=(CollectorEntry("cnmon", "cambricon", "hetero_exporter.collectors.cambricon.cnmon.collector",
                               description="Cambricon MLUs through `cnmon` (+ `cnmon info` per card)",
                               source="`cnmon` (+ `cnmon info -c N`)",
                               notes=("MLU utilization, memory and virtual memory, temperature, fan, power and cap, ECC errors, processes; "
                                      "uncorrected ECC errors, uninitialized and lost cards as faults; MLU-Link links (`cnmon topo`, "
                                      "at start and every 600 s)")),),
    parsers={"cnmon": "hetero_exporter.collectors.cambricon.cnmon.collector:parse_any"},
    versions="hetero_exporter.collectors.cambricon.versions:discover",
    unsupported={
        "*": "cnmon does not print it",
    },
)
