"""Series profiles (issue 39 §2), a contract per vendor on the all-vendors node with NVIDIA GPM on:
``fleet`` at most 32 series per device, no per-process series, at most 9 labels, identity only on
the ``_info`` series, allocations per container kept; ``standard`` (the default) is what /metrics
served before profiles; ``full`` serves at least what standard does; include/exclude refine any
profile. benchmarks/series_budget.py prints the counts (BENCHMARKS.md)."""

from __future__ import annotations

from collections import defaultdict

import pytest

pytest.importorskip("pynvml")

from conftest import ROOT  # noqa: E402
from series_nodes import gpm_node  # noqa: E402
from hetero_exporter import cli  # noqa: E402
from hetero_exporter import config as config_mod  # noqa: E402
from hetero_exporter.app.agent import Agent, Options  # noqa: E402
from hetero_exporter.exposition.collector import build_families  # noqa: E402
from hetero_exporter.exposition.selection import EVERYTHING, Selection  # noqa: E402
from hetero_exporter.model import names as N  # noqa: E402

# profile -> (series per device, labels on a series)
BUDGET = {N.FLEET: (32, 9), N.STANDARD: (110, 12), N.FULL: (110, 12)}
VENDORS = ("nvidia", "amd", "hygon", "ascend", "cambricon", "metax", "iluvatar", "mthreads", "enflame", "kunlunxin")
IDENTITY = {"index", "kind", "model", "pci_address", "numa_node", "driver_version", "profile", "serial"}


@pytest.fixture(scope="module")
def snap(tmp_path_factory):
    agent = Agent.build(Options(command="inspect", simulate=str(gpm_node(tmp_path_factory.mktemp("profiles")))))
    try:
        sampler = agent.start().sampler
        sampler.collect()  # GPM pairs a sample with the previous cycle's
        return sampler.collect()
    finally:
        agent.close()


def _series(snap, selection: Selection) -> list:
    return [s for fam in build_families(snap, selection=selection) for s in fam.samples]


def _per_device(snap, series: list) -> dict[str, list[int]]:
    """vendor -> series count of each of its devices (process series apart)."""
    vendor_of = {d.identity.uuid: d.identity.vendor for d in snap.devices}
    count: dict[str, int] = defaultdict(int)
    for s in series:
        if "uuid" in s.labels and "pid" not in s.labels:
            count[s.labels["uuid"]] += 1
    out: dict[str, list[int]] = defaultdict(list)
    for uuid, n in count.items():
        out[vendor_of[uuid]].append(n)
    return out


@pytest.mark.parametrize("profile", N.PROFILES)
@pytest.mark.parametrize("vendor", VENDORS)
def test_each_vendors_devices_keep_the_profiles_budget(snap, vendor, profile):
    per_device, widest = BUDGET[profile]
    series = _series(snap, Selection(profile=profile))
    counts = _per_device(snap, series)[vendor]
    assert counts and max(counts) <= per_device, (vendor, profile, counts)
    mine = [s for s in series if s.labels.get("vendor") == vendor]
    assert max(len(s.labels) for s in mine) <= widest


def test_the_fleet_profile_has_the_profiling_core_and_no_process_series(snap):
    series = _series(snap, Selection(profile=N.FLEET))
    assert not any("pid" in s.labels for s in series)
    names = {s.name for s in series}
    assert N.PROCESS_MEMORY.name not in names and N.CLOCK.name not in names and N.COMPUTE_UNITS.name not in names
    engines = {s.labels["engine"] for s in series if s.name == N.ENGINE_UTILIZATION.name}
    assert engines == {"compute", "tensor", "memory"}  # SM active, tensor, DRAM (NVML GPM)
    for metric in (N.UTILIZATION, N.MEMORY_USED, N.TEMPERATURE, N.POWER, N.ENERGY, N.ECC_ERRORS, N.HEALTH_STATUS,
                   N.PCIE_THROUGHPUT, N.INTERCONNECT_THROUGHPUT, N.ALLOCATION, N.DEVICE_INFO):
        assert metric.name in names, metric.name
    # identity only through the _info series: a value series names its device by vendor and uuid
    for s in series:
        if "uuid" in s.labels and not s.name.endswith("_info"):
            assert not IDENTITY & set(s.labels), s
    # quality rows only for what fleet serves
    fields = {s.labels["field"] for s in series if s.name == N.QUALITY_INFO.name}
    assert "clock_compute_hertz" not in fields and "engine_compute_utilization_ratio" in fields


def test_an_nvidia_gpu_with_gpm_costs_a_third_of_standard_in_fleet(snap):
    fleet = _per_device(snap, _series(snap, Selection(profile=N.FLEET)))["nvidia"]
    standard = _per_device(snap, _series(snap, Selection()))["nvidia"]
    assert max(fleet) <= 32 < min(standard) and max(fleet) * 2 < min(standard)


