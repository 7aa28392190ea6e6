"""AMD GPUs and Hygon DCUs through their command-line tools: ``rocm-smi`` and Hygon's ``hy-smi``.

For nodes where only the CLI exists (ROCm before amdsmi, Hygon DTK). ``hy-smi`` is Hygon's
fork of ``rocm-smi`` and prints the same family of formats, so one parser reads both:

- ``--json``: ``{"card0": {key: value, ...}, "system": {...}}`` where every value is a string
  and the keys changed across versions ("GPU ID" -> "Device ID", "Card series" -> "Card Series",
  "VRAM Total Memory (B)" vs Hygon's "vram Total Memory (MiB)", "(Sensor memory)" vs
  "(Sensor mem)"...): fields are found by key patterns, never by position or exact file;
- the default "Concise Info" table (ROCm 4 ``GPU Temp AvgPwr ...``, Hygon DTK ``DCU Temp ...``,
  ROCm 6 two-line headers with ``Partitions`` and a device name line): columns are cut at the
  start offsets of the header words, because the tool left-justifies every cell of a column
  at the same offset as its header word;
- the keyed text of single options (``GPU[0]  : GPU use (%): 0``).

``parse_rocm_smi`` / ``parse_hy_smi`` are pure (text -> NodeSnapshot) and raise only
``ParseError``. ``SmiCliCollector`` runs the tool through hetero_exporter.sdk.runner (deadline,
process-group kill, output cap, C locale) and adds what needs history (PCIe replay faults).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Mapping, Optional, Sequence

from hetero_exporter import fields as F
from hetero_exporter import profiles
from hetero_exporter.sdk import runner as vendor_cli
from hetero_exporter.sdk.contract import CollectorOptions, ParseError, Unavailable
from hetero_exporter.sdk.ledger import FaultLedger
from hetero_exporter.health import faults as fault_tables
from hetero_exporter.model import (DeviceIdentity, DeviceSample, Fault, Health, Link, NodeSnapshot,
                                   ProcessSample, Quality, Reading)

log = logging.getLogger(__name__)

TOOL_VENDOR = {"rocm-smi": "amd", "hy-smi": "hygon"}
KIND = {"amd": "gpu", "hygon": "dcu"}

# Vendor-specific fields (JSON model and accelerator_field_status only).
TEMP_EDGE = "temperature_edge_celsius"
MEMORY_USED_RATIO = "memory_used_ratio"  # the concise table's VRAM%, when no byte counts exist
PCIE_REPLAY = "pcie_replay_total"

# Static quality per field (method, window, resolution); the source is the key the value was
# read from, e.g. "rocm-smi --json 'Temperature (Sensor junction) (C)'".
_STATIC = {
    F.UTILIZATION: ("sampled", None, 0.01),  # amdgpu gpu_busy_percent: firmware average
    F.MEMORY_UTILIZATION: ("sampled", None, 0.01),
    MEMORY_USED_RATIO: ("derived", None, 0.01),
    F.MEMORY_USED: ("measured", None, 1.0),
    F.MEMORY_TOTAL: ("measured", None, 1.0),
    F.TEMP_CORE: ("measured", None, 1.0),
    F.TEMP_MEMORY: ("measured", None, 1.0),
    TEMP_EDGE: ("measured", None, 1.0),
    F.POWER: ("sampled", 1.0, 1.0),  # "Average Graphics Package Power": SMU ~1 s average
    F.POWER_LIMIT: ("measured", None, 1.0),
    F.ENERGY: ("measured", None, 1e-6),
    F.CLOCK_COMPUTE: ("measured", None, 1e6),
    F.CLOCK_MEMORY: ("measured", None, 1e6),
    PCIE_REPLAY: ("measured", None, 1.0),
}


def quality(field_name: str, source: str, resolution: Optional[float] = None) -> Quality:
    method, window, res = _STATIC[field_name]
    if field_name == F.POWER and "socket" in source.lower():
        method, window = "measured", None  # MI300 "Current Socket ... Power", concise "Power (Socket)"
    return Quality(source, method, window, res if resolution is None else resolution)


# --------------------------------------------------------------------------- value parsing

_NUM = re.compile(r"^\(?\s*([-+]?\d+(?:\.\d+)?)\s*([a-zA-Z%°/]*)\s*\)?$")
_SIZE_UNITS = {"b": 1, "kb": 1000, "kib": 1 << 10, "mb": 10**6, "mib": 1 << 20, "gb": 10**9, "gib": 1 << 30}
_FREQ_UNITS = {"hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}


def is_na(v: Optional[str]) -> bool:
    return v is None or not v.strip() or v.strip().upper().startswith("N/A") or v.strip().lower() in (
        "unsupported", "unknown", "none")


def number(v: Optional[str]) -> Optional[float]:
    """'45.0' / '41.0°C' / '50.0c' / '(500Mhz)' / '0%' / '23.0W' -> the number; None for N/A."""
    if is_na(v):
        return None
    m = _NUM.match(v.strip())
    if not m:
        return None
    x = float(m.group(1))
    return x if x == x and abs(x) != float("inf") else None


def frequency(v: Optional[str]) -> Optional[float]:
    """'(500Mhz)' / '1319Mhz' / '1.2GHz' -> hertz."""
    if is_na(v):
        return None
    m = _NUM.match(v.strip().rstrip("*").strip())
    if not m:
        return None
    unit = _FREQ_UNITS.get(m.group(2).lower())
    return None if unit is None else float(m.group(1)) * unit


def _hex_id(v: Optional[str]) -> Optional[str]:
    if is_na(v):
        return None
    m = re.match(r"^\s*(0x[0-9a-fA-F]+)", v or "")
    return m.group(1).lower() if m else None


# --------------------------------------------------------------------------- the report


@dataclass
class Card:
    """One device as the tool printed it: ``index`` (card N / GPU[N]), the raw key/value
    pairs, and (concise tables) values already typed by column."""

    index: int
    raw: dict[str, str] = field(default_factory=dict)
    columns: dict[str, str] = field(default_factory=dict)  # concise: column semantic -> cell
    line: Optional[int] = None


@dataclass
class Report:
    tool: str
    format: str  # json | keyed | concise
    cards: list[Card]
    system: dict[str, str] = field(default_factory=dict)
    dcu_header: bool = False  # the table names devices "DCU" (Hygon)


def _decode_json(text: str, tool: str) -> Any:
    """The first JSON object in the text (rocm-smi may print warnings before it)."""
    m = re.search(r"^[ \t]*\{", text, re.M)
    if m is None:
        raise ParseError(tool, "no JSON object in the output")
    start = m.end() - 1
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except (ValueError, RecursionError) as e:
        raise ParseError(tool, f"--json output is not valid JSON: {e}", text.count("\n", 0, start) + 1) from None
    return doc


_CARD_KEY = re.compile(r"^card(\d+)$", re.I)


def parse_json(text: str, tool: str = "rocm-smi") -> Report:
    doc = _decode_json(text, tool)
    if not isinstance(doc, dict):
        raise ParseError(tool, f"--json output is a {type(doc).__name__}, expected an object of cards")
    cards, system = [], {}
    for key, body in doc.items():
        m = _CARD_KEY.match(str(key))
        if m:
            if not isinstance(body, dict):
                raise ParseError(tool, f"{key}: expected an object of fields, got {type(body).__name__}")
            cards.append(Card(int(m.group(1)), {str(k): _str(v) for k, v in body.items()}))
        elif str(key).lower() == "system" and isinstance(body, dict):
            system = {str(k): _str(v) for k, v in body.items()}
    if not cards:
        raise ParseError(tool, "--json output has no 'cardN' entries")
    cards.sort(key=lambda c: c.index)
    return Report(tool, "json", cards, system)


def _str(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)


_KEYED = re.compile(r"^\s*(GPU|DCU|HCU)\[(\d+)\]\s*:\s*(.*)$")


def parse_keyed(text: str, tool: str = "rocm-smi") -> Report:
    """``GPU[0]          : VRAM Total Memory (B): 206141652992`` lines (split like the tool's
    own JSON formatter: key before the first ': ', value after it)."""
    cards: dict[int, Card] = {}
    dcu = False
    for n, line in enumerate(text.splitlines(), 1):
        m = _KEYED.match(line)
        if not m:
            continue
        dcu = dcu or m.group(1) in ("DCU", "HCU")
        idx = int(m.group(2))
        card = cards.setdefault(idx, Card(idx, line=n))
        key, sep, value = m.group(3).partition(": ")
        if sep:
            card.raw[key.strip()] = value.strip()
    if not cards:
        raise ParseError(tool, "no 'GPU[n] : key: value' lines")
    return Report(tool, "keyed", [cards[i] for i in sorted(cards)], {}, dcu)


# Concise table column semantics by header word (case-insensitive).
_COLUMNS = (
    ("index", re.compile(r"^(GPU|DCU|HCU|Device)$", re.I)),
    ("model_rev", re.compile(r"^\[Model\s*:\s*Revision\]$", re.I)),
    ("ids", re.compile(r"^IDs$", re.I)),
    ("node", re.compile(r"^Node$", re.I)),
    ("temp", re.compile(r"^Temp", re.I)),
    ("power", re.compile(r"^(AvgPwr|Power)$", re.I)),
    ("partitions", re.compile(r"^Partitions$", re.I)),
    ("sclk", re.compile(r"^SCLK$", re.I)),
    ("mclk", re.compile(r"^MCLK$", re.I)),
    ("fan", re.compile(r"^Fan$", re.I)),
    ("perf", re.compile(r"^Perf$", re.I)),
    ("pwrcap", re.compile(r"^PwrCap$", re.I)),
    ("vram_pct", re.compile(r"^VRAM%$", re.I)),
    ("util", re.compile(r"^(GPU|DCU|HCU)%$", re.I)),
)
_SEPARATOR = re.compile(r"^\s*[=_\-]{3,}")


def _cells(line: str) -> list[tuple[int, str]]:
    """Words separated by two or more spaces, with their start offsets."""
    return [(m.start(), m.group(0)) for m in re.finditer(r"\S+(?: \S+)*", line)]


def _cut(line: str, starts: list[int]) -> list[str]:
    out = []
    for i, s in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(line)
        out.append(line[s:end].strip() if s < len(line) else "")
    return out


def parse_concise(text: str, tool: str = "rocm-smi") -> Report:
    lines = text.splitlines()
    header_at = None
    for n, line in enumerate(lines):
        words = [w for _, w in _cells(line)]
        if words and re.match(r"^(GPU|DCU|HCU|Device)$", words[0], re.I) and any(
                re.match(r"^Temp", w, re.I) for w in words):
            header_at = n
            break
    if header_at is None:
        raise ParseError(tool, "not rocm-smi/hy-smi output: no JSON object (--json), no 'GPU[n] : key: value' "
                               "lines and no Concise Info header (a line starting with GPU/DCU/Device that names Temp)")
    head = _cells(lines[header_at])
    starts = [s for s, _ in head]
    names = [w for _, w in head]
    sub = [""] * len(names)
    n = header_at + 1
    # ROCm 6 prints a second header line: "(Junction)", "(Socket)", "(Mem, Compute)", "Name (20 chars)"
    if n < len(lines) and lines[n].strip() and not _SEPARATOR.match(lines[n]) and not re.match(r"^\s*\d", lines[n]):
        for s, w in _cells(lines[n]):
            col = max((i for i, st in enumerate(starts) if st <= s), default=0)
            sub[col] = (sub[col] + " " + w).strip()
        n += 1
    semantics = []
    for name in names:
        sem = next((k for k, pat in _COLUMNS if pat.match(name)), name.lower())
        semantics.append(sem)
    if semantics[0] != "index":
        raise ParseError(tool, f"the first column is {names[0]!r}, expected GPU, DCU, HCU or Device", header_at + 1)
    name_col = next((i for i, s in enumerate(sub) if s.lower().startswith("name")), None)
    cards: list[Card] = []
    for k in range(n, len(lines)):
        line = lines[k]
        if not line.strip() or _SEPARATOR.match(line):
            continue
        if re.match(r"^\d+\s", line + " "):
            cells = _cut(line, starts)
            try:
                idx = int(cells[0])
            except ValueError:
                raise ParseError(tool, f"device index {cells[0]!r} is not a number", k + 1) from None
            card = Card(idx, line=k + 1)
            for sem, hdr, subhdr, cell in zip(semantics, names, sub, cells):
                card.columns[sem] = cell
                card.raw[f"{hdr} {subhdr}".strip()] = cell
            cards.append(card)
        elif cards and name_col is not None and line[: starts[name_col]].strip() == "":
            cards[-1].columns["name"] = line.strip()  # the device's second line: its name
        elif re.search(r"end of .*log", line, re.I):
            break
    if not cards:
        raise ParseError(tool, "the Concise Info table has no device rows", header_at + 1)
    table = Report(tool, "concise", cards, {}, names[0].upper() in ("DCU", "HCU"))
    for card in cards:  # the sensor named by the sub-header "(Junction)" or the header "Temp (DieEdge)"
        if "temp" in semantics:
            i = semantics.index("temp")
            inline = re.search(r"\(([^)]*)\)", names[i])
            card.columns["temp_sensor"] = sub[i] or (f"({inline.group(1)})" if inline else "")
        else:
            card.columns["temp_sensor"] = ""
        card.columns["power_kind"] = (names[semantics.index("power")] + " " + sub[semantics.index("power")]
                                      if "power" in semantics else "")
        card.columns["partitions_header"] = sub[semantics.index("partitions")] if "partitions" in semantics else ""
    return table


def parse_report(text: str, tool: str = "rocm-smi") -> Report:
    """Any of the three formats, recognised by structure."""
    if not isinstance(text, str):
        raise ParseError(tool, f"expected text, got {type(text).__name__}")
    if re.search(r"^[ \t]*\{", text, re.M):
        return parse_json(text, tool)
    if any(_KEYED.match(line) for line in text.splitlines()):
        return parse_keyed(text, tool)
    return parse_concise(text, tool)


_PID_GPUS = re.compile(r"^\s*PID (\d+) is using (\d+) DRM device\(s\):?\s*$")


def parse_pid_gpus(text: str) -> dict[int, tuple[int, ...]]:
    """``rocm-smi --showpidgpus`` (text): 'PID 5100 is using 2 DRM device(s):' then the indices."""
    out: dict[int, tuple[int, ...]] = {}
    lines = text.splitlines()
    for n, line in enumerate(lines):
        m = _PID_GPUS.match(line)
        if not m:
            continue
        want, got = int(m.group(2)), []
        for nxt in lines[n + 1:]:
            if len(got) >= want or not re.fullmatch(r"[\d\s]+", nxt.strip() or "x"):
                break
            got.extend(int(x) for x in nxt.split())
        out[int(m.group(1))] = tuple(got[:want])
    return out


# --------------------------------------------------------------------------- normalization


def _lower_keys(raw: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    return {re.sub(r"\s+", " ", k.strip().lower()): (k, v) for k, v in raw.items()}


def _find(keys: dict[str, tuple[str, str]], *patterns: str) -> Optional[tuple[str, str]]:
    """The first (key as printed, value) whose lower-cased key fully matches a pattern."""
    for pat in patterns:
        rx = re.compile(pat)
        for k, kv in keys.items():
            if rx.fullmatch(k):
                return kv
    return None


def _card_vendor(card: Card, report: Report, default: str) -> str:
    keys = _lower_keys(card.raw)
    hit = _find(keys, r"card vendor")
    text = (hit[1] if hit else "").lower()
    if "haiguang" in text or "hygon" in text:
        return "hygon"
    if "advanced micro devices" in text or "amd" in text.split():
        return "amd"
    if report.dcu_header or _find(keys, r"[dh]cu use \(%\)") or _find(keys, r"[dh]cu memory use \(%\)"):
        return "hygon"
    return default


def _product_name(keys: dict[str, tuple[str, str]], card: Card) -> Optional[str]:
    for pat in (r"card series", r"device name", r"market name", r"card model name"):
        hit = _find(keys, pat)
        if hit and not is_na(hit[1]) and not _hex_id(hit[1]):
            return hit[1].strip()
    name = card.columns.get("name")
    return name.strip() if name and not is_na(name) else None


def _model(vendor: str, name: Optional[str], device_id: Optional[str]) -> str:
    if name:
        model = profiles.normalize_model(vendor, name)
        inner = re.search(r"\[([^\]]+)\]", name)
        if profiles.table().lookup(model) is None and inner:
            model = profiles.normalize_model(vendor, inner.group(1))
        return model
    return profiles.normalize_model(vendor, device_id) if device_id else "unknown"


def normalize_pci(v: Optional[str]) -> Optional[str]:
    if is_na(v):
        return None
    m = re.match(r"^\s*(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\s*$", v or "")
    if not m:
        return None
    domain = int(m.group(1), 16) if m.group(1) else 0
    return f"{domain & 0xFFFF:04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


def _uuid(vendor: str, index: int, unique_id: Optional[str], serial: Optional[str], pci: Optional[str],
          guid: Optional[str] = None) -> str:
    """Unique ID (hex) when the tool has one, else serial, else bus address, else the KFD GUID,
    else the card index (concise tables print no identifier)."""
    if unique_id:
        s = unique_id.lower().removeprefix("0x").strip()
        if re.fullmatch(r"[0-9a-f]+", s) and int(s, 16) != 0:
            return s.zfill(16)
    if serial and serial.strip() not in ("0",) and re.fullmatch(r"[\w\-.]+", serial.strip()):
        return f"{vendor}-{serial.strip()}"
    if pci:
        return f"{vendor}-pci-{pci}"
    if guid and guid.isdigit():
        return f"{vendor}-guid-{guid}"
    return f"{vendor}-card{index}"


_TEMP_KEY = re.compile(r"temperature \(sensor ([^)]+)\) \(c\)")
_VRAM_KEY = re.compile(r"vram total (used )?memory \((b|kb|kib|mb|mib|gb|gib)\)")


def _json_readings(tool: str, keys: dict[str, tuple[str, str]], r: dict[str, Reading]) -> None:
    def src(key: str) -> str:
        return f"{tool} '{key}'"

    def put(fld: str, kv: Optional[tuple[str, str]], value: Optional[float], resolution: Optional[float] = None):
        if kv is None:
            return
        q = quality(fld, src(kv[0]), resolution)
        r[fld] = Reading(value, q) if value is not None else Reading(None, q.with_status("unsupported"))

    sensors: dict[str, tuple[str, str]] = {}
    for k, kv in keys.items():
        m = _TEMP_KEY.fullmatch(k)
        if m:
            sensors[m.group(1).strip()] = kv
    core = sensors.get("junction") or sensors.get("hotspot") or sensors.get("edge")
    put(F.TEMP_CORE, core, number(core[1]) if core else None)
    put(TEMP_EDGE, sensors.get("edge"), number(sensors["edge"][1]) if "edge" in sensors else None)
    mem = sensors.get("memory") or sensors.get("mem") or sensors.get("vram")
    if mem is None:  # HBM stacks only: the hottest one
        hbm = [kv for s, kv in sorted(sensors.items()) if s.startswith("hbm") and number(kv[1]) is not None]
        mem = max(hbm, key=lambda kv: number(kv[1]) or 0.0) if hbm else None
    put(F.TEMP_MEMORY, mem, number(mem[1]) if mem else None)

    power = _find(keys, r"current socket graphics package power \(w\)", r"average graphics package power \(w\)",
                  r"current socket power \(w\)", r"average socket power \(w\)")
    put(F.POWER, power, number(power[1]) if power else None)
    cap = _find(keys, r"max graphics package power \(w\)", r"power cap \(w\)")
    put(F.POWER_LIMIT, cap, number(cap[1]) if cap else None)
    util = _find(keys, r"(gpu|dcu|hcu) use \(%\)")
    put(F.UTILIZATION, util, _ratio(util[1]) if util else None)
    mutil = _find(keys, r"(gpu|dcu|hcu) memory use \(%\)", r"(gpu|dcu|hcu) memory read/write activity \(%\)")
    put(F.MEMORY_UTILIZATION, mutil, _ratio(mutil[1]) if mutil else None)
    for k, kv in keys.items():
        m = _VRAM_KEY.fullmatch(k)
        if m:
            unit = _SIZE_UNITS[m.group(2)]
            v = number(kv[1])
            put(F.MEMORY_USED if m.group(1) else F.MEMORY_TOTAL, kv, None if v is None else v * unit, float(unit))
    for fld, pat in ((F.CLOCK_COMPUTE, r"sclk clock speed:?"), (F.CLOCK_MEMORY, r"mclk clock speed:?")):
        kv = _find(keys, pat)
        put(fld, kv, frequency(kv[1]) if kv else None)
    replay = _find(keys, r"pcie replay count")
    put(PCIE_REPLAY, replay, number(replay[1]) if replay else None)
    energy = _find(keys, r"accumulated energy \(uj\)")
    if energy:
        v = number(energy[1])
        put(F.ENERGY, energy, None if v is None else v * 1e-6)


def _ratio(v: Optional[str]) -> Optional[float]:
    x = number(v)
    return None if x is None or not 0 <= x <= 100 else x / 100.0


def _concise_readings(tool: str, card: Card, r: dict[str, Reading]) -> None:
    col = card.columns

    def put(fld: str, header: str, value: Optional[float]) -> None:
        q = quality(fld, f"{tool} concise '{header}'")
        r[fld] = Reading(value, q) if value is not None else Reading(None, q.with_status("unsupported"))

    if "temp" in col:
        sensor = col.get("temp_sensor", "").strip("() ").lower()
        header = f"Temp {col.get('temp_sensor', '')}".strip()
        t = number(col["temp"])
        # no sub-header: ROCm 4 / DTK print the edge sensor (hwmon temp1)
        if sensor in ("", "edge", "dieedge"):
            put(TEMP_EDGE, header, t)
        if sensor in ("junction", "hotspot", "", "edge", "dieedge"):
            put(F.TEMP_CORE, header, t)
        elif sensor in ("memory", "mem"):
            put(F.TEMP_MEMORY, header, t)
    if "power" in col:
        put(F.POWER, col.get("power_kind", "Power").strip(), number(col["power"]))
    if "pwrcap" in col:
        put(F.POWER_LIMIT, "PwrCap", number(col["pwrcap"]))
    if "sclk" in col:
        put(F.CLOCK_COMPUTE, "SCLK", frequency(col["sclk"]))
    if "mclk" in col:
        put(F.CLOCK_MEMORY, "MCLK", frequency(col["mclk"]))
    if "util" in col:
        put(F.UTILIZATION, "GPU%", _ratio(col["util"]))
    if "vram_pct" in col:
        put(MEMORY_USED_RATIO, "VRAM%", _ratio(col["vram_pct"]))


def _identity_strings(card: Card, keys: dict[str, tuple[str, str]]) -> dict[str, Optional[str]]:
    def val(*pats: str) -> Optional[str]:
        hit = _find(keys, *pats)
        return None if hit is None or is_na(hit[1]) else hit[1].strip()

    device_id = _hex_id(val(r"device id", r"gpu id"))
    col = card.columns
    if device_id is None and col.get("model_rev"):
        device_id = _hex_id(col["model_rev"].strip("[] "))
    guid = val(r"guid")
    if col.get("ids"):
        did, _, g = col["ids"].partition(",")
        device_id = device_id or _hex_id(did)
        guid = guid or (g.strip() or None)
    return {"guid": guid, "device_id": device_id, "unique_id": val(r"unique id"), "serial": val(r"serial number"),
            "pci": normalize_pci(val(r"pci bus")), "vbios": val(r"vbios version"),
            "numa": val(r"\(topology\) numa node")}


def build_devices(report: Report, now: float = 0.0,
                  pid_gpus: Optional[Mapping[int, Sequence[int]]] = None) -> list[DeviceSample]:
    """The report's cards as DeviceSamples (health ``ok``: the CLI shows no RAS state)."""
    tool = report.tool
    default_vendor = TOOL_VENDOR.get(tool, "amd")
    driver = next((v.strip() for k, v in report.system.items() if k.strip().lower() == "driver version"
                   and not is_na(v)), None)
    devices: list[tuple[Card, DeviceIdentity, dict]] = []
    seen_uuids: set[str] = set()
    for card in report.cards:
        keys = _lower_keys(card.raw)
        vendor = _card_vendor(card, report, default_vendor)
        ids = _identity_strings(card, keys)
        name = _product_name(keys, card)
        uuid = _uuid(vendor, card.index, ids["unique_id"], ids["serial"], ids["pci"], ids["guid"])
        if uuid in seen_uuids:  # masked or duplicated ids in a capture: keep devices apart
            uuid = f"{uuid}-card{card.index}"
        seen_uuids.add(uuid)
        numa = number(ids["numa"])
        ident = DeviceIdentity(
            vendor=vendor, kind=KIND.get(vendor, "gpu"), index=card.index, uuid=uuid,
            model=_model(vendor, name, ids["device_id"]), pci_address=ids["pci"],
            numa_node=int(numa) if numa is not None and 0 <= numa < 1024 else None,
            driver_version=driver, firmware_version=ids["vbios"], name=name or ids["device_id"],
            serial=ids["serial"] if ids["serial"] not in (None, "0") else None)
        readings: dict[str, Reading] = {}
        if report.format == "concise":
            _concise_readings(tool, card, readings)
        else:
            _json_readings(tool, keys, readings)
        devices.append((card, ident, readings))
    by_index = {card.index: ident.uuid for card, ident, _ in devices}
    processes = _processes(report.system, by_index, pid_gpus)
    links = _links(report.system, by_index)
    return [DeviceSample(identity=ident, timestamp=now, readings=readings,
                         processes=tuple(processes.get(ident.uuid, ())), links=tuple(links.get(ident.uuid, ())))
            for card, ident, readings in devices]


