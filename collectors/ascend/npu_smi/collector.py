"""Huawei Ascend NPUs through the ``npu-smi`` command-line tool: the parsed outputs
(collectors/npu_smi_parse.py) turned into the model, ``parse npu-smi FILE``, and a collector
that runs the tool through the shared runner (hetero_exporter.sdk.runner).

Invocations per cycle (stated, and measured by benchmarks/cli_invocations.py):
- ``npu-smi info``: one call for all NPUs, every cycle (health, power, temperature, AI core
  usage, DDR/HBM memory, bus id, processes);
- ``npu-smi info -t health -i N -c C``: only for chips whose summary health is not OK, to
  read the error codes (at most ``health_calls_per_cycle``, default 4);
- per-card details ``info -t usages|common|memory|ecc -i N``: each kind refreshed every
  ``detail_intervals[kind]`` seconds (defaults below), spread over cycles, at most
  ``detail_calls_per_cycle`` per cycle (default: the steady rate rounded up, plus one);
- ``info -t current-fault-event -i N``: the card's active fault events (event id, severity,
  time, description), a detail kind like the ones above (default every 120 s); each event is
  a fault of its chips (of every chip of the card where the output names none), looked up by
  its event id in collectors/ascend/faults.yaml; an id not in the table is still a fault, of
  the table's default class, with the event's own severity;
- ``info -t topo``: the HCCS link matrix, at start and then every ``topo_interval`` seconds
  (default 600; 0 disables), within the same per-cycle budget;
- identity, once per card in the agent's life: ``info -t board -i N`` (serial, firmware, die
  id on newer releases), ``info -t board -i N -c C`` only when the card-level output has
  neither a serial nor a die id, and ``info -m`` only for multi-chip cards without a
  ``Device`` column (to learn the chip logic ids).

The detail calls are planned by hetero_exporter.sdk.schedule (cadence per kind, per-cycle
budget, clock-went-back handling, a kind disabled after 3 failures); identities are pinned
in hetero_exporter.sdk.identity (a chip that disappears is failed under its pinned uuid).
``identity.runtime_version`` is the CANN version (collectors/ascend/versions.py) read below
``settings.host_root`` (default "/"), else None: the driver package's version is
``driver_version``, never a runtime version.

Units: npu-smi's "MB" are binary (an HBM of "65536" MB is 64 GiB): MB -> bytes is x 2**20.
Percentages become ratios 0..1. "NA", "N/A" and "-" are absent values (status unsupported).

The layouts the parsers read are listed in collectors/npu_smi_parse.py.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

from hetero_exporter.model import fields as F
from hetero_exporter import profiles
from hetero_exporter.sdk.contract import CollectorOptions, HostPaths, ParseError
from hetero_exporter.sdk import values
from hetero_exporter.sdk.cli_collector import CliCollector, ParsedOutput, Readings, build, table_fault
from hetero_exporter.sdk.schedule import DEFAULT_TOPO_INTERVAL, DetailSchedule
from hetero_exporter.sdk.settings import CADENCE_MAX, ToolSettings, cadences, integer, seconds, setting
from hetero_exporter.sdk import faults as fault_tables
from hetero_exporter.collectors.ascend import versions
from hetero_exporter.collectors.ascend.npu_smi.parse import (  # noqa: F401 - the parsers are part of this API
    TOOL, TOPO_FABRIC, CardListing, ChipMapping, DetailDoc, FaultEvent, FaultEvents, HealthDetail, NpuChip,
    NpuList, NpuProcess, NpuSummary, NpuTopo, canonical_health, detect, health_detail,
    parse_detail, parse_fault_events, parse_list, parse_mapping, parse_proc_mem, parse_summary, parse_topo)
from hetero_exporter.model import (CollectorStatus, DeviceIdentity, DeviceSample, Fault, Health, Link,
                                   NodeSnapshot, ProcessSample, Quality, Reading)

log = logging.getLogger(__name__)

MIB = 1 << 20

# --------------------------------------------------------------------------- normalizing

# Static quality of each field: source (the npu-smi command and column), method, window,
# resolution (in base units) and error bound where Huawei documents one (none is documented).
# The busy ratios (AICore(%), the -t usages rates) are sampled by the driver over a period
# Huawei does not document (npu-smi, DCMI dcmi_get_device_utilization_rate and ACL
# aclrtGetDeviceUtilizationRate state none): UTIL_WINDOW, 1 s, is assumed, not documented.
UTIL_WINDOW = 1.0

QUALITY: dict[str, Quality] = {
    F.UTILIZATION: Quality("npu-smi info: AICore(%) (NPU Util(%) in the newer layout)", "sampled", UTIL_WINDOW, 0.01),
    F.MEMORY_USED: Quality("npu-smi info: HBM-Usage(MB) used (Memory-Usage(MB) on chips without HBM)", "measured", None, MIB),
    F.MEMORY_TOTAL: Quality("npu-smi info: HBM-Usage(MB) total (Memory-Usage(MB) on chips without HBM)", "measured", None, MIB),
    "memory_ddr_used_bytes": Quality("npu-smi info: Memory-Usage(MB) used, on chips that also have HBM", "measured", None, MIB),
    "memory_ddr_total_bytes": Quality("npu-smi info: Memory-Usage(MB) total, on chips that also have HBM", "measured", None, MIB),
    F.TEMP_CORE: Quality("npu-smi info: Temp(C)", "measured", None, 1.0),
    F.POWER: Quality("npu-smi info: Power(W)", "measured", None, 0.1),
    "hugepages_used_pages": Quality("npu-smi info: Hugepages-Usage(page) used", "measured", None, 1.0),
    "hugepages_total_pages": Quality("npu-smi info: Hugepages-Usage(page) total", "measured", None, 1.0),
    # per-card details, refreshed at their own cadence (age_seconds says how old)
    F.MEMORY_UTILIZATION: Quality("npu-smi info -t usages: HBM Bandwidth Usage Rate(%) (DDR on chips without HBM)", "sampled", UTIL_WINDOW, 0.01),
    "aicpu_utilization_ratio": Quality("npu-smi info -t usages: Aicpu Usage Rate(%)", "sampled", UTIL_WINDOW, 0.01),
    "ctrlcpu_utilization_ratio": Quality("npu-smi info -t usages: Ctrlcpu Usage Rate(%)", "sampled", UTIL_WINDOW, 0.01),
    "vector_utilization_ratio": Quality("npu-smi info -t usages: Aivector/Vectorcore Usage Rate(%)", "sampled", UTIL_WINDOW, 0.01),
    F.CLOCK_COMPUTE: Quality("npu-smi info -t common: Aicore curFreq(MHZ)", "measured", None, 1e6),
    "clock_compute_max_hertz": Quality("npu-smi info -t common: Aicore Freq(MHZ)", "measured", None, 1e6),
    "aicore_count": Quality("npu-smi info -t common: Aicore Count", "measured", None, 1.0),
    F.CLOCK_MEMORY: Quality("npu-smi info -t memory: HBM Clock Speed(MHz) (DDR on chips without HBM)", "measured", None, 1e6),
    F.TEMP_MEMORY: Quality("npu-smi info -t memory: HBM Temperature(C)", "measured", None, 1.0),
    F.TEMP_BOARD: Quality("npu-smi info -t temp: hottest MCU board sensor (LM75*)", "measured", None, 1.0),
    F.ECC_CORRECTED: Quality("npu-smi info -t ecc: HBM+DDR Single Bit Aggregate Total Err Cnt", "measured", None, 1.0),
    F.ECC_UNCORRECTED: Quality("npu-smi info -t ecc: HBM+DDR Double Bit Aggregate Total Err Cnt", "measured", None, 1.0),
}


def summary_readings(chip: NpuChip) -> dict[str, Reading]:
    """Readings of one chip from the summary table, in base units."""
    r = Readings(QUALITY)
    r.put(F.UTILIZATION, chip.aicore_pct, percent=True)
    has_hbm = bool(chip.hbm_total_mb)
    used, total = ((chip.hbm_used_mb, chip.hbm_total_mb) if has_hbm
                   else (chip.memory_used_mb, chip.memory_total_mb))
    r.put(F.MEMORY_USED, used, scale=MIB)
    r.put(F.MEMORY_TOTAL, total, scale=MIB)
    if has_hbm and chip.memory_total_mb:
        r.put("memory_ddr_used_bytes", chip.memory_used_mb, scale=MIB)
        r.put("memory_ddr_total_bytes", chip.memory_total_mb, scale=MIB)
    r.put(F.TEMP_CORE, chip.temp_c)
    r.put(F.POWER, chip.power_w)
    if chip.hugepages_total is not None:
        r.put("hugepages_used_pages", chip.hugepages_used)
        r.put("hugepages_total_pages", chip.hugepages_total)
    return r


# Fields the summary table already gives: the collector takes them from the summary only
# (one source per field); ``parse npu-smi FILE`` of a single -t output shows them from there.
DETAIL_ONLY_QUALITY: dict[str, Quality] = {
    F.POWER: Quality("npu-smi info -t power|common: NPU Real-time Power(W)", "measured", None, 0.1),
    F.TEMP_CORE: Quality("npu-smi info -t temp|common: NPU Temperature (C)", "measured", None, 1.0),
}


def detail_readings(doc: DetailDoc, chip: int, age: float = 0.0, *,
                    summary_fields: bool = False) -> dict[str, Reading]:
    """Readings a ``-t usages|common|memory|ecc|temp`` output adds for one chip (fields the
    summary does not carry; with ``summary_fields`` also power and chip temperature). Keys
    the output lacks give no entry."""
    r = Readings(QUALITY)

    def put(name: str, value: Optional[float], present: bool) -> None:
        if present:
            r.put(name, value, age=age)

    keys: tuple[str, ...]
    if summary_fields:
        for name, keys in ((F.POWER, ("npu real-time power(w)",)),
                           (F.TEMP_CORE, ("npu temperature (c)", "temperature(c)", "temperature (c)"))):
            if doc.get(chip, *keys) is not None:
                v = doc.number(chip, *keys)
                q = DETAIL_ONLY_QUALITY[name]
                r[name] = Reading(v, q) if v is not None else Reading(None, q.with_status("unsupported"))

    if doc.kind == "usages":
        bw_key = "hbm bandwidth usage rate(%)" if doc.number(chip, "hbm capacity(mb)") else "ddr bandwidth usage rate(%)"
        put(F.MEMORY_UTILIZATION, doc.ratio(chip, bw_key), doc.get(chip, bw_key) is not None)
        for name, keys in (("aicpu_utilization_ratio", ("aicpu usage rate(%)",)),
                           ("ctrlcpu_utilization_ratio", ("ctrlcpu usage rate(%)",)),
                           ("vector_utilization_ratio", ("aivector usage rate(%)", "vectorcore usage rate(%)"))):
            put(name, doc.ratio(chip, *keys), doc.get(chip, *keys) is not None)
    elif doc.kind == "common":
        for name, key, scale in ((F.CLOCK_COMPUTE, "aicore curfreq(mhz)", 1e6),
                                 ("clock_compute_max_hertz", "aicore freq(mhz)", 1e6),
                                 ("aicore_count", "aicore count", 1.0)):
            v = doc.number(chip, key)
            put(name, None if v is None else v * scale, doc.get(chip, key) is not None)
    elif doc.kind == "memory":
        hbm = doc.number(chip, "hbm capacity(mb)")
        key = "hbm clock speed(mhz)" if hbm else "ddr clock speed(mhz)"
        clk = doc.number(chip, key)
        put(F.CLOCK_MEMORY, clk * 1e6 if clk else None, doc.get(chip, key) is not None)  # 0 MHz: none fitted
        if hbm:
            put(F.TEMP_MEMORY, doc.number(chip, "hbm temperature(c)", "hbm temperature (c)"),
                doc.get(chip, "hbm temperature(c)", "hbm temperature (c)") is not None)
    elif doc.kind == "ecc":
        for name, what in ((F.ECC_CORRECTED, "single"), (F.ECC_UNCORRECTED, "double")):
            keys = tuple(f"{mem} {what} bit aggregate total err cnt" for mem in ("hbm", "ddr"))
            vals = [doc.number(chip, k) for k in keys]
            present = [doc.get(chip, k) is not None for k in keys]
            known = [v for v in vals if v is not None]
            put(name, sum(known) if known else None, any(present))
    elif doc.kind == "temp":
        temps = [values.checked_number(v, "npu-smi info -t temp", k) for k, v in doc.mcu.items()
                 if re.search(r"\(c\)$", k) and k != "temperature(c)"]
        known = [t for t in temps if t is not None]
        put(F.TEMP_BOARD, max(known) if known else None, bool(doc.mcu))
    return r


def chip_uuid(chip: NpuChip, board: Optional[DetailDoc], board_chip: Optional[DetailDoc],
              multi_chip: bool) -> str:
    """A stable id: the die id (VDie/Die/DDie ID) where npu-smi prints one, else the board
    serial (plus the chip number on multi-chip cards), else the PCI address."""
    for doc in (board_chip, board):
        if doc is None:
            continue
        die = doc.get(chip.chip_id, "vdie id", "die id", "ddie id")
        if die:
            hexes = re.findall(r"[0-9A-Fa-f]{8}", die)
            if hexes and not all(set(h) == {"0"} for h in hexes):
                return "ascend-" + "-".join(h.lower() for h in hexes)
    if board is not None:
        sn = (board.get(chip.chip_id, "serial number") or "").strip()
        if sn and not values.is_na(sn) and not re.fullmatch(r"x+", sn, re.I):
            return f"ascend-sn-{sn}" + (f"-c{chip.chip_id}" if multi_chip else "")
    if chip.bus_id:
        return f"ascend-pci-{chip.bus_id}" + (f"-c{chip.chip_id}" if multi_chip else "")
    return f"ascend-npu{chip.npu_id}-c{chip.chip_id}"


# --------------------------------------------------------------------------- health


def _fault(code: str, message: str, source: str) -> Fault:
    return table_fault("ascend", code, message, source)


# DCMI fault event severity (struct dcmi_dms_fault_event: 0 notice, 1 minor, 2 major,
# 3 critical; hiascend.com DCMI API reference, dcmi_get_fault_event, api_096.html) -> the model's,
# for event ids the fault table does not list (a listed id takes the table's severity).
EVENT_SEVERITY = {0: "info", 1: "warning", 2: "warning", 3: "critical"}
FAULT_EVENT_SOURCE = "npu-smi info -t current-fault-event"


def event_fault(ev: FaultEvent, where: str) -> Fault:
    """The Fault of one current fault event: class, action and severity from the fault table
    by event id; an id the table lacks keeps the default class and takes the event's severity."""
    text = "; ".join(x for x in (ev.description, ", ".join(f"{k}={v}" for k, v in ev.details),
                                 f"raised {ev.time}" if ev.time else "") if x)
    f = _fault(ev.code, f"{where}" + (f" ({text})" if text else ""), FAULT_EVENT_SOURCE)
    if not fault_tables.lookup("ascend", ev.code).known and ev.severity in EVENT_SEVERITY:
        f = dataclasses.replace(f, severity=EVENT_SEVERITY[ev.severity])
    return f


