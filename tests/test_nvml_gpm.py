"""NVIDIA profiling through NVML GPM (issue 27, collectors/nvidia/nvml/gpm.py), on the project's fake
NVML: every GPM family per GPU and per MIG instance within 1 % of the scenario, pre-Hopper
devices ``unsupported``, a failing GPM call ``error`` while the other readings flow, samples
always freed, one pair of samples per cycle with the real window."""

from __future__ import annotations

import logging
import time

import pytest

pynvml = pytest.importorskip("pynvml")

from conftest import ROOT  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml import collector as nvml  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml import gpm  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml.fake import FakeNvml  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml.funnel import Funnel  # noqa: E402
from hetero_exporter.exposition.collector import build_families  # noqa: E402
from hetero_exporter.model import NodeSnapshot  # noqa: E402
from hetero_exporter.model import names as N  # noqa: E402
from hetero_exporter.sdk.contract import CollectorOptions  # noqa: E402
from hetero_exporter.simulate import ManualClock, load  # noqa: E402

SCENARIO = ROOT / "fixtures" / "scenarios" / "nvidia-gpm.yaml"
GPM_FIELDS = {f.field for f in gpm.FIELDS}
# what NVML also serves without GPM (nvmlDeviceGetDecoderUtilization, nvmlDeviceGetPcieThroughput)
NVML_ALSO = {"engine_decoder_utilization_ratio", "pcie_rx_bytes_per_second", "pcie_tx_bytes_per_second"}
GPM_ONLY = GPM_FIELDS - NVML_ALSO


def make(t: float = 10.0, **settings):
    clock = ManualClock()
    clock.set_t(t)
    opts = CollectorOptions(scenario=load(str(SCENARIO)), clock=clock, interval_seconds=10.0,
                            settings={"events": False, **settings})
    return nvml.create(opts), clock


def _later() -> None:
    """GPM pairs samples at most 10 Hz on the monotonic clock: let that much real time pass."""
    time.sleep(gpm.MIN_WINDOW * 1.2)


def _series(devices) -> dict:
    snap = NodeSnapshot(node="n", time=0.0, devices=tuple(devices))
    out = {}
    for fam in build_families(snap):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(series, metric, uuid, **labels):
    key = (metric.name, tuple(sorted({"vendor": "nvidia", "uuid": uuid, **labels}.items())))
    return series.get(key)


EXPECTED = [  # (metric, labels, scenario value)
    (N.GRAPHICS_ACTIVE, {}, 0.91), (N.ENGINE_UTILIZATION, {"engine": "compute"}, 0.62),
    (N.COMPUTE_OCCUPANCY, {}, 0.38), (N.ENGINE_UTILIZATION, {"engine": "integer"}, 0.08),
    (N.ENGINE_UTILIZATION, {"engine": "tensor"}, 0.45), (N.TENSOR_PIPE, {"pipe": "dfma"}, 0.0),
    (N.TENSOR_PIPE, {"pipe": "hmma"}, 0.42), (N.TENSOR_PIPE, {"pipe": "imma"}, 0.03),
    (N.ENGINE_UTILIZATION, {"engine": "memory"}, 0.55), (N.ENGINE_UTILIZATION, {"engine": "fp64"}, 0.01),
    (N.ENGINE_UTILIZATION, {"engine": "fp32"}, 0.12), (N.ENGINE_UTILIZATION, {"engine": "fp16"}, 0.05),
    (N.ENGINE_UTILIZATION, {"engine": "decoder"}, 0.25), (N.ENGINE_UTILIZATION, {"engine": "jpeg"}, 0.1),
    (N.ENGINE_UTILIZATION, {"engine": "ofa"}, 0.02),
    (N.PCIE_THROUGHPUT, {"direction": "rx"}, 2.1e9), (N.PCIE_THROUGHPUT, {"direction": "tx"}, 1.3e9),
    (N.INTERCONNECT_THROUGHPUT, {"link_type": "nvlink", "direction": "rx"}, 8.5e10),
    (N.INTERCONNECT_THROUGHPUT, {"link_type": "nvlink", "direction": "tx"}, 8.4e10),
]


def test_every_gpm_family_on_every_h100_within_one_percent_and_on_mig_instances():
    c, clock = make()
    try:
        devs = c.collect()
        clock.advance(10)
        _later()
        devs = c.collect()  # the second cycle pairs with the first one's sample
    finally:
        c.close()
    series = _series(devs)
    h100 = [d for d in devs if d.identity.parent is None and "H100" in d.identity.model]
    assert len(h100) == 8
    for d in h100:
        for metric, labels, want in EXPECTED:
            got = _value(series, metric, d.identity.uuid, **labels)
            assert got is not None and abs(got - want) <= 0.01 * max(abs(want), 1e-9) + 1e-12, (d.identity.index, metric.name, labels, got)
    migs = [d for d in devs if d.identity.parent is not None]
    assert len(migs) == 2
    by_gi = {d.identity.index: d for d in migs}
    first = by_gi[0]
    assert abs(_value(series, N.ENGINE_UTILIZATION, first.identity.uuid, engine="compute") - 0.7) < 0.007
    assert abs(_value(series, N.COMPUTE_OCCUPANCY, first.identity.uuid) - 0.5) < 0.005
    # the MIG child's utilization, which NVML does not give, is its GPM graphics activity
    assert abs(_value(series, N.UTILIZATION, first.identity.uuid) - 0.8) < 0.008
    assert abs(_value(series, N.UTILIZATION, by_gi[1].identity.uuid) - 0.2) < 0.002
    assert _value(series, N.PCIE_THROUGHPUT, first.identity.uuid, direction="rx") is None  # the GPU's, not the slice's
    # quality: sampled over the real window (two cycles 10 s apart on the monotonic clock: at least the 0.1 s minimum)
    q = h100[0].readings["engine_tensor_utilization_ratio"].quality
    assert q.method == "sampled" and q.window_seconds is not None and q.window_seconds >= gpm.MIN_WINDOW
    assert q.source == "nvmlGpmMetricsGet(NVML_GPM_METRIC_ANY_TENSOR_UTIL)"


