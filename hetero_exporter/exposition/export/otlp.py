"""OTLP metrics export (opt-in: the ``otlp`` config section) with the OpenTelemetry SDK.

The SDK and its OTLP exporter (the ``otlp`` extra) are imported by ``start()`` only, so an agent
without the section never loads them. Every instrument of ``otlp_map`` is registered once as an
observable one; at each export the SDK's reader thread calls their callbacks, which read the
latest snapshot (points built once per snapshot and shared by all callbacks). Nothing here
runs on the sampler's thread, a scrape or the health loop: a slow or absent receiver costs one
export's timeout on the reader's own thread. The SDK keeps no backlog (each export sends the
current values; a failed one is dropped after its retries), so memory is bounded by one
snapshot's points; each failed export adds 1 to ``accelerator_export_failures_total{exporter="otlp"}``.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any, Callable, Optional
from urllib.parse import urlsplit, urlunsplit

from hetero_exporter.exposition.export import ExportFailures
from hetero_exporter.exposition.export import otlp_map
from hetero_exporter.exposition.export.tls_files import TlsFiles
from hetero_exporter.exposition.selection import EVERYTHING, Selection
from hetero_exporter.model import NodeSnapshot
from hetero_exporter.model.errors import ExitError

log = logging.getLogger("hetero_exporter")

EXPORTER = "otlp"
SERVICE_NAME = "hetero-exporter"
HTTP_PATH = "/v1/metrics"  # OTLP/HTTP's metrics path, added where the endpoint names none
SHUTDOWN_MILLIS = 5000  # the last export at close gets at most this long


def http_endpoint(endpoint: str, insecure: bool) -> str:
    """The URL the HTTP exporter posts to: a scheme where none is given (https unless
    ``insecure``) and OTLP's ``/v1/metrics`` where the endpoint has no path."""
    url = urlsplit(endpoint if "://" in endpoint else ("http://" if insecure else "https://") + endpoint)
    path = url.path if url.path not in ("", "/") else HTTP_PATH
    return urlunsplit((url.scheme, url.netloc, path, url.query, ""))


def resource_attributes(settings: Any, node: str, version: str) -> dict[str, str]:
    """``service.name``, ``service.version``, ``k8s.node.name``, ``host.name``; the section's
    ``resource`` adds to them or overrides them."""
    attrs = {"service.name": SERVICE_NAME, "k8s.node.name": node, "host.name": socket.gethostname()}
    if version:
        attrs["service.version"] = version
    attrs.update(settings.resource)
    return attrs


