"""Explanations of a scoring run, shared by ``/explain?trace=ID`` and ``hetero-exporter score``:
one row per node (feasible or why not, the score before and after staleness, the extender
score 0..10, the chosen devices and the parts of the score), best first."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from hetero_exporter.scoring.nodes import NodeState
from hetero_exporter.scoring.request import Request
from hetero_exporter.scoring.scorer import Decision, Scorer, extender_score


def node_rows(names: Sequence[str], states: Sequence[Optional[NodeState]], decisions: Sequence[Decision],
              now: float, scorer: Scorer) -> list[dict[str, Any]]:
    rows = []
    for name, st, d in zip(names, states, decisions):
        row: dict[str, Any] = {"node": name, "feasible": d.feasible}
        if d.feasible and d.devices and st is not None:
            conf, age = scorer.confidence(st, now)
            row.update(score=round(d.score * conf, 4), extender_score=extender_score(d.score * conf),
                       reason=d.reason, group=d.group, score_before_staleness=round(d.score, 4),
                       confidence=round(conf, 3), age_seconds=round(age, 1),
                       devices=[{"index": x.index, "uuid": x.uuid, "model": x.model} for x in d.devices],
                       parts=dict(d.parts))
        else:
            row.update(score=0.0, extender_score=0, reason=d.reason)
        rows.append(row)
    rows.sort(key=lambda r: (not r["feasible"], -r["score"], r["node"]))
    return rows


def document(request: Optional[Request], error: Optional[str], policy: str, now: float,
             rows: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {**extra, "pod": request.pod if request else extra.get("pod", ""),
            "request": request.describe() if request else error, "policy": policy, "time": now,
            "nodes": rows}


def render(doc: dict[str, Any]) -> str:
    """A table for people: best node first, then why each node got its verdict."""
    lines = [f"pod {doc.get('pod') or '?'}: {doc.get('request')} (policy {doc.get('policy')})", ""]
    header = f"{'NODE':<24} {'FIT':<4} {'SCORE':>6} {'EXT':>3}  DEVICES"
    lines.append(header)
    for r in doc["nodes"]:
        devices = " ".join(f"#{d['index']}" for d in r.get("devices", [])) or "-"
        lines.append(f"{r['node']:<24} {'yes' if r['feasible'] else 'no':<4} {r['score']:>6.3f} "
                     f"{r['extender_score']:>3}  {devices}")
    lines.append("")
    for r in doc["nodes"]:
        lines.append(f"{r['node']}: {r['reason']}")
        if r.get("parts"):
            parts = ", ".join(f"{k} {v:.2f}" for k, v in r["parts"].items())
            lines.append(f"    {parts}; confidence {r['confidence']:.2f} (annotation {r['age_seconds']:.0f} s old)")
    return "\n".join(lines) + "\n"
