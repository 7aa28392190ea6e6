"""Scoring a node for a pod's request: feasible or why not, a score in [0, 1], the devices.

For each acceptable vendor, most preferred first, the node's device groups of that vendor are
tried; the first vendor with a feasible group wins and its preference rank sets the score band
(with vendors ``[a, b]`` a placement on vendor a's devices scores in [0.5, 1], one on b's in
[0, 0.5]). Within a group the devices that may be chosen are those with health ok or degraded
that meet the per-device constraints (compute units, memory, features, minimum driver and
runtime versions); among them the set of ``count`` devices that maximizes the node's score is
chosen (exhaustively when there are few sets, greedily otherwise). The score of a set is a
weighted sum of, each 0..1:

- topology: mean closeness of the chosen pairs by their best link (``nodes.link_score``);
- fill: the group's load after placing the pod; binpack maximizes it, spread its complement;
- idle: how idle the chosen devices are (shared requests: binpack prefers loaded ones);
- health: ok devices 1, degraded 0.3;
- cost: 1 / (1 + profile cost weight): a cheaper device that meets the request is better;
- affinity: closeness of the chosen devices to busy ones; binpack packs next to them, spread
  keeps away from them (less PCIe and host contention).

The staleness of the annotation scales the score at answer time (``Staleness``).
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from hetero_exporter.scoring.nodes import SWITCH_SCORE, Dev, Group, NodeState, is_fabric
from hetero_exporter.scoring.request import POLICIES, TOPOLOGIES, TOPOLOGY_ALIASES, Request, canonical_topology
from hetero_exporter.scoring.versions import at_least

WEIGHTS: Mapping[str, float] = {"topology": 0.30, "fill": 0.25, "idle": 0.15, "health": 0.10,
                                "cost": 0.10, "affinity": 0.10}
DEGRADED_HEALTH = 0.3
EXHAUSTIVE_POOL = 10  # up to 2^10 subsets evaluated one by one; larger groups: greedy from each seed
MEMO_LIMIT = 512  # decisions kept per node (distinct request shapes)
TOPOLOGY_WORDS = {"same-switch": "under one PCIe switch or fabric",
                  "same-fabric": "in one fabric-connected set (joined by device-to-device fabric links)"}


MAX_PRIORITY = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority


def extender_score(score: float) -> int:
    """A score in [0, 1] as the extender's 0..10."""
    return min(MAX_PRIORITY, max(0, int(score * MAX_PRIORITY + 0.5)))


@dataclass(frozen=True)
class Staleness:
    """Confidence in an annotation by its age: 1 up to ``fresh_seconds``, then falling
    linearly to ``floor`` at ``floor_seconds`` and staying there (a stale node is still
    scored, below fresh ones; it is not filtered out)."""

    fresh_seconds: float = 180.0
    floor_seconds: float = 1800.0
    floor: float = 0.1

    def confidence(self, age: float) -> float:
        if age <= self.fresh_seconds:
            return 1.0
        if age >= self.floor_seconds:
            return self.floor
        span = self.floor_seconds - self.fresh_seconds
        return 1.0 - (1.0 - self.floor) * (age - self.fresh_seconds) / span


class Choice:
    """A chosen set of devices in a group and its score. The parts of the score and the weakest
    link are worked out when someone asks (/explain, score): /prioritize needs only ``inner``."""

    __slots__ = ("group", "combo", "devices", "inner", "policy", "shared", "decisions", "_parts", "_weakest")

    def __init__(self, group: Group, combo: tuple[int, ...], inner: float, policy: str, shared: bool):
        self.group, self.combo, self.inner, self.policy, self.shared = group, combo, inner, policy, shared
        self.devices: tuple[Dev, ...] = tuple(map(group.devices.__getitem__, combo))
        self.decisions: dict = {}  # (band, tiers) -> Decision, see Scorer._feasible
        self._parts: Optional[dict[str, float]] = None
        self._weakest: Optional[str] = None

    @property
    def parts(self) -> Mapping[str, float]:
        """Each part of the score, 0..1 (weights in ``WEIGHTS``)."""
        if self._parts is None:
            g, combo, k = self.group, self.combo, len(self.combo)
            per_dev = [_device_parts(g, i, self.policy, self.shared) for i in combo]
            parts = {name: sum(p[name] for p in per_dev) / k for name in per_dev[0]}
            pairs = list(itertools.combinations(combo, 2))
            parts["topology"] = sum(g.pair[a][b] for a, b in pairs) / len(pairs) if pairs else 1.0
            fill = _fill(g.load_total, sum(g.loads[i] for i in combo), k, max(1, len(g.devices)), self.shared)
            parts["fill"] = fill if self.policy == "binpack" else 1.0 - fill
            self._parts = {name: round(v, 4) for name, v in parts.items()}
        return self._parts

    @property
    def weakest(self) -> str:
        """The weakest link type between chosen devices ("" for one device)."""
        if self._weakest is None:
            pairs = list(itertools.combinations(self.combo, 2))
            pair = self.group.pair
            w = min(pairs, key=lambda p: pair[p[0]][p[1]]) if pairs else None
            self._weakest = self.group.pair_kind[w[0]][w[1]] if w else ""
        return self._weakest


