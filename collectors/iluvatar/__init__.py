"""Iluvatar CoreX GPUs (BI-V100/BI-V150 "Tiangai", MR-V50/MR-V100 "Zhikai") through ``ixsmi``.

PCI vendor id 0x1e3e: Shanghai Iluvatar CoreX Semiconductor Co., Ltd. (the pci.ids entry;
the ix-device-plugin finds devices through ixml, the NVML-like library, not by id).
"""


from hetero_exporter.model.spec import CollectorEntry, PluginSelector, ResourceName, ToolSpec, VendorSpec

_DP = ("Deep-Spark/ix-device-plugin (README, pkg/gpuallocator/deviceset.go): iluvatar.ai/gpu, one "
       "device per chip UUID (ixmlDeviceGetUUID), '<uuid>::<n>' replicas under time-slicing; newer "
       "deployments configure iluvatar.com/gpu (ix-config resourceName)")
_HAMI = ("HAMi docs/iluvatar-gpu-support.md and charts/hami device-configmap.yaml: per chip "
         "iluvatar.ai/<chip>-vgpu (count), iluvatar.ai/<chip>.vCore (1 % units), iluvatar.ai/<chip>.vMem "
         "(256 MB units); older HAMi: iluvatar.ai/vgpu, iluvatar.ai/vcuda-core, iluvatar.ai/vcuda-memory")
_GROUP = "iluvatar.ai/gpu"

SPEC = VendorSpec(
    name="iluvatar", kind="gpu", display_name="Iluvatar CoreX", package=__name__,
    pci_vendor_ids=(0x1E3E,),
    model_strip=r"^(Iluvatar|CoreX)\s*",
    # Every name groups with the device plugin's iluvatar.ai/gpu (the resource a whole chip is
    # allocated as): kube-scheduler's own fit keeps a per-chip HAMi name to nodes of that chip.
    # vMem / vcuda-memory count 256 MB units, not MiB: declared as slices (one device with
    # room), since ResourceName's memory_mib has no unit scale.
    resources=(
        ResourceName(r"iluvatar\.(?:ai|com)/gpu", _GROUP, "devices", source=_DP),
        ResourceName(r"iluvatar\.ai/[A-Za-z0-9]+-V\d+-vgpu", _GROUP, "slices", ("sharing",), source=_HAMI),
        ResourceName(r"iluvatar\.ai/[A-Za-z0-9]+-V\d+\.(?:vCore|vMem)", _GROUP, "slices", ("sharing",), source=_HAMI),
        ResourceName(r"iluvatar\.ai/(?:vgpu|vcuda-core|vcuda-memory)", _GROUP, "slices", ("sharing",), source=_HAMI),
    ),
    resource_domains=("iluvatar.ai", "iluvatar.com"),
    # Device plugin pods (stack health): the IX device plugin README's DaemonSet ("Enabling GPU
    # Support in Kubernetes": app.kubernetes.io/name=iluvatar-device-plugin)
    plugin_pods=(PluginSelector("device-plugin", "app.kubernetes.io/name=iluvatar-device-plugin",
                                "Iluvatar ix-device-plugin README"),),
    device_resource=lambda model: _GROUP,
    # the plugin's device id is the chip UUID as ixml gives it (GPU-...); time-slicing replicas
    # append "::n", which the id mapping strips with the uuid
    id_prefixes=("GPU-",),
    plugin_device_id=lambda d: d.uuid,
    uuid_prefix="GPU-",
    # CoreX installs to /usr/local/corex (a link to /usr/local/corex-<version>): ixsmi in its
    # bin/, libixml.so and libcuda.so in lib64/ (HAMi's Iluvatar notes; the ix-container-toolkit
    # node facts: "ixsmi needs LD_LIBRARY_PATH=/usr/local/corex/lib64:/usr/local/corex/lib");
    # the driver also puts /usr/bin/ixsmi (GPUStack's Iluvatar worker mounts /usr/local/corex and
    # /usr/bin/ixsmi); COREX_HOME=/usr/local/corex in CoreX's environment notes.
    tools=(ToolSpec("ixsmi", dirs=("/usr/local/corex/bin", "/usr/bin", "/usr/local/bin"),
                    library_dirs=("/usr/local/corex/lib64", "/usr/local/corex/lib"),
                    env=("COREX_HOME",), home_env=(("COREX_HOME", "/usr/local/corex"),),
                    why_missing="Iluvatar CoreX driver tools not installed"),),
    collectors=(CollectorEntry("ixsmi", "iluvatar", "hetero_exporter.collectors.iluvatar.ixsmi.collector",
                               description="Iluvatar CoreX GPUs through `ixsmi` (+ one uuid query per new device)",
                               source="`ixsmi` (+ a `--query-gpu` CSV for uuids at first sight)",
                               notes=("utilization, memory, temperature, power and cap, clocks, processes; IX-ML / driver / "
                                      "CUDA-compatible versions; `parse ixsmi` reads the table and `--query-gpu` CSV")),),
    parsers={"ixsmi": "hetero_exporter.collectors.iluvatar.ixsmi.collector:parse_any"},
    versions="hetero_exporter.collectors.iluvatar.versions:discover",
    unsupported={
        "*": "ixsmi does not print it",
    },
)

