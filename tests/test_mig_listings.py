"""``nvidia-smi mig -lgip`` / ``-lgipp`` / ``-lgi`` / ``-lci``: the Blackwell captures of the
2026-12-06 batch read as the GPU's partition inventory (the values read off each capture's
text), their structure on synthetic text, errors as one-line ParseErrors, and fuzz."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import shared_fixture, shared_fixtures
from hetero_exporter.collectors.nvidia.nvidia_smi import mig_listing as M
from hetero_exporter.collectors.nvidia.nvidia_smi.collector import layout, parse
from hetero_exporter.sdk.contract import ParseError

GIB = 1 << 30
RTX = "1x-RTX-PRO-6000-Blackwell-Server_610.43.02"
LGIP = f"nvidia-smi-mig-lgip_{RTX}_gfx-me-profiles.txt"
LGIPP = f"nvidia-smi-mig-lgipp_{RTX}.txt"
LGI = f"nvidia-smi-mig-lgi_{RTX}_4x-1g.24gb.txt"
LCI = f"nvidia-smi-mig-lci_{RTX}_4x-1g.24gb.txt"


def _read(name: str) -> M.MigInventory:
    return parse(shared_fixture("nvidia-smi", name).read_text(encoding="utf-8"))


def test_lgip_profiles_with_blackwell_names_and_their_engines():
    inv = _read(LGIP)
    assert inv.listings == ("-lgip",)
    got = [(p.name, p.profile_id, p.instances_free, p.instances_total) for p in inv.profiles]
    assert got == [("1g.24gb", 14, 4, 4), ("1g.24gb+me", 21, 1, 1), ("1g.24gb+gfx", 47, 4, 4),
                   ("1g.24gb+me.all", 65, 1, 1), ("1g.24gb-me", 67, 4, 4), ("2g.48gb", 5, 2, 2),
                   ("2g.48gb+gfx", 35, 2, 2), ("2g.48gb+me.all", 64, 1, 1), ("2g.48gb-me", 66, 2, 2),
                   ("4g.96gb", 0, 1, 1), ("4g.96gb+gfx", 32, 1, 1)]
    by = {p.name: p for p in inv.profiles}
    assert by["1g.24gb"].memory_bytes == round(23.62 * GIB) and by["4g.96gb"].memory_bytes == round(95.12 * GIB)
    assert all(p.p2p is False for p in inv.profiles)
    # SM DEC ENC on the first row, CE JPEG OFA on the second
    assert by["1g.24gb"].resources == {"sm": 46, "dec": 1, "enc": 1, "ce": 1, "jpeg": 1, "ofa": 0}
    assert by["1g.24gb+me.all"].resources == {"sm": 46, "dec": 4, "enc": 4, "ce": 1, "jpeg": 4, "ofa": 1}
    assert by["2g.48gb-me"].resources == {"sm": 94, "dec": 0, "enc": 0, "ce": 2, "jpeg": 0, "ofa": 0}
    assert by["4g.96gb+gfx"].resources["sm"] == 188


def test_lgipp_is_a_twelve_slot_grid():
    inv = _read(LGIPP)
    got = {p.profile_id: (p.starts, p.size) for p in inv.placements}
    assert got == {14: ((0, 3, 6, 9), 3), 21: ((0, 3, 6, 9), 3), 47: ((0, 3, 6, 9), 3), 65: ((0, 3, 6, 9), 3),
                   67: ((0, 3, 6, 9), 3), 5: ((0, 6), 6), 35: ((0, 6), 6), 64: ((0, 6), 6), 66: ((0, 6), 6),
                   0: ((0,), 12), 32: ((0,), 12)}
    assert {max(p.starts) + p.size for p in inv.placements} == {12}
    assert all(p.gpu == 0 and p.gpu_instance is None for p in inv.placements)


def test_lgi_and_lci_list_the_four_instances():
    gis = _read(LGI).gpu_instances
    assert [(i.name, i.profile_id, i.gpu_instance, i.start, i.size) for i in gis] == \
        [("1g.24gb", 14, 3, 0, 3), ("1g.24gb", 14, 4, 3, 3), ("1g.24gb", 14, 5, 6, 3), ("1g.24gb", 14, 6, 9, 3)]
    cis = _read(LCI).compute_instances
    assert [(i.gpu_instance, i.compute_instance, i.profile_id, i.start, i.size) for i in cis] == \
        [(g, 0, 0, 0, 1) for g in (3, 4, 5, 6)]


def test_the_four_listings_merge_into_one_consistent_inventory():
    inv = M.merge([_read(n) for n in (LGIP, LGIPP, LGI, LCI)])
    assert inv.command == "nvidia-smi mig -lgip nvidia-smi mig -lgipp nvidia-smi mig -lgi nvidia-smi mig -lci"
    assert inv.gpus() == [0]
    profiles = {p.profile_id for p in inv.profiles}
    assert {p.profile_id for p in inv.placements} == profiles
    assert {i.profile_id for i in inv.gpu_instances} <= profiles
    # each GPU instance starts where -lgipp allows its profile
    allowed = {p.profile_id: set(p.starts) for p in inv.placements}
    assert all(i.start in allowed[i.profile_id] for i in inv.gpu_instances)
    assert {i.gpu_instance for i in inv.compute_instances} == {i.gpu_instance for i in inv.gpu_instances}
    json.dumps(inv.to_dict())


@pytest.mark.parametrize("path", shared_fixtures("nvidia-smi", "nvidia-smi-mig-*"), ids=lambda p: p.name)
def test_every_mig_capture_is_told_apart_from_the_other_layouts(path):
    assert layout(path.read_text(encoding="utf-8")) == "mig"


# --------------------------------------------------------------------------- synthetic

# the layout of NVIDIA's MIG user guide (A100 / H100): every value in its column, re-spaced
HOPPER_LGIP = """\
+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
|   0  MIG 1g.10gb       19     7/7        9.50       No     16     1     0   |
|                                                             1     1     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.10gb+me    20     1/1        9.50       No     16     1     0   |
|                                                             1     1     1   |
+-----------------------------------------------------------------------------+
|   1  MIG 7g.80gb        0     0/1        79.00      No    132     7     0   |
|                                                             8     7     1   |
+-----------------------------------------------------------------------------+
"""
LCIPP = "GPU  0 GI  1 Profile ID  0 Placements: {0,1,2,3,4,5,6}:1\nGPU  0 GI  1 Profile ID  4 Placement : {0}:7\n"


def test_two_gpus_of_the_guide_layout():
    inv = M.parse(HOPPER_LGIP)
    assert [(p.gpu, p.name, p.instances_free, p.resources["ofa"]) for p in inv.profiles] == \
        [(0, "1g.10gb", 7, 0), (0, "1g.10gb+me", 1, 1), (1, "7g.80gb", 0, 1)]
    assert inv.gpus() == [0, 1]
    squeezed = "\n".join(" ".join(line.split()) for line in HOPPER_LGIP.splitlines())  # spacing is not read
    assert M.parse(squeezed).profiles == inv.profiles


def test_compute_instance_placements_within_a_gpu_instance():
    inv = M.parse(LCIPP)
    assert inv.listings == ("-lcipp",)
    assert [(p.gpu_instance, p.profile_id, p.starts, p.size) for p in inv.placements] == \
        [(1, 0, (0, 1, 2, 3, 4, 5, 6), 1), (1, 4, (0,), 7)]


@pytest.mark.parametrize("text,words", [
    ("No MIG-enabled devices found.\n", "printed a message"),
    ("+----+\n| Compute instance profiles: |\n+----+\n", "-lcip"),
    (HOPPER_LGIP.replace("  9.50       No     16", "  9.50  extra  No     16", 1), "words for"),
    (HOPPER_LGIP.replace("7/7", "7of7"), "free/total"),
    (LCIPP + "GPU 0 Profile ID 3 Placements: {}:1\n", "no placement"),
    (LCIPP + "GPU 0 something else\n", "Placements"),
])
def test_what_is_no_listing_is_a_one_line_parse_error(text, words):
    with pytest.raises(ParseError, match=words) as e:
        M.parse(text)
    assert str(e.value).startswith("nvidia-smi mig") and "\n" not in str(e.value)


# --------------------------------------------------------------------------- fuzz

FUZZ = settings(max_examples=80, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SEEDS = [HOPPER_LGIP, LCIPP] + [p.read_text(encoding="utf-8") for p in shared_fixtures("nvidia-smi", "nvidia-smi-mig-*")]


def _one(text: str) -> None:
    try:
        inv = M.parse(text)
    except ParseError as e:
        assert "\n" not in str(e)
        return
    json.dumps(inv.to_dict())


@FUZZ
@given(st.text(max_size=400))
def test_fuzz_random_text(text):
    _one(text)


@FUZZ
@given(st.sampled_from(SEEDS), st.integers(0, 5000), st.integers(0, 120), st.text(max_size=30))
def test_fuzz_damaged_listings(seed, at, cut, junk):
    at %= len(seed) + 1
    _one(seed[:at] + junk + seed[at + cut:])
