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
import threading
from typing import Iterable, Mapping, Optional

from hetero_exporter.health.detect import rules
from hetero_exporter.health.detect.policy import Policy
from hetero_exporter.model import DeviceSample, Health, NodeSnapshot
from hetero_exporter.model.evaluation import Evaluation
from hetero_exporter.model.faults import Catalogue


class HealthVerdicts:
    """``Sampler(judge=HealthVerdicts(policy).judge)``: one rules step per snapshot."""

    __name__ = "health-verdicts"  # the sampler logs it by name

    def __init__(self, policy: Policy, state: Optional[rules.State] = None):
        self.policy = policy
        self._lock = threading.Lock()
        self._state = state or rules.State()
        self._verdicts: dict[str, rules.Verdict] = {}
        self._node: Optional[rules.NodeVerdict] = None

    def judge(self, snapshot: NodeSnapshot) -> tuple[NodeSnapshot, Evaluation]:
        """The snapshot with each device's health the verdict, and the evaluation it was judged by."""
        with self._lock:
            self._state, verdicts = rules.step(self._state, snapshot, self.policy)
            self._verdicts = verdicts
        devices = tuple(_judged(d, verdicts.get(d.identity.uuid), self.policy.catalogue) for d in snapshot.devices)
        out = dataclasses.replace(snapshot, devices=devices)
        node = rules.node_verdict(out, verdicts, self.policy)
        with self._lock:
            self._node = node
            evaluation = Evaluation(out.time, verdicts, node, rules.sticky_faults(self._state))
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
                current_boot_id: Optional[str]) -> None:
        """Seed the sticky faults an earlier agent process recorded on the Node."""
        restored = rules.restore(sticky, boot_id, current_boot_id)
        with self._lock:
            devices = dict(self._state.devices)
            for uuid, ds in restored.devices.items():
                cur = devices.get(uuid)
                devices[uuid] = ds if cur is None else dataclasses.replace(
                    cur, sticky={**ds.sticky, **cur.sticky},
                    state=cur.state if rules.STATE_RANK[cur.state] >= rules.STATE_RANK[ds.state] else ds.state)
            self._state = rules.State(boot_id=self._state.boot_id or restored.boot_id, devices=devices)


def _judged(device: DeviceSample, verdict: Optional[rules.Verdict], catalogue: Catalogue) -> DeviceSample:
    """The device with the verdict as its health and its faults classified by the catalogue (a
    configured override of a code is what its fault counter says, not the shipped table's)."""
    vendor = device.identity.vendor
    if vendor in catalogue.overridden and device.faults:
        device = dataclasses.replace(device, faults=tuple(catalogue.classify(vendor, f) for f in device.faults))
    if verdict is None:
        return device
    return dataclasses.replace(device, health=Health(verdict.state, verdict.reasons), reported_health=device.report)
