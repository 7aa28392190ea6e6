"""The one assembly: ``Agent.build(options)`` makes every part once, ``start()`` starts them.

``build`` reads the config (typed sections: app/settings.py), chooses the environment (the host
or a simulated node: app/environment.py, which answers with data and never calls back) and makes
the parts in dependency order into one frozen ``Parts``, each from those before it: nothing is
started and no state is read yet. ``start()`` first brings back, once and before the first cycle,
what an earlier agent left (``restore``: the collectors' pinned identities, the kernel-log
cursor, the sticky faults the Node's book records), then starts the background services in the
order of the parts (app/services.py); ``close()`` stops them all. The commands (app/commands.py,
app/top.py) are built from these; cli.py only parses arguments.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from hetero_exporter import config as config_mod
from hetero_exporter import registry
from hetero_exporter.app import environment
from hetero_exporter.app.services import Services
from hetero_exporter.app.settings import Settings
from hetero_exporter.model import DeviceSample
from hetero_exporter.sampling import CollectorSpec, Enricher, Sampler
from hetero_exporter.sdk.contract import Collector, CollectorOptions, HostPaths, IdentityMemories
from hetero_exporter.sdk.identity import IdentityStore, RemovalLog
from hetero_exporter.sources.energy import EnergyMeter

if TYPE_CHECKING:
    from hetero_exporter.finops import FinOps
    from hetero_exporter.health.act.metrics import HealthMetrics
    from hetero_exporter.health.act.remedy import HealthLoop, Remedy
    from hetero_exporter.health.detect.verdicts import HealthVerdicts
    from hetero_exporter.k8s.client import Cluster
    from hetero_exporter.k8s.pods import PodCache
    from hetero_exporter.k8s.slice_cache import SliceCache
    from hetero_exporter.model.pods import ContainerDevices
    from hetero_exporter.sources.attribution import Attributor
    from hetero_exporter.sources.kernel_log import Follower, KernelLogFaults
    from hetero_exporter.sources.pci_presence import UdevWatch
    from hetero_exporter.sources.podresources.client import PodResourcesPoller
    from hetero_exporter.sources.recovery_gate import ExecGates

log = logging.getLogger("hetero_exporter")

KERNEL_LOG_FIRST_READ = 2.0  # seconds the first snapshot waits for the kernel log's backlog
SIMULATED_KUBELET_TIMEOUT = 30.0  # seconds a PodResources call to the simulated kubelet may take


@dataclass(frozen=True)
class Options:
    """What the command line asks of the agent (cli.py makes it from the flags); None: the config's."""

    command: str = "run"
    config_file: Optional[str] = None
    interval: Optional[float] = None
    log_format: Optional[str] = None
    kubeconfig: Optional[str] = None
    listen: Optional[str] = None
    collectors: Mapping[str, bool] = field(default_factory=dict)  # --collector.NAME / --no-collector.NAME
    simulate: Optional[str] = None  # a built-in scenario name or a scenario file
    simulate_if_absent: bool = False
    at: float = 0.0  # the scenario time the simulation starts at
    node_name: Optional[str] = None
    host_root: Optional[str] = None
    health_mode: Optional[str] = None
    kernel_log: Optional[str] = None  # --kernel-log PATH|off


def device_resource(device: DeviceSample) -> str:
    """The extended resource a device is allocated as on its node ('' when none): the health
    remedy's view of ``vendors.device_resource``, over a DeviceSample."""
    from hetero_exporter import vendors
    return vendors.device_resource(device.identity.vendor, device.identity.model)


@dataclass(frozen=True)
class KernelLog:
    """The kernel log as a health source: the follower (its own thread once started) and the
    source putting its events on the devices."""

    follower: "Follower"
    faults: "KernelLogFaults"


@dataclass(frozen=True)
class PodResources:
    """The kubelet PodResources poller on ``socket``; ``simulated``: the allocations a simulated
    kubelet serves there (started before the poller), None on a node."""

    poller: "PodResourcesPoller"
    socket: str
    wait: float  # seconds the first answer is waited for
    simulated: "Optional[Sequence[ContainerDevices]]" = None


@dataclass(frozen=True)
class HealthParts:
    """``run``'s health loop over the verdicts: its metrics (registered by the command), the
    remedy that writes, this node's ResourceSlice watch and the udev watch that wakes the sampler."""

    metrics: "HealthMetrics"
    remedy: "Remedy"
    loop: "HealthLoop"
    slices: "Optional[SliceCache]" = None
    udev: "Optional[UdevWatch]" = None


