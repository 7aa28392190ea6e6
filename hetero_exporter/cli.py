"""Command line: the only place that wires collectors, sampler, exposition and health.

    hetero-exporter run [--listen HOST:PORT] [--interval S] [--config FILE] [--simulate [SCENARIO]]
                        [--collector.NAME | --no-collector.NAME] [--node-name NAME] [--kubeconfig FILE]
                        [--health-mode observe|dry-run|enforce] [--log-format json|text]
                        [--kernel-log PATH|off]
    hetero-exporter inspect [--simulate [SCENARIO]] [--at T] [--json]
    hetero-exporter parse TOOL FILE [--json]        (TOOL kernel-log: a dmesg / journal / kmsg capture)
    hetero-exporter health --dry-run [--simulate [SCENARIO]] [--node-name NAME] [--kubeconfig FILE]
    hetero-exporter scheduler-extender [--listen HOST:PORT] [--kubeconfig FILE] [--policy binpack|spread]
    hetero-exporter score --pod POD.yaml --nodes NODES.json [--policy binpack|spread] [--json]
    hetero-exporter version
    (run, inspect, health) [--host-root DIR]     vendor tools and driver libraries below the host's root
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
from typing import Any, Callable, Optional, Sequence

from hetero_exporter import __version__
from hetero_exporter import config as config_mod
from hetero_exporter import logs
from hetero_exporter import pci
from hetero_exporter import registry
from hetero_exporter.sdk.contract import CollectorOptions, ParseError
from hetero_exporter.sdk.capture import DEFAULT_MAX_BYTES as CAPTURE_MAX_BYTES, CaptureError, open_capture, read_capture
from hetero_exporter.model import NodeSnapshot, SchemaError, snapshot_to_json, to_dict
from hetero_exporter.sampling import CollectorSpec, Sampler
from hetero_exporter.validate import ValidationError
from hetero_exporter.model.keys import DEFAULT_DOMAIN, Keys

log = logging.getLogger("hetero_exporter")

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    pass


KERNEL_LOG_TOOL = "kernel-log"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # each stops run / the extender cleanly
KERNEL_LOG_PARSE_LIMIT = 1 << 30  # bytes `parse kernel-log` reads (streamed: memory stays bounded)


# --------------------------------------------------------------------------- arguments


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="YAML config file (see README: Configuration)")
    p.add_argument("--simulate", nargs="?", const="default", metavar="SCENARIO",
                   help="run on a simulated node: a built-in scenario name or a scenario file "
                        "(default: the built-in 'default')")
    p.add_argument("--simulate-if-absent", action="store_true",
                   help="simulate the default scenario when the PCI bus shows no accelerator")
    p.add_argument("--at", type=float, default=None, metavar="T",
                   help="with --simulate: start the scenario clock at T seconds")
    p.add_argument("--kernel-log", metavar="PATH",
                   help="kernel log to follow as a health source: /dev/kmsg (default), 'syslog' (the same "
                        "ring buffer through syslog(2): CAP_SYSLOG, no device access), a text log "
                        "(/var/log/kern.log, followed like tail -F), or 'off'")
    p.add_argument("--node-name", help="node name (default: $NODE_NAME, else the host name)")
    p.add_argument("--host-root", metavar="DIR",
                   help="where the host's / is mounted (the DaemonSet: /host/root): vendor tools and driver "
                        "libraries are looked for below it (default: config host_root, else $HOST_ROOT)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else in-cluster)")
    p.add_argument("--interval", type=float, help="seconds between collection cycles (default 10)")
    p.add_argument("--log-format", choices=("json", "text"), help="log line format (default json)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))


def _vendor_list() -> str:
    """The known vendors' display names, for --help (specs load cheaply: no binding)."""
    from hetero_exporter import vendors
    names = [s.display_name or s.name for s in vendors.specs().values()]
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names) or "accelerators"


