"""Pinned identities survive an agent restart: a GPU lost while the agent restarts is reported
failed under the uuid first read (not ``nvidia-unidentified-<index>``); the file is bounded,
refused when foreign, saved on change only, and a read-only state dir leaves memory working."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import yaml

from hetero_exporter import cli
from hetero_exporter.model import DeviceIdentity
from hetero_exporter.sdk import identity as identity_mod
from hetero_exporter.sdk.contract import CollectorOptions
from hetero_exporter.sdk.identity import IdentityMemory, identity_file
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate.scenario import from_dict
from test_amdsmi import BASE as AMD_BASE
from test_devices_present import _one_shot

SCENARIOS = Path(__file__).resolve().parent.parent / "fixtures" / "scenarios"
LOG = "hetero_exporter.sdk.identity"


def _ident(index: int, uuid: str, pci: str) -> DeviceIdentity:
    return DeviceIdentity(vendor="nvidia", kind="gpu", index=index, uuid=uuid, model="H100-SXM5-80GB",
                          pci_address=pci, driver_version="570.86.15", serial=f"S{index}")


def _scenario(name: str, handle_error: str | None = None):
    doc = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    if handle_error:
        for f in doc["faults"]:
            if f["kind"] != "reset":
                f["handle_error"] = handle_error  # nvmlDeviceGetHandleByIndex fails while lost
    return from_dict(doc, name)


def _nvml(scenario, t: float, state_dir):
    pytest.importorskip("pynvml")
    from hetero_exporter.collectors.nvidia.nvml import collector as nvml
    clock = ManualClock()
    clock.set_t(t)
    return nvml.create(CollectorOptions(scenario=scenario, clock=clock,
                                        state_dir=None if state_dir is None else str(state_dir)))


def _collect_once(collector):
    try:
        return collector.collect()
    finally:
        getattr(collector, "close", lambda: None)()


def _by_index(devices):
    return {d.identity.index: d for d in devices if d.identity.parent is None}


# --------------------------------------------------------------------------- NVML over the fake


@pytest.mark.parametrize("name,lost_at,handle_error", [
    ("nvidia-lost", 30, None),  # every call on the GPU answers GPU_IS_LOST, the handle lookup works
    ("health-dra-4gpu", 100, "GpuIsLost"),  # the handle lookup itself answers GPU_IS_LOST
])
def test_a_gpu_lost_across_a_restart_is_failed_under_its_real_uuid(tmp_path, name, lost_at, handle_error):
    scenario = _scenario(name, handle_error)
    first = _by_index(_collect_once(_nvml(scenario, 0, tmp_path)))
    uuid = first[2].identity.uuid
    assert uuid.startswith("GPU-") and first[2].health.state == "ok"
    assert (tmp_path / "identities-nvml.json").is_file()

    without = _by_index(_collect_once(_nvml(scenario, lost_at, None)))
    assert without[2].identity.uuid == "nvidia-unidentified-2"  # what a restart did before

    after = _by_index(_collect_once(_nvml(scenario, lost_at, tmp_path)))
    lost = after[2]
    assert lost.identity == first[2].identity  # uuid, serial, model, PCI address: as first read
    assert lost.health.state == "failed" and lost.health.reasons[0].code == "gpu-lost"
    assert uuid in lost.health.reasons[0].message
    assert [d.identity.uuid for d in after.values()] == [d.identity.uuid for d in first.values()]
    assert all(d.health.state == "ok" for i, d in after.items() if i != 2)


def test_a_restored_identity_is_read_again_when_the_gpu_answers(tmp_path):
    """A stale entry (a board swapped at that PCI address while the agent was down) is replaced
    by what the GPU says now and not reported lost; the file is rewritten."""
    scenario = _scenario("nvidia-lost")
    real = _by_index(_collect_once(_nvml(scenario, 0, tmp_path)))
    path = tmp_path / "identities-nvml.json"
    doc = json.loads(path.read_text())
    doc["devices"][0]["uuid"] = "GPU-swapped-out"
    path.write_text(json.dumps(doc))
    path.chmod(0o600)
    after = _collect_once(_nvml(scenario, 0, tmp_path))
    assert [d.identity.uuid for d in after] == [d.identity.uuid for d in real.values()]
    assert all(d.health.state == "ok" for d in after)
    assert "GPU-swapped-out" not in path.read_text()


def test_the_file_is_saved_on_change_only_with_mode_0600(tmp_path, monkeypatch):
    writes = []
    real_write = identity_mod._write_atomically
    monkeypatch.setattr(identity_mod, "_write_atomically", lambda p, d: (writes.append(p), real_write(p, d)))
    scenario = _scenario("health-dra-4gpu")
    c = _nvml(scenario, 0, tmp_path)
    try:
        for _ in range(3):
            c.collect()
    finally:
        c.close()
    assert 1 <= len(writes) <= 4  # one per new GPU at most, none for the later cycles
    count = len(writes)
    _collect_once(_nvml(scenario, 0, tmp_path))  # a restart over an unchanged node writes nothing
    assert len(writes) == count
    path = tmp_path / "identities-nvml.json"
    assert (path.stat().st_mode & 0o777) == 0o600
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    doc = json.loads(path.read_text())
    assert doc["format"] == identity_mod.FILE_FORMAT and len(doc["devices"]) == 4


# --------------------------------------------------------------------------- the file, hostile


def _saved(tmp_path) -> str:
    path = identity_file(str(tmp_path), "t")
    mem = IdentityMemory(path, boot_id="b1")
    mem.remember(_ident(0, "U0", "0000:18:00.0"))
    mem.remember(_ident(1, "U1", "0000:28:00.0"))
    return path


def test_a_saved_memory_is_restored_with_its_boot_id_and_restored_entries_are_marked(tmp_path):
    path = _saved(tmp_path)
    assert json.loads(Path(path).read_text())["boot_id"] == "b1"
    # a reboot with both boards still on the bus: uuids are hardware identities, kept
    mem = IdentityMemory(path, boot_id="b2", bus=frozenset({"0000:18:00.0", "0000:28:00.0"}))
    assert mem.recall(index=1).uuid == "U1" and mem.recall(pci_address="0000:18:00.0").uuid == "U0"
    assert [d.uuid for d in mem.missing([])] == ["U0", "U1"]
    assert mem.recall(index=1, restored=False) is None  # not read by this process yet
    mem.remember(_ident(1, "U1", "0000:28:00.0"))
    assert mem.recall(index=1, restored=False).uuid == "U1"


def _refused(path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger=LOG):
        mem = IdentityMemory(path)
    assert mem.known() == []
    lines = [r.getMessage() for r in caplog.records if r.name == LOG]
    assert len(lines) == 1 and path in lines[0] and "starting empty" in lines[0], lines
    caplog.clear()


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


def test_a_corrupt_oversized_or_foreign_file_starts_empty_with_one_line_and_is_rewritten(tmp_path, caplog):
    path = _saved(tmp_path)
    good = Path(path).read_bytes()
    bad = {
        "corrupt": b"{not json",
        "deep": b"[" * 200_000,
        "oversized": b" " * (identity_mod.MAX_BYTES + 1) + good,
        "foreign format": json.dumps({"schema": 1, "source": "/dev/kmsg", "seq": 5}).encode(),
        "other version": good.replace(b'"version":1', b'"version":2'),
        "too many": json.dumps({"format": identity_mod.FILE_FORMAT, "version": 1, "devices": [
            {"vendor": "nvidia", "kind": "gpu", "index": i, "uuid": f"U{i}"} for i in range(1025)]}).encode(),
        "bad row": good.replace(b'"index":0', b'"index":"zero"'),
        "child row": good.replace(b'"parent":null', b'"parent":"U9"', 1),
    }
    for why, data in bad.items():
        _write(path, data)
        assert Path(path).read_bytes() == data, why
        _refused(path, caplog)
    mem = IdentityMemory(path)  # the last bad file: overwritten at the first save
    mem.remember(_ident(0, "U0", "0000:18:00.0"))
    assert [d.uuid for d in IdentityMemory(path).known()] == ["U0"]


def test_a_file_of_another_owner_writable_by_others_a_link_or_a_fifo_is_refused(tmp_path, caplog):
    path = _saved(tmp_path)
    good = Path(path).read_bytes()
    if os.geteuid() == 0:
        os.chown(path, 12345, 12345)
        _refused(path, caplog)
        os.chown(path, 0, 0)
    os.chmod(path, 0o622)
    _refused(path, caplog)
    os.unlink(path)
    other = tmp_path / "elsewhere.json"
    _write(str(other), good)
    os.symlink(other, path)
    _refused(path, caplog)
    os.unlink(path)
    os.mkfifo(path, 0o600)  # opened without blocking
    _refused(path, caplog)


def test_no_file_is_silent_and_a_read_only_state_dir_logs_once_and_memory_keeps_working(tmp_path, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    path = identity_file(str(blocker / "state"), "t")  # cannot be created: as a read-only hostPath
    with caplog.at_level(logging.INFO, logger=LOG):
        mem = IdentityMemory(path)
        assert caplog.records == []
        for i in range(3):
            mem.remember(_ident(i, f"U{i}", f"0000:{i + 1}8:00.0"))
    lines = [r.getMessage() for r in caplog.records if r.name == LOG]
    assert len(lines) == 1 and "not saved" in lines[0] and path in lines[0]
    assert mem.recall(index=2).uuid == "U2" and [d.uuid for d in mem.missing(["U0"])] == ["U1", "U2"]


# --------------------------------------------------------------------------- CLI and amdsmi paths

AMD = AMD_BASE + """
faults:
  - {at: 50, vendor: amd, index: 1, kind: lost}
