"""sdk.values and sdk.pciaddr: the NA spellings, numbers with units, PCI addresses of every vendor."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from hetero_exporter.sdk import pciaddr, values

MIB = 1 << 20


@pytest.mark.parametrize("text", ["N/A", "NA", "-", "--", "[N/A]", "Not Supported", "[Not Supported]", " n/a ", "", None])
def test_na_spellings_are_absent(text):
    assert values.is_na(text)
    assert values.number(text) is None
    assert values.quantity(text) is None


@pytest.mark.parametrize("text,expected", [
    ("81559 MiB", 81559 * MIB), ("65536 MB", 65536 * MIB), ("300.00 W", 300.0), ("1500 mW", 1.5),
    ("1980 MHz", 1.98e9), ("45 C", 45.0), ("12 %", 0.12), ("7", 7.0), ("1.5 GiB", 1.5 * 1024 * MIB),
])
def test_quantities_in_base_units(text, expected):
    assert values.quantity(text) == pytest.approx(expected)


def test_default_unit_applies_to_bare_numbers():
    assert values.quantity("512", default_unit="MiB") == 512 * MIB


@pytest.mark.parametrize("text", ["abc", "12 parsecs", "inf W", "nan", "MiB 12"])
def test_unreadable_quantities_raise_value_error_naming_the_text(text):
    with pytest.raises(ValueError) as e:
        values.quantity(text)
    assert text[:10] in str(e.value)


def test_ratio_of_a_percentage():
    assert values.ratio("45 %") == pytest.approx(0.45)
    assert values.ratio("N/A") is None


@given(st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_fuzz_number_and_quantity_give_a_value_none_or_value_error(text):
    for fn in (values.number, values.quantity, values.ratio):
        try:
            v = fn(text)
        except ValueError:
            continue
        assert v is None or v == v  # never NaN


@pytest.mark.parametrize("text,expected", [
    ("00000000:3B:00.0", "0000:3b:00.0"),  # nvidia-smi: 8-digit domain, upper case
    ("0000:3b:00.0", "0000:3b:00.0"),
    ("3b:00.0", "0000:3b:00.0"),
    ("PCI:0000:91:00", "0000:91:00.0"),  # kernel log: no function
    (" 0001:C1:00.1 ", "0001:c1:00.1"),
])
def test_pci_addresses_normalize_to_one_form(text, expected):
    assert pciaddr.normalize(text) == expected


@pytest.mark.parametrize("text", ["N/A", "", None, "3b:00", "zz:00.0", "0000:3b:00.9", "GPU-1234"])
def test_not_a_pci_address(text):
    assert pciaddr.normalize(text, default_function=None) is None


def test_bus_key_ignores_the_function():
    assert pciaddr.bus_key("PCI:0000:91:00") == pciaddr.bus_key("0000:91:00.0") == "0000:91:00"


@given(st.text(max_size=30))
@settings(max_examples=300, deadline=None)
def test_fuzz_pci_normalize_never_raises(text):
    out = pciaddr.normalize(text)
    assert out is None or (len(out) == 12 and out == out.lower())


# --------------------------------------------------------------------------- the checked readers
# (issue 37: what the vendors' private _num/_int/_qty/_pair/_bus/_text helpers did, once)

from hetero_exporter.sdk.contract import ParseError  # noqa: E402

CELLS = values.Cells("tool")


@pytest.mark.parametrize("text, unit, expected", [
    ("81559 MiB", "MiB", 81559 * MIB), ("512", "MiB", 512 * MIB), ("45 %", "%", 0.45), ("45%", "%", 0.45),
    ("N/A", "W", None), ("N/A %", "%", None), ("%", "%", None), (None, "W", None), ("300W", "W", 300.0),
])
def test_checked_quantity(text, unit, expected):
    assert CELLS.quantity(text, unit, "Field", 3) == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize("text, msg", [("abc", "Field: expected a number"), ("1e308", "Field: '1e308' is out of range"),
                                       ("5 parsecs", "unknown unit")])
def test_checked_quantity_refuses_with_the_tool_field_and_line(text, msg):
    with pytest.raises(ParseError, match=msg) as e:
        CELLS.quantity(text, "MiB", "Field", 3)
    assert str(e.value).startswith("tool: ") and str(e.value).endswith("(line 3)")


@pytest.mark.parametrize("text, expected", [
    ("116MiB / 32768MiB", (116 * MIB, 32768 * MIB)), ("N/A / 350W", (None, 350.0)), ("93W / N/A", (93.0, None)),
    ("N/A / N/A", (None, None)), ("[N/A] / 5W", (None, 5.0)), ("N/A", (None, None)), ("- / 3", (None, 3.0)),
])
def test_checked_pair(text, expected):
    unit = "MiB" if "MiB" in text else "W"
    assert CELLS.pair(text, unit, "Pair") == tuple(None if v is None else pytest.approx(v) for v in expected)


def test_checked_pair_shares_the_unit_printed_after_the_total():
    assert CELLS.pair("810 / 65536 MiB", "MB", "Memory", shared_unit=True) == (810 * MIB, 65536 * MIB)
    assert CELLS.pair("810 / 64 GiB", "MB", "Memory", shared_unit=True) == (810 * 1024 * MIB, 64 * 1024 * MIB)
    assert CELLS.pair("1 GiB / 2 GiB", "MB", "Memory", shared_unit=True) == (1024 * MIB, 2048 * MIB)
    assert values.unit_after_number("32768 MB") == "MB" and values.unit_after_number("N/A") == ""


@pytest.mark.parametrize("text", ["1 / 2 / 3", "12", "a / b"])
def test_checked_pair_refuses(text):
    with pytest.raises(ParseError, match="Pair"):
        CELLS.pair(text, "W", "Pair", 9)


def test_checked_index_integer_and_pci():
    assert CELLS.index(" 7 ", "GPU") == 7 and CELLS.integer("N/A", "count") is None
    assert CELLS.integer("12345678901", "count") == 12345678901
    for bad in ("-1", "1.5", "²", "1234567", "N/A", None):
        with pytest.raises(ParseError, match="GPU: expected a whole number"):
            CELLS.index(bad, "GPU", 2)
    assert CELLS.pci("00000000:3B:00.0", "Bus") == "0000:3b:00.0" and CELLS.pci("N/A", "Bus") is None
    assert CELLS.pci("3b:00", "Bus") == "0000:3b:00.0"
    with pytest.raises(ParseError, match="Bus: not a PCI address: '3b:00'"):
        CELLS.pci("3b:00", "Bus", default_function=None)


def test_present_and_decoded():
    assert values.present("  Card A ") == "Card A" and values.present("N/A") is None and values.present(None) is None
    assert values.decoded(b"GPU \xff") == "GPU \ufffd" and values.decoded(7) == "7"
    assert values.present(b" MI300X ") == "MI300X" and values.present(b"N/A") is None  # a binding's bytes


def test_checked_number_is_a_plain_number():
    assert CELLS.number(" 12 ", "n") == 12.0 and CELLS.number("-3.5e1", "n") == -35.0 and CELLS.number("NA", "n") is None
    for bad, msg in (("12 %", "expected a number or NA"), ("1_0", "expected a number"), ("1e999", "not a finite")):
        with pytest.raises(ParseError, match=f"n: {msg}"):
            CELLS.number(bad, "n", 4)


def test_the_celsius_sign_is_a_unit():
    assert values.quantity("39℃") == values.quantity("39 °C") == values.quantity("39C") == 39.0


@given(st.text(max_size=40), st.sampled_from(["", "MiB", "W", "%", "C", "MHz"]))
@settings(max_examples=300, deadline=None)
def test_fuzz_the_checked_readers_give_a_value_none_or_a_parse_error(text, unit):
    for read in (lambda: CELLS.quantity(text, unit, "f"), lambda: CELLS.pair(text, unit, "f"), lambda: CELLS.number(text, "f"),
                 lambda: CELLS.pair(text, unit, "f", shared_unit=True), lambda: CELLS.integer(text, "f"),
                 lambda: CELLS.pci(text, "f")):
        try:
            got = read()
        except ParseError as e:
            assert str(e).startswith("tool: f: ")
            continue
        for v in got if isinstance(got, tuple) else (got,):
            assert v is None or v == v
