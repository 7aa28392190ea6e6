"""Fake vendor executables run the installed package whatever directory they start in."""

from __future__ import annotations

import os
import subprocess

from hetero_exporter.collectors.ascend.npu_smi import fake as npu_smi_fake
from hetero_exporter.simulate import ManualClock, load


def test_fake_npu_smi_is_not_shadowed_by_a_source_checkout_in_the_cwd(tmp_path):
    # a decoy package like a checkout's hetero_exporter/, which has no collectors/ inside
    decoy = tmp_path / "checkout"
    (decoy / "hetero_exporter").mkdir(parents=True)
    (decoy / "hetero_exporter" / "__init__.py").write_text("raise ImportError('imported the decoy checkout')\n")
    work = tmp_path / "work"
    path, env = npu_smi_fake.install(load(), ManualClock(), str(work))
    proc = subprocess.run([path, "info"], cwd=decoy, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env()})
    assert proc.returncode == 0, proc.stderr
    assert "910B3" in proc.stdout and "NPU" in proc.stdout
