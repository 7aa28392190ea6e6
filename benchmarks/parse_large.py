"""Parsing large captures: time and peak RSS per tool for 1, 10 and 100 MB inputs.

Each input is a real capture of ../shared/fixtures saved over and over in one text (the way a
capture grows when a loop appends to the same file) up to the size. Each (tool, size) runs in
a fresh child process: time of the parser call, peak RSS of the child (ru_maxrss, which holds
the input text too: a 100 MB ASCII text is 100 MB) and what the parser answered. Linear
parsing shows as ~10x time from 1 to 10 MB and from 10 to 100 MB.

Two runs per tool where the answer to a long text is a refusal:
- ``answer``: the parser as it is; a capture saved many times over is refused (a device listed
  twice, more than sdk.tables.MAX_DEVICES devices) or read as one copy (the first JSON
  object, detail blocks merged, the first table);
- ``to the end``: the device cap lifted (MAX_DEVICES set to 10**9 in the child) for the
  tools whose answer grows with the text, so the whole text is read and turned into devices.

The parser functions are called directly: `hetero-exporter parse` refuses inputs over
--max-bytes (64 MiB by default) before parsing.

    python benchmarks/parse_large.py [--sizes 1,10,100] [--tools hy-smi,npu-smi] [--timeout 900]
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
FIXTURES = ROOT.parent / "shared" / "fixtures"

# tool -> the capture repeated (its parse folder and name)
CAPTURES = {
    "nvidia-smi": "q_4x-a100-sxm4-80gb_555.42.02.txt",  # -q text; one section per GPU
    "nvidia-smi-xml": "q-x_dual-rtx-a5000_v13.xml",  # -q -x: repeated, not one document
    "nvidia-smi-csv": "query-gpu-csv_all-fields_l40s_595.80_idle.csv",
    "amd-smi": "static_4x-mi300a-apu_with-cpu_driver-6.9.0-rc5.txt",
    "rocm-smi": "rocm-smi-concise_8x-0x74a2-MI308X-class_partitions.txt",
    "hy-smi": "rocm-smi_4x-hygon-z100_dtk-23.10.1.txt",
    "npu-smi": "info-t-usages_910A_npu-smi-23.0.5.txt",
    "npu-smi-table": "info-table_8x-910B3_npu-smi-23.0.0_container.txt",
    "cnmon": "default_2x-mlu370-x8_cnmon-v5.10.13.txt",
    "mx-smi": "default_8x-metax-c550_mx-smi-2.1.6.txt",
    "ixsmi": "default_16x-iluvatar-bi-v150_ix-ml-4.1.0.txt",
    "mthreads-gmi": "mthreads-gmi-default_MTT-S80_gmi-2.0.0_driver-3.0.0_with-processes.txt",
    "efsmi": "default_2x-enflame-s60_efsmi-1.2.0.301.txt",
    "xpu-smi": "xpu_smi_2x-kunlunxin-r300.txt",
    "cgroup": "k8s_v2_systemd-driver_crio_burstable.txt",
}
LIFT = {"nvidia-smi", "rocm-smi", "hy-smi"}  # answers that grow with the text: also read to the end

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from hetero_exporter import registry
from hetero_exporter.sdk import tables
tool, path, size, lift = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
if lift:
    tables.MAX_DEVICES = 10 ** 9
one = open(path, encoding="utf-8", errors="replace").read()
one += "" if one.endswith("\n") else "\n"
text = one * max(1, size // len(one))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
parse = registry.parser(tool)
t0 = time.perf_counter()
try:
    r = parse(text)
    answer = f"{len(r.devices)} devices" if hasattr(r, "devices") else "read"
except Exception as e:  # the parser's answer: ParseError names tool and line
    answer = f"{type(e).__name__}: {str(e)[:70]}"
took = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": took, "peak_mib": peak / 1024, "base_mib": base / 1024, "bytes": len(text),
                  "answer": answer}))
"""


def run(tool: str, name: str, mb: int, lift: bool, timeout: float) -> dict:
    parser_tool = tool.split("-xml")[0].split("-csv")[0].replace("npu-smi-table", "npu-smi")
    path = FIXTURES / parser_tool / name
    argv = [sys.executable, "-c", CHILD, str(ROOT), parser_tool, str(path), str(mb * 1_000_000), "1" if lift else "0"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return {"seconds": None, "peak_mib": None, "answer": f"no answer within {timeout:g} s"}
    except subprocess.CalledProcessError as e:
        return {"seconds": None, "peak_mib": None, "answer": f"child failed: {e.stderr.strip()[-120:]}"}
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,10,100", help="input sizes, MB (default 1,10,100)")
    ap.add_argument("--tools", default=",".join(CAPTURES), help="comma-separated (default: all)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per child (default 900)")
    args = ap.parse_args()
    if not FIXTURES.is_dir():
        print(f"real captures not found at {FIXTURES}", file=sys.stderr)
        return 2
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print("| tool (capture) | run | " + " | ".join(f"{mb} MB s / peak MiB" for mb in sizes)
          + " | time x per size step | answer at the largest |")
    print("|---|---|" + "---|" * len(sizes) + "---|---|")
    for tool in args.tools.split(","):
        name = CAPTURES[tool]
        for lift in ([False, True] if tool in LIFT else [False]):
            rows = [run(tool, name, mb, lift, args.timeout) for mb in sizes]
            cells = [f"{r['seconds']:.2f} / {r['peak_mib']:.0f}" if r["seconds"] is not None else "-" for r in rows]
            secs = [r["seconds"] for r in rows]
            ratios = " / ".join(f"{b / a:.1f}" if a and b else "-" for a, b in zip(secs, secs[1:]))
            print(f"| {tool} ({name}) | {'to the end' if lift else 'answer'} | " + " | ".join(cells)
                  + f" | {ratios} | {rows[-1]['answer']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
