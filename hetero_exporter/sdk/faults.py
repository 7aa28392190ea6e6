"""The shipped vendor fault tables (``collectors/<vendor>/faults.yaml``, read by ``model.faults``)
for the collectors, and severity -> health (the one rule of a collector's health report).

Collectors use the shipped table to fill ``Fault.fault_class/action/severity``; the health rules
read the policy's ``Catalogue`` (``model.faults``: the same tables with the configured overrides).
``FaultInfo``, ``FaultTable``, ``FaultTableError`` and ``parse_table`` live in ``model.faults``
and are re-exported here.
"""

from __future__ import annotations

import functools
from typing import Iterable, Optional

from hetero_exporter.model import Fault, Health
from hetero_exporter.model.faults import (FaultInfo, FaultTable, FaultTableError, parse_table,  # noqa: F401
                                          shipped_table)

__all__ = ["FaultInfo", "FaultTable", "FaultTableError", "parse_table", "table", "lookup", "available_tables",
           "info_or_none", "state_of", "health_of"]


@functools.lru_cache(maxsize=None)
def table(vendor: str) -> FaultTable:
    """The built-in table of a vendor; an empty one (defaults only) when none is shipped."""
    from hetero_exporter import vendors  # the spec says where the vendor package keeps its table
    return shipped_table(vendor, vendors.spec(vendor))


def lookup(vendor: str, code: str) -> FaultInfo:
    return table(vendor).lookup(code)


def available_tables() -> list[str]:
    """Vendors that ship a fault table."""
    from hetero_exporter import vendors
    return sorted(n for n, s in vendors.specs().items() if s.data_path(s.fault_table).is_file())


def info_or_none(vendor: str, code: str) -> Optional[FaultInfo]:
    info = lookup(vendor, code)
    return info if info.known else None


# --------------------------------------------------------------------------- severity -> health

_SEVERITY_STATE = {"critical": "failed", "warning": "degraded"}  # info decides nothing
_RANK = {"ok": 0, "degraded": 1, "failed": 2}


def state_of(faults: Iterable[Fault]) -> str:
    """The one rule: failed when a critical fault is active, degraded for a warning (or a
    severity no table knows: never ok, never failed), ok otherwise. Info faults are events
    only. A report, not policy: debounce, stickiness and hysteresis are health/detect's."""
    worst = "ok"
    for f in faults:
        if f.severity == "info":
            continue
        s = _SEVERITY_STATE.get(f.severity, "degraded")
        worst = s if _RANK[s] > _RANK[worst] else worst
    return worst


def health_of(faults: Iterable[Fault]) -> Health:
    """A collector's health report from its active faults: ``state_of`` them; the reasons are
    every active fault when that is not ok (an info fault beside a warning says more), none when
    ok (info faults alone are events: counted in the device's faults, not reasons)."""
    active = tuple(faults)
    state = state_of(active)
    return Health(state, active if state != "ok" else ())
