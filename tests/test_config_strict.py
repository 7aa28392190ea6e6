"""Issue 25, item 16: config, web config and scenario files with a duplicate key were accepted
silently (the second value won); now refused with one line naming the key. ``finops.currency``
took 10 KB: it is a label value, bounded."""

from __future__ import annotations

import pytest

from hetero_exporter import cli
from hetero_exporter import config as config_mod


def test_a_config_with_a_duplicate_key_is_refused(tmp_path):
    p = tmp_path / "config.yaml"
    p.write_text("interval: 10\nhealth: {mode: observe}\ninterval: 1\n")
    with pytest.raises(config_mod.ConfigError, match="duplicate key 'interval'"):
        config_mod.load(str(p))


def test_the_cli_exits_2_with_one_line(tmp_path, capsys):
    p = tmp_path / "config.yaml"
    p.write_text("health:\n  mode: observe\n  mode: enforce\n")
    assert cli.main(["inspect", "--config", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "duplicate key 'mode'" in err


def test_a_scenario_with_a_duplicate_key_is_refused(tmp_path):
    from hetero_exporter.simulate import scenario as sc
    p = tmp_path / "s.yaml"
    p.write_text("name: a\nnode: n\nname: b\ndevices: []\n")
    with pytest.raises(sc.ScenarioError, match="duplicate key 'name'"):
        sc.load(str(p))


def test_a_long_currency_is_refused(tmp_path):
    p = tmp_path / "config.yaml"
    p.write_text("finops: {currency: " + "X" * 10000 + "}\n")
    with pytest.raises(Exception, match="at most 16"):
        config_mod.load(str(p))
    p.write_text("finops: {currency: EUR}\n")
    assert config_mod.load(str(p)).finops.currency == "EUR"
