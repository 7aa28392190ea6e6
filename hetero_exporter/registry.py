"""The collectors and offline parsers of every known vendor, read from the vendor specs.

Entries are dotted names, imported only when used, so the core never imports a vendor
module (or its binding) it does not need. Vendors come from hetero_exporter.vendors (the
built-in packages plus plugins registered under the entry-point group
``hetero_exporter.collectors``).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from hetero_exporter import vendors
from hetero_exporter.model.spec import CollectorEntry
from hetero_exporter.sdk.settings import CollectorSettings, ToolSettings

ENTRY_POINT_GROUP = vendors.ENTRY_POINT_GROUP

__all__ = ["CollectorEntry", "collector_entries", "collector_factory", "collector_settings", "parsers", "parser",
           "pci_vendors"]

# Parsers that are not a vendor's (TOOL -> "module:function")
_CORE_PARSERS = {
    "cgroup": "hetero_exporter.sources.attribution:parse_cgroup",  # /proc/<pid>/cgroup -> CgroupInfo
    "kernel-log": "hetero_exporter.sdk.kmsg:parse_text",  # dmesg / journalctl -k / /dev/kmsg -> events
}


def collector_entries() -> dict[str, CollectorEntry]:
    """Collectors of every vendor, plus those of plugins that registered a bare module."""
    entries: dict[str, CollectorEntry] = {}
    for s in vendors.specs().values():
        for e in s.collectors:
            entries.setdefault(e.name, e)
    for name, e in vendors.plugin_collectors().items():
        entries.setdefault(name, e)
    return entries


def collector_factory(entry: CollectorEntry) -> Callable[..., Any]:
    """The entry's ``create`` function (ImportError propagates: the caller reports it)."""
    return vendors.load(entry.module).create


def collector_settings(entry: CollectorEntry) -> Optional[type[CollectorSettings]]:
    """The class of the entry's settings (its module's ``SETTINGS``; ToolSettings where it names
    none); None when the module cannot be imported (the collector says why when it runs)."""
    try:
        found = vendors.load(entry.module)
    except (ImportError, AttributeError):
        return None
    return getattr(found, "SETTINGS", ToolSettings)


def parsers() -> dict[str, str]:
    """TOOL -> "module:function"; the function takes the captured text and returns a
    NodeSnapshot (or, for non-device tools such as cgroup, a model object with a to_dict())."""
    out = dict(_CORE_PARSERS)
    for s in vendors.specs().values():
        for tool, dotted in s.parsers.items():
            out.setdefault(tool, dotted)
    return out


def parser(tool: str) -> Callable[[str], Any]:
    table = parsers()
    try:
        return vendors.load(table[tool])
    except KeyError:
        known = ", ".join(sorted(table)) or "none yet"
        raise KeyError(f"no parser for {tool!r}; known tools: {known}") from None


def pci_vendors() -> dict[int, str]:
    """PCI vendor ids (sysfs "vendor") -> vendor name; used to count expected devices and to
    enable by default only the collectors whose hardware is present."""
    return vendors.pci_vendors()
