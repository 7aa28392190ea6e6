"""Plumbing shared by the collectors that read a vendor command-line tool.

- CliCalls: calls through the shared runner (hetero_exporter.sdk.runner) that end before the
  cycle's deadline, one at a time or a few at once, counted;
- reading(), Readings: values in base units with the field's declared quality (absent -> unsupported);
- FaultEpisodes: fault codes active now -> Faults counted once per episode in a FaultLedger;
- health from fault severities: ``sdk.faults.health_of`` (the one rule);
- NumaNodes: NUMA node of a PCI address, from sysfs; find_tool(): the tool's path or Unavailable
  naming every place looked (its host folders from the vendor spec's ToolSpec; below the host
  root it runs with its driver libraries, sdk/host_tools.py);
- build(): a collector over the real tool, or over its fake executable when simulating;
  fall_back(): a binding collector's CLI stand-in;
- tool_spec(): the ToolSpec of a tool (host folders, environment it reads) from the specs;
- CliCollector: the base of a CLI vendor collector (one summary call, hooks, lost devices).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib
import os
import shutil
import threading
import time
from typing import Any, Callable, Hashable, Iterable, Mapping, Optional, Sequence

from hetero_exporter import pci, vendors
from hetero_exporter.sdk import host_tools
from hetero_exporter.sdk.contract import CollectorOptions, HostPaths, Unavailable
from hetero_exporter.sdk.identity import IdentityMemory
from hetero_exporter.sdk.ledger import FaultLedger
from hetero_exporter.sdk.settings import BindingSettings, ToolSettings
from hetero_exporter.model import episodes
from hetero_exporter.model.spec import ToolSpec
from hetero_exporter.sdk import faults as fault_tables
from hetero_exporter.model import DeviceIdentity, DeviceSample, Fault, Health, ProcessSample, Quality, Reading

Runner = Callable[..., Any]  # runner.run's signature: (argv, timeout, *, env=...) -> CliResult


def tool_spec(tool: str, vendor: Optional[str] = None) -> Optional[ToolSpec]:
    """The ToolSpec named ``tool``: of ``vendor``'s spec when given, else of the first spec
    that declares a tool of that name; None when no spec does."""
    if vendor is not None:
        s = vendors.spec(vendor)
        return s.tool(tool) if s is not None else None
    for s in vendors.specs().values():
        found = s.tool(tool)
        if found is not None:
            return found
    return None


class CliCalls:
    """Runs ``exe ARGS`` through the runner with the time left before a deadline (monotonic);
    ``extra_env()`` is added to each call's environment (the simulation's clock), and so are
    the variables named in ``passthrough`` that the agent's environment sets (default: the
    ``env`` of the tool's ToolSpec, where its vendor's install lives)."""

    def __init__(self, exe: str, tool: str, *, runner: Optional[Runner] = None,
                 extra_env: Callable[[], Mapping[str, str]] = dict, workers: int = 4,
                 passthrough: Optional[Sequence[str]] = None):
        from hetero_exporter.sdk import runner as vendor_cli
        self.exe, self.tool = exe, tool
        self._run = runner or vendor_cli.run
        self._extra_env = extra_env
        if passthrough is None:
            spec = tool_spec(tool)
            passthrough = spec.env if spec is not None else ()
        self.passthrough = tuple(passthrough)
        self._workers = max(1, workers)
        self.calls = 0  # runs made (benchmarks)

    def call(self, args: Sequence[str], deadline: float) -> str:
        remaining = deadline - time.monotonic()
        if remaining <= 0.05:
            raise TimeoutError(f"{self.tool} {' '.join(args)}: no time left in this cycle")
        self.calls += 1
        # passed as values, not names: a test's runner takes (argv, timeout, *, env) only
        env = {k: os.environ[k] for k in self.passthrough if k in os.environ}
        env.update(getattr(self.exe, "env", {}))  # a tool of the host root: its libraries, install folders
        env.update(self._extra_env())
        exe = self.exe
        if isinstance(exe, host_tools.ToolPath) and exe.chroot is not None:
            # the runner starts it as `chroot ROOT HOST_PATH ...`
            return self._run([exe.host_path, *args], remaining, env=env, chroot=exe.chroot).stdout
        return self._run([self.exe, *args], remaining, env=env or None).stdout

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


class Readings(dict):
    """One device's readings built against a quality table: ``put(name, value, scale=)`` stores
    ``value * scale`` (the vendor unit to the base unit; ``percent=True``: ``value / 100``, exact
    for whole percentages) with the field's quality, or an unsupported reading when the tool
    gave no value."""

    def __init__(self, quality: Mapping[str, Quality]):
        super().__init__()
        self._quality = quality

    def put(self, name: str, value: Optional[float], *, scale: float = 1.0, percent: bool = False,
            age: float = 0.0) -> None:
        if value is not None:
            value = value / 100.0 if percent else value * scale
        self[name] = reading(self._quality, name, value, age)


def process_samples(rows: Iterable[Any], uuid: str, *, name: str = "name", memory: str = "memory_bytes",
                    scale: float = 1.0) -> tuple[ProcessSample, ...]:
    """The ProcessSamples of one device from a tool's process rows: ``pid``, the attribute
    ``name`` as the process name, the attribute ``memory`` times ``scale`` as bytes (the tool's
    unit to bytes; absent when the tool printed none)."""
    out = []
    for p in rows:
        raw = getattr(p, memory)
        out.append(ProcessSample(pid=p.pid, device_uuid=uuid, name=getattr(p, name) or None,
                                 memory_bytes=None if raw is None else int(raw * scale)))
    return tuple(out)


def table_fault(vendor: str, code: str, message: str, source: str) -> Fault:
    """A Fault for ``code`` with class, action and severity from the vendor's fault table."""
    info = fault_tables.lookup(vendor, code)
    desc = info.description or ("" if info.known else f"not in the {vendor} fault table")
    text = f"{message}: {desc}" if desc and message else (message or desc)
    return Fault(code=code, fault_class=info.fault_class, action=info.action, severity=info.severity,
                 message=text, source=source)


