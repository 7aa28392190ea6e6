"""Metric selection (issue 27), as dcgm-exporter's CSV: ``metrics: {include, exclude}`` by family or
catalogue field, checked against the catalogue (an unknown name is a config error naming it)."""

from __future__ import annotations

import pytest

from hetero_exporter import cli
from hetero_exporter import config as config_mod
from hetero_exporter.exposition.collector import build_families
from hetero_exporter.exposition.selection import Selection
from hetero_exporter.model import fields as F
from hetero_exporter.model import names as N
from hetero_exporter.model import DeviceIdentity, DeviceSample, NodeSnapshot, Quality, Reading


def _snap() -> NodeSnapshot:
    q = Quality("test", "measured", None, 1.0)
    readings = {F.UTILIZATION: Reading(0.5, q), "fan_speed_ratio": Reading(0.4, q),
                "temperature_core_celsius": Reading(60.0, q), "temperature_edge_celsius": Reading(55.0, q),
                "clock_throttle_idle": Reading(1.0, q), "clock_throttle_power_cap": Reading(0.0, q)}
    ident = DeviceIdentity(vendor="amd", kind="gpu", index=0, uuid="U0")
    return NodeSnapshot(node="n", time=1.0, devices=(DeviceSample(ident, 1.0, readings),))


def _names(selection: Selection) -> dict[str, int]:
    out: dict[str, int] = {}
    for fam in build_families(_snap(), selection=selection):
        for s in fam.samples:
            out[s.name] = out.get(s.name, 0) + 1
    return out


def test_exclude_by_family_by_field_pattern_and_by_one_reading():
    everything = _names(Selection())
    assert everything[N.FAN_SPEED.name] == 1 and everything[N.TEMPERATURE.name] == 2
    got = _names(Selection.of({"exclude": [N.FAN_SPEED.name, "clock_throttle_{reason}", "temperature_edge_celsius"]}))
    assert N.FAN_SPEED.name not in got and N.CLOCK_THROTTLE.name not in got
    assert got[N.TEMPERATURE.name] == 1  # core stays, edge went
    assert got[N.DEVICE_INFO.name] == 1 and got[N.HEALTH_STATUS.name] == 4  # identity and health always stay


def test_include_keeps_only_what_it_names_and_exclude_then_takes_away():
    got = _names(Selection.of({"include": ["fan_speed_ratio", N.TEMPERATURE.name],
                               "exclude": ["temperature_core_celsius"]}))
    assert got.get(N.FAN_SPEED.name) == 1 and got.get(N.TEMPERATURE.name) == 1
    assert N.UTILIZATION.name not in got and N.QUALITY_INFO.name in got
    quality_fields = {s.labels["field"] for fam in build_families(_snap(), selection=Selection.of(
        {"include": ["fan_speed_ratio"]})) for s in fam.samples if s.name == N.QUALITY_INFO.name}
    assert quality_fields == {"fan_speed_ratio"}  # its quality row goes with it


@pytest.mark.parametrize("section, where", [
    ({"exclude": ["accelerator_fan_speed"]}, "metrics.exclude[0]"),
    ({"include": ["fan_speed_ratio", "gpu_util"]}, "metrics.include[1]"),
    ({"exclude": "fan_speed_ratio"}, "metrics.exclude"),
    ({"drop": []}, "metrics"),
])
def test_an_unknown_name_is_a_config_error_naming_it(section, where):
    with pytest.raises(config_mod.ConfigError) as e:
        config_mod.from_dict({"metrics": section}, "config.yaml")
    assert str(e.value).startswith(f"config.yaml: {where}")


def test_the_command_exits_2_with_one_line(tmp_path, capsys):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("metrics:\n  exclude: [accelerator_no_such_family]\n")
    assert cli.main(["inspect", "--simulate", "--config", str(cfg), "--log-format", "text"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "metrics.exclude[0]: unknown metric family or field" in err[0]


def test_known_names_pass():
    cfg = config_mod.from_dict({"metrics": {"include": ["accelerator_engine_utilization_ratio", "fan_speed_ratio",
                                                        "temperature_{sensor}_celsius", "ecc_umc_corrected_total"]}})
    assert len(cfg.metrics["include"]) == 4
