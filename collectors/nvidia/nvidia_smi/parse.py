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

from hetero_exporter.model import fields as F
from hetero_exporter import profiles
from hetero_exporter.sdk import xmldoc
from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.collectors.nvidia import common as C
from hetero_exporter.model import (CollectorStatus, DeviceIdentity, DeviceSample, Fault,
                                   NodeSnapshot, ProcessSample, Quality, Reading)
from hetero_exporter.sdk import pciaddr, tables, values

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
    # the rest of dcgm-exporter's default set the report prints (issue 27): N/A on most data-center GPUs' fans
    ("fan_speed_ratio", ("fan_speed",), "ratio", "measured", None),
    ("engine_encoder_utilization_ratio", ("utilization/encoder_util",), "ratio", "sampled", 1.0),
    ("engine_decoder_utilization_ratio", ("utilization/decoder_util",), "ratio", "sampled", 1.0),
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
        ecc = _ecc(gpu, section, severity)
        if ecc is not None:
            value, status, where = ecc
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


def _optional(text: Optional[str]) -> Optional[str]:
    """A text field (name, serial, uuid): only nvidia-smi's own NA words, not sdk.values.NA,
    whose "-" or "NA" can be a process's real name."""
    if text is None or not text.strip() or _UNSUPPORTED_MORE.match(text):
        return None
    return text.strip()


def _processes(gpu: ET.Element, uuid_of: Callable[[Optional[int], Optional[int]], str]) -> dict[str, list[ProcessSample]]:
    out: dict[str, list[ProcessSample]] = {}
    for p in gpu.findall("processes/process_info"):
        pid = values.integer(_text(p.find("pid")), 10)
        if pid is None:
            continue
        try:
            mem = value_of(_text(p.find("used_memory")) or "", "bytes")
        except _Bad:
            mem = None
        gi, ci = (values.integer(_text(p.find(k)), 10) for k in ("gpu_instance_id", "compute_instance_id"))
        uuid = uuid_of(gi, ci)
        out.setdefault(uuid, []).append(ProcessSample(
            pid=pid, device_uuid=uuid, memory_bytes=None if mem is None else int(mem),
            name=_optional(_text(p.find("process_name")))))
    return out


def _mig_devices(gpu: ET.Element, parent: DeviceIdentity) -> list[tuple[DeviceIdentity, dict, int, int]]:
    out = []
    for n, m in enumerate(gpu.findall("mig_devices/mig_device")):
        index = values.integer(_text(m.find("index")), 10)
        gi, ci = (values.integer(_text(m.find(k)), 10) for k in ("gpu_instance_id", "compute_instance_id"))
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
    return xmldoc.document(TOOL, text, "nvidia_smi_log")


def parse_devices(text: str, now: Optional[float] = None) -> tuple[list[DeviceSample], Optional[float]]:
    """Devices of one ``nvidia-smi -q -x`` document (GPUs, then their MIG instances after
    each GPU) and the document's own timestamp. Health and faults are left to the caller."""
    return devices_of(_document(text), TOOL, now)


def devices_of(root: ET.Element, tool: str, now: Optional[float] = None) -> tuple[list[DeviceSample], Optional[float]]:
    """The devices of an ``nvidia_smi_log`` tree (the XML, or the text report read into the
    same tree by ``text_document``); ``tool`` names the output in errors and quality sources."""
    doc_time = _timestamp(_text(root.find("timestamp")))
    when = now if now is not None else (doc_time or 0.0)
    driver = _optional(_text(root.find("driver_version")))
    runtime = _cuda(_optional(_text(root.find("cuda_version"))))
    out: list[DeviceSample] = []
    gpus = root.findall("gpu")
    tables.check_devices(len(gpus), tool)
    for index, gpu in enumerate(gpus):
        uuid = _optional(_text(gpu.find("uuid")))
        pci = (pciaddr.normalize(gpu.get("id") or "", default_function=None)
               or pciaddr.normalize(_text(gpu.find("pci/pci_bus_id")) or "", default_function=None))
        if uuid is None and pci is None:
            what = "<gpu> number {} has neither a <uuid>" if tool == TOOL else "GPU section {} has neither a uuid"
            raise ParseError(tool, what.format(index) + " nor a PCI bus id")
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
        out.append(DeviceSample(identity=ident, timestamp=when, readings=_retag(readings_of(gpu), tool),
                                processes=tuple(procs.get(ident.uuid, ())), processes_reported=True))
        for mident, r, _gi, _ci in migs:
            out.append(DeviceSample(identity=mident, timestamp=when, readings=_retag(r, tool),
                                    processes_reported=True, processes=tuple(procs.get(mident.uuid, ()))))
    return out, doc_time


