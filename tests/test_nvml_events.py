"""NVML fault events: the event thread, the XID table, and the woken sampler cycle.

Deterministic: the scenario clock is a ManualClock; the watcher is stepped by hand, or (for
the sampler test) runs its thread while the sampler's regular interval is an hour, so a
second snapshot can only come from the cycle the event woke."""

from __future__ import annotations

import re
import threading

import pytest

pynvml = pytest.importorskip("pynvml")

from conftest import ROOT, shared_fixtures  # noqa: E402
from hetero_exporter.sdk.contract import CollectorOptions  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml import collector as nvml  # noqa: E402
from hetero_exporter.sdk import faults  # noqa: E402
from hetero_exporter.model import ACTIONS  # noqa: E402
from hetero_exporter.sampling import CollectorSpec, Sampler  # noqa: E402
from hetero_exporter.simulate import ManualClock, load  # noqa: E402
from hetero_exporter.simulate.scenario import from_dict  # noqa: E402

SCENARIOS = ROOT / "fixtures" / "scenarios"
XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?[0-9a-fA-F:.]+\): (\d+),")


def make(scenario, t: float = 0.0, wake=lambda: None, **settings):
    clock = ManualClock()
    clock.set_t(t)
    if isinstance(scenario, str):
        scenario = load(str(SCENARIOS / f"{scenario}.yaml"))
    opts = CollectorOptions(scenario=scenario, clock=clock, wake=wake, interval_seconds=10.0,
                            settings={"events": False, "event_wait_ms": 10, **settings})
    return nvml.create(opts), clock


def watcher(c, devices):
    """An event watcher over the collector's top-level GPUs (not started: stepped by hand)."""
    w = c.event_watcher([(d.identity.uuid, c._nv.nvmlDeviceGetHandleByIndex(d.identity.index))
                         for d in devices if d.identity.parent is None])
    w.open()
    return w


def test_xid79_yields_a_failed_gpu_whose_fault_says_reboot_node():
    woken = []
    c, clock = make("nvidia-xid79", wake=lambda: woken.append(clock.t()))
    before = c.collect()
    w = watcher(c, before)
    assert w.step() is None  # nothing yet: the wait times out
    clock.set_t(30.5)
    ev = w.step()
    assert (ev.code, ev.uuid) == ("79", before[1].identity.uuid)
    assert woken == [30.5]  # the collector asked the sampler for a cycle at once
    d = c.collect()
    gpu = d[1]
    assert gpu.health.state == "failed"
    xid = next(f for f in gpu.faults if f.code == "79")
    assert (xid.fault_class, xid.action, xid.severity, xid.count) == ("device-lost", "reboot-node", "critical", 1)
    assert {r.code for r in gpu.health.reasons} == {"gpu-lost", "79"}
    assert all(x.health.state == "ok" for x in (d[0], d[2], d[3]))
    # NVML keeps answering GPU_IS_LOST while the lost GPU is in the set: the watcher
    # rebuilds the set without it and says so (another immediate cycle)
    assert w.step() is None
    assert gpu.identity.uuid not in w.registered and len(w.registered) == 3
    assert len(woken) == 2


def test_a_critical_xid_fails_a_gpu_that_still_answers():
    doc = {"name": "xid48", "devices": [{"vendor": "nvidia", "count": 2, "product": "NVIDIA A100-SXM4-80GB",
                                         "values": {"utilization_ratio": 0.5, "power_watts": 300}}],
           "faults": [{"at": 5, "vendor": "nvidia", "index": 0, "kind": "xid", "code": "48"}]}
    c, clock = make(from_dict(doc, "xid48"))
    w = watcher(c, c.collect())
    clock.set_t(6)
    assert w.step().code == "48"
    d = c.collect()
    assert d[0].health.state == "failed" and d[0].value("power_watts") == 300  # still readable
    assert [(r.code, r.action) for r in d[0].health.reasons] == [("48", "reset-device")]
    assert d[1].health.state == "ok"
    clock.set_t(16.5)  # one event-hold window (the interval) later the event is history
    later = c.collect()[0]
    assert later.health.state == "ok" and later.faults[0].count == 1


