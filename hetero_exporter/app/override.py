"""``hetero-exporter health override``: an operator's override of one device's health, written to
its Node's ``<domain>/health-override`` annotation (health/detect/override.py: the document the
agent honours until it expires), with an Event on the Node saying who set or cleared it.

The write is a JSON merge patch of that one annotation carrying the resourceVersion read, so a
concurrent writer (the agent's book, another operator) makes it 409 and the command reads and
merges again; expired entries are dropped on the way. Errors are one line: a bad flag exits 2,
an API refusal or an unreachable API server exits 1.
"""

from __future__ import annotations

import getpass
import json
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from hetero_exporter.errors import EXIT_OK, ExitError, InputError
from hetero_exporter.health.detect import override as override_mod
from hetero_exporter.health.detect.texts import event_id, rfc3339
from hetero_exporter.model.evaluation import OverrideNote
from hetero_exporter.model.keys import DEFAULT_DOMAIN, Keys

CONFLICT_RETRIES = 5
_DURATION = re.compile(r"(?:(\d{1,7})d)?(?:(\d{1,8})h)?(?:(\d{1,9})m)?(?:(\d{1,10})s)?")
_UNITS = (86400, 3600, 60, 1)


@dataclass(frozen=True)
class OverrideRequest:
    """The command line, checked (``check``)."""

    node: str
    device: str
    clear: bool = False
    state: str = ""
    for_seconds: float = 0.0
    reason: str = ""
    domain: str = DEFAULT_DOMAIN
    kubeconfig: Optional[str] = None


def duration(text: str) -> float:
    """``--for``: ``90s``, ``30m``, ``2h``, ``1d``, ``1h30m``: seconds, 1 s .. 30 days (InputError otherwise)."""
    m = _DURATION.fullmatch(text or "")
    if not text or m is None:
        raise InputError(f"--for: not a duration: {text[:40]!r}; allowed: 90s, 30m, 2h, 1d, 1h30m")
    seconds = float(sum(int(g) * u for g, u in zip(m.groups(), _UNITS) if g))
    if not 1 <= seconds <= override_mod.MAX_FOR_SECONDS:
        raise InputError(f"--for: {text} is out of range; allowed: 1s to "
                         f"{override_mod.MAX_FOR_SECONDS / 86400:g}d")
    return seconds


def check(args: Any) -> OverrideRequest:
    """The parsed flags as a request; InputError (exit 2, one line) for what is missing or wrong."""
    from hetero_exporter import validate as v
    node = v.string("--node", args.node, non_empty=True, max_length=253)
    device = args.device if isinstance(args.device, str) else ""
    if override_mod.one_line(device, override_mod.MAX_UUID) is None:
        raise InputError(f"--device: a device uuid of at most {override_mod.MAX_UUID} characters")
    domain = v.dns_subdomain("--domain", args.domain or DEFAULT_DOMAIN)
    if args.clear:
        given = [f for f in ("state", "for_", "reason") if getattr(args, f, None) is not None]
        if given:
            raise InputError(f"--clear takes no --{given[0].rstrip('_')}")
        return OverrideRequest(node, device, clear=True, domain=domain, kubeconfig=args.kubeconfig)
    missing = [f"--{f.rstrip('_')}" for f in ("state", "for_", "reason") if getattr(args, f, None) is None]
    if missing:
        raise InputError(f"{', '.join(missing)} missing; an override needs --state, --for and --reason (or --clear)")
    if args.state not in override_mod.STATES:
        raise InputError(f"--state: {args.state[:20]!r}; allowed: {', '.join(override_mod.STATES)}")
    if override_mod.one_line(args.reason, override_mod.MAX_REASON) is None:
        raise InputError(f"--reason: one line of 1 to {override_mod.MAX_REASON} characters")
    return OverrideRequest(node, device, state=args.state, for_seconds=duration(args.for_), reason=args.reason,
                           domain=domain, kubeconfig=args.kubeconfig)