def _retag(readings: dict[str, Reading], tool: str) -> dict[str, Reading]:
    """Readings of the text report name it in their source (``nvidia-smi -q: <element path>``,
    the path of the same value in the XML)."""
    if tool == TOOL:
        return readings
    prefix = f"{TOOL}: "
    return {k: dataclasses.replace(r, quality=dataclasses.replace(
        r.quality, source=f"{tool}: {r.quality.source[len(prefix):]}" if r.quality.source.startswith(prefix)
        else r.quality.source)) for k, r in readings.items()}


# --------------------------------------------------------------------------- nvidia-smi -q (text)
TEXT_TOOL = "nvidia-smi -q"
MAX_TEXT_LINE = 4096
# "GPU 00000000:18:00.0": one GPU's section (any domain width; nvidia-smi prints 8 digits)
_GPU_HEADER = re.compile(r"^GPU\s+([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
# "Key      : value": the key is everything before the first colon (values hold colons: times,
# bus ids); nvidia-smi pads keys to a column, older drivers to a narrower one.
# Read from right-stripped lines: the value is all after the blanks that follow the colon (a lazy
# value then a trailing-blank test would try every split of a long blank run: quadratic).
_TEXT_KV = re.compile(r"^(?P<indent> *)(?P<key>[^:\s][^:]{0,100}?)\s*:(?:\s+(?P<value>.*))?$")
_TITLE = re.compile(r"^ *[A-Za-z][\w .()/%+\-]{0,80}$")
# (section element, label) -> the XML element nvidia-smi -q -x names the same value with;
# labels not listed become their snake_case (the XML mostly is that: "FB Memory Usage" ->
# fb_memory_usage). "*" matches any section.
_TEXT_TAGS: dict[tuple[str, str], str] = {
    ("gpu", "gpu uuid"): "uuid", ("gpu", "serial number"): "serial",
    ("gpu", "mig device"): "mig_device", ("gpu", "mig devices"): "mig_devices",
    ("inforom_version", "image version"): "img_version",
    ("pci", "gpu link info"): "pci_gpu_link_info", ("pci", "bus id"): "pci_bus_id",
    ("pci", "replays since reset"): "replay_counter",
    ("pci_gpu_link_info", "pcie generation"): "pcie_gen", ("pci_gpu_link_info", "link width"): "link_widths",
    ("pcie_gen", "max"): "max_link_gen", ("pcie_gen", "current"): "current_link_gen",
    ("link_widths", "max"): "max_link_width", ("link_widths", "current"): "current_link_width",
    ("utilization", "gpu"): "gpu_util", ("utilization", "memory"): "memory_util",
    ("utilization", "encoder"): "encoder_util", ("utilization", "decoder"): "decoder_util",
    ("temperature", "gpu current temp"): "gpu_temp", ("temperature", "memory current temp"): "memory_temp",
    ("clocks", "graphics"): "graphics_clock", ("clocks", "sm"): "sm_clock",
    ("clocks", "memory"): "mem_clock", ("clocks", "video"): "video_clock",
    ("retired_pages", "single bit ecc"): "multiple_single_bit_retirement",
    ("retired_pages", "double bit ecc"): "double_bit_retirement",
    ("retired_pages", "pending page blacklist"): "pending_retirement",
    ("retired_pages", "pending page retirement"): "pending_retirement",
    ("remapped_rows", "correctable error"): "remapped_row_corr",
    ("remapped_rows", "uncorrectable error"): "remapped_row_unc",
    ("remapped_rows", "pending"): "remapped_row_pending",
    ("remapped_rows", "remapping failure occurred"): "remapped_row_failure",
    ("processes", "process id"): "pid", ("processes", "name"): "process_name",
    ("processes", "used gpu memory"): "used_memory",
    ("mig_device", "shared fb memory usage"): "fb_memory_usage",
    ("mig_devices", "mig device"): "mig_device",
}
_REASON_SECTIONS = {"clocks_event_reasons": "clocks_event_reason_", "clocks_throttle_reasons": "clocks_throttle_reason_"}
_REASON_LABELS = {"idle": "gpu_idle", "display clock setting": "display_clocks_setting"}


def _snake(label: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
    return s if s and not s[0].isdigit() else f"_{s}"


def _tag(parent: str, label: str) -> str:
    key = re.sub(r"\s+", " ", label.strip()).lower()
    if parent in _REASON_SECTIONS:
        return _REASON_SECTIONS[parent] + _REASON_LABELS.get(key, _snake(key))
    return _TEXT_TAGS.get((parent, key)) or _snake(key)


def _regroup(gpu: ET.Element) -> None:
    """The text report's flat lists as the XML nests them: ``MIG Device`` sections under
    ``mig_devices``, the entries of ``Processes`` as one ``process_info`` per process (a key
    seen again starts the next), retired-page counts under ``retired_count``."""
    # children are moved by rebuilding the lists (Element.remove searches: one per child is quadratic)
    direct = [c for c in gpu if c.tag == "mig_device"]
    if direct:
        holder = gpu.find("mig_devices")
        if holder is None:
            holder = ET.SubElement(gpu, "mig_devices")
        gpu[:] = [c for c in gpu if c.tag != "mig_device"]
        holder.extend(direct)
    for procs in gpu.findall("processes"):
        items = [c for c in procs if c.tag != "process_info"]
        groups: list[ET.Element] = []
        tags: set[str] = set()  # of the last group
        for c in items:
            if not groups or c.tag in tags:
                groups.append(ET.Element("process_info"))
                tags = set()
            groups[-1].append(c)
            tags.add(c.tag)
        procs[:] = [c for c in procs if c.tag == "process_info"] + groups
    retired = gpu.find("retired_pages")
    if retired is not None:
        for c in retired:
            if c.tag in ("multiple_single_bit_retirement", "double_bit_retirement") and not len(c):
                ET.SubElement(c, "retired_count").text, c.text = c.text, None


def looks_like_text_report(text: str) -> bool:
    """Whether ``text`` is ``nvidia-smi -q`` (its banner, or a ``GPU <bus id>`` section line
    with ``key : value`` lines under it)."""
    head = text[:200_000]
    return "NVSMI LOG" in head[:2000] or any(_GPU_HEADER.match(ln) for ln in head.splitlines()[:5000])


def text_document(text: str) -> ET.Element:
    """``nvidia-smi -q`` read into the tree ``-q -x`` prints (root ``nvidia_smi_log``, one
    ``gpu`` per ``GPU <bus id>`` section with the bus id in ``id``), by indentation: a key
    without a value or a bare title opens a section for the deeper lines under it; lines under
    a key that has a value (``HW Slowdown`` / ``HW Thermal Slowdown``, ``Process ID`` /
    ``Type``) are its siblings, as in the XML."""
    if not isinstance(text, str):
        raise ParseError(TEXT_TOOL, f"expected text, got {type(text).__name__}")
    root = ET.Element("nvidia_smi_log")
    stack: list[tuple[int, ET.Element]] = [(-1, root)]
    keys = gpus = 0
    for lineno, raw in enumerate(text.expandtabs(8).splitlines(), 1):
        if len(raw) > MAX_TEXT_LINE:
            raise ParseError(TEXT_TOOL, f"a line of {len(raw)} characters; nvidia-smi prints short lines", lineno)
        line = raw.rstrip()
        if not line.strip() or set(line.strip()) <= set("=- ") or "NVSMI LOG" in line:
            continue
        head = _GPU_HEADER.match(line.strip())
        if head:
            gpu = ET.SubElement(root, "gpu", id=head.group(1))
            gpus += 1
            tables.check_devices(gpus, TEXT_TOOL, lineno)
            stack = [(-1, root), (len(line) - len(line.lstrip()), gpu)]
            continue
        indent = len(line) - len(line.lstrip())
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        m = _TEXT_KV.match(line)
        if m is None:
            if not _TITLE.match(line):
                raise ParseError(TEXT_TOOL, f"not a 'key : value' line: {line.strip()[:60]!r}", lineno)
            section = ET.SubElement(parent, _tag(parent.tag, line))
            stack.append((indent, section))
            continue
        keys += 1
        el = ET.SubElement(parent, _tag(parent.tag, m.group("key")))
        value = m.group("value")
        if value:
            el.text = value
            stack.append((indent, parent))  # deeper lines under a valued key are its siblings
        else:
            stack.append((indent, el))
    if not keys or (root.find("gpu") is None and root.find("attached_gpus") is None):
        raise ParseError(TEXT_TOOL, "no 'GPU <bus id>' section and no 'Attached GPUs': not nvidia-smi -q output")
    for gpu in root.findall("gpu"):
        _regroup(gpu)
    return root


def parse_text_devices(text: str, now: Optional[float] = None) -> tuple[list[DeviceSample], Optional[float]]:
    """Devices of one ``nvidia-smi -q`` text report (as ``parse_devices`` for the XML)."""
    return devices_of(text_document(text), TEXT_TOOL, now)


# --------------------------------------------------------------------------- --query-gpu CSV
CSV_TOOL = "nvidia-smi --query-gpu --format=csv"
APPS_TOOL = "nvidia-smi --query-compute-apps --format=csv"
# field -> (query names, first present wins; kind; method; window) as FIELD_MAP; the same NVML
# values behind the XML, so the same windows.
CSV_FIELDS: tuple[tuple[str, tuple[str, ...], str, str, Optional[float]], ...] = (
    (F.UTILIZATION, ("utilization.gpu",), "ratio", "sampled", 1.0),
    (F.MEMORY_UTILIZATION, ("utilization.memory",), "ratio", "sampled", 1.0),
    (F.MEMORY_USED, ("memory.used",), "bytes", "measured", None),
    (F.MEMORY_TOTAL, ("memory.total",), "bytes", "measured", None),
    (F.TEMP_CORE, ("temperature.gpu",), "celsius", "measured", None),
    (F.TEMP_MEMORY, ("temperature.memory",), "celsius", "measured", None),
    (F.POWER, ("power.draw.average", "power.draw"), "watts", "sampled", 1.0),
    (F.POWER_LIMIT, ("enforced.power.limit", "power.limit"), "watts", "measured", None),
    (F.CLOCK_COMPUTE, ("clocks.current.sm", "clocks.sm"), "hertz", "measured", None),
    (F.CLOCK_MEMORY, ("clocks.current.memory", "clocks.mem", "clocks.memory"), "hertz", "measured", None),
    (C.PCIE_GEN, ("pcie.link.gen.current", "pcie.link.gen.gpucurrent"), "count", "measured", None),
    (C.PCIE_GEN_MAX, ("pcie.link.gen.max", "pcie.link.gen.gpumax"), "count", "measured", None),
    (C.PCIE_WIDTH, ("pcie.link.width.current",), "lanes", "measured", None),
    (C.PCIE_WIDTH_MAX, ("pcie.link.width.max",), "lanes", "measured", None),
    (F.ECC_CORRECTED, ("ecc.errors.corrected.aggregate.total",), "count", "measured", None),
    (F.ECC_UNCORRECTED, ("ecc.errors.uncorrected.aggregate.total",), "count", "measured", None),
    (C.ECC_CORRECTED_VOLATILE, ("ecc.errors.corrected.volatile.total",), "count", "measured", None),
    (C.ECC_UNCORRECTED_VOLATILE, ("ecc.errors.uncorrected.volatile.total",), "count", "measured", None),
    (C.RETIRED_SBE, ("retired_pages.single_bit_ecc.count", "retired_pages.sbe"), "count", "measured", None),
    (C.RETIRED_DBE, ("retired_pages.double_bit.count", "retired_pages.dbe"), "count", "measured", None),
    (C.RETIREMENT_PENDING, ("retired_pages.pending",), "flag", "measured", None),
    (C.REMAPPED_CORRECTABLE, ("remapped_rows.correctable",), "count", "measured", None),
    (C.REMAPPED_UNCORRECTABLE, ("remapped_rows.uncorrectable",), "count", "measured", None),
    (C.REMAP_PENDING, ("remapped_rows.pending",), "flag", "measured", None),
    (C.REMAP_FAILED, ("remapped_rows.failure",), "flag", "measured", None),
)
# the unit a value has in ``--format=csv,nounits`` (or without its unit in the cell), by kind
_CSV_UNIT = {"bytes": "MiB", "celsius": "C", "watts": "W", "hertz": "MHz", "ratio": "%", "lanes": "x"}
_HEADER = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?:\s*\[(?P<unit>[^\]]{1,16})\])?$")
_CSV_IDENT = ("name", "uuid", "pci.bus_id", "index", "gpu_uuid", "gpu_bus_id", "pid")


