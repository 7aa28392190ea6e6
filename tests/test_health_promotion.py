"""Issue 38 §2: promotion in a window (``health.promote``). N occurrences of a code on one device
within the window change its state, for any vendor's codes; an occurrence is an event (the
fault's cumulative count growing), not a poll of a standing fault; the occurrences survive a
restart in the Node's book (an old book without them reads fine); promotions are counted."""

from __future__ import annotations

import json

import pytest

from hetero_exporter import config as config_mod
from hetero_exporter import vendors
from hetero_exporter.health.act.metrics import HealthMetrics
from hetero_exporter.health.detect import policy as policy_mod
from hetero_exporter.health.detect import promote, rules
from hetero_exporter.health.detect.verdicts import HealthVerdicts
from hetero_exporter.health.plan import Book, occurrences_from_json
from hetero_exporter.health.plan.book import occurrences_to_json
from hetero_exporter.model import DeviceIdentity, DeviceSample, Fault, Health, NodeSnapshot
from hetero_exporter.model import names as N
from hetero_exporter.model.errors import InputError
from hetero_exporter.model.evaluation import Occurrences

T0 = 1_764_400_000.0
VENDORS = sorted(vendors.specs())  # the ten built-in vendors (tests/test_vendor_contract.py: all of them)


def policy(*rules_: dict):
    return policy_mod.load(None, list(rules_))


def rule(vendor="nvidia", code="13", count=3, window=600, to="failed"):
    return {"vendor": vendor, "code": code, "count": count, "window_seconds": window, "to": to}


def fault(code, count, t, severity="info", first=None, active=False):
    return Fault(code=code, fault_class="app-error", action="restart-app", severity=severity, count=count,
                 first_seen=T0 if first is None else first, last_seen=t, source="test")


def dev(faults=(), vendor="nvidia", reasons=(), state="ok"):
    return DeviceSample(identity=DeviceIdentity(vendor=vendor, kind="gpu", index=0, uuid="U0", model="M"),
                        timestamp=0.0, health=Health(state, tuple(reasons)), faults=tuple(faults))


def fold(samples, pol, state=None, step=10.0):
    """samples: (seconds after T0, device) per poll; the verdicts of U0 and the last state."""
    state = state or rules.State()
    out = []
    for t, d in samples:
        state, v = rules.step(state, NodeSnapshot(node="n", time=T0 + t, devices=(d,), boot_id="b1"), pol)
        out.append(v["U0"])
    return state, out


def test_three_events_in_the_window_fail_the_device_with_the_promotion_as_reason():
    pol = policy(rule())
    polls = [(0, dev()), (10, dev([fault("13", 1, T0 + 10)])), (20, dev([fault("13", 2, T0 + 20)]))]
    _, v = fold(polls, pol)
    assert [x.state for x in v] == ["ok", "ok", "ok"]  # XID 13 is info: no state of its own
    state, v = fold([(30, dev([fault("13", 3, T0 + 30)]))], pol, state=_)
    assert v[0].state == "failed"
    (reason,) = v[0].reasons
    assert reason.message == "promoted: 3 x 13 in 600 s" and reason.source == promote.SOURCE
    assert (reason.fault_class, reason.action, reason.severity) == ("app-error", "restart-app", "critical")
    assert state.promotions == {("nvidia", "13", "failed"): 1}


def test_a_standing_fault_is_one_occurrence_however_many_polls_list_it():
    pol = policy(rule(count=2))
    polls = [(10 * i, dev([fault("13", 1, T0)])) for i in range(20)]  # listed at every poll, count 1
    state, v = fold(polls, pol)
    assert {x.state for x in v} == {"ok"}
    assert state.devices["U0"].occurrences["13"].times == (T0,)


def test_a_count_grown_by_three_in_one_poll_is_three_events():
    pol = policy(rule())
    state, v = fold([(0, dev([fault("13", 1, T0)])), (10, dev([fault("13", 4, T0 + 9)]))], pol)
    assert v[-1].state == "failed" and v[-1].reasons[0].message == "promoted: 3 x 13 in 600 s"
    # the newest `count` are kept (bounded), the earlier ones of the poll at the earliest they can be
    assert state.devices["U0"].occurrences["13"].times == (T0, T0, T0 + 9)


