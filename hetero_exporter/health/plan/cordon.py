"""The opt-in cordon (``health.cordon``, enforce mode): ``spec.unschedulable`` set while the node
is unhealthy and the taint is not refused, lifted on recovery, and only when this agent set it.
Someone uncordoning the node is respected until recovery (``suppressed``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from hetero_exporter.health.plan.config import RemedyConfig
from hetero_exporter.health.detect.rules import NodeVerdict


@dataclass(frozen=True)
class CordonPlan:
    unschedulable: Optional[bool]  # what to write to spec.unschedulable; None: leave it
    cordoned: bool  # the book's: this agent cordoned the node
    suppressed: bool
    notes: tuple[str, ...] = ()
    explain: tuple[str, ...] = ()
    actions: tuple[tuple[str, str], ...] = ()

    @property
    def spec(self) -> dict:
        """Its part of the node patch (``None`` deletes the field: uncordoned)."""
        if self.unschedulable is None:
            return {}
        return {"unschedulable": True if self.unschedulable else None}


def plan_cordon(name: str, unschedulable_now: bool, nv: NodeVerdict, cordoned: bool, suppressed: bool,
                refused: bool, cfg: RemedyConfig, want: Optional[bool] = None) -> CordonPlan:
    """``unschedulable_now``: the node's spec.unschedulable; ``cordoned``, ``suppressed``: the
    book's (suppressed as the taint sub-plan left it); ``refused``: the budget refused the taint;
    ``want``: whether the devices that make the node unhealthy want it cordoned (their classes,
    health.classes; None: ``health.cordon``). A cordon of the agent's is lifted on recovery either way,
    and when the budget refuses the taint it goes with (a recheck took the taint back)."""
    on = cfg.cordon if want is None else want
    if cfg.mode != "enforce" or not (on or (cordoned and want is not None)):
        return CordonPlan(None, cordoned, suppressed)
    if on and nv.unhealthy and not refused and not suppressed and not cordoned:
        if unschedulable_now:
            return CordonPlan(None, False, suppressed,
                              explain=("the node is already cordoned (not by this agent): leaving it",))
        return CordonPlan(True, True, suppressed, notes=("cordoned the node",), actions=(("cordon", name),))
    if refused and cordoned and nv.unhealthy:
        # only a recheck refuses with our cordon on (the budget took the taint back): it goes too
        if unschedulable_now:
            return CordonPlan(False, False, suppressed, notes=("uncordoned the node: the budget took its taint back",),
                              actions=(("uncordon", name),))
        return CordonPlan(None, False, suppressed)
    if not nv.unhealthy and cordoned:
        if unschedulable_now:
            return CordonPlan(False, False, suppressed, notes=("uncordoned the node",),
                              actions=(("uncordon", name),))
        return CordonPlan(None, False, suppressed)
    if cordoned and not unschedulable_now and nv.unhealthy:
        return CordonPlan(None, False, True, explain=(
            "the node was uncordoned by someone else: not cordoning it again until recovery",))
    return CordonPlan(None, cordoned, suppressed)
