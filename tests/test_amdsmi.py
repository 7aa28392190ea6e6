"""The amdsmi collector over the fake amdsmi: units, unsupported, xGMI, partitions, processes,
faults (uncorrectable ECC -> failed), and the binding being absent on this machine."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
import yaml

from hetero_exporter.model import fields as F
from hetero_exporter.sdk.contract import CollectorOptions, Unavailable
from hetero_exporter.collectors.amd.amdsmi import collector as amdsmi
from hetero_exporter.collectors.amd.amdsmi.fake import ENERGY_RESOLUTION_UJ, FakeAmdSmi, binding_types
from hetero_exporter.model import snapshot_from_json, snapshot_to_json, NodeSnapshot
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate.scenario import from_dict, load

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "fixtures" / "scenarios"

BASE = """
name: amd-core
node: n1
devices:
  - vendor: amd
    count: 3
    product: "AMD Instinct MI300X"
    memory_total: 206141652992
    driver_version: "6.7.0"
    firmware_version: "113-M3000100-102"
    pci_address: "0000:05:00.0"
    pci_stride: 32
    numa_nodes: [0, 1, 1]
    values:
      utilization_ratio: 0.42
      memory_utilization_ratio: 0.25
      memory_used_bytes: 90GiB
      temperature_core_celsius: 52
      temperature_memory_celsius: 60
      power_watts: 480
      power_limit_watts: 750
      clock_compute_hertz: 2100e6
      clock_memory_hertz: 1300e6
      ecc_corrected_total: 7
      ecc_uncorrected_total: 0
      energy_start_joules: 1000
    processes:
      - {pid: 4000, name: python3, memory: 60GiB, utilization: 0.4}
    unsupported: [power_limit_watts]
    extra: {xgmi: true, xgmi_link_gbps: 512, xgmi_bytes_per_second: 1048576}
