"""The health policy (data in ``policy.yaml``, overridable by the agent config) as typed values.

Pure: parsing a mapping into frozen dataclasses; ``load(overrides)`` merges the configured
``health.policy`` section over the shipped file. A bad value raises ``PolicyError`` naming the key.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from hetero_exporter import validate, vendors
from hetero_exporter.health.detect import promote as promote_rules
from hetero_exporter.model import ACTIONS, SEVERITIES, Fault
from hetero_exporter.model.errors import InputError
from hetero_exporter.model.faults import Catalogue, FaultTable, FaultTableError, shipped_table

POLICY_FILE = Path(__file__).with_name("policy.yaml")
# Evidence that a sticky fault's recommended action happened (policy.yaml says what each means):
# boot (node boot id changed), reset (a reset code or a reset counter going backwards), recovery
# (the vendor's recovery-action reading back to none after asking for one), readable (the device
# really lost, then reading again).
CLEAR_EVIDENCE = ("boot", "reset", "recovery", "readable")


class PolicyError(InputError):
    """The health policy cannot be used (the message names the key): exit 2."""


def vendor_table(vendor: str) -> FaultTable:
    """The fault table a vendor's package ships (its spec says where)."""
    return shipped_table(vendor, vendors.spec(vendor))


def shipped_catalogue() -> Catalogue:
    """The vendors' tables as shipped (no override)."""
    return Catalogue(vendor_table)


@dataclass(frozen=True)
class ClassPolicy:
    """What a fault class means over time: sticky until evidence, node-level or not."""

    sticky: bool = False
    clear_on: frozenset[str] = frozenset({"boot"})
    node_level: bool = False


@dataclass(frozen=True)
class ReadingRule:
    """A threshold on one reading field (base units). Exactly one trigger is set."""

    code: str
    field: str
    severity: str = "warning"
    fault_class: str = "threshold"
    action: str = "none"
    above: Optional[float] = None
    below: Optional[float] = None
    clear_below: Optional[float] = None  # hysteresis for `above`
    clear_above: Optional[float] = None  # hysteresis for `below`
    increase: Optional[float] = None
    rate_above: Optional[float] = None  # per second
    below_field: Optional[str] = None
    above_field: Optional[str] = None

    @property
    def is_counter(self) -> bool:
        return self.increase is not None or self.rate_above is not None


@dataclass(frozen=True)
class Policy:
    k: int = 3
    n: int = 5
    recovery_polls: int = 3
    classes: Mapping[str, ClassPolicy] = field(default_factory=dict)
    actions: Mapping[str, ClassPolicy] = field(default_factory=dict)
    reset_codes: frozenset[str] = frozenset()
    reset_counters: tuple[str, ...] = ()  # counters that restart at a device reset / driver reload
    recovery_fields: tuple[str, ...] = ()  # vendor recovery-action readings (0 = no action asked)
    overrides: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)
    readings: tuple[ReadingRule, ...] = ()
    escalate_count: int = 3
    escalate_window_seconds: float = 86400.0
    escalate_action: str = "isolate-device"
    min_healthy_fraction: float = 0.5
    reason_prefix: Mapping[str, str] = field(default_factory=dict)
    # every vendor's fault table with the overrides applied (built by parse): what a code means
    catalogue: Catalogue = field(default_factory=shipped_catalogue)
    promote: tuple[promote_rules.PromoteRule, ...] = ()  # health.promote: N occurrences in a window (promote.py)

    def class_policy(self, fault: Fault) -> ClassPolicy:
        """The policy of a fault: by its class, else by its action, else not sticky."""
        return (self.classes.get(fault.fault_class) or self.actions.get(fault.action)
                or ClassPolicy())

    def classify(self, vendor: str, fault: Fault) -> Fault:
        """The fault with class/action/severity from a configured override of its code."""
        return self.catalogue.classify(vendor, fault)

    def node_level(self, fault: Fault) -> bool:
        return self.class_policy(fault).node_level

    def code_prefix(self, vendor: str) -> str:
        """What a numeric code of the vendor is called (``Xid``): the policy's ``reason_prefix``,
        else the vendor fault table's ``code_prefix``."""
        if vendor in self.reason_prefix:
            return self.reason_prefix[vendor]
        return self.catalogue.code_prefix(vendor)

    def condition_reason(self, vendor: str, code: str) -> str:
        """``<Vendor><Prefix><Code>`` condition reason in CamelCase (a valid Kubernetes reason;
        ``code_prefix`` goes before a code that starts with a digit)."""
        words = [w for w in re.split(r"[^A-Za-z0-9]+", str(code)) if w]
        body = "".join(w[:1].upper() + w[1:] for w in words) or "Unknown"
        prefix = self.code_prefix(vendor) if body[:1].isdigit() else ""
        head = "".join(w[:1].upper() + w[1:] for w in re.split(r"[^A-Za-z0-9]+", vendor) if w) or "Accelerator"
        return f"{head}{prefix}{body}"[:128]


def deep_merge(base: Any, over: Any) -> Any:
    """Maps merge key by key; anything else in ``over`` replaces."""
    if isinstance(base, Mapping) and isinstance(over, Mapping):
        out = dict(base)
        for k, v in over.items():
            out[k] = deep_merge(base.get(k), v) if k in base else v
        return out
    return over


