"""Health rules: pure functions from the history of snapshots to a verdict per device.

``step(state, snapshot, policy) -> (state, verdicts)`` folds one snapshot into the rule state;
``evaluate(history, policy)`` folds a whole history. The state is an immutable value, so the
same history always gives the same verdicts, and the stateful wrapper (health/detect/verdicts.py) only
keeps the latest state. What goes in:

- the collector's own health of each device (``failed`` = lost / fatal, ``degraded``,
  ``unknown`` = cannot read) and its reasons;
- new fault occurrences (a code seen for the first time or with a larger cumulative count),
  classified by the policy's fault catalogue (the vendor tables with its overrides);
- threshold rules on readings (temperature, ECC, retired pages, row remap, PCIe link).

What comes out, per device: ``ok | degraded | failed | unknown`` with the reasons (faults).
Critical faults fail a device at once; warnings must be seen in k of the last n readable polls
(debounce); sticky classes stay until evidence that the recommended action happened clears them
(``policy.CLEAR_EVIDENCE``: the node boot id changed, a device reset seen, the vendor's recovery
action back to none, the device really lost and readable again); a device that failed too often
is escalated; a device gets better only after ``recovery_polls`` consecutive better polls
(hysteresis), unless evidence cleared it. A device that cannot be read is ``unknown``, never
``failed`` on that account. A device that answers with a critical health code and then answers
ok has not been reset: answering again is evidence only after the device was really lost.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from hetero_exporter.health.detect import promote
from hetero_exporter.health.detect.policy import CLEAR_EVIDENCE, Policy, ReadingRule
from hetero_exporter.model import DeviceSample, Fault, NodeSnapshot
from hetero_exporter.model.evaluation import NodeVerdict, OccurrenceBook, Occurrences, StickyFault, Verdict

STATE_RANK = {"ok": 0, "unknown": 0, "degraded": 1, "failed": 2}
_SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
EVIDENCE_SOURCE = "kmsg"  # Fault.source of the kernel log (hetero_exporter/sources/kernel_log.py)
STALE_SOURCE = "sampler"  # Fault.source of a device carried over stale (sampling.mark_stale)


@dataclass(frozen=True)
class DeviceState:
    window: tuple[frozenset[str], ...] = ()  # warning codes of the last n readable polls
    warnings: Mapping[str, Fault] = field(default_factory=dict)  # latest fault per warning code
    active_rules: frozenset[str] = frozenset()  # threshold rules currently past their threshold
    counts: Mapping[str, int] = field(default_factory=dict)  # fault code -> cumulative count seen
    counters: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # field -> (time, value)
    sticky: Mapping[str, StickyFault] = field(default_factory=dict)
    state: str = "ok"
    better_streak: int = 0  # consecutive polls whose raw state was better than ``state``
    offenses: tuple[float, ...] = ()  # times the device entered failed
    vendor: str = ""  # of a top-level device once seen: an absent one is lost when its vendor's collector answered
    occurrences: Mapping[str, Occurrences] = field(default_factory=dict)  # code -> counted by health.promote
    promoted: frozenset[str] = frozenset()  # codes promoted at the last poll


@dataclass(frozen=True)
class State:
    boot_id: Optional[str] = None
    devices: Mapping[str, DeviceState] = field(default_factory=dict)
    promotions: Mapping[tuple[str, str, str], int] = field(default_factory=dict)  # (vendor, code, to) -> count


# --------------------------------------------------------------------------- readings


def _rule_fault(rule: ReadingRule, value: float, what: str, now: float) -> Fault:
    return Fault(code=rule.code, fault_class=rule.fault_class, action=rule.action, severity=rule.severity,
                 message=f"{rule.field} {value:g} {what}", first_seen=now, last_seen=now, source="health.rules")


def _check_rule(rule: ReadingRule, d: DeviceSample, active: bool,
                counters: dict[str, tuple[float, float]], now: float) -> Optional[Fault]:
    """The rule's fault when it holds on ``d`` (None when not, or when the field is absent)."""
    v = d.value(rule.field)
    if v is None:
        return None
    if rule.is_counter:
        prev = counters.get(rule.field)
        counters[rule.field] = (now, v)
        if prev is None or v < prev[1]:  # first sight, or the counter was reset (driver reload)
            return None
        grown = v - prev[1]
        if rule.increase is not None and grown >= rule.increase:
            return _rule_fault(rule, v, f"grew by {grown:g} since the previous poll", now)
        if rule.rate_above is not None and now > prev[0] and grown / (now - prev[0]) > rule.rate_above:
            return _rule_fault(rule, v, f"grows {grown / (now - prev[0]):.3g}/s (above {rule.rate_above:g}/s)", now)
        return None
    if rule.above is not None:
        limit = rule.clear_below if active and rule.clear_below is not None else rule.above
        hit = v >= limit if active and rule.clear_below is not None else v > limit
        return _rule_fault(rule, v, f"above {rule.above:g}", now) if hit else None
    if rule.below is not None:
        limit = rule.clear_above if active and rule.clear_above is not None else rule.below
        hit = v <= limit if active and rule.clear_above is not None else v < limit
        return _rule_fault(rule, v, f"below {rule.below:g}", now) if hit else None
    other_name = rule.below_field or rule.above_field
    other = d.value(other_name) if other_name else None
    if other is None:
        return None
    if rule.below_field is not None and v < other:
        return _rule_fault(rule, v, f"below {rule.below_field} {other:g}", now)
    if rule.above_field is not None and v > other:
        return _rule_fault(rule, v, f"above {rule.above_field} {other:g}", now)
    return None


