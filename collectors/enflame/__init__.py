"""Enflame GCUs (CloudBlazer S60 / T20 / i20 ...) through ``efsmi``.

PCI vendor id 0x1e36: ``efsmi -q`` prints "Vendor ID : 1e36" (the ZStack Enflame plugin's
sample) and the PCI ID database lists 1e36 as Shanghai Enflame Technology.

Kubernetes names:
- ``enflame.com/gcu``: whole GCUs, Enflame's device plugin (its exporter's podresources
  collector: ``enflameDeviceResourceName = "enflame.com/gcu"``; HAMi's pkg/device/enflame flag
  ``enflame-gcu-resource-name`` defaults to it). The plugin's device ids are the GCUs' UUIDs
  (the exporter maps ``GetDeviceIds()`` as uuids), which is the uuid this package gives a device
  when ``efsmi -q`` prints one ("Dev UUID"), else its serial.
- ``enflame.com/vgcu`` (a shared GCU, count 1) and ``enflame.com/vgcu-percentage`` (the share:
  1 % of cores and memory per unit): HAMi's Enflame support (docs "Enabling GCU-sharing
  Support", with gcushare-device-plugin; hami-scheduler-device configMap ``enflame:
  resourceCountName / resourcePercentageName``).

Tool paths: TopsRider's driver package installs ``efsmi`` to /usr/bin (the tools that drive it,
e.g. a Go GPU-info collector, fall back to ``/usr/bin/efsmi``); the runtime and its libraries
live under /opt/tops (TopsRider's default prefix, lib in /opt/tops/lib); /usr/local/bin is
kept for hand installs.
"""

from hetero_exporter.model.spec import CollectorEntry, PluginSelector, ResourceName, ToolSpec, VendorSpec

_DP = ("Enflame device plugin / exporter (podresources: enflameDeviceResourceName = \"enflame.com/gcu\"); "
       "HAMi pkg/device/enflame config flag enflame-gcu-resource-name default enflame.com/gcu")
_HAMI = ("HAMi docs, Enflame GCU sharing: enflame.com/vgcu (GCU count, only 1) and "
         "enflame.com/vgcu-percentage (percent of cores and memory); hami-scheduler-device configMap")

SPEC = VendorSpec(
    name="enflame", kind="gcu", display_name="Enflame", package=__name__,
    pci_vendor_ids=(0x1E36,),
    model_strip=r"^(Enflame)\s*",
    resources=(
        ResourceName(r"enflame\.com/gcu", "enflame.com/gcu", "devices", source=_DP),
        ResourceName(r"enflame\.com/vgcu", "enflame.com/gcu", "slices", features=("sharing",), source=_HAMI),
        ResourceName(r"enflame\.com/vgcu-percentage", "enflame.com/gcu", "slices", features=("sharing",),
                     source=_HAMI),
    ),
    resource_domains=("enflame.com",),
    # Device plugin pods (stack health): Enflame's GCU sharing plugin
    # (EnflameTechnology/gcushare gcushare-device-plugin/deployments/yaml/gcushare-device-plugin.yaml:
    # name=gcushare-device-plugin-ds). The manifest of Enflame's exclusive k8s-device-plugin was not
    # found in a public repository: not listed.
    plugin_pods=(PluginSelector("device-plugin", "name=gcushare-device-plugin-ds", "EnflameTechnology/gcushare"),),
    device_resource=lambda model: "enflame.com/gcu",
    id_prefixes=(),
    plugin_device_id=lambda d: d.uuid,
    uuid_prefix="",
    tools=(ToolSpec("efsmi", dirs=("/usr/bin", "/usr/local/bin", "/opt/tops/bin", "/usr/sbin"),
                    library_dirs=("/opt/tops/lib",),
                    why_missing="Enflame driver (TopsRider) tools not installed"),),
    collectors=(CollectorEntry("efsmi", "enflame", "hetero_exporter.collectors.enflame.efsmi.collector",
                               description="Enflame GCUs through `efsmi` (+ `efsmi -q` at a cadence)",
                               source="`efsmi` (+ node-wide `efsmi -q` every 60 s)",
                               notes=("GCU utilization, memory, temperature, power and cap, power-management state "
                                      "and ECC mode (N/A on one chip is a fault), health, RMA and double-bit errors "
                                      "from `-q`, processes")),),
    parsers={"efsmi": "hetero_exporter.collectors.enflame.efsmi.collector:parse_any"},
    versions="hetero_exporter.collectors.enflame.versions:discover",
    unsupported={
        "*": "efsmi does not print it",
    },
)
