"""``nvidia-smi mig -lgip`` / ``-lgipp`` / ``-lgi`` / ``-lci``: a GPU's MIG partition inventory
(the profiles it can be split into, where each may be placed, the instances that exist).

Read by structure, so newer drivers' profile names and a transcribed capture's spacing do not
matter:

- ``-lgip`` (GPU instance profiles): a box titled ``GPU instance profiles:``; a two-row header
  (``GPU Name ID Instances Memory P2P SM DEC ENC`` over ``Free/Total GiB CE JPEG OFA``); a
  record per profile of one row (the words in the first header row's order: GPU index, ``MIG
  <profile>``, id, ``free/total``, memory GiB, P2P ``Yes``/``No``, SM, DEC, ENC) and, on
  drivers that print it, a second row of CE, JPEG, OFA. Profile names are kept as printed:
  Blackwell adds ``+gfx`` (graphics), ``+me`` (one media engine), ``+me.all`` (all of them) and
  ``-me`` (none) to the Hopper-era ``1g.24gb``.
- ``-lgipp`` (placements): ``GPU 0 Profile ID 14 Placements: {0,3,6,9}:3``, one line per
  profile (``Placement :`` when there is one): the start slots and the slots each takes (a
  Blackwell GPU has a 12-slot grid: ``{0}:12`` is the whole GPU). ``-lcipp`` lines (``GPU 0 GI 1
  Profile ID 0 Placements: ...``) are read too, with their GPU instance.
- ``-lgi`` (GPU instances, box ``GPU instances:``): GPU, ``MIG <profile>``, profile id,
  instance id, placement ``start:size``.
- ``-lci`` (compute instances, box ``Compute instances:``): GPU, GPU instance id, ``MIG
  <profile>``, profile id, compute instance id, placement ``start:size``.

Columns are taken by the words of the header's first row, in order (a row's ``MIG <profile>`` is
its two name words), so a column a driver adds or drops moves no value onto another. Memory
``GiB`` -> bytes (resolution 0.01 GiB, as printed). Listings of other kinds (``-lcip``) and
nvidia-smi's own messages (``No MIG-enabled devices found.``) are a ParseError naming them.
The result is typed (``MigInventory``, ``to_dict()`` for ``parse``); ``merge`` joins the
listings of one GPU.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Optional, Sequence

from hetero_exporter.sdk import tables, values
from hetero_exporter.sdk.contract import ParseError

TOOL = "nvidia-smi mig"
CELLS = values.Cells(TOOL)
GIB = float(1 << 30)
# box title -> (listing, the first header row's words -> column keys)
_TITLES = {
    "gpu instance profiles": "-lgip",
    "gpu instances": "-lgi",
    "compute instances": "-lci",
    "compute instance profiles": "-lcip",
}
# the first header row's words, by listing: each a column of one word in a row ("name" takes two)
_COLUMNS = {
    "-lgip": {"gpu": "gpu", "name": "name", "id": "profile_id", "instances": "instances", "memory": "memory",
              "p2p": "p2p", "sm": "sm", "dec": "dec", "enc": "enc", "ce": "ce", "jpeg": "jpeg", "ofa": "ofa"},
    "-lgi": {"gpu": "gpu", "name": "name", "profile": "profile_id", "instance": "gpu_instance",
             "placement": "placement"},
    # -lci's header names "GPU" twice: the GPU, then its GPU Instance ID
    "-lci": {"gpu": "gpu", "name": "name", "profile": "profile_id", "instance": "compute_instance",
             "placement": "placement"},
}
# engines a -lgip second row may give (under SM, DEC, ENC): the words of the second header row
_SECOND_ROW = ("ce", "jpeg", "ofa")
_RESOURCES = ("sm", "ce", "dec", "enc", "jpeg", "ofa")
_PLACEMENT_LINE = re.compile(
    r"^GPU\s+(\d{1,4})\s+(?:GI\s+(\d{1,4})\s+)?Profile\s+ID\s+(\d{1,4})\s+Placements?\s*:\s*"
    r"\{([0-9,\s]{0,400})\}\s*:\s*(\d{1,4})$", re.I)
_MESSAGE = re.compile(r"^(No MIG-enabled devices found|No GPU instances? found|No compute instances? found|"
                      r"Unable to|Failed to|Insufficient Permissions|Not Supported)\b.*", re.I)
_START_SIZE = re.compile(r"^(\d{1,4}):(\d{1,4})$")


@dataclass(frozen=True)
class Profile:
    """A GPU instance profile (``-lgip``): what one instance of it holds."""

    gpu: int
    name: str  # "1g.24gb+me", as printed after "MIG"
    profile_id: int
    instances_free: Optional[int] = None
    instances_total: Optional[int] = None
    memory_bytes: Optional[int] = None
    p2p: Optional[bool] = None
    resources: dict[str, int] = dataclasses.field(default_factory=dict)  # sm, ce, dec, enc, jpeg, ofa -> count


@dataclass(frozen=True)
class Placement:
    """Where instances of a profile may start (``-lgipp``; ``-lcipp`` within a GPU instance)."""

    gpu: int
    profile_id: int
    starts: tuple[int, ...]
    size: int
    gpu_instance: Optional[int] = None


@dataclass(frozen=True)
class Instance:
    """A GPU instance (``-lgi``) or a compute instance in one (``-lci``: ``compute_instance`` set)."""

    gpu: int
    name: str
    profile_id: int
    gpu_instance: int
    compute_instance: Optional[int] = None
    start: Optional[int] = None
    size: Optional[int] = None


@dataclass(frozen=True)
class MigInventory:
    """One or more MIG listings of a node: ``listings`` names what was read (``-lgip``...)."""

    listings: tuple[str, ...]
    profiles: tuple[Profile, ...] = ()
    placements: tuple[Placement, ...] = ()
    gpu_instances: tuple[Instance, ...] = ()
    compute_instances: tuple[Instance, ...] = ()

    @property
    def command(self) -> str:
        return " ".join(f"{TOOL} {x}" for x in self.listings)

    def gpus(self) -> list[int]:
        """The GPU indices the listings name, in order."""
        seen: dict[int, None] = {}
        for group in (self.profiles, self.placements, self.gpu_instances, self.compute_instances):
            for item in group:
                seen.setdefault(item.gpu, None)
        return list(seen)

    def to_dict(self) -> dict:
        return {"command": self.command, **{k: v for k, v in dataclasses.asdict(self).items() if k != "listings"}}


def merge(parts: Sequence[MigInventory]) -> MigInventory:
    """The listings of one node read separately (``-lgip``, ``-lgipp``, ``-lgi``, ``-lci``) as one."""
    return MigInventory(tuple(x for p in parts for x in p.listings),
                        tuple(x for p in parts for x in p.profiles),
                        tuple(x for p in parts for x in p.placements),
                        tuple(x for p in parts for x in p.gpu_instances),
                        tuple(x for p in parts for x in p.compute_instances))


def looks_like(text: str) -> bool:
    """A box titled ``GPU instance profiles:`` / ``GPU instances:`` / ``Compute instances:``, or a
    ``GPU N Profile ID N Placements: {...}:N`` line first."""
    for raw in text[:8192].splitlines()[:8]:
        s = raw.strip()
        if not s or tables.BORDER.match(s):
            continue
        if _PLACEMENT_LINE.match(s):
            return True
        inner = s.strip("|").strip().rstrip(":").strip().lower()
        return inner in _TITLES and s.startswith("|")
    return False


def parse(text: str) -> MigInventory:
    """Any one of the listings (told by its title or its lines)."""
    lines = tables.lines_of(text, TOOL)
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    if not first:
        raise ParseError(TOOL, "empty output")
    if _MESSAGE.match(first):
        raise ParseError(TOOL, f"nvidia-smi printed a message, not a listing: {first[:80]!r}", 1)
    if _PLACEMENT_LINE.match(first):
        return _placements(text)
    return _box(text)


def _placements(text: str) -> MigInventory:
    out = []
    for n, s in tables.stripped_lines(text, TOOL):
        m = _PLACEMENT_LINE.match(s)
        if m is None:
            raise ParseError(TOOL, f"not a 'GPU N Profile ID N Placements: {{...}}:N' line: {s[:60]!r}", n)
        starts = tuple(int(x) for x in re.split(r"[\s,]+", m.group(4).strip()) if x)
        if not starts:
            raise ParseError(TOOL, "a profile with no placement", n)
        out.append(Placement(int(m.group(1)), int(m.group(3)), starts, int(m.group(5)),
                             None if m.group(2) is None else int(m.group(2))))
        tables.check_devices(len(out), TOOL, n)
    listing = "-lcipp" if any(p.gpu_instance is not None for p in out) else "-lgipp"
    return MigInventory((listing,), placements=tuple(out))


def _box(text: str) -> MigInventory:
    lines = tables.box_lines(text, TOOL, strict=True)
    rows = [ln for ln in lines if ln.kind == "row"]
    if not rows:
        raise ParseError(TOOL, "no listing box")
    title = rows[0].joined.rstrip(":").strip().lower()
    listing = _TITLES.get(title)
    if listing is None:
        raise ParseError(TOOL, f"no 'GPU instance profiles:' / 'GPU instances:' / 'Compute instances:' title, "
                               f"got {rows[0].joined[:60]!r}", rows[0].lineno)
    if listing not in _COLUMNS:
        raise ParseError(TOOL, f"{listing} ({title}) is not read: -lgip, -lgipp, -lgi and -lci are",
                         rows[0].lineno)
    # the header: the rows after the title up to the "|=====|" border; then the records
    at = lines.index(rows[0])
    rule = next((i for i in range(at + 1, len(lines)) if lines[i].kind == "border" and "=" in lines[i].text), None)
    if rule is None:
        raise ParseError(TOOL, "no '|====|' rule under the header", rows[0].lineno)
    header = [ln for ln in lines[at + 1:rule] if ln.kind == "row"]
    if not header:
        raise ParseError(TOOL, "no header row", rows[0].lineno)
    columns = _header(listing, header)
    second = [w.lower() for ln in header[1:2] for w in ln.joined.split() if w.lower() in _SECOND_ROW]
    records = tables.records(lines[rule + 1:])
    profiles: list[Profile] = []
    instances: list[Instance] = []
    for rec in records:
        if listing == "-lgip":
            profiles.append(_profile(rec, columns, second))
        else:
            if len(rec) != 1:
                raise ParseError(TOOL, f"an instance of {len(rec)} rows; {listing} prints one", rec[0].lineno)
            instances.append(_instance(rec[0], columns, listing))
        tables.check_devices(len(profiles) + len(instances), TOOL, rec[0].lineno)
    if listing == "-lgip":
        return MigInventory((listing,), profiles=tuple(profiles))
    if listing == "-lgi":
        return MigInventory((listing,), gpu_instances=tuple(instances))
    return MigInventory((listing,), compute_instances=tuple(instances))


def _header(listing: str, header: Sequence[tables.BoxLine]) -> list[str]:
    """Column keys of the first header row, in order (``-lci``: its second ``GPU`` is the GPU
    instance id)."""
    known = _COLUMNS[listing]
    out: list[str] = []
    for word in header[0].joined.split():
        key = known.get(word.lower())
        if key is None:
            raise ParseError(TOOL, f"{listing}: unknown column {word[:30]!r}", header[0].lineno)
        if key == "gpu" and "gpu" in out:
            key = "gpu_instance"
        out.append(key)
    if "gpu" not in out or "name" not in out or "profile_id" not in out:
        raise ParseError(TOOL, f"{listing}: the header names no GPU, Name or profile ID column", header[0].lineno)
    return out


def _cells(row: tables.BoxLine, columns: Sequence[str]) -> dict[str, str]:
    """A data row's words under the columns (``MIG 1g.24gb`` is the name's two words)."""
    words = row.joined.split()
    out: dict[str, str] = {}
    i = 0
    for key in columns:
        if i >= len(words):
            raise ParseError(TOOL, f"a row of {len(words)} words for {len(columns)} columns", row.lineno)
        if key == "name" and words[i].upper() == "MIG" and i + 1 < len(words):
            i += 1  # "MIG <profile>": the profile is the name
        out[key] = words[i]
        i += 1
    if i != len(words):
        raise ParseError(TOOL, f"a row of {len(words)} words for {len(columns)} columns", row.lineno)
    return out


def _int(cell: Optional[str], what: str, line: int) -> int:
    # -lcip marks the default profile with '*'
    return CELLS.index((cell or "").rstrip("*"), what, line, values.MAX_DIGITS)


def _profile(rec: Sequence[tables.BoxLine], columns: Sequence[str], second: Sequence[str]) -> Profile:
    if len(rec) > 2:
        raise ParseError(TOOL, f"a profile of {len(rec)} rows; -lgip prints one or two", rec[0].lineno)
    ln = rec[0].lineno
    c = _cells(rec[0], columns)
    if len(rec) == 2:
        more = rec[1].joined.split()
        if len(more) != len(second):
            raise ParseError(TOOL, f"a second row of {len(more)} values under {len(second)} (CE JPEG OFA)",
                             rec[1].lineno)
        c.update(zip(second, more))
    free = total = None
    if "instances" in c:
        f, sep, t = c["instances"].partition("/")
        if not sep:
            raise ParseError(TOOL, f"Instances: expected 'free/total', got {c['instances'][:20]!r}", ln)
        free, total = _int(f, "Instances free", ln), _int(t, "Instances total", ln)
    memory = None
    if "memory" in c and not values.is_na(c["memory"]):
        try:
            gib = values.number(c["memory"])
        except ValueError:
            raise ParseError(TOOL, f"Memory: expected GiB, got {c['memory'][:20]!r}", ln) from None
        if gib is None or not 0 <= gib < 1e6:
            raise ParseError(TOOL, f"Memory: {c['memory'][:20]!r} GiB is no memory size", ln)
        memory = int(round(gib * GIB))
    p2p = {"yes": True, "no": False}.get(c.get("p2p", "").lower())
    resources = {k: _int(c[k], k.upper(), ln) for k in _RESOURCES if k in c and not values.is_na(c[k])}
    return Profile(gpu=_int(c["gpu"], "GPU", ln), name=c["name"], profile_id=_int(c["profile_id"], "ID", ln),
                   instances_free=free, instances_total=total, memory_bytes=memory, p2p=p2p, resources=resources)


def _instance(row: tables.BoxLine, columns: Sequence[str], listing: str) -> Instance:
    ln = row.lineno
    c = _cells(row, columns)
    start = size = None
    if "placement" in c:
        m = _START_SIZE.match(c["placement"])
        if m is None:
            raise ParseError(TOOL, f"Placement: expected 'start:size', got {c['placement'][:20]!r}", ln)
        start, size = int(m.group(1)), int(m.group(2))
    if "gpu_instance" not in c:
        raise ParseError(TOOL, f"{listing}: no GPU instance id column", ln)
    return Instance(gpu=_int(c["gpu"], "GPU", ln), name=c["name"], profile_id=_int(c["profile_id"], "Profile ID", ln),
                    gpu_instance=_int(c["gpu_instance"], "GPU instance ID", ln),
                    compute_instance=CELLS.integer(c.get("compute_instance"), "Compute instance ID", ln),
                    start=start, size=size)
