"""MetaX GPUs through ``mx-smi``: the quality table, the model of a parsed output, ``parse
mx-smi FILE``, and a collector on the SDK's CliCollector.

Invocations (stated; benchmarks count them through ``calls``):
- ``mx-smi``: one call for all GPUs every cycle (utilization, memory, temperature, power and
  cap, GPU-State, bus id, versions, processes);
- ``mx-smi topo -m``: the MetaXLink matrix, once when the collector is built (so the first
  snapshot, what ``inspect`` prints, has the links; outside the per-cycle count), then every
  ``topo_interval`` seconds (default 600; 0 disables) through sdk.schedule.DetailSchedule,
  in a cycle with time to spare.

mx-smi prints no serial or UUID in its default table, so a GPU's uuid is its PCI address
(``metax-pci-0000:0e:00.0``), stable across reboots and shared by every reader of the
bus; identities are pinned by the base class, and a GPU the table no longer lists is failed
under its pinned uuid (fault ``missing``). driver_version is the Kernel Mode Driver Version,
runtime_version the MACA Version of the table's title, firmware_version the BIOS Version.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Mapping, Optional

from hetero_exporter import fields as F
from hetero_exporter import profiles
from hetero_exporter.model import (DeviceIdentity, DeviceSample, Fault, Health, Link, NodeSnapshot, ProcessSample,
                                   Quality, Reading)
from hetero_exporter.sdk.cli_collector import process_samples, CliCollector, ParsedOutput, Readings, build, table_fault, worst_state
from hetero_exporter.sdk.contract import CollectorOptions
from hetero_exporter.sdk.schedule import DetailSchedule

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


def gpu_uuid(g: MxGpu) -> str:
    """The PCI address (mx-smi prints no serial or UUID), else the index."""
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


def identity_of(g: MxGpu, t: MxTable, numa: Optional[int] = None) -> DeviceIdentity:
    return DeviceIdentity(vendor=VENDOR, kind=KIND, index=g.index, uuid=gpu_uuid(g),
                          model=profiles.normalize_model(VENDOR, g.name), pci_address=g.bus_id, numa_node=numa,
                          driver_version=t.driver_version, runtime_version=t.runtime_version,
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
                                health=Health(worst_state(reasons), reasons), faults=reasons,
                                processes=processes_of(t, g, ident.uuid), processes_reported=t.process_section))
    return NodeSnapshot(node=node, time=now, devices=tuple(out))


def parse_any(text: str) -> Any:
    """``hetero-exporter parse mx-smi FILE``: the default table gives a NodeSnapshot; ``topo -m``
    / ``topo -n`` their matrix, ``--show-process`` its processes (ParsedOutput)."""
    kind = detect(text)
    if kind == TOOL:
        return table_snapshot(parse_table(text))
    if kind.startswith(f"{TOOL} topo"):
        return ParsedOutput(kind, parse_topo(text))
    return ParsedOutput(kind, [dataclasses.asdict(p) for p in parse_processes(text)])


# --------------------------------------------------------------------------- collector

DEFAULT_TOPO_INTERVAL = 600.0
_NODE = "node"  # the schedule's target of the node-wide topology call


class MxSmiCollector(CliCollector):
    name = "mx_smi"
    vendor = VENDOR
    tool = TOOL
    summary_args = ()

    def __init__(self, exe: str, **kw: Any):
        super().__init__(exe, **kw)
        topo = float(self.settings.get("topo_interval", DEFAULT_TOPO_INTERVAL))
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

    def devices(self, t: MxTable, now: float, deadline: float) -> list[DeviceSample]:
        if deadline - time.monotonic() > 0.25 * self.budget and self.topo_schedule.due([(_NODE, "topo")], now):
            self._refresh_topo(deadline)
        topo = self._topo()
        out, uuids = [], {}
        for g in t.gpus:
            ident = self.identities.recall(uuid=gpu_uuid(g))
            if ident is None:
                numa = self.numa(g.bus_id)
                if numa is None and topo is not None:
                    numa = topo.numa.get(g.index)  # topo's Node Affinity where sysfs says nothing
                ident = identity_of(g, t, numa)
            uuids[g.index] = ident.uuid
            out.append(self.sample(ident, now, readings_of(g), conditions(g),
                                   processes=processes_of(t, g, ident.uuid), processes_reported=t.process_section))
        links = links_of(topo, uuids)
        return [dataclasses.replace(d, links=links[d.identity.uuid]) if d.identity.uuid in links else d for d in out]



def create(options: CollectorOptions) -> MxSmiCollector:
    """The mx_smi collector: the real tool (``settings.path``, else ``mx-smi`` on PATH or in the
    spec's ToolSpec folders, /opt/mxdriver/bin first), or its fake when simulating."""
    return build(options, MxSmiCollector, "hetero_exporter.collectors.metax.mx_smi.fake", TOOL, vendor=VENDOR)
