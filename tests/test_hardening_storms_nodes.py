"""Issue 35 item 9 (extender): the body-mode node table (nodeCacheCapable false: whole Node objects
in each request, their decoded states kept for reuse) was bounded by its annotations' text bytes,
but a small annotation can decode to a large state (7.7 KB of 64 bare devices: 115 KB). It is
bounded by count and by the states' estimated bytes, least recently used out, evictions counted."""

from __future__ import annotations

import gc
import json
import tracemalloc

from hetero_exporter.scoring import extender as ext_mod
from hetero_exporter.scoring.nodes import state_bytes
from hetero_exporter.scoring.nodetable import NodeTable
from hetero_exporter.scoring.scorer import Scorer
from test_extender import annotations, node_obj, pod


def bare(devices: int) -> str:
    """An annotation of ``devices`` GPUs with nothing but what the decoder requires."""
    devs = [{"identity": {"index": i, "kind": "gpu", "model": "H100-SXM5-80GB", "uuid": f"GPU-{i}", "vendor": "nvidia"},
             "timestamp": 1764400000.0} for i in range(devices)]
    return json.dumps({"schema": 1, "node": "x", "time": 1764400000.0, "devices": devs}, separators=(",", ":"))


def grown(table: NodeTable, names: list[str], text: str) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for name in names:
            table.state_for(name, text)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_the_table_holds_no_more_memory_than_its_bytes_bound():
    bound = 2 << 20
    t = NodeTable(Scorer(), precompute=False, limit=1_000_000, max_bytes=bound)
    t.state_for("warm", bare(64))
    used = grown(t, [f"n-{i}" for i in range(120)], bare(64))  # 120 x 7.7 KB of text: 0.9 MiB
    assert used <= bound  # before: all 120 kept, 13 MiB
    assert t.bytes <= bound and len(t) < 120
    assert t.evicted == 121 - len(t)


def test_the_estimate_is_at_or_above_what_a_state_holds():
    texts = [bare(1), bare(8), bare(64), *annotations().values()]
    for text in texts:
        t = NodeTable(Scorer(), precompute=False, limit=1_000_000, max_bytes=1 << 40)
        t.state_for("warm", text)
        n = 50
        per_state = grown(t, [f"n-{i}" for i in range(n)], text) / n
        weight = t.get("n-0").weight
        assert weight == state_bytes(t.get("n-0"), len(text))
        assert per_state <= weight <= 2 * per_state + 4096, (len(text), per_state, weight)


def test_the_extender_counts_evictions_and_the_explain_ring_weighs_states(monkeypatch):
    monkeypatch.setattr(ext_mod, "DECODED_BYTES", 1 << 20)
    e = ext_mod.Extender(Scorer(), None)
    text = bare(64)
    items = [node_obj(f"node-{i}", text) for i in range(40)]
    e.filter(json.dumps({"Pod": pod(), "Nodes": {"items": items}}).encode())
    weight = e.decoded.get("node-39").weight
    assert weight > 10 * len(text)
    assert e.decoded.evicted == 40 - len(e.decoded) > 0
    assert e.ring_bytes >= 40 * weight  # the call keeps all 40 states alive: counted at their weight
    exposition = e.metrics.render()[0].decode()
    assert f'accelerator_extender_nodes_evicted_total{{cache="request"}} {float(e.decoded.evicted)}' in exposition
    assert f'accelerator_extender_nodes_cached_bytes{{cache="request"}} {float(e.decoded.bytes)}' in exposition
