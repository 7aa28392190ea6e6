"""Issue 24, item 10: the default simulated node (``run --simulate``, the dashboards' integration
test) shows every built-in vendor, as docs/DEVELOPING.md says a built-in vendor joins it."""

from __future__ import annotations

from hetero_exporter import collectors
from hetero_exporter.simulate.scenario import BUILTIN_DIR, load


def test_the_default_scenario_has_every_builtin_vendor():
    sc = load(str(BUILTIN_DIR / "default.yaml"))
    assert {d.vendor for d in sc.devices} == set(collectors.BUILTIN)
    addresses = [d.pci_address for d in sc.devices]
    assert len(addresses) == len(set(addresses)), "two simulated devices share a PCI address"
