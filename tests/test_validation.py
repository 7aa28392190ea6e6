"""One validation layer (hetero_exporter/validate.py) for flags and the config file: every bad
input is one line ``FIELD: what is wrong; allowed: ...`` and exit 2, never a traceback, a busy
loop or an overflow."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetero_exporter import cli, config
from hetero_exporter import validate as v

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hetero_exporter", *args], capture_output=True, text=True,
                          timeout=timeout)


def one_error_line(stderr: str, field: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert lines[0].startswith("hetero-exporter: error: ") and f"{field}:" in lines[0], lines[0]
    return lines[0]


# --------------------------------------------------------------------------- the helpers


@pytest.mark.parametrize("value, problem", [
    (0, "out of range: 0"), (-1, "out of range"), (math.nan, "finite"), (math.inf, "finite"),
    (1e12, "out of range"), (True, "the boolean true"), ("10", 'the string "10"'), (None, "null"),
    ([1], "a list"), (10 ** 400, "out of range: an integer of"),
])
def test_number_refuses_what_is_not_a_number_in_range(value, problem):
    with pytest.raises(v.ValidationError) as e:
        v.number("interval", value, minimum=0.1, maximum=86400, unit="seconds")
    assert str(e.value).startswith("interval: ") and problem in str(e.value)
    assert str(e.value).endswith("; allowed: a number from 0.1 to 86400 seconds")


def test_number_integer_and_bounds():
    assert v.number("n", 3.0, minimum=1, maximum=5, integer=True) == 3
    assert v.number("n", 5, minimum=1, maximum=5) == 5.0
    with pytest.raises(v.ValidationError, match="expected an integer, got 2.5"):
        v.number("n", 2.5, integer=True)


def test_boolean_refuses_the_string_false():
    with pytest.raises(v.ValidationError) as e:
        v.boolean("collectors.nvml.enabled", "false")
    assert str(e.value) == ('collectors.nvml.enabled: expected a boolean, got the string "false"; '
                            'allowed: true, false (unquoted)')
    assert v.boolean("x", False) is False


def test_mapping_names_the_unknown_key_and_lists_the_allowed():
    with pytest.raises(v.ValidationError) as e:
        v.mapping("health", {"mode": "observe", "mdoe": 1}, ["mode", "domain"])
    assert str(e.value) == "health: unknown keys ['mdoe']; allowed: domain, mode"
    with pytest.raises(v.ValidationError, match="key 1 is not a string"):
        v.mapping("x", {1: 2})
    assert v.mapping("", {"a": 1, "x-anchor": 2}, ["a"], extra_prefix="x-") == {"a": 1}


def test_list_of_caps_and_checks_each_item():
    assert v.list_of("l", [1, 2], lambda p, x: v.number(p, x), max_items=2) == [1.0, 2.0]
    with pytest.raises(v.ValidationError, match=r"^l: 3 items; allowed: 0 to 2 items$"):
        v.list_of("l", [1, 2, 3], lambda p, x: x, max_items=2)
    with pytest.raises(v.ValidationError, match=r"^l\[1\]: expected a number"):
        v.list_of("l", [1, "a"], lambda p, x: v.number(p, x), max_items=5)


def test_plain_refuses_an_alias_bomb_without_expanding_it():
    doc = yaml.safe_load("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi")))  # 10^9 strings if expanded
    with pytest.raises(v.ValidationError, match="more than 10000 values"):
        v.plain("extra", doc)
    with pytest.raises(v.ValidationError, match=r"extra.t: expected a finite number"):
        v.plain("extra", {"t": math.nan})


def test_messages_are_one_line_whatever_they_wrap():
    e = v.ValidationError("a", "line one\n  line two", ["x", "y"], source="f.yaml")
    assert str(e) == "f.yaml: a: line one line two; allowed: x, y"
    assert "\n" not in str(v.ValidationError("s", "x" * 5, None)) and v.describe("a\nb") == 'the string "a\\nb"'


def test_read_text_is_capped(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_bytes(b"#" * 2048)
    with pytest.raises(v.ValidationError, match="over the limit of 1024 bytes"):
        v.read_text(str(p), 1024, "config")
    p.write_bytes(b"\xff\xfe")
    with pytest.raises(v.ValidationError, match="not UTF-8"):
        v.read_text(str(p), 1024, "config")


# --------------------------------------------------------------------------- the config file


def load_text(tmp_path: Path, text: str) -> config.Config:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return config.load(str(p))


@pytest.mark.parametrize("text, field", [
    ("interval: .nan", "interval"), ("interval: 0", "interval"), ("interval: -5", "interval"),
    ("interval: 0.000000001", "interval"), ("interval: 1.0e+12", "interval"), ("interval: .inf", "interval"),
    ("default_timeout: 0", "default_timeout"), ("default_timeout: -1", "default_timeout"),
    ("default_timeout: .nan", "default_timeout"), ("collectors: {nvml: {timeout: 0}}", "collectors.nvml.timeout"),
    ("collectors: {hy_smi: {cli_timeout: .inf}}", "collectors.hy_smi.cli_timeout"),
    ("attribution: {podresources_timeout: -2}", "attribution.podresources_timeout"),
    ("collectors: [nvml]", "collectors"), ("health: {policy: 5}", "health.policy"),
    ("attribution: {resources: [1, 2]}", "attribution.resources"),
    ("attribution: {resources: {example.com/npu: nope}}", "attribution.resources.example.com/npu"),
    ('collectors: {nvml: {enabled: "false"}}', "collectors.nvml.enabled"),
    ("health: {policy: {debounce: 5}}", "health.policy.debounce"),
    ("health: {policy: {debounce: {k: 9, n: 5}}}", "health.policy.debounce"),
    ("health: {mode: enforced}", "health.mode"), ("health: {cordon: 'yes'}", "health.cordon"),
    ("health: {domain: Not_A_Domain}", "health.domain"), ("kernel_log: {max_pending: 0}", "kernel_log.max_pending"),
    ("listen: 9400", "listen"), ("listen: 'localhost'", "listen"), ("log_format: xml", "log_format"),
    ("node_name: ''", "node_name"), ("- a list", ""), ("just a string", ""),
])
def test_bad_values_name_their_field(tmp_path, text, field):
    with pytest.raises(config.ConfigError) as e:
        load_text(tmp_path, text)
    line = str(e.value)
    assert line.startswith(f"{tmp_path / 'c.yaml'}: {field}") and "\n" not in line


@pytest.mark.parametrize("text, section, key", [
    ("intervall: 3", "", "intervall"), ("health: {mdoe: enforce}", "health: ", "mdoe"),
    ("attribution: {pod_cahce: false}", "attribution: ", "pod_cahce"),
    ("kernel_log: {statedir: /x}", "kernel_log: ", "statedir"),
    ("collectors: {nvmll: {}}", "collectors: ", "nvmll"),
    ("collectors: {nvml: {enable: false}}", "collectors.nvml: ", "enable"),
    ("scoring: {policy: spread}", "scoring: ", "policy"),
    ("finops: {curency: EUR}", "", "curency"),
    ("health: {policy: {debounse: {k: 1}}}", "health.policy: ", "debounse"),
])
def test_unknown_keys_are_refused_in_every_section(tmp_path, text, section, key):
    with pytest.raises(config.ConfigError) as e:
        load_text(tmp_path, text)
    line = str(e.value)
    assert f"{section}unknown keys" in line and repr(key) in line and ("allowed: " in line or "known: " in line)


def test_valid_settings_still_load(tmp_path):
    cfg = load_text(tmp_path, """
