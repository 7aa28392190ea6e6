"""``HealthStream``: the local health stream as the agent runs it (offer / start / close).

``offer(snapshot, evaluation)`` (a ``SnapshotStore`` subscriber, like the health loop's and the
NVSentinel bridge's) folds the judged snapshot into the hub and wakes the watches that have news;
it never waits on a client. ``start()`` imports grpc and serves (``server.py``); ``metrics`` is the
prometheus_client collector of the stream's families.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from hetero_exporter.health.act.stream.hub import Hub
from hetero_exporter.health.act.stream.settings import HealthStreamSettings
from hetero_exporter.model import NodeSnapshot
from hetero_exporter.model.errors import ExitError
from hetero_exporter.model.evaluation import Evaluation

if TYPE_CHECKING:  # imports grpc: only start() does at run time
    from hetero_exporter.health.act.stream.server import StreamServer


class HealthStreamUnavailable(ExitError):
    """The stream is configured but its gRPC libraries are not installed."""


class HealthStream:
    """Every device's verdict and the fault episodes, to the clients of a unix socket.

    ``ready()``: False while the judge still lacks the sticky faults an earlier agent recorded
    (the health loop's ``Remedy.restored``): snapshots offered until then, and the first after,
    say nothing, so a restart never streams a failed device as ok for a cycle."""

    def __init__(self, settings: HealthStreamSettings, node: str,
                 ready: Optional[Callable[[], bool]] = None) -> None:
        self.settings = settings
        self.hub = Hub(node, settings.max_clients, settings.max_queue)
        self._ready = ready
        self._restoring = False
        self._server: Optional["StreamServer"] = None

    @property
    def metrics(self) -> Hub:
        return self.hub

    def offer(self, snapshot: NodeSnapshot, evaluation: Optional[Evaluation]) -> None:
        """Fold one judged snapshot in (an unjudged one, ``evaluation`` None, says nothing)."""
        if evaluation is None:
            return
        if self._ready is not None and not self._ready():
            self._restoring = True
        elif self._restoring:  # judged before the restore had finished: the next one counts
            self._restoring = False
        else:
            self.hub.offer(snapshot, evaluation)

    def start(self) -> None:
        """Serve on the socket. HealthStreamUnavailable (one line, exit 1) without grpcio/protobuf;
        SocketPathError (exit 2) when the path holds something that is not a stale socket."""
        if self._server is not None:
            return
        try:
            from hetero_exporter.health.act.stream.server import StreamServer
        except ImportError as e:
            raise HealthStreamUnavailable(f"health_stream: the stream needs grpcio and protobuf ({e}); "
                                          "pip install 'hetero-exporter[all]'") from None
        server = StreamServer(self.settings, self.hub)
        server.start()
        self._server = server

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
