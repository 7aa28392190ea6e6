"""No import cycle between the modules of one vendor package (issue 37: the knots ixsmi parse <->
query_xml, xpu_smi parse <-> box/query, amdsmi collector <-> fake).

Method: grimp, the import graph import-linter is built on (so no new dependency). It reads
every import statement of a module, those inside functions included: a lazy import that closes
a cycle is still a knot, only hidden at import time (each of the three knots was one). The
graph is built over the installed layout (collectors/ inside hetero_exporter/, as the wheel
installs it), like tests/test_layering.py, because grimp reads the file tree and the
setuptools package-dir mapping is invisible to it. A cycle is a strongly connected component
of more than one module among a vendor package's own modules.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

pytest.importorskip("grimp", reason="grimp comes with import-linter (pip install -e '.[test]')")

PACKAGE = "hetero_exporter"
# run apart: in this process hetero_exporter is imported already, and grimp would find that
# one (without collectors/ inside it) instead of the copy
_EDGES = """
import json, grimp
g = grimp.build_graph("hetero_exporter", cache_dir=None)
mods = {m for m in g.modules if m.startswith("hetero_exporter.collectors.")}
print(json.dumps({m: sorted(g.find_modules_directly_imported_by(m) & mods) for m in sorted(mods)}))
"""


def installed_layout(tmp: Path) -> Path:
    """hetero_exporter/ with collectors/ inside it, as the wheel installs it."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "hetero_exporter", tmp / PACKAGE, ignore=ignore)
    shutil.copytree(ROOT / "collectors", tmp / PACKAGE / "collectors", ignore=ignore)
    return tmp


def collector_imports(root: Path) -> dict[str, set[str]]:
    """module -> the modules of collectors/ it imports (anywhere in its text), read by grimp."""
    proc = subprocess.run([sys.executable, "-c", _EDGES], cwd=root, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {m: set(v) for m, v in json.loads(proc.stdout).items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's, iterative: no
    recursion limit on a long chain)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def vendor_cycles(imports: dict[str, set[str]]) -> dict[str, list[list[str]]]:
    """Per vendor package (``hetero_exporter.collectors.<vendor>``), the cycles among its modules."""
    by_vendor: dict[str, set[str]] = {}
    for m in imports:
        parts = m.split(".")
        if len(parts) >= 3:
            by_vendor.setdefault(".".join(parts[:3]), set()).add(m)
    out = {}
    for vendor, modules in sorted(by_vendor.items()):
        found = cycles({m: imports[m] & modules - {m} for m in modules})
        if found:
            out[vendor] = found
    return out


def test_cycles_finds_a_knot_and_only_a_knot():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_vendor_package_has_an_import_cycle(tmp_path):
    imports = collector_imports(installed_layout(tmp_path))
    assert f"{PACKAGE}.collectors.iluvatar.ixsmi.parse" in imports, sorted(imports)[:20]
    assert vendor_cycles(imports) == {}


def test_a_lazy_import_that_closes_a_cycle_is_found(tmp_path):
    """The probe: two new modules of one vendor, the second importing the first inside a function."""
    root = installed_layout(tmp_path)
    tool = root / PACKAGE / "collectors" / "enflame" / "efsmi"
    (tool / "probe_a.py").write_text("from . import probe_b\n")
    (tool / "probe_b.py").write_text("def f():\n    from .probe_a import probe_b\n    return probe_b\n")
    found = vendor_cycles(collector_imports(root)).get(f"{PACKAGE}.collectors.enflame")
    assert found == [[f"{PACKAGE}.collectors.enflame.efsmi.probe_a", f"{PACKAGE}.collectors.enflame.efsmi.probe_b"]]