def _num(raw: Mapping[str, Any], key: str, where: str) -> Optional[float]:
    v = raw.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise PolicyError(f"{where}.{key}: expected a number, got {v!r}")
    return float(v)


def _class_policy(raw: Any, where: str) -> ClassPolicy:
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where}: expected a mapping")
    clear = raw.get("clear_on", ["boot"])
    if not isinstance(clear, list) or any(c not in CLEAR_EVIDENCE for c in clear):
        raise PolicyError(f"{where}.clear_on: a list of {CLEAR_EVIDENCE}, got {clear!r}")
    return ClassPolicy(sticky=bool(raw.get("sticky", False)), clear_on=frozenset(clear),
                       node_level=bool(raw.get("node_level", False)))


def _rule(raw: Any, where: str) -> ReadingRule:
    if not isinstance(raw, Mapping) or not raw.get("code") or not raw.get("field"):
        raise PolicyError(f"{where}: a reading rule needs code and field")
    severity, action = str(raw.get("severity", "warning")), str(raw.get("action", "none"))
    if severity not in SEVERITIES:
        raise PolicyError(f"{where}.severity: one of {SEVERITIES}, got {severity!r}")
    if action not in ACTIONS:
        raise PolicyError(f"{where}.action: one of {ACTIONS}, got {action!r}")
    rule = ReadingRule(
        code=str(raw["code"]), field=str(raw["field"]), severity=severity,
        fault_class=str(raw.get("class", "threshold")), action=action,
        above=_num(raw, "above", where), below=_num(raw, "below", where),
        clear_below=_num(raw, "clear_below", where), clear_above=_num(raw, "clear_above", where),
        increase=_num(raw, "increase", where), rate_above=_num(raw, "rate_above", where),
        below_field=raw.get("below_field"), above_field=raw.get("above_field"))
    triggers = [x for x in (rule.above, rule.below, rule.increase, rule.rate_above,
                            rule.below_field, rule.above_field) if x is not None]
    if len(triggers) != 1:
        raise PolicyError(f"{where}: exactly one of above, below, increase, rate_above, "
                          f"below_field, above_field (got {len(triggers)})")
    return rule


def parse(doc: Mapping[str, Any], where: str = "policy") -> Policy:
    try:
        deb = doc.get("debounce") or {}
        k, n = int(deb.get("k", 3)), int(deb.get("n", 5))
        if not 1 <= k <= n <= 100:
            raise PolicyError(f"{where}.debounce: need 1 <= k <= n <= 100, got k={k} n={n}")
        esc = doc.get("escalation") or {}
        esc_action = str(esc.get("action", "isolate-device"))
        if esc_action not in ACTIONS:
            raise PolicyError(f"{where}.escalation.action: one of {ACTIONS}")
        frac = float(doc.get("min_healthy_fraction", 0.5))
        if not 0.0 <= frac <= 1.0:
            raise PolicyError(f"{where}.min_healthy_fraction: between 0 and 1, got {frac}")
        overrides = doc.get("overrides") or {}
        if not isinstance(overrides, Mapping):
            raise PolicyError(f"{where}.overrides: a mapping vendor -> code -> fields")
        policy = Policy(
            k=k, n=n, recovery_polls=max(1, int(doc.get("recovery_polls", 3))),
            classes={str(c): _class_policy(v, f"{where}.classes.{c}") for c, v in (doc.get("classes") or {}).items()},
            actions={str(a): _class_policy(v, f"{where}.actions.{a}") for a, v in (doc.get("actions") or {}).items()},
            reset_codes=frozenset(str(c) for c in doc.get("reset_codes") or ()),
            reset_counters=tuple(str(c) for c in doc.get("reset_counters") or ()),
            recovery_fields=tuple(str(c) for c in doc.get("recovery_fields") or ()),
            overrides={str(v): {str(c): dict(f or {}) for c, f in (codes or {}).items()}
                       for v, codes in overrides.items()},
            readings=tuple(_rule(r, f"{where}.readings[{i}]") for i, r in enumerate(doc.get("readings") or ())),
            escalate_count=max(1, int(esc.get("count", 3))),
            escalate_window_seconds=float(esc.get("window_seconds", 86400)),
            escalate_action=esc_action,
            min_healthy_fraction=frac,
            reason_prefix={str(k2): str(v) for k2, v in (doc.get("reason_prefix") or {}).items()})
    except (TypeError, ValueError, AttributeError) as e:
        if isinstance(e, PolicyError):
            raise
        raise PolicyError(f"{where}: {e}") from None
    try:  # fail now, not at the first fault
        catalogue = Catalogue.build(vendor_table, policy.overrides)
    except FaultTableError as e:
        raise PolicyError(f"{where}.overrides: {e}") from None
    return dataclasses.replace(policy, catalogue=catalogue)


@functools.lru_cache(maxsize=1)
def _shipped() -> dict:
    return validate.load_yaml(POLICY_FILE.read_text(encoding="utf-8")) or {}


def load(overrides: Optional[Mapping[str, Any]] = None, promote: Any = None) -> Policy:
    """The shipped policy with the configured overrides merged over it, and the configured
    promotions (``health.promote``, checked by ``promote.parse``)."""
    doc = deep_merge(_shipped(), dict(overrides or {}))
    policy = parse(doc, "health.policy" if overrides else str(POLICY_FILE))
    if promote:
        policy = dataclasses.replace(policy, promote=promote_rules.parse("health.promote", promote))
    return policy
