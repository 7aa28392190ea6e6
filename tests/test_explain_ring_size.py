"""Issue 25, item 18: the /explain ring estimated 100 B per node of a body-mode call, which really
keeps ~15 KB of decoded node states alive: 38 calls of 2,000 nodes reached 1.3 GiB. Body-mode
calls are now counted at their request's size, so the byte bound holds."""

from __future__ import annotations

import json

from hetero_exporter.scoring.extender import Extender
from hetero_exporter.scoring.scorer import Scorer
from test_extender import annotations, node_obj


def _body(n: int, tag: str) -> bytes:
    anns = annotations()
    names = list(anns)
    items = [node_obj(f"{tag}-{i}", anns[names[i % len(names)]]) for i in range(n)]
    pod = {"metadata": {"name": f"p-{tag}", "namespace": "ns", "uid": tag},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    return json.dumps({"Pod": pod, "Nodes": {"items": items}}).encode()


def test_body_mode_calls_are_counted_at_their_size_and_the_ring_stays_bounded():
    ring = 4 << 20
    ext = Extender(Scorer(), None, ring_bytes=ring)
    bodies = [_body(100, f"c{i}") for i in range(12)]  # ~1.6 MB each: far over 12 x 100 B a node
    for b in bodies:
        ext.filter(b)
    assert ext.ring_bytes <= ring
    assert ext.ring_bytes >= len(bodies[-1])  # the last call is kept and counted at its size
    kept = len(ext.explain(None)["traces"])
    assert kept <= ring // len(bodies[0]) < len(bodies), kept  # the oldest went: their states freed