class OtlpExporter:
    """Exports the latest snapshot every ``settings.interval`` seconds over OTLP (gRPC or HTTP)."""

    def __init__(self, settings: Any, latest: Callable[[], Optional[NodeSnapshot]], node: str,
                 failures: ExportFailures, *, finops: Any = None, selection: Selection = EVERYTHING,
                 version: str = "", clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self._latest, self._node, self._failures = latest, node, failures
        self._finops, self._selection, self._version, self._clock = finops, selection, version, clock
        self._lock = threading.Lock()
        self._built_for: Optional[NodeSnapshot] = None
        self._points: dict[str, list[otlp_map.Point]] = {}
        self._provider: Any = None
        self._tls = TlsFiles({})
        failures.declare(EXPORTER)

    # ---- the points, once per snapshot

    def _current(self) -> dict[str, list[otlp_map.Point]]:
        snap = self._latest()
        with self._lock:
            if snap is None:
                return {}
            if snap is not self._built_for:
                self._points = otlp_map.by_instrument(otlp_map.points(
                    snap, finops=self._finops, selection=self._selection, now=self._clock()))
                self._built_for = snap
            return self._points

    def _callback(self, name: str) -> Callable[[Any], list]:
        from opentelemetry.metrics import Observation

        def observe(_options: Any) -> list:
            if name == otlp_map.SNAPSHOT_AGE.name:
                snap = self._latest()
                return [] if snap is None else [Observation(max(0.0, self._clock() - snap.time))]
            return [Observation(p.value, p.attributes) for p in self._current().get(name, ())]
        return observe

    # ---- the SDK

    def _exporter(self) -> Any:
        s = self.settings
        timeout = min(s.timeout, s.interval)
        headers = dict(s.headers)
        self._tls = TlsFiles(s.tls.contents)  # read when the settings were made (regular files, capped)
        if s.protocol == "http":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as Http

            from hetero_exporter.exposition.export.bounded_http import BoundedSession
            # requests opens certificate files by path at each connection: it gets the pinned copies
            return Http(endpoint=http_endpoint(s.endpoint, s.tls.insecure), headers=headers, timeout=timeout,
                        certificate_file=self._tls.path("ca_file"), client_certificate_file=self._tls.path("cert_file"),
                        client_key_file=self._tls.path("key_file"), session=BoundedSession(timeout=timeout))
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as Grpc
        credentials = None
        if not s.tls.insecure and not s.endpoint.startswith("http://"):
            import grpc
            credentials = grpc.ssl_channel_credentials(
                root_certificates=self._tls.data("ca_file"), private_key=self._tls.data("key_file"),
                certificate_chain=self._tls.data("cert_file"))
        return Grpc(endpoint=s.endpoint, insecure=s.tls.insecure or s.endpoint.startswith("http://"),
                    credentials=credentials, headers=headers, timeout=timeout)

    def start(self) -> None:
        """Build the SDK's provider, reader and instruments; the reader's thread exports from now on.
        Without the SDK installed: ExitError naming the extra to install."""
        try:
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
            from opentelemetry.sdk.resources import Resource
        except ImportError as e:
            raise ExitError(f"otlp is configured but the OpenTelemetry SDK is not installed ({e}); "
                               "pip install 'hetero-exporter[otlp]'") from None
        reader = PeriodicExportingMetricReader(
            _counted(self._exporter(), self._failures), export_interval_millis=self.settings.interval * 1000,
            export_timeout_millis=min(self.settings.timeout, self.settings.interval) * 1000)
        provider = MeterProvider(resource=Resource.create(resource_attributes(self.settings, self._node,
                                                                               self._version)),
                                 metric_readers=[reader])
        meter = provider.get_meter("hetero_exporter", self._version or None)
        makers = {otlp_map.GAUGE: meter.create_observable_gauge, otlp_map.COUNTER: meter.create_observable_counter,
                  otlp_map.UPDOWN: meter.create_observable_up_down_counter}
        for inst in otlp_map.instruments():
            makers[inst.kind](inst.name, callbacks=[self._callback(inst.name)], unit=inst.unit,
                              description=inst.description)
        self._provider = provider
        log.info("otlp export", extra={"endpoint": self.settings.endpoint, "protocol": self.settings.protocol,
                                       "interval": self.settings.interval})

    def close(self) -> None:
        """The last export (bounded by SHUTDOWN_MILLIS) and the reader's thread stopped."""
        provider, self._provider = self._provider, None
        if provider is not None:
            provider.shutdown(timeout_millis=SHUTDOWN_MILLIS)
        self._tls.close()


SDK_LOGGER = "opentelemetry.exporter.otlp"


def _sdk_logs(quiet: bool) -> None:
    """The OTLP exporter's own error lines (one per failed export) off while an outage lasts."""
    logging.getLogger(SDK_LOGGER).setLevel(logging.CRITICAL if quiet else logging.NOTSET)


def _counted_class() -> type:
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    class Counted(MetricExporter):
        """The OTLP exporter, with each failed export counted and said once per outage."""

        def __init__(self, inner: Any, failures: ExportFailures) -> None:
            super().__init__(preferred_temporality=inner._preferred_temporality,
                             preferred_aggregation=inner._preferred_aggregation)
            self._inner, self._failures, self._failing = inner, failures, False

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
            try:
                result = self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            except Exception as e:  # noqa: BLE001 - an exporter bug must not end the reader's thread
                result, why = MetricExportResult.FAILURE, f"{type(e).__name__}: {e}"
            else:
                why = "the receiver refused or did not answer in time"
            if result is MetricExportResult.SUCCESS:
                if self._failing:
                    log.info("otlp export recovered")
                    _sdk_logs(quiet=False)
                self._failing = False
                return result
            self._failures.add(EXPORTER)
            if not self._failing:
                log.warning("otlp export failed", extra={"reason": why})
                _sdk_logs(quiet=True)  # the SDK said why once; each retry of the outage need not
            self._failing = True
            return result

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return self._inner.force_flush(timeout_millis=timeout_millis)

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            self._inner.shutdown(timeout_millis=timeout_millis, **kwargs)

    return Counted


def _counted(inner: Any, failures: ExportFailures) -> Any:
    """``inner`` wrapped in the counting exporter (its class is made once the SDK is loaded)."""
    return _counted_class()(inner, failures)