def _max_bytes(text: str) -> int:
    """``parse --max-bytes N``: a whole number of bytes, at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of bytes, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {n}")
    return n


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="hetero-exporter",
        description="Accelerator telemetry and health agent for "
                    f"{_vendor_list()}.")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser("run", help="collect on an interval and serve /metrics",
                         epilog="Collectors: --collector.NAME enables, --no-collector.NAME disables "
                                f"({', '.join(sorted(registry.collector_entries()))}).")
    _add_common(run)
    run.add_argument("--listen", help="HOST:PORT to serve on (default 0.0.0.0:9400)")
    run.add_argument("--web.config.file", dest="web_config_file", metavar="FILE",
                     help="TLS and basic auth for the endpoints (exporter-toolkit format, as node_exporter's)")
    run.add_argument("--health-mode", choices=("observe", "dry-run", "enforce"),
                     help="what the health loop may do to the node (default observe)")

    insp = sub.add_parser("inspect", help="collect once and print one table for all accelerators")
    _add_common(insp)
    insp.add_argument("--json", action="store_true", help="print the schema-1 JSON snapshot")

    hl = sub.add_parser("health", help="print what the health loop would do on this node now, and why")
    _add_common(hl)
    hl.add_argument("--dry-run", action="store_true", required=True,
                    help="plan only (the agent acts from `run --health-mode enforce`)")

    parse = sub.add_parser("parse", help="turn a captured vendor output into the model")
    parse.add_argument("tool", metavar="TOOL", help="which tool printed FILE: " + ", ".join(
        sorted(set(registry.parsers()) | {KERNEL_LOG_TOOL})))
    parse.add_argument("file", metavar="FILE", help="the captured output ('-' for stdin)")
    parse.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parse.add_argument("--max-bytes", type=_max_bytes, default=CAPTURE_MAX_BYTES, metavar="N",
                       help="refuse a capture larger than N bytes (default 64 MiB; kernel-log streams "
                            "with its own limit)")

    ext = sub.add_parser("scheduler-extender", help="serve the kube-scheduler extender (/filter, /prioritize)")
    _add_scoring(ext)
    ext.add_argument("--listen", default="0.0.0.0:9401", help="HOST:PORT to serve on (default 0.0.0.0:9401)")
    ext.add_argument("--metrics-listen", metavar="HOST:PORT",
                     help="also serve /metrics (and the probes) alone on HOST:PORT, for a NetworkPolicy that "
                          "admits Prometheus there and only kube-scheduler to --listen")
    ext.add_argument("--web.config.file", dest="web_config_file", metavar="FILE",
                     help="TLS (kube-scheduler's enableHTTPS + tlsConfig) and basic auth (exporter-toolkit format)")
    ext.add_argument("--max-body-bytes", type=_max_bytes, default=64 * 2**20, metavar="N",
                     help="refuse (413) a request body over N bytes (default 64 MiB: ~2,000 whole Nodes; "
                          "node-cache mode sends names only)")
    ext.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else in-cluster; without "
                                          "any, only nodes-in-request mode is served)")
    ext.add_argument("--log-format", choices=("json", "text"), help="log line format (default json)")
    ext.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))

    score = sub.add_parser("score", help="the extender's decision for a pod, offline, with explanations")
    _add_scoring(score)
    score.add_argument("--pod", required=True, metavar="POD.yaml", help="the pod (or a workload with a pod template)")
    score.add_argument("--nodes", required=True, metavar="NODES.json",
                       help="node documents: a list, a map node -> document, or a NodeList")
    score.add_argument("--now", type=float, metavar="UNIX_SECONDS",
                       help="the time staleness is judged at (default: now)")
    score.add_argument("--json", action="store_true", help="print the /explain JSON instead of a table")

    version = sub.add_parser("version", help="print the version")
    # what each command runs: func(args, extra); the collector flags (--collector.NAME) are
    # the only unknown arguments a command may take, and only those that collect take them
    run.set_defaults(func=cmd_run, collects=True)
    insp.set_defaults(func=cmd_inspect, collects=True)
    hl.set_defaults(func=cmd_health, collects=True)
    parse.set_defaults(func=_without_extra(cmd_parse), collects=False)
    ext.set_defaults(func=_without_extra(cmd_scheduler_extender), collects=False)
    score.set_defaults(func=_without_extra(cmd_score), collects=False)
    version.set_defaults(func=_without_extra(cmd_version), collects=False)
    return ap


def _without_extra(cmd: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace, Sequence[str]], int]:
    """A command that takes no collector flags: an unknown argument is a usage error."""
    def call(args: argparse.Namespace, extra: Sequence[str]) -> int:
        if extra:
            raise UsageError(f"unrecognized arguments: {' '.join(extra)}")
        return cmd(args)
    return call


def _collector_flags(extra: Sequence[str]) -> dict[str, bool]:
    """``--collector.NAME`` / ``--no-collector.NAME`` -> {NAME: enabled}."""
    flags: dict[str, bool] = {}
    known = registry.collector_entries()
    for arg in extra:
        for prefix, value in (("--collector.", True), ("--no-collector.", False)):
            if arg.startswith(prefix):
                name = arg[len(prefix):]
                if name not in known:
                    raise UsageError(f"unknown collector {name!r}; known: {', '.join(sorted(known))}")
                flags[name] = value
                break
        else:
            raise UsageError(f"unrecognized argument {arg!r}")
    return flags


SCENARIO_T_MAX = 10 * 365 * 86400.0  # --at: scenario seconds
FRESH_SECONDS_MAX = 30 * 86400.0  # --fresh-seconds


def check_flags(args: argparse.Namespace) -> None:
    """The flags argparse leaves unchecked (a float it parsed may be 0, NaN or 1e12), checked as
    the config file's keys are: ValidationError naming the flag (exit 2)."""
    from hetero_exporter import validate as v
    checks = {
        "interval": config_mod.interval,
        "at": lambda p, x: v.number(p, x, minimum=0, maximum=SCENARIO_T_MAX, unit="seconds"),
        "fresh_seconds": lambda p, x: v.number(p, x, minimum=0, maximum=FRESH_SECONDS_MAX, unit="seconds"),
        "now": lambda p, x: v.number(p, x, minimum=0, maximum=1e11, unit="unix seconds"),
        "listen": v.host_port, "domain": v.dns_subdomain,
        "node_name": lambda p, x: v.string(p, x, non_empty=True, max_length=253),
    }
    for name, check in checks.items():
        value = getattr(args, name, None)
        if value is not None:
            check("--" + name.replace("_", "-"), value)


# --------------------------------------------------------------------------- wiring


def node_name(args: argparse.Namespace, cfg: config_mod.Config, scenario: Any = None) -> str:
    return (getattr(args, "node_name", None) or cfg.node_name or os.environ.get("NODE_NAME")
            or (scenario.node if scenario is not None else None) or socket.gethostname())


def device_resource(device: Any) -> str:
    """The extended resource a device is allocated as on its node ('' when none): the health
    remedy's view of ``vendors.device_resource``, over a DeviceSample."""
    from hetero_exporter import vendors
    return vendors.device_resource(device.identity.vendor, device.identity.model)


