"""health/plan/black_hole.py: a node that rejects accelerator pods, from pods as the kubelet leaves them
after an admission failure and from status.allocatable."""

from __future__ import annotations

import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from hetero_exporter.health.plan.black_hole import BlackHoleSettings, detect_black_hole
from hetero_exporter.health.detect.rules import Verdict

NODE = "gpu-node-7"
NOW = datetime.datetime(2026, 12, 1, 10, 10, tzinfo=datetime.timezone.utc).timestamp()
CFG = BlackHoleSettings()
GPUS = {f"GPU-{i}": "nvidia.com/gpu" for i in range(8)}
# the kubelet's texts, as users reported them
NO_DEVICES = ("Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. "
              "Requested: 1, Available: 0, which is unexpected")  # kubernetes/kubernetes#130145
GPU_LOST = ("Pod Allocate failed due to device plugin GetPreferredAllocation rpc failed with err: rpc error: "
            "code = Unknown desc = Unable to retrieve list of available devices: error creating nvml.Device 5: "
            "nvml: GPU is lost, which is unexpected")  # kubernetes/kubernetes#97131: no resource named
AMD_UNHEALTHY = ("Allocate failed due to no healthy devices present; cannot allocate unhealthy devices amd.com/gpu, "
                 "which is unexpected")  # trueforge-org/truecharts#19201
OUT_OF = "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 8, capacity: 8"


def _ts(minutes_ago):
    return datetime.datetime.fromtimestamp(NOW - 60 * minutes_ago, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(i, message=NO_DEVICES, reason="UnexpectedAdmissionError", minutes_ago=1, node=NODE, resource="nvidia.com/gpu",
         start=False):
    """A pod the kubelet rejected at admission: phase Failed, reason and message set; no startTime."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"train-{i}", "namespace": "ml", "uid": f"uid-{i}", "creationTimestamp": _ts(minutes_ago)},
           "spec": {"nodeName": node, "containers": [{"name": "main", "image": "pytorch:2.5", "resources": {
               "limits": {resource: "1", "memory": "64Gi"}, "requests": {resource: "1", "memory": "64Gi"}}}]},
           "status": {"phase": "Failed", "reason": reason, "message": message}}
    if start:
        pod["status"]["startTime"] = _ts(minutes_ago)
    return pod


def _node(allocatable=None):
    return {"metadata": {"name": NODE}, "status": {"allocatable": {"cpu": "64", "memory": "512Gi",
                                                                   **(allocatable or {})}}}


def _ok(resources=GPUS, bad=()):
    return {u: Verdict(u, "failed" if u in bad else "ok") for u in resources}


def _detect(pods, node=None, state=None, now=NOW, resources=GPUS, verdicts=None):
    return detect_black_hole(node or _node(), pods, resources, verdicts or _ok(resources), state or {}, CFG, now)


def test_three_admission_failures_for_nvidia_gpu_make_a_fault():
    bh = _detect([_pod(i, minutes_ago=i) for i in range(3)])
    [f] = bh.faults
    assert (f.code, f.reason, f.resource) == ("admission-failures", "AcceleratorAdmissionFailures", "nvidia.com/gpu")
    assert f.message.startswith("3 pods failed admission for nvidia.com/gpu in the last 10 min "
                                "(latest: ml/train-0: UnexpectedAdmissionError: Allocate failed due to requested")
    assert not _detect([_pod(i) for i in range(2)]).faults


def test_the_resource_comes_from_the_pod_when_the_message_names_none():
    [f] = _detect([_pod(i, GPU_LOST) for i in range(3)]).faults
    assert f.resource == "nvidia.com/gpu" and "GPU is lost" in f.message


def test_out_of_resource_and_amd_texts():
    assert [f.resource for f in _detect([_pod(i, OUT_OF, "OutOfnvidia.com/gpu", start=True) for i in range(3)]).faults] \
        == ["nvidia.com/gpu"]
    amd = {"amd-0": "amd.com/gpu", "amd-1": "amd.com/gpu"}
    pods = [_pod(i, AMD_UNHEALTHY, resource="amd.com/gpu") for i in range(4)]
    [f] = _detect(pods, resources=amd).faults
    assert f.resource == "amd.com/gpu" and f.message.startswith("4 pods failed admission for amd.com/gpu")


def test_what_does_not_count():
    pods = [_pod(0, minutes_ago=11), _pod(1, node="other"), _pod(2, "Node didn't have enough resource: cpu",
                                                                  "OutOfcpu"),
            _pod(3), _pod(3)]  # old, another node's, not an accelerator, a duplicate
    running = _pod(4)
    running["status"]["phase"] = "Running"
    assert not _detect(pods + [running]).faults
    assert not _detect([_pod(i) for i in range(3)], resources={}).faults  # no device known as a resource


def test_allocatable_shortfall_after_the_grace_and_clears():
    node = _node({"nvidia.com/gpu": "6"})
    first = _detect([], node)
    assert not first.faults and first.state == {"shortfall": {"nvidia.com/gpu": NOW}}
    early = _detect([], node, first.state, NOW + 299)
    assert not early.faults and early.state == first.state
    late = _detect([], node, early.state, NOW + 300)
    [f] = late.faults
    assert (f.code, f.reason) == ("allocatable-shortfall", "AcceleratorAllocatableShortfall")
    assert f.message == "status.allocatable nvidia.com/gpu is 6 but 8 devices are healthy (since 2026-12-01T10:10:00Z)"
    healed = _detect([], _node({"nvidia.com/gpu": "8"}), late.state, NOW + 400)
    assert not healed.faults and healed.state == {}


def test_allocatable_says_nothing_when_absent_higher_or_devices_failed():
    assert not _detect([], _node()).state  # DRA-only: no device plugin resource
    assert not _detect([], _node({"nvidia.com/gpu": "32"})).state  # time slicing
    two_failed = _ok(bad=("GPU-0", "GPU-1"))
    assert not _detect([], _node({"nvidia.com/gpu": "6"}), verdicts=two_failed).state
    unknown = {**_ok(), "GPU-7": Verdict("GPU-7", "unknown")}
    assert not _detect([], _node({"nvidia.com/gpu": "7"}), verdicts=unknown).state
    bad = _detect([], _node({"nvidia.com/gpu": "6.5"}))
    assert not bad.faults and any("not an integer quantity" in line for line in bad.explain)


_any = st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=30),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
                    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(st.lists(_any | st.builds(_pod, st.integers(0, 5), st.sampled_from([NO_DEVICES, GPU_LOST, ""]),
                                 st.sampled_from(["UnexpectedAdmissionError", "OutOfnvidia.com/gpu", "Evicted"]),
                                 st.integers(-5, 20)), max_size=8),
       _any | st.builds(_node, st.dictionaries(st.just("nvidia.com/gpu"), _any)),
       _any | st.fixed_dictionaries({"shortfall": st.dictionaries(st.just("nvidia.com/gpu"), _any)}))
def test_hostile_pods_nodes_and_state_never_raise(pods, node, state):
    bh = detect_black_hole(node, pods, GPUS, _ok(), state, CFG, NOW)
    assert len(bh.faults) <= 2 and all(len(f.message) <= 480 for f in bh.faults)