_PID_KEY = re.compile(r"^PID\s*(\d+)$")


def _processes(system: Mapping[str, str], by_index: Mapping[int, str],
               pid_gpus: Optional[Mapping[int, Sequence[int]]]) -> dict[str, list[ProcessSample]]:
    """System 'PID<n>': 'name, gpu count, vram bytes, sdma, cu occupancy' entries, placed on the
    devices --showpidgpus names (or on the only device); VRAM split evenly where a process
    spans several devices, since the tool gives only its total."""
    out: dict[str, list[ProcessSample]] = {}
    for key, value in system.items():
        m = _PID_KEY.match(key.strip())
        if not m:
            continue
        pid = int(m.group(1))
        parts = [p.strip() for p in value.split(",")]
        count = number(parts[1]) if len(parts) > 1 else None
        vram = number(parts[2]) if len(parts) > 2 else None
        if count == 0:
            continue  # a KFD process on no device
        targets = [by_index[i] for i in (pid_gpus or {}).get(pid, ()) if i in by_index]
        if not targets and len(by_index) == 1:
            targets = list(by_index.values())
        for uuid in targets:
            mem = None if vram is None else int(vram / len(targets))
            name = parts[0] if parts and parts[0] and parts[0].upper() not in ("UNKNOWN", "N/A") else None
            out.setdefault(uuid, []).append(ProcessSample(pid=pid, device_uuid=uuid, memory_bytes=mem, name=name))
    return out


