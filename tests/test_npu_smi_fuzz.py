"""Hypothesis fuzzing of every npu-smi parser: malformed text gives ParseError with a message,
never another exception. Inputs: random text over the characters npu-smi prints, and the
real captures mutated (lines dropped, doubled, cut, characters replaced)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_fakes import mutated
from conftest import shared_fixtures
from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.collectors.ascend.npu_smi import collector as N

CAPTURES = [p.read_text() for p in shared_fixtures("npu-smi")] or [
    "+----+\n| npu-smi 1 Version: 1 |\n+----+\n| NPU Name | Health |\n| Chip | Bus-Id |\n"]
ALPHABET = "| +-=.:/()%\t\nNPUChipNameHealthBus-IdOKAlarm0123456789ABCDEFxX NA..."
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


TEXTS = st.one_of(st.text(ALPHABET, max_size=400), mutated(CAPTURES, "|+ :/x9-.\tN", ALPHABET))


def _only_parse_errors(fn, *args) -> None:
    try:
        fn(*args)
    except ParseError as e:
        assert str(e).startswith("npu-smi"), e  # names the tool
        assert len(str(e)) > len("npu-smi: ")  # and says what was wrong


@FUZZ
@given(TEXTS)
def test_summary_parser(t):
    _only_parse_errors(N.parse_summary, t)


@FUZZ
@given(TEXTS)
def test_summary_snapshot(t):
    try:
        s = N.parse_summary(t)
    except ParseError:
        return
    N.summary_snapshot(s)  # normalizing a parsed summary never fails


@FUZZ
@given(TEXTS)
def test_mapping_and_list_parsers(t):
    _only_parse_errors(N.parse_mapping, t)
    _only_parse_errors(N.parse_list, t)
    _only_parse_errors(N.parse_proc_mem, t)


@FUZZ
@given(TEXTS, st.sampled_from(["health", "usages", "common", "memory", "ecc", "temp", "board", "board-chip", "power"]))
def test_detail_parser_and_readings(t, kind):
    def go():
        doc = N.parse_detail(t, kind)
        for chip in [None, *doc.chip_ids()]:
            N.detail_readings(doc, chip if chip is not None else 0, summary_fields=True)
            if kind == "health":
                N.health_detail(doc, chip)
    _only_parse_errors(go)


@FUZZ
@given(TEXTS)
def test_detector_and_parse_command(t):
    _only_parse_errors(N.detect, t)
    _only_parse_errors(N.parse_any, t)


def test_a_huge_line_is_refused_quickly():
    # the runner caps output at 8 MiB; a parser must not take long over one long line
    _only_parse_errors(N.parse_summary, "| " + "9 " * 400_000 + "|\n")
    _only_parse_errors(N.parse_detail, "Key : " + "x" * 1_000_000 + "\n", "health")
