"""MetaX GPUs (曦云 C500 / C550, 曦思 N260) through ``mx-smi``.

PCI vendor id 0x9999 is MetaX Integrated Circuits (Shanghai): GPUStack's accelerator table maps
the MetaX manufacturer to PCI vendor "9999" (_ManufacturerPciVendorIDMap, next to Iluvatar
1e3e, Moore Threads 1ed5, Cambricon cabc, Hygon 1d94).
"""

from hetero_exporter.model.spec import CollectorEntry, ResourceName, ToolSpec, VendorSpec

_HAMI = ("HAMi charts/hami/values.yaml devices.metax.resourceCountName 'metax-tech.com/gpu' "
         "(pkg/device/metax/device.go, whole GPUs, topology-aware scoring) and docs/metax-support.md "
         "/ pkg/device/metax/sdevice.go: 'metax-tech.com/sgpu' (a share of one GPU) with "
         "'metax-tech.com/vcore' (percent of cores) and 'metax-tech.com/vmemory' (GiB, or a quantity "
         "such as 2048Mi)")
_DP = "MetaX GPU Operator device plugin: metax-tech.com/gpu (HAMi's metax-gpu mode counts it)"


def _plugin_device_id(d) -> str:
    """The MetaX device plugin's device id is not publicly documented (its source ships only
    in the MetaX GPU Operator); HAMi's sGPU annotation names devices by uuid and ``bdf``.
    Our uuid is the ``GPU-...`` UUID of ``mx-smi -L`` (the PCI address where -L gives none),
    so a plugin naming devices by either matches; the simulated plugin serves the PCI address
    (podresources/mapping.py also matches PCI addresses and a trailing index)."""
    return d.pci_address or str(d.index)


SPEC = VendorSpec(
    name="metax", kind="gpu", display_name="MetaX", package=__name__,
    pci_vendor_ids=(0x9999,),
    model_strip=r"^(MetaX|Metax|MX)\s*",
    resources=(
        ResourceName(r"metax-tech\.com/gpu", "metax-tech.com/gpu", "devices", source=_DP + "; " + _HAMI),
        ResourceName(r"metax-tech\.com/sgpu", "metax-tech.com/gpu", "slices", features=("sharing",), source=_HAMI),
        ResourceName(r"metax-tech\.com/vmemory", "metax-tech.com/gpu", "memory_mib", source=_HAMI),
    ),
    resource_domains=("metax-tech.com",),
    # Device plugin pods (stack health): no published manifest of MetaX's device plugin was found
    # (the plugin ships with MetaX's GPU operator, whose manifests are not public): none listed, so
    # stack health does not judge MetaX plugin pods.
    device_resource=lambda model: "metax-tech.com/gpu",
    # identity.uuid: the UUID of `mx-smi -L` as printed ("GPU-e702f06b-..."), else
    # "metax-pci-<PCI address>" where -L prints none (mx_smi/collector.py)
    id_prefixes=("GPU-", "metax-pci-"),
    plugin_device_id=_plugin_device_id,
    uuid_prefix="GPU-",
    # MACA's Version.txt below the host root (versions.py): the runtime version where mx-smi's
    # title prints none
    versions="hetero_exporter.collectors.metax.versions:discover",
    fabric_links=("metaxlink",),
    # The driver package installs mx-smi in /opt/mxdriver/bin (libraries in /opt/mxdriver/lib),
    # the MACA SDK another copy in /opt/maca/bin (MACA_PATH, default /opt/maca): MetaX's
    # container images set PATH=/opt/mxdriver/bin:${MACA_PATH}/bin and
    # LD_LIBRARY_PATH=/opt/mxdriver/lib:/opt/maca/lib (e.g. MetaX-MACA images; mxtop's
    # backend looks in /opt/mxdriver/bin/mx-smi first; GPUStack's MetaX worker mounts
    # /opt/mxdriver and /opt/maca).
    tools=(ToolSpec("mx-smi", dirs=("/opt/mxdriver/bin", "/opt/maca/bin", "/usr/local/bin", "/usr/bin"),
                    library_dirs=("/opt/mxdriver/lib", "/opt/maca/lib"), env=("MACA_PATH",),
                    home_env=(("MACA_PATH", "/opt/maca"),),
                    why_missing="MetaX driver (mxdriver) tools not installed"),),
    collectors=(CollectorEntry("mx_smi", "metax", "hetero_exporter.collectors.metax.mx_smi.collector",
                               description="MetaX GPUs through `mx-smi` (+ `mx-smi topo -m` for MetaXLink)",
                               source="`mx-smi` (+ `mx-smi topo -m` every 600 s)",
                               notes=("GPU utilization, VRAM, temperature, power and cap, GPU state, processes, "
                                      "MetaXLink links; KMD driver and MACA versions; 2.1.6 to 2.2.9 layouts")),),
    parsers={"mx-smi": "hetero_exporter.collectors.metax.mx_smi.collector:parse_any"},
    unsupported={
        "*": "mx-smi does not print it",
    },
)
