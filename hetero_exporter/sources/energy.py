"""Energy for every device and every container (issue 40 §2): the sampler enricher ``EnergyMeter``.

Per top-level device, each cycle:

- **the device's energy** (``energy_joules_total``, joules): the vendor's counter where the
  collector read one (NVML ``nvmlDeviceGetTotalEnergyConsumption``, amdsmi's energy counter),
  left as read; else the power reading (``power_watts``) integrated over the cycle by the
  trapezoid rule, a reading of quality ``derived`` whose window is the cycle and whose error
  bound is the sum over the cycles of (power resolution / 2 + power error bound) x interval
  (what the power reading's own quality allows; absent where the power reading states neither).
  A gap longer than ``max_gap_seconds`` (a late collector, a stale power reading) is not
  integrated: energy is never invented for time nobody read.
- **the split**: the cycle's increment divided by the device's allocation shares
  (``finops.node_shares``: whole device, MIG / partition, shared by memory, the same shares as
  ``accelerator_allocation_share_ratio``) into per-container joules, the rest (no container,
  shares under 1, the counter's value when the agent first saw the device) into unattributed.
  Per device the containers plus unattributed equal the device's energy as counted here.
- **a new run**: a device's integrated energy and its split start again from 0 when the device
  restarts (a changed driver version, a reset fault counted again, a vendor counter going
  backwards, a new boot), as a vendor counter does: the TSDB sees a counter reset.

The runs survive agent restarts through ``<state_dir>/energy.json`` (written at most every
``save_seconds`` and at close, read back as hostile: owner, mode, size, shape and bounds), so a
restart never makes a counter go backwards. A container not seen for ``retain_seconds`` is
forgotten (its series end); at most ``MAX_CONTAINERS`` per device are kept.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from hetero_exporter import finops, smallfile
from hetero_exporter.model import fields as F
from hetero_exporter.model import (ContainerEnergy, DeviceSample, EnergySplit, NodeSnapshot, Quality, Reading)
from hetero_exporter.sources.kernel_log import RESET_CODES

log = logging.getLogger(__name__)

FILE_NAME = "energy.json"
FILE_FORMAT = "hetero-exporter-energy"
FILE_VERSION = 1
TMP_PREFIX = ".energy-"
MAX_BYTES = 4 << 20
MAX_DEVICES = 1024
MAX_CONTAINERS = 256  # per device: pods come and go; the oldest seen is forgotten first
MAX_NAME = 253  # a namespace, pod or container name (Kubernetes names are at most 253)
MAX_JOULES = 1e18  # a sane counter (an 1 kW device for 30 million years)
SOURCE = "integral of power_watts over the collection cycle (trapezoid)"

Owner = finops.Owner


@dataclass
class _Run:
    """One device's energy run (joules since the run began, as this agent counts them)."""

    vendor: str
    total: float = 0.0  # the device's energy: the vendor counter's last value, or the integral
    integrated: bool = False  # total is ours (no vendor counter)
    bound: Optional[float] = 0.0  # the integral's accumulated error bound, joules (None: unknown)
    unattributed: float = 0.0
    containers: dict[Owner, float] = field(default_factory=dict)
    seen: dict[Owner, float] = field(default_factory=dict)  # owner -> last time it held a share
    driver: Optional[str] = None
    resets: int = 0  # the reset faults' summed counts when last seen
    power: Optional[float] = None  # the last power reading (watts) and its time, for the next cycle
    at: Optional[float] = None
    window: Optional[float] = None  # seconds the last integrated step covered

    def restart(self) -> None:
        self.total, self.bound, self.unattributed = 0.0, 0.0, 0.0
        self.power = self.at = self.window = None  # the new run begins at this reading
        self.containers.clear()
        self.seen.clear()