def chip_events(events: FaultEvents, chip_id: int) -> list[FaultEvent]:
    """The events of a chip: those printed in its block, and the card-level ones."""
    return [e for e in events.events if e.chip_id is None or e.chip_id == chip_id]


def chip_health(reasons: Sequence[Fault], vendor_state: str) -> Health:
    """The model's health from the vendor state and the active faults (``sdk.faults.health_of``:
    critical -> failed, warning -> degraded, info decides nothing); UNKNOWN (device absent or not
    started, per npu-smi) with no fault worse than info is ``unknown``, never failed."""
    health = fault_tables.health_of(reasons)
    if health.state == "ok" and vendor_state not in ("OK", "Warning", "Alarm", "Critical"):
        return Health("unknown", health.reasons)  # UNKNOWN: the device is absent or not started; cannot tell
    return health


# --------------------------------------------------------------------------- parse npu-smi FILE


def _sample(ident: DeviceIdentity, readings: Mapping[str, Reading], now: float,
            health: Health = Health(), processes: tuple = (), reported: bool = False) -> DeviceSample:
    return DeviceSample(identity=ident, timestamp=now, readings=dict(readings), health=health,
                        faults=tuple(health.reasons), processes=processes, processes_reported=reported)


def summary_snapshot(summary: NpuSummary, node: str = "", now: float = 0.0) -> NodeSnapshot:
    """The model of one ``npu-smi info`` text (what ``parse npu-smi FILE`` prints)."""
    multi = _multi_chip_cards(summary.chips)
    devices = []
    for ordinal, chip in enumerate(sorted(summary.chips, key=lambda c: (c.npu_id, c.chip_id))):
        uuid = chip_uuid(chip, None, None, chip.npu_id in multi)
        ident = _identity(chip, uuid, _logic_index(chip, ordinal, multi), summary.driver_version)
        reasons = () if chip.health == "OK" else (_fault(chip.health, f"NPU {chip.npu_id} chip {chip.chip_id}",
                                                         "npu-smi info"),)
        procs = tuple(_process(p, uuid) for p in summary.processes if _owns(chip, p, multi))
        devices.append(_sample(ident, summary_readings(chip), now,
                               chip_health(reasons, chip.health), procs,
                               # a cut process list may have lost rows: not "these are all"
                               summary.process_section and summary.cut is None))
    # a cut output says so where the snapshot names its source: the chips before the cut are whole
    said = () if summary.cut is None else (CollectorStatus("npu_smi", True, vendor="ascend", devices=len(devices),
                                                           error=f"npu-smi info: {summary.cut}"),)
    return NodeSnapshot(node=node, time=now, devices=tuple(devices), collectors=said)


