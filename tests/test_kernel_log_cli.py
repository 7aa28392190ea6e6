"""``hetero-exporter parse kernel-log``: a device path is refused at once with one line (never
read until a size limit: /dev/zero never ends), stdin is read."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT


def _parse(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hetero_exporter", "parse", "kernel-log", *args],
                          input=stdin, capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_a_device_is_refused_with_one_line():
    proc = _parse("/dev/zero")
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "is a device" in proc.stderr


def test_stdin_is_read():
    line = "[ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n"
    proc = _parse("-", "--json", stdin=line)
    assert proc.returncode == 0, proc.stderr
    (event,) = json.loads(proc.stdout)["events"]
    assert (event["pci_address"], event["code"], event["source"]) == ("0000:3b:00.0", "79", "kmsg")


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    # the same opening as `parse TOOL FILE` (sdk/capture.py): a FIFO nobody writes used to hang
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    proc = _parse(str(fifo))
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "is a FIFO" in proc.stderr
