"""Render the fleet overview dashboard's main panels to a PNG, from real Prometheus data of the
simulated node, so that a newcomer sees what the dashboards show (README links the result).

    python scripts/render_overview.py [--seconds 300] [--interval 3] [--out docs/img/overview.png]

Starts `hetero-exporter run --simulate` (default scenario) and a Prometheus of its own scraping it
every second on loopback (the Debian package's binary), lets it scrape for --seconds, then runs the panels' own
expressions, read from dashboards/json/fleet-overview.json, with Grafana's substitutions ("All"
for every variable), and draws them with matplotlib. Everything it started is stopped and removed.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the agent and Prometheus launchers the integration tests use

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from agent_proc import Agent  # noqa: E402
from prometheus_proc import Prometheus  # noqa: E402

DASHBOARD = ROOT / "dashboards" / "json" / "fleet-overview.json"
VALUES = {"node": ".*", "vendor": ".*", "model": ".*", "namespace": ".*", "__rate_interval": "30s"}
STATS = ["Accelerators", "Nodes", "Failed", "Degraded", "Missing from the bus", "Collectors failing"]
SERIES = ["Compute utilization", "Memory in use", "Power", "Hottest core", "Devices by health state"]
UNITS = {"percentunit": ("%", 100.0), "watt": ("W", 1.0), "celsius": ("°C", 1.0)}


def substitute(expr: str) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: VALUES[m.group(1)], expr)


def legend(fmt: str, labels: dict) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip() or str(labels)


def scrape(dashboard: Path, stats: list[str], series: list[str], instant: list[str], seconds: float,
           interval: str) -> tuple[str, dict, dict, dict]:
    """A simulated agent scraped by a Prometheus of its own for ``seconds``; then the panels'
    own first expressions: (node, {stat title: value or None}, {series title: [(legend, [(t, v)])]},
    {instant title: [(labels, value)]}), all read from ``dashboard``'s JSON."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("prometheus not installed (apt-get install prometheus)")
    panels = {p["title"]: p for p in json.loads(dashboard.read_text())["panels"]}
    with Agent(["--simulate", "--interval", interval]) as agent:
        agent.wait_metrics(lambda text: "accelerator_device_info{" in text)
        node = json.loads(agent.get("/snapshot")[1])["node"]
        with Prometheus(binary, {node: agent.base.split("//")[1]}) as prom:
            start = time.time()
            time.sleep(seconds)
            end = time.time()
            values = {}
            for title in stats:
                res = prom.query(substitute(panels[title]["targets"][0]["expr"]), at=end)
                values[title] = float(res[0]["value"][1]) if res else None
            lines = {title: [(legend(t["legendFormat"], r["metric"]),
                              [(float(ts) - start, float(v)) for ts, v in r["values"]])
                             for t in panels[title]["targets"]
                             for r in prom.query_range(substitute(t["expr"]), start, end, 2)]
                     for title in series}
            points = {title: [(r["metric"], float(r["value"][1]))
                              for r in prom.query(substitute(panels[title]["targets"][0]["expr"]), at=end)]
                      for title in instant}
    return node, values, lines, points


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=300, help="how long to let Prometheus scrape (default 300)")
    # also each collector's deadline: the fake vendor CLIs start a Python interpreter per call, which
    # can take over a second on a loaded machine and would show as failing collectors
    ap.add_argument("--interval", default="3", help="agent collection interval, seconds (default 3)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "img" / "overview.png"))
    args = ap.parse_args(argv)
    panels = {p["title"]: p for p in json.loads(DASHBOARD.read_text())["panels"]}
    node, stats, series, points = scrape(DASHBOARD, STATS, SERIES, ["Devices by vendor and model"],
                                         args.seconds, args.interval)
    inventory = [(f"{m['vendor']}\n{m['model']}", v) for m, v in points["Devices by vendor and model"]]

    fig = plt.figure(figsize=(16, 15), dpi=100)
    fig.suptitle(f"Accelerators / Fleet overview — simulated node {node}, {args.seconds:.0f} s of data",
                 fontsize=15, x=0.01, ha="left")
    grid = fig.add_gridspec(4, 6, height_ratios=[0.55, 2, 2, 2], hspace=0.9, wspace=0.5)
    for i, title in enumerate(STATS):
        ax = fig.add_subplot(grid[0, i])
        v = stats[title]
        bad = title not in ("Accelerators", "Nodes") and v
        ax.set_facecolor("#c4162a" if bad else "#37872d")
        ax.text(0.5, 0.42, "no data" if v is None else f"{v:.0f}", ha="center", va="center", fontsize=22,
                color="white", transform=ax.transAxes)
        ax.set_title(title, fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    places = {"Compute utilization": grid[1, 0:3], "Memory in use": grid[1, 3:6], "Power": grid[2, 0:3],
              "Hottest core": grid[2, 3:6], "Devices by health state": grid[3, 3:6]}
    for title, where in places.items():
        ax = fig.add_subplot(where)
        unit = panels[title]["fieldConfig"]["defaults"].get("unit", "")
        suffix, scale = UNITS.get(unit, ("", 1.0))
        for name, points in series[title]:
            ax.plot([t for t, _ in points], [v * scale for _, v in points], label=name,
                    linestyle="--" if name.endswith(" limit") else "-")
        ax.set_title(title, fontsize=11, loc="left")
        ax.set_xlabel("seconds")
        if suffix:
            ax.set_ylabel(suffix)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    ax = fig.add_subplot(grid[3, 0:3])
    ax.barh([n for n, _ in inventory], [c for _, c in inventory], color="#5794f2")
    ax.set_title("Devices by vendor and model", fontsize=11, loc="left")
    ax.tick_params(axis="y", labelsize=8)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
