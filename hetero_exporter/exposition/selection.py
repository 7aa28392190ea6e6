"""Which families /metrics serves: ``metrics: {profile: fleet | standard | full, include: [...], exclude: [...]}``.

The profile (``model/names.py``: each family's ``profile`` tag) chooses the families: ``fleet`` the
small set a 10,000-node fleet keeps (at most 32 series per GPU, no per-process series),
``standard`` (the default) what /metrics served before profiles, ``full`` everything the catalogue
has. ``include`` and ``exclude`` then refine the readings the profile serves, as dcgm-exporter's
metrics CSV but by name: a family (``accelerator_fan_speed_ratio``), a field of the catalogue
(``fan_speed_ratio``, ``temperature_{sensor}_celsius``) or one reading
(``temperature_edge_celsius``). With ``include``, only the readings it names are served; then
``exclude`` takes away. They select readings only: identity, health, faults and the agent's own
families stay in every profile (the health loop, dashboards and alerts stand on them). The JSON
model (``/snapshot``, ``inspect --json``) keeps every reading.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Union

from hetero_exporter.model import fields as F
from hetero_exporter.model import names as N


@dataclass(frozen=True)
class Selection:
    include: frozenset[str] = frozenset()
    exclude: frozenset[str] = frozenset()
    profile: str = N.STANDARD

    @classmethod
    def of(cls, section: Optional[Mapping[str, Union[str, Iterable[str]]]]) -> "Selection":
        """From the config's checked ``metrics`` section (config.py)."""
        section = section or {}
        profile = section.get("profile") or N.STANDARD
        return cls(frozenset(section.get("include") or ()), frozenset(section.get("exclude") or ()),
                   profile if isinstance(profile, str) else N.STANDARD)

    @functools.cached_property
    def everything(self) -> bool:
        """Every reading of the catalogue is served (no per-reading check needed)."""
        return not self.include and not self.exclude and all(
            m.served_by(self.profile) and not (self.profile == N.FLEET and m.fleet_only) for m in N.ALL)

    def serves(self, metric: N.Metric) -> bool:
        """Whether the profile serves any series of ``metric`` (readings are checked by ``allows``)."""
        return metric.served_by(self.profile)

    def _names(self, reading: str, family: Optional[str]) -> set[str]:
        found = F.lookup(reading)
        return {reading, *((found[0].name,) if found else ()), *((family,) if family else ())}

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one Selection per agent, a few hundred readings
    def allows(self, reading: str, family: Optional[str]) -> bool:
        """Whether reading ``reading`` (exported as ``family``) is served."""
        target = N.metric_for_field(reading)
        if target is None:
            if self.profile == N.FLEET:  # a JSON-only field: no family of fleet's carries its status
                return False
        elif not target[0].served_by(self.profile, dict(zip(target[0].labels[2:], target[1]))):
            return False
        names = self._names(reading, family)
        if self.include and not names & self.include:
            return False
        return not names & self.exclude


EVERYTHING = Selection()
