"""The stream's views as the messages of ``health_stream.proto`` (protobuf, no grpc).

States, severities and actions map by name (``failed`` -> ``DEVICE_STATE_FAILED``, ``reset-device``
-> ``ACTION_RESET_DEVICE``); a word the proto does not know is its ``*_UNSPECIFIED``. A health batch
larger than the stream's message size is split into messages with ``more`` set on all but the last.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

from google.protobuf.timestamp_pb2 import Timestamp

from hetero_exporter.health.act.stream import health_stream_pb2 as pb
from hetero_exporter.health.act.stream.hub import HealthBatch
from hetero_exporter.health.act.stream.views import DeviceView, EpisodeEvent
from hetero_exporter.model import DeviceIdentity, Fault

ENVELOPE_BYTES = 1024  # an update's own fields (node, time, flags) and each device's framing


def _enum(enum: Any, prefix: str, word: str) -> int:
    """``prefix + WORD`` of ``enum`` (dashes as underscores), 0 (unspecified) for a word it lacks."""
    name = prefix + word.upper().replace("-", "_")
    return int(enum.Value(name)) if name in enum.keys() else 0


def state(word: str) -> int:
    return _enum(pb.DeviceState, "DEVICE_STATE_", word)


def _time(t: Optional[float]) -> Optional[Timestamp]:
    if t is None:
        return None
    ts = Timestamp()
    ts.FromNanoseconds(int(round(t * 1e9)))
    return ts


def identity(i: DeviceIdentity) -> Any:
    return pb.DeviceIdentity(uuid=i.uuid, vendor=i.vendor, kind=i.kind, index=max(0, i.index),
                             pci_address=i.pci_address or "", model=i.model or "", parent=i.parent or "")


def reason(f: Fault) -> Any:
    return pb.Reason(code=str(f.code), fault_class=f.fault_class, action=_enum(pb.Action, "ACTION_", f.action),
                     severity=_enum(pb.Severity, "SEVERITY_", f.severity), message=f.message,
                     first_seen=_time(f.first_seen), last_seen=_time(f.last_seen), count=max(0, f.count),
                     source=f.source)


def device_health(v: DeviceView) -> Any:
    q = v.quality
    quality = pb.QualitySummary(readings=q.readings, ok=q.ok, stale=q.stale, error=q.error, unsupported=q.unsupported,
                                oldest_age_seconds=q.oldest_age_seconds, collector_ok=bool(q.collector_ok))
    return pb.DeviceHealth(device=identity(v.identity), state=state(v.state), reasons=[reason(f) for f in v.reasons],
                           quality=quality, since=_time(v.since), observed=_time(v.observed))


def health_updates(node: str, batch: HealthBatch, max_bytes: int) -> Iterator[Any]:
    """``batch`` as one ``DeviceHealthUpdate``, or several of at most ``max_bytes`` each (``more``
    on all but the last: the receiver acts on the last)."""
    def update(devices: list, removed: list) -> Any:
        return pb.DeviceHealthUpdate(node=node, observed=_time(batch.time), full=batch.full, devices=devices,
                                     removed=removed)

    parts: list[tuple[list, list]] = [([], [])]
    size = ENVELOPE_BYTES
    items = [(0, device_health(v)) for v in batch.views] + [(1, identity(i)) for i in batch.removed]
    for which, msg in items:
        n = msg.ByteSize() + 16
        if size + n > max_bytes and (parts[-1][0] or parts[-1][1]):
            parts.append(([], []))
            size = ENVELOPE_BYTES
        parts[-1][which].append(msg)
        size += n
    for k, (devices, removed) in enumerate(parts):
        msg = update(devices, removed)
        msg.more = k < len(parts) - 1
        yield msg


def device_event(node: str, e: EpisodeEvent) -> Any:
    kind = pb.DeviceEvent.KIND_RECOVERED if e.recovered else pb.DeviceEvent.KIND_OPENED
    return pb.DeviceEvent(node=node, kind=kind, episode_id=e.episode_id, device=identity(e.identity),
                          reason=reason(e.fault), state=state(e.state), time=_time(e.time), opened=_time(e.opened),
                          message=e.message, replay=e.replay)
