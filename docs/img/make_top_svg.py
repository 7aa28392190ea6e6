"""Draw docs/img/top.svg: the `hetero-exporter top --once` frame of the all-vendors simulated node
(fixtures/scenarios/all-vendors.yaml), 120 columns, as rich records it.

    .venv/bin/python docs/img/make_top_svg.py

The frame is built as `top --once` builds it (hetero_exporter/app/top.py, view/live.py:once): one
sampler cycle over the scenario, `frame.build`, `render.render`. The fake tools add noise to some
values, so the digits change from one run to the next; the layout does not.
"""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from hetero_exporter import cli
from hetero_exporter.view import frame, render

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "fixtures" / "scenarios" / "all-vendors.yaml"
OUT = Path(__file__).resolve().parent / "top.svg"
WIDTH = 120


def snapshot():
    args, extra = cli.build_parser().parse_known_args(["top", "--once", "--simulate", str(SCENARIO)])
    agent = cli.agent(args, extra)
    try:
        return agent.start().sampler.collect()
    finally:
        agent.close()


def main() -> None:
    snap = snapshot()
    console = Console(record=True, width=WIDTH, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    console.print(render.render(frame.build(snap, frame.ViewState(), snap.time + 2.0), WIDTH))  # "2.0s old"
    OUT.write_text(console.export_svg(title="hetero-exporter top --once --simulate fixtures/scenarios/all-vendors.yaml"),
                   encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