def _csv_rows(text: str, tool: str) -> tuple[list[str], list[list[str]]]:
    """The header names (units dropped) and the data rows; ParseError for anything else."""
    if not isinstance(text, str):
        raise ParseError(tool, f"expected text, got {type(text).__name__}")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ParseError(tool, "empty output")
    if any(len(ln) > 200_000 for ln in lines):
        raise ParseError(tool, "a line too long for nvidia-smi CSV output")
    import csv  # noqa: PLC0415 - only this reader needs it
    try:
        rows = [[c.strip() for c in r] for r in csv.reader(lines, skipinitialspace=True)]
    except csv.Error as e:
        raise ParseError(tool, f"not CSV: {e}") from None
    names = []
    for cell in rows[0]:
        m = _HEADER.match(cell)
        if m is None:
            raise ParseError(tool, f"header cell {cell[:40]!r} is not a query field name", 1)
        names.append(m.group("name").lower())
    if len(set(names)) != len(names):
        raise ParseError(tool, "header names a field twice", 1)
    for n, r in enumerate(rows[1:], 2):
        if r == rows[0]:  # files saved one after the other: a header read as a GPU named "name"
            raise ParseError(tool, "the header again (one capture per file: parse each)", n)
        if len(r) != len(names):
            raise ParseError(tool, f"row has {len(r)} cells, the header {len(names)}", n)
    return names, rows[1:]


