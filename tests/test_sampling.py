"""The sampler: concurrency, deadlines, failure reporting and carry-over."""

from __future__ import annotations

import threading

from hetero_exporter.sdk.contract import ParseError, Unavailable
from hetero_exporter.model import DeviceIdentity, DeviceSample, NodeSnapshot, Quality, Reading
from hetero_exporter.sampling import CollectorSpec, Sampler
from hetero_exporter.simulate import ManualClock


def _device(vendor: str, index: int, t: float, model: str = "H100-SXM5-80GB") -> DeviceSample:
    return DeviceSample(
        identity=DeviceIdentity(vendor, "gpu", index, f"{vendor}-{index}", model),
        timestamp=t, readings={"utilization_ratio": Reading(0.5, Quality("test"))})


class Steady:
    def __init__(self, vendor: str, n: int, clock):
        self.name, self.vendor, self.n, self.clock = vendor, vendor, n, clock
        self.calls = 0

    def collect(self):
        self.calls += 1
        return [_device(self.vendor, i, self.clock()) for i in range(self.n)]


class Hangs:
    """Blocks until released: stands for a vendor call that never returns."""

    name = vendor = "hang"

    def __init__(self):
        self.entered = threading.Event()
        self.release = threading.Event()

    def collect(self):
        self.entered.set()
        self.release.wait(60)  # bounded, and released by the test
        return []


class Raises:
    name = vendor = "boom"

    def __init__(self, error):
        self.error = error

    def collect(self):
        raise self.error


def _sampler(*collectors, timeouts=None, **kw) -> Sampler:
    specs = [CollectorSpec(c.name, c.vendor, (lambda c=c: c), (timeouts or {}).get(c.name, 0.5))
             for c in collectors]
    return Sampler(specs, "node-a", **kw)


def test_a_hung_collector_is_reported_and_does_not_hold_the_others():
    clock = ManualClock()
    good, hung = Steady("nvidia", 2, clock), Hangs()
    s = _sampler(good, hung, timeouts={"hang": 0.2}, clock=clock)
    try:
        snap = s.collect()
        # collect() returned while the hung call is still blocked: it did not wait for it
        assert hung.entered.is_set() and not hung.release.is_set()
        assert [d.identity.uuid for d in snap.devices] == ["nvidia-0", "nvidia-1"]
        status = {c.name: c for c in snap.collectors}
        assert status["nvidia"].ok and not status["hang"].ok
        assert status["hang"].error_kind == "timeout" and "deadline" in status["hang"].error
        # still stuck on the next cycle: reported busy, not restarted, others still fresh
        clock.advance(10)
        snap2 = s.collect()
        st2 = {c.name: c for c in snap2.collectors}
        assert st2["hang"].error_kind == "busy"
        assert st2["hang"].errors_total == {"timeout": 1, "busy": 1}
        assert good.calls == 2 and all(d.timestamp == clock() for d in snap2.devices)
    finally:
        hung.release.set()
        s.close()


def test_exceptions_and_unavailability_are_classified_and_isolated():
    clock = ManualClock()
    good = Steady("nvidia", 1, clock)
    parse = Raises(ParseError("npu-smi info", "no device table", line=3))
    parse.name = "npu_smi"
    bug = Raises(KeyError("x"))
    s = Sampler([CollectorSpec("nvidia", "nvidia", lambda: good, 1.0),
                 CollectorSpec("npu_smi", "ascend", lambda: parse, 1.0),
                 CollectorSpec("bug", "x", lambda: bug, 1.0),
                 CollectorSpec("amdsmi", "amd", _raise(Unavailable("libamd_smi.so not found")), 1.0)],
                "n", clock=clock)
    try:
        snap = s.collect()
    finally:
        s.close()
    st = {c.name: c for c in snap.collectors}
    assert st["nvidia"].ok and len(snap.devices) == 1
    assert st["npu_smi"].error_kind == "parse" and "line 3" in st["npu_smi"].error
    assert st["bug"].error_kind == "exception" and st["bug"].error.startswith("KeyError")
    assert st["amdsmi"].error_kind == "unavailable" and "libamd_smi.so" in st["amdsmi"].error


