"""Where the agent runs: the host, or a simulated node. The only place that tells them apart.

Every difference between a real node and a simulation is a method here, so the assembly
(``app/agent.py``) has no ``scenario is None`` fork: the PCI bus it reads, the boot and
machine it remembers identities for, where its state lives and whether it may write it, the
host paths its collectors see, its kernel-log source, the inputs of attribution, and whether a
udev watch runs. Each answers with data: nothing here calls back into the agent.

A simulation never touches the real node's state: it keeps everything in its own work
directory (removed at close, else at exit: simulate/workdir.py).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from hetero_exporter import pci
from hetero_exporter import registry
from hetero_exporter.app.settings import AttributionSettings, KernelLogSettings, Settings
from hetero_exporter.sdk.contract import HostPaths

if TYPE_CHECKING:
    from hetero_exporter.model.pods import ContainerDevices
    from hetero_exporter.model.scenario import Scenario
    from hetero_exporter.sources.attribution import PodDirectory

log = logging.getLogger("hetero_exporter")

Scan = Callable[[], list[pci.PciDevice]]


@dataclass(frozen=True)
class AttributionInputs:
    """What attribution reads here: ``proc_root`` (hostPID), whether this node's pods are
    watched (``watch_pods``: the agent's pod cache, when Kubernetes is configured) or ``pods``
    stand in for them, the kubelet's PodResources ``socket``, and ``simulated``: the
    allocations a simulated kubelet serves on it (None on a node)."""

    proc_root: str
    watch_pods: bool
    pods: "Optional[PodDirectory]" = None
    socket: str = ""
    simulated: "Optional[Sequence[ContainerDevices]]" = None


def boot_id() -> Optional[str]:
    """This boot's id (/proc/sys/kernel/random/boot_id), None where unreadable."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def machine_id(host_root: Optional[str]) -> Optional[str]:
    """The host's /etc/machine-id (below ``host_root``; a container's own is the image's)."""
    path = os.path.join(host_root or "/", "etc/machine-id")
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read(64).strip()
    except OSError:
        return None
    return text if len(text) == 32 and all(c in "0123456789abcdef" for c in text) else None


class Environment:
    """What the assembly asks of the place it runs in (the host's answers by default)."""

    scenario: "Optional[Scenario]" = None  # when simulating
    workdir: Optional[str] = None  # where a simulation writes its fake tools and roots
    name: Optional[str] = None  # the scenario's name, for the serving log line

    def __init__(self, settings: Settings, host_root: Optional[str],
                 at_start: Optional[list[pci.PciDevice]] = None):
        self.settings = settings
        self.host_root = host_root
        cfg = settings.config
        self.paths = HostPaths(root=host_root, exec_mode=cfg.host_exec or HostPaths.exec_mode, sysfs=cfg.sysfs_root,
                               proc=cfg.proc_root)
        self.clock: Callable[[], float] = time.time
        self.boot_id = boot_id()  # the snapshot's and the health loop's (sticky faults)
        sysfs = settings.config.sysfs_root
        # the bus at start (``at_start``: already scanned by choose()): which collectors run,
        # and what a removed device is told from
        self._readable = pci.readable(sysfs)
        self._at_start = pci.scan(sysfs) if at_start is None else at_start

    def node_name(self) -> Optional[str]:
        """The node's name when neither a flag, the config nor $NODE_NAME gives one (None: the host name)."""
        return None

    # ---- the PCI bus

    def scan(self) -> Scan:
        sysfs = self.settings.config.sysfs_root
        return lambda: pci.scan(sysfs)

    def present_vendors(self) -> Optional[set[str]]:
        """Vendors with a device here; None when the bus cannot be read (try every default)."""
        if not self._readable:
            return None
        return set(pci.expected_by_vendor(self._at_start, registry.pci_vendors()))

    def expected(self) -> dict[str, int]:
        """Accelerators per vendor on the bus (the sampler's expected counts)."""
        return pci.expected_by_vendor(self.scan()(), registry.pci_vendors())

    def bus_now(self) -> Optional[list[pci.PciDevice]]:
        """The bus at start, None when unreadable (a removed device cannot be told from a lost one)."""
        return self._at_start if self._readable else None

    # ---- state that survives a restart

    @property
    def state_boot_id(self) -> Optional[str]:
        """The boot the kernel-log cursor and pinned identities belong to."""
        return self.boot_id

    def machine_id(self) -> Optional[str]:
        return machine_id(self.host_root)

    def state_dir(self) -> str:
        """``kernel_log.state_dir``: the DaemonSets' hostPath by default."""
        return self.settings.kernel_log.state_dir

    def writes_state(self, command: str) -> bool:
        """Only the agent (``run``) writes the node's state: a diagnostic run leaves nothing
        for the next run to report."""
        return command == "run"

    # ---- what collectors, the kernel log and attribution read

    def collector_paths(self) -> HostPaths:
        """The host paths every collector sees (its own section may override them)."""
        return self.paths

    def kernel_log_source(self, kl: Any, settings: KernelLogSettings) -> Any:
        """The source the follower reads (``kl`` is sources.kernel_log)."""
        if settings.path == kl.SYSLOG:
            return kl.SyslogSource()
        if settings.path and settings.path != kl.KMSG:
            return kl.FileSource(settings.path, initial_bytes=settings.initial_bytes)
        return kl.KmsgSource(kl.KMSG)

    def attribution_inputs(self) -> AttributionInputs:
        """``proc_root`` (hostPID), this node's pods watched when Kubernetes is configured, the
        kubelet's PodResources socket (read when mounted)."""
        a: AttributionSettings = self.settings.attribution
        return AttributionInputs(a.proc_root or self.paths.proc, watch_pods=a.pod_cache, socket=a.podresources_socket)

    def udev(self) -> bool:
        """Whether a udev watch may wake the sampler (the host's uevents mean nothing to a simulation)."""
        return self.settings.health.udev

    def plan_time(self) -> float:
        """The time a one-shot health plan is made at."""
        return time.time()

    def close(self) -> None:
        pass


class SimulatedEnvironment(Environment):
    """A node described by a scenario: its own bus, clock, kernel ring, /proc, kubelet and state."""

    scenario: "Scenario"

    def __init__(self, settings: Settings, scenario: "Scenario", at: float):
        from hetero_exporter.simulate import SimulationClock, workdir
        self.settings, self.host_root = settings, None  # the fakes write their own host roots
        cfg = settings.config
        self.paths = HostPaths(exec_mode=cfg.host_exec or HostPaths.exec_mode, sysfs=cfg.sysfs_root, proc=cfg.proc_root)
        self.boot_id = boot_id()
        self.scenario = scenario
        self.name = scenario.name
        self.clock = SimulationClock(start_t=at)
        self.workdir = workdir.create()  # removed by close(), else at exit (workdir.py)

    def node_name(self) -> Optional[str]:
        return self.scenario.node

    def scan(self) -> Scan:
        from hetero_exporter.sources.pci_presence import simulated_scan
        return simulated_scan(self.scenario, self.clock, registry.pci_vendors())

    def present_vendors(self) -> Optional[set[str]]:
        return {d.vendor for d in self.scenario.devices}

    def expected(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for d in self.scenario.devices:
            counts[d.vendor] = counts.get(d.vendor, 0) + 1
        for vendor, n in (self.scenario.settings.get("pci_extra") or {}).items():
            counts[vendor] = counts.get(vendor, 0) + int(n)
        return counts

    def bus_now(self) -> Optional[list[pci.PciDevice]]:
        return self.scan()()

    @property
    def state_boot_id(self) -> Optional[str]:
        return f"sim-{self.scenario.name}"

    def machine_id(self) -> Optional[str]:
        return None

    def state_dir(self) -> str:
        """The work directory's ``state`` folder, whatever the config names."""
        return os.path.join(str(self.workdir), "state")

    def writes_state(self, command: str) -> bool:
        return True  # only in its own work directory


    def kernel_log_source(self, kl: Any, settings: KernelLogSettings) -> Any:
        """A text log named by the config is read as on a node; otherwise the scenario's ring
        buffer (its ``kernel_log`` lines up to the scenario clock)."""
        if settings.path and settings.path not in (kl.KMSG, kl.SYSLOG):
            return kl.FileSource(settings.path, initial_bytes=settings.initial_bytes)
        from hetero_exporter.simulate.kernel_log import ScenarioKmsg
        ring = ScenarioKmsg(self.scenario, self.clock)
        return kl.KmsgSource("simulated:/dev/kmsg", opener=ring.opener, wall_time=ring.wall_time)

    def attribution_inputs(self) -> AttributionInputs:
        """A fake /proc written from the scenario; with --kubeconfig the pod names come from
        that API server (the scenario's pods seeded there), as on a node, otherwise the
        scenario's pods stand in for it; a real PodResources gRPC server (the simulated
        kubelet, started by the agent) on a socket in the work directory."""
        from hetero_exporter.simulate import kubelet, procfs
        from hetero_exporter.sources.attribution import StaticPods
        workdir = str(self.workdir)
        proc_root = str(procfs.write(self.scenario, os.path.join(workdir, "proc")))
        watch = bool(self.settings.config.kubeconfig and self.settings.attribution.pod_cache)
        pods = None if watch else StaticPods(kubelet.scenario_pods(self.scenario), clock=self.clock)
        return AttributionInputs(proc_root, watch_pods=watch, pods=pods,
                                 socket=os.path.join(workdir, "pod-resources", "kubelet.sock"),
                                 simulated=kubelet.scenario_allocations(self.scenario))

    def udev(self) -> bool:
        return False

    def plan_time(self) -> float:
        return self.clock()

    def close(self) -> None:
        if self.workdir:
            from hetero_exporter.simulate import workdir
            workdir.remove(self.workdir)
            self.workdir = None


def choose(settings: Settings, *, simulate: Optional[str], simulate_if_absent: bool, at: float,
           host_root: Optional[str]) -> Environment:
    """The simulated node ``simulate`` names, the default one when ``simulate_if_absent`` and
    the bus shows no accelerator, else the host."""
    bus = None
    if simulate is None and simulate_if_absent:
        bus = pci.scan(settings.config.sysfs_root)  # the host environment reuses this scan
        if not bus:  # a CPU node's agent then simulates
            simulate = "default"
            log.info("no accelerator on the PCI bus: simulating the default scenario")
    if simulate is None:
        return Environment(settings, host_root, at_start=bus)
    from hetero_exporter.simulate import load
    return SimulatedEnvironment(settings, load(simulate), at)
