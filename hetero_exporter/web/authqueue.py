"""Uncached basic-auth checks waiting for a server's one bcrypt thread.

A check costs one bcrypt (about a quarter of a second at the highest cost the web config accepts,
``config.MAX_BCRYPT_COST``). In one FIFO, a flood of distinct wrong passwords put a scraper's
first login behind every one of them, past its scrape timeout. Here:

- every configured user has a lane, and every name that is no user shares one: made-up names
  never wait ahead of a real user's check; the lanes take turns;
- a lane holds at most ``lane_size`` waiting checks, and one per client address (a host cannot
  fill a lane alone);
- identical credentials wait once (a scraper's parallel first scrapes cost one hash);
- a check that does not fit is refused at once (the server answers 503), so an admitted check
  waits for at most ``lane_size`` x (lanes) others.

The price: while the made-up names' lane is full, a known user's check is answered sooner than
an unknown one's, which tells the two apart by queueing (never by hash time: the decoy hash costs
what the users' do). Used on the event loop's thread only, so nothing is locked.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from typing import Callable, Optional

log = logging.getLogger(__name__)

Done = Callable[[bool], None]
LANE_SIZE = 4


@dataclasses.dataclass
class _Check:
    authorization: str
    lane: Optional[str]   # the configured user it names; None for a name that is no user
    peer: str             # the client's address
    waiters: list[Done]


class AuthQueue:
    """``start(authorization, done)`` runs one check off the loop and calls ``done(ok)`` back on
    it; the queue starts the next check when the last one is done."""

    def __init__(self, start: Callable[[str, Done], None], lane_size: int = LANE_SIZE):
        self._start = start
        self._lane_size = lane_size
        self._lanes: collections.OrderedDict[Optional[str], collections.deque[_Check]] = collections.OrderedDict()
        self._checks: dict[str, _Check] = {}  # waiting or running, by their credentials
        self._peers: set[tuple[Optional[str], str]] = set()
        self._running: Optional[_Check] = None

    def __len__(self) -> int:
        """Checks waiting or running."""
        return len(self._checks)

    def submit(self, authorization: str, lane: Optional[str], peer: str, done: Done) -> bool:
        """Queue a check (``done(ok)`` once it ran); False when it does not fit."""
        check = self._checks.get(authorization)
        if check is not None:
            check.waiters.append(done)
            return True
        if len(self._lanes.get(lane, ())) >= self._lane_size or (lane, peer) in self._peers:
            return False
        check = _Check(authorization, lane, peer, [done])
        self._checks[authorization] = check
        self._peers.add((lane, peer))
        self._lanes.setdefault(lane, collections.deque()).append(check)
        self._next()
        return True

    def _next(self) -> None:
        if self._running is not None or not self._lanes:
            return
        lane, waiting = next(iter(self._lanes.items()))
        check = waiting.popleft()
        if waiting:
            self._lanes.move_to_end(lane)  # the other lanes go first next time
        else:
            del self._lanes[lane]
        self._running = check
        self._start(check.authorization, self._finished)

    def _finished(self, ok: bool) -> None:
        check, self._running = self._running, None
        if check is None:
            return
        del self._checks[check.authorization]
        self._peers.discard((check.lane, check.peer))
        for done in check.waiters:
            try:
                done(ok)
            except Exception:  # noqa: BLE001 - one waiter's failure must not stop the queue
                log.exception("error answering after a basic-auth check")
        self._next()
