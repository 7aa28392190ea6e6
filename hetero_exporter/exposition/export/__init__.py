"""Outlets beyond the scrape: OTLP (``otlp``), and the failure counter it shares with the
NVSentinel bridge (a health output: ``health/act/nvsentinel``).

Each exporter runs on its own thread or queue, so a slow or absent receiver never blocks
sampling, a scrape or the health loop; what it could not deliver is counted here and
exported as ``accelerator_export_failures_total{exporter}`` (0 from the start for each
configured exporter).
"""

from __future__ import annotations

import threading
from typing import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, Metric as PromMetric

from hetero_exporter.model import names as N


class ExportFailures:
    """Failed or dropped exports per exporter name; thread-safe, and a prometheus_client collector."""

    def __init__(self, exporters: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {name: 0 for name in exporters}

    def declare(self, exporter: str) -> None:
        """Export ``exporter``'s series at 0 from now on."""
        with self._lock:
            self._counts.setdefault(exporter, 0)

    def add(self, exporter: str, n: int = 1) -> None:
        with self._lock:
            self._counts[exporter] = self._counts.get(exporter, 0) + n

    def value(self, exporter: str) -> int:
        with self._lock:
            return self._counts.get(exporter, 0)

    def describe(self) -> Iterable[PromMetric]:
        return []

    def collect(self) -> Iterator[PromMetric]:
        with self._lock:
            counts = sorted(self._counts.items())
        if not counts:
            return
        fam = CounterMetricFamily(N.EXPORT_FAILURES.family, N.EXPORT_FAILURES.help, labels=N.EXPORT_FAILURES.labels)
        for name, n in counts:
            fam.add_metric([name], float(n))
        yield fam
