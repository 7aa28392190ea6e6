"""What the health judge says of one snapshot: the ``Evaluation`` (a verdict per device, the node
verdict, the sticky faults), published with the snapshot it judged.

A model type, so that the rooms below health that carry it (``sampling.Judge``,
``store.SnapshotStore``) and the outputs beside the health loop name it without importing the
rules (health/detect/rules.py makes these; it re-exports the three verdict types).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from hetero_exporter.model.types import Fault


@dataclass(frozen=True)
class StickyFault:
    """A fault that holds until evidence clears it. ``seen_lost``: the device was really lost
    since (absent, or nothing of it readable: needed for ``readable`` evidence; a failed health
    state alone is not lost). ``recovery_pending``: the vendor's recovery action asked for an
    action since (needed for ``recovery`` evidence: that reading back to none)."""

    fault: Fault
    since: float
    clear_on: frozenset[str]
    level: str  # failed | degraded
    seen_lost: bool = False
    recovery_pending: bool = False


@dataclass(frozen=True)
class Verdict:
    """The health of one device now. ``pending``: warnings seen but not yet confirmed
    (code -> polls seen in the window); ``cleared``: sticky codes cleared by evidence this poll;
    ``cleared_by``: code -> the evidence that cleared it (one of ``policy.CLEAR_EVIDENCE``)."""

    uuid: str
    state: str
    reasons: tuple[Fault, ...] = ()
    pending: Mapping[str, int] = field(default_factory=dict)
    cleared: tuple[str, ...] = ()
    node_level: bool = False  # failed with a node-level class or action
    cleared_by: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeVerdict:
    """The node policy: unhealthy (taint) or not, and why."""

    unhealthy: bool
    taint_class: Optional[str]
    failed: tuple[str, ...]  # uuids
    degraded: tuple[str, ...]
    total: int
    why: str


# uuid -> the device's sticky faults (what must survive an agent restart)
StickyFaults = Mapping[str, list[StickyFault]]


@dataclass(frozen=True)
class Evaluation:
    """What the rules said about one snapshot (``time`` is the snapshot's)."""

    time: float
    verdicts: Mapping[str, Verdict]
    node: NodeVerdict
    sticky: StickyFaults
