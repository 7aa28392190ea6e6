"""The OTLP/HTTP exporter's HTTP session, reading a bounded part of the receiver's answer.

The SDK's exporter posts with ``requests``, which reads the whole answer into memory and inflates
a gzip body without limit: a receiver answering 300 MiB (or 300 KiB of gzip that inflates to
300 MiB) took the agent far past its 256 MiB memory limit. An OTLP answer is an
``ExportMetricsServiceResponse``: a partial-success count and an error message, a few bytes. This
session asks for no compression, streams the answer, keeps at most ``limit`` bytes of it (inflating
gzip or deflate itself, never past the limit) within ``deadline`` seconds, and raises
``AnswerRefused`` otherwise: the exporter's export fails and is counted as a failure. Imported only
where the ``otlp`` section asks for HTTP.
"""

from __future__ import annotations

import time
import zlib
from typing import Any

import requests

MAX_ANSWER_BYTES = 64 << 10  # an OTLP answer's partial-success message is bytes to a few KiB
CHUNK = 16 << 10
_GZIP_OR_ZLIB = 32 + zlib.MAX_WBITS  # zlib's "detect the header" window bits


class AnswerRefused(requests.exceptions.RequestException):
    """The receiver's answer was larger than the limit, slower than the deadline or in an unknown encoding."""


def _inflated(data: bytes, encoding: str, limit: int) -> bytes:
    """``data`` decoded from its Content-Encoding, at most ``limit`` bytes of it inflated."""
    if encoding in ("", "identity"):
        return data
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise AnswerRefused(f"the answer is in an encoding that was not asked for ({encoding[:40]!r})")
    inflater = zlib.decompressobj(_GZIP_OR_ZLIB)
    try:
        out = inflater.decompress(data, limit + 1)  # never more than limit + 1 bytes made
    except zlib.error as e:
        raise AnswerRefused(f"the answer's {encoding} body is corrupt: {e}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise AnswerRefused(f"the answer inflates to more than {limit} bytes")
    return out


def read_bounded(raw: Any, encoding: str, limit: int, deadline: float) -> bytes:
    """At most ``limit`` bytes of the answer ``raw`` (urllib3's response), whole by ``deadline``
    (time.monotonic()); AnswerRefused beyond either."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = raw.read(min(CHUNK, limit + 1 - size), decode_content=False)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise AnswerRefused(f"the answer is larger than {limit} bytes")
        if time.monotonic() > deadline:
            raise AnswerRefused("the answer took longer than the export's timeout")
    return _inflated(b"".join(chunks), encoding.strip().lower(), limit)


class BoundedSession(requests.Session):
    """A ``requests.Session`` whose answers are read by ``read_bounded``."""

    def __init__(self, limit: int = MAX_ANSWER_BYTES, timeout: float = 10.0) -> None:
        super().__init__()
        self.limit, self.timeout = limit, timeout
        self.headers["Accept-Encoding"] = "identity"

    def send(self, request: Any, **kwargs: Any) -> Any:
        kwargs["stream"] = True  # the body is read here, bounded, not by requests
        response = super().send(request, **kwargs)
        try:
            body = read_bounded(response.raw, response.headers.get("Content-Encoding", ""), self.limit,
                                time.monotonic() + self.timeout)
        finally:
            response.close()  # a partly read answer leaves the connection unusable: closed, not drained
        # requests' own fields of a read answer (.content returns _content once consumed); the
        # typeshed stubs declare _content only: a third-party private field, typed nowhere
        response._content, response._content_consumed = body, True  # type: ignore[attr-defined]
        return response
