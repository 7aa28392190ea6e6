"""Cambricon MLUs through ``cnmon``."""

from hetero_exporter.sdk.spec import CollectorEntry, ResourceName, ToolSpec, VendorSpec

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
    device_resource=lambda model: "cambricon.com/mlu",
    id_prefixes=("MLU-",),
    plugin_device_id=lambda d: d.uuid if d.uuid.upper().startswith("MLU-") else f"MLU-{d.uuid}",
    fabric_links=("mlulink",),
    tools=(ToolSpec("cnmon", dirs=("/usr/local/neuware/bin", "/usr/bin", "/usr/local/bin"),
                    library_dirs=("/usr/local/neuware/lib64",), env=("NEUWARE_HOME",),
                    why_missing="Cambricon Neuware tools not installed"),),
    collectors=(CollectorEntry("cnmon", "cambricon", "hetero_exporter.collectors.cambricon.cnmon.collector",
                               description="Cambricon MLUs through `cnmon` (+ `cnmon info` per card)"),),
    parsers={"cnmon": "hetero_exporter.collectors.cambricon.cnmon.collector:parse_any"},
    versions="hetero_exporter.collectors.cambricon.versions:discover",
)
