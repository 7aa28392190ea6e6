"""The scorer's light annotation decoder (scoring/nodes.py ``_light_snapshot``, issue 17) gives
the node state the model decoder gives: on the shipped fixtures, on random synthetic nodes, and
on annotations with a field the scorer reads set to a random JSON value (same state, or the same
reason the node is unreadable)."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from hetero_exporter.model import compact_json
from hetero_exporter.scoring import synthetic
from hetero_exporter.scoring import nodes
from hetero_exporter.scoring.nodes import NodeState, _light_snapshot, from_annotation

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "scoring"
T0 = 1_700_000_000.0
SHAPES = sorted(synthetic._doc()["shapes"])


def _view(state: NodeState) -> tuple:
    """Everything of a state the scorer reads (Dev and Group compare by identity)."""
    def dev(d):
        return None if d is None else dataclasses.astuple(d)
    groups = tuple((r, g.vendor, tuple(map(dev, g.devices)), tuple((dev(d), why) for d, why in g.excluded),
                    g.pair, g.pair_kind, g.domain, g.load_total, g.has_links, dev(g.floor), g.floor_id)
                   for r, g in state.groups.items())
    return state.name, state.time, state.error, groups


def _old(name: str, text: str) -> NodeState:
    """The model decoder's path (jsonsafe, model.snapshot_from_doc, node_state): the light one off."""
    with mock.patch.object(nodes, "_light_snapshot", lambda text: None):
        return from_annotation(name, text)


def _same(name: str, text: str) -> None:
    assert _view(from_annotation(name, text)) == _view(_old(name, text))


def test_valid_annotations_take_the_light_decoder():
    text = compact_json(synthetic.node("n", "hgx-h100", time=T0))
    snap = _light_snapshot(text)
    assert snap is not None and len(snap.devices) == 8 and snap.time == T0


def test_the_shipped_fixtures_decode_alike():
    docs = json.loads((FIX / "nodes.json").read_text())
    assert docs
    for name, doc in docs.items():
        text = json.dumps(doc)
        assert _light_snapshot(text) is not None
        _same(name, text)


@settings(max_examples=60, deadline=None)
@given(shape=st.sampled_from(SHAPES), count=st.integers(1, 16),
       loads=st.dictionaries(st.integers(0, 15), st.floats(0, 1), max_size=8),
       health=st.dictionaries(st.integers(0, 15), st.sampled_from(["ok", "degraded", "failed", "unknown"]),
                              max_size=4),
       driver=st.one_of(st.none(), st.sampled_from(["550.54.15", "v5.10.22", "24.1.rc2", "x"])))
def test_random_nodes_decode_alike(shape, count, loads, health, driver):
    text = compact_json(synthetic.node("n", shape, time=T0, loads=loads, health=health, driver=driver,
                                       runtime=driver, count=count))
    _same("n", text)


JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20), st.text(alphabet="ab", min_size=60, max_size=300), st.just([]), st.just({}),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
# fields the scorer reads: (where in the document, key)
READ_FIELDS = [("top", k) for k in ("schema", "node", "time", "devices")] + \
    [("identity", k) for k in ("vendor", "kind", "index", "uuid", "model", "numa_node", "driver_version",
                               "parent", "runtime_version")] + \
    [("device", k) for k in ("identity", "timestamp", "readings", "health", "links", "profile")] + \
    [("link", k) for k in ("peer", "type", "state")] + [("health", "state")] + \
    [("reading", k) for k in ("memory_total_bytes", "memory_free_bytes", "memory_used_bytes",
                              "utilization_ratio")] + [("value", "value")] + \
    [("profile", k) for k in ("model", "compute_units", "memory_bytes", "features", "cost_weight")]


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from(READ_FIELDS), value=JSON_VALUES, device=st.integers(0, 7), drop=st.booleans(),
       shape=st.sampled_from(["hgx-h100", "pcie-a100", "mi300x"]))
def test_a_read_field_set_to_anything_decodes_alike(field, value, device, drop, shape):
    doc = json.loads(compact_json(synthetic.node("n", shape, time=T0, loads={0: 0.5})))
    where, key = field
    dev = doc["devices"][device % len(doc["devices"])]
    if where == "profile":
        dev["profile"] = dev.get("profile") or {"model": dev["identity"]["model"]}
    dev["readings"].setdefault("utilization_ratio", {"value": 0.5})
    target = {"top": doc, "device": dev, "identity": dev["identity"], "health": dev["health"],
              "link": (dev["links"] or [{"peer": "p", "type": "nvlink"}])[0], "profile": dev.get("profile"),
              "reading": dev["readings"], "value": dev["readings"]["utilization_ratio"]}[where]
    if where == "link" and not dev["links"]:
        dev["links"] = [target]
    if drop:
        target.pop(key, None)
    else:
        target[key] = copy.deepcopy(value)
    _same("n", json.dumps(doc))


def test_hostile_texts_give_the_model_decoders_reason():
    good = json.loads(compact_json(synthetic.node("n", "hgx-h100", time=T0)))
    for change in ({"schema": 2}, {"schema": True}, {"time": "now"}, {"devices": {}}):
        _same("n", json.dumps({**good, **change}))
    long_uuid = copy.deepcopy(good)
    long_uuid["devices"][2]["links"][0]["peer"] = "u" * 300
    state = from_annotation("n", json.dumps(long_uuid))
    assert state.error and "$.devices[2].links[0].peer: 300 characters, over 256" in state.error
    _same("n", json.dumps(long_uuid))
    for text in ("[" * 5000 + "]" * 5000, '{"schema": 1e999}', "not json", '"\\ud800"'):
        _same("n", text)
