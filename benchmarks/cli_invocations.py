"""CLI invocations and cycle time per collection cycle on an 8-NPU / 8-MLU node, measured with
the fake executables (real runner, real parsers, one process per call).

Node: fixtures/scenarios/ascend-910b-8x.yaml (eight 910B3) and eight MLU370-X8 of the same
shape. The scenario clock advances 10 s per cycle (the default interval), so the per-card
detail calls come due at their real cadence. Counted with vendor_cli.invocations().

Baseline: the same collector asking every detail kind of every card every cycle
(``detail_intervals`` all equal to the interval, no per-cycle cap): what a collector that
reads everything each cycle would run.

    python benchmarks/cli_invocations.py [--cycles N] [--baseline-cycles N]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hetero_exporter.sdk import runner as vendor_cli  # noqa: E402
from hetero_exporter.sdk.contract import CollectorOptions  # noqa: E402
from hetero_exporter.collectors.cambricon.cnmon import collector as cnmon
from hetero_exporter.collectors.ascend.npu_smi import collector as npu_smi  # noqa: E402
from hetero_exporter.simulate import ManualClock, load  # noqa: E402

INTERVAL = 10.0


def scenario_file(workdir: Path) -> str:
    doc = yaml.safe_load((ROOT / "fixtures/scenarios/ascend-910b-8x.yaml").read_text())
    mlu = {"vendor": "cambricon", "count": 8, "product": "MLU370-X8", "memory_total": "48GiB",
           "driver_version": "v5.10.13", "firmware_version": "v1.1.6", "pci_address": "0000:39:00.0",
           "pci_stride": 4, "values": {"utilization_ratio": 0.5, "memory_used_bytes": "12GiB",
                                       "temperature_core_celsius": 45, "power_watts": 150, "power_limit_watts": 250,
                                       "ecc_corrected_total": 0, "ecc_uncorrected_total": 0},
           "processes": [{"pid": 7100, "name": "cnrt-infer", "memory": "10GiB"}]}
    doc["devices"].append(mlu)
    p = workdir / "bench-node.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


def measure(module, tool: str, cycles: int, settings: dict, timeout: float = 30.0) -> dict:
    work = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    sc = load(scenario_file(work))
    clock = ManualClock()
    col = module.create(CollectorOptions(scenario=sc, clock=clock, workdir=str(work), timeout_seconds=timeout,
                                         interval_seconds=INTERVAL, settings=settings))
    calls, seconds = [], []
    for i in range(cycles):
        clock.set_t(i * INTERVAL)
        before = vendor_cli.invocations().get(tool, 0)
        t0 = time.perf_counter()
        devs = col.collect()
        seconds.append(time.perf_counter() - t0)
        calls.append(vendor_cli.invocations().get(tool, 0) - before)
        assert len(devs) == 8, len(devs)
    steady = calls[1:]
    return {"first": calls[0], "first_s": seconds[0], "mean": statistics.mean(steady), "max": max(steady),
            "median_s": statistics.median(seconds[1:]), "max_s": max(seconds[1:])}


def row(name: str, m: dict, base: dict | None = None) -> str:
    ratio = f"{m['mean'] / base['mean']:.2f}" if base else "1.00"
    return (f"| {name} | {m['first']} | {m['mean']:.2f} | {m['max']} | {m['first_s']:.2f} | "
            f"{m['median_s']:.2f} | {m['max_s']:.2f} | {ratio} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=61, help="cycles (10 s of scenario time each)")
    ap.add_argument("--baseline-cycles", type=int, default=13)
    args = ap.parse_args()
    every = {k: INTERVAL for k in npu_smi.DEFAULT_DETAIL_INTERVALS}
    base = measure(npu_smi, "npu-smi", args.baseline_cycles, {"detail_intervals": every, "detail_calls_per_cycle": 1000})
    ours = measure(npu_smi, "npu-smi", args.cycles, {})
    mlu = measure(cnmon, "cnmon", args.cycles, {})
    print(f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, CPython {platform.python_version()}, "
          f"{args.cycles} cycles of {INTERVAL:g} s scenario time\n")
    print("| collector (8 devices) | calls, first cycle | calls per cycle, mean | max | first cycle s | "
          "cycle s, median | max | calls vs baseline |")
    print("|---|---|---|---|---|---|---|---|")
    print(row("npu_smi, baseline: every detail every cycle", base))
    print(row("npu_smi (summary + spread details)", ours, base))
    print(row("cnmon (table + cnmon info every 300 s)", mlu, base))


if __name__ == "__main__":
    main()
