"""The PodResources client against hostile peers on a unix socket: endless CONTINUATION,
split trailers, resets, silence, huge DATA, garbage, random frame sequences, a missing h2.

Each peer is a small raw-frame server (hyperframe + hpack, which come with h2) that plays a
script per connection; the client must end every call with one CallError line, quickly
(under its deadline) and holding a bounded amount of memory."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import sys
import tempfile
import threading
import tracemalloc

import hpack
import pytest
from hyperframe.frame import (ContinuationFrame, DataFrame, GoAwayFrame, HeadersFrame, PingFrame,
                              RstStreamFrame, SettingsFrame, WindowUpdateFrame)
from hypothesis import given, settings, strategies as st

import hetero_exporter.sources.podresources as podresources_pkg
from hetero_exporter.sources.podresources import client
from hetero_exporter.sources.podresources.client import PodResourcesError, PodResourcesPoller, list_pod_resources
from hetero_exporter.sources.podresources.h2 import CallError, unary_call
from hetero_exporter.sources.podresources.mapping import ContainerDevices

METHOD = "/v1.PodResourcesLister/List"
SETTINGS = SettingsFrame(0).serialize()
MiB = 1024 * 1024


@pytest.fixture
def sock_path():
    # unix socket paths are limited to 107 bytes: a short private directory
    d = tempfile.mkdtemp(prefix="prh-")
    yield os.path.join(d, "k.sock")
    shutil.rmtree(d, ignore_errors=True)


class Peer:
    """A server on a unix socket that runs ``script(conn)`` for each connection it accepts."""

    def __init__(self, path: str, script):
        self.script = script
        self._stop = threading.Event()
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(path)
        self._srv.listen(8)
        self._srv.settimeout(0.1)
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> "Peer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        self._srv.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._srv.accept()
            except socket.timeout:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    self.script(conn)
                except OSError:
                    pass  # the client gave up on us: that is the point


def frame(f) -> bytes:
    return f.serialize()


def headers(stream: int, block: bytes, *flags: str) -> bytes:
    f = HeadersFrame(stream, flags=flags)
    f.data = block
    return f.serialize()


def continuation(stream: int, block: bytes, *flags: str) -> bytes:
    f = ContinuationFrame(stream, flags=flags)
    f.data = block
    return f.serialize()


def data(stream: int, payload: bytes, *flags: str) -> bytes:
    return DataFrame(stream, data=payload, flags=flags).serialize()


def grpc_message(payload: bytes) -> bytes:
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


RESPONSE_HEADERS = [(":status", "200"), ("content-type", "application/grpc")]
OK_TRAILERS = [("grpc-status", "0"), ("grpc-message", "")]


def wait_for_request(conn: socket.socket) -> None:
    """Until the client's request is in our queue, unread (closing now resets the client)."""
    conn.recv(1, socket.MSG_PEEK)


def hold(conn: socket.socket) -> None:
    """Say nothing more until the client hangs up."""
    while conn.recv(65536):
        pass


# ---- endless CONTINUATION


def test_endless_continuation_is_refused_with_memory_bounded(sock_path):
    block = hpack.Encoder().encode(RESPONSE_HEADERS)
    more = continuation(1, b"\x00" * 16384)  # 16 KiB of header block, never ending
    sent = []

    def script(conn):
        wait_for_request(conn)
        conn.sendall(SETTINGS + headers(1, block))
        for _ in range(4096):  # up to 64 MiB, unless the client hangs up first
            conn.sendall(more)
            sent.append(len(more))

    with Peer(sock_path, script):
        tracemalloc.start()
        try:
            with pytest.raises(CallError, match="(?i)too many continuation frames"):
                unary_call(sock_path, METHOD, b"", 10.0, 16 * MiB)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 8 * MiB, f"the client held {peak} bytes for a header block"


# ---- split trailers


def test_trailers_split_in_headers_and_continuation_are_accepted(sock_path):
    pytest.importorskip("google.protobuf")
    from hetero_exporter.sources.podresources.server import response_from_records
    records = [ContainerDevices("ml", "train-0", "trainer", "nvidia.com/gpu", ("GPU-a", "GPU-b"))]
    message = grpc_message(response_from_records(records).SerializeToString())

    def script(conn):
        encoder = hpack.Encoder()
        wait_for_request(conn)
        trailers = encoder.encode(OK_TRAILERS + [("x-padding", "p" * 200)])
        half = len(trailers) // 2
        conn.sendall(SETTINGS + headers(1, encoder.encode(RESPONSE_HEADERS), "END_HEADERS")
                     + data(1, message)
                     + headers(1, trailers[:half], "END_STREAM")
                     + continuation(1, trailers[half:half + 10])
                     + continuation(1, trailers[half + 10:], "END_HEADERS"))
        hold(conn)

    with Peer(sock_path, script):
        assert list_pod_resources(sock_path, timeout=5) == records


