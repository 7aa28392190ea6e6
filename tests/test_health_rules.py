"""health/detect/rules.py: pure verdicts from snapshot histories (and health/detect/policy.py)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetero_exporter.health.detect import policy as policy_mod
from hetero_exporter.health.detect import rules
from hetero_exporter.model import DeviceIdentity, DeviceSample, Fault, Health, NodeSnapshot, Quality, Reading

POLICY = policy_mod.load()
T0 = 1_764_400_000.0


def dev(index=0, state="ok", reasons=(), faults=(), readings=None, vendor="nvidia"):
    rd = {k: Reading(v, Quality("test")) for k, v in (readings or {}).items()}
    return DeviceSample(identity=DeviceIdentity(vendor=vendor, kind="gpu", index=index, uuid=f"U{index}"),
                        timestamp=0.0, readings=rd, health=Health(state, tuple(reasons)), faults=tuple(faults))


def snap(i, *devices, boot="b1"):
    return NodeSnapshot(node="n", time=T0 + 10 * i, devices=tuple(devices), boot_id=boot)


def run(polls, policy=POLICY, state=None):
    """polls: list of device lists (or (devices, boot) tuples); returns the verdicts per poll of U0."""
    state = state or rules.State()
    out = []
    for i, p in enumerate(polls):
        devices, boot = p if isinstance(p, tuple) else (p, "b1")
        state, v = rules.step(state, snap(i, *devices, boot=boot), policy)
        out.append(v["U0"])
    return state, out


def xid(code, count, severity="critical", cls="memory-ecc", action="reset-device"):
    return Fault(code=code, fault_class=cls, action=action, severity=severity, count=count, first_seen=T0)


LOST = Fault(code="gpu-lost", fault_class="device-lost", action="reboot-node", severity="critical")
UNREADABLE = Fault(code="unreadable", fault_class="unreadable", severity="info")


def test_critical_fault_fails_at_once_and_is_sticky_until_reset_evidence():
    _, v = run([[dev()], [dev(faults=[xid("48", 1)])], [dev(faults=[xid("48", 1)])],
                [dev(faults=[xid("48", 1)])]])
    assert [x.state for x in v] == ["ok", "failed", "failed", "failed"]
    assert v[1].reasons[0].code == "48"
    # a reset code clears it (at once: evidence, no hysteresis); readable alone does not
    _, v = run([[dev(faults=[xid("48", 1)])], [dev(faults=[xid("48", 1)])],
                [dev(faults=[xid("48", 1), xid("reset", 1, "info", "device-reset", "none")])]])
    assert [x.state for x in v] == ["failed", "failed", "ok"] and v[2].cleared == ("48",)


def test_boot_id_change_clears_every_sticky_fault():
    _, v = run([[dev(faults=[xid("48", 1)])], [dev(faults=[xid("48", 1)])],
                ([dev(faults=[xid("48", 1)])], "b2")])
    assert [x.state for x in v] == ["failed", "failed", "ok"]


def test_lost_device_clears_when_it_reads_again():
    _, v = run([[dev()], [dev(state="failed", reasons=[LOST], faults=[LOST])],
                [dev(state="failed", reasons=[LOST], faults=[LOST])], [dev(faults=[LOST])]])
    assert [x.state for x in v] == ["ok", "failed", "failed", "ok"]
    assert v[1].node_level and v[3].cleared == ("gpu-lost",)


def test_sticky_readable_needs_the_device_seen_lost():
    # an XID 79 event while the GPU still reads: readable is no evidence of a reset here
    x79 = xid("79", 1, "critical", "device-lost", "reboot-node")
    _, v = run([[dev(faults=[x79])], [dev(faults=[x79])], [dev(faults=[x79])]])
    assert [x.state for x in v] == ["failed", "failed", "failed"]


def test_warning_needs_k_of_n_readable_polls():
    hot = {"temperature_core_celsius": 90.0}
    cool = {"temperature_core_celsius": 60.0}
    _, v = run([[dev(readings=hot)], [dev(readings=cool)], [dev(readings=hot)], [dev(readings=hot)]])
    assert [x.state for x in v] == ["ok", "ok", "ok", "degraded"]
    assert v[0].pending == {"temperature-high": 1} and v[2].pending == {"temperature-high": 2}
    assert "90" in v[3].reasons[0].message


def test_threshold_hysteresis_holds_between_clear_and_set():
    pol = dataclasses.replace(POLICY, k=1, n=1, recovery_polls=1)
    temps = [90, 85, 84, 81, 86]  # set above 87, cleared only below 82
    _, v = run([[dev(readings={"temperature_core_celsius": float(t)})] for t in temps], pol)
    assert [x.state for x in v] == ["degraded", "degraded", "degraded", "ok", "ok"]


def test_isolated_warning_event_never_degrades():
    _, v = run([[dev(faults=[xid("94", 1, "warning", "memory-ecc", "restart-app")])]] + [[dev(
        faults=[xid("94", 1, "warning", "memory-ecc", "restart-app")])]] * 5)
    assert {x.state for x in v} == {"ok"}


def test_recovery_hysteresis():
    pol = policy_mod.load({"readings": [{"code": "too-hot", "field": "temperature_core_celsius", "above": 100,
                                         "severity": "critical", "class": "thermal", "action": "none"}]})
    bad = {"temperature_core_celsius": 105.0}  # critical, not sticky (class thermal, action none)
    good = {"temperature_core_celsius": 60.0}
    seq = [bad, good, bad, good, good, good, good]
    _, v = run([[dev(readings=r)] for r in seq], pol)
    assert [x.state for x in v] == ["failed", "failed", "failed", "failed", "failed", "ok", "ok"]


def test_repeat_offender_is_escalated_and_survives_resets_until_boot():
    lost = [dev(state="failed", reasons=[LOST], faults=[LOST])]
    back = [dev(faults=[LOST])]
    polls = [lost, back, lost, back, lost, back, back]
    state, v = run(polls)
    assert [x.state for x in v] == ["failed", "ok", "failed", "ok", "failed", "failed", "failed"]
    assert any(f.code == "repeat-offender" for f in v[-1].reasons)
    _, v2 = run([(back, "b2")], state=state)
    assert v2[0].state == "ok"


def test_unknown_is_unknown_and_holds_a_sticky_failure():
    _, v = run([[dev(state="unknown", reasons=[UNREADABLE])]] * 3)
    assert {x.state for x in v} == {"unknown"}
    _, v = run([[dev(faults=[xid("48", 1)])], [dev(state="unknown", reasons=[UNREADABLE], faults=[xid("48", 1)])]])
    assert [x.state for x in v] == ["failed", "failed"]
    assert {f.code for f in v[1].reasons} == {"48", "unreadable"}


def test_counter_rules_increase_and_reset_evidence():
    pol = policy_mod.load({"readings": [{"code": "ecc-uncorrected", "field": "ecc_uncorrected_total",
                                         "increase": 1, "severity": "critical", "class": "memory-ecc",
                                         "action": "reset-device"}]})
    r = lambda total, vol: {"ecc_uncorrected_total": total, "ecc_uncorrected_volatile_total": vol}  # noqa: E731
    _, v = run([[dev(readings=r(5, 0))], [dev(readings=r(5, 0))], [dev(readings=r(7, 2))],
                [dev(readings=r(7, 2))], [dev(readings=r(7, 0))]], pol)
    # the first sight of a counter is no increase; the volatile counter restarting is a reset
    assert [x.state for x in v] == ["ok", "ok", "failed", "failed", "ok"]
    assert v[4].cleared == ("ecc-uncorrected",)


def test_rule_skipped_when_field_absent_or_collector_reports_the_class():
    _, v = run([[dev(readings={"pcie_link_width": 8.0})]] * 4)  # no max width: nothing to compare
    assert {x.state for x in v} == {"ok"}
    own = Fault(code="pcie-width-degraded", fault_class="pcie", action="contact-support", severity="warning")
    _, v = run([[dev(state="degraded", reasons=[own], readings={"pcie_link_width": 8.0, "pcie_link_width_max": 16.0})]] * 4)
    assert v[-1].state == "degraded" and [f.code for f in v[-1].reasons] == ["pcie-width-degraded"]


def test_overrides_from_configuration():
    pol = policy_mod.load({"overrides": {"nvidia": {"13": {"severity": "critical", "action": "reset-device"}}}})
    x13 = xid("13", 1, "info", "app-error", "restart-app")
    assert run([[dev(faults=[x13])]])[1][0].state == "ok"
    v = run([[dev(faults=[x13])]], pol)[1][0]
    assert v.state == "failed" and v.reasons[0].action == "reset-device"


@pytest.mark.parametrize("bad, where", [
    ({"debounce": {"k": 4, "n": 3}}, "debounce"),
    ({"actions": {"reset-device": {"clear_on": ["never"]}}}, "clear_on"),
    ({"readings": [{"code": "x", "field": "f", "above": 1, "below": 0}]}, "exactly one"),
    ({"readings": [{"code": "x", "field": "f", "above": "hot"}]}, "expected a number"),
    ({"overrides": {"nvidia": {"13": {"action": "explode"}}}}, "action"),
    ({"min_healthy_fraction": 2}, "min_healthy_fraction"),
])
def test_bad_policy_says_where(bad, where):
    with pytest.raises(policy_mod.PolicyError) as e:
        policy_mod.load(bad)
    assert where in str(e.value)


def test_node_verdict_fraction_and_unknown_counts_as_serving():
    pol = dataclasses.replace(POLICY, min_healthy_fraction=0.5)
    ecc = [xid("48", 1)]
    devices = [dev(0, faults=ecc), dev(1, faults=ecc), dev(2, state="unknown", reasons=[UNREADABLE]), dev(3)]
    s = snap(0, *devices)
    _, v = rules.step(rules.State(), s, pol)
    nv = rules.node_verdict(s, v, pol)
    assert not nv.unhealthy and "2 of 4" in nv.why  # 2 failed (device-level), 2 serving
    devices[3] = dev(3, faults=ecc)
    s = snap(0, *devices)
    _, v = rules.step(rules.State(), s, pol)
    nv = rules.node_verdict(s, v, pol)
    assert nv.unhealthy and nv.taint_class == "too-few-healthy"


def test_restore_brings_back_sticky_faults_unless_rebooted():
    state, _ = run([[dev(faults=[xid("48", 1)])]])
    sticky = rules.sticky_faults(state)
    restored = rules.restore(sticky, "b1", "b1")
    _, v = run([[dev()]], state=restored)
    assert v[0].state == "failed"
    _, v = run([[dev()]], state=rules.restore(sticky, "b1", "b2"))
    assert v[0].state == "ok"


def test_evaluate_is_the_fold_of_step():
    polls = [snap(i, dev(readings={"temperature_core_celsius": 90.0 if i % 2 else 60.0})) for i in range(9)]
    _, v = rules.evaluate(polls, POLICY)
    state = rules.State()
    for p in polls:
        state, last = rules.step(state, p, POLICY)
    assert v == last


# ------------------------------------------------------------------ properties

polls = st.lists(st.sampled_from(["ok", "hot", "unknown"]), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(polls)
def test_cannot_read_and_warnings_never_fail(seq):
    """Only unreadable polls and warning thresholds: never failed; unknown only when unread."""
    devices = {"ok": dev(readings={"temperature_core_celsius": 60.0}),
               "hot": dev(readings={"temperature_core_celsius": 95.0}),
               "unknown": dev(state="unknown", reasons=[UNREADABLE])}
    _, v = run([[devices[p]] for p in seq])
    assert all(x.state != "failed" for x in v)
    for p, x in zip(seq, v):
        if x.state == "unknown":
            assert p == "unknown"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=60))
def test_debounce_and_hysteresis_bound_every_transition(hot):
    """Degraded only after k hits in the last n polls; ok again only after recovery_polls clean
    polls in a row: a flapping warning cannot toggle the verdict on every poll."""
    k, n, m = POLICY.k, POLICY.n, POLICY.recovery_polls
    _, v = run([[dev(readings={"temperature_core_celsius": 95.0 if h else 60.0})] for h in hot])
    states = [x.state for x in v]
    for i in range(len(states)):
        prev = states[i - 1] if i else "ok"
        if prev == "ok" and states[i] == "degraded":
            assert sum(hot[max(0, i - n + 1): i + 1]) >= k
        if prev == "degraded" and states[i] == "ok":
            assert i + 1 >= m and not any(hot[i - m + 1: i + 1])
