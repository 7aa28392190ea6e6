"""Issue 38, §3: the recovery gate of a device class (``health.classes[].recovery_gate``).

- The key is checked at load with the class (one line naming it, exit 2).
- A device that failed and no longer is stays ``recovering`` until its class's gate passes; its
  reason is the gate's last result; a device of a class without a gate recovers as before;
  failing again restarts the watch; evidence dated before the failure does not count.
- The self-test runs below the host root through sdk/runner.py, with its deadline, off the
  sampler's thread: exit 0 passes, a failure is the reason and is tried again after
  ``retry_seconds``, a hang is killed and said.
- ``recovering`` is a state of every place that lists states (exposition, scorer, top).
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from hetero_exporter import config as config_mod
from hetero_exporter.health.detect import gate as gate_mod
from hetero_exporter.health.detect.gate import RecoveryGate
from hetero_exporter.health.detect.texts import rfc3339
from hetero_exporter.model import DeviceIdentity, DeviceSample, Fault, HEALTH_STATES, RECOVERING, Health, NodeSnapshot
from hetero_exporter.model.evaluation import GATE_CODE, GateHold, GateResult, Verdict
from hetero_exporter.validate import ValidationError

NOW = 1764400000.0


def device(uuid="GPU-1", index=0) -> DeviceSample:
    return DeviceSample(identity=DeviceIdentity("nvidia", "gpu", index, uuid, "H100-SXM5-80GB",
                                                pci_address=f"0000:{index:02x}:00.0"), timestamp=NOW)


# --------------------------------------------------------------------------- the config


def _classes(gate) -> dict:
    return {"health": {"classes": [{"name": "training", "match": {"vendor": "nvidia"}, "recovery_gate": gate}]}}


def test_a_gate_is_checked_at_load_with_its_class():
    cfg = config_mod.from_dict(_classes({"exec": ["/usr/bin/dcgmi", "diag", "-i", "{index}"], "timeout_seconds": 120}))
    (cls,) = cfg.health["classes"]
    assert cls.recovery_gate == RecoveryGate(("/usr/bin/dcgmi", "diag", "-i", "{index}"), 120.0)
    assert cls.recovery_gate.argv(device(index=3)) == ("/usr/bin/dcgmi", "diag", "-i", "3")


@pytest.mark.parametrize("gate, message", [
    ({}, "recovery_gate: names no check"),
    ({"exec": ["dcgmi"]}, "exec[0]: not an absolute path"),
    ({"exec": ["/usr/bin/x", "{serial}"]}, "unknown placeholder {serial}"),
    ({"exec": ["/usr/bin/x"], "timeout_seconds": 0}, "timeout_seconds"),
    ({"evidence_annotation": "not a key!"}, "evidence_annotation: malformed"),
    ({"exec": ["/usr/bin/x"], "shell": True}, "shell"),
])
def test_a_bad_gate_is_one_line_naming_it(gate, message):
    with pytest.raises(ValidationError) as e:
        config_mod.from_dict(_classes(gate))
    assert "health.classes[0].recovery_gate" in str(e.value) and message in str(e.value)
    assert "\n" not in str(e.value)


# --------------------------------------------------------------------------- the hold (pure)


FAILED = Verdict("GPU-1", "failed", (Fault("79", "device-lost", "reset-device", severity="critical"),))
OK = Verdict("GPU-1", "ok")


def _step(verdict, holds, gate, results, now):
    seen = []

    def check(d, g, h):
        seen.append(h)
        return results
    out, kept = gate_mod.step({"GPU-1": verdict}, holds, {"GPU-1": device()}, {"GPU-1": gate} if gate else {},
                              check, now)
    return out["GPU-1"], kept, seen


def test_a_failed_device_recovers_only_through_its_gate():
    gate = RecoveryGate(evidence_annotation="hetero-exporter.io/recovery-evidence")
    v, holds, _ = _step(FAILED, {}, gate, [], NOW)
    assert v.state == "failed" and holds == {"GPU-1": GateHold(NOW)}
    v, holds, seen = _step(OK, holds, gate, [None], NOW + 10)
    assert v.state == "recovering" and seen == [GateHold(NOW, NOW + 10)]
    (reason,) = v.reasons
    assert reason.code == GATE_CODE and "waiting for a pass in hetero-exporter.io/recovery-evidence (not yet)" in reason.message
    v, holds, _ = _step(OK, holds, gate, [GateResult(False, NOW + 20, "fail: HBM test 3")], NOW + 20)
    assert v.state == "recovering" and "fail: HBM test 3" in v.reasons[0].message
    v, holds, _ = _step(OK, holds, gate, [GateResult(True, NOW + 30, "pass: certified")], NOW + 30)
    assert v.state == "ok" and holds == {} and v.cleared_by[GATE_CODE] == "pass: certified"


def test_failing_again_restarts_the_watch_and_no_gate_means_no_hold():
    gate = RecoveryGate(exec=("/usr/bin/selftest",))
    _, holds, _ = _step(FAILED, {}, gate, [], NOW)
    _, holds, _ = _step(OK, holds, gate, [None], NOW + 10)
    _, holds, _ = _step(FAILED, holds, gate, [], NOW + 20)
    assert holds == {"GPU-1": GateHold(NOW + 20)}
    v, holds, _ = _step(OK, holds, None, [], NOW + 30)  # its class has no gate
    assert v.state == "ok" and holds == {}


def test_evidence_is_read_as_hostile_and_must_follow_the_failure():
    good = json.dumps({"GPU-1": {"result": "pass", "time": rfc3339(NOW + 60), "detail": "burn-in 2 h"}})
    assert gate_mod.evidence(good, "GPU-1", NOW) == GateResult(True, NOW + 60, "pass: burn-in 2 h")
    assert gate_mod.evidence(good, "GPU-1", NOW + 60) is None  # not after the failure
    assert gate_mod.evidence(good, "GPU-2", NOW) is None
    for bad in ("x" * (gate_mod.MAX_EVIDENCE_BYTES + 1), "{", "[]", json.dumps({"GPU-1": "pass"}),
                json.dumps({"GPU-1": {"result": "maybe", "time": rfc3339(NOW + 60)}}),
                json.dumps({"GPU-1": {"result": "pass", "time": NOW + 60}})):
        assert gate_mod.evidence(bad, "GPU-1", NOW) is None
    failed = json.dumps({"GPU-1": {"result": "fail", "time": rfc3339(NOW + 60), "detail": "a\x1b[2J"}})
    assert gate_mod.evidence(failed, "GPU-1", NOW) == GateResult(False, NOW + 60, "fail")  # no escape shown


# --------------------------------------------------------------------------- the self-test runner


def _tool(root: Path, body: str) -> str:
    path = root / "usr" / "bin" / "selftest"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return "/usr/bin/selftest"


def _wait(gates, d, argv, timeout=5.0, retry=60.0, after=0.0, clock=None):
    """The runner's answer once it has one (bounded: 120 s)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        r = gates.result(d, argv, timeout, retry, after)
        if r is not None:
            return r
        time.sleep(0.05)
    raise AssertionError("no result within 120 s")