_LINK_TYPE = re.compile(r"^\(Topology\) Link type between DRM devices (\d+) and (\d+)$", re.I)
_HOPS = re.compile(r"^\(Topology\) Hops between DRM devices (\d+) and (\d+)$", re.I)


def _links(system: Mapping[str, str], by_index: Mapping[int, str]) -> dict[str, list[Link]]:
    hops = {}
    for key, value in system.items():
        m = _HOPS.match(key.strip())
        if m:
            hops[frozenset((int(m.group(1)), int(m.group(2))))] = number(value)
    out: dict[str, list[Link]] = {}
    for key, value in system.items():
        m = _LINK_TYPE.match(key.strip())
        if not m or value.strip().upper() != "XGMI":
            continue
        a, b = int(m.group(1)), int(m.group(2))
        if a not in by_index or b not in by_index or a == b:
            continue
        h = hops.get(frozenset((a, b)))
        if h is not None and h > 1:
            continue  # reached through another GPU, not a direct link
        out.setdefault(by_index[a], []).append(Link(peer=by_index[b], type="xgmi"))
        out.setdefault(by_index[b], []).append(Link(peer=by_index[a], type="xgmi"))
    return out


def parse(text: str, tool: str = "rocm-smi", now: float = 0.0) -> NodeSnapshot:
    """Captured ``rocm-smi``/``hy-smi`` output (JSON, concise table or keyed text) -> snapshot."""
    report = parse_report(text, tool)
    return NodeSnapshot(node="", time=now, devices=tuple(build_devices(report, now)))


