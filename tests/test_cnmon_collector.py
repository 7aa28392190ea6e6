"""The cnmon collector over its fake executable (real runner, real parsers), render -> parse
round trips, failure modes, faults, and the call cadence."""

from __future__ import annotations

import dataclasses
import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_fakes import in_process_runner
from hetero_exporter.model import fields as F
from hetero_exporter.sdk import runner as vendor_cli
from hetero_exporter.sdk.contract import CollectorOptions, ParseError
from hetero_exporter.collectors.cambricon.cnmon import collector as C
from hetero_exporter.collectors.cambricon.cnmon import fake
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate.scenario import from_dict, load
from hetero_exporter.sdk.runner import CliError, CliTimeout

MIB = 1 << 20
GIB = 1 << 30


def mlu_group(n=2, **over):
    g = {"vendor": "cambricon", "count": n, "product": "MLU370-X8", "memory_total": "48GiB",
         "pci_address": "0000:1a:00.0", "pci_stride": 1, "driver_version": "v5.10.13", "firmware_version": "v1.1.6",
         "values": {"utilization_ratio": 0.3, "memory_used_bytes": "12GiB", "temperature_core_celsius": 47,
                    "power_watts": {"steps": [[0, 120], [100, 200]]}, "power_limit_watts": 250,
                    "ecc_corrected_total": 1, "ecc_uncorrected_total": {"steps": [[0, 0], [400, 3]]}},
         "processes": [{"pid": 7100, "name": "cnrt-infer", "memory": "10GiB"}],
         "extra": {"temperature_board_celsius": 38}}
    g.update(over)
    return g


def over_fake(tmp_path, doc, clock, timeout=8.0, settings_=None):
    p = tmp_path / "scenario.yaml"
    p.write_text(yaml.safe_dump({"name": "mlu", **doc}))
    sc = load(str(p))
    return C.create(CollectorOptions(scenario=sc, clock=clock, workdir=str(tmp_path / "work"),
                                     timeout_seconds=timeout, interval_seconds=10, settings=settings_ or {})), sc


def test_collector_runs_the_fake_cnmon_through_the_real_runner(tmp_path):
    clock = ManualClock()
    col, sc = over_fake(tmp_path, {"devices": [mlu_group()]}, clock)
    before = vendor_cli.invocations().get("cnmon", 0)
    devs = col.collect()
    assert vendor_cli.invocations().get("cnmon", 0) - before == 3  # the table + cnmon info per card (identity)
    assert [d.identity.uuid for d in devs] == [f"MLU-{s.uuid}" for s in sc.devices]
    d = devs[0]
    assert (d.identity.model, d.identity.pci_address, d.identity.serial) == ("MLU370-X8", "0000:1a:00.0",
                                                                            sc.devices[0].serial)
    assert d.value(F.MEMORY_TOTAL) == 48 * GIB and d.value(F.MEMORY_USED) == 12 * GIB
    assert d.value(F.UTILIZATION) == 0.3 and d.value(F.POWER) == 120 and d.value(F.POWER_LIMIT) == 250
    assert d.value(F.ECC_CORRECTED) == 1 and d.value(F.ECC_UNCORRECTED) == 0 and d.value(F.TEMP_BOARD) == 38
    assert d.value("ecc_errors_total") == 1
    assert [(p.pid, p.name, p.memory_bytes) for p in d.processes] == [(7100, "cnrt-infer", 10 * GIB)]
    clock.set_t(150)
    before = vendor_cli.invocations().get("cnmon", 0)
    assert [x.value(F.POWER) for x in col.collect()] == [200, 200]  # scenario time reached the fake
    assert vendor_cli.invocations().get("cnmon", 0) - before == 1  # steady state: the table only


