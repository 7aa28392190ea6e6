"""The blast-radius budget: how many accelerator nodes may carry the taint at once, and, for a
device class with a ``budget_share`` (health.classes), how many may carry it for that class.

A class's share bounds the nodes tainted *for* the class: those whose taint a failed device of
the class caused, as each node's book records it (``TaintRecord.classes``). Its limit is
``int(budget_share * accelerator nodes)``, at least ``budget_min_nodes`` when the share is above
0 (0: never for that class). A node asks for the slot of every class among the devices that make
it unhealthy, and the fleet's; all must allow the taint. With the fleet budget (Lease slots), each
class has its own slots too (health/act/fleet_budget.py), so nodes failing at once cannot
overshoot a share either; without it the shares are counted from the other nodes' books.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from hetero_exporter.health.plan.book import Book
from hetero_exporter.health.plan.config import RemedyConfig
from hetero_exporter.health.plan.records import TaintRecord
from hetero_exporter.health.detect.rules import NodeVerdict


def class_limit(share: float, total: int, min_nodes: int) -> int:
    """How many nodes may carry the taint for a class of ``share``."""
    return 0 if share <= 0 else max(min_nodes, int(share * total))


@dataclass(frozen=True)
class ClassBudget:
    """One class's part of the budget: its share, how many other nodes use it (slots held, or
    nodes tainted for it), and whether this node may add one (``granted``: decided by a slot)."""

    name: str
    share: float
    held_by_others: int
    granted: Optional[bool] = None
    error: Optional[str] = None

    def limit(self, total: int, cfg: RemedyConfig) -> int:
        return class_limit(self.share, total, cfg.budget_min_nodes)

    def allows(self, total: int, cfg: RemedyConfig) -> bool:
        if self.error is not None:
            return False
        if self.granted is not None:
            return self.granted
        return self.held_by_others + 1 <= self.limit(total, cfg)

    def describe(self, total: int, cfg: RemedyConfig) -> str:
        if self.error is not None:
            return f"class {self.name}: its budget could not be checked ({self.error})"
        return (f"class {self.name}: {self.held_by_others} other node(s) carry the taint for it; its share "
                f"{self.share:.0%} allows {self.limit(total, cfg)}")


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
    classes: tuple[ClassBudget, ...] = ()  # the shares of the classes this node would be tainted for
    refused_why: Optional[str] = None  # a refused slot's cause when the pool was not full (the fence)

    @classmethod
    def unchecked(cls) -> "Budget":
        return cls(0, 0, checked=False)

    def limit(self, cfg: RemedyConfig) -> int:
        """How many nodes may carry the taint: the fraction of the fleet, at least the minimum."""
        return max(cfg.budget_min_nodes, int(cfg.budget_max_fraction * self.total))

    def allows(self, cfg: RemedyConfig) -> bool:
        if not self.checked:
            return True
        if self.error is not None or not all(c.allows(self.total, cfg) for c in self.classes):
            return False
        if self.granted is not None:
            return self.granted
        return self.tainted + 1 <= self.limit(cfg)

    def describe(self, cfg: RemedyConfig) -> str:
        shares = "; ".join(c.describe(self.total, cfg) for c in self.classes)
        fleet = self._fleet(cfg)
        return f"{fleet}; {shares}" if shares and self.checked and self.error is None else fleet

    def _fleet(self, cfg: RemedyConfig) -> str:
        if not self.checked:
            return "the budget was not checked (no cluster access)"
        if self.error is not None:
            return f"the budget could not be checked ({self.error})"
        limit = self.limit(cfg)
        allows = f"the budget allows {limit} ({cfg.budget_max_fraction:.0%}, at least {cfg.budget_min_nodes})"
        if self.granted is not None:
            what = "a fleet-wide taint slot was granted" if self.granted else (
                self.refused_why or "no fleet-wide taint slot is free")
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


def rechecked(nv: NodeVerdict, taint: Optional[TaintRecord], suppressed: bool, cfg: RemedyConfig,
              recheck: bool) -> bool:
    """True when the budget is asked again for our taint already on the node (``recheck``: its
    fleet slot was found taken over after the taint landed, health/act/fleet_budget.py); a
    refusal then takes the taint off."""
    return (recheck and nv.unhealthy and not suppressed and cfg.mode == "enforce" and taint is not None
            and bool(taint.get("applied")))


def needs_budget(nv: NodeVerdict, book: Book, cfg: RemedyConfig, recheck: bool = False) -> bool:
    """True when the plan would add the taint now, or keep it on a recheck (then the caller
    counts tainted nodes)."""
    return (taint_would_be_added(nv, book.taint, book.suppressed, cfg)
            or rechecked(nv, book.taint, book.suppressed, cfg, recheck))


def class_taints(nodes: Iterable[Mapping[str, Any]], cfg: RemedyConfig) -> dict[str, set[str]]:
    """class -> the nodes that carry our taint for it, as each node's book says (hostile: a book
    that cannot be read, or a record that is no list of names, counts for no class)."""
    out: dict[str, set[str]] = {}
    for n in nodes:
        meta = n.get("metadata") if isinstance(n, Mapping) else None
        name = meta.get("name") if isinstance(meta, Mapping) else None
        annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
        if not isinstance(name, str) or not isinstance(annotations, Mapping):
            continue
        text = annotations.get(cfg.book_annotation)
        taint = Book.from_annotation(text if isinstance(text, str) else None).taint
        names = taint.get("classes") if isinstance(taint, dict) and taint.get("applied") else None
        for c in names if isinstance(names, list) else ():
            if isinstance(c, str) and (c in out or len(out) < 256):  # bounded: a hostile book
                out.setdefault(c, set()).add(name)
    return out


def counted_classes(shares: Mapping[str, float], class_tainted: Mapping[str, Iterable[str]],
                    node: str) -> tuple[ClassBudget, ...]:
    """The classes' parts of a budget counted from the books (no slots): the other nodes
    tainted for each class of ``shares``."""
    return tuple(ClassBudget(name, share, len(set(class_tainted.get(name, ())) - {node}))
                 for name, share in sorted(shares.items()))
