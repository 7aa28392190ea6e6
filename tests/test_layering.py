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


@pytest.mark.parametrize("room, source", [
    ("health/probe.py", "from hetero_exporter import cli\n"),              # a room reaching up
    ("sdk/probe.py", "from hetero_exporter.health.detect import rules\n"),  # the SDK reaching up
    ("model/probe.py", "from hetero_exporter import vendors\n"),          # the floor reaching up
    ("scoring/probe.py", "from hetero_exporter.exposition import cache\n"),  # one room into another
    ("collectors/enflame/probe.py", "from hetero_exporter import sampling\n"),
    ("app/probe.py", "from hetero_exporter import cli\n"),                 # the assembly reaching up
    ("sources/probe.py", "from hetero_exporter.app import agent\n"),       # a room reaching the assembly
    ("probe.py", ""),                                                       # a module in no layer
])
def test_the_layers_contract_covers_a_new_module_in_any_room(tmp_path, room, source):
    """Issue 26: one layers contract over the whole core; a misplaced import in a new module of
    any room, or a new top-level module in no layer, breaks it with no edit of .importlinter."""
    root = _installed_layout(tmp_path)
    (root / "hetero_exporter" / room).write_text(source)
    proc = _lint(root, "layers")
    assert proc.returncode != 0 and "BROKEN" in proc.stdout, proc.stdout[-3000:]
    assert "probe" in proc.stdout, proc.stdout[-3000:]


@pytest.mark.parametrize("module, source", [
    ("probe.py", ""),                                                  # in none of detect, plan, act
    ("detect/probe.py", "from hetero_exporter.health.plan import config\n"),  # detection reaching up
    ("plan/probe.py", "from hetero_exporter.health.act import remedy\n"),     # a plan reaching into act
])
def test_health_is_detect_plan_act_and_a_new_module_is_covered(tmp_path, module, source):
    """Issue 26: two contracts listed health modules by hand, so a new health/x.py importing
    the health loop passed them all; health's own layers are exhaustive now."""
    root = _installed_layout(tmp_path)
    (root / "hetero_exporter" / "health" / module).write_text(source)
    proc = _lint(root, "health-detect-plan-act")
    assert proc.returncode != 0 and "BROKEN" in proc.stdout and "probe" in proc.stdout, proc.stdout[-3000:]


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


MAX_FUNCTION_LINES = 80


def test_no_function_of_the_core_or_a_vendor_package_is_over_80_lines():
    """Issue 26: a function the next engineer can read in one screen (``_device_step`` was 153);
    issue 37: the vendor packages too (four were over 80, the fake nvidia-smi -q -x at 130)."""
    import ast
    long = []
    for path in sorted([*(ROOT / "hetero_exporter").rglob("*.py"), *(ROOT / "collectors").rglob("*.py")]):
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue  # generated by protoc
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long
