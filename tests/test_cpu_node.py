"""Issue 24, item 6: a CPU-only node runs no collector, so no AcceleratorCollectorDown fires on
it; a node whose PCI bus shows one vendor runs that vendor's collectors only; a bus that
cannot be read still tries every default collector (cannot tell is not "none")."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetero_exporter import cli, registry


def _function(sysfs: Path, address: str, vendor: int, cls: int, device: int = 0x2330) -> None:
    d = sysfs / "bus" / "pci" / "devices" / address
    d.mkdir(parents=True)
    (d / "vendor").write_text(f"0x{vendor:04x}\n")
    (d / "device").write_text(f"0x{device:04x}\n")
    (d / "class").write_text(f"0x{cls:06x}\n")
    (d / "numa_node").write_text("-1\n")


def _enabled(tmp_path: Path, sysfs: Path) -> list[str]:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"sysfs_root: {sysfs}\n")
    args = cli.build_parser().parse_args(["inspect", "--config", str(cfg), "--log-format", "text"])
    w = cli.agent(args)
    try:
        return [spec.name for spec in w.parts.collectors]
    finally:
        w.close()


def test_a_cpu_node_runs_no_collector(tmp_path):
    sysfs = tmp_path / "sys"
    _function(sysfs, "0000:00:1f.0", 0x8086, 0x060100)  # an ISA bridge
    _function(sysfs, "0000:02:00.0", 0x1a03, 0x030000)  # the BMC's VGA (ASPEED): no known vendor
    assert _enabled(tmp_path, sysfs) == []


def test_a_node_with_nothing_on_the_bus_runs_no_collector(tmp_path):
    sysfs = tmp_path / "sys"
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    assert _enabled(tmp_path, sysfs) == []


def test_an_nvidia_node_runs_the_nvidia_collector_only(tmp_path):
    sysfs = tmp_path / "sys"
    _function(sysfs, "0000:18:00.0", 0x10DE, 0x030200)
    assert _enabled(tmp_path, sysfs) == ["nvml"]


def test_an_unreadable_bus_tries_every_default_collector(tmp_path):
    defaults = sorted(n for n, e in registry.collector_entries().items() if e.default)
    assert sorted(_enabled(tmp_path, tmp_path / "no-sysfs")) == defaults
    assert len(defaults) >= 10
