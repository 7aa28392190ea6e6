"""AMD and Hygon devices fully described: one uuid per GPU whichever collector reads it, the
ROCm / DTK runtime version, Hygon fabric links at the topology cadence, identities kept while a
device is lost, and a quality row with resolution (and window) for every field."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from conftest import shared_fixture
from hetero_exporter.collectors.amd import identity, versions
from hetero_exporter.collectors.hygon import versions as hygon_versions
from hetero_exporter.collectors.amd.amdsmi import collector as amdsmi
from hetero_exporter.collectors.amd.amdsmi.fake import FakeAmdSmi
from hetero_exporter.collectors.amd.rocm_smi import collector as rocm_smi
from hetero_exporter.collectors.amd.rocm_smi import fake as smi_fake
from hetero_exporter.collectors.hygon.hy_smi import collector as hy_smi
from hetero_exporter.collectors.hygon.hy_smi import fake as hy_fake
from hetero_exporter.model import Quality
from hetero_exporter.sdk import runner as vendor_cli
from hetero_exporter.sdk.contract import CollectorOptions, HostPaths, ParseError
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate.scenario import from_dict, load

NODE = """
name: amd-ids
node: n1
devices:
  - vendor: amd
    count: 2
    product: "AMD Instinct MI300X"
    memory_total: 206141652992
    driver_version: "6.7.0"
    pci_address: "0000:05:00.0"
    pci_stride: 32
    values: {utilization_ratio: 0.5, memory_used_bytes: 1GiB, temperature_core_celsius: 50, power_watts: 400,
             power_limit_watts: 750, clock_compute_hertz: 2100e6, clock_memory_hertz: 1300e6}
    extra: {xgmi: true}
  - vendor: hygon
    count: 3
    product: "Z100L"
    memory_total: 32752MiB
    pci_address: "0000:4d:00.0"
    pci_stride: 32
    values: {utilization_ratio: 0.3, memory_used_bytes: 8GiB, temperature_core_celsius: 45, power_watts: 120}