def _boot_id() -> Optional[str]:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def _machine_id(host_root: Optional[str]) -> Optional[str]:
    """The host's /etc/machine-id (below ``host_root``; a container's own is the image's)."""
    path = os.path.join(host_root or "/", "etc/machine-id")
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read(64).strip()
    except OSError:
        return None
    return text if len(text) == 32 and all(c in "0123456789abcdef" for c in text) else None


class Wiring:
    """Everything one agent process needs, built from config + arguments."""

    def __init__(self, args: argparse.Namespace, extra: Sequence[str]):
        self.args = args
        self.cfg = config_mod.load(args.config).replace(
            interval=args.interval, log_format=args.log_format,
            kubeconfig=getattr(args, "kubeconfig", None), listen=getattr(args, "listen", None))
        self.flags = _collector_flags(extra)
        self.pci_devices = pci.scan(self.cfg.sysfs_root)
        self.pci_readable = pci.readable(self.cfg.sysfs_root)
        simulate = args.simulate
        if simulate is None and args.simulate_if_absent and not self.pci_devices:
            simulate = "default"
            log.info("no accelerator on the PCI bus: simulating the default scenario")
        self.scenario = None
        self.clock: Any = None
        if simulate is not None:
            from hetero_exporter.simulate import SimulationClock, load
            self.scenario = load(simulate)
            self.clock = SimulationClock(start_t=args.at or 0.0)
        else:
            import time
            self.clock = time.time
        self.node = node_name(args, self.cfg, self.scenario)
        # vendor tools, driver libraries and runtime version files of the host (README: Vendor
        # tools from the host); a simulated node has its own fake roots
        self.host_root = config_mod.host_root(getattr(args, "host_root", None), self.cfg)
        if self.scenario is not None:
            from hetero_exporter.simulate import workdir
            self.workdir: Optional[str] = workdir.create()  # removed by close(), else at exit (workdir.py)
        else:
            self.workdir = None
        self.wake = threading.Event()  # collectors set it to get a cycle at once
        self._closers: list[Any] = []  # background sources (pod cache, PodResources) to stop
        self.kernel_log: Any = None  # the kernel-log Follower, once health_enrichers() built it
        self.pod_cache: Any = None  # the watch-backed pod cache, once attribution() built it

    def close(self) -> None:
        """Remove what simulation wrote (fake executables, fake /proc) at exit."""
        while self._closers:
            try:
                self._closers.pop()()
            except Exception:  # noqa: BLE001 - shutting down anyway
                log.debug("close failed", exc_info=True)
        if self.workdir:
            from hetero_exporter.simulate import workdir
            workdir.remove(self.workdir)

    def finops(self) -> Any:
        """The configured FinOps settings, with the reference profile's cost weight, so that a
        device without a price costs reference price x cost_weight / reference cost_weight."""
        from hetero_exporter import profiles
        fin = self.cfg.finops
        prof = profiles.table().lookup(fin.reference)
        return fin.with_reference_cost_weight(None if prof is None else prof.cost_weight)

    def enabled_collectors(self) -> list[registry.CollectorEntry]:
        entries = registry.collector_entries()
        if self.scenario is not None:
            present = {d.vendor for d in self.scenario.devices}
        else:
            present = set(pci.expected_by_vendor(self.pci_devices, registry.pci_vendors()))
        chosen = []
        for name, e in entries.items():
            explicit = self.flags.get(name, self.cfg.collector_settings(name).get("enabled"))
            if explicit is not None:
                on = bool(explicit)
            elif self.scenario is None and not self.pci_readable:
                on = e.default  # PCI unreadable: cannot tell, try every default collector
            else:
                on = e.default and (not e.vendor or e.vendor in present)
            if on:
                chosen.append(e)
        if not chosen and self.scenario is None and self.pci_readable:
            # a CPU node: a collector of a vendor with no device on the bus is not down, it has
            # nothing to read, so none runs (and no AcceleratorCollectorDown fires here)
            log.info("no accelerator of a known vendor on the PCI bus: no collector runs",
                     extra={"sysfs_root": self.cfg.sysfs_root})
        return chosen

    def expected(self) -> dict[str, int]:
        if self.scenario is not None:
            counts: dict[str, int] = {}
            for d in self.scenario.devices:
                counts[d.vendor] = counts.get(d.vendor, 0) + 1
            for vendor, n in (self.scenario.settings.get("pci_extra") or {}).items():
                counts[vendor] = counts.get(vendor, 0) + int(n)
            return counts
        return pci.expected_by_vendor(pci.scan(self.cfg.sysfs_root), registry.pci_vendors())

    def _host_settings(self) -> dict[str, str]:
        """host_root / host_exec for every collector (its own section may override them)."""
        out = {"host_root": self.host_root} if self.host_root and self.scenario is None else {}
        return {**out, **({"host_exec": self.cfg.host_exec} if self.cfg.host_exec else {})}

    @property
    def state_dir(self) -> str:
        """Where state that survives a restart lives (pinned identities, the kernel-log cursor):
        ``kernel_log.state_dir``, the DaemonSets' hostPath by default. A simulation never
        touches the real node's state: it keeps its own in the work directory's ``state``
        folder, whatever the config names."""
        if self.scenario is not None:
            return os.path.join(self.workdir, "state")
        return str(self.cfg.kernel_log.get("state_dir") or "/var/lib/hetero-exporter")

    @property
    def state_writable(self) -> bool:
        """Only the agent (``run``) on the real node writes its state; ``inspect``, ``health
        --dry-run`` and the rest read at most, so a diagnostic run leaves nothing for the next
        run to report. A simulation writes only in its own work directory."""
        return self.scenario is not None or getattr(self.args, "command", None) == "run"

    def identity_store(self) -> Any:
        """How collectors keep identities: writable or not, this boot and machine, and the
        accelerators on the bus now (to tell a removed device from a lost one)."""
        from hetero_exporter.sdk.identity import IdentityStore, RemovalLog
        from hetero_exporter.sdk import pciaddr
        if self.scenario is not None:
            scanned: Optional[list[Any]] = self.pci_scan()()
            boot, machine = f"sim-{self.scenario.name}", None
        else:
            scanned = self.pci_devices if self.pci_readable else None
            boot, machine = _boot_id(), _machine_id(self.host_root)
        bus = None
        if scanned is not None:
            hosts = pci.host_devices(scanned, registry.pci_vendors())
            bus = frozenset(filter(None, (pciaddr.normalize(d.address) for devs in hosts.values() for d in devs)))
        self.removals = RemovalLog()
        return IdentityStore(writable=self.state_writable, boot_id=boot, machine_id=machine, bus=bus,
                             removals=self.removals)

    def sampler(self) -> Sampler:
        specs = []
        identities = self.identity_store()
        for e in self.enabled_collectors():
            opts = CollectorOptions(
                node_name=self.node, interval_seconds=self.cfg.interval,
                timeout_seconds=self.cfg.collector_timeout(e.name),
                settings={"sysfs_root": self.cfg.sysfs_root, **self._host_settings(),
                          **self.cfg.collector_settings(e.name)},
                scenario=self.scenario, clock=self.clock, workdir=self.workdir, wake=self.wake.set,
                state_dir=self.state_dir, identity=identities)

            def factory(e=e, opts=opts):
                return registry.collector_factory(e)(opts)

            specs.append(CollectorSpec(e.name, e.vendor, factory, opts.timeout_seconds))
        # With PCI presence on, that enricher scans the bus and sets the expected counts; the
        # sampler scanning it too would read sysfs twice per cycle for the same answer.
        return Sampler(specs, self.node, clock=self.clock, expected=dict if self.pci_presence else self.expected,
                       boot_id=_boot_id(), wake=self.wake, removals=self.removals,
                       enrichers=[*self.pci_locate(), self.attribution(), *self.health_enrichers()])

    # ---- device health (README: Health and Kubernetes)

    def health_settings(self) -> tuple[Any, Any]:
        """(policy, RemedyConfig) from the config's health section and --health-mode."""
        from hetero_exporter.health.detect import policy as policy_mod
        from hetero_exporter.health.plan import RemedyConfig
        raw = dict(self.cfg.health)
        policy = policy_mod.load(raw.get("policy"))
        mode = getattr(self.args, "health_mode", None)
        return policy, RemedyConfig.from_mapping(raw, mode=mode)

    @property
    def pci_presence(self) -> bool:
        """Whether the PCI presence enricher runs (config ``health.pci_presence``, default on)."""
        return bool(self.cfg.health.get("pci_presence", True))

    def pci_locate(self) -> list[Any]:
        """The enricher giving a device reported without a PCI address its bus address (with PCI
        presence on), first, so attribution and the remedy see it."""
        from hetero_exporter.sources.pci_presence import PciLocate
        return [PciLocate(self.pci_scan(), registry.pci_vendors())] if self.pci_presence else []

    def pci_scan(self) -> Any:
        """The PCI bus scan: the scenario's when simulating, sysfs otherwise."""
        from hetero_exporter.sources.pci_presence import simulated_scan
        if self.scenario is not None:
            return simulated_scan(self.scenario, self.clock, registry.pci_vendors())
        return lambda: pci.scan(self.cfg.sysfs_root)

    def health_enrichers(self) -> list[Any]:
        """PCI presence (missing devices), then the rules' verdicts as each device's health."""
        from hetero_exporter.sources.pci_presence import PciPresence
        from hetero_exporter.health.detect.verdicts import HealthVerdicts
        policy, _ = self.health_settings()
        self.verdicts = HealthVerdicts(policy)
        out: list[Any] = []
        if self.pci_presence:
            out.append(PciPresence(self.pci_scan(), registry.pci_vendors()))
        kernel_log = self.kernel_log_faults(policy)
        if kernel_log is not None:
            out.append(kernel_log)
        return out + [self.verdicts]

    # ---- the kernel log as a health source (README: Kernel log)

    def kernel_log_settings(self) -> dict[str, Any]:
        settings = dict(self.cfg.kernel_log)
        flag = getattr(self.args, "kernel_log", None)
        if flag is not None:
            if flag.lower() in ("off", "false", "no", "none"):
                settings["enabled"] = False
            else:
                settings.update(enabled=True, path=flag)
        return settings

    def kernel_log_faults(self, policy: Any) -> Any:
        """The follower (its own thread; the first read done before the first cycle) and the
        enricher putting its events on the devices; None when off. Simulating, it reads the
        scenario's ring buffer (its ``kernel_log`` lines up to the scenario clock)."""
        from hetero_exporter.sources import kernel_log as kl
        settings = self.kernel_log_settings()
        if not settings.get("enabled", True):
            log.info("kernel log off", extra={"reason": "disabled"})
            return None
        path = settings.get("path")
        state_dir = self.state_dir
        boot_id = _boot_id() if self.scenario is None else f"sim-{self.scenario.name}"
        if path == kl.SYSLOG and self.scenario is None:
            source: Any = kl.SyslogSource()
        elif path and path != kl.KMSG and path != kl.SYSLOG:
            source = kl.FileSource(str(path), initial_bytes=int(settings.get("initial_bytes", 8 << 20)))
        elif self.scenario is not None:
            from hetero_exporter.simulate.kernel_log import ScenarioKmsg
            ring = ScenarioKmsg(self.scenario, self.clock)
            source = kl.KmsgSource("simulated:/dev/kmsg", opener=ring.opener, wall_time=ring.wall_time)
        else:
            source = kl.KmsgSource(kl.KMSG)
        follower = kl.Follower(
            source, state_dir=state_dir, boot_id=boot_id, clock=self.clock, wake=self.wake.set,
            max_records_per_second=float(settings.get("max_records_per_second", 5000)),
            max_pending=int(settings.get("max_pending", 1024)),
            retry_seconds=float(settings.get("retry_seconds", 60)), writable=self.state_writable)
        follower.start(wait_first=2.0)
        self._closers.append(follower.close)
        self.kernel_log = follower
        return kl.KernelLogFaults(follower, reset_codes=policy.reset_codes | kl.RESET_CODES,
                                  dedup_seconds=float(settings.get("dedup_seconds", 60)))

    def health_loop(self, metrics_registry: Any) -> Any:
        """The health loop over ``self.verdicts`` (call after sampler()); its metrics go on the
        registry. Without cluster access it only computes (metrics), and says why."""
        from hetero_exporter.health.act.metrics import HealthMetrics
        from hetero_exporter.sources.pci_presence import UdevWatch
        from hetero_exporter.health.act.remedy import HealthLoop, Remedy
        from hetero_exporter.k8s import client as k8s_client
        policy, rcfg = self.health_settings()
        metrics = HealthMetrics()
        metrics_registry.register(metrics)
        cluster = None
        if rcfg.mode != "observe":
            cluster = k8s_client.connect(self.cfg.kubeconfig)
            if not cluster.enabled:
                log.warning("health loop writes nothing", extra={"mode": rcfg.mode, "reason": cluster.reason})
        slices = None
        if cluster is not None and cluster.enabled and rcfg.device_taints:
            # this node's ResourceSlices, watched (the remedy lists them itself until synced)
            from hetero_exporter.k8s.slice_cache import SliceCache
            slices = SliceCache(cluster.api_client, self.node, request_timeout=cluster.timeout_seconds).start()
            self._closers.append(slices.close)
        pods = self.pod_cache  # attribution's watch of this node's pods, when it runs
        remedy = Remedy(cluster, self.node, policy, rcfg, metrics, clock=self.clock, resource_of=device_resource,
                        slices=slices, failed_pods=pods.failed_pods if pods is not None else None)
        loop = HealthLoop(remedy, self.verdicts, boot_id=_boot_id())
        log.info("health loop", extra={"mode": rcfg.mode, "writes": remedy.writes, "domain": rcfg.domain})
        if self.scenario is None and self.cfg.health.get("udev", True):
            watch = UdevWatch(registry.pci_vendors(), self.wake.set)
            if watch.start():
                self._closers.append(watch.stop)
            else:
                log.info("udev watch off", extra={"reason": watch.reason})
        return loop

    # ---- process -> pod attribution (README: Attribution)

    def attribution(self) -> Any:
        """The enricher naming each device process's pod. Simulating: a fake /proc written from
        the scenario, its pods as the pod directory, and a real PodResources gRPC server on a
        socket in the workdir. On a node: ``proc_root`` (hostPID), the watch-backed pod cache
        when Kubernetes is configured, kubelet PodResources when its socket is mounted."""
        from hetero_exporter.sources.attribution import Attributor, StaticPods
        settings = self.cfg.attribution
        if self.scenario is not None:
            from hetero_exporter.simulate import kubelet, procfs
            proc_root = str(procfs.write(self.scenario, os.path.join(self.workdir, "proc")))
            # with --kubeconfig the names come from that API server (the scenario's pods seeded
            # there), as on a node; otherwise the scenario's pods stand in for it
            pods: Any = (self._pod_cache() if self.cfg.kubeconfig and settings.get("pod_cache", True)
                         else StaticPods(kubelet.scenario_pods(self.scenario), clock=self.clock))
            allocations = self._podresources(os.path.join(self.workdir, "pod-resources", "kubelet.sock"),
                                             simulated=kubelet.scenario_allocations(self.scenario))
        else:
            proc_root = str(settings.get("proc_root") or self.cfg.proc_root)
            pods = self._pod_cache() if settings.get("pod_cache", True) else None
            allocations = self._podresources(str(settings.get("podresources_socket") or
                                                 "/var/lib/kubelet/pod-resources/kubelet.sock"))
        return Attributor(proc_root, pods=pods, allocations=allocations, clock=self.clock)

    def _podresources(self, socket_path: str, simulated: Optional[list] = None) -> Any:
        settings = self.cfg.attribution
        wanted = settings.get("podresources")  # None: when the socket is there
        if wanted is False or (wanted is None and simulated is None and not os.path.exists(socket_path)):
            log.info("kubelet PodResources off", extra={"socket": socket_path,
                                                         "reason": "disabled" if wanted is False else "socket not mounted"})
            return None
        try:
            from hetero_exporter.sources.podresources.client import PodResourcesPoller
            if simulated is not None:
                from hetero_exporter.simulate import kubelet
                self._closers.append(kubelet.spawn(socket_path, simulated, self.workdir))
        except (ImportError, RuntimeError, OSError) as e:  # the simulated kubelet's grpcio/protobuf missing or too old
            log.warning("kubelet PodResources off: %s (pip install 'hetero-exporter[attribution]'; "
                        "the simulated kubelet also needs [simulate])", e)
            return None
        timeout = float(settings.get("podresources_timeout", 2.0))
        poller = PodResourcesPoller(socket_path, interval=float(settings.get("podresources_interval", self.cfg.interval)),
                                    timeout=timeout, extra_vendors=settings.get("resources") or {},
                                    clock=self.clock)
        self._closers.append(poller.close)
        return poller.start(wait_first=timeout)

    def _pod_cache(self) -> Any:
        from hetero_exporter.k8s import client as k8s_client
        cluster = k8s_client.connect(self.cfg.kubeconfig)
        if not cluster.enabled:
            log.info("pod cache off", extra={"reason": cluster.reason})
            return None
        from hetero_exporter.k8s.pods import PodCache
        cache = PodCache(cluster.api_client, self.node, request_timeout=cluster.timeout_seconds)
        self._closers.append(cache.close)
        log.info("pod cache on", extra={"source": cluster.source, "node": self.node})
        self.pod_cache = cache  # the health loop reads its failed pods (black-hole check)
        return cache.start(wait_first=float(self.cfg.attribution.get("pod_cache_wait", 5.0)))


