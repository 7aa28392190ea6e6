"""``dcgmi dmon``: DCGM's field monitor, read so that DCGM's figures can stand beside ours for the
same GPU (``hetero-exporter parse dcgmi FILE``; DCGM is the reference the NVML GPM readings are
compared with on hardware).

Layout (DCGM 2.x and 3.x): a header ``#Entity  GRACT  SMACT ...`` of field short names, an ``ID``
line under it, then one row per entity per sample: ``GPU 0   0.000   0.000``. The first sample
of a profiling field is ``N/A`` (DCGM needs two readings to make a rate). The header pair is
printed again every so many rows: a repeat is skipped, a different one is a ParseError (two
captures in one file). Columns are found by their names, never by position.

Fields read (short names as ``dcgmi dmon -l`` lists them), into the fields the NVML collector
gives the same quantity (nvml/gpm.py), in base units:

=========  =====  ====================================  ===========================================
column     id     field                                 as printed
=========  =====  ====================================  ===========================================
GRACT      1001   graphics_active_ratio                 ratio 0..1
SMACT      1002   engine_compute_utilization_ratio      ratio
SMOCC      1003   sm_occupancy_ratio                    ratio
TENSO      1004   engine_tensor_utilization_ratio       ratio
DRAMA      1005   engine_memory_utilization_ratio       ratio
FP64A      1006   engine_fp64_utilization_ratio         ratio
FP32A      1007   engine_fp32_utilization_ratio         ratio
FP16A      1008   engine_fp16_utilization_ratio         ratio
PCITX      1009   pcie_tx_bytes_per_second              bytes/s
PCIRX      1010   pcie_rx_bytes_per_second              bytes/s
NVLTX      1011   interconnect_nvlink_tx_bytes_per_second  bytes/s
NVLRX      1012   interconnect_nvlink_rx_bytes_per_second  bytes/s
GPUTL      203    utilization_ratio                     %
MCUTL      204    memory_utilization_ratio              %
POWER      155    power_watts                           W
GTEMP      150    temperature_core_celsius              C
MMTMP      140    temperature_memory_celsius            C
SMCLK      100    clock_compute_hertz                   MHz
MMCLK      101    clock_memory_hertz                    MHz
FBUSD      252    memory_used_bytes                     MiB
FBTTL      250    memory_total_bytes                    MiB
=========  =====  ====================================  ===========================================

Other columns are not read. Each GPU's reading is its newest sample that is a number (the first
sample's ``N/A`` does not hide the second's value); a field ``N/A`` in every sample is
``unsupported``, text that is no number ``error``. Profiling fields are ``sampled`` over the
monitor's interval, which the output does not print: the window is dmon's default ``-d 1000``
(1 s). Resolution: the step printed (``0.000`` -> 0.001). Rows of other entities (``GPU-I``,
``GPU-CI``, ``Switch``, ``Link``, ``CPU``) are not GPUs and are left out. GPUs are named by
their DCGM id only (``nvidia-unidentified-<id>``, as nvidia-smi's index-only layouts name them).
Health is not shown: ``unknown``.
"""

from __future__ import annotations

import re
from typing import Optional

from hetero_exporter.collectors.nvidia.nvidia_smi.layout_common import VENDOR, placeholder_uuid
from hetero_exporter.model import CollectorStatus, DeviceIdentity, DeviceSample, Health, NodeSnapshot, Quality, Reading
from hetero_exporter.sdk import tables
from hetero_exporter.sdk.contract import ParseError

TOOL = "dcgmi dmon"
WINDOW = 1.0  # dcgmi dmon -d default, ms 1000
MIB = float(1 << 20)
# column -> (field, factor to base units, method)
COLUMNS: dict[str, tuple[str, float, str]] = {
    "GRACT": ("graphics_active_ratio", 1.0, "sampled"),
    "SMACT": ("engine_compute_utilization_ratio", 1.0, "sampled"),
    "SMOCC": ("sm_occupancy_ratio", 1.0, "sampled"),
    "TENSO": ("engine_tensor_utilization_ratio", 1.0, "sampled"),
    "DRAMA": ("engine_memory_utilization_ratio", 1.0, "sampled"),
    "FP64A": ("engine_fp64_utilization_ratio", 1.0, "sampled"),
    "FP32A": ("engine_fp32_utilization_ratio", 1.0, "sampled"),
    "FP16A": ("engine_fp16_utilization_ratio", 1.0, "sampled"),
    "PCITX": ("pcie_tx_bytes_per_second", 1.0, "sampled"),
    "PCIRX": ("pcie_rx_bytes_per_second", 1.0, "sampled"),
    "NVLTX": ("interconnect_nvlink_tx_bytes_per_second", 1.0, "sampled"),
    "NVLRX": ("interconnect_nvlink_rx_bytes_per_second", 1.0, "sampled"),
    "GPUTL": ("utilization_ratio", 0.01, "sampled"),
    "MCUTL": ("memory_utilization_ratio", 0.01, "sampled"),
    "POWER": ("power_watts", 1.0, "sampled"),
    "GTEMP": ("temperature_core_celsius", 1.0, "measured"),
    "MMTMP": ("temperature_memory_celsius", 1.0, "measured"),
    "SMCLK": ("clock_compute_hertz", 1e6, "measured"),
    "MMCLK": ("clock_memory_hertz", 1e6, "measured"),
    "FBUSD": ("memory_used_bytes", MIB, "measured"),
    "FBTTL": ("memory_total_bytes", MIB, "measured"),
}
_HEADER = re.compile(r"^#\s*Entity(?:\s|$)", re.I)
_ID_LINE = re.compile(r"^(?:#\s*)?ID$", re.I)
_ROW = re.compile(r"^(GPU|GPU-I|GPU-CI|Switch|Link|CPU|Core|NvSwitch|Cx)\s+(\d{1,6})(?:\s+(.*))?$", re.I)
_NUMBER = re.compile(r"[-+]?\d{1,15}(?:\.(\d{1,9}))?")
_NA = ("N/A", "NA", "-", "NOT SUPPORTED")


