"""``nvidia-smi -q -x``: a pure parser of its XML into the model (``parse`` for
``hetero-exporter parse nvidia-smi FILE``; ``parse_devices`` for the collector). It reads by element names, never by position, and copes with the
layouts of several driver generations: ``power_readings/power_draw`` (<= R525) and
``gpu_power_readings/average_power_draw`` (R535+), ``clocks_throttle_reasons`` and
``clocks_event_reasons``, ECC as ``single_bit``/``double_bit`` totals (<= R470) or per
location (``sram_*``/``dram_*``), ``remapped_rows`` present or ``N/A``. A value the GPU
does not support (``N/A``, ``[Not Supported]``, "Requested functionality has been
deprecated"...) becomes a reading with status ``unsupported``; an element the driver does not
print is simply absent; a value that is present but unreadable gets status ``error``.
Malformed XML, a root that is not ``nvidia_smi_log`` or a ``<gpu>`` without an identity
raise ``ParseError``; nothing else escapes.

``identity.runtime_version`` is the document's ``<cuda_version>`` (the CUDA driver API version
the driver supports, as NVML's nvmlSystemGetCudaDriverVersion gives it).

Quality: resolution is the step nvidia-smi prints in (MiB, 1 C, 0.01 W, 1 MHz, 1 %);
utilization and power draw are ``sampled`` over NVML's windows (see nvml/collector.py QUALITY,
the same NVML calls behind the CLI).
"""

from __future__ import annotations

import calendar
import dataclasses
import math
import re
import time
import xml.etree.ElementTree as ET
from typing import Any, Callable, Iterable, Optional

from hetero_exporter import fields as F
from hetero_exporter import profiles
from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.collectors.nvidia import common as C
from hetero_exporter.model import (CollectorStatus, DeviceIdentity, DeviceSample, Fault,
                                   NodeSnapshot, ProcessSample, Quality, Reading)
from hetero_exporter.sdk import pciaddr, values

TOOL = "nvidia-smi -q -x"
ARGV = ("nvidia-smi", "-q", "-x")

# Texts nvidia-smi prints for a value the GPU or driver cannot give, beyond sdk.values.NA
_UNSUPPORTED_MORE = re.compile(
    r"^\[?\s*(n/a|not supported|not available|unknown error|unknown|insufficient permissions|"
    r"requested functionality has been deprecated|gpu requires reset|none)\s*\]?$", re.I)


def _na(text: str) -> bool:
    """A value nvidia-smi cannot give: sdk.values.NA plus nvidia-smi's own words."""
    return values.is_na(text) or _UNSUPPORTED_MORE.match(text) is not None
_NUMBER = r"([-+]?[0-9]+(?:\.[0-9]+)?)"
_UNITS: dict[str, tuple[re.Pattern, dict[str, float]]] = {
    "bytes": (re.compile(rf"^{_NUMBER}\s*(B|KiB|MiB|GiB|TiB)$", re.I),
              {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}),
    "celsius": (re.compile(rf"^{_NUMBER}\s*C$"), {"": 1.0}),
    "watts": (re.compile(rf"^{_NUMBER}\s*W$"), {"": 1.0}),
    "hertz": (re.compile(rf"^{_NUMBER}\s*MHz$"), {"": 1e6}),
    "ratio": (re.compile(rf"^{_NUMBER}\s*%$"), {"": 0.01}),
    "lanes": (re.compile(r"^([0-9]+)\s*x$", re.I), {"": 1.0}),
    "count": (re.compile(r"^([0-9]+)$"), {"": 1.0}),
}
_RESOLUTION = {"bytes": float(1 << 20), "celsius": 1.0, "watts": 0.01, "hertz": 1e6, "ratio": 0.01,
               "lanes": 1.0, "count": 1.0, "flag": 1.0}

_POWER = ("gpu_power_readings/average_power_draw", "power_readings/average_power_draw",
          "power_readings/power_draw", "gpu_power_readings/power_draw")
_POWER_LIMIT = ("gpu_power_readings/current_power_limit", "power_readings/current_power_limit",
                "power_readings/enforced_power_limit", "gpu_power_readings/enforced_power_limit")
_LINK = "pci/pci_gpu_link_info/"