def test_an_error_status_in_split_trailers_is_named(sock_path):
    def script(conn):
        encoder = hpack.Encoder()
        wait_for_request(conn)
        trailers = encoder.encode([("grpc-status", "14"), ("grpc-message", "kubelet%20restarting")])
        conn.sendall(SETTINGS + headers(1, encoder.encode(RESPONSE_HEADERS), "END_HEADERS")
                     + headers(1, trailers[:3], "END_STREAM") + continuation(1, trailers[3:], "END_HEADERS"))
        hold(conn)

    with Peer(sock_path, script):
        with pytest.raises(CallError, match="^UNAVAILABLE: kubelet restarting$"):
            unary_call(sock_path, METHOD, b"", 5.0, MiB)


# ---- resets


def reset_after_headers(conn):
    wait_for_request(conn)
    conn.sendall(SETTINGS + headers(1, hpack.Encoder().encode(RESPONSE_HEADERS), "END_HEADERS"))
    # return: the connection closes with the request unread, so the client gets ECONNRESET


def test_a_reset_mid_call_is_one_line(sock_path):
    with Peer(sock_path, reset_after_headers):
        with pytest.raises(CallError) as info:
            unary_call(sock_path, METHOD, b"", 5.0, MiB)
    assert str(info.value) == "connection reset by the server while it answered"


def test_a_reset_that_persists_warns_once_without_traceback(sock_path, caplog):
    with Peer(sock_path, reset_after_headers):
        poller = PodResourcesPoller(sock_path, interval=3600, timeout=5)
        with caplog.at_level(logging.DEBUG, logger="hetero_exporter.sources.podresources.client"):
            for _ in range(3):
                assert not poller.refresh()
    mine = [r for r in caplog.records if r.name == "hetero_exporter.sources.podresources.client"]
    assert [r.levelno for r in mine] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert not any(r.exc_info for r in mine)
    assert all("connection reset by the server" in r.error for r in mine)
    assert "connection reset" in poller.status().error


def test_rst_stream_and_goaway_are_named(sock_path):
    answers = iter([RstStreamFrame(1, error_code=2), GoAwayFrame(0, last_stream_id=0, error_code=0,
                                                                 additional_data=b"going away")])

    def script(conn):
        wait_for_request(conn)
        conn.sendall(SETTINGS + frame(next(answers)))
        hold(conn)

    with Peer(sock_path, script):
        with pytest.raises(CallError, match=r"^server reset the call \(RST_STREAM, INTERNAL_ERROR\)$"):
            unary_call(sock_path, METHOD, b"", 5.0, MiB)
        with pytest.raises(CallError, match=r"^UNAVAILABLE: .*\(GOAWAY, NO_ERROR: going away\)$"):
            unary_call(sock_path, METHOD, b"", 5.0, MiB)


# ---- silence


@pytest.mark.parametrize("opening", [
    b"", SETTINGS, SETTINGS + headers(1, hpack.Encoder().encode(RESPONSE_HEADERS), "END_HEADERS"),
], ids=["silent", "settings-only", "headers-then-silent"])
def test_a_peer_that_never_answers_hits_the_deadline(sock_path, opening):
    def script(conn):
        wait_for_request(conn)
        conn.sendall(opening)
        hold(conn)

    with Peer(sock_path, script):
        with pytest.raises(CallError, match="^DEADLINE_EXCEEDED: no complete answer before the deadline"):
            unary_call(sock_path, METHOD, b"", 0.3, MiB)


def test_a_peer_that_only_pings_hits_the_deadline(sock_path):
    ping = frame(PingFrame(0, opaque_data=b"12345678"))

    def script(conn):
        wait_for_request(conn)
        conn.sendall(SETTINGS)
        for _ in range(2000):  # a keep-alive that never answers: bounded, ends when the client leaves
            conn.sendall(ping * 10)
            threading.Event().wait(0.01)

    with Peer(sock_path, script):
        with pytest.raises(CallError, match="^DEADLINE_EXCEEDED"):
            unary_call(sock_path, METHOD, b"", 0.3, MiB)


# ---- huge DATA


