"""A bounded HTTP/1.1 server: an asyncio loop in one background thread frames requests with
``h11``; complete requests run on a small thread pool, so idle connections cost no thread and a
CPU-bound handler never blocks the loop.

Limits (``Limits``; every one is a bound on what a client can hold):

- ``max_connections`` open connections (clamped to half the process's open-file limit). A new
  connection over the cap makes room by closing, in this order, one that is lingering after an
  error answer, the oldest one sending a body that cannot be whole by ``body_timeout`` (below
  ``min_body_rate``, or announcing more than its rate so far brings in the time left: a sender
  just above the floor is no better), the one reading its request head for longest (once past
  ``evict_slow_head_after``: a slowloris), the one idle longest (fresh, or keep-alive between
  requests), or the body sender whose body would be whole last; only when every connection is
  being answered or is reading a head for less than ``evict_slow_head_after`` does the new one
  get ``503`` (closed at once). So probes and a good client are served however many slow, idle
  or body-sending clients hold slots.
- ``header_bytes`` of request line and headers (``431``); ``max_body_bytes`` per request
  (``413``, answered from ``Content-Length`` before the body is read) and
  ``max_pending_body_bytes`` buffered across all connections (``503``).
- ``header_timeout`` from accept, or from the first byte of a later request (``408``);
  ``idle_timeout`` between keep-alive requests; ``body_timeout`` from the end of the headers
  to the end of the body, and ``min_body_rate`` bytes a second on average from the first
  second on (``408`` either way: a body trickled at 1 byte/s holds its slot
  about a second, not ``body_timeout``); ``write_timeout`` to hand the whole response to the kernel
  (a slow reader is dropped); ``tls_handshake_timeout``.

The handler is a plain callable ``handle(Request) -> Response`` run on the pool; an exception
becomes a ``500`` (logged). ``WebSettings`` add TLS, basic auth (checked on the loop from a
cache; bcrypt on its own thread, fed by ``authqueue.AuthQueue``: what does not fit gets ``503``),
extra headers and a rate limit (``web.config``). The rate limit is for the anonymous: probes,
a client whose basic auth checks out (cached or not) and, without basic auth, a client with a
verified certificate are never limited, so a flood that drains the bucket starves only itself.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import contextlib
import dataclasses
import errno
import http
import logging
import math
import resource
import signal
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Protocol, Sequence, TypeVar, Union

import h11

if TYPE_CHECKING:
    from hetero_exporter.web.authqueue import AuthQueue

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024          # bytes handed to the transport at once (flow control in between)
_READ_BUFFER = 64 * 1024    # one shared receive buffer per server (the loop reads one socket at a time)
_LINGER_SECONDS = 1.0       # after an error answer, keep reading (and discarding) this long ...
_LINGER_BYTES = 256 * 1024  # ... or this much, so the client reads the answer instead of a reset
_ACCEPT_BATCH = 64          # connections accepted per readiness event
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
         b"Content-Length: 5\r\nRetry-After: 1\r\nConnection: close\r\n\r\nbusy\n")
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_WARN_EVERY = 60.0          # seconds between two "connection cap reached" warnings
_BODY_GRACE = 1.0           # seconds before a body below min_body_rate is answered 408


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-server bounds; times in seconds, sizes in bytes."""
    max_connections: int = 128
    evict_slow_head_after: float = 1.0  # a head still incomplete after this may be closed for room
    header_bytes: int = 16 * 1024
    header_timeout: float = 10.0
    idle_timeout: float = 120.0  # > a 1-minute scrape interval: Prometheus keeps its connection
    body_timeout: float = 30.0
    max_body_bytes: int = 64 * 1024
    min_body_rate: int = 16 * 1024  # bytes/s averaged since the end of the head
    max_pending_body_bytes: Optional[int] = None  # default: 4 x max_body_bytes
    write_timeout: float = 30.0
    tls_handshake_timeout: float = 10.0
    workers: int = 4

    def pending_body_budget(self) -> int:
        return self.max_pending_body_bytes if self.max_pending_body_bytes is not None else 4 * self.max_body_bytes


@dataclasses.dataclass(frozen=True)
class Request:
    method: str                  # upper case: "GET", "POST", ...
    path: str                    # the target's path, without the query
    query: str                   # the raw query string ("" when none)
    headers: Mapping[str, str]   # lower-case names; repeated headers joined with ", "
    body: bytes
    peer: Any                    # the client's socket address


Body = Union[bytes, Sequence[bytes]]  # one buffer, or chunks sent in turn (no joining copy)


