"""One unary gRPC call over HTTP/2 on a unix socket, framed by the ``h2`` library.

The agent makes exactly one kind of gRPC call (kubelet PodResources ``List``); loading
grpcio for it costs ~17 MiB of resident memory on every node, a third of the agent's
footprint. ``h2`` (python-hyper, pure Python, with ``hpack``) does the HTTP/2 framing,
SETTINGS, PING, CONTINUATION and flow control; this module drives it over a blocking
socket and bounds what a hostile peer can make it hold or wait for:

- the whole call (connect, send, answer) runs under one deadline;
- one header block is at most 64 CONTINUATION frames (h2's limit) of 16 KiB (the default
  SETTINGS_MAX_FRAME_SIZE, which we keep) and at most ``MAX_HEADER_LIST_BYTES`` decoded (our
  SETTINGS_MAX_HEADER_LIST_SIZE, enforced by h2); all header blocks of the answer
  together are at most ``MAX_ANSWER_HEADER_BYTES`` (our own check);
- the answer message is at most ``max_message_bytes``, and the bytes read from the
  socket at most that plus ``MAX_WIRE_OVERHEAD_BYTES`` (frames h2 buffers count too);
- the call's outcome is the ``grpc-status`` / ``grpc-message`` of the trailers, named
  like grpc names them (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``...).
Every failure is a ``CallError`` with a one-line message. A new connection per call (the
poller calls every ~10 s; a unix socket connect is cheap).
"""

from __future__ import annotations

import errno
import socket
import time
import urllib.parse

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

# grpc status codes (grpc/doc/statuscodes.md)
STATUS_NAMES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
                "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
                "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
                "UNAUTHENTICATED")
MAX_HEADER_LIST_BYTES = 64 * 1024  # decoded size of one header block (RFC 9113 section 6.5.2)
MAX_ANSWER_HEADER_BYTES = 128 * 1024  # all header blocks of one answer (1xx, headers, trailers)
MAX_WIRE_OVERHEAD_BYTES = 2 * 1024 * 1024  # bytes read beyond the message: frame heads, headers
RECEIVE_WINDOW_BYTES = 1024 * 1024  # flow control window we grant (refilled as data arrives)
DEFAULT_WINDOW_BYTES = 65535  # the connection window before our first WINDOW_UPDATE
MAX_REQUEST_BYTES = 16 * 1024 - 5  # the request goes in one DATA frame of the default size
RECV_BYTES = 65536
SETTINGS_FRAME_TYPE = 0x4  # RFC 9113 section 6.5: a server's first frame


class CallError(RuntimeError):
    """The call did not complete (message says how: connect, timeout, reset, no answer)."""


def unary_call(socket_path: str, method: str, request: bytes, timeout: float,
               max_message_bytes: int, authority: str = "localhost") -> bytes:
    """Call ``method`` (e.g. ``/v1.PodResourcesLister/List``) with a serialized request
    under ``timeout`` seconds; returns the serialized response message. Raises CallError."""
    if len(request) > MAX_REQUEST_BYTES:
        raise ValueError(f"request of {len(request)} bytes; at most {MAX_REQUEST_BYTES} supported")
    call = _Call(time.monotonic() + timeout, max_message_bytes)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.settimeout(max(timeout, 0.001))
            sock.connect(socket_path)
        except OSError as e:
            raise CallError(f"cannot connect to {socket_path}: {e.strerror or e}") from None
        return call.run(sock, method, request, authority, timeout)
    except OSError as e:
        raise CallError(_socket_failure(e, call.phase)) from None
    except h2.exceptions.H2Error as e:  # ProtocolError, FlowControlError, FrameTooLargeError...
        raise CallError(f"HTTP/2 protocol error from the server {call.phase}: {_h2_failure(e)}") from None
    finally:
        sock.close()


