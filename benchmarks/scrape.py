"""Render time of /metrics for a node of 16 devices and 512 processes, against the floor.

Floor: prometheus_client rendering the very same series from families built once in advance
(a static collector): the least any exporter built on prometheus_client can pay per scrape.
Measured:
- cold: the first scrape after a new snapshot (families built from the snapshot, then rendered);
- warm: a further scrape of the same snapshot (families reused, only the age gauge rebuilt).
And what the server sends (exposition.cache.Exposition: the snapshot part rendered once, the age
gauge and an extra counter rendered per scrape), text and gzip:
- cached: a scrape of an unchanged snapshot (target < 1 ms);
- cached, new snapshot: the first scrape after a new snapshot (renders the snapshot part).

    python benchmarks/scrape.py [--rounds N]
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import statistics
import time

from prometheus_client import CollectorRegistry, generate_latest

from hetero_exporter.model import fields as F
from hetero_exporter.exposition.cache import Exposition
from hetero_exporter.exposition.collector import KernelLogCollector, SnapshotCollector, build_families
from hetero_exporter.model import (CollectorStatus, DeviceIdentity, DeviceSample, Fault, NodeSnapshot,
                                   ProcessSample, Profile, Quality, Reading)

DEVICES, PROCESSES = 16, 512


def node(seed: float = 0.0) -> NodeSnapshot:
    fields = {F.UTILIZATION: 0.5, F.MEMORY_UTILIZATION: 0.3, F.MEMORY_USED: 4e10, F.MEMORY_TOTAL: 8.55e10,
              F.TEMP_CORE: 60, F.TEMP_MEMORY: 66, F.POWER: 420.5, F.POWER_LIMIT: 700, F.ENERGY: 1.2e7,
              F.CLOCK_COMPUTE: 1.98e9, F.CLOCK_MEMORY: 2.6e9, F.ECC_CORRECTED: 2, F.ECC_UNCORRECTED: 0,
              "interconnect_nvlink_rx_bytes_total": 1e12, "interconnect_nvlink_tx_bytes_total": 1e12}
    devices = []
    per = PROCESSES // DEVICES
    for i in range(DEVICES):
        uuid = f"GPU-{i:08d}-0000-0000-0000-000000000000"
        readings = {k: Reading(v + seed + i, Quality(f"nvml.{k}", "sampled", 1.0, 0.01)) for k, v in fields.items()}
        procs = tuple(ProcessSample(10000 + i * per + j, uuid, (1 + j) << 28, 0.01 * j, "python",
                                    namespace="ml", pod=f"train-{i}-{j % 4}", container="trainer")
                      for j in range(per))
        devices.append(DeviceSample(
            DeviceIdentity("nvidia", "gpu", i, uuid, "H100-SXM5-80GB", f"0000:{i + 16:02x}:00.0", i // 8, "550.54.15"),
            timestamp=1.0 + seed, readings=readings, faults=(Fault("13", "app-error", "restart-app", count=2, last_seen=1.0),),
            processes=procs, profile=Profile("H100-SXM5-80GB", "nvidia", "gpu", 3.17, cost_weight=3.0)))
    return NodeSnapshot("bench", 1.0 + seed, tuple(devices),
                        (CollectorStatus("nvml", True, 0.01, last_success=1.0),), {"nvidia": DEVICES})


class Static:
    def __init__(self, families):
        self._f = families

    def collect(self):
        return self._f


def interleaved(cases: dict, rounds: int) -> dict[str, tuple[float, float]]:
    """Best and median seconds of each case, the cases run in turn each round so a
    noisy neighbour affects them alike."""
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {k: (min(v), statistics.median(v)) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()

    base = node()
    floor_reg = CollectorRegistry(auto_describe=False)
    floor_reg.register(Static(build_families(base)))

    current = {"snap": base}
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: current["snap"], clock=lambda: 5.0))
    text = generate_latest(reg)
    series = sum(1 for line in text.splitlines() if not line.startswith(b"#"))

    counter = [0]

    def cold():
        counter[0] += 1
        current["snap"] = dataclasses.replace(base, time=1.0 + counter[0])  # a new snapshot object
        generate_latest(reg)

    served = {"snap": base}
    served_reg = CollectorRegistry(auto_describe=False)
    served_reg.register(SnapshotCollector(lambda: served["snap"], clock=time.time))  # the age moves
    status = {"up": True, "records": 0, "events": {("nvidia", "79"): 1}, "dropped": {}, "lag_seconds": 0.0}
    served_reg.register(KernelLogCollector(lambda: {**status, "records": status["records"] + counter[0]}))
    expo = Exposition(served_reg)

    def cached_new(gz: bool):
        counter[0] += 1
        served["snap"] = dataclasses.replace(base, time=1.0 + counter[0])
        expo.render(None, gz)

    r = interleaved({"floor": lambda: generate_latest(floor_reg), "warm": lambda: generate_latest(reg),
                     "cold": cold, "cached": lambda: expo.render(None, False),
                     "cached gzip": lambda: expo.render(None, True),
                     "cached new": lambda: cached_new(False), "cached new gzip": lambda: cached_new(True)},
                    args.rounds)
    (floor_min, floor_med), (warm_min, warm_med), (cold_min, cold_med) = r["floor"], r["warm"], r["cold"]
    print(f"machine: {platform.machine()} {platform.python_implementation()} {platform.python_version()}, "
          f"{DEVICES} devices, {PROCESSES} processes, {series} series, {len(text)} bytes")
    print("| case | best ms | median ms | ratio to floor (best / median) |")
    print("|---|---|---|---|")
    print(f"| floor: static families | {floor_min * 1e3:.2f} | {floor_med * 1e3:.2f} | 1.00 / 1.00 |")
    for label, (lo, med) in (("warm scrape (same snapshot)", (warm_min, warm_med)),
                             ("cold scrape (new snapshot)", (cold_min, cold_med)),
                             ("served, cached (same snapshot), text", r["cached"]),
                             ("served, cached (same snapshot), gzip", r["cached gzip"]),
                             ("served, new snapshot, text", r["cached new"]),
                             ("served, new snapshot, gzip", r["cached new gzip"])):
        print(f"| {label} | {lo * 1e3:.2f} | {med * 1e3:.2f} | {lo / floor_min:.2f} / {med / floor_med:.2f} |")


if __name__ == "__main__":
    main()