class EnergyMeter:
    """The enricher (``snapshot -> snapshot``). ``state_dir`` None: nothing kept across restarts
    (``parse``, a test). ``boot_id``: this boot's (a file from another boot is a new run)."""

    def __init__(self, state_dir: Optional[str], boot_id: Optional[str], *, max_gap_seconds: float = 60.0,
                 save_seconds: float = 60.0, retain_seconds: float = 3600.0) -> None:
        self.path = os.path.join(state_dir, FILE_NAME) if state_dir else None
        self.boot_id = boot_id
        self.max_gap, self.save_every, self.retain = max_gap_seconds, save_seconds, retain_seconds
        self._runs: dict[str, _Run] = {}
        self._saved_at: Optional[float] = None
        self._lock = threading.Lock()
        if self.path is not None:
            smallfile.remove_stale(os.path.dirname(self.path), TMP_PREFIX)
            self._runs = _load(self.path, boot_id)

    def __call__(self, snap: NodeSnapshot) -> NodeSnapshot:
        with self._lock:
            shares = finops.node_shares(snap)
            devices, splits = [], []
            for d in snap.devices:
                if d.identity.parent is not None:
                    devices.append(d)
                    continue
                run = self._step(d, snap.time, shares.get((d.identity.vendor, d.identity.uuid), {}))
                devices.append(_with_energy(d, run) if run is not None and run.integrated else d)
                if run is not None:
                    splits.append(_split(d, run))
            if self.path is not None and (self._saved_at is None or snap.time - self._saved_at >= self.save_every):
                self._save(snap.time)
        return dataclasses.replace(snap, devices=tuple(devices), energy=tuple(splits))

    def close(self) -> None:
        """Write the runs (the agent stops)."""
        with self._lock:
            if self.path is not None:
                self._save(None)

    def _step(self, d: DeviceSample, now: float, shares: Mapping[Owner, float]) -> Optional[_Run]:
        uuid = d.identity.uuid
        counter, power = d.value(F.ENERGY), d.value(F.POWER)
        run = self._runs.get(uuid)
        if run is None:
            if counter is None and power is None:
                return None
            if len(self._runs) >= MAX_DEVICES:
                return None
            run = self._runs[uuid] = _Run(d.identity.vendor, integrated=counter is None,
                                          driver=d.identity.driver_version)
            if counter is not None:  # what it counted before the agent saw it: nobody's we know
                run.total = run.unattributed = counter
        delta = self._delta(d, run, counter, power, now)
        if delta > 0:
            _share(run, delta, shares, now)
        _forget(run, now - self.retain)
        return run

    def _delta(self, d: DeviceSample, run: _Run, counter: Optional[float], power: Optional[float],
               now: float) -> float:
        """Joules since the last cycle (0 where unknown); restarts the run on a device restart."""
        resets = sum(f.count for f in d.faults if f.code in RESET_CODES)
        driver = d.identity.driver_version
        restarted = resets > run.resets or (driver is not None and run.driver is not None and driver != run.driver)
        run.resets, run.driver = resets, driver or run.driver
        if not run.integrated:  # the vendor's counter: its increments (a cycle without it adds nothing)
            if counter is None:
                return 0.0
            if counter < run.total:  # went backwards: the driver counts again from its reset
                run.restart()
                run.total = run.unattributed = counter  # counted before we saw the new run: nobody's we know
                return 0.0
            delta, run.total = counter - run.total, counter
            return delta
        if counter is not None:  # a counter appeared: it is the device's energy from now on
            run.restart()
            run.integrated, run.total, run.unattributed = False, counter, counter
            return 0.0
        if restarted:
            run.restart()
        if power is None:
            run.power = run.at = None  # no left point for the next cycle's trapezoid
            return 0.0
        t = d.timestamp or now
        delta = 0.0
        if run.power is not None and run.at is not None and 0 < t - run.at <= self.max_gap:
            run.window = t - run.at
            delta = min((run.power + power) / 2.0 * run.window, MAX_JOULES - run.total)
            run.total += delta
            run.bound = _bound(run.bound, d.readings.get(F.POWER), run.window)
        run.power, run.at = power, t
        return delta

    def _save(self, now: Optional[float]) -> None:
        assert self.path is not None
        doc = {"format": FILE_FORMAT, "version": FILE_VERSION, "boot_id": self.boot_id,
               "devices": [_encode(uuid, r) for uuid, r in self._runs.items()]}
        try:
            smallfile.write_atomically(self.path, json.dumps(doc).encode(), prefix=TMP_PREFIX, fsync=False)
        except OSError as e:
            log.warning("energy state not saved", extra={"path": self.path, "error": str(e)})
        if now is not None:
            self._saved_at = now


def _bound(bound: Optional[float], power: Optional[Reading], dt: float) -> Optional[float]:
    """The integral's error bound after one more step of ``dt`` seconds (None: unknown)."""
    if bound is None or power is None:
        return None
    q = power.quality
    if q.resolution is None and q.error_bound is None:
        return None
    return bound + ((q.resolution or 0.0) / 2.0 + (q.error_bound or 0.0)) * dt


def _share(run: _Run, delta: float, shares: Mapping[Owner, float], now: float) -> None:
    taken = 0.0
    for owner, s in shares.items():
        s = min(max(s, 0.0), 1.0 - taken)
        if s <= 0:
            continue
        if owner not in run.containers and len(run.containers) >= MAX_CONTAINERS:
            oldest = min(run.seen, key=run.seen.__getitem__)
            run.containers.pop(oldest, None)
            run.seen.pop(oldest, None)
        run.containers[owner] = run.containers.get(owner, 0.0) + delta * s
        run.seen[owner] = now
        taken += s
    run.unattributed += delta * (1.0 - taken)


