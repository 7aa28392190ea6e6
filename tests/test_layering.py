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


def _lint(root: Path, *contracts: str) -> subprocess.CompletedProcess:
    lint = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
    if lint is None:
        pytest.skip("import-linter not installed (pip install -e '.[test]')")
    env = {**os.environ, "PYTHONPATH": str(root)}
    args = [lint, str(ROOT / ".importlinter"), "--no-cache", "--no-logo"]
    for c in contracts:
        args += ["--contract", c]
    return subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_import_contracts_hold(tmp_path):
    proc = _lint(_installed_layout(tmp_path))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "BROKEN" not in proc.stdout


def test_new_modules_are_covered_without_being_listed(tmp_path):
    """A new vendor package that imports another vendor, and a new core module that imports a
    vendor package or kubernetes, break the contracts with no edit of .importlinter."""
    root = _installed_layout(tmp_path)
    pkg = root / "hetero_exporter"
    (pkg / "collectors" / "newvendor").mkdir()
    (pkg / "collectors" / "newvendor" / "__init__.py").write_text(
        "from hetero_exporter.collectors.cambricon import SPEC as _OTHER\n")
    (pkg / "newcore.py").write_text("import kubernetes\nfrom hetero_exporter.collectors import ascend\n")
    proc = _lint(root, "vendors-are-independent", "core-knows-no-vendor", "only-k8s-imports-kubernetes")
    assert proc.returncode != 0
    out = proc.stdout
    assert "hetero_exporter.collectors.newvendor is not allowed to import" in out, out[-3000:]
    assert "hetero_exporter.newcore" in out and out.count("BROKEN") == 3, out[-3000:]


def test_vendor_specs_load_without_any_binding():
    """The extender reads the specs (resource names, fabrics): loading them imports each vendor
    package's ``__init__`` only, never a binding or a collector module."""
    code = ("import sys\n"
            "from hetero_exporter import vendors\n"
            "from hetero_exporter.scoring import extender, resources\n"
            "assert vendors.specs() and resources.parse_resource('x.example/y') is None\n"
            "from hetero_exporter import profiles; profiles.table()\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pynvml', 'amdsmi', 'grpc', 'kubernetes')\n"
            "             or m.count('.') >= 3 and m.startswith('hetero_exporter.collectors.'))\n"
            "print(bad)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", proc.stdout
