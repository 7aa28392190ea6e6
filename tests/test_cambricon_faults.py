"""No dead fault rows: every row of a vendor's fault table (faults.yaml) is a code some
producer of the vendor can raise, so a row nothing produces cannot come back unnoticed.

Producers, found in the package's code (not its fakes) by reading it (ast): the code argument
of ``table_fault(vendor, code, ...)`` / the package's ``_fault(code, ...)``, as a literal or
a local name bound to literals (``code = "a" if ... else "b"``); a collector's ``lost_code``
(CliCollector's ``missing`` unless the class names its own); the codes of the vendor's
kernel-log rules (sdk.kmsg). Run over the four vendors of this file's owner: Cambricon (the
18 CNDev XID rows nothing produced were dropped), Kunlunxin, Enflame, Iluvatar."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from hetero_exporter import vendors
from hetero_exporter.sdk import kmsg
from hetero_exporter.sdk.cli_collector import CliCollector

ROOT = Path(__file__).resolve().parents[1]
VENDORS = ("cambricon", "kunlunxin", "enflame", "iluvatar")


def _strings(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _code_arg(call: ast.Call) -> ast.AST | None:
    name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
    at = {"table_fault": 1, "_fault": 0}.get(name)
    if at is None:
        return None
    if len(call.args) > at:
        return call.args[at]
    return next((k.value for k in call.keywords if k.arg == "code"), None)


def produced_codes(source: str) -> set[str]:
    """The fault codes a module's code raises (see the module docstring)."""
    tree = ast.parse(source)
    out: set[str] = set()
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Module))]:
        bound: dict[str, set[str]] = {}
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        bound.setdefault(t.id, set()).update(_strings(n.value))
        for n in ast.walk(fn):
            if isinstance(n, ast.Call):
                arg = _code_arg(n)
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    out.add(arg.value)
                elif isinstance(arg, ast.Name):
                    out |= bound.get(arg.id, set())
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "lost_code" for t in n.targets):
                out |= _strings(n.value)
    return out


def producers(vendor: str) -> set[str]:
    package = ROOT / "collectors" / vendor
    codes: set[str] = set()
    uses_base = False
    for path in package.rglob("*.py"):
        if path.name == "fake.py":  # a fake renders faults; it raises none
            continue
        text = path.read_text(encoding="utf-8")
        codes |= produced_codes(text)
        uses_base = uses_base or "CliCollector" in text
    if uses_base:
        codes.add(CliCollector.lost_code)
    spec = vendors.spec(vendor)
    rules = kmsg.load_rules(spec) if spec is not None else None
    codes |= {r.code for r in (rules.rules if rules else ()) if r.code}
    return codes


@pytest.fixture
def registered(request):
    import importlib
    spec = importlib.import_module(f"hetero_exporter.collectors.{request.param}").SPEC
    was = vendors.spec(spec.name)
    if was is None:
        vendors.register(spec)
    try:
        yield spec.name
    finally:
        if was is None:
            vendors.unregister(spec.name)


@pytest.mark.parametrize("registered", VENDORS, indirect=True)
def test_every_fault_row_has_a_producer(registered):
    doc = yaml.safe_load((ROOT / "collectors" / registered / "faults.yaml").read_text(encoding="utf-8"))
    rows = set(doc["faults"])
    dead = sorted(rows - producers(registered))
    assert not dead, f"{registered}: fault rows nothing produces: {dead}"


def test_the_check_sees_a_dead_row():
    src = ('def f(d):\n    code = "a" if d else "b"\n    return table_fault(V, code, "m", "t")\n'
           'def g():\n    return _fault("c", "m")\n')
    assert produced_codes(src) == {"a", "b", "c"}  # a row "d" would be reported dead
