"""What an OpenMetrics scrape carries beyond the text format: ``_created`` on counters and
exemplars on the fault counters (docs/metrics-guide.md: OpenMetrics and exemplars).

A counter's created time is when its current run began counting, as far as the agent has evidence:

- the agent's own counters (``AGENT_COUNTERS``: fault events, removed devices, collector errors,
  the kernel log's, killed tool processes, export failures, health actions and promotions, the
  health stream's drops): this process's start, since they start at 0 with it;
- counters the driver keeps since it loaded (energy, volatile ECC: ``DRIVER_COUNTERS``): the
  boot, or the device's latest restart the agent saw, whichever is later. A restart is a changed
  ``driver_version`` (a reload), a reset fault counted again (``RESET_CODES``: the kernel log's
  "GPU reset succeeded", amdsmi's post-reset event), or one of these counters going backwards;
- every other counter (``UNKNOWN_START``: lifetime ECC kept in NVIDIA's InfoROM, PCIe and link
  counters whose vendors do not say since when they count): none until the series itself goes
  backwards, then the snapshot that showed it. Any time given before would be invented, and one
  after a sample Prometheus already holds (an agent restart, a reboot) is a reset to it:
  ``increase()`` would count the whole lifetime count again and an ECC alert would fire.
And any counter whose value goes backwards starts a new run at that snapshot. The time is never
later than the truth by more than a cycle and never invented: with created-timestamp ingestion a
created time after the previous sample is a reset to the TSDB, so a guess could only fake one.

The agent's counters that other modules render (health actions and promotions, the health
stream's drops, export failures) get theirs from the exposition cache (``stamp``), so every
counter of ``AGENT_COUNTERS`` has one wherever it is collected.

The families are the same objects for both formats but the counters: ``collector`` builds a
second family for each counter with the created samples and exemplars, served only while
``wanted()`` (the exposition cache renders OpenMetrics inside ``rendering(True)``), so the text
format stays byte-identical and the OTLP export sees neither.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, Optional

from prometheus_client.core import Metric as PromMetric
from prometheus_client.samples import Exemplar, Sample

from hetero_exporter.model import fields as F
from hetero_exporter.model import names as N
from hetero_exporter.model import DeviceIdentity, Fault, NodeSnapshot

# counters this process keeps, from 0 at its start
AGENT_COUNTERS = frozenset(m.name for m in (
    N.FAULT_EVENTS, N.DEVICES_REMOVED, N.COLLECTOR_ERRORS, N.KERNEL_LOG_RECORDS, N.KERNEL_LOG_EVENTS,
    N.KERNEL_LOG_DROPPED, N.TOOL_PROCESSES_KILLED, N.EXPORT_FAILURES, N.HEALTH_ACTIONS, N.HEALTH_PROMOTIONS,
    N.HEALTH_STREAM_MESSAGES_DROPPED, N.HEALTH_STREAM_CLIENTS_DROPPED))
# families the driver counts since it loaded (their help says so); the health policy's
# reset_counters are their fields (tests/test_openmetrics.py keeps the two together)
DRIVER_COUNTERS = frozenset({N.ENERGY.name, N.ECC_VOLATILE_ERRORS.name})
DRIVER_FIELDS = (F.ENERGY, "ecc_corrected_volatile_total", "ecc_uncorrected_volatile_total")
# counters whose vendors do not say since when they count (see the module); every counter of
# names.ALL is in exactly one of the three sets (tests/test_openmetrics.py)
UNKNOWN_START = frozenset(m.name for m in (
    N.ECC_ERRORS, N.INTERCONNECT, N.PCIE_REPLAYS, N.PCIE_REPLAY_ROLLOVERS, N.PCIE_NAKS, N.PCIE_RECOVERIES,
    N.ECC_DEFERRED, N.ECC_BLOCK_ERRORS,
    # the energy split: a container's run begins with its first share, which no evidence dates
    # better than the cycle that saw it; a new run shows as the series going backwards
    N.CONTAINER_ENERGY, N.UNATTRIBUTED_ENERGY))
# fault codes recorded for a reset that happened (sources/kernel_log.RESET_CODES, the policy's reset_codes)
RESET_CODES = frozenset({"reset", "device-reset", "gpu-reset"})
EXEMPLAR_RUNES = 128  # OpenMetrics: label names and values of an exemplar together
MAX_SERIES = 1 << 16  # counter series remembered (least recently seen forgotten first)
MAX_DEVICES = 4096

_WANTED: contextvars.ContextVar[bool] = contextvars.ContextVar("hetero_exporter_openmetrics", default=False)


def wanted() -> bool:
    """Whether the families collected now are rendered as OpenMetrics."""
    return _WANTED.get()


@contextlib.contextmanager
def rendering(openmetrics: bool) -> Iterator[None]:
    """Collect a registry for OpenMetrics (True) or the text format (False) in this block."""
    token = _WANTED.set(openmetrics)
    try:
        yield
    finally:
        _WANTED.reset(token)


def boot_time() -> Optional[float]:
    """Unix time of this boot (CLOCK_BOOTTIME counts suspended time too), None where unknown."""
    try:
        return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):
        return None


def process_start(boot: Optional[float] = None) -> float:
    """Unix time this process started (/proc/self/stat), else now."""
    boot = boot_time() if boot is None else boot
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read(4096)
        ticks = int(stat.rsplit(b")", 1)[1].split()[19])  # field 22: starttime, in clock ticks since boot
        if boot is not None:
            return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    return time.time()


def _fit(labels: Mapping[str, str]) -> dict[str, str]:
    """Exemplar labels within the 128-rune budget: control characters blanked, the last value cut
    (ending in an ellipsis) to what the budget leaves, a label that gets no room dropped."""
    out: dict[str, str] = {}
    left = EXEMPLAR_RUNES
    for name, value in labels.items():
        text = "".join(c if c.isprintable() else " " for c in value).strip()
        room = left - len(name)
        if not text or room <= 0:
            continue
        if len(text) > room:
            text = text[:room - 1].rstrip() + "…"
        out[name] = text
        left -= len(name) + len(text)
    return out


def stamp(families: Iterable[PromMetric], started: float) -> list[PromMetric]:
    """``families`` with ``started`` as the created time of each sample of an ``AGENT_COUNTERS``
    family that has none (those other modules render); a family needing none is the same object
    (the cache reuses what it rendered by identity), one that does a copy (never changed in place)."""
    out: list[PromMetric] = []
    for fam in families:
        if fam.type != "counter" or fam.name + "_total" not in AGENT_COUNTERS \
                or any(s.name.endswith("_created") for s in fam.samples):
            out.append(fam)
            continue
        twin = copy.copy(fam)
        twin.samples = []
        for s in fam.samples:
            twin.samples.append(s)
            if s.name.endswith("_total"):  # right after its sample, with its labels
                twin.samples.append(Sample(fam.name + "_created", s.labels, started))
        out.append(twin)
    return out


def fault_exemplar(f: Fault) -> Optional[Exemplar]:
    """The event behind a fault counter's last increment: where it was read (``kmsg``, the
    collector's call) and its text, at its time; None without a time."""
    if f.last_seen is None:
        return None
    return Exemplar(_fit({"source": f.source or "collector", "event": f.message or f.code}), 1.0, f.last_seen)