def test_xid13_is_an_event_only_fault():
    c, clock = make("nvidia-xid13")
    w = watcher(c, c.collect())
    clock.set_t(7)
    assert [w.step().code, w.step().code] == ["13", "13"]
    g0 = c.collect()[0]
    assert g0.health.state == "ok" and g0.health.reasons == ()
    xid13 = g0.faults[0]
    assert (xid13.code, xid13.count, xid13.action, xid13.severity) == ("13", 2, "restart-app", "info")
    clock.set_t(9)
    assert w.step().code == "94"  # contained memory error: a warning in the table
    g1 = c.collect()[1]
    assert g1.health.state == "degraded" and g1.health.reasons[0].action == "restart-app"


def test_other_event_types_and_the_recovery_action():
    c, clock = make("nvidia-memory-health")
    w = watcher(c, c.collect())
    clock.set_t(10)
    codes = {w.step().code, w.step().code}
    assert codes == {"ecc-dbe", "recovery-node-reboot"}
    g3 = c.collect()[3]
    got = {f.code: (f.action, f.severity) for f in g3.faults}
    assert got["ecc-dbe"] == ("reset-device", "critical")
    assert got["recovery-node-reboot"] == ("reboot-node", "critical")
    assert g3.health.state == "failed"


def test_an_event_in_a_mig_instance_names_the_instance():
    doc = {"name": "mig-xid", "devices": [{"vendor": "nvidia", "product": "NVIDIA H100 80GB HBM3",
                                           "extra": {"mig": [{"profile": "3g.40gb", "memory": "40GiB", "gi": 2}]}}],
           "faults": [{"at": 1, "vendor": "nvidia", "index": 0, "kind": "xid", "code": "31", "gpu_instance": 2}]}
    c, clock = make(from_dict(doc, "mig-xid"))
    w = watcher(c, c.collect())
    clock.set_t(2)
    ev = w.step()
    assert ev.code == "31" and "GPU instance 2" in ev.message


def test_a_gpu_without_event_support_is_left_out_and_the_wait_still_times_out():
    c, _ = make("nvidia-notsupported")
    d = c.collect()
    w = watcher(c, d)
    assert w.unsupported == {d[0].identity.uuid} and w.registered == {}
    assert w.step() is None


def test_the_event_thread_starts_with_the_first_cycle_and_stops_on_close():
    c, clock = make("nvidia-xid79", events=True)
    c.collect()
    assert c._watcher is not None and c._watcher.alive
    c._watcher.stop(join_seconds=10)
    assert not c._watcher.alive


def test_realistic_xid_codes_from_kernel_logs_are_in_the_table():
    logs = shared_fixtures("kernel-log", "nvidia_xid-*.log")
    if not logs:
        pytest.skip("kernel-log captures absent")
    codes = {m.group(1) for p in logs for m in XID_LINE.finditer(p.read_text(errors="replace"))}
    assert {"13", "43", "119", "149"} <= codes  # what the captures contain
    expected = {"13": ("restart-app", "info"), "43": ("none", "info"),
                "119": ("reset-device", "critical"), "149": ("reset-device", "warning")}
    for code in codes:
        info = faults.lookup("nvidia", code)
        assert info.known, code
        if code in expected:
            assert (info.action, info.severity) == expected[code], code
    # and as NVML events: each becomes a fault with the table's class and action
    doc = {"name": "kernel-xids", "devices": [{"vendor": "nvidia", "product": "NVIDIA H100 80GB HBM3"}],
           "faults": [{"at": 1, "vendor": "nvidia", "index": 0, "kind": "xid", "code": c} for c in sorted(codes)]}
    c, clock = make(from_dict(doc, "kernel-xids"))
    w = watcher(c, c.collect())
    clock.set_t(2)
    seen = {w.step().code for _ in codes}
    assert seen == codes
    recorded = {f.code: f for f in c.collect()[0].faults}
    assert recorded["119"].fault_class == "firmware" and recorded["119"].action == "reset-device"


