"""``parse nvidia-smi`` on the text report (``nvidia-smi -q``): real captures, structure, fuzz."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hetero_exporter.model import fields as F
from hetero_exporter.collectors.nvidia.nvidia_smi.parse import TEXT_TOOL, parse, parse_text_devices
from hetero_exporter.sdk.contract import ParseError
from tests.conftest import shared_fixture, shared_fixtures

MIB = 1 << 20
# capture -> (bus ids of the GPUs, FB total MiB of each GPU, MIG instances)
EXPECTED = {
    "q_1x-l40s_550.127.05.txt": (["0000:a1:00.0"], [46068], 0),
    "q_2x-h100-nvl_550.54.14.txt": (["0000:ad:00.0", "0000:ae:00.0"], [95830, 95830], 0),
    "q_4x-a100-sxm4-80gb_555.42.02.txt": (["0000:68:00.0", "0000:9e:00.0", "0000:c2:00.0", "0000:d4:00.0"],
                                          [81920] * 4, 0),
    "q_h100-mig_590.48.01_idle.txt": (["0000:00:09.0"], [81559], 4),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_text_capture_parses(name):
    snap = parse(shared_fixture("nvidia-smi", name).read_text())
    buses, totals, migs = EXPECTED[name]
    gpus = [d for d in snap.devices if d.identity.parent is None]
    assert [d.identity.pci_address for d in gpus] == buses
    assert [d.readings[F.MEMORY_TOTAL].value / MIB for d in gpus] == totals
    assert len(snap.devices) - len(gpus) == migs
    for d in gpus:
        assert d.identity.uuid.startswith("GPU-") and d.identity.driver_version
        assert d.readings[F.MEMORY_TOTAL].quality.source.startswith(TEXT_TOOL + ": ")
        assert d.processes == ()


def test_all_text_captures_are_listed():
    assert {p.name for p in shared_fixtures("nvidia-smi", "q_*.txt")} <= set(EXPECTED)


def test_mig_instances_and_readings():
    snap = parse(shared_fixture("nvidia-smi", "q_h100-mig_590.48.01_idle.txt").read_text())
    gpu, *migs = snap.devices
    assert [m.readings[F.MEMORY_TOTAL].value / MIB for m in migs] == [40448, 20096, 9984, 9984]
    assert all(m.identity.parent == gpu.identity.uuid for m in migs)
    assert gpu.readings[F.UTILIZATION].quality.status == "unsupported"  # "N/A" in MIG mode
    assert gpu.readings[F.POWER].value == pytest.approx(71.27)
    assert gpu.readings[F.TEMP_CORE].value == 42
    assert gpu.identity.runtime_version == "13.1"


def test_remap_pending_is_a_fault():
    snap = parse(shared_fixture("nvidia-smi", "q_4x-a100-sxm4-80gb_555.42.02.txt").read_text())
    assert snap.devices[1].health.state == "degraded"
    assert [f.code for f in snap.devices[1].faults] == ["remap-pending"]
    assert snap.devices[0].health.state == "ok"


SYNTHETIC = """
==============NVSMI LOG==============

Timestamp                           : Mon Jan  6 10:00:00 2025
Driver Version                      : 470.82.01
CUDA Version                        : 11.4

Attached GPUs                       : 2
GPU 00000000:3B:00.0
    Product Name                    : Tesla V100-SXM2-32GB
    Serial Number                   : 0323618000001
    GPU UUID                        : GPU-aaaaaaaa-0000-0000-0000-000000000001
    FB Memory Usage
        Total                       : 32510 MiB
        Used                        : 40000 MiB
        Free                        : 0 MiB
    Clocks Throttle Reasons
        Idle                        : Not Active
        HW Slowdown                 : Active
            HW Thermal Slowdown     : Active
    Processes
        GPU instance ID             : N/A
        Compute instance ID         : N/A
        Process ID                  : 4242
            Type                    : C
            Name                    : python train.py
            Used GPU Memory         : 1024 MiB
        GPU instance ID             : N/A
        Compute instance ID         : N/A
        Process ID                  : 4343
            Type                    : C
            Name                    : -
            Used GPU Memory         : Not available in WDDM driver model

GPU 00000000:86:00.0
    Product Name                    : Tesla V100-SXM2-32GB
    GPU UUID                        : GPU-aaaaaaaa-0000-0000-0000-000000000002
    FB Memory Usage
        Total                       : 32510 MiB
        Used                        : 0 MiB
    Processes                       : None
"""


def test_processes_and_nested_throttle_reasons():
    snap = parse(SYNTHETIC)
    a, b = snap.devices
    assert [(p.pid, p.name, p.memory_bytes) for p in a.processes] == [
        (4242, "python train.py", 1024 * MIB), (4343, "-", None)]
    assert all(p.device_uuid == a.identity.uuid for p in a.processes)
    assert b.processes == () and b.processes_reported
    assert a.readings["clock_throttle_hw_thermal"].value == 1.0  # nested under HW Slowdown
    assert a.identity.serial == "0323618000001" and a.identity.pci_address == "0000:3b:00.0"


def test_tabs_and_narrow_key_column_parse_alike():
    narrow = "\n".join(" ".join(line.split("  ")).replace(" :", ":") if ":" in line else line
                       for line in SYNTHETIC.splitlines())
    got = parse(narrow)
    assert [d.identity.uuid for d in got.devices] == [d.identity.uuid for d in parse(SYNTHETIC).devices]
    tabbed = SYNTHETIC.replace("    ", "\t")
    assert [len(d.processes) for d in parse(tabbed).devices] == [2, 0]


@pytest.mark.parametrize("text", ["", "hello", "GPU 00000000:3B:00.0\n    %%%% garbage %%%%\n",
                                  "==============NVSMI LOG==============\n\x00\x01\n"])
def test_garbage_is_a_one_line_parse_error(text):
    with pytest.raises(ParseError) as e:
        parse(text)
    assert str(e.value).startswith("nvidia-smi") and "\n" not in str(e.value)


FUZZ = settings(max_examples=60, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
_SEEDS = [SYNTHETIC] + [p.read_text() for p in shared_fixtures("nvidia-smi", "q_*.txt")]


@FUZZ
@given(st.sampled_from(_SEEDS), st.integers(0, 40_000), st.integers(0, 400), st.text(max_size=40))
def test_mutated_text_reports_parse_or_raise_parse_error(seed, at, cut, junk):
    at = at % (len(seed) + 1)
    text = seed[:at] + junk + seed[at + cut:]
    try:
        devices, _ = parse_text_devices(text)
    except ParseError:
        return
    for d in devices:
        for r in d.readings.values():
            assert r.value is None or r.value == r.value  # finite or absent, never NaN


@FUZZ
@given(st.text(max_size=300))
def test_random_text_parses_or_raises_parse_error(text):
    try:
        parse(text)
    except ParseError:
        pass