class _Call:
    """State of one call: the h2 connection, the deadline, what the answer has brought."""

    def __init__(self, deadline: float, max_message_bytes: int):
        self.deadline = deadline
        self.max_message_bytes = max_message_bytes
        self.max_wire_bytes = max_message_bytes + 5 + MAX_WIRE_OVERHEAD_BYTES
        self.phase = "while sending the request"
        self.wire_bytes = 0
        self.header_bytes = 0
        self.headers: dict[str, str] = {}
        self.body = bytearray()
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))

    def run(self, sock: socket.socket, method: str, request: bytes, authority: str, timeout: float) -> bytes:
        conn = self.conn
        # our settings in force from the first frame (not from the server's ACK): the server
        # may use the larger window as soon as it reads them
        codes = h2.settings.SettingCodes
        conn.local_settings = h2.settings.Settings(client=True, initial_values={
            codes.ENABLE_PUSH: 0, codes.MAX_CONCURRENT_STREAMS: 1,
            codes.INITIAL_WINDOW_SIZE: RECEIVE_WINDOW_BYTES, codes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST_BYTES})
        conn.decoder.max_header_list_size = MAX_HEADER_LIST_BYTES
        conn.initiate_connection()
        conn.increment_flow_control_window(RECEIVE_WINDOW_BYTES - DEFAULT_WINDOW_BYTES)  # connection level
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, [
            (":method", "POST"), (":scheme", "http"), (":path", method), (":authority", authority),
            ("content-type", "application/grpc"), ("te", "trailers"), ("user-agent", "hetero-exporter"),
            ("grpc-timeout", f"{max(1, int(timeout * 1000))}m")])
        conn.send_data(stream, b"\x00" + len(request).to_bytes(4, "big") + request, end_stream=True)
        self._send(sock)
        self.phase = "before its first frame"
        pending = self._first_frame(sock)
        self.phase = "while it answered"
        while True:
            for event in conn.receive_data(pending):
                if self._handle(event, stream):
                    self._goodbye(sock)
                    _check_status(self.headers)
                    return _message(self.body)
            self._send(sock)
            pending = self._recv(sock)

    def _handle(self, event: h2.events.Event, stream: int) -> bool:
        """Fold one h2 event into the answer; True once the answer is complete."""
        if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived,
                              h2.events.InformationalResponseReceived)):
            self._add_headers(event.headers)
        elif isinstance(event, h2.events.DataReceived) and event.stream_id == stream:
            self.body += event.data
            if len(self.body) > self.max_message_bytes + 5:
                raise CallError(f"RESOURCE_EXHAUSTED: answer larger than {self.max_message_bytes} bytes")
            self.conn.acknowledge_received_data(event.flow_controlled_length, stream)  # WINDOW_UPDATE
        elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
            return True
        elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream:
            raise CallError(f"server reset the call (RST_STREAM, {_code_name(event.error_code)})")
        elif isinstance(event, h2.events.ConnectionTerminated):
            detail = f": {_one_line(_text(event.additional_data[:200]))}" if event.additional_data else ""
            raise CallError(f"UNAVAILABLE: the server closed the connection before answering "
                            f"(GOAWAY, {_code_name(event.error_code)}{detail})")
        return False  # SETTINGS, PING, WINDOW_UPDATE...: h2 has handled them

    def _add_headers(self, headers: list) -> None:
        for name, value in headers:
            self.header_bytes += len(name) + len(value) + 32  # RFC 7541 section 4.1 entry size
            self.headers[_text(name)] = _text(value)
        if self.header_bytes > MAX_ANSWER_HEADER_BYTES:
            raise CallError(f"RESOURCE_EXHAUSTED: answer headers larger than {MAX_ANSWER_HEADER_BYTES} bytes")

    def _first_frame(self, sock: socket.socket) -> bytes:
        """The first bytes of the answer, once they show a SETTINGS frame head (RFC 9113
        section 3.4); anything else is not an HTTP/2 server, said plainly."""
        data = b""
        while len(data) < 9:
            data += self._recv(sock)
        if data[3] != SETTINGS_FRAME_TYPE or any(data[5:9]):
            raise CallError(f"not an HTTP/2 gRPC server: the answer starts with {data[:24]!r}")
        return data

    def _remaining(self) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise CallError(f"DEADLINE_EXCEEDED: no complete answer before the deadline ({self.phase})")
        return remaining

    def _send(self, sock: socket.socket) -> None:
        out = self.conn.data_to_send()
        if out:
            sock.settimeout(self._remaining())
            sock.sendall(out)

    def _recv(self, sock: socket.socket) -> bytes:
        sock.settimeout(self._remaining())
        chunk = sock.recv(RECV_BYTES)
        if not chunk:
            raise CallError(f"connection closed by the server {self.phase}")
        self.wire_bytes += len(chunk)
        if self.wire_bytes > self.max_wire_bytes:
            raise CallError(f"RESOURCE_EXHAUSTED: the server sent more than {self.max_wire_bytes} bytes")
        return chunk

    def _goodbye(self, sock: socket.socket) -> None:
        """GOAWAY after the answer, so the server sees a clean end; best effort."""
        try:
            self.conn.close_connection()
            sock.settimeout(0.1)
            sock.sendall(self.conn.data_to_send())
        except (OSError, h2.exceptions.H2Error):
            pass


def _socket_failure(e: OSError, phase: str) -> str:
    if isinstance(e, TimeoutError):
        return f"DEADLINE_EXCEEDED: no complete answer before the deadline ({phase})"
    if e.errno in (errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED):
        # one message for all three: which one a dropped connection gives is a race
        return f"connection reset by the server {phase}"
    return f"socket error {phase}: {e.strerror or e}"


def _h2_failure(e: Exception) -> str:
    """What h2 found wrong: its message, or for stream errors (whose text is the stream id)
    the error's name and stream."""
    text = _one_line(e)
    return f"{type(e).__name__} on stream {text}" if text.isdigit() else text or type(e).__name__


def _code_name(code: object) -> str:
    """h2 gives a known HTTP/2 error code as an ``ErrorCodes`` member, an unknown one as int."""
    return getattr(code, "name", None) or f"error code {code}"


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _check_status(headers: dict[str, str]) -> None:
    status = headers.get("grpc-status")
    if status is None:
        raise CallError(f"the answer has no grpc-status (HTTP status {headers.get(':status', '?')})")
    if status != "0":
        code = int(status) if status.isdigit() else -1
        name = STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else f"status {status}"
        message = _one_line(urllib.parse.unquote(headers.get("grpc-message", "")))
        raise CallError(f"{name}: {message}" if message else name)


def _message(body: bytearray) -> bytes:
    """The one gRPC length-prefixed message in a unary answer (one copy of it, not two)."""
    if len(body) < 5:
        raise CallError("INTERNAL: the call succeeded without a complete answer message")
    compressed, length = body[0], int.from_bytes(body[1:5], "big")
    if compressed:
        raise CallError("INTERNAL: compressed gRPC message (none was asked for)")
    if len(body) != 5 + length:
        raise CallError(f"INTERNAL: gRPC message of {len(body) - 5} bytes, its prefix says {length}")
    return bytes(memoryview(body)[5:])
