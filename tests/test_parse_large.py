"""Large and hostile captures (issue 18, "parse input"): the parsers stay linear.

Nothing here is timed (speed figures: benchmarks/parse_large.py, BENCHMARKS.md). Instead:

- a real capture saved N times over in one file gives N times its devices, or the documented
  answer (the first JSON object, detail blocks merged, the first table or matrix, each GPU's
  last monitor sample, N times a list of records, or a ParseError);
- the shapes that were quadratic or worse (long blank runs in a line, runs of ``(`` or ``e``,
  thousands of continuation lines, repeated keys, many processes) give their answer. Each runs
  in a forked child under a generous bound, so a regression fails as "did not finish" (the old
  code took minutes to hours on these inputs) instead of hanging the suite;
- the rewritten patterns agree with the ones they replace on short random lines (hypothesis).
"""

from __future__ import annotations

import os
import pickle
import re
import select
import signal
from typing import Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SHARED_ABSENT, shared_fixtures
from hetero_exporter import registry
from hetero_exporter.collectors.amd.amd_smi import parse as amd
from hetero_exporter.sdk.rocm_family import parse as rocm
from hetero_exporter.collectors.ascend.npu_smi import parse as npu
from hetero_exporter.collectors.cambricon.cnmon import parse as cnmon
from hetero_exporter.collectors.enflame.efsmi import parse as efsmi
from hetero_exporter.collectors.iluvatar.ixsmi import parse as ixsmi
from hetero_exporter.collectors.kunlunxin.xpu_smi import parse as xpu
from hetero_exporter.collectors.metax.mx_smi import parse as mx
from hetero_exporter.collectors.mthreads.gmi import parse as gmi
from hetero_exporter.collectors.nvidia.nvidia_smi import parse as nv
from hetero_exporter.model import to_dict
from hetero_exporter.sdk import blocks, tables, values
from hetero_exporter.sdk.contract import ParseError

BOUND_SECONDS = 120  # a hang guard: each case takes well under a second


