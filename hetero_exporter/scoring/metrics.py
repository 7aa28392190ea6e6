"""The scheduler extender's own ``/metrics`` (a registry of its own, not the agent's exposition).

Families (docs/scheduling.md):

- ``accelerator_extender_requests_total{verb,code}``: calls answered, by verb (``filter``,
  ``prioritize``, ``explain``) and HTTP status code.
- ``accelerator_extender_request_duration_seconds{verb}``: histogram of the time from a complete
  request to its answer, seconds.
- ``accelerator_extender_decisions_total{verb,result,reason}``: per-node verdicts; ``result`` is
  ``feasible`` or ``infeasible``, ``reason`` one of ``verdicts.REASONS`` (never the reason text).
- ``accelerator_extender_nodes_cached{cache}``: node states held; ``cache`` is ``watch`` (the
  watch-backed cache of nodeCacheCapable mode) or ``request`` (decoded Nodes of request bodies).
- ``accelerator_extender_nodes_cached_bytes{cache}``: estimated bytes of the node states held
  where the cache is bounded in bytes (``request``).
- ``accelerator_extender_nodes_evicted_total{cache}``: node states put out of a bounded cache
  (``request``: least recently used, past its node count or bytes).
- ``accelerator_extender_cache_age_seconds{cache}``: median age of the cached annotations (now
  minus the time the agent wrote them), seconds; absent while none is cached. The agents rewrite
  theirs every few seconds: a median growing past that says the watch or the agents stopped.
- ``accelerator_extender_annotation_errors_total``: annotation texts that could not be read (each
  distinct text once: a node state is decoded only when its text changes).
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Iterable, Optional

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from hetero_exporter.scoring.nodes import NodeState
from hetero_exporter.scoring.nodetable import NodeTable
from hetero_exporter.scoring.verdicts import FIT, NO_REQUEST, REASONS

PREFIX = "accelerator_extender_"
REQUESTS = PREFIX + "requests_total"
DURATION = PREFIX + "request_duration_seconds"
DECISIONS = PREFIX + "decisions_total"
NODES_CACHED = PREFIX + "nodes_cached"
NODES_CACHED_BYTES = PREFIX + "nodes_cached_bytes"
NODES_EVICTED = PREFIX + "nodes_evicted_total"
CACHE_AGE = PREFIX + "cache_age_seconds"
ANNOTATION_ERRORS = PREFIX + "annotation_errors_total"

VERBS = ("filter", "prioritize", "explain")
# decisions_total's reason label, a bounded enum (the text is in /explain): see scoring.verdicts
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _name(family: str) -> str:
    """prometheus_client appends ``_total`` to a counter's name itself."""
    return family[:-len("_total")] if family.endswith("_total") else family


class CountedNodeTable(NodeTable):
    """A NodeTable that calls ``on_unreadable()`` for every annotation text it fails to read (an
    absent annotation is not an error)."""

    def __init__(self, *args, on_unreadable: Callable[[], None] = lambda: None, **kwargs):
        super().__init__(*args, **kwargs)
        self.on_unreadable = on_unreadable

    def _decode(self, name: str, text: Optional[str]) -> NodeState:
        state = super()._decode(name, text)
        if text is not None and state.error:
            self.on_unreadable()
        return state


class ExtenderMetrics:
    """The extender's registry; ``tables`` (cache label -> NodeTable) and ``clock`` (Unix seconds)
    feed the cache gauges at scrape time."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(_name(REQUESTS), "Extender calls answered, by verb and HTTP status code.",
                                ["verb", "code"], registry=self.registry)
        self.duration = Histogram(DURATION, "Time from a complete extender request to its answer, seconds.",
                                  ["verb"], buckets=BUCKETS, registry=self.registry)
        self.decisions = Counter(_name(DECISIONS), "Per-node verdicts of /filter and /prioritize, by result and "
                                 "reason (the reason text is in /explain).", ["verb", "result", "reason"],
                                 registry=self.registry)
        self.annotation_errors = Counter(_name(ANNOTATION_ERRORS), "Node annotation texts that could not be "
                                         "read (each distinct text once).", registry=self.registry)
        self._durations = {v: self.duration.labels(v) for v in VERBS}
        self._decisions = {(v, r): self.decisions.labels(v, "feasible" if r in (FIT, NO_REQUEST) else "infeasible", r)
                           for v in VERBS[:2] for r in REASONS}
        self.tables: dict[str, NodeTable] = {}
        self.clock: Callable[[], float] = time.time
        self.registry.register(_CacheCollector(self))

    def observe(self, verb: str, code: int, seconds: float) -> None:
        """One answered call of ``verb`` (one of ``VERBS``)."""
        self.requests.labels(verb, str(code)).inc()
        self._durations[verb].observe(seconds)

    def count_decisions(self, verb: str, counts: dict[str, int]) -> None:
        for reason, n in counts.items():
            self._decisions[verb, reason].inc(n)

    def node_table(self, *args, **kwargs) -> CountedNodeTable:
        """A NodeTable whose unreadable annotations count in ``annotation_errors_total``."""
        return CountedNodeTable(*args, on_unreadable=self.annotation_errors.inc, **kwargs)

    def render(self) -> tuple[bytes, str]:
        """(the text exposition, its content type)."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _CacheCollector:
    def __init__(self, metrics: ExtenderMetrics):
        self.metrics = metrics

    def describe(self) -> Iterable:
        return []  # computed at scrape time: nothing to check at registration

    def collect(self) -> Iterable:
        cached = GaugeMetricFamily(NODES_CACHED, "Node states the extender holds, by cache.", labels=["cache"])
        age = GaugeMetricFamily(CACHE_AGE, "Median age of the cached node annotations, seconds.", labels=["cache"])
        weight = GaugeMetricFamily(NODES_CACHED_BYTES, "Estimated bytes of the node states a cache bounded in "
                                   "bytes holds.", labels=["cache"])
        evicted = CounterMetricFamily(_name(NODES_EVICTED), "Node states put out of a bounded cache (least "
                                      "recently used, past its node count or bytes).", labels=["cache"])
        now = self.metrics.clock()
        for label, table in self.metrics.tables.items():
            get = table.lookup()
            states = [st for st in map(get, table.names()) if st is not None]
            cached.add_metric([label], len(states))
            ages = [now - st.time for st in states if st.time > 0]
            if ages:
                age.add_metric([label], max(0.0, statistics.median(ages)))
            if table.max_bytes is not None:
                weight.add_metric([label], table.bytes)
                evicted.add_metric([label], table.evicted)
        return [cached, weight, evicted, age]
