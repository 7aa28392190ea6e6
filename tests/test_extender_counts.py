"""Issue 25, items 13 and 16: hostile GPU counts in a pod (``-1``, ``1e9``, ``abc``, ``1.5``,
``NaN``, empty, the Arabic-Indic digit ``٣``) are refused with a reason on every node, never
answered as if valid."""

from __future__ import annotations

import json

import pytest

from hetero_exporter.scoring.request import RequestError, request_from_pod


def _pod(qty):
    return {"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": qty}}}]}}


@pytest.mark.parametrize("qty", ["-1", -1, "1e9", 1e9, "abc", "1.5", 1.5, "NaN", float("nan"), "", "٣", "３"])
def test_a_hostile_count_is_refused_with_its_reason(qty):
    with pytest.raises(RequestError) as e:
        request_from_pod(_pod(qty))
    assert "nvidia.com/gpu" in str(e.value)


@pytest.mark.parametrize("qty,count", [("2", 2), (8, 8), ("1e1", 10), ("1024", 1024)])
def test_plain_counts_still_read(qty, count):
    assert request_from_pod(_pod(qty)).count == count


def test_the_extender_refuses_every_node_with_the_reason():
    from hetero_exporter.scoring.extender import Extender
    from hetero_exporter.scoring.nodetable import NodeTable
    from hetero_exporter.scoring.scorer import Scorer
    scorer = Scorer()
    ext = Extender(scorer, NodeTable(scorer))
    body = json.dumps({"Pod": _pod("٣"), "NodeNames": ["a", "b"]}, ensure_ascii=False).encode()
    answer, _ = ext.filter(body)
    failed = answer.get("FailedNodes") or {}
    assert set(failed) == {"a", "b"} and all("not a Kubernetes quantity" in why for why in failed.values()), answer