def _forget(run: _Run, before: float) -> None:
    for owner in [o for o, t in run.seen.items() if t < before]:
        run.containers.pop(owner, None)
        run.seen.pop(owner, None)


def _with_energy(d: DeviceSample, run: _Run) -> DeviceSample:
    """The device with its integrated energy reading (the vendor gave no counter)."""
    power = d.readings.get(F.POWER)
    q = Quality(source=SOURCE, method="derived", window_seconds=run.window,
                resolution=power.quality.resolution if power is not None else None, error_bound=run.bound)
    return dataclasses.replace(d, readings={**d.readings, F.ENERGY: Reading(run.total, q)})


def _split(d: DeviceSample, run: _Run) -> EnergySplit:
    return EnergySplit(vendor=d.identity.vendor, uuid=d.identity.uuid, unattributed_joules=run.unattributed,
                       containers=tuple(ContainerEnergy(ns, pod, ctr, j)
                                        for (ns, pod, ctr), j in sorted(run.containers.items())))


# --------------------------------------------------------------------------- the state file

def _encode(uuid: str, r: _Run) -> dict[str, Any]:
    return {"uuid": uuid, "vendor": r.vendor, "total": r.total, "integrated": r.integrated, "bound": r.bound,
            "unattributed": r.unattributed, "driver": r.driver, "resets": r.resets,
            "containers": [[ns, pod, ctr, j, r.seen.get((ns, pod, ctr), 0.0)]
                           for (ns, pod, ctr), j in r.containers.items()]}


def _load(path: str, boot_id: Optional[str]) -> dict[str, _Run]:
    """The runs an earlier agent saved; nothing (logged once) for a missing, foreign, corrupt or
    other boot's file."""
    try:
        data = smallfile.read_regular(path, MAX_BYTES, follow_links=False, check=smallfile.owned_by_this_agent)
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT or doc.get("version") != FILE_VERSION:
            raise ValueError(f"not a {FILE_FORMAT} file of version {FILE_VERSION}")
        if boot_id is not None and doc.get("boot_id") != boot_id:
            return {}  # another boot: every device restarted, so did its energy run
        rows = doc.get("devices")
        if not isinstance(rows, list) or len(rows) > MAX_DEVICES:
            raise ValueError(f"devices: not a list of at most {MAX_DEVICES}")
        return dict(_decode(row, i) for i, row in enumerate(rows))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError, RecursionError) as e:
        log.warning("energy state ignored: energy runs start again", extra={"path": path, "error": str(e)[:200]})
        return {}


def _joules(x: Any, where: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or not 0 <= x <= MAX_JOULES:
        raise ValueError(f"{where}: not a number of joules in 0..{MAX_JOULES:g}")
    return float(x)


def _name(x: Any, where: str, empty: bool = True) -> str:
    if not isinstance(x, str) or len(x) > MAX_NAME or (not x and not empty):
        raise ValueError(f"{where}: not a name of at most {MAX_NAME} characters")
    return x


def _decode(row: Any, i: int) -> tuple[str, _Run]:
    where = f"devices[{i}]"
    if not isinstance(row, dict):
        raise ValueError(f"{where}: not an object")
    bound = row.get("bound")
    driver = row.get("driver")
    resets = row.get("resets", 0)
    if isinstance(resets, bool) or not isinstance(resets, int) or not 0 <= resets < 1 << 53:
        raise ValueError(f"{where}.resets: not a count")
    run = _Run(vendor=_name(row.get("vendor"), f"{where}.vendor", empty=False),
               total=_joules(row.get("total"), f"{where}.total"), integrated=row.get("integrated") is True,
               bound=None if bound is None else _joules(bound, f"{where}.bound"),
               unattributed=_joules(row.get("unattributed"), f"{where}.unattributed"),
               driver=_name(driver, f"{where}.driver") if driver is not None else None, resets=resets)
    rows = row.get("containers")
    if not isinstance(rows, list) or len(rows) > MAX_CONTAINERS:
        raise ValueError(f"{where}.containers: not a list of at most {MAX_CONTAINERS}")
    for j, c in enumerate(rows):
        at = f"{where}.containers[{j}]"
        if not isinstance(c, list) or len(c) != 5:
            raise ValueError(f"{at}: not [namespace, pod, container, joules, seen]")
        owner = (_name(c[0], at), _name(c[1], at, empty=False), _name(c[2], at))
        run.containers[owner] = _joules(c[3], f"{at} joules")
        run.seen[owner] = _joules(c[4], f"{at} seen")
    return _name(row.get("uuid"), f"{where}.uuid", empty=False), run
