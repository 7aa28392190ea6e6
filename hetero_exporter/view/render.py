"""A frame as rich renderables, for a terminal ``width`` columns wide.

A narrow terminal drops whole columns (least needed first: model, fault, power and temperature,
then memory) rather than wrapping rows; the table never grows past ``width``. Colour is the
console's business: rich leaves it out where NO_COLOR is set or stdout is not a terminal, and
every state is also spelt out, so nothing depends on colour. Every cell is a ``Text``: what a
snapshot says is never read as rich markup.
"""

from __future__ import annotations

from typing import Callable, Optional

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from hetero_exporter.view.frame import DeviceRow, Frame, ProcessRow

GIB = 1 << 30
BAR = 10  # cells of a utilization / memory bar
STATE_STYLES = {"ok": "green", "degraded": "yellow", "failed": "bold red", "unknown": "magenta", "recovering": "cyan",
                "late": "magenta", "timeout": "bold magenta", "tool missing": "magenta", "bad output": "magenta",
                "error": "magenta"}
KEYS = "q quit  s/1-6 sort  v vendor  p processes"


def bar(ratio: Optional[float], width: int = BAR) -> Text:
    """``███████··· 70%``: filled cells for the share, dots for the rest; '-' when unknown."""
    if ratio is None:
        return Text("-")
    r = min(1.0, max(0.0, ratio))
    full = round(r * width)
    return Text.assemble(("█" * full, "cyan"), ("·" * (width - full), "dim"), f" {r * 100:3.0f}%")


def _memory(r: DeviceRow) -> Text:
    if r.mem_total is None:
        return Text("-")
    used = "-" if r.mem_used is None else f"{r.mem_used / GIB:.1f}"
    ratio = None if r.mem_used is None or not r.mem_total else r.mem_used / r.mem_total
    cells = min(6, round(6 * min(1.0, ratio))) if ratio is not None else 0
    return Text.assemble(("█" * cells, "cyan"), ("·" * (6 - cells), "dim"), f" {used}/{r.mem_total / GIB:.0f}G")


def _power(r: DeviceRow) -> str:
    if r.power is None:
        return "-"
    return f"{r.power:.0f}/{r.power_limit:.0f}W" if r.power_limit is not None else f"{r.power:.0f}W"


def _state(r: DeviceRow) -> Text:
    return Text(r.state, STATE_STYLES.get(r.state, ""))


# (header, cell, minimum width, drop order: higher goes first when the terminal is narrow)
Column = tuple[str, Callable[[DeviceRow], RenderableType], int, int]
DEVICE_COLUMNS: tuple[Column, ...] = (
    ("VENDOR", lambda r: r.vendor, 9, 0),
    ("IDX", lambda r: ("  └ " if r.child else "") + r.index, 5, 0),
    ("MODEL", lambda r: r.model, 14, 4),
    ("UTIL", lambda r: bar(r.util), BAR + 5, 0),
    ("MEMORY", _memory, 15, 1),
    ("TEMP", lambda r: "-" if r.temp is None else f"{r.temp:.0f}C", 5, 2),
    ("POWER", _power, 9, 2),
    ("STATE", _state, 12, 0),
    ("FAULT", lambda r: r.fault, 12, 3),
)
PROCESS_COLUMNS: tuple[tuple[str, Callable[[ProcessRow], str], int, int], ...] = (
    ("PID", lambda p: str(p.pid), 8, 0),
    ("DEVICE", lambda p: p.device, 12, 0),
    ("MEMORY", lambda p: "-" if p.memory is None else f"{p.memory / GIB:.1f}G", 8, 0),
    ("UTIL", lambda p: "-" if p.util is None else f"{p.util * 100:.0f}%", 5, 1),
    ("NAMESPACE/POD/CONTAINER", lambda p: "/".join(x for x in (p.namespace, p.pod, p.container) if x) or "-", 24, 1),
    ("NAME", lambda p: p.name or "-", 10, 2),
)


MAX_CELL = 24  # a column no wider than this; the last one takes the rest


def _cell_width(value: RenderableType) -> int:
    return value.cell_len if isinstance(value, Text) else len(str(value))


