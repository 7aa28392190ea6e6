"""The vendor specs the agent knows: the built-in vendor packages plus plugins.

The built-in packages are listed in one static table, ``hetero_exporter.collectors.BUILTIN``
(in collectors/, beside the packages; the core names no vendor). A third-party package
registers its ``VendorSpec`` under the entry-point group ``hetero_exporter.collectors``
(``myvendor = "mypkg:SPEC"``). A plugin that only exposes a module with ``create(options)``
(the older form) becomes a collector without a spec.

Loading a spec imports only the vendor package's ``__init__`` (data and pure hooks), never a
binding; specs are loaded once per process.
"""

from __future__ import annotations

import functools
import importlib
import logging
import re
import sys
from pathlib import Path
from typing import Any, Optional

from hetero_exporter.model.spec import CollectorEntry, ResourceName, ToolSpec, VendorSpec

__all__ = ["CollectorEntry", "ResourceName", "ToolSpec", "VendorSpec", "specs", "spec", "names",
           "pci_vendors", "pci_ignored", "resource_domains", "id_prefixes", "ENTRY_POINT_GROUP", "register", "load"]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "hetero_exporter.collectors"
_COLLECTORS_PACKAGE = "hetero_exporter.collectors"
_extra: dict[str, VendorSpec] = {}  # registered at run time (tests, embedding programs)
_plugin_collectors: dict[str, CollectorEntry] = {}


def load(dotted: str) -> Any:
    """``module`` or ``module:attr``, imported now."""
    module, _, attr = dotted.partition(":")
    mod = importlib.import_module(module)
    return getattr(mod, attr) if attr else mod


@functools.lru_cache(maxsize=None)
def _builtin() -> tuple[VendorSpec, ...]:
    table = importlib.import_module(_COLLECTORS_PACKAGE)
    out = []
    for name in getattr(table, "BUILTIN", ()):
        out.append(importlib.import_module(f"{_COLLECTORS_PACKAGE}.{name}").SPEC)
    return tuple(out)


_GROUP_HEADER = re.compile(r"^\s*\[\s*" + re.escape(ENTRY_POINT_GROUP) + r"\s*\]", re.M)
_ENTRY_POINT_FILES = ("*.dist-info/entry_points.txt", "*.egg-info/entry_points.txt", "EGG-INFO/entry_points.txt")


def _may_declare_plugins() -> bool:
    """Whether a distribution on ``sys.path`` may declare the plugin group. A cheap look at the
    ``entry_points.txt`` files first: importlib.metadata (with zipfile and csv) costs ~0.8 MiB
    of resident memory (BENCHMARKS.md) and is imported only where a file names the group. A
    path entry that is not a directory (a zip), or a meta-path finder with distributions of
    its own, is left to importlib.metadata."""
    from importlib.machinery import PathFinder
    if any(hasattr(f, "find_distributions") and f is not PathFinder for f in sys.meta_path):
        return True
    for entry in sys.path:
        root = Path(entry or ".")
        try:
            if not root.exists():
                continue
            if not root.is_dir():
                return True
            for pattern in _ENTRY_POINT_FILES:
                for f in root.glob(pattern):
                    if _GROUP_HEADER.search(f.read_text(encoding="utf-8", errors="replace")):
                        return True
        except OSError:
            return True  # unreadable: let importlib.metadata decide (and fail softly)
    return False


@functools.lru_cache(maxsize=None)
def _plugins() -> tuple[VendorSpec, ...]:
    if not _may_declare_plugins():
        return ()
    from importlib import metadata
    try:
        eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # noqa: BLE001 - a broken plugin distribution must not stop the agent
        return ()
    out = []
    for ep in eps:
        try:
            obj = ep.load()
        except Exception as e:  # noqa: BLE001 - reported, the other vendors go on
            log.warning("plugin %s (%s) cannot be loaded: %s", ep.name, ep.value, e)
            continue
        obj = getattr(obj, "SPEC", obj)
        if isinstance(obj, VendorSpec):
            out.append(obj)
        elif hasattr(obj, "create"):
            _plugin_collectors.setdefault(ep.name, CollectorEntry(ep.name, "", ep.value,
                                                                  description=f"plugin {ep.value}"))
    return tuple(out)


def specs() -> dict[str, VendorSpec]:
    """Every known vendor by name (built-ins first; a plugin cannot replace a built-in)."""
    out: dict[str, VendorSpec] = {}
    for s in (*_builtin(), *_plugins(), *_extra.values()):
        out.setdefault(s.name, s)
    return out


def spec(vendor: str) -> Optional[VendorSpec]:
    return specs().get(vendor)


def uuid_prefix(vendor: str) -> str:
    """The prefix of the vendor's device uuids (``GPU-`` for NVIDIA's); '' for an unknown vendor."""
    s = spec(vendor)
    return s.uuid_prefix if s is not None else ""


def device_resource(vendor: str, model: str) -> str:
    """The extended resource a whole device of ``model`` is allocated as on its node (the spec's
    ``device_resource``: ``nvidia.com/gpu``, ``huawei.com/Ascend910``); '' for an unknown vendor."""
    s = spec(vendor)
    return s.device_resource(model or "") if s is not None else ""


_generation = [0]  # bumped when the set of specs changes: readers that cache spec data compare it


def generation() -> int:
    """Changes whenever a spec is registered or unregistered (see ``register``)."""
    return _generation[0]


def register(s: VendorSpec) -> None:
    """Add a spec at run time (a test's throwaway vendor, a program embedding the agent);
    readers that cache what the specs say (profiles, the indexes here) see it."""
    _extra[s.name] = s
    _generation[0] += 1
    _index.cache_clear()


def unregister(name: str) -> None:
    _extra.pop(name, None)
    _generation[0] += 1
    _index.cache_clear()


def plugin_collectors() -> dict[str, CollectorEntry]:
    """Collectors of plugins that registered a bare ``create`` module instead of a spec."""
    _plugins()
    return dict(_plugin_collectors)


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, Any]:
    pci: dict[int, str] = {}
    ignored: set[tuple[int, int]] = set()
    domains: dict[str, str] = {}
    prefixes: list[str] = []
    for s in specs().values():
        for vid in s.pci_vendor_ids:
            pci.setdefault(vid, s.name)
            ignored.update((vid, did) for did in s.pci_ignored_device_ids)
        for d in s.resource_domains:
            domains.setdefault(d.lower(), s.name)
        for p in s.id_prefixes:
            if p.lower() not in prefixes:
                prefixes.append(p.lower())
    return {"pci": pci, "pci_ignored": frozenset(ignored), "domains": domains, "prefixes": tuple(prefixes)}


def pci_vendors() -> dict[int, str]:
    """PCI vendor id (sysfs ``vendor``) -> vendor name."""
    return dict(_index()["pci"])


def pci_ignored() -> frozenset[tuple[int, int]]:
    """(PCI vendor id, device id) of functions in an accelerator class that are no accelerator
    (``spec.pci_ignored_device_ids``: BMC graphics)."""
    return _index()["pci_ignored"]


def resource_domains() -> dict[str, str]:
    """Extended-resource domain (``spec.resource_domains``, lower case) -> vendor name."""
    return dict(_index()["domains"])


def id_prefixes() -> tuple[str, ...]:
    """Every uuid prefix a device plugin may drop or add (``spec.id_prefixes``, lower case)."""
    return _index()["prefixes"]


def names() -> tuple[str, ...]:
    """The vendor names (identity.vendor) of every known spec."""
    return tuple(specs())
