"""The sampler enricher that makes each published device's ``health`` the rules' verdict.

It keeps the one piece of state the pure rules need between cycles (``rules.State``) and the
latest verdicts, so the health loop and ``health --dry-run`` can explain them (pending
warnings, evidence that cleared a fault) without recomputing anything.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from hetero_exporter.health.detect import rules
from hetero_exporter.health.detect.policy import Policy
from hetero_exporter.model import Health, NodeSnapshot


@dataclass(frozen=True)
class Evaluation:
    """What the rules said about one snapshot."""

    time: float
    verdicts: Mapping[str, rules.Verdict]
    node: rules.NodeVerdict
    sticky: Mapping[str, list[rules.StickyFault]]


class HealthVerdicts:
    """``Sampler(enrichers=[HealthVerdicts(policy)])``: one rules step per snapshot."""

    __name__ = "health-verdicts"  # the sampler logs enrichers by name

    def __init__(self, policy: Policy, state: Optional[rules.State] = None):
        self.policy = policy
        self._lock = threading.Lock()
        self._state = state or rules.State()
        self._verdicts: dict[str, rules.Verdict] = {}
        self._node: Optional[rules.NodeVerdict] = None
        self._recent: deque[Evaluation] = deque(maxlen=8)

    def __call__(self, snapshot: NodeSnapshot) -> NodeSnapshot:
        with self._lock:
            self._state, verdicts = rules.step(self._state, snapshot, self.policy)
            self._verdicts = verdicts
        devices = tuple(
            dataclasses.replace(d, health=Health(verdicts[d.identity.uuid].state, verdicts[d.identity.uuid].reasons))
            if d.identity.uuid in verdicts else d
            for d in snapshot.devices)
        out = dataclasses.replace(snapshot, devices=devices)
        node = rules.node_verdict(out, verdicts, self.policy)
        with self._lock:
            self._node = node
            self._recent.append(Evaluation(out.time, verdicts, node, rules.sticky_faults(self._state)))
        return out

    def evaluation(self, snapshot: NodeSnapshot) -> Optional["Evaluation"]:
        """The verdicts made for ``snapshot`` (matched by its time: later enrichers may have
        replaced the object), or None when it is older than the last few cycles."""
        with self._lock:
            for ev in reversed(self._recent):
                if ev.time == snapshot.time:
                    return ev
        return None

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