"""


def _restart_keeps_the_lost_device(make, tmp_path, file_name: str) -> None:
    first = _by_index(_collect_once(make(0, tmp_path)))
    assert (tmp_path / file_name).is_file()
    uuids = [first[i].identity.uuid for i in range(3)]
    before = [d.identity.uuid for d in _collect_once(make(60, None))]
    assert before == [uuids[0], uuids[2]]  # before: gone without a word (the tool renumbers)
    after = _collect_once(make(60, tmp_path))
    lost = [d for d in after if d.identity.uuid == first[1].identity.uuid]
    assert sorted(d.identity.uuid for d in after) == sorted(uuids) and len(lost) == 1
    assert lost[0].health.state == "failed" and lost[0].identity.pci_address == first[1].identity.pci_address


def test_the_cli_collector_restores_and_saves_its_identities(tmp_path):
    from hetero_exporter.collectors.amd.rocm_smi import collector as rocm_smi
    work = tmp_path / "work"

    def make(t, state_dir):
        clock = ManualClock()
        clock.set_t(t)
        work.mkdir(exist_ok=True)
        return rocm_smi.create(CollectorOptions(scenario=from_dict(yaml.safe_load(AMD), "cli"), clock=clock,
                                                workdir=str(work), timeout_seconds=5.0,
                                                state_dir=None if state_dir is None else str(state_dir)))
    _restart_keeps_the_lost_device(make, tmp_path, "identities-rocm_smi.json")


def test_the_amdsmi_collector_restores_and_saves_its_identities(tmp_path):
    from hetero_exporter.collectors.amd.amdsmi import collector as amdsmi

    def make(t, state_dir):
        clock = ManualClock()
        clock.set_t(t)
        return amdsmi.create(CollectorOptions(scenario=from_dict(yaml.safe_load(AMD), "amdsmi"), clock=clock,
                                              state_dir=None if state_dir is None else str(state_dir)))
    _restart_keeps_the_lost_device(make, tmp_path, "identities-amdsmi.json")


# --------------------------------------------------------------------------- the agent's state dir


def test_a_simulation_never_writes_the_configured_state_dir(tmp_path):
    """Issue 24: `--simulate` with a config naming a state dir (the deploy config names the
    node's /var/lib/hetero-exporter) keeps its state in its own work directory."""
    pytest.importorskip("pynvml")
    state = tmp_path / "state"
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"health: {{pci_presence: false}}\nkernel_log: {{state_dir: {state}}}\n")
    snap = _one_shot(str(SCENARIOS / "nvidia-lost.yaml"), "--config", str(cfg), "--at", "0")
    assert len(snap.devices) >= 8
    assert not state.exists()


def test_simulating_without_the_setting_keeps_state_in_the_work_directory():
    args = cli.build_parser().parse_args(["inspect", "--simulate", str(SCENARIOS / "nvidia-lost.yaml"),
                                          "--log-format", "text"])
    w = cli.agent(args)
    try:
        assert w.state_dir == os.path.join(w.workdir, "state")
    finally:
        w.close()