def test_hung_cnmon_is_killed_and_the_next_cycle_works(tmp_path):
    doc = {"devices": [mlu_group(1)],
           "faults": [{"at": 0, "until": 100, "vendor": "cambricon", "index": 0, "kind": "hung", "command": "summary"}]}
    clock = ManualClock()
    col, _ = over_fake(tmp_path, doc, clock, timeout=2.0)
    t0 = time.monotonic()
    with pytest.raises(CliTimeout, match="killed its process group"):
        col.collect()
    assert time.monotonic() - t0 < 2.0 + 1.5
    clock.set_t(120)
    col2, _ = over_fake(tmp_path, doc, clock, timeout=8.0)
    assert [d.value(F.UTILIZATION) for d in col2.collect()] == [0.3]


@pytest.mark.parametrize("mode, error", [("garbage", ParseError), ("truncated", ParseError), ("exit", CliError)])
def test_broken_cnmon_output_fails_the_cycle(tmp_path, mode, error):
    col, _ = over_fake(tmp_path, {"devices": [mlu_group(1)], "settings": {"cambricon": {"mode": mode}}}, ManualClock())
    with pytest.raises(error):
        col.collect()


def in_process(sc, clock, calls):
    return in_process_runner(fake.answer, sc, clock, calls)


def test_uncorrected_ecc_growth_missing_cards_and_info_cadence():
    sc = from_dict({"name": "e", "devices": [mlu_group(2)],
                    "faults": [{"at": 1000, "vendor": "cambricon", "index": 1, "kind": "missing"}]})
    clock, calls = ManualClock(), []
    col = C.CnmonCollector("cnmon", clock=clock, interval=10, runner=in_process(sc, clock, calls),
                           settings={"info_interval": 300})
    infos = []
    for cycle in range(0, 101):  # 3 new uncorrected errors at t=400; card 1 gone at t=1000
        clock.set_t(cycle * 10)
        calls.clear()
        devs = col.collect()
        assert calls.count([]) == 1
        infos += [(cycle * 10, c) for c in calls if c[:1] == ["info"]]
        if cycle * 10 == 610:  # the cnmon info after t=400 saw them: the card is failed for now
            assert devs[0].health.state == "failed" and devs[0].health.reasons[0].code == "ecc-uncorrected"
    # identity at t=0 for both cards, then one card per cycle when due, every 300 s
    assert [c for t, c in infos if t == 0] == [["info", "-c", "0"], ["info", "-c", "1"]]
    card0 = [t for t, c in infos if c == ["info", "-c", "0"]]
    assert all(b - a >= 300 for a, b in zip(card0, card0[1:])) and len(card0) >= 3
    d0 = devs[0]
    ecc = next(f for f in d0.faults if f.code == "ecc-uncorrected")
    assert ecc.count == 3 and ecc.action == "reset-device"  # one occurrence per new error
    assert d0.value(F.ECC_UNCORRECTED) == 3
    lost = devs[1]
    assert lost.health.state == "failed" and lost.health.reasons[0].code == "missing"


def test_not_initialized_card_in_the_older_layout():
    sc = from_dict({"name": "o", "settings": {"cambricon": {"layout": "v4"}}, "devices": [mlu_group(2)],
                    "faults": [{"at": 0, "vendor": "cambricon", "index": 1, "kind": "not-initialized"}]})
    clock, calls = ManualClock(), []
    devs = C.CnmonCollector("cnmon", clock=clock, runner=in_process(sc, clock, calls)).collect()
    assert devs[0].health.state == "ok" and devs[0].identity.pci_address is None
    assert devs[0].value("virtual_memory_total_bytes") == 1048576 * MIB
    assert devs[1].health.state == "failed" and devs[1].health.reasons[0].code == "not-initialized"


# --------------------------------------------------------------------------- round trips

RT = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731