@dataclass(frozen=True)
class Parts:
    """What ``Agent.build`` makes, in this order, each from the ones above it; nothing started.

    ``paths`` the host paths collectors see; ``identities`` how collectors keep identities (this
    boot, machine and bus), ``memories`` each collector's (read by ``Agent.restore``),
    ``removals`` the devices they forgot as removed; ``collectors`` the enabled ones; ``cluster``
    the one API connection (None where no part needs one); ``pod_cache``, ``podresources`` and
    ``kernel_log`` the sources' services; ``sources`` the enrichers in order; ``verdicts`` the
    judge; ``sampler`` over all of them; ``health`` the health loop (``run`` only); ``gates``
    the runner of the recovery gates' self-tests (``run``, where a class has one)."""

    paths: HostPaths
    identities: IdentityStore
    memories: IdentityMemories
    removals: RemovalLog
    collectors: tuple[CollectorSpec, ...]
    cluster: "Optional[Cluster]"
    pod_cache: "Optional[PodCache]"
    podresources: Optional[PodResources]
    kernel_log: Optional[KernelLog]
    attribution: "Attributor"
    sources: tuple[Enricher, ...]
    verdicts: "HealthVerdicts"
    sampler: Sampler
    health: Optional[HealthParts]
    gates: "Optional[ExecGates]" = None