@dataclasses.dataclass(frozen=True)
class Response:
    status: int
    body: Body = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: Sequence[tuple[str, str]] = ()

    @classmethod
    def text(cls, status: int, text: str, headers: Sequence[tuple[str, str]] = ()) -> "Response":
        return cls(status, text.encode(), headers=headers)


class Authenticator(Protocol):
    """Basic auth as the server uses it (``web.config.BasicAuth``)."""

    def cached(self, authorization: Optional[str]) -> Optional[bool]:
        """The verdict without hashing, or None when a slow check is needed."""

    def verify(self, authorization: Optional[str]) -> bool:
        """The slow check (bcrypt); runs on its own thread."""

    def user(self, authorization: Optional[str]) -> Optional[str]:
        """The configured user the header names (None: no such user); cheap, no hashing."""


@dataclasses.dataclass(frozen=True)
class WebSettings:
    """What a web configuration file adds to a server (``web.config.load`` builds it)."""
    ssl_context: Optional[Callable[[], Any]] = None   # -> the current ssl.SSLContext (certificates reload)
    allowed_sans: tuple[str, ...] = ()                # client certificate SANs accepted (empty: any verified)
    auth: Optional[Authenticator] = None
    headers: tuple[tuple[str, str], ...] = ()
    rate_limit: Optional[tuple[int, float]] = None    # (burst, seconds per request)
    certificate_expiry: Optional[Callable[[], Optional[float]]] = None  # -> served cert's notAfter, Unix s


_INTERNAL = Response(500, b"internal error\n")
_AUTH_BUSY = Response(503, b"too many logins being checked; retry\n", headers=(("Retry-After", "1"),))
_UNAUTHORIZED = Response(401, b"Unauthorized\n",
                         headers=(("WWW-Authenticate", 'Basic realm="hetero-exporter", charset="UTF-8"'),))


_Face = TypeVar("_Face", bound="ServerFace")


class ServerFace:
    """The public side of a server built on HttpServer (``self._http``): address, start, stop."""
    _http: "HttpServer"

    @property
    def address(self) -> tuple[str, int]:
        return self._http.address

    @property
    def http(self) -> "HttpServer":
        return self._http

    def start(self: _Face) -> _Face:
        self._http.start()
        return self

    def stop(self) -> None:
        self._http.stop()


# Servers not stopped when the interpreter exits (a command left by an exception or a signal,
# perhaps between construction and start): stopped at exit, so no event loop is left to a
# __del__ during interpreter teardown (it prints "Exception ignored ... Traceback" to stderr).
# Strong references: a server dropped by a frame a signal unwound must still be stopped here.
_running: "set[HttpServer]" = set()


@atexit.register
def _stop_running() -> None:
    for server in list(_running):
        server.stop()


