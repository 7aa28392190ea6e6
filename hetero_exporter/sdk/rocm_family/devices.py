"""The rocm-smi family's reports (parse.py) as the normalized model, for a ``Member``.

The quality table (``QUALITY``) is declared once per field; the source of a reading is the key
or column it was read from (``rocm-smi 'Temperature (Sensor junction) (C)'``). Identity: the uuid
comes from identity.py (the same function the vendor's library collector uses, over the same
ASIC unique id), the PCI address through the shared normalizer; the vendor and kind of a card
are the member's (``Member.card_vendor``). Fabric links are the ``XGMI`` pairs one hop apart in
the topology (``parse.parse_topology``).
"""

from __future__ import annotations

import re
from typing import Mapping, Optional, Sequence

from hetero_exporter.model import fields as F
from hetero_exporter import profiles
from hetero_exporter.model import DeviceIdentity, DeviceSample, Link, NodeSnapshot, ProcessSample, Quality, Reading
from hetero_exporter.sdk import pciaddr, values
from hetero_exporter.sdk.rocm_family import CardVendor, Member
from hetero_exporter.sdk.rocm_family.identity import device_uuid
from hetero_exporter.sdk.rocm_family.parse import (Card, Hop, Report, frequency, hex_id, is_na, number, parse_report,
                                                   parse_topology)

# Vendor-specific fields (JSON model and accelerator_field_status only).
TEMP_EDGE = "temperature_edge_celsius"
MEMORY_USED_RATIO = "memory_used_ratio"  # the concise table's VRAM%, when no byte counts exist
PCIE_REPLAY = "pcie_replay_total"

# Firmware averages whose window AMD does not document: 1 s nominal, the period of the SMU
# metrics table they are read from (the same as the package-power average).
_SMU_AVERAGE_S = 1.0

# Static quality per field: (method, window seconds, resolution in base units). AMD documents
# no accuracy for these sensors, so no row has an error bound.
QUALITY_TABLE: Mapping[str, tuple[str, Optional[float], float]] = {
    F.UTILIZATION: ("sampled", _SMU_AVERAGE_S, 0.01),  # amdgpu gpu_busy_percent, whole percent
    F.MEMORY_UTILIZATION: ("sampled", _SMU_AVERAGE_S, 0.01),  # mem_busy_percent
    MEMORY_USED_RATIO: ("derived", None, 0.01),  # VRAM% = used / total, whole percent
    F.MEMORY_USED: ("measured", None, 1.0),  # bytes ("(B)"); MiB keys set 1048576 per reading
    F.MEMORY_TOTAL: ("measured", None, 1.0),
    F.TEMP_CORE: ("measured", None, 1.0),  # hwmon tempN_input, whole degrees C
    F.TEMP_MEMORY: ("measured", None, 1.0),
    TEMP_EDGE: ("measured", None, 1.0),
    F.POWER: ("sampled", _SMU_AVERAGE_S, 1.0),  # "Average Graphics Package Power": SMU ~1 s average, W
    F.POWER_LIMIT: ("measured", None, 1.0),  # W
    F.ENERGY: ("measured", None, 1e-6),  # printed in uJ
    F.CLOCK_COMPUTE: ("measured", None, 1e6),  # MHz
    F.CLOCK_MEMORY: ("measured", None, 1e6),
    PCIE_REPLAY: ("measured", None, 1.0),  # a count
}


def quality(field_name: str, source: str, resolution: Optional[float] = None) -> Quality:
    method, window, res = QUALITY_TABLE[field_name]
    if field_name == F.POWER and "socket" in source.lower():
        method, window = "measured", None  # MI300 "Current Socket ... Power", concise "Power (Socket)"
    return Quality(source, method, window, res if resolution is None else resolution)


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


_USE_KEY = re.compile(r"([a-z]+) (?:memory )?use \(%\)")  # "DCU use (%)": the device word of the keys


def _card_vendor(card: Card, report: Report, member: Member) -> CardVendor:
    keys = _lower_keys(card.raw)
    hit = _find(keys, r"card vendor")
    words = {m.group(1).upper() for m in map(_USE_KEY.fullmatch, keys) if m}
    if report.dcu_header:  # the table's first column, or the keyed lines' word
        words.add("DCU")
    return member.card_vendor(hit[1] if hit else "", words)


def _product_name(keys: dict[str, tuple[str, str]], card: Card) -> Optional[str]:
    for pat in (r"card series", r"device name", r"market name", r"card model name"):
        hit = _find(keys, pat)
        if hit and not is_na(hit[1]) and not hex_id(hit[1]):
            return hit[1].strip()
    name = card.columns.get("name")
    return name.strip() if name and not is_na(name) else None


