"""Series per device per profile, per vendor, and bytes per scrape of an 8-device node per profile
(issue 39: the fleet profile's cost at 10,000 nodes beside AMD's exporter and dcgm-exporter).

The budgets (tests/test_series_budget.py, tests/test_profiles_fleet.py): standard (the default)
at most 12 labels and, on eight H100s with GPM on and 16 processes a GPU, 110 series per device
plus 3 per process; fleet at most 32 series per device, 9 labels, no process series. This prints:

1. the series of each vendor's devices (those labelled with its uuid, process series apart) on the
   all-vendors node with its H100s' GPM on (tests/series_nodes.py), per profile, from a snapshot
   after a second cycle;
2. the /metrics body of eight devices of one vendor (that node's group, eight of it; NVIDIA also
   with 16 processes a GPU) per profile: the text format as served (exposition.cache), its gzip
   (level 1, what the agent sends), and OpenMetrics;
3. the 8-GPU H100 node (GPM on) per profile: series per GPU and per node, bytes per scrape, the
   series of 10,000 such nodes, beside the baselines below (ratios: ours / theirs).

Baselines (reported, not measured here): AMD's device-metrics-exporter, 571 KB per scrape of an
8-GPU MI300X node (taken as 571,000 bytes of text); dcgm-exporter's default counters
(default-counters.csv), about 26 series per GPU.

    python benchmarks/series_budget.py [--vendor NAME ...] [--json]
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

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
VENDORS = ("nvidia", "amd", "hygon", "ascend", "cambricon", "metax", "iluvatar", "mthreads", "enflame", "kunlunxin")
AMD_EXPORTER_BYTES = 571_000  # per 8-GPU scrape, as reported (issue 39)
DCGM_DEFAULT_SERIES_PER_GPU = 26  # dcgm-exporter's default-counters.csv, about
FLEET_NODES = 10_000


def snapshot(scenario: Path) -> NodeSnapshot:
    agent = Agent.build(Options(command="inspect", simulate=str(scenario)))
    try:
        sampler = agent.start().sampler
        sampler.collect()  # GPM pairs a sample with the previous cycle's
        return sampler.collect()
    finally:
        agent.close()


def counts(snap: NodeSnapshot, profile: str) -> dict[str, Any]:
    """vendor -> series per device (``devices``), vendor -> most series of one process
    (``processes``), the widest label set (``labels``) and every series (``series``)."""
    vendor_of = {d.identity.uuid: d.identity.vendor for d in snap.devices}
    per_device: dict[str, int] = {}
    per_process: dict[tuple, int] = {}
    widest = total = 0
    for fam in build_families(snap, selection=Selection(profile=profile)):
        for s in fam.samples:
            total += 1
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
    return {"devices": devices, "processes": procs, "labels": widest, "series": total}


def body_bytes(snap: NodeSnapshot, profile: str) -> dict[str, int]:
    """Bytes of one scrape as the agent serves it: text, its gzip, OpenMetrics, its gzip."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, clock=lambda: snap.time, selection=Selection(profile=profile)))
    expo = Exposition(reg)
    out = {}
    for name, accept in (("text", None), ("openmetrics", OPENMETRICS)):
        plain = b"".join(expo.render(accept, False)[0])
        zipped = b"".join(expo.render(accept, True, gzip_min=0)[0])
        assert gzip.decompress(zipped) == plain
        out[f"{name}_bytes"], out[f"{name}_gzip_bytes"] = len(plain), len(zipped)
    return out


def per_vendor(tmp: Path) -> dict[str, Any]:
    """The all-vendors node (GPM on): per profile, each vendor's series per device."""
    snap = snapshot(gpm_node(tmp))
    return {p: counts(snap, p) for p in N.PROFILES}


def h100_node(tmp: Path, processes: Optional[int] = None) -> dict[str, Any]:
    """Eight H100s with GPM on (``processes`` a GPU where given): per profile, series and bytes."""
    snap = snapshot(vendor_node(tmp, "nvidia", processes=processes))
    out: dict[str, Any] = {}
    for p in N.PROFILES:
        c = counts(snap, p)
        per_gpu = max(c["devices"]["nvidia"])
        out[p] = {"series_per_gpu": per_gpu, "series_per_process": c["processes"].get("nvidia", 0),
                  "series_per_node": c["series"], "labels_max": c["labels"],
                  "series_at_10000_nodes": c["series"] * FLEET_NODES, **body_bytes(snap, p)}
        out[p]["vs_amd_exporter_bytes"] = round(out[p]["text_bytes"] / AMD_EXPORTER_BYTES, 3)
        out[p]["vs_dcgm_default_series_per_gpu"] = round(per_gpu / DCGM_DEFAULT_SERIES_PER_GPU, 2)
    return out


