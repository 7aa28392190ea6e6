"""Device profiles: coverage of the required models, normalization of real product strings."""

from __future__ import annotations

import re

import pytest

from conftest import shared_fixtures
from hetero_exporter import profiles

REQUIRED = [
    "H200-SXM5-141GB", "H100-SXM5-80GB", "H100-PCIE-80GB", "H800-SXM5-80GB", "H20-96GB", "A100-SXM4-40GB",
    "A100-SXM4-80GB", "A800-SXM4-80GB", "L40S-48GB", "L4-24GB", "A10-24GB", "T4-16GB", "V100-SXM2-32GB",
    "MI300X", "MI250X", "MI210", "MI100", "Ascend910B1", "Ascend910B2", "Ascend910B3", "Ascend910B4",
    "Ascend910A", "Ascend310P3", "Ascend310", "MLU590", "MLU370-X8", "MLU370-X4", "MLU370-S4", "K100", "Z100",
]


@pytest.mark.parametrize("model", REQUIRED)
def test_required_models_have_cited_profiles(model):
    p = profiles.table().lookup(model)
    assert p is not None, model
    assert p.compute_units > 0 and p.memory_bytes and p.cost_weight > 0
    assert p.source and not p.estimated


def test_reference_device_is_one_compute_unit():
    t = profiles.table()
    assert t.lookup(t.reference_model).compute_units == 1.0


@pytest.mark.parametrize("vendor, raw, model", [
    ("nvidia", "NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),
    ("nvidia", "NVIDIA H100 PCIe", "H100-PCIE-80GB"),
    ("nvidia", "NVIDIA H100 NVL", "H100-NVL-94GB"),
    ("nvidia", "NVIDIA H200", "H200-SXM5-141GB"),
    ("nvidia", "NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
    ("nvidia", "NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),
    ("nvidia", "NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"),
    ("nvidia", "NVIDIA L40S", "L40S-48GB"),
    ("nvidia", "NVIDIA L4", "L4-24GB"),
    ("nvidia", "NVIDIA A10", "A10-24GB"),
    ("nvidia", "NVIDIA A10G", "A10G-24GB"),
    ("nvidia", "Tesla T4", "T4-16GB"),
    ("nvidia", "Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),
    ("nvidia", "NVIDIA GeForce RTX 3090", "RTX-3090"),  # unknown: cleaned, not invented
    ("amd", "AMD Instinct MI300X", "MI300X"),
    ("ascend", "910B3", "Ascend910B3"),
    ("ascend", "310P3", "Ascend310P3"),
    ("ascend", "910A", "Ascend910A"),
    ("ascend", "Ascend910", "Ascend910"),  # A3 nodes print this for 64 GB dies: not a 910A
    ("cambricon", "MLU370-X8", "MLU370-X8"),
])
def test_normalize_model(vendor, raw, model):
    assert profiles.normalize_model(vendor, raw) == model


def test_unknown_model_gets_an_estimated_profile_never_a_crash():
    p = profiles.profile_for("nvidia", "RTX-3090", kind="gpu", memory_total_bytes=24 << 30)
    assert p.estimated and p.model == "RTX-3090" and 0 < p.compute_units < 1
    assert profiles.profile_for("nvidia", "", kind="gpu").estimated


def test_product_names_in_real_nvidia_smi_captures_normalize_to_known_profiles():
    names = set()
    for path in shared_fixtures("nvidia-smi", "q_*.txt"):
        names |= {m.strip() for m in re.findall(r"Product Name\s*:\s*(.+)", path.read_text(errors="replace"))}
    if not names:
        pytest.skip("no nvidia-smi -q captures in ../shared/fixtures")
    datacenter = [n for n in names if re.search(r"\b(H100|A100|L40S)\b", n)]
    assert datacenter
    for n in datacenter:
        model = profiles.normalize_model("nvidia", n)
        assert profiles.table().lookup(model) is not None, (n, model)


def test_each_vendor_brings_its_profiles_in_its_package():
    """The core file holds only the reference; a vendor's devices come from its spec's file."""
    import yaml

    from hetero_exporter import vendors
    core = yaml.safe_load((profiles._DATA).read_text())
    assert core["reference"]["model"] and not core.get("profiles")
    for spec in vendors.specs().values():
        doc = yaml.safe_load(spec.data_path(spec.profiles).read_text())
        models = [p["model"] for p in doc["profiles"]]
        assert models, spec.name
        assert all(profiles.table().lookup(m).vendor == spec.name for m in models), spec.name


def test_a_vendors_table_reads_only_its_own_file_and_answers_as_the_whole_table(monkeypatch):
    """A one-vendor node parses the reference and its vendor's profiles, not every vendor's
    (~0.4 MiB of RSS, BENCHMARKS.md); each vendor's table agrees with the whole table."""
    from hetero_exporter import vendors
    whole = profiles.table()
    read = []
    real_load = profiles._load
    monkeypatch.setattr(profiles, "_load", lambda path: read.append(path.parent.name) or real_load(path))
    monkeypatch.setattr(profiles, "_TABLE", [None, None])
    monkeypatch.setattr(profiles, "_VENDOR_TABLES", {})
    assert profiles.normalize_model("nvidia", "NVIDIA H100 80GB HBM3") == "H100-SXM5-80GB"
    assert not profiles.profile_for("nvidia", "H100-SXM5-80GB").estimated
    assert profiles.lookup("A100-SXM4-80GB") is not None  # FinOps' default reference: vendor-blind, found first
    assert sorted(read) == ["nvidia", "profiles"]
    for e in whole.entries:
        assert profiles.lookup(e.profile.model, e.profile.vendor) == whole.lookup(e.profile.model), e.profile.model
    assert profiles.lookup("no-such-model") is None
    assert set(profiles._VENDOR_TABLES) == set(vendors.specs())