# field -> (candidate paths, first found wins; kind; method; window seconds). nvidia-smi
# prints what NVML gives: utilization over NVML's sample period (1/6 s .. 1 s by product,
# NVML API reference nvmlUtilization_t) and power draw averaged over 1 s on Ampere and later
# (nvmlDeviceGetPowerUsage): both windows are the 1 s upper bound.
FIELD_MAP: tuple[tuple[str, tuple[str, ...], str, str, Optional[float]], ...] = (
    (F.UTILIZATION, ("utilization/gpu_util",), "ratio", "sampled", 1.0),
    (F.MEMORY_UTILIZATION, ("utilization/memory_util",), "ratio", "sampled", 1.0),
    (F.MEMORY_USED, ("fb_memory_usage/used",), "bytes", "measured", None),
    (F.MEMORY_TOTAL, ("fb_memory_usage/total",), "bytes", "measured", None),
    (F.TEMP_CORE, ("temperature/gpu_temp",), "celsius", "measured", None),
    (F.TEMP_MEMORY, ("temperature/memory_temp",), "celsius", "measured", None),
    (F.POWER, _POWER, "watts", "sampled", 1.0),
    (F.POWER_LIMIT, _POWER_LIMIT, "watts", "measured", None),
    (F.CLOCK_COMPUTE, ("clocks/sm_clock",), "hertz", "measured", None),
    (F.CLOCK_MEMORY, ("clocks/mem_clock",), "hertz", "measured", None),
    (C.PCIE_GEN, (_LINK + "pcie_gen/current_link_gen",), "count", "measured", None),
    (C.PCIE_GEN_MAX, (_LINK + "pcie_gen/max_link_gen",), "count", "measured", None),
    (C.PCIE_WIDTH, (_LINK + "link_widths/current_link_width",), "lanes", "measured", None),
    (C.PCIE_WIDTH_MAX, (_LINK + "link_widths/max_link_width",), "lanes", "measured", None),
    (C.PCIE_REPLAY, ("pci/replay_counter",), "count", "measured", None),
    (C.RETIRED_SBE, ("retired_pages/multiple_single_bit_retirement/retired_count",), "count", "measured", None),
    (C.RETIRED_DBE, ("retired_pages/double_bit_retirement/retired_count",), "count", "measured", None),
    (C.RETIREMENT_PENDING, ("retired_pages/pending_retirement",), "flag", "measured", None),
    (C.REMAPPED_CORRECTABLE, ("remapped_rows/remapped_row_corr",), "count", "measured", None),
    (C.REMAPPED_UNCORRECTABLE, ("remapped_rows/remapped_row_unc",), "count", "measured", None),
    (C.REMAP_PENDING, ("remapped_rows/remapped_row_pending",), "flag", "measured", None),
    (C.REMAP_FAILED, ("remapped_rows/remapped_row_failure",), "flag", "measured", None),
)
# ECC counters: (field, section, severity)
_ECC = ((F.ECC_CORRECTED, "aggregate", "corrected"), (F.ECC_UNCORRECTED, "aggregate", "uncorrected"),
        (C.ECC_CORRECTED_VOLATILE, "volatile", "corrected"), (C.ECC_UNCORRECTED_VOLATILE, "volatile", "uncorrected"))


class _Bad(ValueError):
    """A value that is present but not what the field's unit says."""


def _text(el: Optional[ET.Element]) -> Optional[str]:
    if el is None:
        return None
    return " ".join("".join(el.itertext()).split())


def _finite(v: float) -> float:
    if not math.isfinite(v):
        raise _Bad("not a finite number")
    return v


def value_of(text: str, kind: str) -> Optional[float]:
    """One nvidia-smi value in base units: None when unsupported, _Bad when unreadable."""
    if not text or _na(text):
        return None
    if kind == "flag":
        t = text.strip().lower()
        if t in ("yes", "active", "enabled", "1"):
            return 1.0
        if t in ("no", "not active", "disabled", "0"):
            return 0.0
        raise _Bad(f"expected Yes/No, got {text!r:.40}")
    pattern, scales = _UNITS[kind]
    m = pattern.match(text.strip())
    if not m:
        raise _Bad(f"expected a {kind} value, got {text!r:.40}")
    unit = (m.group(2) if m.lastindex and m.lastindex > 1 else "").lower()
    try:
        return _finite(float(m.group(1)) * scales.get(unit, scales.get("", 1.0)))
    except OverflowError:
        raise _Bad("number out of range") from None


