"""Cambricon MLUs through the ``cnmon`` command-line tool: the parsed outputs
(collectors/cnmon_parse.py) turned into the model, ``parse cnmon FILE``, and a collector that
runs the tool through the shared runner (hetero_exporter.sdk.runner).

Invocations per cycle (stated, and measured by benchmarks/cli_invocations.py):
- ``cnmon``: one call for all cards, every cycle (utilization, memory, virtual memory,
  temperature, fan, power and cap, ECC error count, bus id, processes);
- ``cnmon info -c N``: once per card at first sight (serial / UUID for a stable id), then
  every ``info_interval`` seconds (default 300; 0 disables) for the split ECC counts and the
  board temperature, at most ``info_calls_per_cycle`` per cycle (default 1).

The layouts the parsers read, and the note that no real ``cnmon info`` capture was at hand,
are in collectors/cnmon_parse.py.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from hetero_exporter import fields as F
from hetero_exporter import profiles
from hetero_exporter.sdk.contract import CollectorOptions, ParseError
from hetero_exporter.sdk.cli_collector import (CliCalls, FaultEpisodes, NumaNodes, ParsedOutput,
                                                      Runner, build, reading, table_fault, worst_state)
from hetero_exporter.collectors.cambricon.cnmon.parse import (  # noqa: F401 - the parsers are part of this API
    MIB, TOOL, CardInfo, CnmonInfo, CnmonTable, InfoReadings, MluCard, MluProcess, detect, info_readings,
    parse_info, parse_table)
from hetero_exporter.model import (DeviceIdentity, DeviceSample, Fault, Health, NodeSnapshot,
                                   ProcessSample, Quality, Reading)

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- normalizing

QUALITY: dict[str, Quality] = {
    F.UTILIZATION: Quality("cnmon: Util", "sampled", None, 0.01),
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


def _put(out: dict[str, Reading], name: str, value: Optional[float], age: float = 0.0) -> None:
    out[name] = reading(QUALITY, name, value, age)


def table_readings(c: MluCard) -> dict[str, Reading]:
    """Readings of one card from the default table, in base units."""
    r: dict[str, Reading] = {}
    _put(r, F.UTILIZATION, None if c.util_pct is None else c.util_pct / 100.0)
    _put(r, F.MEMORY_USED, None if c.memory_used_mib is None else c.memory_used_mib * MIB)
    _put(r, F.MEMORY_TOTAL, None if c.memory_total_mib is None else c.memory_total_mib * MIB)
    if c.vmemory_total_mib is not None:
        _put(r, "virtual_memory_used_bytes", None if c.vmemory_used_mib is None else c.vmemory_used_mib * MIB)
        _put(r, "virtual_memory_total_bytes", c.vmemory_total_mib * MIB)
    _put(r, F.TEMP_CORE, c.temp_c)
    _put(r, F.POWER, c.power_w)
    _put(r, F.POWER_LIMIT, c.power_cap_w)
    _put(r, "fan_speed_ratio", None if c.fan_pct is None else c.fan_pct / 100.0)
    _put(r, "ecc_errors_total", c.ecc_errors)
    return r


def info_detail_readings(info: InfoReadings, age: float = 0.0) -> dict[str, Reading]:
    r: dict[str, Reading] = {}
    for name, v in ((F.ECC_CORRECTED, info.ecc_corrected), (F.ECC_UNCORRECTED, info.ecc_uncorrected),
                    (F.TEMP_BOARD, info.temp_board)):
        if v is not None:
            _put(r, name, v, age)
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
              numa: Optional[int] = None) -> DeviceIdentity:
    drv = c.driver or driver
    return DeviceIdentity(vendor="cambricon", kind="mlu", index=c.card, uuid=uuid,
                          model=profiles.normalize_model("cambricon", c.name), pci_address=c.bus_id,
                          numa_node=numa, driver_version=drv[1:] if drv and drv[:1] in "vV" else drv,
                          firmware_version=c.firmware or (info.firmware if info else None),
                          name=c.name or None, serial=info.serial if info else None)


def _owner(p: MluProcess, cards: Sequence[MluCard]) -> Optional[MluCard]:
    exact = [c for c in cards if c.card == p.card and c.vf == p.instance]
    return exact[0] if exact else next((c for c in cards if c.card == p.card), None)


def _processes(table: CnmonTable, c: MluCard, uuid: str) -> tuple[ProcessSample, ...]:
    return tuple(ProcessSample(pid=p.pid, device_uuid=uuid, name=p.command or None,
                               memory_bytes=None if p.memory_mib is None else p.memory_mib * MIB)
                 for p in table.processes if _owner(p, table.cards) is c)


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
                                    readings=table_readings(c), health=Health(worst_state(reasons), reasons),
                                    faults=reasons, processes=_processes(table, c, uuid),
                                    processes_reported=table.process_section))
    return NodeSnapshot(node=node, time=now, devices=tuple(devices))


def parse_any(text: str) -> Any:
    """``hetero-exporter parse cnmon FILE``: the default table gives a NodeSnapshot; ``cnmon
    info`` gives its per-card sections and what the collector reads from them."""
    kind = detect(text)
    if kind == "cnmon":
        return table_snapshot(parse_table(text))
    info = parse_info(text)
    for c in info.cards:
        info_readings(c)  # the values must be readable too
    return ParsedOutput(kind, info)


# --------------------------------------------------------------------------- collector


@dataclass
class _Known:
    identity: DeviceIdentity
    card: MluCard
    ecc_base: Optional[float] = None  # uncorrected ECC count at the previous cnmon info
    ecc_info_at: float = -1.0  # fetch time of the cnmon info last compared
    ecc_rising: bool = False  # the last cnmon info showed new uncorrected errors


@dataclass
class _Info:
    info: Optional[InfoReadings] = None
    fetched_at: float = 0.0
    due: float = 0.0
    failures: int = 0
    late: bool = False  # the last call ran out of time (identity is asked again next cycle)


_TOOL_DIRS = "/usr/bin:/usr/local/bin:/usr/local/neuware/bin:/usr/sbin"


class CnmonCollector:
    name = "cnmon"
    vendor = "cambricon"

    def __init__(self, exe: str, *, clock: Callable[[], float] = time.time, timeout: float = 5.0,
                 interval: float = 10.0, settings: Optional[Mapping[str, Any]] = None,
                 runner: Optional[Runner] = None, extra_env: Callable[[], Mapping[str, str]] = dict):
        settings = dict(settings or {})
        self._clock = clock
        self._cli = CliCalls(exe, TOOL, runner=runner, extra_env=extra_env,
                             workers=int(settings.get("parallel_calls", 4)))
        self._budget = max(0.2, float(settings.get("budget_fraction", 0.9)) * timeout)
        self._info_interval = float(settings.get("info_interval", 300.0))
        self._info_budget = int(settings.get("info_calls_per_cycle", 1))
        self._numa = NumaNodes(str(settings.get("sysfs_root", "/sys")))
        self._episodes = FaultEpisodes()
        self._known: dict[tuple[int, str], _Known] = {}
        self._info: dict[int, _Info] = {}

    @property
    def calls(self) -> int:
        return self._cli.calls

    def _fetch_info(self, cards: Sequence[int], deadline: float) -> None:
        now = self._clock()
        for card, out in self._cli.map([(n, ["info", "-c", str(n)]) for n in cards], deadline):
            st = self._info.setdefault(card, _Info())
            st.due = now + (self._info_interval or math.inf)
            res: Any = out
            if not isinstance(out, Exception):
                try:
                    parsed = parse_info(out)
                    mine = next((c for c in parsed.cards if c.card == card), parsed.cards[0])
                    res = info_readings(mine)
                except ParseError as e:
                    res = e
            st.late = isinstance(res, TimeoutError) and st.info is None
            if isinstance(res, Exception):
                st.failures += 1
                log.warning("cnmon info -c %d failed: %s", card, res)
                if st.failures >= 3:
                    st.due = math.inf
            else:
                st.info, st.fetched_at, st.failures = res, now, 0

    @staticmethod
    def _retry_identity(st: _Info) -> bool:
        """cnmon info ran out of time before it answered once: ask again (three tries)."""
        return st.info is None and st.late and st.failures < 3

    def collect(self) -> list[DeviceSample]:
        deadline = time.monotonic() + self._budget
        now = self._clock()
        table = parse_table(self._cli.call([], deadline))
        cards = sorted({c.card for c in table.cards})
        new = [n for n in cards if n not in self._info or self._retry_identity(self._info[n])]
        if new:  # identity: once per card, before its first sample
            self._fetch_info(new, deadline)
        elif self._info_interval and deadline - time.monotonic() > 0.25 * self._budget:
            due = sorted((st.due, n) for n, st in self._info.items() if n in cards and st.due <= now)
            self._fetch_info([n for _, n in due[:self._info_budget]], deadline)
        out, seen = [], set()
        for c in table.cards:
            st = self._info.get(c.card)
            info = st.info if st else None
            k = self._known.get((c.card, c.vf))
            if k is None:
                uuid = card_uuid(c, info)
                k = _Known(_identity(c, uuid, table.driver_version, info, self._numa(c.bus_id)), c)
                if st is None or not self._retry_identity(st):  # pinned, unless asked again
                    self._known[(c.card, c.vf)] = k
            seen.add((c.card, c.vf))
            readings = table_readings(c)
            if info is not None and st is not None:
                age = max(0.0, now - st.fetched_at)
                for name, rd in info_detail_readings(info, age).items():
                    if self._info_interval and age > 3 * self._info_interval:
                        rd = Reading(rd.value, rd.quality.with_status("stale", age))
                    readings.setdefault(name, rd)
            reasons = self._episodes.update(k.identity.uuid, list(_inited_faults(c)), now)
            reasons += self._ecc_fault(k, c, info, st, now)
            out.append(DeviceSample(identity=k.identity, timestamp=now, readings=readings,
                                    health=Health(worst_state(reasons), reasons),
                                    faults=self._episodes.faults(k.identity.uuid),
                                    processes=_processes(table, c, k.identity.uuid),
                                    processes_reported=table.process_section))
        for key, k in self._known.items():
            if key not in seen:
                out.append(self._episodes.lost(k.identity, _fault("missing", f"card {key[0]}"), now))
        return out

    def _ecc_fault(self, k: _Known, c: MluCard, info: Optional[InfoReadings], st: Optional[_Info],
                   now: float) -> tuple[Fault, ...]:
        """Uncorrected ECC errors since the previous cnmon info: one fault occurrence per new
        error, active until the next cnmon info; the count at the first look is history (it
        is in the counter, not an event)."""
        ledger = self._episodes.ledger
        if info is not None and info.ecc_uncorrected is not None and st is not None and st.fetched_at != k.ecc_info_at:
            grown = 0 if k.ecc_base is None else int(info.ecc_uncorrected - k.ecc_base)
            if grown > 0:
                ledger.record(k.identity.uuid, _fault("ecc-uncorrected", f"card {c.card}: {grown} new"), now, grown)
            k.ecc_base, k.ecc_info_at, k.ecc_rising = info.ecc_uncorrected, st.fetched_at, grown > 0
        f = ledger.get(k.identity.uuid, "ecc-uncorrected") if k.ecc_rising else None
        return (f,) if f is not None else ()


def _install_fake(scenario: Any, clock: Any, workdir: Optional[str]) -> Any:
    from hetero_exporter.collectors.cambricon.cnmon import fake as cnmon_fake  # simulation only
    return cnmon_fake.install(scenario, clock, workdir)


def create(options: CollectorOptions) -> CnmonCollector:
    """The cnmon collector: the real tool (``settings.path``, default ``cnmon`` on PATH or in
    /usr/local/neuware/bin), or, when simulating, a fake cnmon executable written into
    ``options.workdir``."""
    return build(options, CnmonCollector, _install_fake, "cnmon", _TOOL_DIRS, "Cambricon driver tools not installed")
