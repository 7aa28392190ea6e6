"""OpenMetrics against the real Prometheus (the Debian package's), exemplar storage on (issue 39 §3):
Prometheus negotiates OpenMetrics, the fault counter's exemplar is queryable, the counters'
created times arrive and a device reset renews them.

What Debian's Prometheus (2.42) does with created times: it knows no ``created-timestamp-zero-ingestion``
feature (asked for here, it logs "Unknown option for --enable-feature" and goes on) and stores each
``_created`` line as a series of its own (``accelerator_energy_joules_created``, the created time
as its value). A Prometheus with the feature takes them as a zero sample at the created time
instead; the test accepts either."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry

from conftest import require_tool
from prometheus_proc import Prometheus
from hetero_exporter.exposition.collector import SnapshotCollector
from hetero_exporter.exposition.server import MetricsServer
from hetero_exporter.model import DeviceIdentity, DeviceSample, Fault, NodeSnapshot, Quality, Reading

pytestmark = pytest.mark.integration

Q = Quality("test", "measured", None, 1.0)
EVENT = "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _snap(t: float, energy: float, fault: Fault) -> NodeSnapshot:
    gpu = DeviceSample(DeviceIdentity("nvidia", "gpu", 0, "GPU-1", "H100-SXM5-80GB", "0000:18:00.0", 0, "550.54.15"),
                       t, {"energy_joules_total": Reading(energy, Q), "utilization_ratio": Reading(0.5, Q)},
                       faults=(fault,))
    return NodeSnapshot(node="n", time=t, devices=(gpu,))


def _created(prom: Prometheus) -> float | None:
    """The energy counter's created time as this Prometheus stores it, or None yet."""
    got = prom.query("accelerator_energy_joules_created")
    if got:
        return float(got[0]["value"][1])
    data = prom.api("query", query="accelerator_energy_joules_total[10m]")  # a zero sample at the created time
    zeros = [float(t) for series in data["result"] for t, v in series["values"] if float(v) == 0]
    return max(zeros) if zeros else None


def test_prometheus_scrapes_openmetrics_with_exemplars_and_created_times():
    binary = require_tool("prometheus")
    now = time.time()
    boot, started = now - 3600, now - 60
    fault = Fault("79", "gpu-lost", "reset-device", message=EVENT, count=1, last_seen=now - 5, source="kmsg")
    state = {"snap": _snap(now, 5000.0, fault)}
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: state["snap"], started=started, boot=boot))
    server = MetricsServer("127.0.0.1:0", reg, lambda: state["snap"]).start()
    try:
        host, port = server.address
        with Prometheus(binary, {"n": f"{host}:{port}"},
                        features=("exemplar-storage", "created-timestamp-zero-ingestion")) as prom:
            def exemplars() -> list:
                return prom.api("query_exemplars", query="accelerator_fault_events_total",
                                start=now - 600, end=time.time() + 600)
            # exemplars exist in OpenMetrics only: their arrival says Prometheus negotiated it
            prom.wait_for(lambda: bool(exemplars()), 120, "the fault counter's exemplar")
            ex = exemplars()[0]
            assert ex["seriesLabels"]["code"] == "79"
            first = ex["exemplars"][0]
            assert first["labels"] == {"source": "kmsg", "event": EVENT}
            assert abs(float(first["timestamp"]) - (now - 5)) < 0.01 and float(first["value"]) == 1

            prom.wait_for(lambda: _created(prom) is not None, 120, "the energy counter's created time")
            assert _created(prom) == pytest.approx(boot, abs=0.01)  # since the driver loaded: the boot

            reset_at = time.time()
            state["snap"] = _snap(reset_at, 12.0, fault)  # the GPU was reset: its energy starts again
            prom.wait_for(lambda: (_created(prom) or 0) > boot + 1, 120, "the renewed created time")
            assert _created(prom) == pytest.approx(reset_at, abs=0.01)
    finally:
        server.stop()
