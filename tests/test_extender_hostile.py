"""The scheduler extender under hostile requests and annotations (issue 18): deep nesting, NaN,
numbers of thousands of digits, nodes of hundreds of devices and names of megabytes give a 400
or fail the node (or pod) with a reason, never a 500; the /explain ring and the logs stay small.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetero_exporter.model import compact_json
from hetero_exporter.scoring import jsonsafe, synthetic
from hetero_exporter.scoring.extender import BadRequest, Extender
from hetero_exporter.scoring.nodes import MAX_DEVICES, from_annotation
from hetero_exporter.scoring.request import NAME_CHARS, RequestError, request_from_pod
from hetero_exporter.scoring import scorer as scorer_module
from hetero_exporter.scoring.scorer import SWITCH_SCORE, Scorer
from hetero_exporter.scoring.server import ExtenderServer

T0 = 1764400000.0
ANN = "hetero-exporter.io/devices"
REQ = "hetero-exporter.io/request"
GOOD = compact_json(synthetic.node("good", "hgx-h100", time=T0))
DEEP = "[" * 100_000 + "]" * 100_000


def pod(request=None, *, name="trainer", namespace="ml", gpus=4) -> dict:
    meta = {"name": name, "namespace": namespace}
    if request is not None:
        meta["annotations"] = {REQ: request if isinstance(request, str) else json.dumps(request)}
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}


def node(name: str, text) -> dict:
    return {"metadata": {"name": name, "annotations": {ANN: text}}}


def args(the_pod=None, *nodes) -> bytes:
    return json.dumps({"Pod": the_pod or pod(), "Nodes": {"items": [node("good", GOOD), *nodes]}}).encode()


def nested(depth: int) -> list:
    """A list nested ``depth`` deep."""
    doc: list = []
    for _ in range(depth - 1):
        doc = [doc]
    return doc


def doc_with(**changes) -> str:
    """The good node's annotation with its first device changed (``identity``/``profile`` keys)."""
    doc = json.loads(GOOD)
    dev = doc["devices"][0]
    for where, value in changes.items():
        part, key = where.split("__")
        dev.setdefault(part, {})[key] = value
    return json.dumps(doc)


# --------------------------------------------------------------------------- bounded decoding

@pytest.mark.parametrize("text, why", [
    ("[" * 65 + "]" * 65, "nested deeper than 64 levels"),
    ('{"a":' * 100_000 + "1" + "}" * 100_000, "nested deeper than 64 levels"),
    ("[" * 100_000, "nested deeper than 64 levels"),  # never closed: still not decoded
    ('{"schema": NaN}', "NaN is not a JSON number"),
    ("[-Infinity]", "-Infinity is not a JSON number"),
    ("[1e999]", "number 1e999 is too large"),
    ("[" + "7" * 5000 + "]", "more than 4300 digits"),
    ("{not json", "Expecting property name"),
])
def test_jsonsafe_refuses_with_the_reason(text, why):
    with pytest.raises(jsonsafe.JSONRefused, match=why):
        jsonsafe.loads(text)
    with pytest.raises(jsonsafe.JSONRefused, match=why):
        jsonsafe.loads(text.encode())


def test_jsonsafe_decodes_what_json_decodes_within_the_limit():
    nested = "[" * 64 + "]" * 64
    brackets_in_strings = json.dumps({"a": "[" * 500 + '\\"{{{', "b": ["]]]", {"c": "\\\\"}]})
    for text in (GOOD, nested, brackets_in_strings, '"[[[["', "[1.5, -2, true, null]"):
        assert jsonsafe.loads(text) == json.loads(text)


def _deepest(text: str) -> int:
    """Deepest nesting of a bracket-only text, by a plain walk (what nesting_over bounds)."""
    depth = deepest = 0
    for c in text:
        depth += 1 if c in "[{" else -1
        if depth < 0:
            break
        deepest = max(deepest, depth)
    return deepest


def test_nesting_over_never_misses_a_deep_point():
    rnd = random.Random(18)
    for _ in range(3000):
        text = "".join(rnd.choice("[[]]{}") for _ in range(rnd.randint(0, 200)))
        limit = rnd.randint(1, 12)
        if _deepest(text) > limit:
            assert jsonsafe.nesting_over(text.encode(), limit), (text, limit)
    balanced = "".join(("[" * d + "]" * d) for d in (3, 9, 1, 12, 2))
    assert not jsonsafe.nesting_over(balanced.encode(), 12) and jsonsafe.nesting_over(balanced.encode(), 11)


# --------------------------------------------------------------------------- request bodies

