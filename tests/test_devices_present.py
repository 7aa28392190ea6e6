"""`accelerator_devices_present` counts only the devices the vendor tools really see (issue 15):
PCI presence's stand-ins for devices on the bus that no tool reports, and devices a collector
reports lost with nothing read, are not present, so the shipped AcceleratorDeviceMissing alert
(`expected > present` for 5 minutes) fires on a node with a device missing from its tool."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from conftest import ROOT, require_tool
from hetero_exporter import cli, table
from hetero_exporter.exposition.collector import SnapshotCollector
from hetero_exporter.model import (DeviceIdentity, DeviceSample, Fault, Health, NodeSnapshot, Quality,
                                   Reading)
from hetero_exporter.sampling import mark_stale
from hetero_exporter.simulate import ManualClock

RULES_FILE = ROOT / "alerts" / "hetero-exporter.rules.yml"
# the firing alert (labels and annotations for node n1, vendor nvidia) as the shipped unit test has it
_SHIPPED_FIRING = next(
    case["exp_alerts"][0]
    for t in yaml.safe_load((ROOT / "alerts" / "tests" / "device_missing.test.yml").read_text())["tests"]
    for case in t["alert_rule_test"] if case["exp_alerts"])


def _scenario(tmp_path: Path, gpus: int, extra: int) -> str:
    doc = {"name": "presence", "node": "n1",
           "devices": [{"vendor": "nvidia", "count": gpus, "product": "NVIDIA H100 80GB HBM3",
                        "pci_address": "0000:18:00.0", "pci_stride": 16,
                        "values": {"utilization_ratio": 0.5, "temperature_core_celsius": 50}}],
           "settings": {"pci_extra": {"nvidia": extra}} if extra else {}}
    path = tmp_path / "presence.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _one_shot(scenario: str, *flags: str) -> NodeSnapshot:
    """The snapshot `inspect --simulate` takes, on a manual scenario clock (at --at)."""
    args = cli.build_parser().parse_args(["inspect", "--simulate", scenario, *flags, "--kernel-log", "off",
                                          "--log-format", "text"])
    clock = ManualClock()
    clock.set_t(args.at or 0.0)
    w = cli.agent(args, clock=clock)
    sampler = w.start().sampler
    try:
        return sampler.collect()
    finally:
        sampler.close()
        w.close()


def _exposed(scenario: str) -> dict[str, float]:
    """accelerator_devices_{expected,present}{vendor="nvidia"} of one simulated cycle."""
    snap = _one_shot(scenario)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, clock=lambda: snap.time))
    out = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            if s.name in ("accelerator_devices_expected", "accelerator_devices_present") \
                    and s.labels.get("vendor") == "nvidia":
                out[s.name] = s.value
    return out


def _alerts(tmp_path: Path, exposed: dict[str, float]) -> subprocess.CompletedProcess:
    """promtool: the shipped rule over these values held for 10 minutes; expects the alert at 7m
    when expected > present, none otherwise."""
    promtool = require_tool("promtool")
    fires = exposed["accelerator_devices_expected"] > exposed["accelerator_devices_present"]
    expect = [_SHIPPED_FIRING] if fires else []
    test = {"rule_files": [str(RULES_FILE)], "evaluation_interval": "1m",
            "tests": [{"interval": "1m",
                       "input_series": [{"series": f'{name}{{node="n1", vendor="nvidia"}}', "values": f"{v:g}x10"}
                                        for name, v in sorted(exposed.items())],
                       "alert_rule_test": [{"eval_time": "7m", "alertname": "AcceleratorDeviceMissing",
                                            "exp_alerts": expect}]}]}
    path = tmp_path / "missing.test.yml"
    path.write_text(yaml.safe_dump(test))
    return subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)


def test_a_device_on_the_bus_that_the_tool_does_not_show_is_expected_not_present_and_alerts(tmp_path):
    exposed = _exposed(_scenario(tmp_path, gpus=7, extra=1))
    assert exposed == {"accelerator_devices_expected": 8.0, "accelerator_devices_present": 7.0}
    res = _alerts(tmp_path, exposed)
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_healthy_node_has_as_many_present_as_expected_and_no_alert(tmp_path):
    exposed = _exposed(_scenario(tmp_path, gpus=8, extra=0))
    assert exposed == {"accelerator_devices_expected": 8.0, "accelerator_devices_present": 8.0}
    res = _alerts(tmp_path, exposed)
    assert res.returncode == 0, res.stdout + res.stderr


def _gpu(index: int, **kw) -> DeviceSample:
    ident = DeviceIdentity("nvidia", "gpu", index, f"GPU-{index}", pci_address=f"0000:{index + 0x18:02x}:00.0",
                           parent=kw.pop("parent", None))
    readings = kw.pop("readings", {"utilization_ratio": Reading(0.5, Quality("nvml"))})
    return DeviceSample(identity=ident, timestamp=100.0, readings=readings, **kw)


def test_present_counts_what_the_tools_read_and_a_stale_carry_over():
    lost = Fault("gpu-lost", "device-lost", "reboot-node", severity="critical")
    devices = (
        _gpu(0),
        mark_stale(_gpu(1), 110.0, "nvml: late"),  # late collector: seen at its last success
        _gpu(2, readings={}, health=Health("failed", (lost,))),  # lost under its pinned uuid
        _gpu(3, readings={}, health=Health("unknown", ())),  # cannot even be identified
        _gpu(4, readings={}, health=Health("failed", (lost,)), faults=(lost,)),  # PCI presence stand-in
        _gpu(5, parent="GPU-0"),  # a MIG instance is not a GPU
        _gpu(6, readings={}),  # a tool that reads nothing of a healthy device still lists it
    )
    assert NodeSnapshot("n", 110.0, devices=devices).present() == {"nvidia": 3}  # 0, 1 and 6


def test_a_gpu_lost_before_the_first_read_is_not_present():
    """XID 79 before the first read: NVML cannot identify the GPU (GPU_IS_LOST), the tool does not
    see it, and inspect says so."""
    snap = _one_shot(str(ROOT / "fixtures" / "scenarios" / "nvidia-xid79.yaml"), "--at", "40")
    assert snap.expected == {"nvidia": 4} and snap.present() == {"nvidia": 3}
    assert "pci: nvidia expected 4, present 3  <-- mismatch" in table.render(snap)