def test_events_spread_wider_than_the_window_do_not_promote_and_a_promotion_ends_with_its_window():
    pol = policy(rule(window=100))
    polls = [(0, dev([fault("13", 1, T0)])), (60, dev([fault("13", 2, T0 + 60)])),
             (120, dev([fault("13", 3, T0 + 120)]))]  # the first is out of the window by then
    _, v = fold(polls, pol)
    assert v[-1].state == "ok"
    state, v = fold([(130, dev([fault("13", 4, T0 + 130)]))], pol, state=_)
    assert v[0].state == "failed"
    # no more events: the window empties at t=160 (60 + 100), then the usual recovery hysteresis
    _, v = fold([(t, dev([fault("13", 4, T0 + 130)])) for t in range(140, 260, 10)], pol, state=state)
    states = [x.state for x in v]
    assert states[0] == "failed" and states[-1] == "ok"
    assert states.index("ok") > 2  # recovery_polls (3) clean polls after the window emptied


def test_to_degraded_and_a_promotion_never_lowers_a_failed_code():
    _, v = fold([(0, dev([fault("13", 2, T0)]))], policy(rule(count=2, to="degraded")))
    assert v[0].state == "degraded" and v[0].reasons[0].severity == "warning"
    critical = fault("48", 2, T0, severity="critical")
    _, v = fold([(0, dev([critical]))], policy(rule(code="48", count=2, to="degraded")))
    assert v[0].state == "failed"


def test_the_code_is_a_case_insensitive_glob_and_rules_are_per_vendor():
    pol = policy(rule(vendor="ascend", code="80e1*", count=2))
    f = fault("80E18005", 2, T0, severity="warning")
    _, v = fold([(0, dev([f], vendor="ascend"))], pol)
    assert v[0].state == "failed"
    _, v = fold([(0, dev([f], vendor="nvidia"))], pol)  # the nvidia device's code: no rule
    assert v[0].state != "failed"


def _code(vendor: str) -> str:
    """A code of the vendor's shipped table that fails nothing alone (cambricon ships only
    critical ones: a code the table lacks takes its default)."""
    table = policy_mod.vendor_table(vendor)
    return next((c for c, i in table.entries.items() if i.severity != "critical"), "not-in-the-table")


@pytest.mark.parametrize("vendor", VENDORS)
def test_every_vendors_codes_promote(vendor):
    code = _code(vendor)
    pol = policy(rule(vendor=vendor, code=code, count=3, window=300))
    info = policy_mod.vendor_table(vendor).lookup(code)
    f = lambda n, t: Fault(code=code, fault_class=info.fault_class, action=info.action,  # noqa: E731
                           severity=info.severity, count=n, first_seen=T0, last_seen=T0 + t)
    state, v = fold([(0, dev([f(1, 0)], vendor)), (10, dev([f(1, 0)], vendor)), (20, dev([f(2, 20)], vendor)),
                     (30, dev([f(3, 30)], vendor))], pol)
    assert v[1].state == v[0].state  # the same event listed again: nothing new
    assert v[-1].state == "failed" and v[-1].reasons[0].message == f"promoted: 3 x {code} in 300 s"
    assert state.promotions == {(vendor, code, "failed"): 1}


# --------------------------------------------------------------------------- restarts

def test_occurrences_survive_a_restart_through_the_book():
    pol = policy(rule())
    state, _ = fold([(0, dev([fault("13", 1, T0)])), (10, dev([fault("13", 2, T0 + 10)]))], pol)
    book = Book(occurrences=occurrences_to_json(rules.occurrences(state)))
    back = Book.from_annotation(book.to_json())
    restored = occurrences_from_json(back.occurrences)
    assert restored == {"U0": {"13": Occurrences((T0, T0 + 10), False)}}
    # a new process: its ledger starts again (count 1 is the first event it saw)
    judge = HealthVerdicts(pol)
    judge.restore({}, "b1", "b1", restored)
    _, ev = judge.judge(NodeSnapshot(node="n", time=T0 + 20, devices=(dev([fault("13", 1, T0 + 20)]),),
                                     boot_id="b1"))
    assert ev.verdicts["U0"].state == "failed" and ev.promotions == {("nvidia", "13", "failed"): 1}
    assert ev.occurrences["U0"]["13"].times == (T0, T0 + 10, T0 + 20)