def finishes(fn, *args):
    """``fn(*args)`` in a forked child: its value (pickled back) or the exception it raised.
    Fails the test when the child has not answered within BOUND_SECONDS (killed then)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compute, send, leave without running the parent's cleanups
        os.close(r)
        try:
            try:
                out = ("value", fn(*args))
            except ParseError as e:  # not picklable as is: its parts
                out = ("parse", (e.tool, str(e), e.line))
            except Exception as e:  # noqa: BLE001 - sent back to the parent
                out = ("error", e)
            data = pickle.dumps(out)
        except Exception as e:  # noqa: BLE001 - an unpicklable value
            data = pickle.dumps(("error", RuntimeError(f"unpicklable: {e}")))
        with os.fdopen(w, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(w)
    chunks = []
    with os.fdopen(r, "rb") as f:
        while True:
            ready, _, _ = select.select([f], [], [], BOUND_SECONDS)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail(f"{getattr(fn, '__name__', fn)} did not finish within {BOUND_SECONDS} s (super-linear?)")
            chunk = os.read(f.fileno(), 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    os.waitpid(pid, 0)
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "parse":
        tool, text, line = value
        e = ParseError(tool, "", line)
        e.args = (text,)  # the child's message as it was
        raise e
    if kind == "error":
        raise value
    return value


# --------------------------------------------------------------------------- repeated captures

CAPTURES = [(p.parent.name, p) for tool in sorted(registry.parsers()) if tool != "kernel-log"
            for p in shared_fixtures(tool)]


def repeated_answer(tool: str, name: str) -> str:
    """What a capture saved N times over gives: ``times`` (N x its devices, or every list of a
    non-device answer N times over), ``same`` (the answer of one copy), ``merged`` (read, the
    copies run together: detail blocks not separated by a blank line, a matrix legend that
    takes in what follows it; a non-device answer still holds every value of one copy),
    ``listed`` (a list of records: the records N times over, its count N times) or ``refused``
    (ParseError)."""
    if tool == "cgroup":
        return "same"  # the process's cgroup lines: the same lines again
    if tool in ("hy-smi", "rocm-smi"):
        # the first JSON object is read; ``GPU[n] : key: value`` lines (every ``--show...``
        # option: showmeminfo, showbus, showmemavailable) merge by index, so a copy repeats
        # the same keys of the same cards; the concise table keeps every row
        return "same" if name.endswith(".json") or "show" in name else "times"
    if tool == "nvidia-smi":
        if re.match(r"(?:nvidia-smi-)?q_", name):
            return "times"  # -q text: one section per GPU (by its PCI bus line), each read
        if re.match(r"(?:dmon|pmon)-", name):
            # samples: each GPU's last row (pmon: its last sample, a pid seen again starts the
            # next one) wins, so the last copy's rows give the same devices as one copy
            return "same"
        if re.match(r"(?:nvidia-smi-)?topo-m", name):
            return "same"  # the Legend ends the matrix: the copies after it are not read
        return "refused"  # the default table or -L lists a GPU twice; CSV repeats its header; XML extra data
    if tool == "npu-smi":
        for part, answer in (("info-l", "times"), ("proc-mem", "times"), ("flash", "merged"),
                             # -t product ends on a chip block: the next copy's NPU ID / Chip
                             # Count lines join it (no blank line between), as -t flash
                             ("info-t-product", "merged"),
                             # the copies run into one block: each Fault Event Count line adds
                             # (as a card's per-chip counts are summed), each Fault Event
                             # Information line is an event, so the count still tells the events
                             ("current-fault-event", "listed"),
                             ("info-t-", "same")):
            if part in name:
                return answer  # -t blocks merge, the first value winning; -l and proc-mem list
        return "refused"  # the table lists a chip twice, -m a second header as a row
    if tool == "mx-smi":
        return "merged" if "topo-m" in name else "same"  # the first GPU table, the first matrix
    if tool == "mthreads-gmi":
        # the first table is read, up to its closing border or the ``...`` of an elided rest;
        # these two captures are cut inside a GPU's row group, so the next copy's banner lands
        # in a device row
        truncated_inside = "S4000" in name or "gmi-2.3.2" in name
        return "refused" if "TRUNCATED" in name and truncated_inside else "same"
    if tool == "dcgmi":
        # dmon samples: the header again is skipped and each GPU's newest numeric sample wins,
        # so the copies give the same GPUs and values
        return "same"
    if tool == "amd-smi" and "monitor" in name:
        # monitor -w prints the header and a row per GPU each round: the header again is
        # skipped and a GPU's row of the last round wins (with an XCP column its first row in
        # the text is kept), so the copies give the same GPUs and values
        return "same"
    return "refused"  # a device printed twice, a second banner inside the table, JSON with extra data


def _summary(result) -> tuple[Optional[int], dict]:
    """(devices, or None for another answer; the answer as a dict): what the child sends back."""
    doc = result.to_dict() if hasattr(result, "to_dict") else to_dict(result)
    return (len(result.devices) if hasattr(result, "devices") else None), doc


def _times(doc, n: int):
    """``doc`` with every list (or tuple) in it n times over."""
    if isinstance(doc, (list, tuple)):
        return type(doc)(_times(x, n) for x in doc) * n
    if isinstance(doc, dict):
        return {k: _times(v, n) for k, v in doc.items()}
    return doc


def _listed(doc, n: int):
    """``doc`` with each list of records (not the lists inside a record) n times over and
    each ``count`` n times."""
    if isinstance(doc, (list, tuple)):
        return type(doc)(doc) * n
    if isinstance(doc, dict):
        return {k: (v * n if k == "count" and isinstance(v, int) else _listed(v, n)) for k, v in doc.items()}
    return doc


def _holds(big, small) -> bool:
    """Whether ``big`` holds every key of ``small`` with the same value (dicts compared key by
    key, anything else equal): what merged copies keep of one copy."""
    if isinstance(small, dict):
        return isinstance(big, dict) and all(k in big and _holds(big[k], v) for k, v in small.items())
    return big == small


@pytest.mark.skipif(not CAPTURES, reason=SHARED_ABSENT)
@pytest.mark.parametrize("tool,path", CAPTURES, ids=[f"{t}/{p.name}" for t, p in CAPTURES])
def test_a_capture_saved_many_times_over(tool, path):
    text = path.read_text(encoding="utf-8", errors="replace")
    text += "" if text.endswith("\n") else "\n"
    parse = registry.parser(tool)
    n = max(3, min(200, 100_000 // len(text)))
    try:
        devices, doc = _summary(parse(text))
    except ParseError:
        with pytest.raises(ParseError):
            finishes(parse, text * n)
        return
    answer = repeated_answer(tool, path.name)
    if answer == "refused":
        with pytest.raises(ParseError):
            finishes(lambda: _summary(parse(text * n)))
        return
    many_devices, many = finishes(lambda: _summary(parse(text * n)))
    if answer == "times" and devices is not None:
        assert many_devices == n * devices
    elif answer == "times":
        assert many == _times(doc, n)
    elif answer == "same":
        assert many == doc
    elif answer == "listed":
        assert many == _listed(doc, n)
    elif devices is not None:  # merged
        assert many_devices == devices
    else:
        assert _holds(many, doc), "a value of one copy was lost or changed"


# --------------------------------------------------------------------------- hostile shapes


def test_a_key_line_with_a_million_blanks():
    # npu-smi's detector read every line with a pattern that retried a long blank run at each
    # blank (hours for this line); the reader refuses the line as too long
    with pytest.raises(ParseError, match="not an npu-smi output|characters"):
        finishes(registry.parser("npu-smi"), "NPU ID : 0\nHealth : x" + " " * 1_000_000 + "y\n")
    assert finishes(blocks.key_of, "Health : x" + " " * 1_000_000 + "y") == "health"


def test_wide_key_value_lines_under_the_line_limit():
    text = "NPU ID : 0\nChip Count : 1\n" + ("Board ID : x" + " " * 4000 + "y\n") * 1000
    doc = finishes(npu.parse_detail, text, "board")
    assert doc.card["board id"].startswith("x") and doc.card["board id"].endswith("y")


def test_a_value_continued_on_99000_lines():
    # each continuation line looked ahead through a copy of the rest of the text, and the value
    # was rebuilt per line: both quadratic (the copies add up to a terabyte here)
    head = "NPU ID : 0\nHealth Status : Alarm\nError Code : 80E18005\n"
    text = head + ("80C98000 " * 22 + "\n") * 99_000

    def read():
        doc = npu.parse_detail(text, "health")
        return doc.card["error code"].count("\n"), npu.health_detail(doc).codes

    assert finishes(read) == (99_000, ("80E18005", "80C98000"))
    with pytest.raises(ParseError, match=f"more than {tables.MAX_LINES} lines"):
        npu.parse_detail(head + "80C98000\n" * tables.MAX_LINES, "health")


def test_the_line_limit_counts_every_line_end_python_splits_on():
    assert len(tables.lines_of("a\n" * tables.MAX_LINES, "t")) == tables.MAX_LINES
    for end in ("\n", "\x0b", "\x1c", "\u2028"):
        with pytest.raises(ParseError, match="more than"):
            tables.lines_of("a" + end * (tables.MAX_LINES + 1) + "a", "t")


def test_sections_nested_past_the_limit_are_refused():
    text = "".join(" " * i + f"k{i} :\n" for i in range(blocks.MAX_DEPTH + 5)) + " " * 99 + "x : 1\n"
    with pytest.raises(ParseError, match="nested more than"):
        blocks.read_blocks(text, "t")


def test_a_wide_header_cell_and_wide_data_cells():
    # every value scanned every label for the nearest: quadratic in the width, per row
    labels = tables.cell_labels("".join(f"a{i:04d}  " for i in range(2000)), ())
    data = "".join(f"x{i:04d}  " for i in range(2000))
    last = finishes(lambda: [tables.cell_values(data, labels) for _ in range(500)][-1])
    assert last == {f"?a{i:04d}": f"x{i:04d}" for i in range(2000)}


def test_cnmon_cells_and_process_rows_with_long_runs():
    spec = cnmon._cell_pattern("Card  VF  Fan")  # a digit run split every way between card and VF: cubic
    with pytest.raises(ParseError, match="does not match its header"):
        finishes(cnmon._cell_values, "1" * 3000 + "x", spec, 1)
    assert finishes(cnmon._proc_row, "0 / 1 a" + " " * 200_000 + "!") is None
    assert finishes(cnmon._proc_row, "0 / 1 a" + " " * 200_000 + "7 MiB") == (0, "/", 1, "a", 7)
    assert finishes(lambda: cnmon._CARD_HEAD.match("Card" + " " * 200_000 + "x")) is None


def test_long_runs_in_the_other_vendors_fields():
    assert finishes(gmi._proc_row, "0 1 a" + " " * 200_000 + "!") == ("0", "1", "a", "!")
    assert finishes(lambda: gmi._MEM.match("(" * 200_000)) is None
    assert finishes(lambda: ixsmi._VERSIONS["ml"].search("IXSMI" + " " * 20_000 + "x")) is None
    assert finishes(efsmi.detect, "DEV ID" + " " * 1_000_000 + "x\n") == "efsmi"
    assert finishes(lambda: efsmi._KV.match("Key :" + " " * 200_000 + "!").group(2).strip()) == "!"
    assert finishes(values.unit_after_number, "1" + "e" * 200_000 + "!") == ""
    assert finishes(xpu._unit_label, "(" * 200_000 + ")") == ("", "(" * 199_999)
    assert finishes(lambda: amd._KV.match("    Key:" + " " * 200_000 + "!").group("value")) == "!"
    assert finishes(lambda: nv._TEXT_KV.match("    Key :" + " " * 200_000 + "!").group("value")) == "!"
    with pytest.raises(ParseError, match="no matrix header"):
        finishes(mx.parse_topo, "\n" * 2_000_000)
    with pytest.raises(ParseError, match="characters"):
        finishes(rocm.parse_concise, "GPU Temp\n0 1\n" + "end of " * 200_000 + "\n")
    assert finishes(rocm._end_of_log, "end of " * 200_000) is False
    assert finishes(npu._proc_mem_line, "Process id:1 Process name:" + " " * 200_000 + "x") is None


def test_many_pid_lines_repeated_keys_and_processes():
    got = finishes(rocm.parse_pid_gpus, "PID 1 is using 1 DRM device(s):\n" * 200_000)
    assert got == {1: ()}
    tree = finishes(amd._text_blocks, "GPU: 0\n    A: 1\n" + "    A: 2\n" * 300_000)
    assert len(tree[0].tree["a"]) == 300_001
    report = ("GPU 00000000:18:00.0\n    Product Name : X\n    GPU UUID : GPU-1\n    Processes\n"
              + "".join(f"        Process ID : {i}\n            Type : C\n" for i in range(50_000)))
    assert finishes(lambda: len(nv.parse_text_devices(report)[0][0].processes)) == 50_000
    apps = "pid, process_name, gpu_uuid, used_gpu_memory [MiB]\n" + "".join(
        f"{i}, p, GPU-1, 1 MiB\n" for i in range(50_000))
    assert finishes(lambda: len(nv._apps_snapshot(apps).devices[0].processes)) == 50_000


def test_more_devices_than_a_node_has_are_refused():
    row = "0       54.0c  80.0W   1801Mhz  1200Mhz  0%   auto  300.0W   5%     0%\n"
    concise = "GPU  Temp   AvgPwr  SCLK     MCLK     Fan  Perf  PwrCap  VRAM%  GPU%\n" + row * (tables.MAX_DEVICES + 1)
    with pytest.raises(ParseError, match=f"more than {tables.MAX_DEVICES} devices"):
        finishes(rocm.parse_concise, concise)
    assert len(rocm.parse_concise(concise.rsplit(row, 1)[0]).cards) == tables.MAX_DEVICES
    report = "".join(f"GPU 00000000:{i // 256:02X}:{i % 256:02X}.0\n    Product Name : X\n"
                     for i in range(tables.MAX_DEVICES + 1))
    with pytest.raises(ParseError, match="more than"):
        finishes(nv.text_document, report)


def test_a_repeated_csv_header_is_refused_not_read_as_a_gpu():
    text = "index, name, uuid\n0, L40S, GPU-1\n"
    assert len(nv.parse_csv_devices(text)[0]) == 1
    with pytest.raises(ParseError, match="the header again"):
        nv.parse_csv_devices(text * 2)


# --------------------------------------------------------------------------- rewritten patterns


# the patterns as they were (quadratic on long runs); the rewrites must read short lines alike
OLD_KV = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z][^:=,;]{0,80}?)\s*:(?:\s+(?P<value>.*?))?\s*$")
OLD_NV_KV = re.compile(r"^(?P<indent> *)(?P<key>[^:\s][^:]{0,100}?)\s*:(?:\s+(?P<value>.*?))?\s*$")
OLD_AMD_KV = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z][\w .()/%\-]{0,80}?)\s*:(?:\s+(?P<value>.*?))?\s*$")
OLD_EF_KV = re.compile(r"^\s*([A-Za-z][^:]{0,60}?)\s*:\s*(.*?)\s*$")
OLD_CNMON_PROC = re.compile(r"^\s*(\d+)\s+(\S+)\s+(\d+)\s+(.*?)\s*(\d+|N/A)\s*MiB\s*$")
OLD_GMI_PROC = re.compile(r"^\s*(\d+)\s+(\d+)\s+(.*?)\s+(\S+)\s*$")
OLD_GMI_MEM = re.compile(r"^(\S+?)\s*(?:\(\s*(\S+?)\s*\)|/\s*(\S+))$")
OLD_XPU_LABEL = re.compile(r"^(.*?)\s*\(([^)]*)\)\s*$")
OLD_XPU_UNIT = re.compile(r"^\s*[-+0-9.eE]+\s*([A-Za-z]*)\s*$")
OLD_PROC_MEM = re.compile(r"Process id\s*:\s*(\d+)\s+Process name\s*:\s*(.*?)\s+Process memory\(MB\)\s*:\s*(\S+)")

LINE = st.lists(st.sampled_from(list("aK1 \t:(/)eE.N-=,;") + [
    "MiB", "N/A", "Process id", "Process name", "Process memory(MB)", ": ", "7", "0 / 1 "]), max_size=14).map("".join)


def _groups(m, *names):
    return None if m is None else tuple((m.group(n) or "").strip() for n in names)


@settings(max_examples=600, deadline=None)
@given(LINE)
def test_key_value_patterns_read_lines_as_before(line):
    assert _groups(blocks.KV.match(line), "indent", "key", "value") == _groups(OLD_KV.match(line), "indent", "key", "value")
    r = line.rstrip()
    assert _groups(nv._TEXT_KV.match(r), "indent", "key", "value") == _groups(OLD_NV_KV.match(r), "indent", "key", "value")
    assert _groups(amd._KV.match(r), "indent", "key", "value") == _groups(OLD_AMD_KV.match(r), "indent", "key", "value")
    assert _groups(efsmi._KV.match(line), 1, 2) == _groups(OLD_EF_KV.match(line), 1, 2)


@settings(max_examples=600, deadline=None)
@given(LINE)
def test_row_readers_read_lines_as_the_patterns_did(line):
    old = OLD_CNMON_PROC.match(line.strip())
    want = None if old is None else (int(old.group(1)), old.group(2), int(old.group(3)), old.group(4).strip(),
                                     None if old.group(5) == "N/A" else int(old.group(5)))
    assert cnmon._proc_row(line.strip()) == want
    old = OLD_GMI_PROC.match(line)
    assert gmi._proc_row(line) == (None if old is None else (old.group(1), old.group(2), old.group(3).strip(),
                                                             old.group(4)))
    s = line.strip()
    old = OLD_PROC_MEM.fullmatch(s)
    assert npu._proc_mem_line(s) == (None if old is None else (int(old.group(1)), old.group(2), old.group(3)))
    old = OLD_XPU_LABEL.match(line)
    assert xpu._unit_label(line) == ((old.group(1), old.group(2)) if old else (line, ""))
    old = OLD_XPU_UNIT.match(s)
    assert values.unit_after_number(s) == (old.group(1) if old else "")


def _quantity_ok(text):
    from hetero_exporter.sdk import values
    try:
        values.quantity(text, "MiB")
        return True
    except ValueError:
        return False


@settings(max_examples=600, deadline=None)
@given(LINE)
def test_the_mthreads_memory_pattern_reads_every_quantity_as_before(line):
    s = line.strip()
    old, new = OLD_GMI_MEM.match(s), gmi._MEM.match(s)
    if old is not None and _quantity_ok(old.group(1)) and _quantity_ok(old.group(2) or old.group(3)):
        assert new is not None and new.groups() == old.groups()  # what the parser could read
    if new is not None:
        assert old is not None and new.groups() == old.groups()  # never a reading the old one lacked


# the label masking and nearest-label choice as they were
def _old_cell_labels(cell, vocabulary):
    masked, found = cell, []
    for text, key in vocabulary:
        pos = masked.find(text)
        while pos >= 0:
            found.append(tables.Label(key, pos))
            masked = masked[:pos] + " " * len(text) + masked[pos + len(text):]
            pos = masked.find(text)
    for m in re.finditer(r"\S+(?: \S+)*", masked):
        found.append(tables.Label("?" + m.group(0), m.start()))
    return sorted(found, key=lambda lab: lab.start)


def _old_cell_values(cell, labels):
    out: dict = {}
    for m in tables.GROUP.finditer(cell):
        best = min(labels, key=lambda lab: (abs(lab.start - m.start()), lab.start))
        out.setdefault(best.key, []).append(m.group(0))
    return {k: " ".join(v) for k, v in out.items()}


VOCABULARIES = [npu._SUMMARY_LABELS, npu._PROCESS_LABELS, efsmi.VOCAB, efsmi.PROC_VOCAB, ixsmi._LABELS, mx.VOCABULARY]
CELL = st.lists(st.sampled_from(["NPU", " ", "  ", "ID", "NPU ID", "Chip", "Name", "Bus-Id", "x", "12", "/",
                                 "Process id", "DEV", "Mem", "GPU", "Temp", "(W)"]), max_size=12).map("".join)


@settings(max_examples=400, deadline=None)
@given(CELL, CELL, st.sampled_from(range(len(VOCABULARIES))))
def test_cell_labels_and_values_as_before(header, data, which):
    vocabulary = VOCABULARIES[which]
    labels = tables.cell_labels(header, vocabulary)
    assert labels == _old_cell_labels(header, vocabulary)
    if labels:
        assert tables.cell_values(data, labels) == _old_cell_values(data, labels)
        shuffled = labels[::-1]  # any order: the earliest-given of equal starts still wins
        assert tables.cell_values(data, shuffled) == _old_cell_values(data, shuffled)
