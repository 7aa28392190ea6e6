"""CPU time to encode one node's snapshot: the whole document and the annotation form.

The health loop fingerprints the devices annotation (``health.plan.inventory.inventory``: the
compact document, ``model.compact_document``, dumped and hashed) at every cycle of every agent, and
again when it plans; ``inspect --json`` and the scorer's input are the whole document
(``model.to_dict``). The snapshot is the real NVML collector's over the fake backend, 8 H100s with
16 processes each and GPM on (benchmarks/nvml_cycle.py's node), its devices as the sampler
hands them on (no profiles: the profile source is not run here).

``time.process_time()`` around each call (one thread), the median of ``--rounds`` calls after a
warm-up. To compare with an earlier tree, run this script from a ``git archive`` of it (the
script puts its own checkout first on ``sys.path``)::

    python benchmarks/annotation_encode.py [--rounds 300]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(Path(__file__).resolve().parent))

from nvml_cycle import build  # noqa: E402

from hetero_exporter import model  # noqa: E402
from hetero_exporter.health.plan.inventory import inventory  # noqa: E402


def median_ms(fn: Callable[[], Any], rounds: int) -> float:
    for _ in range(max(5, rounds // 10)):
        fn()
    times = []
    for _ in range(rounds):
        t0 = time.process_time()
        fn()
        times.append((time.process_time() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args()
    if not 1 <= args.rounds <= 100_000:
        ap.error("--rounds: 1 to 100000")
    collector, clock = build(8, 16)
    clock.advance(10)
    snap = model.NodeSnapshot("bench", clock.t(), devices=tuple(collector.collect()))
    collector.close()
    size = len(inventory(snap, 65536)[0].encode())
    rows = [("to_dict (the whole document)", lambda: model.to_dict(snap)),
            ("compact_document (the annotation form)", lambda: model.compact_document(snap)),
            ("inventory (annotation text and fingerprint)", lambda: inventory(snap, 65536))]
    print(f"{datetime.date.today()}, {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}, tree {ROOT}, 8 GPUs x 16 processes, annotation {size} bytes, "
          f"median of {args.rounds}\n")
    print("| call | CPU ms |")
    print("|---|---|")
    for name, fn in rows:
        print(f"| {name} | {median_ms(fn, args.rounds):.3f} |")


if __name__ == "__main__":
    main()