def test_an_endless_data_stream_is_refused_at_the_cap(sock_path):
    chunk = data(1, b"\x00" * 16384)

    def script(conn):
        wait_for_request(conn)
        conn.sendall(SETTINGS + headers(1, hpack.Encoder().encode(RESPONSE_HEADERS), "END_HEADERS")
                     + data(1, grpc_message(b"")[:1] + (64 * MiB).to_bytes(4, "big")))
        for _ in range(4096):  # 64 MiB, ignoring flow control, unless the client hangs up
            conn.sendall(chunk)

    with Peer(sock_path, script):
        tracemalloc.start()
        try:
            with pytest.raises(CallError, match="^RESOURCE_EXHAUSTED: answer larger than 100000 bytes$"):
                unary_call(sock_path, METHOD, b"", 10.0, 100_000)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 8 * MiB


def test_one_frame_announcing_16_mib_is_refused_before_it_is_read(sock_path):
    head = (2**24 - 1).to_bytes(3, "big") + b"\x00\x00" + (1).to_bytes(4, "big")  # DATA, 16 MiB

    def script(conn):
        wait_for_request(conn)
        conn.sendall(SETTINGS + headers(1, hpack.Encoder().encode(RESPONSE_HEADERS), "END_HEADERS") + head)
        for _ in range(1024):
            conn.sendall(b"\x00" * 16384)

    with Peer(sock_path, script):
        with pytest.raises(CallError, match="RESOURCE_EXHAUSTED|protocol error"):
            unary_call(sock_path, METHOD, b"", 10.0, 100_000)


def client_frames(conn: socket.socket):
    """(type, flags, stream, payload) of each frame the client sends, after its preface."""
    buf = bytearray()

    def take(n):
        while len(buf) < n:
            chunk = conn.recv(65536)
            if not chunk:
                raise EOFError
            buf.extend(chunk)
        out = bytes(buf[:n])
        del buf[:n]
        return out

    take(24)
    while True:
        head = take(9)
        payload = take(int.from_bytes(head[:3], "big"))
        yield head[3], head[4], int.from_bytes(head[5:9], "big"), payload


def test_the_client_refills_the_window_as_the_answer_arrives(sock_path):
    body = bytes(range(256)) * (8 * 1024)  # 2 MiB: twice the window the client grants
    message = grpc_message(body)
    seen = []

    def script(conn):
        frames = client_frames(conn)
        for ftype, flags, stream, _ in frames:  # until the request is complete
            if ftype == 0 and flags & 1:
                break
        encoder = hpack.Encoder()
        conn.sendall(SETTINGS + headers(1, encoder.encode(RESPONSE_HEADERS), "END_HEADERS"))
        window = 1024 * 1024  # what the client's SETTINGS granted; a well-behaved peer stops there
        sent = 0
        while sent < len(message):
            while window <= 0:
                ftype, _, stream, payload = next(frames)
                if ftype == 8 and stream == 1:
                    seen.append(int.from_bytes(payload, "big"))
                    window += seen[-1]
            n = min(16384, window, len(message) - sent)
            conn.sendall(data(1, message[sent:sent + n]))
            sent, window = sent + n, window - n
        conn.sendall(headers(1, encoder.encode(OK_TRAILERS), "END_HEADERS", "END_STREAM"))
        hold(conn)

    with Peer(sock_path, script):
        assert unary_call(sock_path, METHOD, b"", 10.0, 16 * MiB) == body
    assert seen and sum(seen) >= len(message) - 1024 * 1024  # WINDOW_UPDATEs opened the rest


# ---- garbage


@pytest.mark.parametrize("answer, fragment", [
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", r"^not an HTTP/2 gRPC server: the answer starts with b'HTTP/1.1 400"),
    (bytes(range(256)), "^not an HTTP/2 gRPC server"),
    (frame(GoAwayFrame(0)), "^not an HTTP/2 gRPC server"),  # a server's first frame is SETTINGS
    (SETTINGS + b"\x00\x00\x05\x04\x00\x00\x00\x00\x00hello", "^HTTP/2 protocol error from the server"),
    (SETTINGS + headers(1, b"\xff\xff\xff\xff", "END_HEADERS"), "^HTTP/2 protocol error from the server"),
    (SETTINGS + data(1, b"\x00\x00\x00\x00\x00", "END_STREAM"), "^HTTP/2 protocol error"),  # DATA before HEADERS
    (SETTINGS[:5], "^connection closed by the server before its first frame$"),
    (b"", "^connection closed by the server before its first frame$"),
], ids=["http1", "binary", "goaway-first", "bad-settings-length", "bad-hpack", "data-before-headers",
        "half-a-frame", "closed"])
