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


def parse_rfc3339(s: Any) -> Optional[float]:
    """Unix seconds of a Kubernetes time, None when it is not one."""
    try:
        return datetime.datetime.strptime(str(s), "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
    except ValueError:
        return None


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
