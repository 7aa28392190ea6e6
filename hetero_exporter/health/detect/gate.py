"""The recovery gate of a device class (``health.classes[].recovery_gate``): before a device that
failed is cleared, its class's check must pass; until then the device is ``recovering`` (no new
work: for the scheduler and the taints it is not schedulable, but it is not failed).

A gate names one check or both (both must pass):

- ``exec``: a vendor tool's self-test, argv with ``{uuid}``, ``{index}`` and ``{pci_address}``
  filled per device, run below the host root with a deadline (``timeout_seconds``) by the
  agent's gate runner (sources/recovery_gate.py); exit 0 passes. A run counts only when it
  started after the device stopped being failed; a failed run is tried again after
  ``retry_seconds``.
- ``evidence_annotation``: a Node annotation an external certifier writes, JSON
  ``{"<uuid>": {"result": "pass", "time": "2025-06-01T12:00:00Z", "detail": "..."}}``: a pass
  dated after the device's failure passes. Read as hostile (size, shape, text bounds).

``step`` is pure: this snapshot's verdicts and the holds (when each device failed, since when
it recovers) in, the verdicts with ``recovering`` and the new holds out. The gate's last result
is the reason shown; a device released by its gate has ``recovery-gate`` among the evidence
that cleared it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

from hetero_exporter import validate as v
from hetero_exporter.health.detect.texts import parse_rfc3339
from hetero_exporter.model import DeviceSample, Fault
from hetero_exporter.model.evaluation import GATE_CODE, GateHold, GateResult, Verdict

GATE_KEYS = ("exec", "timeout_seconds", "evidence_annotation", "retry_seconds")
MAX_ARGV, MAX_ARG = 32, 1024
MAX_EVIDENCE_BYTES = 64 << 10
MAX_DETAIL = 200  # characters of a result shown as the reason
MAX_HOLDS = 1024  # devices remembered as failed or recovering (a node has a few dozen)
_PLACEHOLDERS = ("uuid", "index", "pci_address")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
_QUALIFIED = r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"


@dataclass(frozen=True)
class RecoveryGate:
    """One class's gate (at least one check named)."""

    exec: tuple[str, ...] = ()
    timeout_seconds: float = 300.0
    evidence_annotation: str = ""
    retry_seconds: float = 600.0

    def argv(self, d: DeviceSample) -> tuple[str, ...]:
        """The self-test's argv for ``d`` (placeholders filled, nothing else interpreted)."""
        values = {"uuid": d.identity.uuid, "index": str(d.identity.index), "pci_address": d.identity.pci_address or ""}
        return tuple(re.sub(r"\{(uuid|index|pci_address)\}", lambda m: values[m.group(1)], a) for a in self.exec)

    def checks(self) -> str:
        names = ([f"the self-test {' '.join(self.exec)[:120]}"] if self.exec else []) + (
            [f"a pass in {self.evidence_annotation}"] if self.evidence_annotation else [])
        return " and ".join(names)


def _arg(path: str, value: Any) -> str:
    text = v.string(path, value, non_empty=True, max_length=MAX_ARG, pattern=r"[^\x00-\x1f\x7f]+")
    for name in re.findall(r"\{([^{}]*)\}", text):
        if name not in _PLACEHOLDERS:
            raise v.ValidationError(path, f"unknown placeholder {{{name}}}", ", ".join(f"{{{p}}}" for p in _PLACEHOLDERS))
    return text


def parse(path: str, value: Any) -> RecoveryGate:
    """A class's ``recovery_gate``, checked (one line naming the key)."""
    if isinstance(value, RecoveryGate):
        return value
    doc = v.mapping(path, value, GATE_KEYS)
    argv = tuple(v.list_of(v.join(path, "exec"), doc.get("exec") or [], _arg, max_items=MAX_ARGV))
    if argv and not argv[0].startswith("/"):
        raise v.ValidationError(v.join(path, "exec") + "[0]", "not an absolute path on the host",
                                "e.g. /usr/bin/dcgmi (run below the host root)")
    evidence = v.optional(doc, path, "evidence_annotation", v.string, pattern=_QUALIFIED, max_length=253) or ""
    if not argv and not evidence:
        raise v.ValidationError(path, "names no check", "exec, evidence_annotation or both")
    return RecoveryGate(argv, v.optional(doc, path, "timeout_seconds", v.number, minimum=1, maximum=3600,
                                         unit="seconds", default=300.0),
                        evidence, v.optional(doc, path, "retry_seconds", v.number, minimum=10, maximum=86400,
                                             unit="seconds", default=600.0))


