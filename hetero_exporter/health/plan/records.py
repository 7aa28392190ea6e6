"""The records the agent keeps on its Node, in the book's JSON (``book.py``) and its outbox: wire
formats, so TypedDicts (the JSON is written and read as these dicts, byte for byte). A book read
back from the Node is hostile: its readers check each record (``Book.from_annotation``,
``pod_signals._record``) or read it with defaults.
"""

from __future__ import annotations

from typing import Any, NotRequired, Optional, TypedDict


class TaintRecord(TypedDict):
    """Our taint on the Node: its value and effects, since when, and whether it was written
    (False: a dry-run's, planned only)."""

    value: str
    effects: list[str]
    applied: bool
    since: float
    classes: NotRequired[list[str]]  # the device classes it is for (health.classes; budget shares count them)


class AnnouncedDevice(TypedDict):
    """A device the announcements said is failed or degraded (``announce.py``), until it recovers:
    the fault codes and classes announced in its episode, since when."""

    codes: list[str]
    classes: list[str]
    state: str
    since: float
    vendor: str
    index: int


class PodTarget(TypedDict):
    """The Pod an outbox event is about (a node event has none)."""

    namespace: str
    name: str
    uid: str


class OutboxEvent(TypedDict):
    """An event of the outbox: its name part ``id`` is fixed before it is sent (a resend is
    AlreadyExists); ``action``: Fault | Recover | Taint (the event's action field)."""

    id: str
    type: str
    reason: str
    message: str
    action: str
    time: float
    pod: NotRequired[PodTarget]


class StickyRecord(TypedDict):
    """A sticky fault of the rules, to survive an agent restart (``book.sticky_to_json``)."""

    fault: dict[str, Any]  # model.to_dict of the Fault
    since: float
    clear_on: list[str]
    level: str
    lost: bool
    recovery_pending: bool


class OccurrenceRecord(TypedDict):
    """The occurrences of one fault code that health.promote counts (``book.occurrences_to_json``):
    their times (Unix seconds, oldest first) and whether the code was an active condition."""

    times: list[float]
    active: bool


class PodRecord(TypedDict):
    """A pod holding failed devices, signalled once per episode (``pod_signals.py``)."""

    uid: str
    devices: list[str]
    since: float
    status: str  # the pod condition's: False while it holds a failed device, True once recovered
    reason: str
    message: str
    evicted: bool
    recovered_at: Optional[float]
    evict_failures: int
    evict_retry_at: float


class BlackHoleState(TypedDict, total=False):
    """The black-hole detector's memory: when each allocatable shortfall was first seen, and the
    node faults announced (code -> since), Unix seconds."""

    shortfall: dict[str, float]
    announced: dict[str, float]
    stack: dict[str, float]  # stack.py: "seen:<problem>" first seen, "told:<problem>" announced since
