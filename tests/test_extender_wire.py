"""The extender's fast path for node-cache requests (issue 39, scoring/wire.py): the same answers
and refusals as the whole-body path; /filter's bytes are those of json of its dict; a list of
names seen before is reused, never across a change of the node table."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetero_exporter.model import compact_json
from hetero_exporter.scoring import jsonsafe, synthetic
from hetero_exporter.scoring.columns import KNOWN_MIN
from hetero_exporter.scoring.extender import BadRequest, Extender
from hetero_exporter.scoring.nodetable import NodeTable
from hetero_exporter.scoring.scorer import Scorer

T0 = 1764400000.0
ANN = "hetero-exporter.io/devices"
REQ = "hetero-exporter.io/request"


def text(name: str, shape: str = "hgx-h100", **kw) -> str:
    return compact_json(synthetic.node(name, shape, time=T0, **kw))


def pod(gpus: int = 4, request=None, uid: str = "u1") -> dict:
    meta = {"name": "trainer", "namespace": "ml", "uid": uid, "resourceVersion": "1"}
    if request is not None:
        meta["annotations"] = {REQ: json.dumps(request)}
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}


def cluster(n: int = 420) -> dict[str, str]:
    """Enough nodes for the lists the table keeps by identity (columns.KNOWN_MIN); some busy
    (a busy node refuses a shared request resolvably: FailedAndUnresolvableNodes differs from FailedNodes)."""
    shapes = ("hgx-h100", "dgx1-v100", "mi300x")
    out = {}
    for i in range(n):
        loads = {d: 0.9 for d in range(8)} if i % 7 == 0 else {}
        out[f"n-{i:04d}"] = text(f"n-{i:04d}", shapes[i % 3], loads=loads, health={1: "failed"} if i % 11 == 0 else {})
    return out


@pytest.fixture
def ext():
    scorer = Scorer("binpack")
    table = NodeTable(scorer)
    table.replace(cluster())
    return Extender(scorer, table, clock=lambda: T0 + 30)


def body(doc) -> bytes:
    return msgspec.json.encode(doc)


SHARED = {"shared": True, "memory_per_device": "60Gi"}
REQUESTS = [None, {"memory_per_device": "40Gi"}, {"memory_per_device": "500Gi"}, {"topology": "same-switch"},
            {"count": "x"}, SHARED]


@pytest.mark.parametrize("request_", REQUESTS)
def test_filter_json_is_the_json_of_the_filter_answer(ext, request_):
    names = [*cluster(), "not-cached", "n-0001"]  # a name not in the cache, a name listed twice
    doc = {"Pod": pod(request=request_), "NodeNames": names}
    for raw in (body(doc), json.dumps(doc, indent=1).encode()):  # the fast path, then other bytes of it
        answer, _ = ext.filter(raw, "t1")
        encoded, _ = ext.filter_json(raw, "t1")
        assert encoded == jsonsafe.dumps(answer)
        assert json.loads(encoded) == answer
    if request_ is SHARED:
        assert answer["FailedAndUnresolvableNodes"] != answer["FailedNodes"]  # busy nodes could be freed


def test_filter_json_in_body_mode_and_with_text_msgspec_does_not_write():
    ext = Extender(Scorer("binpack"), clock=lambda: T0 + 30)
    odd = "n-\udc00"  # a lone surrogate (a \\u escape can carry one): written by json, escaped
    items = [{"metadata": {"name": n, "annotations": {ANN: text(n.encode("ascii", "replace").decode())}}}
             for n in ("a", "b", odd)]
    raw = json.dumps({"Pod": pod(), "Nodes": {"items": items, "metadata": {"big": 2 ** 70}}}).encode()
    answer, _ = ext.filter(raw, "t1")
    encoded, _ = ext.filter_json(raw, "t1")
    assert encoded == jsonsafe.dumps(answer) and json.loads(encoded) == answer
    assert [i["metadata"]["name"] for i in answer["Nodes"]["items"]] == ["a", "b", odd]


def test_prioritize_after_filter_reuses_the_passing_names(ext):
    names = list(cluster())
    doc = {"Pod": pod(), "NodeNames": names}
    encoded, first = ext.filter_json(body(doc), "t1")
    passed = json.loads(encoded)["NodeNames"]
    assert len(passed) >= KNOWN_MIN
    again, ev = ext.prioritize(body({"Pod": pod(), "NodeNames": passed}), "t1")
    assert ev.names is ext.names.get(body(passed)).names  # the list /filter answered, not a new one
    spaced, _ = ext.prioritize(json.dumps({"Pod": pod(), "NodeNames": passed}).encode(), "t2")  # decoded anew
    assert again == spaced
    _, second = ext.filter_json(body(doc), "t3")
    assert second.names is first.names  # the same bytes: the same list


def test_a_cached_name_list_sees_nodes_added_and_removed(ext):
    names = [*cluster(), "late"]
    raw = body({"Pod": pod(), "NodeNames": names})
    answer, _ = ext.filter(raw, "t1")
    assert "not in the extender's node cache" in answer["FailedNodes"]["late"]
    ext.table.update("late", text("late"))
    answer, _ = ext.filter(raw, "t2")
    assert "late" in answer["NodeNames"]
    ext.table.remove("n-0002")
    answer, _ = ext.filter(raw, "t3")
    assert "not in the extender's node cache" in answer["FailedNodes"]["n-0002"]
    prio, _ = ext.prioritize(raw, "t4")
    assert {h["Host"]: h["Score"] for h in json.loads(prio)}["n-0002"] == 0


def _outcome(fn, raw):
    try:
        return fn(raw)
    except BadRequest as e:
        return "refused", str(e)


_names = st.lists(st.sampled_from(["n-0001", "n-0002", "zz", ""]), max_size=4)
_value = st.recursive(st.none() | st.integers() | st.text(max_size=4) | _names,
                      lambda i: st.lists(i, max_size=2) | st.dictionaries(st.text(max_size=3), i, max_size=2),
                      max_leaves=6)
_field = st.sampled_from(["Pod", "pod", "POD", "Nodes", "nodes", "NodeNames", "nodenames", "nodeNames", "x"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=st.lists(st.tuples(_field, _value | st.just(pod()) | _names), max_size=5), deep=st.integers(0, 70))
def test_the_fast_path_reads_what_the_whole_body_path_reads(ext, fields, deep):
    doc_text = "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in fields) + "}"  # duplicate keys kept
    if deep:
        doc_text = doc_text[:-1] + ("," if fields else "") + '"Pod":' + "[" * deep + "]" * deep + "}"
    raw = doc_text.encode()
    fast = ext._names_args(raw)
    whole = _outcome(ext._args, raw)
    if fast is not None:
        the_pod, listed = fast
        assert whole == (the_pod, None, listed.names)
    for verb in (ext.filter, ext.prioritize):
        assert _outcome(lambda r: verb(r, "t")[0], raw) == _outcome(lambda r: verb(r, "t")[0], raw + b" ")


def test_refusals_are_worded_as_before(ext):
    cases = {
        b'{"Pod": {}, "NodeNames": [1, 2]}': "NodeNames must be a list of node names",
        b'{"Pod": {}, "NodeNames": null}': "neither Nodes nor NodeNames",
        b'{"Pod": ' + b"[" * 70 + b"]" * 70 + b', "NodeNames": []}': "nested deeper than 64 levels",
        b'{"Pod": {"a": NaN}, "NodeNames": []}': "not JSON",
        b'{"Pod": {"a": 1e999}, "NodeNames": []}': "too large",
        b'{"Pod": 3, "NodeNames": []}': "Pod is missing or not an object",
    }
    for raw, why in cases.items():
        with pytest.raises(BadRequest, match=why):
            ext.filter(raw, "t")
