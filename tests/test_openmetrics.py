"""OpenMetrics by content negotiation (issue 39 §3): counters carry ``_created`` (renewed when the
device was reset or its driver reloaded, never invented), exemplars on the fault counters within
the 128-rune budget, the text format byte-identical to what it was, both formats cached."""

from __future__ import annotations

import dataclasses

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from test_exposition import golden_snapshot
from hetero_exporter.exposition import openmetrics as om
from hetero_exporter.exposition.cache import Exposition
from hetero_exporter.exposition.collector import (KernelLogCollector, SnapshotCollector, ToolProcessesCollector,
                                                  build_families)
from hetero_exporter.model import (DeviceIdentity, DeviceSample, Fault, NodeSnapshot, Quality, Reading)
from hetero_exporter.model import names as N

OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"  # as Prometheus asks
STARTED, BOOT, T0 = 1_800_000_000.0, 1_799_990_000.0, 1_800_000_100.0
Q = Quality("test", "measured", None, 1.0)
KMSG = "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _gpu(t: float, energy: float, volatile: float = 0.0, aggregate: float = 5.0, driver: str = "550.54.15",
         faults: tuple[Fault, ...] = ()) -> DeviceSample:
    readings = {"energy_joules_total": energy, "ecc_corrected_volatile_total": volatile,
                "ecc_corrected_total": aggregate, "utilization_ratio": 0.5}
    return DeviceSample(DeviceIdentity("nvidia", "gpu", 0, "GPU-1", "H100-SXM5-80GB", "0000:18:00.0", 0, driver),
                        t, {k: Reading(v, Q) for k, v in readings.items()}, faults=faults)


def _snap(t: float, *devices: DeviceSample, removed: tuple[DeviceIdentity, ...] = ()) -> NodeSnapshot:
    return NodeSnapshot(node="n", time=t, devices=devices, removed=removed,
                        removed_total={"nvidia": len(removed)} if removed else {})


class Node:
    """A registry over a snapshot the test replaces, rendered as a scrape would."""

    def __init__(self, snap: NodeSnapshot):
        self.snap = snap
        self.reg = CollectorRegistry(auto_describe=False)
        self.reg.register(SnapshotCollector(lambda: self.snap, clock=lambda: self.snap.time,
                                            started=STARTED, boot=BOOT))
        self.expo = Exposition(self.reg)

    def body(self, accept: str | None) -> bytes:
        chunks, _, _ = self.expo.render(accept, False)
        return b"".join(chunks)

    def scrape(self) -> dict[tuple, tuple]:
        """(sample name, labels) -> (value, exemplar) of an OpenMetrics scrape (parsed strictly)."""
        out = {}
        for fam in text_string_to_metric_families(self.body(OPENMETRICS).decode()):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = (s.value, s.exemplar)
        return out


def _created(scrape: dict, family: str, **labels: str) -> float | None:
    key = (family + "_created", tuple(sorted(labels.items())))
    return scrape[key][0] if key in scrape else None


GPU = {"vendor": "nvidia", "uuid": "GPU-1"}


def test_the_text_format_is_byte_identical_to_the_plain_families():
    """What text scrapers get is what build_families renders, with no _created gauges, however
    the collector tracks created times (and the golden file of test_exposition still matches)."""
    node = Node(golden_snapshot())
    plain = CollectorRegistry(auto_describe=False)
    families = build_families(golden_snapshot())

    class Plain:
        def collect(self):
            return families
    plain.register(Plain())
    text = node.body(None)
    assert b"_created" not in text and b" # {" not in text
    head = text[:text.index(b"# HELP " + N.SNAPSHOT_AGE.name.encode())]
    assert head == generate_latest(plain)
    node.body(OPENMETRICS)  # an OpenMetrics scrape between two text scrapes changes nothing
    assert node.body(None) == text


def test_both_formats_are_rendered_once_per_snapshot():
    node = Node(_snap(T0, _gpu(T0, 1000.0)))
    for _ in range(3):
        node.body(None), node.body(OPENMETRICS)
    assert node.expo.renders == 2
    node.snap = _snap(T0 + 10, _gpu(T0 + 10, 2000.0))
    node.body(None), node.body(OPENMETRICS)
    assert node.expo.renders == 4


def test_created_times_follow_the_rule():
    node = Node(_snap(T0, _gpu(T0, 1000.0), ))
    got = node.scrape()
    assert _created(got, "accelerator_energy_joules", **GPU) == BOOT  # since the driver loaded: the boot
    assert _created(got, "accelerator_ecc_volatile_errors", severity="corrected", **GPU) == BOOT
    assert _created(got, "accelerator_ecc_errors", severity="corrected", **GPU) is None  # a lifetime count: unknown
    assert _created(got, "accelerator_collector_errors", collector="x", kind="busy") is None  # no such series
    # the agent's own counters: this process's start
    node.snap = dataclasses.replace(node.snap, removed_total={"nvidia": 0})
    assert _created(node.scrape(), "accelerator_devices_removed", vendor="nvidia") == STARTED


