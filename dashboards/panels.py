"""Shared building blocks of the five dashboards: PromQL selectors, device joins, panels, layout.

Metric names come from ``hetero_exporter.model.names``; nothing here spells one. Value
series carry only ``vendor`` and ``uuid`` (DESIGN.md), so the model filter and the device index
reach a panel through a join with the device info series (``names.DEVICE_INFO``) on ``(node, uuid)``. ``node`` is
not emitted by the agent: deploy/ relabels it from the pod's node name, and ``on(node, uuid)``
still matches where it is absent on both sides.

Every template variable is multi-value with an "All" of ``.*``, so selectors always use ``=~``
and an unselected variable also matches series that lack the label.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import grafanalib.core as G

from hetero_exporter.model import names as N

# The scrape job: deploy/base/servicemonitor.yaml takes it from the Service's
# app.kubernetes.io/name label (jobLabel), so a kustomize namePrefix does not change it.
JOB = "hetero-exporter"

# Series that Prometheus or kube-state-metrics produce, not the agent (tests allow these).
EXTERNAL_METRICS = {
    "up": "Prometheus: 1 when the last scrape of the target succeeded",
    "scrape_duration_seconds": "Prometheus: how long the scrape took",
    "scrape_samples_scraped": "Prometheus: samples in the last scrape",
    "kube_node_spec_taint": "kube-state-metrics: one series per node taint",
}
TAINT_KEY = "hetero-exporter.io/accelerator-unhealthy"  # DESIGN.md, Kubernetes surface

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
ALL = ".*"
DEVICE_LEGEND = "{{node}} {{vendor}}#{{index}} {{model}}"
LINK_TAG = "hetero-exporter"


# --------------------------------------------------------------------------- PromQL


def sel(metric: N.Metric, *matchers: str) -> str:
    """``metric{...}`` filtered by the template variables that apply to its labels, plus
    ``matchers`` (e.g. ``'state="failed"'``). Every series has ``node`` after relabelling."""
    parts = ['node=~"$node"']
    for var in ("vendor", "model", "namespace"):
        if var in metric.labels:
            parts.append(f'{var}=~"${var}"')
    parts.extend(matchers)
    return f"{metric.name}{{{', '.join(parts)}}}"


def by_device(expr: str, labels: Sequence[str] = ("model", "index")) -> str:
    """``expr`` (one or more series per device) with ``labels`` copied from the device's info
    series; devices outside the ``$model`` selection drop out of the result."""
    return f"({expr}) * on(node, uuid) group_left({', '.join(labels)}) {sel(N.DEVICE_INFO)}"


def increase(metric: N.Metric, *matchers: str, window: str = "$__rate_interval") -> str:
    return f"increase({sel(metric, *matchers)}[{window}])"


def rate(metric: N.Metric, *matchers: str, window: str = "$__rate_interval") -> str:
    return f"rate({sel(metric, *matchers)}[{window}])"


def weighted(expr: str, weight: N.Metric) -> str:
    """``expr`` per device multiplied by a per-device profile figure (cost weight, compute units)."""
    return f"({expr}) * on(node, uuid) group_left() {sel(weight)}"


def in_state(state: str) -> str:
    """Devices whose health state set is 1 on ``state`` (a regex, e.g. ``failed`` or ``degraded|failed``)."""
    state_matcher = 'state=~"%s"' % state
    return by_device(f"{sel(N.HEALTH_STATUS, state_matcher)} == 1")


def count_or_zero(expr: str) -> str:
    """A stat that reads 0, not "No data", when nothing matches."""
    return f"count({expr}) or vector(0)"


def external(name: str, *matchers: str) -> str:
    assert name in EXTERNAL_METRICS, name
    parts = ('node=~"$node"',) + matchers
    return f"{name}{{{', '.join(parts)}}}"


# --------------------------------------------------------------------------- panels


@dataclass(frozen=True)
class Q:
    """One query of a panel."""
    expr: str
    legend: str = ""


def _targets(queries: Sequence[Q], instant: bool = False, table: bool = False) -> list[G.Target]:
    return [G.Target(expr=q.expr, legendFormat=q.legend, refId=chr(ord("A") + i), instant=instant,
                     format="table" if table else "time_series", datasource=DATASOURCE)
            for i, q in enumerate(queries)]


def timeseries(title: str, description: str, *queries: Q, unit: str = "short",
               stacked: bool = False, max_value: Optional[int] = None) -> G.TimeSeries:
    return G.TimeSeries(
        title=title, description=description, dataSource=DATASOURCE, targets=_targets(queries),
        unit=unit, valueMin=0, valueMax=max_value, legendDisplayMode="table", legendPlacement="right",
        legendCalcs=["lastNotNull", "max"], tooltipMode="multi", tooltipSort="desc",
        fillOpacity=15 if stacked else 0, stacking={"mode": "normal"} if stacked else {})


def stat(title: str, description: str, expr: str, unit: str = "none",
         red_above: Optional[float] = None) -> G.Stat:
    """A single number; turns red above ``red_above`` (e.g. 0 for failed devices)."""
    steps = [{"color": "green", "value": None}]
    if red_above is not None:
        steps.append({"color": "red", "value": red_above + 1e-9})
    return G.Stat(title=title, description=description, dataSource=DATASOURCE,
                  targets=_targets([Q(expr)], instant=True), format=unit, graphMode="none",
                  reduceCalc="lastNotNull", colorMode="background" if red_above is not None else "value",
                  extraJson={"fieldConfig": {"defaults": {"thresholds": {"mode": "absolute", "steps": steps}}}})


def table(title: str, description: str, *queries: Q, hide: Sequence[str] = ("Time", "__name__", "job")) -> G.Table:
    """An instant table; several queries are merged on their common labels."""
    transformations = [{"id": "merge", "options": {}}] if len(queries) > 1 else []
    transformations.append({"id": "organize", "options": {"excludeByName": {h: True for h in hide}}})
    return G.Table(title=title, description=description, dataSource=DATASOURCE,
                   targets=_targets(queries, instant=True, table=True), filterable=True,
                   transformations=transformations)


# --------------------------------------------------------------------------- variables


def _query_var(name: str, label: str, query: str) -> G.Template:
    return G.Template(name=name, label=label, query=f"label_values({query}, {name})",
                      dataSource=DATASOURCE, includeAll=True, multi=True, allValue=ALL, default="All",
                      refresh=G.REFRESH_ON_TIME_RANGE_CHANGE, sort=G.SORT_ALPHA_ASC)


def variables(names: Sequence[str]) -> list[G.Template]:
    """The data source picker plus the requested variables, each narrowed by the ones before it."""
    node = 'node=~"$node"'
    queries = {
        # every agent exports its snapshot age, so a node without devices is still listed
        "node": ("Node", N.SNAPSHOT_AGE.name),
        "vendor": ("Vendor", f"{N.DEVICE_INFO.name}{{{node}}}"),
        "model": ("Model", f'{N.DEVICE_INFO.name}{{{node}, vendor=~"$vendor"}}'),
        "namespace": ("Namespace", f'{N.ALLOCATION.name}{{{node}, vendor=~"$vendor"}}'),
    }
    out = [G.Template(name="datasource", label="Data source", query="prometheus", type="datasource")]
    out += [_query_var(n, *queries[n]) if n in queries else TEXTBOXES[n] for n in names]
    return out


# free-text variables a dashboard may ask for (a figure the user supplies, not a label)
TEXTBOXES = {
    "carbon_intensity": G.Template(name="carbon_intensity", label="Carbon intensity (g CO2e / kWh)", query="400",
                                   default="400", type="textbox"),
}


# --------------------------------------------------------------------------- layout


@dataclass
class Section:
    """A titled row of the dashboard: lines of panels, each line split evenly across 24 columns."""
    title: str
    lines: list[list[G.Panel]] = field(default_factory=list)
    height: int = 8


def _place(sections: Sequence[Section]) -> list[G.Panel]:
    import attr  # grafanalib panels are attrs classes

    panels: list[G.Panel] = []
    y = 0
    for s in sections:
        panels.append(G.RowPanel(title=s.title, gridPos=G.GridPos(h=1, w=24, x=0, y=y)))
        y += 1
        for line in s.lines:
            w = 24 // len(line)
            h = 4 if all(isinstance(p, G.Stat) for p in line) else s.height
            for i, p in enumerate(line):
                panels.append(attr.evolve(p, gridPos=G.GridPos(h=h, w=w, x=i * w, y=y)))
            y += h
    return panels


def build_dashboard(title: str, uid: str, description: str, sections: Sequence[Section],
              var_names: Sequence[str] = ("node", "vendor", "model")) -> G.Dashboard:
    return G.Dashboard(
        title=title, uid=uid, description=description, tags=[LINK_TAG], timezone="browser",
        refresh="30s", schemaVersion=36, graphTooltip=G.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        time=G.Time("now-1h", "now"), templating=G.Templating(list=variables(var_names)),
        links=[G.DashboardLink(title="hetero-exporter", tags=[LINK_TAG], asDropdown=True,
                               includeVars=True, keepTime=True)],
        panels=_place(sections),
    ).auto_panel_ids()
