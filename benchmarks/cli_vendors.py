"""Tool calls and cycle time per collection cycle for an 8-card node of each CLI vendor that
ships a ``scenario.yaml`` in its package, over its fake tool (real runner, real parser, one
process per call; so a cycle's time is dominated by starting the fake's Python interpreter,
which a real tool does not pay).

Each vendor's scenario is scaled to 8 devices; the scenario clock advances 10 s per cycle (the
default interval), so detail calls come due at their real cadence. Calls are counted with
``sdk.runner.invocations()``. Baseline: one call per card per cycle (a collector that asks the
tool about each card separately), i.e. 8 calls per cycle.

    python benchmarks/cli_vendors.py [--cycles N] [--vendors metax,iluvatar,...]
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

from hetero_exporter import registry, vendors  # noqa: E402
from hetero_exporter.sdk import runner  # noqa: E402
from hetero_exporter.sdk.contract import CollectorOptions  # noqa: E402
from hetero_exporter.simulate import ManualClock, load  # noqa: E402

INTERVAL = 10.0
CARDS = 8


def eight_card_scenario(spec, workdir: Path) -> str:
    doc = yaml.safe_load(spec.data_path("scenario.yaml").read_text())
    groups = [g for g in doc["devices"] if g.get("vendor") == spec.name]
    groups[0]["count"] = CARDS
    doc["devices"] = groups[:1]
    path = workdir / f"{spec.name}-8x.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def measure(spec, entry, cycles: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"bench-{spec.name}-"))
    sc = load(eight_card_scenario(spec, work))
    clock = ManualClock()
    col = registry.collector_factory(entry)(CollectorOptions(
        scenario=sc, clock=clock, workdir=str(work), timeout_seconds=30.0, interval_seconds=INTERVAL))
    tools = [t.name for t in spec.tools]
    calls, seconds = [], []
    for i in range(cycles):
        clock.set_t(i * INTERVAL)
        before = sum(runner.invocations().get(t, 0) for t in tools)
        t0 = time.perf_counter()
        devs = col.collect()
        seconds.append(time.perf_counter() - t0)
        calls.append(sum(runner.invocations().get(t, 0) for t in tools) - before)
        top = [d for d in devs if d.identity.parent is None]
        assert len(top) == CARDS, f"{spec.name}: {len(top)} devices"
    steady = calls[1:]
    return {"first": calls[0], "mean": statistics.mean(steady), "max": max(steady),
            "first_s": seconds[0], "median_s": statistics.median(seconds[1:]), "max_s": max(seconds[1:])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=31)
    ap.add_argument("--vendors", default="", help="comma-separated; default: every vendor with a scenario.yaml")
    args = ap.parse_args()
    wanted = [v for v in args.vendors.split(",") if v]
    print(f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, CPython {platform.python_version()}, "
          f"{args.cycles} cycles of {INTERVAL:g} s scenario time, {CARDS} cards per node\n")
    print("| vendor | collector | calls, first cycle | calls per cycle, mean | max | first cycle s | "
          "cycle s, median | max | calls vs one per card |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, spec in vendors.specs().items():
        if (wanted and name not in wanted) or not spec.data_path("scenario.yaml").is_file():
            continue
        for entry in spec.collectors:
            if not entry.default:
                continue
            m = measure(spec, entry, args.cycles)
            print(f"| {name} | {entry.name} | {m['first']} | {m['mean']:.2f} | {m['max']} | {m['first_s']:.2f} | "
                  f"{m['median_s']:.2f} | {m['max_s']:.2f} | {m['mean'] / CARDS:.2f} |")


if __name__ == "__main__":
    main()