# --------------------------------------------------------------------------- one device


def _order(faults: Iterable[Fault], vendor: str, policy: Policy) -> tuple[Fault, ...]:
    """Most important first: severity, node-level, a vendor catalogue code (the cause, e.g.
    a fell-off-the-bus event) before a synthetic one (the symptom, e.g. gpu-lost), then oldest."""
    table = policy.catalogue.table(vendor)

    def key(f: Fault) -> tuple:
        in_table = table.lookup(f.code).known
        return (_SEVERITY_RANK.get(f.severity, 3), not policy.node_level(f), not in_table,
                f.first_seen or 0.0, f.code)
    seen: dict[str, Fault] = {}
    for f in faults:
        seen.setdefault(f.code, f)
    return tuple(sorted(seen.values(), key=key))


def _unreachable(d: DeviceSample) -> bool:
    """Nothing of the device could be read this poll by its collector: NVML GPU_IS_LOST, a tool
    that no longer lists it, a device that cannot be identified (``unknown``), PCI presence's
    stand-in. A device that answers with a critical health code is not, and neither is a stale
    carry-over (its collector did not run this cycle, which says nothing about the device)."""
    if d.report.state not in ("failed", "unknown"):
        return False
    if any(f.source == STALE_SOURCE for f in d.report.reasons) or any(
            r.quality.status == "stale" for r in d.readings.values()):
        return False
    return not any(r.quality.status == "ok" for r in d.readings.values())


def _recovery(d: DeviceSample, policy: Policy) -> Optional[bool]:
    """True when a recovery-action reading asks for an action, False when every one reported
    reads 0 (none), None when the device reports none."""
    values = [v for v in (d.value(name) for name in policy.recovery_fields) if v is not None]
    return None if not values else any(v != 0 for v in values)


def _evidence(st: StickyFault, reset_seen: bool, recovery: Optional[bool], back: bool) -> Optional[str]:
    """The evidence in this poll that clears ``st``, if any (its ``clear_on`` says which count)."""
    if "reset" in st.clear_on and reset_seen:
        return "reset"
    if "recovery" in st.clear_on and st.recovery_pending and recovery is False:
        return "recovery"
    if "readable" in st.clear_on and st.seen_lost and back:
        return "readable"
    return None


