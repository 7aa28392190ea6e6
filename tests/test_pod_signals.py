"""health/plan/pod_signals.py: pods on a failed device get a condition, an event, opt-in eviction."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from hetero_exporter.health.plan import pod_signals
from hetero_exporter.health.detect import policy as policy_mod
from hetero_exporter.health.plan.pod_signals import PodSignalSettings, plan_pod_signals, settle
from hetero_exporter.health.detect.rules import Verdict
from hetero_exporter.model import Allocation, DeviceIdentity, DeviceSample, Fault, NodeSnapshot, ProcessSample

POLICY = policy_mod.load()
CFG = PodSignalSettings()
XID79 = Fault(code="79", fault_class="device-lost", action="reboot-node", severity="critical")
XID48 = Fault(code="48", fault_class="memory-uncorrectable", action="reset-device", severity="critical")
UUIDS = [f"GPU-{i}0000000-aaaa-bbbb-cccc-dddddddddddd" for i in range(4)]


def _snap(holders=None, extra=()):
    """holders: index -> [(namespace, pod, pod_uid or None)]; a uid means process attribution."""
    holders = {2: [("train", "job-0", None)], 3: [("serve", "llm-1", "uid-llm-1")]} if holders is None else holders
    devices = []
    for i, uuid in enumerate(UUIDS):
        refs = holders.get(i, [])
        devices.append(DeviceSample(
            identity=DeviceIdentity(vendor="nvidia", kind="gpu", index=i, uuid=uuid, model="H100-SXM5-80GB"),
            timestamp=1000.0,
            allocations=tuple(Allocation(ns, pod, "main", "nvidia.com/gpu", uuid) for ns, pod, uid in refs if not uid),
            processes=tuple(ProcessSample(pid=100 + i, device_uuid=uuid, namespace=ns, pod=pod, pod_uid=uid,
                                          attribution="cgroup") for ns, pod, uid in refs if uid)))
    return NodeSnapshot(node="n1", time=1000.0, devices=tuple(devices) + tuple(extra))


def _verdicts(**faults):
    """index -> faults (failed); the rest ok."""
    out = {u: Verdict(u, "ok") for u in UUIDS}
    for i, reasons in faults.items():
        u = UUIDS[int(i[1:])]
        out[u] = Verdict(u, "failed", tuple(reasons))
    return out


def _plan(snap, verdicts, book, cfg=CFG, now=1000.0):
    return plan_pod_signals("n1", snap, verdicts, book, POLICY, cfg, now)


def test_a_pod_on_a_failed_gpu_gets_condition_false_and_a_warning_event():
    p = _plan(_snap(), _verdicts(g2=[XID79]), {})
    assert len(p.conditions) == 1 and not p.evictions
    c = p.conditions[0]
    assert (c.namespace, c.name, c.uid) == ("train", "job-0", "")
    assert (c.type, c.status, c.reason) == ("hetero-exporter.io/AcceleratorHealthy", "False", "NvidiaXid79")
    assert c.message == f"nvidia GPU 2 ({UUIDS[2]}): XID 79: GPU has fallen off the bus [device-lost, action reboot-node]"
    [e] = p.events
    assert (e.type, e.reason, e.message) == ("Warning", "AcceleratorFailed", c.message)
    assert p.book["train/job-0"]["status"] == "False" and p.book["train/job-0"]["devices"] == [UUIDS[2]]
    assert ("pod-condition", "train/job-0 False NvidiaXid79") in p.actions and "serve/llm-1" not in p.book


def test_the_uid_comes_from_attribution_and_the_domain_is_configurable():
    cfg = PodSignalSettings(domain="example.org")
    p = _plan(_snap(), _verdicts(g3=[XID79]), {}, cfg)
    [c] = p.conditions
    assert (c.uid, c.type) == ("uid-llm-1", "example.org/AcceleratorHealthy") and p.events[0].uid == "uid-llm-1"


def test_a_restart_repeats_nothing():
    verdicts = _verdicts(g2=[XID79], g3=[XID79])
    first = _plan(_snap(), verdicts, {})
    assert len(first.conditions) == 2 and len(first.events) == 2
    book = json.loads(json.dumps(first.book))  # as a previous process left it
    again = _plan(_snap(), verdicts, book, now=1060.0)
    assert not again.writes and again.book == first.book


def test_a_restart_repeats_nothing_whatever_the_order_of_the_uuids():
    devices = tuple(DeviceSample(identity=DeviceIdentity(vendor="nvidia", kind="gpu", index=i, uuid=u), timestamp=1.0,
                                 allocations=(Allocation("ml", "big", "main", "nvidia.com/gpu", u),))
                    for i, u in enumerate(["GPU-b", "GPU-a"]))  # index order is not the uuids' order
    snap = NodeSnapshot(node="n1", time=1.0, devices=devices)
    verdicts = {u: Verdict(u, "failed", (XID79,)) for u in ("GPU-a", "GPU-b")}
    first = _plan(snap, verdicts, {})
    assert len(first.events) == 1
    assert not _plan(snap, verdicts, json.loads(json.dumps(first.book)), now=1060.0).writes


def test_a_new_fault_rewrites_the_condition_a_new_device_announces_again():
    first = _plan(_snap(), _verdicts(g2=[XID79]), {})
    worse = _plan(_snap(), _verdicts(g2=[XID48, XID79]), first.book, now=1030.0)
    assert [c.reason for c in worse.conditions] == ["NvidiaXid48"] and not worse.events
    both = _plan(_snap({2: [("train", "job-0", None)], 1: [("train", "job-0", None)]}),
                 _verdicts(g1=[XID79], g2=[XID48, XID79]), worse.book, now=1060.0)
    [e] = both.events
    assert e.id != first.events[0].id and "GPU 1" in e.message and "GPU 2" in e.message
    assert both.book["train/job-0"]["since"] == 1000.0  # the same episode


def test_recovery_sets_true_once_and_the_record_expires():
    failed = _plan(_snap(), _verdicts(g2=[XID79]), {})
    back = _plan(_snap(), _verdicts(), failed.book, now=1100.0)
    [c] = back.conditions
    assert (c.status, c.reason) == ("True", "AcceleratorsHealthy") and UUIDS[2] in c.message
    [e] = back.events
    assert (e.type, e.reason) == ("Normal", "AcceleratorRecovered") and e.id != failed.events[0].id
    assert back.book["train/job-0"]["status"] == "True"
    kept = _plan(_snap(), _verdicts(), back.book, now=1100.0 + 599)
    assert not kept.writes and "train/job-0" in kept.book
    assert "train/job-0" not in _plan(_snap(), _verdicts(), back.book, now=1100.0 + 600).book


def test_a_pod_gone_while_its_device_is_failed_keeps_its_record():
    failed = _plan(_snap(), _verdicts(g2=[XID79]), {})
    gone = _snap({})
    p = _plan(gone, _verdicts(g2=[XID79]), failed.book, now=1200.0)
    assert not p.writes and p.book == failed.book
    assert any("gone from the snapshot" in line for line in p.explain)
    p = _plan(gone, _verdicts(), failed.book, now=1300.0)  # the device recovered: True (404 is the caller's)
    assert [c.status for c in p.conditions] == ["True"]


def test_eviction_is_opt_in_once_per_episode_and_a_refused_one_is_retried():
    cfg = PodSignalSettings(evict=True)
    verdicts = _verdicts(g2=[XID79])
    p = _plan(_snap(), verdicts, {}, cfg)
    assert [(e.namespace, e.name) for e in p.evictions] == [("train", "job-0")] and ("evict", "train/job-0") in p.actions
    refused = settle(p, {}, refused_evictions=["train/job-0"])  # a PodDisruptionBudget said no
    retry = _plan(_snap(), verdicts, refused, cfg, now=1010.0)
    assert len(retry.evictions) == 1 and not retry.conditions and not retry.events
    done = settle(retry, refused)
    assert not _plan(_snap(), verdicts, done, cfg, now=1020.0).writes
    assert not _plan(_snap(), verdicts, {}).evictions  # off by default


def test_a_failed_condition_write_is_redone_without_a_second_event():
    verdicts = _verdicts(g2=[XID79])
    p = _plan(_snap(), verdicts, {})
    book = settle(p, {}, failed_conditions=["train/job-0"])
    redo = _plan(_snap(), verdicts, book, now=1010.0)
    assert len(redo.conditions) == 1 and not redo.events
    back = _plan(_snap(), _verdicts(), redo.book, now=1100.0)
    book = settle(back, redo.book, failed_conditions=["train/job-0"])
    again = _plan(_snap(), _verdicts(), book, now=1110.0)
    assert [c.status for c in again.conditions] == ["True"] and again.events[0].id == back.events[0].id


def test_a_mig_instance_of_a_failed_gpu_counts_as_failed():
    mig = DeviceSample(identity=DeviceIdentity(vendor="nvidia", kind="gpu", index=0, uuid="MIG-1", parent=UUIDS[0]),
                       timestamp=1000.0, allocations=(Allocation("ml", "tiny", "c", "nvidia.com/mig-1g.10gb", "MIG-1"),))
    p = _plan(_snap({}, extra=(mig,)), _verdicts(g0=[XID79]), {})
    assert [(c.name, c.reason) for c in p.conditions] == [("tiny", "NvidiaXid79")]


def test_conditions_and_events_can_be_turned_off():
    p = _plan(_snap(), _verdicts(g2=[XID79]), {}, PodSignalSettings(conditions=False, events=False))
    assert not p.writes and p.book["train/job-0"]["status"] == "False"


def test_a_new_pod_with_the_same_name_is_a_new_episode():
    verdicts = _verdicts(g3=[XID79])
    first = _plan(_snap(), verdicts, {})
    p = _plan(_snap({3: [("serve", "llm-1", "uid-other")]}), verdicts, first.book, now=1500.0)
    assert len(p.conditions) == 1 and p.events[0].id != first.events[0].id and p.book["serve/llm-1"]["since"] == 1500.0


def test_pods_are_bounded():
    many = {2: [("ns", f"p{i}", None) for i in range(1100)]}
    p = _plan(_snap(many), _verdicts(g2=[XID79]), {})
    # 1024 pods signalled at most, MAX_PODS_PER_CYCLE of them per cycle (issue 25: write storms)
    assert len(p.conditions) == pod_signals.MAX_PODS_PER_CYCLE == len(p.book)
    assert p.deferred == 1024 - pod_signals.MAX_PODS_PER_CYCLE
    assert any("more than 1024 pods" in line for line in p.explain)


_record = st.dictionaries(st.sampled_from(["uid", "devices", "since", "status", "reason", "message", "evicted",
                                           "recovered_at", "x"]),
                          st.none() | st.booleans() | st.floats(allow_nan=True) | st.text(max_size=8)
                          | st.lists(st.text(max_size=8), max_size=3) | st.sampled_from(["True", "False"]), max_size=9)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["train/job-0", "serve/llm-1", "bad", "a/b/c", "x/y"]),
                       _record | st.integers() | st.text(max_size=5), max_size=5),
       st.floats(min_value=0, max_value=1e10))
def test_a_hostile_book_never_raises(book, now):
    p = _plan(_snap(), _verdicts(g2=[XID79]), book, now=now)
    assert len(p.book) <= 1024 and all(len(c.message) <= 1024 for c in p.conditions)
    assert p.book["train/job-0"]["status"] == "False"
    json.dumps(p.book, allow_nan=False)