def _multi_chip_cards(chips: Iterable[NpuChip]) -> set[int]:
    count: dict[int, int] = {}
    for c in chips:
        count[c.npu_id] = count.get(c.npu_id, 0) + 1
    return {n for n, k in count.items() if k > 1}


def _logic_index(chip: NpuChip, ordinal: int, multi: set[int]) -> int:
    if chip.logic_id is not None:
        return chip.logic_id
    return chip.npu_id if chip.npu_id not in multi else ordinal


def _identity(chip: NpuChip, uuid: str, index: int, driver: str, *, firmware: Optional[str] = None,
              serial: Optional[str] = None, numa: Optional[int] = None, name: Optional[str] = None,
              runtime: Optional[str] = None) -> DeviceIdentity:
    raw = name or chip.name
    drv = driver if driver and not values.is_na(driver) else None
    return DeviceIdentity(vendor="ascend", kind="npu", index=index, uuid=uuid,
                          model=profiles.normalize_model("ascend", raw), pci_address=chip.bus_id,
                          numa_node=numa, driver_version=drv, runtime_version=runtime or None,
                          firmware_version=firmware, name=raw or None, serial=serial)


def _owns(chip: NpuChip, p: NpuProcess, multi: set[int]) -> bool:
    if p.npu_id != chip.npu_id:
        return False
    return p.chip_id == chip.chip_id if p.chip_id is not None else (chip.chip_id == 0 or chip.npu_id not in multi)


