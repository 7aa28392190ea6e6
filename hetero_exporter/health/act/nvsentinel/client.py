"""The one gRPC call of the bridge: ``PlatformConnector.HealthEventOccurredV1`` on a unix socket.

The only module of the bridge that imports grpc (.importlinter names it, and the generated
stub beside it, as the exceptions to "readers-see-only-the-model"). Every call has a
deadline; a failed call closes the channel, so the next try connects afresh (no reconnect
backoff of grpc's own in the way once the socket is back; the bridge keeps its own).
"""

from __future__ import annotations

import threading
from typing import Any, Mapping, Optional, Sequence

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from hetero_exporter.health.act.nvsentinel import health_event_pb2 as pb
from hetero_exporter.health.act.nvsentinel import health_event_pb2_grpc as pb_grpc

HEALTH_EVENTS_VERSION = 1
CHANNEL_OPTIONS = (
    ("grpc.enable_retries", 0),  # the bridge retries, with its own backoff and counting
    ("grpc.enable_http_proxy", 0),
    ("grpc.max_receive_message_length", 64 << 10),  # the answer is google.protobuf.Empty
)
# statuses saying the events themselves are refused (the same answer on every try)
REFUSED = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE})
# statuses of a call that reached the peer's handler, which may have stored the events before
# failing or answering late: a resend may be a copy (UNAVAILABLE and the rest: never delivered)
REACHED = frozenset({grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL,
                     grpc.StatusCode.ABORTED, grpc.StatusCode.DATA_LOSS})


class SendError(Exception):
    """A call that did not deliver; ``refused``: the peer refused the events themselves;
    ``reached``: the peer may have stored them (a late answer: the deadline passed first);
    ``late``: the deadline passed."""

    def __init__(self, message: str, refused: bool = False, reached: bool = False, late: bool = False) -> None:
        super().__init__(message)
        self.refused, self.reached, self.late = refused, reached, late


def to_message(fields: Mapping[str, Any]) -> Any:
    """A ``HealthEvent`` from ``episodes.Event.fields`` (enums by name, time in Unix seconds)."""
    ts = Timestamp()
    ts.FromNanoseconds(int(round(float(fields["generatedTimestamp"]) * 1e9)))
    return pb.HealthEvent(
        version=fields["version"], agent=fields["agent"], componentClass=fields["componentClass"],
        checkName=fields["checkName"], isFatal=fields["isFatal"], isHealthy=fields["isHealthy"],
        message=fields["message"], recommendedAction=pb.RecommendedAction.Value(fields["recommendedAction"]),
        errorCode=list(fields["errorCode"]),
        entitiesImpacted=[pb.Entity(entityType=t, entityValue=v) for t, v in fields["entitiesImpacted"]],
        metadata=dict(fields["metadata"]), generatedTimestamp=ts, nodeName=fields["nodeName"],
        processingStrategy=pb.ProcessingStrategy.Value(fields["processingStrategy"]))


class PlatformConnectorClient:
    """``send(events)`` to ``target`` (``unix:///var/run/nvsentinel.sock``) within ``timeout`` seconds."""

    def __init__(self, target: str, timeout: float) -> None:
        self.target = target
        self.timeout = timeout
        self._lock = threading.Lock()
        self._channel: Optional[grpc.Channel] = None
        self._call: Any = None
        self._closed = False

    def _callable(self) -> Any:
        with self._lock:
            if self._closed:
                raise SendError("the bridge is closing")
            if self._channel is None:
                self._channel = grpc.insecure_channel(self.target, options=CHANNEL_OPTIONS)
                self._call = pb_grpc.PlatformConnectorStub(self._channel).HealthEventOccurredV1
            return self._call

    def send(self, events: Sequence[Mapping[str, Any]], timeout: Optional[float] = None) -> None:
        """Deliver ``events`` (``Event.fields``) in one call within ``timeout`` seconds (default
        the client's); SendError when not delivered."""
        batch = pb.HealthEvents(version=HEALTH_EVENTS_VERSION, events=[to_message(f) for f in events])
        call = self._callable()
        try:
            call(batch, timeout=timeout or self.timeout)
        except grpc.RpcError as e:
            self._drop_channel()
            code = e.code() if hasattr(e, "code") else None
            details = e.details() if hasattr(e, "details") else str(e)
            name = code.name if code is not None else "UNKNOWN"
            raise SendError(f"{name}: {details}"[:500], refused=code in REFUSED, reached=code in REACHED,
                            late=code == grpc.StatusCode.DEADLINE_EXCEEDED) from None

    def _drop_channel(self) -> None:
        with self._lock:
            channel, self._channel, self._call = self._channel, None, None
        if channel is not None:
            channel.close()

    def close(self) -> None:
        """Close the channel (a call in flight ends at once, CANCELLED); no call after this."""
        with self._lock:
            self._closed = True
        self._drop_channel()
