"""Device Profiles: model name -> compute units, memory, features, cost weight.

``profiles.yaml`` beside this file names the reference device (compute_units = 1.0) and the
format; each vendor package brings its devices in its own file (``spec.profiles``, with the
public spec figures they are built from). ``normalize_model`` turns a vendor product string
into the normalized model name of DESIGN.md (the spec's ``model_strip`` and
``model_digit_prefix`` clean unknown strings); ``profile_for`` never fails: an unknown model
gets a profile marked ``estimated`` built from what the device itself reports.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hetero_exporter import validate, vendors
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
        """Normalized model name for a vendor product string (a profile's model or one of its
        aliases, e.g. a product string with its marketing prefix); unknown strings are
        cleaned (the spec's prefixes stripped, blanks to dashes), not invented."""
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
                       source="estimated: model not in the device profiles; scaled from memory size")


def _clean(vendor: str, raw: str) -> str:
    spec = vendors.spec(vendor)
    s = raw
    pat = spec.model_strip if spec is not None else ""
    if pat:
        while True:
            t = re.sub(pat, "", s, flags=re.I)
            if t == s:
                break
            s = t
    s = re.sub(r"\s+", "-", s.strip())
    prefix = spec.model_digit_prefix if spec is not None else ""
    if prefix and s[:1].isdigit():
        s = prefix + s  # the vendor's normalized names start with it ("910B3" -> "<prefix>910B3")
    return s or "unknown"


def _entries(doc: dict, ref_tflops: float, where: str, vendor: str = "", kind: str = "") -> list[_Entry]:
    """The entries of one profiles document; ``vendor``/``kind`` (a vendor package's file) are
    the defaults of its entries, and an entry of another vendor is an error."""
    entries = []
    for i, p in enumerate((doc or {}).get("profiles") or ()):
        try:
            if vendor and p.get("vendor", vendor) != vendor:
                raise ValueError(f"vendor {p.get('vendor')!r} in the file of vendor {vendor!r}")
            profile = Profile(
                model=p["model"], vendor=p.get("vendor", vendor) or p["vendor"],
                kind=p.get("kind", kind) or p["kind"],
                compute_units=round(float(p["tflops"]) / ref_tflops, 3),
                memory_bytes=int(float(p["memory_gib"]) * GIB),
                interconnect=p.get("interconnect"),
                features=tuple(p.get("features") or ()),
                cost_weight=float(p["cost_weight"]),
                approximate=bool(p.get("approximate", False)),
                source=p["source"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            model = p.get("model") if isinstance(p, dict) else None
            raise ValueError(f"{where}: entry {i} ({model!r}) is malformed: {e}") from None
        aliases = tuple(re.compile(a, re.I) for a in p.get("aliases") or ())
        entries.append(_Entry(profile, aliases))
    return entries


def _build(doc: dict, extra: tuple[tuple[dict, str, str, str], ...] = ()) -> ProfileTable:
    """The table of the core document (reference device + its entries) and ``extra``
    documents: (doc, where, vendor, kind) of the vendor packages."""
    ref = doc["reference"]
    ref_tflops = float(ref["tflops"])
    entries = _entries(doc, ref_tflops, "profiles.yaml")
    for vdoc, where, vendor, kind in extra:
        entries.extend(_entries(vdoc, ref_tflops, where, vendor, kind))
    return ProfileTable(ref["model"], ref_tflops, tuple(entries))


def _load(path: Path) -> dict:
    return validate.load_yaml(path.read_text(encoding="utf-8")) or {}


def _vendor_document(spec: vendors.VendorSpec) -> Optional[tuple[dict, str, str, str]]:
    if not spec.profiles:
        return None
    try:
        path = spec.data_path(spec.profiles)
    except FileNotFoundError:
        return None
    return (_load(path), str(path), spec.name, spec.kind) if path.is_file() else None


def _vendor_documents() -> tuple[tuple[dict, str, str, str], ...]:
    return tuple(d for d in map(_vendor_document, vendors.specs().values()) if d is not None)


_TABLE: list = [None, None]  # [vendors.generation() it was built at, ProfileTable]
_VENDOR_TABLES: dict[str, tuple[int, ProfileTable]] = {}


def table() -> ProfileTable:
    """The profile table: the reference plus every vendor's profiles (loaded once, and again
    after a vendor spec is registered or unregistered)."""
    gen = vendors.generation()
    if _TABLE[1] is None or _TABLE[0] != gen:
        _TABLE[:] = [gen, _build(_load(_DATA), _vendor_documents())]
    return _TABLE[1]


def vendor_table(vendor: str) -> ProfileTable:
    """The reference's entries plus one vendor's: what a node's own devices need. Parsing every
    vendor's file costs ~0.4 MiB of resident memory that a one-vendor node would keep
    (BENCHMARKS.md); the whole table is built only where a vendor-blind lookup asks for it."""
    gen = vendors.generation()
    if _TABLE[1] is not None and _TABLE[0] == gen:
        return _TABLE[1]
    cached = _VENDOR_TABLES.get(vendor)
    if cached is None or cached[0] != gen:
        spec = vendors.spec(vendor)
        doc = _vendor_document(spec) if spec is not None else None
        cached = (gen, _build(_load(_DATA), (doc,) if doc is not None else ()))
        _VENDOR_TABLES[vendor] = cached
    return cached[1]


def _table_of(vendor: str) -> ProfileTable:
    return vendor_table(vendor) if vendor else table()


def lookup(model: str, vendor: str = "") -> Optional[Profile]:
    """The profile of a normalized model name, among ``vendor``'s; when '', the first vendor
    (in spec order) that has it, each vendor's file read only when the ones before lack it."""
    if vendor:
        return vendor_table(vendor).lookup(model)
    for name in vendors.specs():
        found = vendor_table(name).lookup(model)
        if found is not None:
            return found
    return None


def normalize_model(vendor: str, raw_name: str) -> str:
    return _table_of(vendor).normalize(vendor, raw_name)


def profile_for(vendor: str, model: str, *, kind: str = "",
                memory_total_bytes: Optional[float] = None) -> Profile:
    return _table_of(vendor).profile_for(vendor, model, kind=kind, memory_total_bytes=memory_total_bytes)
