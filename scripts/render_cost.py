"""Render the cost dashboard's main panels to a PNG, from real Prometheus data of the simulated
node (docs/cost.md shows the result), as scripts/render_overview.py does for
the fleet overview.

    python scripts/render_cost.py [--seconds 120] [--interval 3] [--out docs/img/cost.png]

Starts `hetero-exporter run --simulate` (default scenario) and a Prometheus of its own scraping it
every second on loopback, lets it scrape for --seconds, then runs the panels' own expressions, read
from dashboards/json/cost.json, with Grafana's substitutions ("All" for every variable), and draws
them with matplotlib. Everything it started is stopped and removed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from render_overview import legend, scrape  # noqa: E402

DASHBOARD = ROOT / "dashboards" / "json" / "cost.json"
STATS = ["Cost per hour", "Saving per hour", "Idle cost per hour", "Compute units held"]
SERIES = ["Cost by namespace", "Cost by vendor and model", "Savings from non-reference chips", "Idle cost"]
BARS = "Top pods by cost"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120, help="how long to let Prometheus scrape (default 120)")
    ap.add_argument("--interval", default="3", help="agent collection interval, seconds (default 3)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "img" / "cost.png"))
    args = ap.parse_args(argv)
    node, stats, series, points = scrape(DASHBOARD, STATS, SERIES, [BARS], args.seconds, args.interval)
    panels = {p["title"]: p for p in json.loads(DASHBOARD.read_text())["panels"]}
    fmt = panels[BARS]["targets"][0]["legendFormat"]
    pods = sorted(((legend(fmt, m), v) for m, v in points[BARS]), key=lambda x: x[1])

    fig = plt.figure(figsize=(16, 13), dpi=100)
    fig.suptitle(f"Accelerators / Cost — simulated node {node}, {args.seconds:.0f} s of data (per hour)",
                 fontsize=15, x=0.01, ha="left")
    grid = fig.add_gridspec(4, 4, height_ratios=[0.55, 2, 2, 2], hspace=0.9, wspace=0.35)
    for i, title in enumerate(STATS):
        ax = fig.add_subplot(grid[0, i])
        v = stats[title]
        ax.set_facecolor("#37872d")
        ax.text(0.5, 0.42, "no data" if v is None else f"{v:.2f}", ha="center", va="center", fontsize=22,
                color="white", transform=ax.transAxes)
        ax.set_title(title, fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    places = {SERIES[0]: grid[1, 0:2], SERIES[1]: grid[1, 2:4], SERIES[2]: grid[2, 0:2], SERIES[3]: grid[2, 2:4]}
    for title, where in places.items():
        ax = fig.add_subplot(where)
        stacked = bool(panels[title]["fieldConfig"]["defaults"].get("custom", {}).get("stacking", {}).get("mode"))
        lines = series[title]
        if stacked and lines:
            ts = [t for t, _ in lines[0][1]]
            if all(len(p) == len(ts) for _, p in lines):
                ax.stackplot(ts, *[[v for _, v in p] for _, p in lines], labels=[n for n, _ in lines], alpha=0.7)
                lines = []
        for name, points in lines:
            ax.plot([t for t, _ in points], [v for _, v in points], label=name)
        ax.set_title(title, fontsize=11, loc="left")
        ax.set_xlabel("seconds")
        ax.set_ylabel("per hour")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4, frameon=False)
    ax = fig.add_subplot(grid[3, 1:3])
    ax.barh([n for n, _ in pods], [c for _, c in pods], color="#5794f2")
    ax.set_title(BARS + " (per hour)", fontsize=11, loc="left")
    ax.tick_params(axis="y", labelsize=8)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