def looks_like_csv(text: str) -> Optional[str]:
    """``gpu`` for ``--query-gpu`` CSV, ``apps`` for ``--query-compute-apps``, else None: the
    first line is a comma-separated list of query names naming an identity field."""
    first = next((ln for ln in text[:400_000].splitlines() if ln.strip()), "")
    if "," not in first and not first.strip().lower().startswith(("name", "uuid", "pci.bus_id", "index")):
        return None
    heads = [_HEADER.match(c.strip()) for c in first.split(",")]
    names = {(m.group("name") or "").lower() for m in heads if m is not None}
    if None in heads:
        return None
    if "pid" in names and names & {"gpu_uuid", "gpu_bus_id", "used_gpu_memory", "used_memory"}:
        return "apps"
    if names & {"name", "uuid", "pci.bus_id", "index", "memory.total"}:
        return "gpu"
    return None


def _csv_value(cell: str, kind: str) -> Optional[float]:
    """One cell in base units (``81559 MiB`` or, ``nounits``, ``81559``); None when not
    supported; _Bad when unreadable."""
    text = cell.strip()
    if kind in _CSV_UNIT and re.fullmatch(r"[-+]?[0-9]+(?:\.[0-9]+)?", text):
        text = f"{text}{_CSV_UNIT[kind] if kind == 'lanes' else ' ' + _CSV_UNIT[kind]}"
    return value_of(text, kind)


