"""On a machine with an NVIDIA GPU: every reading the NVML collector produces, against
``nvidia-smi -q -x`` captured in between two NVML collections (a bracket), within the
tolerances stated in TOLERANCE. Skipped where nvidia-smi is absent (tests/conftest.py).

Field mapping: collectors/nvidia_smi.py FIELD_MAP (XML element -> field), so a reading is
compared wherever both sources report it. Fields only NVML reports (energy, NVLink state
and traffic) are listed in NVML_ONLY and checked for plausibility instead.
Run: ``python -m pytest -m device -s tests/test_device_nvml.py`` (-s prints what was seen).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hetero_exporter.model import fields as F
from hetero_exporter.sdk.contract import CollectorOptions
from hetero_exporter.collectors.nvidia import common as C
from hetero_exporter.collectors.nvidia.nvidia_smi import collector as nvidia_smi

pytestmark = pytest.mark.device

MIB = 1 << 20
# field -> (absolute tolerance, relative tolerance) added around the [min, max] of the two
# NVML collections that bracket the nvidia-smi capture
TOLERANCE: dict[str, tuple[float, float]] = {
    F.UTILIZATION: (0.10, 0.0),  # both sampled over ~1 s windows that do not coincide
    F.MEMORY_UTILIZATION: (0.10, 0.0),
    F.MEMORY_USED: (64 * MIB, 0.0),  # MiB printed; allocations move between captures
    F.MEMORY_TOTAL: (1 * MIB, 0.0),
    F.TEMP_CORE: (2.0, 0.0),
    F.TEMP_MEMORY: (2.0, 0.0),
    F.POWER: (5.0, 0.10),  # NVML: +/-5 % accuracy; 1 s averages at different moments
    F.POWER_LIMIT: (0.01, 0.0),
    F.CLOCK_COMPUTE: (100e6, 0.0),  # boost moves in 15 MHz bins, load changes it
    F.CLOCK_MEMORY: (100e6, 0.0),
    F.ECC_CORRECTED: (0.0, 0.0),
    F.ECC_UNCORRECTED: (0.0, 0.0),
    C.ECC_CORRECTED_VOLATILE: (0.0, 0.0),
    C.ECC_UNCORRECTED_VOLATILE: (0.0, 0.0),
    C.RETIRED_SBE: (0.0, 0.0),
    C.RETIRED_DBE: (0.0, 0.0),
    C.RETIREMENT_PENDING: (0.0, 0.0),
    C.REMAPPED_CORRECTABLE: (0.0, 0.0),
    C.REMAPPED_UNCORRECTABLE: (0.0, 0.0),
    C.REMAP_PENDING: (0.0, 0.0),
    C.REMAP_FAILED: (0.0, 0.0),
    C.PCIE_GEN: (0.0, 0.0),  # may change with load: the bracket covers it
    C.PCIE_GEN_MAX: (0.0, 0.0),
    C.PCIE_WIDTH: (0.0, 0.0),
    C.PCIE_WIDTH_MAX: (0.0, 0.0),
    C.PCIE_REPLAY: (0.0, 0.0),
    C.RECOVERY_ACTION: (0.0, 0.0),
    **{C.clock_reason_field(n): (0.0, 0.0) for _, n, _ in C.CLOCK_REASONS},
    "fan_speed_ratio": (0.05, 0.0),  # a fan curve moves between the captures
    # GPM's decoder is the mean over the NVDEC engines across the cycle; nvidia-smi's is NVML's own window
    "engine_encoder_utilization_ratio": (0.15, 0.0),
    "engine_decoder_utilization_ratio": (0.15, 0.0),
}
NVML_ONLY = (F.ENERGY, C.NVLINK_ACTIVE, C.NVLINK_INACTIVE, C.NVLINK_RX, C.NVLINK_TX)
# Fields whose support both sources must agree on (outside MIG, where nvidia-smi prints N/A
# for the parent's memory and utilization); for the others nvidia-smi may print a value NVML
# marks unsupported (e.g. clock reasons outside the supported mask print "Not Active").
STATUS_MUST_AGREE = (F.MEMORY_TOTAL, F.MEMORY_USED, F.TEMP_CORE, F.POWER_LIMIT, F.CLOCK_COMPUTE,
                     F.CLOCK_MEMORY, C.PCIE_GEN, C.PCIE_GEN_MAX, C.PCIE_WIDTH, C.PCIE_WIDTH_MAX)


@pytest.fixture(scope="module")
def captured():
    pytest.importorskip("pynvml")
    from hetero_exporter.collectors.nvidia.nvml import collector as nvml
    collector = nvml.create(CollectorOptions(settings={"events": False, "fallback": False}))
    assert isinstance(collector, nvml.NvmlCollector)
    try:
        first = collector.collect()
        xml = subprocess.run(["nvidia-smi", "-q", "-x"], capture_output=True, text=True, timeout=60, check=True).stdout
        second = collector.collect()
    finally:
        collector.close()
    smi, _ = nvidia_smi.parse_devices(xml)
    return first, second, smi


def _by_uuid(devices):
    return {d.identity.uuid: d for d in devices}


def test_the_same_gpus_with_the_same_identity(captured):
    first, _second, smi = captured
    nv, cli = _by_uuid(first), _by_uuid(smi)
    gpus = [u for u, d in nv.items() if d.identity.parent is None]
    assert gpus and set(gpus) == {u for u, d in cli.items() if d.identity.parent is None}
    for u in gpus:
        a, b = nv[u].identity, cli[u].identity
        assert (a.index, a.pci_address, a.model, a.driver_version) == (b.index, b.pci_address, b.model, b.driver_version)
        assert a.serial == b.serial and a.firmware_version == b.firmware_version
        print(f"\n{a.index} {a.uuid} {a.name} -> {a.model} at {a.pci_address}, driver {a.driver_version}")


def test_every_nvml_reading_matches_nvidia_smi_within_tolerance(captured):
    first, second, smi = captured
    nv1, nv2 = _by_uuid(first), _by_uuid(second)
    mig_parents = {d.identity.parent for d in first if d.identity.parent}
    compared, disagreements = 0, []
    for d in smi:
        u = d.identity.uuid
        if u not in nv1 or u not in nv2:
            continue  # a MIG instance without a uuid in this driver's XML
        for field, r1 in nv1[u].readings.items():
            if field in NVML_ONLY:
                continue
            r2, rs = nv2[u].readings.get(field), d.readings.get(field)
            if rs is None:
                continue  # this driver's nvidia-smi does not print the field
            statuses = {r1.quality.status, r2.quality.status if r2 else "absent"}
            if rs.quality.status != "ok" or statuses != {"ok"}:
                everything = statuses | {rs.quality.status}
                # supported on one side only is a mapping bug (errors are transient)
                if field in STATUS_MUST_AGREE and u not in mig_parents and "error" not in everything \
                        and "ok" in everything and "unsupported" in everything:
                    disagreements.append(f"{u} {field}: nvml {sorted(statuses)} vs nvidia-smi {rs.quality.status}")
                continue
            absolute, relative = TOLERANCE.get(field, (0.0, 0.0))
            low, high = sorted((r1.value, r2.value))
            slack = absolute + relative * max(abs(low), abs(high))
            compared += 1
            if not (low - slack <= rs.value <= high + slack):
                disagreements.append(f"{u} {field}: nvml {r1.value}..{r2.value} vs nvidia-smi {rs.value}")
            print(f"{u[:12]} {field:38s} nvml {r1.value:>16.6g}..{r2.value:<16.6g} nvidia-smi {rs.value:.6g}")
    assert compared > 0
    assert not disagreements, "\n".join(disagreements)


def test_nvml_only_readings_are_plausible(captured):
    first, second, _ = captured
    for a, b in zip(first, second):
        e1, e2 = a.value(F.ENERGY), b.value(F.ENERGY)
        if e1 is not None and e2 is not None:
            assert 0 <= e1 <= e2  # a counter
        active, inactive = a.value(C.NVLINK_ACTIVE), a.value(C.NVLINK_INACTIVE)
        if active is not None:
            assert active >= 0 and inactive >= 0


def test_processes_seen_by_both(captured):
    first, second, smi = captured
    cli = _by_uuid(smi)
    for d1, d2 in zip(first, second):
        if d1.identity.uuid not in cli:
            continue
        stable = {p.pid for p in d1.processes} & {p.pid for p in d2.processes}
        cli_pids = {p.pid: p for p in cli[d1.identity.uuid].processes}
        for pid in stable:
            assert pid in cli_pids, f"pid {pid} on {d1.identity.uuid} missing from nvidia-smi"
            mem = next(p.memory_bytes for p in d1.processes if p.pid == pid)
            if mem is not None and cli_pids[pid].memory_bytes is not None:
                assert abs(mem - cli_pids[pid].memory_bytes) <= 64 * MIB


def test_inspect_lists_the_gpu_with_model_memory_clocks_and_power(captured):
    _first, _second, smi = captured
    out = subprocess.run([sys.executable, "-m", "hetero_exporter", "inspect", "--json", "--collector.nvml"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    doc = json.loads(out)
    seen = {d["identity"]["uuid"]: d for d in doc["devices"] if d["identity"]["vendor"] == "nvidia"}
    table = subprocess.run([sys.executable, "-m", "hetero_exporter", "inspect", "--collector.nvml"],
                           capture_output=True, text=True, timeout=120, check=True).stdout
    print("\n" + table)
    for d in smi:
        if d.identity.parent is not None:
            continue
        got = seen[d.identity.uuid]
        assert got["identity"]["model"] == d.identity.model
        r = got["readings"]
        assert abs(r["memory_total_bytes"]["value"] - d.value(F.MEMORY_TOTAL)) <= MIB
        for field in (F.CLOCK_COMPUTE, F.POWER):
            if d.value(field) is not None:
                assert r[field]["quality"]["status"] == "ok" and r[field]["value"] > 0
    assert "COLLECTORS" in table and "nvml" in table


def test_gpm_profiling_where_the_gpu_has_it(captured):
    """Issue 27: on Hopper and later every GPM field has a value in range, per GPU and MIG instance
    (compare with ``nvidia-smi dmon -s t`` and dcgm-exporter's DCGM_FI_PROF_* by hand: -s prints them);
    on older GPUs they are unsupported, never 0."""
    from hetero_exporter.collectors.nvidia.nvml import gpm
    first, second, _ = captured
    for d in second:
        present = [f.field for f in gpm.FIELDS if f.field in d.readings]
        if not present:
            continue  # a MIG instance gets the per-instance fields only
        statuses = {d.readings[f].quality.status for f in present}
        print(f"{d.identity.uuid[:12]} {d.identity.model}: GPM {sorted(statuses)} "
              + " ".join(f"{f.split('_utilization')[0]}={d.readings[f].value:.3g}" for f in present
                         if d.readings[f].value is not None))
        hopper = any(g in (d.identity.name or d.identity.model) for g in ("H100", "H200", "H20", "H800", "GH200", "B100", "B200", "GB200"))
        if hopper:
            assert "ok" in statuses, statuses
            for f in present:
                r = d.readings[f]
                if r.value is not None and f.endswith("_ratio"):
                    assert 0.0 <= r.value <= 1.0 + 1e-6, (f, r.value)
                if r.value is not None:
                    assert r.quality.method == "sampled" and r.quality.window_seconds >= gpm.MIN_WINDOW
        else:
            gpm_only = [f for f in present if not f.startswith(("pcie_", "engine_decoder"))]
            assert {d.readings[f].quality.status for f in gpm_only} <= {"unsupported"}, d.identity.model
