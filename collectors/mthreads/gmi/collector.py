"""Moore Threads GPUs through ``mthreads-gmi``: the quality table, the model of a parsed
output, ``parse mthreads-gmi FILE`` and a collector on the SDK's CliCollector.

Invocations: ``mthreads-gmi`` (the default table of every GPU, with its processes), one call
per cycle; ``mthreads-gmi -q`` once when a GPU is first seen (query.py: its ``GPU UUID``,
``Serial Number``, ``MTBios Version``), never per cycle: the table prints no device id.

Identity: ``identity.uuid`` is ``mthreads-<GPU UUID>`` (MTML's device UUID as ``-q`` prints it,
bare: the vendor prefix keeps it apart from other vendors' ids; the spec's id_prefixes let a
device plugin name it bare), else ``mthreads-sn-<Serial Number>``, else the PCI address
(``mthreads-pci-<address>``) where ``-q`` fails or prints neither, else the index. ``serial``
is the Serial Number, ``firmware_version`` the MTBios Version. Identities are pinned by the
base class (a GPU first pinned under its PCI address that later gets its UUID replaces it).

Versions: driver_version is the title's ``Driver Version``; runtime_version a MUSA version
where the title prints one (no version at hand does), else the MUSA toolkit's version.json
below the host root (collectors/mthreads/versions.py), else None: never the driver
version.

Faults from what the tool shows (faults.yaml): ``missing`` (a GPU the table no longer lists,
failed under its pinned uuid; never for a shortened output) and ``memory-over-total`` (used
above total: the known driver fault of the Moore Threads FAQ). A link below its width is a
reading pair (pcie_link_width < pcie_link_width_max) that the health policy turns into
``pcie-link-downgrade``; the collector does not raise it twice.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Optional

from hetero_exporter.model import fields as F
from hetero_exporter import profiles
from hetero_exporter.model import DeviceIdentity, DeviceSample, Fault, NodeSnapshot, ProcessSample, Quality, Reading
from hetero_exporter.sdk.cli_collector import process_samples, CliCollector, ParsedOutput, Readings, build, table_fault
from hetero_exporter.sdk.faults import health_of
from hetero_exporter.sdk.contract import CollectorOptions, ParseError
from hetero_exporter.sdk.identity import resolve

from hetero_exporter.collectors.mthreads import versions

from . import query as gmi_query
from .parse import MIB, TOOL, GmiDevice, GmiProcess, GmiTable, detect, parse_table  # noqa: F401 - part of this API

log = logging.getLogger(__name__)
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


def device_uuid(d: GmiDevice, q: Optional[gmi_query.GmiQueried] = None) -> str:
    """``-q``'s GPU UUID, else its Serial Number, else the PCI address, else the index."""
    if q is not None and q.uuid:
        return f"mthreads-{q.uuid}"
    if q is not None and q.serial:
        return f"mthreads-sn-{q.serial}"
    return f"mthreads-pci-{d.bus_id}" if d.bus_id else f"mthreads-index-{d.index}"


def identity_of(d: GmiDevice, t: GmiTable, numa: Optional[int] = None, q: Optional[gmi_query.GmiQueried] = None,
                runtime: Optional[str] = None, uuid: Optional[str] = None) -> DeviceIdentity:
    """driver_version from the title's ``Driver Version``; runtime_version the title's MUSA
    version, else ``runtime`` (the MUSA toolkit's version.json), else None; ``uuid`` a pinned
    id that wins over device_uuid."""
    return DeviceIdentity(vendor=VENDOR, kind=KIND, index=d.index, uuid=uuid or device_uuid(d, q),
                          model=profiles.normalize_model(VENDOR, d.name) if d.name else "unknown",
                          pci_address=d.bus_id, numa_node=numa, driver_version=t.driver_version,
                          runtime_version=t.runtime_version or runtime or None, name=d.name or None,
                          serial=q.serial if q is not None else None,
                          firmware_version=q.mtbios if q is not None else None)


def conditions(d: GmiDevice) -> list[Fault]:
    used, total = d.memory_used_bytes, d.memory_total_bytes
    if d.memory_over_total and used is not None and total is not None:
        return [table_fault(VENDOR, "memory-over-total", f"GPU {d.index}: used {used / MIB:.0f} MiB of {total / MIB:.0f} MiB",
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
                                health=health_of(reasons), faults=reasons,
                                processes=processes_of(t, d, uuid), processes_reported=t.process_section))
    return NodeSnapshot(node=node, time=now, devices=tuple(out))


def parse_any(text: str) -> Any:
    """``hetero-exporter parse mthreads-gmi FILE``: the default table (a NodeSnapshot), or the
    ids of a ``-q`` report (ParsedOutput)."""
    try:
        detect(text)
    except ParseError:
        if gmi_query.is_query(text):
            return ParsedOutput(f"{TOOL} -q", gmi_query.parse_query(text))
        raise
    return table_snapshot(parse_table(text))


QUERY_ARGS = ("-q",)


class MthreadsGmiCollector(CliCollector):
    name = "mthreads_gmi"
    vendor = VENDOR
    tool = TOOL
    summary_args = ()

    def __init__(self, exe: str, **kw: Any):
        super().__init__(exe, **kw)
        # the MUSA toolkit's version.json below the host root (the table prints no MUSA version)
        self.runtime_version = versions.discover(self.host.root_dir).runtime_version

    def parse_summary(self, text: str) -> GmiTable:
        return parse_table(text)

    def _queried(self, deadline: float) -> tuple[gmi_query.GmiQueried, ...]:
        """``mthreads-gmi -q`` (the GPUs' ids); () where it fails (logged: ids by PCI address)."""
        try:
            return gmi_query.parse_query(self.cli.call(QUERY_ARGS, deadline)).gpus
        except Exception as e:  # noqa: BLE001 - the PCI address is the id then
            log.warning("mthreads-gmi -q failed (%s): GPUs identified by PCI address", e)
            return ()

    def _identities(self, t: GmiTable, deadline: float) -> dict[int, DeviceIdentity]:
        """Index -> identity (sdk.identity.resolve): pinned ones as they are, new ones from one
        ``-q`` call for all of them."""

        def make(d: GmiDevice, q: Optional[gmi_query.GmiQueried], before: Optional[str]) -> DeviceIdentity:
            return identity_of(d, t, self.numa(d.bus_id), q, self.runtime_version, before)

        return resolve(self.identities, t.devices, lambda d: (d.index, d.bus_id), lambda: self._queried(deadline),
                       lambda q: (q.index, q.bus_id), lambda q: bool(q.uuid or q.serial), make)

    def complete(self, parsed: GmiTable) -> bool:
        return parsed.complete

    def devices(self, parsed: GmiTable, now: float, deadline: float) -> list[DeviceSample]:
        idents = self._identities(parsed, deadline)
        out = []
        for d in parsed.devices:
            ident = idents[d.index]
            out.append(self.sample(ident, now, readings_of(d), conditions(d),
                                   processes=processes_of(parsed, d, ident.uuid), processes_reported=parsed.process_section))
        return out



def create(options: CollectorOptions) -> MthreadsGmiCollector:
    """Over the real tool (``settings.path``, else mthreads-gmi on PATH or in the ToolSpec's
    folders) or, when simulating, over the fake written into ``options.workdir``."""
    return build(options, MthreadsGmiCollector, "hetero_exporter.collectors.mthreads.gmi.fake", TOOL, vendor=VENDOR)
