"""Vendor fault tables (data in each vendor package, ``collectors/<vendor>/faults.yaml``) and the
``Catalogue``: every vendor's table with the health policy's overrides applied.

A table maps a vendor's fault code (a driver event number, an error code, a RAS event...)
to what it means for the device: a fault class, a severity and the recommended action.
Collectors classify with the shipped tables (``sdk.faults``); the health policy loader builds
the one ``Catalogue`` the agent judges, words and counts faults by (rules, texts, announcements,
the fault counters of the judged snapshot).

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

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from hetero_exporter import validate
from hetero_exporter.errors import InputError
from hetero_exporter.model.spec import VendorSpec
from hetero_exporter.model.types import ACTIONS, SEVERITIES, Fault

# vendor -> code -> the fields an override sets (class, action, severity, description)
Overrides = Mapping[str, Mapping[str, Mapping[str, Any]]]


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


def empty_table(vendor: str) -> FaultTable:
    """The table of a vendor that ships none: defaults only."""
    return FaultTable(vendor, "", FaultInfo("*", "unknown", "none", "warning", known=False), {})


def parse_table(doc: Mapping[str, Any], where: str) -> FaultTable:
    if not isinstance(doc, Mapping) or "vendor" not in doc:
        raise FaultTableError(f"{where}: a fault table needs 'vendor' and 'faults'")
    default = _entry("*", doc.get("default") or {}, f"{where}: default", known=False)
    entries = {str(code): _entry(str(code), raw or {}, f"{where}: {code}")
               for code, raw in (doc.get("faults") or {}).items()}
    return FaultTable(str(doc["vendor"]), str(doc.get("source", "")), default, entries,
                      str(doc.get("code_prefix") or ""))


@functools.lru_cache(maxsize=None)
def read_table(vendor: str, path: Optional[str]) -> FaultTable:
    """The table in the file ``path`` (a vendor package's ``faults.yaml``, read once per process);
    ``empty_table`` for None."""
    if path is None:
        return empty_table(vendor)
    try:
        doc = validate.load_yaml(Path(path).read_text(encoding="utf-8"))
    except ValueError as e:  # validate.NotYaml: bad YAML or a duplicate key
        raise FaultTableError(f"{path}: not valid YAML: {e}") from None
    return parse_table(doc, path)


def shipped_table(vendor: str, spec: Optional[VendorSpec]) -> FaultTable:
    """The table the vendor's package ships (its spec says where); an empty one when none is."""
    path = spec.data_path(spec.fault_table) if spec is not None else None
    return read_table(vendor, str(path) if path is not None and path.is_file() else None)


@dataclass(frozen=True)
class Catalogue:
    """Every vendor's fault table with the policy's overrides applied: the one place the agent
    learns what a fault code means once configured. ``shipped(vendor)`` gives a vendor's own
    table (read when first asked, so a node reads only its vendors'); ``overrides`` are the
    configured codes, applied (and checked) when the catalogue is built (``build``)."""

    shipped: Callable[[str], FaultTable]
    overrides: Mapping[str, FaultTable] = field(default_factory=dict)  # vendor -> table with its overrides
    overridden: Mapping[str, frozenset[str]] = field(default_factory=dict)  # vendor -> configured codes
    _tables: dict[str, FaultTable] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(cls, shipped: Callable[[str], FaultTable], overrides: Overrides) -> "Catalogue":
        """The catalogue with ``overrides`` (vendor -> code -> fields) applied: FaultTableError
        names a bad one now, not at the first fault."""
        return cls(shipped, {vendor: shipped(vendor).with_overrides(codes) for vendor, codes in overrides.items()},
                   {vendor: frozenset(str(c) for c in codes) for vendor, codes in overrides.items()})

    def table(self, vendor: str) -> FaultTable:
        found = self.overrides.get(vendor) or self._tables.get(vendor)
        if found is None:  # two threads may both read it: the same table, cached by read_table
            found = self._tables[vendor] = self.shipped(vendor)
        return found

    def lookup(self, vendor: str, code: str) -> FaultInfo:
        return self.table(vendor).lookup(code)

    def code_prefix(self, vendor: str) -> str:
        return self.table(vendor).code_prefix

    def classify(self, vendor: str, fault: Fault) -> Fault:
        """The fault with class, action and severity of a configured override of its code (the
        collector classified it by the shipped table); any other fault as it is."""
        if str(fault.code) not in self.overridden.get(vendor, frozenset()):
            return fault
        info = self.lookup(vendor, fault.code)
        return dataclasses.replace(fault, fault_class=info.fault_class, action=info.action, severity=info.severity,
                                   message=fault.message or info.description)
