"""The kernel log as a health source: how fast a line becomes a fault in /metrics, and what
following a busy log costs.

1. Latency: an agent on the simulated default node (real sampler, enrichers, HTTP /metrics;
   interval 10 s) follows a text file; a Xid 79 line for one GPU is appended and /metrics is
   polled (every 10 ms) until ``accelerator_fault_events_total{code="79"}`` shows it for that
   GPU. Each round names another GPU. The follower asks for a cycle at once (critical event),
   the sampler keeps its 1 s minimum gap between cycles.
2. CPU: a writer process appends 1,000 records/s (kernel noise, 1 % NVRM Xid lines) to a file
   for ``--seconds``; the follower in this process reads them; the CPU time of this process
   (the follower thread, plus the idle main thread) over wall time.
3. Per-record cost of the /dev/kmsg path (simulated ring buffer, same parsing and matching) in a
   tight loop, and what 1,000 records/s of it cost.

    python benchmarks/kernel_log.py [--seconds 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

NOISE = [
    "audit: type=1400 audit({t}:{n}): apparmor=\"DENIED\" operation=\"open\" profile=\"snap.x\" name=\"/proc/{n}/\"",
    "IPv6: ADDRCONF(NETDEV_CHANGE): veth{n}: link becomes ready",
    "cni0: port {n}(veth{n}) entered forwarding state",
    "EXT4-fs (nvme0n1p{n}): mounted filesystem with ordered data mode. Quota mode: none.",
    "nvidia-peermem: peer memory client registered for device {n}",
]
XID = "NVRM: Xid (PCI:0000:{bus}:00): 13, pid={n}, name=python, Graphics Exception: ESR 0x405840=0x0"

WRITER = r"""
import sys, time
path, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
noise = %r
xid = %r
t0 = time.monotonic(); n = 0
with open(path, "a", buffering=1) as f:
    while time.monotonic() - t0 < seconds:
        due = int((time.monotonic() - t0) * rate)
        while n < due:
            line = xid.format(bus="18", n=n) if n %% 100 == 0 else noise[n %% len(noise)].format(t=int(time.time()), n=n)
            f.write("Nov 01 16:52:04 node-1 kernel: " + line + "\n")
            n += 1
        time.sleep(0.005)
print(n)
""" % (NOISE, XID)


def latency(rounds: int) -> list[float]:
    from prometheus_client import CollectorRegistry

    from hetero_exporter import cli
    from hetero_exporter.exposition.collector import KernelLogCollector, SnapshotCollector
    from hetero_exporter.exposition.server import MetricsServer
    from hetero_exporter.store import SnapshotStore

    tmp = tempfile.mkdtemp(prefix="kl-bench-")
    log_path = os.path.join(tmp, "kern.log")
    open(log_path, "w").close()
    args = cli.build_parser().parse_args(["run", "--simulate", "default", "--kernel-log", log_path,
                                          "--interval", "10", "--listen", "127.0.0.1:0", "--log-format", "text",
                                          "--log-level", "error"])
    w = cli.agent(args)
    store = SnapshotStore()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(store.latest, clock=w.clock))
    server = MetricsServer("127.0.0.1:0", reg, store.latest).start()
    sampler = w.start().sampler
    reg.register(KernelLogCollector(w.parts.kernel_log.follower.status))
    stop = threading.Event()
    loop = threading.Thread(target=sampler.run, args=(10.0, store.publish, stop), daemon=True)
    loop.start()
    host, port = server.address
    url = f"http://{host}:{port}/metrics"
    gpus = [d for d in w.scenario.devices if d.vendor == "nvidia"]
    out = []
    try:
        while store.latest() is None:
            time.sleep(0.05)
        time.sleep(2.0)  # past the first cycles
        for r in range(rounds):
            d = gpus[r % len(gpus)]
            bus = d.pci_address.rsplit(".", 1)[0]
            needle = f'code="79",uuid="{d.uuid}"'
            t0 = time.perf_counter()
            with open(log_path, "a") as f:
                f.write(f"Nov 01 16:52:04 node-1 kernel: NVRM: Xid (PCI:{bus}): 79, pid=1, name=x, "
                        "GPU has fallen off the bus.\n")
            while True:
                body = urllib.request.urlopen(url, timeout=5).read().decode()
                if any(line.startswith("accelerator_fault_events_total") and needle in line.replace(" ", "")
                       for line in body.splitlines()):
                    break
                if time.perf_counter() - t0 > 60:
                    raise RuntimeError("fault never reached /metrics")
                time.sleep(0.01)
            out.append(time.perf_counter() - t0)
            time.sleep(1.5)
    finally:
        stop.set()
        sampler.request_cycle()
        loop.join(timeout=15)
        server.stop()
        sampler.close()
        w.close()
    return out


def follow_cpu(seconds: float, rate: int = 1000) -> tuple[float, int, int]:
    """(CPU share of one core, records read, events) following a file written at ``rate``/s."""
    from hetero_exporter.sources import kernel_log as kl
    tmp = tempfile.mkdtemp(prefix="kl-cpu-")
    path = os.path.join(tmp, "kern.log")
    open(path, "w").close()
    f = kl.Follower(kl.FileSource(path), state_dir=tmp, boot_id="bench").start(wait_first=2.0)
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", WRITER, path, str(rate), str(seconds)],
                          capture_output=True, text=True, check=True)
    written = int(proc.stdout.strip())
    deadline = time.monotonic() + 10
    while f.status()["records"] < written and time.monotonic() < deadline:
        time.sleep(0.05)
    r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    events = sum(p.count for p in f.take())
    st = f.status()
    f.close()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return cpu / (t1 - t0), st["records"], events


def kmsg_per_record(n: int = 100_000) -> float:
    from hetero_exporter.sources import kernel_log as kl
    from hetero_exporter.simulate.kernel_log import RingBuffer
    ring = RingBuffer(capacity=n + 1)
    for i in range(n):
        ring.append(XID.format(bus="18", n=i) if i % 100 == 0 else NOISE[i % len(NOISE)].format(t=0, n=i))
    f = kl.Follower(kl.KmsgSource("bench", opener=ring.open), state_dir=None, boot_id="b", max_pending=1024)
    t0 = time.process_time()
    read, _ = f.drain()
    spent = time.process_time() - t0
    assert read == n, read
    return spent / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    import logging
    logging.disable(logging.WARNING)
    lat = latency(a.rounds)
    share, records, events = follow_cpu(a.seconds)
    per = kmsg_per_record()
    print(f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs\n")
    print("| measure | value |")
    print("|---|---|")
    print(f"| kernel-log line -> fault in /metrics (file follower, simulated node, {len(lat)} rounds) | "
          f"median {statistics.median(lat) * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms |")
    print(f"| CPU following a file at 1,000 records/s for {a.seconds:g} s ({records} records, {events} events) | "
          f"{share * 100:.1f} % of one core |")
    print(f"| /dev/kmsg path (simulated ring buffer): CPU per record | {per * 1e6:.1f} us "
          f"(1,000 records/s = {per * 1000 * 100:.2f} % of one core) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
