"""sdk.tables: the generic box-table reader on other vendors' captures, and the link matrix."""

from __future__ import annotations

import pytest

from conftest import shared_fixture
from hetero_exporter.sdk import tables
from hetero_exporter.sdk.contract import ParseError


@pytest.mark.parametrize("tool,name", [("mx-smi", "default_8x-metax-c550_mx-smi-2.1.6.txt"),
                                       ("efsmi", "default_2x-enflame-s60_efsmi-1.2.0.301.txt"),
                                       ("xpu-smi", "xpu_smi_2x-kunlunxin-r300.txt")])
def test_rows_and_cells_split_on_other_vendors_captures(tool, name):
    text = shared_fixture(tool, name).read_text()
    lines = tables.box_lines(text, tool, strict=False)
    rows = [ln for ln in lines if ln.kind == "row"]
    assert rows and any(ln.kind == "border" for ln in lines)
    for r in rows:  # every row's cells are what lies between its bars
        assert "|".join(r.cells) == r.text[1:-1]
    assert len(tables.records(lines)) >= 2


def test_mx_smi_device_rows_under_its_header():
    text = shared_fixture("mx-smi", "default_8x-metax-c550_mx-smi-2.1.6.txt").read_text()
    recs = tables.records(tables.box_lines(text, "mx-smi", strict=False))
    vocab = (("Memory-Usage", "mem"), ("GPU-Util", "util"), ("Bus-id", "bus"), ("Power", "power"),
             ("Temp", "temp"), ("NAME", "name"), ("GPU", "gpu"))
    head = next(r for r in recs if "Bus-id" in r[0].text)
    labels = tables.header_labels(head, vocab)
    devs = [r for r in recs if len(r) == 2 and r[0].cells[0].split()[:1] and r[0].cells[0].split()[0].isdigit()]
    assert len(devs) == 8
    v = tables.record_values(devs[0], labels, "mx-smi")
    assert v["gpu"][0] == "0" and v["bus"][0] == "0000:2a:00.0" and v["mem"][0] == "810/65536 MiB"


def test_matrix_of_a_real_topo_capture():
    text = shared_fixture("mx-smi", "mx-smi-topo-m_8x-C500_mx-smi-2.2.9.txt").read_text()
    m = tables.parse_matrix(text, "mx-smi topo -m", r"GPU\d+")
    assert m.names == tuple(f"GPU{i}" for i in range(8))
    assert m.cells[("GPU0", "GPU1")] == "MX" and m.cells[("GPU0", "GPU4")] == "NODE"
    assert m.extra["GPU7"] == {"Node Affinity": "0", "CPU Affinity": "0-31,64-95"}
    assert len(tables.pairs(m, ["MX"])) == 2 * 4 * 3
    assert "MX" in m.legend


@pytest.mark.parametrize("text", ["", "GPU0 GPU1\nGPU0 X\n", "| a |\nnot a table\n"])
def test_malformed_is_a_parse_error(text):
    with pytest.raises(ParseError):
        tables.parse_matrix(text, "t")
        tables.box_lines(text, "t")


# --------------------------------------------------------------------------- fuzzing
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cli_fakes import mutated  # noqa: E402
from conftest import shared_fixtures  # noqa: E402

_BOXES = [p.read_text() for tool in ("nvidia-smi", "npu-smi", "cnmon", "mx-smi") for p in shared_fixtures(tool)
          if "|" in p.read_text()][:12] or ["+---+\n| a | b |\n+---+\n"]
_MATRICES = [p.read_text() for tool in ("mx-smi", "nvidia-smi") for p in shared_fixtures(tool, "*topo*")] or [
    "      GPU0  GPU1\nGPU0  X     NV4\nGPU1  NV4   X\n"]
_FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _tool_error(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except ParseError as e:
        assert str(e).startswith("t") and len(str(e)) > len("t: "), e
        return None


@_FUZZ
@given(st.one_of(st.text("| +-=:/%.\nGPU0123456789 N/AMiBW", max_size=400), mutated(_BOXES, "|+ :-x9", "| +-0")))
def test_fuzz_box_lines_and_records(text):
    lines = _tool_error(tables.box_lines, text, "t")
    if lines is not None:
        tables.records(lines)
    _tool_error(tables.box_lines, text, "t", strict=False)


@_FUZZ
@given(st.one_of(st.text(" \t\nGPU0123456789XNV4PIXSYS", max_size=400), mutated(_MATRICES, " X9GPU\t", " GPU0X")))
def test_fuzz_parse_matrix(text):
    m = _tool_error(tables.parse_matrix, text, "t", r"GPU\d+")
    if m is not None:
        tables.pairs(m, ("NV4", "NV18", "MX"))


# --------------------------------------------------------------------------- nvidia-smi-style summaries
# (issue 37: one reader for nvidia-smi, ixsmi and xpu-smi 5.x)

_SUMMARY = """\
Tue Jan  1 00:00:00 2030
+------------------------------------------+
| TOOL-SMI 1.0   Driver Version: 2.0       |
|-------------------------------+----------|
| GPU  Name                     | Bus-Id   |
| Fan  Temp                     | Memory   |
|===============================+==========|
|   0  Card A                   | 01:00.0  |
|  5%  40C                      | 1MiB     |
|   1  Card B                   | 02:00.0  |
|  6%  41C                      | 2MiB     |
+-------------------------------+----------+
+------------------------------------------+
| Processes:                               |
|  GPU   PID   Process name    GPU Memory  |
|                              Usage       |
|==========================================|
|    0   123   /usr/bin/my app    500 MiB  |
|    1   456   python              20MiB   |
+------------------------------------------+
"""
_SUMMARY_LABELS = (("Bus-Id", "bus"), ("Memory", "mem"), ("Name", "name"), ("Temp", "temp"), ("Fan", "fan"),
                   ("GPU", "gpu"))
_SUMMARY_PROCS = (("Process name", "name"), ("GPU Memory", "memory"), ("Usage", "memory"), ("PID", "pid"),
                  ("GPU", "gpu"))


def test_device_table_cuts_the_devices_under_their_header():
    t = tables.device_table(_SUMMARY, "t", _SUMMARY_LABELS)
    assert "Driver Version: 2.0" in t.title and t.banner() == ["Tue Jan  1 00:00:00 2030"]
    assert len(t.header_rows) == 2 and [len(p) for p in t.devices] == [2, 2]  # two devices, one record
    v = tables.record_values(t.devices[1], t.header, "t")
    assert v["gpu"][0] == "1" and v["bus"][0] == "02:00.0" and v["mem"][0] == "2MiB" and v["temp"][0] == "41C"
    rows = tables.process_rows(t.rest, "t", _SUMMARY_PROCS)
    assert [(r.words["gpu"], r.words["pid"], r.name, r.words["memory"]) for r in rows] == [
        ("0", "123", "/usr/bin/my app", "500MiB"), ("1", "456", "python", "20MiB")]


@pytest.mark.parametrize("text, msg", [
    ("| GPU | x |\n|===|\n| 0 | 1 |\n", "no device header"),
    (_SUMMARY.replace("|  6%  41C                      | 2MiB     |\n", ""), r"record of 3 row\(s\) under a header of 2"),
    (_SUMMARY.replace("GPU   PID", "XPU   PID"), "process header without GPU and PID"),
    (_SUMMARY.replace("   456   python", "   python"), "process row with 3 words under 4 labels"),
])
def test_device_table_and_process_rows_refuse_what_is_no_summary(text, msg):
    with pytest.raises(ParseError, match=msg):
        t = tables.device_table(text, "t", _SUMMARY_LABELS)
        tables.process_rows(t.rest, "t", _SUMMARY_PROCS)


def test_device_table_bounds_the_devices():
    device = "|   0  Card A                   | 01:00.0  |\n|  5%  40C                      | 1MiB     |\n"
    text = _SUMMARY.split("|===")[0] + "|====|\n" + device * (tables.MAX_DEVICES + 1)
    with pytest.raises(ParseError, match="more than 1024 devices"):
        tables.device_table(text, "t", _SUMMARY_LABELS)


def test_process_rows_in_the_header_record_only_when_asked():
    """xpu-smi draws no rule under its process header: its rows share the header's record."""
    box = ("+---------------------------------+\n| Processes:                      |\n"
           "|  XPU   PID   Process name       |\n|    0   123   app                |\n"
           "+---------------------------------+\n")
    labels = (("Process name", "name"), ("PID", "pid"), ("XPU", "xpu"))
    recs = tables.records(tables.box_lines(box, "t"))
    assert tables.process_rows(recs, "t", labels, device="xpu") == []
    rows = tables.process_rows(recs, "t", labels, device="xpu", same_record=True)
    assert [(r.words, r.name) for r in rows] == [({"xpu": "0", "pid": "123"}, "app")]


@_FUZZ
@given(mutated([_SUMMARY], "| +-=:/%.9MiB", "| 0x"))
def test_fuzz_device_table_and_process_rows(text):
    t = _tool_error(tables.device_table, text, "t", _SUMMARY_LABELS)
    if t is not None:
        for part in t.devices:
            _tool_error(tables.record_values, part, t.header, "t")
        _tool_error(tables.process_rows, t.rest, "t", _SUMMARY_PROCS)