def parse_rocm_smi(text: str) -> NodeSnapshot:
    return parse(text, "rocm-smi")


def parse_hy_smi(text: str) -> NodeSnapshot:
    return parse(text, "hy-smi")


# --------------------------------------------------------------------------- the CLI collector

# Options every rocm-smi since ROCm 4 and hy-smi accept, and what each shows in --json.
FULL_ARGS = ("--showid", "--showproductname", "--showuniqueid", "--showserial", "--showbus", "--showvbios",
             "--showdriverversion", "--showtemp", "--showuse", "--showmemuse", "--showpower", "--showmaxpower",
             "--showclocks", "--showreplaycount", "--showpids", "--showtopotype", "--showtopohops",
             "--showtoponuma", "--showmeminfo", "vram", "--json")
# The set gpustack runs on Hygon DTK and older rocm-smi: the fallback when the tool rejects
# an option of FULL_ARGS (argparse exits with status 2).
MINIMAL_ARGS = ("-i", "--showmeminfo", "vram", "--showpower", "--showserial", "--showuse", "--showtemp",
                "--showproductname", "--showuniqueid", "--json")
SEARCH_DIRS = {"rocm-smi": ("/opt/rocm/bin",), "hy-smi": ("/opt/hyhal/bin", "/opt/dtk/bin", "/opt/rocm/bin")}


