"""Plumbing shared by the collectors that read a vendor command-line tool (npu_smi, cnmon).

- CliCalls: calls through the shared runner (hetero_exporter.sdk.runner) that end before the
  cycle's deadline, one at a time or a few at once, counted;
- reading(): a value in base units with the field's declared quality (absent -> unsupported);
- FaultEpisodes: fault codes active now -> Faults counted once per episode in a FaultLedger;
- worst_state(): health from fault severities (critical failed, warning degraded, info ok);
- NumaNodes: NUMA node of a PCI address, from sysfs; find_tool(): the tool's path or Unavailable;
- build(): a collector over the real tool, or over its fake executable when simulating.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import shutil
import time
from typing import Any, Callable, Hashable, Mapping, Optional, Sequence

from hetero_exporter import pci
from hetero_exporter.sdk.contract import CollectorOptions, Unavailable
from hetero_exporter.sdk.ledger import FaultLedger
from hetero_exporter.health import faults as fault_tables
from hetero_exporter.model import DeviceIdentity, DeviceSample, Fault, Health, Quality, Reading

Runner = Callable[..., Any]  # vendor_cli.run's signature: (argv, timeout, *, env=...) -> CliResult


class CliCalls:
    """Runs ``exe ARGS`` through the runner with the time left before a deadline (monotonic);
    ``extra_env()`` is added to each call's environment (the simulation's clock)."""

    def __init__(self, exe: str, tool: str, *, runner: Optional[Runner] = None,
                 extra_env: Callable[[], Mapping[str, str]] = dict, workers: int = 4):
        from hetero_exporter.sdk import runner as vendor_cli
        self.exe, self.tool = exe, tool
        self._run = runner or vendor_cli.run
        self._extra_env = extra_env
        self._workers = max(1, workers)
        self.calls = 0  # runs made (benchmarks)

    def call(self, args: Sequence[str], deadline: float) -> str:
        remaining = deadline - time.monotonic()
        if remaining <= 0.05:
            raise TimeoutError(f"{self.tool} {' '.join(args)}: no time left in this cycle")
        self.calls += 1
        return self._run([self.exe, *args], remaining, env=dict(self._extra_env()) or None).stdout

    def map(self, jobs: Sequence[tuple[Hashable, Sequence[str]]], deadline: float) -> list[tuple[Any, Any]]:
        """Run each job (key, args), up to ``workers`` at once; returns (key, stdout or the
        exception it raised), in the jobs' order."""
        def one(job: tuple[Hashable, Sequence[str]]) -> tuple[Any, Any]:
            try:
                return job[0], self.call(job[1], deadline)
            except Exception as e:  # noqa: BLE001 - returned to the caller, which decides
                return job[0], e

        if len(jobs) <= 1 or self._workers == 1:
            return [one(j) for j in jobs]
        with concurrent.futures.ThreadPoolExecutor(min(self._workers, len(jobs))) as pool:
            return list(pool.map(one, jobs))


def reading(quality: Mapping[str, Quality], name: str, value: Optional[float], age: float = 0.0) -> Reading:
    """``value`` (base units) with the quality declared for ``name``; None -> unsupported."""
    q = quality[name]
    if value is None:
        return Reading(None, q.with_status("unsupported", age))
    return Reading(float(value), q if not age else q.with_status("ok", age))


def table_fault(vendor: str, code: str, message: str, source: str) -> Fault:
    """A Fault for ``code`` with class, action and severity from the vendor's fault table."""
    info = fault_tables.lookup(vendor, code)
    desc = info.description or ("" if info.known else f"not in the {vendor} fault table")
    text = f"{message}: {desc}" if desc and message else (message or desc)
    return Fault(code=code, fault_class=info.fault_class, action=info.action, severity=info.severity,
                 message=text, source=source)


_SEVERITY_STATE = {"critical": "failed", "warning": "degraded", "info": "ok"}
_RANK = {"ok": 0, "degraded": 1, "failed": 2}


def worst_state(reasons: Sequence[Fault]) -> str:
    """critical -> failed, warning -> degraded, info -> ok; the worst wins."""
    worst = "ok"
    for f in reasons:
        s = _SEVERITY_STATE.get(f.severity, "degraded")
        worst = s if _RANK[s] > _RANK[worst] else worst
    return worst


class FaultEpisodes:
    """Faults active per device, counted in a FaultLedger once per episode: a code active
    now that was not active at the device's previous update is a new occurrence."""

    def __init__(self) -> None:
        self.ledger = FaultLedger()
        self._active: dict[str, tuple[str, ...]] = {}

    def update(self, uuid: str, current: Sequence[Fault], now: float) -> tuple[Fault, ...]:
        previous = self._active.get(uuid, ())
        out = []
        for f in current:
            if f.code in previous:
                out.append(self.ledger.get(uuid, f.code) or f)
            else:
                out.append(self.ledger.record(uuid, f, now))
        self._active[uuid] = tuple(f.code for f in current)
        return tuple(out)

    def faults(self, uuid: str) -> tuple[Fault, ...]:
        return self.ledger.faults(uuid)

    def lost(self, identity: DeviceIdentity, fault: Fault, now: float) -> DeviceSample:
        """A device the tool no longer lists: failed, no readings, its faults kept."""
        reasons = self.update(identity.uuid, [fault], now)
        return DeviceSample(identity=identity, timestamp=now, health=Health("failed", reasons),
                            faults=self.faults(identity.uuid))


class NumaNodes:
    """NUMA node of a PCI address (lower case), read from sysfs once per new address."""

    def __init__(self, sysfs_root: str = "/sys"):
        self._root = sysfs_root
        self._known: dict[str, Optional[int]] = {}

    def __call__(self, bus: Optional[str]) -> Optional[int]:
        if bus is None:
            return None
        if bus not in self._known:
            self._known.update({d.address: d.numa_node for d in pci.scan(self._root)})
            self._known.setdefault(bus, None)
        return self._known[bus]


def find_tool(settings: Mapping[str, Any], name: str, dirs: str, why: str) -> str:
    """``settings.path`` or ``name`` on PATH, else in ``dirs`` (where vendors install their
    tools, often not on a container's PATH); Unavailable naming ``why`` otherwise."""
    exe = str(settings.get("path") or name)
    found = shutil.which(exe) if "/" in exe else (shutil.which(exe) or shutil.which(exe, path=dirs))
    if found is None:
        raise Unavailable(f"{exe} not found on PATH or in {dirs} ({why})")
    return found


def build(options: CollectorOptions, factory: Callable[..., Any], install_fake: Callable[..., Any],
          tool: str, dirs: str, why: str) -> Any:
    """``factory(exe, clock=, timeout=, interval=, settings=[, extra_env=])`` over the real tool,
    or, when ``options.scenario`` is set, over the fake that ``install_fake(scenario, clock,
    workdir) -> (exe, extra_env)`` writes (the caller imports its fake lazily)."""
    settings = dict(options.settings)
    common = dict(clock=options.clock, timeout=options.timeout_seconds,
                  interval=options.interval_seconds, settings=settings)
    if options.scenario is not None:
        exe, env = install_fake(options.scenario, options.clock, options.workdir)
        return factory(exe, extra_env=env, **common)
    return factory(find_tool(settings, tool, dirs, why), **common)


@dataclasses.dataclass(frozen=True)
class ParsedOutput:
    """What ``hetero-exporter parse TOOL FILE`` prints for outputs without device readings."""

    command: str
    data: Any

    def to_dict(self) -> dict:
        d = self.data.to_dict() if hasattr(self.data, "to_dict") else self.data
        return {"command": self.command, "result": d}
