"""Dashboards (dashboards/): the committed JSON is what the grafanalib definitions generate, every
expression uses metric names and labels of names.py, every variable used is defined, and the
five dashboards cover the whole metric table. Evaluation against a real Prometheus is in
tests/test_prometheus_integration.py."""

from __future__ import annotations

import json
import re
import warnings

import pytest

from conftest import ROOT
from hetero_exporter.model import names as N
from promql_names import load, problems

generate = load("dashboards/generate.py")
panels = load("dashboards/panels.py")
rules = load("alerts/rules.py")

DASHBOARDS = {p.stem: json.loads(p.read_text()) for p in sorted((ROOT / "dashboards" / "json").glob("*.json"))}
MACROS = {"__rate_interval", "__range"}  # Grafana's own variables the expressions may use


def targets(dash: dict):
    for panel in dash["panels"]:
        for t in panel.get("targets", []):
            yield panel, t


def test_committed_json_is_what_the_definitions_generate():
    assert generate.main(["--check"]) == 0, "run: python dashboards/generate.py"
    rendered = {p.stem: json.loads(text) for p, text in generate.render_all().items()}
    assert rendered == DASHBOARDS


def test_the_six_dashboards_exist_with_unique_uids():
    assert set(DASHBOARDS) == {"fleet-overview", "node", "workloads", "health", "exporter", "cost"}
    uids = [d["uid"] for d in DASHBOARDS.values()]
    assert len(set(uids)) == 6 and all(uids)


def test_definitions_never_spell_a_metric_name():
    for path in [*(ROOT / "dashboards").glob("*.py"), ROOT / "alerts" / "rules.py"]:
        text = path.read_text()
        found = set(re.findall(r"accelerator_[a-z0-9_]+", text))
        assert found == set(), f"{path.name} retypes {found}; import them from names.py"


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_expressions_use_known_metrics_and_labels(name):
    allowed = set(panels.EXTERNAL_METRICS)
    for panel, t in targets(DASHBOARDS[name]):
        assert problems(t["expr"], allowed) == [], f"{panel['title']}: {t['expr']}"
    for var in DASHBOARDS[name]["templating"]["list"]:
        if var["type"] == "query":
            assert problems(var["query"], allowed) == [], var["name"]


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_variable_used_is_defined(name):
    dash = DASHBOARDS[name]
    defined = {v["name"] for v in dash["templating"]["list"]} | MACROS
    texts = [t["expr"] for _, t in targets(dash)] + [v["query"] for v in dash["templating"]["list"]]
    used = {m for text in texts for m in re.findall(r"\$\{?(\w+)", text)}
    assert used <= defined, used - defined
    assert {"node", "vendor"} <= defined


def test_template_variables_node_vendor_model_namespace():
    for name, dash in DASHBOARDS.items():
        by_name = {v["name"]: v for v in dash["templating"]["list"]}
        assert by_name["datasource"]["type"] == "datasource"
        for v in by_name.values():
            if v["type"] == "query":
                assert v["includeAll"] and v["multi"] and v["allValue"] == ".*", (name, v["name"])
                assert v["query"].startswith("label_values("), (name, v["name"])
    assert {"node", "vendor", "model", "namespace"} <= {v["name"] for v in DASHBOARDS["workloads"]["templating"]["list"]}
    assert {"node", "vendor", "model"} <= {v["name"] for v in DASHBOARDS["fleet-overview"]["templating"]["list"]}


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_panels_are_described_titled_uniquely_and_laid_out_without_overlap(name):
    dash = DASHBOARDS[name]
    data_panels = [p for p in dash["panels"] if p["type"] != "row"]
    titles = [p["title"] for p in data_panels]
    assert len(titles) == len(set(titles)), titles
    cells = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24
        area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not area & cells, f"{p['title']} overlaps another panel"
        cells |= area
    for p in data_panels:
        assert p["description"], p["title"]
        assert p["targets"] and all(t["datasource"] == panels.DATASOURCE and t["refId"] for t in p["targets"])


# DESIGN.md's metric table, the contract: each of these must have a panel.
DESIGN_TABLE = (N.DEVICE_INFO, N.UTILIZATION, N.MEMORY_USED, N.MEMORY_TOTAL, N.TEMPERATURE, N.POWER, N.POWER_LIMIT,
                N.ENERGY, N.CLOCK, N.ECC_ERRORS, N.INTERCONNECT, N.FAULT_EVENTS, N.FAULT_LAST, N.HEALTH_STATUS,
                N.HEALTH_REASON, N.FIELD_STATUS, N.QUALITY_INFO, N.COMPUTE_UNITS, N.COST_WEIGHT, N.PROCESS_MEMORY,
                N.PROCESS_UTILIZATION, N.ALLOCATION, N.UNATTRIBUTED_MEMORY, N.DEVICES_EXPECTED, N.DEVICES_PRESENT,
                N.COLLECTOR_SUCCESS, N.COLLECTOR_DURATION, N.COLLECTOR_LAST_SUCCESS, N.COLLECTOR_ERRORS,
                N.SNAPSHOT_AGE, N.HEALTH_ACTIONS)


def _used() -> set[str]:
    return {n for d in DASHBOARDS.values() for _, t in targets(d) for n in re.findall(r"accelerator_\w+", t["expr"])}


def test_the_dashboards_cover_design_s_metric_table():
    assert {m.name for m in DESIGN_TABLE} - _used() == set()


def test_metrics_added_since_have_a_panel():
    """Metrics other work adds to names.py: reported (not failed) until a dashboard shows them."""
    missing = sorted(set(N.BY_NAME) - _used())
    if missing:
        warnings.warn("no dashboard panel yet for: " + ", ".join(missing))
    assert _used() <= set(N.BY_NAME)


def test_model_filter_reaches_value_series_through_the_info_join():
    """Value series have no model label: a panel that filters by $model must join device_info."""
    for name, dash in DASHBOARDS.items():
        for panel, t in targets(dash):
            expr = t["expr"]
            if "$model" in expr and N.DEVICE_INFO.name not in expr:
                pytest.fail(f"{name}/{panel['title']}: $model without {N.DEVICE_INFO.name}")
            for m in re.finditer(r"(accelerator_\w+)\{([^}]*)\}", expr):
                metric = N.BY_NAME[m.group(1)]
                if "model" not in metric.labels:
                    assert "$model" not in m.group(2)