class HttpServer:
    """Serves ``handler`` on (host, port) from a background thread; port 0 picks a free one.

    ``public_paths`` are served without basic auth (liveness and readiness probes); TLS, when
    configured, applies to every path. ``serial_paths`` are handled one at a time, in the order
    they came, on a thread of their own (CPU-bound handlers: several at once under one GIL only
    contend for it); the other paths keep the ``limits.workers`` threads. ``stats`` counts
    refusals, evictions and timeouts."""

    def __init__(self, address: tuple[str, int], handler: Callable[[Request], Response], *,
                 limits: Limits = Limits(), web: Optional[WebSettings] = None,
                 public_paths: Sequence[str] = (), serial_paths: Sequence[str] = (), name: str = "http"):
        self.handler = handler
        self.limits = limits
        self.web = web or WebSettings()
        self.public_paths = frozenset(public_paths)
        self.serial_paths = frozenset(serial_paths)
        self.name = name
        self.max_connections = _clamp_to_fd_limit(limits.max_connections)
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.create_server((host, port), family=family, backlog=128)
        self._address = self._sock.getsockname()[:2]
        with _stop_signals_held():  # a loop half made by a signal fails in its __del__, loudly
            self._loop = asyncio.new_event_loop()
            _running.add(self)  # from here on, a loop to close at exit even if start() never runs
        try:
            self._init_rest(limits, name)
        except BaseException:  # a signal (SystemExit) or an error half-way: nothing left open
            _running.discard(self)
            self._sock.close()
            self._loop.close()
            raise

    def _init_rest(self, limits: Limits, name: str) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max(1, limits.workers), thread_name_prefix=name)
        self._serial = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"{name}-serial") \
            if self.serial_paths else self._pool
        self._bcrypt = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"{name}-auth")
        self.auth_queue: Optional["AuthQueue"] = None
        auth = self.web.auth
        if auth is not None:
            from hetero_exporter.web.authqueue import AuthQueue  # only with basic auth: not on the start-up path
            self.auth_queue = AuthQueue(lambda header, done: self.submit(self._bcrypt, auth.verify, header, done,
                                                                         failed=False))
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._accepting = False
        self._conns: dict["_Connection", None] = {}   # open connections, oldest first
        # evictable connections, each pool oldest first: answered and closing (the first to go),
        # sending a body (once below min_body_rate), reading a request head (a slowloris, once
        # slower than evict_slow_head_after), idle between requests (or fresh, nothing sent yet)
        self._lingering: dict["_Connection", None] = {}
        self._bodies: dict["_Connection", float] = {}  # -> when its body began (loop time)
        self._heads: dict["_Connection", float] = {}  # -> when its head began (loop time)
        self._idle: dict["_Connection", None] = {}
        self._pending_body = 0
        self._bucket = _TokenBucket(*self.web.rate_limit) if self.web.rate_limit else None
        self._read_buffer = bytearray(_READ_BUFFER)
        self._read_view = memoryview(self._read_buffer)
        self._warned: dict[str, float] = {}
        self._started = threading.Event()
        self._start_error: Optional[BaseException] = None
        self._stopped = False
        self.stats: collections.Counter[str] = collections.Counter()

    @property
    def address(self) -> tuple[str, int]:
        return self._address

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    def start(self) -> "HttpServer":
        self._thread.start()
        self._started.wait(30)
        if self._start_error is not None:
            raise self._start_error
        return self

    def stop(self) -> None:
        """Stop serving and wait for the loop thread. Called again (at exit, after a signal cut
        the first call's wait short), it waits again: a loop still running at interpreter
        teardown would be closed by its __del__, which fails and prints a traceback."""
        first = not self._stopped
        self._stopped = True
        if self._thread.is_alive():
            if first:
                self._loop.call_soon_threadsafe(self._shutdown)
            self._thread.join(10)
        elif first:
            self._sock.close()
            if not self._loop.is_running():
                self._loop.close()
        if first:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._serial.shutdown(wait=False, cancel_futures=True)
            self._bcrypt.shutdown(wait=False, cancel_futures=True)
        if not self._thread.is_alive():
            _running.discard(self)

    # ----------------------------------------------------------------- loop thread

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        loop.set_exception_handler(self._loop_exception)
        try:
            self._sock.setblocking(False)
            self._start_accepting()
        except BaseException as e:  # noqa: BLE001 - re-raised by start()
            self._start_error = e
            return
        finally:
            self._started.set()
        loop.run_forever()
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.close()

    def _shutdown(self) -> None:
        self._stop_accepting()
        self._sock.close()
        for conn in list(self._conns):
            conn.abort()
        self._loop.stop()

    # Our own accept loop rather than loop.create_server: a connection over the cap is refused
    # before any transport is made, and out of descriptors (EMFILE) we pause one second per
    # failure, where CPython 3.11's loop retries its whole accept batch and schedules a resume
    # per failed try.
    def _start_accepting(self) -> None:
        if not self._accepting and not self._stopped:
            self._accepting = True
            self._loop.add_reader(self._sock.fileno(), self._accept)

    def _stop_accepting(self) -> None:
        if self._accepting:
            self._accepting = False
            self._loop.remove_reader(self._sock.fileno())

    def _accept(self) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, _addr = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                self._out_of_resources(exc)
                return
            sock.setblocking(False)
            if self._stopped or not self._make_room():
                self._refuse(sock)
                continue
            conn = _Connection(self)  # counted (and evictable, as idle) before its transport exists
            self._conns[conn] = None
            self.place(conn, "idle")
            self._loop.create_task(self._connect(conn, sock))

    async def _connect(self, conn: "_Connection", sock: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(lambda: conn, sock)
        except OSError as e:
            log.debug("connection lost while set up", extra={"server": self.name, "error": str(e)})
            sock.close()
            self.forget(conn)

    def _out_of_resources(self, exc: OSError) -> None:
        if exc.errno not in _OUT_OF_RESOURCES:
            log.warning("accept failed: %s", exc, extra={"server": self.name})
            return
        self.stats["accept_out_of_resources"] += 1
        self._stop_accepting()
        self._loop.call_later(1.0, self._start_accepting)
        self.warn_every("resources", f"cannot accept connections: {exc.strerror}; retrying every second",
                        times=self.stats["accept_out_of_resources"])

    def _make_room(self) -> bool:
        """Room for one more connection: close one lingering, else the oldest body sender that
        cannot make the deadline, else the slowest request head (slower than
        evict_slow_head_after), else the longest idle, else the body that would be whole last;
        else refuse."""
        if len(self._conns) < self.max_connections:
            return True
        now = self._loop.time()
        doomed = self._doomed_body(now)
        if self._lingering:
            victim = next(iter(self._lingering))
            victim.abort()
        elif doomed is not None:
            victim = doomed
            self.stats["evicted_slow_body"] += 1
            victim.abort()
        elif self._heads and now - next(iter(self._heads.values())) >= self.limits.evict_slow_head_after:
            victim = next(iter(self._heads))
            self.stats["evicted_slow"] += 1
            victim.abort()
        elif self._idle:
            victim = next(iter(self._idle))
            self.stats["evicted"] += 1
            victim.close(graceful=True)
        elif self._bodies:
            # every slot is a body on its way or an answer: a probe or a scheduler call is worth
            # more than the body furthest from done (its sender may try again)
            victim = max(self._bodies, key=lambda conn: conn.body_end(now))
            self.stats["evicted_body"] += 1
            victim.abort()
        else:
            self.stats["refused"] += 1
            self.warn_every("cap", "connection cap reached: refusing new connections",
                            max_connections=self.max_connections, refused=self.stats["refused"])
            return False
        self.forget(victim)
        return True

    def _doomed_body(self, now: float) -> Optional["_Connection"]:
        """The oldest connection sending a body that cannot be whole by body_timeout; None when
        every body sender can still make it. No age floor: a flood that reconnects in waves would
        otherwise hold every slot while its bodies are young, and a real client's body
        (kube-scheduler sends it in one burst) is either complete or younger than the flood's."""
        return next((conn for conn in self._bodies if conn.body_doomed(now)), None)

    def _refuse(self, sock: socket.socket) -> None:
        try:
            if self.web.ssl_context is None:
                sock.send(_BUSY)
        except OSError:
            pass
        sock.close()


    def forget(self, conn: "_Connection") -> None:
        self._conns.pop(conn, None)
        self.place(conn, None)

    def place(self, conn: "_Connection", pool: Optional[str]) -> None:
        """Move conn to the end of an eviction pool ("idle", "head", "body", "lingering"), or out
        of them."""
        self._idle.pop(conn, None)
        self._heads.pop(conn, None)
        self._bodies.pop(conn, None)
        self._lingering.pop(conn, None)
        if pool == "idle":
            self._idle[conn] = None
        elif pool == "head":
            self._heads[conn] = self._loop.time()
        elif pool == "body":
            self._bodies[conn] = self._loop.time()
        elif pool == "lingering":
            self._lingering[conn] = None

    def reserve_body(self, n: int) -> bool:
        if self._pending_body + n > self.limits.pending_body_budget():
            return False
        self._pending_body += n
        return True

    def release_body(self, n: int) -> None:
        self._pending_body -= n

    def take_token(self) -> bool:
        return self._bucket is None or self._bucket.take(self._loop.time())

    def warn_every(self, key: str, message: str, **extra: Any) -> None:
        """A warning at most once a minute per key: an attack must not flood the log."""
        now = time.monotonic()
        if now - self._warned.get(key, -_WARN_EVERY) >= _WARN_EVERY:
            self._warned[key] = now
            log.warning(message, extra={"server": self.name, **extra})

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        """asyncio's error reports as our log lines; a peer's reset or a failed TLS handshake is
        debug only."""
        exc = context.get("exception")
        if isinstance(exc, (OSError, asyncio.CancelledError)):
            log.debug("connection error: %s", context.get("message"), exc_info=exc)
        else:
            log.error("event loop error: %s", context.get("message"), exc_info=exc)

    def submit(self, pool: concurrent.futures.Executor, fn: Callable[..., Any], arg: Any,
               done: Callable[[Any], None], failed: Any = None) -> None:
        """Run fn(arg) on a pool thread and done(result) back on the loop (done(failed) if fn raised)."""
        def _back(fut: concurrent.futures.Future) -> None:
            if fut.cancelled():
                return
            exc = fut.exception()
            if exc is not None:
                log.error("error in %s", getattr(fn, "__qualname__", fn), exc_info=exc, extra={"server": self.name})
            try:
                self._loop.call_soon_threadsafe(done, failed if exc is not None else fut.result())
            except RuntimeError:
                pass  # the server stopped meanwhile
        try:
            pool.submit(fn, arg).add_done_callback(_back)
        except RuntimeError:  # pool shut down: stopping
            pass

    def call_handler(self, req: Request) -> Response:
        try:
            return self.handler(req)
        except Exception:  # noqa: BLE001 - answer 500, keep serving
            log.exception("error serving request", extra={"server": self.name, "method": req.method,
                                                           "path": req.path})
            return _INTERNAL


@contextlib.contextmanager
def _stop_signals_held() -> Iterator[None]:
    """SIGTERM, SIGINT and SIGHUP held back for the block (delivered after it): their handlers
    raise SystemExit, which in the middle of asyncio.new_event_loop() leaves an object without
    its self-pipe that prints a traceback when collected."""
    held = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    try:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    except (AttributeError, OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _clamp_to_fd_limit(cap: int) -> int:
    """Keep half the open-file limit for everything else the process opens (collectors, logs)."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return cap
    if soft == resource.RLIM_INFINITY:
        return cap
    return max(1, min(cap, soft // 2))


class _TokenBucket:
    """exporter-toolkit's rate_limit: up to ``burst`` requests at once, one more per ``interval`` s."""

    def __init__(self, burst: int, interval: float):
        self.burst, self.interval = burst, interval
        self.tokens = float(self.burst)
        self.at: Optional[float] = None  # the last take

    def take(self, now: float) -> bool:
        if self.at is not None and self.interval > 0:
            self.tokens = min(self.burst, self.tokens + (now - self.at) / self.interval)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


def _no_delay(transport: Any) -> None:
    """Small answers go out at once. asyncio sets TCP_NODELAY only on sockets whose proto is
    IPPROTO_TCP, which accepted sockets of socket.create_server are not (proto 0)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def _chunks(body: Body) -> list[memoryview]:
    parts = [body] if isinstance(body, (bytes, bytearray, memoryview)) else list(body)
    return [memoryview(p) for p in parts if len(p)]


# connection states
_HANDSHAKE, _IDLE, _HEAD, _BODY, _HANDLING, _WRITING, _CLOSING = (
    "handshake", "idle", "head", "body", "handling", "writing", "closing")


class _Connection(asyncio.BufferedProtocol):
    """One client connection: a small state machine around an ``h11.Connection``."""

    def __init__(self, server: HttpServer):
        self.s = server
        self.limits = server.limits
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=server.limits.header_bytes)
        self.transport: Any = None
        self.peer: Any = None
        self.state = _IDLE
        self.timer: Optional[asyncio.TimerHandle] = None
        self.event: Optional[h11.Request] = None
        self.body = bytearray()
        self.reserved = 0
        self.head_only = False
        self.out: collections.deque[memoryview] = collections.deque()
        self.write_paused = False
        self.closed = False
        self.lingered = 0
        self.body_began = 0.0
        self.body_length: Optional[int] = None  # Content-Length; None for a chunked body
        self.handshake: Optional[asyncio.Future] = None

    # ----------------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        _no_delay(transport)
        if self.closed or self.s._stopped:  # evicted before its transport was made
            self._release()
            transport.close()
            return
        ctx_factory = self.s.web.ssl_context
        if ctx_factory is None:
            self._await_request(fresh=True)
            return
        self.state = _HANDSHAKE
        self.s.place(self, "head")  # a handshake is part of the request: evictable once slow
        transport.pause_reading()
        self.handshake = asyncio.ensure_future(self._handshake(ctx_factory()))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.s._read_view

    def buffer_updated(self, nbytes: int) -> None:
        view = self.s._read_view
        # a request head is fed in slices of the header budget, so h11 refuses an oversized
        # head after one slice instead of buffering a whole read of it
        step = self.limits.header_bytes if self.state in (_IDLE, _HEAD) else nbytes
        for offset in range(0, nbytes, step):
            if self.closed:
                return
            if self.state == _CLOSING:
                self.lingered += nbytes - offset
                if self.lingered > _LINGER_BYTES:
                    self.abort()
                return
            self.h11.receive_data(bytes(view[offset:min(offset + step, nbytes)]))
            if self.state == _IDLE:
                self._begin_head()
            if self.state in (_HEAD, _BODY):
                self._process()

    def eof_received(self) -> Optional[bool]:
        if self.state in (_HEAD, _BODY, _IDLE):
            try:
                self.h11.receive_data(b"")
            except h11.RemoteProtocolError:
                pass
            if self.state in (_HEAD, _BODY):
                self._process()  # a truncated request: 400, or just closed
        # half-closed while we answer: keep the socket to write (not possible under TLS)
        return self.state in (_HANDLING, _WRITING) and self.s.web.ssl_context is None

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        if exc is not None:
            log.debug("connection lost", extra={"server": self.s.name, "peer": str(self.peer), "error": str(exc)})
        self._release()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.state == _WRITING:
            self._pump()

    # ----------------------------------------------------------------- states

    async def _handshake(self, ctx: Any) -> None:
        loop = self.s._loop
        try:
            self.transport = await loop.start_tls(
                self.transport, self, ctx, server_side=True,
                ssl_handshake_timeout=self.limits.tls_handshake_timeout,
                ssl_shutdown_timeout=min(5.0, self.limits.write_timeout))
        except Exception as e:  # noqa: BLE001 - SSL errors, timeouts, resets: the client's problem
            self.s.stats["tls_failed"] += 1
            log.debug("TLS handshake failed", extra={"server": self.s.name, "peer": str(self.peer), "error": str(e)})
            self.s.warn_every("tls", "TLS handshakes failing (wrong CA or client certificate?)",
                              failed=self.s.stats["tls_failed"], last_error=str(e)[:200])
            self._release()
            return
        if self.closed:
            return
        if self.s.web.allowed_sans and not _san_allowed(self.transport.get_extra_info("peercert"),
                                                        self.s.web.allowed_sans):
            self.s.stats["tls_failed"] += 1
            log.debug("client certificate has no allowed SAN", extra={"server": self.s.name, "peer": str(self.peer)})
            self.abort()
            return
        self._await_request(fresh=True)

    def _await_request(self, fresh: bool) -> None:
        """Between requests: idle (evictable), reading again."""
        self.state = _IDLE
        self.s.place(self, "idle")
        self._arm(self.limits.header_timeout if fresh else self.limits.idle_timeout, self._on_idle_timeout)
        self.transport.resume_reading()
        pipelined, peer_closed = self.h11.trailing_data
        if pipelined:  # the next request is already here
            self._begin_head()
            self._process()
        elif peer_closed:
            self.close(graceful=True)

    def _begin_head(self) -> None:
        self.state = _HEAD
        self.s.place(self, "head")
        self._arm(self.limits.header_timeout, self._on_request_timeout)

    def _process(self) -> None:
        while self.state in (_HEAD, _BODY) and not self.closed:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as e:
                self._fail(e.error_status_hint, "bad request" if e.error_status_hint != 431 else
                           "request headers too large")
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._on_head(event)
            elif isinstance(event, h11.Data):
                self._on_data(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self._dispatch()
            elif isinstance(event, h11.ConnectionClosed):
                self.close(graceful=True)

    def _on_head(self, event: h11.Request) -> None:
        if event.http_version not in (b"1.0", b"1.1"):  # h11 parses any HTTP/d.d; we speak 1.x only
            self._fail(505, f"HTTP/{event.http_version.decode('ascii', 'replace')} is not supported (HTTP/1.1 is)")
            return
        size = len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers)
        if size > self.limits.header_bytes:  # h11 checks only what is still incomplete
            self._fail(431, "request headers too large")
            return
        self.event = event
        self.state = _BODY
        self.s.place(self, "body")
        self.body_began = self.s._loop.time()
        self._arm(min(_BODY_GRACE, self.limits.body_timeout), self._on_body_check)
        length = dict(event.headers).get(b"content-length")
        self.body_length = None if length is None else int(length)
        if length is not None and int(length) > self.limits.max_body_bytes:
            self.s.stats["too_large"] += 1
            self._fail(413, f"body over the limit of {self.limits.max_body_bytes} bytes")
            return
        if self.h11.they_are_waiting_for_100_continue:
            self.transport.write(self.h11.send(h11.InformationalResponse(status_code=100, headers=[])))

    def _on_data(self, data: bytes) -> None:
        if len(self.body) + len(data) > self.limits.max_body_bytes:
            self.s.stats["too_large"] += 1
            self._fail(413, f"body over the limit of {self.limits.max_body_bytes} bytes")
            return
        if not self.s.reserve_body(len(data)):
            self.s.stats["busy"] += 1
            self._fail(503, "too many request bodies in flight; retry")
            return
        self.reserved += len(data)
        self.body += data

    def _dispatch(self) -> None:
        event = self.event
        assert event is not None
        self.state = _HANDLING
        self.s.place(self, None)
        self._disarm()
        self.transport.pause_reading()  # backpressure: nothing more is read until we answered
        target = event.target.decode("latin-1")
        if not target.startswith("/") and "://" in target:  # absolute form: http://host/path
            target = "/" + target.split("://", 1)[1].partition("/")[2]
        path, _, query = target.partition("?")
        headers: dict[str, str] = {}
        for k, v in event.headers:
            name, value = k.decode("latin-1"), v.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        req = Request(event.method.decode("latin-1").upper(), path, query, headers, bytes(self.body), self.peer)
        self.head_only = req.method == "HEAD"
        self.body = bytearray()  # the reservation stays until the answer is out
        auth, queue = self.s.web.auth, self.s.auth_queue
        header = req.headers.get("authorization")
        if req.path in self.s.public_paths:  # kubelet's probes: no password, no rate limit
            self._serve(req)
        elif auth is None or queue is None:  # no basic auth: a verified certificate is not anonymous
            if self._certified():
                self._serve(req)
            else:
                self._anonymous(req, authorized=True)
        else:
            verdict = auth.cached(header)
            if verdict is not None:
                self._authorized(req, verdict)
            # checked before the rate limit: a flood that drained the bucket must not keep an
            # authenticated client's first request from ever being checked
            elif not queue.submit(header or "", auth.user(header), str(self.peer[0] if self.peer else ""),
                                  lambda ok: self._authorized(req, ok)):
                self.s.stats["auth_busy"] += 1
                self._respond(_AUTH_BUSY)

    def _certified(self) -> bool:
        """The client showed a certificate that was verified (TLS with client_auth_type)."""
        return bool(self.transport.get_extra_info("peercert"))

    def _authorized(self, req: Request, ok: bool) -> None:
        if self.closed:
            return
        if ok:
            self._serve(req)
        else:
            self._anonymous(req, authorized=False)

    def _anonymous(self, req: Request, authorized: bool) -> None:
        """A request that is not authenticated: rate limited (429), then served or answered 401."""
        if not self.s.take_token():
            self.s.stats["rate_limited"] += 1
            self._respond(Response.text(429, "Too Many Requests\n"))
        elif authorized:
            self._serve(req)
        else:
            self.s.stats["unauthorized"] += 1
            self._respond(_UNAUTHORIZED)

    def _serve(self, req: Request) -> None:
        pool = self.s._serial if req.path.rstrip("/") in self.s.serial_paths else self.s._pool
        self.s.submit(pool, self.s.call_handler, req, self._respond, failed=_INTERNAL)

    def _respond(self, resp: Response, close: bool = False) -> None:
        if self.closed:
            return
        chunks = _chunks(resp.body)
        headers = [("Content-Type", resp.content_type), ("Content-Length", str(sum(len(c) for c in chunks))),
                   *resp.headers, *self.s.web.headers]
        if close:
            headers.append(("Connection", "close"))
        try:
            head = self.h11.send(h11.Response(status_code=resp.status, headers=headers, reason=_reason(resp.status)))
        except h11.LocalProtocolError:
            log.exception("bad response", extra={"server": self.s.name, "status": resp.status})
            self.abort()
            return
        self.state = _WRITING
        self.s.place(self, None)
        self._arm(self.limits.write_timeout, self._on_write_timeout)
        self.out = collections.deque() if self.head_only else collections.deque(chunks)
        if sum(len(c) for c in self.out) <= _CHUNK:  # one segment: head and body together
            head += b"".join(b"".join(map(bytes, self._framed(c))) for c in self.out)
            self.out.clear()
        self.transport.write(head)
        self._pump()

    def _framed(self, piece: memoryview) -> list[bytes]:
        """The wire parts of one body piece, the piece itself among them (not copied)."""
        # h11 types Data.data as bytes but passes any bytes-like through: a third-party annotation
        # narrower than the library, and a memoryview spares a copy of each body
        out = self.h11.send_with_data_passthrough(h11.Data(data=piece))  # type: ignore[arg-type]
        return out or []  # None only for ConnectionClosed, never for Data

    def _pump(self) -> None:
        while self.out:
            if self.write_paused or self.closed:
                return
            piece = self.out[0]
            if len(piece) > _CHUNK:
                self.out[0], piece = piece[_CHUNK:], piece[:_CHUNK]
            else:
                self.out.popleft()
            for data in self._framed(piece):
                self.transport.write(data)
        self.h11.send(h11.EndOfMessage())
        self._end_cycle()

    def _end_cycle(self) -> None:
        self.event, self.head_only = None, False
        self._release_body()
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE and not self.s._stopped:
            self.h11.start_next_cycle()
            self._await_request(fresh=False)
        else:
            self.close(graceful=True, linger=self.h11.their_state not in (h11.DONE, h11.CLOSED, h11.MUST_CLOSE))

    def _fail(self, status: int, message: str) -> None:
        """Answer an error and close (lingering, so the client reads it)."""
        self._release_body()
        if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            self.head_only = self.event is not None and self.event.method == b"HEAD"
            self._respond(Response.text(status, message + "\n"), close=True)
        else:
            self.close(graceful=True)

    # ----------------------------------------------------------------- timers and closing

    def _arm(self, seconds: float, callback: Callable[[], None]) -> None:
        self._disarm()
        self.timer = self.s._loop.call_later(seconds, callback)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _on_idle_timeout(self) -> None:
        self.s.stats["idle_timeout"] += 1
        self.close(graceful=True)

    def body_too_slow(self, elapsed: float) -> bool:
        """Fewer bytes of body than min_body_rate allows for ``elapsed`` seconds (a complete
        Content-Length body is never too slow)."""
        return len(self.body) < self.limits.min_body_rate * elapsed

    def body_end(self, now: float) -> float:
        """When the body will be whole at the average rate it has come at so far (loop time; a
        chunked body is taken to be max_body_bytes long; inf while none of it came)."""
        length = self.limits.max_body_bytes if self.body_length is None else self.body_length
        got = len(self.body)
        if got >= length:
            return now
        return self.body_began + (now - self.body_began) * length / got if got else math.inf

    def body_doomed(self, now: float) -> bool:
        """The body will not be whole by body_timeout: below min_body_rate, or (its length
        announced) too much of it still to come at the rate it has come at."""
        return self.body_too_slow(now - self.body_began) or (
            self.body_length is not None and self.body_end(now) > self.body_began + self.limits.body_timeout)

    def _on_body_check(self) -> None:
        """Once a second while a body is read: 408 below the minimum rate or past body_timeout."""
        elapsed = self.s._loop.time() - self.body_began
        if elapsed >= self.limits.body_timeout:
            self._on_request_timeout()
        elif self.body_too_slow(elapsed):
            self.s.stats["slow_body"] += 1
            log.debug("request body too slow", extra={"server": self.s.name, "peer": str(self.peer),
                                                      "bytes": len(self.body), "seconds": round(elapsed, 3)})
            self._fail(408, f"request body slower than {self.limits.min_body_rate} bytes a second")
        else:
            self._arm(min(1.0, self.limits.body_timeout - elapsed), self._on_body_check)

    def _on_request_timeout(self) -> None:
        self.s.stats["request_timeout"] += 1
        log.debug("request timed out", extra={"server": self.s.name, "peer": str(self.peer), "state": self.state})
        self._fail(408, "request timeout")

    def _on_write_timeout(self) -> None:
        self.s.stats["write_timeout"] += 1
        self.abort()

    def close(self, graceful: bool, linger: bool = False) -> None:
        """Close after what is written; with linger, half-close and discard input for a while."""
        if self.closed or self.state == _CLOSING:
            return
        if self.transport is None:  # evicted before its transport was made
            self._release()
            return
        if linger and self.transport.can_write_eof():
            self.state = _CLOSING
            self.s.place(self, "lingering")
            self.transport.write_eof()
            self.transport.resume_reading()
            self._arm(_LINGER_SECONDS, self.abort)
            return
        if not graceful:
            self.abort()
            return
        self.closed = True
        self.s.place(self, None)
        self.transport.close()
        # a reader that never drains what was written must not keep the socket: abort later
        self._arm(self.limits.write_timeout, self._force_abort)

    def abort(self) -> None:
        self.closed = True
        self._disarm()
        if self.transport is not None:
            self.transport.abort()
        self._release()

    def _force_abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self._release()

    def _release_body(self) -> None:
        if self.reserved:
            self.s.release_body(self.reserved)
            self.reserved = 0
        self.body = bytearray()

    def _release(self) -> None:
        self.closed = True
        self._disarm()
        self._release_body()
        self.out.clear()
        self.s.forget(self)


def _san_allowed(peercert: Optional[dict], allowed: Sequence[str]) -> bool:
    """True when the verified client certificate names one of ``allowed`` as a SAN (DNS, IP,
    e-mail or URI), as exporter-toolkit's client_allowed_sans."""
    if not peercert:
        return False
    return any(value in allowed for _kind, value in peercert.get("subjectAltName", ()))