def _process(p: NpuProcess, uuid: str) -> ProcessSample:
    return ProcessSample(pid=p.pid, device_uuid=uuid, name=p.name or None,
                         memory_bytes=None if p.memory_mb is None else p.memory_mb * MIB)


def _detail_snapshot(doc: DetailDoc, node: str = "") -> NodeSnapshot:
    npu = doc.npu_id if doc.npu_id is not None else 0
    devices = []
    for chip in doc.chip_ids():
        bus = doc.get(chip, "pcie bus info")
        fake = NpuChip(npu_id=npu, chip_id=chip, name=doc.get(chip, "chip name", "npu name") or "",
                       bus_id=values.checked_pci(bus, f"npu-smi info -t {doc.kind}", "Bus-Id", default_function=None))
        uuid = chip_uuid(fake, doc if doc.kind == "board" else None, doc if doc.kind == "board-chip" else None,
                         len(doc.chips) > 1)
        ident = _identity(fake, uuid, npu, doc.get(chip, "software version") or "",
                          firmware=doc.get(chip, "firmware version"))
        readings = detail_readings(doc, chip, summary_fields=True)
        health = Health()
        if doc.kind == "health":
            h = health_detail(doc, chip)
            reasons = tuple(_fault(c, h.information, "npu-smi info -t health")
                            for c in ((h.state,) if h.state != "OK" else ()) + h.codes)
            health = chip_health(reasons, h.state)
        devices.append(_sample(ident, readings, 0.0, health))
    return NodeSnapshot(node=node, time=0.0, devices=tuple(devices))


