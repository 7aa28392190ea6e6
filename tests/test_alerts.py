"""Alert rules (alerts/): generated from alerts/rules.py, valid for promtool, each covered by a
promtool unit test that fires and one that stays quiet, metric names known; the example
Alertmanager config passes amtool and routes critical alerts to on-call. The fleet rules (issue 28:
the health SLI, the cross-node fault correlation) have unit tests that fail against a changed rule,
and the fleet overview dashboard computes the same SLI as the recording rules."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, require_tool
from promql_names import load, problems

from hetero_exporter.model import names as N

ALERTS = ROOT / "alerts"
TESTS = sorted((ALERTS / "tests").glob("*.test.yml"))
AM_CONFIG = ALERTS / "alertmanager.example.yml"

rules = load("alerts/rules.py")
panels = load("dashboards/panels.py")


def run(*cmd: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd)


def _unit_tests() -> list[dict]:
    return [t for p in TESTS for t in yaml.safe_load(p.read_text())["tests"]]


def test_rule_file_and_prometheusrule_are_generated_from_rules_py():
    assert rules.main(["--check"]) == 0, "run: python alerts/rules.py"
    assert yaml.safe_load(rules.RULES_FILE.read_text()) == rules.rule_groups()


def test_every_rule_has_severity_summary_description_and_runbook():
    names = [r.alert for r in rules.ALL_RULES]
    assert len(names) == len(set(names))
    for group in rules.rule_groups()["groups"]:
        for r in group["rules"]:
            if "record" in r:
                continue  # recording rules: test_recording_rules_*
            assert r["labels"]["severity"] in ("critical", "warning"), r["alert"]
            ann = r["annotations"]
            assert set(ann) == {"summary", "description", "runbook"}, r["alert"]
            assert all(len(v) > 20 for v in ann.values()), r["alert"]


def test_the_issue_s_alerts_are_all_there():
    names = {r.alert for r in rules.ALL_RULES}
    assert {"AcceleratorDeviceFailed", "AcceleratorFaultBurst", "AcceleratorDeviceMissing",
            "AcceleratorCollectorDown", "AcceleratorSnapshotStale", "AcceleratorUncorrectableECC",
            "AcceleratorThermal", "AcceleratorUnattributedMemoryHigh",
            "AcceleratorTaintBudgetExhausted", "AcceleratorFaultOnManyNodes"} <= names


def test_metric_names_in_rules_and_unit_tests_exist_in_names_py():
    allowed = set(panels.EXTERNAL_METRICS)
    for r in rules.ALL_RULES:
        assert problems(r.expr, allowed) == [], r.alert
        assert problems(r.description, allowed) == [], r.alert
    recorded = {f"{rules.PREFIX}_{r.metric}" for r in rules.RECORDING_RULES}
    for r in rules.RECORDING_RULES:
        assert problems(r.expr, allowed | recorded) == [], r.record
    for path in TESTS:
        for t in yaml.safe_load(path.read_text())["tests"]:
            for s in t["input_series"]:
                assert problems(s["series"], allowed) == [], f"{path.name}: {s['series']}"


def test_every_rule_has_a_unit_test_that_fires_and_one_that_stays_quiet():
    fires, quiet = set(), set()
    for t in _unit_tests():
        for case in t.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {r.alert for r in rules.ALL_RULES}
    assert names - fires == set(), "rules without a firing unit test"
    assert names - quiet == set(), "rules without a quiet unit test"


def test_recording_rules_are_named_level_metric_operations_and_unique():
    """https://prometheus.io/docs/practices/rules/: level (the labels kept), metric, operations."""
    records = [r.record for r in rules.RECORDING_RULES]
    assert len(records) == len(set(records)) and records
    for r in rules.RECORDING_RULES:
        assert re.fullmatch(r"[a-z_]+:%s_[a-z_]+:[a-z_]+" % rules.PREFIX, r.record), r.record
        derived = any(o.record in r.expr for o in rules.RECORDING_RULES if o is not r)
        assert derived or f"by ({', '.join(r.level.split('_'))})" in r.expr, r.record


def test_every_recording_rule_has_a_unit_test_with_expected_values():
    tested = {case["expr"].split()[0] for t in _unit_tests() for case in t.get("promql_expr_test", [])
              if case.get("exp_samples")}
    assert {r.record for r in rules.RECORDING_RULES} - tested == set(), "recording rules without a unit test"


def test_promtool_check_rules():
    promtool = require_tool("promtool")
    res = run(promtool, "check", "rules", str(rules.RULES_FILE))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(rules.ALL_RULES) + len(rules.RECORDING_RULES)} rules found" in res.stdout