@pytest.mark.parametrize("body, why", [
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 64 levels"),
    (b'{"Pod": ' * 100_000 + b"{}" + b"}" * 100_000, "nested deeper than 64 levels"),
    (json.dumps({"Pod": pod(), "Nodes": {"items": [{"metadata": {"name": "n", "x": nested(60)}}]}}).encode(),
     "nested deeper than 64 levels"),
    (b'{"Pod": {"metadata": NaN}, "Nodes": {"items": []}}', "NaN is not a JSON number"),
    (b'{"Pod": {}, "Nodes": {"items": [], "x": 1e400}}', "too large"),
    (b'{"Pod": {}, "Nodes": {"items": [], "x": ' + b"9" * 5000 + b"}}", "digits"),
])
def test_hostile_bodies_are_bad_requests(body, why):
    ext = Extender(Scorer())
    for verb in (ext.filter, ext.prioritize):
        with pytest.raises(BadRequest, match=why):
            verb(body, "t")


@pytest.mark.parametrize("request_text, why", [
    (DEEP, "not valid JSON: nested deeper than 64 levels"),
    ('{"count": NaN}', "NaN is not a JSON number"),
    (json.dumps({"min_driver_version": "5" * 5000}), "5000 characters, over 128 for a version"),
    (json.dumps({"min_runtime_version": {"nvidia": "1." + "2" * 4400}}), "over 128 for a version"),
    ('{"count": 1' + "0" * 5000 + "}", "digits"),
    (json.dumps({"features": ["x" * 10] * 30_000}), "over the 262144 Kubernetes allows"),
    (json.dumps({"k" * 1000 + str(i): 1 for i in range(50)}), "unknown key(s)"),
])
def test_hostile_pod_annotations_fail_every_node_with_the_reason(request_text, why):
    with pytest.raises(RequestError, match=re.escape(why)):
        request_from_pod(pod(request_text))
    result, ev = Extender(Scorer()).filter(args(pod(request_text)), "t")
    assert result["Nodes"]["items"] == [] and why in result["FailedNodes"]["good"]
    assert len(result["FailedNodes"]["good"]) <= 600 and len(ev.request_error) < 2000


# --------------------------------------------------------------------------- node annotations

many_devices = compact_json(synthetic.node("big", "hgx-h100", time=T0, count=MAX_DEVICES + 1))
sparse = json.loads(GOOD)
sparse["devices"] = [dict(sparse["devices"][0], links=[], identity=dict(sparse["devices"][0]["identity"], index=i,
                                                                         uuid=f"GPU-{i}")) for i in range(256)]
SPARSE_256 = json.dumps(sparse)


@pytest.mark.parametrize("text, why", [
    (DEEP, "annotation unreadable: $: not valid JSON: nested deeper than 64 levels"),
    ('{"schema": NaN}', "NaN is not a JSON number"),
    ('{"schema": Infinity}', "Infinity is not a JSON number"),
    ('{"schema": 1e999}', "too large"),
    ('{"schema": ' + "1" * 5000 + "}", "more than 4300 digits"),
    (doc_with(identity__driver_version="5" * 5000), "$.devices[0].identity.driver_version: 5000 characters"),
    (doc_with(identity__runtime_version="1." * 100), "identity.runtime_version: 200 characters"),
    (doc_with(identity__model="m" * 10_000), "identity.model: 10000 characters"),
    (doc_with(profile__model="A100", profile__cost_weight=-1.0), "$.devices[0].profile.cost_weight: -1 is negative"),
    (doc_with(profile__model="A100", profile__compute_units=-3.0), "profile.compute_units: -3 is negative"),
    (SPARSE_256, "$.devices: 256 whole devices, over the 64"),
    (many_devices, "over the 262144 Kubernetes allows"),  # 65 fully linked devices: 300 KiB of links
])
def test_a_hostile_node_annotation_fails_that_node_only(text, why):
    state = from_annotation("bad", text)
    assert state.error is not None and why in state.error and not state.groups
    ext = Extender(Scorer())
    for _ in range(2):  # the second call takes the decoded state from the cache
        result, _ = ext.filter(args(None, node("bad", text)), "t")
        assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["good"]
        assert result["FailedNodes"]["bad"].startswith("annotation unreadable: ") and why in result["FailedNodes"]["bad"]
        prio, _ = ext.prioritize(args(None, node("bad", text)), "t")
        scores = {h["Host"]: h["Score"] for h in json.loads(prio)}
        assert scores["bad"] == 0 and scores["good"] > 0


