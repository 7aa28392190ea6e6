"""The remedy's settings: the ``health:`` section of the agent config (docs/health.md: Health and
Kubernetes), checked key by key with one line naming the key (hetero_exporter/validate.py)."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from hetero_exporter import validate as v
from hetero_exporter.health.plan import classes as classes_mod
from hetero_exporter.model.keys import DEFAULT_DOMAIN, Keys

MODES = ("observe", "dry-run", "enforce")
CONDITION_TYPE = "AcceleratorUnhealthy"
SCHEDULERS = ("volcano", "hami")  # integrations of health.scheduler_annotations
# where the selection labels go (health.inventory_labels): the Node's own labels, or an NFD
# NodeFeature object that nfd-master turns into the Node's labels (docs/nodefeature.md)
INVENTORY_OUTLETS = ("labels", "nodefeature")
DEFAULT_BUDGET_NAMESPACE = "hetero-exporter"  # the agent's namespace when POD_NAMESPACE does not say
# keys of the config's health section that are not remedy settings
OTHER_HEALTH_KEYS = frozenset({"policy", "pci_presence", "udev", "promote"})
DNS_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"


@dataclass(frozen=True)
class RemedyConfig:
    """``health:`` section of the agent config (see docs/health.md)."""

    mode: str = "observe"
    domain: str = DEFAULT_DOMAIN
    cordon: bool = False  # opt-in: also mark the node unschedulable
    no_execute: bool = False  # opt-in: also a NoExecute taint (evicts pods without a toleration)
    inventory: bool = True  # the devices annotation and the selection labels
    # opt-in "nodefeature": the selection labels as an NFD NodeFeature in the agent's namespace
    # instead of labels on the Node (which then carries none of ours; docs/nodefeature.md)
    inventory_labels: str = "labels"
    nodefeature_namespace: str = ""  # the NodeFeature's namespace: "" = $POD_NAMESPACE, else hetero-exporter
    condition_heartbeat_seconds: float = 300.0
    inventory_heartbeat_seconds: float = 120.0
    inventory_max_bytes: int = 65536
    budget_max_fraction: float = 0.1  # share of accelerator nodes that may carry the taint
    budget_min_nodes: int = 1  # this many may always carry it, whatever the fleet size
    outbox_seconds: float = 1800.0  # below the API server's 1 h event TTL
    outbox_max: int = 40
    conflict_retries: int = 3
    resync_seconds: float = 60.0  # re-read the Node at least this often when nothing changed
    # per-device signals (issue 15; DESIGN.md: Kubernetes surface)
    device_taints: bool = True  # a DeviceTaintRule per failed device (where DRA is served)
    device_taint_no_execute: bool = False  # opt-in: NoExecute instead of NoSchedule
    device_taint_degraded: bool = False  # opt-in: effect None for degraded devices
    pod_conditions: bool = True  # <domain>/AcceleratorHealthy on pods holding a failed device
    pod_events: bool = True  # a Warning event on such pods
    evict_pods: bool = False  # opt-in: evict them (Eviction API, honours PDBs)
    scheduler_annotations: tuple[str, ...] = ()  # opt-in integrations: "volcano", "hami"
    black_hole: bool = True  # node faults for a Ready node that rejects accelerator pods
    admission_failures_min: int = 3  # failed admissions within the window that make a black hole
    admission_window_seconds: float = 600.0
    allocatable_grace_seconds: float = 300.0  # allocatable below healthy devices for this long
    # the vendors' device plugin and DRA kubelet plugin pods (issue 38 §4, stack.py): crash-looping,
    # not Ready for stack_grace_seconds, or none of a present vendor's running: a node reason, no taint
    stack: bool = True
    stack_grace_seconds: float = 300.0
    fleet_budget: bool = True  # the taint budget through Lease slots (else the node count alone)
    budget_namespace: str = ""  # the Leases' namespace: "" = $POD_NAMESPACE, else hetero-exporter
    budget_lease_seconds: float = 600.0  # a slot of a node that stopped renewing expires after this
    # up to this many accelerator nodes, the fleet budget lists each Node whole (a taint anyone put
    # there counts); above, their names (a Table) and the nodes with the taint's mirror label only
    budget_whole_listing_max_nodes: int = 500
    # device classes (issue 38): first match wins; a device of none keeps the settings above (classes.py)
    classes: tuple[classes_mod.DeviceClass, ...] = ()

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], mode: Optional[str] = None) -> "RemedyConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known - OTHER_HEALTH_KEYS)
        if unknown:
            raise ValueError(f"health: unknown keys {unknown}; known: {sorted(known | OTHER_HEALTH_KEYS)}")
        values = {k: CHECKS[k](v.join("health", k), x) if k in CHECKS else x
                  for k, x in raw.items() if k in known}
        if isinstance(values.get("inventory"), str):  # inventory: nodefeature (or labels): on, and where
            outlet = values.pop("inventory")
            if values.setdefault("inventory_labels", outlet) != outlet:
                raise ValueError(f"health.inventory {outlet!r} and health.inventory_labels "
                                 f"{values['inventory_labels']!r} disagree; set one of them")
            values["inventory"] = True
        cfg = cls(**values)
        if mode is not None:
            cfg = dataclasses.replace(cfg, mode=mode)
        if cfg.mode not in MODES:
            raise ValueError(f"health.mode must be one of {MODES}, got {cfg.mode!r}")
        if not re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?", cfg.domain):
            raise ValueError(f"health.domain {cfg.domain!r} is not a DNS subdomain")
        if not 0.0 <= float(cfg.budget_max_fraction) <= 1.0:
            raise ValueError("health.budget_max_fraction must be between 0 and 1")
        return cfg

    @property
    def keys(self) -> Keys:
        return Keys(self.domain)

    @property
    def taint_key(self) -> str:
        return self.keys.taint

    @property
    def device_taint_key(self) -> str:
        """The key of the DeviceTaintRules' taint: the node taint's."""
        return self.taint_key

    @property
    def pod_condition_type(self) -> str:
        return self.keys.pod_condition

    @property
    def devices_annotation(self) -> str:
        return self.keys.devices

    @property
    def book_annotation(self) -> str:
        return self.keys.agent_state

    @property
    def present_label(self) -> str:
        return self.keys.accelerator

    @property
    def effects(self) -> tuple[str, ...]:
        return ("NoSchedule", "NoExecute") if self.no_execute else ("NoSchedule",)

    @property
    def class_default(self) -> classes_mod.DevicePolicy:
        """What is done for a failed device of no class: the node-wide settings."""
        return classes_mod.default_policy(self.device_taint_no_execute, self.cordon, self.evict_pods)

    def lease_namespace(self, environ: Mapping[str, str] = os.environ) -> str:
        """Where the budget's Leases live: budget_namespace, else the agent's own namespace
        (POD_NAMESPACE, from the downward API) when it is a DNS label, else hetero-exporter."""
        return self.budget_namespace or agent_namespace(environ)

    @property
    def nodefeature(self) -> bool:
        """The selection labels go to an NFD NodeFeature, not to the Node."""
        return self.inventory and self.inventory_labels == "nodefeature"

    def nodefeature_home(self, environ: Mapping[str, str] = os.environ) -> str:
        """The NodeFeature's namespace: nodefeature_namespace, else the agent's own (as the Leases')."""
        return self.nodefeature_namespace or agent_namespace(environ)


def agent_namespace(environ: Mapping[str, str] = os.environ) -> str:
    """The agent's own namespace: POD_NAMESPACE (the DaemonSets set it from the downward API)
    when it is a DNS label, else hetero-exporter (deploy/base's namespace)."""
    own = environ.get("POD_NAMESPACE", "")
    return own if re.fullmatch(DNS_LABEL, own) else DEFAULT_BUDGET_NAMESPACE


def _inventory(path: str, value: Any) -> Any:
    """``health.inventory``: true / false, or where the selection labels go (``labels``,
    ``nodefeature``: on, published that way); a quoted "true" is refused like every boolean."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, str):
        return v.boolean(path, value)  # its one-line error names the key
    return v.string(path, value, choices=INVENTORY_OUTLETS)


def _number(minimum: float, maximum: float, integer: bool = False) -> Callable[[str, Any], Any]:
    unit = "" if integer else "seconds"

    def check(path: str, value: Any) -> Any:
        n = v.number(path, value, minimum=minimum, maximum=maximum, integer=integer, unit=unit)
        return int(n) if integer else float(n)
    return check


def _schedulers(path: str, value: Any) -> tuple[str, ...]:
    items = list(value) if isinstance(value, tuple) else value
    names = v.list_of(path, items, lambda p, x: v.string(p, x, choices=SCHEDULERS), max_items=len(SCHEDULERS))
    twice = [n for i, n in enumerate(names) if n in names[:i]]
    if twice:
        raise v.ValidationError(path, f"{twice[0]!r} is listed twice", SCHEDULERS)
    return tuple(names)


def _namespace(path: str, value: Any) -> str:
    """A namespace name (a DNS label); "" is the default: the agent's own namespace."""
    if value == "":
        return value
    return v.string(path, value, pattern=DNS_LABEL, max_length=63)


# The checks of the issue-15 keys (the config file's are in config.py; these also hold for a
# RemedyConfig made from a mapping in code).
CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "device_taints": v.boolean, "device_taint_no_execute": v.boolean, "device_taint_degraded": v.boolean,
    "pod_conditions": v.boolean, "pod_events": v.boolean, "evict_pods": v.boolean,
    "scheduler_annotations": _schedulers, "black_hole": v.boolean,
    "admission_failures_min": _number(1, 1000, integer=True),
    "admission_window_seconds": _number(10.0, 86400.0),
    "allocatable_grace_seconds": _number(0.0, 86400.0),
    "stack": v.boolean, "stack_grace_seconds": _number(0.0, 86400.0),
    "fleet_budget": v.boolean, "budget_namespace": _namespace,
    "budget_lease_seconds": _number(30.0, 86400.0),
    "budget_whole_listing_max_nodes": _number(0, 1_000_000, integer=True),
    "inventory_labels": lambda p, x: v.string(p, x, choices=INVENTORY_OUTLETS),
    "inventory": lambda p, x: _inventory(p, x),
    "nodefeature_namespace": _namespace,
    "classes": classes_mod.parse,
}