def _device_step(s: DeviceState, d: DeviceSample, now: float, policy: Policy) -> tuple[DeviceState, Verdict]:
    """One poll of one device: the history ``s`` and this sample -> the new history and the verdict."""
    vendor = d.identity.vendor
    collector = d.report.state
    readable = collector in ("ok", "degraded")
    lost = collector == "failed"
    unreachable = _unreachable(d)
    recovery = _recovery(d, policy)

    counts, new = _new_occurrences(s, d, policy)
    occurrences = promote.record(s.occurrences, s.counts, d, policy.promote, now)
    promoted = promote.promoted(occurrences, d, policy.promote, now, policy.classify)
    reset_seen, counters = _reset_seen(s, d, new, readable, now, policy)
    sticky, cleared_by = _carry_sticky(s, reset_seen, recovery, readable, unreachable)
    cleared = sorted(cleared_by)
    critical, warning = _conditions(d, new, policy)
    active_rules = _reading_rules(s, d, readable, counters, now, policy, critical, warning)
    _start_sticky(critical, warning, sticky, policy, now, unreachable, recovery)
    window, warnings, confirmed, pending = _debounce(s, warning, readable, policy)

    # the raw state of this poll
    failed_reasons = list(critical.values()) + [st.fault for st in sticky.values() if st.level == "failed"]
    degraded_reasons = [warnings[c] for c in sorted(confirmed) if c in warnings] + [
        st.fault for st in sticky.values() if st.level == "degraded"]
    failed_reasons, degraded_reasons = promote.apply(promoted, failed_reasons, degraded_reasons)
    if failed_reasons:
        raw = "failed"
    elif degraded_reasons:
        raw = "degraded"
    elif not readable:
        raw = "unknown"
    else:
        raw = "ok"

    offenses = _escalate(s, raw, now, policy, sticky, failed_reasons)
    state, streak = _hysteresis(s, raw, bool(cleared), bool(critical or warning), bool(critical), policy)
    reasons = _reasons(s, d, state, failed_reasons, degraded_reasons, sticky, readable, lost, policy)
    node_level = state == "failed" and any(policy.node_level(f) for f in reasons if f.severity == "critical"
                                           or f.code in sticky)
    new_state = DeviceState(window=window, warnings=warnings, active_rules=frozenset(active_rules),
                            counts=counts, counters=counters, sticky=sticky, state=state,
                            better_streak=streak, offenses=offenses,
                            vendor=vendor if d.identity.parent is None else "",
                            occurrences=occurrences, promoted=frozenset(promoted))
    return new_state, Verdict(d.identity.uuid, state, reasons, pending, tuple(cleared), node_level, cleared_by)


def _new_occurrences(s: DeviceState, d: DeviceSample, policy: Policy) -> tuple[dict[str, int], list[Fault]]:
    """The faults whose cumulative count grew since the previous poll (classified), and the counts."""
    counts = dict(s.counts)
    new: list[Fault] = []
    for f in d.faults:
        prev = counts.get(f.code)
        if prev is None or f.count > prev:
            new.append(policy.classify(d.identity.vendor, f))
        counts[f.code] = f.count
    return counts, new


def _reset_seen(s: DeviceState, d: DeviceSample, new: list[Fault], readable: bool, now: float,
                policy: Policy) -> tuple[bool, dict[str, tuple[float, float]]]:
    """Whether this poll shows a device reset (a reset code, or a counter that restarts at a
    reset gone backwards), and the counters' last readings."""
    reset_seen = any(f.code in policy.reset_codes for f in new) or any(
        f.code in policy.reset_codes for f in d.report.reasons)
    counters = dict(s.counters)
    for name in policy.reset_counters:
        v = d.value(name) if readable else None
        if v is None:
            continue
        prev_counter = counters.get(f"reset:{name}")
        counters[f"reset:{name}"] = (now, v)
        if prev_counter is not None and v < prev_counter[1]:
            reset_seen = True
    return reset_seen, counters