def test_the_self_test_runs_below_the_host_root(tmp_path):
    from hetero_exporter.sdk.contract import HostPaths
    from hetero_exporter.sources.recovery_gate import ExecGates
    argv = (_tool(tmp_path, 'echo "checking $1"\necho "all 12 tests passed"\n'), "{uuid}")
    gate = RecoveryGate(argv)
    gates = ExecGates(HostPaths(root=str(tmp_path)))
    try:
        r = _wait(gates, device(), gate.argv(device()))
        assert r.passed and r.detail == "passed, exit 0: all 12 tests passed"
    finally:
        gates.close()


def test_a_failed_self_test_is_the_reason_and_is_retried(tmp_path):
    from hetero_exporter.sdk.contract import HostPaths
    from hetero_exporter.sources.recovery_gate import ExecGates
    flag = tmp_path / "fixed"
    argv = (_tool(tmp_path, f'if [ -e {flag} ]; then echo ok; exit 0; fi\necho "HBM row 7 failed" >&2\nexit 3\n'),)
    now = [NOW]
    gates = ExecGates(HostPaths(root=str(tmp_path)), clock=lambda: now[0])
    try:
        r = _wait(gates, device(), argv, after=NOW)
        assert not r.passed and r.detail == "failed, exit 3: HBM row 7 failed"
        flag.touch()
        now[0] += 30  # before retry_seconds: the same answer, nothing run
        assert gates.result(device(), argv, 5.0, 60.0, NOW) == r
        now[0] += 60
        assert gates.result(device(), argv, 5.0, 60.0, NOW) == r  # queued now; the last answer meanwhile
        deadline = time.monotonic() + 120
        while (r := gates.result(device(), argv, 5.0, 60.0, NOW)) is None or not r.passed:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert r.detail == "passed, exit 0: ok"
    finally:
        gates.close()


def test_a_hung_self_test_is_killed_at_its_deadline(tmp_path):
    from hetero_exporter.sdk.contract import HostPaths
    from hetero_exporter.sources.recovery_gate import ExecGates
    argv = (_tool(tmp_path, "sleep 600\n"),)
    gates = ExecGates(HostPaths(root=str(tmp_path)))
    try:
        r = _wait(gates, device(), argv, timeout=0.5)
        assert not r.passed and r.detail == "no answer within 0.5 s; killed"
    finally:
        gates.close()