"""


def make(doc=BASE, settings=None, scenario_settings=None):
    d = yaml.safe_load(doc) if isinstance(doc, str) else doc
    if scenario_settings:
        d["settings"] = {"amd": scenario_settings}
    clock = ManualClock()
    opts = CollectorOptions(scenario=from_dict(d, "amd-test"), clock=clock, settings=settings or {})
    return amdsmi.create(opts), clock


def test_readings_in_base_units_from_amdsmi_units():
    c, clock = make()
    clock.set_t(10)
    d = c.collect()[0]
    i = d.identity
    assert (i.vendor, i.kind, i.model, i.pci_address, i.numa_node) == ("amd", "gpu", "MI300X", "0000:05:00.0", 0)
    assert i.driver_version == "6.7.0" and i.firmware_version == "113-M3000100-102" and i.serial == "1650000000000"
    assert d.value(F.UTILIZATION) == pytest.approx(0.42)  # gfx_activity in percent
    assert d.value(F.MEMORY_UTILIZATION) == pytest.approx(0.25)  # umc_activity
    assert d.value(F.MEMORY_USED) == 90 * 2**30 and d.value(F.MEMORY_TOTAL) == 206141652992
    assert d.value(F.TEMP_CORE) == 52 and d.value(F.TEMP_MEMORY) == 60
    assert d.value(F.POWER) == 480.0  # current_socket_power, W
    assert d.value(F.CLOCK_COMPUTE) == 2100e6 and d.value(F.CLOCK_MEMORY) == 1300e6  # MHz
    # accumulator x counter_resolution (uJ): start 1000 J + 480 W x 10 s, within one count
    assert d.value(F.ENERGY) == pytest.approx(1000 + 4800, abs=ENERGY_RESOLUTION_UJ * 1e-6)
    assert d.readings[F.ENERGY].quality.resolution == pytest.approx(ENERGY_RESOLUTION_UJ * 1e-6)
    assert d.value(F.ECC_CORRECTED) == 7 and d.value(F.ECC_UNCORRECTED) == 0
    assert d.value(amdsmi.ecc_block_field("UMC", "corrected")) == 7
    assert d.value(amdsmi.PCIE_SPEED) == 32e9 and d.value(amdsmi.PCIE_WIDTH) == 16  # MT/s -> T/s
    assert d.readings[F.POWER].quality.source == "amdsmi_get_power_info.current_socket_power"
    assert d.readings[F.UTILIZATION].quality.method == "sampled"


def test_power_cap_is_converted_from_microwatts():
    doc = yaml.safe_load(BASE)
    doc["devices"][0]["unsupported"] = []
    c, _ = make(doc)
    assert c.collect()[0].value(F.POWER_LIMIT) == 750.0  # power_cap 750000000 uW


def test_unsupported_is_absent_with_status_and_not_asked_again():
    c, _ = make()
    d = c.collect()[0]
    for fld in (F.POWER_LIMIT, amdsmi.TEMP_EDGE, amdsmi.MEDIA_UTILIZATION):  # MI300X: no edge sensor
        r = d.readings[fld]
        assert r.value is None and r.quality.status == "unsupported", fld
    fake = c._amd
    c.collect()
    before = fake.calls
    c.collect()
    per_cycle = fake.calls - before
    c.collect()
    assert fake.calls - before == 2 * per_cycle  # steady state: unsupported calls are skipped


def test_no_reading_is_zero_or_nan_for_unsupported_fields():
    doc = yaml.safe_load(BASE)
    doc["devices"][0]["unsupported"] = ["power_watts", "energy_joules_total", "ecc_uncorrected_total", "pcie"]
    c, _ = make(doc)
    d = c.collect()[0]
    for fld in (F.POWER, F.ENERGY, F.ECC_CORRECTED, F.ECC_UNCORRECTED, amdsmi.PCIE_REPLAY):
        assert d.readings[fld].value is None and d.readings[fld].quality.status == "unsupported", fld
    snapshot_to_json(NodeSnapshot(node="n", time=0.0, devices=(d,)))  # no NaN, encodes


def test_xgmi_hive_links_every_gpu_with_bandwidth_and_traffic_counters():
    c, clock = make()
    clock.set_t(100)
    devices = c.collect()
    uuids = [d.identity.uuid for d in devices]
    for d in devices:
        peers = sorted(link.peer for link in d.links)
        assert peers == sorted(u for u in uuids if u != d.identity.uuid)
        assert all(link.type == "xgmi" and link.bandwidth_bytes_per_second == 512e9 / 8 for link in d.links)
        # 1 MiB/s to each of 2 peers for 100 s, reported in KB
        assert d.value(amdsmi.XGMI_TX) == pytest.approx(2 * 100 * 1048576)
        assert d.readings[amdsmi.XGMI_RX].quality.error_bound == 0.024


def test_one_process_per_device_with_vram_and_derived_utilization():
    c, clock = make()
    first = c.collect()
    assert [len(d.processes) for d in first] == [1, 1, 1]
    p = first[1].processes[0]
    assert (p.pid, p.name, p.memory_bytes, p.device_uuid) == (4100, "python3", 60 * 2**30, first[1].identity.uuid)
    assert p.utilization_ratio is None  # needs two samples of the cumulative engine time
    assert p.namespace is None and p.pod is None  # attribution is the sampler enricher's job
    clock.advance(10)
    again = c.collect()[1].processes[0]
    assert again.utilization_ratio == pytest.approx(0.4, abs=0.01)


def test_uncorrectable_ecc_scenario_ends_with_a_failed_device_and_its_reason():
    scenario = load(str(SCENARIOS / "amd-ecc-uncorrectable.yaml"))
    clock = ManualClock()
    c = amdsmi.create(CollectorOptions(scenario=scenario, clock=clock))
    assert [d.health.state for d in c.collect()] == ["ok", "ok"]
    clock.set_t(40)
    healthy, failed = c.collect()
    assert healthy.health.state == "ok" and healthy.faults == ()
    assert failed.health.state == "failed"
    reason = failed.health.reasons[0]
    assert (reason.code, reason.fault_class, reason.action, reason.severity, reason.count) == (
        "ecc-uncorrectable-umc", "memory-ecc-uncorrectable", "reset-device", "critical", 3)
    assert failed.value(F.ECC_UNCORRECTED) == 3 and failed.value(amdsmi.ecc_block_field("UMC", "uncorrected")) == 3
    clock.set_t(45)
    assert c.collect()[1].faults[0].count == 3  # no new errors, no new events
    clock.set_t(100)
    end = c.collect()[1]
    assert end.health.state == "failed" and end.faults[0].count == 5 and end.faults[0].first_seen < end.faults[0].last_seen
    # the verdict survives the JSON the annotation and the scorer read
    back = snapshot_from_json(snapshot_to_json(NodeSnapshot(node="n", time=0.0, devices=(end,))))
    assert back.devices[0].health.state == "failed" and back.devices[0].health.reasons[0].code == "ecc-uncorrectable-umc"


def test_threshold_setting_tolerates_a_few_uncorrectable_errors():
    scenario = load(str(SCENARIOS / "amd-ecc-uncorrectable.yaml"))
    clock = ManualClock()
    c = amdsmi.create(CollectorOptions(scenario=scenario, clock=clock, settings={"ecc_uncorrected_threshold": 4}))
    clock.set_t(40)
    d = c.collect()[1]
    assert d.health.state == "ok" and d.faults[0].code == "ecc-uncorrectable-umc"  # recorded, under threshold
    clock.set_t(100)
    assert c.collect()[1].health.state == "failed"  # 5 > 4


def test_reset_events_cper_records_and_deferred_errors():
    scenario = load(str(SCENARIOS / "amd-ras-events.yaml"))
    clock = ManualClock()
    c = amdsmi.create(CollectorOptions(scenario=scenario, clock=clock))
    assert {d.health.state for d in c.collect()} == {"ok"}
    clock.set_t(55)
    d = c.collect()
    assert d[0].health.state == "degraded" and d[0].health.reasons[0].code == "gpu-reset"
    assert d[2].health.state == "degraded" and d[2].health.reasons[0].code == "cper-non-fatal-uncorrected"
    clock.set_t(80)
    d = c.collect()
    states = [x.health.state for x in d]
    assert states == ["degraded", "ok", "failed", "degraded"]
    fatal = next(f for f in d[2].faults if f.code == "cper-fatal")
    assert (fatal.action, fatal.severity, fatal.count) == ("reset-device", "critical", 1)
    assert d[3].health.reasons[0].code == "ecc-deferred-umc"
    assert [f.code for f in d[0].faults] == ["gpu-reset"] and d[0].faults[0].count == 1
    clock.set_t(80 + 600)  # past fault_hold_seconds: reset and fatal CPER are history
    d = c.collect()
    assert [x.health.state for x in d] == ["ok", "ok", "ok", "degraded"]
    assert d[2].faults and d[0].faults[0].count == 1  # counters stay


def test_cpx_partitions_are_children_of_their_gpu():
    scenario = load(str(SCENARIOS / "amd-cpx-partitions.yaml"))
    clock = ManualClock()
    c = amdsmi.create(CollectorOptions(scenario=scenario, clock=clock))
    devices = c.collect()
    parents = [d for d in devices if d.identity.parent is None]
    children = [d for d in devices if d.identity.parent is not None]
    assert len(parents) == 2 and len(children) == 8
    gpu0 = parents[0]
    assert all(ch.identity.parent == gpu0.identity.uuid for ch in children)
    assert len({ch.identity.uuid for ch in children}) == 8
    assert sorted(ch.identity.pci_address for ch in children) == [f"0000:05:00.{k}" for k in range(8)]
    assert gpu0.readings[F.UTILIZATION].quality.method == "derived" and gpu0.value(F.UTILIZATION) == pytest.approx(0.5)
    assert gpu0.value(F.MEMORY_USED) == pytest.approx(80 * 2**30, rel=1e-6)  # sum of the partitions
    assert gpu0.value(F.MEMORY_TOTAL) == 206141652992  # NPS1: every partition sees all HBM
    assert gpu0.value(F.POWER) == 500 and gpu0.processes == ()
    assert sum(len(ch.processes) for ch in children) == 2
    assert all(p.device_uuid == ch.identity.uuid for ch in children for p in ch.processes)
    assert [link.peer for link in gpu0.links] == [parents[1].identity.uuid]
    assert snapshot_from_json(snapshot_to_json(NodeSnapshot(node="n", time=0.0, devices=tuple(devices)))).present() == {"amd": 2}


def test_init_failure_is_unavailable_with_the_reason():
    with pytest.raises(Unavailable, match="amdsmi_init failed: .*DRIVER_NOT_LOADED"):
        make(scenario_settings={"init_error": "DRIVER_NOT_LOADED"})


def test_missing_library_makes_the_collector_unavailable_and_prints_nothing(capsys):
    try:
        import amdsmi as _  # noqa: F401
    except Exception:  # noqa: BLE001 - KeyError('libamd_smi.so') on this machine
        pass
    else:
        pytest.skip("libamd_smi.so is loadable here")
    capsys.readouterr()  # what the probe above printed
    with pytest.raises(Unavailable) as e:
        amdsmi.create(CollectorOptions())
    assert "libamd_smi.so" in str(e.value) and "--collector.rocm_smi" in str(e.value)
    assert capsys.readouterr().out == ""  # the wrapper's own complaint is kept off stdout


def test_fake_raises_amdsmis_own_exception_classes():
    types_ = binding_types()
    cls = types_.exceptions.AmdSmiLibraryException
    if types_.origin == "equivalent":
        pytest.skip("amdsmi is not installed: equivalent classes are used")
    assert Path(inspect.getfile(cls)).as_posix().endswith("amdsmi/amdsmi_exception.py")
    c, _ = make()
    with pytest.raises(cls) as e:
        c._amd.amdsmi_get_power_cap_info(c._amd.amdsmi_get_processor_handles()[0])
    assert e.value.get_error_code() == types_.wrapper.AMDSMI_STATUS_NOT_SUPPORTED
    assert "AMDSMI_STATUS_NOT_SUPPORTED" in str(e.value)
    assert issubclass(cls, types_.exceptions.AmdSmiException)


def _interface_functions() -> dict[str, list[str]]:
    spec = __import__("importlib.util").util.find_spec("amdsmi")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("amdsmi is not installed")
    src = (Path(list(spec.submodule_search_locations)[0]) / "amdsmi_interface.py").read_text()
    out = {}
    for node in ast.parse(src).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            args = node.args.args if isinstance(node, ast.FunctionDef) else next(
                (f.args.args[1:] for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), [])
            out[node.name] = [a.arg for a in args]
    return out


def test_every_call_the_collector_makes_exists_in_amdsmi_with_the_fakes_signature():
    real = _interface_functions()
    tree = ast.parse(Path(amdsmi.__file__).read_text())
    called = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
              and re.fullmatch(r"amdsmi_\w+", n.value)}
    called |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr.startswith(("amdsmi_", "AmdSmiEventReader"))}
    called.discard("amdsmi_wrapper")
    assert len(called) >= 25
    for name in sorted(called):
        assert name in real, f"amdsmi has no {name}"
        fake = getattr(FakeAmdSmi, name)
        params = [p for p in inspect.signature(fake).parameters if p != "self"]
        assert len(params) == len(real[name]), (name, params, real[name])


def test_a_gpu_that_stops_answering_is_unknown_and_keeps_its_identity():
    doc = yaml.safe_load(BASE)
    doc["faults"] = [{"at": 10, "until": 20, "vendor": "amd", "index": 1, "kind": "unresponsive"}]
    c, clock = make(doc)
    before = c.collect()[1].identity
    clock.set_t(12)
    d = c.collect()
    assert d[1].identity == before and d[1].health.state == "unknown" and d[1].health.reasons[0].code == "unreadable"
    assert d[1].value(F.POWER) is None and d[1].readings[F.POWER].quality.status == "error"
    assert d[0].health.state == "ok" and d[0].value(F.POWER) == 480
    clock.set_t(25)
    assert c.collect()[1].health.state == "ok"