class Decision:
    """The verdict on one node. ``score`` (0..1) is before the staleness confidence; ``points``
    the extender's 0..10 for a fresh annotation; ``resolvable`` says whether freeing devices
    (preemption) could make an infeasible node fit. A feasible decision made from a Choice
    words its reason and parts only when asked."""

    __slots__ = ("feasible", "score", "group", "devices", "resolvable", "points", "_reason", "_choice",
                 "_band", "_tiers", "_notes")

    def __init__(self, feasible: bool, score: float = 0.0, reason: str = "", group: Optional[str] = None,
                 devices: tuple[Dev, ...] = (), resolvable: bool = False, *, choice: Optional[Choice] = None,
                 band: int = 0, tiers: int = 1, notes: tuple[str, ...] = ()):
        self.feasible, self.score, self.group, self.devices = feasible, score, group, devices
        self.resolvable = resolvable
        self.points = extender_score(score) if feasible else 0
        self._reason: Optional[str] = None if choice is not None else reason
        self._choice, self._band, self._tiers, self._notes = choice, band, tiers, notes

    @property
    def reason(self) -> str:
        if self._reason is None:
            c = self._choice
            assert c is not None
            link = f", {c.weakest} links" if c.weakest else ""
            why = f"{len(c.devices)} x {c.group.resource} {_labels(c.devices)} ({c.devices[0].model}{link})"
            if self._notes:
                why += " -- not preferred: " + "; ".join(self._notes)
            self._reason = why
        return self._reason

    @property
    def parts(self) -> Mapping[str, float]:
        if self._choice is None:
            return {}
        pref = self._band / (self._tiers - 1) if self._tiers > 1 else 1.0
        return {**self._choice.parts, "preference": pref}


NO_ACCELERATOR = Decision(True, 0.0, "the pod asks for no accelerator")
_NOT_YET = object()


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def device_problem(d: Dev, req: Request, vendor: str) -> Optional[str]:
    """Why ``d`` cannot serve ``req`` (None: it can)."""
    if req.compute_units is not None:
        have = d.compute_units * ((1.0 - d.load) if req.shared else 1.0)
        if have < req.compute_units - 1e-9:
            return f"{'free ' if req.shared else ''}compute {have:.2f} < {req.compute_units:g} units"
    if req.memory_bytes is not None:
        have_mem = d.memory_free if req.shared else d.memory_total
        if have_mem is None:
            return "free memory not reported" if req.shared else "memory size not reported"
        if have_mem < req.memory_bytes:
            return f"{'free ' if req.shared else ''}memory {_gib(have_mem)} < {_gib(req.memory_bytes)}"
    missing = [f for f in req.features if f not in d.features]
    if missing:
        return "lacks feature " + ",".join(missing)
    for which, key, text in (("driver", d.driver_key, d.driver), ("runtime", d.runtime_key, d.runtime)):
        need = req.min_version(which, vendor)
        if need is not None:
            if not text:  # unknown is never enough: a floor is a promise the node cannot keep
                return f"{which} version not reported"
            if not at_least(key, need[0]):
                return f"{which} {text} older than required {need[1]}"
    return None


