"""The one assembly: ``Agent.build(options)`` and the services it starts.

``build`` reads the config (typed sections: app/settings.py) and chooses the environment (the
host or a simulated node: app/environment.py); nothing starts until asked. The sampler, the API
connection, the pod cache, the kernel-log follower and the health loop are each made once, on
first use, and every background service is closed by ``close()`` (app/services.py). The
commands (app/commands.py) are built from these parts; cli.py only parses arguments.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from hetero_exporter import config as config_mod
from hetero_exporter import registry
from hetero_exporter.app import environment
from hetero_exporter.app.services import Services
from hetero_exporter.app.settings import Settings
from hetero_exporter.sampling import CollectorSpec, Sampler
from hetero_exporter.sdk.contract import CollectorOptions

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


def device_resource(device: Any) -> str:
    """The extended resource a device is allocated as on its node ('' when none): the health
    remedy's view of ``vendors.device_resource``, over a DeviceSample."""
    from hetero_exporter import vendors
    return vendors.device_resource(device.identity.vendor, device.identity.model)


class Agent:
    """One agent process: its settings, its environment and the services built from them."""

    def __init__(self, options: Options, settings: Settings, env: environment.Environment):
        self.options = options
        self.settings = settings
        self.config = settings.config
        self.env = env
        self.scenario = env.scenario
        self.node = (options.node_name or self.config.node_name or os.environ.get("NODE_NAME")
                     or env.node_name() or socket.gethostname())
        self.services = Services()
        self.wake = threading.Event()  # collectors and sources set it to get a cycle at once
        self.kernel_log: Any = None  # the kernel-log Follower, once the sampler is built (and it is on)
        self.verdicts: Any = None  # the health judge (health.detect.verdicts), once the sampler is built
        self.removals: Any = None  # devices the identity memories forgot as removed
        self._sampler: Optional[Sampler] = None
        self._cluster: Any = None
        self._pod_cache: Any = None
        self._pod_cache_made = False
        self._health_loop: Any = None

    @classmethod
    def build(cls, options: Options) -> "Agent":
        """Config file < flags, checked (ConfigError, exit 2); the environment chosen. Nothing runs yet."""
        cfg = config_mod.load(options.config_file).replace(
            interval=options.interval, log_format=options.log_format, kubeconfig=options.kubeconfig,
            listen=options.listen)
        settings = Settings.parse(cfg, health_mode=options.health_mode, kernel_log=options.kernel_log)
        # vendor tools, driver libraries and runtime version files of the host (docs/troubleshooting.md: Vendor
        # tools from the host); checked even when simulating, so a bad mount fails on any run
        host_root = config_mod.host_root(options.host_root, cfg)
        env = environment.choose(settings, simulate=options.simulate, simulate_if_absent=options.simulate_if_absent,
                                 at=options.at, host_root=host_root)
        return cls(options, settings, env)

    def close(self) -> None:
        """Stop every service (newest first), the collectors, and remove what a simulation wrote."""
        self.services.close()
        if self._sampler is not None:
            self._sampler.close()
        self.env.close()

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def finops(self) -> Any:
        """The configured FinOps settings, with the reference profile's cost weight, so that a
        device without a price costs reference price x cost_weight / reference cost_weight."""
        from hetero_exporter import profiles
        fin = self.config.finops
        prof = profiles.lookup(fin.reference)
        return fin.with_reference_cost_weight(None if prof is None else prof.cost_weight)

    # ---- collectors

    @property
    def clock(self) -> Any:
        """The environment's clock (time.time, or the simulation's): every part reads this one."""
        return self.env.clock

    @clock.setter
    def clock(self, clock: Any) -> None:  # tests drive a simulation by hand (before anything is built)
        self.env.clock = clock

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

    def enabled_collectors(self) -> list[registry.CollectorEntry]:
        """The collectors to run: a flag or ``collectors.NAME.enabled`` decides; else a default
        collector runs when its vendor is present (every default one when that cannot be told)."""
        present = self.env.present_vendors()
        chosen = []
        for name, e in registry.collector_entries().items():
            explicit = self.options.collectors.get(name, self.config.collector_settings(name).get("enabled"))
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

    def identity_store(self) -> Any:
        """How collectors keep identities: writable or not, this boot and machine, and the
        accelerators on the bus now (to tell a removed device from a lost one)."""
        from hetero_exporter import pci
        from hetero_exporter.sdk import pciaddr
        from hetero_exporter.sdk.identity import IdentityStore, RemovalLog
        scanned = self.env.bus_now()
        bus = None
        if scanned is not None:
            hosts = pci.host_devices(scanned, registry.pci_vendors())
            bus = frozenset(filter(None, (pciaddr.normalize(d.address) for devs in hosts.values() for d in devs)))
        self.removals = RemovalLog()
        return IdentityStore(writable=self.state_writable, boot_id=self.env.state_boot_id,
                             machine_id=self.env.machine_id(), bus=bus, removals=self.removals)

    def host_settings(self) -> dict[str, str]:
        """host_root / host_exec for every collector (its own section may override them)."""
        host_root, host_exec = self.env.collector_host()
        return {**({"host_root": host_root} if host_root else {}), **({"host_exec": host_exec} if host_exec else {})}

    def collector_options(self, entry: registry.CollectorEntry, identities: Any) -> CollectorOptions:
        """What collector ``entry`` is built with: its config section, the host root and the agent's clocks."""
        return CollectorOptions(
            node_name=self.node, interval_seconds=self.config.interval,
            timeout_seconds=self.config.collector_timeout(entry.name),
            settings={"sysfs_root": self.config.sysfs_root, **self.host_settings(),
                      **self.config.collector_settings(entry.name)},
            scenario=self.scenario, clock=self.clock, workdir=self.workdir, wake=self.wake.set,
            state_dir=self.state_dir, identity=identities)

    def sampler(self) -> Sampler:
        """The sampler (made once): the enabled collectors, then the sources that add facts
        (PCI locate, attribution, PCI presence, the kernel log), then the health judge."""
        if self._sampler is not None:
            return self._sampler
        identities = self.identity_store()
        specs = []
        for e in self.enabled_collectors():
            opts = self.collector_options(e, identities)

            def factory(e: registry.CollectorEntry = e, opts: CollectorOptions = opts) -> Any:
                return registry.collector_factory(e)(opts)

            specs.append(CollectorSpec(e.name, e.vendor, factory, opts.timeout_seconds))
        health = self.settings.health
        # With PCI presence on, that source scans the bus and sets the expected counts; the
        # sampler scanning it too would read sysfs twice per cycle for the same answer.
        self._sampler = Sampler(specs, self.node, clock=self.clock,
                                expected=dict if health.pci_presence else self.env.expected,
                                boot_id=self.env.boot_id, wake=self.wake, removals=self.removals,
                                enrichers=self.sources(), judge=self.judge().judge)
        return self._sampler

    def judge(self) -> Any:
        """The health judge (made once): the policy's verdicts, published with each snapshot."""
        if self.verdicts is None:
            from hetero_exporter.health.detect.verdicts import HealthVerdicts
            self.verdicts = HealthVerdicts(self.settings.health.policy)
        return self.verdicts

    def sources(self) -> list[Any]:
        """The sources that add facts, in order: PCI locate first (so attribution and the remedy
        see every device's address), attribution, PCI presence (missing devices), the kernel log."""
        from hetero_exporter.sources.pci_presence import PciLocate, PciPresence
        health = self.settings.health
        out: list[Any] = []
        if health.pci_presence:
            out.append(PciLocate(self.env.scan(), registry.pci_vendors()))
        out.append(self.attribution())
        if health.pci_presence:
            out.append(PciPresence(self.env.scan(), registry.pci_vendors()))
        kernel_log = self.kernel_log_faults(health.policy)
        if kernel_log is not None:
            out.append(kernel_log)
        return out

    # ---- the kernel log as a health source (docs/health.md: Kernel log)

    def kernel_log_faults(self, policy: Any) -> Any:
        """The follower (its own thread; the first read done before the first cycle) and the
        source putting its events on the devices; None when off."""
        from hetero_exporter.sources import kernel_log as kl
        s = self.settings.kernel_log
        if not s.enabled:
            log.info("kernel log off", extra={"reason": "disabled"})
            return None
        follower = kl.Follower(
            self.env.kernel_log_source(kl, s), state_dir=self.state_dir, boot_id=self.env.state_boot_id,
            clock=self.clock, wake=self.wake.set, max_records_per_second=float(s.max_records_per_second),
            max_pending=int(s.max_pending), retry_seconds=float(s.retry_seconds), writable=self.state_writable,
            urgent_codes=policy.overrides)  # an overridden code is never skipped in a storm
        self.kernel_log = self.services.start(
            "kernel-log", lambda: follower.start(wait_first=KERNEL_LOG_FIRST_READ), follower.close)
        return kl.KernelLogFaults(follower, reset_codes=policy.reset_codes | kl.RESET_CODES,
                                  dedup_seconds=float(s.dedup_seconds))

    # ---- Kubernetes

    def cluster(self) -> Any:
        """The API connection (made once; ``enabled`` False, with a reason, without access)."""
        if self._cluster is None:
            from hetero_exporter.k8s import client as k8s_client
            self._cluster = k8s_client.connect(self.config.kubeconfig)
        return self._cluster

    def pod_cache(self) -> Any:
        """The watch of this node's pods (made once), None without cluster access."""
        if self._pod_cache_made:
            return self._pod_cache
        self._pod_cache_made = True
        cluster = self.cluster()
        if not cluster.enabled:
            log.info("pod cache off", extra={"reason": cluster.reason})
            return None
        from hetero_exporter.k8s.pods import PodCache
        cache = PodCache(cluster.api_client, self.node, request_timeout=cluster.timeout_seconds)
        wait = float(self.settings.attribution.pod_cache_wait)
        self._pod_cache = self.services.start("pod-cache", lambda: cache.start(wait_first=wait), cache.close)
        log.info("pod cache on", extra={"source": cluster.source, "node": self.node})
        return self._pod_cache

    # ---- process -> pod attribution (docs/metrics-guide.md: Attribution)

    def attribution(self) -> Any:
        """The source naming each device process's pod, over the environment's inputs."""
        from hetero_exporter.sources.attribution import Attributor
        proc_root, pods, allocations = self.env.attribution_inputs(self)
        return Attributor(proc_root, pods=pods, allocations=allocations, clock=self.clock)

    def podresources(self, socket_path: str, simulated: Optional[list] = None) -> Any:
        """The kubelet PodResources poller on ``socket_path`` (``simulated``: the records a
        simulated kubelet serves there), None when off or unavailable."""
        a = self.settings.attribution
        if a.podresources is False or (a.podresources is None and simulated is None
                                        and not os.path.exists(socket_path)):
            log.info("kubelet PodResources off", extra={
                "socket": socket_path, "reason": "disabled" if a.podresources is False else "socket not mounted"})
            return None
        try:
            from hetero_exporter.sources.podresources.client import PodResourcesPoller
            if simulated is not None:
                from hetero_exporter.simulate import kubelet
                self.services.add("simulated-kubelet", kubelet.spawn(socket_path, simulated, str(self.workdir)))
        except (ImportError, RuntimeError, OSError) as e:  # the simulated kubelet's grpcio/protobuf missing or too old
            log.warning("kubelet PodResources off: %s (pip install 'hetero-exporter[attribution]'; "
                        "the simulated kubelet also needs [simulate])", e)
            return None
        timeout = float(a.podresources_timeout)
        if simulated is not None:
            # the stand-in kubelet is a process of ours that has just started: on a loaded machine
            # its first answers take longer than a real kubelet's budget, and the simulation's
            # snapshot must still show them
            timeout = max(timeout, SIMULATED_KUBELET_TIMEOUT)
        poller = PodResourcesPoller(socket_path, interval=float(a.podresources_interval or self.config.interval),
                                    timeout=timeout, extra_vendors=dict(a.resources), clock=self.clock)
        return self.services.start("podresources", lambda: poller.start(wait_first=timeout), poller.close)

    # ---- the health loop (docs/health.md)

    def health_loop(self, metrics_registry: Any) -> Any:
        """The health loop over the sampler's verdicts (made once, not started); its metrics go
        on the registry. Without cluster access it only computes (metrics), and says why."""
        if self._health_loop is not None:
            return self._health_loop
        from hetero_exporter.health.act.metrics import HealthMetrics
        from hetero_exporter.health.act.remedy import HealthLoop, Remedy
        self.sampler()  # the sources the remedy reads (the pod cache)
        policy, rcfg = self.settings.health.policy, self.settings.health.remedy
        metrics = HealthMetrics()
        metrics_registry.register(metrics)
        cluster = None
        if rcfg.mode != "observe":
            cluster = self.cluster()
            if not cluster.enabled:
                log.warning("health loop writes nothing", extra={"mode": rcfg.mode, "reason": cluster.reason})
        slices = None
        if cluster is not None and cluster.enabled and rcfg.device_taints:
            # this node's ResourceSlices, watched (the remedy lists them itself until synced)
            from hetero_exporter.k8s.slice_cache import SliceCache
            cache = SliceCache(cluster.api_client, self.node, request_timeout=cluster.timeout_seconds)
            slices = self.services.start("resource-slices", cache.start, cache.close)
        pods = self._pod_cache  # attribution's watch of this node's pods, when it runs
        remedy = Remedy(cluster, self.node, policy, rcfg, metrics, clock=self.clock, resource_of=device_resource,
                        slices=slices, failed_pods=pods.failed_pods if pods is not None else None)
        self._health_loop = HealthLoop(remedy, self.judge(), boot_id=self.env.boot_id)
        log.info("health loop", extra={"mode": rcfg.mode, "writes": remedy.writes, "domain": rcfg.domain})
        if self.env.udev():
            self._udev_watch()
        return self._health_loop

    def _udev_watch(self) -> None:
        """A PCI remove or add wakes the sampler at once (pyudev; off, and said why, without it)."""
        from hetero_exporter.sources.pci_presence import UdevWatch
        watch = UdevWatch(registry.pci_vendors(), self.wake.set)
        if watch.start():
            self.services.add("udev", watch.stop)
        else:
            log.info("udev watch off", extra={"reason": watch.reason})
