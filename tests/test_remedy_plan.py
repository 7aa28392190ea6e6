"""health/plan.py without a server: inventory bounds, labels, reasons, bookkeeping."""

from __future__ import annotations

import dataclasses
import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from hetero_exporter.health.detect import policy as policy_mod
from hetero_exporter.health.detect import rules
from hetero_exporter.health.plan import Book, RemedyConfig, inventory, label_value, plan, selection_labels
from hetero_exporter.model import (DeviceIdentity, DeviceSample, Health, Link, NodeSnapshot, Quality, Reading,
                                   snapshot_from_doc)

POLICY = policy_mod.load()
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")  # metav1.Condition reason


def _snap(n=8, util=0.5, t=1000.0, state="ok", model="H100-SXM5-80GB"):
    devices = []
    for i in range(n):
        devices.append(DeviceSample(
            identity=DeviceIdentity(vendor="nvidia", kind="gpu", index=i, uuid=f"GPU-{i:04d}", model=model,
                                    pci_address=f"0000:{0x18 + i:02x}:00.0", driver_version="550.54.15"),
            timestamp=t, readings={"utilization_ratio": Reading(util, Quality("x")),
                                   "memory_used_bytes": Reading(1e9, Quality("x")),
                                   "memory_total_bytes": Reading(8e10, Quality("x"))},
            health=Health(state if i == 5 else "ok"),
            links=tuple(Link(peer=f"GPU-{j:04d}", type="nvlink", lanes=18) for j in range(n) if j != i)))
    return NodeSnapshot(node="n1", time=t, devices=tuple(devices))


def test_inventory_is_bounded_and_readable_by_the_scorer():
    full, _, dropped = inventory(_snap(), 1 << 20)
    assert dropped == []
    small, _, dropped = inventory(_snap(), len(full) - 1)  # links are shed first
    assert len(small.encode()) <= len(full) - 1 and dropped == ["links"]
    back = snapshot_from_doc(json.loads(small))
    assert len(back.devices) == 8 and all(d.links == () for d in back.devices)
    tiny, _, dropped = inventory(_snap(), 200)
    assert len(tiny.encode()) <= 200 and dropped[-1] == "devices" and json.loads(tiny)["truncated"]


def test_inventory_fingerprint_ignores_moving_values_not_health():
    _, a, _ = inventory(_snap(util=0.1, t=1000.0), 1 << 20)
    _, b, _ = inventory(_snap(util=0.9, t=2000.0), 1 << 20)
    _, c, _ = inventory(_snap(state="failed"), 1 << 20)
    assert a == b and a != c


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120))
def test_label_values_are_always_valid(s):
    assert LABEL_VALUE.match(label_value(s)) and len(label_value(s)) <= 63


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["nvidia", "amd", "ascend", "cambricon", "hygon", "x-y"]), st.text(max_size=60))
def test_condition_reasons_are_valid(vendor, code):
    assert REASON.match(POLICY.condition_reason(vendor, code))


def test_selection_labels():
    labels = selection_labels(_snap(n=2, model="MLU370-X8 (rev b)"), "example.org")
    assert labels["example.org/nvidia.count"] == "2"
    assert labels["example.org/nvidia.model"] == "MLU370-X8-rev-b"
    assert labels["example.org/nvidia.driver-major"] == "550"
    assert labels["example.org/accelerator"] == "true"


def _verdicts(snap):
    state, v = rules.step(rules.State(), snap, POLICY)
    return v, rules.node_verdict(snap, v, POLICY), rules.sticky_faults(state)


def test_unreadable_bookkeeping_means_nothing_is_ours():
    snap = _snap()
    devices = list(snap.devices)
    devices[5] = dataclasses.replace(devices[5], health=Health("ok"))
    snap = dataclasses.replace(snap, devices=tuple(devices))
    v, nv, sticky = _verdicts(snap)
    node = {"metadata": {"name": "n1", "annotations": {"hetero-exporter.io/agent-state": "{not json"}},
            "spec": {"taints": [{"key": "hetero-exporter.io/accelerator-unhealthy", "value": "x",
                                 "effect": "NoSchedule"}]}}
    p = plan(node, snap, v, nv, POLICY, RemedyConfig(mode="enforce"), 1000.0, sticky=sticky)
    assert any("unreadable" in line for line in p.explain)
    assert "spec" not in (p.node_patch or {})  # the healthy node keeps the taint it cannot prove is its own


def test_book_round_trip_and_version_check():
    b = Book(labels=["a"], refused_since=5.0)
    assert Book.from_annotation(b.to_json()).labels == ["a"]
    assert Book.from_annotation('{"v": 99}').broken


def test_a_node_without_accelerators_gets_nothing_written():
    snap = NodeSnapshot(node="cpu-1", time=1000.0)
    v, nv, sticky = _verdicts(snap)
    p = plan({"metadata": {"name": "cpu-1"}}, snap, v, nv, POLICY, RemedyConfig(mode="enforce"), 1000.0,
             sticky=sticky)
    assert p.node_patch is None and p.status_patch is None and p.events == []
