"""The last sub-plan: the book's sticky faults, boot id and outbox, and the one node patch that
carries the sub-plans' parts (annotations, labels, spec) with the book."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, Sequence

from hetero_exporter.health.plan.book import Book, holds_to_json, occurrences_to_json, sticky_to_json
from hetero_exporter.health.plan.config import RemedyConfig
from hetero_exporter.health.plan.records import OutboxEvent
from hetero_exporter.health.detect.rules import StickyFault
from hetero_exporter.model.evaluation import GateHold, OccurrenceBook


@dataclass(frozen=True)
class Bookkeeping:
    book: Book  # the book as this plan leaves it
    node_patch: Optional[dict]  # strategic merge patch of metadata/spec, None: nothing to write


def keep_books(book: Book, events: Sequence[OutboxEvent], boot_id: Optional[str],
               sticky: Optional[Mapping[str, list[StickyFault]]], cfg: RemedyConfig, now: float,
               occurrences: Optional[OccurrenceBook] = None, holds: Optional[Mapping[str, GateHold]] = None,
               said: Optional[Mapping[str, str]] = None) -> Book:
    """The book with this cycle's sticky faults, promotion occurrences, recovery-gate holds
    (``said``: what each recovering device's gate says) and boot id (None: as the book has
    them), and the outbox: recent events (up to ``outbox_seconds`` old, at most ``outbox_max``)
    plus this plan's."""
    outbox = [e for e in book.outbox if now - float(e.get("time", 0)) < cfg.outbox_seconds] + list(events)
    return replace(book, sticky=sticky_to_json(sticky) if sticky is not None else book.sticky,
                   occurrences=occurrences_to_json(occurrences) if occurrences is not None else book.occurrences,
                   holds=holds_to_json(holds, said or {}) if holds is not None else book.holds,
                   boot_id=boot_id or book.boot_id, outbox=outbox[-cfg.outbox_max:])


def node_patch(book: Book, annotations: Mapping[str, str], cfg: RemedyConfig, *,
               new_annotations: Mapping[str, Optional[str]], new_labels: Mapping[str, Optional[str]],
               spec: Mapping[str, Any]) -> Optional[dict]:
    """The node patch, or None when nothing but the inventory timestamps would change (observe
    mode writes nothing). ``annotations``: the node's; ``spec``: the sub-plans' parts of it."""
    if cfg.mode == "observe":
        return None
    text = book.to_json()
    if text == annotations.get(cfg.book_annotation) and not new_annotations and not new_labels and not spec:
        return None
    patch: dict[str, Any] = {"metadata": {"annotations": {**new_annotations, cfg.book_annotation: text}}}
    if new_labels:
        patch["metadata"]["labels"] = dict(new_labels)
    if spec:
        patch["spec"] = dict(spec)
    return patch


def bookkeeping(book: Book, annotations: Mapping[str, str], events: Sequence[OutboxEvent], boot_id: Optional[str],
                sticky: Optional[Mapping[str, list[StickyFault]]], cfg: RemedyConfig, now: float, *,
                new_annotations: Mapping[str, Optional[str]], new_labels: Mapping[str, Optional[str]],
                spec: Mapping[str, Any], occurrences: Optional[OccurrenceBook] = None,
                holds: Optional[Mapping[str, GateHold]] = None,
                said: Optional[Mapping[str, str]] = None) -> Bookkeeping:
    book = keep_books(book, events, boot_id, sticky, cfg, now, occurrences, holds, said)
    return Bookkeeping(book, node_patch(book, annotations, cfg, new_annotations=new_annotations,
                                        new_labels=new_labels, spec=spec))
