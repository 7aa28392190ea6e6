"""The NVML collector's core contract over the fake pynvml: units, unsupported, lost GPUs."""

from __future__ import annotations

import pytest
import yaml

pynvml = pytest.importorskip("pynvml")

from hetero_exporter.model import fields as F  # noqa: E402
from hetero_exporter.sdk.contract import CollectorOptions, Unavailable  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml import collector as nvml  # noqa: E402
from hetero_exporter.simulate import ManualClock  # noqa: E402
from hetero_exporter.simulate.scenario import from_dict  # noqa: E402

SCENARIO = """
name: nvml-core
node: n1
devices:
  - vendor: nvidia
    count: 3
    product: "NVIDIA A100-SXM4-80GB"
    memory_total: 85899345920
    driver_version: "535.129.03"
    values:
      utilization_ratio: 0.42
      memory_used_bytes: 10GiB
      temperature_core_celsius: 55
      temperature_memory_celsius: 61
      power_watts: 250.5
      power_limit_watts: 400
      clock_compute_hertz: 1410e6
      clock_memory_hertz: 1593e6
      ecc_corrected_total: 7
      ecc_uncorrected_total: 0
    unsupported: [temperature_memory_celsius]
faults:
  - {at: 10, vendor: nvidia, index: 1, kind: lost}
  - {at: 20, vendor: nvidia, index: 1, kind: reset}
"""


def make(settings=None):
    doc = yaml.safe_load(SCENARIO)
    if settings:
        doc["settings"] = {"nvidia": settings}
    clock = ManualClock()
    return nvml.create(CollectorOptions(scenario=from_dict(doc, "nvml-core"), clock=clock)), clock


def test_readings_are_converted_to_base_units_with_quality():
    c, _ = make()
    d = c.collect()[0]
    assert d.identity.model == "A100-SXM4-80GB" and d.identity.pci_address == "0000:18:00.0"
    assert d.value(F.UTILIZATION) == pytest.approx(0.42)
    assert d.value(F.MEMORY_USED) == 10 * 2**30
    assert d.value(F.POWER) == pytest.approx(250.5)  # reported in mW
    assert d.value(F.POWER_LIMIT) == 400.0
    assert d.value(F.CLOCK_COMPUTE) == 1410e6  # reported in MHz
    assert d.value(F.ECC_CORRECTED) == 7
    assert d.readings[F.POWER].quality.source == "nvmlDeviceGetPowerUsage"
    assert d.readings[F.POWER].quality.method == "sampled"


def test_not_supported_is_absent_with_status_and_not_asked_again():
    c, _ = make()
    d = c.collect()[0]
    r = d.readings[F.TEMP_MEMORY]
    assert r.value is None and r.quality.status == "unsupported"
    assert d.value(F.TEMP_MEMORY) is None
    calls_before = c._nv.calls
    c.collect()
    per_cycle = c._nv.calls - calls_before
    c.collect()
    assert c._nv.calls - calls_before == 2 * per_cycle  # steady: the unsupported call is skipped


def test_a_lost_gpu_is_failed_and_the_others_keep_their_readings():
    c, clock = make()
    c.collect()  # identities learned while healthy
    clock.set_t(12)
    devices = c.collect()
    assert [d.identity.index for d in devices] == [0, 1, 2]
    lost = devices[1]
    assert lost.health.state == "failed" and lost.health.reasons[0].code == "gpu-lost"
    assert lost.identity.uuid.startswith("GPU-") and lost.readings == {}
    assert devices[0].value(F.POWER) and devices[2].value(F.POWER)
    clock.set_t(13)
    again = c.collect()[1]
    assert again.faults[0].count == 1  # one loss episode, however many polls
    clock.set_t(25)  # reset: back to normal, the fault history stays for the counter
    back = c.collect()[1]
    assert back.health.state == "ok" and back.value(F.POWER)
    assert back.faults[0].code == "gpu-lost" and back.faults[0].count == 1


@pytest.mark.parametrize("error", ["LibraryNotFound", "DriverNotLoaded", "NoPermission"])
def test_init_failure_is_unavailable(error):
    with pytest.raises(Unavailable, match=error):
        make({"init_error": error})
