"""A well-behaved scrape of the agent while hostile clients are connected.

The agent (`run --simulate`, 127.0.0.1) runs as a subprocess. Measured: the latency (p50 / p99)
of ~200 keep-alive gzip scrapes of /metrics, as Prometheus makes them, alone and while
- 200 slow clients each send a request head one byte per second (reconnecting when dropped), and
- 40 header-bomb clients send heads of 99 headers x 65 KB, over and over,
each group in its own process (so the clients' GIL does not slow the scraper); and the agent's
resident memory (VmRSS) before, during (peak, sampled every 20 ms) and 3 s after.

    python benchmarks/http_hostile.py [--scrapes N] [--slow N] [--bombs N] [--seconds S]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
          "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
BOMB_HEADER = b"X-Bomb: " + b"b" * 65_000 + b"\r\n"


def vm_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def start_agent() -> tuple[subprocess.Popen, int, list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "hetero_exporter", "run", "--simulate", "--listen", "127.0.0.1:0",
                             "--log-format", "json", "--interval", "10"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    for line in proc.stderr:
        lines.append(line)
        doc = json.loads(line)
        if doc.get("msg") == "serving":
            port = int(doc["listen"].rsplit(":", 1)[1])
            threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()  # keep draining
            return proc, port, lines
    raise SystemExit("agent did not start:\n" + "".join(lines[-20:]))


def scrape_latencies(port: int, n: int) -> tuple[list[float], int]:
    """Latencies of n scrapes, and how many needed a retry (connection closed or refused under
    the scraper: it reconnects and retries at once, as Prometheus' HTTP client does)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    out, retried = [], 0
    for _ in range(n):
        t0 = time.perf_counter()
        for attempt in range(20):
            try:
                conn.request("GET", "/metrics", headers={"Accept": ACCEPT, "Accept-Encoding": "gzip"})
                r = conn.getresponse()
                r.read()
                if r.status == 200:
                    break
            except (OSError, http.client.HTTPException):
                pass
            retried += attempt == 0
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        out.append(time.perf_counter() - t0)
        time.sleep(0.01)
    conn.close()
    return out, retried


def percentiles(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs) * 1e3, xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1e3


# --------------------------------------------------------------------------- hostile roles

def role_slow(port: int, n: int, stop: threading.Event) -> None:
    socks: list = [None] * n
    reconnects = 0
    head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: " + b"s" * 10_000
    sent = [0] * n
    while not stop.is_set():
        for i in range(n):
            try:
                if socks[i] is None:
                    socks[i] = socket.create_connection(("127.0.0.1", port), timeout=5)
                    socks[i].setblocking(False)
                    sent[i] = 0
                    reconnects += 1
                socks[i].send(head[sent[i]:sent[i] + 1])
                sent[i] = (sent[i] + 1) % len(head)
            except OSError:
                if socks[i] is not None:
                    socks[i].close()
                socks[i] = None
        stop.wait(1.0)
    print(json.dumps({"slow_connects": reconnects}), flush=True)


def bomb_once(port: int) -> bytes:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    answer: list[bytes] = []

    def read() -> None:
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except OSError:
            pass
        answer.append(data)
    reader = threading.Thread(target=read)
    reader.start()
    try:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        for _ in range(99):
            sock.sendall(BOMB_HEADER)
    except OSError:
        pass
    reader.join(15)
    sock.close()
    return answer[0] if answer else b""


def role_bomb(port: int, n: int, stop: threading.Event) -> None:
    counts = {"bombs": 0, "431": 0}

    def loop() -> None:
        while not stop.is_set():
            answer = bomb_once(port)
            counts["bombs"] += 1
            counts["431"] += answer.startswith(b"HTTP/1.1 431 ")
    threads = [threading.Thread(target=loop) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(counts), flush=True)


def run_role(role: str, port: int, n: int) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    (role_slow if role == "slow" else role_bomb)(port, n, stop)


# --------------------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--slow", type=int, default=200)
    ap.add_argument("--bombs", type=int, default=40)
    ap.add_argument("--role", choices=("slow", "bomb"), help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role:
        run_role(args.role, args.port, args.n)
        return

    agent, port, agent_log = start_agent()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(300):  # the first snapshot
            conn.request("GET", "/readyz")
            r = conn.getresponse()
            r.read()
            if r.status == 200:
                break
            time.sleep(0.1)
        conn.close()
        scrape_latencies(port, 20)  # warm up
        rss_before = vm_rss(agent.pid)
        alone = scrape_latencies(port, args.scrapes)

        hostile = [subprocess.Popen([sys.executable, __file__, "--role", role, "--port", str(port), "--n", str(n)],
                                    stdout=subprocess.PIPE, text=True)
                   for role, n in (("slow", args.slow), ("bomb", args.bombs))]
        peak = [rss_before]
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.is_set() and agent.poll() is None:
                peak[0] = max(peak[0], vm_rss(agent.pid))
                time.sleep(0.02)
        sampler = threading.Thread(target=sample)
        sampler.start()
        time.sleep(3)  # let the hostile clients fill the slots
        during = scrape_latencies(port, args.scrapes)
        for p in hostile:
            p.send_signal(signal.SIGTERM)
        reports = [json.loads(p.communicate(timeout=60)[0].strip().splitlines()[-1]) for p in hostile]
        sampling.set()
        sampler.join()
        time.sleep(3)
        rss_after = vm_rss(agent.pid)
        after = scrape_latencies(port, args.scrapes)
    finally:
        if agent.poll() is not None:
            print(f"agent exited ({agent.returncode}):\n" + "".join(agent_log[-20:]), file=sys.stderr)
        agent.send_signal(signal.SIGTERM)
        agent.wait(30)

    print(f"machine: {platform.machine()} {platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} CPUs; {args.scrapes} gzip scrapes per row; hostile: {args.slow} slow clients "
          f"({reports[0]['slow_connects']} connects), {args.bombs} header-bomb clients "
          f"({reports[1]['bombs']} bombs, {reports[1]['431']} answered 431)")
    print("| phase | scrape p50 ms | scrape p99 ms | scrapes retried | agent RSS MiB |")
    print("|---|---|---|---|---|")
    for label, (lat, retried), rss in (("alone", alone, f"{rss_before / 2**20:.1f}"),
                                       ("hostile clients connected", during, f"{peak[0] / 2**20:.1f} (peak)"),
                                       ("after they left (3 s)", after, f"{rss_after / 2**20:.1f}")):
        p50, p99 = percentiles(lat)
        print(f"| {label} | {p50:.2f} | {p99:.2f} | {retried} | {rss} |")


if __name__ == "__main__":
    main()
