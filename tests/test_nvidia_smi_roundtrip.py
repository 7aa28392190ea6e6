"""Render-then-parse round trip: a scenario read through the fake NVML and through the
fake's ``nvidia-smi -q -x`` rendering gives the same readings (within the CLI's printed
resolution), for any values hypothesis draws."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pynvml = pytest.importorskip("pynvml")

from hetero_exporter.model import fields as F  # noqa: E402
from hetero_exporter.sdk.contract import CollectorOptions  # noqa: E402
from hetero_exporter.collectors.nvidia import common as C  # noqa: E402
from hetero_exporter.collectors.nvidia.nvidia_smi import collector as nvidia_smi
from hetero_exporter.collectors.nvidia.nvml import collector as nvml  # noqa: E402
from hetero_exporter.simulate import ManualClock  # noqa: E402
from hetero_exporter.simulate.scenario import from_dict  # noqa: E402

MIB = 1 << 20
COMPARED = (F.UTILIZATION, F.MEMORY_UTILIZATION, F.MEMORY_USED, F.MEMORY_TOTAL, F.TEMP_CORE, F.TEMP_MEMORY,
            F.POWER, F.POWER_LIMIT, F.CLOCK_COMPUTE, F.CLOCK_MEMORY, F.ECC_CORRECTED, F.ECC_UNCORRECTED,
            C.ECC_CORRECTED_VOLATILE, C.ECC_UNCORRECTED_VOLATILE, C.RETIRED_SBE, C.RETIRED_DBE,
            C.RETIREMENT_PENDING, C.REMAPPED_CORRECTABLE, C.REMAPPED_UNCORRECTABLE, C.REMAP_PENDING,
            C.REMAP_FAILED, C.PCIE_GEN, C.PCIE_GEN_MAX, C.PCIE_WIDTH, C.PCIE_WIDTH_MAX, C.PCIE_REPLAY,
            C.RECOVERY_ACTION) + tuple(C.clock_reason_field(n) for _, n, _ in C.CLOCK_REASONS)
# the CLI prints watts with 2 decimals; everything else exactly (memory in whole MiB)
TOLERANCE = {F.POWER: 0.006, F.POWER_LIMIT: 0.006}

values = st.fixed_dictionaries({
    "utilization_ratio": st.integers(0, 100).map(lambda v: v / 100),
    "memory_utilization_ratio": st.integers(0, 100).map(lambda v: v / 100),
    "memory_used_bytes": st.integers(0, 80 * 1024).map(lambda v: v * MIB),
    "temperature_core_celsius": st.integers(20, 95),
    "temperature_memory_celsius": st.integers(20, 105),
    "power_watts": st.integers(20_000, 700_000).map(lambda mw: mw / 1000),
    "power_limit_watts": st.integers(100, 700),
    "clock_compute_hertz": st.integers(200, 2100).map(lambda v: v * 1e6),
    "clock_memory_hertz": st.integers(400, 2700).map(lambda v: v * 1e6),
    "ecc_corrected_total": st.integers(0, 10**6),
    "ecc_uncorrected_total": st.integers(0, 100),
    "ecc_corrected_volatile_total": st.integers(0, 1000),
    "ecc_uncorrected_volatile_total": st.integers(0, 10),
    "memory_retired_pages_single_bit": st.integers(0, 64),
    "memory_retired_pages_double_bit": st.integers(0, 64),
    "memory_retirement_pending": st.integers(0, 1),
    "memory_remapped_rows_correctable": st.integers(0, 512),
    "memory_remapped_rows_uncorrectable": st.integers(0, 512),
    "memory_remap_pending": st.integers(0, 1),
    "memory_remap_failed": st.integers(0, 1),
    "pcie_link_generation": st.integers(1, 5),
    "pcie_link_generation_max": st.integers(1, 6),
    "pcie_link_width": st.sampled_from([1, 2, 4, 8, 16]),
    "pcie_link_width_max": st.sampled_from([8, 16]),
    "pcie_replay_total": st.integers(0, 10**6),
    "clock_event_reasons": st.integers(0, 0x1FF),
    "recovery_action": st.integers(0, 4),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values, st.lists(st.text(alphabet="abcdefghij_-.", min_size=1, max_size=12), max_size=3),
       st.sets(st.sampled_from(["ecc_corrected_total", "power_watts", "temperature_memory_celsius"]), max_size=2))
def test_nvml_and_rendered_cli_agree(vals, names, unsupported):
    doc = {"name": "rt", "devices": [{
        "vendor": "nvidia", "product": "NVIDIA A100-SXM4-80GB", "memory_total": 80 * 1024 * MIB,
        "driver_version": "535.129.03", "values": vals, "unsupported": sorted(unsupported),
        "processes": [{"pid": 100 + i, "name": n, "memory": (i + 1) * MIB * 64} for i, n in enumerate(names)]}]}
    scenario = from_dict(doc, "rt")
    opts = CollectorOptions(scenario=scenario, clock=ManualClock(), settings={"events": False})
    via_nvml = nvml.create(opts).collect()[0]
    via_cli = nvidia_smi.create(opts).collect()[0]
    assert via_cli.identity.uuid == via_nvml.identity.uuid
    assert via_cli.identity.pci_address == via_nvml.identity.pci_address
    assert via_cli.identity.model == via_nvml.identity.model
    for field in COMPARED:
        a, b = via_nvml.readings.get(field), via_cli.readings.get(field)
        assert a is not None and b is not None, field
        assert (a.quality.status == "ok") == (b.quality.status == "ok"), field
        if a.quality.status == "ok":
            assert b.value == pytest.approx(a.value, abs=TOLERANCE.get(field, 0)), field
    assert [(p.pid, p.name, p.memory_bytes) for p in via_cli.processes] == \
        [(p.pid, p.name, p.memory_bytes) for p in via_nvml.processes]
    assert via_cli.health.state == via_nvml.health.state
    assert [r.code for r in via_cli.health.reasons] == [r.code for r in via_nvml.health.reasons]