# --------------------------------------------------------------------------- commands


def cmd_version(_args: argparse.Namespace) -> int:
    print(f"hetero-exporter {__version__}")
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace, extra: Sequence[str]) -> int:
    from hetero_exporter import table
    w = Wiring(args, extra)
    sampler = w.sampler()
    try:
        snap = sampler.collect()
    finally:
        sampler.close()
        w.close()
    print(snapshot_to_json(snap, indent=2) if args.json else table.render(snap), end="" if not args.json else "\n")
    return EXIT_OK


def cmd_run(args: argparse.Namespace, extra: Sequence[str]) -> int:
    from prometheus_client import CollectorRegistry

    from hetero_exporter.exposition.collector import SnapshotCollector
    from hetero_exporter.exposition.server import MetricsServer
    from hetero_exporter.store import SnapshotStore

    from hetero_exporter.web import config as web_config
    web = web_config.load(args.web_config_file) if args.web_config_file else None  # bad file: exit 2
    w = Wiring(args, extra)
    store = SnapshotStore()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(store.latest, clock=w.clock, finops=w.finops()))
    server = MetricsServer(w.cfg.listen, reg, store.latest, web=web).start()
    sampler = w.sampler()
    if w.kernel_log is not None:
        from hetero_exporter.exposition.collector import KernelLogCollector
        reg.register(KernelLogCollector(w.kernel_log.status))
    from hetero_exporter.exposition.collector import ToolProcessesCollector
    from hetero_exporter.sdk import runner as tool_runner
    reg.register(ToolProcessesCollector(tool_runner.killed_total))
    if web is not None and web.certificate_expiry is not None:
        from hetero_exporter.exposition.collector import TlsCertificateCollector
        reg.register(TlsCertificateCollector(web.certificate_expiry))
    health = w.health_loop(reg)
    store.subscribe(health.offer)
    health.start()
    host, port = server.address
    log.info("serving", extra={"listen": f"{host}:{port}", "node": w.node,
                               "collectors": ",".join(sampler.collector_names) or "none",
                               "simulate": w.scenario.name if w.scenario else None,
                               "interval": w.cfg.interval})
    stop = threading.Event()

    def _stop(signum: int, _frame: Any) -> None:
        log.info("stopping", extra={"signal": signal.Signals(signum).name})
        stop.set()
        sampler.request_cycle()  # end the wait between cycles

    for signum in STOP_SIGNALS:  # SIGHUP as SIGTERM: a closed terminal or a supervisor's hang-up stops cleanly
        signal.signal(signum, _stop)
    try:
        sampler.run(w.cfg.interval, store.publish, stop)
    finally:
        health.stop()
        server.stop()
        sampler.close()
        w.close()
    return EXIT_OK