def _refusal(g: Group, req: Request, elig: tuple[int, ...], problems: dict[str, list[Dev]]) -> tuple[str, bool]:
    """(why too few devices of ``g`` are usable, resolvable by preemption)."""
    listed: dict[str, list[Dev]] = {}
    for d, why in g.excluded:  # failed and unknown devices first
        listed.setdefault(why, []).append(d)
    for why, devs in problems.items():
        listed.setdefault(why, []).extend(devs)
    detail = f": {_problems_text(listed)}" if listed else ""
    # only a lack of free memory on shared devices can be fixed by evicting pods
    resolvable = req.shared and any(w.startswith("free ") for w in listed)
    total = len(g.devices) + len(g.excluded)
    return f"needs {req.count} x {g.resource}, {len(elig)} usable of {total}{detail}", resolvable


_SIG_IDS: dict[tuple, int] = {}  # what a check reads of a group (devices, links) -> its id
_SIG_NEXT = itertools.count(1)  # ids are never reused, so an id kept in a group's memo stays its own
SIG_LIMIT = 100_000


def device_sig(g: Group, shared: bool) -> int:
    """The id of what a per-device check and its refusal read of ``g`` (kept in its memo):
    groups alike (one model, driver, failed devices) share it, so a request checks them once."""
    key = ("device-sig", shared)
    got = g.choices.get(key)
    if got is None:
        devs = tuple((d.index, d.compute_units, d.memory_total, d.features, d.driver, d.driver_key, d.runtime,
                      d.runtime_key) + ((d.load, d.memory_free) if shared else ()) for d in g.devices)
        got = g.choices[key] = intern_sig((g.resource, g.vendor, devs, tuple((d.index, why) for d, why in g.excluded)))
    return got


def device_checks(g: Group, shared: bool) -> tuple[int, ...]:
    """Per device of ``g``, the id of what ``device_problem`` reads of it (and the vendor), kept
    in the group's memo: the devices of one model and driver share it across nodes."""
    key = ("device-checks", shared)
    got = g.choices.get(key)
    if got is None:
        got = g.choices[key] = tuple(
            # numbers by repr: equal floats may be written apart (-0.0 and 0.0 in a refusal's text)
            intern_sig(("device-check", g.vendor, shared, repr(d.compute_units), repr(d.memory_total), d.features,
                        d.driver, d.driver_key, d.runtime, d.runtime_key)
                       + ((repr(d.load), repr(d.memory_free)) if shared else ()))
            for d in g.devices)
    return got


def intern_sig(sig: tuple) -> int:
    """A never reused id for ``sig`` (equal signatures, equal ids while the table holds them)."""
    got = _SIG_IDS.get(sig)
    if got is None:
        if len(_SIG_IDS) >= SIG_LIMIT:
            _SIG_IDS.clear()
        got = _SIG_IDS[sig] = next(_SIG_NEXT)
    return got


def problems_seen(req: Request, which: str = "problems") -> dict:
    """Per-request memo: group signature id -> (usable devices, refusal or None); with
    ``which="device-problems"``: ``device_checks`` id -> ``device_problem`` (None: it serves)."""
    seen = req.scratch.get(which)
    if seen is None or len(seen) > SIG_LIMIT:
        seen = req.scratch[which] = {}
    return seen


def _labels(devs: Sequence[Dev]) -> str:
    return " ".join([d.label() for d in devs])


def _problems_text(problems: Mapping[str, list[Dev]]) -> str:
    return "; ".join(f"{why}: {_labels(devs)}" for why, devs in problems.items())