class FaultEpisodes:
    """Faults active per device, counted in a FaultLedger once per episode (``model.episodes``:
    a code active now that was not active at the device's previous update opens one, so
    ``accelerator_fault_events_total`` counts onsets, not polls). The one onset counter of the
    SDK: the CLI base's, and NVIDIA's conditions over its shared ledger. Thread-safe."""

    def __init__(self, ledger: Optional[FaultLedger] = None) -> None:
        self.ledger = ledger if ledger is not None else FaultLedger()
        self._active: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def update(self, uuid: str, current: Sequence[Fault], now: float) -> tuple[Fault, ...]:
        """Record the onsets among ``current``; the active faults with their ledger counts (a
        fault still active keeps its count and first sighting, with this poll's message)."""
        codes = tuple(f.code for f in current)
        with self._lock:
            previous, self._active[uuid] = self._active.get(uuid, ()), codes
        onsets = set(episodes.change(previous, codes).opened)
        out = []
        for f in current:
            if f.code in onsets:
                out.append(self.ledger.record(uuid, f, now))
                continue
            known = self.ledger.get(uuid, f.code)
            out.append(f if known is None else dataclasses.replace(known, message=f.message or known.message))
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


def _search_dirs(dirs: Optional[str], spec: ToolSpec) -> list[str]:
    """``dirs`` (os.pathsep-joined) first, then the ToolSpec's other folders."""
    given = [d for d in (dirs or "").split(os.pathsep) if d]
    return list(dict.fromkeys([*given, *spec.dirs]))


def find_tool(host: HostPaths, name: str, dirs: Optional[str] = None, why: Optional[str] = None,
              *, vendor: Optional[str] = None, spec: Optional[ToolSpec] = None, path: Optional[str] = None) -> str:
    """The tool to run, looked for in this order:

    1. ``path`` (the ``path`` setting): as it is, else (an absolute path) the same path below the host root;
    2. ``name`` on PATH;
    3. each of ``dirs`` (os.pathsep-joined) and the ToolSpec's ``dirs`` below the host root
       (``host.root``), then as they are.

    A tool found below the host root is a host_tools.ToolPath: it runs with the ToolSpec's
    library folders and install variables, the ``host.exec_mode`` way (``ld_library_path``
    or ``chroot``). Unavailable naming every place looked and ``why`` otherwise. The ToolSpec
    is ``spec``, else the one named ``name`` (of ``vendor``'s spec when given)."""
    spec = spec or tool_spec(name, vendor) or ToolSpec(name)
    why = why or spec.why_missing or f"{name} not installed"
    root, mode = host.root, host.exec_mode
    configured = path or ""
    if "/" in configured:
        if host_tools.executable(configured):
            return configured
        looked = [configured]
        if root and os.path.isabs(configured):
            below = host_tools.host_path(root, configured)
            if host_tools.executable(host_tools.inside(root, below)):
                return host_tools.tool_path(root, below, spec, mode)
            looked.append(os.path.join(root, configured.lstrip("/")))
        raise Unavailable(f"{configured} (settings path) not found or not executable at {', '.join(looked)} ({why})")
    exe = configured or name
    found = shutil.which(exe)
    if found is not None:
        return found
    searched = _search_dirs(dirs, spec)
    places = []
    if root:
        in_root = host_tools.find_below(root, exe, searched)
        if in_root is not None:
            return host_tools.tool_path(root, in_root, spec, mode)
        places += [os.path.join(root, d.lstrip("/")) for d in searched]
    found = shutil.which(exe, path=os.pathsep.join(searched))
    if found is not None:
        return found
    places += searched
    raise Unavailable(f"{exe} not found on PATH, in {', '.join(places)} ({why})")


