"""Promotion in a window (``health.promote``): N occurrences of a fault code on one device within
a window change the device's state to ``degraded`` or ``failed``, whatever the code's severity.

Any vendor's codes count alike (NVIDIA XIDs, npu-smi error codes, amdgpu RAS blocks, kernel-log
rules): a rule names the vendor, the code (a glob, case-insensitive) and the count, window and
target state. An occurrence is an event, not a poll: the collectors count a code's events in a
ledger (``Fault.count``, cumulative; a condition that stays active counts once per episode), so a
fault still listed at the next poll with the same count adds nothing, and a count grown by k adds
k occurrences, the newest at the fault's ``last_seen``, the others at the earliest time they can
have happened (the previous occurrence, else ``first_seen``: the window never counts an event
that may be older than it).

The occurrences are kept per device and code (``model.evaluation.Occurrences``, bounded: the
newest ``count`` of the largest matching rule, within its longest window; at most ``MAX_CODES``
codes a device) and go onto the Node with the sticky faults, so a restart does not forget them.
After a restart the collectors' ledgers start again: a condition that was active before (npu-smi's
error code still showing) is counted again only from its next episode.

While a rule holds (at least ``count`` occurrences in the last ``window_seconds``) the device's
verdict carries a reason with the code's class and action, severity critical (``to: failed``)
or warning (``to: degraded``), and the message ``promoted: 3 x 13 in 600 s``. A promotion never
lowers a state: a code already failing the device stays as it is. When the window no longer
holds enough occurrences the reason goes, and the device recovers like any other (hysteresis).
Pure: no clock, no I/O.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional

from hetero_exporter import validate as v
from hetero_exporter.model import DeviceSample, Fault
from hetero_exporter.model.evaluation import Occurrences

TARGETS = ("degraded", "failed")
SOURCE = "health.promote"  # Fault.source of a promoted reason
MAX_RULES = 64
MAX_COUNT = 1000
MAX_WINDOW_SECONDS = 7 * 86400.0
MAX_CODES = 64  # codes with occurrences kept per device
MAX_CODE_GLOB = 128
_KEYS = ("vendor", "code", "count", "window_seconds", "to")


@dataclass(frozen=True)
class PromoteRule:
    """``count`` occurrences of a code matching ``code`` (glob) on one device of ``vendor``
    within ``window_seconds`` make the device ``to`` (degraded | failed)."""

    vendor: str
    code: str
    count: int
    window_seconds: float
    to: str

    def matches(self, vendor: str, code: str) -> bool:
        return vendor == self.vendor and fnmatch.fnmatchcase(str(code).lower(), self.code.lower())

    def within(self, times: Iterable[float], now: float) -> list[float]:
        """The occurrences inside the window ending ``now``."""
        return [t for t in times if now - self.window_seconds < t <= now]


def _known_vendors() -> list[str]:
    from hetero_exporter import vendors
    return sorted(vendors.specs())


def _rule(path: str, raw: Any) -> PromoteRule:
    doc = v.mapping(path, raw, _KEYS)
    missing = [k for k in _KEYS if doc.get(k) is None]
    if missing:
        raise v.ValidationError(path, f"missing {', '.join(missing)}", ", ".join(_KEYS))
    code = v.string(v.join(path, "code"), doc["code"], max_length=MAX_CODE_GLOB, non_empty=True)
    return PromoteRule(
        vendor=v.string(v.join(path, "vendor"), doc["vendor"], choices=_known_vendors()),
        code=code,
        count=int(v.number(v.join(path, "count"), doc["count"], minimum=1, maximum=MAX_COUNT, integer=True)),
        window_seconds=float(v.number(v.join(path, "window_seconds"), doc["window_seconds"], minimum=1,
                                      maximum=MAX_WINDOW_SECONDS, unit="seconds")),
        to=v.string(v.join(path, "to"), doc["to"], choices=TARGETS))


def parse(path: str, value: Any) -> tuple[PromoteRule, ...]:
    """``health.promote``: the rules, each checked (a ValidationError names the entry, e.g.
    ``health.promote[1].window_seconds``). Rules already parsed pass through (a config parsed twice)."""
    if isinstance(value, tuple) and all(isinstance(r, PromoteRule) for r in value):
        return value
    return tuple(v.list_of(path, value, _rule, max_items=MAX_RULES))


def _matching(rules: Iterable[PromoteRule], vendor: str, code: str) -> list[PromoteRule]:
    return [r for r in rules if r.matches(vendor, code)]


def _when(value: Optional[float], now: float) -> Optional[float]:
    """A fault time as an occurrence time: never after ``now``; None when it is not a time."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return min(float(value), now)


