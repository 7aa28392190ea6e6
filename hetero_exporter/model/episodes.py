"""The fault episode: the one notion the SDK's onset counting, the health announcements and the
NVSentinel bridge share.

A fault (named by a key: its code; for the announcements, its class) is in an episode on a device
from the first observation that shows it active, where the observation before did not, until the
first observation that shows the device without it. An episode that opens is one occurrence
(``accelerator_fault_events_total`` counts onsets, not polls: ``sdk.cli_collector.FaultEpisodes``),
one announcement (``health/plan/announce.py``: a new class of fault on a device), one unhealthy
HealthEvent (``health/act/nvsentinel/episodes.py``); one that closes is one recovery. What an
observation is (a poll of the tool, a judged snapshot's verdict) and which data decides nothing
(a device that cannot be read) is each user's to say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Hashable, Iterable, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Change(Generic[K]):
    """One observation of a device against the episodes open before it (keys in the order given, once)."""

    opened: tuple[K, ...]  # active now, not before: an onset each
    held: tuple[K, ...]  # active before and now: the same episode
    closed: tuple[K, ...]  # active before, not now: over


def change(before: Iterable[K], now: Iterable[K]) -> Change[K]:
    """The episodes that open, go on and close when a device shows ``now`` after ``before``."""
    was, now_keys = dict.fromkeys(before), dict.fromkeys(now)
    return Change(opened=tuple(k for k in now_keys if k not in was), held=tuple(k for k in now_keys if k in was),
                  closed=tuple(k for k in was if k not in now_keys))