class Scorer:
    """Decisions for requests on node states, memoized per node state and request shape."""

    def __init__(self, policy: str = "binpack", staleness: Staleness = Staleness(),
                 weights: Mapping[str, float] = WEIGHTS):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self.policy = policy
        self.staleness = staleness
        self.weights = dict(weights)

    # ------------------------------------------------------------------ per node

    def memo_key(self, req: Request) -> str:
        key = req.scratch.get(self.policy)
        if key is None:
            key = req.scratch[self.policy] = f"{req.policy or self.policy}|{req.key}"
        return key

    def decide(self, req: Request, state: NodeState, memo_key: Optional[str] = None) -> Decision:
        if req.count == 0:
            return NO_ACCELERATOR
        key = memo_key or self.memo_key(req)
        memo = state.memo
        d = memo.get(key)
        if d is None:
            if req.per_device and not state.error and all_fit(req, state):
                # every device meets the constraints: the decision of the request without them
                twin = req.unconstrained
                twin_key = self.memo_key(twin)
                d = memo.get(twin_key)
                if d is None:
                    d = memo[twin_key] = self._decide(twin, state)
            else:
                d = self._decide(req, state)
            if len(memo) >= MEMO_LIMIT:
                memo.clear()
            memo[key] = d
        return d

    def decide_fresh(self, req: Request, state: NodeState) -> Decision:
        """The decision without the per-node memo (``decide`` keeps one; scoring.columns keeps
        its own, by request shape, over all nodes)."""
        if req.count == 0:
            return NO_ACCELERATOR
        return self._decide(req, state)

    def confidence(self, state: NodeState, now: float) -> tuple[float, float]:
        """(confidence, age seconds) of a node's annotation at ``now``."""
        age = max(0.0, now - state.time)
        return self.staleness.confidence(age), age

    def precompute(self, state: NodeState) -> None:
        """Best sets of every size, policy and topology policy, for exclusive requests whose
        constraints every device meets: done when the node's annotation changes, so that
        /prioritize only looks up."""
        for g in state.group_list:
            if g.devices:
                self.best_choice(g, g.every, len(g.devices), self.policy, "same-node", False, every_size=True)

    def _decide(self, req: Request, state: NodeState) -> Decision:
        if state.error:
            return Decision(False, reason=state.error)
        tiers: tuple[Optional[str], ...] = req.vendors or (None,)
        policy = req.policy or self.policy
        notes: list[str] = []
        resolvable = False
        lacking = 0  # tiers of which the node has no devices
        for rank, vendor in enumerate(tiers):
            if req.group is not None:
                g0 = state.groups.get(req.group)
                groups: tuple[Group, ...] = (g0,) if g0 is not None and vendor in (None, g0.vendor) else ()
            else:
                groups = state.group_list if vendor is None else state.vendors.get(vendor, ())
            if not groups:
                notes.append(f"no {req.group or vendor or 'accelerator'} devices here")
                lacking += 1
                continue
            best: Optional[tuple[Group, Choice]] = None
            for g in groups:
                got = self._group(g, req, policy)
                if isinstance(got, Choice):
                    if best is None or got.inner > best[1].inner:
                        best = (g, got)
                else:
                    notes.append(got[0])
                    resolvable = resolvable or got[1]
            if best is not None:
                return self._feasible(best[0], best[1], len(tiers) - 1 - rank, len(tiers), notes)
        if all(n.startswith("no ") for n in notes):  # no such devices, or no set of them: say what it has
            if lacking < len(tiers):  # "no 3 usable ... under one PCIe switch": this request's own words
                return Decision(False, reason="; ".join([*notes, _inventory(state)]))
            key = ("absent", tiers, req.group)  # the node lacks the hardware: same for any such request
            absent = state.memo.get(key)
            if absent is None:
                if len(state.memo) >= MEMO_LIMIT:
                    state.memo.clear()
                absent = state.memo[key] = Decision(False, reason="; ".join([*notes, _inventory(state)]))
            return absent
        # alike nodes refuse alike (refusals are kept per group signature): one Decision for them
        seen = problems_seen(req)
        refused = ("refused", tuple(notes), resolvable)
        d = seen.get(refused)
        if d is None:
            d = seen[refused] = Decision(False, reason="; ".join(notes), resolvable=resolvable)
        return d

    @staticmethod
    def _feasible(g: Group, choice: Choice, band: int, tiers: int, notes: list[str]) -> Decision:
        """The decision for a chosen set; without notes it depends on the set and the band only,
        and is shared by every request that lands on that set."""
        key = (band, tiers)
        if not notes and key in choice.decisions:
            return choice.decisions[key]
        d = Decision(True, (band + choice.inner) / tiers, group=g.resource, devices=choice.devices,
                     choice=choice, band=band, tiers=tiers, notes=tuple(notes))
        if not notes:
            choice.decisions[key] = d
        return d

    @staticmethod
    def _eligible(g: Group, req: Request) -> tuple[tuple[int, ...], Optional[tuple[str, bool]]]:
        """(the devices of ``g`` meeting the per-device constraints, the refusal if too few)."""
        problems: dict[str, list[Dev]] = {}
        eligible = []
        memo = problems_seen(req, "device-problems")
        for i, (d, check) in enumerate(zip(g.devices, device_checks(g, req.shared))):
            why = memo.get(check, _NOT_YET)
            if why is _NOT_YET:  # devices alike in what the check reads, across groups: checked once
                why = memo[check] = device_problem(d, req, g.vendor)
            if why is None:
                eligible.append(i)
            else:
                problems.setdefault(why, []).append(d)
        elig = tuple(eligible)
        return elig, (_refusal(g, req, elig, problems) if len(elig) < req.count else None)

    def _group(self, g: Group, req: Request, policy: str) -> "Choice | tuple[str, bool]":
        """The best choice in one group, or (why not, resolvable by preemption)."""
        elig = g.every
        if req.per_device and not _floor_fits(g, req):
            # the weakest device does not fit: look at each one, once per request for alike groups
            seen = problems_seen(req)
            sig = device_sig(g, req.shared)
            got = seen.get(sig)
            if got is None:
                got = seen[sig] = self._eligible(g, req)
            elig, refusal = got
            if refusal is not None:
                return refusal
        elif len(elig) < req.count:
            return _refusal(g, req, elig, {})
        topology = req.topology_policy
        choice = self.best_choice(g, elig, req.count, policy, topology, req.shared)
        if choice is None:
            key = ("no set", elig, topology)  # the words of the refusal but its count, kept: alike for any count
            words = g.choices.get(key)
            if words is None:
                words = g.choices[key] = (f"usable {g.resource} devices {TOPOLOGY_WORDS[topology]}"
                                          f"{_fabrics(g, topology)} (largest such set: {_largest_kept(g, elig, topology)})")
            return f"no {req.count} {words}", False
        return choice

    # ------------------------------------------------------------------ device sets

    def best_choice(self, g: Group, elig: tuple[int, ...], k: int, policy: str, topology: str,
                    shared: bool, every_size: bool = False) -> Optional[Choice]:
        """The best ``k`` devices among ``elig``. With ``every_size`` (precompute) a search fills
        the memo with everything it evaluated: an exhaustive one, every set size under both
        policies and all three topology policies at once (the score of a set does not depend on
        the topology policy, which only admits or refuses it), so the first pod of a new kind
        costs a lookup, not a search. Without, an exhaustive search walks the sets of size ``k``
        only (a node first seen in a request: C(8, 2) = 28 sets, not 255 x 6 tables)."""
        topology = canonical_topology(topology)
        key = (elig, k, policy, topology, shared)
        got = g.choices.get(key, _NOT_YET)
        if got is _NOT_YET:
            if len(g.choices) >= MEMO_LIMIT:
                g.choices.clear()
            if k == 1:  # one device: any topology policy holds; no need to walk every subset
                found = self._singles(g, elig, shared)
            elif len(elig) <= EXHAUSTIVE_POOL and every_size:
                found = self._exhaustive(g, elig, shared)
            elif len(elig) <= EXHAUSTIVE_POOL:
                found = {(policy, topology): self._exhaustive_size(g, elig, k, policy, topology, shared)}
            else:
                found = {(policy, topology): self._greedy_best(g, elig, k, policy, topology, shared)}
            for (p, t), by_size in found.items():
                if t in TOPOLOGY_ALIASES:
                    continue  # the same table as its policy's
                for size in (range(1, len(elig) + 1) if len(found) > 1 and k > 1 else by_size):
                    g.choices.setdefault((elig, size, p, t, shared), by_size.get(size))
            got = g.choices.setdefault(key, None)
        if isinstance(got, tuple):  # (score, set) as the search left it: make the Choice once
            got = g.choices[key] = Choice(g, got[1], got[0], policy, shared)
        return got

    def _values(self, g: Group, policy: str, shared: bool) -> list[float]:
        """Per-device additive part of the score (idle, health, cost, affinity), weighted."""
        key = ("values", policy, shared)
        if key not in g.choices:
            values = []
            for i in range(len(g.devices)):
                # added in order, not by sum() (which compensates from Python 3.12): scoring.batch adds alike
                total = 0.0
                for k, v in _device_parts(g, i, policy, shared).items():
                    total += self.weights[k] * v
                values.append(total)
            g.choices[key] = values
        return g.choices[key]

    @staticmethod
    def remember(g: Group, key: tuple, found: Any) -> Any:
        """Keep a search's (score, set) or None under ``key`` = (eligible devices, size, policy,
        canonical topology policy, shared) in the group's memo, as ``best_choice`` does (what is
        kept already stays); returns what the memo holds."""
        if key not in g.choices and len(g.choices) >= MEMO_LIMIT:
            g.choices.clear()
        return g.choices.setdefault(key, found)

    def _exhaustive(self, g: Group, elig: tuple[int, ...], shared: bool) -> dict[tuple[str, str], dict]:
        """Best (score, set) by (policy, topology policy) and set size, over every subset of
        ``elig``: depth first, with pair sums, per-device sums and the topology flags carried
        along, so each subset costs one row of additions."""
        vb, vs = self._values(g, "binpack", shared), self._values(g, "spread", shared)
        w_topo, w_fill = self.weights["topology"], self.weights["fill"]
        pair, loads, load_total, domain = g.pair, g.loads, g.load_total, g.domain
        n = max(1, len(g.devices))
        best: dict[tuple[str, str], dict[int, tuple[float, tuple[int, ...]]]] = {
            (p, t): {} for p in POLICIES for t in TOPOLOGIES}
        # the tables a subset competes in, with whether each is binpack's, by (same-switch ok, one domain)
        variants = {(sw, dm): [(best[(p, t)], p == "binpack") for p in POLICIES for t in TOPOLOGIES
                               if t == "same-node" or (t == "same-switch" and sw) or (t == "same-fabric" and dm)]
                    for sw in (False, True) for dm in (False, True)}
        m = len(elig)
        chosen: list[int] = []

        def walk(start: int, psum: float, sb: float, ss: float, lsum: float, sw_ok: bool, dom: int) -> None:
            for at in range(start, m):
                i = elig[at]
                row = pair[i]
                add, sw = 0.0, sw_ok
                for c in chosen:
                    v = row[c]
                    add += v
                    if v < SWITCH_SCORE:
                        sw = False
                d = domain[i] if dom == -1 else (dom if dom == domain[i] else -2)
                chosen.append(i)
                size = len(chosen)
                ps, b, sp, ls = psum + add, sb + vb[i], ss + vs[i], lsum + loads[i]
                t = w_topo * (ps / (size * (size - 1) / 2) if size > 1 else 1.0)
                fill = min(1.0, max(0.0, (load_total if shared else load_total - ls + size) / n))
                s_binpack, s_spread = t + b / size + w_fill * fill, t + sp / size + w_fill * (1.0 - fill)
                combo = tuple(chosen)
                for table, binpack in variants[(sw, d != -2)]:
                    score = s_binpack if binpack else s_spread
                    cur = table.get(size)
                    if cur is None or score > cur[0] + 1e-12:
                        table[size] = (score, combo)
                walk(at + 1, ps, b, sp, ls, sw, d)
                chosen.pop()
        walk(0, 0.0, 0.0, 0.0, 0.0, True, -1)
        return _with_aliases(best)

    def _exhaustive_size(self, g: Group, elig: tuple[int, ...], k: int, policy: str, topology: str,
                         shared: bool) -> dict[int, tuple[float, tuple[int, ...]]]:
        """``_exhaustive``'s entry for one set size, policy and (canonical) topology policy:
        the sets of size ``k`` in the order its walk visits them, each scored with the same
        additions in the same order (so the same floats and the same winner among ties)."""
        vals = self._values(g, policy, shared)
        w_topo, w_fill = self.weights["topology"], self.weights["fill"]
        pair, loads, load_total, domain = g.pair, g.loads, g.load_total, g.domain
        n = max(1, len(g.devices))
        binpack, switch, fabric = policy == "binpack", topology == "same-switch", topology == "same-fabric"
        best: Optional[tuple[float, tuple[int, ...]]] = None
        for combo in itertools.combinations(elig, k):
            if fabric and any(domain[i] != domain[combo[0]] for i in combo):
                continue
            ps = b = ls = 0.0
            ok = True
            for at, i in enumerate(combo):
                row = pair[i]
                add = 0.0
                for c in combo[:at]:
                    v = row[c]
                    add += v
                    if v < SWITCH_SCORE:
                        ok = False
                ps, b, ls = ps + add, b + vals[i], ls + loads[i]
            if switch and not ok:
                continue
            t = w_topo * (ps / (k * (k - 1) / 2) if k > 1 else 1.0)
            fill = min(1.0, max(0.0, (load_total if shared else load_total - ls + k) / n))
            score = t + b / k + w_fill * (fill if binpack else 1.0 - fill)
            if best is None or score > best[0] + 1e-12:
                best = (score, combo)
        return {k: best} if best is not None else {}

    def _singles(self, g: Group, elig: tuple[int, ...], shared: bool) -> dict[tuple[str, str], dict]:
        """The best single device under each policy (every topology policy admits one device)."""
        out = {}
        n = max(1, len(g.devices))
        for p in POLICIES:
            vals = self._values(g, p, shared)
            best: Optional[tuple[float, tuple[int, ...]]] = None
            for i in elig:
                fill = _fill(g.load_total, g.loads[i], 1, n, shared)
                score = self.weights["topology"] + vals[i] + self.weights["fill"] * (fill if p == "binpack" else 1.0 - fill)
                if best is None or score > best[0] + 1e-12:
                    best = (score, (i,))
            for t in TOPOLOGIES:
                out[(p, t)] = {1: best} if best is not None else {}
        return _with_aliases(out)

    def _greedy_best(self, g: Group, elig: tuple[int, ...], k: int, policy: str, topology: str,
                     shared: bool) -> dict[int, tuple[float, tuple[int, ...]]]:
        """Best (score, set) of size ``k`` among greedy sets grown from each seed (large groups)."""
        vals = self._values(g, policy, shared)
        w_topo, w_fill = self.weights["topology"], self.weights["fill"]
        n = max(1, len(g.devices))
        best: dict[int, tuple[float, tuple[int, ...]]] = {}
        seen: set[tuple[int, ...]] = set()  # seeds often grow the same set: score it once
        for pool in _pools(g, elig, topology):
            if len(pool) < k:
                continue
            for combo in _greedy(g, pool, k, vals, topology):
                if combo in seen:
                    continue
                seen.add(combo)
                pairs = list(itertools.combinations(combo, 2))
                t = sum(g.pair[a][b] for a, b in pairs) / len(pairs) if pairs else 1.0
                fill = _fill(g.load_total, sum(g.loads[i] for i in combo), k, n, shared)
                s = w_topo * t + sum(vals[i] for i in combo) / k + w_fill * (fill if policy == "binpack" else 1.0 - fill)
                if k not in best or s > best[k][0] + 1e-12:
                    best[k] = (s, combo)
        return best

