"""The one assembly (issue 26, app/): typed settings, the two environments, services closed
once, one API connection, and exit codes carried by the errors themselves."""

from __future__ import annotations

import dataclasses
import re
import threading
from pathlib import Path

import pytest

from hetero_exporter import cli
from hetero_exporter import config as config_mod
from hetero_exporter.app import settings as settings_mod
from hetero_exporter.app.agent import Agent, Options
from hetero_exporter.app.environment import Environment, SimulatedEnvironment
from hetero_exporter.app.services import Services
from hetero_exporter.model.errors import EXIT_USAGE, InputError

ROOT = Path(__file__).resolve().parents[1]


def test_typed_sections_have_the_keys_the_config_file_accepts():
    """A key the file accepts but no typed field reads would be silently ignored, and a field
    no key sets could never be configured."""
    assert {f.name for f in dataclasses.fields(settings_mod.KernelLogSettings)} == set(config_mod.KERNEL_LOG)
    assert {f.name for f in dataclasses.fields(settings_mod.AttributionSettings)} == set(config_mod.ATTRIBUTION)
    assert {f.name for f in dataclasses.fields(settings_mod.OtlpSettings)} == set(config_mod.OTLP)
    # contents: what the named files hold, read when the settings are made (no key of its own)
    assert {f.name for f in dataclasses.fields(settings_mod.OtlpTlsSettings)} == set(config_mod.OTLP_TLS) | {"contents"}


def test_section_defaults_and_the_kernel_log_flag():
    cfg = config_mod.from_dict({"kernel_log": {"max_pending": 7}, "attribution": {"pod_cache": False}})
    s = settings_mod.Settings.parse(cfg)
    assert s.kernel_log.max_pending == 7 and s.kernel_log.enabled and s.kernel_log.state_dir == "/var/lib/hetero-exporter"
    assert s.attribution.pod_cache is False and s.attribution.podresources is None
    assert settings_mod.Settings.parse(cfg, kernel_log="OFF").kernel_log.enabled is False
    on = settings_mod.Settings.parse(cfg, kernel_log="/var/log/kern.log").kernel_log
    assert on.enabled and on.path == "/var/log/kern.log" and on.max_pending == 7
    assert s.health.policy is not None and s.health.remedy.mode == "observe"
    assert settings_mod.Settings.parse(cfg, health_mode="enforce").health.remedy.mode == "enforce"


def test_no_scenario_fork_outside_the_environment():
    """The host and the simulation differ in app/environment.py only (and in the SDK's fake-tool
    harness, which picks the backend a collector runs over)."""
    allowed = {"app/environment.py", "sdk/cli_collector.py"}
    pattern = re.compile(r"scenario\s+is\s+(not\s+)?None")
    found = []
    for path in (ROOT / "hetero_exporter").rglob("*.py"):
        rel = path.relative_to(ROOT / "hetero_exporter").as_posix()
        if rel in allowed or rel.startswith("simulate/"):
            continue
        code = [ln for ln in path.read_text(encoding="utf-8").splitlines() if not ln.lstrip().startswith("#")]
        found += [f"{rel}: {ln.strip()}" for ln in code if pattern.search(ln)]
    assert not found, found


def test_services_close_newest_first_once_and_past_a_failure():
    closed = []
    services = Services()
    assert services.start("a", lambda: 1, lambda: closed.append("a")) == 1
    services.add("b", lambda: (_ for _ in ()).throw(RuntimeError("broken close")))
    services.start("c", lambda: None, lambda: closed.append("c"))
    with pytest.raises(ValueError):
        services.start("d", lambda: (_ for _ in ()).throw(ValueError("no start")), lambda: closed.append("d"))
    assert services.names == ["a", "b", "c"]  # a service that failed to start is not closed
    services.close()
    services.close()
    assert closed == ["c", "a"]


def _simulated(**kw) -> Agent:
    return Agent.build(Options(command="inspect", simulate="default", **kw))


def test_a_simulated_agent_keeps_everything_in_its_workdir_and_closes_every_service():
    before = {t.name for t in threading.enumerate()}
    agent = _simulated()
    try:
        assert isinstance(agent.env, SimulatedEnvironment) and agent.state_writable
        workdir = Path(agent.workdir)
        assert agent.state_dir == str(workdir / "state")
        snap = agent.start().sampler.collect()
        assert snap.devices and agent.start() is agent.parts  # built once, started once
        assert "kernel-log" in agent.services.names
    finally:
        agent.close()
    assert not workdir.exists()
    assert agent.services.names == []
    left = {t.name for t in threading.enumerate() if t.is_alive()} - before
    assert not {n for n in left if "kmsg" in n or "kernel" in n}, left


def test_the_host_environment_writes_state_only_for_run(tmp_path):
    cfg = config_mod.from_dict({"sysfs_root": str(tmp_path / "no-sysfs")})
    env = Environment(settings_mod.Settings.parse(cfg), host_root=None)
    assert env.writes_state("run") and not env.writes_state("inspect") and not env.writes_state("health")
    assert env.present_vendors() is None and env.bus_now() is None  # unreadable bus: cannot tell
    assert env.state_dir() == "/var/lib/hetero-exporter" and env.udev() is True


def test_one_api_connection_for_the_pod_cache_and_the_health_loop(monkeypatch):
    from prometheus_client import CollectorRegistry

    from hetero_exporter.k8s import client as k8s_client
    calls = []
    real = k8s_client.connect
    monkeypatch.setattr(k8s_client, "connect", lambda *a, **k: calls.append(a) or real(None, env={}))
    agent = Agent.build(Options(command="run", simulate="default", health_mode="dry-run", kubeconfig="/nonexistent"))
    try:
        parts = agent.start()
        CollectorRegistry(auto_describe=False).register(parts.health.metrics)
        assert parts.health.remedy is not None and parts.cluster is not None
    finally:
        agent.close()
    assert len(calls) == 1


def test_an_input_error_exits_with_its_code_and_a_bug_keeps_its_traceback(monkeypatch, capsys):
    from hetero_exporter.app import commands

    def bad_input(*_a, **_k):
        raise InputError("scenario.yaml: devices[0].vendor: not one of the choices")

    monkeypatch.setattr(commands, "inspect", bad_input)
    assert cli.main(["inspect", "--log-format", "text"]) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err == "hetero-exporter: error: scenario.yaml: devices[0].vendor: not one of the choices"

    def bug(*_a, **_k):
        raise ValueError("an internal bug")  # before: exit 2 as if the user had erred

    monkeypatch.setattr(commands, "inspect", bug)
    with pytest.raises(ValueError, match="an internal bug"):
        cli.main(["inspect", "--log-format", "text"])


def test_every_input_error_of_the_project_is_an_input_error():
    """The errors cli.main used to catch as ValueError keep exit 2, now by their class."""
    from hetero_exporter.finops import FinOpsError
    from hetero_exporter.health.detect.policy import PolicyError
    from hetero_exporter.model import SchemaError
    from hetero_exporter.model.scenario import ScenarioError
    from hetero_exporter.sdk.faults import FaultTableError
    from hetero_exporter.sdk.kmsg import RulesError
    from hetero_exporter.validate import ValidationError
    from hetero_exporter.web.config import WebConfigError
    for cls in (config_mod.ConfigError, FinOpsError, PolicyError, SchemaError, ScenarioError, FaultTableError,
                RulesError, ValidationError, WebConfigError):
        assert issubclass(cls, InputError) and issubclass(cls, ValueError), cls
