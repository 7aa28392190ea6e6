"""Steady-state CPU and memory of `hetero-exporter run --simulate` at a 10 s interval.

Starts the agent on 127.0.0.1 (default scenario), lets it warm up, scrapes /metrics every
15 s as Prometheus would, and reads the process's CPU time (utime + stime from
/proc/PID/stat) and resident memory (VmRSS, VmHWM from /proc/PID/status) over the window.

Targets (issue 2): under 0.5 % of one core, under 60 MiB resident.

    python benchmarks/footprint.py [--seconds 120] [--interval 10] [--scenario default]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the agent's own CPU seconds, CPU seconds of its exited children: the simulated
    vendor CLIs, which a real node's npu-smi/cnmon/hy-smi would spend instead)."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(parts[11]) + int(parts[12])) / tick, (int(parts[13]) + int(parts[14])) / tick


def memory_kib(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--interval", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=25)
    ap.add_argument("--scenario", default="default")
    ap.add_argument("--config", help="agent config file (e.g. to switch PodResources off)")
    args = ap.parse_args()
    proc = subprocess.Popen([sys.executable, "-m", "hetero_exporter", "run", "--simulate", args.scenario,
                             "--listen", "127.0.0.1:0", "--interval", str(args.interval),
                             *(["--config", args.config] if args.config else [])],
                            stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in proc.stderr:
            doc = json.loads(line)
            if doc.get("msg") == "serving":
                port = int(doc["listen"].rsplit(":", 1)[1])
                collectors = doc.get("collectors")
                break
        url = f"http://127.0.0.1:{port}/metrics"
        time.sleep(args.warmup)
        urllib.request.urlopen(url, timeout=10).read()
        c0, t0 = cpu_seconds(proc.pid), time.monotonic()
        scrapes = 0
        while time.monotonic() - t0 < args.seconds:
            time.sleep(15)
            body = urllib.request.urlopen(url, timeout=10).read()
            scrapes += 1
        c1, t1 = cpu_seconds(proc.pid), time.monotonic()
        mem = memory_kib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(20)
    share = (c1[0] - c0[0]) / (t1 - t0)
    children = (c1[1] - c0[1]) / (t1 - t0)
    print(f"scenario {args.scenario} (collectors: {collectors}), interval {args.interval:g} s, "
          f"{scrapes} scrapes of {len(body)} bytes over {t1 - t0:.0f} s")
    print(f"| CPU, share of one core | {share * 100:.2f} % | target < 0.5 % |")
    print(f"| CPU of the simulated vendor CLIs it ran | {children * 100:.2f} % | (simulation cost) |")
    print(f"| resident memory (VmRSS / peak VmHWM) | {mem['VmRSS'] / 1024:.1f} / {mem['VmHWM'] / 1024:.1f} MiB | target < 60 MiB |")


if __name__ == "__main__":
    main()
