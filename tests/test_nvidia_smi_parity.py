"""The report's share of dcgm-exporter's default set (issue 27): fan speed and the encoder and decoder
utilization from real ``nvidia-smi -q -x`` and ``-q`` captures; N/A (most data-center fans) is unsupported."""

from __future__ import annotations

import pytest

from conftest import shared_fixture
from hetero_exporter import registry


def _first(name: str):
    snap = registry.parser("nvidia-smi")(shared_fixture("nvidia-smi", name).read_text(encoding="utf-8"))
    return snap.devices[0]


@pytest.mark.parametrize("capture, fan", [
    ("q-x_dual-rtx-a5000_v13.xml", 0.30),
    ("q-x_quadro-p400_418.43.xml", 0.34),
    ("nvidia-smi-q_1x-RTX-5090_570.124.06_cuda-12.8.txt", 0.0),
])
def test_fan_speed_is_read_where_the_report_prints_one(capture, fan):
    d = _first(capture)
    r = d.readings["fan_speed_ratio"]
    assert r.quality.status == "ok" and r.value == pytest.approx(fan)
    assert d.readings["engine_decoder_utilization_ratio"].value == 0.0


@pytest.mark.parametrize("capture", ["q_2x-h100-nvl_550.54.14.txt", "q_4x-a100-sxm4-80gb_555.42.02.txt"])
def test_a_fan_the_report_says_na_is_unsupported_never_zero(capture):
    r = _first(capture).readings["fan_speed_ratio"]
    assert r.value is None and r.quality.status == "unsupported"
