"""A health agent for tests: scenario -> real NVML collector over the fake pynvml -> sampler
with the verdict enricher -> health loop -> the loopback API server, on a manual clock.

``cycle(t)`` runs one collection and one reconcile at scenario time t, synchronously."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import pytest

from hetero_exporter import registry
from hetero_exporter.sdk.contract import CollectorOptions
from hetero_exporter.health.detect import policy as policy_mod
from hetero_exporter.health.act.metrics import HealthMetrics
from hetero_exporter.health.plan import RemedyConfig
from hetero_exporter.health.act.remedy import HealthLoop, Remedy
from hetero_exporter.health.detect.verdicts import HealthVerdicts
from hetero_exporter.k8s.client import connect
from hetero_exporter.model import Allocation, NodeSnapshot
from hetero_exporter.sampling import CollectorSpec, Sampler
from hetero_exporter.simulate import ManualClock, load

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "fixtures" / "scenarios"
COLLECTOR_DEADLINE = 60.0  # seconds: generous, the fake NVML answers in milliseconds when the machine is idle


def allocate(pods: Mapping[int, tuple[str, str]]) -> Callable[[NodeSnapshot], NodeSnapshot]:
    """An enricher standing in for the kubelet's PodResources: device index -> (namespace, pod)."""
    def enrich(snap: NodeSnapshot) -> NodeSnapshot:
        devices = tuple(dataclasses.replace(d, allocations=(Allocation(*pods[d.identity.index], "main",
                                                                       "nvidia.com/gpu", d.identity.uuid),))
                        if d.identity.index in pods and d.identity.parent is None else d for d in snap.devices)
        return dataclasses.replace(snap, devices=devices)
    enrich.__name__ = "test-podresources"
    return enrich


class _PatientSampler(Sampler):
    """The sampler, waiting each cycle for its collector up to the deadline: ``cycle(t)`` is one
    synchronous step of a test, and on a loaded machine a fake NVML call can take more than its
    usual time plus the late grace (about a second), which would carry the devices over stale
    (health unknown) and make the test's verdicts depend on the machine's load."""

    def _patience(self, spec: CollectorSpec, hist: Any) -> float:
        return spec.timeout_seconds


class HealthAgent:
    """``node``: another node name than the scenario's; ``pods``: device index -> (namespace,
    pod) holding it (as PodResources reports); ``resource``: the extended resource of every device;
    ``state_dir``: where the collector keeps its pinned identities (a restart keeps uuids)."""

    def __init__(self, scenario: str, kubeconfig: Optional[str], *, mode: str = "enforce",
                 clock: Optional[ManualClock] = None, boot_id: str = "boot-1",
                 health: Optional[dict] = None, policy: Optional[dict] = None, timeout: float = 5.0,
                 node: Optional[str] = None, pods: Optional[Mapping[int, tuple[str, str]]] = None,
                 resource: str = "nvidia.com/gpu", environ: Optional[Mapping[str, str]] = None,
                 state_dir: Optional[str] = None):
        self.scenario = load(str(SCENARIOS / scenario))
        if node is not None:
            self.scenario = dataclasses.replace(self.scenario, node=node)
        self.clock = clock or ManualClock()
        self.node = self.scenario.node
        self.boot_id = boot_id
        self.policy = policy_mod.load(policy)
        self.verdicts = HealthVerdicts(self.policy)
        opts = CollectorOptions(node_name=self.node, scenario=self.scenario, clock=self.clock, state_dir=state_dir)
        entry = registry.collector_entries()["nvml"]
        spec = CollectorSpec("nvml", "nvidia", lambda: registry.collector_factory(entry)(opts), COLLECTOR_DEADLINE)
        enrichers = [allocate(pods)] if pods else []
        self.sampler = _PatientSampler([spec], self.node, clock=self.clock, enrichers=enrichers, judge=self.verdicts.judge,
                               boot_id=boot_id, min_cycle_gap=0)
        self.metrics = HealthMetrics()
        self.cfg = RemedyConfig.from_mapping(health or {}, mode=mode)
        self.cluster = connect(kubeconfig, env={}, timeout_seconds=timeout) if kubeconfig else None
        self.remedy = Remedy(self.cluster, self.node, self.policy, self.cfg, self.metrics, clock=self.clock,
                             resource_of=lambda d: resource, environ=environ or {})
        self.loop = HealthLoop(self.remedy, self.verdicts, boot_id=boot_id)
        self.last_snapshot: Any = None

    def cycle(self, t: float):
        self.clock.set_t(t)
        snap, evaluation = self.sampler.collect_judged()
        self.last_snapshot = snap
        self.loop.offer(snap, evaluation)
        return self.loop.run_once()

    def run(self, start: float, stop: float, step: float = 10.0) -> list:
        out = []
        t = start
        while t <= stop:  # bounded by stop
            out.append(self.cycle(t))
            t += step
        return out

    def close(self) -> None:
        self.sampler.close()


@pytest.fixture
def make_agent(kube_api, tmp_path):
    """``make_agent(scenario, **kw)``: a HealthAgent on the loopback API server, closed after."""
    made = []

    def make(scenario: str = "health-xid79.yaml", **kw: Any) -> HealthAgent:
        agent = HealthAgent(scenario, kube_api.write_kubeconfig(tmp_path / "kubeconfig"), **kw)
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.close()