def _model(vendor: str, name: Optional[str], device_id: Optional[str]) -> str:
    if name:
        model = profiles.normalize_model(vendor, name)
        inner = re.search(r"\[([^\]]+)\]", name)
        if profiles.lookup(model, vendor) is None and inner:
            model = profiles.normalize_model(vendor, inner.group(1))
        return model
    return profiles.normalize_model(vendor, device_id) if device_id else "unknown"


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
            unit = values.UNITS[m.group(2)]  # the unit in the key: (B), (MiB)...
            v = number(kv[1])
            put(F.MEMORY_USED if m.group(1) else F.MEMORY_TOTAL, kv, None if v is None else v * unit, float(unit))
    for fld, pat in ((F.CLOCK_COMPUTE, r"sclk clock speed:?"), (F.CLOCK_MEMORY, r"mclk clock speed:?")):
        clock = _find(keys, pat)
        put(fld, clock, frequency(clock[1]) if clock else None)
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

    device_id = hex_id(val(r"device id", r"gpu id"))
    col = card.columns
    if device_id is None and col.get("model_rev"):
        device_id = hex_id(col["model_rev"].strip("[] "))
    guid = val(r"guid")
    if col.get("ids"):
        did, _, g = col["ids"].partition(",")
        device_id = device_id or hex_id(did)
        guid = guid or (g.strip() or None)
    return {"guid": guid, "device_id": device_id, "unique_id": val(r"unique id"), "serial": val(r"serial number"),
            "pci": pciaddr.normalize(val(r"pci bus")), "vbios": val(r"vbios version"),
            "numa": val(r"\(topology\) numa node")}


def build_devices(report: Report, now: float = 0.0,
                  pid_gpus: Optional[Mapping[int, Sequence[int]]] = None,
                  topology: Optional[Mapping[frozenset, Hop]] = None,
                  runtime_version: Optional[str] = None, *, member: Member) -> list[DeviceSample]:
    """The report's cards as DeviceSamples (health ``ok``: the CLI shows no RAS state) of the
    ``member`` tool. ``topology``: pairs from an earlier ``--showtopo`` (default: the report's
    own system keys); ``runtime_version``: the vendor runtime of the install (the tool does not
    print it)."""
    tool = report.tool
    driver = next((v.strip() for k, v in report.system.items() if k.strip().lower() == "driver version"
                   and not is_na(v)), None)
    devices: list[tuple[Card, DeviceIdentity, dict]] = []
    seen_uuids: set[str] = set()
    for card in report.cards:
        keys = _lower_keys(card.raw)
        owner = _card_vendor(card, report, member)
        vendor = owner.vendor
        ids = _identity_strings(card, keys)
        name = _product_name(keys, card)
        uuid = device_uuid(vendor, card.index, ids["unique_id"], ids["serial"], ids["pci"], ids["guid"])
        if uuid in seen_uuids:  # masked or duplicated ids in a capture: keep devices apart
            uuid = f"{uuid}-card{card.index}"
        seen_uuids.add(uuid)
        numa = number(ids["numa"])
        ident = DeviceIdentity(
            vendor=vendor, kind=owner.kind, index=card.index, uuid=uuid,
            model=_model(vendor, name, ids["device_id"]), pci_address=ids["pci"],
            numa_node=int(numa) if numa is not None and 0 <= numa < 1024 else None,
            driver_version=driver, runtime_version=runtime_version, firmware_version=ids["vbios"],
            name=name or ids["device_id"], serial=ids["serial"] if ids["serial"] not in (None, "0") else None)
        readings: dict[str, Reading] = {}
        if report.format == "concise":
            _concise_readings(tool, card, readings)
        else:
            _json_readings(tool, keys, readings)
        devices.append((card, ident, readings))
    by_index = {card.index: ident.uuid for card, ident, _ in devices}
    processes = _processes(report.system, by_index, pid_gpus)
    links = fabric_links(parse_topology(report.system) if topology is None else topology, by_index)
    return [DeviceSample(identity=ident, timestamp=now, readings=readings,
                         processes=tuple(processes.get(ident.uuid, ())), links=tuple(links.get(ident.uuid, ())))
            for card, ident, readings in devices]


_PID_KEY = re.compile(r"^PID\s*([0-9]{1,20})$")  # int() refuses 4,300 digits


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




def fabric_links(topology: Mapping[frozenset, Hop], by_index: Mapping[int, str]) -> dict[str, list[Link]]:
    """``xgmi`` links between devices the topology joins by XGMI in one hop (more hops: reached
    through another device, not a direct link)."""
    out: dict[str, list[Link]] = {}
    for hop in sorted(topology.values(), key=lambda h: (h.a, h.b)):
        if hop.type != "XGMI" or hop.a not in by_index or hop.b not in by_index:
            continue
        if hop.hops is not None and hop.hops > 1:
            continue
        out.setdefault(by_index[hop.a], []).append(Link(peer=by_index[hop.b], type="xgmi"))
        out.setdefault(by_index[hop.b], []).append(Link(peer=by_index[hop.a], type="xgmi"))
    return out


def parse(text: str, member: Member, now: float = 0.0, tool: Optional[str] = None) -> NodeSnapshot:
    """Captured output of the ``member`` tool (JSON, concise table or keyed text) -> snapshot;
    ``tool``: the name its messages and sources give (default the member's)."""
    report = parse_report(text, tool or member.tool)
    return NodeSnapshot(node="", time=now, devices=tuple(build_devices(report, now, member=member)))