def _inventory(state: NodeState) -> str:
    return f"node has {state.inventory()}" if state.groups else "node reports no accelerators"


def _relevant(req: Request, state: NodeState) -> tuple[Group, ...]:
    if req.group is not None:
        g = state.groups.get(req.group)
        return (g,) if g is not None and (not req.vendors or g.vendor in req.vendors) else ()
    if not req.vendors:
        return state.group_list
    return tuple(g for v in req.vendors for g in state.vendors.get(v, ()))


def all_fit(req: Request, state: NodeState) -> bool:
    """Whether every candidate device of every group the request may use meets its per-device
    constraints. For exclusive requests the answer for a hardware floor is kept per request,
    so a cluster of alike nodes costs one check per kind of node."""
    for g in _relevant(req, state):
        if _floor_fits(g, req) is False:
            return False
    return True


def _floor_fits(g: Group, req: Request) -> Optional[bool]:
    """Whether the group's floor (its weakest device) meets the per-device constraints (None:
    no floor); kept per request and interned floor for exclusive requests."""
    floor, fid = g.floor, g.floor_id
    if floor is None:
        return None
    fits = None if req.shared or fid < 0 else req.floor_fits
    ok = fits.get(fid) if fits is not None else None
    if ok is None:
        ok = device_problem(floor, req, g.vendor) is None
        if fits is not None:
            fits[fid] = ok
    return ok