def _carry_sticky(s: DeviceState, reset_seen: bool, recovery: Any, readable: bool,
                  unreachable: bool) -> tuple[dict[str, StickyFault], dict[str, str]]:
    """The sticky faults that go on (evidence that the recommended action happened clears one),
    and code -> the evidence that cleared it."""
    sticky: dict[str, StickyFault] = {}
    cleared_by: dict[str, str] = {}
    for code, st in s.sticky.items():
        why = _evidence(st, reset_seen, recovery, readable)
        if why is not None:
            cleared_by[code] = why
            continue
        sticky[code] = dataclasses.replace(st, seen_lost=st.seen_lost or unreachable,
                                           recovery_pending=st.recovery_pending or bool(recovery))
    return sticky, cleared_by


def _conditions(d: DeviceSample, new: list[Fault], policy: Policy) -> tuple[dict[str, Fault], dict[str, Fault]]:
    """This poll's critical and warning conditions (code -> fault): the collector's own report
    (a lost device's reasons are critical) and the new fault occurrences (info ones are not)."""
    vendor, collector = d.identity.vendor, d.report.state
    critical: dict[str, Fault] = {}
    warning: dict[str, Fault] = {}
    for f in d.report.reasons:
        f = policy.classify(vendor, f)
        if f.code in policy.reset_codes:
            continue
        if collector == "failed":
            critical.setdefault(f.code, dataclasses.replace(f, severity="critical"))
        elif collector == "degraded":
            warning.setdefault(f.code, f)
    for f in new:
        if f.code in policy.reset_codes or f.severity == "info":
            continue
        (critical if f.severity == "critical" else warning).setdefault(f.code, f)
    return critical, warning


def _reading_rules(s: DeviceState, d: DeviceSample, readable: bool, counters: dict[str, tuple[float, float]],
                   now: float, policy: Policy, critical: dict[str, Fault], warning: dict[str, Fault]) -> set[str]:
    """The threshold rules over readings that hold now, their faults added to critical/warning.
    Stale or missing readings say nothing about thresholds: the last active set is kept."""
    if not readable:
        return set(s.active_rules)
    active: set[str] = set()
    reported = {f.fault_class for f in d.report.reasons}
    for rule in policy.readings:
        if rule.fault_class in reported:
            continue  # the collector reports this condition itself
        hit = _check_rule(rule, d, rule.code in s.active_rules, counters, now)
        if hit is not None:
            active.add(rule.code)
            (critical if hit.severity == "critical" else warning).setdefault(hit.code, hit)
    return active


def _start_sticky(critical: dict[str, Fault], warning: dict[str, Fault], sticky: dict[str, StickyFault],
                  policy: Policy, now: float, unreachable: bool, recovery: Any) -> None:
    """Sticky faults start on their first occurrence, without debounce: they are events. A
    critical fault from the kernel log is sticky whatever its class: the line is printed once,
    so it holds until evidence (any kind: a reset, the recovery action cleared, the lost device
    readable again, a boot). A warning that became sticky leaves the debounce."""
    for code, f in list(critical.items()) + list(warning.items()):
        cp = policy.class_policy(f)
        evidence_only = not cp.sticky and f.source == EVIDENCE_SOURCE and code in critical
        if (cp.sticky or evidence_only) and code not in sticky:
            level = "failed" if code in critical else "degraded"
            clear_on = frozenset(CLEAR_EVIDENCE) if evidence_only else cp.clear_on
            sticky[code] = StickyFault(f, f.first_seen or now, clear_on, level, seen_lost=unreachable,
                                       recovery_pending=bool(recovery))
            warning.pop(code, None)