def test_energy_going_backwards_restarts_every_driver_counter_of_the_device_but_not_the_lifetime_ones():
    node = Node(_snap(T0, _gpu(T0, 5000.0, volatile=0.0)))
    node.scrape()
    node.snap = _snap(T0 + 10, _gpu(T0 + 10, 6000.0))
    assert _created(node.scrape(), "accelerator_energy_joules", **GPU) == BOOT  # growing: the same run
    node.snap = _snap(T0 + 20, _gpu(T0 + 20, 40.0))  # the GPU was reset: its energy starts again
    got = node.scrape()
    assert _created(got, "accelerator_energy_joules", **GPU) == T0 + 20
    # volatile ECC stayed 0, so it cannot show the restart itself: the device's evidence does
    assert _created(got, "accelerator_ecc_volatile_errors", severity="corrected", **GPU) == T0 + 20
    assert _created(got, "accelerator_ecc_errors", severity="corrected", **GPU) is None
    node.snap = _snap(T0 + 30, _gpu(T0 + 30, 100.0))
    assert _created(node.scrape(), "accelerator_energy_joules", **GPU) == T0 + 20  # kept


def test_a_driver_reload_or_a_reset_event_restarts_the_driver_counters():
    node = Node(_snap(T0, _gpu(T0, 5000.0)))
    node.scrape()
    node.snap = _snap(T0 + 10, _gpu(T0 + 10, 5100.0, driver="560.35.03"))  # a reload that is not yet visible
    assert _created(node.scrape(), "accelerator_energy_joules", **GPU) == T0 + 10
    reset = Fault("gpu-reset", "reset", "none", message="amdgpu: GPU reset(2) succeeded!", count=1,
                  last_seen=T0 + 15, source="kmsg")
    node.snap = _snap(T0 + 20, _gpu(T0 + 20, 5200.0, driver="560.35.03", faults=(reset,)))
    got = node.scrape()
    assert _created(got, "accelerator_energy_joules", **GPU) == T0 + 15  # the reset's own time
    assert _created(got, "accelerator_ecc_errors", severity="corrected", **GPU) is None
    node.snap = _snap(T0 + 30, _gpu(T0 + 30, 5300.0, driver="560.35.03", faults=(reset,)))
    assert _created(node.scrape(), "accelerator_energy_joules", **GPU) == T0 + 15  # counted once


def test_any_counter_that_goes_backwards_starts_a_new_run():
    node = Node(_snap(T0, _gpu(T0, 5000.0, aggregate=7.0)))
    assert _created(node.scrape(), "accelerator_ecc_errors", severity="corrected", **GPU) is None
    node.snap = _snap(T0 + 10, _gpu(T0 + 10, 5100.0, aggregate=2.0))
    assert _created(node.scrape(), "accelerator_ecc_errors", severity="corrected", **GPU) == T0 + 10


def test_fault_counters_carry_the_event_behind_their_last_increment():
    xid = Fault("79", "gpu-lost", "reset-device", message=KMSG + "\x1b[31m" + " details" * 30, count=2,
                last_seen=T0 - 3, source="kmsg")
    node = Node(_snap(T0, _gpu(T0, 1000.0, faults=(xid,))))
    value, exemplar = node.scrape()[("accelerator_fault_events_total", tuple(sorted(
        {**GPU, "code": "79", "action": "reset-device"}.items())))]
    assert value == 2 and exemplar is not None
    assert exemplar.labels["source"] == "kmsg" and exemplar.labels["event"].startswith("NVRM: Xid (PCI:0000:18:00): 79")
    assert exemplar.labels["event"].endswith("…") and "\x1b" not in exemplar.labels["event"]
    assert sum(len(k) + len(v) for k, v in exemplar.labels.items()) <= om.EXEMPLAR_RUNES
    assert float(exemplar.timestamp) == T0 - 3 and exemplar.value == 1
    assert _created(node.scrape(), "accelerator_fault_events", code="79", action="reset-device", **GPU) == STARTED


def test_a_removed_device_is_the_exemplar_of_the_removed_counter():
    gone = DeviceIdentity("nvidia", "gpu", 3, "GPU-gone", pci_address="0000:9a:00.0")
    node = Node(_snap(T0, _gpu(T0, 1000.0), removed=(gone,)))
    _, exemplar = node.scrape()[("accelerator_devices_removed_total", (("vendor", "nvidia"),))]
    assert exemplar.labels == {"uuid": "GPU-gone", "pci_address": "0000:9a:00.0"} and float(exemplar.timestamp) == T0


@pytest.mark.parametrize("labels", [
    {"source": "kmsg", "event": "x" * 500},
    {"source": "s" * 200, "event": "e"},
    {"source": "kmsg", "event": "\x00\x07 \u2028 ünïcödé " * 20},
])
def test_exemplar_labels_always_fit_the_budget(labels):
    fitted = om._fit(labels)
    assert sum(len(k) + len(v) for k, v in fitted.items()) <= om.EXEMPLAR_RUNES
    assert all(v.isprintable() for v in fitted.values())