def cmd_health(args: argparse.Namespace, extra: Sequence[str]) -> int:
    """Collect once and print what the agent would do (as in enforce mode), and why. With
    cluster access the plan is made against the Node as it is (bookkeeping included); without,
    against an empty node, and the report says so. Nothing is written."""
    import dataclasses

    from hetero_exporter.health import plan as plan_mod
    from hetero_exporter.health.act import report
    from hetero_exporter.health.act.remedy import Remedy, empty_node
    from hetero_exporter.k8s import client as k8s_client
    from hetero_exporter.k8s.client import K8sError
    w = Wiring(args, extra)
    sampler = w.sampler()
    try:
        policy, rcfg = w.health_settings()
        rcfg = dataclasses.replace(rcfg, mode="enforce")
        cluster = k8s_client.connect(w.cfg.kubeconfig)
        node, source, remedy = empty_node(w.node), "", None
        if cluster.enabled:
            remedy = Remedy(cluster, w.node, policy, rcfg, resource_of=device_resource)
            try:
                node = remedy.read_node()
                source = f"read from the API server ({cluster.source})"
                book = plan_mod.Book.from_annotation(
                    ((node.get("metadata") or {}).get("annotations") or {}).get(rcfg.book_annotation))
                w.verdicts.restore(plan_mod.sticky_from_json(book.sticky), book.boot_id, _boot_id())
            except K8sError as e:
                source = f"cannot read node {w.node} ({e}): compared against an empty node"
        else:
            source = f"no cluster access ({cluster.reason}): compared against an empty node"
        snap = sampler.collect()
        for _ in range(2):  # a collector that saw an event (a driver event) asked for another cycle
            if not w.wake.is_set():
                break
            w.wake.clear()
            snap = sampler.collect()
        ev = w.verdicts.evaluation(snap)
        budget = remedy.budget if remedy is not None else plan_mod.Budget.unchecked()
        import time
        view = None
        if remedy is not None:
            try:
                view = remedy.view(snap, ev)
            except K8sError as e:
                source += f"; cannot read the rest of the cluster ({e})"
        p = plan_mod.plan(node, snap, ev.verdicts, ev.node, policy, rcfg, time.time() if w.scenario is None else w.clock(),
                          budget=budget, sticky=ev.sticky, view=view)
    finally:
        sampler.close()
        w.close()
    print(report.render(snap, ev, p, policy, rcfg, source), end="")
    return EXIT_OK


