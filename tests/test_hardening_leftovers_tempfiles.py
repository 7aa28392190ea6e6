"""Issue 35, item 11: a SIGKILL during an atomic save left its temporary file in the state dir for
good. At start each state file's owner (the identity store, the NVSentinel bridge, the kernel-log
cursor) removes the temporaries of its own prefix (``smallfile.remove_stale``): regular files of
this user only, never a link, a folder, a FIFO, another owner's or anyone else's file, and never
one a live writer holds (locked while written)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from hetero_exporter import smallfile
from hetero_exporter.exposition.export import ExportFailures
from hetero_exporter.health.act.nvsentinel import NvSentinelBridge, NvSentinelSettings
from hetero_exporter.health.act.nvsentinel import state as nvs_state
from hetero_exporter.model import DeviceIdentity
from hetero_exporter.sdk import identity
from hetero_exporter.sources import kernel_log

GPU = DeviceIdentity("nvidia", "gpu", 0, "GPU-5d3c2a1e-0f6b-4b7a-9a51-3f1e2d4c5b60", model="m",
                     pci_address="0000:3b:00.0")


def _wait_for(cond, what: str, limit: float = 60.0) -> None:
    end = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < end, f"never: {what}"
        time.sleep(0.02)


def _bystanders(d: Path, prefix: str, outside: Path) -> dict[str, str]:
    """Things named like (or near) the owner's temporaries that are not its to remove."""
    (d / f"{prefix}dir.tmp").mkdir()
    os.symlink(outside, d / f"{prefix}link.tmp")
    os.mkfifo(d / f"{prefix}fifo.tmp")
    made = {f"{prefix}.tmp": "empty middle", f"{prefix}a b.tmp": "a blank", f"{prefix}abc.json": "other suffix",
            "notes.tmp": "other prefix", ".other-abc123.tmp": "another owner's", f"x{prefix}abc.tmp": "not a prefix"}
    for name in made:
        (d / name).write_text("keep")
    return made


def _owners(tmp_path: Path):
    """(prefix, start(state_dir)) of each owner of a state file under the state dir."""
    def ident(d: Path) -> None:
        identity.IdentityMemory(identity.identity_file(str(d), "nvml"))

    def bridge(d: Path) -> None:
        b = NvSentinelBridge(NvSentinelSettings.parse({"socket": str(tmp_path / "none.sock")}), "node", "observe",
                             str(d), ExportFailures(), condition_reason=lambda v, c: c)
        b.close()

    def cursor(d: Path) -> None:
        kernel_log.Follower(kernel_log.KmsgSource("fake:/dev/kmsg", opener=lambda: None), state_dir=str(d),
                            boot_id="b")
    return [(identity.TMP_PREFIX, ident), (nvs_state.TMP_PREFIX, bridge), (kernel_log.STATE_TMP_PREFIX, cursor)]


@pytest.mark.parametrize("which", range(3), ids=["identities", "nvsentinel", "kernel-log"])
def test_each_owner_removes_its_stale_temporaries_at_start_and_nothing_else(tmp_path, which):
    prefix, start = _owners(tmp_path)[which]
    d = tmp_path / "state"
    d.mkdir()
    outside = tmp_path / "precious.tmp"
    outside.write_text("not the agent's")
    stale = [d / f"{prefix}{s}.tmp" for s in ("k2j4_x9a", "7QwErTy1", "a-b")]
    for p in stale:
        p.write_bytes(b'{"half": ')
    kept = _bystanders(d, prefix, outside)
    start(d)
    assert not any(p.exists() for p in stale), sorted(os.listdir(d))
    for name, why in kept.items():
        assert (d / name).exists(), why
    assert (d / f"{prefix}dir.tmp").is_dir() and (d / f"{prefix}link.tmp").is_symlink()
    assert (d / f"{prefix}fifo.tmp").exists() and outside.read_text() == "not the agent's"


def test_a_read_only_start_removes_nothing(tmp_path):
    d = tmp_path / "state"
    d.mkdir()
    stale = d / f"{identity.TMP_PREFIX}abcdef12.tmp"
    stale.write_text("{")
    identity.IdentityMemory(identity.identity_file(str(d), "nvml"), writable=False)  # inspect, health --dry-run
    assert stale.exists()


# the identity store's save, cut by a SIGKILL just before its rename (the temporary is written)
KILLED_SAVE = r'''
import os, sys, time
sys.path.insert(0, {root!r})
from hetero_exporter.model import DeviceIdentity
from hetero_exporter.sdk import identity
os.replace = lambda *a: time.sleep(3600)  # the save stops here, its temporary file written
identity.IdentityMemory({path!r}).remember(DeviceIdentity("nvidia", "gpu", 0, "GPU-1", pci_address="0000:3b:00.0"))
'''


def test_a_save_killed_mid_write_leaves_a_temporary_that_the_next_start_removes(tmp_path):
    d = tmp_path / "state"
    path = identity.identity_file(str(d), "nvml")
    child = subprocess.Popen([sys.executable, "-c", KILLED_SAVE.format(root=str(ROOT), path=path)])
    try:
        temporaries = lambda: sorted(p for p in d.glob(f"{identity.TMP_PREFIX}*.tmp"))  # noqa: E731
        _wait_for(lambda: temporaries() and temporaries()[0].stat().st_size > 0 or child.poll() is not None,
                  "the child's temporary file written")
        assert child.poll() is None, "the child ended before its rename"
        # a start beside a live writer (an agent still stopping) leaves its locked file alone
        assert smallfile.remove_stale(str(d), identity.TMP_PREFIX) == 0 and temporaries()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(60)
    assert temporaries() and not Path(path).exists()  # what the SIGKILL leaves
    memory = identity.IdentityMemory(path)  # the next start
    assert temporaries() == []
    memory.remember(GPU)  # and saves as before
    assert Path(path).exists() and temporaries() == []


def test_a_write_keeps_its_lock_until_the_rename(tmp_path, monkeypatch):
    """Another owner starting in this process while a save runs does not take its file."""
    d = tmp_path / "state"
    seen = []
    real = os.replace

    def replace(src, dst):
        seen.append(smallfile.remove_stale(str(d), ".state-"))  # a clean-up in the middle of the save
        real(src, dst)
    monkeypatch.setattr(os, "replace", replace)
    smallfile.write_atomically(str(d / "x.json"), b"{}")
    assert seen == [0] and (d / "x.json").read_bytes() == b"{}"
