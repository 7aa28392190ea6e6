"""AMD GPUs through the ``amd-smi`` CLI (ROCm 6+), on the SDK's CLI collector; ``parse amd-smi``.

One call per cycle, ``amd-smi metric --json`` (activity, VRAM, temperatures, power, clocks,
PCIe, ECC of every GPU), through the shared runner (deadline, process-group kill, output cap);
``amd-smi static --json`` once when a GPU is first seen, for its identity (ASIC serial, BDF,
market name, driver, VBIOS, NUMA node, VRAM size). It is what the amdsmi collector falls back
to when the amdsmi binding cannot be imported or initialised (library missing, or a build that
does not match the host's ROCm), and is selectable as ``--collector.amd_smi``.

Identity: collectors/amd/identity.py's ``device_uuid`` over ``asic.asic_serial`` (then the
board serial, then the BDF), the values the amdsmi collector reads from the same library calls
(amd-smi prints amdsmi_get_gpu_asic_info / board_info), so both name a GPU alike.

Quality: resolution is the step amd-smi prints in (1 %, 1 MB = 1 MiB, 1 C, 1 W, 1 MHz); the
activities are SMU firmware averages whose window AMD does not document (1 s assumed, as in
the amdsmi collector); socket power is what amdsmi_get_power_info gives (instantaneous on
MI300, an ~1 s average before: kept ``measured`` as amdsmi's collector does).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
from typing import Any, Callable, Mapping, Optional, Union

from hetero_exporter.model import fields as F
from hetero_exporter import profiles
from hetero_exporter.collectors.amd import versions
from hetero_exporter.collectors.amd.amd_smi import partition
from hetero_exporter.collectors.amd.identity import device_uuid
from hetero_exporter.model import (CollectorStatus, DeviceIdentity, DeviceSample, Fault, Link,
                                   NodeSnapshot, ProcessSample, Quality, Reading)
from hetero_exporter.sdk import values
from hetero_exporter.sdk.cli_collector import CliCollector, build, table_fault
from hetero_exporter.sdk.faults import health_of
from hetero_exporter.sdk.contract import CollectorOptions, ParseError, Unavailable
from hetero_exporter.sdk.runner import CliResult

from .parse import TOOL, AmdOutput, bdf, find, parse_output, quantity

log = logging.getLogger(__name__)

VENDOR, KIND = "amd", "gpu"
METRIC_ARGS = ("metric", "--json")
STATIC_ARGS = ("static", "--json")
# the amdsmi collector's vendor fields: one module names them for both
from hetero_exporter.collectors.amd.fields import (  # noqa: E402
    KFD_ID, KFD_NODE_ID, PARTITION_ID, THROTTLE_ACCUMULATION, THROTTLE_ACTIVE, throttle_active_field,
    throttle_count_field, throttle_ratio_field)
from hetero_exporter.collectors.amd.fields import (  # noqa: E402
    ECC_DEFERRED, MEDIA_UTILIZATION, PCIE_BANDWIDTH, PCIE_NAK_RECEIVED, PCIE_NAK_SENT, PCIE_RECOVERY,
    PCIE_REPLAY, PCIE_REPLAY_ROLLOVER, PCIE_SPEED, PCIE_WIDTH, TEMP_EDGE)
_SMU_AVERAGE_S = 1.0  # assumed: AMD documents no window for the SMU activity averages
MIB = float(1 << 20)

# field -> (key paths in the metric/static/monitor tree, first present wins; method; window;
# resolution; default unit when the value has none: JSON of older amd-smi prints bare numbers)
FIELDS: tuple[tuple[str, tuple[str, ...], str, Optional[float], float, str], ...] = (
    (F.UTILIZATION, ("usage/gfx_activity", "monitor/gfx_util", "monitor/gfx%", "monitor/gfx"),
     "sampled", _SMU_AVERAGE_S, 0.01, "%"),
    (F.MEMORY_UTILIZATION, ("usage/umc_activity", "monitor/mem_util", "monitor/mem%", "monitor/mem"),
     "sampled", _SMU_AVERAGE_S, 0.01, "%"),
    (MEDIA_UTILIZATION, ("usage/mm_activity",), "sampled", _SMU_AVERAGE_S, 0.01, "%"),
    (F.MEMORY_USED, ("mem_usage/used_vram", "monitor/vram_used"), "measured", None, MIB, "MB"),
    (F.MEMORY_TOTAL, ("mem_usage/total_vram", "vram/size", "monitor/vram_total"), "measured", None, MIB, "MB"),
    (F.TEMP_CORE, ("temperature/hotspot", "monitor/gpu_temp", "monitor/gpu_t", "monitor/hotspot_temperature"),
     "measured", None, 1.0, "C"),
    (TEMP_EDGE, ("temperature/edge",), "measured", None, 1.0, "C"),
    (F.TEMP_MEMORY, ("temperature/mem", "monitor/mem_temp", "monitor/mem_t", "monitor/memory_temperature"),
     "measured", None, 1.0, "C"),
    (F.POWER, ("power/socket_power", "power/current_socket_power", "power/average_socket_power",
               "monitor/power", "monitor/power_usage"), "measured", None, 1.0, "W"),
    (F.POWER_LIMIT, ("limit/socket_power", "limit/power_cap"), "measured", None, 1.0, "W"),
    (F.CLOCK_COMPUTE, ("clock/gfx_0/clk", "monitor/gfx_clock", "monitor/gfx_clk"), "measured", None, 1e6, "MHz"),
    (F.CLOCK_MEMORY, ("clock/mem_0/clk", "monitor/mem_clock", "monitor/mem_clk"), "measured", None, 1e6, "MHz"),
    (F.ENERGY, ("energy/total_energy_consumption",), "measured", None, 1e-6, "uJ"),
    (F.ECC_CORRECTED, ("ecc/total_correctable_count", "ecc/total_correctable"), "measured", None, 1.0, ""),
    (F.ECC_UNCORRECTED, ("ecc/total_uncorrectable_count", "ecc/total_uncorrectable"), "measured", None, 1.0, ""),
    (ECC_DEFERRED, ("ecc/total_deferred_count", "ecc/total_deferred"), "measured", None, 1.0, ""),
    (PCIE_WIDTH, ("pcie/width",), "measured", None, 1.0, ""),
    (PCIE_SPEED, ("pcie/speed",), "measured", None, 1e9, "GT/s"),
    (PCIE_BANDWIDTH, ("pcie/bandwidth",), "measured", None, 125000.0, "Mb/s"),
    (PCIE_REPLAY, ("pcie/replay_count",), "measured", None, 1.0, ""),
    (PCIE_REPLAY_ROLLOVER, ("pcie/replay_roll_over_count",), "measured", None, 1.0, ""),
    (PCIE_RECOVERY, ("pcie/l0_to_recovery_count",), "measured", None, 1.0, ""),
    (PCIE_NAK_SENT, ("pcie/nak_sent_count",), "measured", None, 1.0, ""),
    (PCIE_NAK_RECEIVED, ("pcie/nak_received_count",), "measured", None, 1.0, ""),
    (KFD_ID, ("kfd_id",), "measured", None, 1.0, ""),
    (KFD_NODE_ID, ("node_id",), "measured", None, 1.0, ""),
    (PARTITION_ID, ("partition_id",), "measured", None, 1.0, ""),
    (THROTTLE_ACCUMULATION, ("throttle/accumulation_counter",), "measured", None, 1.0, ""),
)
_REASON = re.compile(r"^(?P<reason>[a-z][a-z0-9_]{0,40}?)_(?P<what>accumulated|violation_status|violation_activity)$")
MAX_REASONS = 32


def throttle_readings(tree: Any, command: str) -> dict[str, Reading]:
    """``metric -t`` THROTTLE (text) / ``throttle`` (JSON): per reason (``PROCHOT``, ``PPT``,
    ``SOCKET_THERMAL``, ``VR_THERMAL``, ``HBM_THERMAL``, and whatever later releases add, read by
    the key's suffix) its ``_VIOLATION_STATUS`` (1 ACTIVE / 0 NOT ACTIVE), ``_VIOLATION_ACTIVITY``
    (%, as a ratio; amdsmi_get_violation_status' per_* percentages over the accumulation window)
    and ``_ACCUMULATED`` (a counter of samples); plus THROTTLE_STATUS (power section, monitor
    THROTTLE column): THROTTLED 1, UNTHROTTLED 0."""
    r: dict[str, Reading] = {}
    section = tree.get("throttle") if isinstance(tree, dict) else None
    for key, raw in (section.items() if isinstance(section, dict) else ()):
        m = _REASON.match(key)
        if m is None or not isinstance(raw, str) or len(r) >= 3 * MAX_REASONS:
            continue
        reason, what = m.group("reason"), m.group("what")
        src = f"{command}: throttle/{key}"
        if what == "violation_status":
            name, q = throttle_active_field(reason), Quality(src, "measured", None, 1.0)
            word = raw.strip().upper().replace("_", " ")
            v = 1.0 if word == "ACTIVE" else 0.0 if word in ("NOT ACTIVE", "INACTIVE") else None
        else:
            ratio = what == "violation_activity"
            name = throttle_ratio_field(reason) if ratio else throttle_count_field(reason)
            q = Quality(src, "sampled" if ratio else "measured", _SMU_AVERAGE_S if ratio else None,
                        0.01 if ratio else 1.0)
            try:
                v = quantity(raw, "%" if ratio else "")
            except ValueError:
                r[name] = Reading(None, q.with_status("error"))
                continue
            if ratio and v is not None and not 0 <= v <= 1:
                r[name] = Reading(None, q.with_status("error"))
                continue
        r[name] = Reading(v, q) if v is not None else Reading(None, q.with_status("unsupported"))
    path, status = next(((p, s) for p in ("power/throttle_status", "monitor/throttle")
                         for s in [find(tree, p)] if s is not None), (None, None))
    if path is not None and status is not None:
        word = status.strip().upper()
        q = Quality(f"{command}: {path}", "measured", None, 1.0)
        v = 1.0 if word == "THROTTLED" else 0.0 if word == "UNTHROTTLED" else None
        r[THROTTLE_ACTIVE] = Reading(v, q) if v is not None else Reading(None, q.with_status("unsupported"))
    return r


def readings_of(tree: Any, command: str = "amd-smi") -> dict[str, Reading]:
    """Every reading the tree holds, in base units; N/A -> unsupported, unreadable -> error.
    VRAM used above the total (a driver fault) is an ``error`` reading, never a negative free."""
    r: dict[str, Reading] = {}
    for name, paths, method, window, resolution, unit in FIELDS:
        path = next((p for p in paths if find(tree, p) is not None), None)
        if path is None:
            continue
        q = Quality(f"{command}: {path}", method, window, resolution)
        try:
            v = quantity(find(tree, path), unit)
        except ValueError:
            r[name] = Reading(None, q.with_status("error"))
            continue
        if v is not None and name in (F.UTILIZATION, F.MEMORY_UTILIZATION, MEDIA_UTILIZATION) and not 0 <= v <= 1.0:
            r[name] = Reading(None, q.with_status("error"))
            continue
        r[name] = Reading(v, q) if v is not None else Reading(None, q.with_status("unsupported"))
    r.update(throttle_readings(tree, command))
    usage = find(tree, "monitor/vram_usage")  # newer monitor: "0.3/192.0 GB"
    if usage and "/" in usage and F.MEMORY_USED not in r:
        q = Quality(f"{command}: monitor/vram_usage", "measured", None, 0.1 * 1024 * MIB)
        try:
            num, unit = (usage.split() + ["GB"])[:2]
            used, total = (quantity(f"{x} {unit}") for x in num.split("/", 1))
            r[F.MEMORY_USED], r[F.MEMORY_TOTAL] = Reading(used, q), Reading(total, q)
        except ValueError:
            r[F.MEMORY_USED] = Reading(None, q.with_status("error"))
    used_r, total_r = r.get(F.MEMORY_USED), r.get(F.MEMORY_TOTAL)
    if used_r is not None and total_r is not None and used_r.value is not None and total_r.value is not None \
            and used_r.value > total_r.value:
        r[F.MEMORY_USED] = Reading(None, used_r.quality.with_status("error"))
    return r


def _hip_serial(text: Optional[str]) -> Optional[str]:
    """``GPU-9f444a2fb30adeb0`` -> ``9f444a2fb30adeb0``; None for anything else."""
    m = re.fullmatch(r"GPU-([0-9a-fA-F]{16})", (text or "").strip())
    return m.group(1) if m else None


def identity_of(index: int, tree: Any, runtime: Optional[str] = None, numa: Optional[int] = None) -> DeviceIdentity:
    """The GPU's identity from a static (or list/metric) tree; the uuid as the amdsmi collector's."""
    bus = bdf(tree)
    market = values.present(find(tree, "asic/market_name")) or values.present(find(tree, "board/product_name")) or ""
    serial = values.present(find(tree, "board/product_serial"))
    # ``list -e`` prints no ASIC_SERIAL but HIP_UUID ``GPU-<the asic serial's 16 hex digits>``
    # (the MI325X VF captures of one node: static ASIC_SERIAL 0x9F444A2FB30ADEB0 and list -e
    # HIP_UUID GPU-9f444a2fb30adeb0 at the same BDF): the same uuid whichever output is read
    asic = values.present(find(tree, "asic/asic_serial")) or _hip_serial(find(tree, "hip_uuid"))
    node = find(tree, "numa/node")
    node_index = values.integer(node, 4)
    numa_node = node_index if node_index is not None and node_index < 1024 else numa
    return DeviceIdentity(
        vendor=VENDOR, kind=KIND, index=index, uuid=device_uuid(VENDOR, index, asic, serial, bus),
        model=profiles.normalize_model(VENDOR, market), pci_address=bus, numa_node=numa_node,
        driver_version=values.present(find(tree, "driver/version")), runtime_version=runtime,
        firmware_version=values.present(find(tree, "vbios/version")) or values.present(find(tree, "vbios/part_number")),
        name=market or None, serial=serial or asic)


def processes_of(tree: Any, uuid: str) -> tuple[ProcessSample, ...]:
    """``process`` output: text ``PROCESS_INFO`` sections (a list when repeated) or JSON
    ``process_list`` items; VRAM_MEM is the process's device memory."""
    items: list = []
    for key in ("process_info", "process_list"):
        v = tree.get(key) if isinstance(tree, dict) else None
        items.extend(v if isinstance(v, list) else [v] if v is not None else [])
    out = []
    for item in items:
        if isinstance(item, dict) and "process_info" in item:
            item = item["process_info"]
        if not isinstance(item, dict):
            continue  # "No running processes detected"
        pid = values.integer(find(item, "pid"))
        if pid is None:
            continue
        try:
            mem = quantity(find(item, "memory_usage/vram_mem", "vram_mem"), "B")
        except ValueError:
            mem = None
        out.append(ProcessSample(pid=pid, device_uuid=uuid, memory_bytes=None if mem is None else int(mem),
                                 name=values.present(find(item, "name"))))
    return tuple(out)


# amd-smi's link types -> model.Link types. PCIE: amd-smi (KFD's io links) does not say whether a
# switch sits between two GPUs; the GPU-to-GPU PCIe paths KFD reports are its peer links built
# through the CPU node (GPU -> CPU -> GPU, 2 hops in the captures), i.e. over the host bridge.
LINK_TYPES = {"XGMI": "xgmi", "PCIE": "pcie-hostbridge"}


def _bandwidth(text: Any) -> Optional[float]:
    """Bytes/s from a NUMA ``min-max`` bandwidth (amdsmi_get_minmax_bandwidth_between_processors,
    MB/s: the maximum) or an xgmi ``max_bandwidth`` (``512 Gb/s``); None for N/A or other text."""
    t = str(text or "").strip()
    m = re.fullmatch(r"(\d{1,9})\s*-\s*(\d{1,9})", t)
    if m:
        return float(m.group(2)) * 1e6 or None
    m = re.fullmatch(r"(\d{1,9}(?:\.\d+)?)\s*([GM])b/s", t, re.I)
    if m:
        return float(m.group(1)) * (1e9 if m.group(2).upper() == "G" else 1e6) / 8 or None
    return None


def _pairs(t: dict) -> list[dict]:
    """One dict per peer: the old ``topology --json`` maps (``link_type: {gpu_N: XGMI}``, with
    ``weight`` / ``hops`` / ``numa_bandwidth`` maps), or the newer ``links`` list (and the text
    tables, read into it): ``{gpu, link_type, weight, num_hops, bandwidth}``."""
    out: list[dict] = []
    if isinstance(t.get("link_type"), dict):
        for k, v in t["link_type"].items():
            peer = str(k).removeprefix("gpu_")
            item = {"gpu": peer, "link_type": v}
            for key, into in (("numa_bandwidth", "bandwidth"), ("weight", "weight"), ("hops", "num_hops"),
                              ("link_accessibility", "link_status")):
                m = t.get(key)
                if isinstance(m, dict) and k in m:
                    item[into] = m[k]
            out.append(item)
    if isinstance(t.get("links"), list):
        out.extend(x for x in t["links"] if isinstance(x, dict))
    return out


def _links(out: AmdOutput, uuids: dict[int, str]) -> dict[int, tuple[Link, ...]]:
    """Links between the GPUs of ``topology`` (JSON old and new, text tables) and ``xgmi``: XGMI
    -> ``xgmi``, PCIE -> ``pcie-hostbridge``; bandwidth where shown (NUMA max, xgmi max).
    Hops and weight have no Link field yet; SELF, N/A and UNKNOWN are no link."""
    links: dict[int, list[Link]] = {}
    for idx, g in out.gpus.items():
        for item in _pairs(g.tree):
            peer, kind = values.integer(str(item.get("gpu", "")), 4), str(item.get("link_type", "")).strip().upper()
            if peer is None or peer == idx or kind not in LINK_TYPES:
                continue
            if str(item.get("link_status", "ENABLED")).upper() == "DISABLED":
                continue
            bw = _bandwidth(item.get("bandwidth") or item.get("max_bandwidth"))
            links.setdefault(idx, []).append(Link(peer=uuids.get(peer, f"amd-card{peer}"),
                                                  type=LINK_TYPES[kind], bandwidth_bytes_per_second=bw))
    return {k: tuple(v) for k, v in links.items()}


def conditions(readings: Mapping[str, Reading]) -> list[Fault]:
    """Faults the readings show: uncorrectable ECC (failed), deferred ECC (degraded)."""
    out = []
    for name, code in ((F.ECC_UNCORRECTED, "ecc-uncorrectable"), (ECC_DEFERRED, "ecc-deferred")):
        r = readings.get(name)
        if r is not None and r.value:
            out.append(table_fault(VENDOR, code, f"{int(r.value)} {code.split('-', 1)[1]} ECC errors", TOOL))
    return out


def snapshot_of(out: AmdOutput, command: str = TOOL) -> NodeSnapshot:
    devices = []
    uuids = {i: identity_of(i, g.tree).uuid for i, g in out.gpus.items()}
    links = _links(out, uuids)
    for i, g in out.gpus.items():
        ident = identity_of(i, g.tree)
        r = readings_of(g.tree, command)
        procs = processes_of(g.tree, ident.uuid)
        reasons = tuple(conditions(r))
        devices.append(DeviceSample(identity=ident, timestamp=0.0, readings=r, processes=procs,
                                    processes_reported=bool(procs) or "process_info" in g.tree
                                    or "process_list" in g.tree,
                                    health=health_of(reasons), faults=reasons,
                                    links=links.get(i, ())))
    return NodeSnapshot(node="", time=0.0, devices=tuple(devices),
                        collectors=(CollectorStatus("amd_smi", True, vendor=VENDOR, devices=len(devices)),))


def detect(text: str) -> bool:
    """Whether ``text`` is amd-smi output this module reads (``GPU: N`` blocks, a JSON list of
    ``{"gpu": N}`` objects, or a monitor table)."""
    try:
        return bool(parse_output(text).gpus)
    except ParseError:
        return False


def parse_any(text: str) -> NodeSnapshot:
    """``hetero-exporter parse amd-smi FILE``: any static/metric/process/monitor/list/topology
    output, text or ``--json``, as a snapshot of its GPUs; ``partition`` (partition.py) as its
    GPUs' partition counts."""
    if isinstance(text, str) and partition.looks_like(text.lstrip("\ufeff")):
        return partition.snapshot(partition.parse(text.lstrip("\ufeff")))
    return snapshot_of(parse_output(text))


# --------------------------------------------------------------------------- the collector
Source = Callable[[list, float], str]


def _source_runner(source: Source) -> Callable[..., CliResult]:
    def run(argv: Any, timeout: float, *, env: Optional[Mapping[str, str]] = None) -> CliResult:
        return CliResult(tuple(argv), source(list(argv)[1:], timeout), "", 0, 0.0)
    return run


class AmdSmiCliCollector(CliCollector):
    name = "amd_smi"
    vendor = VENDOR
    tool = TOOL
    summary_args = METRIC_ARGS

    def __init__(self, exe: Union[str, Source] = TOOL, **kwargs: Any):
        if callable(exe):  # outputs from a function: tests
            kwargs["runner"] = _source_runner(exe)
            exe = TOOL
        super().__init__(exe, **kwargs)
        self._static: dict[int, DeviceIdentity] = {}
        self._runtime = versions.rocm_version(self.host.root_dir)

    def probe(self) -> None:
        """Run ``amd-smi metric --json`` once; Unavailable when it fails or lists no GPU."""
        try:
            parsed = self.parse_summary(self.cli.call(self.summary_args, time.monotonic() + self.budget))
        except Exception as e:  # noqa: BLE001 - any failure means "cannot stand in"
            raise Unavailable(f"{TOOL} {' '.join(METRIC_ARGS)}: {type(e).__name__}: {e}") from None
        if not parsed.gpus:
            raise Unavailable(f"{TOOL} lists no GPU")

    def parse_summary(self, text: str) -> AmdOutput:
        return parse_output(text)

    def _identities(self, indices: list[int], deadline: float) -> None:
        """``static --json`` when a GPU index is new: its identity, kept for the run."""
        if all(i in self._static for i in indices):
            return
        try:
            static = parse_output(self.cli.call(STATIC_ARGS, deadline))
        except Exception as e:  # noqa: BLE001 - identity by index this cycle, retried next
            log.debug("amd-smi static failed: %s", e)
            return
        for i, g in static.gpus.items():
            ident = identity_of(i, g.tree, self._runtime)
            if ident.numa_node is None:
                ident = dataclasses.replace(ident, numa_node=self.numa(ident.pci_address))
            self._static[i] = ident

    def devices(self, parsed: AmdOutput, now: float, deadline: float) -> list[DeviceSample]:
        self._identities(list(parsed.gpus), deadline)
        out = []
        for i, g in parsed.gpus.items():
            ident = self._static.get(i) or identity_of(i, g.tree, self._runtime)
            r = readings_of(g.tree, f"{TOOL} metric")
            reasons = self.episodes.update(ident.uuid, conditions(r), now)
            out.append(DeviceSample(identity=ident, timestamp=now, readings=r,
                                    health=health_of(reasons),
                                    faults=self.episodes.faults(ident.uuid)))
        return out


def _install_fake(scenario: Any, clock: Any, workdir: Optional[str]) -> Any:
    from . import fake  # simulation only
    return fake.install(scenario, clock, workdir)


# amd-smi ships in ROCm's amd-smi-lib package: /opt/rocm/bin/amd-smi (a link to
# libexec/amdsmi_cli/amdsmi_cli.py), with /usr/bin/amd-smi from the distribution packages
# (ROCm docs, "AMD SMI CLI tool" install page).
_DIRS = os.pathsep.join(("/opt/rocm/bin", "/usr/bin", "/usr/local/bin"))
_WHY = "AMD SMI CLI not installed (ROCm amd-smi-lib)"


def create(options: CollectorOptions) -> AmdSmiCliCollector:
    """The amd-smi collector over the real tool (``settings.path``, else amd-smi on PATH or in
    /opt/rocm/bin) or, when simulating, over the fake amd-smi."""
    return build(options, AmdSmiCliCollector, _install_fake, TOOL, _DIRS, _WHY, vendor=VENDOR)
