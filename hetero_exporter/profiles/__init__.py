"""Device Profiles: model name -> compute units, memory, features, cost weight.

The data lives in ``profiles.yaml`` beside this file (with the public spec figures it is
built from). ``normalize_model`` turns a vendor product string into the normalized model
name of DESIGN.md; ``profile_for`` never fails: an unknown model gets a profile marked
``estimated`` built from what the device itself reports.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

# libyaml's loader when PyYAML has it: same safe subset, ~10x faster on our data files
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

from hetero_exporter.model import Profile

_DATA = Path(__file__).with_name("profiles.yaml")
GIB = 1 << 30


@dataclass(frozen=True)
class _Entry:
    profile: Profile
    aliases: tuple[re.Pattern, ...]


@dataclass(frozen=True)
class ProfileTable:
    reference_model: str
    reference_tflops: float
    entries: tuple[_Entry, ...]

    def normalize(self, vendor: str, raw_name: str) -> str:
        """Normalized model name for a vendor product string (e.g. 'NVIDIA H100 80GB HBM3'
        -> 'H100-SXM5-80GB'); unknown strings are cleaned, not invented."""
        raw = (raw_name or "").strip()
        for e in self.entries:
            if e.profile.vendor != vendor:
                continue
            if raw == e.profile.model or any(a.search(raw) for a in e.aliases):
                return e.profile.model
        return _clean(vendor, raw)

    def lookup(self, model: str) -> Optional[Profile]:
        """The profile of a normalized model name (the first entry of that name), or None."""
        return self._by_model.get(model)

    @functools.cached_property
    def _by_model(self) -> dict[str, Profile]:
        # every device of every cycle looks its profile up: an index, not a scan
        index: dict[str, Profile] = {}
        for e in self.entries:
            index.setdefault(e.profile.model, e.profile)
        return index

    def profile_for(self, vendor: str, model: str, *, kind: str = "",
                    memory_total_bytes: Optional[float] = None) -> Profile:
        """The profile of a normalized model; unknown models get an estimated one.

        The estimate scales the reference by memory (a weak but monotone proxy) so a
        scheduler still ranks an unknown large-memory part above a small one."""
        known = self.lookup(model)
        if known is not None and (not vendor or known.vendor == vendor):
            return known
        mem = int(memory_total_bytes) if memory_total_bytes else None
        ratio = (mem / (80 * GIB)) if mem else 0.25
        units = round(max(0.05, min(ratio, 4.0)), 3)
        return Profile(model=model or "unknown", vendor=vendor, kind=kind, compute_units=units,
                       memory_bytes=mem, features=(), cost_weight=units, estimated=True,
                       source="estimated: model not in profiles.yaml; scaled from memory size")


def _clean(vendor: str, raw: str) -> str:
    prefixes = {"nvidia": r"^(NVIDIA|Tesla|Quadro|GeForce)\s+", "amd": r"^(AMD|Instinct)\s+",
                "ascend": r"^(Ascend|Huawei)\s*", "cambricon": r"^(Cambricon)\s*", "hygon": r"^(Hygon|DCU)\s*"}
    s = raw
    pat = prefixes.get(vendor)
    if pat:
        while True:
            t = re.sub(pat, "", s, flags=re.I)
            if t == s:
                break
            s = t
    s = re.sub(r"\s+", "-", s.strip())
    if vendor == "ascend" and s[:1].isdigit():
        s = "Ascend" + s  # the normalized Ascend names read "Ascend910B3", "Ascend310P3"
    return s or "unknown"


def _build(doc: dict) -> ProfileTable:
    ref = doc["reference"]
    ref_tflops = float(ref["tflops"])
    entries = []
    for i, p in enumerate(doc["profiles"]):
        try:
            profile = Profile(
                model=p["model"], vendor=p["vendor"], kind=p["kind"],
                compute_units=round(float(p["tflops"]) / ref_tflops, 3),
                memory_bytes=int(float(p["memory_gib"]) * GIB),
                interconnect=p.get("interconnect"),
                features=tuple(p.get("features") or ()),
                cost_weight=float(p["cost_weight"]),
                approximate=bool(p.get("approximate", False)),
                source=p["source"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"profiles.yaml: entry {i} ({p.get('model')!r}) is malformed: {e}") from None
        aliases = tuple(re.compile(a, re.I) for a in p.get("aliases") or ())
        entries.append(_Entry(profile, aliases))
    return ProfileTable(ref["model"], ref_tflops, tuple(entries))


@functools.lru_cache(maxsize=None)
def table() -> ProfileTable:
    """The built-in profile table (loaded once)."""
    with open(_DATA, encoding="utf-8") as f:
        return _build(yaml.load(f, Loader=_LOADER))


def normalize_model(vendor: str, raw_name: str) -> str:
    return table().normalize(vendor, raw_name)


def profile_for(vendor: str, model: str, *, kind: str = "",
                memory_total_bytes: Optional[float] = None) -> Profile:
    return table().profile_for(vendor, model, kind=kind, memory_total_bytes=memory_total_bytes)
