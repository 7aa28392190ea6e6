"""The node taint ``<domain>/accelerator-unhealthy``: added while the node is unhealthy (within
the blast-radius budget), removed on recovery, and only ever the one this agent added. Someone
removing our taint is respected until the accelerators recover (``suppressed``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from hetero_exporter.health.plan.budget import Budget, rechecked, taint_would_be_added
from hetero_exporter.health.plan.config import RemedyConfig
from hetero_exporter.health.plan.records import OutboxEvent, TaintRecord
from hetero_exporter.health.detect.texts import event_id, label_value
from hetero_exporter.health.detect.rules import NodeVerdict


@dataclass(frozen=True)
class TaintPlan:
    taints: list[dict]  # the node's taints after this plan (equal to the input when unchanged)
    spec: dict  # its part of the node patch: {"taints": ...} when they change (enforce), else {}
    taint: Optional[TaintRecord]  # the book's record of our taint
    suppressed: bool
    refused: bool  # the budget refused the taint this cycle
    refused_since: Optional[float]
    events: tuple[OutboxEvent, ...] = ()  # the budget refusal (once per episode)
    notes: tuple[str, ...] = ()  # what was done, for the device event
    explain: tuple[str, ...] = ()
    actions: tuple[tuple[str, str], ...] = ()


@dataclass
class _Lines:
    explain: list[str] = field(default_factory=list)
    actions: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def plan_taint(name: str, taints: Sequence[dict], taint: Optional[TaintRecord], suppressed: bool,
               refused_since: Optional[float], nv: NodeVerdict, cfg: RemedyConfig, now: float,
               budget: Optional[Budget] = None, recheck: bool = False) -> TaintPlan:
    """``taints``: the node's (dicts only); ``taint``, ``suppressed``, ``refused_since``: the book's.
    No ``budget`` where one is needed refuses the taint (the safe side). ``recheck``: the budget
    is asked again for our taint already on (its fleet slot was lost); a refusal takes it off."""
    taints = list(taints)
    lines = _Lines()
    suppressed = _suppression(taints, taint, suppressed, nv, cfg, lines)
    revoking = rechecked(nv, taint, suppressed, cfg, recheck)
    refused, refused_since, events = _budget_decision(name, nv, taint, suppressed, refused_since, budget, cfg,
                                                      now, lines, revoking)
    new_taints = taints
    if revoking and refused and taint:
        new_taints, taint = _remove(taints, taint, cfg, lines)
    elif nv.unhealthy and not refused and not suppressed:
        want = label_value(nv.taint_class or "unhealthy")
        if cfg.mode == "enforce":
            new_taints, taint = _place(taints, taint, want, cfg, now, lines)
        else:
            taint = _dry_run(taint, want, cfg, now, lines)
        lines.explain.append(f"node unhealthy: {nv.why} -> taint {_text(cfg, want)}")
    elif not nv.unhealthy and taint:
        new_taints, taint = _remove(taints, taint, cfg, lines)
    if not nv.unhealthy:
        lines.explain.append(f"node healthy: {nv.why}")
    changed = cfg.mode == "enforce" and new_taints != taints
    return TaintPlan(taints=new_taints, spec={"taints": new_taints or None} if changed else {}, taint=taint,
                     suppressed=suppressed, refused=refused, refused_since=refused_since, events=events,
                     notes=tuple(lines.notes), explain=tuple(lines.explain), actions=tuple(lines.actions))


def with_classes(tp: TaintPlan, names: list[str]) -> TaintPlan:
    """The plan with the device classes our taint is for in its record (``names``: none, no
    field), which other nodes read to count a class's budget share (budget.class_taints)."""
    if tp.taint is None:
        return tp
    record = tp.taint.copy()
    record.pop("classes", None)
    if names:
        record["classes"] = names
    return dataclasses.replace(tp, taint=record)


def taint_label(labels: Mapping[str, str], taints: Sequence[dict], cfg: RemedyConfig) -> dict[str, Optional[str]]:
    """The label ``<domain>/accelerator-unhealthy`` mirroring the taint of the same key (whoever
    put it there), so that the fleet budget lists the tainted nodes by a label selector instead
    of every accelerator Node (Kubernetes selects nodes by label, never by taint). ``taints``:
    the node's after this plan; ``labels``: its labels now. The change to write (None: remove),
    {} when the label is right. Written only where the selection labels go on the Node (labels
    mode, not observe); elsewhere a mirror left from before is removed."""
    if cfg.mode == "observe":
        return {}
    key = cfg.taint_key
    values = [t.get("value") for t in taints if t.get("key") == key]
    want: Optional[str] = None
    if values and cfg.inventory and not cfg.nodefeature:
        value = values[0]
        want = value if isinstance(value, str) and label_value(value) == value else "true"
    if labels.get(key) == want:
        return {}
    return {key: want} if want is not None or key in labels else {}


def _text(cfg: RemedyConfig, value: str) -> str:
    return f"{cfg.taint_key}={value}:{'+'.join(cfg.effects)}"


def _ours(taint: Optional[TaintRecord], cfg: RemedyConfig) -> set[tuple[str, str]]:
    return {(cfg.taint_key, e) for e in (taint.get("effects") or [])} if taint else set()


def _on_node(taints: Sequence[dict]) -> set:
    return {(t.get("key"), t.get("effect")) for t in taints}