"""


def scenario(doc: str = NODE, faults=(), settings=None):
    d = yaml.safe_load(doc)
    d["faults"] = list(faults)
    d["settings"] = settings or {}
    return from_dict(d, "amd-ids")


def options(tmp_path, sc, clock=None, **settings):
    return CollectorOptions(scenario=sc, clock=clock or ManualClock(), workdir=str(tmp_path), timeout_seconds=5.0,
                            settings=settings)


# --------------------------------------------------------------------------- one uuid


@pytest.mark.parametrize("ref", ["default", "amd-ids"])
def test_amdsmi_and_rocm_smi_give_a_gpu_the_same_uuid(tmp_path, ref):
    sc = load("default") if ref == "default" else scenario()
    by_amdsmi = {d.identity.pci_address: d.identity.uuid for d in amdsmi.create(options(tmp_path, sc)).collect()
                 if d.identity.parent is None}
    by_cli = {d.identity.pci_address: d.identity.uuid for d in rocm_smi.create(options(tmp_path, sc)).collect()}
    assert by_amdsmi == by_cli and len(by_cli) == 2
    assert all(len(u) == 16 and int(u, 16) for u in by_cli.values())


def test_the_uuid_comes_from_the_asic_unique_id_as_both_tools_print_it():
    assert identity.unique_id("0x7E8F7E20764E2714") == identity.unique_id("7e8f7e20764e2714") == "7e8f7e20764e2714"
    assert identity.unique_id("0x2150e7d042a1124") == "02150e7d042a1124"
    assert identity.unique_id("N/A") is None and identity.unique_id("0x0") is None and identity.unique_id("zz") is None
    assert identity.device_uuid("amd", 3, None, "PCB123", "0000:05:00.0") == "amd-PCB123"
    assert identity.device_uuid("amd", 3, "N/A", None, "0000:05:00.0") == "amd-pci-0000:05:00.0"
    assert identity.device_uuid("hygon", 3, None, "0", None, "1017") == "hygon-guid-1017"
    assert identity.device_uuid("hygon", 3) == "hygon-card3"


# --------------------------------------------------------------------------- runtime version


def test_version_files_and_their_spellings(tmp_path):
    assert versions.version_text("6.2.0-66\n") == "6.2.0" and versions.version_text("DTK-24.04.3") == "24.04.3"
    assert versions.version_text("") is None and versions.version_text("none") is None
    assert versions.rocm_version(str(tmp_path)) is None
    (tmp_path / "opt/rocm/.info").mkdir(parents=True)
    (tmp_path / "opt/rocm/.info/version").write_text("6.3.1-48\n")
    (tmp_path / "opt/dtk/.info").mkdir(parents=True)
    (tmp_path / "opt/dtk/.info/version-libs").write_text("25.04\n")  # no plain "version" file
    assert versions.discover(str(tmp_path)) == {"runtime_version": "6.3.1"}
    assert hygon_versions.dtk_version(str(tmp_path)) == "25.04"


def test_versioned_install_folders_without_the_link(tmp_path):
    for rel, text in (("opt/rocm-6.1.2/.info/version", "6.1.2-77\n"), ("opt/rocm-6.10.0/.info/version", "6.10.0-1\n"),
                      ("opt/dtk-24.04.3/.info/version", "24.04.3\n"), ("opt/rocm-x/.info/version", "9.9\n")):
        (tmp_path / rel).parent.mkdir(parents=True)
        (tmp_path / rel).write_text(text)
    assert versions.rocm_version(str(tmp_path)) == "6.10.0"  # the highest release, by number
    assert hygon_versions.dtk_version(str(tmp_path)) == "24.04.3"
    (tmp_path / "opt/rocm/.info").mkdir(parents=True)
    (tmp_path / "opt/rocm/.info/version").write_text("6.1.2-77\n")
    assert versions.rocm_version(str(tmp_path)) == "6.1.2"  # /opt/rocm (the default install) first


def test_amdsmi_runtime_is_the_host_roots_rocm_never_the_bindings(tmp_path):
    """Issue 24 item 3: the binding's amdsmi_get_rocm_version (6.4.1 here) is the agent image's
    librocm-core; a host root without ROCm's version file gives None, one with it its version."""
    sc = scenario(settings={"amd": {"runtime_version": "6.4.1"}})
    clock = ManualClock()
    empty = tmp_path / "bare"
    empty.mkdir()
    c = amdsmi.AmdSmiCollector(FakeAmdSmi(sc, clock), clock, host=HostPaths(root=str(empty)))
    assert {d.identity.runtime_version for d in c.collect()} == {None}
    (tmp_path / "opt/rocm/.info").mkdir(parents=True)
    (tmp_path / "opt/rocm/.info/version").write_text("6.1.2-77\n")
    c = amdsmi.AmdSmiCollector(FakeAmdSmi(sc, clock), clock, host=HostPaths(root=str(tmp_path)))
    assert {d.identity.runtime_version for d in c.collect()} == {"6.1.2"}
    # simulated: the fake writes the scenario's ROCm release into its own host root
    assert {d.identity.runtime_version for d in amdsmi.create(options(tmp_path, sc)).collect()} == {"6.4.1"}


@pytest.mark.parametrize("tool, cls, rel, version", [
    ("rocm-smi", rocm_smi.RocmSmiCollector, "opt/rocm/.info/version", "6.3.0"),
    ("hy-smi", hy_smi.HySmiCollector, "opt/dtk/.info/version", "24.04.3"),
])
def test_cli_runtime_is_none_without_the_runtime_file(tmp_path, tool, cls, rel, version):
    clock = ManualClock()
    exe, env, _root = {"rocm-smi": smi_fake, "hy-smi": hy_fake}[tool].install(scenario(), clock, str(tmp_path), tool)
    bare = tmp_path / "bare"
    bare.mkdir()

    def collect(root):
        c = cls(exe, clock=clock, timeout=5.0, interval=10.0, extra_env=env, host=HostPaths(root=str(root)))
        return {d.identity.runtime_version for d in c.collect()}
    assert collect(bare) == {None}  # not "" and not the driver's version
    (bare / rel).parent.mkdir(parents=True)
    (bare / rel).write_text(version + "\n")
    assert collect(bare) == {version}


