"""The normalized model and its schema-1 JSON encoding."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings, strategies as st

from hetero_exporter.model import (
    HEALTH_STATES, LINK_TYPES, METHODS, SCHEMA_VERSION, STATUSES, CollectorStatus, DeviceIdentity,
    DeviceSample, Fault, Health, Link, NodeSnapshot, ProcessSample, Profile, Quality, Reading,
    SchemaError, compact_document, snapshot_from_doc, snapshot_from_json, snapshot_to_json)

text = st.text(min_size=0, max_size=20)
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
opt_finite = st.none() | finite
opt_text = st.none() | text

qualities = st.builds(Quality, source=text, method=st.sampled_from(METHODS), window_seconds=opt_finite,
                      resolution=opt_finite, error_bound=opt_finite, age_seconds=finite,
                      status=st.sampled_from(STATUSES))
readings = st.builds(Reading, value=opt_finite, quality=qualities)
faults = st.builds(Fault, code=text, fault_class=text, action=text, message=text, first_seen=opt_finite,
                   last_seen=opt_finite, count=st.integers(0, 10**9), severity=text, source=text)
identities = st.builds(DeviceIdentity, vendor=text, kind=text, index=st.integers(0, 1024), uuid=text,
                       model=text, pci_address=opt_text, numa_node=st.none() | st.integers(0, 8),
                       driver_version=opt_text, firmware_version=opt_text, parent=opt_text,
                       name=opt_text, serial=opt_text)
processes = st.builds(ProcessSample, pid=st.integers(1, 2**22), device_uuid=text,
                      memory_bytes=st.none() | st.integers(0, 2**50), utilization_ratio=opt_finite,
                      name=opt_text, container_id=opt_text, namespace=opt_text, pod=opt_text,
                      pod_uid=opt_text, container=opt_text, attribution=text)
links = st.builds(Link, peer=text, type=st.sampled_from(LINK_TYPES), lanes=st.none() | st.integers(0, 64),
                  bandwidth_bytes_per_second=opt_finite, state=opt_text)
profiles_ = st.builds(Profile, model=text, vendor=text, kind=text, compute_units=finite,
                      memory_bytes=st.none() | st.integers(0, 2**50), interconnect=opt_text,
                      features=st.lists(text, max_size=3).map(tuple), cost_weight=finite,
                      estimated=st.booleans(), approximate=st.booleans(), source=text)
devices = st.builds(
    DeviceSample, identity=identities, timestamp=finite,
    readings=st.dictionaries(text, readings, max_size=4),
    health=st.builds(Health, state=st.sampled_from(HEALTH_STATES), reasons=st.lists(faults, max_size=2).map(tuple)),
    faults=st.lists(faults, max_size=2).map(tuple), processes=st.lists(processes, max_size=3).map(tuple),
    links=st.lists(links, max_size=2).map(tuple), profile=st.none() | profiles_)
statuses = st.builds(CollectorStatus, name=text, ok=st.booleans(), duration_seconds=finite, error=opt_text,
                     error_kind=opt_text, last_success=opt_finite,
                     errors_total=st.dictionaries(text, st.integers(0, 10**6), max_size=3),
                     vendor=opt_text, devices=st.integers(0, 64))
snapshots = st.builds(NodeSnapshot, node=text, time=finite, devices=st.lists(devices, max_size=3).map(tuple),
                      collectors=st.lists(statuses, max_size=3).map(tuple),
                      expected=st.dictionaries(text, st.integers(0, 64), max_size=3), boot_id=opt_text)


@settings(max_examples=200, deadline=None)
@given(snapshots)
def test_json_round_trip_is_lossless(snap):
    assert snapshot_from_json(snapshot_to_json(snap)) == snap


@settings(max_examples=100, deadline=None)
@given(snapshots)
def test_compact_document_decodes_and_drops_processes_and_quality(snap):
    doc = json.loads(json.dumps(compact_document(snap)))
    back = snapshot_from_doc(doc)
    assert [d.identity for d in back.devices] == [d.identity for d in snap.devices]
    assert [d.health for d in back.devices] == [d.health for d in snap.devices]
    assert all(d.processes == () for d in back.devices)
    assert all(r.quality.source == "" for d in back.devices for r in d.readings.values())


def _one_device_snapshot() -> NodeSnapshot:
    q = Quality("nvmlDeviceGetMemoryInfo.used")
    dev = DeviceSample(
        identity=DeviceIdentity("nvidia", "gpu", 0, "GPU-1", "H100-SXM5-80GB", "0000:18:00.0", 0, "550.54.15"),
        timestamp=1.0,
        readings={"memory_used_bytes": Reading(10.0, q), "memory_total_bytes": Reading(80.0, q)},
        faults=(Fault("79", "device-lost", "reboot-node", count=2),),
        processes=(ProcessSample(4242, "GPU-1", 12),))
    return NodeSnapshot("n1", 2.0, (dev,))


def test_document_follows_the_design_outline():
    doc = json.loads(snapshot_to_json(_one_device_snapshot()))
    assert doc["schema"] == SCHEMA_VERSION == 1
    assert {"node", "time", "devices", "collectors"} <= set(doc)
    d = doc["devices"][0]
    assert {"identity", "profile", "readings", "health", "faults", "processes", "links"} <= set(d)
    assert d["identity"]["parent"] is None and d["identity"]["pci_address"] == "0000:18:00.0"
    assert d["readings"]["memory_used_bytes"]["value"] == 10.0
    assert "quality" in d["readings"]["memory_used_bytes"]
    assert d["faults"][0]["class"] == "device-lost"  # JSON name of fault_class
    assert d["health"] == {"state": "ok", "reasons": []}
    assert d["processes"][0]["pid"] == 4242


def test_compact_keeps_free_memory_and_leaves_processes_out():
    doc = compact_document(_one_device_snapshot())
    d = doc["devices"][0]
    assert d["processes"] == []
    assert d["readings"]["memory_free_bytes"] == {"value": 70.0}
    assert "quality" not in d["readings"]["memory_used_bytes"]


@pytest.mark.parametrize("doc, fragment", [
    ({"schema": 2, "node": "n", "time": 1.0}, "version 2 is not supported"),
    ({"node": "n", "time": 1.0}, "$.schema: missing"),
    ({"schema": 1, "node": "n"}, "missing required field 'time'"),
    ({"schema": 1, "node": "n", "time": "x"}, "$.time: expected a number"),
    ({"schema": 1, "node": "n", "time": 1.0, "devices": [{"timestamp": 1.0}]}, "$.devices[0]: missing required field 'identity'"),
    ({"schema": 1, "node": "n", "time": 1.0, "devices": {}}, "$.devices: expected a list"),
    ([1, 2], "expected a JSON object"),
])
def test_malformed_documents_are_rejected_with_the_path(doc, fragment):
    with pytest.raises(SchemaError) as e:
        snapshot_from_doc(doc)
    assert fragment in str(e.value)


def test_invalid_json_and_non_finite_values_are_rejected():
    with pytest.raises(SchemaError, match="not valid JSON"):
        snapshot_from_json("{not json")
    with pytest.raises(SchemaError, match="finite"):
        snapshot_from_json('{"schema": 1, "node": "n", "time": NaN}')
    bad = NodeSnapshot("n", float("nan"))
    with pytest.raises(ValueError):
        snapshot_to_json(bad)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | finite | text,
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(text, c, max_size=3), max_leaves=12))
def test_decoding_arbitrary_json_raises_only_schema_error(doc):
    if isinstance(doc, dict):
        doc = {"schema": 1, **doc}
    try:
        snapshot_from_doc(doc)
    except SchemaError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    snapshots.map(lambda s: json.loads(snapshot_to_json(s))),
    st.recursive(st.none() | st.booleans() | st.integers() | finite | text,
                 lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(
                     ["node", "time", "devices", "identity", "vendor", "kind", "index", "uuid", "timestamp",
                      "readings", "value", "quality", "source", "links", "peer", "type"]), c, max_size=4),
                 max_leaves=16)))
def test_compiled_decoder_agrees_with_the_explaining_decoder(doc):
    """from_dict takes a fast path; it must accept and build exactly what _decode does."""
    from hetero_exporter import model
    from hetero_exporter.model import codec
    try:
        slow = codec._decode(model.NodeSnapshot, doc, "$")
    except SchemaError:
        slow = SchemaError
    try:
        fast = codec._compiled(model.NodeSnapshot)(doc)
    except codec._Invalid:
        fast = SchemaError
    assert fast == slow


def test_numbers_too_large_for_a_float_are_a_schema_error():
    with pytest.raises(SchemaError, match="out of range"):
        snapshot_from_json('{"schema": 1, "node": "n", "time": 1' + "0" * 400 + "}")


def test_the_encoder_takes_any_mapping_and_refuses_a_non_finite_value_at_any_depth():
    """The encoder dispatches on exact types for speed; other mappings and sequences still encode,
    and an infinity deep in a reading is refused as at the top."""
    import types

    from hetero_exporter.model import to_dict
    ok = Reading(1.5, Quality("nvml", "instant"))
    dev = DeviceSample(DeviceIdentity("nvidia", "gpu", 0, "GPU-0", "H100"), 1.0,
                       readings=types.MappingProxyType({"power_watts": ok}))
    doc = to_dict(NodeSnapshot("n", 1.0, devices=[dev]))
    assert doc["devices"][0]["readings"] == {"power_watts": to_dict(ok)}
    assert doc["devices"][0]["readings"]["power_watts"]["value"] == 1.5
    bad = dataclasses.replace(dev, readings={"power_watts": Reading(float("inf"), ok.quality)})
    with pytest.raises(ValueError, match="non-finite"):
        to_dict(NodeSnapshot("n", 1.0, devices=(bad,)))
    assert to_dict(Fault("79", "hardware", "reset", "XID 79"))["class"] == "hardware"


def _compact_by_the_whole_document(snap):
    """The annotation form as it was first written: the whole document, then what is left out
    taken away (the reference the cheaper encoding must equal)."""
    from hetero_exporter.model import to_dict
    from hetero_exporter.model.codec import COMPACT_READINGS
    doc = {"schema": SCHEMA_VERSION, **to_dict(snap)}
    for key in ("boot_id", "attribution_sources", "energy"):
        doc.pop(key, None)
    for c in doc["collectors"]:
        c.pop("errors_total", None)
    for d, dev in zip(doc["devices"], snap.devices):
        d["processes"] = []
        d.pop("allocations", None)
        d.pop("reported_health", None)
        kept = {n: {"value": r.value} for n in COMPACT_READINGS if (r := dev.readings.get(n)) is not None
                and r.value is not None and r.quality.status == "ok"}
        used, total = dev.value("memory_used_bytes"), dev.value("memory_total_bytes")
        if "memory_free_bytes" not in kept and used is not None and total is not None:
            kept["memory_free_bytes"] = {"value": max(0.0, total - used)}
        d["readings"] = kept
        for f in d["faults"]:
            f.pop("source", None)
    return _without_nulls(doc)


def _without_nulls(obj):
    if isinstance(obj, dict):
        return {k: _without_nulls(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_without_nulls(v) for v in obj]
    return obj


compact_names = st.sampled_from(["utilization_ratio", "memory_used_bytes", "memory_total_bytes",
                                 "memory_free_bytes", "power_watts", "clock_sm_hertz"])


@settings(max_examples=200, deadline=None)
@given(snapshots, st.lists(st.tuples(compact_names, readings), max_size=6))
def test_the_compact_form_never_encodes_what_it_leaves_out_and_equals_the_whole_documents_cut(snap, extra):
    """compact_document encodes only what the annotation keeps: the same document as cutting the
    whole one down, for any snapshot (the annotation's readings included)."""
    if snap.devices:
        first = snap.devices[0]
        snap = dataclasses.replace(snap, devices=(dataclasses.replace(
            first, readings={**first.readings, **dict(extra)}),) + snap.devices[1:])
    assert compact_document(snap) == _compact_by_the_whole_document(snap)