class Agent:
    """One agent process: its settings, its environment, the parts built from them and the
    services started from those."""

    def __init__(self, options: Options, settings: Settings, env: environment.Environment, node: str,
                 wake: threading.Event, parts: Parts):
        self.options = options
        self.settings = settings
        self.config = settings.config
        self.env = env
        self.scenario = env.scenario
        self.node = node
        self.wake = wake  # collectors and sources set it to get a cycle at once
        self.parts = parts
        self.services = Services()
        self._restored = False
        self._started = False

    @classmethod
    def build(cls, options: Options, *, clock: Optional[Callable[[], float]] = None) -> "Agent":
        """Config file < flags, checked (ConfigError, exit 2); the environment chosen (``clock``
        over its own: tests drive a simulation by hand); the parts made. Nothing runs yet."""
        cfg = config_mod.load(options.config_file).replace(
            interval=options.interval, log_format=options.log_format, kubeconfig=options.kubeconfig,
            listen=options.listen)
        settings = Settings.parse(cfg, health_mode=options.health_mode, kernel_log=options.kernel_log)
        # vendor tools, driver libraries and runtime version files of the host (docs/troubleshooting.md: Vendor
        # tools from the host); checked even when simulating, so a bad mount fails on any run
        host_root = config_mod.host_root(options.host_root, cfg)
        env = environment.choose(settings, simulate=options.simulate, simulate_if_absent=options.simulate_if_absent,
                                 at=options.at, host_root=host_root)
        if clock is not None:
            env.clock = clock
        node = (options.node_name or cfg.node_name or os.environ.get("NODE_NAME") or env.node_name()
                or socket.gethostname())
        wake = threading.Event()
        try:
            parts = _Assembly(options, settings, env, node, wake).parts()
        except BaseException:
            env.close()
            raise
        return cls(options, settings, env, node, wake, parts)

    # ---- start and stop

    def start(self, node: Optional[Mapping[str, Any]] = None) -> Parts:
        """Restore (once, before anything reads: ``restore``), then start the services in the
        order of the parts: the pod cache, the simulated kubelet and the PodResources poller, the
        kernel-log follower (each waiting for its first answer), the ResourceSlice watch and the
        udev watch; the recovery gates' runner is closed with them (its thread starts with its
        first self-test). Once; the parts, started."""
        if self._started:
            return self.parts
        self._started = True
        self.restore(node)
        p = self.parts
        if p.pod_cache is not None:
            cache, wait = p.pod_cache, float(self.settings.attribution.pod_cache_wait)
            self.services.start("pod-cache", lambda: cache.start(wait_first=wait), cache.close)
        if p.podresources is not None:
            self._start_podresources(p.podresources)
        if p.kernel_log is not None:
            follower = p.kernel_log.follower
            self.services.start("kernel-log", lambda: follower.start(wait_first=KERNEL_LOG_FIRST_READ),
                                follower.close)
        if p.health is not None:
            self._start_health(p.health)
        if p.gates is not None:
            self.services.add("recovery-gates", p.gates.close)
        for source in p.sources:
            if isinstance(source, EnergyMeter):  # its runs written at stop, as well as each minute
                self.services.add("energy", source.close)
        return p

    def restore(self, node: Optional[Mapping[str, Any]] = None) -> None:
        """What an earlier agent left, brought back once, before the first cycle: each enabled
        collector's pinned identities (a device lost across the restart keeps its uuid; one the
        bus no longer shows is removed), the kernel-log cursor (nothing replayed, nothing
        missed), and the sticky faults (and the recovery gates' watch) the Node's book records,
        into the verdicts: from ``node`` when the command read it (``health --dry-run``; its
        labels class the devices for the gates), else through the health loop's remedy,
        which tries again each cycle while the API server does not answer (the loop acts only
        once they are back)."""
        if self._restored:
            return
        self._restored = True
        p = self.parts
        p.memories.restore(spec.name for spec in p.collectors)
        if p.kernel_log is not None:
            p.kernel_log.follower.restore()
        if node is not None:
            from hetero_exporter.health import plan as plan_mod
            from hetero_exporter.health.plan.book import holds_from_json
            rcfg = self.settings.health.remedy
            meta = node.get("metadata") or {}
            book = plan_mod.Book.from_annotation((meta.get("annotations") or {}).get(rcfg.book_annotation))
            p.verdicts.restore(plan_mod.sticky_from_json(book.sticky), book.boot_id, self.env.boot_id,
                               plan_mod.occurrences_from_json(book.occurrences), holds_from_json(book.holds))
            p.verdicts.see_node(meta.get("annotations") or {}, rcfg.keys.health_override, self.clock(),
                                labels=meta.get("labels") or {})
        elif p.health is not None:
            p.health.remedy.restore_into(p.verdicts, self.env.boot_id)

    def _start_podresources(self, pr: PodResources) -> None:
        if pr.simulated is not None:
            try:
                from hetero_exporter.simulate import kubelet
                self.services.add("simulated-kubelet", kubelet.spawn(pr.socket, pr.simulated, str(self.workdir)))
            except (ImportError, RuntimeError, OSError) as e:  # the simulated kubelet's grpcio/protobuf missing or too old
                log.warning("kubelet PodResources off: %s (pip install 'hetero-exporter[attribution]'; "
                            "the simulated kubelet also needs [simulate])", e)
                return
        poller = pr.poller
        self.services.start("podresources", lambda: poller.start(wait_first=pr.wait), poller.close)

    def _start_health(self, h: HealthParts) -> None:
        if h.slices is not None:
            self.services.start("resource-slices", h.slices.start, h.slices.close)
        if h.udev is not None:
            if h.udev.start():
                self.services.add("udev", h.udev.stop)
            else:
                log.info("udev watch off", extra={"reason": h.udev.reason})

    def close(self) -> None:
        """Stop every service (newest first), the collectors, and remove what a simulation wrote."""
        self.services.close()
        self.parts.sampler.close()
        self.env.close()

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- read by the commands

    def finops(self) -> "FinOps":
        """The configured FinOps settings, with the reference profile's cost weight, so that a
        device without a price costs reference price x cost_weight / reference cost_weight."""
        from hetero_exporter import profiles
        fin = self.config.finops
        prof = profiles.lookup(fin.reference)
        return fin.with_reference_cost_weight(None if prof is None else prof.cost_weight)

    @property
    def clock(self) -> Callable[[], float]:
        """The environment's clock (time.time, or the simulation's): every part reads this one."""
        return self.env.clock

    @property
    def workdir(self) -> Optional[str]:
        return self.env.workdir

    @property
    def state_dir(self) -> str:
        """Where state that survives a restart lives (pinned identities, the kernel-log cursor)."""
        return self.env.state_dir()

    @property
    def state_writable(self) -> bool:
        return self.env.writes_state(self.options.command)


