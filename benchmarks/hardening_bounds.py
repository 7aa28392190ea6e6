"""Memory bounds of issue 35 item 9: a device's kernel-log fault codes, the extender's body-mode table.

1. ``codes``: N amdgpu correctable-error lines naming N distinct blocks on one GPU (free text: each
   its own fault code), through the kernel-log follower and its enricher (the fault ledger and the
   per-code pairing with the collector's counts); measured with tracemalloc: the memory they
   leave, and the faults the device carries (each one a series).
2. ``nodes``: the extender's body-mode table of decoded nodes (``nodeCacheCapable: false``), its
   byte bound set to ``--table-mib``, fed N distinct node names whose annotation is 64 bare GPUs
   (7.7 KB of text that decodes to ~115 KB); measured with tracemalloc: the memory the table
   holds, and the nodes in it. A realistic 8-GPU HGX annotation (14.8 KB) for comparison.

Each part runs in a fresh child process over the tree at ``--root`` (default: this checkout), so
the same script measures an older tree (a ``git worktree`` of the commit before) as the baseline.
The storm of distinct texts (item 8): ``benchmarks/kernel_log_storm.py --distinct``.

    python benchmarks/hardening_bounds.py [--codes 20000] [--nodes 400] [--table-mib 4] [--root DIR]
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
import gc, json, sys, tempfile, tracemalloc
sys.path.insert(0, sys.argv[1])
part, n, arg = sys.argv[2], int(sys.argv[3]), sys.argv[4]

def measure(step):
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    out = step()
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - before, out

if part == "codes":
    from hetero_exporter.sources import kernel_log as kl
    from hetero_exporter.simulate.kernel_log import RingBuffer
    from hetero_exporter.simulate.clock import ManualClock
    from hetero_exporter.model import DeviceIdentity, DeviceSample, NodeSnapshot
    ident = DeviceIdentity(vendor="amd", kind="gpu", index=0, uuid="amd-0", model="m", pci_address="0000:25:00.0")
    snap = lambda t: NodeSnapshot(node="n", time=t, devices=(DeviceSample(identity=ident, timestamp=t),))
    ring = RingBuffer(capacity=2000)
    f = kl.Follower(kl.KmsgSource("fake", opener=ring.open), state_dir=tempfile.mkdtemp(), boot_id="b",
                    clock=ManualClock(), max_pending=2000)
    enrich = kl.KernelLogFaults(f)
    ring.append("amdgpu 0000:25:00.0: amdgpu: 2 correctable hardware errors detected in warm block")
    f.drain(); enrich(snap(1.0))

    def feed():
        out = None
        for chunk in range(0, n, 1000):
            for i in range(chunk, min(n, chunk + 1000)):
                ring.append(f"amdgpu 0000:25:00.0: amdgpu: 2 correctable hardware errors detected in blk{i} block")
            f.drain()
            out = enrich(snap(2.0))
        ring._records.clear()
        return out
    grown, out = measure(feed)
    print(json.dumps({"bytes": grown, "faults": len(out.devices[0].faults), "dropped": f.status()["dropped"]}))
else:
    from hetero_exporter.model import compact_json
    from hetero_exporter.scoring import extender as ext_mod, synthetic
    from hetero_exporter.scoring.scorer import Scorer
    if arg == "bare":
        devs = [{"identity": {"index": i, "kind": "gpu", "model": "H100-SXM5-80GB", "uuid": f"GPU-{i}",
                              "vendor": "nvidia"}, "timestamp": 1764400000.0} for i in range(64)]
        text = json.dumps({"schema": 1, "node": "x", "time": 1764400000.0, "devices": devs}, separators=(",", ":"))
    else:
        text = compact_json(synthetic.node("x", "hgx-h100", time=1764400000.0))
    ext_mod.DECODED_BYTES = int(float(sys.argv[5]) * 2**20)
    e = ext_mod.Extender(Scorer(), None)
    e.decoded.state_for("warm", text)

    def feed():
        for i in range(n):
            e.decoded.state_for(f"node-{i}", text)
    grown, _ = measure(feed)
    print(json.dumps({"bytes": grown, "nodes": len(e.decoded), "text": len(text), "bound": ext_mod.DECODED_BYTES,
                      "evicted": getattr(e.decoded, "evicted", None)}))
"""


def run(root: Path, *args: object) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(root), *map(str, args)], capture_output=True, text=True,
                         timeout=1800, check=True, cwd=root)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--codes", type=int, default=20_000)
    ap.add_argument("--nodes", type=int, default=400)
    ap.add_argument("--table-mib", type=float, default=4.0, help="the body-mode table's byte bound for the run")
    ap.add_argument("--root", type=Path, default=ROOT, help="the tree to measure (default: this checkout)")
    args = ap.parse_args()
    print(f"# {platform.node()} {platform.processor() or platform.machine()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, tree {args.root}")
    codes = run(args.root, "codes", args.codes, "-")
    print(f"codes: {args.codes} distinct amdgpu blocks on one GPU: {codes['bytes'] / 2**20:.1f} MiB left "
          f"({codes['bytes'] / args.codes:.0f} B a code), {codes['faults']} faults on the device; "
          f"dropped {codes['dropped']}")
    for kind in ("bare", "hgx"):
        got = run(args.root, "nodes", args.nodes, kind, args.table_mib)
        print(f"nodes ({kind}, {got['text']} B annotation): {args.nodes} names into a table bounded at "
              f"{args.table_mib:g} MiB: {got['bytes'] / 2**20:.1f} MiB held, {got['nodes']} nodes "
              f"({got['bytes'] / max(1, got['nodes']) / 1024:.1f} KiB a node), evicted {got['evicted']}")


if __name__ == "__main__":
    main()