def evidence(text: Optional[str], uuid: str, after: float) -> Optional[GateResult]:
    """The certifier's result for ``uuid`` in the annotation's value, if it is dated after
    ``after`` (the failure); None when there is none yet (or it cannot be read)."""
    if not isinstance(text, str) or len(text) > MAX_EVIDENCE_BYTES:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    entry = doc.get(uuid) if isinstance(doc, dict) else None
    if not isinstance(entry, dict) or entry.get("result") not in ("pass", "fail"):
        return None
    when = parse_rfc3339(entry.get("time")) if isinstance(entry.get("time"), str) and _TIME.fullmatch(
        entry["time"]) else None
    if when is None or when <= after:
        return None
    detail = entry.get("detail")
    shown = detail[:MAX_DETAIL] if isinstance(detail, str) and detail.isprintable() else ""
    return GateResult(entry["result"] == "pass", when, f"{entry['result']}{': ' + shown if shown else ''}")


# one check's result (None: not yet), for a device, its gate and hold
Check = Callable[[DeviceSample, RecoveryGate, GateHold], Sequence[Optional[GateResult]]]


class Runner(Protocol):
    """What runs the self-tests (sources/recovery_gate.py ``ExecGates``): answers at once."""

    def result(self, d: DeviceSample, argv: tuple[str, ...], timeout: float, retry: float,
               after: float) -> Optional[GateResult]: ...


def checks(gate: RecoveryGate, d: DeviceSample, held: GateHold, runner: Optional[Runner],
           annotations: Mapping[str, str], now: float) -> list[Optional[GateResult]]:
    """The results of the gate's checks for ``d``: the self-test's (a run that started after it
    stopped being failed) and the evidence's (dated after it failed)."""
    out: list[Optional[GateResult]] = []
    if gate.exec:
        out.append(GateResult(False, now, "no self-test runner here (health --dry-run runs none)") if runner is None
                   else runner.result(d, gate.argv(d), gate.timeout_seconds, gate.retry_seconds,
                                      held.recovering_since or now))
    if gate.evidence_annotation:
        out.append(evidence(annotations.get(gate.evidence_annotation), d.identity.uuid, held.failed_at))
    return out


def _fault(gate: RecoveryGate, results: Sequence[Optional[GateResult]], since: float) -> Fault:
    said = "; ".join(r.detail if r is not None else "not yet" for r in results)
    return Fault(code=GATE_CODE, fault_class=GATE_CODE, action="none", severity="warning", source="health.gate",
                 message=f"recovering: waiting for {gate.checks()} ({said})"[:MAX_ARG], first_seen=since,
                 last_seen=since)


def step(verdicts: Mapping[str, Verdict], holds: Mapping[str, GateHold], devices: Mapping[str, DeviceSample],
         gates: Mapping[str, RecoveryGate], check: Check, now: float) -> tuple[dict[str, Verdict], dict[str, GateHold]]:
    """The verdicts with a device that failed and is no longer failed held ``recovering`` until its
    gate passes (``gates``: uuid -> its class's gate; a device of no gate is released at once),
    and the holds that go on. Devices absent this time keep their hold."""
    out = dict(verdicts)
    kept: dict[str, GateHold] = {}
    for uuid, verdict in verdicts.items():
        held = holds.get(uuid)
        if verdict.state == "failed":
            kept[uuid] = held if held is not None and held.recovering_since is None else GateHold(now)
            continue
        gate, d = gates.get(uuid), devices.get(uuid)
        if held is None or gate is None or d is None:
            continue
        held = dataclasses.replace(held, recovering_since=held.recovering_since or now)
        results = check(d, gate, held)
        if results and all(r is not None and r.passed for r in results):
            said = "; ".join(r.detail for r in results if r is not None)
            out[uuid] = dataclasses.replace(verdict, cleared=verdict.cleared + (GATE_CODE,),
                                            cleared_by={**verdict.cleared_by, GATE_CODE: said})
            continue
        kept[uuid] = held
        out[uuid] = dataclasses.replace(verdict, state="recovering", node_level=False,
                                        reasons=(_fault(gate, results, held.recovering_since or now),))
    for uuid, held in holds.items():
        if uuid not in verdicts and len(kept) < MAX_HOLDS:
            kept[uuid] = held
    return out, kept