def _debounce(s: DeviceState, warning: Mapping[str, Fault], readable: bool, policy: Policy) -> tuple:
    """Warnings confirmed when seen in k of the last n readable polls: (window, warnings kept,
    confirmed codes, pending code -> polls seen)."""
    window = s.window
    warnings = dict(s.warnings)
    if readable or warning:
        window = (window + (frozenset(warning),))[-policy.n:]
        warnings.update(warning)
    seen_in = {c: sum(c in w for w in window) for c in set().union(*window)} if window else {}
    confirmed = {c for c, n in seen_in.items() if n >= policy.k}
    pending = {c: n for c, n in seen_in.items() if n < policy.k and c in warning}
    warnings = {c: f for c, f in warnings.items() if c in seen_in}
    return window, warnings, confirmed, pending


def _escalate(s: DeviceState, raw: str, now: float, policy: Policy, sticky: dict[str, StickyFault],
              failed_reasons: list[Fault]) -> tuple[float, ...]:
    """Entering failed too often within the window makes a sticky ``repeat-offender`` fault
    (added to sticky and failed_reasons); the entries still in the window."""
    offenses = tuple(t for t in s.offenses if now - t <= policy.escalate_window_seconds)
    if raw == "failed" and s.state != "failed":
        offenses += (now,)
        if len(offenses) >= policy.escalate_count and "repeat-offender" not in sticky:
            f = Fault(code="repeat-offender", fault_class="repeat-offender", action=policy.escalate_action,
                      severity="critical", first_seen=now, last_seen=now, count=len(offenses),
                      message=f"failed {len(offenses)} times within {policy.escalate_window_seconds / 3600:g} h",
                      source="health.rules")
            cp = policy.class_policy(f)
            sticky["repeat-offender"] = StickyFault(f, now, cp.clear_on if cp.sticky else frozenset({"boot"}), "failed")
            failed_reasons.append(f)
    return offenses


def _hysteresis(s: DeviceState, raw: str, cleared: bool, seen: bool, critical: bool,
                policy: Policy) -> tuple[str, int]:
    """(state, better streak): worse at once; better after recovery_polls clean polls, or at
    once on evidence (``cleared`` with nothing critical); unknown holds the last verdict."""
    prev = s.state
    if raw == "unknown" and prev != "failed" and prev != "degraded":
        return "unknown", 0
    if STATE_RANK[raw] >= STATE_RANK[prev] and not (raw == "unknown" and prev in ("failed", "degraded")):
        return raw, 0
    if cleared and not critical:  # evidence (a reset, the lost device back): no hysteresis
        return raw, 0
    if raw == "unknown":  # cannot read: hold the last verdict, do not count toward recovery
        return prev, s.better_streak
    if seen:  # better than before, but the condition was seen: not clean
        return prev, 0
    streak = s.better_streak + 1
    return (raw, 0) if streak >= policy.recovery_polls else (prev, streak)


def _reasons(s: DeviceState, d: DeviceSample, state: str, failed_reasons: list[Fault],
             degraded_reasons: list[Fault], sticky: Mapping[str, StickyFault], readable: bool, lost: bool,
             policy: Policy) -> tuple[Fault, ...]:
    """The verdict's reasons for ``state``, in the policy's order."""
    if state == "failed":
        reasons = failed_reasons or _held(s, sticky)
    elif state == "degraded":
        reasons = degraded_reasons or _held(s, sticky)
    elif state == "unknown":
        reasons = tuple(d.report.reasons)
    else:
        reasons = ()
    if state in ("failed", "degraded") and not readable and d.report.reasons and not lost:
        reasons = tuple(reasons) + tuple(d.report.reasons)  # say that it is not readable now
    return _order(reasons, d.identity.vendor, policy)


def _held(s: DeviceState, sticky: Mapping[str, StickyFault]) -> tuple[Fault, ...]:
    """Reasons while a better raw state waits out its hysteresis: the last known ones."""
    out = [st.fault for st in sticky.values()] + list(s.warnings.values())
    return tuple(out)


