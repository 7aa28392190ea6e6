"""sdk.blocks: key : value blocks, sections, and values that continue on the next lines."""

from __future__ import annotations

import re

import pytest
from conftest import shared_fixtures

from hetero_exporter import registry
from hetero_exporter.collectors.ascend.npu_smi import parse as P
from hetero_exporter.sdk import blocks
from hetero_exporter.sdk.contract import ParseError


def test_multi_line_health_fields_belong_to_their_key():
    text = ("\tHealth Status                  : Alarm\n"
            "\tError Code                     : 80E18005 80C98000\n"
            "\t                                 80CB8009\n"
            "\tError Information              : node type=HBMC, sensor type=Memory, event state=ECC;\n"
            "node type=SOC, time: 2024-01-01 12:00:00\n")
    (b,) = blocks.read_blocks(text, "npu-smi")
    assert b.get("error code") == "80E18005 80C98000\n80CB8009"
    assert b.get("error information").splitlines()[1].startswith("node type=SOC")
    h = P.health_detail(P.parse_detail(text, "health"))
    assert h.codes == ("80E18005", "80C98000", "80CB8009") and h.state == "Alarm"


def test_sections_and_repeated_blocks():
    import re
    text = ("Card 0\nProduct Name    : MLU370-X8\nPCI\n    Bus Id      : 0000:1A:00.0\n"
            "Physical Memory Usage :\n    Total       : 48 MiB\nCard 1\nProduct Name    : MLU370-X8\n")
    bs = blocks.read_blocks(text, "cnmon info", blank_separates=False, block_start=re.compile(r"^Card \d+$"))
    assert [b.header for b in bs] == ["Card 0", "Card 1"]
    assert bs[0].paths()["pci/bus id"] == "0000:1A:00.0"
    assert bs[0].paths()["physical memory usage/total"] == "48 MiB"


@pytest.mark.parametrize("path", shared_fixtures("npu-smi", "*info-t-*"), ids=lambda p: p.name)
def test_every_real_detail_capture_reads(path):
    text = path.read_text()
    if "Invalid" in text.splitlines()[0] if text.strip() else True:
        pytest.skip("an error message")
    kind = P.detect(text).split()[-1]
    if kind == "proc-mem":
        pytest.skip("not key : value")
    if kind == "topo":
        # -t topo is a link matrix (a header of NPUn names, a row per NPU, a Legend), read by
        # the npu-smi topo parser through sdk.tables.parse_matrix, not by the key : value
        # reader: that one refuses it, and the tool's parser reads it to links between the
        # NPUs its header names
        with pytest.raises(ParseError):
            P.parse_detail(text, kind)
        topo = registry.parser("npu-smi")(text).data
        header = [int(n) for n in re.findall(r"NPU(\d+)", text.strip().splitlines()[0])]
        assert list(topo.npus) == header and topo.links
        assert all(a != b and {a, b} <= set(header) for a, b, _ in topo.links)
        return
    assert P.parse_detail(text, kind).to_dict()


# --------------------------------------------------------------------------- fuzzing

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cli_fakes import mutated  # noqa: E402

_KV = [p.read_text() for p in shared_fixtures("npu-smi", "info-t-*")][:12] or [
    "Card 0\nProduct Name : X\nPower :\n    Usage : 1 W\n"]
_CARD = re.compile(r"^\s*Card\s*:?\s*(\d+)\s*:?\s*$", re.I)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(" \t\n:=,;CardKeyValueNPUChip0123456789 N/A()%", max_size=400),
                 mutated(_KV, " :\t=9N", " Key : 1\n")),
       st.booleans())
def test_fuzz_read_blocks(text, repeated):
    try:
        got = (blocks.read_blocks(text, "t", blank_separates=not repeated, block_start=_CARD if repeated else None))
    except ParseError as e:
        assert str(e).startswith("t: ") and len(str(e)) > len("t: "), e
        return
    for b in got:
        b.as_dict(), b.paths()
        assert all(e.path and e.key == e.path[-1] for e in b.entries)
    blocks.merged(got)
