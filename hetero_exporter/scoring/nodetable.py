"""The scorer's node states by node name, built when an annotation changes.

One table is fed by the watch-backed cache (k8s/node_cache.py) for nodeCacheCapable requests;
another one serves as the decode cache of nodes-in-request mode, where the same annotation text
arrives again with every scheduling cycle and is decoded only when it changed.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable, Mapping, Optional

from hetero_exporter.scoring.nodes import NodeState, from_annotation
from hetero_exporter.scoring.scorer import Scorer

log = logging.getLogger(__name__)

ANNOTATION = "hetero-exporter.io/devices"


class NodeTable:
    """Thread-safe map node name -> NodeState. Writers decode and precompute outside the lock;
    readers get whole, immutable-for-them states (a state is replaced, never edited, on change)."""

    def __init__(self, scorer: Scorer, annotation: str = ANNOTATION, limit: int = 200_000):
        self.scorer = scorer
        self.annotation = annotation
        self.limit = limit
        self._lock = threading.Lock()
        self._states: dict[str, NodeState] = {}
        # name -> (length, hash) of the annotation text the state was built from: enough to see a
        # change, without keeping ~20 KiB of text per node
        self._texts: dict[str, tuple[int, int]] = {}
        self.synced = threading.Event()  # set once a full list has been loaded

    def __len__(self) -> int:
        return len(self._states)

    def get(self, name: str) -> Optional[NodeState]:
        return self._states.get(name)

    def lookup(self) -> Callable[[str], Optional[NodeState]]:
        """``get`` without the method call, for loops over thousands of names (a dict read is
        safe while writers replace entries)."""
        return self._states.get

    def names(self) -> list[str]:
        with self._lock:
            return list(self._states)

    def state_for(self, name: str, text: Optional[str]) -> NodeState:
        """The state of ``name`` for this annotation text, decoded only if the text changed."""
        mark = (-1, 0) if text is None else (len(text), hash(text))
        with self._lock:
            if name in self._states and self._texts.get(name) == mark:
                return self._states[name]
        state = self._decode(name, text)
        with self._lock:
            if len(self._states) >= self.limit and name not in self._states:
                self._states.clear()  # a bound, not an eviction policy: the cache refills itself
                self._texts.clear()
            self._states[name] = state
            self._texts[name] = mark
        return state

    def _decode(self, name: str, text: Optional[str]) -> NodeState:
        """The node's state, precomputed; never raises: one node's annotation, whatever it
        holds, must not stop the table from taking the others (a bug shows in the log)."""
        try:
            state = from_annotation(name, text, self.annotation)
            self.scorer.precompute(state)
            return state
        except Exception as e:  # noqa: BLE001 - the node fails alone, with the reason
            log.exception("node annotation could not be scored", extra={"node": name[:253]})
            return NodeState(name=name, time=0.0, groups={},
                             error=f"annotation unreadable: {type(e).__name__} while scoring it; "
                                   "see the extender log")

    def update(self, name: str, text: Optional[str]) -> None:
        self.state_for(name, text)

    def remove(self, name: str) -> None:
        with self._lock:
            self._states.pop(name, None)
            self._texts.pop(name, None)

    def replace(self, items: Mapping[str, Optional[str]] | Iterable[tuple[str, Optional[str]]]) -> None:
        """Load a full list (after a re-list): nodes absent from it are dropped; unchanged
        annotations keep their state."""
        pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
        keep = {name for name, _ in pairs}
        for name, text in pairs:
            self.state_for(name, text)
        with self._lock:
            for name in [n for n in self._states if n not in keep]:
                self._states.pop(name, None)
                self._texts.pop(name, None)
        self.synced.set()
