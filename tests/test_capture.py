"""sdk.capture: what ``hetero-exporter parse`` reads (issue 18, "parse input").

Regular files and stdin only (a device, FIFO or directory is refused before a byte is read), at
most a cap, decoded by byte-order mark (UTF-8, UTF-16 LE/BE, UTF-32), CRLF made LF; every refusal
one line naming the file. The CLI says it with exit 1 (a bad --max-bytes is exit 2).
"""

from __future__ import annotations

import codecs
import io
import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import shared_fixture
from hetero_exporter import cli, registry
from hetero_exporter.model import to_dict
from hetero_exporter.sdk import capture
from hetero_exporter.sdk.capture import CaptureError, read_capture

ENCODINGS = [("utf-8-sig", b""), ("utf-16-le", codecs.BOM_UTF16_LE), ("utf-16-be", codecs.BOM_UTF16_BE),
             ("utf-32-le", codecs.BOM_UTF32_LE), ("utf-32-be", codecs.BOM_UTF32_BE)]


def _one_line(e: BaseException) -> str:
    text = str(e)
    assert text and "\n" not in text
    return text


def _bounded(fn, *args):
    """Run ``fn`` in a thread; a refusal must not wait for a writer (bounded join, not timed)."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), f"{fn.__name__}{args} still blocked"
    return out


# --------------------------------------------------------------------------- refusals


def test_a_character_device_is_refused_before_reading():
    got = _bounded(read_capture, "/dev/zero")
    assert "character device" in _one_line(got["error"]) and "/dev/zero" in str(got["error"])


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "capture.fifo"
    os.mkfifo(fifo)
    try:
        got = _bounded(read_capture, str(fifo))
    finally:  # a reader stuck in open() would be released by a writer
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    assert isinstance(got.get("error"), CaptureError) and "FIFO" in _one_line(got["error"])


def test_a_directory_and_a_missing_file_are_one_line_errors(tmp_path):
    with pytest.raises(CaptureError, match="is a directory"):
        read_capture(str(tmp_path))
    with pytest.raises(CaptureError, match="cannot read: No such file") as e:
        read_capture(str(tmp_path / "absent.txt"))
    _one_line(e.value)


def test_a_file_over_the_cap_is_refused_and_one_at_the_cap_is_read(tmp_path):
    p = tmp_path / "big.txt"
    p.write_bytes(b"x" * 1000)
    assert read_capture(str(p), 1000) == "x" * 1000
    with pytest.raises(CaptureError, match=r"1000 bytes, over the capture limit \(999 bytes") as e:
        read_capture(str(p), 999)
    assert "--max-bytes" in _one_line(e.value)


def test_stdin_is_read_up_to_the_cap():
    assert read_capture("-", 10, stdin=io.BytesIO(b"a\r\nb")) == "a\nb"
    with pytest.raises(CaptureError, match="standard input: more than 10 bytes"):
        read_capture("-", 10, stdin=io.BytesIO(b"y" * 11))


def test_a_proc_file_that_says_size_zero_is_still_read():
    if not os.path.exists("/proc/self/cgroup"):
        pytest.skip("no /proc")
    assert read_capture("/proc/self/cgroup").strip()


# --------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("encoding,bom", ENCODINGS, ids=[e for e, _ in ENCODINGS])
def test_every_bom_decodes_to_the_same_text(encoding, bom):
    text = "NPU ID : 0\nName : Ascend 910B \u00b0C\n"
    data = codecs.encode(text, encoding) if encoding == "utf-8-sig" else bom + codecs.encode(text, encoding)
    assert capture.decode(data) == text


def test_line_ends_and_undecodable_bytes():
    assert capture.decode(b"a\r\nb\rc\n") == "a\nb\nc\n"
    assert capture.decode(b"ok \xff\xfe!") == "ok \ufffd\ufffd!"  # no BOM at the start: UTF-8, replaced


# real captures saved as Windows PowerShell saves them: UTF-16 with a BOM, CRLF line ends
REAL = [("npu-smi", "npu-smi/info-table_8x-910B3_npu-smi-23.0.0_container.txt"),
        ("nvidia-smi", "nvidia-smi/q-x_dual-rtx-a5000_v13.xml"),
        ("nvidia-smi", "nvidia-smi/query-gpu-csv_all-fields_rtx2080super_windows_591.86_idle.csv"),
        ("hy-smi", "hy-smi/rocm-smi_4x-hygon-z100_dtk-23.10.1.txt"),
        ("cnmon", "cnmon/default_2x-mlu370-x8_cnmon-v5.10.13.txt")]


def _doc(result):
    return result.to_dict() if hasattr(result, "to_dict") else to_dict(result)


@pytest.mark.parametrize("tool,rel", REAL, ids=[r for _, r in REAL])
@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_captures_parse_as_their_utf8_original(tmp_path, tool, rel, encoding):
    src = shared_fixture(*rel.split("/"))
    text = src.read_text(encoding="utf-8")
    bom = codecs.BOM_UTF16_LE if encoding == "utf-16-le" else codecs.BOM_UTF16_BE
    saved = tmp_path / "capture.txt"
    saved.write_bytes(bom + codecs.encode(text.replace("\n", "\r\n"), encoding))
    parse = registry.parser(tool)
    assert _doc(parse(read_capture(str(saved)))) == _doc(parse(read_capture(str(src))))


# --------------------------------------------------------------------------- the CLI


def test_cli_parse_refuses_a_device_an_over_cap_file_and_a_bad_flag(tmp_path, capsys):
    assert cli.main(["parse", "npu-smi", "/dev/zero"]) == cli.EXIT_FAIL
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "character device" in err
    p = tmp_path / "x.txt"
    p.write_text("NPU ID : 0\n" * 10)
    assert cli.main(["parse", "npu-smi", str(p), "--max-bytes", "20"]) == cli.EXIT_FAIL
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "over the capture limit" in err
    for bad in ("0", "lots"):
        with pytest.raises(SystemExit) as e:
            cli.main(["parse", "npu-smi", str(p), "--max-bytes", bad])
        assert e.value.code == cli.EXIT_USAGE
        assert "--max-bytes" in capsys.readouterr().err


def test_cli_parse_reads_a_utf16_capture(tmp_path, capsys):
    src = shared_fixture("npu-smi", "info-table_2x-910B2C_npu-smi-23.0.rc3.txt")
    saved = tmp_path / "saved.txt"
    saved.write_bytes(codecs.BOM_UTF16_LE + src.read_text().replace("\n", "\r\n").encode("utf-16-le"))
    assert cli.main(["parse", "npu-smi", str(src), "--json"]) == cli.EXIT_OK
    plain = capsys.readouterr().out
    assert cli.main(["parse", "npu-smi", str(saved), "--json"]) == cli.EXIT_OK
    assert capsys.readouterr().out == plain


# --------------------------------------------------------------------------- fuzzing


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600), st.integers(min_value=0, max_value=700))
def test_read_capture_of_any_bytes_is_text_or_one_line_error(tmp_path_factory, data, limit):
    p = tmp_path_factory.mktemp("cap") / "f"
    p.write_bytes(data)
    try:
        text = read_capture(str(p), limit)
    except CaptureError as e:
        assert len(data) > limit and "\n" not in str(e)
        return
    assert len(data) <= limit and isinstance(text, str) and "\r" not in text


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.sampled_from(ENCODINGS))
def test_any_text_survives_any_bom_encoding(text, enc):
    encoding, bom = enc
    if text.startswith(("\ufeff", "\x00")):
        text = "x" + text  # a leading U+FEFF is the mark itself; FF FE 00 00 is UTF-32's mark
    data = codecs.encode(text, encoding) if encoding == "utf-8-sig" else bom + codecs.encode(text, encoding)
    assert capture.decode(data) == text.replace("\r\n", "\n").replace("\r", "\n")
