"""A late collector does not hold the snapshot to its deadline (issue 18, item 7).

The snapshot is published when the other collectors are done and the late one has had its
usual time plus a grace (sampling.py docstring); its devices are carried over stale, its status
says ``late``; its answer, when it comes, is used by the next cycle. No timing is asserted: a
sampler that waited for the deadline would report ``timeout``, not ``late``.
"""

from __future__ import annotations

import contextlib
import threading

from hetero_exporter import sampling
from hetero_exporter.model import DeviceIdentity, DeviceSample, Quality, Reading
from hetero_exporter.sampling import CollectorSpec, Sampler
from hetero_exporter.simulate import ManualClock

DEADLINE = 30.0  # far beyond the patience of a collector that answered at once before


def _device(vendor: str, t: float, value: float) -> DeviceSample:
    return DeviceSample(identity=DeviceIdentity(vendor, "gpu", 0, f"{vendor}-0", "H100-SXM5-80GB"),
                        timestamp=t, readings={"utilization_ratio": Reading(value, Quality("test"))})


class Steady:
    name = vendor = "nvidia"

    def __init__(self, clock):
        self.clock = clock

    def collect(self):
        return [_device("nvidia", self.clock(), 0.5)]


class Sleepy:
    """Answers at once, except the calls listed in ``block``: those wait for ``release``.
    Each answer carries its call number as the utilization, to tell the answers apart."""

    name = vendor = "sleepy"

    def __init__(self, clock, block=()):
        self.clock, self.block = clock, set(block)
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def collect(self):
        self.calls += 1
        n = self.calls
        if n in self.block:
            self.entered.set()
            self.release.wait(60)  # bounded; released by the test
        return [_device("sleepy", self.clock(), n / 100)]


def _sampler(clock, *collectors, timeout=DEADLINE):
    specs = [CollectorSpec(c.name, c.vendor, (lambda c=c: c), timeout) for c in collectors]
    return Sampler(specs, "node-a", clock=clock)


@contextlib.contextmanager
def _running(clock, sleepy, timeout=DEADLINE):
    """A sampler over a steady collector and ``sleepy``; released and closed at the end."""
    s = _sampler(clock, Steady(clock), sleepy, timeout=timeout)
    try:
        yield s
    finally:
        sleepy.release.set()
        s.close()


def _by_name(snap):
    return {c.name: c for c in snap.collectors}, {d.identity.vendor: d for d in snap.devices}


def test_the_snapshot_is_published_before_a_late_collectors_deadline_with_its_devices_stale():
    clock = ManualClock()
    sleepy = Sleepy(clock, block={2})
    with _running(clock, sleepy) as s:
        s.collect()  # call 1 answers at once: its usual time is ~0
        clock.advance(10)
        snap = s.collect()  # call 2 hangs
        assert sleepy.entered.is_set() and not sleepy.release.is_set()
        status, dev = _by_name(snap)
        assert status["nvidia"].ok and dev["nvidia"].readings["utilization_ratio"].quality.status != "stale"
        st = status["sleepy"]
        assert not st.ok and st.error_kind == "late" and st.errors_total == {"late": 1}
        assert sampling.LATE_MESSAGE in st.error
        stale = dev["sleepy"]
        assert stale.readings["utilization_ratio"].value == 0.01  # call 1's reading, carried over
        assert stale.readings["utilization_ratio"].quality.status == "stale"
        assert stale.health.state == "unknown"
        # the late call answers between the cycles; the next cycle is fresh again
        sleepy.release.set()
        assert s._workers["sleepy"].wait(10)
        clock.advance(10)
        snap = s.collect()
        status, dev = _by_name(snap)
        assert status["sleepy"].ok and status["sleepy"].last_success == clock()
        fresh = dev["sleepy"].readings["utilization_ratio"]
        assert fresh.quality.status != "stale" and fresh.value == 0.03  # call 3, started on time
        assert sleepy.calls == 3  # no second call while call 2 was running


def test_a_late_answer_stands_in_when_the_next_call_is_late_too():
    clock = ManualClock()
    sleepy = Sleepy(clock, block={2, 3})
    with _running(clock, sleepy) as s:
        s.collect()
        clock.advance(10)
        assert _by_name(s.collect())[0]["sleepy"].error_kind == "late"  # call 2 hangs
        # call 2 answers after its cycle (released and re-armed for call 3)
        sleepy.entered.clear()
        sleepy.release.set()
        assert s._workers["sleepy"].wait(10)
        sleepy.release.clear()
        clock.advance(10)
        snap = s.collect()  # call 3 hangs: call 2's answer is this cycle's
        status, dev = _by_name(snap)
        assert sleepy.entered.is_set() and status["sleepy"].ok
        r = dev["sleepy"].readings["utilization_ratio"]
        assert r.value == 0.02 and r.quality.status != "stale"
        assert status["sleepy"].last_success == clock() - 10  # when call 2 answered


def test_a_collector_still_running_at_the_next_cycle_is_busy_and_not_started_again():
    clock = ManualClock()
    sleepy = Sleepy(clock, block={2})
    with _running(clock, sleepy) as s:
        s.collect()
        clock.advance(10)
        s.collect()  # late
        clock.advance(10)
        st = _by_name(s.collect())[0]["sleepy"]
        assert st.error_kind == "busy" and st.errors_total == {"late": 1, "busy": 1}
        assert sleepy.calls == 2


def test_the_first_cycle_waits_for_every_collector_up_to_its_deadline():
    clock = ManualClock()
    sleepy = Sleepy(clock, block={1})
    threading.Timer(0.3, sleepy.release.set).start()  # answers well before the deadline
    with _running(clock, sleepy) as s:
        snap = s.collect()
    status, dev = _by_name(snap)
    assert status["sleepy"].ok and dev["sleepy"].readings["utilization_ratio"].value == 0.01


def test_patience_is_the_usual_time_with_a_grace_never_past_the_deadline():
    clock = ManualClock()
    s = _sampler(clock, Steady(clock), timeout=5.0)
    try:
        spec, hist = s._specs[0], s._history["nvidia"]
        assert s._patience(spec, hist) == 5.0  # first cycle: the deadline
        s.collect()
        hist.durations.clear()
        assert s._patience(spec, hist) == sampling.LATE_GRACE_SECONDS  # no answer on time yet
        hist.durations.extend([0.1, 2.0, 0.2])
        assert s._patience(spec, hist) == 2.0 * sampling.LATE_FACTOR + sampling.LATE_GRACE_SECONDS
        hist.durations.append(4.0)
        assert s._patience(spec, hist) == 5.0
        # a timeout says nothing of the usual time; another failure does
        hist.durations.clear()
        hist.absorb(sampling._Outcome(error=TimeoutError("killed"), duration=5.0), 0.0)
        hist.absorb(sampling._Outcome(error=RuntimeError("driver"), duration=0.3), 0.0)
        assert list(hist.durations) == [0.3]
    finally:
        s.close()


def test_a_steady_slow_collector_is_waited_for_every_cycle():
    clock = ManualClock()

    class Slow:
        name = vendor = "slow"

        def collect(self):
            threading.Event().wait(0.2)
            return [_device("slow", clock(), 0.5)]

    s = _sampler(clock, Steady(clock), Slow(), timeout=10.0)
    try:
        for _ in range(3):
            clock.advance(10)
            st = _by_name(s.collect())[0]["slow"]
            assert st.ok, st.error
    finally:
        s.close()
