"""The gRPC side of the health stream: ``HealthStream`` of health_stream.proto on a unix socket.

The only module of the stream that imports grpc (.importlinter names it, and the generated stub
beside it). One thread runs an asyncio loop with a ``grpc.aio`` server; each watch is a coroutine
that drains its queue in the hub (``hub.py``) onto the wire, so a watch costs no thread.

Bounds: ``max_clients`` watches (the hub refuses the next: RESOURCE_EXHAUSTED), grpc's own limit
of concurrent calls above it; requests of at most ``MAX_REQUEST_BYTES``; answers of at most
``max_message_bytes`` (a larger update is split); a write that the client does not take within
``stall_seconds`` (it reads nothing, and the transport's window is full) ends the watch with
RESOURCE_EXHAUSTED; an idle connection (no call) is closed after ``IDLE_SECONDS``, a handshake
(garbage bytes) given up after ``HANDSHAKE_SECONDS``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import grpc
from grpc import aio

from hetero_exporter.health.act.stream import health_stream_pb2 as pb
from hetero_exporter.health.act.stream import health_stream_pb2_grpc as pb_grpc
from hetero_exporter.health.act.stream import messages, socketfile
from hetero_exporter.health.act.stream.hub import EventsWatch, HealthWatch, Hub, Watch
from hetero_exporter.health.act.stream.settings import HealthStreamSettings
from hetero_exporter.model.errors import ExitError

log = logging.getLogger(__name__)

START_SECONDS = 30.0  # the server thread binds within this, or start() fails
STOP_GRACE_SECONDS = 1.0  # calls in flight at close get this long, then are cancelled
JOIN_SECONDS = 10.0
MAX_REQUEST_BYTES = 4096  # a request is a list of vendor names
MAX_VENDORS, MAX_VENDOR_NAME = 32, 64
IDLE_SECONDS = 60  # a connection without a call is closed after this
HANDSHAKE_SECONDS = 10  # bytes that are not HTTP/2 are given up on after this at most
STREAMS_PER_CONNECTION = 8
Message = Union[pb.DeviceHealthUpdate, pb.DeviceEvent]  # what a watch writes


class StreamStartError(ExitError):
    """The server did not start (the socket could not be bound)."""


def _vendors(names: Iterable[str]) -> Optional[frozenset[str]]:
    """The request's vendor filter, or None when it is out of bounds."""
    given = list(names)
    if len(given) > MAX_VENDORS or any(not n or len(n) > MAX_VENDOR_NAME for n in given):
        return None
    return frozenset(given)


class _Servicer(pb_grpc.HealthStreamServicer):
    def __init__(self, hub: Hub, settings: HealthStreamSettings) -> None:
        self.hub = hub
        self.settings = settings

    # context: grpc.aio.ServicerContext (grpc has no types here)
    async def WatchDeviceHealth(self, request: pb.WatchDeviceHealthRequest, context: Any) -> None:
        def drain(w: Watch) -> Sequence[Message]:
            assert isinstance(w, HealthWatch)
            batch = self.hub.take_health(w)
            return [] if batch is None else list(messages.health_updates(
                self.hub.node, batch, self.settings.max_message_bytes))
        await self._serve(request, context, self.hub.watch_health, drain)

    async def WatchDeviceEvents(self, request: pb.WatchDeviceEventsRequest, context: Any) -> None:
        def drain(w: Watch) -> Sequence[Message]:
            assert isinstance(w, EventsWatch)
            return [messages.device_event(self.hub.node, e) for e in self.hub.take_events(w)]
        await self._serve(request, context, self.hub.watch_events, drain)

    async def _serve(self, request: Union[pb.WatchDeviceHealthRequest, pb.WatchDeviceEventsRequest], context: Any,
                     watch: Callable[[frozenset[str], Callable[[], None]], Optional[Watch]],
                     drain: Callable[[Watch], Sequence[Message]]) -> None:
        vendors = _vendors(request.vendors)
        if vendors is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"vendors: at most {MAX_VENDORS} names of 1 to {MAX_VENDOR_NAME} characters")
        assert vendors is not None  # abort raised
        loop = asyncio.get_running_loop()
        news = asyncio.Event()
        w = watch(vendors, lambda: _call_soon(loop, news.set))
        if w is None:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"the health stream serves {self.hub.max_clients} clients at most; try again later")
        assert w is not None  # abort raised
        try:
            while True:
                news.clear()
                out = drain(w)
                if w.closing:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "the agent is stopping; reconnect")
                if w.overflowed:
                    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, _why_dropped(w, self.settings))
                for msg in out:
                    await self._write(context, w, msg)
                if not out:
                    await news.wait()
        finally:
            self.hub.leave(w)

    async def _write(self, context: Any, w: Watch, msg: Message) -> None:
        # asyncio.wait, not wait_for: wait_for (3.10, 3.11) loses the cancellation grpc sends when
        # the client leaves if it meets a finished write, and the watch then waited in the hub for good
        write = asyncio.ensure_future(context.write(msg))
        try:
            done, _ = await asyncio.wait((write,), timeout=self.settings.stall_seconds)
        finally:
            if not write.done():
                write.cancel()
        if write in done:
            write.result()  # a failed write raises here
            return
        self.hub.stalled(w)
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"dropped: the client read nothing for {self.settings.stall_seconds:g} s")


