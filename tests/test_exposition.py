"""Prometheus exposition: golden text, promtool lint, absent-not-zero, HTTP endpoints."""

from __future__ import annotations

import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from conftest import ROOT, require_tool
from hetero_exporter.model import names as N
from hetero_exporter.exposition.collector import SnapshotCollector
from hetero_exporter.exposition.server import MetricsServer, parse_listen
from hetero_exporter.model import (CollectorStatus, DeviceIdentity, DeviceSample, Fault, Health,
                                   NodeSnapshot, ProcessSample, Profile, Quality, Reading)

GOLDEN = ROOT / "fixtures" / "golden" / "exposition_basic.prom"


def golden_snapshot() -> NodeSnapshot:
    """One healthy GPU, one degraded NPU with an unsupported and a stale field, collectors ok and failed."""
    gpu_q = {
        "utilization_ratio": Quality("nvmlDeviceGetUtilizationRates.gpu", "sampled", 1.0, 0.01),
        "memory_used_bytes": Quality("nvmlDeviceGetMemoryInfo.used", "measured", None, 1.0),
        "memory_total_bytes": Quality("nvmlDeviceGetMemoryInfo.total", "measured", None, 1.0),
        "temperature_core_celsius": Quality("nvmlDeviceGetTemperature", "measured", None, 1.0),
        "power_watts": Quality("nvmlDeviceGetPowerUsage", "sampled", 1.0, 0.001, 0.05),
        "energy_joules_total": Quality("nvmlDeviceGetTotalEnergyConsumption", "measured", None, 0.001),
        "clock_compute_hertz": Quality("nvmlDeviceGetClockInfo(SM)", "measured", None, 1e6),
        "ecc_uncorrected_total": Quality("nvmlDeviceGetTotalEccErrors", "measured", None, 1.0),
        "interconnect_nvlink_rx_bytes_total": Quality("nvmlDeviceGetFieldValues(NVLINK_THROUGHPUT_RAW_RX)", "measured"),
    }
    values = {"utilization_ratio": 0.75, "memory_used_bytes": 42949672960, "memory_total_bytes": 85520809984,
              "temperature_core_celsius": 61, "power_watts": 512.5, "energy_joules_total": 1.25e7,
              "clock_compute_hertz": 1.98e9, "ecc_uncorrected_total": 0,
              "interconnect_nvlink_rx_bytes_total": 123456789}
    gpu = DeviceSample(
        identity=DeviceIdentity("nvidia", "gpu", 0, "GPU-aaaa", "H100-SXM5-80GB", "0000:18:00.0", 0, "550.54.15"),
        timestamp=1764400000.0,
        readings={k: Reading(float(v), gpu_q[k]) for k, v in values.items()},
        faults=(Fault("13", "app-error", "restart-app", count=3, last_seen=1764399990.0),),
        processes=(ProcessSample(4242, "GPU-aaaa", 30 << 30, 0.5, "python", namespace="ml", pod="train-0",
                                 container="trainer", attribution="cgroup"),
                   ProcessSample(99, "GPU-aaaa", 1 << 30, None, "host-daemon")),
        profile=Profile("H100-SXM5-80GB", "nvidia", "gpu", 3.17, cost_weight=3.0))
    npu_q = Quality("npu-smi info: AICore(%)", "sampled", 1.0, 0.01)
    npu = DeviceSample(
        identity=DeviceIdentity("ascend", "npu", 3, "ascend-0003", "Ascend910B3", "0000:c1:00.0", None, "23.0.3"),
        timestamp=1764400000.0,
        readings={"utilization_ratio": Reading(0.2, npu_q),
                  "temperature_memory_celsius": Reading(None, Quality("npu-smi info -t temp", status="unsupported")),
                  "power_watts": Reading(180.0, Quality("npu-smi info: Power(W)", status="stale", age_seconds=20))},
        health=Health("degraded", (Fault("80E01801", "hbm-ecc", "none", message="HBM ECC warning"),)),
        profile=Profile("Ascend910B3", "ascend", "npu", 1.003, cost_weight=1.0, approximate=True))
    return NodeSnapshot(
        node="node-a", time=1764400000.0, devices=(gpu, npu),
        collectors=(CollectorStatus("nvml", True, 0.004, last_success=1764400000.0),
                    CollectorStatus("npu_smi", False, 5.0, "no answer within its 5 s deadline", "timeout",
                                    1764399900.0, {"timeout": 2})),
        expected={"nvidia": 1, "ascend": 2})


def render(snap: NodeSnapshot, now: float = 1764400005.0) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, clock=lambda: now))
    return generate_latest(reg).decode()


def test_exposition_matches_golden():
    text = render(golden_snapshot())
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "exposition changed; rerun with UPDATE_GOLDEN=1 and review the diff"