def test_amd_smi_cli_runtime_is_none_without_the_runtime_file(tmp_path):
    from hetero_exporter.collectors.amd.amd_smi import collector as amd_smi
    from hetero_exporter.collectors.amd.amd_smi import fake as amd_smi_fake
    from pathlib import Path
    ecc = Path(__file__).resolve().parent.parent / "fixtures" / "scenarios" / "amd-ecc-uncorrectable.yaml"
    exe, env = amd_smi_fake.install(load(str(ecc)), ManualClock(), str(tmp_path))
    bare = tmp_path / "bare"
    bare.mkdir()

    def collect():
        c = amd_smi.AmdSmiCliCollector(exe, clock=ManualClock(), timeout=5.0, interval=10.0, extra_env=env,
                                       host=HostPaths(root=str(bare)))
        return {d.identity.runtime_version for d in c.collect()}
    assert collect() == {None}
    (bare / "opt/rocm-7.0.1/.info").mkdir(parents=True)
    (bare / "opt/rocm-7.0.1/.info/version").write_text("7.0.1-16\n")
    assert collect() == {"7.0.1"}


def test_cli_collectors_read_rocm_and_dtk_from_the_fakes_install(tmp_path):
    sc = scenario(settings={"hygon": {"runtime_version": "24.04.1"}})
    assert {d.identity.runtime_version for d in rocm_smi.create(options(tmp_path, sc)).collect()} == {"6.2.0"}
    assert {d.identity.runtime_version for d in hy_smi.create(options(tmp_path, sc)).collect()} == {"24.04.1"}


# --------------------------------------------------------------------------- Hygon fabric links


def test_hygon_dcus_of_the_default_node_are_linked(tmp_path):
    devs = hy_smi.create(options(tmp_path, load("default"))).collect()
    uuids = [d.identity.uuid for d in devs]
    assert len(devs) == 2 and all(d.identity.runtime_version for d in devs)
    for d in devs:
        assert [(link.type, link.peer) for link in d.links] == [("xgmi", u) for u in uuids if u != d.identity.uuid]


def test_topology_is_asked_once_then_every_topo_interval(tmp_path):
    clock = ManualClock()
    exe, env, root = hy_fake.install(scenario(), clock, str(tmp_path), "hy-smi")
    argvs = []

    def runner(argv, timeout, **kw):
        argvs.append(list(argv[1:]))
        return vendor_cli.run(argv, timeout, **kw)

    c = hy_smi.HySmiCollector(exe, clock=clock, timeout=5.0, interval=10.0, runner=runner, extra_env=env,
                                settings={"topo_interval": 300}, host=HostPaths(root=root))
    asked = []
    for t in (0, 10, 20, 310, 320):
        clock.set_t(t)
        argvs.clear()
        devs = c.collect()
        asked.append(any("--showtopo" in a for a in argvs))
        assert all(len(d.links) == 2 for d in devs)  # kept between requests
    assert asked == [True, False, False, True, False]


def test_topology_is_a_call_of_its_own_with_the_minimal_option_set(tmp_path):
    clock = ManualClock()
    exe, env, root = hy_fake.install(scenario(), clock, str(tmp_path), "hy-smi")
    calls = []

    def runner(argv, timeout, **kw):
        calls.append(tuple(argv[1:]))
        return vendor_cli.run(argv, timeout, **kw)

    c = hy_smi.HySmiCollector(exe, clock=clock, timeout=5.0, interval=10.0, runner=runner, extra_env=env,
                                settings={"args": list(rocm_smi.MINIMAL_ARGS)}, host=HostPaths(root=root))
    devs = c.collect()
    assert rocm_smi.TOPO_ARGS in calls and all(len(d.links) == 2 for d in devs)


def test_topology_keys_of_a_real_capture():
    text = shared_fixture("rocm-smi", "json_mi100_rocm-5.7.1.json").read_text(encoding="utf-8")
    pairs = rocm_smi.parse_topology(rocm_smi.parse_json(text).system)
    assert len(pairs) == 15 and {(h.type, h.hops, h.weight) for h in pairs.values()} == {("PCIE", 2, 40)}
    assert all(d.links == () for d in rocm_smi.parse(text).devices)  # PCIe only: no fabric


@given(st.dictionaries(st.text(max_size=60), st.text(max_size=20), max_size=20))
def test_fuzzed_topology_keys_never_raise(system):
    for hop in rocm_smi.parse_topology(system).values():
        assert hop.a < hop.b


# --------------------------------------------------------------------------- lost devices


