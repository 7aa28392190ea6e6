"""The commands that collect, over one ``Agent``: ``run`` (the agent), ``inspect`` (one
snapshot as a table or JSON) and ``health --dry-run`` (what the agent would do, and why).

Each builds its agent, uses it and closes it in a ``finally``; cli.py parses the arguments
and calls one of these.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
from typing import Any, Optional

from hetero_exporter.app.agent import Agent, Options, device_resource
from hetero_exporter.model import snapshot_to_json
from hetero_exporter.model.errors import EXIT_OK

log = logging.getLogger("hetero_exporter")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # each stops run / the extender cleanly
EXTRA_CYCLES = 2  # one-shot commands: more cycles a collector that saw an event may ask for


def inspect(options: Options, as_json: bool) -> int:
    """Collect once and print the snapshot (the inspect table, or schema-1 JSON)."""
    from hetero_exporter import table
    agent = Agent.build(options)
    try:
        snap = agent.start().sampler.collect()
    finally:
        agent.close()
    print(snapshot_to_json(snap, indent=2) if as_json else table.render(snap), end="" if not as_json else "\n")
    return EXIT_OK


def _registry(agent: Agent, store: Any) -> Any:
    """The metrics registry, with the snapshot's families."""
    from prometheus_client import CollectorRegistry

    from hetero_exporter.exposition.collector import SnapshotCollector
    from hetero_exporter.exposition.selection import Selection
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(store.latest, clock=agent.clock, finops=agent.finops(),
                                   selection=Selection.of(agent.config.metrics)))
    return reg


def _self_metrics(agent: Agent, reg: Any, web: Any) -> None:
    """The kernel log's, the tool runner's and the TLS certificate's own families."""
    from hetero_exporter.exposition.collector import (
        KernelLogCollector,
        TlsCertificateCollector,
        ToolProcessesCollector,
    )
    from hetero_exporter.sdk import runner as tool_runner
    kernel_log = agent.parts.kernel_log
    if kernel_log is not None:
        reg.register(KernelLogCollector(kernel_log.follower.status))
    reg.register(ToolProcessesCollector(tool_runner.killed_total))
    if web is not None and web.certificate_expiry is not None:
        reg.register(TlsCertificateCollector(web.certificate_expiry))


def _exporters(agent: Agent, reg: Any, store: Any, health: Any) -> None:
    """The configured pipelines (OTLP, the NVSentinel bridge), each on its own thread, with one
    failure counter; nothing of theirs is imported where none is configured."""
    otlp, nvsentinel = agent.settings.otlp, agent.settings.nvsentinel
    if otlp is None and nvsentinel is None:
        return
    from hetero_exporter.exposition.export import ExportFailures
    failures = ExportFailures()
    reg.register(failures)
    if otlp is not None:
        from hetero_exporter import __version__
        from hetero_exporter.exposition.export.otlp import OtlpExporter
        from hetero_exporter.exposition.selection import Selection
        exporter = OtlpExporter(otlp, store.latest, agent.node, failures, finops=agent.finops(),
                                selection=Selection.of(agent.config.metrics), version=__version__)
        agent.services.start("otlp", exporter.start, exporter.close)
    if nvsentinel is not None:
        from hetero_exporter.health.act.nvsentinel.bridge import NvSentinelBridge
        from hetero_exporter.health.detect import texts
        policy = agent.settings.health.policy
        bridge = NvSentinelBridge(nvsentinel, agent.node, agent.settings.health.remedy.mode, agent.state_dir,
                                  failures, condition_reason=policy.condition_reason,
                                  fault_text=lambda vendor, fault, uuid: texts.fault_text(vendor, fault, policy, uuid),
                                  ready=lambda: health.remedy.restored,  # as the health loop: after the Node's sticky faults
                                  catalogue=policy.catalogue)
        agent.services.start("nvsentinel", bridge.start, bridge.close)
        store.subscribe(bridge.offer)


def _health_stream(agent: Agent, reg: Any, store: Any, health: Any) -> None:
    """The local health stream (``health_stream``), served on its own thread; nothing of it (grpc
    included) is imported where it is not configured."""
    settings = agent.settings.health_stream
    if settings is None:
        return
    from hetero_exporter.health.act.stream import HealthStream
    stream = HealthStream(settings, agent.node, ready=lambda: health.remedy.restored)  # as the bridge
    reg.register(stream.metrics)
    agent.services.start("health-stream", stream.start, stream.close)
    store.subscribe(stream.offer)


def run(options: Options, web_config_file: Optional[str]) -> int:
    """The agent: serve /metrics (and /snapshot, /ready) while the sampler publishes snapshots
    and the health loop acts on them, until SIGTERM, SIGINT or SIGHUP."""
    from hetero_exporter.exposition.server import MetricsServer
    from hetero_exporter.store import SnapshotStore
    web = None
    if web_config_file:
        # only with a web config file: its parser and the certificate code are not loaded otherwise
        from hetero_exporter.web import config as web_config
        web = web_config.load(web_config_file)  # bad file: exit 2
    agent = Agent.build(options)
    try:
        store = SnapshotStore()
        reg = _registry(agent, store)
        # the server answers (not ready) while the sources make their first reads
        server = MetricsServer(agent.config.listen, reg, store.latest, web=web)
        agent.services.start("metrics-server", server.start, server.stop)
        parts = agent.start()
        sampler, health = parts.sampler, parts.health
        assert health is not None  # run's parts have the health loop
        _self_metrics(agent, reg, web)
        reg.register(health.metrics)
        store.subscribe(health.loop.offer)
        agent.services.start("health-loop", health.loop.start, health.loop.stop)
        _exporters(agent, reg, store, health.loop)
        _health_stream(agent, reg, store, health.loop)
        host, port = server.address
        log.info("serving", extra={"listen": f"{host}:{port}", "node": agent.node,
                                   "collectors": ",".join(sampler.collector_names) or "none",
                                   "simulate": agent.env.name, "interval": agent.config.interval})
        sampler.run(agent.config.interval, store.publish, _stop_on_signals(sampler))
    finally:
        agent.close()
    return EXIT_OK


