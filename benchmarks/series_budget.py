"""Series per device per profile, per vendor, and bytes per scrape of an 8-device node per profile.

The budgets (tests/test_series_budget.py, tests/test_profiles_fleet.py): standard (the default)
at most 12 labels and, on eight H100s with GPM on and 16 processes a GPU, 110 series per device
plus 3 per process; fleet at most 32 series per device, 9 labels, no process series. This prints:

1. the series of each vendor's devices (those labelled with its uuid, process series apart) on the
   all-vendors node with its H100s' GPM on (tests/series_nodes.py), per profile, from a snapshot
   after a second cycle;
2. the /metrics body of eight devices of one vendor (that node's group, eight of it; NVIDIA also
   with 16 processes a GPU) per profile: the text format as served (exposition.cache), its gzip
   (level 1, what the agent sends), and OpenMetrics.

    python benchmarks/series_budget.py [--vendor NAME ...]
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from prometheus_client import CollectorRegistry  # noqa: E402

from series_nodes import gpm_node, vendor_node  # noqa: E402 - the tests' nodes
from hetero_exporter.app.agent import Agent, Options  # noqa: E402
from hetero_exporter.exposition.cache import Exposition  # noqa: E402
from hetero_exporter.exposition.collector import SnapshotCollector, build_families  # noqa: E402
from hetero_exporter.exposition.selection import Selection  # noqa: E402
from hetero_exporter.model import NodeSnapshot  # noqa: E402
from hetero_exporter.model import names as N  # noqa: E402

OPENMETRICS = "application/openmetrics-text;version=1.0.0"


def snapshot(scenario: Path) -> NodeSnapshot:
    agent = Agent.build(Options(command="inspect", simulate=str(scenario)))
    try:
        sampler = agent.start().sampler
        sampler.collect()  # GPM pairs a sample with the previous cycle's
        return sampler.collect()
    finally:
        agent.close()


def counts(snap: NodeSnapshot, profile: str) -> tuple[dict[str, list[int]], dict[str, int], int]:
    """vendor -> series per device, vendor -> most series of one process, widest label set."""
    vendor_of = {d.identity.uuid: d.identity.vendor for d in snap.devices}
    per_device: dict[str, int] = {}
    per_process: dict[tuple, int] = {}
    widest = 0
    for fam in build_families(snap, selection=Selection(profile=profile)):
        for s in fam.samples:
            widest = max(widest, len(s.labels))
            uuid = s.labels.get("uuid")
            if uuid is None:
                continue
            if "pid" in s.labels:
                per_process[(uuid, s.labels["pid"])] = per_process.get((uuid, s.labels["pid"]), 0) + 1
            else:
                per_device[uuid] = per_device.get(uuid, 0) + 1
    devices: dict[str, list[int]] = {}
    procs: dict[str, int] = {}
    for uuid, n in per_device.items():
        devices.setdefault(vendor_of[uuid], []).append(n)
    for (uuid, _), n in per_process.items():
        procs[vendor_of[uuid]] = max(procs.get(vendor_of[uuid], 0), n)
    return devices, procs, widest


def body_bytes(snap: NodeSnapshot, profile: str) -> tuple[int, int, int]:
    """(text, its gzip, OpenMetrics) bytes of one scrape as the agent serves it."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, clock=lambda: snap.time, selection=Selection(profile=profile)))
    expo = Exposition(reg)
    text = b"".join(expo.render(None, False)[0])
    zipped = b"".join(expo.render(None, True, gzip_min=0)[0])
    assert gzip.decompress(zipped) == text
    return len(text), len(zipped), len(b"".join(expo.render(OPENMETRICS, False)[0]))


def per_profile_table(tmp: Path) -> None:
    snap = snapshot(gpm_node(tmp))
    got = {p: counts(snap, p) for p in N.PROFILES}
    print("all-vendors node, NVIDIA GPM on: series per device, median (max); widest series: "
          + ", ".join(f"{p} {got[p][2]} labels" for p in N.PROFILES))
    print("| vendor | devices | " + " | ".join(N.PROFILES) + " | series per process (standard, max) |")
    print("|---|---|" + "---|" * len(N.PROFILES) + "---|")
    for vendor in sorted(got[N.STANDARD][0]):
        cells = []
        for p in N.PROFILES:
            series = got[p][0].get(vendor, [0])
            cells.append(f"{statistics.median(series):.0f} ({max(series)})")
        print(f"| {vendor} | {len(got[N.STANDARD][0][vendor])} | " + " | ".join(cells)
              + f" | {got[N.STANDARD][1].get(vendor, 0)} |")
    print()


def bytes_table(tmp: Path, vendors: Optional[list[str]]) -> None:
    rows: list[tuple[str, Path]] = [(v, vendor_node(tmp, v)) for v in vendors or
                                    ("nvidia", "amd", "hygon", "ascend", "cambricon", "metax", "iluvatar", "mthreads",
                                     "enflame", "kunlunxin")]
    if not vendors or "nvidia" in vendors:
        rows.insert(1, ("nvidia, 16 processes a GPU", vendor_node(tmp, "nvidia", processes=16)))
    print("bytes per scrape of 8 devices: text KB (gzip KB) [OpenMetrics KB]; the simulated scenario's processes")
    print("| node | " + " | ".join(N.PROFILES) + " |")
    print("|---|" + "---|" * len(N.PROFILES))
    for name, scenario in rows:
        snap = snapshot(scenario)
        cells = []
        for p in N.PROFILES:
            text, zipped, om = body_bytes(snap, p)
            cells.append(f"{text / 1000:.1f} ({zipped / 1000:.1f}) [{om / 1000:.1f}]")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vendor", action="append", help="only this vendor's 8-device node (repeatable)")
    args = ap.parse_args(argv[1:])
    print(f"{datetime.date.today()}, {platform.machine()}, CPython {platform.python_version()}\n")
    with tempfile.TemporaryDirectory() as tmp:
        per_profile_table(Path(tmp))
        bytes_table(Path(tmp), args.vendor)


if __name__ == "__main__":
    main(sys.argv)