def _fill(load_total: float, chosen_load: float, k: int, n: int, shared: bool) -> float:
    """Share of the group busy after placing the pod (a slice adds no whole device)."""
    after = load_total if shared else load_total - chosen_load + k
    return min(1.0, max(0.0, after / n))


def _device_parts(g: Group, i: int, policy: str, shared: bool) -> dict[str, float]:
    d = g.devices[i]
    binpack = policy == "binpack"
    idle = (d.load if binpack else 1.0 - d.load) if shared else 1.0 - d.load
    near_busy = max((g.pair[i][j] * g.devices[j].load for j in range(len(g.devices)) if j != i), default=0.0)
    return {"idle": idle, "health": 1.0 if d.health == "ok" else DEGRADED_HEALTH,
            "cost": 1.0 / (1.0 + d.cost_weight), "affinity": near_busy if binpack else 1.0 - near_busy}


def _with_aliases(found: dict[tuple[str, str], dict]) -> dict[tuple[str, str], dict]:
    """``found`` with each alias of a topology policy keyed too (the same table)."""
    for alias, name in TOPOLOGY_ALIASES.items():
        for p in POLICIES:
            if (p, name) in found:
                found[(p, alias)] = found[(p, name)]
    return found


def _fabrics(g: Group, topology: str) -> str:
    """The fabric link types a group has, for an explanation (`` (hccs links here)``)."""
    if topology != "same-fabric":
        return ""
    kinds = sorted({t for row in g.pair_kind for t in row if is_fabric(t)})
    return f" ({', '.join(kinds)} links here)" if kinds else " (no fabric links reported here)"