def _raise(err):
    def factory():
        raise err
    return factory


def test_unavailable_collector_is_retried_later_not_every_cycle():
    attempts = []

    def factory():
        attempts.append(1)
        raise ImportError("No module named 'pynvml'")

    s = Sampler([CollectorSpec("nvml", "nvidia", factory, 1.0)], "n", clock=ManualClock())
    try:
        first = s.collect()
        s.collect()
        s.collect()
    finally:
        s.close()
    assert first.collectors[0].error_kind == "unavailable"
    assert "pynvml" in first.collectors[0].error
    assert len(attempts) == 1  # the retry waits RETRY_UNAVAILABLE_SECONDS


def test_devices_of_a_failing_collector_are_carried_over_stale_and_unknown():
    clock = ManualClock()

    class Flaky:
        name = vendor = "nvidia"
        fail = False

        def collect(self):
            if self.fail:
                raise RuntimeError("driver hiccup")
            return [_device("nvidia", 0, clock())]

    flaky = Flaky()
    s = _sampler(flaky, clock=clock)
    try:
        s.collect()
        flaky.fail = True
        clock.advance(30)
        snap = s.collect()
    finally:
        s.close()
    (d,) = snap.devices
    assert d.health.state == "unknown"  # cannot read is never failed
    assert "driver hiccup" in d.health.reasons[0].message
    r = d.readings["utilization_ratio"]
    assert r.quality.status == "stale" and r.quality.age_seconds == 30
    assert snap.collectors[0].last_success == clock() - 30


def test_profiles_are_attached_and_unknown_models_are_estimated():
    clock = ManualClock()

    class Two:
        name = vendor = "nvidia"

        def collect(self):
            return [_device("nvidia", 0, 0, "H100-SXM5-80GB"), _device("nvidia", 1, 0, "Mystery-9000")]

    s = _sampler(Two(), clock=clock)
    try:
        snap = s.collect()
    finally:
        s.close()
    known, unknown = snap.devices
    assert known.profile.model == "H100-SXM5-80GB" and not known.profile.estimated
    assert known.profile.compute_units > 3  # 989 / 312 dense BF16 TFLOPS
    assert unknown.profile.estimated and unknown.profile.model == "Mystery-9000"


def test_a_failing_enricher_does_not_cost_the_snapshot():
    clock = ManualClock()
    seen = []

    def broken(snap):
        raise ValueError("enricher bug")

    def tagging(snap):
        seen.append(snap)
        return NodeSnapshot(snap.node + "-tagged", snap.time, snap.devices, snap.collectors)

    s = _sampler(Steady("nvidia", 1, clock), clock=clock, enrichers=[broken, tagging])
    try:
        snap = s.collect()
    finally:
        s.close()
    assert snap.node == "node-a-tagged" and len(snap.devices) == 1 and seen


def test_a_wake_request_runs_a_cycle_before_the_next_tick():
    clock = ManualClock()
    s = _sampler(Steady("nvidia", 1, clock), clock=clock, min_cycle_gap=0.0)
    published = []
    got = threading.Condition()
    stop = threading.Event()

    def publish(snap, _evaluation=None):  # Sampler.run publishes (snapshot, evaluation)
        with got:
            published.append(snap)
            got.notify_all()

    t = threading.Thread(target=s.run, args=(3600.0, publish, stop), daemon=True)
    t.start()
    try:
        with got:
            assert got.wait_for(lambda: len(published) >= 1, 10)
        s.request_cycle()  # with a one-hour interval, only the wake-up can produce a second one
        with got:
            assert got.wait_for(lambda: len(published) >= 2, 10)
    finally:
        stop.set()
        s.request_cycle()
        t.join(10)
        s.close()
    assert not t.is_alive()
