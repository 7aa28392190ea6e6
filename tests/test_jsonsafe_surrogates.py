"""Issue 25, item 16: a lone surrogate in a node or pod name (a ``\\udc00`` escape in the request)
made the msgspec encoder raise, so /filter answered 500 and /explain kept failing while that call
stayed in its ring. Answers are written whatever strings the request carried."""

from __future__ import annotations

import json

import pytest

from hetero_exporter.scoring import jsonsafe


@pytest.mark.parametrize("text", ["\udc00", "gpu-\ud800-node", "ok-é"])
def test_an_answer_with_any_string_is_valid_json(text):
    doc = {"NodeNames": [text], "FailedNodes": {text: "why"}, "Error": ""}
    out = jsonsafe.dumps(doc)
    assert json.loads(out) == doc


def test_the_extender_answers_a_node_named_with_a_lone_surrogate():
    from hetero_exporter.scoring.extender import Extender
    from hetero_exporter.scoring.nodetable import NodeTable
    from hetero_exporter.scoring.scorer import Scorer
    scorer = Scorer()
    ext = Extender(scorer, NodeTable(scorer))
    pod = {"metadata": {"name": "p\ud800", "namespace": "ns"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    body = json.dumps({"Pod": pod, "NodeNames": ["a\udc00"]}).encode()  # \\u escapes, as a client sends
    answer, _ = ext.filter(body)
    assert set(json.loads(jsonsafe.dumps(answer))["FailedNodes"]) == {"a\udc00"}
    recent = ext.explain(None)  # the ring of recent calls lists the pod named with \ud800
    assert json.loads(jsonsafe.dumps(recent))["traces"]
