"""The scheduler extender's assembly: the scorer, the node cache (with cluster access), the
HTTP service and its metrics, each started and closed through ``Services``."""

from __future__ import annotations

import logging
import threading
from typing import Any, Optional

from hetero_exporter.app.commands import STOP_SIGNALS
from hetero_exporter.app.services import Services
from hetero_exporter.model.errors import EXIT_OK, UsageError
from hetero_exporter.model.keys import Keys

log = logging.getLogger("hetero_exporter")

SYNC_WAIT = 3600.0  # seconds the GC freeze waits for the node cache's first full list
SWEEP_SECONDS = 10.0  # between sweeps of frozen cycles (replaced node states)


def scorer(policy: str, fresh_seconds: float) -> Any:
    """The Scorer of ``--policy`` whose annotations are trusted for ``fresh_seconds``."""
    from hetero_exporter.scoring.scorer import Scorer, Staleness
    fresh = max(0.0, fresh_seconds)
    return Scorer(policy, Staleness(fresh_seconds=fresh, floor_seconds=max(fresh + 1.0, 10 * fresh)))


def _freeze_when_synced(cache: Any, table: Any, stop: threading.Event) -> None:
    """Thousands of long-lived node states: keep them out of the cyclic GC's full passes, which
    otherwise stall a /prioritize for hundreds of ms (BENCHMARKS.md)."""
    if not cache.wait_synced(SYNC_WAIT) or stop.is_set():
        return
    import gc

    from hetero_exporter.scoring.nodetable import columns  # None without numpy
    gc.freeze()
    log.info("node cache loaded", extra={"nodes": len(table)})
    if columns is None:
        return
    columns.GC.enabled = True  # and what each new pod shape's column makes
    while not stop.wait(SWEEP_SECONDS):  # frozen cycles are collected when idle
        columns.GC.sweep()


def _node_cache(services: Services, cluster: Any, metrics: Any, sc: Any, annotation: str) -> tuple[Any, Any]:
    """(node table, cache) over a watch of the node annotations, and the GC freeze thread."""
    from hetero_exporter.k8s.node_cache import NodeCache
    table = metrics.node_table(sc, annotation)  # counts unreadable annotations
    watch = NodeCache(cluster.api_client, table, annotation=annotation)
    cache = services.start("node-cache", watch.start, watch.close)
    stop = threading.Event()
    thread = threading.Thread(target=_freeze_when_synced, args=(cache, table, stop), name="gc-freeze", daemon=True)

    def _end() -> None:
        stop.set()
        thread.join(1.0)

    services.start("gc-freeze", thread.start, _end)
    return table, cache


def serve(args: Any) -> int:
    """``scheduler-extender``: serve /filter and /prioritize until SIGTERM, SIGINT or SIGHUP."""
    import signal

    from hetero_exporter.exposition.server import parse_listen
    from hetero_exporter.k8s.client import connect
    from hetero_exporter.scoring.extender import Extender
    from hetero_exporter.scoring.metrics import ExtenderMetrics
    from hetero_exporter.scoring.server import ExtenderServer
    from hetero_exporter.web import config as web_config

    web = web_config.load(args.web_config_file) if args.web_config_file else None  # bad file: exit 2
    metrics_address: Optional[Any] = None
    try:
        metrics_address = parse_listen(args.metrics_listen) if args.metrics_listen else None
    except ValueError:
        raise UsageError(f"--metrics-listen expects HOST:PORT, got {args.metrics_listen!r}") from None
    sc, metrics = scorer(args.policy, args.fresh_seconds), ExtenderMetrics()
    annotation = Keys(args.domain).devices
    cluster = connect(args.kubeconfig)
    services = Services()
    try:
        table = None
        if cluster.enabled:
            table, _ = _node_cache(services, cluster, metrics, sc, annotation)
            mode = "nodes in the request, and node names (nodeCacheCapable) from a watch of the node annotations"
        else:
            mode = "nodes in the request only (register with nodeCacheCapable: false)"
            log.warning("no cluster access: serving the nodes-in-request mode only", extra={"reason": cluster.reason})
        extender = Extender(sc, table, annotation=annotation, domain=args.domain, metrics=metrics)
        server = ExtenderServer(parse_listen(args.listen), extender,
                                ready=lambda: table is None or table.synced.is_set(), web=web,
                                max_body_bytes=args.max_body_bytes, metrics_address=metrics_address)
        services.start("extender-server", server.start, server.stop)
        host, port = server.address
        log.info("scheduler extender serving", extra={"listen": f"{host}:{port}", "mode": mode,
                                                      "policy": sc.policy, "cluster": cluster.source or None})
        stop = threading.Event()

        def _stop(signum: int, _frame: Any) -> None:
            log.info("stopping", extra={"signal": signal.Signals(signum).name})
            stop.set()

        for signum in STOP_SIGNALS:  # SIGHUP as SIGTERM: a closed terminal or a supervisor's hang-up stops cleanly
            signal.signal(signum, _stop)
        while not stop.wait(3600):
            pass
    finally:
        services.close()
    return EXIT_OK