def test_a_missing_self_test_says_so(tmp_path):
    from hetero_exporter.sdk.contract import HostPaths
    from hetero_exporter.sources.recovery_gate import ExecGates
    gates = ExecGates(HostPaths(root=str(tmp_path)))
    try:
        r = _wait(gates, device(), ("/usr/bin/nvidia-healthcheck",))
        assert not r.passed and "not found or not executable" in r.detail
    finally:
        gates.close()


# --------------------------------------------------------------------------- the state everywhere


def test_recovering_is_a_state_of_every_listing():
    from hetero_exporter.exposition.collector import build_families
    from hetero_exporter.model import names as N
    from hetero_exporter.scoring.nodes import _why_excluded
    from hetero_exporter.view import frame, render
    assert "recovering" not in HEALTH_STATES and RECOVERING == "recovering" and "recovering" in render.STATE_STYLES
    assert frame._STATE_ORDER["failed"] < frame._STATE_ORDER["recovering"] < frame._STATE_ORDER["degraded"]
    d = device()
    snap = NodeSnapshot(node="n", time=NOW, devices=(DeviceSample(identity=d.identity, timestamp=NOW,
                                                                  health=Health("recovering")),))
    fams = {f.name: f for f in build_families(snap)}
    states = {s.labels["state"]: s.value for s in fams[N.HEALTH_STATUS.name].samples}
    assert states["recovering"] == 1.0 and states["ok"] == 0.0

    class Dev:
        health = "recovering"
    assert _why_excluded(Dev()).startswith("recovering")


# --------------------------------------------------------------------------- the book and the judge


def test_the_watch_is_kept_in_the_book_and_read_back_as_hostile():
    from hetero_exporter.health.plan.book import Book, holds_from_json, holds_to_json, said_in
    holds = {"GPU-1": GateHold(NOW), "GPU-2": GateHold(NOW, NOW + 60)}
    book = Book(holds=holds_to_json(holds, {"GPU-2": "recovering: waiting (not yet)"}))
    back = Book.from_annotation(book.to_json())
    assert holds_from_json(back.holds) == holds and said_in(back.holds, "GPU-2") == "recovering: waiting (not yet)"
    assert "holds" not in json.loads(Book().to_json())  # an old agent's book is unchanged
    assert holds_from_json(Book.from_annotation('{"v": 1}').holds) == {}
    bad = {"GPU-3": {"failed_at": "yesterday"}, "GPU-4": {"failed_at": float("nan")}, "GPU-5": [],
           "GPU-6": {"failed_at": NOW, "recovering_since": True}}
    assert holds_from_json(bad) == {"GPU-6": GateHold(NOW)}
    assert Book.from_annotation('{"v": 1, "holds": []}').broken
    assert said_in({"GPU-1": {"said": "a\x1b[2J"}}, "GPU-1") == ""


def test_a_restored_watch_holds_before_the_plans_table_is_seen():
    """After a restart the first judgement has no plan yet: the class's gate comes from
    ``gates_of``, so a device that recovered meanwhile is still held."""
    from hetero_exporter.health.detect import policy as policy_mod
    from hetero_exporter.health.detect.verdicts import HealthVerdicts
    gate = RecoveryGate(evidence_annotation="hetero-exporter.io/recovery-evidence")
    judge = HealthVerdicts(policy_mod.load(None))
    judge.restore({}, None, None, holds={"GPU-1": GateHold(NOW - 600, NOW - 60)})
    asked = []
    judge.gates_of = lambda snap, labels: asked.append(dict(labels)) or {"GPU-1": gate}
    judge.see_node({"hetero-exporter.io/recovery-evidence": json.dumps(
        {"GPU-1": {"result": "pass", "time": rfc3339(NOW - 700)}})}, "k", NOW, labels={"zone": "a"})
    snap = NodeSnapshot(node="n", time=NOW, devices=(device(),))
    _, ev = judge.judge(snap)
    assert ev.verdicts["GPU-1"].state == "recovering" and ev.holds == {"GPU-1": GateHold(NOW - 600, NOW - 60)}
    assert asked == [{"zone": "a"}]
    judge.see_gates({})  # the plan: its class has no gate (any more)
    _, ev = judge.judge(dataclasses_replace(snap, time=NOW + 10))
    assert ev.verdicts["GPU-1"].state == "ok" and ev.holds == {} and len(asked) == 1


def dataclasses_replace(obj, **kw):
    import dataclasses
    return dataclasses.replace(obj, **kw)
