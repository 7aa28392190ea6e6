"""Attribution through the command line: `parse cgroup`, and the simulated node's processes
named from the scenario's cgroup paths (inspect and /metrics), host processes kept."""

from __future__ import annotations

import json
import subprocess
import sys

from agent_proc import Agent
from conftest import shared_fixture
from hetero_exporter.model import snapshot_from_json
from hetero_exporter.simulate import load


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hetero_exporter", *args], capture_output=True, text=True, timeout=120)


def test_parse_cgroup_json_and_table():
    path = shared_fixture("cgroup", "k8s_v2_systemd-driver_crio_burstable.txt")
    out = cli("parse", "cgroup", str(path), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["runtime"] == "cri-o" and doc["qos_class"] == "burstable" and doc["cgroup_version"] == 2
    assert doc["pod_uid"] == "2c9f8a79-5391-454b-88cb-86190881cb96"
    assert doc["container_id"] == "a09343ca97901516c25036e2b954421254f8c68b384b536064e8999f0c4ed18d"
    table = cli("parse", "cgroup", str(path))
    assert table.returncode == 0 and "runtime" in table.stdout and "cri-o" in table.stdout


def test_parse_cgroup_of_garbage_is_a_clear_error(tmp_path):
    bad = tmp_path / "cgroup"
    bad.write_text("hello world\n")
    out = cli("parse", "cgroup", str(bad))
    assert out.returncode == 1 and "cgroup: expected 'hierarchy-ID:controllers:path'" in out.stderr


def _expected(scenario):
    """pid -> (namespace, pod, container) from the scenario ('' for a process in no pod); pids
    are unique across a scenario's devices (device uuids are the vendor tools' own)."""
    want = {}
    for d in scenario.devices:
        for p in d.processes:
            if p.pod:
                ns, name = p.pod.split("/")
                want[p.pid] = (ns, name, p.container)
            else:
                want[p.pid] = ("", "", "")
    return want


def test_inspect_simulate_names_every_process_from_its_cgroup():
    out = cli("inspect", "--simulate", "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    snap = snapshot_from_json(out.stdout)
    want = _expected(load("default"))
    procs = [(d, p) for d in snap.devices for p in d.processes]
    assert procs, "no device reported processes"
    for d, p in procs:
        ns, pod, container = want[p.pid]
        assert (p.namespace or "", p.pod or "", p.container or "") == (ns, pod, container), p
        assert p.attribution == ("cgroup" if pod else "none")
        if pod:
            assert p.pod_uid and p.container_id
            owners = {(a.namespace, a.pod, a.container) for a in d.allocations}
            assert (ns, pod, container) in owners  # the simulated kubelet's PodResources answer
    sources = {s.name: s for s in snap.attribution_sources}
    assert sources["procfs"].ok and sources["podresources"].ok and sources["scenario-pods"].ok
    # a process in no pod is reported with empty labels, not dropped (when its device is)
    host = [p for _, p in procs if want[p.pid] == ("", "", "")]
    if any(d.identity.vendor == "nvidia" for d in snap.devices):
        assert host and all(p.pod is None and p.namespace is None for p in host)


def test_run_simulate_metrics_carry_pod_labels_allocations_and_host_processes():
    scenario = load("default")
    want = _expected(scenario)
    with Agent(["--simulate", "--interval", "1"]) as agent:
        text = agent.wait_metrics(lambda t: "accelerator_process_memory_used_bytes{" in t
                                  and "accelerator_allocation_info{" in t)
        lines = [l for l in text.splitlines() if l.startswith("accelerator_process_memory_used_bytes{")]
        assert lines
        for line in lines:
            labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1:line.index("}")].split(","))
            labels = {k: v.strip('"') for k, v in labels.items()}
            assert (labels["namespace"], labels["pod"], labels["container"]) == want[int(labels["pid"])]
        if 'accelerator_collector_success{collector="nvml"} 1.0' in text:  # the host process is on the GPUs
            assert any('pid="4290"' in l and 'namespace="",pid="4290",pod=""' in l for l in lines)
        assert 'accelerator_attribution_source_up{source="procfs"} 1.0' in text
        assert 'accelerator_attribution_source_up{source="podresources"} 1.0' in text
        assert "accelerator_unattributed_memory_bytes{" in text
        assert agent.stop() == 0