class _Assembly:
    """Agent.build's steps: each makes one part from the settings, the environment and the
    parts made before it (Parts lists them in order)."""

    def __init__(self, options: Options, settings: Settings, env: environment.Environment, node: str,
                 wake: threading.Event):
        self.options, self.settings, self.config, self.env = options, settings, settings.config, env
        self.node, self.wake = node, wake
        self.state_dir = env.state_dir()
        self.writable = env.writes_state(options.command)

    def parts(self) -> Parts:
        paths = self.env.collector_paths()
        removals = RemovalLog()
        identities = self.identity_store(removals)
        memories = IdentityMemories(identities, self.state_dir)
        collectors = tuple(self.collector(e, paths, identities, memories) for e in self.enabled_collectors())
        inputs = self.env.attribution_inputs()
        cluster = self.cluster(inputs)
        pod_cache = self.pod_cache(cluster) if inputs.watch_pods else None
        podresources = self.podresources(inputs)
        kernel_log = self.kernel_log()
        attribution = self.attribution(inputs, pod_cache, podresources)
        sources = self.sources(attribution, kernel_log)
        from hetero_exporter.health.detect.verdicts import HealthVerdicts
        verdicts = HealthVerdicts(self.settings.health.policy)
        gates = self.recovery_gates(paths, verdicts)
        # With PCI presence on, that source scans the bus and sets the expected counts; the
        # sampler scanning it too would read sysfs twice per cycle for the same answer.
        sampler = Sampler(collectors, self.node, clock=self.env.clock,
                          expected=dict if self.settings.health.pci_presence else self.env.expected,
                          boot_id=self.env.boot_id, wake=self.wake, removals=removals,
                          enrichers=sources, judge=verdicts.judge)
        health = self.health(cluster, pod_cache, verdicts) if self.options.command == "run" else None
        return Parts(paths=paths, identities=identities, memories=memories, removals=removals,
                     collectors=collectors, cluster=cluster, pod_cache=pod_cache, podresources=podresources,
                     kernel_log=kernel_log, attribution=attribution, sources=sources, verdicts=verdicts,
                     sampler=sampler, health=health, gates=gates)

    # ---- collectors

    def enabled_collectors(self) -> list[registry.CollectorEntry]:
        """The collectors to run: a flag or ``collectors.NAME.enabled`` decides; else a default
        collector runs when its vendor is present (every default one when that cannot be told)."""
        present = self.env.present_vendors()
        chosen = []
        for name, e in registry.collector_entries().items():
            explicit = self.options.collectors.get(name, self.settings.collector(name).enabled)
            if explicit is not None:
                on = bool(explicit)
            elif present is None:
                on = e.default
            else:
                on = e.default and (not e.vendor or e.vendor in present)
            if on:
                chosen.append(e)
        if not chosen and present is not None:
            # a CPU node: a collector of a vendor with no device on the bus is not down, it has
            # nothing to read, so none runs (and no AcceleratorCollectorDown fires here)
            log.info("no accelerator of a known vendor on the PCI bus: no collector runs",
                     extra={"sysfs_root": self.config.sysfs_root})
        return chosen

    def identity_store(self, removals: RemovalLog) -> IdentityStore:
        """How collectors keep identities: writable or not, this boot and machine, and the
        accelerators on the bus now (to tell a removed device from a lost one)."""
        from hetero_exporter import pci
        from hetero_exporter.sdk import pciaddr
        scanned = self.env.bus_now()
        bus = None
        if scanned is not None:
            hosts = pci.host_devices(scanned, registry.pci_vendors())
            bus = frozenset(filter(None, (pciaddr.normalize(d.address) for devs in hosts.values() for d in devs)))
        return IdentityStore(writable=self.writable, boot_id=self.env.state_boot_id,
                             machine_id=self.env.machine_id(), bus=bus, removals=removals)

    def collector(self, entry: registry.CollectorEntry, paths: HostPaths, identities: IdentityStore,
                  memories: IdentityMemories) -> CollectorSpec:
        """Collector ``entry`` to run: built (on its worker, at its first cycle) with its own
        keys of the config, its host paths (its section's over the agent's) and the agent's clocks."""
        section = self.settings.collector(entry.name)
        opts = CollectorOptions(
            node_name=self.node, interval_seconds=self.config.interval,
            timeout_seconds=self.config.collector_timeout(entry.name), settings=section.own,
            host=section.host(paths), scenario=self.env.scenario, clock=self.env.clock, workdir=self.env.workdir,
            wake=self.wake.set, state_dir=self.state_dir, identity=identities, memories=memories)

        def factory() -> Collector:
            create: Callable[[CollectorOptions], Collector] = registry.collector_factory(entry)
            return create(opts)

        return CollectorSpec(entry.name, entry.vendor, factory, opts.timeout_seconds)

    # ---- Kubernetes

    def cluster(self, inputs: environment.AttributionInputs) -> "Optional[Cluster]":
        """The one API connection (``enabled`` False, with a reason, without access), where a
        part needs it: the pod cache, ``run``'s health loop unless it only observes, ``health``."""
        command, mode = self.options.command, self.settings.health.remedy.mode
        if not (inputs.watch_pods or command == "health" or (command == "run" and mode != "observe")):
            return None
        from hetero_exporter.k8s import client as k8s_client
        return k8s_client.connect(self.config.kubeconfig)

    def pod_cache(self, cluster: "Optional[Cluster]") -> "Optional[PodCache]":
        """The watch of this node's pods, None without cluster access."""
        assert cluster is not None
        if not cluster.enabled:
            log.info("pod cache off", extra={"reason": cluster.reason})
            return None
        from hetero_exporter.health.plan.stack import plugin_selectors
        from hetero_exporter.k8s.pods import PodCache
        cache = PodCache(cluster.api_client, self.node, request_timeout=cluster.timeout_seconds,
                         plugin_selectors=plugin_selectors())
        log.info("pod cache on", extra={"source": cluster.source, "node": self.node})
        return cache

    # ---- the sources (docs/metrics-guide.md: Attribution; docs/health.md: Kernel log)

    def podresources(self, inputs: environment.AttributionInputs) -> Optional[PodResources]:
        """The kubelet PodResources poller on the inputs' socket, None when off or unavailable."""
        a = self.settings.attribution
        simulated = inputs.simulated
        if a.podresources is False or (a.podresources is None and simulated is None
                                        and not os.path.exists(inputs.socket)):
            log.info("kubelet PodResources off", extra={
                "socket": inputs.socket, "reason": "disabled" if a.podresources is False else "socket not mounted"})
            return None
        try:
            from hetero_exporter.sources.podresources.client import PodResourcesPoller
        except (ImportError, RuntimeError, OSError) as e:
            log.warning("kubelet PodResources off: %s (pip install 'hetero-exporter[attribution]'; "
                        "the simulated kubelet also needs [simulate])", e)
            return None
        timeout = float(a.podresources_timeout)
        if simulated is not None:
            # the stand-in kubelet is a process of ours that has just started: on a loaded machine
            # its first answers take longer than a real kubelet's budget, and the simulation's
            # snapshot must still show them
            timeout = max(timeout, SIMULATED_KUBELET_TIMEOUT)
        poller = PodResourcesPoller(inputs.socket, interval=float(a.podresources_interval or self.config.interval),
                                    timeout=timeout, extra_vendors=dict(a.resources), clock=self.env.clock)
        return PodResources(poller, inputs.socket, timeout, simulated)

    def attribution(self, inputs: environment.AttributionInputs, pod_cache: "Optional[PodCache]",
                    podresources: Optional[PodResources]) -> "Attributor":
        """The source naming each device process's pod, over the environment's inputs."""
        from hetero_exporter.sources.attribution import Attributor
        pods = pod_cache if inputs.watch_pods else inputs.pods
        return Attributor(inputs.proc_root, pods=pods, allocations=podresources.poller if podresources else None,
                          clock=self.env.clock)

    def kernel_log(self) -> Optional[KernelLog]:
        """The follower and the source putting its events on the devices; None when off."""
        from hetero_exporter.sources import kernel_log as kl
        s, policy = self.settings.kernel_log, self.settings.health.policy
        if not s.enabled:
            log.info("kernel log off", extra={"reason": "disabled"})
            return None
        follower = kl.Follower(
            self.env.kernel_log_source(kl, s), state_dir=self.state_dir, boot_id=self.env.state_boot_id,
            clock=self.env.clock, wake=self.wake.set, max_records_per_second=float(s.max_records_per_second),
            max_pending=int(s.max_pending), retry_seconds=float(s.retry_seconds), writable=self.writable,
            urgent_codes=policy.overrides,  # an overridden code is never skipped in a storm
            defer_restore=True)  # Agent.restore reads the cursor
        return KernelLog(follower, kl.KernelLogFaults(follower, reset_codes=policy.reset_codes | kl.RESET_CODES,
                                                      dedup_seconds=float(s.dedup_seconds)))

    def sources(self, attribution: "Attributor", kernel_log: Optional[KernelLog]) -> tuple[Enricher, ...]:
        """The sources that add facts, in order: PCI locate first (so attribution and the remedy
        see every device's address), attribution, PCI presence (missing devices), the kernel log,
        the energy meter (sources/energy.py)."""
        from hetero_exporter.sources.pci_presence import PciLocate, PciPresence
        out: list[Enricher] = []
        if self.settings.health.pci_presence:
            out.append(PciLocate(self.env.scan(), registry.pci_vendors()))
        out.append(attribution)
        if self.settings.health.pci_presence:
            out.append(PciPresence(self.env.scan(), registry.pci_vendors()))
        if kernel_log is not None:
            out.append(kernel_log.faults)
        # last: it splits each device's energy by the shares attribution found, and a reset the
        # kernel log saw begins a new energy run; its runs are kept where the command writes state
        out.append(EnergyMeter(self.state_dir if self.writable else None, self.env.state_boot_id,
                               max_gap_seconds=max(60.0, 4 * float(self.config.interval))))
        return tuple(out)

    def recovery_gates(self, paths: HostPaths, verdicts: "HealthVerdicts") -> "Optional[ExecGates]":
        """The judge's recovery gates (health.classes[].recovery_gate; docs/health.md): each
        device's gate from its class until the plan's table is seen, and for ``run`` the runner
        of the self-tests below the host root where a class has one (``health --dry-run`` runs none)."""
        from hetero_exporter.health.act.remedy import class_gates
        rcfg = self.settings.health.remedy
        gated = [(c.name, c.recovery_gate) for c in rcfg.classes if c.recovery_gate is not None]
        if not gated:
            return None
        verdicts.gates_of = class_gates(rcfg, device_resource)
        for name, gate in gated:
            if gate.evidence_annotation and not gate.evidence_annotation.startswith(f"{rcfg.domain}/recovery-"):
                # the shipped admission policy keeps the agent's token off <domain>/recovery-* only
                log.warning("recovery gate evidence outside the protected prefix: add it to the node-restriction "
                            "policy, or the agent's own token could certify its devices",
                            extra={"class": name, "annotation": gate.evidence_annotation})
        if self.options.command != "run" or not any(gate.exec for _, gate in gated):
            return None
        from hetero_exporter.sources.recovery_gate import ExecGates
        runner = ExecGates(paths, clock=self.env.clock)
        verdicts.gate_runner = runner
        return runner

    # ---- the health loop (docs/health.md)

    def health(self, cluster: "Optional[Cluster]", pod_cache: "Optional[PodCache]",
               verdicts: "HealthVerdicts") -> HealthParts:
        """The health loop over the verdicts. Without cluster access it only computes (metrics),
        and says why."""
        from hetero_exporter.health.act.metrics import HealthMetrics
        from hetero_exporter.health.act.remedy import HealthLoop, Remedy
        policy, rcfg = self.settings.health.policy, self.settings.health.remedy
        metrics = HealthMetrics()
        if rcfg.mode == "observe":
            cluster = None
        elif cluster is not None and not cluster.enabled:
            log.warning("health loop writes nothing", extra={"mode": rcfg.mode, "reason": cluster.reason})
        slices = None
        if cluster is not None and cluster.enabled and rcfg.device_taints:
            # this node's ResourceSlices, watched (the remedy lists them itself until synced)
            from hetero_exporter.k8s.slice_cache import SliceCache
            slices = SliceCache(cluster.api_client, self.node, request_timeout=cluster.timeout_seconds)
        # attribution's watch of this node's pods, when it runs
        remedy = Remedy(cluster, self.node, policy, rcfg, metrics, clock=self.env.clock, resource_of=device_resource,
                        slices=slices, failed_pods=pod_cache.failed_pods if pod_cache is not None else None,
                        plugin_pods=pod_cache.plugin_pods if pod_cache is not None else None)
        loop = HealthLoop(remedy, verdicts, boot_id=self.env.boot_id)
        log.info("health loop", extra={"mode": rcfg.mode, "writes": remedy.writes, "domain": rcfg.domain})
        udev = None
        if self.env.udev():
            # a PCI remove or add wakes the sampler at once (pyudev; off, and said why, without it)
            from hetero_exporter.sources.pci_presence import UdevWatch
            udev = UdevWatch(registry.pci_vendors(), self.wake.set)
        return HealthParts(metrics, remedy, loop, slices, udev)
