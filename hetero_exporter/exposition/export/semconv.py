"""The OpenTelemetry hardware semantic conventions this exporter claims: one table.

Each name the OTLP export sends outside our own ``accelerator.*`` namespace is here, with the
instrument kind and UCUM unit the conventions give it (semantic conventions 1.44.0, all at
stability "development"; model/hardware/{gpu,common,temperature}-metrics.yaml of
github.com/open-telemetry/semantic-conventions, and the generated
``opentelemetry.semconv._incubating.metrics.hw_metrics`` of opentelemetry-semantic-conventions
0.66b2). tests/test_otlp_semconv.py holds this table equal to a checked-in copy of the
conventions' names and checks every ``hw.*`` name a snapshot's points carry against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

GAUGE, COUNTER, UPDOWN = "gauge", "counter", "updowncounter"
VERSION = "1.44.0"


@dataclass(frozen=True)
class Claimed:
    """One conventions metric: instrument kind, UCUM unit, and whether ``hw.type`` must be ``gpu``."""

    kind: str
    unit: str
    gpu_only: bool = False


CLAIMED: Mapping[str, Claimed] = {
    # GPU metrics (hw.gpu.*): "hw.type MUST be set to gpu" (docs/hardware/gpu.md)
    "hw.gpu.utilization": Claimed(GAUGE, "1", gpu_only=True),
    "hw.gpu.memory.usage": Claimed(UPDOWN, "By", gpu_only=True),
    "hw.gpu.memory.limit": Claimed(UPDOWN, "By", gpu_only=True),
    "hw.gpu.memory.utilization": Claimed(GAUGE, "1", gpu_only=True),
    "hw.gpu.io": Claimed(COUNTER, "By", gpu_only=True),
    # common hardware metrics: any component, hw.type required (a custom value MAY be used)
    "hw.power": Claimed(GAUGE, "W"),
    "hw.energy": Claimed(COUNTER, "J"),
    "hw.errors": Claimed(COUNTER, "{error}"),
    "hw.status": Claimed(UPDOWN, "1"),
    # temperature metrics: the component is the sensor (hw.type temperature)
    "hw.temperature": Claimed(GAUGE, "Cel"),
}

# hw.state values the conventions list for a GPU's hw.status (docs/hardware/gpu.md); we report
# the first three, and no state of ours is predicted_failure
STATES = ("ok", "degraded", "failed", "predicted_failure")
# network.io.direction values (hw.gpu.io requires the attribute)
DIRECTIONS = ("receive", "transmit")
# error.type values the conventions give for a GPU's hw.errors
ERROR_TYPES = ("corrected", "uncorrected")
