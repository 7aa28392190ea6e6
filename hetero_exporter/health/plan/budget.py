"""The blast-radius budget: how many accelerator nodes may carry the taint at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from hetero_exporter.health.plan.book import Book
from hetero_exporter.health.plan.config import RemedyConfig
from hetero_exporter.health.plan.records import TaintRecord
from hetero_exporter.health.detect.rules import NodeVerdict


@dataclass(frozen=True)
class Budget:
    """What the budget check saw: accelerator nodes and how many carry the taint (others)."""

    total: int
    tainted: int
    error: Optional[str] = None  # the count could not be taken: refuse (safe side)
    checked: bool = True  # False: a report without cluster access (nothing is written)
    # decided fleet-wide through Lease slots (health/act/fleet_budget.py): True = this node holds a
    # slot, False = none is free (then ``tainted`` counts the slots held by others)
    granted: Optional[bool] = None

    @classmethod
    def unchecked(cls) -> "Budget":
        return cls(0, 0, checked=False)

    def limit(self, cfg: RemedyConfig) -> int:
        """How many nodes may carry the taint: the fraction of the fleet, at least the minimum."""
        return max(cfg.budget_min_nodes, int(cfg.budget_max_fraction * self.total))

    def allows(self, cfg: RemedyConfig) -> bool:
        if not self.checked:
            return True
        if self.error is not None:
            return False
        if self.granted is not None:
            return self.granted
        return self.tainted + 1 <= self.limit(cfg)

    def describe(self, cfg: RemedyConfig) -> str:
        if not self.checked:
            return "the budget was not checked (no cluster access)"
        if self.error is not None:
            return f"the budget could not be checked ({self.error})"
        limit = self.limit(cfg)
        allows = f"the budget allows {limit} ({cfg.budget_max_fraction:.0%}, at least {cfg.budget_min_nodes})"
        if self.granted is not None:
            what = "a fleet-wide taint slot was granted" if self.granted else "no fleet-wide taint slot is free"
            return (f"{self.tainted} of {self.total} accelerator nodes already carry the taint or hold a taint "
                    f"slot; {allows}: {what}")
        return f"{self.tainted} of {self.total} accelerator nodes already carry the taint; {allows}"


def taint_would_be_added(nv: NodeVerdict, taint: Optional[TaintRecord], suppressed: bool,
                         cfg: RemedyConfig) -> bool:
    """True when the plan would add the taint now (then the budget is asked)."""
    if not nv.unhealthy or suppressed or cfg.mode == "observe":
        return False
    if taint is None:
        return True
    return cfg.mode == "enforce" and not taint.get("applied")


def needs_budget(nv: NodeVerdict, book: Book, cfg: RemedyConfig) -> bool:
    """True when the plan would add the taint now (then the caller counts tainted nodes)."""
    return taint_would_be_added(nv, book.taint, book.suppressed, cfg)