def test_the_most_devices_a_node_may_have_are_scored():
    doc = json.loads(compact_json(synthetic.node("wide", "hgx-h100", time=T0, count=MAX_DEVICES)))
    for dev in doc["devices"]:  # every pair linked is 600 KiB: keep a ring of fabric links
        dev["links"] = [link for link in dev["links"] if link["type"] == "nvlink"][:2]
    text = json.dumps(doc)
    assert len(text) < 256 * 1024
    ext = Extender(Scorer())
    for gpus in (4, MAX_DEVICES // 2 + 3, MAX_DEVICES):
        result, ev = ext.filter(args(pod(gpus=gpus), node("wide", text)), "t")
        assert "wide" in [n["metadata"]["name"] for n in result["Nodes"]["items"]]
        assert len(ev.decisions[1].devices) == gpus


def test_negative_readings_fail_the_node():
    doc = json.loads(GOOD)
    doc["devices"][3]["readings"]["utilization_ratio"] = {"value": -0.5}
    state = from_annotation("bad", json.dumps(doc))
    assert "$.devices[3].readings.utilization_ratio: -0.5 is negative" in state.error


# --------------------------------------------------------------------------- the greedy search

def _old_greedy(g, pool, k, vals, topology):
    """The search as it was before issue 18 (O(k^2 n) per seed): answers must not change."""
    for seed in pool:
        chosen = [seed]
        while len(chosen) < k:
            best_j, best_gain = None, -1.0
            for j in pool:
                if j in chosen:
                    continue
                if topology == "same-switch" and any(g.pair[j][c] < SWITCH_SCORE for c in chosen):
                    continue
                gain = sum(g.pair[j][c] for c in chosen) / len(chosen) + vals[j]
                if gain > best_gain:
                    best_j, best_gain = j, gain
            if best_j is None:
                break
            chosen.append(best_j)
        if len(chosen) == k:
            yield tuple(sorted(chosen))


@settings(max_examples=40, deadline=None)
@given(count=st.integers(11, 24), shape=st.sampled_from(["hgx-h100", "dgx1-v100", "atlas800-910b"]),
       loads=st.dictionaries(st.integers(0, 23), st.floats(0, 1), max_size=10),
       failed=st.sets(st.integers(0, 23), max_size=3), k=st.integers(2, 24),
       policy=st.sampled_from(["binpack", "spread"]), shared=st.booleans(),
       topology=st.sampled_from(["same-node", "same-switch", "same-fabric"]))
def test_the_faster_greedy_search_chooses_what_the_old_one_chose(count, shape, loads, failed, k, policy, shared,
                                                                  topology):
    snap = synthetic.node("n", shape, time=T0, count=count, loads=loads, health={i: "failed" for i in failed})
    state = from_annotation("n", compact_json(snap))
    scorer = Scorer()
    for g in state.group_list:
        if k <= len(g.every):
            new = scorer._greedy_best(g, g.every, k, policy, topology, shared)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(scorer_module, "_greedy", _old_greedy)
                assert new == scorer._greedy_best(g, g.every, k, policy, topology, shared)


# --------------------------------------------------------------------------- names and the ring

def test_long_names_are_clipped_in_logs_and_explain(caplog):
    caplog.set_level(logging.INFO, logger="hetero_exporter.scoring")
    huge = "p" * 2_000_000
    ext = Extender(Scorer())
    body = args(pod(name=huge, namespace="n" * 1_000_000), node("x" * 1_000_000, GOOD))
    result, ev = ext.filter(body, "t1")
    assert result["FailedNodes"]["x" * 1_000_000] == "node name of 1000000 characters, over the 253 Kubernetes allows (trace t1)"
    assert ev.pod == f"{'n' * NAME_CHARS}...(+{1_000_000 - NAME_CHARS} chars)/{'p' * NAME_CHARS}...(+{2_000_000 - NAME_CHARS} chars)"
    assert len(json.dumps(ext.explain("t1"))) < 10_000 and len(json.dumps(ext.explain(None))) < 2_000
    prio, _ = ext.prioritize(body, "t2")
    assert json.loads(prio)[1] == {"Host": "x" * 1_000_000, "Score": 0}
    assert len(ext._host_json) == 1  # only the real node name is kept
    records = [r for r in caplog.records if getattr(r, "trace", None) in ("t1", "t2")]
    assert len(records) == 2 and all(len(json.dumps(r.__dict__, default=str)) < 4_000 for r in records)
    # the names are clipped; what the ring holds is the one decoded node state per call (issue 25:
    # counted at its annotation's size, no longer at 100 B)
    assert ext.ring_bytes < 20_000 + 2 * len(GOOD)


def test_long_names_from_the_cache_are_clipped_too():
    from hetero_exporter.scoring.nodetable import NodeTable
    table = NodeTable(Scorer())
    table.replace({"good": GOOD})
    ext = Extender(Scorer(), table)
    body = json.dumps({"Pod": pod(), "NodeNames": ["good", "y" * 3_000_000]}).encode()
    result, _ = ext.filter(body, "t")
    assert result["NodeNames"] == ["good"] and len(result["FailedNodes"]["y" * 3_000_000]) <= 600
    assert len(json.dumps(ext.explain("t"))) < 10_000 and ext.ring_bytes < 20_000


def test_the_explain_ring_is_bounded_in_bytes():
    ring = 8_000_000  # 150 decoded nodes a call: ~2.3 MB each, counted at their annotations' size
    ext = Extender(Scorer(), traces=256, ring_bytes=ring)
    body = json.dumps({"Pod": pod(), "Nodes": {"items": [node(f"node-{i:04d}-" + "z" * 100, GOOD)
                                                         for i in range(150)]}}).encode()
    for i in range(25):
        ext.prioritize(body, f"t{i}")
        assert ext.ring_bytes <= ring
    kept = [t["trace"] for t in ext.explain(None)["traces"]]
    assert kept[0] == "t24" and 1 < len(kept) < 25
    assert ext.explain("t0") is None and len(ext.explain("t24")["nodes"]) == 150


def test_a_call_larger_than_the_ring_is_still_explained():
    ext = Extender(Scorer(), ring_bytes=1_000)
    ext.filter(args(), "only")
    assert ext.explain("only")["nodes"][0]["node"] == "good"


# --------------------------------------------------------------------------- never a 500

_keys = st.sampled_from(["Pod", "Nodes", "NodeNames", "items", "metadata", "name", "namespace", "annotations",
                         "spec", "containers", "initContainers", "resources", "limits", "requests",
                         "nvidia.com/gpu", "huawei.com/Ascend910", ANN, REQ, "x"])
_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
            | st.text(max_size=8))
