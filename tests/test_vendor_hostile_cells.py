"""Hostile output the parsers met in seeded mutations of the captures (issue 37's check that the
refactor kept behaviour): what escaped was no ParseError, or a non-finite reading."""

from __future__ import annotations

import json

import pytest

from conftest import shared_fixture
from hetero_exporter import registry
from hetero_exporter.model import snapshot_to_json
from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.sdk.rocm_family.parse import frequency


def test_a_clock_out_of_range_in_hertz_is_no_reading():
    assert frequency("1e308Mhz") is None and frequency("(900Mhz)") == 900e6
    text = shared_fixture("rocm-smi", "rocm-smi-concise_8x-0x74a2-MI308X-class_partitions.txt").read_text()
    snap = registry.parser("rocm-smi")(text.replace("94Mhz", "1e308Mhz", 1))
    json.loads(snapshot_to_json(snap))  # finite: the model refuses inf


def test_a_link_metric_table_cut_after_its_title_is_a_parse_error():
    text = shared_fixture("amd-smi", "amd-smi-xgmi_link-metric-table_MI300X_rocm-blog_TRUNCATED.txt").read_text()
    head = text.splitlines()[0]
    with pytest.raises(ParseError, match="^amd-smi"):
        registry.parser("amd-smi")(head + "\n \n")
