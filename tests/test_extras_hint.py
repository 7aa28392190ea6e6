"""Issue 25, item 15: without the optional extras a simulated node said ``No module named pynvml``
with no hint; the collector now reports itself unavailable with the pip command that installs it."""

from __future__ import annotations

import builtins

import pytest

from hetero_exporter.sdk.contract import CollectorOptions, Unavailable
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate.scenario import BUILTIN_DIR, load


def test_simulated_nvidia_without_nvidia_ml_py_says_how_to_install_it(monkeypatch):
    real = builtins.__import__

    def no_pynvml(name, *args, **kw):
        if name == "pynvml" or name.startswith("pynvml."):
            raise ImportError("No module named 'pynvml'")
        return real(name, *args, **kw)

    import sys
    for mod in [m for m in sys.modules if m == "pynvml" or m.endswith("nvidia.nvml.fake")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    from hetero_exporter.collectors.nvidia.nvml import collector as nvml
    with pytest.raises(Unavailable, match=r"pip install 'hetero-exporter\[nvidia\]'"):
        nvml.create(CollectorOptions(scenario=load(str(BUILTIN_DIR / "default.yaml")), clock=ManualClock()))
