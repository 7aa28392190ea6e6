"""The series budget (issue 27), a contract: at most 12 labels on any series; on an 8-GPU H100 node
with GPM on and 16 processes per GPU, at most 110 series per device plus 3 per process; two
scrapes of an unchanged simulated node have identical series sets (no label value churns). The
fleet profile (issue 39) on the same node: at most 32 series per GPU, 9 labels, no process series
(every vendor's budget per profile: tests/test_profiles_fleet.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytest.importorskip("pynvml")

from conftest import ROOT  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml import collector as nvml  # noqa: E402
from hetero_exporter.exposition.collector import build_families  # noqa: E402
from hetero_exporter.exposition.selection import Selection  # noqa: E402
from hetero_exporter.model import NodeSnapshot  # noqa: E402
from hetero_exporter.sdk.contract import CollectorOptions  # noqa: E402
from hetero_exporter.simulate import ManualClock, load  # noqa: E402

MAX_LABELS = 12
PER_DEVICE, PER_PROCESS = 110, 3
PROCESSES_PER_GPU = 16


def _node(tmp_path: Path) -> Path:
    """The default node's H100s (every reading the collector has, 18 NVLinks, GPM values), eight of them."""
    default = yaml.safe_load((ROOT / "hetero_exporter/simulate/scenarios/default.yaml").read_text())
    group = next(g for g in default["devices"] if g["vendor"] == "nvidia")
    group.update(count=8, numa_nodes=[0, 0, 0, 0, 1, 1, 1, 1],
                 processes=[{"pid": 5000 + i, "name": f"rank{i}", "memory": "2GiB"} for i in range(PROCESSES_PER_GPU)])
    path = tmp_path / "h100x8.yaml"
    path.write_text(yaml.safe_dump({"name": "h100x8", "node": "n", "devices": [group]}))
    return path


class _Mono:
    """The GPM pairing clock, moved by hand with the scenario clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory):
    clock, mono = ManualClock(), _Mono()
    clock.set_t(30)
    opts = CollectorOptions(scenario=load(str(_node(tmp_path_factory.mktemp("budget")))), clock=clock,
                            interval_seconds=10.0, settings={"events": False})
    c = nvml.create(opts)
    c._gpm._monotonic, c._gpm._sleep = mono.monotonic, mono.sleep
    out = []
    try:
        for _ in range(3):
            devices = c.collect()
            out.append(NodeSnapshot(node="n", time=clock(), devices=tuple(devices)))
            clock.advance(10)
            mono.now += 10
    finally:
        c.close()
    return out


def _series(snap, selection: Selection = Selection()) -> set:
    return {(s.name, tuple(sorted(s.labels.items()))) for fam in build_families(snap, selection=selection)
            for s in fam.samples}


def test_no_series_has_more_than_twelve_labels(scrapes):
    widest = max(_series(scrapes[-1]), key=lambda s: len(s[1]))
    assert len(widest[1]) <= MAX_LABELS, widest


def test_series_per_device_and_per_process_within_the_budget(scrapes):
    per_device: dict[str, int] = {}
    per_process: dict[tuple, int] = {}
    for name, labels in _series(scrapes[-1]):
        lb = dict(labels)
        if "pid" in lb:
            per_process[(lb["uuid"], lb["pid"])] = per_process.get((lb["uuid"], lb["pid"]), 0) + 1
        elif "uuid" in lb:
            per_device[lb["uuid"]] = per_device.get(lb["uuid"], 0) + 1
    assert len(per_device) == 8 and len(per_process) == 8 * PROCESSES_PER_GPU
    assert max(per_device.values()) <= PER_DEVICE, per_device
    assert max(per_process.values()) <= PER_PROCESS, per_process
    # and GPM is on: the profiling families are among them
    names = {name for name, _ in _series(scrapes[-1])}
    assert {"accelerator_engine_utilization_ratio", "accelerator_compute_occupancy_ratio"} <= names


def test_two_scrapes_of_an_unchanged_node_have_the_same_series(scrapes):
    second, third = _series(scrapes[1]), _series(scrapes[2])
    assert second == third, sorted(second ^ third)[:10]


def test_the_fleet_profile_keeps_32_series_per_gpu_and_no_process_series(scrapes):
    fleet = _series(scrapes[-1], Selection(profile="fleet"))
    per_device: dict[str, int] = {}
    for _, labels in fleet:
        lb = dict(labels)
        assert "pid" not in lb and len(lb) <= 9
        if "uuid" in lb:
            per_device[lb["uuid"]] = per_device.get(lb["uuid"], 0) + 1
    assert len(per_device) == 8 and max(per_device.values()) <= 32, per_device


def test_the_benchmark_prints_one_json_object_per_profile():
    """benchmarks/series_budget.py --json (BENCHMARKS.md: Fleet scale: series profiles)."""
    import json
    import subprocess
    import sys
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/series_budget.py"), "--json", "--vendor", "amd"],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    got = json.loads(out)
    assert set(got["h100x8"]) == {"fleet", "standard", "full"} and set(got["vendors_x8"]) == {"amd"}
    fleet, standard = got["h100x8"]["fleet"], got["h100x8"]["standard"]
    assert fleet["series_per_gpu"] <= 32 < standard["series_per_gpu"] and fleet["labels_max"] <= 9
    assert fleet["series_per_process"] == 0 and got["h100x8_16_processes"]["standard"]["series_per_process"] > 0
    assert fleet["text_bytes"] < standard["text_bytes"] and fleet["text_gzip_bytes"] < fleet["text_bytes"]
    assert fleet["vs_amd_exporter_bytes"] == round(fleet["text_bytes"] / 571_000, 3)
    assert got["baselines"]["dcgm_exporter_default_series_per_gpu"] == 26