def parse_csv_devices(text: str, now: Optional[float] = None) -> tuple[list[DeviceSample], Optional[float]]:
    """Devices of ``nvidia-smi --query-gpu=... --format=csv[,nounits]``: one row per GPU,
    read by the header's field names (any subset, any order). A GPU needs ``uuid`` or
    ``pci.bus_id``; fields the query did not ask for are absent."""
    names, rows = _csv_rows(text, CSV_TOOL)
    if not {"uuid", "pci.bus_id"} & set(names):
        raise ParseError(CSV_TOOL, "the query names neither uuid nor pci.bus_id: no GPU can be identified", 1)
    out: list[DeviceSample] = []
    doc_time = None
    for n, row in enumerate(rows):
        cell = dict(zip(names, row))
        uuid = _optional(cell.get("uuid"))
        pci = pciaddr.normalize(cell.get("pci.bus_id") or "", default_function=None)
        if uuid is None and pci is None:
            raise ParseError(CSV_TOOL, f"row {n + 1} has neither a uuid nor a PCI bus id", n + 2)
        stamp = _csv_time(cell.get("timestamp"))
        doc_time = doc_time if doc_time is not None else stamp
        name = _optional(cell.get("name")) or ""
        index = values.integer(cell.get("index"), 10)
        ident = DeviceIdentity(
            vendor="nvidia", kind="gpu", index=index if index is not None else n,
            uuid=uuid or f"nvidia-pci-{pci}", model=profiles.normalize_model("nvidia", name),
            pci_address=pci, numa_node=None, driver_version=_optional(cell.get("driver_version")),
            runtime_version=None, firmware_version=_optional(cell.get("inforom.img")),
            name=name or None, serial=_optional(cell.get("serial")))
        r: dict[str, Reading] = {}
        for field, keys, kind, method, window in CSV_FIELDS:
            key = next((k for k in keys if k in cell), None)
            if key is None:
                continue
            q = Quality(f"{CSV_TOOL}: {key}", method, window, _RESOLUTION[kind])
            try:
                v = _csv_value(cell[key], kind)
            except _Bad:
                r[field] = Reading(None, q.with_status("error"))
                continue
            r[field] = Reading(v, q) if v is not None else Reading(None, q.with_status("unsupported"))
        for _bit, reason, suffix in C.CLOCK_REASONS:
            for key in (f"clocks_event_reasons.{suffix}", f"clocks_throttle_reasons.{suffix}"):
                if key in cell:
                    q = Quality(f"{CSV_TOOL}: {key}", "measured", None, 1.0)
                    try:
                        v = value_of(cell[key], "flag")
                    except _Bad:
                        r[C.clock_reason_field(reason)] = Reading(None, q.with_status("error"))
                        break
                    r[C.clock_reason_field(reason)] = (Reading(v, q) if v is not None
                                                      else Reading(None, q.with_status("unsupported")))
                    break
        if "gpu_recovery_action" in cell:
            q = Quality(f"{CSV_TOOL}: gpu_recovery_action", "measured", None, 1.0)
            t = cell["gpu_recovery_action"]
            if t.strip().lower() == "none":
                r[C.RECOVERY_ACTION] = Reading(0.0, q)
            elif not t or _na(t):
                r[C.RECOVERY_ACTION] = Reading(None, q.with_status("unsupported"))
            else:
                v = C.recovery_from_text(t)
                r[C.RECOVERY_ACTION] = Reading(None, q.with_status("error")) if v is None else Reading(float(v), q)
        out.append(DeviceSample(identity=ident, timestamp=0.0, readings=r))
        tables.check_devices(len(out), CSV_TOOL, n + 2)
    when = now if now is not None else (doc_time or 0.0)
    return [dataclasses.replace(d, timestamp=when) for d in out], doc_time


