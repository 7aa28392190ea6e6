"""`inspect` is deterministic about NVML events (issue 15): its one collection registers the
event set before reading and drains every pending event into the snapshot, so an Xid that came
while it ran is always in its output, not only when the event thread happens to win the race
against the snapshot build. The thread of `run` takes the drained set over."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pynvml")

from conftest import ROOT  # noqa: E402
from hetero_exporter import cli  # noqa: E402
from hetero_exporter import simulate  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml import collector as nvml  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml import events as nvml_events  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml.fake import FakeNvml  # noqa: E402
from hetero_exporter.sdk.contract import CollectorOptions  # noqa: E402
from hetero_exporter.simulate import ManualClock  # noqa: E402
from hetero_exporter.simulate.scenario import from_dict  # noqa: E402

XID79 = str(ROOT / "fixtures" / "scenarios" / "nvidia-xid79.yaml")  # Xid 79 on GPU 1 at t=30, 4 GPUs


@pytest.fixture
def xid_after_registration(monkeypatch):
    """inspect's scenario clock is manual, at --at; once every GPU is registered in an event set
    the clock passes the Xid 79 (t=30.5): the Xid is pending in the set when the collection goes on."""
    clocks = []

    def clock(speed=1.0, start_t=0.0):
        c = ManualClock()
        c.set_t(start_t)
        clocks.append(c)
        return c

    register = FakeNvml.nvmlDeviceRegisterEvents

    def register_then_xid(self, h, mask, event_set):
        register(self, h, mask, event_set)
        if len(event_set.masks) == len(self._handles) and self._t() < 30:
            clocks[-1].set_t(30.5)

    monkeypatch.setattr(simulate, "SimulationClock", clock)
    monkeypatch.setattr(FakeNvml, "nvmlDeviceRegisterEvents", register_then_xid)
    return clocks


def test_a_pending_xid79_is_always_in_inspect_s_output(xid_after_registration, capsys):
    for _ in range(20):  # bounded: 20 one-shot collections, each must show it
        code = cli.main(["inspect", "--simulate", XID79, "--at", "29", "--json", "--kernel-log", "off",
                         "--log-format", "text", "--log-level", "error"])
        assert code == 0
        doc = json.loads(capsys.readouterr().out)
        gpu1 = next(d for d in doc["devices"] if d["identity"]["index"] == 1)
        assert gpu1["health"]["state"] == "failed"
        assert "79" in {f["code"] for f in gpu1["faults"]}
        assert "79" in {r["code"] for r in gpu1["health"]["reasons"]}
        assert all(d["health"]["state"] == "ok" for d in doc["devices"] if d["identity"]["index"] != 1)


def _collector(scenario, clock, **settings):
    opts = CollectorOptions(scenario=scenario, clock=clock, interval_seconds=10.0,
                            settings={"event_wait_ms": 20, **settings})
    return nvml.create(opts)


def test_only_the_first_cycle_drains_and_the_thread_takes_its_set_over(monkeypatch):
    doc = {"name": "two", "devices": [{"vendor": "nvidia", "count": 2, "product": "NVIDIA H100 80GB HBM3",
                                       "values": {"utilization_ratio": 0.5}}],
           "faults": [{"at": 30, "vendor": "nvidia", "index": 0, "kind": "xid", "code": "48"}]}
    drains, created = [], []
    drain, create = nvml_events.EventWatcher.drain, FakeNvml.nvmlEventSetCreate

    def counted_drain(self, *a, **k):
        drains.append(1)
        return drain(self, *a, **k)

    def counted_create(self):
        created.append(1)
        return create(self)
    monkeypatch.setattr(nvml_events.EventWatcher, "drain", counted_drain)
    monkeypatch.setattr(FakeNvml, "nvmlEventSetCreate", counted_create)
    clock = ManualClock()
    c = _collector(from_dict(doc, "two"), clock)
    try:
        for t in (0, 10, 20):
            clock.set_t(t)
            c.collect()
        assert drains == [1]  # later cycles read as before: the thread waits on the events
        assert created == [1] and c._watcher.alive  # the set of the first cycle, kept by the thread
    finally:
        c.close()


def test_a_drain_is_bounded_by_a_count_and_a_time():
    doc = {"name": "storm", "devices": [{"vendor": "nvidia", "product": "NVIDIA H100 80GB HBM3"}],
           "faults": [{"at": 1, "vendor": "nvidia", "index": 0, "kind": "xid", "code": "13"}] * 40}
    clock = ManualClock()
    c = _collector(from_dict(doc, "storm"), clock, events=False)
    try:
        c.collect()
        w = c.event_watcher([(c.collect()[0].identity.uuid, c._nv.nvmlDeviceGetHandleByIndex(0))])
        w.open()
        clock.set_t(2)  # 40 events pending
        assert w.drain(max_events=5) == 5
        assert w.drain(max_seconds=0.0) == 0
        assert w.drain() == 35  # the rest, then NVML says timeout
        assert w.drain() == 0
        w.close_set()
    finally:
        c.close()
