"""Issue 24, item 2: only the agent on the real node writes its state, and memory alone never
fails a device.

- A simulation keeps its state in its own work directory, whatever the config names; the
  deploy config's state dir is left as it was, so the next real run reports no phantom GPU.
- ``inspect``, ``health --dry-run`` (and every command but ``run``) read the state at most.
- A device remembered from an earlier boot (or another machine) that the PCI bus no longer
  shows was removed: forgotten, counted and announced once; one still on the bus, or gone
  during this boot, is lost; with the bus unreadable it is neither.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hetero_exporter import cli
from hetero_exporter.exposition.collector import SnapshotCollector
from hetero_exporter.health.detect import policy as policy_mod
from hetero_exporter.health.plan import RemedyConfig
from hetero_exporter.health.act.remedy import Remedy
from hetero_exporter.k8s.client import connect
from hetero_exporter.model import DeviceIdentity, NodeSnapshot
from hetero_exporter.sdk.contract import CollectorOptions
from hetero_exporter.sdk.identity import IdentityMemory, IdentityStore, RemovalLog, identity_file
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate.scenario import load
from test_devices_present import _one_shot

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "fixtures" / "scenarios"
BUS = frozenset({"0000:18:00.0", "0000:28:00.0"})


def _ident(index: int, uuid: str, pci: str) -> DeviceIdentity:
    return DeviceIdentity(vendor="nvidia", kind="gpu", index=index, uuid=uuid, model="H100-SXM5-80GB",
                          pci_address=pci)


def _deploy_config(tmp_path: Path, state: Path) -> str:
    """deploy/base/config.yaml with its state dir moved to ``state`` (nothing else changed)."""
    doc = yaml.safe_load((ROOT / "deploy" / "base" / "config.yaml").read_text())
    assert doc["kernel_log"]["state_dir"] == "/var/lib/hetero-exporter"
    doc["kernel_log"]["state_dir"] = str(state)
    doc.pop("sysfs_root", None)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _wiring(*argv: str) -> "Agent":
    return cli.agent(cli.build_parser().parse_args([*argv, "--log-format", "text"]))


# --------------------------------------------------------------------------- who writes


def test_a_simulation_with_the_deploy_config_then_a_real_run_on_its_state_dir_fails_no_device(tmp_path):
    pytest.importorskip("pynvml")
    state = tmp_path / "var-lib-hetero-exporter"
    cfg = _deploy_config(tmp_path, state)
    simulated = _one_shot(str(SCENARIOS / "nvidia-lost.yaml"), "--config", cfg)  # 8 GPUs
    assert len([d for d in simulated.devices if d.identity.vendor == "nvidia"]) == 8
    assert not state.exists(), "the simulation wrote the node's state dir"

    # the real node: 4 healthy GPUs, the agent writing its state there
    from hetero_exporter.collectors.nvidia.nvml import collector as nvml
    real = nvml.create(CollectorOptions(scenario=load(str(SCENARIOS / "health-dra-4gpu.yaml")), clock=ManualClock(),
                                        state_dir=str(state), identity=IdentityStore(writable=True)))
    try:
        devices = real.collect()
    finally:
        real.close()
    assert len(devices) == 4 and all(d.health.state == "ok" for d in devices)


@pytest.mark.parametrize("argv,writes", [
    (["run"], True),
    (["inspect"], False),
    (["health", "--dry-run"], False),
])
def test_only_run_on_the_real_node_writes_its_state(argv, writes):
    w = _wiring(*argv)
    try:
        assert w.scenario is None and w.state_writable is writes
        assert w.parts.identities.writable is writes
    finally:
        w.close()


def test_a_simulation_writes_only_its_own_work_directory(tmp_path):
    state = tmp_path / "state"
    w = _wiring("inspect", "--simulate", "--config", _deploy_config(tmp_path, state))
    try:
        assert w.state_dir.startswith(w.workdir) and w.state_writable
    finally:
        w.close()


def test_a_read_only_memory_reads_the_file_and_never_writes_it(tmp_path):
    path = identity_file(str(tmp_path), "t")
    writer = IdentityMemory(path, boot_id="b1")
    writer.remember(_ident(0, "U0", "0000:18:00.0"))
    before = Path(path).read_bytes()
    reader = IdentityStore(writable=False, boot_id="b1").memory(path)
    assert reader.recall(index=0).uuid == "U0"
    reader.remember(_ident(1, "U1", "0000:28:00.0"))  # a new device: kept in memory only
    assert Path(path).read_bytes() == before
    assert IdentityStore(writable=False).memory(str(tmp_path / "absent.json")).known() == []
    assert not (tmp_path / "absent.json").exists()


def test_the_kernel_log_cursor_is_not_saved_by_a_read_only_follower(tmp_path):
    from hetero_exporter.sources import kernel_log as kl
    log_path = tmp_path / "kern.log"
    log_path.write_text("Dec  1 10:00:00 host kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.\n")
    f = kl.Follower(kl.FileSource(str(log_path)), state_dir=str(tmp_path / "st"), boot_id="b",
                    clock=ManualClock(), writable=False)
    f.drain()
    f.take()
    f.save_state()
    assert not (tmp_path / "st").exists()


# --------------------------------------------------------------------------- removed, not lost


def _saved(tmp_path: Path, boot: str = "b1", machine: str | None = None) -> str:
    path = identity_file(str(tmp_path), "t")
    mem = IdentityMemory(path, boot_id=boot, machine_id=machine)
    mem.remember(_ident(0, "U0", "0000:18:00.0"))
    mem.remember(_ident(1, "U1", "0000:28:00.0"))
    return path


def test_a_device_from_an_earlier_boot_on_neither_bus_nor_tool_is_removed_once_and_forgotten(tmp_path):
    path = _saved(tmp_path)
    removals = RemovalLog()
    mem = IdentityMemory(path, boot_id="b2", bus=frozenset({"0000:18:00.0"}), removals=removals)
    assert [d.uuid for d in mem.missing([])] == ["U0"]  # U0: on the bus, not listed: lost
    assert [d.uuid for d in removals.drain()] == ["U1"] and removals.drain() == ()
    assert removals.totals() == {"nvidia": 1}
    assert "U1" not in Path(path).read_text()  # forgotten for good
    again = IdentityMemory(path, boot_id="b3", bus=frozenset({"0000:18:00.0"}), removals=removals)
    assert [d.uuid for d in again.known()] == ["U0"] and removals.totals() == {"nvidia": 1}


def test_a_device_gone_during_this_boot_is_lost_even_off_the_bus(tmp_path):
    path = _saved(tmp_path)
    removals = RemovalLog()
    mem = IdentityMemory(path, boot_id="b1", bus=frozenset(), removals=removals)
    assert [d.uuid for d in mem.missing([])] == ["U0", "U1"] and removals.totals() == {}


def test_a_new_machine_id_counts_as_another_boot(tmp_path):
    path = _saved(tmp_path, boot="b1", machine="m1")
    removals = RemovalLog()
    mem = IdentityMemory(path, boot_id="b1", machine_id="m2", bus=frozenset(), removals=removals)
    assert mem.missing([]) == [] and removals.totals() == {"nvidia": 2}


def test_with_the_bus_unreadable_a_device_from_an_earlier_boot_is_neither_lost_nor_forgotten(tmp_path):
    path = _saved(tmp_path)
    mem = IdentityMemory(path, boot_id="b2", bus=None, removals=RemovalLog())
    assert mem.missing([]) == []  # unknown is not failed
    assert {d.uuid for d in mem.known()} == {"U0", "U1"}
    mem.remember(_ident(0, "U0", "0000:18:00.0"))  # read again this boot: it can be lost from now on
    assert [d.uuid for d in mem.missing([])] == ["U0"]


def test_removals_are_counted_in_metrics():
    snap = NodeSnapshot(node="n", time=1.0, expected={"nvidia": 2}, removed_total={"nvidia": 1})
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, clock=lambda: snap.time))
    got = {(s.name, s.labels.get("vendor")): s.value
           for fam in text_string_to_metric_families(generate_latest(reg).decode()) for s in fam.samples}
    assert got[("accelerator_devices_removed_total", "nvidia")] == 1


def test_a_removal_is_announced_on_the_node_once(kube_api, tmp_path):
    kube_api.seed_node("gpu-node")
    cluster = connect(kube_api.write_kubeconfig(tmp_path / "kubeconfig"), env={})
    remedy = Remedy(cluster, "gpu-node", policy_mod.load(None), RemedyConfig.from_mapping({}, mode="dry-run"),
                    environ={})
    gone = [_ident(3, "GPU-gone", "0000:38:00.0")]
    assert remedy.announce_removed(gone) == []
    assert remedy.announce_removed(gone) == []  # a resend (a restart) is the same event
    events = kube_api.events(involved_name="gpu-node", reason="AcceleratorRemoved")
    assert len(events) == 1 and events[0]["type"] == "Normal"
    assert "GPU-gone" in events[0]["message"] and "0000:38:00.0" in events[0]["message"]


def test_the_wiring_passes_the_bus_and_a_removal_log_to_the_collectors(tmp_path):
    w = _wiring("inspect", "--simulate", str(SCENARIOS / "nvidia-lost.yaml"))
    try:
        store = w.parts.identities
        assert store.bus is not None and "0000:18:00.0" in store.bus and len(store.bus) == 8
        assert store.boot_id == "sim-nvidia-lost" and store.removals is w.parts.removals
    finally:
        w.close()
    assert json.dumps(sorted(store.bus))  # plain strings
