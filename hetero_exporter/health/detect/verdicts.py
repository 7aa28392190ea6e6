"""The health judge: one rules step per snapshot, returning the judged snapshot and its evaluation.

``judge(snapshot)`` makes each device's ``health`` the rules' verdict (the collector's own report
kept as ``reported_health``), classifies its faults by the policy's catalogue (a configured
override is what the fault counters say) and returns the ``Evaluation`` with it, so whoever publishes the
snapshot publishes its evaluation beside it (``Sampler(judge=...)``, ``SnapshotStore``) and the
health loop never has to find it again. It keeps the one piece of state the pure rules need
between cycles (``rules.State``), so the health loop and ``health --dry-run`` can explain the
verdicts (pending warnings, evidence that cleared a fault) without recomputing anything.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Callable, Iterable, Mapping, Optional

from hetero_exporter.health.detect import gate as gate_mod
from hetero_exporter.health.detect import override as override_mod
from hetero_exporter.health.detect import rules
from hetero_exporter.health.detect.policy import Policy
from hetero_exporter.model import DeviceSample, Health, NodeSnapshot
from hetero_exporter.model.evaluation import Evaluation, GateHold, OccurrenceBook
from hetero_exporter.model.faults import Catalogue

log = logging.getLogger(__name__)
MAX_SAID = 256  # distinct problems of the override annotation remembered as said (logged once each)
# the recovery gates of a snapshot's devices from its Node's labels (uuid -> its class's gate), as
# app/agent.py and the health loop make it from health.classes: used until the plan's class table is seen
GatesOf = Callable[[NodeSnapshot, Mapping[str, str]], Mapping[str, gate_mod.RecoveryGate]]


class HealthVerdicts:
    """``Sampler(judge=HealthVerdicts(policy).judge)``: one rules step per snapshot."""

    __name__ = "health-verdicts"  # the sampler logs it by name

    def __init__(self, policy: Policy, state: Optional[rules.State] = None):
        self.policy = policy
        self._lock = threading.Lock()
        self._state = state or rules.State()
        self._verdicts: dict[str, rules.Verdict] = {}
        self._node: Optional[rules.NodeVerdict] = None
        self._overrides = override_mod.Overrides()
        self._said: set[str] = set()
        # the recovery gates (gate.py): the runner of their self-tests and the gates of a snapshot
        # before the plan's class table is seen (app and the health loop set them); uuid -> its
        # class's gate (None: no table seen yet), the devices watched, the Node as last read
        self.gate_runner: Optional[gate_mod.Runner] = None
        self.gates_of: Optional[GatesOf] = None
        self._gates: Optional[dict[str, gate_mod.RecoveryGate]] = None
        self._holds: dict[str, GateHold] = {}
        self._annotations: Mapping[str, Any] = {}
        self._labels: Mapping[str, str] = {}

    def see_node(self, annotations: Mapping[str, Any], override_key: str, now: float,
                 labels: Optional[Mapping[str, Any]] = None) -> None:
        """The Node as the health loop (or ``health --dry-run``) read it: its operators' overrides
        (annotation ``override_key``), honoured from the next judgement on, and the annotations
        the recovery gates' evidence is read from; ``labels`` (None: as before) class the devices
        until the plan's class table is seen. A problem of the override annotation is logged once."""
        raw = annotations.get(override_key)
        parsed = override_mod.parse(raw if isinstance(raw, str) else None, now)
        with self._lock:
            self._overrides = parsed
            self._annotations = annotations
            if labels is not None:
                self._labels = {k: x for k, x in labels.items() if isinstance(k, str) and isinstance(x, str)}
            fresh = [p for p in parsed.problems if p not in self._said]
            if len(self._said) + len(fresh) > MAX_SAID:
                self._said.clear()
            self._said.update(fresh)
        for problem in fresh:
            log.warning("health override annotation: " + problem, extra={"annotation": override_key})

    def see_gates(self, gates: Mapping[str, gate_mod.RecoveryGate]) -> None:
        """uuid -> the recovery gate of the device's class (the plan's class table, each cycle)."""
        with self._lock:
            self._gates = dict(gates)

    @property
    def holds(self) -> dict[str, GateHold]:
        with self._lock:
            return dict(self._holds)

    def _gate_step(self, snapshot: NodeSnapshot, verdicts: dict[str, rules.Verdict]) -> dict[str, rules.Verdict]:
        """The verdicts through the recovery gates (under the lock): the plan's table, else the
        gates ``gates_of`` finds for this snapshot; the evidence from the Node as last read."""
        gates = self._gates if self._gates is not None else (
            self.gates_of(snapshot, self._labels) if self.gates_of is not None else {})
        if not gates and not self._holds:
            return verdicts
        by_uuid = {d.identity.uuid: d for d in snapshot.devices}
        keys = {g.evidence_annotation for g in gates.values() if g.evidence_annotation}
        evidence = {k: x for k in keys if isinstance(x := self._annotations.get(k), str)}
        runner = self.gate_runner
        out, self._holds = gate_mod.step(
            verdicts, self._holds, by_uuid, gates,
            lambda d, g, h: gate_mod.checks(g, d, h, runner, evidence, snapshot.time), snapshot.time)
        return out

    def judge(self, snapshot: NodeSnapshot) -> tuple[NodeSnapshot, Evaluation]:
        """The snapshot with each device's health the verdict, and the evaluation it was judged by."""
        with self._lock:
            self._state, verdicts = rules.step(self._state, snapshot, self.policy)
            verdicts = self._gate_step(snapshot, verdicts)
            notes = self._overrides.notes
            verdicts = override_mod.apply(verdicts, notes, snapshot.time)
            self._verdicts = verdicts
        devices = tuple(_judged(d, verdicts.get(d.identity.uuid), self.policy.catalogue) for d in snapshot.devices)
        out = dataclasses.replace(snapshot, devices=devices)
        node = rules.node_verdict(out, verdicts, self.policy)
        with self._lock:
            self._node = node
            evaluation = Evaluation(out.time, verdicts, node, rules.sticky_faults(self._state),
                                    overrides=override_mod.current(notes, out.time), holds=dict(self._holds),
                                    occurrences=rules.occurrences(self._state), promotions=dict(self._state.promotions))
        return out, evaluation

    def __call__(self, snapshot: NodeSnapshot) -> NodeSnapshot:
        """``judge`` as an enricher (tests that read the judged devices only)."""
        return self.judge(snapshot)[0]

    @property
    def verdicts(self) -> dict[str, rules.Verdict]:
        with self._lock:
            return dict(self._verdicts)

    @property
    def node(self) -> Optional[rules.NodeVerdict]:
        with self._lock:
            return self._node

    def sticky(self) -> dict[str, list[rules.StickyFault]]:
        with self._lock:
            return rules.sticky_faults(self._state)

    def restore(self, sticky: Mapping[str, Iterable[rules.StickyFault]], boot_id: Optional[str],
                current_boot_id: Optional[str], occurrences: Optional[OccurrenceBook] = None,
                holds: Optional[Mapping[str, GateHold]] = None) -> None:
        """Seed the sticky faults (and the occurrences health.promote counts, the devices the
        recovery gates watch) an earlier agent process recorded on the Node."""
        restored = rules.restore(sticky, boot_id, current_boot_id, occurrences)
        with self._lock:
            self._holds = {**(holds or {}), **self._holds}
            devices = dict(self._state.devices)
            for uuid, ds in restored.devices.items():
                cur = devices.get(uuid)
                devices[uuid] = ds if cur is None else dataclasses.replace(
                    cur, sticky={**ds.sticky, **cur.sticky}, occurrences={**ds.occurrences, **cur.occurrences},
                    state=cur.state if rules.STATE_RANK[cur.state] >= rules.STATE_RANK[ds.state] else ds.state)
            self._state = rules.State(boot_id=self._state.boot_id or restored.boot_id, devices=devices,
                                      promotions=self._state.promotions)


def _judged(device: DeviceSample, verdict: Optional[rules.Verdict], catalogue: Catalogue) -> DeviceSample:
    """The device with the verdict as its health and its faults classified by the catalogue (a
    configured override of a code is what its fault counter says, not the shipped table's)."""
    vendor = device.identity.vendor
    if vendor in catalogue.overridden and device.faults:
        device = dataclasses.replace(device, faults=tuple(catalogue.classify(vendor, f) for f in device.faults))
    if verdict is None:
        return device
    return dataclasses.replace(device, health=Health(verdict.state, verdict.reasons), reported_health=device.report)
