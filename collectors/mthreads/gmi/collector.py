"""Moore Threads GPUs through ``mthreads-gmi``: the quality table, the model of a parsed
output, ``parse mthreads-gmi FILE`` and a collector on the SDK's CliCollector.

Invocations: ``mthreads-gmi`` (the default table of every GPU, with its processes), one call
per cycle; nothing else. ``mthreads-gmi -q`` would add the MTML UUID and the MTBios version,
but no real ``-q`` output is at hand (SOURCES.md: only edited excerpts), and the default table
already gives what the model needs: the PCI address is the stable id (uuid
``mthreads-pci-<address>``; the tool prints no serial in the table), the driver version is in
the title, the PCIe link in the ``Pcie Lane Width`` column.

Faults from what the tool shows (faults.yaml): ``missing`` (a GPU the table no longer lists,
failed under its pinned uuid; never for a shortened output) and ``memory-over-total`` (used
above total: the known driver fault of the Moore Threads FAQ). A link below its width is a
reading pair (pcie_link_width < pcie_link_width_max) that the health policy turns into
``pcie-link-downgrade``; the collector does not raise it twice.
"""

from __future__ import annotations

from typing import Optional

from hetero_exporter import fields as F
from hetero_exporter import profiles
from hetero_exporter.model import DeviceIdentity, DeviceSample, Fault, Health, NodeSnapshot, ProcessSample, Quality, Reading
from hetero_exporter.sdk.cli_collector import process_samples, CliCollector, Readings, build, table_fault, worst_state
from hetero_exporter.sdk.contract import CollectorOptions

from .parse import MIB, TOOL, GmiDevice, GmiProcess, GmiTable, detect, parse_table  # noqa: F401 - part of this API

VENDOR, KIND = "mthreads", "gpu"
PCIE_WIDTH, PCIE_WIDTH_MAX = "pcie_link_width", "pcie_link_width_max"  # lanes (the names nvml and amdsmi use)

# %GPU is a busy ratio the driver samples over a period Moore Threads does not document
# (the MTML and mthreads-gmi manuals state none): the 1 s window is assumed, not documented.
UTIL_WINDOW = 1.0

QUALITY: dict[str, Quality] = {
    F.UTILIZATION: Quality("mthreads-gmi: %GPU", "sampled", UTIL_WINDOW, 0.01),
    F.MEMORY_USED: Quality("mthreads-gmi: Mem used (MiB)", "measured", None, MIB),
    F.MEMORY_TOTAL: Quality("mthreads-gmi: Mem total, in parentheses (MiB)", "measured", None, MIB),
    F.TEMP_CORE: Quality("mthreads-gmi: Temp (C)", "measured", None, 1.0),
    PCIE_WIDTH: Quality("mthreads-gmi: Pcie Lane Width (lanes in use)", "measured", None, 1.0),
    PCIE_WIDTH_MAX: Quality("mthreads-gmi: Pcie Lane Width (lanes of the link, in parentheses)", "measured", None, 1.0),
}


def readings_of(d: GmiDevice) -> dict[str, Reading]:
    """Readings in base units. Used above total is a driver fault: the used reading gets status
    ``error`` (no value, so no negative free figure is derived from it); the other readings stay."""
    r = Readings(QUALITY)
    r.put(F.UTILIZATION, d.utilization_ratio)
    r.put(F.MEMORY_USED, d.memory_used_bytes)
    r.put(F.MEMORY_TOTAL, d.memory_total_bytes)
    if d.memory_over_total:
        r[F.MEMORY_USED] = Reading(None, QUALITY[F.MEMORY_USED].with_status("error"))
    r.put(F.TEMP_CORE, d.temperature_celsius)
    r.put(PCIE_WIDTH, d.pcie_width)
    r.put(PCIE_WIDTH_MAX, d.pcie_width_max)
    return r


def device_uuid(d: GmiDevice) -> str:
    """The PCI address (stable for a card in its slot; the table prints no serial or UUID),
    else the index."""
    return f"mthreads-pci-{d.bus_id}" if d.bus_id else f"mthreads-index-{d.index}"


def identity_of(d: GmiDevice, t: GmiTable, numa: Optional[int] = None) -> DeviceIdentity:
    """driver_version from the title's ``Driver Version``; runtime_version the MUSA version
    where the title prints one, else the driver version (the MUSA driver API it serves)."""
    return DeviceIdentity(vendor=VENDOR, kind=KIND, index=d.index, uuid=device_uuid(d),
                          model=profiles.normalize_model(VENDOR, d.name) if d.name else "unknown",
                          pci_address=d.bus_id, numa_node=numa, driver_version=t.driver_version,
                          runtime_version=t.runtime_version or t.driver_version, name=d.name or None)


def conditions(d: GmiDevice) -> list[Fault]:
    if d.memory_over_total:
        return [table_fault(VENDOR, "memory-over-total",
                            f"GPU {d.index}: used {d.memory_used_bytes / MIB:.0f} MiB of {d.memory_total_bytes / MIB:.0f} MiB",
                            TOOL)]
    return []


def processes_of(t: GmiTable, d: GmiDevice, uuid: str) -> tuple[ProcessSample, ...]:
    return process_samples((p for p in t.processes if p.gpu == d.index), uuid)


def table_snapshot(t: GmiTable, node: str = "", now: float = 0.0) -> NodeSnapshot:
    out = []
    for d in t.devices:
        reasons = tuple(conditions(d))
        uuid = device_uuid(d)
        out.append(DeviceSample(identity=identity_of(d, t), timestamp=now, readings=readings_of(d),
                                health=Health(worst_state(reasons), reasons), faults=reasons,
                                processes=processes_of(t, d, uuid), processes_reported=t.process_section))
    return NodeSnapshot(node=node, time=now, devices=tuple(out))


def parse_any(text: str) -> NodeSnapshot:
    """``hetero-exporter parse mthreads-gmi FILE``: the default table."""
    detect(text)
    return table_snapshot(parse_table(text))


class MthreadsGmiCollector(CliCollector):
    name = "mthreads_gmi"
    vendor = VENDOR
    tool = TOOL
    summary_args = ()

    def parse_summary(self, text: str) -> GmiTable:
        return parse_table(text)

    def complete(self, parsed: GmiTable) -> bool:
        return parsed.complete

    def devices(self, parsed: GmiTable, now: float, deadline: float) -> list[DeviceSample]:
        out = []
        for d in parsed.devices:
            ident = self.identities.recall(uuid=device_uuid(d)) or identity_of(d, parsed, self.numa(d.bus_id))
            out.append(self.sample(ident, now, readings_of(d), conditions(d),
                                   processes=processes_of(parsed, d, ident.uuid), processes_reported=parsed.process_section))
        return out



def create(options: CollectorOptions) -> MthreadsGmiCollector:
    """Over the real tool (``settings.path``, else mthreads-gmi on PATH or in the ToolSpec's
    folders) or, when simulating, over the fake written into ``options.workdir``."""
    return build(options, MthreadsGmiCollector, "hetero_exporter.collectors.mthreads.gmi.fake", TOOL, vendor=VENDOR)