def fall_back(options: CollectorOptions, why: Unavailable, module: str, tool: str) -> Any:
    """The CLI collector of ``module`` (its ``create(options)``, then ``probe()``) standing in
    for a binding collector that cannot load (``why``), unless the settings say
    ``fallback: false``; Unavailable naming both reasons when the CLI is missing too. The CLI
    collector reads the keys of the binding collector's section that are its own."""
    if not BindingSettings.of(options.settings).fallback:
        raise why
    import logging
    try:
        collector = importlib.import_module(module).create(options)
        collector.probe()
    except Unavailable as e:
        raise Unavailable(f"{why}; {tool} fallback: {e}") from None
    logging.getLogger(module).warning("binding unusable (%s); reading %s instead", why, tool)
    return collector


def fake_installer(module: str) -> Callable[..., Any]:
    """``install_fake`` for ``build``: the ``install(scenario, clock, workdir)`` of the fake
    module, imported only when simulating."""
    def install(scenario: Any, clock: Any, workdir: Optional[str]) -> Any:
        import importlib
        return importlib.import_module(module).install(scenario, clock, workdir)
    return install


def build(options: CollectorOptions, factory: Callable[..., Any], install_fake: "Callable[..., Any] | str",
          tool: "str | ToolSpec", dirs: Optional[str] = None, why: Optional[str] = None,
          *, vendor: Optional[str] = None) -> Any:
    """``factory(exe, clock=, timeout=, interval=, settings=, host=[, extra_env=])`` over the real tool,
    or, when ``options.scenario`` is set, over the fake that ``install_fake(scenario, clock,
    workdir) -> (exe, extra_env)`` writes (or the fake module's dotted name: imported only then). ``tool`` is the
    tool's name or its ToolSpec; ``dirs`` are searched before the ToolSpec's, ``why`` left out
    comes from it (the one given, or the one of ``vendor``'s spec); find_tool says where. A
    CliCollector keeps its pinned identities in ``options.state_dir`` (persist_identities).
    A fake module may define ``host_root_files(scenario, root)``: the files its vendor leaves on a
    host (a runtime's version file), written below a fake host root beside the fake tool, which
    the collector then gets as ``host.root`` (unless the options name a host root)."""
    fake_module = install_fake if isinstance(install_fake, str) else None
    if isinstance(install_fake, str):  # the fake module's dotted name
        install_fake = fake_installer(install_fake)
    spec = tool if isinstance(tool, ToolSpec) else None
    name = spec.name if spec is not None else str(tool)
    host = options.host
    common: dict[str, Any] = dict(clock=options.clock, timeout=options.timeout_seconds,
                                  interval=options.interval_seconds, settings=options.settings)
    if options.scenario is not None:
        exe, env = install_fake(options.scenario, options.clock, options.workdir)
        hook = getattr(importlib.import_module(fake_module), "host_root_files", None) if fake_module else None
        if hook is not None and host.root is None:
            root = os.path.join(os.path.dirname(exe), f"host-root-{vendor or name}")
            hook(options.scenario, root)
            host = host.or_root(root)
        collector = factory(exe, extra_env=env, host=host, **common)
    else:
        path = ToolSettings.of(options.settings).path
        collector = factory(find_tool(host, name, dirs, why, vendor=vendor, spec=spec, path=path), host=host, **common)
    if isinstance(collector, CliCollector):
        collector.persist_identities(options)
    return collector


@dataclasses.dataclass(frozen=True)
class ParsedOutput:
    """What ``hetero-exporter parse TOOL FILE`` prints for outputs without device readings."""

    command: str
    data: Any

    def to_dict(self) -> dict:
        d = self.data.to_dict() if hasattr(self.data, "to_dict") else self.data
        return {"command": self.command, "result": d}