def _quality(path: str, kind: str, method: str, window: Optional[float]) -> Quality:
    return Quality(f"{TOOL}: {path}", method, window, _RESOLUTION[kind])


def _reading(gpu: ET.Element, paths: Iterable[str], kind: str, method: str,
             window: Optional[float]) -> Optional[Reading]:
    """The first of ``paths`` present in the <gpu>; None when none is."""
    for path in paths:
        el = gpu.find(path)
        if el is None or len(el):  # absent, or a section where a value was expected
            continue
        q = _quality(path, kind, method, window)
        try:
            v = value_of(_text(el) or "", kind)
        except _Bad:
            return Reading(None, q.with_status("error"))
        return Reading(v, q) if v is not None else Reading(None, q.with_status("unsupported"))
    return None


def _ecc(gpu: ET.Element, section: str, severity: str) -> Optional[tuple[Optional[float], str, str]]:
    """Sum of the ECC counters of one section and severity: (value, status, source path)."""
    sec = gpu.find(f"ecc_errors/{section}")
    if sec is None:
        return None
    if severity == "corrected":
        legacy, pick = "single_bit/total", lambda tag: "correctable" in tag and "uncorrectable" not in tag
    else:
        legacy, pick = "double_bit/total", lambda tag: "uncorrectable" in tag
    items: list[tuple[str, str]] = []
    old = sec.find(legacy)
    if old is not None:
        items.append((legacy, _text(old) or ""))
    else:
        items.extend((c.tag, _text(c) or "") for c in sec if pick(c.tag) and not len(c))
    if not items:
        return None
    total, seen = 0.0, False
    for _tag, text in items:
        try:
            v = value_of(text, "count")
        except _Bad:
            return None, "error", f"ecc_errors/{section}"
        if v is not None:
            total, seen = total + v, True
    where = f"ecc_errors/{section}/" + (legacy if old is not None else "*" + ("_correctable" if severity == "corrected" else "_uncorrectable*"))
    return (total, "ok", where) if seen else (None, "unsupported", where)


def _clock_reasons(gpu: ET.Element) -> dict[str, Reading]:
    out: dict[str, Reading] = {}
    for section, prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                            ("clocks_throttle_reasons", "clocks_throttle_reason_")):
        sec = gpu.find(section)
        if sec is None:
            continue
        for _bit, name, suffix in C.CLOCK_REASONS:
            el = sec.find(prefix + suffix)
            if el is None:
                continue
            q = _quality(f"{section}/{prefix}{suffix}", "flag", "measured", None)
            try:
                v = value_of(_text(el) or "", "flag")
            except _Bad:
                out[C.clock_reason_field(name)] = Reading(None, q.with_status("error"))
                continue
            out[C.clock_reason_field(name)] = Reading(v, q) if v is not None else Reading(None, q.with_status("unsupported"))
        break
    return out


def _recovery(gpu: ET.Element) -> Optional[Reading]:
    el = gpu.find("gpu_recovery_action")
    if el is None:
        return None
    q = _quality("gpu_recovery_action", "count", "measured", None)
    text = _text(el) or ""
    if text.strip().lower() == "none":
        return Reading(0.0, q)
    if not text or _na(text):
        return Reading(None, q.with_status("unsupported"))
    v = C.recovery_from_text(text)
    return Reading(None, q.with_status("error")) if v is None else Reading(float(v), q)


def readings_of(gpu: ET.Element) -> dict[str, Reading]:
    """Every reading of one <gpu> (or <mig_device>) element."""
    r: dict[str, Reading] = {}
    for field, paths, kind, method, window in FIELD_MAP:
        got = _reading(gpu, paths, kind, method, window)
        if got is not None:
            r[field] = got
    for field, section, severity in _ECC:
        got = _ecc(gpu, section, severity)
        if got is not None:
            value, status, where = got
            q = _quality(where, "count", "measured", None)
            r[field] = Reading(value, q) if status == "ok" else Reading(None, q.with_status(status))
    remapped = gpu.find("remapped_rows")
    if remapped is not None and not len(remapped):  # "<remapped_rows>N/A</remapped_rows>"
        for field in (C.REMAPPED_CORRECTABLE, C.REMAPPED_UNCORRECTABLE, C.REMAP_PENDING, C.REMAP_FAILED):
            r[field] = Reading(None, _quality("remapped_rows", "count", "measured", None).with_status("unsupported"))
    r.update(_clock_reasons(gpu))
    rec = _recovery(gpu)
    if rec is not None:
        r[C.RECOVERY_ACTION] = rec
    return r