def test_the_agents_other_counters_carry_created_only_in_openmetrics():
    status = {"up": True, "records": 7, "events": {("nvidia", "79"): 1}, "dropped": {"queue-full": 0}, "lag_seconds": 0}
    reg = CollectorRegistry(auto_describe=False)
    reg.register(KernelLogCollector(lambda: status, started=STARTED))
    reg.register(ToolProcessesCollector(lambda: 2, started=STARTED))
    text = b"".join(Exposition(reg).render(None, False)[0])
    assert b"_created" not in text and text == generate_latest(reg)
    body = b"".join(Exposition(reg).render(OPENMETRICS, False)[0]).decode()
    created = {s.name: s.value for f in text_string_to_metric_families(body) for s in f.samples
               if s.name.endswith("_created")}
    assert created == {"accelerator_kernel_log_records_created": STARTED,
                       "accelerator_kernel_log_events_created": STARTED,
                       "accelerator_kernel_log_dropped_created": STARTED,
                       "accelerator_tool_processes_killed_created": STARTED}


def test_the_evidence_is_the_health_policys():
    """The driver counters are the policy's reset_counters, the reset codes those the kernel log
    and the policy record for a reset that happened."""
    from hetero_exporter.health.detect import policy as policy_mod
    from hetero_exporter.sources import kernel_log
    pol = policy_mod.load(None)
    assert set(om.DRIVER_FIELDS) == set(pol.reset_counters)
    assert om.RESET_CODES == set(pol.reset_codes) | kernel_log.RESET_CODES
    from hetero_exporter.model import fields as F
    assert {N.metric_for_field(f)[0].name for f in om.DRIVER_FIELDS} == om.DRIVER_COUNTERS
    assert all(F.lookup(f) for f in om.DRIVER_FIELDS)


def test_process_start_is_before_now_and_after_the_boot():
    boot = om.boot_time()
    assert boot is not None
    import time
    assert boot <= om.process_start(boot) <= time.time()


def test_every_counter_of_the_catalogue_says_where_its_created_time_comes_from():
    """A new counter family must be put in one of the three (the module's docstring says why)."""
    counters = {m.name for m in N.ALL if m.type == "counter"}
    sets = (om.AGENT_COUNTERS, om.DRIVER_COUNTERS, om.UNKNOWN_START)
    assert set().union(*sets) == counters
    assert sum(len(s) for s in sets) == len(counters)  # no counter in two


def test_the_agents_counters_other_modules_render_get_the_process_start():
    """Health actions and promotions (health/act/metrics.py) and the like yield no created time
    of their own: the cache gives them this process's start, in OpenMetrics only, and the
    snapshot part is still rendered once per format."""
    from hetero_exporter.health.act.metrics import HealthMetrics
    health = HealthMetrics()
    health.action("taint", "ok")
    health.promotions({("nvidia", "13", "failed"): 2})
    reg = CollectorRegistry(auto_describe=False)
    snap = _snap(T0, _gpu(T0, 1000.0))
    reg.register(SnapshotCollector(lambda: snap, clock=lambda: T0, started=STARTED, boot=BOOT))
    reg.register(health)
    expo = Exposition(reg, started=STARTED)
    for _ in range(2):
        text = b"".join(expo.render(None, True, gzip_min=0)[0])
        body = b"".join(expo.render(OPENMETRICS, False)[0]).decode()
    assert b"_created" not in __import__("gzip").decompress(text)
    samples = [s for f in text_string_to_metric_families(body) for s in f.samples]
    actions = [s for s in samples if s.name == "accelerator_health_actions_total"]
    created = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in samples if s.name.endswith("_created")}
    assert actions and all(created[("accelerator_health_actions_created", tuple(sorted(s.labels.items())))] == STARTED
                           for s in actions)
    assert created[("accelerator_health_promotions_created",
                    (("code", "13"), ("to", "failed"), ("vendor", "nvidia")))] == STARTED
    assert expo.renders == 2
    # a family stamped is a copy: the collector's own object is left as it was
    assert not any(s.name.endswith("_created") for f in health.collect() for s in f.samples)


def test_the_snapshots_counters_need_no_stamp_so_the_cache_keeps_them():
    snap = _snap(T0, _gpu(T0, 1000.0), removed=(DeviceIdentity("nvidia", "gpu", 3, "GPU-gone"),))
    collector = SnapshotCollector(lambda: snap, clock=lambda: T0, started=STARTED, boot=BOOT)
    with om.rendering(True):
        families = list(collector.collect())
    assert any(f.name == "accelerator_devices_removed" for f in families)
    assert all(a is b for a, b in zip(om.stamp(families, STARTED), families))
    stamped = om.stamp(build_families(snap), STARTED)  # the text format's families: copies with created
    assert [s.value for f in stamped if f.name == "accelerator_devices_removed"
            for s in f.samples if s.name.endswith("_created")] == [STARTED]
