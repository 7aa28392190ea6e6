"""One unary gRPC call over HTTP/2 on a unix socket, without the grpc runtime.

The agent makes exactly one kind of gRPC call (kubelet PodResources ``List``); loading
grpcio for it costs ~17 MiB of resident memory on every node, a third of the agent's
footprint. This speaks the small part of HTTP/2 (RFC 9113) that a unary call needs:

- header blocks are encoded and decoded with the pure-Python ``hpack`` package (~2 MiB);
  the call's outcome is the ``grpc-status`` / ``grpc-message`` of the trailers, named like
  grpc names them (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``...);
- flow control: the client announces a window as large as the biggest answer it accepts,
  so the server never waits on a WINDOW_UPDATE;
- SETTINGS are acknowledged and PINGs answered while the call runs.
A new connection per call (the poller calls every ~10 s; a unix socket connect is cheap).
"""

from __future__ import annotations

import socket
import struct
import time
import urllib.parse

import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE = 0x2, 0x4
DEFAULT_WINDOW = 65535
STREAM = 1
# grpc status codes (grpc/doc/statuscodes.md)
STATUS_NAMES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
                "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
                "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
                "UNAUTHENTICATED")


class CallError(RuntimeError):
    """The call did not complete (message says how: connect, timeout, reset, no answer)."""


def _frame(ftype: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


class _Reader:
    def __init__(self, sock: socket.socket, deadline: float):
        self._sock, self._deadline, self._buf = sock, deadline, bytearray()

    def exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                raise CallError("DEADLINE_EXCEEDED: no answer before the deadline")
            self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(max(65536, n - len(self._buf)))
            except socket.timeout:
                raise CallError("DEADLINE_EXCEEDED: no answer before the deadline") from None
            if not chunk:
                raise CallError("connection closed by the server")
            self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out


def unary_call(socket_path: str, method: str, request: bytes, timeout: float,
               max_message_bytes: int, authority: str = "localhost") -> bytes:
    """Call ``method`` (e.g. ``/v1.PodResourcesLister/List``) with a serialized request;
    returns the serialized response message. Raises CallError."""
    deadline = time.monotonic() + timeout
    window = max(DEFAULT_WINDOW, min(max_message_bytes + 1024, 2**31 - 1))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(socket_path)
        except OSError as e:
            raise CallError(f"cannot connect to {socket_path}: {e.strerror or e}") from None
        headers = hpack.Encoder().encode([
            (":method", "POST"), (":scheme", "http"), (":path", method), (":authority", authority),
            ("content-type", "application/grpc"), ("te", "trailers"), ("user-agent", "hetero-exporter"),
            ("grpc-timeout", f"{max(1, int(timeout * 1000))}m")])
        message = b"\x00" + struct.pack(">I", len(request)) + request  # not compressed
        settings = struct.pack(">HI", SETTINGS_ENABLE_PUSH, 0) + struct.pack(">HI", SETTINGS_INITIAL_WINDOW_SIZE, window)
        grow = _frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", window - DEFAULT_WINDOW)) if window > DEFAULT_WINDOW else b""
        sock.sendall(PREFACE + _frame(SETTINGS, 0, 0, settings) + grow
                     + _frame(HEADERS, END_HEADERS, STREAM, headers)
                     + _frame(DATA, END_STREAM, STREAM, message))
        return _read_answer(sock, _Reader(sock, deadline), max_message_bytes)
    finally:
        sock.close()


def _read_answer(sock: socket.socket, reader: _Reader, max_message_bytes: int) -> bytes:
    body = bytearray()
    block = bytearray()  # header block fragments of the stream, until END_HEADERS
    headers: dict[str, str] = {}
    decoder = hpack.Decoder()
    while True:
        head = reader.exactly(9)
        length = int.from_bytes(head[:3], "big")
        ftype, flags = head[3], head[4]
        stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        if length > max(max_message_bytes, DEFAULT_WINDOW) + 16384:
            raise CallError(f"malformed answer: a frame of {length} bytes (is this an HTTP/2 gRPC server?)")
        payload = reader.exactly(length)
        if ftype == SETTINGS and not flags & ACK:
            sock.sendall(_frame(SETTINGS, ACK, 0))
        elif ftype == PING and not flags & ACK:
            sock.sendall(_frame(PING, ACK, 0, payload))
        elif ftype == GOAWAY:
            code = int.from_bytes(payload[4:8], "big") if len(payload) >= 8 else -1
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF if len(payload) >= 4 else 0
            if last < STREAM:
                raise CallError(f"UNAVAILABLE: server refused the call (GOAWAY, error code {code})")
        elif stream == STREAM and ftype == RST_STREAM:
            code = int.from_bytes(payload[:4], "big") if len(payload) >= 4 else -1
            raise CallError(f"server reset the call (RST_STREAM, error code {code})")
        elif stream == STREAM and ftype == DATA:
            body += _unpad(payload, flags)
            if len(body) > max_message_bytes + 5:
                raise CallError(f"RESOURCE_EXHAUSTED: answer larger than {max_message_bytes} bytes")
        elif stream == STREAM and ftype in (HEADERS, CONTINUATION):
            fragment = payload
            if ftype == HEADERS:
                fragment = _unpad(payload, flags)
                if flags & PRIORITY_FLAG:
                    fragment = fragment[5:]
            block += fragment
            if flags & END_HEADERS:
                try:
                    headers.update((str(k), str(v)) for k, v in decoder.decode(bytes(block)))
                except Exception as e:  # noqa: BLE001 - hpack raises several error types
                    raise CallError(f"undecodable response headers: {e}") from None
                block.clear()
        if stream == STREAM and ftype in (DATA, HEADERS) and flags & END_STREAM:
            _check_status(headers)
            return _message(bytes(body))


def _unpad(payload: bytes, flags: int) -> bytes:
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise CallError("malformed padded frame")
    return payload[1:len(payload) - payload[0]]


def _check_status(headers: dict[str, str]) -> None:
    status = headers.get("grpc-status")
    if status is None:
        raise CallError(f"the answer has no grpc-status (HTTP status {headers.get(':status', '?')})")
    if status != "0":
        code = int(status) if status.isdigit() else -1
        name = STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else f"status {status}"
        message = urllib.parse.unquote(headers.get("grpc-message", ""))
        raise CallError(f"{name}: {message}" if message else name)


def _message(body: bytes) -> bytes:
    """The one gRPC length-prefixed message in a unary answer."""
    if len(body) < 5:
        raise CallError("INTERNAL: the call succeeded without a complete answer message")
    compressed, length = body[0], int.from_bytes(body[1:5], "big")
    if compressed:
        raise CallError("INTERNAL: compressed gRPC message (none was asked for)")
    if len(body) != 5 + length:
        raise CallError(f"INTERNAL: gRPC message of {len(body) - 5} bytes, its prefix says {length}")
    return body[5:]