def vendor_bytes(tmp: Path, vendors: tuple[str, ...]) -> dict[str, dict[str, dict[str, int]]]:
    """Eight devices of each vendor: per profile, bytes per scrape."""
    return {v: {p: body_bytes(snap, p) for p in N.PROFILES}
            for v in vendors for snap in (snapshot(vendor_node(tmp, v)),)}


def measure(vendors: tuple[str, ...]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        return {"date": str(datetime.date.today()), "machine": platform.machine(),
                "python": platform.python_version(),
                "baselines": {"amd_exporter_bytes_per_8_gpu_scrape": AMD_EXPORTER_BYTES,
                              "dcgm_exporter_default_series_per_gpu": DCGM_DEFAULT_SERIES_PER_GPU},
                "h100x8": h100_node(tmp), "h100x8_16_processes": h100_node(tmp, 16),
                "all_vendors": per_vendor(tmp), "vendors_x8": vendor_bytes(tmp, vendors)}


def _kb(n: int) -> str:
    return f"{n / 1000:.1f}"


def print_tables(got: dict[str, Any]) -> None:
    print(f"{got['date']}, {got['machine']}, CPython {got['python']}\n")
    for key, title in (("h100x8", "8 x H100, GPM on"), ("h100x8_16_processes", "8 x H100, GPM on, 16 processes a GPU")):
        print(f"{title}\n\n| profile | series per GPU | per process | per node | at 10,000 nodes | labels | text KB | "
              "gzip KB | OpenMetrics KB | text / AMD's 571 KB | series per GPU / dcgm's 26 |")
        print("|---|" + "---:|" * 10)
        for p, r in got[key].items():
            print(f"| {p} | {r['series_per_gpu']} | {r['series_per_process']} | {r['series_per_node']} | "
                  f"{r['series_at_10000_nodes']:,} | {r['labels_max']} | {_kb(r['text_bytes'])} | "
                  f"{_kb(r['text_gzip_bytes'])} | {_kb(r['openmetrics_bytes'])} | {r['vs_amd_exporter_bytes']:.3f} | "
                  f"{r['vs_dcgm_default_series_per_gpu']:.2f} |")
        print()
    every = got["all_vendors"]
    print("all-vendors node, NVIDIA GPM on: series per device, median (max)\n")
    print("| vendor | devices | " + " | ".join(N.PROFILES) + " | series per process (standard, max) |")
    print("|---|---:|" + "---:|" * (len(N.PROFILES) + 1))
    for vendor in sorted(every[N.STANDARD]["devices"]):
        cells = [f"{statistics.median(s):.0f} ({max(s)})" for p in N.PROFILES
                 for s in (every[p]["devices"].get(vendor, [0]),)]
        print(f"| {vendor} | {len(every[N.STANDARD]['devices'][vendor])} | " + " | ".join(cells)
              + f" | {every[N.STANDARD]['processes'].get(vendor, 0)} |")
    print("\nbytes per scrape of 8 devices: text KB (gzip KB) [OpenMetrics KB], text / AMD's 571 KB\n")
    print("| node | " + " | ".join(N.PROFILES) + " |")
    print("|---|" + "---:|" * len(N.PROFILES))
    for vendor, by_profile in got["vendors_x8"].items():
        cells = [f"{_kb(b['text_bytes'])} ({_kb(b['text_gzip_bytes'])}) [{_kb(b['openmetrics_bytes'])}], "
                 f"{b['text_bytes'] / AMD_EXPORTER_BYTES:.3f}" for b in by_profile.values()]
        print(f"| {vendor} | " + " | ".join(cells) + " |")


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vendor", action="append", choices=VENDORS, help="only this vendor's 8-device node (repeatable)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    args = ap.parse_args(argv[1:])
    got = measure(tuple(args.vendor or VENDORS))
    if args.json:
        print(json.dumps(got, sort_keys=True))
    else:
        print_tables(got)


if __name__ == "__main__":
    main(sys.argv)
