"""VendorSpec.missing(): the spec rules that lived only in tests (issue 37): each tool's driver
library folders, and a source or a reason for every field of the catalogue."""

from __future__ import annotations

import dataclasses

import pytest

from hetero_exporter import vendors
from hetero_exporter.model.spec import ToolSpec


@pytest.fixture
def spec():
    return vendors.spec("cambricon")


def test_every_built_in_spec_is_complete():
    assert {name: s.missing() for name, s in vendors.specs().items()} == {name: [] for name in vendors.specs()}


def test_a_tool_without_its_driver_libraries_is_missing_them(spec):
    bare = dataclasses.replace(spec, tools=(dataclasses.replace(spec.tools[0], library_dirs=()),))
    assert bare.missing() == ["tools[cnmon].library_dirs"]
    # unless a container toolkit mounts it with its libraries, as its why_missing says (nvidia-smi)
    mounted = ToolSpec("cnmon", why_missing="not mounted (the vendor's container toolkit mounts it)")
    assert dataclasses.replace(spec, tools=(mounted,)).missing() == []
    assert vendors.spec("nvidia").tools[0].library_dirs == () and vendors.spec("nvidia").missing() == []


def test_every_field_needs_a_source_or_a_reason(spec):
    assert dataclasses.replace(spec, unsupported={}).missing() == ['unsupported["*"]']
    typo = dataclasses.replace(spec, field_sources={"utilisation_ratio": "x"},
                               unsupported={**spec.unsupported, "power_watt": "y"})
    assert typo.missing() == ["field_sources['utilisation_ratio'] (not a catalogue field)",
                              "unsupported['power_watt'] (not a catalogue field)"]