def removed_exemplar(ident: DeviceIdentity, when: float) -> Exemplar:
    """The device behind the last increment of ``accelerator_devices_removed_total``."""
    return Exemplar(_fit({"uuid": ident.uuid, "pci_address": ident.pci_address or ""}), 1.0, when)


@dataclass
class _Device:
    driver: Optional[str]
    resets: dict[str, int] = field(default_factory=dict)  # reset code -> its count
    counters: dict[str, float] = field(default_factory=dict)  # DRIVER_FIELDS -> last value
    restarted: Optional[float] = None  # the latest restart seen


class CounterStarts:
    """Created times of counter series, from the snapshots the exposition builds (``begin`` once
    per snapshot, then ``created`` per counter sample); bounded, not thread-safe (the snapshot
    collector holds its lock)."""

    def __init__(self, started: float, boot: Optional[float]):
        self.started, self.boot = started, boot
        self._now: Optional[float] = None
        self._series: OrderedDict[tuple, list] = OrderedDict()  # key -> [last value, created or None]
        self._devices: OrderedDict[str, _Device] = OrderedDict()
        self.removed: dict[str, tuple[DeviceIdentity, float]] = {}  # vendor -> the last one removed, when

    def begin(self, snap: NodeSnapshot) -> None:
        """Read the snapshot's restart evidence per device (see the module)."""
        prev, now = self._now, snap.time
        self._now = now
        for ident in snap.removed:
            self.removed[ident.vendor] = (ident, now)
            self._devices.pop(ident.uuid, None)
        for d in snap.devices:
            uuid = d.identity.uuid
            resets = {f.code: f for f in d.faults if f.code in RESET_CODES}
            counters = {name: v for name in DRIVER_FIELDS if (v := d.value(name)) is not None}
            dev = self._devices.get(uuid)
            if dev is None:
                self._devices[uuid] = _Device(d.identity.driver_version, {c: f.count for c, f in resets.items()},
                                              counters)
                if len(self._devices) > MAX_DEVICES:
                    self._devices.popitem(last=False)
                continue
            self._devices.move_to_end(uuid)
            seen: list[float] = []
            if d.identity.driver_version and dev.driver and d.identity.driver_version != dev.driver:
                seen.append(now)  # the driver was reloaded (or upgraded)
            for code, f in resets.items():
                if f.count > dev.resets.get(code, 0):
                    last = f.last_seen if f.last_seen is not None else now
                    seen.append(min(now, last if prev is None else max(prev, last)))
            if any(v < dev.counters[k] for k, v in counters.items() if k in dev.counters):
                seen.append(now)
            if seen:
                dev.restarted = max(seen)
            dev.driver = d.identity.driver_version or dev.driver
            dev.resets = {c: f.count for c, f in resets.items()}
            dev.counters.update(counters)

    def _base(self, name: str, uuid: Optional[str]) -> Optional[float]:
        if name in AGENT_COUNTERS:
            return self.started
        if name in DRIVER_COUNTERS:
            dev = self._devices.get(uuid) if uuid else None
            known = [t for t in (self.boot, dev.restarted if dev else None) if t is not None]
            return max(known) if known else None
        return None

    def created(self, metric: N.Metric, labels: Mapping[str, str], value: float) -> Optional[float]:
        """The created time of one counter sample of the snapshot of the last ``begin``, or None."""
        key = (metric.name, tuple(labels.values()))
        now = self._now if self._now is not None else time.time()
        st = self._series.get(key)
        base = self._base(metric.name, labels.get("uuid"))
        if st is None:
            st = self._series[key] = [value, base]
            if len(self._series) > MAX_SERIES:
                self._series.popitem(last=False)
        else:
            self._series.move_to_end(key)
            if value < st[0]:
                st[1] = now  # it went backwards: a new run
            elif base is not None and (st[1] is None or base > st[1]):
                st[1] = base  # the device restarted (driver counters), or the boot was unknown before
            st[0] = value
        return None if st[1] is None else min(st[1], now)