def parse_any(text: str) -> Any:
    """``hetero-exporter parse npu-smi FILE``: detect the command, parse it. Device outputs
    (the summary, ``-t`` details) give a NodeSnapshot; ``-m``, ``-l`` and the others a
    ParsedOutput naming the command."""
    kind = detect(text)
    if kind == "info":
        return summary_snapshot(parse_summary(text))
    if kind == "info -m":
        return ParsedOutput(kind, [dataclasses.asdict(m) for m in parse_mapping(text)])
    if kind == "info -l":
        return ParsedOutput(kind, parse_list(text))
    t = kind.split()[-1]
    if t == "topo":
        return ParsedOutput(kind, parse_topo(text))
    if t == "proc-mem":
        return ParsedOutput(kind, [dataclasses.asdict(p) for p in parse_proc_mem(text)])
    if t == "current-fault-event":
        return ParsedOutput(kind, parse_fault_events(text))
    doc = parse_detail(text, t)
    if t in ("health", "usages", "common", "memory", "ecc", "temp", "board", "board-chip", "power"):
        return _detail_snapshot(doc)
    return ParsedOutput(kind, doc)


# --------------------------------------------------------------------------- collector

FAULT_EVENTS = "current-fault-event"
# Seconds between refreshes of each per-card detail kind (0 disables a kind).
DEFAULT_DETAIL_INTERVALS = {"usages": 60.0, "common": 60.0, "memory": 300.0, "ecc": 300.0,
                            FAULT_EVENTS: 120.0}
_TOOL_DIRS = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
_NODE = "node"  # the schedule's target of node-wide calls (the topology)
_NOT_READINGS = (FAULT_EVENTS,)  # detail kinds that give faults, not readings


@dataclass
class _Known:
    """What the collector pinned about a chip the first time it saw it."""

    identity: DeviceIdentity
    chip: NpuChip


@dataclass(frozen=True)
class NpuSmiSettings(ToolSettings):
    """``collectors.npu_smi``: ``detail_intervals`` seconds between each per-card detail call
    (over DEFAULT_DETAIL_INTERVALS; 0: never), ``topo_interval`` between topology calls,
    ``detail_calls_per_cycle`` / ``health_calls_per_cycle`` how many a cycle may make (None: as
    many as are due)."""

    detail_intervals: Mapping[str, float] = setting(None, cadences, factory=dict)
    topo_interval: float = setting(DEFAULT_TOPO_INTERVAL, seconds(CADENCE_MAX))
    detail_calls_per_cycle: Optional[int] = setting(None, integer(0, 1000))
    health_calls_per_cycle: int = setting(4, integer(0, 1000))


SETTINGS = NpuSmiSettings


