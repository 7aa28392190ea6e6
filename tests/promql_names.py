"""Metric names and label matchers in PromQL text (dashboards, alert rules, promtool tests), checked
against ``hetero_exporter.model.names``: a retyped or misspelt name or label fails a test
before any Prometheus sees it."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from types import ModuleType

from hetero_exporter.model import names as N

ROOT = Path(__file__).resolve().parent.parent
# Labels every scraped series gets from its target (node: deploy/ relabelling).
TARGET_LABELS = frozenset({"node", "job", "instance"})

_SELECTOR = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^{}]*)\}")
_AGENT_NAME = re.compile(r"\baccelerator_[a-z0-9_]+\b")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def load(relpath: str) -> ModuleType:
    """A module of the repo that is not in a package (dashboards/panels.py, alerts/rules.py), imported
    by its bare name from its folder, as the dashboard definitions import panels.py."""
    path = ROOT / relpath
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(path.stem)


def metric_names(text: str) -> set[str]:
    """Every agent metric name (``accelerator_*``) and every name used as ``name{...}``."""
    return set(_AGENT_NAME.findall(text)) | {m.group(1) for m in _SELECTOR.finditer(text)}


def selectors(text: str) -> list[tuple[str, list[str]]]:
    """(metric name, [label names matched]) of each ``name{...}`` selector."""
    return [(m.group(1), _MATCHER.findall(m.group(2))) for m in _SELECTOR.finditer(text)]


def problems(text: str, extra_names: set[str] = frozenset()) -> list[str]:
    """Unknown metric names, and labels a selector matches that its metric does not have."""
    out = [f"unknown metric {n}" for n in sorted(metric_names(text) - set(N.BY_NAME) - set(extra_names))]
    for name, labels in selectors(text):
        metric = N.BY_NAME.get(name)
        if metric is None:
            continue
        for label in labels:
            if label not in metric.labels and label not in TARGET_LABELS:
                out.append(f"{name} has no label {label!r} (labels: {', '.join(metric.labels)})")
    return out