def _pools(g: Group, elig: tuple[int, ...], topology: str) -> list[tuple[int, ...]]:
    """Where a set may come from: one fabric domain each for same-fabric."""
    topology = canonical_topology(topology)
    if topology != "same-fabric":
        return [elig]
    by_domain: dict[int, list[int]] = {}
    for i in elig:
        by_domain.setdefault(g.domain[i], []).append(i)
    # a domain of several devices is joined by fabric links (nodes._domains)
    return [tuple(v) for v in by_domain.values()]


_LARGEST: dict[tuple, int] = {}  # (pair matrix id, usable devices, topology policy) -> largest set


def _largest_kept(g: Group, elig: tuple[int, ...], topology: str) -> int:
    """``_largest``, once for groups of one link layout (one server model: one matrix)."""
    sig = g.choices.get(("pair-sig",))
    if sig is None:
        sig = g.choices[("pair-sig",)] = intern_sig((tuple(map(tuple, g.pair)), g.domain))
    key = (sig, elig, canonical_topology(topology))
    got = _LARGEST.get(key)
    if got is None:
        if len(_LARGEST) >= SIG_LIMIT:
            _LARGEST.clear()
        got = _LARGEST[key] = _largest(g, elig, topology)
    return got


def _largest(g: Group, elig: tuple[int, ...], topology: str) -> int:
    if canonical_topology(topology) == "same-fabric":
        return max(Counter(g.domain[i] for i in elig).values(), default=0)
    # same-switch: greedy clique size, enough for an explanation
    best = 0
    for seed in elig:
        clique = [seed]
        for j in elig:
            if j != seed and all(g.pair[j][c] >= SWITCH_SCORE for c in clique):
                clique.append(j)
        best = max(best, len(clique))
    return best


