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

# the Fault.code of an operator's override among a verdict's reasons (its last_seen: when it ends),
# and of a device held ``recovering`` by its class's recovery gate (health/detect/override.py, gate.py)
OVERRIDE_CODE = "operator-override"
GATE_CODE = "recovery-gate"


@dataclass(frozen=True)
class OverrideNote:
    """An operator's override of one device, as the judge read it from the Node's
    ``<domain>/health-override`` annotation: ``state`` (ok | failed) until ``until`` (Unix
    seconds), set by ``by`` at ``at`` for ``reason``. ``expired``: its time has passed."""

    uuid: str
    state: str
    until: float
    reason: str
    by: str
    at: float = 0.0
    expired: bool = False

    @property
    def key(self) -> str:
        """What makes it this override (a new one for the same device is another)."""
        return f"{self.state}/{self.until:.0f}/{self.by}/{self.at:.0f}"


@dataclass(frozen=True)
class GateHold:
    """A device the recovery gate watches: failed since ``failed_at`` (evidence must be newer),
    ``recovering_since`` when it stopped being failed (None while it still is)."""

    failed_at: float
    recovering_since: Optional[float] = None


@dataclass(frozen=True)
class GateResult:
    """A recovery gate's answer for one device: ``passed``, at ``time`` (Unix seconds), and what
    it said (the exec's last line or exit, or the evidence annotation's result)."""

    passed: bool
    time: float
    detail: str


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
    override: Optional[OverrideNote] = None  # the operator's override this verdict honours


@dataclass(frozen=True)
class NodeVerdict:
    """The node policy: unhealthy (taint) or not, and why."""

    unhealthy: bool
    taint_class: Optional[str]
    failed: tuple[str, ...]  # uuids
    degraded: tuple[str, ...]
    total: int
    why: str
    culprits: tuple[str, ...] = ()  # the failed devices that make the node unhealthy (uuids)


# uuid -> the device's sticky faults (what must survive an agent restart)
StickyFaults = Mapping[str, list[StickyFault]]


@dataclass(frozen=True)
class Occurrences:
    """The occurrences of one fault code on one device that a promotion rule (``health.promote``)
    counts: their times (Unix seconds, oldest first, those within the longest window of the rules
    matching the code), and ``active``: the code was among the device's active conditions when
    last seen (so its first sighting after an agent restart is not counted as a new event)."""

    times: tuple[float, ...] = ()
    active: bool = False


# uuid -> code -> its occurrences (kept on the Node with the sticky faults)
OccurrenceBook = Mapping[str, Mapping[str, Occurrences]]


@dataclass(frozen=True)
class Evaluation:
    """What the rules said about one snapshot (``time`` is the snapshot's)."""

    time: float
    verdicts: Mapping[str, Verdict]
    node: NodeVerdict
    sticky: StickyFaults
    overrides: tuple[OverrideNote, ...] = ()  # every well-formed override the Node carries, expired ones too
    holds: Mapping[str, GateHold] = field(default_factory=dict)  # uuid -> the recovery gate's watch (gate.py)
    occurrences: OccurrenceBook = field(default_factory=dict)  # counted by health.promote (survive a restart)
    # (vendor, code, to) -> promotions since the agent started (accelerator_health_promotions_total)
    promotions: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