class NpuSmiCollector(CliCollector):
    name = "npu_smi"
    vendor = "ascend"
    tool = TOOL
    summary_args = ("info",)
    settings_type = NpuSmiSettings
    settings: NpuSmiSettings

    def __init__(self, exe: str, **kw: Any):
        super().__init__(exe, **kw)
        settings = self.settings
        self._intervals = {k: float(v) for k, v in {**DEFAULT_DETAIL_INTERVALS, **settings.detail_intervals}.items()
                           if float(v) > 0}
        topo = settings.topo_interval
        self.schedule = DetailSchedule({**self._intervals, **({"topo": topo} if topo > 0 else {})},
                                       self.interval, settings.detail_calls_per_cycle)
        self._health_budget = settings.health_calls_per_cycle
        self._known: dict[tuple[int, int], _Known] = {}
        self._by_uuid: dict[str, tuple[int, int]] = {}
        self._boards: dict[int, Optional[DetailDoc]] = {}  # card -> board output (None: failed)
        self._board_chips: dict[tuple[int, int], Optional[DetailDoc]] = {}
        self._mapping: Optional[dict[tuple[int, int], ChipMapping]] = None
        self._late_tries: dict[int, int] = {}  # card -> identity calls that ran out of time
        self._health: dict[tuple[int, int], HealthDetail] = {}
        self._health_at: dict[tuple[int, int], float] = {}
        self._last_health: dict[tuple[int, int], str] = {}  # summary health per chip, last cycle
        self.runtime_version = versions.discover(self.host.root_dir).runtime_version

    # ------------------------------------------------------------------ hooks
    def parse_summary(self, text: str) -> NpuSummary:
        return parse_summary(text)

    def complete(self, parsed: NpuSummary) -> bool:
        # a shortened capture, or one cut at its end, does not mean chips were lost
        return not parsed.elided and parsed.cut is None

    def lost_fault(self, identity: DeviceIdentity) -> Fault:
        npu, chip = self._by_uuid.get(identity.uuid, (identity.index, 0))
        return _fault("missing", f"NPU {npu} chip {chip}", "npu-smi info")

    # ------------------------------------------------------------------ identity
    def _learn_identities(self, summary: NpuSummary, deadline: float) -> None:
        new = [c for c in summary.chips if (c.npu_id, c.chip_id) not in self._known]
        if not new:
            return
        multi = _multi_chip_cards(summary.chips)
        cards = sorted({c.npu_id for c in new if c.npu_id not in self._boards})
        late: set[int] = set()  # cards whose identity calls ran out of time: asked again next cycle
        for card, out in self.cli.map([(n, ["info", "-t", "board", "-i", str(n)]) for n in cards], deadline):
            if isinstance(out, TimeoutError) and self._late_tries.get(card, 0) < 2:
                self._late_tries[card] = self._late_tries.get(card, 0) + 1
                late.add(card)
                continue
            self._boards[card] = self._parsed(out, "board", f"card {card}")
        new = [c for c in new if c.npu_id not in late]
        chip_jobs = []
        for c in new:
            board = self._boards.get(c.npu_id)
            has_id = board is not None and (board.get(c.chip_id, "ddie id", "vdie id", "die id")
                                            or not values.is_na(board.get(c.chip_id, "serial number") or "NA"))
            if not has_id and summary.layout != "new" and (c.npu_id, c.chip_id) not in self._board_chips:
                chip_jobs.append(((c.npu_id, c.chip_id),
                                  ["info", "-t", "board", "-i", str(c.npu_id), "-c", str(c.chip_id)]))
        for key, out in self.cli.map(chip_jobs, deadline):
            if isinstance(out, TimeoutError) and self._late_tries.get(key[0], 0) < 2:
                self._late_tries[key[0]] = self._late_tries.get(key[0], 0) + 1
                late.add(key[0])
                continue
            self._board_chips[key] = self._parsed(out, "board-chip", f"card {key[0]} chip {key[1]}")
        new = [c for c in new if c.npu_id not in late]
        if self._mapping is None and any(c.logic_id is None for c in new if c.npu_id in multi):
            try:
                self._mapping = {(m.npu_id, m.chip_id): m for m in parse_mapping(self.cli.call(["info", "-m"], deadline))}
            except Exception as e:  # noqa: BLE001 - logic ids then fall back to the ordinal
                log.warning("npu-smi info -m failed: %s", e)
                self._mapping = {}
        ordinal = {(c.npu_id, c.chip_id): i for i, c in
                   enumerate(sorted(summary.chips, key=lambda c: (c.npu_id, c.chip_id)))}
        for c in new:
            key = (c.npu_id, c.chip_id)
            board, board_chip = self._boards.get(c.npu_id), self._board_chips.get(key)
            uuid = chip_uuid(c, board, board_chip, c.npu_id in multi)
            m = (self._mapping or {}).get(key)
            logic = c.logic_id if c.logic_id is not None else (m.logic_id if m is not None else None)
            index = logic if logic is not None else _logic_index(c, ordinal[key], multi)
            fw = next((d.get(c.chip_id, "firmware version") for d in (board_chip, board)
                       if d is not None and d.get(c.chip_id, "firmware version")), None)
            sn = board.get(c.chip_id, "serial number") if board is not None else None
            ident = _identity(c, uuid, index, summary.driver_version, firmware=fw,
                              serial=sn if sn and not values.is_na(sn) else None,
                              numa=self.numa(c.bus_id), name=c.name or (m.name if m else None),
                              runtime=self.runtime_version)
            self._known[key] = _Known(ident, c)
            self._by_uuid[uuid] = key

    @staticmethod
    def _parsed(out: Any, kind: str, what: str) -> Optional[DetailDoc]:
        if isinstance(out, Exception):
            log.warning("npu-smi info -t %s (%s) failed: %s", kind, what, out)
            return None
        try:
            return parse_detail(out, kind)
        except ParseError as e:
            log.warning("npu-smi info -t %s (%s): %s", kind, what, e)
            return None

    # ------------------------------------------------------------------ details
    def _refresh_details(self, cards: Sequence[int], deadline: float) -> None:
        # scheduled on the collector's clock (the scenario clock when simulating)
        now = self.clock()
        jobs = [(card, kind) for card in cards for kind in self._intervals] + [(_NODE, "topo")]
        due = self.schedule.due(jobs, now)
        args = {job: (["info", "-t", "topo"] if job[1] == "topo" else ["info", "-t", job[1], "-i", str(job[0])])
                for job in due}
        for job, out in self.cli.map([(j, args[j]) for j in due], deadline):
            value = (self._topo(out) if job[1] == "topo" else
                     self._fault_events(out, job[0]) if job[1] == FAULT_EVENTS else self._detail(out, job))
            self.schedule.done(job, now, value, ok=value is not None)
            st = self.schedule.state(job)
            if st is not None and st.disabled and st.failures == self.schedule.max_failures:
                log.warning("npu-smi %s failed %d times; not asked again", " ".join(args[job]), st.failures)

    def _detail(self, out: Any, job: tuple[Any, str]) -> Optional[DetailDoc]:
        card, kind = job
        doc = self._parsed(out, kind, f"card {card}")
        if doc is None:
            return None
        try:
            for chip in doc.chip_ids():  # values must be readable too
                detail_readings(doc, chip)
        except ParseError as e:
            log.warning("npu-smi info -t %s -i %s: %s", kind, card, e)
            return None
        return doc

    @staticmethod
    def _fault_events(out: Any, card: int) -> Optional[FaultEvents]:
        if isinstance(out, Exception):
            log.warning("npu-smi info -t current-fault-event -i %s failed: %s", card, out)
            return None
        try:
            return parse_fault_events(out)
        except ParseError as e:
            log.warning("npu-smi info -t current-fault-event -i %s: %s", card, e)
            return None

    def _ask_events_again(self, summary: NpuSummary, now: float) -> None:
        """A card whose summary health changed since the last cycle has its fault events asked
        again now (ahead of its cadence, within the cycle's budget): the events of the last
        answer are what the card had then, and a change says they are out of date."""
        states = {(c.npu_id, c.chip_id): c.health for c in summary.chips}
        changed = {k[0] for k, v in states.items() if k in self._last_health and self._last_health[k] != v}
        self._last_health = states
        for card in changed:
            st = self.schedule.state((card, FAULT_EVENTS))
            if st is not None and not st.disabled:
                st.due = min(st.due, now)

    def _events_of(self, c: NpuChip, now: float) -> list[FaultEvent]:
        """The chip's events from the card's last current-fault-event answer while it is fresh
        (at most three intervals old: an answer that stopped coming says nothing now)."""
        every = self._intervals.get(FAULT_EVENTS)
        st = self.schedule.latest((c.npu_id, FAULT_EVENTS))
        if every is None or st is None or st.age(now) > 3 * every:
            return []
        return chip_events(st.value, c.chip_id)

    @staticmethod
    def _topo(out: Any) -> Optional[NpuTopo]:
        if isinstance(out, Exception):
            log.warning("npu-smi info -t topo failed: %s", out)
            return None
        try:
            return parse_topo(out)
        except ParseError as e:
            log.warning("npu-smi info -t topo: %s", e)
            return None

    def _refresh_health(self, summary: NpuSummary, deadline: float) -> None:
        for c in summary.chips:
            if c.health == "OK":
                self._health.pop((c.npu_id, c.chip_id), None)
        bad = sorted((c for c in summary.chips if c.health != "OK"),
                     key=lambda c: self._health_at.get((c.npu_id, c.chip_id), 0.0))
        jobs = []
        for c in bad[:self._health_budget]:
            args = ["info", "-t", "health", "-i", str(c.npu_id)]
            if summary.layout != "new":
                args += ["-c", str(c.chip_id)]
            jobs.append(((c.npu_id, c.chip_id), args))
        for key, out in self.cli.map(jobs, deadline):
            self._health_at[key] = time.monotonic()
            doc = self._parsed(out, "health", f"NPU {key[0]} chip {key[1]}")
            try:
                if doc is not None:
                    self._health[key] = health_detail(doc, None)
            except ParseError as e:
                log.warning("npu-smi health for NPU %d chip %d: %s", key[0], key[1], e)

    def _details_of(self, c: NpuChip, now: float) -> dict[str, Reading]:
        out: dict[str, Reading] = {}
        for kind, every in self._intervals.items():
            if kind in _NOT_READINGS:
                continue
            st = self.schedule.latest((c.npu_id, kind))
            if st is None:
                continue
            age = st.age(now)
            try:
                extra = detail_readings(st.value, c.chip_id, age)
            except ParseError as e:  # a chip block the refresh did not check
                log.warning("npu-smi info -t %s -i %d: %s", kind, c.npu_id, e)
                continue
            for name, rd in extra.items():
                out[name] = rd if age <= 3 * every else Reading(rd.value, rd.quality.with_status("stale", age))
        return out

    def _links(self, devices: Sequence[DeviceSample]) -> dict[str, tuple[Link, ...]]:
        """HCCS links of the last topology, NPUn read as the chip's logic id (its index)."""
        st = self.schedule.latest((_NODE, "topo"))
        if st is None:
            return {}
        by_index = {d.identity.index: d.identity.uuid for d in devices}
        out: dict[str, list[Link]] = {}
        for a, b, word in st.value.links:
            if a in by_index and b in by_index:
                out.setdefault(by_index[a], []).append(Link(peer=by_index[b], type=TOPO_FABRIC[word], state="up"))
        return {k: tuple(v) for k, v in out.items()}

    # ------------------------------------------------------------------ the cycle
    def devices(self, summary: NpuSummary, now: float, deadline: float) -> list[DeviceSample]:
        self._learn_identities(summary, deadline)
        self._refresh_health(summary, deadline)
        self._ask_events_again(summary, self.clock())
        if deadline - time.monotonic() > 0.25 * self.budget:  # details never cost the summary
            self._refresh_details(sorted({c.npu_id for c in summary.chips}), deadline)
        multi = _multi_chip_cards(summary.chips)
        out = []
        for c in summary.chips:
            k = self._known.get((c.npu_id, c.chip_id))
            ident = k.identity if k is not None else _identity(  # no identity in time: by bus id
                c, chip_uuid(c, None, None, c.npu_id in multi), c.npu_id, summary.driver_version,
                numa=self.numa(c.bus_id), runtime=self.runtime_version)
            readings = summary_readings(c)
            for name, rd in self._details_of(c, now).items():
                readings.setdefault(name, rd)
            detail = self._health.get((c.npu_id, c.chip_id))
            info = detail.information if detail else ""
            where = f"NPU {c.npu_id} chip {c.chip_id}" + (f" ({info})" if info else "")
            codes = () if c.health == "OK" else (c.health,) + (detail.codes if detail else ())
            current = {code: _fault(code, where, "npu-smi") for code in codes}
            for ev in self._events_of(c, now):  # an event also named by -t health is one fault
                current.setdefault(ev.code, event_fault(ev, f"NPU {c.npu_id} chip {c.chip_id}"))
            reasons = self.episodes.update(ident.uuid, list(current.values()), now)
            procs = tuple(_process(p, ident.uuid) for p in summary.processes if _owns(c, p, multi))
            out.append(DeviceSample(identity=ident, timestamp=now, readings=readings,
                                    health=chip_health(reasons, c.health),
                                    faults=self.episodes.faults(ident.uuid), processes=procs,
                                    processes_reported=summary.process_section))
        links = self._links(out)
        return [dataclasses.replace(d, links=links[d.identity.uuid]) if d.identity.uuid in links else d
                for d in out]


def _install_fake(scenario: Any, clock: Any, workdir: Optional[str]) -> Any:
    from hetero_exporter.collectors.ascend.npu_smi import fake as npu_smi_fake  # simulation only
    return npu_smi_fake.install(scenario, clock, workdir)


def create(options: CollectorOptions) -> NpuSmiCollector:
    """The npu-smi collector: the real tool (``settings.path``, default ``npu-smi`` on PATH or in
    /usr/local/sbin), or, when simulating, a fake npu-smi executable written into
    ``options.workdir`` (with a fake host root holding the scenario's CANN version files)."""
    def factory(exe: str, *, host: HostPaths, **kw: Any) -> NpuSmiCollector:
        if options.scenario is not None:
            from hetero_exporter.collectors.ascend.npu_smi import fake as npu_smi_fake  # simulation only
            host = host.or_root(npu_smi_fake.host_root(exe))
        return NpuSmiCollector(exe, host=host, **kw)
    return build(options, factory, _install_fake, "npu-smi", _TOOL_DIRS, "Ascend driver tools not installed")
