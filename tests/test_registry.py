"""Collector registry: built-in table and third-party plugins via entry points."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from hetero_exporter import registry


def test_builtin_collectors_import_lazily_by_name():
    entries = registry.collector_entries()
    assert entries["nvml"].vendor == "nvidia"
    assert callable(registry.collector_factory(entries["nvml"]))


def _plugin(tmp_path):
    (tmp_path / "acme_collector.py").write_text(textwrap.dedent('''
        from hetero_exporter.model import DeviceIdentity, DeviceSample

        class Acme:
            name = "acme"
            vendor = "acme"

            def __init__(self, options):
                self.clock = options.clock

            def collect(self):
                return [DeviceSample(DeviceIdentity("acme", "npu", 0, "ACME-0", "Acme-1"), self.clock())]

        def create(options):
            return Acme(options)
    '''))
    dist = tmp_path / "acme_collector-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-collector\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[hetero_exporter.collectors]\nacme = acme_collector\n")
    return tmp_path


def test_a_third_party_collector_registered_by_entry_point_runs(tmp_path):
    path = _plugin(tmp_path)
    code = textwrap.dedent('''
        import sys, json
        from hetero_exporter.cli import main
        sys.exit(main(["inspect", "--json", "--collector.acme", "--no-collector.nvml"]))
    ''')
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert '"uuid": "ACME-0"' in proc.stdout and '"name": "acme"' in proc.stdout