def _new_times(f: Fault, delta: int, before: tuple[float, ...], keep: int, now: float) -> list[float]:
    """Times of ``delta`` new occurrences: the newest at ``last_seen``, the others at the earliest
    time they can have happened (after the previous one, else at ``first_seen``)."""
    last = _when(f.last_seen, now)
    last = now if last is None else last
    earliest = _when(f.first_seen, now)
    lo = before[-1] if before else (earliest if earliest is not None else last)
    lo = min(max(lo, earliest if earliest is not None else lo), last)
    n = min(delta, keep)
    return [lo] * (n - 1) + [last]


def record(prev: Mapping[str, Occurrences], prev_counts: Mapping[str, int], d: DeviceSample,
           rules: tuple[PromoteRule, ...], now: float) -> dict[str, Occurrences]:
    """The device's occurrences after this sample: ``prev`` (the last poll's, or restored from the
    Node), ``prev_counts`` (code -> the cumulative count seen at the last poll; empty after a
    restart) and the sample's faults."""
    vendor = d.identity.vendor
    mine = tuple(r for r in rules if r.vendor == vendor)
    if not mine:
        return {}
    active = {str(f.code) for f in d.report.reasons}
    out: dict[str, Occurrences] = {}
    listed: set[str] = set()
    for f in d.faults:
        code = str(f.code)
        matching = _matching(mine, vendor, code)
        if not matching or code in listed:
            continue
        listed.add(code)
        old = prev.get(code, Occurrences())
        before = prev_counts.get(code)
        if before is None:  # first sighting (or the first after a restart: the ledger started again)
            delta = f.count - (1 if old.active and code in active else 0)
        else:
            delta = f.count - before  # a count that fell: the ledger restarted, no event known
        times = old.times + tuple(_new_times(f, delta, old.times, max(r.count for r in matching), now)
                                  if delta > 0 else ())
        out[code] = _kept(code, times, code in active, matching, now)
    for code, old in prev.items():
        matching = _matching(mine, vendor, code)
        if code not in listed and matching:
            out[code] = _kept(code, old.times, False, matching, now)
    out = {c: o for c, o in out.items() if o.times or o.active}
    if len(out) > MAX_CODES:  # the most recently seen codes stay
        newest = sorted(out, key=lambda c: (out[c].times[-1] if out[c].times else -math.inf, c))[-MAX_CODES:]
        out = {c: out[c] for c in sorted(newest)}
    return out


def _kept(code: str, times: Iterable[float], active: bool, matching: list[PromoteRule], now: float) -> Occurrences:
    window = max(r.window_seconds for r in matching)
    keep = max(r.count for r in matching)
    inside = sorted(t for t in times if now - window < t <= now)
    return Occurrences(tuple(inside[-keep:]), active)


def promoted(occurrences: Mapping[str, Occurrences], d: DeviceSample, rules: tuple[PromoteRule, ...], now: float,
             classify: Callable[[str, Fault], Fault]) -> dict[str, Fault]:
    """code -> the promoted reason, for every code whose rule holds now (``failed`` before
    ``degraded`` when several rules match a code; the first such rule in the list)."""
    vendor = d.identity.vendor
    by_code = {str(f.code): f for f in d.faults}
    out: dict[str, Fault] = {}
    for code, occ in sorted(occurrences.items()):
        held = [(r, r.within(occ.times, now)) for r in _matching(rules, vendor, code)]
        held = [(r, ts) for r, ts in held if len(ts) >= r.count]
        if not held:
            continue
        rule, ts = sorted(held, key=lambda rt: TARGETS.index(rt[0].to), reverse=True)[0]
        base = classify(vendor, by_code.get(code) or Fault(code=code))
        out[code] = Fault(code=code, fault_class=base.fault_class, action=base.action,
                          severity="critical" if rule.to == "failed" else "warning",
                          message=f"promoted: {len(ts)} x {code} in {rule.window_seconds:g} s",
                          first_seen=ts[0], last_seen=ts[-1], count=len(ts), source=SOURCE)
    return out


def apply(promotions: Mapping[str, Fault], failed: list[Fault], degraded: list[Fault]) -> tuple[list[Fault], list[Fault]]:
    """The reasons of this poll with the promotions: a promotion to failed replaces its code's
    other reasons; one to degraded does so unless its code already fails the device (a promotion
    never lowers a state)."""
    failing = {f.code for f in failed}
    up = {c for c, f in promotions.items() if f.severity == "critical"}
    side = {c for c, f in promotions.items() if f.severity != "critical" and c not in failing}
    failed = [f for f in failed if f.code not in up] + [promotions[c] for c in sorted(up)]
    degraded = [f for f in degraded if f.code not in up | side] + [promotions[c] for c in sorted(side)]
    return failed, degraded
