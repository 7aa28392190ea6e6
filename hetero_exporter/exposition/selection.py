"""Which reading families /metrics serves: ``metrics: {include: [...], exclude: [...]}``.

As dcgm-exporter's metrics CSV, but by name: a family (``accelerator_fan_speed_ratio``), a field
of the catalogue (``fan_speed_ratio``, ``temperature_{sensor}_celsius``) or one reading
(``temperature_edge_celsius``). With ``include``, only the readings it names are served; then
``exclude`` takes away. It selects readings only: identity, health, faults, processes and the
agent's own families always stay (the health loop, dashboards and alerts stand on them). The
JSON model (``/snapshot``, ``inspect --json``) keeps every reading.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from hetero_exporter.model import fields as F


@dataclass(frozen=True)
class Selection:
    include: frozenset[str] = frozenset()
    exclude: frozenset[str] = frozenset()

    @classmethod
    def of(cls, section: Optional[Mapping[str, Iterable[str]]]) -> "Selection":
        section = section or {}
        return cls(frozenset(section.get("include") or ()), frozenset(section.get("exclude") or ()))

    @property
    def everything(self) -> bool:
        return not self.include and not self.exclude

    def _names(self, reading: str, family: Optional[str]) -> set[str]:
        found = F.lookup(reading)
        return {reading, *((found[0].name,) if found else ()), *((family,) if family else ())}

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one Selection per agent, a few hundred readings
    def allows(self, reading: str, family: Optional[str]) -> bool:
        """Whether reading ``reading`` (exported as ``family``) is served."""
        names = self._names(reading, family)
        if self.include and not names & self.include:
            return False
        return not names & self.exclude


EVERYTHING = Selection()
