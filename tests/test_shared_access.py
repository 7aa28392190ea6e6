"""Issue 24, item 1: conftest is the one way a test reaches ../shared.

A test that builds its own path to the shared captures loses the skip guard the conftest
helpers carry, and the README's test command then fails in a fresh clone with nothing beside
it. This walks every test module's syntax tree and refuses: the private path constant outside
conftest, a ``/ "shared"`` path join, and path literals into the shared folder (prose, such as
a skip reason, has spaces and is let through)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PATH_LITERAL = re.compile(r"(^|/)shared(/|$)")  # with a "/" in the literal: a path, not the word


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and "SHARED_FIXTURES" in node.id:
            out.append(f"{path.name}:{node.lineno}: {node.id}")
        elif isinstance(node, ast.Attribute) and "SHARED_FIXTURES" in node.attr:
            out.append(f"{path.name}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and any("SHARED_FIXTURES" in a.name for a in node.names):
            out.append(f"{path.name}:{node.lineno}: imports the shared path")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and side.value == "shared":
                    out.append(f"{path.name}:{node.lineno}: / \"shared\"")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and " " not in node.value \
                and "/" in node.value and PATH_LITERAL.search(node.value):
            out.append(f"{path.name}:{node.lineno}: path literal {node.value!r}")
    return out


def test_only_conftest_reaches_the_shared_folder():
    found = [v for p in sorted(TESTS.rglob("*.py")) if p.name != "conftest.py" for v in _violations(p)]
    assert found == [], "reach ../shared through conftest.shared_fixture / shared_fixtures / shared_root: " \
                        + "; ".join(found)


def test_the_guard_sees_each_way_around_it(tmp_path):
    bad = tmp_path / "test_bad.py"
    bad.write_text('from conftest import _SHARED_FIXTURES\n'
                   'import test_vendor_contract as c\n'
                   'a = c.SHARED_FIXTURES\n'
                   'b = ROOT.parent / "shared" / "fixtures"\n'
                   'c = open("../shared/fixtures/npu-smi/x.txt")\n'
                   'ok = "../shared/fixtures absent"\n')
    assert len(_violations(bad)) == 4
