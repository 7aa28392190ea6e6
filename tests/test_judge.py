"""Facts apart from judgement (issue 26): the judge returns the evaluation with the snapshot it
judged, the store publishes them together, and the collector's own health report survives
beside the verdict."""

from __future__ import annotations

import json

from hetero_exporter.health.detect import policy as policy_mod
from hetero_exporter.health.detect.verdicts import HealthVerdicts
from hetero_exporter.model import (
    DeviceIdentity,
    DeviceSample,
    Fault,
    Health,
    NodeSnapshot,
    compact_document,
    snapshot_from_json,
    snapshot_to_json,
)
from hetero_exporter.sampling import CollectorSpec, Sampler
from hetero_exporter.store import SnapshotStore


def _device(i: int, health: Health, faults=()) -> DeviceSample:
    ident = DeviceIdentity(vendor="nvidia", kind="gpu", index=i, uuid=f"GPU-{i}")
    return DeviceSample(identity=ident, timestamp=1.0, health=health, faults=tuple(faults))


XID79 = Fault(code="xid-79", severity="critical", fault_class="bus", action="reset-device", message="fell off the bus")
FAN = Fault(code="fan", severity="warning", fault_class="thermal", message="fan slow")


class _Collector:
    name, vendor = "fake", "nvidia"

    def collect(self):
        return [_device(0, Health("ok")), _device(1, Health("failed", (XID79,)), [XID79])]


def test_the_verdict_is_health_and_the_collectors_report_is_kept_beside_it():
    judge = HealthVerdicts(policy_mod.load())
    snap = NodeSnapshot(node="n", time=10.0, devices=(_device(0, Health("degraded", (FAN,))),))
    judged, evaluation = judge.judge(snap)
    d = judged.devices[0]
    assert d.reported_health == Health("degraded", (FAN,))  # what the collector said
    assert d.health.state == evaluation.verdicts["GPU-0"].state  # what the rules said
    assert snap.devices[0].reported_health is None  # the input is not changed
    back = snapshot_from_json(snapshot_to_json(judged))
    assert back.devices[0].reported_health == d.reported_health  # survives the JSON codec
    assert "reported_health" not in json.dumps(compact_document(judged))  # not in the annotation


def test_the_sampler_publishes_each_snapshot_with_the_evaluation_of_that_snapshot():
    judge = HealthVerdicts(policy_mod.load())
    sampler = Sampler([CollectorSpec("fake", "nvidia", _Collector, 5.0)], "n", judge=judge.judge)
    store, got = SnapshotStore(), []
    store.subscribe(lambda snap, ev: got.append((snap, ev)))
    try:
        for _ in range(2):
            store.publish(*sampler.collect_judged())
    finally:
        sampler.close()
    assert len(got) == 2
    for snap, ev in got:
        assert ev is not None and ev.time == snap.time
        assert {d.identity.uuid: d.health.state for d in snap.devices} == {u: v.state for u, v in ev.verdicts.items()}
    assert got[-1][0].devices[1].health.state == "failed"
    assert store.latest_judged() == got[-1]


def test_a_judge_that_fails_costs_the_verdicts_not_the_snapshot():
    def broken(_snap):
        raise RuntimeError("a bug in the rules")

    sampler = Sampler([CollectorSpec("fake", "nvidia", _Collector, 5.0)], "n", judge=broken)
    try:
        snap, ev = sampler.collect_judged()
    finally:
        sampler.close()
    assert ev is None and len(snap.devices) == 2 and snap.devices[0].reported_health is None


def test_the_health_loop_acts_only_on_a_snapshot_published_with_its_evaluation():
    from hetero_exporter.health.act.metrics import HealthMetrics
    from hetero_exporter.health.act.remedy import HealthLoop, Remedy
    from hetero_exporter.health.plan import RemedyConfig
    policy = policy_mod.load()
    judge = HealthVerdicts(policy)
    remedy = Remedy(None, "n", policy, RemedyConfig.from_mapping({}), HealthMetrics())
    loop = HealthLoop(remedy, judge)
    snap = NodeSnapshot(node="n", time=5.0, devices=(_device(0, Health("ok")),))
    loop.offer(snap, None)
    assert loop.run_once() is None  # unjudged: nothing to act on
    loop.offer(*judge.judge(snap))
    assert loop.run_once() is not None and loop.cycles == 1


def test_severity_to_health_is_one_rule_for_every_vendor():
    """Issue 26: severity -> health was written four times, with different rules for info faults."""
    from hetero_exporter.sdk.faults import health_of, state_of
    info = Fault(code="13", severity="info")
    warn = Fault(code="94", severity="warning")
    crit = Fault(code="79", severity="critical")
    odd = Fault(code="x", severity="no-table-knows")
    assert health_of([info]) == Health("ok", ())  # an event only
    assert health_of([warn, info]) == Health("degraded", (warn, info))  # the info fault says more
    assert health_of([info, warn, crit]).state == "failed"
    assert state_of([odd]) == "degraded"  # never ok, never failed
    assert health_of([]) == Health("ok", ())
    from hetero_exporter.collectors.nvidia import common
    assert common.health_of([warn, info]) == health_of([warn, info])
