"""Resident memory and CPU of the agent next to nvitop-exporter on one fake 8 x H100 node (issue 18).

Both exporters run at the same time over the same fake NVIDIA driver: a libnvidia-ml.so.1
compiled here (8 H100s: identity, memory, utilization, temperature, power, energy, clocks, PCIe,
ECC totals; no processes; field values and events unsupported) that the real pynvml binding of
each loads through LD_LIBRARY_PATH. The agent runs as on a node (`run`, no `--simulate`) with a
fake sysfs listing the 8 GPUs; cases:

- agent, no cluster access (no --kubeconfig, no KUBECONFIG, not in a pod);
- agent with cluster access: --kubeconfig to the loopback API server of tests/kubeapi.py
  (started in this process, the node seeded), so the pod cache lists and watches pods;
- agent `run --simulate benchmarks/scenarios/h100x8.yaml` (the Python fake of pynvml,
  attribution over a simulated kubelet, which runs as its own process and is not counted);
- nvitop-exporter (PyPI, installed into a venv under --cache, never into the repo).

The agent runs from a regular install of the working tree in another venv under --cache (what a
node has), not from the repo's editable .venv (--agent-python selects an interpreter).

Each is scraped every --scrape-every seconds like Prometheus would; after --warmup seconds the
CPU time (utime + stime, /proc/PID/stat) and VmRSS / VmHWM (/proc/PID/status) are read over a
--seconds window. Goal: the agent without cluster access at most 1.1x nvitop-exporter's RSS
(issue 39 §5; issue 18's target was 1.25x).

    python benchmarks/rss_side_by_side.py --cache /tmp/hetero-rss [--seconds 60] [--interval 10]

Needs a C compiler, and a package index for the two venvs on the first run (about a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from footprint import cpu_seconds, memory_kib, stop  # noqa: E402

GPUS = 8
GOAL = 1.1  # RSS of the agent without cluster access / nvitop-exporter's (issue 39 §5)
FAKE_NVML = r"""
#include <string.h>
#include <stdio.h>
#include <time.h>
typedef int nvmlReturn_t;
typedef struct { int id; } dev_t_;
typedef dev_t_ *nvmlDevice_t;
typedef struct { char busIdLegacy[16]; unsigned int domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32]; } nvmlPciInfo_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned int fieldId, scopeId; long long timestamp, latencyUsec; int valueType, nvmlReturn; unsigned long long value; } nvmlFieldValue_t;
static dev_t_ gpus[GPUS];
static int inits = 0;
static const unsigned long long TOTAL = 85520809984ULL;
static nvmlReturn_t copy(char *dst, unsigned int n, const char *src) {
    if (strlen(src) + 1 > n) return 7; strcpy(dst, src); return 0; }
