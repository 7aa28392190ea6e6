"""The field catalogue (issue 27): every normalized field declared once in model/fields.py;
every reading a collector produces reaches a metric family unless the catalogue says why not;
every reading family has its row; every vendor says, per field, its source or why it has none."""

from __future__ import annotations

import dataclasses

import pytest

from hetero_exporter.exposition.collector import build_families
from hetero_exporter.model import fields as F
from hetero_exporter.model import names as N
from hetero_exporter.model import DeviceIdentity, DeviceSample, NodeSnapshot, Quality, Reading

from conftest import ROOT

# families built from other parts of a device sample than its readings
NOT_FROM_READINGS = {N.DEVICE_INFO, N.FIELD_STATUS, N.HEALTH_STATUS, N.HEALTH_REASON, N.FAULT_EVENTS, N.FAULT_LAST,
                     N.COMPUTE_UNITS, N.COST_WEIGHT, N.PROCESS_MEMORY, N.PROCESS_UTILIZATION, N.ALLOCATION,
                     N.PRICE_PER_HOUR, N.ALLOCATION_SHARE, N.UNATTRIBUTED_MEMORY, N.HEALTH_OVERRIDE_UNTIL,
                     N.CONTAINER_ENERGY, N.UNATTRIBUTED_ENERGY}  # the energy split: sources/energy.py


def test_each_catalogue_row_names_a_family_of_its_kind_and_labels_or_says_why_not():
    for f in F.CATALOGUE:
        if f.family is None:
            assert f.json_only, f"{f.name}: no family and no reason"
            continue
        metric = N.BY_NAME[f.family]
        assert metric.labels[:2] == ("vendor", "uuid"), f.name
        assert set(metric.labels[2:]) == set(f.placeholders) | set(f.labels), f.name
        assert (metric.type == "counter") == (f.kind == "counter"), f.name
    assert len({f.name for f in F.CATALOGUE}) == len(F.CATALOGUE)


def test_every_reading_family_has_a_catalogue_row():
    fed = {f.family for f in F.CATALOGUE}
    device_families = {m for m in N.ALL if m.labels[:2] == ("vendor", "uuid")} - NOT_FROM_READINGS
    assert not {m.name for m in device_families} - fed


@pytest.fixture(scope="module")
def all_vendors_snapshots():
    """Two cycles of the all-vendors node, the second after every detail cadence came due."""
    from hetero_exporter.app.agent import Agent, Options
    agent = Agent.build(Options(command="inspect", simulate=str(ROOT / "fixtures/scenarios/all-vendors.yaml")))
    try:
        sampler = agent.start().sampler
        first = sampler.collect()
        agent.clock.advance(900.0) if hasattr(agent.clock, "advance") else None
        second = sampler.collect()
    finally:
        agent.close()
    return first, second


def test_no_reading_of_any_vendor_is_dropped(all_vendors_snapshots):
    undeclared, dropped = set(), set()
    for snap in all_vendors_snapshots:
        for d in snap.devices:
            for name in d.readings:
                found = F.lookup(name)
                if found is None:
                    undeclared.add((d.identity.vendor, name))
                elif found[0].family is None and not found[0].json_only:
                    dropped.add((d.identity.vendor, name))
    assert not undeclared, sorted(undeclared)
    assert not dropped, sorted(dropped)
    vendors = {d.identity.vendor for d in all_vendors_snapshots[0].devices}
    assert len(vendors) == 10


def test_a_reading_with_a_family_is_a_series_with_its_labels(all_vendors_snapshots):
    snap = all_vendors_snapshots[-1]
    samples = {(s.name, tuple(sorted(s.labels.items()))) for fam in build_families(snap) for s in fam.samples}
    missing = []
    for d in snap.devices:
        for name, r in d.readings.items():
            target = N.metric_for_field(name)
            if target is None or r.quality.status != "ok" or r.value is None:
                continue
            metric, extra = target
            labels = {"vendor": d.identity.vendor, "uuid": d.identity.uuid, **dict(zip(metric.labels[2:], extra))}
            if (metric.name, tuple(sorted(labels.items()))) not in samples:
                missing.append((d.identity.vendor, name))
    assert not missing, missing[:20]


def test_the_readings_collectors_dropped_before_reach_metrics(all_vendors_snapshots):
    """Issue 27: AMD per-block ECC, deferred, NAKs, edge temperature; Kunlunxin codecs and L3;
    Cambricon and Iluvatar fans; Ascend hugepages."""
    families = {fam.name: fam for fam in build_families(all_vendors_snapshots[-1])}
    def labels_of(metric):
        fam = families.get(metric.family)
        return [s.labels for s in fam.samples] if fam else []
    vendors_of = lambda metric: {lb["vendor"] for lb in labels_of(metric)}  # noqa: E731
    assert {"cambricon", "iluvatar"} <= vendors_of(N.FAN_SPEED)
    assert {lb["engine"] for lb in labels_of(N.ENGINE_UTILIZATION) if lb["vendor"] == "kunlunxin"} >= {"decoder", "encoder", "jpeg"}
    assert {(lb["block"], lb["severity"]) for lb in labels_of(N.ECC_BLOCK_ERRORS)} >= {("umc", "deferred"), ("gfx", "corrected")}
    assert "amd" in vendors_of(N.ECC_DEFERRED) and "amd" in vendors_of(N.PCIE_NAKS)
    assert any(lb["sensor"] == "edge" for lb in labels_of(N.TEMPERATURE))
    assert "l3" in {lb["memory"] for lb in labels_of(N.MEMORY_REGION)}
    assert "ascend" in vendors_of(N.HUGEPAGES)


def test_quality_info_carries_the_resolution():
    ident = DeviceIdentity(vendor="acme", kind="gpu", index=0, uuid="A0")
    q = Quality("acme-smi: Util", "sampled", 1.0, 0.01, 0.02)
    snap = NodeSnapshot(node="n", time=1.0, devices=(DeviceSample(ident, 1.0, {F.UTILIZATION: Reading(0.5, q)}),))
    (info,) = [s for fam in build_families(snap) for s in fam.samples if s.name == N.QUALITY_INFO.name]
    assert info.labels["resolution"] == "0.01" and info.labels["window_seconds"] == "1"
    assert info.labels["error_bound"] == "0.02"


def test_an_undeclared_reading_is_named_by_the_test_that_guards_the_catalogue():
    assert F.lookup("utilization_ratio")[0].family == N.UTILIZATION.name
    assert F.lookup("engine_tensor_utilization_ratio")[1] == {"engine": "tensor"}
    assert F.lookup("ecc_xgmi_wafl_uncorrected_total")[1] == {"block": "xgmi_wafl", "severity": "uncorrected"}
    assert F.lookup("engine_graphics_utilization_ratio") is None  # not an engine of the vocabulary
    assert F.lookup("made_up_field") is None


def test_every_vendor_declares_every_field_and_the_page_is_current():
    text = (ROOT / "docs" / "metrics.md").read_text()
    assert "not declared" not in text
    for f in F.CATALOGUE:
        assert f"| `{f.name}` |" in text, f.name
    # the page itself is checked current with the other generated files (tests/test_generated.py)


def test_dataclass_fields_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        F.CATALOGUE[0].unit = "x"  # type: ignore[misc]