def _greedy(g: Group, pool: tuple[int, ...], k: int, vals: list[float], topology: str):
    """Candidate sets grown from each seed by the best marginal gain (for large groups).

    Each candidate's sum of closeness to the chosen devices (added in the order they were
    chosen, as a fresh sum would) and whether it is under one switch with all of them are kept
    up to date as devices are added: a seed costs O(k * len(pool)), not O(k^2 * len(pool))."""
    if k == len(pool) and topology != "same-switch":  # nothing to choose: every seed grows to all
        yield tuple(sorted(pool))
        return
    pair = g.pair
    switch = topology == "same-switch"
    for seed in pool:
        chosen = [seed]
        taken = {seed}
        sums = {j: pair[j][seed] for j in pool}
        near = {j: pair[j][seed] >= SWITCH_SCORE for j in pool} if switch else None
        while len(chosen) < k:
            best_j, best_gain = None, -1.0
            m = len(chosen)
            for j in pool:
                if j in taken or (near is not None and not near[j]):
                    continue
                gain = sums[j] / m + vals[j]
                if gain > best_gain:
                    best_j, best_gain = j, gain
            if best_j is None:
                break
            chosen.append(best_j)
            taken.add(best_j)
            for j in pool:
                sums[j] += pair[j][best_j]
                if near is not None and pair[j][best_j] < SWITCH_SCORE:
                    near[j] = False
        if len(chosen) == k:
            yield tuple(sorted(chosen))