LOST = [{"at": 10, "until": 30, "vendor": "amd", "index": 1, "kind": "lost"},
        {"at": 10, "until": 30, "vendor": "hygon", "index": 2, "kind": "lost"}]


@pytest.mark.parametrize("make", [amdsmi.create, rocm_smi.create, hy_smi.create],
                         ids=["amdsmi", "rocm-smi", "hy-smi"])
def test_a_device_no_longer_listed_is_failed_under_its_uuid(tmp_path, make):
    clock = ManualClock()
    c = make(options(tmp_path, scenario(faults=LOST), clock))
    before = [d.identity for d in c.collect() if d.identity.parent is None]
    clock.set_t(15)
    during = [d for d in c.collect() if d.identity.parent is None]
    lost = before[-1]
    assert [d.identity.uuid for d in during] == [i.uuid for i in before]
    gone = during[-1]
    assert gone.identity == lost and gone.health.state == "failed" and gone.readings == {}
    assert gone.health.reasons[0].code == "missing" and gone.health.reasons[0].fault_class == "device-lost"
    assert all(d.health.state != "failed" for d in during[:-1])
    clock.set_t(20)
    again = [d for d in c.collect() if d.identity.uuid == lost.uuid][0]
    assert again.health.reasons[0].count == 1  # one episode, not one per cycle
    clock.set_t(40)
    back = [d for d in c.collect() if d.identity.uuid == lost.uuid][0]
    assert back.identity.pci_address == lost.pci_address and back.health.state != "failed"


def test_a_gpu_printing_no_unique_id_keeps_its_pinned_uuid(tmp_path):
    clock = ManualClock()
    c = rocm_smi.create(options(tmp_path, scenario(faults=[
        {"at": 10, "until": 20, "vendor": "amd", "index": 0, "kind": "no-unique-id"}]), clock))
    before = [d.identity.uuid for d in c.collect()]
    clock.set_t(15)
    during = c.collect()
    assert [d.identity.uuid for d in during] == before and all(d.health.state == "ok" for d in during)


# --------------------------------------------------------------------------- the SDK harness


def test_harness_failure_modes_and_the_cli_mode_alias(tmp_path):
    c = rocm_smi.create(options(tmp_path / "t", scenario(settings={"amd": {"mode": "truncated"}})))
    with pytest.raises(ParseError, match="rocm-smi"):
        c.collect()
    c = rocm_smi.create(options(tmp_path / "e", scenario(settings={"amd": {"mode": "exit", "status": 3}})))
    with pytest.raises(vendor_cli.CliError):
        c.collect()
    c = rocm_smi.create(options(tmp_path / "c", scenario(settings={"hygon": {"cli_mode": "crash"}})))
    assert len(c.collect()) == 2  # the alias of one vendor leaves the other alone
    with pytest.raises(vendor_cli.CliError, match="Driver not initialized"):
        hy_smi.create(options(tmp_path / "h", scenario(settings={"hygon": {"cli_mode": "crash"}}))).collect()


def test_a_fake_rejects_an_unknown_cli_mode(tmp_path):
    with pytest.raises(ValueError, match="cli_mode"):
        rocm_smi.create(options(tmp_path, scenario(settings={"amd": {"cli_mode": "sideways"}})))


# --------------------------------------------------------------------------- quality


def _check(rows):
    for name, q in rows:
        assert q.resolution is not None and q.resolution > 0, name
        assert q.method != "sampled" or q.window_seconds, name


def test_every_quality_row_has_a_resolution_and_every_sampled_one_a_window(tmp_path):
    _check(amdsmi.QUALITY.items())
    _check([("power average", amdsmi.POWER_AVERAGE), *amdsmi.DERIVED.items()])
    _check((n, rocm_smi.quality(n, f"rocm-smi '{n}'")) for n in rocm_smi.QUALITY_TABLE)
    sc = load("default")
    for make in (amdsmi.create, rocm_smi.create, hy_smi.create):
        devs = make(options(tmp_path, sc)).collect()
        _check((n, r.quality) for d in devs for n, r in d.readings.items())
    assert all(isinstance(q, Quality) and q.error_bound is None for n, q in amdsmi.QUALITY.items()
               if n not in (amdsmi.XGMI_RX, amdsmi.XGMI_TX))
