"""The texts a plan writes: times, label values, device names, fault descriptions, event ids."""

from __future__ import annotations

import datetime
import hashlib
import re
from typing import Any, Optional

from hetero_exporter.health.detect.policy import Policy
from hetero_exporter.model import DeviceSample, Fault

_LABEL_VALUE = re.compile(r"[^A-Za-z0-9._-]+")


def rfc3339(t: float) -> str:
    """Unix seconds as Kubernetes writes times (``%Y-%m-%dT%H:%M:%SZ``, UTC)."""
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# Kubernetes' Time (``2026-12-06T23:45:00Z``) and MicroTime (up to six digits of fraction before
# the ``Z``), by a regular expression rather than strptime: strptime takes one process-wide lock
# and asks the locale at every call, and in a 1,000-node fleet burst (benchmarks/fleet_burst.py)
# 31 of 33 health loops in a thread dump were queued on it.
_K8S_TIME = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?Z")


def parse_k8s_time(s: Any, *, micro: bool = False) -> Optional[float]:
    """Unix seconds of a Kubernetes Time (with ``micro``: a MicroTime too), None when it is not
    one (not a string, another layout, a day or hour that does not exist)."""
    m = _K8S_TIME.fullmatch(s) if isinstance(s, str) and len(s) <= 40 else None
    if m is None or (m.group(7) is not None and not micro):
        return None
    micros = int((m.group(7) or "").ljust(6, "0"))  # strptime's %f: "5" is 500000 microseconds
    try:
        y, mo, d, h, mi, sec = (int(g) for g in m.groups()[:6])
        when = datetime.datetime(y, mo, d, h, mi, sec, micros, tzinfo=datetime.timezone.utc)
    except ValueError:
        return None
    return when.timestamp()


def parse_rfc3339(s: Any) -> Optional[float]:
    """Unix seconds of a Kubernetes time (``%Y-%m-%dT%H:%M:%SZ``), None when it is not one."""
    return parse_k8s_time(s)


def label_value(s: str) -> str:
    """A valid label value (<= 63 chars, alphanumeric at both ends)."""
    v = _LABEL_VALUE.sub("-", s)[:63].strip("-_.")
    return v or "unknown"


def device_name(d: DeviceSample) -> str:
    i = d.identity
    return f"{i.vendor} {i.kind.upper()} {i.index} ({i.uuid})"


def fault_text(vendor: str, f: Fault, policy: Policy, uuid: str = "") -> str:
    """``<code>: <catalogue description> [device-lost, action reboot-node]``. The collector's
    message is added when it says more than the catalogue, not when it only names the device
    again (``uuid``), which the text around it does already."""
    info = policy.catalogue.lookup(vendor, f.code)
    prefix = policy.code_prefix(vendor)
    name = f"{prefix.upper()} {f.code}" if prefix and str(f.code).isdigit() else str(f.code)
    what = info.description if info.known and info.description else (f.message or "")
    repeats = bool(uuid) and uuid in (f.message or "")
    if f.message and info.known and f.message not in what and not repeats:
        what = f"{what} ({f.message})" if what else f.message
    return f"{name}: {what} [{f.fault_class}, action {f.action}]" if what else f"{name} [{f.fault_class}, action {f.action}]"


def event_id(*parts: Any) -> str:
    """A fixed event name part (20 hex) from what the event is about: the same fault episode
    gives the same name, so a resend is answered AlreadyExists."""
    return hashlib.sha1("\x00".join(str(p) for p in parts).encode()).hexdigest()[:20]


_event_id = event_id  # the name used before it was public