# --------------------------------------------------------------------------- the node


def step(state: State, snapshot: NodeSnapshot, policy: Policy) -> tuple[State, dict[str, Verdict]]:
    """Fold one snapshot into the rule state; the verdict of every device in it."""
    devices = dict(state.devices)
    booted: dict[str, tuple[str, ...]] = {}  # uuid -> sticky codes the boot cleared
    if state.boot_id and snapshot.boot_id and snapshot.boot_id != state.boot_id:
        # the node rebooted: every sticky fault and warning is cleared; what was already counted
        # stays counted, and so does the repeat-offender history
        booted = {u: tuple(ds.sticky) for u, ds in devices.items() if ds.sticky}
        devices = {u: DeviceState(offenses=ds.offenses, counts=ds.counts, counters=ds.counters, vendor=ds.vendor)
                   for u, ds in devices.items()}
    verdicts: dict[str, Verdict] = {}
    promotions = dict(state.promotions)
    for d in snapshot.devices:
        uuid = d.identity.uuid
        before = devices.get(uuid, DeviceState())
        ds, v = _device_step(before, d, snapshot.time, policy)
        devices[uuid] = ds
        _count_promotions(promotions, d, v, ds.promoted - before.promoted)
        if booted.get(uuid):
            by = {**{c: "boot" for c in booted[uuid]}, **v.cleared_by}
            v = dataclasses.replace(v, cleared=tuple(sorted(by)), cleared_by=by)
        verdicts[uuid] = v
    present = {d.identity.uuid for d in snapshot.devices}
    # a device gone from the snapshot while its vendor's collector answered is really lost
    # (no longer enumerated): its sticky faults may clear when it reads again
    answered = {c.vendor for c in snapshot.collectors if c.ok and c.vendor}
    for u, ds in list(devices.items()):
        if u not in present and ds.sticky and ds.vendor in answered:
            devices[u] = dataclasses.replace(ds, sticky={c: dataclasses.replace(st, seen_lost=True)
                                                         for c, st in ds.sticky.items()})
    # forget devices that are gone unless they carry sticky faults (a lost GPU may vanish
    # from enumeration: its fault must not vanish with it)
    devices = {u: ds for u, ds in devices.items() if u in present or ds.sticky or ds.offenses}
    return State(boot_id=snapshot.boot_id or state.boot_id, devices=devices, promotions=promotions), verdicts


def _count_promotions(promotions: dict[tuple[str, str, str], int], d: DeviceSample, v: Verdict,
                      codes: frozenset[str]) -> None:
    """Count the promotions that began this poll (by vendor, code and target state)."""
    for f in v.reasons:
        if f.code in codes and f.source == promote.SOURCE:
            key = (d.identity.vendor, str(f.code), "failed" if f.severity == "critical" else "degraded")
            promotions[key] = promotions.get(key, 0) + 1


def evaluate(history: Iterable[NodeSnapshot], policy: Policy,
             state: Optional[State] = None) -> tuple[State, dict[str, Verdict]]:
    """Fold a history of snapshots (oldest first); the verdicts of the last one."""
    state = state or State()
    verdicts: dict[str, Verdict] = {}
    for snap in history:
        state, verdicts = step(state, snap, policy)
    return state, verdicts