def _stop_on_signals(sampler: Any) -> threading.Event:
    """An event set by SIGTERM, SIGINT or SIGHUP (a closed terminal or a supervisor's hang-up
    stops cleanly), which also ends the sampler's wait between cycles."""
    stop = threading.Event()

    def _stop(signum: int, _frame: Any) -> None:
        log.info("stopping", extra={"signal": signal.Signals(signum).name})
        stop.set()
        sampler.request_cycle()

    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop)
    return stop


def _node_as_it_is(agent: Agent, remedy: Any) -> tuple[Any, str, bool]:
    """The Node the plan is made against, where it came from (said in the report), and whether
    it was read (then ``agent.start`` restores the sticky faults an earlier agent recorded on it)."""
    from hetero_exporter.health.act.remedy import empty_node
    from hetero_exporter.k8s.client import K8sError
    cluster = agent.parts.cluster
    assert cluster is not None  # health's parts connect
    if remedy is None:
        return empty_node(agent.node), f"no cluster access ({cluster.reason}): compared against an empty node", False
    try:
        node = remedy.read_node()
    except K8sError as e:
        return empty_node(agent.node), f"cannot read node {agent.node} ({e}): compared against an empty node", False
    return node, f"read from the API server ({cluster.source})", True


def _collect_settled(agent: Agent) -> tuple[Any, Any]:
    """One snapshot and its evaluation, and up to EXTRA_CYCLES more while a collector that saw
    an event (a driver event) asks for another cycle."""
    sampler = agent.parts.sampler
    judged = sampler.collect_judged()
    for _ in range(EXTRA_CYCLES):
        if not agent.wake.is_set():
            break
        agent.wake.clear()
        judged = sampler.collect_judged()
    return judged


def health(options: Options, as_json: bool = False) -> int:
    """Collect once and print what the agent would do (as in enforce mode), and why (``as_json``:
    the report as JSON). With cluster access the plan is made against the Node as it is
    (bookkeeping included); without, against an empty node, and the report says so. Nothing is written."""
    from hetero_exporter.health import plan as plan_mod
    from hetero_exporter.health.act import report
    from hetero_exporter.health.act.remedy import Remedy
    from hetero_exporter.k8s.client import K8sError
    agent = Agent.build(options)
    try:
        policy = agent.settings.health.policy
        rcfg = dataclasses.replace(agent.settings.health.remedy, mode="enforce")
        cluster = agent.parts.cluster
        remedy = Remedy(cluster, agent.node, policy, rcfg, resource_of=device_resource) if cluster and cluster.enabled else None
        node, source, read = _node_as_it_is(agent, remedy)
        agent.start(node if read else None)
        # the operators' overrides on the Node, honoured as the agent would
        agent.parts.verdicts.see_node((node.get("metadata") or {}).get("annotations") or {},
                                      rcfg.keys.health_override, agent.env.plan_time())
        snap, ev = _collect_settled(agent)
        budget = remedy.budget if remedy is not None else plan_mod.Budget.unchecked()
        view = None
        if remedy is not None:
            try:
                view = remedy.view(snap, ev)
            except K8sError as e:
                source += f"; cannot read the rest of the cluster ({e})"
        if view is None:  # no cluster: the device-plugin resources still match classes
            view = plan_mod.ClusterView(resources={d.identity.uuid: device_resource(d) for d in snap.devices})
        p = plan_mod.plan(node, snap, ev.verdicts, ev.node, policy, rcfg, agent.env.plan_time(),
                          budget=budget, sticky=ev.sticky, view=view, overrides=ev.overrides, occurrences=ev.occurrences)
    finally:
        agent.close()
    built = report.build(snap, ev, p, policy, rcfg, source) if as_json else None
    print(report.to_json(built) if built is not None else report.render(snap, ev, p, policy, rcfg, source), end="")
    return EXIT_OK


def options_for(command: str, args: Any, collectors: dict[str, bool]) -> Options:
    """The Options of a parsed command line (the flags a command does not have are None)."""
    get = lambda name: getattr(args, name, None)  # noqa: E731
    return Options(command=command, config_file=get("config"), interval=get("interval"), log_format=get("log_format"),
                   kubeconfig=get("kubeconfig"), listen=get("listen"), collectors=collectors,
                   simulate=get("simulate"), simulate_if_absent=bool(get("simulate_if_absent")), at=get("at") or 0.0,
                   node_name=get("node_name"), host_root=get("host_root"), health_mode=get("health_mode"),
                   kernel_log=get("kernel_log"))