_json = st.recursive(_scalars, lambda i: st.lists(i, max_size=3) | st.dictionaries(_keys, i, max_size=4),
                     max_leaves=25)
_annotation_keys = st.sampled_from(["count", "vendors", "compute_units", "memory_per_device", "features",
                                    "topology", "min_driver_version", "min_runtime_version", "policy", "shared"])
_pod_requests = st.dictionaries(_annotation_keys, _json, max_size=4).map(json.dumps) | st.text(max_size=30) | \
    st.sampled_from([DEEP[:200] + DEEP[-200:], "[" * 80, '{"count": NaN}', '{"count": 1e999}'])


def _mutate(doc, data, depth=0):
    """The annotation document with a few values replaced by arbitrary JSON."""
    if isinstance(doc, dict) and doc and depth < 6:
        key = data.draw(st.sampled_from(sorted(doc)))
        if data.draw(st.booleans()):
            doc[key] = data.draw(_json)
        else:
            _mutate(doc[key], data, depth + 1)
    elif isinstance(doc, list) and doc and depth < 6:
        at = data.draw(st.integers(0, len(doc) - 1))
        if data.draw(st.booleans()):
            doc[at] = data.draw(_json)
        else:
            _mutate(doc[at], data, depth + 1)
    return doc


def _answers(ext: Extender, body: bytes) -> None:
    """Both verbs answer or refuse the request (BadRequest); anything else fails the test."""
    for verb in (ext.filter, ext.prioritize):
        try:
            verb(body, "h")
        except BadRequest:
            pass


@settings(max_examples=200, deadline=None)
@given(doc=_json)
def test_random_bodies_are_answered_or_refused(doc):
    _answers(Extender(Scorer()), json.dumps(doc).encode())


@settings(max_examples=100, deadline=None)
@given(raw=st.binary(max_size=60) | st.text(alphabet="[]{}\",:\\0123456789.eEtrufalsnNI-", max_size=200)
       .map(str.encode))
def test_random_bytes_are_answered_or_refused(raw):
    _answers(Extender(Scorer()), raw)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=_pod_requests, data=st.data())
def test_random_annotations_fail_the_node_or_the_pod_never_the_call(request, data):
    text = json.dumps(_mutate(json.loads(GOOD), data)) if data.draw(st.booleans()) else data.draw(
        st.text(max_size=40) | st.sampled_from([DEEP, '{"schema": NaN}', '{"schema": 1, "devices": "x"}']))
    state = from_annotation("n", text)
    assert state.error is None or state.error.startswith("annotation unreadable: ")
    for the_pod in (pod(request), pod()):
        _answers(Extender(Scorer()), args(the_pod, node("n", text)))


def test_hostile_requests_through_the_server_get_400_not_500():
    server = ExtenderServer(("127.0.0.1", 0), Extender(Scorer())).start()
    try:
        conn = http.client.HTTPConnection(*server.address, timeout=30)
        for body in (b"[" * 100_000, b'{"Pod": NaN}', args(pod(DEEP), node("bad", DEEP)),
                     args(None, node("wide", SPARSE_256))):
            conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            answer = json.loads(r.read())
            assert r.status in (200, 400), answer
            if r.status == 200:
                assert all(why.startswith(("pod request unreadable", "annotation unreadable"))
                           for why in answer["FailedNodes"].values())
    finally:
        server.stop()
