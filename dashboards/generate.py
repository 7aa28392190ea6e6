"""Render every ``dashboards/*.dashboard.py`` (grafanalib) to ``dashboards/json/<name>.json``.

    python dashboards/generate.py           # write the JSON (commit it)
    python dashboards/generate.py --check   # exit 1 when the committed JSON is out of date

tests/test_dashboards.py runs the check. Import these files in Grafana (Dashboards > Import) or
provision the folder; each asks for a Prometheus data source through its ``datasource`` variable.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from grafanalib._gen import loader, write_dashboard

HERE = Path(__file__).resolve().parent
OUT = HERE / "json"
SUFFIX = ".dashboard.py"


def sources() -> list[Path]:
    return sorted(HERE.glob("*" + SUFFIX))


def render(path: Path) -> str:
    """The JSON text of one dashboard definition."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))  # the definitions import the shared helper module panels.py
    buf = io.StringIO()
    write_dashboard(loader(str(path)), buf)
    return buf.getvalue()


def render_all() -> dict[Path, str]:
    """Output path -> JSON text, for every definition."""
    return {OUT / (p.name[: -len(SUFFIX)] + ".json"): render(p) for p in sources()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed JSON, write nothing")
    args = ap.parse_args(argv)
    rendered = render_all()
    stale = [p for p, text in rendered.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
    orphans = sorted(set(OUT.glob("*.json")) - set(rendered))
    if args.check:
        for p in stale:
            print(f"out of date: {p.relative_to(HERE.parent)}", file=sys.stderr)
        for p in orphans:
            print(f"no definition for: {p.relative_to(HERE.parent)}", file=sys.stderr)
        if stale or orphans:
            print("run: python dashboards/generate.py", file=sys.stderr)
            return 1
        return 0
    OUT.mkdir(exist_ok=True)
    for p in stale:
        p.write_text(rendered[p], encoding="utf-8")
        print(f"wrote {p.relative_to(HERE.parent)}")
    for p in orphans:
        p.unlink()
        print(f"removed {p.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
