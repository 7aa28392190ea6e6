"""The layering of DESIGN.md, enforced with import-linter (contracts in .importlinter)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT


def _installed_layout(tmp: Path) -> Path:
    """hetero_exporter/ with collectors/ inside it, as the wheel installs it: import-linter
    reads the file tree, and the setuptools package-dir mapping is invisible to it."""
    pkg = tmp / "hetero_exporter"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "hetero_exporter", pkg, ignore=ignore)
    shutil.copytree(ROOT / "collectors", pkg / "collectors", ignore=ignore)
    return tmp


def test_import_contracts_hold(tmp_path):
    lint = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
    if lint is None:
        pytest.skip("import-linter not installed (pip install -e '.[test]')")
    root = _installed_layout(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run([lint, "--config", str(ROOT / ".importlinter"), "--no-cache"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "BROKEN" not in proc.stdout
