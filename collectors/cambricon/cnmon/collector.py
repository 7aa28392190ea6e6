"""Cambricon MLUs through the ``cnmon`` command-line tool: the parsed outputs
(collectors/cambricon/cnmon/parse.py) turned into the model, ``parse cnmon FILE``, and a
collector on the SDK's CliCollector (hetero_exporter.sdk.cli_collector) that runs the tool
through the shared runner.

Invocations (stated, and measured by benchmarks/cli_invocations.py):
- ``cnmon``: one call for all cards, every cycle (utilization, memory, virtual memory,
  temperature, fan, power and cap, ECC error count, bus id, processes);
- ``cnmon info -c N``: once per card at first sight (serial / UUID for a stable id), then
  every ``info_interval`` seconds (default 300; 0 disables) for the split ECC counts and the
  board temperature, at most ``info_calls_per_cycle`` per cycle (default 1), planned by
  hetero_exporter.sdk.schedule;
- ``cnmon topo``: the MLU-Link matrix, once when the collector is built (so the first
  snapshot, what ``inspect`` prints, has the links; outside the per-cycle counts), then every
  ``topo_interval`` seconds (default 600; 0 disables) in a cycle that asks no identity.

Identities are pinned by the base (hetero_exporter.sdk.identity): a card the table no longer
lists is failed under its pinned uuid. The layouts the parsers read, and the note that no
real ``cnmon info`` / ``cnmon topo`` capture was at hand, are in the parse module.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from hetero_exporter.model import fields as F
from hetero_exporter import profiles
from hetero_exporter.sdk.contract import CollectorOptions, HostPaths, ParseError
from hetero_exporter.sdk.cli_collector import (process_samples, CliCollector, ParsedOutput, Readings, build, table_fault)
from hetero_exporter.sdk.faults import health_of
from hetero_exporter.sdk.schedule import DEFAULT_TOPO_INTERVAL, DetailSchedule
from hetero_exporter.sdk.settings import CADENCE_MAX, ToolSettings, integer, seconds, setting
from hetero_exporter.collectors.cambricon.cnmon.parse import (  # noqa: F401 - the parsers are part of this API
    MIB, TOOL, TOPO_FABRIC, CardInfo, CnmonInfo, CnmonTable, CnmonTopo, InfoReadings, MluCard, MluProcess,
    detect, info_readings, parse_info, parse_table, parse_topo)
from hetero_exporter.collectors.cambricon import versions
from hetero_exporter.model import (DeviceIdentity, DeviceSample, Fault, Link, NodeSnapshot,
                                   ProcessSample, Quality, Reading)

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- normalizing

# cnmon's Util is a busy ratio the driver samples over a period Cambricon does not document
# (cnmon and CNDev state none): UTIL_WINDOW, 1 s, is assumed, not documented.
UTIL_WINDOW = 1.0

QUALITY: dict[str, Quality] = {
    F.UTILIZATION: Quality("cnmon: Util", "sampled", UTIL_WINDOW, 0.01),
    F.MEMORY_USED: Quality("cnmon: Memory-Usage used (MiB)", "measured", None, MIB),
    F.MEMORY_TOTAL: Quality("cnmon: Memory-Usage total (MiB)", "measured", None, MIB),
    "virtual_memory_used_bytes": Quality("cnmon: vMemory-Usage used (MiB)", "measured", None, MIB),
    "virtual_memory_total_bytes": Quality("cnmon: vMemory-Usage total (MiB)", "measured", None, MIB),
    F.TEMP_CORE: Quality("cnmon: Temp", "measured", None, 1.0),
    F.POWER: Quality("cnmon: Pwr:Usage", "measured", None, 1.0),
    F.POWER_LIMIT: Quality("cnmon: Pwr:Cap", "measured", None, 1.0),
    "fan_speed_ratio": Quality("cnmon: Fan", "measured", None, 0.01),
    "ecc_errors_total": Quality("cnmon: Ecc-Error (all ECC errors; N/A while inline ECC is off)", "measured", None, 1.0),
    # cnmon info, refreshed every info_interval seconds (age_seconds says how old)
    F.ECC_CORRECTED: Quality("cnmon info: ECC one-bit (corrected) error counts", "measured", None, 1.0),
    F.ECC_UNCORRECTED: Quality("cnmon info: ECC multi-bit (uncorrected) error counts", "measured", None, 1.0),
    F.TEMP_BOARD: Quality("cnmon info: Temperature / Board", "measured", None, 1.0),
}


def table_readings(c: MluCard) -> dict[str, Reading]:
    """Readings of one card from the default table, in base units."""
    r = Readings(QUALITY)
    r.put(F.UTILIZATION, c.util_pct, percent=True)
    r.put(F.MEMORY_USED, c.memory_used_mib, scale=MIB)
    r.put(F.MEMORY_TOTAL, c.memory_total_mib, scale=MIB)
    if c.vmemory_total_mib is not None:
        r.put("virtual_memory_used_bytes", c.vmemory_used_mib, scale=MIB)
        r.put("virtual_memory_total_bytes", c.vmemory_total_mib, scale=MIB)
    r.put(F.TEMP_CORE, c.temp_c)
    r.put(F.POWER, c.power_w)
    r.put(F.POWER_LIMIT, c.power_cap_w)
    r.put("fan_speed_ratio", c.fan_pct, percent=True)
    r.put("ecc_errors_total", c.ecc_errors)
    return r


def info_detail_readings(info: InfoReadings, age: float = 0.0) -> dict[str, Reading]:
    r = Readings(QUALITY)
    for name, v in ((F.ECC_CORRECTED, info.ecc_corrected), (F.ECC_UNCORRECTED, info.ecc_uncorrected),
                    (F.TEMP_BOARD, info.temp_board)):
        if v is not None:
            r.put(name, v, age=age)
    return r


def card_uuid(c: MluCard, info: Optional[InfoReadings]) -> str:
    """cnmon info's UUID ("MLU-..."), else its serial, else the PCI address, else the card
    number (edge modules without a PCI address)."""
    suffix = "" if c.vf in ("/", "", "-") else f"-vf{c.vf}"
    if info is not None and info.uuid:
        u = info.uuid if info.uuid.upper().startswith("MLU-") else f"MLU-{info.uuid}"
        return u + suffix
    if info is not None and info.serial:
        return f"cambricon-sn-{info.serial}{suffix}"
    if c.bus_id:
        return f"cambricon-pci-{c.bus_id}{suffix}"
    return f"cambricon-card{c.card}{suffix}"


def _fault(code: str, message: str, source: str = "cnmon") -> Fault:
    return table_fault("cambricon", code, message, source)


def _identity(c: MluCard, uuid: str, driver: Optional[str], info: Optional[InfoReadings] = None,
              numa: Optional[int] = None, runtime: Optional[str] = None) -> DeviceIdentity:
    drv = c.driver or driver
    drv = drv[1:] if drv and drv[:1] in "vV" else drv
    return DeviceIdentity(vendor="cambricon", kind="mlu", index=c.card, uuid=uuid,
                          model=profiles.normalize_model("cambricon", c.name), pci_address=c.bus_id,
                          numa_node=numa, driver_version=drv, runtime_version=runtime or None,
                          firmware_version=c.firmware or (info.firmware if info else None),
                          name=c.name or None, serial=info.serial if info else None)


def _owner(p: MluProcess, cards: Sequence[MluCard]) -> Optional[MluCard]:
    exact = [c for c in cards if c.card == p.card and c.vf == p.instance]
    return exact[0] if exact else next((c for c in cards if c.card == p.card), None)


def _processes(table: CnmonTable, c: MluCard, uuid: str) -> tuple[ProcessSample, ...]:
    return process_samples((p for p in table.processes if _owner(p, table.cards) is c), uuid,
                           name="command", memory="memory_mib", scale=MIB)


def _inited_faults(c: MluCard) -> tuple[Fault, ...]:
    if c.inited is not None and c.inited.lower() not in ("on", "yes", "true"):
        return (_fault("not-initialized", f"card {c.card}: Inited {c.inited}"),)
    return ()


def table_snapshot(table: CnmonTable, node: str = "", now: float = 0.0) -> NodeSnapshot:
    """The model of one ``cnmon`` text (what ``parse cnmon FILE`` prints)."""
    devices = []
    for c in table.cards:
        uuid = card_uuid(c, None)
        reasons = _inited_faults(c)
        devices.append(DeviceSample(identity=_identity(c, uuid, table.driver_version), timestamp=now,
                                    readings=table_readings(c), health=health_of(reasons),
                                    faults=reasons, processes=_processes(table, c, uuid),
                                    processes_reported=table.process_section))
    return NodeSnapshot(node=node, time=now, devices=tuple(devices))


def parse_any(text: str) -> Any:
    """``hetero-exporter parse cnmon FILE``: the default table gives a NodeSnapshot; ``cnmon
    info`` gives its per-card sections and what the collector reads from them."""
    kind = detect(text)
    if kind == "cnmon":
        return table_snapshot(parse_table(text))
    if kind == "cnmon topo":
        return ParsedOutput(kind, parse_topo(text))
    info = parse_info(text)
    for c in info.cards:
        info_readings(c)  # the values must be readable too
    return ParsedOutput(kind, info)


# --------------------------------------------------------------------------- collector

DEFAULT_INFO_INTERVAL = 300.0
_NODE = "node"  # the schedule's target of the node-wide topology call


@dataclass
class _Known:
    """What the collector pinned about a card (row) the first time it saw it, and the ECC
    state of its cnmon info answers."""

    identity: DeviceIdentity
    card: MluCard
    ecc_base: Optional[float] = None  # uncorrected ECC count at the previous cnmon info
    ecc_info_at: float = -1.0  # fetch time of the cnmon info last compared
    ecc_rising: bool = False  # the last cnmon info showed new uncorrected errors


_TOOL_DIRS = "/usr/bin:/usr/local/bin:/usr/local/neuware/bin:/usr/sbin"


@dataclass(frozen=True)
class CnmonSettings(ToolSettings):
    """``collectors.cnmon``: ``info_interval`` seconds between each card's ``cnmon info``,
    ``info_calls_per_cycle`` how many a cycle may make, ``topo_interval`` seconds between
    ``cnmon topo`` calls (0: never)."""

    info_interval: float = setting(DEFAULT_INFO_INTERVAL, seconds(CADENCE_MAX))
    info_calls_per_cycle: int = setting(1, integer(0, 1000))
    topo_interval: float = setting(DEFAULT_TOPO_INTERVAL, seconds(CADENCE_MAX))


SETTINGS = CnmonSettings


class CnmonCollector(CliCollector):
    name = "cnmon"
    vendor = "cambricon"
    tool = TOOL
    summary_args = ()
    settings_type = CnmonSettings
    settings: CnmonSettings

    def __init__(self, exe: str, **kw: Any):
        super().__init__(exe, **kw)
        settings = self.settings
        self._info_interval = settings.info_interval
        # the info cadence: one (card, "info") job per card, at most info_calls_per_cycle a cycle
        self.schedule = DetailSchedule({"info": self._info_interval}, self.interval, settings.info_calls_per_cycle)
        topo = settings.topo_interval
        self.topo_schedule = DetailSchedule({"topo": topo}, self.interval, 1)
        self._late: dict[int, int] = {}  # card -> identity calls that ran out of time
        self._known: dict[tuple[int, str], _Known] = {}
        # Neuware (collectors/cambricon/versions.py) below the host root, else unknown
        # (cnmon prints no Neuware version; the driver's is not the runtime's)
        self.runtime_version = versions.discover(self.host.root_dir).runtime_version
        # MLU-Link topology at start, before the first cycle (a snapshot of one cycle, what
        # ``inspect`` prints, has the links), with a quarter of the cycle budget; then every
        # topo_interval seconds within the cycles. It is node-wide and rarely changes.
        if topo > 0:
            self._refresh_topo(time.monotonic() + 0.25 * self.budget)

    # ------------------------------------------------------------------ hooks
    def parse_summary(self, text: str) -> CnmonTable:
        return parse_table(text)

    def lost_fault(self, identity: DeviceIdentity) -> Fault:
        return _fault(self.lost_code, f"card {identity.index}")

    # ------------------------------------------------------------------ cnmon info / topo
    def _info_result(self, card: int, out: Any) -> Any:
        if isinstance(out, Exception):
            return out
        try:
            parsed = parse_info(out)
            mine = next((c for c in parsed.cards if c.card == card), parsed.cards[0])
            return info_readings(mine)
        except ParseError as e:
            return e

    def _fetch_info(self, cards: Sequence[int], deadline: float, identity: bool) -> None:
        now = self.clock()
        for card, out in self.cli.map([(n, ["info", "-c", str(n)]) for n in cards], deadline):
            res = self._info_result(card, out)
            job = (card, "info")
            st = self.schedule.state(job)
            if identity and isinstance(res, TimeoutError) and (st is None or st.value is None) \
                    and self._late.get(card, 0) < 2:
                self._late[card] = self._late.get(card, 0) + 1  # asked again next cycle
                log.warning("cnmon info -c %d: %s (identity asked again next cycle)", card, res)
                continue
            self._late.pop(card, None)
            ok = not isinstance(res, Exception)
            if not ok:
                log.warning("cnmon info -c %d failed: %s", card, res)
            st = self.schedule.done(job, now, res if ok else None, ok=ok)
            if st.disabled and st.failures == self.schedule.max_failures:
                log.warning("cnmon info -c %d failed %d times; not asked again", card, st.failures)

    def _refresh_topo(self, deadline: float) -> None:
        job = (_NODE, "topo")
        now = self.clock()
        try:
            value: Any = parse_topo(self.cli.call(["topo"], deadline))
        except Exception as e:  # noqa: BLE001 - no links this time; the cycle goes on
            log.warning("cnmon topo failed: %s", e)
            value = None
        self.topo_schedule.done(job, now, value, ok=value is not None)

    def _topo_missing(self) -> bool:
        """No MLU-Link matrix yet, and the topology call is on (topo_interval > 0) and not given up."""
        job = (_NODE, "topo")
        st = self.topo_schedule.state(job)
        return st is not None and st.value is None and not st.disabled

    def _links(self, by_card: Mapping[int, str]) -> dict[str, tuple[Link, ...]]:
        """MLU-Link links of the last ``cnmon topo`` (MLUn is card n) between the cards'
        physical functions (``by_card``: card -> uuid)."""
        st = self.topo_schedule.latest((_NODE, "topo"))
        if st is None:
            return {}
        out: dict[str, list[Link]] = {}
        for a, b, word in st.value.links:
            if a in by_card and b in by_card and a != b:
                out.setdefault(by_card[a], []).append(Link(peer=by_card[b], type=TOPO_FABRIC[word], state="up"))
        return {k: tuple(v) for k, v in out.items()}

    def _identity_pending(self, card: int) -> bool:
        """cnmon info ran out of time before it answered once: asked again (three tries)."""
        return card in self._late

    # ------------------------------------------------------------------ the cycle
    def devices(self, table: CnmonTable, now: float, deadline: float) -> list[DeviceSample]:
        cards = sorted({c.card for c in table.cards})
        new = [n for n in cards if self.schedule.state((n, "info")) is None or self._identity_pending(n)]
        if new:  # identity: once per card, before its first sample
            self._fetch_info(new, deadline, identity=True)
            if self._topo_missing() and deadline - time.monotonic() > 0.25 * self.budget:
                self._refresh_topo(deadline)  # the start-up call ran out of time (a loaded node): once more now
        elif deadline - time.monotonic() > 0.25 * self.budget:  # details never cost the summary
            if self.topo_schedule.due([(_NODE, "topo")], now):
                self._refresh_topo(deadline)
            else:
                due = self.schedule.due([(n, "info") for n in cards], now)
                self._fetch_info([n for n, _ in due if isinstance(n, int)], deadline, identity=False)  # cards
        out, physical = [], {}
        for c in table.cards:
            st = self.schedule.latest((c.card, "info"))
            info = st.value if st is not None else None
            k = self._known.get((c.card, c.vf))
            if k is None:
                k = _Known(_identity(c, card_uuid(c, info), table.driver_version, info, self.numa(c.bus_id),
                                     self.runtime_version), c)
                if not self._identity_pending(c.card):  # pinned, unless asked again
                    self._known[(c.card, c.vf)] = k
            if c.vf in ("/", "", "-"):
                physical[c.card] = k.identity.uuid
            readings = table_readings(c)
            if st is not None:
                age = st.age(now)
                for name, rd in info_detail_readings(st.value, age).items():
                    if self._info_interval and age > 3 * self._info_interval:
                        rd = Reading(rd.value, rd.quality.with_status("stale", age))
                    readings.setdefault(name, rd)
            reasons = self.episodes.update(k.identity.uuid, list(_inited_faults(c)), now)
            reasons += self._ecc_fault(k, c, info, st.fetched_at if st is not None else None, now)
            out.append(DeviceSample(identity=k.identity, timestamp=now, readings=readings,
                                    health=health_of(reasons),
                                    faults=self.episodes.faults(k.identity.uuid),
                                    processes=_processes(table, c, k.identity.uuid),
                                    processes_reported=table.process_section))
        links = self._links(physical)
        return [dataclasses.replace(d, links=links[d.identity.uuid]) if d.identity.uuid in links else d
                for d in out]

    def _ecc_fault(self, k: _Known, c: MluCard, info: Optional[InfoReadings], fetched_at: Optional[float],
                   now: float) -> tuple[Fault, ...]:
        """Uncorrected ECC errors since the previous cnmon info: one fault occurrence per new
        error, active until the next cnmon info; the count at the first look is history (it
        is in the counter, not an event)."""
        ledger = self.episodes.ledger
        if info is not None and info.ecc_uncorrected is not None and fetched_at is not None \
                and fetched_at != k.ecc_info_at:
            grown = 0 if k.ecc_base is None else int(info.ecc_uncorrected - k.ecc_base)
            if grown > 0:
                ledger.record(k.identity.uuid, _fault("ecc-uncorrected", f"card {c.card}: {grown} new"), now, grown)
            k.ecc_base, k.ecc_info_at, k.ecc_rising = info.ecc_uncorrected, fetched_at, grown > 0
        f = ledger.get(k.identity.uuid, "ecc-uncorrected") if k.ecc_rising else None
        return (f,) if f is not None else ()


def _install_fake(scenario: Any, clock: Any, workdir: Optional[str]) -> Any:
    from hetero_exporter.collectors.cambricon.cnmon import fake as cnmon_fake  # simulation only
    return cnmon_fake.install(scenario, clock, workdir)


def create(options: CollectorOptions) -> CnmonCollector:
    """The cnmon collector: the real tool (``settings.path``, default ``cnmon`` on PATH or in
    /usr/local/neuware/bin), or, when simulating, a fake cnmon executable written into
    ``options.workdir``."""
    def factory(exe: str, *, host: HostPaths, **kw: Any) -> CnmonCollector:
        if options.scenario is not None:
            from hetero_exporter.collectors.cambricon.cnmon import fake as cnmon_fake  # simulation only
            host = host.or_root(cnmon_fake.host_root(exe))
        return CnmonCollector(exe, host=host, **kw)
    return build(options, factory, _install_fake, "cnmon", _TOOL_DIRS, "Cambricon driver tools not installed")