def test_golden_text_passes_promtool_check_metrics():
    promtool = require_tool("promtool")
    proc = subprocess.run([promtool, "check", "metrics"], input=render(golden_snapshot()),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_unsupported_and_stale_values_are_absent_but_their_status_is_shown():
    text = render(golden_snapshot())
    assert 'accelerator_temperature_celsius{sensor="memory",uuid="ascend-0003"' not in text
    assert 'accelerator_power_watts{uuid="ascend-0003"' not in text
    assert ('accelerator_field_status{field="temperature_memory_celsius",status="unsupported",'
            'uuid="ascend-0003",vendor="ascend"} 1.0') in text
    assert 'accelerator_field_status{field="power_watts",status="stale",uuid="ascend-0003",vendor="ascend"} 1.0' in text
    assert "NaN" not in text


def test_series_follow_the_snapshot_so_vanished_processes_vanish():
    snap = golden_snapshot()
    gpu = snap.devices[0]
    from dataclasses import replace
    later = replace(snap, devices=(replace(gpu, processes=gpu.processes[:1]),) + snap.devices[1:])
    assert 'pid="99"' in render(snap)
    assert 'pid="99"' not in render(later)


def test_every_emitted_family_is_declared_in_names():
    text = render(golden_snapshot())
    families = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    declared = {m.name for m in N.ALL}
    assert families <= declared
    # and the health state set has exactly one 1 per device
    ones = [l for l in text.splitlines() if l.startswith("accelerator_health_status{") and l.endswith(" 1.0")]
    assert len(ones) == 2


def test_snapshot_age_is_computed_at_scrape_time():
    snap = golden_snapshot()
    assert "accelerator_snapshot_age_seconds 5.0" in render(snap, now=snap.time + 5)
    assert "accelerator_snapshot_age_seconds 65.0" in render(snap, now=snap.time + 65)


def _samples(text: str, family: str) -> dict[str, float]:
    """``{labels text: value}`` of one family's samples in an exposition."""
    out = {}
    for line in text.splitlines():
        if line.startswith(family + "{"):
            labels, value = line[len(family):].rsplit(" ", 1)
            out[labels] = float(value)
    return out


def test_collector_errors_are_exported_at_zero_for_every_kind_from_the_start():
    """DESIGN: counters whose label sets are known are there before the first failure."""
    from hetero_exporter.exposition.collector import COLLECTOR_ERROR_KINDS
    errors = _samples(render(golden_snapshot()), N.COLLECTOR_ERRORS.name)
    expected = {f'{{collector="{c}",kind="{k}"}}': (2.0 if (c, k) == ("npu_smi", "timeout") else 0.0)
                for c in ("nvml", "npu_smi") for k in COLLECTOR_ERROR_KINDS}
    assert errors == expected  # the healthy nvml collector too, at 0 for each kind


def test_the_zeroed_error_kinds_are_every_kind_the_sampler_gives():
    from hetero_exporter.exposition.collector import COLLECTOR_ERROR_KINDS
    from hetero_exporter.sampling import classify
    from hetero_exporter.sdk.contract import ParseError, Unavailable
    kinds = {classify(e) for e in (Unavailable("no lib"), ParseError("tool", "bad"), TimeoutError(),
                                   RuntimeError("boom"), KeyError("k"))} | {"late", "busy"}  # the sampler's own
    assert kinds == set(COLLECTOR_ERROR_KINDS)
    assert all(k in N.COLLECTOR_ERRORS.help for k in kinds)


def test_health_actions_are_exported_at_zero_for_every_action_and_result():
    from hetero_exporter.health.act.metrics import ACTIONS, RESULTS, HealthMetrics
    assert set(ACTIONS) == {"taint", "untaint", "condition", "event", "cordon", "device-taint", "pod-condition"}
    metrics = HealthMetrics()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(metrics)
    fresh = _samples(generate_latest(reg).decode(), N.HEALTH_ACTIONS.name)
    assert fresh == {f'{{action="{a}",result="{r}"}}': 0.0 for a in ACTIONS for r in RESULTS}
    metrics.action("taint", "ok")
    metrics.action("uncordon", "ok")  # not a known action: appears once counted
    later = _samples(generate_latest(reg).decode(), N.HEALTH_ACTIONS.name)
    assert later['{action="taint",result="ok"}'] == 1.0 and later['{action="uncordon",result="ok"}'] == 1.0
    assert later['{action="taint",result="error"}'] == 0.0 and len(later) == len(fresh) + 1
    assert metrics.actions() == {("taint", "ok"): 1, ("uncordon", "ok"): 1}  # the counts themselves
    # the health loop's gauges stay absent until they know something (absent, never a made-up 0)
    assert N.HEALTH_KUBERNETES_UP.name not in generate_latest(reg).decode()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_http_endpoints_before_and_after_the_first_snapshot():
    current = {"snap": None}
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: current["snap"]))
    srv = MetricsServer("127.0.0.1:0", reg, lambda: current["snap"]).start()
    base = "http://%s:%d" % srv.address
    try:
        assert _get(base + "/healthz")[0] == 200
        assert _get(base + "/readyz")[0] == 503
        assert _get(base + "/metrics") == (200, "")
        current["snap"] = golden_snapshot()
        assert _get(base + "/readyz")[0] == 200
        code, body = _get(base + "/metrics")
        assert code == 200 and "accelerator_device_info{" in body
        code, body = _get(base + "/snapshot")
        assert code == 200 and '"schema": 1' in body
        assert _get(base + "/nope")[0] == 404
    finally:
        srv.stop()


@pytest.mark.parametrize("text, expected", [
    ("0.0.0.0:9400", ("0.0.0.0", 9400)), (":9400", ("0.0.0.0", 9400)),
    ("[::1]:80", ("::1", 80)), ("127.0.0.1:0", ("127.0.0.1", 0))])
def test_parse_listen(text, expected):
    assert parse_listen(text) == expected


@pytest.mark.parametrize("bad", ["9400", "host:", "host:http", "h:70000"])
def test_parse_listen_rejects_bad_addresses(bad):
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_listen(bad)