def test_standard_is_the_default_and_full_serves_at_least_as_much(snap):
    default = {(s.name, tuple(sorted(s.labels.items()))) for s in _series(snap, EVERYTHING)}
    assert Selection.of({}) == EVERYTHING == Selection.of({"profile": "standard"})
    assert default == {(s.name, tuple(sorted(s.labels.items()))) for s in _series(snap, Selection(profile=N.STANDARD))}
    full = {(s.name, tuple(sorted(s.labels.items()))) for s in _series(snap, Selection(profile=N.FULL))}
    assert default <= full
    # today no family is tagged full: full adds nothing yet (docs/metrics-guide.md: Profiles)
    assert not [m for m in N.ALL if m.profile == N.FULL] and full == default


def test_include_and_exclude_refine_the_fleet_profile(snap):
    names = {s.name for s in _series(snap, Selection.of({"profile": "fleet", "exclude": [N.ENERGY.name]}))}
    assert N.ENERGY.name not in names and N.POWER.name in names
    fleet_power_clock = Selection.of({"profile": "fleet", "include": ["power_watts", "clock_{clock}_hertz"]})
    only = {s.name for s in _series(snap, fleet_power_clock)}
    assert N.POWER.name in only and N.UTILIZATION.name not in only
    assert N.CLOCK.name not in only  # include refines what the profile serves; it adds no family
    assert N.HEALTH_STATUS.name in only and N.DEVICE_INFO.name in only  # identity and health always stay


def test_every_family_has_a_profile_and_the_docs_show_each():
    """docs/metrics.md (kept current by tests/test_generated.py) has a row per family with its profile."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("generate", ROOT / "collectors" / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    doc = generate.metrics_doc({})
    for m in N.ALL:
        assert m.profile in N.PROFILES
        assert f"| `{m.name}` | {m.type} | {', '.join(m.labels) or '-'} | {generate.profile_cell(m, {})} |" in doc
        for label, values in m.fleet_only:
            assert m.profile == N.FLEET and label in m.labels and values
    assert "| fleet (engine: compute/tensor/memory), else standard |" in doc


@pytest.mark.parametrize("value", ["tiny", 3, ["fleet"]])
def test_a_bad_profile_is_a_config_error_naming_it(value):
    with pytest.raises(config_mod.ConfigError) as e:
        config_mod.from_dict({"metrics": {"profile": value}}, "config.yaml")
    assert str(e.value).startswith("config.yaml: metrics.profile") and "fleet, standard, full" in str(e.value)


def test_the_command_exits_2_with_one_line(tmp_path, capsys):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("metrics:\n  profile: fleeet\n")
    assert cli.main(["inspect", "--simulate", "--config", str(cfg), "--log-format", "text"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "metrics.profile" in err[0]


def test_the_charts_schema_takes_the_profile():
    import json
    schema = json.loads((ROOT / "charts/hetero-exporter/values.schema.json").read_text())
    metrics = schema["properties"]["config"]["properties"]["metrics"]["properties"]
    assert metrics["profile"] == {"enum": list(N.PROFILES)}


def test_full_serves_every_reading_the_catalogue_exports(snap):
    """full = everything the catalogue has: every family of names.ALL, every reading unfiltered, so
    its series are those of build_families with no selection (which tests/test_catalogue.py holds
    to every reading with a family)."""
    full = Selection(profile=N.FULL)
    assert full.everything and all(full.serves(m) for m in N.ALL)
    assert all(full.allows(field, None) for d in snap.devices for field in d.readings)
    key = lambda s: (s.name, tuple(sorted(s.labels.items())))  # noqa: E731
    assert {key(s) for s in _series(snap, full)} == {key(s) for fam in build_families(snap) for s in fam.samples}


@pytest.mark.parametrize("profile", N.PROFILES)
def test_include_and_exclude_refine_every_profile(snap, profile):
    def names(**refine) -> set[str]:
        return {s.name for s in _series(snap, Selection.of({"profile": profile, **refine}))}
    assert names() - names(exclude=[N.POWER.name, "energy_joules_total"]) == {N.POWER.name, N.ENERGY.name}
    only = names(include=["temperature_{sensor}_celsius"])
    assert N.TEMPERATURE.name in only and N.UTILIZATION.name not in only and N.DEVICE_INFO.name in only


def test_a_profile_is_read_from_the_config_file(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("metrics:\n  profile: fleet\n")
    loaded = config_mod.load(str(cfg))
    assert Selection.of(loaded.metrics) == Selection(profile=N.FLEET)


def test_the_guide_documents_profiles_and_openmetrics_where_the_generated_docs_link():
    guide = (ROOT / "docs/metrics-guide.md").read_text()
    headings = [line[3:] for line in guide.splitlines() if line.startswith("## ")]
    # anchors #profiles and #openmetrics-and-exemplars
    assert "Profiles" in headings and "OpenMetrics and exemplars" in headings
    assert "metrics-guide.md#profiles" in (ROOT / "collectors/generate.py").read_text()
    section = guide[guide.index("## Profiles"):guide.index("\n## ", guide.index("## Profiles") + 1)]
    for profile in N.PROFILES:
        assert f"| `{profile}` |" in section