def _int(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    t = text.strip()
    return int(t) if re.fullmatch(r"[0-9]{1,10}", t) else None


def _optional(text: Optional[str]) -> Optional[str]:
    """A text field (name, serial, uuid): only nvidia-smi's own NA words, not sdk.values.NA,
    whose "-" or "NA" can be a process's real name."""
    if text is None or not text.strip() or _UNSUPPORTED_MORE.match(text):
        return None
    return text.strip()


def _bus_id(text: str) -> Optional[str]:
    """``00000000:18:00.0`` -> ``0000:18:00.0`` (sdk.pciaddr; None for anything else)."""
    return pciaddr.normalize(text, default_function=None)


def _processes(gpu: ET.Element, uuid_of: Callable[[Optional[int], Optional[int]], str]) -> dict[str, list[ProcessSample]]:
    out: dict[str, list[ProcessSample]] = {}
    for p in gpu.findall("processes/process_info"):
        pid = _int(_text(p.find("pid")))
        if pid is None:
            continue
        try:
            mem = value_of(_text(p.find("used_memory")) or "", "bytes")
        except _Bad:
            mem = None
        gi, ci = _int(_text(p.find("gpu_instance_id"))), _int(_text(p.find("compute_instance_id")))
        uuid = uuid_of(gi, ci)
        out.setdefault(uuid, []).append(ProcessSample(
            pid=pid, device_uuid=uuid, memory_bytes=None if mem is None else int(mem),
            name=_optional(_text(p.find("process_name")))))
    return out


def _mig_devices(gpu: ET.Element, parent: DeviceIdentity) -> list[tuple[DeviceIdentity, dict, int, int]]:
    out = []
    for n, m in enumerate(gpu.findall("mig_devices/mig_device")):
        index = _int(_text(m.find("index")))
        gi, ci = _int(_text(m.find("gpu_instance_id"))), _int(_text(m.find("compute_instance_id")))
        uuid = _optional(_text(m.find("uuid"))) or f"{parent.uuid}/mig-gi{gi}-ci{ci}"
        r = {}
        for field, path in ((F.MEMORY_USED, "fb_memory_usage/used"), (F.MEMORY_TOTAL, "fb_memory_usage/total")):
            got = _reading(m, (path,), "bytes", "measured", None)
            if got is not None:
                r[field] = got
        total = r.get(F.MEMORY_TOTAL)
        size = f"-{round(total.value / (1 << 30))}gb" if total is not None and total.value else ""
        ident = DeviceIdentity(
            vendor="nvidia", kind="gpu", index=index if index is not None else n, uuid=uuid,
            model=f"{parent.model}-MIG{size}", pci_address=parent.pci_address, numa_node=parent.numa_node,
            driver_version=parent.driver_version, runtime_version=parent.runtime_version,
            firmware_version=parent.firmware_version, parent=parent.uuid, serial=parent.serial)
        out.append((ident, r, gi if gi is not None else -1, ci if ci is not None else -1))
    return out


def _cuda(text: Optional[str]) -> Optional[str]:
    """``12.8`` (``<cuda_version>``) as printed; None for anything that is not a version."""
    if text is None:
        return None
    m = re.fullmatch(r"([0-9]{1,3})\.([0-9]{1,3})(?:\.[0-9]+)?", text.strip())
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else None


def _timestamp(text: Optional[str]) -> Optional[float]:
    """'Sun Mar  2 15:02:02 2025' (the node's local time; read as UTC) -> Unix seconds."""
    if not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y")))
    except (ValueError, OverflowError):
        return None


def _document(text: str) -> ET.Element:
    if not isinstance(text, str):
        raise ParseError(TOOL, f"expected text, got {type(text).__name__}")
    if "<!ENTITY" in text:
        raise ParseError(TOOL, "entity declarations are not nvidia-smi output")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        line = e.position[0] if getattr(e, "position", None) else None
        raise ParseError(TOOL, f"not well-formed XML: {e}", line) from None
    except (ValueError, RecursionError) as e:
        raise ParseError(TOOL, f"not readable XML: {e}") from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(TOOL, f"root element is <{root.tag:.40}>, expected <nvidia_smi_log>")
    return root


def parse_devices(text: str, now: Optional[float] = None) -> tuple[list[DeviceSample], Optional[float]]:
    """Devices of one ``nvidia-smi -q -x`` document (GPUs, then their MIG instances after
    each GPU) and the document's own timestamp. Health and faults are left to the caller."""
    root = _document(text)
    doc_time = _timestamp(_text(root.find("timestamp")))
    when = now if now is not None else (doc_time or 0.0)
    driver = _optional(_text(root.find("driver_version")))
    runtime = _cuda(_optional(_text(root.find("cuda_version"))))
    out: list[DeviceSample] = []
    for index, gpu in enumerate(root.findall("gpu")):
        uuid = _optional(_text(gpu.find("uuid")))
        pci = _bus_id(gpu.get("id") or "") or _bus_id(_text(gpu.find("pci/pci_bus_id")) or "")
        if uuid is None and pci is None:
            raise ParseError(TOOL, f"<gpu> number {index} has neither a <uuid> nor a PCI bus id")
        name = _optional(_text(gpu.find("product_name"))) or ""
        ident = DeviceIdentity(
            vendor="nvidia", kind="gpu", index=index, uuid=uuid or f"nvidia-pci-{pci}",
            model=profiles.normalize_model("nvidia", name), pci_address=pci, numa_node=None,
            driver_version=driver, runtime_version=runtime,
            firmware_version=_optional(_text(gpu.find("inforom_version/img_version"))),
            name=name or None, serial=_optional(_text(gpu.find("serial"))))
        migs = _mig_devices(gpu, ident)
        by_instance = {(gi, ci): m[0].uuid for m in migs for gi, ci in [(m[2], m[3])]}
        by_gi = {m[2]: m[0].uuid for m in migs}

        def owner(gi: Optional[int], ci: Optional[int], _p=ident.uuid, _i=by_instance, _g=by_gi) -> str:
            if gi is None:
                return _p
            return _i.get((gi, ci if ci is not None else -1)) or _g.get(gi) or _p

        procs = _processes(gpu, owner)
        out.append(DeviceSample(identity=ident, timestamp=when, readings=readings_of(gpu),
                                processes=tuple(procs.get(ident.uuid, ())), processes_reported=True))
        for mident, r, _gi, _ci in migs:
            out.append(DeviceSample(identity=mident, timestamp=when, readings=r, processes_reported=True,
                                    processes=tuple(procs.get(mident.uuid, ()))))
    return out, doc_time


def with_health(d: DeviceSample, reasons: list[Fault], faults: tuple[Fault, ...],
                parent_health: Any = None, timestamp: Optional[float] = None) -> DeviceSample:
    """``d`` with its health (from ``reasons``, or its GPU's for a MIG instance) and faults."""
    health = C.health_of(reasons) if parent_health is None else parent_health
    if timestamp is None:
        return dataclasses.replace(d, health=health, faults=faults)
    return dataclasses.replace(d, health=health, faults=faults, timestamp=timestamp)


def parse(text: str) -> NodeSnapshot:
    """``hetero-exporter parse nvidia-smi FILE``: the document as a snapshot. Conditions the
    readings show (row remap pending, recovery action...) are health reasons and faults
    seen once, at the document's time."""
    devices, doc_time = parse_devices(text)
    when = doc_time or 0.0
    out, parent = [], None
    for d in devices:
        if d.identity.parent is None:
            found = [dataclasses.replace(C.make_fault(code, msg, TOOL), first_seen=when, last_seen=when)
                     for code, msg in C.conditions(d.readings)]
            d = with_health(d, found, tuple(found))
            parent = d
            out.append(d)
        else:  # a MIG instance is as healthy as its GPU
            out.append(with_health(d, [], (), parent.health if parent is not None else None))
    return NodeSnapshot(node="", time=when, devices=tuple(out),
                        collectors=(CollectorStatus("nvidia_smi", True, vendor="nvidia", devices=len(out)),))