class SmiCliCollector:
    """One ``TOOL --json`` run per cycle (plus ``--showpidgpus`` when processes must be placed
    on one of several devices); devices, readings and links from the parser above."""

    def __init__(self, name: str, tool: str, exe: str, clock: Callable[[], float], timeout: float,
                 prepare: Optional[Callable[[], None]] = None, args: Optional[Sequence[str]] = None):
        self.name = name
        self.vendor = TOOL_VENDOR[tool]
        self._tool = tool
        self._exe = exe
        self._clock = clock
        self._timeout = timeout
        self._prepare = prepare
        self._args = tuple(args) if args else FULL_ARGS
        self._fallback = not args  # only our own option set falls back to the minimal one
        self._ledger = FaultLedger()
        self._replays: dict[str, int] = {}

    def _run(self, args: Sequence[str]) -> str:
        return vendor_cli.run([self._exe, *args], self._timeout).stdout

    def _report(self) -> Report:
        try:
            out = self._run(self._args)
        except vendor_cli.CliError as e:
            if not (self._fallback and "exit status 2" in str(e)):
                raise
            log.info("%s rejected an option (%s); using the minimal option set", self._tool, e)
            self._args, self._fallback = MINIMAL_ARGS, False
            out = self._run(self._args)
        return parse_json(out, self._tool)

    def collect(self) -> list[DeviceSample]:
        if self._prepare is not None:
            self._prepare()
        now = self._clock()
        report = self._report()
        pid_gpus = None
        if len(report.cards) > 1 and any(_PID_KEY.match(k.strip()) for k in report.system):
            try:
                pid_gpus = parse_pid_gpus(self._run(("--showpidgpus",)))
            except (vendor_cli.CliError, TimeoutError) as e:
                log.debug("%s --showpidgpus failed: %s", self._tool, e)
        out = []
        for d in build_devices(report, now, pid_gpus):
            self._replay_fault(d, now)
            out.append(DeviceSample(identity=d.identity, timestamp=now, readings=d.readings, health=Health("ok"),
                                    faults=self._ledger.faults(d.identity.uuid), processes=d.processes,
                                    links=d.links))
        return out

    def _replay_fault(self, d: DeviceSample, now: float) -> None:
        v = d.value(PCIE_REPLAY)
        if v is None:
            return
        uuid, n = d.identity.uuid, int(v)
        prev = self._replays.get(uuid)
        self._replays[uuid] = n
        if prev is not None and n > prev:
            info = fault_tables.lookup(d.identity.vendor, "pcie-replay")
            fault = Fault(code="pcie-replay", fault_class=info.fault_class, action=info.action, severity=info.severity,
                          message=f"{self._tool}: {d.identity.kind} {d.identity.index} ({uuid}) PCIe replays "
                                  f"{prev} -> {n}", source=self._tool)
            self._ledger.record(uuid, fault, now, occurrences=n - prev)