class CliCollector:
    """The collector over one vendor tool that every CLI vendor builds on.

    A subclass sets ``name``, ``vendor``, ``tool`` (the command's name, for messages) and
    ``summary_args`` (the one call made every cycle for all devices), and writes two hooks:

    - ``parse_summary(text) -> parsed``: pure, raises only ParseError;
    - ``devices(parsed, now, deadline) -> list[DeviceSample]``: the model of the parsed
      output; it may make detail calls through ``self.cli`` (they end before ``deadline``)
      and count faults through ``self.episodes``.

    The base runs the summary under the cycle's deadline (``budget_fraction`` of the sampler's
    timeout, so a hung tool is killed by the runner, not abandoned), pins every top-level
    device's identity (``self.identities``) and, when ``complete(parsed)`` says the output
    lists every device, reports each pinned device that is absent as failed under its pinned
    uuid with the ``lost_code`` fault of the vendor's table."""

    name = ""
    vendor = ""
    tool = ""
    summary_args: Sequence[str] = ()
    lost_code = "missing"
    settings_type: type[ToolSettings] = ToolSettings  # the collector's keys (its module's SETTINGS)

    def __init__(self, exe: str, *, clock: Callable[[], float] = time.time, timeout: float = 5.0,
                 interval: float = 10.0, settings: "ToolSettings | Mapping[str, Any] | None" = None,
                 host: HostPaths = HostPaths(), runner: Optional[Runner] = None,
                 extra_env: Callable[[], Mapping[str, str]] = dict):
        self.settings = self.settings_type.of(settings)
        self.host = host
        self.clock = clock
        self.interval = max(0.1, interval)
        own = tool_spec(self.tool, self.vendor) if self.vendor else None
        self.cli = CliCalls(exe, self.tool, runner=runner, extra_env=extra_env,
                            workers=self.settings.parallel_calls,
                            passthrough=own.env if own is not None else None)
        self.budget = max(0.2, self.settings.budget_fraction * timeout)
        self.episodes = FaultEpisodes()
        self.identities = IdentityMemory()
        self.numa = NumaNodes(host.sysfs)

    def persist_identities(self, options: CollectorOptions) -> None:
        """Keep the pinned identities in the options' state dir (loaded now, saved on change
        where the options allow writing), so a device lost across an agent restart keeps its
        uuid; call before the first cycle (``build()`` does)."""
        if options.state_dir:
            self.identities = options.identity_memory(self.name)

    @property
    def calls(self) -> int:
        """Tool runs made by this collector (benchmarks)."""
        return self.cli.calls

    # ------------------------------------------------------------------ hooks
    def parse_summary(self, text: str) -> Any:
        raise NotImplementedError

    def devices(self, parsed: Any, now: float, deadline: float) -> list[DeviceSample]:
        raise NotImplementedError

    def complete(self, parsed: Any) -> bool:
        """Whether the summary lists every device (a shortened output does not mean lost)."""
        return True

    def lost_fault(self, identity: DeviceIdentity) -> Fault:
        return table_fault(self.vendor, self.lost_code,
                           f"{self.tool}: {identity.kind} {identity.index} ({identity.uuid}) no longer listed",
                           self.tool)

    def sample(self, identity: DeviceIdentity, now: float, readings: Mapping[str, Reading],
               current: Sequence[Fault] = (), *, processes: Sequence[Any] = (),
               processes_reported: bool = False, links: Sequence[Any] = ()) -> DeviceSample:
        """The device's sample: ``current`` (the faults the tool shows now) counted once per
        episode, health the worst severity among them, every fault seen kept."""
        reasons = self.episodes.update(identity.uuid, current, now)
        return DeviceSample(identity=identity, timestamp=now, readings=dict(readings),
                            health=fault_tables.health_of(reasons),
                            faults=self.episodes.faults(identity.uuid), processes=tuple(processes),
                            processes_reported=processes_reported, links=tuple(links))

    # ------------------------------------------------------------------ the cycle
    def collect(self) -> list[DeviceSample]:
        deadline = time.monotonic() + self.budget
        now = self.clock()
        parsed = self.parse_summary(self.cli.call(self.summary_args, deadline))
        out = list(self.devices(parsed, now, deadline))
        for d in out:
            if d.identity.parent is None:
                self.identities.remember(d.identity)
        if self.complete(parsed):
            present = [d.identity.uuid for d in out]
            for ident in self.identities.missing(present):
                out.append(self.episodes.lost(ident, self.lost_fault(ident), now))
        return out
