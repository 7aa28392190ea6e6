"""Enflame GCUs through ``efsmi``: the parsed outputs turned into the model, ``parse efsmi
FILE``, and a collector on the SDK's CliCollector.

Invocations (stated; benchmarks count them through ``calls``):
- ``efsmi``: one call for all devices, every cycle (utilization, memory size, temperature,
  power and cap, power-management state, ECC mode, bus id, serial, processes where printed);
- ``efsmi -q``: one node-wide call at first sight of a device (the "Dev UUID" the device
  plugin advertises, so the uuid is pinned right), then every ``query_interval`` seconds
  (default 60; 0 disables) for what the table lacks: memory used, Health, RMA flags, DBE.
  A failed ``-q`` keeps the previous answer (its readings age) and never fails the cycle.

The runtime version: efsmi prints its own and the driver's version only (``EFSMI``, ``Driver
Ver``), no TopsRider one; the runtime version is settings ``runtime_version`` where a host
states it, else the TopsRider install's version file below the host root
(collectors/enflame/versions.py), else None (unknown; never the driver version).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from hetero_exporter import validate as v
from hetero_exporter.model import fields as F
from hetero_exporter import profiles
from hetero_exporter.model import (DeviceIdentity, DeviceSample, Fault, Health, NodeSnapshot, ProcessSample,
                                   Quality, Reading)
from hetero_exporter.sdk.cli_collector import process_samples, CliCollector, Readings, build, table_fault
from hetero_exporter.sdk.faults import health_of
from hetero_exporter.sdk.contract import CollectorOptions, ParseError
from hetero_exporter.sdk.schedule import DetailSchedule
from hetero_exporter.sdk.settings import CADENCE_MAX, ToolSettings, seconds, setting
from hetero_exporter.collectors.enflame import versions

from .parse import (MIB, STATE_FIELDS, TOOL, EfsmiTable, GcuDetail, GcuDevice, detect,  # noqa: F401
                    parse_query, parse_table)

log = logging.getLogger(__name__)
VENDOR, KIND = "enflame", "gcu"

# DUsed / GCU Usage: a busy share the driver averages over a period Enflame does not document;
# UTIL_WINDOW (1 s) is assumed, not documented.
UTIL_WINDOW = 1.0

QUALITY: dict[str, Quality] = {
    F.UTILIZATION: Quality("efsmi: DUsed (%)", "sampled", UTIL_WINDOW, 0.001),  # printed with 0.1 %
    F.MEMORY_TOTAL: Quality("efsmi: Mem (MiB)", "measured", None, MIB),
    F.MEMORY_USED: Quality("efsmi -q: Device Mem Info / Used Size (Mem Usage) (MiB)", "measured", None, MIB),
    F.TEMP_CORE: Quality("efsmi: TEMP (C)", "measured", None, 1.0),
    F.POWER: Quality("efsmi: Pwr(Usage/Cap) usage (W)", "measured", None, 1.0),
    F.POWER_LIMIT: Quality("efsmi: Pwr(Usage/Cap) cap (W)", "measured", None, 1.0),
    F.ECC_UNCORRECTED: Quality("efsmi -q: RMA Info / Total DBE", "measured", None, 1.0),
}
# the same quantities as ``efsmi -q`` prints them (``parse efsmi`` of a -q capture)
QUERY_QUALITY: dict[str, Quality] = {
    F.UTILIZATION: Quality("efsmi -q: Device Usage Info / GCU Usage (%)", "sampled", UTIL_WINDOW, 0.001),
    F.MEMORY_TOTAL: Quality("efsmi -q: Device Mem Info / Total Size (Mem Size) (MiB)", "measured", None, MIB),
    F.MEMORY_USED: QUALITY[F.MEMORY_USED],
    F.TEMP_CORE: Quality("efsmi -q: Temperature Info / GCU Temp (C)", "measured", None, 1.0),
    F.POWER: Quality("efsmi -q: Cur Power (W)", "measured", None, 1.0),
    F.POWER_LIMIT: Quality("efsmi -q: Power Capa (W)", "measured", None, 1.0),
    F.ECC_UNCORRECTED: QUALITY[F.ECC_UNCORRECTED],
}
DEFAULT_QUERY_INTERVAL = 60.0
_QUERY = ("node", "query")  # the schedule's job: the node-wide ``efsmi -q``


def _fault(code: str, message: str, source: str = TOOL) -> Fault:
    return table_fault(VENDOR, code, message, source)


def _detail_for(d: GcuDevice, details: Sequence[GcuDetail]) -> Optional[GcuDetail]:
    """The ``-q`` block of a table row: same bus id, else same serial, else same index."""
    for key in ("bus_id", "serial"):  # the address first: SR-IOV VFs share their card's SN
        mine = getattr(d, key)
        if mine:
            hit = next((x for x in details if getattr(x, key) == mine), None)
            if hit is not None:
                return hit
    return next((x for x in details if x.index == d.index and not (x.serial and d.serial)), None)


def device_uuid(d: GcuDevice, detail: Optional[GcuDetail] = None, peers: Sequence[GcuDevice] = ()) -> str:
    """``Dev UUID`` of efsmi -q (the device plugin's id), else the serial (SN), else the
    PCI address, else the index. SR-IOV VFs of one card print the card's SN (the S60G VF
    capture): where another of ``peers`` (the table's devices) shares it, the PCI address
    is added, so each VF has its own uuid."""
    if detail is not None and detail.uuid:
        return detail.uuid
    if d.serial:
        shared = d.bus_id and any(o is not d and o.serial == d.serial for o in peers)
        return f"{d.serial}-{d.bus_id}" if shared else d.serial
    return f"enflame-pci-{d.bus_id}" if d.bus_id else f"enflame-index-{d.index}"


def identity_of(d: GcuDevice, t: EfsmiTable, detail: Optional[GcuDetail] = None, numa: Optional[int] = None,
                runtime: Optional[str] = None) -> DeviceIdentity:
    drv = t.driver_version or (detail.driver_version if detail else None)
    return DeviceIdentity(vendor=VENDOR, kind=KIND, index=d.index, uuid=device_uuid(d, detail, t.devices),
                          model=profiles.normalize_model(VENDOR, d.name), pci_address=d.bus_id, numa_node=numa,
                          driver_version=drv, runtime_version=runtime or None, firmware_version=d.firmware,
                          name=d.name or None, serial=d.serial or (detail.serial if detail else None))


def readings_of(d: GcuDevice, detail: Optional[GcuDetail] = None, age: float = 0.0) -> dict[str, Reading]:
    r = Readings(QUALITY)
    r.put(F.UTILIZATION, d.util_pct, percent=True)
    total = d.memory_total_mib if d.memory_total_mib is not None else (detail.memory_total_mib if detail else None)
    r.put(F.MEMORY_TOTAL, total, scale=MIB)
    used, used_age = d.memory_used_mib, 0.0
    if used is None and detail is not None:
        used, used_age = detail.memory_used_mib, age
    if used is not None and total is not None and used > total:
        # used above total: a known driver fault; the figure is wrong, not a negative free size
        r[F.MEMORY_USED] = Reading(None, QUALITY[F.MEMORY_USED].with_status("error", used_age))
    else:
        r.put(F.MEMORY_USED, used, scale=MIB, age=used_age)
    r.put(F.TEMP_CORE, d.temp_c)
    r.put(F.POWER, d.power_w)
    r.put(F.POWER_LIMIT, d.power_cap_w)
    if detail is not None and detail.total_dbe is not None:
        r.put(F.ECC_UNCORRECTED, detail.total_dbe, age=age)
    return r


def table_conditions(d: GcuDevice, t: EfsmiTable) -> list[Fault]:
    """``state-na``: a state column N/A on this chip while another chip prints it."""
    out = []
    for key in STATE_FIELDS:
        if key in d.na_fields and any(key not in o.na_fields for o in t.devices if o is not d):
            label = {"dpm": "Dpm/Lpm", "ecc": "ECC"}[key]
            out.append(_fault("state-na", f"GCU {d.index}: {label} N/A"))
    return out


def detail_conditions(d: GcuDevice, detail: Optional[GcuDetail]) -> list[Fault]:
    if detail is None:
        return []
    out = []
    if detail.health is not None and detail.health.lower() in ("false", "no", "unhealthy", "bad"):
        out.append(_fault("unhealthy", f"GCU {d.index}: Health {detail.health}", "efsmi -q"))
    if detail.rma is not None and detail.rma.lower() in ("true", "yes"):
        out.append(_fault("rma", f"GCU {d.index}: RMA flags {detail.rma}", "efsmi -q"))
    return out


def _processes(t: EfsmiTable, d: GcuDevice, uuid: str) -> tuple[ProcessSample, ...]:
    return process_samples((p for p in t.processes if p.dev == d.index), uuid, memory="memory_mib", scale=MIB)


def table_snapshot(t: EfsmiTable, details: Sequence[GcuDetail] = (), node: str = "", now: float = 0.0) -> NodeSnapshot:
    """The model of one default ``efsmi`` output (what ``parse efsmi FILE`` prints)."""
    out = []
    for d in t.devices:
        det = _detail_for(d, details)
        uuid = device_uuid(d, det, t.devices)
        reasons = tuple(table_conditions(d, t) + detail_conditions(d, det))
        out.append(DeviceSample(identity=identity_of(d, t, det), timestamp=now, readings=readings_of(d, det),
                                health=health_of(reasons), faults=reasons,
                                processes=_processes(t, d, uuid), processes_reported=t.process_section))
    return NodeSnapshot(node=node, time=now, devices=tuple(out))


def query_snapshot(details: Sequence[GcuDetail]) -> NodeSnapshot:
    """The model of one ``efsmi -q`` output: a device per ``DEV ID`` block (uuid ``Dev UUID``,
    else SN, else PCI address, as device_uuid), its readings as -q prints them; health from
    ``Health`` / RMA ``Flags`` where printed, else ``unknown`` (a ``-d`` selection without them
    says nothing of health)."""
    out = []
    for det in details:
        row = GcuDevice(index=det.index, name=det.name or "", bus_id=det.bus_id, firmware=None, ecc=None,
                        temp_c=det.temp_c, dpm=None, power_w=det.power_w, power_cap_w=det.power_cap_w,
                        memory_total_mib=det.memory_total_mib, memory_used_mib=det.memory_used_mib, virt=None,
                        util_pct=det.util_pct, serial=det.serial)
        ident = identity_of(row, EfsmiTable(version=None, driver_version=det.driver_version, devices=(row,)), det)
        r = Readings(QUERY_QUALITY)
        # only what the block prints: -q -d selects sections, and a block may be cut short
        for field, value, scale in ((F.UTILIZATION, det.util_pct, 0.01), (F.MEMORY_TOTAL, det.memory_total_mib, MIB),
                                    (F.MEMORY_USED, det.memory_used_mib, MIB), (F.TEMP_CORE, det.temp_c, 1.0),
                                    (F.POWER, det.power_w, 1.0), (F.POWER_LIMIT, det.power_cap_w, 1.0),
                                    (F.ECC_UNCORRECTED, det.total_dbe, 1.0)):
            if value is not None:
                r.put(field, value, scale=scale, percent=field == F.UTILIZATION)
        used, total = det.memory_used_mib, det.memory_total_mib
        if used is not None and total is not None and used > total:  # the driver fault readings_of describes
            r[F.MEMORY_USED] = Reading(None, QUERY_QUALITY[F.MEMORY_USED].with_status("error"))
        reasons = tuple(detail_conditions(row, det))
        told = det.health is not None or det.rma is not None
        out.append(DeviceSample(identity=ident, timestamp=0.0, readings=r, faults=reasons,
                                health=health_of(reasons) if told else Health("unknown")))
    return NodeSnapshot(node="", time=0.0, devices=tuple(out))


def parse_any(text: str) -> Any:
    """``hetero-exporter parse efsmi FILE``: the default table, ``efsmi -q`` and ``efsmi dmon``
    (no bus ids) each give a NodeSnapshot of their devices."""
    kind = detect(text)
    if kind == "efsmi -q":
        return query_snapshot(parse_query(text))
    if kind == "efsmi dmon":
        from .dmon import parse_dmon
        return table_snapshot(parse_dmon(text))
    return table_snapshot(parse_table(text))


# --------------------------------------------------------------------------- collector


@dataclass(frozen=True)
class EfsmiSettings(ToolSettings):
    """``collectors.efsmi``: ``query_interval`` seconds between node-wide ``efsmi -q`` calls,
    ``runtime_version`` the TopsRider version where a host states it (else its version file)."""

    query_interval: float = setting(DEFAULT_QUERY_INTERVAL, seconds(CADENCE_MAX))
    runtime_version: Optional[str] = setting(None, v.string)


SETTINGS = EfsmiSettings


class EfsmiCollector(CliCollector):
    name = "efsmi"
    vendor = VENDOR
    tool = TOOL
    summary_args = ()
    settings_type = EfsmiSettings
    settings: EfsmiSettings

    def __init__(self, exe: str, **kw: Any):
        super().__init__(exe, **kw)
        self._query_interval = self.settings.query_interval
        self._runtime = self.settings.runtime_version or versions.discover(self.host.root_dir).runtime_version
        self._details: tuple[GcuDetail, ...] = ()
        # the node-wide -q at its cadence; a failing one is asked again an interval later, never
        # given up (what it adds, memory used and DBEs, is worth the retry)
        self.query_schedule = DetailSchedule({"query": self._query_interval}, self.interval, 1,
                                             max_failures=sys.maxsize)
        self._dbe: dict[str, float] = {}  # uuid -> Total DBE at the previous -q answer
        self._rising: dict[str, bool] = {}  # uuid -> the last -q answer counted new DBEs

    def parse_summary(self, text: str) -> EfsmiTable:
        return parse_table(text)

    def _query_due(self, t: EfsmiTable, now: float) -> bool:
        """Due by the schedule, or a device not seen yet (its uuid is the -q answer's)."""
        if self._query_interval <= 0:
            return False
        unseen = [d for d in t.devices if self.identities.recall(pci_address=d.bus_id) is None
                  and (d.bus_id or self.identities.recall(index=d.index) is None)]
        return bool(unseen) or bool(self.query_schedule.due([_QUERY], now))

    def _query(self, t: EfsmiTable, now: float, deadline: float) -> bool:
        """Refresh the ``-q`` answer when due; True when this cycle fetched a new one."""
        if not self._query_due(t, now):
            return False
        try:
            self._details = parse_query(self.cli.call(["-q"], deadline))
        except (ParseError, OSError, RuntimeError, TimeoutError) as e:  # the runner's CliError / CliTimeout
            log.warning("efsmi -q: %s (keeping the previous answer)", e)
            self.query_schedule.done(_QUERY, now, ok=False)
            return False
        self.query_schedule.done(_QUERY, now, self._details)
        return True

    def devices(self, parsed: EfsmiTable, now: float, deadline: float) -> list[DeviceSample]:
        fresh = self._query(parsed, now, deadline)
        answered = self.query_schedule.latest(_QUERY)
        age = 0.0 if answered is None else answered.age(now)
        out = []
        for d in parsed.devices:
            det = _detail_for(d, self._details)
            ident = (self.identities.recall(pci_address=d.bus_id) if d.bus_id else None) \
                or self.identities.recall(uuid=device_uuid(d, det, parsed.devices)) \
                or identity_of(d, parsed, det, self.numa(d.bus_id), self._runtime)
            current = table_conditions(d, parsed) + detail_conditions(d, det)
            if det is not None and det.total_dbe is not None and fresh:
                # one episode per -q answer that counts more DBEs than the previous one
                before = self._dbe.get(ident.uuid)
                self._rising[ident.uuid] = before is not None and det.total_dbe > before
                self._dbe[ident.uuid] = det.total_dbe
            if self._rising.get(ident.uuid) and det is not None:
                current.append(_fault("dbe", f"GCU {d.index}: Total DBE {det.total_dbe:g}", "efsmi -q"))
            out.append(self.sample(ident, now, readings_of(d, det, age), current,
                                   processes=_processes(parsed, d, ident.uuid), processes_reported=parsed.process_section))
        return out



def create(options: CollectorOptions) -> EfsmiCollector:
    return build(options, EfsmiCollector, "hetero_exporter.collectors.enflame.efsmi.fake", TOOL, vendor=VENDOR)