def _csv_time(text: Optional[str]) -> Optional[float]:
    """``2026/07/14 08:12:53.353`` (the node's local time; read as UTC) -> Unix seconds."""
    if not text:
        return None
    try:
        base, _, frac = text.strip().partition(".")
        t = calendar.timegm(time.strptime(base, "%Y/%m/%d %H:%M:%S"))
        return float(t) + (float("0." + frac) if frac.isdigit() else 0.0)
    except (ValueError, OverflowError):
        return None


def parse_apps(text: str) -> list[ProcessSample]:
    """``nvidia-smi --query-compute-apps=...,pid,...,used_gpu_memory --format=csv``: one
    process per row, attributed to ``gpu_uuid`` (else ``nvidia-pci-<gpu_bus_id>``)."""
    names, rows = _csv_rows(text, APPS_TOOL)
    if "pid" not in names or not {"gpu_uuid", "gpu_bus_id"} & set(names):
        raise ParseError(APPS_TOOL, "the query names no pid or no gpu_uuid/gpu_bus_id", 1)
    out = []
    for n, row in enumerate(rows):
        cell = dict(zip(names, row))
        pid = values.integer(cell.get("pid"), 10)
        if pid is None:
            raise ParseError(APPS_TOOL, f"row {n + 1}: pid {cell.get('pid', '')[:20]!r} is not a number", n + 2)
        uuid = _optional(cell.get("gpu_uuid"))
        bus = pciaddr.normalize(cell.get("gpu_bus_id") or "", default_function=None)
        if uuid is None and bus is None:
            raise ParseError(APPS_TOOL, f"row {n + 1} names no GPU", n + 2)
        mem_cell = cell.get("used_gpu_memory", cell.get("used_memory", ""))
        try:
            mem = _csv_value(mem_cell, "bytes")
        except _Bad:
            mem = None
        out.append(ProcessSample(pid=pid, device_uuid=uuid or f"nvidia-pci-{bus}",
                                 memory_bytes=None if mem is None else int(mem),
                                 name=_optional(cell.get("process_name"))))
    return out


