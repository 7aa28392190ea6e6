"""Issue 25, item 6: body mode kept ~18 KiB per distinct node name ever seen, unbounded (56,000
names: 1.1 GiB). The table of nodes decoded from requests is bounded by count and by bytes,
least recently used out."""

from __future__ import annotations

from hetero_exporter.scoring import extender as ext_mod
from hetero_exporter.scoring.nodetable import NodeTable
from hetero_exporter.scoring.scorer import Scorer
from test_extender import annotations


def _text() -> str:
    anns = annotations()
    return anns[next(iter(anns))]


def test_the_table_keeps_at_most_its_count_and_bytes_least_recently_used_out():
    text = _text()
    t = NodeTable(Scorer(), precompute=False, limit=50, max_bytes=20 * len(text))
    t.state_for("keep", text)
    for i in range(200):
        t.state_for(f"n-{i}", text)
        t.state_for("keep", text)  # used all along: never the one evicted
    assert len(t) <= 20 and t.bytes <= 20 * len(text)
    assert t.get("keep") is not None and t.get("n-0") is None and t.get("n-199") is not None


def test_the_extender_bounds_its_request_table():
    e = ext_mod.Extender(Scorer(), None)
    assert e.decoded.limit == ext_mod.DECODED_NODES and e.decoded.max_bytes == ext_mod.DECODED_BYTES
    assert ext_mod.DECODED_BYTES <= 256 << 20  # under the deploy's memory limit with room to spare
