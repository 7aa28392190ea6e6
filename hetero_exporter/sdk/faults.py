"""Vendor fault tables (data in each vendor package, ``collectors/<vendor>/faults.yaml``) and their lookup.

A table maps a vendor's fault code (a driver event number, an error code, a RAS event...)
to what it means for the device: a fault class, a severity and the recommended action. Collectors
use it to fill ``Fault.fault_class/action/severity``; health rules use the same table, with
overrides from the agent's configuration.

Table format::

    vendor: <vendor>
    source: "where the catalogue comes from (URL, document, version)"
    code_prefix: Xid          # optional: what numeric codes are called (condition reason NvidiaXid79)
    default: {class: unknown, action: none, severity: warning}
    faults:
      "<code>": {class: device-lost, action: reboot-node, severity: critical,
                 description: "the device has fallen off the bus"}

Actions (model.ACTIONS): none, restart-app, reset-device, reboot-node, contact-support,
isolate-device. Severities: info, warning, critical.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

import yaml

# libyaml's loader when PyYAML has it: same safe subset, ~10x faster on our data files
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

from hetero_exporter.model import ACTIONS, SEVERITIES, Fault, Health
from hetero_exporter.model.errors import InputError



@dataclass(frozen=True)
class FaultInfo:
    code: str
    fault_class: str
    action: str
    severity: str
    description: str = ""
    known: bool = True  # False when the code is not in the table (the default applied)


class FaultTableError(InputError):
    """A vendor's fault table cannot be used (named with its file and code)."""


def _entry(code: str, raw: Mapping[str, Any], where: str, known: bool = True) -> FaultInfo:
    action = str(raw.get("action", "none"))
    severity = str(raw.get("severity", "warning"))
    if action not in ACTIONS:
        raise FaultTableError(f"{where}: action {action!r} is not one of {ACTIONS}")
    if severity not in SEVERITIES:
        raise FaultTableError(f"{where}: severity {severity!r} is not one of {SEVERITIES}")
    return FaultInfo(code=code, fault_class=str(raw.get("class", "unknown")), action=action,
                     severity=severity, description=str(raw.get("description", "")), known=known)


@dataclass(frozen=True)
class FaultTable:
    vendor: str
    source: str
    default: FaultInfo
    entries: Mapping[str, FaultInfo]
    code_prefix: str = ""  # what the vendor calls its numeric codes (condition reasons: <Vendor><Prefix><Code>)

    def lookup(self, code: str) -> FaultInfo:
        found = self.entries.get(str(code))
        if found is not None:
            return found
        d = self.default
        return FaultInfo(code=str(code), fault_class=d.fault_class, action=d.action,
                         severity=d.severity, description=d.description, known=False)

    def with_overrides(self, overrides: Mapping[str, Mapping[str, Any]]) -> "FaultTable":
        """A copy where configured codes replace (or add to) the built-in entries."""
        merged = dict(self.entries)
        for code, raw in overrides.items():
            base = merged.get(str(code))
            fields = {} if base is None else {"class": base.fault_class, "action": base.action,
                                              "severity": base.severity, "description": base.description}
            merged[str(code)] = _entry(str(code), {**fields, **raw}, f"override {self.vendor}:{code}")
        return FaultTable(self.vendor, self.source, self.default, merged, self.code_prefix)


def parse_table(doc: Mapping[str, Any], where: str) -> FaultTable:
    if not isinstance(doc, Mapping) or "vendor" not in doc:
        raise FaultTableError(f"{where}: a fault table needs 'vendor' and 'faults'")
    default = _entry("*", doc.get("default") or {}, f"{where}: default", known=False)
    entries = {str(code): _entry(str(code), raw or {}, f"{where}: {code}")
               for code, raw in (doc.get("faults") or {}).items()}
    return FaultTable(str(doc["vendor"]), str(doc.get("source", "")), default, entries,
                      str(doc.get("code_prefix") or ""))


@functools.lru_cache(maxsize=None)
def table(vendor: str) -> FaultTable:
    """The built-in table of a vendor; an empty one (defaults only) when none is shipped."""
    from hetero_exporter import vendors  # the spec says where the vendor package keeps its table
    spec = vendors.spec(vendor)
    path = spec.data_path(spec.fault_table) if spec is not None else None
    if path is None or not path.is_file():
        return FaultTable(vendor, "", FaultInfo("*", "unknown", "none", "warning", known=False), {})
    return parse_table(yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER), str(path))


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