def _why_dropped(w: Watch, settings: HealthStreamSettings) -> str:
    if isinstance(w, EventsWatch):
        return (f"dropped: more than {settings.max_queue} events unread; reconnect to get the open "
                "episodes again")
    return "dropped: the client fell behind"


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[], None]) -> None:
    """``fn`` on ``loop`` from another thread (nothing once the loop is closed)."""
    try:
        loop.call_soon_threadsafe(fn)
    except RuntimeError:
        pass


def _finish(loop: asyncio.AbstractEventLoop) -> None:
    """Let the watches the server cancelled end (their ``finally``: leave the hub), then close."""
    try:
        tasks = asyncio.all_tasks(loop)
        if tasks:
            loop.run_until_complete(asyncio.wait(tasks, timeout=JOIN_SECONDS))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


class StreamServer:
    """``start()`` binds the socket and serves on its own thread; ``close()`` stops and removes it."""

    def __init__(self, settings: HealthStreamSettings, hub: Hub) -> None:
        self.settings = settings
        self.hub = hub
        self._thread: Optional[threading.Thread] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop: Optional[asyncio.Event] = None
        self._ready = threading.Event()
        self._error: Optional[str] = None
        self._bound: Optional[socketfile.Bound] = None

    def options(self) -> list[tuple[str, int]]:
        return [("grpc.max_send_message_length", self.settings.max_message_bytes),
                ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
                ("grpc.max_concurrent_streams", STREAMS_PER_CONNECTION),
                ("grpc.max_connection_idle_ms", IDLE_SECONDS * 1000),
                ("grpc.server_handshake_timeout_ms", HANDSHAKE_SECONDS * 1000),
                ("grpc.keepalive_time_ms", 60_000), ("grpc.keepalive_timeout_ms", 20_000)]

    def start(self) -> None:
        path = self.settings.path
        socketfile.prepare(path)
        self._thread = threading.Thread(target=self._run, name="health-stream", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_SECONDS):
            self._error = self._error or f"not serving after {START_SECONDS:g} s"
        if self._error is not None:
            self.close()
            raise StreamStartError(f"health_stream: cannot serve on {path}: {self._error}")
        self._bound = socketfile.Bound.made(path, self.settings.socket_mode)
        log.info("health stream serving", extra={"socket": path, "max_clients": self.settings.max_clients})

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except Exception as e:  # noqa: BLE001 - said by start(), or logged once serving
            if not self._ready.is_set():
                self._error = str(e) or type(e).__name__
            else:
                log.error("health stream stopped", extra={"error": str(e)[:300]})
        finally:
            self._ready.set()
            _finish(loop)

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = aio.server(options=self.options(), maximum_concurrent_rpcs=2 * self.settings.max_clients + 2)
        pb_grpc.add_HealthStreamServicer_to_server(_Servicer(self.hub, self.settings), server)
        server.add_insecure_port(f"unix:{self.settings.path}")
        await server.start()
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await server.stop(STOP_GRACE_SECONDS)

    def close(self) -> None:
        """Stop serving (watches end, CANCELLED) and remove the socket the server made."""
        self.hub.close()
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            _call_soon(loop, stop.set)
        if self._thread is not None:
            self._thread.join(JOIN_SECONDS)
        if self._bound is not None:
            why = self._bound.remove()
            if why is not None:
                log.warning("health stream socket not removed", extra={"socket": self._bound.path, "error": why})
            self._bound = None