def _apps_snapshot(text: str) -> NodeSnapshot:
    """The GPUs the process list names (identity only) with their processes."""
    procs = parse_apps(text)
    names, rows = _csv_rows(text, APPS_TOOL)
    gpus: dict[str, DeviceSample] = {}
    owned: dict[str, list[ProcessSample]] = {}  # joined once (a tuple grown per process is quadratic)
    for p, row in zip(procs, rows):
        cell = dict(zip(names, row))
        owned.setdefault(p.device_uuid, []).append(p)
        if p.device_uuid not in gpus:
            name = _optional(cell.get("gpu_name")) or ""
            ident = DeviceIdentity(
                vendor="nvidia", kind="gpu", index=len(gpus), uuid=p.device_uuid,
                model=profiles.normalize_model("nvidia", name),
                pci_address=pciaddr.normalize(cell.get("gpu_bus_id") or "", default_function=None),
                numa_node=None, driver_version=None, runtime_version=None, name=name or None,
                serial=_optional(cell.get("gpu_serial")))
            gpus[p.device_uuid] = DeviceSample(identity=ident, timestamp=0.0, processes_reported=True)
    return NodeSnapshot(node="", time=0.0, devices=tuple(dataclasses.replace(d, processes=tuple(owned[u]))
                                                          for u, d in gpus.items()),
                        collectors=(CollectorStatus("nvidia_smi", True, vendor="nvidia", devices=len(gpus)),))


def read_any(text: str, now: Optional[float] = None) -> tuple[list[DeviceSample], Optional[float], str]:
    """The devices of any nvidia-smi report, the reader picked by structure: XML (``-q -x``),
    the text report (``-q``: its banner or ``GPU <bus id>`` sections), ``--query-gpu`` CSV
    (a header of query names). Returns (devices, document time, the output's name)."""
    if not isinstance(text, str):
        raise ParseError(TOOL, f"expected text, got {type(text).__name__}")
    body = text.lstrip("\ufeff \t\r\n")
    if body.startswith("<"):
        devices, when = parse_devices(text, now)
        return devices, when, TOOL
    if looks_like_text_report(body):
        devices, when = parse_text_devices(body, now)
        return devices, when, TEXT_TOOL
    if looks_like_csv(body) == "gpu":
        devices, when = parse_csv_devices(body, now)
        return devices, when, CSV_TOOL
    # anything else is read as the XML, whose error says what is wrong ("not well-formed XML")
    devices, when = parse_devices(text, now)
    return devices, when, TOOL


def with_health(d: DeviceSample, reasons: list[Fault], faults: tuple[Fault, ...],
                parent_health: Any = None, timestamp: Optional[float] = None) -> DeviceSample:
    """``d`` with its health (from ``reasons``, or its GPU's for a MIG instance) and faults."""
    health = C.health_of(reasons) if parent_health is None else parent_health
    if timestamp is None:
        return dataclasses.replace(d, health=health, faults=faults)
    return dataclasses.replace(d, health=health, faults=faults, timestamp=timestamp)


def parse(text: str) -> NodeSnapshot:
    """``hetero-exporter parse nvidia-smi FILE``: the report as a snapshot, whichever of
    ``-q -x``, ``-q`` or ``--query-gpu``/``--query-compute-apps`` CSV it is (by structure).
    Conditions the readings show (row remap pending, recovery action...) are health reasons
    and faults seen once, at the document's time."""
    if isinstance(text, str) and looks_like_csv(text.lstrip("\ufeff \t\r\n")) == "apps":
        return _apps_snapshot(text.lstrip("\ufeff \t\r\n"))
    devices, doc_time, tool = read_any(text)
    when = doc_time or 0.0
    out, parent = [], None
    for d in devices:
        if d.identity.parent is None:
            found = [dataclasses.replace(C.make_fault(code, msg, tool), first_seen=when, last_seen=when)
                     for code, msg in C.conditions(d.readings)]
            d = with_health(d, found, tuple(found))
            parent = d
            out.append(d)
        else:  # a MIG instance is as healthy as its GPU
            out.append(with_health(d, [], (), parent.health if parent is not None else None))
    return NodeSnapshot(node="", time=when, devices=tuple(out),
                        collectors=(CollectorStatus("nvidia_smi", True, vendor="nvidia", devices=len(out)),))