static double t(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
/* a value in [lo, hi] that changes every 10 s, different per GPU */
static unsigned int wave(nvmlDevice_t h, unsigned int lo, unsigned int hi) {
    return lo + (unsigned int)(((long)(t() / 10) * 7919 + h->id * 104729) % (hi - lo + 1)); }
#define ARGS_UNUSED(h) (void)(h)
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; inits++; for (int i = 0; i < GPUS; i++) gpus[i].id = i; return 0; }
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlShutdown(void) { if (inits <= 0) return 1; inits--; return 0; }
const char *nvmlErrorString(nvmlReturn_t r) { (void)r; return "fake NVML error"; }
nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int n) { return copy(v, n, "550.54.15"); }
nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int n) { return copy(v, n, "12.550.54.15"); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 12040; return 0; }
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { *v = 12040; return 0; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *c) { if (inits <= 0) return 1; *c = GPUS; return 0; }
nvmlReturn_t nvmlDeviceGetCount(unsigned int *c) { return nvmlDeviceGetCount_v2(c); }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *h) {
    if (inits <= 0) return 1; if (i >= GPUS) return 2; *h = &gpus[i]; return 0; }
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *h) { return nvmlDeviceGetHandleByIndex_v2(i, h); }
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int *i) { *i = h->id; return 0; }
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t h, unsigned int *i) { *i = h->id; return 0; }
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *u, unsigned int n) {
    char b[64]; snprintf(b, sizeof b, "GPU-0f0e0d0c-1111-2222-3333-44445555666%d", h->id); return copy(u, n, b); }
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *u, unsigned int n) { ARGS_UNUSED(h); return copy(u, n, "NVIDIA H100 80GB HBM3"); }
nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t h, char *u, unsigned int n) {
    char b[32]; snprintf(b, sizeof b, "165422000000%d", h->id); return copy(u, n, b); }
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *p) {
    memset(p, 0, sizeof *p); p->bus = 0x18 + 16 * h->id; p->pciDeviceId = 0x233010de; p->pciSubSystemId = 0x16c110de;
    snprintf(p->busIdLegacy, 16, "0000:%02x:00.0", p->bus); snprintf(p->busId, 32, "00000000:%02x:00.0", p->bus); return 0; }
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t h, nvmlPciInfo_t *p) { return nvmlDeviceGetPciInfo_v3(h, p); }
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m) {
    m->total = TOTAL; m->used = (unsigned long long)wave(h, 30, 50) << 30; m->free = m->total - m->used; return 0; }
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m) {
    m->total = TOTAL; m->reserved = 512ULL << 20; m->used = (unsigned long long)wave(h, 30, 50) << 30;
    m->free = m->total - m->reserved - m->used; return 0; }
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u) { u->gpu = wave(h, 30, 90); u->memory = wave(h, 15, 55); return 0; }
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t h, int sensor, unsigned int *v) { (void)sensor; *v = wave(h, 50, 66); return 0; }
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned int *mw) { *mw = 1000 * wave(h, 240, 600); return 0; }
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t h, unsigned int *mw) { ARGS_UNUSED(h); *mw = 700000; return 0; }
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t h, unsigned int *mw) { ARGS_UNUSED(h); *mw = 700000; return 0; }
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t h, unsigned long long *mj) {
    *mj = 12000000000ULL + (unsigned long long)(t() * 420000) + h->id; return 0; }
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t h, int type, unsigned int *mhz) { *mhz = type == 2 ? 2619 : wave(h, 1555, 1980); return 0; }
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t h, int type, unsigned int *mhz) { ARGS_UNUSED(h); *mhz = type == 2 ? 2619 : 1980; return 0; }
nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t h, unsigned int *u, unsigned int *p) { ARGS_UNUSED(h); *u = 0; *p = 167000; return 0; }
nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t h, unsigned int *u, unsigned int *p) { ARGS_UNUSED(h); *u = 0; *p = 167000; return 0; }
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t h, int counter, unsigned int *kbs) { (void)counter; *kbs = 1000 * wave(h, 100, 900); return 0; }
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t h, unsigned int *v) { ARGS_UNUSED(h); *v = 5; return 0; }
nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t h, unsigned int *v) { ARGS_UNUSED(h); *v = 5; return 0; }
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t h, unsigned int *v) { ARGS_UNUSED(h); *v = 16; return 0; }
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t h, unsigned int *v) { ARGS_UNUSED(h); *v = 16; return 0; }
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t h, int e, int c, unsigned long long *v) { ARGS_UNUSED(h); (void)e; (void)c; *v = 0; return 0; }
nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t h, int *p) { ARGS_UNUSED(h); *p = 0; return 0; }
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t h, int *m) { ARGS_UNUSED(h); *m = 1; return 0; }
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t h, int *m) { ARGS_UNUSED(h); *m = 0; return 0; }
nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t h, int *m) { ARGS_UNUSED(h); *m = 0; return 0; }
nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t h, int *m) { ARGS_UNUSED(h); *m = 0; return 0; }
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t h, int *ma, int *mi) { ARGS_UNUSED(h); *ma = 9; *mi = 0; return 0; }
nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t h, unsigned int *v) { ARGS_UNUSED(h); (void)v; return 3; /* SXM: no fan */ }
nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t h, unsigned int f, unsigned int *v) { ARGS_UNUSED(h); (void)f; (void)v; return 3; }
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t h, int n, nvmlFieldValue_t *v) {
    ARGS_UNUSED(h); for (int i = 0; i < n; i++) v[i].nvmlReturn = 3; return 0; }
