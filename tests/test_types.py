"""Issue 37: every value that crosses a room has a type, and mypy keeps it so. mypy runs over the
installed layout (collectors/ inside hetero_exporter/, as the wheel installs it) with the settings
in pyproject.toml and finds no error: the core, the vendor packages, the SDK, all of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT
from test_layering import _installed_layout


def test_mypy_finds_no_error_in_the_core_and_the_vendor_packages(tmp_path):
    mypy = shutil.which("mypy", path=os.path.dirname(sys.executable)) or shutil.which("mypy")
    if mypy is None:
        pytest.skip("mypy not installed (pip install -e '.[test]')")
    root = _installed_layout(tmp_path)
    proc = subprocess.run([mypy, "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
                           "--no-error-summary", "-p", "hetero_exporter"],
                          cwd=root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert proc.stdout.strip() == "", proc.stdout[-4000:]
