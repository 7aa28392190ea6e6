"""CPU time per NVML collection cycle on the fake backend: 8 GPUs x 16 and 8 x 64 processes.

The collector is the real collectors/nvml.py over collectors/nvml_fake.py: every reading of
issue 3 (core readings, volatile/aggregate ECC, retired pages, remapped rows, PCIe link and
replays, clock-event reasons, recovery action, 18 NVLinks per GPU behind NVSwitches, PCIe
topology, compute/graphics/MPS process lists, per-process utilization samples). The event
thread is off here: it blocks in nvmlEventSetWait between events and costs nothing per cycle.
The clock advances 10 s per cycle so every cycle sees new utilization samples.

CPU time is ``time.process_time()`` around each ``collect()`` (one thread: the whole process's
CPU is the cycle's). The fake's share is measured apart with cProfile (own time of functions in
nvml_fake.py, simulate/scenario.py and pynvml's error constructors), as a fraction of the
profiled total, and applied to the unprofiled median.

Baseline (stated in issue 3): nvitop-exporter, the Python peer, spends about 80 ms of CPU per
cycle on an 8 x 16 node (measured against a fake libnvidia-ml.so on this machine).

With GPM on (issue 27) every profiling metric answers and each cycle pairs a new sample per GPU
with the last one (the pairing clock is the scenario's, 10 s a cycle).

    python benchmarks/nvml_cycle.py [--cycles 200] [--processes 16 64] [--profiling on|off|both]
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import platform
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hetero_exporter.sdk.contract import CollectorOptions  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml import collector as nvml  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml import gpm  # noqa: E402
from hetero_exporter.simulate import ManualClock  # noqa: E402
from hetero_exporter.simulate.scenario import from_dict  # noqa: E402

BASELINE_MS = 80.0  # nvitop-exporter, 8 GPUs x 16 processes, CPU per cycle
FAKE_FILES = ("nvidia/nvml/fake.py", "model/scenario.py", "pynvml")  # the fake backend, its scenario signals


def scenario(gpus: int, processes: int):
    values = {
        "utilization_ratio": {"sine": {"mean": 0.6, "amplitude": 0.3, "period": 300}},
        "memory_utilization_ratio": 0.35, "memory_used_bytes": "40GiB", "memory_reserved_bytes": "512MiB",
        "temperature_core_celsius": {"sine": {"mean": 58, "amplitude": 8, "period": 600}},
        "temperature_memory_celsius": 64, "power_watts": {"sine": {"mean": 420, "amplitude": 180, "period": 300}},
        "power_limit_watts": 700, "clock_compute_hertz": 1755e6, "clock_memory_hertz": 2619e6,
        "ecc_corrected_total": 0, "ecc_uncorrected_total": 0, "ecc_corrected_volatile_total": 0,
        "ecc_uncorrected_volatile_total": 0, "memory_remapped_rows_correctable": 0,
        "memory_remapped_rows_uncorrectable": 0, "memory_remap_pending": 0, "memory_remap_failed": 0,
        "pcie_link_generation": 5, "pcie_link_generation_max": 5, "pcie_link_width": 16,
        "pcie_link_width_max": 16, "pcie_replay_total": 0, "clock_event_reasons": 0, "recovery_action": 0,
        "nvlink_rx_bytes_per_second": 40e9, "nvlink_tx_bytes_per_second": 40e9, "energy_start_joules": 1.2e7,
        # NVML GPM (issue 27): every profiling metric answers
        **{f.field: 0.3 if f.field.endswith("ratio") else 1e9 for f in gpm.FIELDS},
        "fan_speed_ratio": 0.4, "engine_encoder_utilization_ratio": 0.0,
    }
    procs = [{"pid": 10_000 + j, "name": f"worker-{j}", "memory": "1GiB", "utilization": 0.04}
             for j in range(processes)]
    doc = {"name": f"bench-{gpus}x{processes}", "node": "bench",
           "devices": [{"vendor": "nvidia", "count": gpus, "product": "NVIDIA H100 80GB HBM3",
                        "memory_total": 85520809984, "driver_version": "550.54.15",
                        "firmware_version": "G520.0200.00.05", "pci_address": "0000:18:00.0", "pci_stride": 16,
                        "numa_nodes": [0, 0, 0, 0, 1, 1, 1, 1], "values": values, "processes": procs,
                        "extra": {"nvlink_links": 18}}]}
    return from_dict(doc, doc["name"])


def build(gpus: int, processes: int, profiling: bool = True):
    clock = ManualClock()
    c = nvml.create(CollectorOptions(scenario=scenario(gpus, processes), clock=clock,
                                     settings={"events": False, "profiling": profiling}, interval_seconds=10.0))
    if c._gpm is not None:  # GPM pairs samples on the monotonic clock: the scenario's, 10 s a cycle
        c._gpm._monotonic, c._gpm._sleep = clock.t, lambda s: clock.advance(s)
    for _ in range(3):  # warm-up: identities, topology and unsupported fields learned
        clock.advance(10)
        c.collect()
    return c, clock


def measure(gpus: int, processes: int, cycles: int, profiling: bool = True) -> dict:
    c, clock = build(gpus, processes, profiling)
    times = []
    calls0 = c._nv.calls
    for _ in range(cycles):
        clock.advance(10)
        t0 = time.process_time()
        devices = c.collect()
        times.append((time.process_time() - t0) * 1000)
    calls = (c._nv.calls - calls0) / cycles
    assert len(devices) == gpus and all(len(d.processes) == processes for d in devices)
    assert all(len(d.links) == 2 * (gpus - 1) for d in devices)  # nvswitch + pcie to every peer
    # the fake's share, from a separate profiled run
    prof = cProfile.Profile()
    c2, clock2 = build(gpus, processes, profiling)
    prof.enable()
    for _ in range(max(20, cycles // 5)):
        clock2.advance(10)
        c2.collect()
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in stats.values())
    fake = sum(v[2] for k, v in stats.items() if any(f in k[0].replace("\\", "/") for f in FAKE_FILES))
    share = fake / total if total else 0.0
    med = statistics.median(times)
    c.close()
    c2.close()
    return {"gpus": gpus, "processes": processes, "median": med, "mean": statistics.fmean(times),
            "best": min(times), "p90": statistics.quantiles(times, n=10)[-1], "calls": calls,
            "fake_share": share, "collector_ms": med * (1 - share)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--processes", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--profiling", choices=("on", "off", "both"), default="both", help="NVML GPM (default: both)")
    args = ap.parse_args()
    print(f"{datetime.date.today()}, {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}, {args.cycles} cycles each\n")
    print("| node | CPU ms per cycle: median (best / mean / p90) | NVML calls per cycle | fake's share "
          "| collector alone, ms | ratio to nvitop-exporter (80 ms) |")
    print("|---|---|---|---|---|---|")
    for n, profiling in [(n, p) for n in args.processes
                         for p in ((True, False) if args.profiling == "both" else (args.profiling == "on",))]:
        r = measure(8, n, args.cycles, profiling)
        print(f"| 8 GPUs x {n} processes, GPM {'on' if profiling else 'off'} | {r['median']:.2f} ({r['best']:.2f} / {r['mean']:.2f} / {r['p90']:.2f}) "
              f"| {r['calls']:.0f} | {r['fake_share'] * 100:.0f} % | {r['collector_ms']:.2f} "
              f"| {r['median'] / BASELINE_MS:.3f} (collector alone {r['collector_ms'] / BASELINE_MS:.3f}) |")


if __name__ == "__main__":
    main()