def run(req: OverrideRequest, *, clock: Callable[[], float] = time.time) -> int:
    """Write the override (or clear it), then its Event; print one line saying what holds now."""
    from hetero_exporter.k8s.client import K8sError, connect
    from hetero_exporter.k8s.events import Events, ObjectRef
    from hetero_exporter.k8s.nodes import Nodes
    cluster = connect(req.kubeconfig)
    if not cluster.enabled:
        raise ExitError(cluster.reason)
    nodes = Nodes(cluster)
    key = Keys(req.domain).health_override
    by = _who(nodes)
    try:
        note, changed = _write(nodes, req, key, by, clock)
    except K8sError as e:
        raise ExitError(f"node {req.node}: {e}") from None
    line = _line(req, note, key)
    if changed:
        try:
            Events(cluster, component="hetero-exporter-override").create_for(
                ObjectRef.node(req.node), _event(req, note, by, clock()), clock())
        except K8sError as e:
            print(f"hetero-exporter: warning: the override is written but its event is not: {e}", file=sys.stderr)
    print(line)
    return EXIT_OK


def _who(nodes: Any) -> str:
    """Who sets it: the API server's name for the caller, else the local user's (said as such)."""
    from hetero_exporter.k8s.client import K8sError
    try:
        return nodes.who_am_i()[:override_mod.MAX_BY]
    except K8sError:
        try:
            local = getpass.getuser()
        except (KeyError, OSError):
            local = "unknown"
        return f"{local} (local user)"[:override_mod.MAX_BY]


def _write(nodes: Any, req: OverrideRequest, key: str, by: str,
           clock: Callable[[], float]) -> tuple[Optional[OverrideNote], bool]:
    """Read, merge and patch until no one wrote the Node in between; (the note written, or the
    one cleared; whether the annotation changed)."""
    from hetero_exporter.k8s.client import K8sError
    for _ in range(CONFLICT_RETRIES):
        node = nodes.get(req.node)
        meta = node.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        now = clock()
        if not req.clear:
            _known_device(annotations, req)
        raw = annotations.get(key)
        notes = {u: n for u, n in override_mod.parse(raw if isinstance(raw, str) else None, now).notes.items()
                 if not n.expired}
        if req.clear:
            note = notes.pop(req.device, None)
        else:
            note = notes[req.device] = OverrideNote(req.device, req.state, now + req.for_seconds, req.reason, by, now)
        value = override_mod.to_json(notes) if notes else None
        if value == raw or (value is None and raw is None):
            return note, False
        try:
            nodes.patch(req.node, {"metadata": {"annotations": {key: value}}},
                        resource_version=meta.get("resourceVersion"), merge=True)
            return note, True
        except K8sError as e:
            if not e.conflict:
                raise
    raise K8sError(f"kept changing under us ({CONFLICT_RETRIES} conflicts); try again")


def _known_device(annotations: Any, req: OverrideRequest) -> None:
    """InputError when the agent's devices annotation lists the node's devices and not this one."""
    text = annotations.get(Keys(req.domain).devices)
    try:
        doc = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return
    devices = doc.get("devices") if isinstance(doc, dict) else None
    if not isinstance(devices, list):
        return
    known = {(d.get("identity") or {}).get("uuid") for d in devices if isinstance(d, dict)}
    if req.device not in known:
        raise InputError(f"--device: {req.device} is not a device of node {req.node} (its "
                         f"{Keys(req.domain).devices} annotation lists {len(known)})")


def _line(req: OverrideRequest, note: Optional[OverrideNote], key: str) -> str:
    if req.clear:
        return (f"node {req.node}: override of {req.device} cleared ({key})" if note is not None
                else f"node {req.node}: no override of {req.device} to clear ({key})")
    assert note is not None
    return f"node {req.node}: {req.device} {note.state}, {override_mod.text(note)} ({key})"


def _event(req: OverrideRequest, note: Optional[OverrideNote], by: str, now: float) -> Any:
    from hetero_exporter.k8s.events import NodeEvent
    if req.clear:
        what, reason = f"{by} cleared the override of {req.device}", "AcceleratorOverrideCleared"
    else:
        assert note is not None
        what = f"{by} set {req.device} {note.state} until {rfc3339(note.until)}: {note.reason}"
        reason = "AcceleratorOverrideSet"
    name = f"{req.node}.{event_id(req.node, req.device, reason, now)}"[:253]
    return NodeEvent(name=name, type="Normal", reason=reason, message=what, action="Override", time=now)
