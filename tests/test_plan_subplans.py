"""health/plan/: each typed sub-plan on its own (typed inputs -> typed result), the book's new
records, Budget.granted and the issue-15 settings of RemedyConfig."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Mapping

import pytest

from hetero_exporter.health import plan as plan_pkg
from hetero_exporter.health.detect import policy as policy_mod
from hetero_exporter.health.plan import (Book, Budget, ClusterView, Plan, RemedyConfig, announce, bookkeeping,
                                         plan, plan_condition, plan_cordon, plan_inventory, plan_taint,
                                         rfc3339, with_node_actions)
from hetero_exporter.health.detect.rules import NodeVerdict, Verdict
from hetero_exporter.model import DeviceIdentity, DeviceSample, Fault, Health, Link, NodeSnapshot

POLICY = policy_mod.load()
ENFORCE = RemedyConfig(mode="enforce")
KEY = "hetero-exporter.io/accelerator-unhealthy"
LOST = Fault("79", "device-lost", "reboot-node", "GPU has fallen off the bus")
MEMORY = Fault("48", "memory", "reset-gpu", "double bit ECC error")


def _snap(n=2, t=1000.0, links=False) -> NodeSnapshot:
    devices = tuple(DeviceSample(
        identity=DeviceIdentity(vendor="nvidia", kind="gpu", index=i, uuid=f"GPU-{i}", model="H100",
                                driver_version="550.54.15"),
        timestamp=t, health=Health("ok"),
        links=tuple(Link(peer=f"GPU-{j}", type="nvlink", lanes=18) for j in range(n) if j != i) if links else ())
        for i in range(n))
    return NodeSnapshot(node="n1", time=t, devices=devices)


def _sick(*failed: str) -> NodeVerdict:
    return NodeVerdict(True, "device-lost", tuple(failed), (), 2, f"{len(failed)} of 2 devices failed")


HEALTHY = NodeVerdict(False, None, (), (), 2, "2 of 2 devices healthy")


# --------------------------------------------------------------------------- taint


def test_taint_refused_by_the_budget_announces_once_and_touches_nothing():
    t = plan_taint("n1", [], None, False, None, _sick("GPU-0"), ENFORCE, 1000.0, Budget(total=10, tainted=1))
    assert t.refused and t.refused_since == 1000.0 and t.taints == [] and t.spec == {} and t.taint is None
    assert t.actions == (("taint", "refused"),) and len(t.events) == 1
    assert t.events[0]["reason"] == "AcceleratorTaintBudgetExhausted" and "1 of 10" in t.events[0]["message"]
    again = plan_taint("n1", [], None, False, t.refused_since, _sick("GPU-0"), ENFORCE, 1060.0,
                       Budget(total=10, tainted=1))
    assert again.refused and again.refused_since == 1000.0 and again.events == ()  # same episode
    no_budget = plan_taint("n1", [], None, False, None, _sick("GPU-0"), ENFORCE, 1000.0, None)
    assert no_budget.refused  # no budget where one is needed: the safe side
    healthy = plan_taint("n1", [], None, False, 1000.0, HEALTHY, ENFORCE, 1100.0, None)
    assert not healthy.refused and healthy.refused_since is None  # recovery ends the episode


def test_taint_is_placed_beside_a_foreign_one_and_removed_on_recovery():
    foreign = {"key": "example.com/other", "value": "x", "effect": "NoSchedule"}
    cfg = dataclasses.replace(ENFORCE, no_execute=True)
    t = plan_taint("n1", [foreign, {"key": KEY, "value": "y", "effect": "NoExecute"}], None, False, None,
                   _sick("GPU-0"), cfg, 1000.0, Budget(total=10, tainted=0))
    assert t.taint == {"value": "device-lost", "effects": ["NoSchedule"], "applied": True, "since": 1000.0}
    assert {"key": KEY, "value": "device-lost", "effect": "NoSchedule"} in t.taints and foreign in t.taints
    assert {"key": KEY, "value": "y", "effect": "NoExecute"} in t.taints  # not ours: left as it is
    assert any("not added by this agent" in line for line in t.explain) and t.spec == {"taints": t.taints}
    assert t.notes == (f"tainted the node {KEY}=device-lost:NoSchedule+NoExecute",)
    off = plan_taint("n1", t.taints, t.taint, False, None, HEALTHY, cfg, 2000.0)
    assert off.taint is None and off.actions == (("untaint", KEY),)
    assert off.taints == [foreign, {"key": KEY, "value": "y", "effect": "NoExecute"}]


def test_taint_removed_by_someone_else_is_not_added_again_until_recovery():
    ours = {"value": "device-lost", "effects": ["NoSchedule"], "applied": True, "since": 1000.0}
    t = plan_taint("n1", [], ours, False, None, _sick("GPU-0"), ENFORCE, 1100.0, Budget(total=10, tainted=0))
    assert t.suppressed and t.taints == [] and t.spec == {} and "removed by someone else" in t.explain[0]
    again = plan_taint("n1", [], t.taint, t.suppressed, None, _sick("GPU-0"), ENFORCE, 1200.0, None)
    assert again.suppressed and not again.refused and again.actions == ()  # suppressed: no budget asked
    assert not plan_taint("n1", [], None, True, None, HEALTHY, ENFORCE, 1300.0).suppressed


def test_dry_run_taint_writes_no_spec():
    t = plan_taint("n1", [], None, False, None, _sick("GPU-0"), RemedyConfig(mode="dry-run"), 1000.0,
                   Budget(total=10, tainted=0))
    assert t.spec == {} and t.taint["applied"] is False and t.actions[0][1].startswith("dry-run ")


# --------------------------------------------------------------------------- budget


def test_a_fleet_wide_grant_decides_after_the_checks():
    cfg = RemedyConfig(budget_max_fraction=0.1, budget_min_nodes=1)
    assert Budget(total=100, tainted=50, granted=True).allows(cfg)  # the Lease slot decides, not the count
    assert not Budget(total=100, tainted=0, granted=False).allows(cfg)
    assert not Budget(total=100, tainted=0, error="timeout", granted=True).allows(cfg)  # error first
    assert Budget(0, 0, checked=False, granted=False).allows(cfg)  # unchecked: a report, nothing written
    assert Budget(total=30, tainted=2, granted=True).describe(cfg) == (
        "2 of 30 accelerator nodes already carry the taint or hold a taint slot; the budget allows 3 "
        "(10%, at least 1): a fleet-wide taint slot was granted")
    assert Budget(total=30, tainted=3, granted=False).describe(cfg).endswith(": no fleet-wide taint slot is free")
    fenced = Budget(total=30, tainted=2, granted=False, refused_why="taint slot 1 was taken over from n2, which "
                                                                    "carries the taint now: given back")
    assert fenced.describe(cfg).endswith(": taint slot 1 was taken over from n2, which carries the taint now: given back")
    assert "already carry the taint" in Budget(total=30, tainted=3).describe(cfg)  # no grant: as before
    t = plan_taint("n1", [], None, False, None, _sick("GPU-0"), ENFORCE, 1.0, Budget(total=10, tainted=9, granted=True))
    assert not t.refused and t.taint["applied"]


def test_a_recheck_asks_the_budget_again_for_a_taint_already_on():
    """Its fleet slot was taken over before its taint landed (fleet_budget.py, the fence)."""
    on = plan_taint("n1", [], None, False, None, _sick("GPU-0"), ENFORCE, 1.0, Budget(10, 0, granted=True))
    args = ("n1", on.taints, on.taint, False, None, _sick("GPU-0"), ENFORCE, 2.0)
    full = plan_taint(*args, Budget(10, 1, granted=False), recheck=True)
    assert full.refused and full.taint is None and full.taints == [] and full.spec == {"taints": None}
    assert ("untaint", KEY) in full.actions and full.refused_since == 2.0
    (ev,) = full.events
    assert ev["reason"] == "AcceleratorTaintBudgetExhausted" and ev["message"].startswith("taking the taint off n1 (")
    assert "its taint slot was taken over before its taint landed and none is free now" in ev["message"]
    kept = plan_taint(*args, Budget(10, 1, granted=True), recheck=True)  # another slot was free
    assert not kept.refused and kept.taint == on.taint and kept.spec == {} and not kept.events
    unknown = plan_taint(*args, Budget(0, 0, error="timeout"), recheck=True)  # unknown never takes it off
    assert not unknown.refused and unknown.taint == on.taint and "the taint stays until it can" in unknown.explain[-2]
    assert not plan_taint(*args, Budget(10, 1, granted=False)).refused  # no recheck: the budget is not asked
    cfg = dataclasses.replace(ENFORCE, cordon=True)
    off = plan_cordon("n1", True, _sick("GPU-0"), True, False, True, cfg)  # the refusal takes our cordon too
    assert off.unschedulable is False and not off.cordoned and off.actions == (("uncordon", "n1"),)


# --------------------------------------------------------------------------- cordon


def test_cordon_subplan():
    cfg = dataclasses.replace(ENFORCE, cordon=True)
    c = plan_cordon("n1", False, _sick("GPU-0"), False, False, False, cfg)
    assert c.unschedulable is True and c.cordoned and c.spec == {"unschedulable": True}
    assert c.actions == (("cordon", "n1"),) and c.notes == ("cordoned the node",)
    theirs = plan_cordon("n1", True, _sick("GPU-0"), False, False, False, cfg)
    assert theirs.unschedulable is None and not theirs.cordoned and "not by this agent" in theirs.explain[0]
    undone = plan_cordon("n1", False, _sick("GPU-0"), True, False, False, cfg)
    assert undone.suppressed and not undone.cordoned and undone.spec == {}
    up = plan_cordon("n1", True, HEALTHY, True, False, False, cfg)
    assert up.unschedulable is False and up.spec == {"unschedulable": None} and up.actions == (("uncordon", "n1"),)
    assert plan_cordon("n1", False, _sick("GPU-0"), False, False, True, cfg).spec == {}  # budget refused
    assert plan_cordon("n1", False, _sick("GPU-0"), False, False, False, ENFORCE).spec == {}  # not opted in


# --------------------------------------------------------------------------- condition


def test_condition_heartbeat_and_transition():
    snap = _snap()
    verdicts = {"GPU-0": Verdict("GPU-0", "failed", (LOST,)), "GPU-1": Verdict("GPU-1", "ok")}
    first = plan_condition([], snap, verdicts, _sick("GPU-0"), POLICY, ENFORCE, 1000.0)
    cond = first.condition
    assert cond["status"] == "True" and cond["reason"] == POLICY.condition_reason("nvidia", "79")
    assert "GPU 0 (GPU-0)" in cond["message"] and first.actions == (("condition", f"True {cond['reason']}"),)
    quiet = plan_condition([cond], snap, verdicts, _sick("GPU-0"), POLICY, ENFORCE, 1000.0 + 299)
    assert quiet.status_patch is None and quiet.actions == ()
    beat = plan_condition([cond], snap, verdicts, _sick("GPU-0"), POLICY, ENFORCE, 1000.0 + 300)
    assert beat.status_patch is not None and beat.actions == ()  # a heartbeat is not a change
    assert beat.condition["lastTransitionTime"] == cond["lastTransitionTime"]
    assert beat.condition["lastHeartbeatTime"] != cond["lastHeartbeatTime"]
    refused = plan_condition([cond], snap, verdicts, _sick("GPU-0"), POLICY, ENFORCE, 1001.0, refused=True)
    assert refused.condition["message"].endswith("(taint refused by the blast-radius budget)")
    healed = plan_condition([cond], snap, {}, HEALTHY, POLICY, ENFORCE, 1002.0)
    assert healed.condition["status"] == "False" and healed.condition["reason"] == "AcceleratorsHealthy"
    assert healed.condition["lastTransitionTime"] == healed.condition["lastHeartbeatTime"] != cond["lastTransitionTime"]
    assert plan_condition([], snap, {}, HEALTHY, POLICY, RemedyConfig(mode="dry-run"), 1.0).status_patch is None


def test_condition_message_is_bounded():
    snap = _snap()
    long = Fault("79", "device-lost", "reboot-node", "x" * 5000)
    c = plan_condition([], snap, {"GPU-0": Verdict("GPU-0", "failed", (long,))}, _sick("GPU-0"), POLICY,
                       ENFORCE, 1.0)
    assert len(c.condition["message"]) == 1024


# --------------------------------------------------------------------------- inventory


def test_inventory_subplan_shrinks_to_fit_and_rewrites_on_heartbeat():
    snap = _snap(n=8, links=True)
    full = plan_inventory(snap, {}, {}, [], "", 0.0, ENFORCE, 1000.0)
    text = full.annotations[ENFORCE.devices_annotation]
    small_cfg = dataclasses.replace(ENFORCE, inventory_max_bytes=len(text.encode()) - 1)
    small = plan_inventory(snap, {}, {}, [], "", 0.0, small_cfg, 1000.0)
    shrunk = small.annotations[ENFORCE.devices_annotation]
    assert len(shrunk.encode()) < len(text.encode()) and all(d["links"] == [] for d in json.loads(shrunk)["devices"])
    assert small.explain == (f"devices annotation: left out links to stay within {len(text.encode()) - 1} bytes",)
    annotations = {ENFORCE.devices_annotation: text}
    same = plan_inventory(snap, {}, annotations, full.owned, full.inventory_hash, 1000.0, ENFORCE, 1060.0)
    assert same.annotations == {} and same.inventory_time == 1000.0  # nothing changed, not due
    due = plan_inventory(snap, {}, annotations, full.owned, full.inventory_hash, 1000.0, ENFORCE, 1120.0)
    assert ENFORCE.devices_annotation in due.annotations and due.inventory_time == 1120.0


def test_inventory_subplan_labels_owned_and_foreign():
    labels_want = plan_inventory(_snap(), {}, {}, [], "", 0.0, ENFORCE, 1.0)
    assert labels_want.labels["hetero-exporter.io/nvidia.count"] == "2" and labels_want.owned
    theirs = plan_inventory(_snap(), {"hetero-exporter.io/nvidia.count": "7"}, {}, [], "", 0.0, ENFORCE, 1.0)
    assert "hetero-exporter.io/nvidia.count" not in theirs.labels
    assert "label hetero-exporter.io/nvidia.count is set by someone else: leaving it" in theirs.explain
    written = {k: v for k, v in labels_want.labels.items() if v is not None}
    gone = plan_inventory(_snap(n=0), written, {}, labels_want.owned, "", 0.0, ENFORCE, 2.0)
    assert gone.labels and all(v is None for v in gone.labels.values()) and gone.owned == []
    off = plan_inventory(_snap(), {}, {}, ["x"], "h", 5.0, RemedyConfig(mode="observe"), 9.0)
    assert (off.annotations, off.labels, off.owned, off.inventory_hash, off.inventory_time) == ({}, {}, ["x"], "h", 5.0)


# --------------------------------------------------------------------------- announcements


def test_announce_new_classes_once_and_recovery():
    snap = _snap()
    a = announce("n1", snap, {"GPU-0": Verdict("GPU-0", "failed", (LOST,))}, {}, POLICY, 1000.0)
    assert [e["type"] for e in a.events] == ["Warning"] and a.devices["GPU-0"]["classes"] == ["device-lost"]
    same = announce("n1", snap, {"GPU-0": Verdict("GPU-0", "failed", (LOST,))}, a.devices, POLICY, 1100.0)
    assert same.events == () and same.devices == a.devices  # a restart or the next cycle: nothing new
    more = announce("n1", snap, {"GPU-0": Verdict("GPU-0", "failed", (LOST, MEMORY))}, a.devices, POLICY, 1200.0)
    assert len(more.events) == 1 and "48" in more.events[0]["message"] and more.devices["GPU-0"]["since"] == 1000.0
    ok = announce("n1", snap, {"GPU-0": Verdict("GPU-0", "ok", cleared=("boot",))}, more.devices, POLICY, 1300.0)
    assert ok.events[0]["reason"] == "AcceleratorRecovered" and "cleared by evidence: boot" in ok.events[0]["message"]
    assert ok.devices == {}
    gone = announce("n1", snap, {}, a.devices, POLICY, 1400.0)
    assert gone.devices == {} and gone.events == ()  # no longer reported at all
    kept = announce("n1", snap, {}, a.devices, POLICY, 1400.0, sticky={"GPU-0": []})
    assert kept.devices == a.devices  # the rules still hold a sticky fault for it


def test_node_actions_fold_into_the_first_device_event():
    ev = {"id": "a", "type": "Warning", "reason": "R", "message": "GPU 0 failed", "action": "Fault", "time": 1.0}
    out = with_node_actions([ev], ["tainted the node"], "n1", _sick("GPU-0"), 1.0, dry_run=True)
    assert out[0]["message"] == "[dry-run] GPU 0 failed. Node: tainted the node" and ev["message"] == "GPU 0 failed"
    alone = with_node_actions([], ["removed the taint"], "n1", HEALTHY, 1.0, dry_run=False)
    assert alone[0]["reason"] == "AcceleratorTaintRemoved" and alone[0]["type"] == "Normal"


# --------------------------------------------------------------------------- bookkeeping


def test_bookkeeping_outbox_and_patch():
    old = [{"id": str(i), "time": float(i)} for i in range(10)]
    cfg = dataclasses.replace(ENFORCE, outbox_seconds=100.0, outbox_max=3)
    k = bookkeeping(Book(outbox=old), {}, [{"id": "new", "time": 105.0}], "boot-2", None, cfg, 105.0,
                    new_annotations={}, new_labels={}, spec={})
    assert [e["id"] for e in k.book.outbox] == ["8", "9", "new"] and k.book.boot_id == "boot-2"
    assert k.node_patch == {"metadata": {"annotations": {cfg.book_annotation: k.book.to_json()}}}
    quiet = bookkeeping(k.book, {cfg.book_annotation: k.book.to_json()}, [], None, None, cfg, 105.0,
                        new_annotations={}, new_labels={}, spec={})
    assert quiet.node_patch is None and quiet.book.boot_id == "boot-2"
    spec = bookkeeping(k.book, {cfg.book_annotation: k.book.to_json()}, [], None, None, cfg, 105.0,
                       new_annotations={}, new_labels={"a": None}, spec={"unschedulable": None})
    assert spec.node_patch["spec"] == {"unschedulable": None} and spec.node_patch["metadata"]["labels"] == {"a": None}
    assert bookkeeping(Book(), {}, [], None, None, RemedyConfig(), 1.0, new_annotations={}, new_labels={},
                       spec={}).node_patch is None  # observe writes nothing


def test_book_round_trip_with_the_new_records():
    # (DeviceTaintRules and budget slots are found by label in the cluster: not in the book)
    book = Book(pods={"ml/train-0": {"uid": "u1", "devices": ["GPU-0"], "status": "False"}},
                scheduler={"volcano.sh/gpu-unhealthy-ids": ["0"]}, black_hole={"allocatable": {"r": 5.0}})
    back = Book.from_annotation(book.to_json())
    assert not back.broken and back == book


def test_an_older_book_loads_and_reads_back_byte_identical():
    older = json.dumps({"taint": None, "cordoned": False, "suppressed": False, "refused_since": None,
                        "labels": ["a"], "devices": {}, "sticky": {}, "boot_id": "b", "outbox": [],
                        "inventory_hash": "", "inventory_time": 0.0, "v": 1}, sort_keys=True, separators=(",", ":"))
    book = Book.from_annotation(older)
    assert not book.broken and book.pods == {} and book.scheduler == {} and book.black_hole == {}
    assert book.to_json() == older  # empty new records are not written: no upgrade write


@pytest.mark.parametrize("field, value", [("pods", []), ("scheduler", 3), ("black_hole", None)])
def test_a_book_with_a_malformed_new_record_is_not_trusted(field, value):
    doc = json.loads(Book().to_json())
    doc[field] = value
    assert field in Book.from_annotation(json.dumps(doc)).broken


# --------------------------------------------------------------------------- settings


def test_new_settings_defaults_and_names():
    cfg = RemedyConfig.from_mapping({"domain": "example.org", "scheduler_annotations": ["volcano", "hami"]})
    assert cfg.scheduler_annotations == ("volcano", "hami") and hash(cfg)  # frozen and hashable
    assert cfg.pod_condition_type == "example.org/AcceleratorHealthy"
    assert cfg.device_taint_key == cfg.taint_key == "example.org/accelerator-unhealthy"
    assert (cfg.device_taints, cfg.device_taint_no_execute, cfg.device_taint_degraded) == (True, False, False)
    assert (cfg.pod_conditions, cfg.pod_events, cfg.evict_pods, cfg.black_hole, cfg.fleet_budget) == \
        (True, True, False, True, True)
    assert (cfg.admission_failures_min, cfg.admission_window_seconds, cfg.allocatable_grace_seconds,
            cfg.budget_lease_seconds) == (3, 600.0, 300.0, 600.0)
    assert cfg.lease_namespace({"POD_NAMESPACE": "monitoring"}) == "monitoring"
    assert cfg.lease_namespace({}) == "hetero-exporter"
    assert cfg.lease_namespace({"POD_NAMESPACE": "Not A Label"}) == "hetero-exporter"
    assert RemedyConfig.from_mapping({"budget_namespace": "gpu-ops"}).lease_namespace({"POD_NAMESPACE": "x"}) == \
        "gpu-ops"
    assert RemedyConfig.from_mapping({"budget_lease_seconds": 30, "allocatable_grace_seconds": 0}) \
        .allocatable_grace_seconds == 0.0


@pytest.mark.parametrize("key, value, problem", [
    ("device_taints", "true", "expected a boolean"), ("device_taint_no_execute", 1, "expected a boolean"),
    ("device_taint_degraded", None, "expected a boolean"), ("pod_conditions", "yes", "expected a boolean"),
    ("pod_events", 0, "expected a boolean"), ("evict_pods", "false", "expected a boolean"),
    ("black_hole", [], "expected a boolean"), ("fleet_budget", "on", "expected a boolean"),
    ("scheduler_annotations", ["slurm"], "not one of the choices"),
    ("scheduler_annotations", "volcano", "expected a list"),
    ("scheduler_annotations", ["hami", "hami"], "listed twice"),
    ("admission_failures_min", 0, "out of range"), ("admission_failures_min", 1001, "out of range"),
    ("admission_failures_min", 2.5, "expected an integer"), ("admission_failures_min", True, "expected an integer"),
    ("admission_window_seconds", 9, "out of range"), ("admission_window_seconds", float("nan"), "finite"),
    ("allocatable_grace_seconds", -1, "out of range"), ("allocatable_grace_seconds", float("inf"), "finite"),
    ("budget_namespace", "Has Spaces", "malformed"), ("budget_namespace", 5, "expected a string"),
    ("budget_namespace", "a" * 64, "characters long"),
    ("budget_lease_seconds", 29, "out of range"), ("budget_lease_seconds", 86401, "out of range"),
])
def test_each_new_setting_is_refused_with_one_line_naming_it(key, value, problem):
    with pytest.raises(ValueError) as e:
        RemedyConfig.from_mapping({key: value})
    line = str(e.value)
    assert line.startswith(f"health.{key}") and problem in line and "\n" not in line


def test_a_bad_new_setting_stops_run_with_exit_2(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("health: {mode: enforce, admission_failures_min: 0}\n")
    r = subprocess.run([sys.executable, "-m", "hetero_exporter", "run", "--listen", "127.0.0.1:0",
                        "--config", str(cfg)], capture_output=True, text=True, timeout=60)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "health.admission_failures_min: out of range: 0" in lines[0]


# --------------------------------------------------------------------------- compose


def test_plan_takes_a_cluster_view_and_fills_the_new_outputs_from_it():
    view = ClusterView(slices=(), failed_pods=(), resources={"GPU-0": "nvidia.com/gpu"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.slices = None  # type: ignore[misc]
    snap = _snap()
    verdicts = {"GPU-0": Verdict("GPU-0", "failed", (LOST,)), "GPU-1": Verdict("GPU-1", "ok")}
    node = {"metadata": {"name": "n1"}, "spec": {}, "status": {}}
    with_view = plan(node, snap, verdicts, _sick("GPU-0"), POLICY, ENFORCE, 1000.0,
                     budget=Budget(total=10, tainted=0), view=view)
    without = plan(node, snap, verdicts, _sick("GPU-0"), POLICY, ENFORCE, 1000.0, budget=Budget(total=10, tainted=0))
    # without a view nothing is read from the cluster: no device taints; pod signals still plan
    # (from the snapshot: here no pod holds a device), the node's own parts are the same
    assert without.device_taints is None and with_view.device_taints is not None
    assert with_view.device_taints.unmatched == ["GPU-0"]  # no ResourceSlice lists it
    assert not with_view.device_taints.writes and not with_view.pod_signals.writes
    assert with_view.node_faults == [] and with_view.scheduler_annotations is None
    assert (with_view.node_patch, with_view.status_patch, with_view.events) == (
        without.node_patch, without.status_patch, without.events)
    assert ("taint", f"{KEY}=device-lost:NoSchedule") in with_view.actions and with_view.writes


def test_every_public_name_is_still_exported():
    for name in ("plan", "Plan", "Book", "Budget", "RemedyConfig", "MODES", "CONDITION_TYPE", "inventory",
                 "selection_labels", "label_value", "device_name", "fault_text", "sticky_from_json",
                 "sticky_to_json", "needs_budget", "rfc3339", "parse_rfc3339", "_event_id", "event_id",
                 "OTHER_HEALTH_KEYS", "BOOK_VERSION", "ClusterView"):
        assert hasattr(plan_pkg, name), name
    assert plan_pkg._event_id("a", 1) == plan_pkg.event_id("a", 1) and len(plan_pkg.event_id("a")) == 20
    assert {f.name for f in dataclasses.fields(Plan)} >= {
        "node_patch", "status_patch", "condition", "events", "actions", "explain", "budget_refused", "book"}


def test_the_budget_is_asked_only_when_the_taint_would_be_added_black_hole_faults_included():
    asked: list[int] = []

    def budget(shares: Mapping[str, float]) -> Budget:
        asked.append(1)
        return Budget(total=10, tainted=0)

    snap = _snap()
    ok = {"GPU-0": Verdict("GPU-0", "ok"), "GPU-1": Verdict("GPU-1", "ok")}
    healthy = NodeVerdict(False, None, (), (), 2, "2 of 2 devices serving")
    node = {"metadata": {"name": "n1"}, "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "2"}}}
    p = plan(node, snap, ok, healthy, POLICY, ENFORCE, 1000.0, budget=budget)
    assert asked == [] and p.budget is None  # healthy: not asked
    failed = tuple({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"j{i}", "namespace": "ml"},
                    "spec": {"nodeName": "n1"},
                    "status": {"phase": "Failed", "reason": "UnexpectedAdmissionError", "startTime": rfc3339(990.0),
                               "message": "Allocate failed due to ..., which is unexpected: nvidia.com/gpu"}}
                   for i in range(3))
    view = ClusterView(failed_pods=failed, resources={"GPU-0": "nvidia.com/gpu", "GPU-1": "nvidia.com/gpu"})
    p = plan(node, snap, ok, healthy, POLICY, ENFORCE, 1000.0, budget=budget, view=view)
    assert asked == [1] and p.budget == Budget(total=10, tainted=0)  # the black-hole fault asks for the taint
    assert p.node_faults and p.node_faults[0].code == "admission-failures"
    assert any(a == "taint" for a, _ in p.actions)
