"""The agent's background services behind one start/close interface.

Each service (the kernel-log follower, the pod cache, the PodResources poller, the simulated
kubelet, the ResourceSlice cache, the udev watch, the health loop, the metrics server) is
started through ``Services.start`` and closed by ``Services.close``, newest first, exactly once,
so no thread outlives the agent and no service is built twice.
"""

from __future__ import annotations

import logging
from typing import Callable, TypeVar

log = logging.getLogger("hetero_exporter")

T = TypeVar("T")


class Services:
    def __init__(self) -> None:
        self._open: list[tuple[str, Callable[[], None]]] = []

    def start(self, name: str, start: Callable[[], T], close: Callable[[], None]) -> T:
        """``start()``'s result; ``close`` runs at ``close()`` (not when ``start`` raised)."""
        value = start()
        self._open.append((name, close))
        return value

    def add(self, name: str, close: Callable[[], None]) -> None:
        """A service that started itself (its start call says whether it did): ``close`` at ``close()``."""
        self._open.append((name, close))

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self._open]

    def close(self) -> None:
        """Close every started service, newest first; one that fails is logged, the rest still close."""
        while self._open:
            name, close = self._open.pop()
            try:
                close()
            except Exception:  # noqa: BLE001 - shutting down anyway
                log.debug("closing %s failed", name, exc_info=True)
