"""Acme GPUs through ``acme-smi``: a throwaway vendor that exists only in the tests.

It shows what adding a CLI vendor takes: this package and nothing else (the spec here, a
pure parser, a CliCollector subclass with its quality table, a fake renderer on
hetero_exporter.sdk.fake_tool, a fault table). tests/test_throwaway_vendor.py registers it
with ``vendors.register(SPEC)``; a real third-party vendor would name ``SPEC`` under the
entry-point group ``hetero_exporter.collectors`` instead.
"""

from hetero_exporter.model.spec import CollectorEntry, ResourceName, ToolSpec, VendorSpec

_DP = "fictional: the Acme device plugin would advertise acme.example/gpu (whole devices)"

SPEC = VendorSpec(
    name="acme", kind="gpu", display_name="Acme (test vendor)", package=__name__,
    pci_vendor_ids=(0xACE5,),  # fictional vendor id, no real device reports it
    resources=(ResourceName(r"acme\.example/gpu", "acme.example/gpu", "devices", source=_DP),),
    resource_domains=("acme.example",),
    device_resource=lambda model: "acme.example/gpu",
    id_prefixes=("ACME-",),
    uuid_prefix="ACME-",
    # the driver libraries acme-smi loads when it runs from the host root (VendorSpec.missing)
    tools=(ToolSpec("acme-smi", library_dirs=("/opt/acme/lib",), why_missing="Acme driver tools not installed"),),
    collectors=(CollectorEntry("acme_smi", "acme", f"{__name__}.acme_smi.collector",
                               description="Acme GPUs through `acme-smi` (test vendor)"),),
    parsers={"acme-smi": f"{__name__}.acme_smi.collector:parse_snapshot"},
    # every catalogue field its quality table does not give (VendorSpec.missing)
    unsupported={"*": "acme-smi prints utilization, memory, temperature and power only"},
)
