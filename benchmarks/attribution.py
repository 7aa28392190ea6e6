"""Cost of process -> pod attribution per collection cycle, 512 processes, cold and warm cache.

A fake /proc (tmpfs-backed temp dir, as /proc is memory-backed) holds 512 processes on 8
devices, each in a pod of its own laid out like a real node (cgroup v2, systemd driver, mixed
containerd / CRI-O / docker; every 8th process a host process). The enricher names them from
an in-memory pod directory and maps 64 PodResources allocations, as in the agent.

- cold: a fresh enricher each cycle: every pid's stat and cgroup read and parsed (the first
  cycle after start, or every cycle without the (pid, start time) cache: the baseline);
- warm: the same enricher cycle after cycle: one stat read per pid, cgroup read only for new
  pids (here none).

    python benchmarks/attribution.py [--processes 512] [--rounds 30]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hetero_exporter.sources.attribution import Attributor, PodInfo, StaticPods  # noqa: E402
from hetero_exporter.model import (Allocation, DeviceIdentity, DeviceSample, NodeSnapshot,  # noqa: E402
                                   ProcessSample, SourceStatus)
from hetero_exporter.simulate import procfs  # noqa: E402

RUNTIMES = ("containerd", "cri-o", "docker")
QOS = ("guaranteed", "burstable", "besteffort")


class _Allocations:
    def __init__(self, by_uuid):
        self._by_uuid = by_uuid

    def allocations(self, devices):
        return self._by_uuid

    def status(self):
        return SourceStatus("podresources", ok=True, items=len(self._by_uuid))


def build(root: Path, n: int, devices: int = 8):
    pods, procs_by_dev, allocs = [], {}, {}
    idents = [DeviceIdentity("nvidia", "gpu", i, f"GPU-{i:08d}-0000-4000-8000-000000000000") for i in range(devices)]
    for k in range(n):
        pid = 10_000 + k
        dev = idents[k % devices]
        d = root / str(pid)
        d.mkdir(parents=True)
        if k % 8 == 7:
            text = procfs.cgroup_text(procfs.HOST_PATH, 2)
        else:
            uid = f"{k:08x}-0f6b-4b7a-9a51-3f1e2d4c5b60"
            cid = f"{k:064x}"
            runtime = RUNTIMES[k % 3]
            text = procfs.cgroup_text(procfs.pod_cgroup_path(uid, QOS[k % 3], runtime, cid, "systemd"), 2)
            pods.append(PodInfo(uid, f"ns-{k % 16}", f"pod-{k}", {cid: "main"}))
            if len(allocs.get(dev.uuid, ())) < 8:
                allocs.setdefault(dev.uuid, []).append(Allocation(f"ns-{k % 16}", f"pod-{k}", "main", "nvidia.com/gpu", dev.uuid))
        (d / "cgroup").write_text(text)
        (d / "stat").write_text(procfs.stat_text(pid, "python", 1000 + k))
        procs_by_dev.setdefault(dev.uuid, []).append(ProcessSample(pid, dev.uuid, 1 << 30, 0.5, "python"))
    snap = NodeSnapshot("bench", 0.0, tuple(DeviceSample(i, 0.0, processes=tuple(procs_by_dev.get(i.uuid, ())),
                                                         processes_reported=True) for i in idents))
    return snap, StaticPods(pods), _Allocations(allocs)


def measure(fn, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="attr-bench-", dir=base) as tmp:
        snap, pods, allocs = build(Path(tmp), args.processes)
        warm = Attributor(tmp, pods=pods, allocations=allocs)
        out = warm(snap)
        named = sum(1 for d in out.devices for p in d.processes if p.pod)
        assert named == args.processes - args.processes // 8, named  # every pod process named
        cold_ms, warm_ms = [], []
        for _ in range(args.rounds):  # interleaved so a noisy neighbour hits both alike
            cold_ms += measure(lambda: Attributor(tmp, pods=pods, allocations=allocs)(snap), 1)
            warm_ms += measure(lambda: warm(snap), 1)
        reads = warm.cache.reads
    cm, wm = statistics.median(cold_ms), statistics.median(warm_ms)
    print(f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, CPython {platform.python_version()}, "
          f"{args.processes} processes, {args.rounds} rounds; warm enricher read {reads} cgroup files in "
          f"{args.rounds + 1} cycles")
    print("| case | best ms | median ms | per process µs (median) | ratio to cold (median) |")
    print("|---|---|---|---|---|")
    print(f"| cold: no cache (baseline) | {min(cold_ms):.2f} | {cm:.2f} | {cm * 1000 / args.processes:.1f} | 1.00 |")
    print(f"| warm: (pid, start time) cache | {min(warm_ms):.2f} | {wm:.2f} | {wm * 1000 / args.processes:.1f} | "
          f"{wm / cm:.2f} |")


if __name__ == "__main__":
    main()
