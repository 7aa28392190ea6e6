"""The command line end to end: run (simulated and with NVIDIA absent), inspect, parse, version."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from agent_proc import Agent
from hetero_exporter.model import snapshot_from_json
from hetero_exporter.simulate.scenario import BUILTIN_DIR


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hetero_exporter", *args], capture_output=True,
                          text=True, timeout=120, **kw)


def scenario_with(tmp_path: Path, nvidia_settings: dict) -> str:
    doc = yaml.safe_load((BUILTIN_DIR / "default.yaml").read_text())
    doc["settings"] = {**(doc.get("settings") or {}), "nvidia": nvidia_settings}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_run_simulate_serves_the_default_scenario_devices():
    with Agent(["--simulate", "--interval", "1"]) as agent:
        text = agent.wait_metrics(lambda t: 'accelerator_collector_success{collector="nvml"} 1.0' in t)
        info = [l for l in text.splitlines() if l.startswith("accelerator_device_info{") and 'vendor="nvidia"' in l]
        assert len(info) == 4 and all('model="H100-SXM5-80GB"' in l for l in info)
        assert "accelerator_power_watts{" in text and "accelerator_energy_joules_total{" in text
        assert agent.get("/readyz")[0] == 200 and agent.get("/healthz")[0] == 200
        snap = snapshot_from_json(agent.get("/snapshot")[1])
        assert snap.node == "sim-node-1"
        assert agent.stop() == 0


def test_nvml_failing_to_initialise_is_reported_and_metrics_still_served(tmp_path):
    path = scenario_with(tmp_path, {"init_error": "DriverNotLoaded"})
    with Agent(["--simulate", path, "--interval", "1"]) as agent:
        # on a loaded machine a first cycle may report the collector late before its answer is in
        unavailable = 'accelerator_collector_error_info{collector="nvml",kind="unavailable",reason="nvmlInit failed: NVMLError_DriverNotLoaded'
        text = agent.wait_metrics(lambda t: unavailable in t, timeout=120)
        assert 'accelerator_collector_success{collector="nvml"} 0.0' in text
        assert "accelerator_snapshot_age_seconds" in text


def test_binding_missing_is_reported_and_metrics_still_served(tmp_path):
    # a pynvml that cannot be imported, as on a node without nvidia-ml-py
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "pynvml.py").write_text("raise ImportError('No module named pynvml (test shadow)')\n")
    with Agent(["--collector.nvml", "--interval", "1"], env={"PYTHONPATH": str(shadow)}) as agent:
        text = agent.wait_metrics(lambda t: 'accelerator_collector_success{collector="nvml"} 0.0' in t)
        assert 'kind="unavailable",reason="nvidia-ml-py is not installed' in text


def test_real_nvml_without_a_gpu_says_why():
    with Agent(["--collector.nvml", "--interval", "1"]) as agent:
        text = agent.wait_metrics(lambda t: 'accelerator_collector_success{collector="nvml"} 0.0' in t)
        line = next(l for l in text.splitlines() if l.startswith("accelerator_collector_error_info{"))
        assert 'kind="unavailable"' in line and "nvmlInit failed" in line


def test_a_hanging_nvml_does_not_block_metrics(tmp_path):
    path = scenario_with(tmp_path, {"hang_seconds": 60})
    with Agent(["--simulate", path, "--interval", "1", "--config", _config(tmp_path, {"collectors": {"nvml": {"timeout": 0.5}}})]) as agent:
        # the counter is exported at 0 from the start: wait for it to count
        text = agent.wait_metrics(lambda t: re.search(r'accelerator_collector_errors_total\{collector="nvml",kind="busy"\} [1-9]', t))
        assert 'accelerator_collector_success{collector="nvml"} 0.0' in text
        assert agent.get("/healthz")[0] == 200


def _config(tmp_path: Path, doc: dict) -> str:
    p = tmp_path / "config.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


def test_inspect_prints_one_table_and_json():
    table = cli("inspect", "--simulate")
    assert table.returncode == 0, table.stderr
    devices_part = table.stdout.split("\nPROCESSES")[0]
    rows = [l for l in devices_part.splitlines() if l.startswith("nvidia ")]
    assert len(rows) == 4 and all("H100-SXM5-80GB" in r and "/700 W" in r for r in rows)
    as_json = cli("inspect", "--simulate", "--json")
    snap = snapshot_from_json(as_json.stdout)
    assert [d.identity.index for d in snap.devices if d.identity.vendor == "nvidia"] == [0, 1, 2, 3]


def test_usage_errors_are_clear():
    r = cli("parse", "no-such-tool", "x")
    assert r.returncode == 2 and "no parser for 'no-such-tool'" in r.stderr
    r = cli("run", "--collector.nope")
    assert r.returncode == 2 and "unknown collector 'nope'" in r.stderr
    r = cli("inspect", "--simulate", "/nonexistent/scenario.yaml")
    assert r.returncode == 2 and "no scenario" in r.stderr


def test_bad_config_is_rejected(tmp_path):
    r = cli("inspect", "--simulate", "--config", _config(tmp_path, {"intervall": 3}))
    assert r.returncode == 2 and "unknown keys ['intervall']" in r.stderr


def test_version():
    r = cli("version")
    assert r.returncode == 0 and r.stdout.startswith("hetero-exporter ")


def test_json_logs_are_one_object_per_line():
    with Agent(["--simulate", "--interval", "1"]) as agent:
        agent.wait_metrics(lambda t: "accelerator_device_info" in t)
    assert agent.logs and all(isinstance(d, dict) and {"time", "level", "msg"} <= set(d) for d in agent.logs)
    serving = next(d for d in agent.logs if d["msg"] == "serving")
    assert serving["collectors"] == "nvml" or "nvml" in serving["collectors"].split(",")
    json.dumps(serving)


def test_simulate_at_starts_the_scenario_clock_there(tmp_path):
    doc = yaml.safe_load((BUILTIN_DIR / "default.yaml").read_text())
    doc["faults"] = [{"at": 100, "vendor": "nvidia", "index": 1, "kind": "lost"}]
    path = tmp_path / "lost.yaml"
    path.write_text(yaml.safe_dump(doc))
    before = snapshot_from_json(cli("inspect", "--simulate", str(path), "--json", "--no-collector.npu_smi",
                                    "--no-collector.cnmon", "--no-collector.hy_smi").stdout)
    after = snapshot_from_json(cli("inspect", "--simulate", str(path), "--at", "150", "--json",
                                   "--no-collector.npu_smi", "--no-collector.cnmon", "--no-collector.hy_smi").stdout)
    state = lambda s: next(d.health.state for d in s.devices if d.identity.vendor == "nvidia" and d.identity.index == 1)
    assert state(before) == "ok" and state(after) == "failed"
