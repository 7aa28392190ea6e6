"""Issue 35, item 11: numbers past ``int()``'s 4,300-digit limit in any vendor's output are that
parser's one-line ParseError (or no value), never a ValueError traceback. ``sdk.values.integer``
is the shared reader; the amd-smi process CSV itself is in tests/test_amd_smi.py."""

from __future__ import annotations

import json

import pytest

from hetero_exporter import registry
from hetero_exporter.sdk import values
from hetero_exporter.sdk.contract import ParseError

BIG = "9" * 5000


@pytest.mark.parametrize("text,want", [
    ("0", 0), (" 42 ", 42), ("18446744073709551615", 2**64 - 1), ("", None), (None, None), ("N/A", None),
    ("-1", None), ("+1", None), ("1.0", None), ("1e3", None), ("²", None), ("١٢", None),
    ("1" * 21, None), (BIG, None),
])
def test_integer_reads_ascii_digits_only_and_at_most_20(text, want):
    assert values.integer(text) == want


def test_integer_limit():
    assert values.integer("12345", 4) is None and values.integer("1234", 4) == 1234


def _one_line_or_result(tool: str, text: str):
    try:
        return registry.parser(tool)(text)
    except ParseError as e:
        assert "\n" not in str(e) and str(e).startswith(tool), str(e)
        return None


@pytest.mark.parametrize("tool,text", [
    # rocm-smi --json: a card key with a 5000-digit index (int() raised "Exceeds the limit")
    ("rocm-smi", json.dumps({f"card{BIG}": {"GPU ID": "0x738c"}})),
    ("rocm-smi", json.dumps({"card0": {"GPU ID": "0x738c"}, "system": {f"PID{BIG}": "x, 1, 0, 0, 0"}})),
    ("rocm-smi", json.dumps({"card0": {"GPU ID": "0x738c"},
                             "system": {f"(Topology) Hops between DRM devices 0 and {BIG}": "1"}})),
    # rocm-smi / hy-smi key lines (GPU[n] / HCU[n])
    ("rocm-smi", f"GPU[{BIG}]\t\t: VRAM Total Memory (B): 1\n"),
    ("hy-smi", f"HCU[{BIG}]          : PCI Bus: 0000:05:00.0 --> SN: 2500238601000586\n"),
    # npu-smi info -t proc-mem: a 5000-digit pid
    ("npu-smi", f"        NPU ID                         : 0\n"
                f"        Process id:{BIG}  Process name:power_test        Process memory(MB):5118\n"),
])
def test_a_number_past_int_limits_is_a_parse_error_or_no_value(tool, text):
    result = _one_line_or_result(tool, text)
    if result is not None:  # read without the number: nothing of it may show up
        assert BIG[:30] not in json.dumps(result.to_dict() if hasattr(result, "to_dict") else str(result))
