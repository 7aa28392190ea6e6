"""NVIDIA: identity.runtime_version (the CUDA driver API version) from NVML and from
``nvidia-smi -q -x``; a lost GPU keeps the uuid first read at its index; the NVML funnel's
mapping of errors to unsupported / lost / error; every quality row declares its resolution."""

from __future__ import annotations

import pytest
import yaml

pynvml = pytest.importorskip("pynvml")

from hetero_exporter.collectors.nvidia.nvidia_smi import collector as nvidia_smi  # noqa: E402
from hetero_exporter.collectors.nvidia.nvidia_smi import parse as smi_parse  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml import collector as nvml  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml import mig  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml.funnel import (ERROR, LOST, UNSUPPORTED, Funnel, Lost,  # noqa: E402
                                                           cuda_version_text)
from hetero_exporter.sdk.contract import CollectorOptions  # noqa: E402
from hetero_exporter.simulate import ManualClock  # noqa: E402
from hetero_exporter.simulate.scenario import from_dict  # noqa: E402

SCENARIO = """
name: nvidia-identity
node: n1
devices:
  - vendor: nvidia
    count: 3
    product: "NVIDIA H100 80GB HBM3"
    memory_total: 85899345920
    driver_version: "570.124.06"
    values: {utilization_ratio: 0.5, power_watts: 300, memory_used_bytes: 1GiB}
faults:
  - {at: 10, vendor: nvidia, index: 1, kind: lost, handle_error: Unknown}
  - {at: 20, vendor: nvidia, index: 1, kind: reset}
"""


def options(settings=None, faults=True):
    doc = yaml.safe_load(SCENARIO)
    if not faults:
        doc["faults"] = []
    if settings:
        doc["settings"] = {"nvidia": settings}
    clock = ManualClock()
    return CollectorOptions(scenario=from_dict(doc, "nvidia-identity"), clock=clock,
                            settings={"events": False}), clock


@pytest.mark.parametrize("raw,text", [(12080, "12.8"), (12040, "12.4"), (11020, "11.2"), (13000, "13.0"),
                                      (0, None), (-1, None), ("x", None), (None, None)])
def test_cuda_driver_version_as_major_dot_minor(raw, text):
    assert cuda_version_text(raw) == text


def test_fake_nvml_reports_the_scenarios_cuda_version_as_runtime_version():
    opts, _ = options()
    assert {d.identity.runtime_version for d in nvml.create(opts).collect()} == {"12.8"}
    opts, _ = options({"cuda_driver_version": 12040})
    assert nvml.create(opts).collect()[0].identity.runtime_version == "12.4"
    opts, _ = options({"cuda_driver_version": "none"})  # NotSupported: absent, not invented
    assert nvml.create(opts).collect()[0].identity.runtime_version is None


def test_nvidia_smi_reads_cuda_version_into_runtime_version():
    opts, _ = options(faults=False)
    devices = nvidia_smi.create(opts).collect()
    assert [d.identity.runtime_version for d in devices] == ["12.8"] * 3
    xml = ("<nvidia_smi_log><driver_version>535.129.03</driver_version><cuda_version>12.2</cuda_version>"
           "<gpu id='00000000:18:00.0'><uuid>GPU-1</uuid></gpu></nvidia_smi_log>")
    assert smi_parse.parse(xml).devices[0].identity.runtime_version == "12.2"
    assert smi_parse.parse(xml.replace("12.2", "N/A")).devices[0].identity.runtime_version is None


def test_mig_instances_carry_the_runtime_version_of_their_gpu():
    from conftest import ROOT
    from hetero_exporter.simulate import load
    scenario = load(str(ROOT / "fixtures" / "scenarios" / "nvidia-mig.yaml"))
    devices = nvml.create(CollectorOptions(scenario=scenario, clock=ManualClock(),
                                           settings={"events": False})).collect()
    assert any(d.identity.parent for d in devices)
    assert {d.identity.runtime_version for d in devices} == {"12.8"}


