"""VendorSpec: everything the core needs to know about one vendor, declared in one place.

Each vendor package (``collectors/<vendor>/__init__.py``) declares a ``SPEC``; the core
(registry, profiles, PCI presence, scoring resource names, PodResources id mapping, the
simulated kubelet, the CLI runner's host paths) reads these specs and names no vendor itself.
A spec is plain data plus a few pure hooks; importing a vendor package's ``__init__`` must stay
cheap and import no binding (bindings load lazily in the collector modules).

Dotted references (``"module:attr"``) keep the heavy parts (collectors, parsers, version
discovery) unloaded until used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional


@dataclass(frozen=True)
class CollectorEntry:
    """A collector of a vendor: ``module`` exposes ``create(options) -> Collector``
    (``module:attr`` names another factory object with a ``create``)."""

    name: str
    vendor: str
    module: str
    default: bool = True  # enabled unless --no-collector.NAME (subject to PCI presence)
    description: str = ""
    source: str = ""  # README's collector table: what it reads ("`efsmi` (+ node-wide `efsmi -q` every 60 s)")
    notes: str = ""  # README's collector table: what it reports, and when it is off by default


@dataclass(frozen=True)
class ResourceName:
    """An extended resource a device plugin (or HAMi) advertises for this vendor.

    ``pattern`` is matched whole against the pod's resource name; ``group`` (may use the
    pattern's groups, ``\\1``) is the resource a device is allocated as on its node, so
    devices of different groups never serve one allocation; ``unit``: ``devices`` (whole
    devices), ``slices`` (a share of one device), ``memory_mib`` (memory per device, MiB).
    ``source`` cites where the name is documented."""

    pattern: str
    group: str
    unit: str = "devices"
    features: tuple[str, ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        if self.unit not in ("devices", "slices", "memory_mib"):
            raise ValueError(f"ResourceName {self.pattern!r}: unit {self.unit!r} is not devices|slices|memory_mib")
        object.__setattr__(self, "_re", re.compile(self.pattern))

    def match(self, name: str) -> Optional[str]:
        """The group a pod's resource ``name`` belongs to, or None when it does not match."""
        m = self._re.fullmatch(name)  # type: ignore[attr-defined]
        return m.expand(self.group) if m else None


