"""Kunlunxin (昆仑芯) XPUs through ``xpu_smi`` / ``xpu-smi``.

PCI vendor id 0x1d22: Kunlunxin's XRE troubleshooting guide checks cards with ``lspci -d 1d22:``
(the same id its firmware-update script loops over). XRE 4.x installs the tool as
``/usr/local/xpu/bin/xpu_smi`` (``/usr/local/xpu`` a link to the versioned XRE folder, e.g.
``/usr/local/xpu-4.33.0``) with a link ``/usr/local/bin/xpu_smi``, and its libraries in
``/usr/local/xpu/lib64`` (XRE install / uninstall scripts); newer drivers also name it
``xpu-smi``. Intel ships a different ``xpu-smi``: the collector only runs where PCI presence
shows a 0x1d22 device, and it reads ``xpu_smi`` first.
"""

from hetero_exporter.model.spec import CollectorEntry, ResourceName, ToolSpec, VendorSpec

_HAMI = ("HAMi docs/kunlunxin-support (P800-OAM, vxpu-device-plugin): kunlunxin.com/xpu (physical XPU "
         "count), kunlunxin.com/vxpu (virtual XPU count), kunlunxin.com/vxpu-memory (MiB); HAMi chart "
         "devices.kunlun.resourceCountName default kunlunxin.com/xpu")
_XRE_DIRS = ("/usr/local/xpu/bin", "/usr/local/bin", "/usr/bin", "/usr/local/sbin", "/usr/sbin")
_XRE_LIBS = ("/usr/local/xpu/lib64", "/usr/local/xpu/so")


def _plugin_id(identity):
    # The device plugin's id format is not published: the simulated kubelet serves the PCI
    # address, one of the forms the PodResources mapping matches (with uuids, serials and indexes).
    return identity.pci_address or str(identity.index)


SPEC = VendorSpec(
    name="kunlunxin", kind="xpu", display_name="Kunlunxin", package=__name__,
    pci_vendor_ids=(0x1D22,),
    model_strip=r"^(Kunlunxin|KUNLUNXIN|Kunlun)\s*",
    resources=(
        ResourceName(r"kunlunxin\.com/xpu", "kunlunxin.com/xpu", "devices", source=_HAMI),
        ResourceName(r"kunlunxin\.com/vxpu", "kunlunxin.com/xpu", "slices", features=("sharing",), source=_HAMI),
        ResourceName(r"kunlunxin\.com/vxpu-memory", "kunlunxin.com/xpu", "memory_mib", features=("sharing",),
                     source=_HAMI),
    ),
    resource_domains=("kunlunxin.com",),
    # Device plugin pods (stack health): no published manifest of Kunlunxin's device plugin was
    # found: none listed, so stack health does not judge its pods.
    device_resource=lambda model: "kunlunxin.com/xpu",
    id_prefixes=("KLX-",),
    plugin_device_id=_plugin_id,
    uuid_prefix="KLX-",
    tools=(
        ToolSpec("xpu_smi", dirs=_XRE_DIRS, library_dirs=_XRE_LIBS,
                 why_missing="Kunlunxin XRE (driver and xpu_smi) not installed"),
        ToolSpec("xpu-smi", dirs=_XRE_DIRS, library_dirs=_XRE_LIBS,
                 why_missing="Kunlunxin XRE (driver and xpu-smi) not installed"),
    ),
    collectors=(CollectorEntry("xpu_smi", "kunlunxin", "hetero_exporter.collectors.kunlunxin.xpu_smi.collector",
                               description="Kunlunxin XPUs through `xpu_smi` (one call per cycle)",
                               source="`xpu_smi` / `xpu-smi`",
                               notes=("XPU utilization, memory, L3, temperature, power, clocks, state (E is a fault), "
                                      "SR-IOV VFs as child devices, processes; XRE runtime and driver versions")),),
    parsers={"xpu-smi": "hetero_exporter.collectors.kunlunxin.xpu_smi.collector:parse_any"},
    versions="hetero_exporter.collectors.kunlunxin.versions:discover",
    unsupported={
        "*": "xpu_smi does not print it",
    },
)