def test_promtool_unit_tests_pass():
    promtool = require_tool("promtool")
    res = run(promtool, "test", "rules", *[str(p) for p in TESTS])
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("SUCCESS") == len(TESTS)


def test_promtool_unit_tests_catch_a_changed_threshold(tmp_path):
    """The unit tests pin behaviour: the same tests fail against a rule with another threshold."""
    promtool = require_tool("promtool")
    shutil.copytree(ALERTS, tmp_path / "alerts")
    changed = tmp_path / "alerts" / rules.RULES_FILE.name
    text = changed.read_text()
    assert f"> {rules.CORE_HOT_CELSIUS} or" in text
    changed.write_text(text.replace(f"> {rules.CORE_HOT_CELSIUS} or", f"> {rules.CORE_HOT_CELSIUS + 10} or"))
    res = run(promtool, "test", "rules", "tests/thermal.test.yml", cwd=tmp_path / "alerts")
    assert res.returncode != 0 and "FAILED" in res.stdout + res.stderr


def test_amtool_check_config():
    amtool = require_tool("amtool")
    res = run(amtool, "check-config", str(AM_CONFIG))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


@pytest.mark.parametrize("alert, receiver", [
    ("AcceleratorDeviceFailed", "accelerator-oncall"),
    ("AcceleratorDeviceMissing", "accelerator-oncall"),
    ("AcceleratorThermal", "accelerator-team"),
    ("AcceleratorCollectorDown", "accelerator-team"),
    ("AcceleratorFaultOnManyNodes", "accelerator-team"),
])
def test_alertmanager_routes_by_the_rule_s_severity(alert, receiver):
    amtool = require_tool("amtool")
    severity = next(r.severity for r in rules.ALL_RULES if r.alert == alert)
    res = run(amtool, "config", "routes", "test", f"--config.file={AM_CONFIG}",
              f"alertname={alert}", f"severity={severity}", "component=accelerator")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.split() == [receiver]


def test_inhibit_rules_name_existing_alerts():
    names = {r.alert for r in rules.ALL_RULES}
    doc = yaml.safe_load(AM_CONFIG.read_text())
    mentioned = set()
    for rule in doc["inhibit_rules"]:
        for m in rule["source_matchers"] + rule["target_matchers"]:
            value = m.split("=", 1)[1].strip('~"')
            mentioned |= set(value.split("|"))
    assert mentioned and mentioned <= names


# --------------------------------------------------------------------------- fleet rules (issue 28)

FLEET_TEST = ALERTS / "tests" / "fleet_health.test.yml"
CORRELATION_TEST = ALERTS / "tests" / "fault_on_many_nodes.test.yml"


def test_the_correlation_is_five_nodes_within_ten_minutes():
    assert (rules.CORRELATED_NODES, rules.CORRELATION_WINDOW, rules.CORRELATION_WINDOW_SECONDS) == (5, "10m", 600)
    rule = next(r for r in rules.ALL_RULES if r.alert == "AcceleratorFaultOnManyNodes")
    assert rule.expr.endswith(">= 5") and "<= 600" in rule.expr and "[10m]" in rule.expr
    text = rule.summary + rule.description
    assert "{{ $labels.code }}" in text and "{{ $labels.vendor }}" in text
    assert "driver, firmware or software rollout" in text and "not {{" in rule.description


def test_the_correlation_inhibits_fault_bursts_of_its_vendor_but_never_a_failed_device():
    doc = yaml.safe_load(AM_CONFIG.read_text())
    by_source = [r for r in doc["inhibit_rules"] if r["source_matchers"] == ['alertname="AcceleratorFaultOnManyNodes"']]
    assert by_source == [{"source_matchers": ['alertname="AcceleratorFaultOnManyNodes"'],
                          "target_matchers": ['alertname="AcceleratorFaultBurst"'], "equal": ["vendor"]}]