PLUGIN_COMPONENTS = ("device-plugin", "dra-kubelet-plugin")
_LABEL_TERM = re.compile(r"(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
                         r"=[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


@dataclass(frozen=True)
class PluginSelector:
    """The pods of a vendor's device plugin or DRA kubelet plugin, found by the label their
    published manifest puts on the pod template, in any namespace. ``component``:
    ``device-plugin`` | ``dra-kubelet-plugin``; ``selector``: equality terms
    (``app.kubernetes.io/name=nvidia-device-plugin``); ``source``: the manifest it comes from."""

    component: str
    selector: str
    source: str = ""

    def __post_init__(self) -> None:
        if self.component not in PLUGIN_COMPONENTS:
            raise ValueError(f"PluginSelector {self.selector!r}: component {self.component!r} is not one of "
                             f"{PLUGIN_COMPONENTS}")
        if not self.selector or not all(_LABEL_TERM.fullmatch(t) for t in self.selector.split(",")):
            raise ValueError(f"PluginSelector {self.selector!r}: not key=value terms separated by commas")

    def labels(self) -> dict[str, str]:
        return dict(t.split("=", 1) for t in self.selector.split(","))


@dataclass(frozen=True)
class ToolSpec:
    """A vendor command-line tool: where the vendor installs it on a host (``dirs``, searched
    after PATH: below the host root first in a container, then as they are), the driver
    library folders it needs on ``LD_LIBRARY_PATH`` when it runs from the host root
    (``library_dirs``, host paths; a component may be a glob, ``lib64/*``), environment
    variables it reads that the agent passes on when set (``env``), and variables that name
    the vendor's install folder (``home_env``: (VAR, host folder); set to that folder below
    the host root when the agent's environment leaves them unset). sdk/host_tools.py runs it."""

    name: str
    dirs: tuple[str, ...] = ("/usr/local/bin", "/usr/bin", "/usr/local/sbin", "/usr/sbin")
    library_dirs: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    why_missing: str = ""  # what a missing tool usually means ("driver tools not installed")
    home_env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class VersionInfo:
    """What a vendor's version discovery found on the host (``VendorSpec.versions``)."""

    runtime_version: Optional[str] = None  # the vendor runtime / toolkit version, as the vendor prints it
    driver_version: Optional[str] = None
    source: Optional[str] = None  # the file or call the runtime version came from


@dataclass(frozen=True)
class VendorSpec:
    """One vendor's facts (see the module docstring)."""

    name: str  # identity.vendor
    kind: str  # identity.kind: gpu|npu|mlu|dcu|gcu|xpu
    display_name: str
    package: str  # the vendor package's dotted name (data files are found beside it)
    pci_vendor_ids: tuple[int, ...] = ()
    # device ids of the vendor's functions in an accelerator PCI class that are not accelerators
    # (a server's BMC graphics): never expected from the vendor tool
    pci_ignored_device_ids: tuple[int, ...] = ()
    # model normalization: marketing prefixes stripped from unknown product strings, and a
    # prefix put back when the cleaned name starts with a digit ("910B3" -> "<prefix>910B3")
    model_strip: str = ""
    model_digit_prefix: str = ""
    # Kubernetes: device plugin / HAMi resources; domains whose resources (and DRA drivers,
    # gpu.<domain>) belong to this vendor; the resource a whole device is allocated as
    resources: tuple[ResourceName, ...] = ()
    resource_domains: tuple[str, ...] = ()
    device_resource: Callable[[str], str] = lambda model: ""
    # device plugin ids: uuid prefixes a plugin may drop or add ("GPU-", "MIG-"), and the id
    # the vendor's plugin gives a device (the simulated kubelet serves it)
    id_prefixes: tuple[str, ...] = ()
    plugin_device_id: Callable[[Any], str] = lambda identity: identity.uuid
    uuid_prefix: str = ""  # how the vendor's uuids start (simulated devices get it)
    # its device indices are the ones Volcano's gpu-unhealthy-ids node annotation names (the
    # GPU-share plugin reads the NVIDIA device plugin's indices; another vendor's would collide)
    volcano_gpu_indices: bool = False
    fabric_links: tuple[str, ...] = ()  # Link.type values of the vendor's own fabric
    # the pods of its device plugins and DRA kubelet plugins (stack health, health/plan/stack.py)
    plugin_pods: tuple[PluginSelector, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    collectors: tuple[CollectorEntry, ...] = ()
    parsers: Mapping[str, str] = field(default_factory=dict)  # parse TOOL -> "module:function"
    fault_table: str = "faults.yaml"  # beside the package's __init__.py
    profiles: str = "profiles.yaml"
    # "module:function" (host_root: str) -> VersionInfo, for driver/runtime discovery outside
    # the tool's own output (a version file of the runtime install); None when the tool says it
    versions: Optional[str] = None
    kernel_log: Optional[str] = None  # kernel-log rules data file beside the fault table ("kernel_log.yaml"; sdk/kmsg.py)
    # The field catalogue (model/fields.py), per field by its catalogue name: where a reading comes
    # from when no quality table of the vendor's collectors names it (fields made at run time, such
    # as per-block ECC), and why the vendor cannot have a field ("*": every field not named).
    # docs/metrics.md shows them; tests/test_catalogue.py checks every field is one or the other.
    field_sources: Mapping[str, str] = field(default_factory=dict)
    unsupported: Mapping[str, str] = field(default_factory=dict)

    def data_path(self, relative: str) -> Path:
        """A data file of the vendor package (fault table, profiles)."""
        import importlib.util
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"vendor package {self.package} not found")
        return Path(list(spec.submodule_search_locations)[0]) / relative

    def tool(self, name: str) -> Optional[ToolSpec]:
        return next((t for t in self.tools if t.name == name), None)

    def resource_group(self, name: str) -> Optional[tuple[ResourceName, str]]:
        for r in self.resources:
            g = r.match(name)
            if g is not None:
                return r, g
        return None

    def missing(self) -> list[str]:
        """What a complete spec lacks (the contract tests ask for none missing; docs/DEVELOPING.md,
        Adding a vendor): its required fields; each tool's ``library_dirs`` (a tool runs from the
        host root with its driver libraries, unless a container toolkit mounts it with them, which
        its ``why_missing`` then names, as nvidia-smi's does); and a source or a reason for every
        field of the catalogue (model/fields.py): ``unsupported["*"]``, the reason for each field
        neither its collectors' quality tables nor ``field_sources`` give, and no key of
        ``field_sources`` / ``unsupported`` that is not a catalogue field."""
        from hetero_exporter.model import fields as F  # lazily: the specs load at start, this in tests

        out = []
        for f in ("name", "kind", "display_name", "package", "pci_vendor_ids", "resources",
                  "resource_domains", "collectors", "parsers", "tools"):
            if not getattr(self, f):
                out.append(f)
        if not self.device_resource("x"):
            out.append("device_resource")
        out += [f"tools[{t.name}].library_dirs" for t in self.tools
                if not t.library_dirs and "container toolkit" not in t.why_missing]
        if not self.unsupported.get("*"):
            out.append('unsupported["*"]')
        names = {f.name for f in F.CATALOGUE}
        out += [f"{where}[{k!r}] (not a catalogue field)" for where, keys in
                (("field_sources", self.field_sources), ("unsupported", self.unsupported))
                for k in keys if k != "*" and k not in names]
        return out