def test_a_pre_hopper_gpu_shows_the_gpm_fields_unsupported_and_no_series():
    c, _ = make()
    try:
        devs = c.collect()
    finally:
        c.close()
    a100 = next(d for d in devs if "A100" in d.identity.model)
    assert {f: a100.readings[f].quality.status for f in GPM_ONLY} == dict.fromkeys(GPM_ONLY, "unsupported")
    series = _series([a100])
    assert _value(series, N.ENGINE_UTILIZATION, a100.identity.uuid, engine="tensor") is None
    # where GPM is absent, NVML's own calls give PCIe throughput and the decoder
    pcie = a100.readings["pcie_rx_bytes_per_second"]
    assert pcie.quality.source.startswith("nvmlDeviceGetPcieThroughput") and pcie.value == pytest.approx(2.1e9, rel=1e-3)
    assert a100.readings["engine_decoder_utilization_ratio"].quality.source == "nvmlDeviceGetDecoderUtilization"
    assert _value(series, N.FIELD_STATUS, a100.identity.uuid, field="sm_occupancy_ratio", status="unsupported") == 1
    assert a100.readings["utilization_ratio"].value == pytest.approx(0.9)  # the rest flows


def test_a_failing_gpm_call_is_an_error_said_once_the_rest_flows_and_it_comes_back(caplog):
    c, clock = make(t=90)
    try:
        c.collect()
        clock.set_t(110)  # GPU 1: InUse from 100 to 200
        with caplog.at_level(logging.WARNING, logger=gpm.__name__):
            _later()
            devs = c.collect()
            clock.set_t(120)
            _later()
            devs = c.collect()
        gpu1 = next(d for d in devs if d.identity.index == 1 and d.identity.parent is None)
        assert {gpu1.readings[f].quality.status for f in GPM_ONLY} == {"error"}
        assert gpu1.readings["pcie_rx_bytes_per_second"].quality.source.startswith("nvmlDeviceGetPcieThroughput")
        assert gpu1.readings["utilization_ratio"].quality.status == "ok"
        gpu0 = next(d for d in devs if d.identity.index == 0 and d.identity.parent is None)
        assert gpu0.readings["sm_occupancy_ratio"].value == pytest.approx(0.38)
        said = [r for r in caplog.records if "GPM profiling unavailable" in r.getMessage()]
        assert len(said) == 1 and "InUse" in said[0].getMessage()
        clock.set_t(210)
        _later()
        devs = c.collect()  # a fresh pair after the error
        gpu1 = next(d for d in devs if d.identity.index == 1 and d.identity.parent is None)
        assert gpu1.readings["sm_occupancy_ratio"].value == pytest.approx(0.38)
        fake = c._nv
        # one sample held per GPU with GPM and per MIG instance, none leaked
        assert len(fake.gpm_held) == 8 + 2
    finally:
        c.close()
    assert fake.gpm_held == set()


def test_profiling_off_reads_no_gpm_field():
    c, _ = make(profiling=False)
    try:
        devs = c.collect()
    finally:
        c.close()
    assert not any(GPM_ONLY & set(d.readings) for d in devs)
    assert c._nv.gpm_held == set()


class _Clock:
    def __init__(self) -> None:
        self.now, self.slept = 1000.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def _reader():
    clock = ManualClock()
    clock.set_t(10)
    fake = FakeNvml(load(str(SCENARIO)), clock)
    fake.nvmlInit()
    mono = _Clock()
    return fake, gpm.GpmReader(fake, Funnel(fake), monotonic=mono.monotonic, sleep=mono.sleep), mono


def _targets(fake, indexes):
    return [(f"GPU-{i}", fake.nvmlDeviceGetHandleByIndex(i), {}, []) for i in indexes]


def test_one_wait_for_every_first_sample_the_real_window_after_and_samples_of_gone_keys_freed():
    fake, reader, mono = _reader()
    first = _targets(fake, range(8))
    reader.read(first)
    assert mono.slept == [gpm.MIN_WINDOW]  # eight GPUs, one shared wait
    assert first[0][2]["engine_fp32_utilization_ratio"].quality.window_seconds == pytest.approx(0.1)
    mono.now += 9.96
    again = _targets(fake, range(8))
    reader.read(again)
    assert mono.slept == [gpm.MIN_WINDOW]  # paired with the previous cycle: no wait
    assert again[0][2]["engine_fp32_utilization_ratio"].quality.window_seconds == pytest.approx(10.0)
    assert len(fake.gpm_held) == 8
    reader.read(_targets(fake, range(4)))  # four GPUs gone (lost, or a smaller node)
    assert len(fake.gpm_held) == 4
    reader.close()
    assert fake.gpm_held == set()


def test_faster_than_ten_hertz_repeats_the_last_values_without_a_new_sample():
    fake, reader, mono = _reader()
    reader.read(_targets(fake, [0]))
    mono.now += 0.02
    soon = _targets(fake, [0])
    allocated_before = fake.calls
    reader.read(soon)
    assert soon[0][2]["sm_occupancy_ratio"].value == pytest.approx(0.38)
    assert fake.calls == allocated_before  # no GPM call at all
    reader.close()