interval: 2.5
default_timeout: 1
listen: "127.0.0.1:0"
collectors:
  nvml: {enabled: false, timeout: 0.5, events: true, event_wait_ms: 500}
  npu_smi: {detail_intervals: {usages: 30, ecc: 0}, topo_interval: 0, path: /usr/local/sbin/npu-smi}
  rocm_smi: {args: "--json --showtemp", cli_timeout: 2}
  hy_smi:
health: {mode: dry-run, cordon: false, budget_max_fraction: 0.2, policy: {debounce: {k: 2, n: 4}}}
attribution: {pod_cache: false, podresources: null, resources: {example.com/npu: ascend}}
kernel_log: {enabled: false, max_records_per_second: 100}
""")
    assert cfg.interval == 2.5 and cfg.collector_settings("nvml")["enabled"] is False
    assert cfg.collector_timeout("nvml") == 0.5 and cfg.collector_settings("hy_smi") == {}
    assert cfg.health["policy"] == {"debounce": {"k": 2, "n": 4}} and "podresources" not in cfg.attribution


def test_the_shipped_deploy_config_validates():
    cfg = config.load(str(ROOT / "deploy" / "base" / "config.yaml"))
    assert cfg.sysfs_root == "/host/sys" and cfg.health["mode"] == "observe"


def test_an_oversized_config_is_refused_unread(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("# padding\n" * (config.MAX_CONFIG_BYTES // 10 + 1))
    with pytest.raises(config.ConfigError, match="over the limit"):
        config.load(str(p))


# --------------------------------------------------------------------------- flags, end to end


@pytest.mark.parametrize("command", ["inspect", "health"])
@pytest.mark.parametrize("interval", ["0", "-1", "nan", "1e-9", "1e12", "inf"])
def test_bad_interval_flag_exits_2_with_one_line(capsys, command, interval):
    argv = [command, "--simulate", "--interval", interval] + (["--dry-run"] if command == "health" else [])
    assert cli.main(argv) == 2
    one_error_line(capsys.readouterr().err, "--interval")


@pytest.mark.parametrize("argv, flag", [
    (["score", "--pod", "p.yaml", "--nodes", "n.json", "--fresh-seconds", "nan"], "--fresh-seconds"),
    (["score", "--pod", "p.yaml", "--nodes", "n.json", "--now", "inf"], "--now"),
    (["inspect", "--simulate", "--at", "-1"], "--at"),
    (["inspect", "--simulate", "--node-name", ""], "--node-name"),
])
def test_other_bad_flags_exit_2_with_one_line(capsys, argv, flag):
    assert cli.main(argv) == 2
    one_error_line(capsys.readouterr().err, flag)


@pytest.mark.parametrize("argv, flag", [
    (["run", "--simulate", "--listen", "127.0.0.1:0", "--interval", "0"], "--interval"),
    (["run", "--simulate", "--listen", "127.0.0.1:0", "--interval", "1e12"], "--interval"),
    (["run", "--simulate", "--listen", "127.0.0.1:0", "--interval", "inf"], "--interval"),
    (["scheduler-extender", "--listen", "127.0.0.1:0", "--fresh-seconds", "inf"], "--fresh-seconds"),
    (["scheduler-extender", "--listen", "127.0.0.1:0", "--domain", "Bad Domain"], "--domain"),
    (["run", "--simulate", "--listen", "nonsense"], "--listen"),
])
def test_serving_commands_refuse_bad_flags_before_serving(argv, flag):
    # before the check, --interval 0 busy-looped and 1e12 crashed with OverflowError
    r = run_cli(*argv, timeout=30)
    assert r.returncode == 2
    one_error_line(r.stderr, flag)


def test_bad_config_exits_2_with_one_line_for_every_command(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text('collectors: {nvml: {enabled: "false"}}\n')
    for argv in (["run", "--listen", "127.0.0.1:0"], ["inspect", "--simulate"], ["health", "--dry-run", "--simulate"]):
        r = run_cli(*argv, "--config", str(bad))
        assert r.returncode == 2, (argv, r.stderr)
        line = one_error_line(r.stderr, "collectors.nvml.enabled")
        assert 'expected a boolean, got the string "false"' in line


# --------------------------------------------------------------------------- any shape at all

_junk = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6) | st.integers(0, 3), inner,
                                                               max_size=4),
    max_leaves=12)


def _shaped(keys) -> st.SearchStrategy:
    """Mappings whose keys are mostly the real ones, their values anything."""
    return st.dictionaries(st.sampled_from(sorted(keys)) | st.text(max_size=6), _junk, max_size=6)


_sections = {
    "collectors": st.dictionaries(st.sampled_from(["nvml", "npu_smi", "rocm_smi", "nope"]),
                                  st.none() | _shaped(config.COLLECTOR_SETTINGS) | _junk, max_size=3),
    "health": _shaped(["mode", "domain", "cordon", "policy", "budget_max_fraction", "udev", "inventory_max_bytes"])
    | st.fixed_dictionaries({"policy": _shaped(["debounce", "classes", "overrides", "readings", "escalation",
                                                "min_healthy_fraction", "reset_codes", "reason_prefix"])}),
    "attribution": _shaped(config.ATTRIBUTION), "kernel_log": _shaped(config.KERNEL_LOG),
    "finops": _shaped(["currency", "reference", "prices"]),
}
_config_docs = st.one_of(
    _junk,
    st.dictionaries(st.sampled_from(sorted(config.TOP)), _junk, max_size=5),
    st.fixed_dictionaries({}, optional={k: s | _junk for k, s in _sections.items()}),
)

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_config_docs)
def test_any_config_document_loads_or_gives_one_line(tmp_path_factory, doc):
    config_file = tmp_path_factory.getbasetemp() / "hypothesis-config.yaml"
    config_file.write_text(yaml.safe_dump(doc, allow_unicode=True))
    try:
        cfg = config.load(str(config_file))
    except config.ConfigError as e:
        assert "\n" not in str(e) and str(e).startswith(str(config_file))
        return
    assert 0.1 <= cfg.interval <= 86400 and all(0 < cfg.collector_timeout(n) for n in cfg.collectors)