def test_a_condition_active_across_a_restart_is_not_counted_twice():
    pol = policy(rule(vendor="ascend", code="80E*", count=2))
    active = fault("80E18005", 1, T0, severity="warning")
    sample = dev([active], vendor="ascend", reasons=[active], state="degraded")
    state, _ = fold([(0, sample), (10, sample)], pol)
    restored = occurrences_from_json(json.loads(json.dumps(occurrences_to_json(rules.occurrences(state)))))
    assert restored["U0"]["80E18005"].active
    judge = HealthVerdicts(pol)
    judge.restore({}, "b1", "b1", restored)
    _, ev = judge.judge(NodeSnapshot(node="n", time=T0 + 20, devices=(sample,), boot_id="b1"))
    assert ev.verdicts["U0"].state != "failed"  # still the one episode
    assert ev.occurrences["U0"]["80E18005"].times == (T0,)


def test_a_reboot_forgets_the_occurrences_with_the_sticky_faults():
    restored = {"U0": {"13": Occurrences((T0, T0 + 1), False)}}
    assert rules.restore({}, "b1", "b2", restored).devices == {}


def test_an_old_book_without_occurrences_reads_and_a_hostile_one_is_bounded():
    old = json.dumps({"v": 1, "sticky": {}, "outbox": [], "labels": []})
    book = Book.from_annotation(old)
    assert not book.broken and book.occurrences == {} and occurrences_from_json(book.occurrences) == {}
    assert "occurrences" not in Book().to_json()  # written only when there are some
    hostile = {"U0": {"13": {"times": [1, "x", None, float("nan"), True, 2.5] + [3] * 5000, "active": "yes"}},
               "U1": ["not", "a", "map"], "U2": {"7": "no"}}
    got = occurrences_from_json(hostile)
    assert list(got) == ["U0"] and not got["U0"]["13"].active
    assert len(got["U0"]["13"].times) <= 1000 and all(isinstance(t, float) for t in got["U0"]["13"].times)


# --------------------------------------------------------------------------- config and counter

@pytest.mark.parametrize("bad, where", [
    ([{"vendor": "nvdia", "code": "13", "count": 3, "window_seconds": 600, "to": "failed"}],
     "health.promote[0].vendor"),
    ([rule(), {"vendor": "nvidia", "code": "13", "count": 3, "window_seconds": 600, "to": "broken"}],
     "health.promote[1].to"),
    ([rule(count=0)], "health.promote[0].count"),
    ([rule(window=-5)], "health.promote[0].window_seconds"),
    ([{"vendor": "nvidia", "count": 3, "window_seconds": 600, "to": "failed"}], "health.promote[0]: missing code"),
    ([{**rule(), "extra": 1}], "health.promote[0]: unknown keys"),
    ({"vendor": "nvidia"}, "health.promote: expected a list"),
])
def test_a_bad_rule_is_refused_at_load_naming_the_entry(bad, where):
    with pytest.raises(InputError) as e:
        config_mod.from_dict({"health": {"promote": bad}})
    assert where in str(e.value) and "\n" not in str(e.value)


def test_the_promotions_counter_is_exported_by_vendor_code_and_state():
    from prometheus_client import CollectorRegistry, generate_latest
    m = HealthMetrics()
    m.promotions({("nvidia", "13", "failed"): 2, ("ascend", "80E18005", "degraded"): 1})
    reg = CollectorRegistry(auto_describe=False)
    reg.register(m)
    text = generate_latest(reg).decode()
    assert f'{N.HEALTH_PROMOTIONS.name}{{code="13",to="failed",vendor="nvidia"}} 2.0' in text
    assert f'{N.HEALTH_PROMOTIONS.name}{{code="80E18005",to="degraded",vendor="ascend"}} 1.0' in text