def _widths(columns: list, rows: list) -> list[int]:
    """Each column's width: its header, minimum and widest cell, at most MAX_CELL; the last
    column (a free-text one) needs only its minimum, it is cut with an ellipsis."""
    out = []
    for i, (header, cell, minimum, _order) in enumerate(columns):
        if i == len(columns) - 1:
            out.append(max(minimum, len(header)))
            continue
        widest = max((_cell_width(cell(r)) for r in rows), default=0)
        out.append(min(MAX_CELL, max(minimum, len(header), widest)))
    return out


def fit(columns: tuple, rows: list, width: int) -> list:
    """The columns whose cells fit ``width`` (one space between), dropping the highest drop order first."""
    kept = list(columns)
    for order in sorted({c[3] for c in columns}, reverse=True):
        if sum(w + 1 for w in _widths(kept, rows)) <= width or order == 0:
            break
        kept = [c for c in kept if c[3] != order]
    return kept


def _table(columns: list, rows: list, width: int) -> Table:
    t = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0), show_edge=False, width=width, expand=False,
              header_style="bold")
    for i, ((header, _cell, _minimum, _order), w) in enumerate(zip(columns, _widths(columns, rows))):
        last = i == len(columns) - 1
        t.add_column(header, min_width=w, max_width=None if last else w, no_wrap=True, overflow="ellipsis",
                     ratio=1 if last else None)
    for r in rows:
        t.add_row(*(_plain(cell(r)) for _h, cell, _m, _o in columns))
    return t


def _plain(value: RenderableType) -> RenderableType:
    """A cell as Text: rich reads a str cell as markup (``[link=...]``, ``[/bold]``), a Text never."""
    return Text(value) if isinstance(value, str) else value


def _packed(label: str, items: list[tuple[str, str]], width: int) -> list[Text]:
    """``label item  item  ...`` on as many lines as ``width`` needs, never breaking an item."""
    lines: list[Text] = []
    line = Text(label)
    for text, style in items:
        if line.cell_len + 2 + len(text) > width and line.cell_len > len(label):
            lines.append(line)
            line = Text(" " * len(label))
        elif line.cell_len > len(label):
            line.append("  ")
        line.append(text, style)
    lines.append(line)
    return lines


def _header(f: Frame, width: int) -> list[RenderableType]:
    age = "no snapshot" if f.age is None else f"snapshot {f.age:.1f}s old"
    lines: list[RenderableType] = [Text.assemble(("hetero-exporter top", "bold"), f"  node {f.node or '-'}  {age}"),
             Text.assemble(f"sort {f.state.sort}  vendor {f.state.vendor or 'all'}  ", (KEYS, "dim"))]
    if f.message:
        lines.append(Text(f.message, "bold yellow"))
    devices, processes = f.hidden
    if devices or processes:  # in the header: the rows below it may run past the screen's last line
        lines.append(Text(f"+{devices} devices, +{processes} processes not shown (more than the screen holds)",
                          "dim"))
    if f.drivers:
        lines += _packed("driver / runtime  ", [(f"{v} {ver}", "") for v, ver in f.drivers], width)
    if f.collectors:
        ok = sum(1 for c in f.collectors if c.state == "ok")
        failing = [(f"{c.name} {c.state}", STATE_STYLES.get(c.state, "")) for c in f.collectors if c.state != "ok"]
        lines += _packed("collectors  ", [(f"{ok} ok", "")] + failing, width)
    return lines


def render(f: Frame, width: int) -> Group:
    """The whole frame: header, device table, process table (when shown and there are any)."""
    parts: list[RenderableType] = [*_header(f, width)]
    if f.devices:
        parts.append(_table(fit(DEVICE_COLUMNS, list(f.devices), width), list(f.devices), width))
    elif f.age is not None:
        parts.append(Text("no accelerators on this node", "dim"))
    if f.state.processes and f.processes:
        parts.append(Text(""))
        parts.append(_table(fit(PROCESS_COLUMNS, list(f.processes), width), list(f.processes), width))
    return Group(*parts)
