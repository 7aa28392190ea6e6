"""Issue 37, the collectors' settings: a settings dataclass per collector (its module's
``SETTINGS``), checked at load per collector; the host paths a collector sees are a typed
``HostPaths`` in ``CollectorOptions.host``, never a ``host_root`` key of its settings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hetero_exporter import cli, config, registry
from hetero_exporter.sdk.contract import CollectorOptions, HostPaths
from hetero_exporter.sdk.settings import CollectorSettings, ToolSettings
from hetero_exporter.simulate import ManualClock, load

ROOT = Path(__file__).resolve().parents[1]
# every key a collector's section took before the settings were split per collector
KEYS_BEFORE = {
    "enabled", "timeout", "cli_timeout", "path", "host_root", "host_exec", "sysfs_root", "args", "runtime_version",
    "fallback", "events", "profiling", "parallel_calls", "budget_fraction", "detail_calls_per_cycle",
    "health_calls_per_cycle", "info_calls_per_cycle", "detail_intervals", "topo_interval", "info_interval",
    "query_interval", "ecc_uncorrected_threshold", "fault_hold_seconds", "event_hold_seconds", "event_wait_ms"}


def _load(tmp_path: Path, text: str) -> config.Config:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return config.load(str(p))


def test_every_collector_names_its_settings_and_no_key_was_lost():
    classes = {name: registry.collector_settings(e) for name, e in registry.collector_entries().items()}
    assert all(isinstance(c, type) and issubclass(c, CollectorSettings) for c in classes.values()), classes
    own = {k for c in classes.values() if c is not None for k in c.checks()}
    assert own | set(config.COLLECTOR_SETTINGS) == KEYS_BEFORE
    assert not own & {"host_root", "host_exec", "sysfs_root"}  # the agent's: HostPaths


def test_a_key_the_collector_does_not_read_is_refused_at_load(tmp_path, capsys):
    with pytest.raises(config.ConfigError) as e:
        _load(tmp_path, "collectors: {nvml: {topo_interval: 60}}\n")  # cnmon's, npu_smi's... not nvml's
    line = str(e.value)
    assert line.startswith(f"{tmp_path / 'c.yaml'}: collectors.nvml: unknown keys ['topo_interval']") and "\n" not in line
    assert "events" in line and "path" in line  # the allowed keys: its own and the SDK's
    bad = tmp_path / "bad.yaml"
    bad.write_text("collectors: {cnmon: {info_calls_per_cycle: -1}}\n")
    assert cli.main(["inspect", "--simulate", "--config", str(bad), "--log-format", "text"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "collectors.cnmon.info_calls_per_cycle: out of range" in err


def test_the_keys_a_collector_reads_are_typed_and_its_own_section_wins():
    cfg = config.from_dict({"collectors": {"npu_smi": {"detail_intervals": {"ecc": 0}, "topo_interval": 30,
                                                        "host_root": "/elsewhere", "timeout": 3}}})
    from hetero_exporter.app.settings import Settings
    section = Settings.parse(cfg).collector("npu_smi")
    assert section.own == {"detail_intervals": {"ecc": 0.0}, "topo_interval": 30.0}
    assert section.host(HostPaths("/host/root", sysfs="/host/sys")) == HostPaths("/elsewhere", sysfs="/host/sys")
    s = registry.collector_settings(registry.collector_entries()["npu_smi"]).of(section.own)
    assert (s.detail_intervals, s.topo_interval, s.path, s.parallel_calls) == ({"ecc": 0.0}, 30.0, None, 4)
    assert ToolSettings.of({"events": False, "path": "/x"}).path == "/x"  # a binding's section, to its CLI fallback


def test_a_simulated_collector_gets_its_fake_host_root_as_host_paths(tmp_path):
    from hetero_exporter.collectors.cambricon.cnmon import collector as cnmon
    sc = load(str(ROOT / "fixtures" / "scenarios" / "all-vendors.yaml"))
    opts = CollectorOptions(scenario=sc, clock=ManualClock(), workdir=str(tmp_path), settings={"topo_interval": 0})
    c = cnmon.create(opts)
    assert c.host.root is not None and c.host.root.endswith("host-root-cambricon")
    assert c.settings == cnmon.CnmonSettings(topo_interval=0.0)
    assert {d.identity.runtime_version for d in c.collect() if d.identity.vendor == "cambricon"} == {"1.15.0"}
    mine = cnmon.create(CollectorOptions(scenario=sc, clock=ManualClock(), workdir=str(tmp_path / "2"),
                                         settings={"topo_interval": 0}, host=HostPaths(str(tmp_path))))
    assert mine.host.root == str(tmp_path)  # a configured host root wins over the fake's


def test_no_code_reads_a_host_path_from_a_collectors_settings():
    pattern = re.compile(r"""settings(\.get\(|\[)\s*["'](host_root|host_exec|sysfs_root)["']|["']host_root["']\s+(not\s+)?in\s+\w*settings""")
    found = []
    for top in (ROOT / "hetero_exporter", ROOT / "collectors"):
        for path in top.rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            found += [f"{path.relative_to(ROOT)}:{i}" for i, ln in enumerate(text.splitlines(), 1) if pattern.search(ln)]
    assert not found, found