@st.composite
def tables(draw, layout):
    n = draw(st.integers(0, 8))
    cards = []
    for i in range(n):
        c = C.MluCard(card=i, name=draw(st.sampled_from(["MLU370-X8", "MLU370-X4", "MLU220-M2", "MLU590"])),
                      firmware=draw(st.sampled_from(["v1.1.6", "v1.1.4"])),
                      util_pct=draw(maybe(st.integers(0, 100).map(float))), ecc_errors=draw(maybe(st.integers(0, 9999))),
                      fan_pct=draw(maybe(st.integers(0, 100).map(float))), temp_c=draw(maybe(st.integers(0, 110).map(float))),
                      power_w=draw(maybe(st.integers(0, 600).map(float))), power_cap_w=draw(maybe(st.integers(1, 600).map(float))),
                      memory_used_mib=draw(maybe(st.integers(0, 99999))), memory_total_mib=draw(maybe(st.integers(1, 99999))))
        if layout == "v5":
            c = dataclasses.replace(c, bus_id=f"0000:{draw(st.integers(0, 255)):02x}:00.0",
                                    compute_mode=draw(st.sampled_from(["Default", "Exclusive"])))
        else:
            c = dataclasses.replace(c, inited=draw(st.sampled_from(["On", "Off"])), driver="v4.20.11",
                                    vmemory_used_mib=draw(st.integers(0, 99999)), vmemory_total_mib=draw(st.integers(1, 9999999)))
        cards.append(c)
    procs = tuple(C.MluProcess(card=draw(st.integers(0, n - 1)), instance="/", pid=draw(st.integers(1, 4194304)),
                               command=draw(st.from_regex(r"[a-z/][a-z0-9_./-]{0,15}( --[a-z]{1,4} [0-9]{1,3})?", fullmatch=True)),
                               memory_mib=draw(st.integers(0, 999999)))
                  for _ in range(draw(st.integers(0, 3)) if n else 0))
    return C.CnmonTable(version="5.10.13", driver_version="5.10.13" if layout == "v5" else None,
                        cards=tuple(cards), processes=procs, instance_column=draw(st.sampled_from(["VF", "MI"])))


@RT
@given(st.sampled_from(fake.LAYOUTS).flatmap(lambda lay: st.tuples(st.just(lay), tables(lay))))
def test_table_render_then_parse_gives_the_cards_back(case):
    layout, t = case
    got = C.parse_table(fake.render_table(t, layout, "Mon Dec  1 10:00:00 2025"))
    assert got.cards == t.cards and got.processes == t.processes
    assert (got.version, got.driver_version, got.instance_column) == (t.version, t.driver_version, t.instance_column)


@RT
@given(st.integers(1, 4), st.integers(0, 100), st.integers(1, 96).map(lambda g: g << 30),
       st.integers(0, 1000).map(lambda x: x / 1000), st.integers(1, 400), st.integers(20, 95),
       st.integers(0, 50), st.integers(0, 5), st.sampled_from(fake.LAYOUTS))
def test_scenario_through_fake_and_collector_gives_the_values_back(n, util, total, frac, power, temp, corr, unc, layout):
    used = int(total * frac) // MIB * MIB
    sc = from_dict({"name": "rt", "settings": {"cambricon": {"layout": layout}}, "devices": [mlu_group(
        n, memory_total=total, values={"utilization_ratio": util / 100, "memory_used_bytes": used, "power_watts": power,
                                       "temperature_core_celsius": temp, "power_limit_watts": 300,
                                       "ecc_corrected_total": corr, "ecc_uncorrected_total": unc})]})
    clock, calls = ManualClock(), []
    devs = C.CnmonCollector("cnmon", clock=clock, runner=in_process(sc, clock, calls)).collect()
    assert len(devs) == n
    for d, spec in zip(devs, sc.devices):
        assert d.identity.uuid == f"MLU-{spec.uuid}"
        assert d.value(F.UTILIZATION) == util / 100 and d.value(F.TEMP_CORE) == temp
        assert d.value(F.MEMORY_TOTAL) == total and d.value(F.MEMORY_USED) == used
        assert d.value(F.POWER) == power and d.value(F.POWER_LIMIT) == 300
        assert (d.value(F.ECC_CORRECTED), d.value(F.ECC_UNCORRECTED)) == (corr, unc)
        assert d.value("ecc_errors_total") == corr + unc
        assert d.health.state == "ok"  # counts found at the first look are history, not faults


