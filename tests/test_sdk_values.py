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
