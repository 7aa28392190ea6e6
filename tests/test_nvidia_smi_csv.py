"""``parse nvidia-smi`` on ``--query-gpu`` and ``--query-compute-apps`` CSV: captures, fuzz."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hetero_exporter.model import fields as F
from hetero_exporter.collectors.nvidia.nvidia_smi.parse import (CSV_TOOL, parse, parse_apps,
                                                                parse_csv_devices)
from hetero_exporter.sdk.contract import ParseError
from tests.conftest import shared_fixture, shared_fixtures

MIB = 1 << 20
GPU = {  # capture -> (bus id, FB total MiB, FB used MiB)
    "query-gpu-csv_all-fields_h100-80gb-hbm3_590.48.01_load.csv": ("0000:00:09.0", 81559, 19818),
    "query-gpu-csv_all-fields_h100-mig_590.48.01_idle.csv": ("0000:00:09.0", 81559, 59),
    "query-gpu-csv_all-fields_l40s_595.80_idle.csv": ("0000:01:00.0", 46068, 0),
    "query-gpu-csv_all-fields_rtx2080super_windows_591.86_idle.csv": ("0000:0c:00.0", 8192, 702),
    "query-gpu-csv_all-fields_rtx4080super_595.71.05_load.csv": ("0000:01:00.0", 16376, 1474),
}
APPS = {  # capture -> (bus id, pids, memory MiB of each, None where [N/A])
    "query-compute-apps-csv_h100-mig_590.48.01_load.csv": ("0000:00:09.0", [21180, 21181, 21198], [2296, 1272, 7484]),
    "query-compute-apps-csv_rtx2080super_windows_591.86_load.csv": ("0000:0c:00.0", 12, None),
}


@pytest.mark.parametrize("name", sorted(GPU))
def test_every_query_gpu_capture_parses(name):
    snap = parse(shared_fixture("nvidia-smi", name).read_text())
    bus, total, used = GPU[name]
    (d,) = snap.devices
    assert d.identity.pci_address == bus and d.identity.uuid.startswith("GPU-")
    assert d.readings[F.MEMORY_TOTAL].value == total * MIB
    assert d.readings[F.MEMORY_USED].value == used * MIB
    assert d.readings[F.MEMORY_TOTAL].quality.source == f"{CSV_TOOL}: memory.total"
    assert d.readings[F.TEMP_CORE].quality.status == "ok"


def test_all_csv_captures_are_listed():
    assert {p.name for p in shared_fixtures("nvidia-smi", "query-*.csv")} <= set(GPU) | set(APPS)


@pytest.mark.parametrize("name", sorted(APPS))
def test_every_compute_apps_capture_parses(name):
    snap = parse(shared_fixture("nvidia-smi", name).read_text())
    bus, pids, mem = APPS[name]
    (d,) = snap.devices
    assert d.identity.pci_address == bus
    procs = d.processes
    if isinstance(pids, int):
        assert len(procs) == pids and all(p.memory_bytes is None for p in procs)  # [N/A] on WDDM
    else:
        assert [p.pid for p in procs] == pids
        assert [p.memory_bytes for p in procs] == [m * MIB for m in mem]
    assert all(p.device_uuid == d.identity.uuid for p in procs)


def test_mig_mode_utilization_is_unsupported_not_zero():
    snap = parse(shared_fixture("nvidia-smi", "query-gpu-csv_all-fields_h100-mig_590.48.01_idle.csv").read_text())
    assert snap.devices[0].readings[F.UTILIZATION].quality.status == "unsupported"


def test_a_short_query_with_nounits_and_two_gpus():
    text = ("index, name, pci.bus_id, uuid, memory.total [MiB], memory.used [MiB], utilization.gpu [%], "
            "temperature.gpu, power.draw [W]\n"
            "0, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, GPU-1, 81920, 10, 55, 33, 61.5\n"
            "1, NVIDIA A100-SXM4-80GB, 00000000:0F:00.0, GPU-2, 81920, [N/A], [Not Supported], 34, 60.1\n")
    devices, _ = parse_csv_devices(text)
    assert [d.identity.index for d in devices] == [0, 1]
    a, b = devices
    assert a.readings[F.MEMORY_TOTAL].value == 81920 * MIB and a.readings[F.UTILIZATION].value == 0.55
    assert a.readings[F.TEMP_CORE].value == 33 and a.readings[F.POWER].value == 61.5
    assert b.readings[F.MEMORY_USED].quality.status == "unsupported"
    assert b.readings[F.UTILIZATION].quality.status == "unsupported"
    assert b.identity.pci_address == "0000:0f:00.0"


def test_a_bad_cell_is_an_error_reading():
    devices, _ = parse_csv_devices("uuid, memory.total [MiB]\nGPU-1, lots MiB\n")
    assert devices[0].readings[F.MEMORY_TOTAL].quality.status == "error"


@pytest.mark.parametrize("text", ["name, count\n", "uuid, memory.total [MiB]\nGPU-1\n",
                                  "pid, gpu_uuid\nx, GPU-1\n", "a,b,c\n1,2,3\n"])
def test_bad_csv_is_a_one_line_parse_error(text):
    with pytest.raises(ParseError) as e:
        parse(text)
    assert str(e.value).startswith("nvidia-smi") and "\n" not in str(e.value)


def test_apps_parser_directly():
    procs = parse_apps("pid, process_name, gpu_bus_id, used_gpu_memory [MiB]\n7, a, 00000000:01:00.0, 5 MiB\n")
    assert procs[0].device_uuid == "nvidia-pci-0000:01:00.0" and procs[0].memory_bytes == 5 * MIB


FUZZ = settings(max_examples=60, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
_SEEDS = [p.read_text() for p in shared_fixtures("nvidia-smi", "query-*.csv")] or ["uuid, name\nGPU-1, x\n"]


@FUZZ
@given(st.sampled_from(_SEEDS), st.integers(0, 10_000), st.integers(0, 200), st.text(max_size=30))
def test_mutated_csv_parses_or_raises_parse_error(seed, at, cut, junk):
    at = at % (len(seed) + 1)
    try:
        parse(seed[:at] + junk + seed[at + cut:])
    except ParseError:
        pass