def _print_parsed(result: Any, as_json: bool) -> None:
    from hetero_exporter import table
    if isinstance(result, NodeSnapshot):
        print(snapshot_to_json(result, indent=2) if as_json else table.render(result), end="\n" if as_json else "")
        return
    doc = result.to_dict() if hasattr(result, "to_dict") else to_dict(result)
    if as_json:
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        for k, v in doc.items():
            print(f"{k:<16} {'-' if v is None else v}")


def cmd_parse_kernel_log(args: argparse.Namespace) -> int:
    """``parse kernel-log FILE``: streamed line by line (memory bounded by the events kept),
    at most KERNEL_LOG_PARSE_LIMIT bytes."""
    from hetero_exporter.sources import kernel_log as kl
    from hetero_exporter.sdk.kmsg import parse_lines
    try:  # a regular file (devices and FIFOs refused, sdk/capture.py) or stdin
        stream = sys.stdin.buffer if args.file == "-" else open_capture(
            args.file, KERNEL_LOG_PARSE_LIMIT, limit_hint=" of parse kernel-log",
            # /dev/zero never ends, /dev/kmsg blocks at its end
            hint="save it first (dmesg > FILE, or cat /dev/kmsg with a timeout) and parse the file")
    except CaptureError as e:
        print(f"hetero-exporter parse: {e}", file=sys.stderr)
        return EXIT_FAIL
    try:
        events, n = parse_lines(kl.iter_lines(stream, KERNEL_LOG_PARSE_LIMIT, args.file))
    except ValueError as e:
        print(f"hetero-exporter parse: {e}", file=sys.stderr)
        return EXIT_FAIL
    except OSError as e:
        print(f"hetero-exporter parse: cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return EXIT_FAIL
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    doc = {"schema": 1, "events": [e.to_dict() for e in events]}
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print(kl.render_events({**doc, "lines": n}), end="")
    return EXIT_OK


def cmd_parse(args: argparse.Namespace) -> int:
    if args.tool == KERNEL_LOG_TOOL:
        return cmd_parse_kernel_log(args)
    try:
        fn = registry.parser(args.tool)
    except KeyError as e:
        raise UsageError(e.args[0]) from None
    try:  # regular files and stdin only, at most --max-bytes, decoded by BOM (sdk/capture.py)
        text = read_capture(args.file, args.max_bytes)
    except CaptureError as e:
        print(f"hetero-exporter parse: {e}", file=sys.stderr)
        return EXIT_FAIL
    try:
        result = fn(text)
    except ParseError as e:
        print(f"hetero-exporter parse: {args.file}: {e}", file=sys.stderr)
        return EXIT_FAIL
    _print_parsed(result, args.json)
    return EXIT_OK


def _add_scoring(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", default="binpack", choices=("binpack", "spread"),
                   help="placement policy of pods that do not name one (default binpack)")
    p.add_argument("--domain", default=DEFAULT_DOMAIN,
                   help="annotation domain: <domain>/devices on nodes, <domain>/request on pods")
    p.add_argument("--fresh-seconds", type=float, default=180.0,
                   help="annotations younger than this are fully trusted (default 180)")


def _scorer(args: argparse.Namespace) -> Any:
    from hetero_exporter.scoring.scorer import Scorer, Staleness
    fresh = max(0.0, args.fresh_seconds)
    return Scorer(args.policy, Staleness(fresh_seconds=fresh, floor_seconds=max(fresh + 1.0, 10 * fresh)))


def cmd_score(args: argparse.Namespace) -> int:
    import time

    import yaml

    from hetero_exporter.scoring import explain, offline
    try:
        with open(args.pod, encoding="utf-8") as f:
            pod = yaml.safe_load(f)
        with open(args.nodes, encoding="utf-8") as f:
            nodes = json.load(f)
    except yaml.YAMLError as e:
        raise ValueError(f"{args.pod}: not YAML: {e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{args.nodes}: not JSON: {e}") from None
    doc = offline.score(pod, nodes, _scorer(args), args.now if args.now is not None else time.time(),
                        args.domain)
    print(json.dumps(doc, indent=2) if args.json else explain.render(doc), end="\n" if args.json else "")
    return EXIT_OK if any(r["feasible"] for r in doc["nodes"]) else EXIT_FAIL


def cmd_scheduler_extender(args: argparse.Namespace) -> int:
    from hetero_exporter.exposition.server import parse_listen
    from hetero_exporter.k8s.client import connect
    from hetero_exporter.scoring.extender import Extender
    from hetero_exporter.scoring.metrics import ExtenderMetrics
    from hetero_exporter.scoring.server import ExtenderServer
    from hetero_exporter.web import config as web_config

    web = web_config.load(args.web_config_file) if args.web_config_file else None  # bad file: exit 2
    try:
        metrics_address = parse_listen(args.metrics_listen) if args.metrics_listen else None
    except ValueError:
        raise UsageError(f"--metrics-listen expects HOST:PORT, got {args.metrics_listen!r}") from None
    scorer = _scorer(args)
    metrics = ExtenderMetrics()
    annotation = Keys(args.domain).devices
    cluster = connect(args.kubeconfig)
    table, cache = None, None
    if cluster.enabled:
        from hetero_exporter.k8s.node_cache import NodeCache
        table = metrics.node_table(scorer, annotation)  # counts unreadable annotations
        cache = NodeCache(cluster.api_client, table, annotation=annotation).start()

        def _freeze_when_synced() -> None:
            # thousands of long-lived node states: keep them out of the cyclic GC's full passes,
            # which otherwise stall a /prioritize for hundreds of ms (BENCHMARKS.md)
            if cache.wait_synced(3600):
                import gc
                import time

                from hetero_exporter.scoring.nodetable import columns  # None without numpy
                gc.freeze()
                log.info("node cache loaded", extra={"nodes": len(table)})
                if columns is not None:
                    columns.GC.enabled = True  # and what each new pod shape's column makes
                    while True:  # frozen cycles (replaced node states) are collected when idle
                        time.sleep(10)
                        columns.GC.sweep()
        threading.Thread(target=_freeze_when_synced, name="gc-freeze", daemon=True).start()
        mode = "nodes in the request, and node names (nodeCacheCapable) from a watch of the node annotations"
    else:
        mode = "nodes in the request only (register with nodeCacheCapable: false)"
        log.warning("no cluster access: serving the nodes-in-request mode only", extra={"reason": cluster.reason})
    extender = Extender(scorer, table, annotation=annotation, domain=args.domain, metrics=metrics)
    server = ExtenderServer(parse_listen(args.listen), extender,
                            ready=lambda: table is None or table.synced.is_set(), web=web,
                            max_body_bytes=args.max_body_bytes, metrics_address=metrics_address).start()
    host, port = server.address
    log.info("scheduler extender serving", extra={"listen": f"{host}:{port}", "mode": mode,
                                                  "policy": scorer.policy, "cluster": cluster.source or None})
    stop = threading.Event()

    def _stop(signum: int, _frame: Any) -> None:
        log.info("stopping", extra={"signal": signal.Signals(signum).name})
        stop.set()

    for signum in STOP_SIGNALS:  # SIGHUP as SIGTERM: a closed terminal or a supervisor's hang-up stops cleanly
        signal.signal(signum, _stop)
    try:
        while not stop.wait(3600):
            pass
    finally:
        server.stop()
        if cache is not None:
            cache.close()
    return EXIT_OK


def _exit_on_sigterm() -> Any:
    """Until a command installs its own (run's graceful stop), SIGTERM and SIGHUP exit through
    SystemExit, so finally blocks and atexit remove what simulation wrote. The previous handlers
    by signal, or None off the main thread (where signals cannot be set)."""
    def _exit(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)
    try:  # a hang-up cleans up as SIGTERM does (no config reload: documented)
        return {signum: signal.signal(signum, _exit) for signum in (signal.SIGTERM, signal.SIGHUP)}
    except ValueError:
        return None


def _signal_exit(e: BaseException) -> Optional[SystemExit]:
    """The SystemExit our SIGTERM handler raised, when CPython wrapped it in another exception on
    the way up (3.11 turns an exception in a class body's ``__set_name__``, as during an import,
    into a RuntimeError whose cause it is); None for any other error."""
    seen = 0
    while e is not None and seen < 16:
        if isinstance(e, SystemExit):
            return e
        e, seen = e.__cause__ or e.__context__, seen + 1  # type: ignore[assignment]
    return None


def _remove_simulation_workdirs() -> None:
    """No simulation work directory outlives the command, however it ended."""
    workdir = sys.modules.get("hetero_exporter.simulate.workdir")  # loaded only when simulating
    if workdir is not None:
        workdir.remove_all()


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    logs.setup(getattr(args, "log_format", None) or "json", getattr(args, "log_level", "info"))
    # the commands that collect start vendor tools and simulations: a signal stops them cleanly
    restore_sigterm = _exit_on_sigterm() if args.collects else None
    try:
        check_flags(args)
        return args.func(args, extra)
    except UsageError as e:
        parser.print_usage(sys.stderr)
        print(f"hetero-exporter: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (ValidationError, SchemaError, ValueError, OSError) as e:
        # ValidationError (ConfigError, ScenarioError, a bad flag) is one line naming the field:
        # a bad input given by the user, not a crash
        print(f"hetero-exporter: error: {e}", file=sys.stderr)
        return EXIT_USAGE if isinstance(e, ValueError) else EXIT_FAIL
    except Exception as e:
        stop = _signal_exit(e)  # a SIGTERM that arrived during an import: exit as the signal asked
        if stop is None:
            raise
        raise SystemExit(stop.code) from None
    finally:
        for signum, handler in (restore_sigterm or {}).items():
            signal.signal(signum, handler)
        _remove_simulation_workdirs()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
