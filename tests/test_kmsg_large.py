"""A 100 MB kernel log parses through parse_lines in bounded memory (peak RSS of a child process;
no timing)."""

from __future__ import annotations

import json
import subprocess
import sys

from hetero_exporter.sdk import kmsg

_BLOCK_LINES = [
    "6,{seq},{us},-;IPv6: ADDRCONF(NETDEV_CHANGE): cali817bc444564: link becomes ready",
    " SUBSYSTEM=net",
    "6,{seq},{us},-;perf: interrupt took too long (2509 > 2500), lowering kernel.perf_event_max_sample_rate to 79500",
    "6,{seq},{us},-;nvidia-nvswitch2: open (major=510)",
    "6,{seq},{us},-;NVRM: GPU4 RPC history (CPU -> GSP): entry function data0 data1 ts_start ts_end duration",
    "6,{seq},{us},-;amdgpu 0000:43:00.0: amdgpu: ring comp_1.0.0 uses VM inv eng 1 on hub 0",
    "6,{seq},{us},-;amdgpu 0000:43:00.0: amdgpu: 0 uncorrectable hardware errors detected in umc block",
]
_FAULT = "4,{seq},{us},-;NVRM: Xid (PCI:0000:{bus:02x}:00): 79, pid=1, GPU has fallen off the bus."
_SIZE = 100 * 1024 * 1024


def _write_log(path) -> tuple[int, int]:
    """~100 MB of kmsg records, one Xid 79 every 1000 lines; (lines, faults) written."""
    lines = faults = seq = written = 0
    with path.open("w", encoding="utf-8") as f:
        for _ in range(10_000_000):  # bounded; stops at _SIZE long before
            if written >= _SIZE:
                break
            chunk = []
            for i in range(1000):
                seq += 1
                if i == 999:
                    chunk.append(_FAULT.format(seq=seq, us=seq * 10, bus=faults % 256))
                    faults += 1
                else:
                    chunk.append(_BLOCK_LINES[i % len(_BLOCK_LINES)].format(seq=seq, us=seq * 10))
            text = "\n".join(chunk) + "\n"
            f.write(text)
            written += len(text)
            lines += len(chunk)
    return lines, faults


_CHILD = """
import json, resource, sys
from hetero_exporter.sdk import kmsg
kmsg.Matcher()  # rules and fault tables loaded before the baseline
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with open(sys.argv[1], encoding="utf-8") as f:
    events, read = kmsg.parse_lines(f, max_events=1000)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"read": read, "events": len(events), "codes": sorted({e.code for e in events}),
                  "growth_kib": peak - base}))
"""


def test_a_100_mb_log_parses_in_bounded_memory(tmp_path):
    path = tmp_path / "kern.log"
    lines, n_faults = _write_log(path)
    assert path.stat().st_size >= _SIZE
    # a child process: its peak RSS is the parser's alone (tracemalloc would slow it tenfold)
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["read"] == lines
    assert out["events"] == 1000 and n_faults > 1000
    assert out["codes"] == ["79"]
    assert out["growth_kib"] < 50 * 1024, f"RSS grew {out['growth_kib'] / 1024:.1f} MiB over a 100 MB log"


def test_one_huge_line_is_cut_not_kept(tmp_path):
    path = tmp_path / "huge.log"
    with path.open("w", encoding="utf-8") as f:
        f.write("NVRM: Xid (PCI:0000:3b:00): 48, pid=1, ")
        for _ in range(64):
            f.write("x" * (1 << 16))
        f.write("\n[ 1.0] NVRM: Xid (PCI:0000:3c:00): 79, pid=1, GPU has fallen off the bus.\n")
    with path.open(encoding="utf-8") as f:
        events, read = kmsg.parse_lines(f)
    assert read == 2
    assert [(e.pci_address, e.code) for e in events] == [("0000:3b:00.0", "48"), ("0000:3c:00.0", "79")]
    assert all(len(e.message) <= 512 for e in events)