/* no processes: every running-process call answers "none" */
#define NO_PROCESSES(name) nvmlReturn_t name(nvmlDevice_t h, unsigned int *c, void *p) { ARGS_UNUSED(h); (void)p; *c = 0; return 0; }
NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v3)
NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v2)
NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v3)
NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v2)
NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v3)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nvitop_venv(cache: Path) -> Path:
    """The venv with nvitop-exporter (created once); returns its python."""
    venv = cache / "nvitop-venv"
    python = venv / "bin" / "python"
    if not (venv / "bin" / "nvitop-exporter").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "nvitop-exporter"], check=True)
    return python


def agent_venv(cache: Path) -> Path:
    """A venv with the working tree installed as on a node (a regular install: the repo's
    editable .venv adds its import finder, ~2 MiB of RSS a node does not have); the package is
    reinstalled on every run so that the tree as it is now is measured. Returns its python."""
    venv = cache / "agent-venv"
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q"]
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(pip + [f"{ROOT}[nvidia,k8s,attribution,udev,simulate]"], check=True)
    else:
        subprocess.run(pip + ["--no-deps", "--force-reinstall", str(ROOT)], check=True)
    return python


def fake_node(cache: Path) -> tuple[Path, Path]:
    """(directory holding the fake libnvidia-ml.so.1, fake sysfs root with the 8 GPUs)."""
    lib = cache / "fake-nvml"
    lib.mkdir(parents=True, exist_ok=True)
    src = lib / "fake_nvml.c"
    src.write_text(FAKE_NVML)
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("a C compiler (cc or gcc) is needed to build the fake libnvidia-ml.so.1")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", f"-DGPUS={GPUS}", "-o", str(lib / "libnvidia-ml.so.1"), str(src)],
                   check=True)
    sysfs = cache / "sysfs"
    for i in range(GPUS):
        d = sysfs / "bus" / "pci" / "devices" / f"0000:{0x18 + 16 * i:02x}:00.0"
        d.mkdir(parents=True, exist_ok=True)
        for name, value in (("vendor", "0x10de"), ("device", "0x2330"), ("class", "0x030200"),
                            ("numa_node", str(i // 4))):
            (d / name).write_text(value + "\n")
    return lib, sysfs


def cluster(cache: Path, node: str) -> tuple[object, str]:
    """The loopback API server with the node seeded, and a kubeconfig for it."""
    sys.path.insert(0, str(ROOT / "tests"))
    from kubeapi import KubeAPIServer
    server = KubeAPIServer().start()
    server.seed_node(node)
    for i in range(GPUS):
        server.seed_pod("ml-team", f"train-{i}", node, containers=["trainer"])
    return server, server.write_kubeconfig(cache / "kubeconfig")


class Case:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], port: int, cwd: Path):
        self.name, self.port = name, port
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.scrapes, self.body, self.rss_max = 0, b"", 0

    def scrape(self) -> None:
        self.body = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10).read()
        self.scrapes += 1
        self.rss_max = max(self.rss_max, memory_kib(self.proc.pid)["VmRSS"])

    def wait_ready(self, deadline: float) -> None:
        while True:
            if self.proc.poll() is not None:
                sys.exit(f"{self.name} exited with {self.proc.returncode} before serving")
            try:
                self.scrape()
                return
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit(f"{self.name} did not serve /metrics in time")
                time.sleep(0.5)

    def stop(self) -> None:
        stop(self.proc, 20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", required=True, type=Path, help="folder for the nvitop venv, fake driver and sysfs")
    ap.add_argument("--seconds", type=float, default=60, help="measurement window after the warm-up")
    ap.add_argument("--warmup", type=float, default=25)
    ap.add_argument("--interval", type=float, default=10, help="collection interval of both exporters")
    ap.add_argument("--scrape-every", type=float, default=15)
    ap.add_argument("--agent-python", help="run the agent with this interpreter (e.g. .venv/bin/python, an "
                                           "editable install) instead of a regular install under --cache")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    args = ap.parse_args()
    cache = args.cache.resolve()
    cache.mkdir(parents=True, exist_ok=True)
    nvitop_python = nvitop_venv(cache)
    agent_python = Path(args.agent_python) if args.agent_python else agent_venv(cache)
    lib, sysfs = fake_node(cache)
    node = "gpu-h100x8"
    api, kubeconfig = cluster(cache, node)
    config = cache / "agent.yaml"
    # JSON is YAML; the kernel log's read position is kept under --cache, not /var/lib
    config.write_text(json.dumps({"sysfs_root": str(sysfs), "kernel_log": {"state_dir": str(cache / "state")}}))
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "NODE_NAME")}
    env["LD_LIBRARY_PATH"] = str(lib)
    agent = [str(agent_python), "-m", "hetero_exporter", "run", "--interval", str(args.interval),
             "--node-name", node, "--log-level", "warning"]
    specs = {
        "agent, no cluster access": agent + ["--config", str(config)],
        "agent, cluster access (pod cache)": agent + ["--config", str(config), "--kubeconfig", kubeconfig],
        "agent --simulate h100x8, no cluster": agent + ["--simulate", str(ROOT / "benchmarks/scenarios/h100x8.yaml")],
        "nvitop-exporter": [str(nvitop_python), str(nvitop_python.parent / "nvitop-exporter"),
                            "--interval", str(args.interval), "--bind-address", "127.0.0.1"],
    }
    cases = []
    try:
        for name, argv in specs.items():
            port = free_port()
            argv = argv + (["--port", str(port)] if name == "nvitop-exporter" else ["--listen", f"127.0.0.1:{port}"])
            cases.append(Case(name, argv, env, port, cwd=cache))
        deadline = time.monotonic() + 60
        for c in cases:
            c.wait_ready(deadline)
        time.sleep(args.warmup)
        for c in cases:
            c.scrape()
        c0, t0 = {c.name: cpu_seconds(c.proc.pid)[0] for c in cases}, time.monotonic()
        while time.monotonic() - t0 < args.seconds:
            time.sleep(args.scrape_every)
            for c in cases:
                c.scrape()
        t1 = time.monotonic()
        rows = {}
        for c in cases:
            mem = memory_kib(c.proc.pid)
            rows[c.name] = {"rss_mib": mem["VmRSS"] / 1024, "rss_max_mib": c.rss_max / 1024,
                            "hwm_mib": mem["VmHWM"] / 1024, "scrapes": c.scrapes, "bytes": len(c.body),
                            "cpu_share": (cpu_seconds(c.proc.pid)[0] - c0[c.name]) / (t1 - t0)}
    finally:
        for c in cases:
            c.stop()
        api.close()
    base = rows["nvitop-exporter"]["rss_mib"]
    server = "asyncio + h11 (hetero_exporter/web)" if (ROOT / "hetero_exporter/web/server.py").exists() else "stdlib"
    install = "regular install" if not args.agent_python else f"interpreter {args.agent_python}"
    print(f"{GPUS} x H100 (fake libnvidia-ml.so.1), interval {args.interval:g} s, scraped every "
          f"{args.scrape_every:g} s, {t1 - t0:.0f} s window after {args.warmup:g} s warm-up; agent: {install}, "
          f"HTTP server {server}")
    print("| process | VmRSS MiB (max in window) | VmHWM MiB | CPU, share of one core | RSS / nvitop-exporter | /metrics bytes |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['rss_mib']:.1f} ({r['rss_max_mib']:.1f}) | {r['hwm_mib']:.1f} | "
              f"{r['cpu_share'] * 100:.2f} % | {r['rss_mib'] / base:.2f}x | {r['bytes']} |")
    ratio = rows["agent, no cluster access"]["rss_mib"] / base
    print(f"goal: agent without cluster access <= {GOAL:g}x nvitop-exporter: {ratio:.2f}x, "
          f"{'met' if ratio <= GOAL else 'NOT met'}")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
