"""``hetero-exporter parse dcgmi FILE`` (``dcgmi dmon``): DCGM's profiling fields beside ours for
the same GPU, read by column name, the first sample's ``N/A`` not hiding the next one's value; the
real capture of the 2026-12-06 batch, synthetic layouts, errors and fuzz."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import shared_fixture, shared_fixtures
from hetero_exporter import cli, registry
from hetero_exporter.collectors.nvidia.dcgmi import dmon
from hetero_exporter.model import snapshot_to_json
from hetero_exporter.sdk.contract import ParseError

CAPTURE = ("dcgmi-dmon-e-1001-1002-1005_1x-H100-NVL_azure-NC40ads-H100-v5_dcgm-3.3.9_first-sample-NA"
           "_trailing-spaces.txt")
MANY = """\
# Entity  SMACT  SMOCC  TENSO  DRAMA  PCITX      PCIRX      POWER   GTEMP  FBUSD  GPUTL
      ID
    GPU 0  N/A    N/A    N/A    N/A    N/A        N/A        68.51   34     1024   0
    GPU 1  N/A    N/A    N/A    N/A    N/A        N/A        70.02   35     0      0
GPU-I 7    N/A    N/A    N/A    N/A    N/A        N/A        N/A     N/A    N/A    N/A
# Entity  SMACT  SMOCC  TENSO  DRAMA  PCITX      PCIRX      POWER   GTEMP  FBUSD  GPUTL
      ID
    GPU 0  0.512  0.250  0.103  0.731  123456789  987654321  301.20  61     40960  97
    GPU 1  0.000  0.000  0.000  0.000  N/A        0          70.10   35     0      0
"""


def test_the_spec_names_the_parser():
    assert registry.parser("dcgmi") is dmon.parse


def test_the_h100_nvl_capture_the_second_sample_wins_over_the_first_na():
    snap = dmon.parse(shared_fixture("dcgmi", CAPTURE).read_text(encoding="utf-8"))
    (d,) = snap.devices
    assert (d.identity.vendor, d.identity.index, d.identity.uuid) == ("nvidia", 0, "nvidia-unidentified-0")
    assert d.health.state == "unknown" and snap.collectors[0].name == "dcgmi"
    got = {k: (r.value, r.quality.status) for k, r in d.readings.items()}
    assert got == {"graphics_active_ratio": (0.0, "ok"), "engine_compute_utilization_ratio": (0.0, "ok"),
                   "engine_memory_utilization_ratio": (0.0, "ok")}
    q = d.readings["engine_compute_utilization_ratio"].quality
    assert (q.source, q.method, q.window_seconds, q.resolution) == ("dcgmi dmon: SMACT", "sampled", 1.0, 0.001)


@pytest.mark.parametrize("path", shared_fixtures("dcgmi"), ids=lambda p: p.name)
def test_cli_parse_dcgmi_prints_the_model(path, capsys):
    assert cli.main(["parse", "dcgmi", str(path), "--json"]) == cli.EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["devices"] and doc["collectors"][0]["name"] == "dcgmi"


def test_columns_by_name_units_to_base_units_and_entities_other_than_gpus_left_out():
    a, b = dmon.parse(MANY).devices
    assert [d.identity.index for d in (a, b)] == [0, 1]  # GPU-I 7 is a MIG instance, not a GPU
    assert a.value("engine_compute_utilization_ratio") == 0.512 and a.value("sm_occupancy_ratio") == 0.25
    assert a.value("engine_tensor_utilization_ratio") == 0.103 and a.value("engine_memory_utilization_ratio") == 0.731
    assert a.value("pcie_tx_bytes_per_second") == 123456789 and a.value("pcie_rx_bytes_per_second") == 987654321
    assert a.value("power_watts") == 301.2 and a.value("temperature_core_celsius") == 61
    assert a.value("memory_used_bytes") == 40960 << 20 and a.value("utilization_ratio") == pytest.approx(0.97)
    # N/A in every sample: unsupported, never 0
    assert b.readings["pcie_tx_bytes_per_second"].quality.status == "unsupported"
    assert b.value("pcie_rx_bytes_per_second") == 0.0
    json.loads(snapshot_to_json(dmon.parse(MANY)))


def test_text_that_is_no_number_is_an_error_reading():
    (d,) = dmon.parse("#Entity SMACT\nID\nGPU 0 fast\n").devices
    assert d.readings["engine_compute_utilization_ratio"].quality.status == "error"


@pytest.mark.parametrize("text,words", [
    ("", "no '#Entity"),
    ("GPU 0 0.1\n", "no '#Entity"),
    ("#Entity SMACT SMACT\nID\nGPU 0 0.1 0.2\n", "twice"),
    ("#Entity SMACT\nID\nGPU 0 0.1 0.2\n", "2 values under 1"),
    ("#Entity SMACT\nID\nGPU 0 0.1\n#Entity DRAMA\nID\nGPU 0 0.2\n", "one capture per file"),
    ("#Entity SMACT\nID\nsomething 0.1\n", "not an entity row"),
    ("#Entity SMACT\nID\nSwitch 0 0.1\n", "no GPU row"),
])
def test_what_is_no_dmon_output_is_a_one_line_parse_error(text, words):
    with pytest.raises(ParseError, match=words) as e:
        dmon.parse(text)
    assert str(e.value).startswith("dcgmi dmon") and "\n" not in str(e.value)


FUZZ = settings(max_examples=80, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _one(text: str) -> None:
    try:
        snap = dmon.parse(text)
    except ParseError as e:
        assert "\n" not in str(e)
        return
    json.loads(snapshot_to_json(snap))


@FUZZ
@given(st.text(max_size=400))
def test_fuzz_random_text(text):
    _one(text)


@FUZZ
@given(st.integers(0, 5000), st.integers(0, 120), st.text(max_size=30))
def test_fuzz_damaged_output(at, cut, junk):
    at %= len(MANY) + 1
    _one(MANY[:at] + junk + MANY[at + cut:])