def node_verdict(snapshot: NodeSnapshot, verdicts: Mapping[str, Verdict], policy: Policy,
                 node_taint: Optional[Mapping[str, bool]] = None) -> NodeVerdict:
    """Unhealthy when a failed device is node-level, or too few devices are not failed (a device
    ``recovering`` behind its recovery gate takes no new work: it does not count as serving either).
    Unknown devices count as serving: cannot read is not failed. ``node_taint``: uuid -> what
    the device's class says (health.classes): True, its failure alone makes the node unhealthy;
    False, it never does and counts as serving; a device not listed follows the policy."""
    says = node_taint or {}
    tops = [d for d in snapshot.devices if d.identity.parent is None]
    failed = [d for d in tops if verdicts.get(d.identity.uuid, Verdict("", "ok")).state == "failed"]
    degraded = [d for d in tops if verdicts.get(d.identity.uuid, Verdict("", "ok")).state == "degraded"]
    recovering = [d for d in tops if verdicts.get(d.identity.uuid, Verdict("", "ok")).state == "recovering"]
    total = len(tops)
    counted = [d for d in failed + recovering if says.get(d.identity.uuid) is not False]
    node_level = [d for d in counted if verdicts[d.identity.uuid].node_level or says.get(d.identity.uuid) is True]
    healthy_fraction = (total - len(counted)) / total if total else 1.0
    failed_ids, degraded_ids = tuple(d.identity.uuid for d in failed), tuple(d.identity.uuid for d in degraded)
    if node_level:
        first = node_level[0]
        cls = verdicts[first.identity.uuid].reasons[0].fault_class if verdicts[first.identity.uuid].reasons else "failed"
        by_class = any(says.get(d.identity.uuid) is True for d in node_level)
        why = (f"{len(node_level)} device(s) failed with a node-level fault"
               + (" or of a class that taints the node" if by_class else "")
               + f" ({', '.join(f'{d.identity.vendor} {d.identity.index}' for d in node_level)})")
        return NodeVerdict(True, cls, failed_ids, degraded_ids, total, why, tuple(d.identity.uuid for d in node_level))
    if counted and healthy_fraction < policy.min_healthy_fraction:
        why = (f"only {total - len(counted)} of {total} devices are not failed"
               + (" or recovering" if recovering else "") + f" (below {policy.min_healthy_fraction:.0%})")
        return NodeVerdict(True, "too-few-healthy", failed_ids, degraded_ids, total, why,
                           tuple(d.identity.uuid for d in counted))
    why = (f"{total - len(failed) - len(recovering)} of {total} devices serving"
           + (f"; {len(failed)} failed (device-level)" if failed else "")
           + (f"; {len(recovering)} recovering" if recovering else "")
           + (f"; {len(degraded)} degraded" if degraded else ""))
    return NodeVerdict(False, None, failed_ids, degraded_ids, total, why)


# --------------------------------------------------------------------------- persistence


def sticky_faults(state: State) -> dict[str, list[StickyFault]]:
    """The sticky faults per device uuid (what must survive an agent restart)."""
    return {u: list(ds.sticky.values()) for u, ds in state.devices.items() if ds.sticky}


def occurrences(state: State) -> dict[str, Mapping[str, Occurrences]]:
    """The occurrences health.promote counts, per device uuid (they survive a restart too)."""
    return {u: ds.occurrences for u, ds in state.devices.items() if ds.occurrences}


def restore(sticky: Mapping[str, Iterable[StickyFault]], boot_id: Optional[str],
            current_boot_id: Optional[str], occurred: Optional[OccurrenceBook] = None) -> State:
    """A state holding sticky faults (and the occurrences health.promote counts) saved by an
    earlier agent process; nothing when the node has rebooted since (a boot clears them)."""
    if boot_id and current_boot_id and boot_id != current_boot_id:
        return State(boot_id=current_boot_id)
    devices = {}
    for uuid, items in sticky.items():
        by_code = {st.fault.code: st for st in items}
        if by_code:
            level = "failed" if any(st.level == "failed" for st in by_code.values()) else "degraded"
            devices[uuid] = DeviceState(sticky=by_code, state=level)
    for uuid, occ in (occurred or {}).items():
        if occ:
            devices[uuid] = dataclasses.replace(devices.get(uuid, DeviceState()), occurrences=dict(occ))
    return State(boot_id=current_boot_id or boot_id, devices=devices)
