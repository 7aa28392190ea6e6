"""``/metrics`` bodies rendered once per snapshot.

The registry holds the snapshot collector, which yields the very same family objects for as
long as the snapshot is unchanged and ends with the snapshot-age gauge, and small extras
registered beside it (kernel log, health actions) that change at any scrape. So a scrape splits
the families at the age gauge: the part before it (the snapshot's) is rendered once and its
bytes reused while the same family objects come back; the age gauge and the extras are
rendered per scrape and appended. Gzip likewise: the snapshot part is deflated once with a sync
flush and the compressor state kept; a scrape copies that state and deflates only the extras,
giving one valid gzip member. OpenMetrics' single ``# EOF`` ends the whole body. An OpenMetrics
scrape collects inside ``openmetrics.rendering(True)``, so the snapshot collector yields its
counters with ``_created`` and exemplars, and the agent's counters other collectors yield get
theirs (``openmetrics.stamp``): each format has its own family objects and its own cached bytes,
and the text format's are what they were before OpenMetrics carried more.

Assumes, as prometheus_client's own collectors do, that a family object yielded again has not
been changed in place.
"""

from __future__ import annotations

import struct
import threading
import zlib
from typing import Any, Callable, Iterable, Optional

from prometheus_client import exposition as _prom
from prometheus_client.exposition import choose_encoder, generate_latest

from hetero_exporter.exposition import openmetrics as om
from hetero_exporter.model import names as N

_AGE = N.SNAPSHOT_AGE.family
_EOF = b"# EOF\n"
# the text format every Prometheus reads (prometheus_client < 0.22 calls it CONTENT_TYPE_LATEST)
CONTENT_TYPE_PLAIN_0_0_4 = getattr(_prom, "CONTENT_TYPE_PLAIN_0_0_4", "text/plain; version=0.0.4; charset=utf-8")
_OPENMETRICS = "application/openmetrics-text"
# versions prometheus_client renders; a media range naming another is skipped, so a client's
# typo (or attack) can neither fail the scrape nor multiply cache entries
_KNOWN_VERSIONS = {"text/plain": {"0.0.4", "1.0.0"}, _OPENMETRICS: {"0.0.1", "1.0.0", "2.0.0"}}
_MAX_ENTRIES = 8  # formats cached at once (text, OpenMetrics, their escapings)
GZIP_LEVEL = 1    # the first scrape of a snapshot pays it: fast beats small
# gzip member header: magic, deflate, no flags, no mtime, "fastest" (XFL 4), unknown OS
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x04\xff"

Encoder = Callable[[Any], bytes]


def negotiate(accept: Optional[str]) -> tuple[Encoder, str]:
    """(encoder, content type) for an Accept header: prometheus_client's choice among the media
    ranges it knows, else the text format 0.0.4 (never an error)."""
    kept = []
    for media_range in (accept or "")[:4096].split(","):
        media_type, *params = (p.strip() for p in media_range.split(";"))
        known = _KNOWN_VERSIONS.get(media_type.lower())
        if known is None:
            continue
        version = next((p.partition("=")[2].strip() for p in params if p.partition("=")[0].strip() == "version"), None)
        if version is not None and version not in known:
            continue
        kept.append(media_range)
    try:
        return choose_encoder(",".join(kept))
    except Exception:  # noqa: BLE001 - whatever prometheus_client cannot parse: the plain format
        return generate_latest, CONTENT_TYPE_PLAIN_0_0_4


class _Families:
    """A registry-like view of fixed families, for the encoders."""

    def __init__(self, families: Iterable[Any]):
        self._families = families

    def collect(self) -> Iterable[Any]:
        return self._families


class _GzipPrefix:
    """A gzip member's start (header + deflated ``data``, sync-flushed) and the compressor state
    after it, so the same prefix ends differently at each scrape without deflating it again."""

    def __init__(self, data: bytes):
        deflate = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
        self.head = _GZIP_HEADER + deflate.compress(data) + deflate.flush(zlib.Z_SYNC_FLUSH)
        self._state = deflate
        self._crc = zlib.crc32(data)
        self._size = len(data)

    def finish(self, tail: bytes) -> list[bytes]:
        deflate = self._state.copy()
        end = deflate.compress(tail) + deflate.flush()
        trailer = struct.pack("<II", zlib.crc32(tail, self._crc), (self._size + len(tail)) & 0xFFFFFFFF)
        return [self.head, end + trailer]


class _Prefix:
    __slots__ = ("families", "text", "gzip")

    def __init__(self, families: tuple, text: bytes):
        self.families, self.text = families, text
        self.gzip: Optional[_GzipPrefix] = None


def _same(a: tuple, b: list) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


class Exposition:
    """Renders a registry for one Accept header, reusing the snapshot part (see the module).
    ``started`` (Unix seconds, default this process's start) is the created time of the agent's
    counters that carry none; ``renders`` counts renders of a snapshot part (a test hook)."""

    def __init__(self, registry: Any, started: Optional[float] = None):
        self._registry = registry
        self._started = om.process_start() if started is None else started  # the agent's counters' created time
        self._lock = threading.Lock()
        self._entries: dict[str, _Prefix] = {}
        self.renders = 0

    def render(self, accept: Optional[str], gzip: bool, gzip_min: int = 1024) -> tuple[list[bytes], str, bool]:
        """(body chunks, content type, gzipped): gzipped (one gzip member) when asked and the
        body is over gzip_min bytes."""
        encoder, ctype = negotiate(accept)
        openmetrics = ctype.startswith(_OPENMETRICS)
        with om.rendering(openmetrics):  # the snapshot's counters with created samples and exemplars, or not
            families = list(self._registry.collect())
        if openmetrics:  # the agent's counters other modules render: created at this process's start
            families = om.stamp(families, self._started)
        cut = next((i for i, f in enumerate(families) if f.name == _AGE), 0)
        prefix = self._prefix(ctype, encoder, families[:cut], openmetrics)
        tail = encoder(_Families(families[cut:]))
        if openmetrics and not tail.endswith(_EOF):
            tail += _EOF
        if not gzip or len(prefix.text) + len(tail) <= gzip_min:
            return [prefix.text, tail], ctype, False
        with self._lock:
            if prefix.gzip is None:
                prefix.gzip = _GzipPrefix(prefix.text)
            gz = prefix.gzip
        return gz.finish(tail), ctype, True

    def _prefix(self, ctype: str, encoder: Encoder, head: list, openmetrics: bool) -> _Prefix:
        with self._lock:
            entry = self._entries.get(ctype)
            if entry is not None and _same(entry.families, head):
                return entry
            text = encoder(_Families(head)) if head else b""
            if openmetrics and text.endswith(_EOF):
                text = text[:-len(_EOF)]
            entry = _Prefix(tuple(head), text)
            self._entries.pop(ctype, None)
            self._entries[ctype] = entry
            while len(self._entries) > _MAX_ENTRIES:
                self._entries.pop(next(iter(self._entries)))
            self.renders += 1
            return entry
