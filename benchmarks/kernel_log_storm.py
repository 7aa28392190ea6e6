"""A kernel-log storm: how late a critical line is behind benign ones, and memory under many codes.

1. ``storm``: a simulated /dev/kmsg ring holding N benign Xid 13 lines (four texts, as four SMs
   raising the same exception; with ``--distinct`` each its own pid and process name, so no two
   texts are alike: issue 35 item 8), then one Xid 79. The follower runs in its thread at the
   default budget (5,000 rule runs a second); measured: seconds from its start until the Xid 79
   is pending (its wake-up, which starts a health cycle), the follower's CPU time and what it
   counted as skipped. The ring's records are frozen out of the garbage collector
   (``gc.freeze``): on a node they are kernel memory, not Python objects the collector scans.
   Baseline: the issue's figure, reading limited to 5,000 records a second (N / 5,000 s), or the
   same script over an older tree (``--root``, a ``git worktree`` of the commit before).
2. ``codes``: N amdgpu uncorrectable-error lines naming N distinct blocks (free text: each its
   own fault code); measured: the process's RSS growth and the size of the per-code table.

Each part in a fresh child process (RSS of one does not hide the other).

    python benchmarks/kernel_log_storm.py [--lines 500000] [--codes 100000] [--distinct] [--root DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import gc, json, resource, sys, tempfile, threading, time
sys.path.insert(0, sys.argv[1])
from hetero_exporter.sources import kernel_log as kl
from hetero_exporter.simulate.kernel_log import RingBuffer

def rss_mib():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024

part, n, distinct = sys.argv[2], int(sys.argv[3]), sys.argv[4] == "distinct"
staged = RingBuffer(capacity=n + 16)  # the storm, written beforehand and then landed in one go
woke = threading.Event()
if part == "storm":
    for i in range(n):
        who = f"pid={100000 + i}, name=worker-{i}" if distinct else "pid=77, name=train"
        staged.append(f"NVRM: Xid (PCI:0000:18:00): 13, {who}, Graphics SM Warp Exception on "
                      f"(GPC 0, TPC {i % 4}, SM 0): Out Of Range Address")
    staged.append("NVRM: Xid (PCI:0000:28:00): 79, pid=0, name=<unknown>, GPU has fallen off the bus.")
else:
    for i in range(n):
        staged.append(f"amdgpu 0000:25:00.0: amdgpu: 2 uncorrectable hardware errors detected in blk{i} block")
ring = RingBuffer(capacity=n + 16)
before = rss_mib()
f = kl.Follower(kl.KmsgSource("fake", opener=ring.open), state_dir=tempfile.mkdtemp(), boot_id="b",
                wake=woke.set)
f.start()  # its first read (an empty buffer) is done: from here on the budget applies
with ring._lock:
    ring._records.update(staged._records)
    ring._oldest, ring._next_seq = staged._oldest, staged._next_seq
del staged
# the storm's records are Python objects here, kernel memory on a node: kept out of the garbage
# collector's scans (500,000 of them would make each full collection a fake cost of the follower)
gc.freeze()
t0, c0 = time.perf_counter(), time.process_time()
if part == "storm":
    woke.wait(600)
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    codes = [p.event.code for p in f.take()]
    dropped = f.status()["dropped"]
    f.close()
    print(json.dumps({"seconds": took, "cpu": cpu, "codes": sorted(set(codes)), "records": f.records,
                      "dropped": dropped}))
else:
    while f.records < n and time.perf_counter() - t0 < 600:
        time.sleep(0.05)
    st = f.status()
    f.close()
    print(json.dumps({"rss_growth_mib": rss_mib() - before, "event_codes": len(st["events"]),
                      "pending": st["pending"], "records": st["records"], "seconds": time.perf_counter() - t0}))
"""


def run(root: Path, part: str, n: int, distinct: bool = False) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(root), part, str(n), "distinct" if distinct else "same"],
                         capture_output=True, text=True, timeout=900, check=True, cwd=root)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=500_000)
    ap.add_argument("--codes", type=int, default=100_000)
    ap.add_argument("--distinct", action="store_true", help="storm lines each with its own pid and name")
    ap.add_argument("--root", type=Path, default=ROOT, help="the tree to measure (default: this checkout)")
    args = ap.parse_args()
    print(f"# {platform.node()} {platform.processor() or platform.machine()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, tree {args.root}")
    storm = run(args.root, "storm", args.lines, args.distinct)
    base = args.lines / 5000
    kind = "distinct" if args.distinct else "repeated"
    print(f"storm: {args.lines} {kind} benign Xid 13 then an Xid 79: the Xid 79 pending after "
          f"{storm['seconds']:.2f} s ({storm['cpu']:.2f} s CPU; baseline {base:.0f} s: "
          f"{base / storm['seconds']:.0f}x sooner); codes {storm['codes']}; dropped {storm.get('dropped')}")
    codes = run(args.root, "codes", args.codes)
    print(f"codes: {args.codes} distinct amdgpu blocks: RSS +{codes['rss_growth_mib']:.1f} MiB, "
          f"{codes['event_codes']} per-code entries, {codes['pending']} pending, {codes['seconds']:.1f} s")


if __name__ == "__main__":
    main()
