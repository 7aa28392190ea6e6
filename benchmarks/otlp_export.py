"""What OTLP export costs (issue 28): CPU per export, and the agent's memory with and without it.

1. In this process, the all-vendors simulated node (its second snapshot): the CPU time of
   building the OTel points of one snapshot (``otlp_map.points``, what every export after a new
   snapshot pays), of one whole export through the SDK to a local receiver (tests/otlp_receiver.py:
   gRPC and HTTP), and, as the baseline, of one /metrics rendering of the same snapshot (what a
   Prometheus scrape after a new snapshot pays).
2. Two agents, ``run --simulate benchmarks/scenarios/h100x8.yaml`` at a 10 s interval, one without
   an ``otlp`` section and one exporting every 10 s to the receiver: VmRSS after --warmup seconds.

    python benchmarks/otlp_export.py [--repeat 50] [--warmup 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from footprint import memory_kib, stop  # noqa: E402
from otlp_receiver import Receiver  # noqa: E402

from hetero_exporter import cli, config as config_mod  # noqa: E402
from hetero_exporter.app.settings import OtlpSettings  # noqa: E402
from hetero_exporter.exposition.collector import build_families  # noqa: E402
from hetero_exporter.exposition.export import ExportFailures, otlp_map  # noqa: E402
from hetero_exporter.exposition.export.otlp import OtlpExporter  # noqa: E402
from prometheus_client.exposition import generate_latest  # noqa: E402

ALL_VENDORS = ROOT / "fixtures" / "scenarios" / "all-vendors.yaml"
H100X8 = ROOT / "benchmarks" / "scenarios" / "h100x8.yaml"


def _snapshot():
    args, extra = cli.build_parser().parse_known_args(["inspect", "--simulate", str(ALL_VENDORS)])
    agent = cli.agent(args, extra)
    try:
        sampler = agent.start().sampler
        sampler.collect()
        return sampler.collect()
    finally:
        agent.close()


def _cpu_ms(fn, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        runs.append((time.process_time() - t) * 1000)
    return statistics.median(runs)


class _Families:
    def __init__(self, fams):
        self._fams = fams

    def collect(self):
        return self._fams


def in_process(repeat: int) -> dict:
    snap = _snapshot()
    out = {"series": sum(len(f.samples) for f in build_families(snap))}
    out["render_ms"] = _cpu_ms(lambda: generate_latest(_Families(build_families(snap))), repeat)
    out["points_ms"] = _cpu_ms(lambda: otlp_map.points(snap, now=snap.time), repeat)
    receiver = Receiver().start()
    try:
        for protocol, port in (("grpc", receiver.grpc_port), ("http", receiver.http_port)):
            settings = OtlpSettings.parse(config_mod.from_dict({"otlp": {
                "endpoint": f"127.0.0.1:{port}", "protocol": protocol, "interval": 3600,
                "tls": {"insecure": True}}}).otlp)
            snaps = [snap]

            def latest():
                return snaps[0]
            exporter = OtlpExporter(settings, latest, "bench", ExportFailures())
            exporter.start()
            try:
                def export():
                    snaps[0] = _fresh(snap)  # a new snapshot each time: the points are rebuilt, as in the agent
                    exporter._provider.force_flush(timeout_millis=20_000)
                out[f"export_{protocol}_ms"] = _cpu_ms(export, repeat)
            finally:
                exporter.close()
    finally:
        receiver.stop()
    return out


def _fresh(snap):
    import dataclasses
    return dataclasses.replace(snap, time=snap.time)


def agents(warmup: float) -> dict:
    receiver = Receiver().start()
    out = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = Path(tmp) / "otlp.yaml"
            cfg.write_text(json.dumps({"otlp": {"endpoint": f"127.0.0.1:{receiver.grpc_port}", "interval": 10,
                                                "tls": {"insecure": True}}}))
            base = [sys.executable, "-m", "hetero_exporter", "run", "--simulate", str(H100X8), "--interval", "10",
                    "--log-level", "warning"]
            env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
            procs = {
                "without otlp": subprocess.Popen(base + ["--listen", "127.0.0.1:0"], env=env,
                                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                "otlp every 10 s": subprocess.Popen(base + ["--listen", "127.0.0.1:0", "--config", str(cfg)],
                                                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            }
            time.sleep(warmup)
            for name, p in procs.items():
                out[name] = memory_kib(p.pid)
            for p in procs.values():
                stop(p, 15)
        out["exports received"] = len(receiver.requests)
    finally:
        receiver.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--warmup", type=float, default=30)
    args = ap.parse_args()
    cpu = in_process(args.repeat)
    print(f"all-vendors node, {cpu['series']} series; CPU ms per snapshot (median of {args.repeat}):")
    print("| /metrics render (baseline) | OTel points | export, gRPC | export, HTTP |")
    print(f"| {cpu['render_ms']:.1f} | {cpu['points_ms']:.1f} | {cpu['export_grpc_ms']:.1f} "
          f"({cpu['export_grpc_ms'] / cpu['render_ms']:.2f}x) | {cpu['export_http_ms']:.1f} "
          f"({cpu['export_http_ms'] / cpu['render_ms']:.2f}x) |")
    mem = agents(args.warmup)
    print("agent run --simulate h100x8, VmRSS / VmHWM MiB after warm-up:")
    for name, m in mem.items():
        if isinstance(m, dict):
            print(f"| {name} | {m.get('VmRSS', 0) / 1024:.1f} | {m.get('VmHWM', 0) / 1024:.1f} |")
    print(f"exports received: {mem['exports received']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