def test_garbage_gives_a_clear_error(sock_path, answer, fragment):
    def script(conn):
        wait_for_request(conn)
        conn.sendall(answer)
        conn.shutdown(socket.SHUT_WR)
        hold(conn)

    with Peer(sock_path, script):
        with pytest.raises(CallError, match=fragment) as info:
            unary_call(sock_path, METHOD, b"", 5.0, MiB)
    assert "\n" not in str(info.value)


# ---- random frame sequences


def raw_frame(ftype: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + stream.to_bytes(4, "big") + payload


_ENC = hpack.Encoder()
PIECES = [
    SETTINGS,
    frame(SettingsFrame(0, flags=["ACK"])),
    headers(1, _ENC.encode(RESPONSE_HEADERS), "END_HEADERS"),
    headers(1, _ENC.encode(RESPONSE_HEADERS)),
    continuation(1, b"", "END_HEADERS"),
    data(1, grpc_message(b"\x0a\x00")),
    data(1, b"\x00\x00\x00\x00\x00", "END_STREAM"),
    headers(1, _ENC.encode(OK_TRAILERS), "END_HEADERS", "END_STREAM"),
    frame(PingFrame(0, opaque_data=b"abcdefgh")),
    frame(WindowUpdateFrame(0, window_increment=1)),
    frame(WindowUpdateFrame(1, window_increment=2**31 - 1)),
    frame(RstStreamFrame(1, error_code=8)),
    frame(GoAwayFrame(0, last_stream_id=1, error_code=0)),
]
random_frame = st.builds(raw_frame, st.integers(0, 12), st.integers(0, 255),
                         st.sampled_from([0, 1, 2, 3, 2**31 - 1, 2**32 - 1]), st.binary(max_size=40))
answers = st.tuples(st.booleans(), st.lists(st.sampled_from(PIECES) | random_frame, max_size=12),
                    st.binary(max_size=12)).map(lambda t: (SETTINGS if t[0] else b"") + b"".join(t[1]) + t[2])


def test_random_frame_sequences_raise_only_call_error(sock_path):
    current = [b""]

    def script(conn):
        wait_for_request(conn)
        conn.sendall(current[0])
        conn.shutdown(socket.SHUT_WR)
        hold(conn)

    @settings(max_examples=250, deadline=None)
    @given(answers)
    def check(answer):
        current[0] = answer
        try:
            message = unary_call(sock_path, METHOD, b"", 5.0, MiB)
        except CallError as e:
            assert str(e) and "\n" not in str(e)
        else:
            assert isinstance(message, bytes)

    with Peer(sock_path, script):
        check()


# ---- a missing h2


def test_missing_h2_says_what_to_install_once(tmp_path, monkeypatch, caplog):
    path = tmp_path / "kubelet.sock"
    path.write_bytes(b"")  # present; the call fails before connecting
    monkeypatch.setitem(sys.modules, "h2", None)  # import h2 -> ImportError
    monkeypatch.setitem(sys.modules, "hpack", None)
    monkeypatch.delitem(sys.modules, "hetero_exporter.sources.podresources.h2", raising=False)
    monkeypatch.delattr(podresources_pkg, "h2", raising=False)
    with pytest.raises(PodResourcesError, match=r"pip install 'hetero-exporter\[attribution\]'"):
        list_pod_resources(str(path))
    poller = PodResourcesPoller(str(path), interval=3600)
    with caplog.at_level(logging.DEBUG, logger="hetero_exporter.sources.podresources.client"):
        assert not poller.refresh() and not poller.refresh()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "pip install" in warnings[0].error and not warnings[0].exc_info
    st_ = poller.status()
    assert not st_.ok and not st_.stale and "h2" in st_.error


def test_an_unforeseen_error_gives_one_traceback_then_debug_lines(tmp_path, monkeypatch, caplog):
    path = tmp_path / "kubelet.sock"
    path.write_bytes(b"")

    def broken(socket_path, timeout):
        raise ValueError("a bug in the decoding")

    monkeypatch.setattr(client, "_list", broken)
    poller = PodResourcesPoller(str(path), interval=3600)
    with caplog.at_level(logging.DEBUG, logger="hetero_exporter.sources.podresources.client"):
        for _ in range(3):
            assert not poller.refresh()
    assert [(r.levelno, bool(r.exc_info)) for r in caplog.records] == [
        (logging.WARNING, True), (logging.DEBUG, False), (logging.DEBUG, False)]
    assert poller.status().error == "ValueError: a bug in the decoding"
