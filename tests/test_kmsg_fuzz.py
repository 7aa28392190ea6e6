"""Fuzzing the kernel-log parser: random text and mutated real captures give events or nothing,
never an exception; every event is well formed."""

from __future__ import annotations

import io

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetero_exporter.model import ACTIONS, SEVERITIES
from hetero_exporter.sdk import kmsg, pciaddr

from conftest import shared_fixtures

_CAPTURES = [p.read_text(encoding="utf-8") for p in shared_fixtures("kernel-log")]
_SEEDS = _CAPTURES or [
    "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
    "amdgpu 0000:c3:00.0: amdgpu: 2 uncorrectable hardware errors detected in umc block\n"]
_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# the words the rules look for, so random text reaches deep into the regexes
_WORDS = st.sampled_from([
    "NVRM:", "Xid", "(PCI:0000:3b:00)", "(PCI:", "):", " 79,", "GPU at PCI:0000:3b:00:", "GPU-1234abcd-aaaa",
    "nvidia-nvswitch0:", "SXid", "(PCI:0000:06:00.0)", " 20034,", " Fatal", " Non-fatal", "fallen off the bus",
    "amdgpu 0000:c3:00.0:", "amdgpu:", " 0 ", " 5 ", "new", "uncorrectable", "correctable", "deferred",
    "hardware errors detected in", "in total", " umc block", "{1}", "[Hardware Error]:", "aca entry[00].STATUS=",
    "0xb000000000000000", "0xzz", "GPU reset begin!", "GPU reset(2) succeeded!", "GPU reset(1) failed",
    "ring gfx timeout, signaled seq=1, emitted seq=2", "but soft recovered", "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ",
    "6,1,2,-;", "[  1.5] ", "[Sun Feb 23 16:24:18 2025] ", "Nov 01 16:52:04 h kernel: ", "kern  :warn  : ",
    " SUBSYSTEM=pci", "\n", "\x00", "\ufffd", "\\x0a", " ", ",", ":", "(", ")", "99999999999999999999"])


def check(events) -> None:
    for e in events:
        d = e.to_dict()
        assert d["source"] == "kmsg" and d["code"]
        assert d["action"] in ACTIONS and d["severity"] in SEVERITIES
        assert d["pci_address"] is None or pciaddr.normalize(d["pci_address"]) == d["pci_address"]
        assert isinstance(d["line"], int) and d["line"] >= 1
        assert len(d["message"]) <= 512


@_SETTINGS
@given(st.text(max_size=2000))
def test_random_text(text):
    events, _ = kmsg.parse_lines(io.StringIO(text))
    check(events)
    kmsg.parse_text(text)


@_SETTINGS
@given(st.lists(_WORDS, max_size=60).map("".join))
def test_random_rule_words(text):
    events, _ = kmsg.parse_lines(text.splitlines(keepends=True))
    check(events)


@_SETTINGS
@given(st.sampled_from(_SEEDS), st.data())
def test_mutated_captures(seed, data):
    chars = list(seed)
    for _ in range(data.draw(st.integers(0, 25))):
        if not chars:
            break
        i = data.draw(st.integers(0, len(chars) - 1))
        op = data.draw(st.sampled_from(["drop", "dup", "swap", "insert"]))
        if op == "drop":
            del chars[i]
        elif op == "dup":
            chars.insert(i, chars[i])
        elif op == "swap":
            j = data.draw(st.integers(0, len(chars) - 1))
            chars[i], chars[j] = chars[j], chars[i]
        else:
            chars.insert(i, data.draw(st.sampled_from(["\n", "0", "f", ":", ")", " ", "\x00", "é", "9"])))
    text = "".join(chars)
    cut = data.draw(st.integers(0, len(text)))
    events, _ = kmsg.parse_lines(io.StringIO(text[:cut]))
    check(events)


@_SETTINGS
@given(st.text(max_size=300), st.integers(-5, 10**9))
def test_split_record_never_raises(raw, line):
    rec = kmsg.split_record(raw, line)
    assert rec is None or isinstance(rec.text, str)
