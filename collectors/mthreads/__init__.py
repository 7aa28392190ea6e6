"""Moore Threads GPUs (MTT S80 / S3000 / S4000 / S5000) through ``mthreads-gmi``."""

from hetero_exporter.model.spec import CollectorEntry, ResourceName, ToolSpec, VendorSpec

# Whole devices: the Moore Threads device plugin advertises mthreads.com/gpu (HAMi's Helm values
# list it as the vendor's resourceName with pciVendorID 1ed5; kubeflow/dlrover
# Accelerators.MTHREADS_GPU = "mthreads.com/gpu").
_DP = "Moore Threads device plugin: mthreads.com/gpu (whole devices; HAMi chart values resourceName, PCI 1ed5)"
# HAMi's Moore Threads support (docs 'Enable Mthreads GPU sharing', pkg/device/mthreads):
# mthreads.com/vgpu (a share of one card), with mthreads.com/sgpu-memory (units of 512 MiB)
# and mthreads.com/sgpu-core (core units) beside it.
_HAMI = "HAMi Moore Threads support (mthreads.com/vgpu; sgpu-memory in 512 MiB units, sgpu-core)"

SPEC = VendorSpec(
    name="mthreads", kind="gpu", display_name="Moore Threads", package=__name__,
    # PCI vendor id 0x1ed5 (Moore Threads Technology Co., Ltd: pci.ids; HAMi chart values
    # "mthreads": {"pciVendorID": "1ed5"}; `lspci -n | grep 1ed5` in Moore Threads' scripts)
    pci_vendor_ids=(0x1ED5,),
    model_strip=r"^(Moore\s*Threads)\s*",
    resources=(
        ResourceName(r"mthreads\.com/gpu", "mthreads.com/gpu", "devices", source=_DP),
        ResourceName(r"mthreads\.com/vgpu", "mthreads.com/gpu", "slices", features=("sharing",), source=_HAMI),
        ResourceName(r"mthreads\.com/sgpu-core", "mthreads.com/gpu", "slices", features=("sharing",), source=_HAMI),
        # HAMi counts sgpu-memory in 512 MiB units; the scorer's memory_mib unit is MiB, so the
        # name is grouped as a share of the card rather than read as a MiB figure
        ResourceName(r"mthreads\.com/sgpu-memory", "mthreads.com/gpu", "slices", features=("sharing",), source=_HAMI),
    ),
    resource_domains=("mthreads.com",),
    # Device plugin pods (stack health): Moore Threads' device plugin is closed source and no
    # published manifest was found: none listed, so stack health does not judge its pods.
    device_resource=lambda model: "mthreads.com/gpu",
    # identity.uuid: "mthreads-<GPU UUID of mthreads-gmi -q>" (MTML's device UUID, printed bare),
    # else "mthreads-sn-<Serial Number>", else "mthreads-pci-<PCI address>" (gmi/collector.py);
    # a plugin naming a device by the bare UUID matches through this prefix
    id_prefixes=("mthreads-",),
    uuid_prefix="mthreads-",
    # the MUSA toolkit's /usr/local/musa/version.json below the host root (versions.py): the
    # runtime version (the default table prints none)
    versions=f"{__name__}.versions:discover",
    fabric_links=("mtlink",),
    # the device plugin is closed source and its id format unpublished: the simulated kubelet
    # serves the PCI address, which the PodResources mapping matches
    plugin_device_id=lambda d: d.pci_address or str(d.index),
    tools=(ToolSpec(
        "mthreads-gmi",
        # the driver package installs /usr/bin/mthreads-gmi (containers bind-mount exactly that
        # path: "-v /usr/bin/mthreads-gmi:/usr/bin/mthreads-gmi:ro" in FlagOS / MUSA images);
        # some images carry it in /usr/local/bin
        dirs=("/usr/bin", "/usr/local/bin", "/usr/sbin", "/usr/local/musa/bin"),
        # libmtml.so (the management library the tool loads) ships with the driver in the
        # distribution's library folder (/usr/lib/<triplet>, where the MT container toolkit
        # mounts it into containers with /usr/bin/mthreads-gmi), which cannot go on
        # LD_LIBRARY_PATH (it would replace the image's C library; sdk/host_tools.py skips a
        # folder holding libc.so.6): on a node use the mthreads runtime class or host_exec:
        # chroot. The MUSA toolkit's own libraries are in /usr/local/musa/lib (its install notes:
        # MUSA_INSTALL_PATH=/usr/local/musa, LD_LIBRARY_PATH=$MUSA_INSTALL_PATH/lib).
        library_dirs=("/usr/local/musa/lib",), env=("MUSA_INSTALL_PATH",),
        home_env=(("MUSA_INSTALL_PATH", "/usr/local/musa"),),
        why_missing="Moore Threads driver (mthreads-gmi) not installed, or not mounted (runtimeClassName: "
                    "mthreads, or host_exec: chroot with --host-root)"),),
    collectors=(CollectorEntry("mthreads_gmi", "mthreads", f"{__name__}.gmi.collector",
                               description="Moore Threads GPUs through `mthreads-gmi` (one call per cycle; -q at first sight)",
                               source="`mthreads-gmi`",
                               notes=("utilization, memory (used above total reported as an `error` reading: a known "
                                      "driver fault), temperature, PCIe width vs max, processes; truncated outputs "
                                      "never mark cards lost")),),
    parsers={"mthreads-gmi": f"{__name__}.gmi.collector:parse_any"},
    unsupported={
        "*": "mthreads-gmi does not print it",
    },
)