def _find_tool(tool: str, configured: Optional[str]) -> str:
    if configured:
        if os.access(configured, os.X_OK):
            return configured
        raise Unavailable(f"{tool}: configured path {configured} is not executable")
    found = shutil.which(tool)
    if found:
        return found
    for d in SEARCH_DIRS.get(tool, ()):
        p = os.path.join(d, tool)
        if os.access(p, os.X_OK):
            return p
    raise Unavailable(f"{tool} not found on PATH or in {', '.join(SEARCH_DIRS.get(tool, ()))}")


def _create(options: CollectorOptions, tool: str, name: str) -> SmiCliCollector:
    settings = options.settings or {}
    timeout = float(settings.get("cli_timeout", max(0.5, 0.8 * options.timeout_seconds)))
    args = settings.get("args")
    if isinstance(args, str):  # "args: --json --showtemp" in the config file
        args = shlex.split(args)
    if options.scenario is not None:
        from hetero_exporter.collectors.amd.rocm_smi.fake import FakeSmiCli
        fake = FakeSmiCli(options.scenario, options.clock, options.workdir, tool)
        return SmiCliCollector(name, tool, fake.path, options.clock, timeout, fake.prepare, args)
    return SmiCliCollector(name, tool, _find_tool(tool, settings.get("path")), options.clock, timeout, None, args)


def create(options: CollectorOptions) -> SmiCliCollector:
    """``rocm_smi``: AMD GPUs through ``rocm-smi --json`` (nodes without amdsmi)."""
    return _create(options, "rocm-smi", "rocm_smi")


def create_hy_smi(options: CollectorOptions) -> SmiCliCollector:
    """``hy_smi``: Hygon DCUs through ``hy-smi --json``."""
    return _create(options, "hy-smi", "hy_smi")


# The registry loads "module:attr" and calls attr.create(options).
HY_SMI = SimpleNamespace(create=create_hy_smi)