def looks_like(text: str) -> bool:
    first = next((ln.strip() for ln in text[:4096].splitlines() if ln.strip()), "")
    return _HEADER.match(first) is not None


def _value(text: str) -> tuple[Optional[float], Optional[float], bool]:
    """(value, resolution, unreadable): N/A -> (None, None, False)."""
    t = text.strip()
    if t.upper() in _NA:
        return None, None, False
    m = _NUMBER.fullmatch(t)
    if m is None:
        return None, None, True
    return float(t), 10.0 ** -len(m.group(1) or ""), False


def parse(text: str) -> NodeSnapshot:
    """One device per GPU entity, each field its newest sample that is a number."""
    if not isinstance(text, str):
        raise ParseError(TOOL, f"expected text, got {type(text).__name__}")
    body = list(tables.stripped_lines(text, TOOL))
    if not body or not _HEADER.match(body[0][1]):
        raise ParseError(TOOL, "no '#Entity ...' header of field names")
    header = body[0][1]
    names = tuple(w.upper() for w in header.lstrip("#").split()[1:])
    if not names or len(set(names)) != len(names):
        raise ParseError(TOOL, "the header names no field, or one twice", body[0][0])
    # per GPU id: field -> (value, resolution) of the newest number, or "na" / "error" so far
    gpus: dict[int, dict[str, tuple[Optional[float], Optional[float], str]]] = {}
    for n, s in body[1:]:
        if _ID_LINE.match(s) or s == header:
            continue
        if _HEADER.match(s):
            raise ParseError(TOOL, f"another header: {s[:60]!r} (one capture per file)", n)
        m = _ROW.match(s)
        if m is None:
            raise ParseError(TOOL, f"not an entity row ('GPU 0  0.000 ...'): {s[:60]!r}", n)
        cells = (m.group(3) or "").split()
        if len(cells) != len(names):
            raise ParseError(TOOL, f"a row of {len(cells)} values under {len(names)} fields", n)
        if m.group(1).upper() != "GPU":
            continue  # MIG instances, switches, links, CPUs: no GPU of the model
        seen = gpus.setdefault(int(m.group(2)), {})
        tables.check_devices(len(gpus), TOOL, n)
        for name, cell in zip(names, cells):
            v, res, bad = _value(cell)
            if v is not None:
                seen[name] = (v, res, "ok")
            elif name not in seen or seen[name][2] != "ok":
                seen[name] = (None, None, "error" if bad else "unsupported")
    if not gpus:
        raise ParseError(TOOL, "no GPU row")
    unknown = Health("unknown")
    devices = tuple(DeviceSample(identity=DeviceIdentity(vendor=VENDOR, kind="gpu", index=i, uuid=placeholder_uuid(i)),
                                 timestamp=0.0, readings=_readings(fields), health=unknown)
                    for i, fields in gpus.items())
    return NodeSnapshot(node="", time=0.0, devices=devices,
                        collectors=(CollectorStatus("dcgmi", True, vendor=VENDOR, devices=len(devices)),))


def _readings(fields: dict[str, tuple[Optional[float], Optional[float], str]]) -> dict[str, Reading]:
    out: dict[str, Reading] = {}
    for name, (v, res, status) in fields.items():
        if name not in COLUMNS:
            continue
        field, factor, method = COLUMNS[name]
        q = Quality(f"{TOOL}: {name}", method, WINDOW if method == "sampled" else None,
                    (res or 1.0) * factor)
        out[field] = Reading(v * factor, q) if v is not None else Reading(None, q.with_status(status))
    return out
