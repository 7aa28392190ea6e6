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
    ("ascend", "Ascend910", "Ascend910C"),  # A3 nodes print this for each 64 GB die of a 910C: not a 910A
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


# issue 40 §4: current hardware. Each profile is picked for the device of its real capture, as the
# collector's parser normalizes the product string it prints.
NEW_FROM_CAPTURES = [
    ("nvidia-smi", "nvidia-smi-default_8x-B200_570.158.01_cuda-12.9_1000W.txt", 8, "B200-180GB"),
    ("amd-smi", "amd-smi-default_1x-MI325X_amd-smi-26.0.0_rocm-7.0.1_no-vbios-line_rocm-docs.txt", 1, "MI325X"),
    ("amd-smi", "amd-smi-static-g0_MI325X-VF_asic-bus-sections_TRUNCATED.txt", 1, "MI325X"),  # "Mi325X VF"
    ("amd-smi", "amd-smi-default_2x-MI355X_amd-smi-26.2.1_rocm-7.2.0_long-vbios-version_rocm-docs.txt", 2, "MI355X"),
    ("amd-smi", "amd-smi-default_8x-MI355X_amd-smi-26.2.0_rocm-7.1.1_SPX-NPS1_gpuagent-processes.txt", 8, "MI355X"),
    ("npu-smi", "npu-smi-info_2x-A3-Ascend910-4-dies_npu-smi-25.2.0_process-on-die1_no-space-before-slash.txt", 4,
     "Ascend910C"),
    ("xpu-smi", "xpu-smi-default_8x-P800-OAM_driver-5.0.21.26_blank-spacer-line.txt", 8, "P800"),
]


@pytest.mark.parametrize("tool, capture, count, model", NEW_FROM_CAPTURES)
def test_each_new_profile_is_picked_for_its_real_captures_devices(tool, capture, count, model):
    from conftest import shared_fixture
    from hetero_exporter import registry

    snap = registry.parser(tool)(shared_fixture(tool, capture).read_text(errors="replace"))
    assert [d.identity.model for d in snap.devices] == [model] * count
    for d in snap.devices:
        p = profiles.profile_for(d.identity.vendor, d.identity.model, kind=d.identity.kind)
        assert not p.estimated and p.model == model and p.vendor == d.identity.vendor
        reported = d.value("memory_total_bytes")
        if reported is not None:  # the datasheet's GB as GiB: the driver reports a little less, never more
            assert 0.9 * p.memory_bytes <= reported <= p.memory_bytes, (reported, p.memory_bytes)


@pytest.mark.parametrize("vendor, raw, model", [
    # no capture prints these product strings: the names the driver gives them (NVIDIA's docs)
    ("nvidia", "NVIDIA GB200", "GB200-186GB"),
    ("nvidia", "NVIDIA B300 SXM6 AC", "B300-SXM6-288GB"),
    ("nvidia", "NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000-96GB"),
    ("nvidia", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX-PRO-6000-96GB"),
    # the 300 W Max-Q is slower: no profile rather than the 600 W one
    ("nvidia", "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
     "RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition"),
    ("nvidia", "NVIDIA GB300", "GB300"),  # not the B300's profile
])
def test_blackwell_product_strings(vendor, raw, model):
    assert profiles.normalize_model(vendor, raw) == model


# (P800's profile predates this batch: no vendor datasheet is published, it stays approximate)
@pytest.mark.parametrize("model", ["B200-180GB", "GB200-186GB", "B300-SXM6-288GB", "RTX-PRO-6000-96GB", "MI325X",
                                   "MI355X", "Ascend910C"])
def test_current_hardware_profiles_are_cited_and_rank_above_their_predecessors(model):
    p = profiles.table().lookup(model)
    assert p is not None and p.source and re.search(r"https?://", p.source), model
    assert p.compute_units > 0 and p.memory_bytes and p.cost_weight > 0 and p.interconnect
    predecessor = {"B200-180GB": "H200-SXM5-141GB", "GB200-186GB": "B200-180GB", "B300-SXM6-288GB": "H200-SXM5-141GB",
                   "MI325X": "MI300X", "MI355X": "MI325X", "Ascend910C": "Ascend910B3"}.get(model)
    if predecessor:
        assert p.compute_units >= profiles.table().lookup(predecessor).compute_units, (model, predecessor)