# --------------------------------------------------------------------------- fixtures/scenarios/cambricon-*

def _scenario(name):
    from conftest import ROOT
    return load(str(ROOT / "fixtures" / "scenarios" / f"{name}.yaml"))


def test_scenario_cambricon_mlu370_x8():
    sc = _scenario("cambricon-mlu370-x8")
    clock, calls = ManualClock(), []
    col = C.CnmonCollector("cnmon", clock=clock, runner=in_process(sc, clock, calls))
    devs = col.collect()
    assert [d.identity.uuid for d in devs] == [f"MLU-{s.uuid}" for s in sc.devices]
    assert all(d.value(F.MEMORY_TOTAL) == 48 * GIB and len(d.processes) == 1 for d in devs)
    for t in range(10, 340, 10):  # cnmon info of card 2 after t=120 comes at t=320 (one card a cycle)
        clock.set_t(t)
        devs = col.collect()
    ecc = devs[2].health.reasons
    assert devs[2].health.state == "failed" and [(f.code, f.count, f.action) for f in ecc] == [
        ("ecc-uncorrected", 3, "reset-device")]
    assert [d.health.state for d in (devs[0], devs[1], devs[3])] == ["ok"] * 3
    clock.set_t(410)
    devs = col.collect()
    assert devs[3].health.state == "failed" and devs[3].health.reasons[0].code == "missing"


def test_scenario_cambricon_garbage_cnmon(tmp_path):
    sc = _scenario("cambricon-garbage-cnmon")
    clock = ManualClock()
    clock.set_t(45)
    col = C.create(CollectorOptions(scenario=sc, clock=clock, workdir=str(tmp_path), timeout_seconds=8))
    with pytest.raises(ParseError, match="^cnmon"):
        col.collect()
    clock.set_t(90)
    devs = col.collect()
    assert [d.value(F.TEMP_CORE) for d in devs] == [33, 33] and devs[0].identity.model == "MLU370-X4"


def test_identity_that_runs_out_of_time_is_asked_again_not_pinned():
    sc = from_dict({"name": "late", "devices": [mlu_group(1)]})
    clock, calls = ManualClock(), []
    answer = in_process(sc, clock, calls)
    slow = {"left": 1}

    def run(argv, timeout, env=None, **kw):
        if argv[1:2] == ["info"] and slow["left"]:
            raise CliTimeout("cnmon: no answer within 1 s; killed its process group")
        return answer(argv, timeout, env, **kw)

    col = C.CnmonCollector("cnmon", clock=clock, runner=run)
    assert [d.identity.uuid for d in col.collect()] == ["cambricon-pci-0000:1a:00.0"]
    slow["left"] = 0
    clock.set_t(10)
    assert [d.identity.uuid for d in col.collect()] == [f"MLU-{sc.devices[0].uuid}"]
    clock.set_t(20)
    calls.clear()
    assert [d.identity.uuid for d in col.collect()] == [f"MLU-{sc.devices[0].uuid}"] and calls == [[]]


def test_a_topology_call_that_ran_out_of_time_at_start_is_made_again_in_the_first_cycle():
    """On a loaded node the start-up `cnmon topo` may miss its quarter of the budget; the first
    snapshot (what `inspect` prints) still has the MLU-Link links."""
    sc = from_dict({"name": "t", "devices": [mlu_group(2)]})
    clock, calls, slow = ManualClock(), [], [True]
    fast = in_process(sc, clock, calls)

    def run(argv, timeout, env=None, **kw):
        if list(argv[1:]) == ["topo"] and slow[0]:
            slow[0] = False
            raise TimeoutError("cnmon topo: no answer within the deadline")
        return fast(argv, timeout, env=env, **kw)

    col = C.CnmonCollector("cnmon", clock=clock, interval=10, runner=run)
    devs = col.collect()
    assert calls.count(["topo"]) == 1  # asked again in the cycle, once
    assert all(any(link.type == "mlulink" for link in d.links) for d in devs if d.identity.parent is None)