def test_the_xid_table_follows_the_catalogue_for_the_node_level_codes():
    table = faults.table("nvidia")
    assert "xid-errors" in table.source  # cites NVIDIA's published catalogue
    assert all(e.action in ACTIONS for e in table.entries.values())
    want = {"79": ("reboot-node", "critical"), "48": ("reset-device", "critical"),
            "95": ("reset-device", "critical"), "94": ("restart-app", "warning"),
            "13": ("restart-app", "info"), "31": ("restart-app", "info"), "63": ("none", "info"),
            "64": ("reset-device", "critical"), "74": ("reset-device", "critical"),
            "gpu-lost": ("reboot-node", "critical")}
    for code, (action, severity) in want.items():
        info = faults.lookup("nvidia", code)
        assert (info.action, info.severity) == (action, severity), code
    unknown = faults.lookup("nvidia", "999")
    assert not unknown.known and unknown.action == "contact-support"


def test_an_xid_reaches_a_snapshot_in_the_cycle_it_wakes_not_at_the_next_tick():
    """Sampler interval one hour: the second snapshot can only be the woken cycle."""
    doc = {"name": "woken", "devices": [{"vendor": "nvidia", "count": 2, "product": "NVIDIA H100 80GB HBM3",
                                         "values": {"utilization_ratio": 0.5, "power_watts": 300}}],
           "faults": [{"at": 30, "vendor": "nvidia", "index": 1, "kind": "xid", "code": "79"}]}
    scenario = from_dict(doc, "woken")
    clock = ManualClock()
    wake = threading.Event()
    made = []

    def factory():
        c = nvml.create(CollectorOptions(scenario=scenario, clock=clock, wake=wake.set, interval_seconds=3600,
                                         settings={"event_wait_ms": 50}))
        made.append(c)
        return c

    sampler = Sampler([CollectorSpec("nvml", "nvidia", factory, 30.0)], "n", clock=clock, wake=wake,
                      min_cycle_gap=0.0)
    published, changed, stop = [], threading.Condition(), threading.Event()

    def publish(snap, _evaluation=None):  # Sampler.run publishes (snapshot, evaluation)
        with changed:
            published.append(snap)
            changed.notify_all()

    runner = threading.Thread(target=sampler.run, args=(3600.0, publish, stop), daemon=True)
    runner.start()
    try:
        with changed:
            assert changed.wait_for(lambda: len(published) >= 1, timeout=60)
        assert [d.health.state for d in published[0].devices] == ["ok", "ok"]
        assert made[0]._watcher is not None  # the event thread runs from the first cycle
        clock.set_t(31)  # the XID is due; nothing but the event can move the sampler now
        with changed:
            assert changed.wait_for(lambda: len(published) >= 2, timeout=60)
        g0, g1 = published[1].devices
        assert g1.health.state == "failed"
        xid = next(f for f in g1.faults if f.code == "79")
        assert (xid.action, xid.count, xid.last_seen) == ("reboot-node", 1, clock())
        assert "79" in {r.code for r in g1.health.reasons}
        assert g0.health.state == "ok" and g0.value("power_watts") == 300
    finally:
        stop.set()
        sampler.request_cycle()
        runner.join(30)
        sampler.close()
    assert not runner.is_alive()


def test_a_gpu_back_after_a_reset_is_registered_again_and_old_events_are_not_replayed():
    c, clock = make("nvidia-lost")
    w = watcher(c, c.collect())
    assert len(w.registered) == 8
    clock.set_t(30)  # GPU 2 lost
    devices = c.collect()
    assert w.step() is None and len(w.registered) == 7  # rebuilt without it
    clock.set_t(61)  # reset: the collector reads it again and hands the watcher the full list
    live = [d for d in c.collect() if d.health.state == "ok"]
    w.update([(d.identity.uuid, c._nv.nvmlDeviceGetHandleByIndex(d.identity.index)) for d in live])
    assert w.step() is None
    assert len(w.registered) == 8 and devices[2].identity.uuid in w.registered


def test_a_driver_without_event_calls_is_said_once_not_every_cycle(caplog, monkeypatch):
    c, clock = make("nvidia-xid79", events=True)

    def no_events():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    monkeypatch.setattr(c._nv, "nvmlEventSetCreate", no_events)
    caplog.set_level("INFO", logger="hetero_exporter.collectors.nvidia.nvml.events")
    first = None
    for _ in range(3):
        c.collect()
        first = first or c._watcher
        c._watcher._thread.join(10)
        clock.advance(10)
    assert c._watcher is first  # no second watcher started after the first found no event calls
    said = [r for r in caplog.records if "not supported here" in r.getMessage()]
    assert len(said) == 1
