"""MetaX GPUs through ``mx-smi``: the quality table, the model of a parsed output, ``parse
mx-smi FILE``, and a collector on the SDK's CliCollector.

Invocations (stated; benchmarks count them through ``calls``):
- ``mx-smi``: one call for all GPUs every cycle (utilization, memory, temperature, power and
  cap, GPU-State, bus id, versions, processes);
- ``mx-smi topo -m``: the MetaXLink matrix, once when the collector is built (so the first
  snapshot, what ``inspect`` prints, has the links; outside the per-cycle count), then every
  ``topo_interval`` seconds (default 600; 0 disables) through sdk.schedule.DetailSchedule,
  in a cycle with time to spare.

- ``mx-smi -L``: the GPU list with each GPU's UUID (``GPU#0  MXC500  0000:08:00.0  Available
  (UUID: GPU-e702f06b-...)``), asked once when a GPU is first seen (its identity is then
  pinned by the base class), never per cycle.

Identity: ``identity.uuid`` is the UUID of ``mx-smi -L`` as printed (``GPU-<uuid>``; ``GPU-`` put
in front where a version prints it bare), the one device id mx-smi prints (no serial in any
output at hand). Where -L fails or prints no UUID (a GPU that is not Available), the id is the
PCI address (``metax-pci-0000:0e:00.0``), else the index; a GPU first pinned under its PCI
address that later gets its UUID (an agent restart with -L working) replaces it
(sdk.identity). Identities are pinned by the base class, and a GPU the table no longer lists
is failed under its pinned uuid (fault ``missing``).

Versions: driver_version is the Kernel Mode Driver Version, firmware_version the BIOS Version
of the table's title; runtime_version the title's MACA Version where it prints a number, else
the MACA install's Version.txt below the host root (collectors/metax/versions.py),
else None (never the driver version).

``parse mx-smi FILE`` also reads ``mx-smi -L`` and the ``--show-temperature --show-usage
--show-memory`` report (listing.py; the report gives devices with memory, utilization and the
hotspot temperature, QUALITY_REPORT).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from hetero_exporter.model import fields as F
from hetero_exporter import profiles
from hetero_exporter.model import (DeviceIdentity, DeviceSample, Fault, Health, Link, NodeSnapshot, ProcessSample,
                                   Quality, Reading)
from hetero_exporter.sdk.cli_collector import process_samples, CliCollector, ParsedOutput, Readings, build, table_fault
from hetero_exporter.sdk.faults import health_of
from hetero_exporter.sdk.contract import CollectorOptions, ParseError
from hetero_exporter.sdk.identity import resolve
from hetero_exporter.sdk.schedule import DEFAULT_TOPO_INTERVAL, DetailSchedule
from hetero_exporter.sdk.settings import CADENCE_MAX, ToolSettings, seconds, setting

from hetero_exporter.collectors.metax import versions
from hetero_exporter.collectors.metax.mx_smi import listing
from hetero_exporter.collectors.metax.mx_smi.parse import (  # noqa: F401 - part of this module's API
    MIB, TOOL, TOPO_LINKS, MxGpu, MxTable, MxTopo, detect, parse_processes, parse_table, parse_topo)

log = logging.getLogger(__name__)
VENDOR, KIND = "metax", "gpu"

# mx-smi's GPU-Util is a busy ratio sampled by the driver over a period MetaX does not
# document (mx-smi --help and the MACA docs state none): UTIL_WINDOW, 1 s, is assumed.
UTIL_WINDOW = 1.0

QUALITY: dict[str, Quality] = {
    F.UTILIZATION: Quality("mx-smi: GPU-Util", "sampled", UTIL_WINDOW, 0.01),
    F.MEMORY_USED: Quality("mx-smi: Memory-Usage used (MiB)", "measured", None, MIB),
    F.MEMORY_TOTAL: Quality("mx-smi: Memory-Usage total (MiB)", "measured", None, MIB),
    F.TEMP_CORE: Quality("mx-smi: Temp (C)", "measured", None, 1.0),
    F.POWER: Quality("mx-smi: Pwr:Usage (W; Power in 2.1.6)", "measured", None, 1.0),
    F.POWER_LIMIT: Quality("mx-smi: Pwr:Cap (W)", "measured", None, 1.0),
}

# the --show-temperature --show-usage --show-memory report (listing.py; parse only)
QUALITY_REPORT: dict[str, Quality] = {
    F.UTILIZATION: Quality("mx-smi --show-usage: Utilization GPU", "sampled", UTIL_WINDOW, 0.01),
    F.MEMORY_USED: Quality("mx-smi --show-memory: vram used (KB)", "measured", None, 1024.0),
    F.MEMORY_TOTAL: Quality("mx-smi --show-memory: vram total (KB)", "measured", None, 1024.0),
    # hotspot is printed with two decimals in steps of 1/4 C (44.00, 45.75, 37.50)
    F.TEMP_CORE: Quality("mx-smi --show-temperature: Chip Temperature hotspot (C)", "measured", None, 0.25),
}


def gpu_uuid(g: Any, listed: Optional[str] = None) -> str:
    """The UUID ``mx-smi -L`` printed (``GPU-...``), else the PCI address, else the index."""
    if listed and listed.strip():
        u = listed.strip()
        return u if u.upper().startswith("GPU-") else f"GPU-{u}"
    return f"metax-pci-{g.bus_id}" if g.bus_id else f"metax-gpu{g.index}"


def readings_of(g: MxGpu) -> dict[str, Reading]:
    """Readings in base units; memory used above total (a driver fault seen in captures of
    other vendors' tools) is a used reading with status ``error``, never a negative free."""
    r = Readings(QUALITY)
    r.put(F.UTILIZATION, g.util_ratio)
    r.put(F.MEMORY_TOTAL, g.memory_total_mib, scale=MIB)
    if g.memory_used_mib is not None and g.memory_total_mib is not None and g.memory_used_mib > g.memory_total_mib:
        r[F.MEMORY_USED] = Reading(None, QUALITY[F.MEMORY_USED].with_status("error", 0.0))
    else:
        r.put(F.MEMORY_USED, g.memory_used_mib, scale=MIB)
    r.put(F.TEMP_CORE, g.temp_c)
    r.put(F.POWER, g.power_w)
    if g.power_cap_w is not None or g.power_w is not None:
        r.put(F.POWER_LIMIT, g.power_cap_w)
    return r


def conditions(g: MxGpu) -> list[Fault]:
    """What the table shows about the GPU's health (faults.yaml)."""
    out = []
    if g.state is not None and g.state.lower() != "available":
        out.append(table_fault(VENDOR, "gpu-state", f"GPU {g.index}: GPU-State {g.state}", TOOL))
    if g.na_fields:
        out.append(table_fault(VENDOR, "readings-na", f"GPU {g.index}: N/A in {', '.join(g.na_fields)}", TOOL))
    if g.memory_used_mib is not None and g.memory_total_mib is not None and g.memory_used_mib > g.memory_total_mib:
        out.append(table_fault(VENDOR, "memory-above-total",
                               f"GPU {g.index}: {g.memory_used_mib:g}/{g.memory_total_mib:g} MiB", TOOL))
    return out


def identity_of(g: MxGpu, t: MxTable, numa: Optional[int] = None, uuid: Optional[str] = None,
                runtime: Optional[str] = None) -> DeviceIdentity:
    """``uuid``: the pinned or listed id (default: gpu_uuid without -L); ``runtime``: the MACA
    version of the install's file, used where the title prints none."""
    return DeviceIdentity(vendor=VENDOR, kind=KIND, index=g.index, uuid=uuid or gpu_uuid(g),
                          model=profiles.normalize_model(VENDOR, g.name), pci_address=g.bus_id, numa_node=numa,
                          driver_version=t.driver_version, runtime_version=t.runtime_version or runtime or None,
                          firmware_version=t.bios_version, name=g.name or None)


def processes_of(t: MxTable, g: MxGpu, uuid: str) -> tuple[ProcessSample, ...]:
    return process_samples((p for p in t.processes if p.gpu == g.index), uuid, memory="memory_mib", scale=MIB)


def links_of(topo: Optional[MxTopo], uuids: Mapping[int, str]) -> dict[str, tuple[Link, ...]]:
    """Links of a ``topo -m`` answer between the GPUs listed now (GPUn is mx-smi's index n):
    ``MX`` is MetaXLink, the PCIe words as nvidia-smi's (TOPO_LINKS); NA / unknown words none."""
    if topo is None:
        return {}
    out: dict[str, list[Link]] = {}
    for a, b, word in topo.links:
        kind = TOPO_LINKS.get(word.upper())
        if kind and a in uuids and b in uuids and a != b:
            out.setdefault(uuids[a], []).append(Link(peer=uuids[b], type=kind))
    return {k: tuple(v) for k, v in out.items()}


def table_snapshot(t: MxTable, node: str = "", now: float = 0.0) -> NodeSnapshot:
    """The model of one ``mx-smi`` text (what ``parse mx-smi FILE`` prints)."""
    out = []
    for g in t.gpus:
        reasons = tuple(conditions(g))
        ident = identity_of(g, t)
        out.append(DeviceSample(identity=ident, timestamp=now, readings=readings_of(g),
                                health=health_of(reasons), faults=reasons,
                                processes=processes_of(t, g, ident.uuid), processes_reported=t.process_section))
    return NodeSnapshot(node=node, time=now, devices=tuple(out))


def report_snapshot(r: listing.MxReport, node: str = "", now: float = 0.0) -> NodeSnapshot:
    """The model of a ``--show-temperature --show-usage --show-memory`` report: identity by PCI
    address (the report prints no UUID), readings, health ok (it shows no state), no processes."""
    out = []
    for g in r.gpus:
        rd = Readings(QUALITY_REPORT)
        rd.put(F.UTILIZATION, g.utilization_ratio)
        rd.put(F.MEMORY_TOTAL, g.memory_total_bytes)
        rd.put(F.MEMORY_USED, g.memory_used_bytes)
        rd.put(F.TEMP_CORE, g.temperature_celsius)
        ident = DeviceIdentity(vendor=VENDOR, kind=KIND, index=g.index, uuid=gpu_uuid(g),
                               model=profiles.normalize_model(VENDOR, g.name), pci_address=g.bus_id,
                               name=g.name or None)
        out.append(DeviceSample(identity=ident, timestamp=now, readings=rd, health=Health("ok", ())))
    return NodeSnapshot(node=node, time=now, devices=tuple(out))


def parse_any(text: str) -> Any:
    """``hetero-exporter parse mx-smi FILE``: the default table or the ``--show-*`` report give a
    NodeSnapshot; ``topo -m`` / ``topo -n`` their matrix, ``--show-process`` its processes,
    ``-L`` its GPU list (ParsedOutput)."""
    try:
        kind = detect(text)
    except ParseError:
        if listing.is_list(text):
            return ParsedOutput(f"{TOOL} -L", [dataclasses.asdict(g) for g in listing.parse_list(text)])
        if listing.is_report(text):
            return report_snapshot(listing.parse_report(text))
        raise
    if kind == TOOL:
        return table_snapshot(parse_table(text))
    if kind.startswith(f"{TOOL} topo"):
        return ParsedOutput(kind, parse_topo(text))
    return ParsedOutput(kind, [dataclasses.asdict(p) for p in parse_processes(text)])


# --------------------------------------------------------------------------- collector

LIST_ARGS = ("-L",)
_NODE = "node"  # the schedule's target of the node-wide topology call


@dataclass(frozen=True)
class MxSmiSettings(ToolSettings):
    """``collectors.mx_smi``: ``topo_interval`` seconds between ``mx-smi topo`` calls (0: never)."""

    topo_interval: float = setting(DEFAULT_TOPO_INTERVAL, seconds(CADENCE_MAX))


SETTINGS = MxSmiSettings


class MxSmiCollector(CliCollector):
    name = "mx_smi"
    vendor = VENDOR
    tool = TOOL
    summary_args = ()
    settings_type = MxSmiSettings
    settings: MxSmiSettings

    def __init__(self, exe: str, **kw: Any):
        super().__init__(exe, **kw)
        # MACA's Version.txt below the host root: the runtime version where the title prints none
        self.runtime_version = versions.discover(self.host.root_dir).runtime_version
        topo = self.settings.topo_interval
        self.topo_schedule = DetailSchedule({"topo": topo}, self.interval, 1)
        # MetaXLink topology before the first cycle, with a quarter of the cycle budget: it is
        # node-wide, rarely changes, and the first snapshot should carry it
        if topo > 0:
            self._refresh_topo(time.monotonic() + 0.25 * self.budget)

    def parse_summary(self, text: str) -> MxTable:
        return parse_table(text)

    def complete(self, parsed: MxTable) -> bool:
        """The process box comes last: without it the output was cut short, and a GPU it
        does not list is not lost."""
        return parsed.process_section

    def _refresh_topo(self, deadline: float) -> None:
        now = self.clock()
        try:
            value: Any = parse_topo(self.cli.call(["topo", "-m"], deadline))
        except Exception as e:  # noqa: BLE001 - no links this time; the cycle goes on
            log.warning("mx-smi topo -m failed: %s", e)
            value = None
        st = self.topo_schedule.done((_NODE, "topo"), now, value, ok=value is not None)
        if st.disabled and st.failures == self.topo_schedule.max_failures:
            log.warning("mx-smi topo -m failed %d times; not asked again", st.failures)

    def _topo(self) -> Optional[MxTopo]:
        st = self.topo_schedule.latest((_NODE, "topo"))
        return st.value if st is not None else None

    def _listed(self, deadline: float) -> tuple[listing.MxListed, ...]:
        """``mx-smi -L`` (the GPUs' UUIDs); () where it fails (logged: ids by PCI address)."""
        try:
            return listing.parse_list(self.cli.call(LIST_ARGS, deadline))
        except Exception as e:  # noqa: BLE001 - the PCI address is the id then
            log.warning("mx-smi -L failed (%s): GPUs identified by PCI address", e)
            return ()

    def _identities(self, t: MxTable, topo: Optional[MxTopo], deadline: float) -> dict[int, DeviceIdentity]:
        """Index -> identity (sdk.identity.resolve): pinned ones as they are, new ones from one
        ``mx-smi -L`` call for all of them."""

        def make(g: MxGpu, listed: Optional[listing.MxListed], before: Optional[str]) -> DeviceIdentity:
            uuid = gpu_uuid(g, listed.uuid) if listed is not None and listed.uuid else before
            numa = self.numa(g.bus_id)
            if numa is None and topo is not None:
                numa = topo.numa.get(g.index)  # topo's Node Affinity where sysfs says nothing
            return identity_of(g, t, numa, uuid, self.runtime_version)

        return resolve(self.identities, t.gpus, lambda g: (g.index, g.bus_id), lambda: self._listed(deadline),
                       lambda x: (x.index, x.bus_id), lambda x: bool(x.uuid), make)

    def devices(self, t: MxTable, now: float, deadline: float) -> list[DeviceSample]:
        if deadline - time.monotonic() > 0.25 * self.budget and self.topo_schedule.due([(_NODE, "topo")], now):
            self._refresh_topo(deadline)
        topo = self._topo()
        idents = self._identities(t, topo, deadline)
        out, uuids = [], {}
        for g in t.gpus:
            ident = idents[g.index]
            uuids[g.index] = ident.uuid
            out.append(self.sample(ident, now, readings_of(g), conditions(g),
                                   processes=processes_of(t, g, ident.uuid), processes_reported=t.process_section))
        links = links_of(topo, uuids)
        return [dataclasses.replace(d, links=links[d.identity.uuid]) if d.identity.uuid in links else d for d in out]



def create(options: CollectorOptions) -> MxSmiCollector:
    """The mx_smi collector: the real tool (``settings.path``, else ``mx-smi`` on PATH or in the
    spec's ToolSpec folders, /opt/mxdriver/bin first), or its fake when simulating."""
    return build(options, MxSmiCollector, "hetero_exporter.collectors.metax.mx_smi.fake", TOOL, vendor=VENDOR)
