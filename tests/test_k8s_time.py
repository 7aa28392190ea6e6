"""Kubernetes Time / MicroTime parsing without strptime (health/detect/texts.parse_k8s_time).

strptime holds one process-wide lock and reads the locale at every call: a thousand health loops
in one process queued on it (benchmarks/fleet_burst.py at 1,000 nodes). The regex parser must give
what strptime gave for every layout Kubernetes writes, and None for anything else."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, strategies as st

from hetero_exporter.health.act.fleet_budget import micro_time, parse_time
from hetero_exporter.health.detect.texts import parse_k8s_time, parse_rfc3339, rfc3339

UTC = datetime.timezone.utc


def _by_strptime(s: str, fmt: str):
    try:
        return datetime.datetime.strptime(s, fmt).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


@given(st.datetimes(min_value=datetime.datetime(1970, 1, 2), max_value=datetime.datetime(9998, 12, 31)))
def test_what_kubernetes_writes_parses_as_strptime_did(when):
    t = when.replace(tzinfo=UTC).timestamp()
    time_text, micro_text = rfc3339(t), micro_time(t)
    assert parse_rfc3339(time_text) == _by_strptime(time_text, "%Y-%m-%dT%H:%M:%SZ")
    assert parse_time(micro_text) == _by_strptime(micro_text, "%Y-%m-%dT%H:%M:%S.%fZ") == t
    assert parse_time(time_text) == parse_rfc3339(time_text)
    assert parse_rfc3339(micro_text) is None  # a Time is not a MicroTime


@given(st.text(max_size=48))
def test_anything_else_is_none_or_what_strptime_read(text):
    got = parse_k8s_time(text, micro=True)
    if got is not None:  # then it is a layout strptime reads the same
        fmt = "%Y-%m-%dT%H:%M:%S.%fZ" if "." in text else "%Y-%m-%dT%H:%M:%SZ"
        assert got == _by_strptime(text, fmt)


@pytest.mark.parametrize("text", ["2026-02-30T00:00:00Z", "2026-12-06T24:00:00Z", "2026-12-06T23:59:60Z",
                                  "2026-12-06 23:59:59Z", "2026-12-06T23:59:59", "2026-12-06T23:59:59.Z",
                                  "2026-12-06T23:59:59.1234567Z", " 2026-12-06T23:59:59Z", "None", "",
                                  "２０２６-12-06T23:59:59Z"])
def test_no_such_time_is_none(text):
    assert parse_k8s_time(text, micro=True) is None


@pytest.mark.parametrize("value", [None, 1733526000, 1.5, b"2026-12-06T23:59:59Z", ["2026-12-06T23:59:59Z"]])
def test_a_value_that_is_not_text_is_none(value):
    assert parse_rfc3339(value) is None and parse_time(value) is None


def test_the_fraction_is_strptimes(monkeypatch):
    assert parse_time("2026-12-06T23:59:59.5Z") == _by_strptime("2026-12-06T23:59:59.5Z", "%Y-%m-%dT%H:%M:%S.%fZ")
    assert parse_time("2026-12-06T23:59:59.000001Z") % 1 == pytest.approx(1e-6, abs=1e-7)


def test_no_strptime_is_called(monkeypatch):
    import _strptime

    def refuse(*a, **k):
        raise AssertionError("strptime called")
    monkeypatch.setattr(_strptime, "_strptime_datetime", refuse)
    second = datetime.datetime(2026, 12, 6, 23, 59, 59, tzinfo=UTC).timestamp()
    assert parse_rfc3339("2026-12-06T23:59:59Z") == second
    assert parse_time("2026-12-06T23:59:59.250000Z") == second + 0.25
