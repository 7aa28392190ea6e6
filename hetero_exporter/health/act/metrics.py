"""Self-metrics of the health loop, as a prometheus_client collector registered beside the
snapshot collector: actions by result, the blast-radius budget, node verdict, API reachability.
Names come from model/names.py."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Iterator, Mapping, Optional

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from hetero_exporter.model import names as N

RESULTS = ("ok", "error", "conflict", "refused", "dry-run", "exists")
# The actions DESIGN.md names: each (action, result) is exported at 0 from the start, so dashboards
# and rate() alerts see a healthy node's series. Other actions (uncordon, labels, ...) appear when counted.
ACTIONS = ("taint", "untaint", "condition", "event", "cordon", "device-taint", "pod-condition")


class HealthMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._actions: Counter = Counter()
        self._budget_exhausted = 0.0
        self._budget_nodes: Optional[tuple[int, int]] = None
        self._unhealthy: Optional[float] = None
        self._up: Optional[float] = None
        self._foreign: dict[str, int] = {}  # kind -> objects of our names another writer holds (once checked)
        self._promotions: Mapping[tuple[str, str, str], int] = {}  # (vendor, code, to) -> the judge's count
        self._stack: Mapping[tuple[str, str], float] = {}  # (vendor, component) -> up (health/plan/stack.py)

    def action(self, action: str, result: str, n: int = 1) -> None:
        with self._lock:
            self._actions[(action, result)] += n

    def actions(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._actions)

    def budget(self, exhausted: bool, total: Optional[int] = None, tainted: Optional[int] = None) -> None:
        with self._lock:
            self._budget_exhausted = 1.0 if exhausted else 0.0
            if total is not None and tainted is not None:
                self._budget_nodes = (total, tainted)

    @property
    def budget_exhausted(self) -> bool:
        with self._lock:
            return self._budget_exhausted == 1.0

    def node(self, unhealthy: bool) -> None:
        with self._lock:
            self._unhealthy = 1.0 if unhealthy else 0.0

    def foreign(self, kind: str, n: int) -> None:
        with self._lock:
            self._foreign[kind] = n

    def promotions(self, counts: Mapping[tuple[str, str, str], int]) -> None:
        """The judge's promotions so far (health.promote; cumulative in its evaluation)."""
        with self._lock:
            self._promotions = dict(counts)

    def stack(self, up: Mapping[tuple[str, str], float]) -> None:
        """The plugin pods' state at the last read (stack.component_up), replacing the previous."""
        with self._lock:
            self._stack = dict(up)

    def kubernetes_up(self, up: bool) -> None:
        with self._lock:
            self._up = 1.0 if up else 0.0

    def collect(self) -> Iterator:
        with self._lock:
            actions = dict.fromkeys(((a, r) for a in ACTIONS for r in RESULTS), 0)
            actions.update(self._actions)
            exhausted, nodes, unhealthy, up = self._budget_exhausted, self._budget_nodes, self._unhealthy, self._up
            foreign = dict(self._foreign)
            promotions = dict(self._promotions)
            stack = dict(self._stack)
        c = CounterMetricFamily(N.HEALTH_ACTIONS.family, N.HEALTH_ACTIONS.help, labels=N.HEALTH_ACTIONS.labels)
        for (action, result), v in sorted(actions.items()):
            c.add_metric([action, result], v)
        yield c
        yield GaugeMetricFamily(N.HEALTH_BUDGET_EXHAUSTED.name, N.HEALTH_BUDGET_EXHAUSTED.help, value=exhausted)
        if nodes is not None:
            g = GaugeMetricFamily(N.HEALTH_BUDGET_NODES.name, N.HEALTH_BUDGET_NODES.help,
                                  labels=N.HEALTH_BUDGET_NODES.labels)
            g.add_metric(["total"], nodes[0])
            g.add_metric(["tainted"], nodes[1])
            yield g
        if unhealthy is not None:
            yield GaugeMetricFamily(N.HEALTH_NODE_UNHEALTHY.name, N.HEALTH_NODE_UNHEALTHY.help, value=unhealthy)
        if promotions:
            p = CounterMetricFamily(N.HEALTH_PROMOTIONS.family, N.HEALTH_PROMOTIONS.help, labels=N.HEALTH_PROMOTIONS.labels)
            for (vendor, code, to), n in sorted(promotions.items()):
                p.add_metric([vendor, code, to], n)
            yield p
        if stack:
            g = GaugeMetricFamily(N.STACK_COMPONENT_UP.name, N.STACK_COMPONENT_UP.help, labels=N.STACK_COMPONENT_UP.labels)
            for (vendor, component), value in sorted(stack.items()):
                g.add_metric([vendor, component], value)
            yield g
        if up is not None:
            yield GaugeMetricFamily(N.HEALTH_KUBERNETES_UP.name, N.HEALTH_KUBERNETES_UP.help, value=up)
        if foreign:
            g = GaugeMetricFamily(N.HEALTH_FOREIGN_OBJECTS.name, N.HEALTH_FOREIGN_OBJECTS.help,
                                  labels=N.HEALTH_FOREIGN_OBJECTS.labels)
            for kind, n in sorted(foreign.items()):
                g.add_metric([kind], n)
            yield g