def _mutations():
    """(id, text in the generated rule file, its replacement, the unit test file that must fail)."""
    r = rules
    expected = f"(({r.EXPECTED} >= {r.PRESENT}) or {r.PRESENT} or {r.EXPECTED})"
    recent_counter = f" or increase({r.N.FAULT_EVENTS.name}[{r.CORRELATION_WINDOW}]) > 0"
    return [
        ("four nodes are enough", "> 0)) >= 5", "> 0)) >= 4", CORRELATION_TEST),
        ("a 15 minute window", "<= 600", "<= 900", CORRELATION_TEST),
        ("devices counted, not nodes", "count by (node, vendor, code) (", "count by (uuid, vendor, code) (",
         CORRELATION_TEST),
        ("the counter ignored", recent_counter, "", CORRELATION_TEST),
        ("degraded counted as healthy", 'state="ok"', 'state=~"ok|degraded"', FLEET_TEST),
        ("NaN where nothing is expected", f"(sum by (vendor) ({r.NODE_EXPECTED.record}) > 0)",
         f"(sum by (vendor) ({r.NODE_EXPECTED.record}))", FLEET_TEST),
        ("NaN for an empty fleet", f"(sum({r.NODE_EXPECTED.record}) > 0)", f"(sum({r.NODE_EXPECTED.record}))",
         FLEET_TEST),
        ("expected from the bus only", expected, f"({r.EXPECTED})", FLEET_TEST),
        ("healthy not capped", r.NODE_HEALTHY.expr, f"{r._OK} or (0 * {r.NODE_EXPECTED.record})", FLEET_TEST),
        ("no healthy device: absent, not 0", f" or (0 * {r.NODE_EXPECTED.record})", "", FLEET_TEST),
    ]


@pytest.mark.parametrize("old, new, test_file", [m[1:] for m in _mutations()], ids=[m[0] for m in _mutations()])
def test_fleet_unit_tests_fail_against_a_changed_rule(tmp_path, old, new, test_file):
    """Each part of the fleet rules is pinned by an assertion of their promtool tests."""
    promtool = require_tool("promtool")
    shutil.copytree(ALERTS, tmp_path / "alerts")
    changed = tmp_path / "alerts" / rules.RULES_FILE.name
    text = changed.read_text()
    assert old in text
    changed.write_text(text.replace(old, new))
    res = run(promtool, "test", "rules", f"tests/{test_file.name}", cwd=tmp_path / "alerts")
    out = res.stdout + res.stderr
    # an expectation that failed, not a rule file that no longer loads
    assert res.returncode != 0 and "FAILED" in out and "exp:" in out and "could not parse" not in out, out


def _panel_expr(title: str) -> str:
    dash = json.loads((ROOT / "dashboards" / "json" / "fleet-overview.json").read_text())
    panel = next(p for p in dash["panels"] if p["title"] == title)
    return re.sub(r"\$\{?(\w+)\}?", ".*", panel["targets"][0]["expr"])  # Grafana's "All"


def test_the_fleet_dashboard_computes_what_the_rules_record(tmp_path):
    """The fleet overview's SLI panels (raw series, so that the variables filter them) give the
    recording rules' values on the inputs of fleet_health.test.yml, and its correlation panel counts
    the nodes AcceleratorFaultOnManyNodes counts."""
    promtool = require_tool("promtool")
    panel_for = {rules.VENDOR_SLI.record: _panel_expr("Healthy share by vendor"),
                 rules.CLUSTER_SLI.record: _panel_expr("Healthy share")}
    tests = []
    for t in yaml.safe_load(FLEET_TEST.read_text())["tests"]:
        cases = [{"expr": panel_for[c["expr"]], "eval_time": c["eval_time"],
                  "exp_samples": [{"labels": s["labels"].replace(c["expr"], "") or "{}", "value": s["value"]}
                                  for s in c["exp_samples"]]}
                 for c in t["promql_expr_test"] if c["expr"] in panel_for]
        assert cases
        tests.append({"interval": t["interval"], "input_series": t["input_series"], "promql_expr_test": cases})
    firing = yaml.safe_load(CORRELATION_TEST.read_text())["tests"][0]
    tests.append({"interval": firing["interval"], "input_series": firing["input_series"], "promql_expr_test": [
        {"expr": _panel_expr("Nodes per fault code (10 min)"), "eval_time": "9m",
         "exp_samples": [{"labels": '{vendor="nvidia", code="119"}', "value": 5},
                         {"labels": '{vendor="nvidia", code="13"}', "value": 1}]}]})
    path = tmp_path / "dashboard.test.yml"
    path.write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "1m", "tests": tests}))
    res = run(promtool, "test", "rules", str(path))
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_plugin_pods_alert_keeps_the_component_apart_from_the_rules_own_label():
    """Issue 38 §4: accelerator_stack_component_up's ``component`` would be overwritten by every
    rule's ``component`` label: the alert carries it as ``plugin``."""
    (rule,) = [r for r in rules.ALL_RULES if r.alert == "AcceleratorPluginDown"]
    assert N.STACK_COMPONENT_UP.name in rule.expr and '"plugin"' in rule.expr and rule.for_ == "10m"