def _suppression(taints: Sequence[dict], taint: Optional[TaintRecord], suppressed: bool, nv: NodeVerdict,
                 cfg: RemedyConfig, lines: _Lines) -> bool:
    """Someone removed the taint we added: respect it until recovery (which lifts it)."""
    if (cfg.mode == "enforce" and taint and taint.get("applied") and not (_ours(taint, cfg) & _on_node(taints))
            and nv.unhealthy):
        suppressed = True
        lines.explain.append("the taint this agent added was removed by someone else: not adding it again "
                             "until the accelerators recover")
    return suppressed and nv.unhealthy


def _budget_decision(name: str, nv: NodeVerdict, taint: Optional[TaintRecord], suppressed: bool,
                     refused_since: Optional[float], budget: Optional[Budget], cfg: RemedyConfig, now: float,
                     lines: _Lines, revoking: bool = False) -> tuple[bool, Optional[float], tuple[OutboxEvent, ...]]:
    """(refused, refused_since, the refusal event): the budget is asked only when the taint
    would be added now, or kept on a recheck (``revoking``); a refusal episode is announced once."""
    refused = False
    if revoking and (budget is None or budget.error is not None):
        why = budget.describe(cfg) if budget is not None else "the budget was not checked"
        lines.explain.append(f"the taint slot was lost and the budget cannot be asked again ({why}): the taint "
                             "stays until it can")
        return False, refused_since, ()
    if nv.unhealthy and not suppressed and (revoking or taint_would_be_added(nv, taint, suppressed, cfg)):
        if budget is None or not budget.allows(cfg):
            refused = True
        else:
            refused_since = None
            if not budget.checked:
                lines.explain.append(budget.describe(cfg))
    if not refused:
        return False, None if not nv.unhealthy else refused_since, ()
    why = budget.describe(cfg) if budget is not None else "the budget was not checked"
    if revoking:
        why = f"its taint slot was taken over before its taint landed and none is free now: {why}"
    lines.explain.append(f"taint refused by the blast-radius budget: {why}")
    lines.actions.append(("taint", "refused"))
    if refused_since is not None:
        return True, refused_since, ()
    verb = "taking the taint off" if revoking else "not tainting"
    event = OutboxEvent(id=event_id(name, "budget", now), type="Warning", reason="AcceleratorTaintBudgetExhausted",
                        message=f"{verb} {name} ({nv.why}): {why}", action="Taint", time=now)
    return True, now, (event,)


def _place(taints: Sequence[dict], taint: Optional[TaintRecord], want: str, cfg: RemedyConfig, now: float,
           lines: _Lines) -> tuple[list[dict], Optional[TaintRecord]]:
    """Enforce: our taint with the wanted value and the configured effects; another's taint
    with our key is left as it is."""
    ours, on_node = _ours(taint, cfg), _on_node(taints)
    new_taints: list[dict] = []
    placed: set[str] = set()
    for t in taints:
        effect = t.get("effect")
        if (t.get("key"), effect) in ours:
            if isinstance(effect, str) and effect in cfg.effects:
                new_taints.append({**t, "value": want})
                placed.add(effect)
            continue  # an effect we added that is no longer configured
        new_taints.append(t)
    for e in cfg.effects:
        if e in placed:
            continue
        if (cfg.taint_key, e) in on_node:  # a taint with our key that we did not add: leave it
            lines.explain.append(f"{cfg.taint_key}:{e} is already on the node and was not added by this agent")
            continue
        new_taints.append({"key": cfg.taint_key, "value": want, "effect": e})
        placed.add(e)
    if not placed:  # someone else's taint with our key already keeps pods away: nothing of ours
        return new_taints, None
    if not (taint and taint.get("applied")) or (taint.get("value") if taint else None) != want:
        lines.actions.append(("taint", _text(cfg, want)))
        lines.notes.append(f"tainted the node {_text(cfg, want)}")
    return new_taints, TaintRecord(value=want, effects=sorted(placed), applied=True,
                                   since=(taint.get("since") if taint else None) or now)


def _dry_run(taint: Optional[TaintRecord], want: str, cfg: RemedyConfig, now: float, lines: _Lines) -> TaintRecord:
    if not taint or taint.get("value") != want:
        lines.actions.append(("taint", f"dry-run {_text(cfg, want)}"))
        lines.notes.append(f"would taint the node {_text(cfg, want)} (dry-run)")
    return TaintRecord(value=want, effects=list(cfg.effects), applied=False,
                       since=(taint.get("since") if taint else None) or now)


def _remove(taints: list[dict], taint: TaintRecord, cfg: RemedyConfig,
            lines: _Lines) -> tuple[list[dict], Optional[TaintRecord]]:
    """Recovery: our taint comes off (enforce); one added in enforce mode stays in other modes."""
    enforce = cfg.mode == "enforce"
    new_taints = taints
    if taint.get("applied"):
        ours = _ours(taint, cfg)
        if enforce and ours & _on_node(taints):
            new_taints = [t for t in taints if (t.get("key"), t.get("effect")) not in ours]
            lines.actions.append(("untaint", f"{cfg.taint_key}"))
            lines.notes.append(f"removed the taint {cfg.taint_key}")
        elif enforce:
            lines.explain.append(f"the taint {cfg.taint_key} this agent added is already gone")
        else:
            lines.explain.append(f"the taint {cfg.taint_key} added in enforce mode stays: mode is {cfg.mode}")
    else:
        lines.notes.append(f"would remove the taint {cfg.taint_key} (dry-run)")
        lines.actions.append(("untaint", "dry-run"))
    return new_taints, None if enforce or not taint.get("applied") else taint
