"""Series per device, per vendor, on the simulated all-vendors node and on 8 x H100 with GPM on.

The budget (issue 27, tests/test_series_budget.py): at most 12 labels on a series; on an 8-GPU
H100 node with GPM on and 16 processes per GPU, at most 110 series per device plus 3 per process.
This prints what each vendor's devices cost in series (the device's own series: those labelled
with its uuid, process series apart), from one snapshot after a second cycle.

    python benchmarks/series_budget.py
"""

from __future__ import annotations

import datetime
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hetero_exporter.app.agent import Agent, Options  # noqa: E402
from hetero_exporter.exposition.collector import build_families  # noqa: E402


def counts(scenario: str) -> dict[str, tuple[list[int], int, int]]:
    agent = Agent.build(Options(command="inspect", simulate=scenario))
    try:
        sampler = agent.start().sampler
        sampler.collect()
        snap = sampler.collect()
    finally:
        agent.close()
    vendor_of = {d.identity.uuid: d.identity.vendor for d in snap.devices}
    per_device: dict[str, int] = {}
    per_process: dict[tuple, int] = {}
    widest = 0
    for fam in build_families(snap):
        for s in fam.samples:
            widest = max(widest, len(s.labels))
            uuid = s.labels.get("uuid")
            if uuid is None:
                continue
            if "pid" in s.labels:
                per_process[(uuid, s.labels["pid"])] = per_process.get((uuid, s.labels["pid"]), 0) + 1
            else:
                per_device[uuid] = per_device.get(uuid, 0) + 1
    out: dict[str, tuple[list[int], int, int]] = {}
    for uuid, n in per_device.items():
        v = vendor_of.get(uuid, "?")
        series, procs, most = out.get(v, ([], 0, 0))
        mine = [c for (u, _), c in per_process.items() if u == uuid]
        out[v] = (series + [n], procs + len(mine), max([most, *mine]))
    out["_widest"] = ([], widest, 0)
    return out


def main() -> None:
    print(f"{datetime.date.today()}, {platform.machine()}, CPython {platform.python_version()}\n")
    for scenario in (str(ROOT / "fixtures/scenarios/all-vendors.yaml"), "default"):
        got = counts(scenario)
        widest = got.pop("_widest")[1]
        print(f"{Path(scenario).stem}: widest series {widest} labels")
        print("| vendor | devices | series per device: median (max) | processes | series per process (max) |")
        print("|---|---|---|---|---|")
        for vendor, (series, procs, most) in sorted(got.items()):
            print(f"| {vendor} | {len(series)} | {statistics.median(series):.0f} ({max(series)}) | {procs} | {most} |")
        print()


if __name__ == "__main__":
    main()