def test_a_gpu_lost_off_the_bus_keeps_the_uuid_first_read_at_its_index():
    opts, clock = options()
    c = nvml.create(opts)
    before = c.collect()
    uuid = before[1].identity.uuid
    assert uuid.startswith("GPU-")
    clock.set_t(12)  # lost: even the handle lookup fails (NVML_ERROR_UNKNOWN)
    devices = c.collect()
    lost = devices[1]
    assert lost.identity == before[1].identity and not uuid.startswith("nvidia-unidentified")
    assert lost.health.state == "failed" and lost.health.reasons[0].code == "gpu-lost"
    assert "NVMLError_Unknown" in lost.health.reasons[0].message and lost.readings == {}
    assert [d.health.state for d in devices] == ["ok", "failed", "ok"]
    clock.set_t(13)
    assert c.collect()[1].faults[0].count == 1  # one loss episode
    clock.set_t(25)
    back = c.collect()[1]
    assert back.identity.uuid == uuid and back.health.state == "ok"


def test_a_gpu_lost_before_it_was_ever_read_is_unreadable_not_misnamed():
    opts, clock = options()
    clock.set_t(12)
    devices = nvml.create(opts).collect()
    assert devices[1].identity.uuid == "nvidia-unidentified-1" and devices[1].health.state == "unknown"


def test_nvidia_smi_reports_a_gpu_it_no_longer_lists_under_its_uuid():
    opts, clock = options()
    c = nvidia_smi.create(opts)
    uuids = [d.identity.uuid for d in c.collect()]
    clock.set_t(12)  # the fake renders no lost GPU, as nvidia-smi cannot open it
    devices = {d.identity.uuid: d for d in c.collect()}
    assert set(devices) == set(uuids)
    assert devices[uuids[1]].health.state == "failed"
    assert devices[uuids[1]].health.reasons[0].code == "gpu-lost"


# ---------------------------------------------------------------- the funnel


def _raise(name):
    def fn(*_args):
        raise getattr(pynvml, f"NVMLError_{name}")()
    return fn


@pytest.mark.parametrize("name,status,missing", [
    ("NotSupported", UNSUPPORTED, False), ("FunctionNotFound", UNSUPPORTED, True),
    ("ArgumentVersionMismatch", UNSUPPORTED, True), ("NoPermission", ERROR, False),
    ("Timeout", ERROR, False), ("Unknown", ERROR, False), ("InvalidArgument", ERROR, False)])
def test_funnel_maps_nvml_errors_to_three_outcomes(name, status, missing):
    got = Funnel(pynvml).call(_raise(name))
    assert (got.ok, got.status, got.missing) == (False, status, missing)
    assert got.code == getattr(pynvml, f"NVMLError_{name}")().value


def test_funnel_lost_raises_and_unknown_counts_as_lost_after_a_loss():
    f = Funnel(pynvml)
    with pytest.raises(Lost):
        f.call(_raise("GpuIsLost"))
    assert f.attempt(_raise("GpuIsLost")).status == LOST
    f.after_loss = True
    with pytest.raises(Lost):
        f.call(_raise("Unknown"))
    assert f.outcome(pynvml.NVML_ERROR_INVALID_ARGUMENT, invalid_is_unsupported=True) == UNSUPPORTED


def test_funnel_treats_a_binding_without_the_function_as_unsupported():
    f = Funnel(pynvml)
    assert f.optional("nvmlNoSuchFunction", default="absent") == "absent"
    assert f.call(lambda: (_ for _ in ()).throw(pynvml.NVMLLibraryMismatchError("old"))).missing
    with pytest.raises(ZeroDivisionError):  # a bug is not a device state
        f.call(lambda: 1 / 0)


# ---------------------------------------------------------------- quality rows


def test_every_quality_row_declares_resolution_and_every_sampled_row_a_window():
    rows = {**{f"nvml:{k}": q for k, q in nvml.QUALITY.items()},
            **{f"mig:{k}": q for k, q in mig.QUALITY.items()}}
    opts, _ = options(faults=False)
    for d in nvidia_smi.create(opts).collect() + nvml.create(opts).collect():
        rows.update({f"{d.identity.uuid}:{k}": r.quality for k, r in d.readings.items()})
    for name, q in rows.items():
        assert q.resolution is not None and q.resolution > 0, name
        if q.method == "sampled":
            assert q.window_seconds is not None and q.window_seconds > 0, name
