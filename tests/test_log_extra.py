"""A log call's ``extra`` key that a LogRecord already has (``name``, ``msg``, ``process``...)
raises KeyError, but only where that level is enabled: a log line that crashes its caller in
production and passes in tests run at WARNING. Every literal ``extra={...}`` key is checked."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESERVED = set(logging.LogRecord("n", logging.INFO, "p", 1, "m", (), None).__dict__) | {"message", "asctime"}


def _extra_keys(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "extra" and isinstance(kw.value, ast.Dict):
                    for k in kw.value.keys:
                        if isinstance(k, ast.Constant) and isinstance(k.value, str):
                            yield node.lineno, k.value


def test_no_log_call_passes_a_reserved_extra_key():
    bad = []
    for path in [*ROOT.joinpath("hetero_exporter").rglob("*.py"), *ROOT.joinpath("collectors").rglob("*.py")]:
        for line, key in _extra_keys(ast.parse(path.read_text(), str(path))):
            if key in RESERVED:
                bad.append(f"{path.relative_to(ROOT)}:{line}: extra key {key!r}")
    assert not bad, bad


def test_the_check_sees_a_reserved_key():
    assert list(_extra_keys(ast.parse('log.info("x", extra={"name": 1})'))) == [(1, "name")]
    assert "name" in RESERVED and "process" in RESERVED
