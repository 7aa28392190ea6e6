"""The stream's views as the messages of ``health_stream.proto`` (protobuf, no grpc).

States, severities and actions map by name through the tables below (``failed`` ->
``DEVICE_STATE_FAILED``, ``reset-device`` -> ``ACTION_RESET_DEVICE``; tests/test_health_stream.py
checks every word of the model has its value); a word the proto does not know is its
``*_UNSPECIFIED``. A health batch larger than the stream's message size is split into messages
with ``more`` set on all but the last.
"""

from __future__ import annotations

from typing import Iterator, Optional, Union

from google.protobuf.timestamp_pb2 import Timestamp

from hetero_exporter.health.act.stream import health_stream_pb2 as pb
from hetero_exporter.health.act.stream.hub import HealthBatch
from hetero_exporter.health.act.stream.views import DeviceView, EpisodeEvent
from hetero_exporter.model import DeviceIdentity, Fault

ENVELOPE_BYTES = 1024  # an update's own fields (node, time, flags) and each device's framing

STATES: dict[str, pb.DeviceState] = {
    "ok": pb.DEVICE_STATE_OK, "degraded": pb.DEVICE_STATE_DEGRADED, "failed": pb.DEVICE_STATE_FAILED,
    "unknown": pb.DEVICE_STATE_UNKNOWN, "recovering": pb.DEVICE_STATE_RECOVERING}
SEVERITIES: dict[str, pb.Severity] = {
    "info": pb.SEVERITY_INFO, "warning": pb.SEVERITY_WARNING, "critical": pb.SEVERITY_CRITICAL}
ACTIONS: dict[str, pb.Action] = {
    "none": pb.ACTION_NONE, "restart-app": pb.ACTION_RESTART_APP, "reset-device": pb.ACTION_RESET_DEVICE,
    "reboot-node": pb.ACTION_REBOOT_NODE, "contact-support": pb.ACTION_CONTACT_SUPPORT,
    "isolate-device": pb.ACTION_ISOLATE_DEVICE}


def state(word: str) -> pb.DeviceState:
    return STATES.get(word, pb.DEVICE_STATE_UNSPECIFIED)


def _time(t: Optional[float]) -> Optional[Timestamp]:
    if t is None:
        return None
    ts = Timestamp()
    ts.FromNanoseconds(int(round(t * 1e9)))
    return ts


def identity(i: DeviceIdentity) -> pb.DeviceIdentity:
    return pb.DeviceIdentity(uuid=i.uuid, vendor=i.vendor, kind=i.kind, index=max(0, i.index),
                             pci_address=i.pci_address or "", model=i.model or "", parent=i.parent or "")


def reason(f: Fault) -> pb.Reason:
    return pb.Reason(code=str(f.code), fault_class=f.fault_class,
                     action=ACTIONS.get(f.action, pb.ACTION_UNSPECIFIED),
                     severity=SEVERITIES.get(f.severity, pb.SEVERITY_UNSPECIFIED), message=f.message,
                     first_seen=_time(f.first_seen), last_seen=_time(f.last_seen), count=max(0, f.count),
                     source=f.source)


def device_health(v: DeviceView) -> pb.DeviceHealth:
    q = v.quality
    quality = pb.QualitySummary(readings=q.readings, ok=q.ok, stale=q.stale, error=q.error, unsupported=q.unsupported,
                                oldest_age_seconds=q.oldest_age_seconds, collector_ok=bool(q.collector_ok))
    return pb.DeviceHealth(device=identity(v.identity), state=state(v.state), reasons=[reason(f) for f in v.reasons],
                           quality=quality, since=_time(v.since), observed=_time(v.observed))


def health_updates(node: str, batch: HealthBatch, max_bytes: int) -> Iterator[pb.DeviceHealthUpdate]:
    """``batch`` as one ``DeviceHealthUpdate``, or several of at most ``max_bytes`` each (``more``
    on all but the last: the receiver acts on the last)."""
    parts: list[tuple[list[pb.DeviceHealth], list[pb.DeviceIdentity]]] = [([], [])]
    size = ENVELOPE_BYTES
    items: list[Union[pb.DeviceHealth, pb.DeviceIdentity]] = [device_health(v) for v in batch.views]
    items += [identity(i) for i in batch.removed]
    for msg in items:
        n = msg.ByteSize() + 16
        if size + n > max_bytes and (parts[-1][0] or parts[-1][1]):
            parts.append(([], []))
            size = ENVELOPE_BYTES
        if isinstance(msg, pb.DeviceHealth):
            parts[-1][0].append(msg)
        else:
            parts[-1][1].append(msg)
        size += n
    for k, (devices, removed) in enumerate(parts):
        yield pb.DeviceHealthUpdate(node=node, observed=_time(batch.time), full=batch.full, devices=devices,
                                    removed=removed, more=k < len(parts) - 1)


def device_event(node: str, e: EpisodeEvent) -> pb.DeviceEvent:
    kind = pb.DeviceEvent.KIND_RECOVERED if e.recovered else pb.DeviceEvent.KIND_OPENED
    return pb.DeviceEvent(node=node, kind=kind, episode_id=e.episode_id, device=identity(e.identity),
                          reason=reason(e.fault), state=state(e.state), time=_time(e.time), opened=_time(e.opened),
                          message=e.message, replay=e.replay)
