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


def test_a_registered_spec_reaches_every_core_reader():
    """The core names no vendor: a spec registered at run time is read by the profile
    normalizer, PCI presence, the scorer's resource names, the PodResources id mapping, the
    simulated kubelet, the scenario uuids and the CLI runner's environment."""
    from types import SimpleNamespace

    from hetero_exporter import profiles, vendors
    from hetero_exporter.sources import pci_presence
    from hetero_exporter.model import DeviceIdentity
    from hetero_exporter.sources.podresources.mapping import ContainerDevices, map_allocations, vendor_of
    from hetero_exporter.scoring.nodes import is_fabric
    from hetero_exporter.scoring.resources import device_resource, parse_resource
    from hetero_exporter.sdk.cli_collector import CliCalls, find_tool, tool_spec
    from hetero_exporter.sdk.contract import HostPaths
    from hetero_exporter.model.spec import ResourceName, ToolSpec, VendorSpec
    from hetero_exporter.simulate import kubelet
    from hetero_exporter.simulate.scenario import from_dict as scenario_from_dict

    spec = VendorSpec(
        name="zeta", kind="xpu", display_name="Zeta", package="zeta_not_installed",
        pci_vendor_ids=(0xFFF0,), model_strip=r"^(Zeta)\s*", model_digit_prefix="Z",
        resources=(ResourceName(r"zeta\.example/xpu", "zeta.example/xpu"),
                   ResourceName(r"zeta\.example/xpu-.+", "zeta.example/xpu", "slices")),
        resource_domains=("zeta.example",), device_resource=lambda model: "zeta.example/xpu",
        id_prefixes=("XPU-",), plugin_device_id=lambda d: f"zeta-{d.index}", uuid_prefix="XPU-",
        fabric_links=("zetalink",),
        tools=(ToolSpec("zeta-smi", dirs=("/opt/zeta/bin",), env=("ZETA_HOME",), why_missing="Zeta SDK missing"),))
    vendors.register(spec)
    try:
        assert profiles.normalize_model("zeta", "Zeta 100 Pro") == "Z100-Pro"
        assert pci_presence.kind("zeta") == "xpu" and pci_presence.kind("nobody") == "gpu"
        assert vendors.pci_vendors()[0xFFF0] == "zeta"
        assert device_resource("zeta", "Z100") == "zeta.example/xpu"
        r = parse_resource("zeta.example/xpu-1c")
        assert (r.vendor, r.group, r.unit) == ("zeta", "zeta.example/xpu", "slices")
        assert is_fabric("zetalink") and not is_fabric("pcie-switch")
        assert vendor_of("zeta.example/xpu") == "zeta" and vendor_of("xpu.zeta.example") == "zeta"
        dev = DeviceIdentity("zeta", "xpu", 2, "XPU-abc", "Z100")
        for dev_id in ("abc", "xpu-ABC", "zeta-2"):  # prefix dropped, prefixed, name ending in the index
            got, unmatched = map_allocations([ContainerDevices("ns", "p", "c", "zeta.example/xpu", (dev_id,))], [dev])
            assert [a.device_id for a in got["XPU-abc"]] == [dev_id] and not unmatched
        assert scenario_from_dict({"devices": [{"vendor": "zeta"}]}).devices[0].uuid.startswith("XPU-")
        proc = SimpleNamespace(pod="ns/p", container="c")
        scenario = SimpleNamespace(
            devices=[SimpleNamespace(vendor="zeta", index=3, product="Zeta 100", uuid="XPU-1", pci_address="",
                                     processes=[proc])],
            pod=lambda ref: SimpleNamespace(namespace="ns", name="p", containers={"c": "cid"}))
        (rec,) = kubelet.scenario_allocations(scenario)
        assert (rec.resource, rec.device_ids) == ("zeta.example/xpu", ("zeta-3",))
        assert tool_spec("zeta-smi").env == ("ZETA_HOME",) and tool_spec("zeta-smi", "nobody") is None
        try:
            find_tool(HostPaths(), "zeta-smi", vendor="zeta")
        except Exception as e:  # noqa: BLE001 - the message is what is checked
            assert "/opt/zeta/bin" in str(e) and "Zeta SDK missing" in str(e)
        else:
            raise AssertionError("zeta-smi found")
        seen = {}

        def runner(argv, timeout, *, env=None):
            seen["env"] = env
            return SimpleNamespace(stdout="ok")
        import os
        os.environ["ZETA_HOME"] = "/opt/zeta"
        try:
            assert CliCalls("zeta-smi", "zeta-smi", runner=runner).call(["-q"], 1e18) == "ok"
        finally:
            del os.environ["ZETA_HOME"]
        assert seen["env"] == {"ZETA_HOME": "/opt/zeta"}
    finally:
        vendors.unregister("zeta")
    assert vendor_of("zeta.example/xpu") is None and parse_resource("zeta.example/xpu") is None


def test_the_plugin_scan_is_skipped_only_where_no_distribution_can_declare_the_group(tmp_path, monkeypatch):
    """importlib.metadata is imported only where an entry_points.txt names the group, or where
    the path holds something the cheap look cannot read (a zip)."""
    from hetero_exporter import vendors
    other = tmp_path / "other-1.0.dist-info"
    other.mkdir()
    (other / "entry_points.txt").write_text("[console_scripts]\nother = other:main\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), str(tmp_path / "absent")])
    assert vendors._may_declare_plugins() is False
    (other / "entry_points.txt").write_text("[console_scripts]\nother = other:main\n\n[ hetero_exporter.collectors ]\n"
                                            "x = other\n")
    assert vendors._may_declare_plugins() is True
    (other / "entry_points.txt").write_text("")
    zipped = tmp_path / "plugins.zip"
    zipped.write_bytes(b"PK\x05\x06" + b"\0" * 18)
    monkeypatch.setattr(sys, "path", [str(tmp_path), str(zipped)])
    assert vendors._may_declare_plugins() is True
