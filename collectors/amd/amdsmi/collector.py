"""AMD Instinct and Radeon GPUs through the ``amdsmi`` Python package (libamd_smi.so).

Thin I/O over the binding: each amdsmi call is converted to base units and tagged with the
quality declared once in ``QUALITY`` (units as amdsmi reports them: activity in percent,
VRAM in bytes, temperatures in degrees C, socket power in W, power cap in uW, energy as an
accumulator times ``counter_resolution`` uJ, clocks in MHz, PCIe speed in MT/s and bandwidth
in Mb/s, xGMI traffic in KB). Error mapping:

- AMDSMI_STATUS_NOT_SUPPORTED / NOT_YET_IMPLEMENTED, or an ``"N/A"`` value -> the field is
  absent with status ``unsupported`` (the call is not repeated for that GPU);
- any other amdsmi error on one call -> the fields of that call are absent, status ``error``;
- ``import amdsmi`` failing (it raises KeyError('libamd_smi.so') when the library is missing),
  ``amdsmi_init`` or handle enumeration failing -> ``Unavailable``: the AMD collector is off,
  the agent goes on.

Partitions: with a compute partition other than SPX, amdsmi lists one handle per partition
(functions .0-.7 of the GPU's PCI device). The physical GPU is reported once, with the
device-wide readings of partition 0 (temperatures, power, energy, ECC, PCIe, xGMI) and
utilization/memory derived from its partitions; each partition is a child device
(``identity.parent``) with its own activity, VRAM and processes.

Faults (codes in collectors/amd/faults.yaml): uncorrectable ECC per RAS block above the
``ecc_uncorrected_threshold`` setting (default 0) -> health ``failed``; deferred errors ->
``degraded``; CPER records (fatal -> ``failed``, for ``fault_hold_seconds``, default 600);
GPU reset events -> ``degraded`` for the hold time; PCIe replay increases are recorded.

Identity: the uuid is collectors/amd/identity.py's over ``asic_info.asic_serial`` (the ASIC
unique id rocm-smi prints as "Unique ID"), so both collectors name a GPU alike; identities are
pinned (sdk IdentityMemory): a GPU that amdsmi stops listing is reported ``failed`` (fault
``missing``) under its uuid. ``runtime_version``: the ROCm install's ``.info/version`` below the
``host_root`` setting (default /; collectors/amd/versions.py), None without one; never
``amdsmi_get_rocm_version()`` (the binding's own librocm-core, in the agent's image).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from hetero_exporter import validate as v
from hetero_exporter.model import fields as F
from hetero_exporter import profiles
from hetero_exporter.collectors.amd import versions
from hetero_exporter.collectors.amd.identity import device_uuid
from hetero_exporter.sdk import pciaddr, values
from hetero_exporter.sdk import versions as sdk_versions
from hetero_exporter.sdk.cli_collector import fall_back
from hetero_exporter.sdk.contract import CollectorOptions, HostPaths, Unavailable
from hetero_exporter.sdk.identity import IdentityMemory
from hetero_exporter.sdk.ledger import FaultLedger
from hetero_exporter.sdk.settings import BindingSettings, seconds, setting
from hetero_exporter.sdk import faults as fault_tables
from hetero_exporter.model import (DeviceIdentity, DeviceSample, Fault, Health, Link, ProcessSample,
                                   Quality, Reading)

log = logging.getLogger(__name__)

# Vendor-specific fields (carried in the JSON model and accelerator_field_status).
from hetero_exporter.collectors.amd.fields import (  # noqa: E402,F401 - part of this module's API
    ECC_DEFERRED, MEDIA_UTILIZATION, PARTITIONS_COMPUTE, PARTITIONS_MEMORY, PCIE_BANDWIDTH, PCIE_NAK_RECEIVED,
    PCIE_NAK_SENT, PCIE_RECOVERY, PCIE_REPLAY, PCIE_REPLAY_ROLLOVER, PCIE_SPEED, PCIE_WIDTH, PCIE_WIDTH_MAX, TEMP_EDGE,
    VIOLATIONS, XGMI_RX, XGMI_TX, partition_counts)

# Static quality of each field: the amdsmi call, method, window, resolution, error bound.
# AMD documents no accuracy figures for these sensors: error_bound stays None where unknown.
# SMU firmware activity averages: AMD does not document their window; 1 s nominal, the period
# of the SMU metrics table they are read from (as for the average socket power).
_SMU_AVERAGE_S = 1.0

QUALITY: dict[str, Quality] = {
    F.UTILIZATION: Quality("amdsmi_get_gpu_activity.gfx_activity", "sampled", _SMU_AVERAGE_S, 0.01),
    F.MEMORY_UTILIZATION: Quality("amdsmi_get_gpu_activity.umc_activity", "sampled", _SMU_AVERAGE_S, 0.01),
    MEDIA_UTILIZATION: Quality("amdsmi_get_gpu_activity.mm_activity", "sampled", _SMU_AVERAGE_S, 0.01),
    F.MEMORY_USED: Quality("amdsmi_get_gpu_memory_usage(VRAM)", "measured", None, 1.0),
    F.MEMORY_TOTAL: Quality("amdsmi_get_gpu_memory_total(VRAM)", "measured", None, 1.0),
    F.TEMP_CORE: Quality("amdsmi_get_temp_metric(HOTSPOT)", "measured", None, 1.0),
    TEMP_EDGE: Quality("amdsmi_get_temp_metric(EDGE)", "measured", None, 1.0),
    F.TEMP_MEMORY: Quality("amdsmi_get_temp_metric(VRAM)", "measured", None, 1.0),
    # MI300 and later: instantaneous socket power; MI200 and earlier: SMU average (~1 s)
    F.POWER: Quality("amdsmi_get_power_info.current_socket_power", "measured", None, 1.0),
    F.POWER_LIMIT: Quality("amdsmi_get_power_cap_info.power_cap", "measured", None, 1e-6),
    # the resolution is replaced by the device's counter_resolution (typically 15.3 uJ)
    F.ENERGY: Quality("amdsmi_get_energy_count.energy_accumulator", "measured", None, 15.259e-6),
    F.CLOCK_COMPUTE: Quality("amdsmi_get_clock_info(GFX).clk", "measured", None, 1e6),
    F.CLOCK_MEMORY: Quality("amdsmi_get_clock_info(MEM).clk", "measured", None, 1e6),
    F.ECC_CORRECTED: Quality("amdsmi_get_gpu_total_ecc_count.correctable_count", "measured", None, 1.0),
    F.ECC_UNCORRECTED: Quality("amdsmi_get_gpu_total_ecc_count.uncorrectable_count", "measured", None, 1.0),
    ECC_DEFERRED: Quality("amdsmi_get_gpu_total_ecc_count.deferred_count", "measured", None, 1.0),
    PCIE_WIDTH: Quality("amdsmi_get_pcie_info.pcie_metric.pcie_width", "measured", None, 1.0),
    PCIE_WIDTH_MAX: Quality("amdsmi_get_pcie_info.pcie_static.max_pcie_width", "measured", None, 1.0),
    PCIE_SPEED: Quality("amdsmi_get_pcie_info.pcie_metric.pcie_speed", "measured", None, 1e6),
    # amdsmi.h: "current instantaneous PCIe bandwidth in Mb/s" (1 Mb/s = 125000 B/s steps)
    PCIE_BANDWIDTH: Quality("amdsmi_get_pcie_info.pcie_metric.pcie_bandwidth", "measured", None, 125000.0),
    PCIE_REPLAY: Quality("amdsmi_get_pcie_info.pcie_metric.pcie_replay_count", "measured", None, 1.0),
    PCIE_REPLAY_ROLLOVER: Quality("amdsmi_get_pcie_info.pcie_metric.pcie_replay_roll_over_count", "measured", None, 1.0),
    PCIE_RECOVERY: Quality("amdsmi_get_pcie_info.pcie_metric.pcie_l0_to_recovery_count", "measured", None, 1.0),
    PCIE_NAK_SENT: Quality("amdsmi_get_pcie_info.pcie_metric.pcie_nak_sent_count", "measured", None, 1.0),
    PCIE_NAK_RECEIVED: Quality("amdsmi_get_pcie_info.pcie_metric.pcie_nak_received_count", "measured", None, 1.0),
    # amdsmi.h documents the xGMI read/write counters in "KB" without saying 1000 or 1024:
    # counted here as KiB, so the bound is that ambiguity (2.4 %), cited from amdsmi.h
    XGMI_RX: Quality("amdsmi_get_link_metrics.links[xgmi].read", "measured", None, 1024.0, 0.024),
    XGMI_TX: Quality("amdsmi_get_link_metrics.links[xgmi].write", "measured", None, 1024.0, 0.024),
    # the partition mode: the handles amdsmi lists for one GPU (one per compute partition), else the
    # count SPX/DPX/QPX names; NPS<n> of the memory partition
    PARTITIONS_COMPUTE: Quality("amdsmi_get_gpu_compute_partition, partition handles per GPU", "measured", None, 1.0),
    PARTITIONS_MEMORY: Quality("amdsmi_get_gpu_memory_partition (NPS<n>)", "measured", None, 1.0),
}
POWER_AVERAGE = Quality("amdsmi_get_power_info.average_socket_power", "sampled", 1.0, 1.0)
# A physical GPU's utilization and memory in partition mode come from its partitions.
DERIVED = {
    F.UTILIZATION: Quality("mean over partitions of amdsmi_get_gpu_activity.gfx_activity", "derived", None, 0.01),
    F.MEMORY_USED: Quality("sum over partitions of amdsmi_get_gpu_memory_usage(VRAM)", "derived", None, 1.0),
}
PROCESS_UTILIZATION_SOURCE = "amdsmi_get_gpu_process_list.engine_usage.gfx (ns, delta over the interval)"

_ECC_KINDS = (("correctable_count", "corrected"), ("uncorrectable_count", "uncorrected"),
              ("deferred_count", "deferred"))


_VIOLATION_QUALITY = {k: Quality(f"amdsmi_get_violation_status.{k}", "measured", None, 1.0) for _, k in VIOLATIONS}
QUALITY.update({f"clock_throttle_{reason}": _VIOLATION_QUALITY[k] for reason, k in VIOLATIONS})


def ecc_block_field(block: str, kind: str) -> str:
    """Per-RAS-block counter, e.g. ``ecc_umc_uncorrected_total``."""
    return f"ecc_{block.lower()}_{kind}_total"


def _ecc_block_quality(block: str, key: str) -> Quality:
    return Quality(f"amdsmi_get_gpu_ecc_count({block}).{key}", "measured", None, 1.0)


# Values amdsmi leaves as max-int sentinels where its Python layer does not map them to "N/A".
_SENTINELS = {0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF}


def _num(v: Any) -> Optional[float]:
    """A reported number, or None for "N/A", sentinels and anything not numeric."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        if v in _SENTINELS or v != v:  # NaN
            return None
        return float(v)
    if isinstance(v, str):
        try:
            return _num(float(v.strip()))
        except ValueError:
            return None
    return None


def normalize_bdf(bdf: Any) -> str:
    """amdsmi's '0000:05:00.0' (any case, any domain width) -> '0000:05:00.0' (the SDK's
    normalizer; text it cannot read is kept lower-cased, so a GPU keeps a key)."""
    return pciaddr.normalize(str(bdf)) or str(bdf).strip().lower()


def import_binding() -> Any:
    """``import amdsmi``; any failure (KeyError('libamd_smi.so') without the library) becomes
    Unavailable. The wrapper prints its own complaint on stdout: kept out of our output."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            import amdsmi  # noqa: PLC0415 - the binding is imported lazily, here only
    except Exception as e:  # noqa: BLE001 - KeyError, OSError, ImportError, AttributeError...
        said = [ln for ln in printed.getvalue().splitlines() if ln.strip()]
        detail = f"{type(e).__name__}: {e}" + (f"; {said[0]}" if said else "")
        raise Unavailable(
            f"amdsmi cannot be imported ({detail}); install amd-smi-lib (ROCm 6+) and "
            f"'hetero-exporter[amd]', or enable --collector.rocm_smi on CLI-only nodes") from None
    return amdsmi


@dataclasses.dataclass
class _Logical:
    """One amdsmi processor handle (a whole GPU in SPX mode, else one partition)."""

    index: int
    handle: Any
    bdf: str
    uuid: str
    partition_id: int
    compute_partition: Optional[str]
    memory_partition: Optional[str]
    ident: DeviceIdentity


@dataclass(frozen=True)
class _DeviceWide:
    """What a GPU's device-wide calls return for the fault checks: the ECC counts per RAS block
    and the xGMI bandwidth per peer."""

    ecc_blocks: dict[str, dict[str, int]]
    links: dict[str, float]


@dataclass(frozen=True)
class AmdSmiSettings(BindingSettings):
    """``collectors.amdsmi``: ``ecc_uncorrected_threshold`` uncorrectable ECC errors a GPU may
    have before it is failed, ``fault_hold_seconds`` how long a fault stays a health reason
    after its last sighting; the ToolSettings keys are amd-smi's when it stands in."""

    ecc_uncorrected_threshold: float = setting(0.0, lambda p, x: v.number(p, x, minimum=0))
    fault_hold_seconds: float = setting(600.0, seconds(86400.0))


SETTINGS = AmdSmiSettings


class AmdSmiCollector:
    name = "amdsmi"
    vendor = "amd"

    def __init__(self, amd: Any, clock: Callable[[], float],
                 settings: "AmdSmiSettings | Mapping[str, Any] | None" = None, host: HostPaths = HostPaths(), *,
                 identities: Optional[IdentityMemory] = None):
        self._amd = amd
        self._clock = clock
        own = AmdSmiSettings.of(settings)
        self._threshold = own.ecc_uncorrected_threshold
        self._hold = own.fault_hold_seconds
        self._sysfs = host.sysfs
        try:
            amd.amdsmi_init(amd.AmdSmiInitFlags.INIT_AMD_GPUS)
        except amd.AmdSmiException as e:
            raise Unavailable(f"amdsmi_init failed: {self._describe(e)}") from None
        codes = amd.amdsmi_wrapper
        self._not_supported = {getattr(codes, f"AMDSMI_STATUS_{n}") for n in ("NOT_SUPPORTED", "NOT_YET_IMPLEMENTED")
                               if hasattr(codes, f"AMDSMI_STATUS_{n}")}
        self._no_data = {getattr(codes, f"AMDSMI_STATUS_{n}") for n in ("NO_DATA", "NOT_FOUND")
                         if hasattr(codes, f"AMDSMI_STATUS_{n}")}
        self._host_root = host.root_dir
        self._runtime = self._rocm_version()
        # physical GPUs seen since start (or restored from the state dir), by uuid, index and bdf
        self._memory = identities if identities is not None else IdentityMemory()
        self._lost: set[str] = set()  # uuids reported missing in the previous cycle
        self._identities: dict[str, tuple] = {}  # bdf -> cached static identity parts
        self._bdf_by_index: dict[int, str] = {}
        self._handle_count: Optional[int] = None
        self._unsupported: dict[str, set[str]] = {}  # bdf -> calls the GPU does not support
        self._ledger = FaultLedger()
        self._ecc_seen: dict[tuple[str, str, str], int] = {}  # (uuid, block, kind) -> count
        self._replays_seen: dict[str, int] = {}
        self._cper_cursor: dict[str, int] = {}
        self._proc_prev: dict[tuple[str, int], tuple[float, float]] = {}  # (uuid, pid) -> (t, gfx ns)
        self._topology: Optional[dict[str, list[str]]] = None  # uuid -> xGMI peer uuids
        self._readers: list[Any] = []
        self._readers_tried = False

    # ------------------------------------------------------------------ plumbing
    def _describe(self, e: BaseException) -> str:
        info = getattr(e, "err_info", None)
        code = getattr(e, "err_code", None)
        if info:
            return f"{type(e).__name__}: {str(info).split(' - ')[0]} (code {code})"
        return f"{type(e).__name__}: {e}"

    def _fetch(self, key: str, call: str, *args: Any) -> tuple[Any, str]:
        """One amdsmi call by name -> (result, status ok|unsupported|error)."""
        cache = self._unsupported.setdefault(key, set())
        cache_key = f"{call}{args[1:]!r}"
        if cache_key in cache:
            return None, "unsupported"
        fn = getattr(self._amd, call, None)
        if fn is None:  # an older amdsmi without this call
            cache.add(cache_key)
            return None, "unsupported"
        try:
            return fn(*args), "ok"
        except self._amd.AmdSmiLibraryException as e:
            if getattr(e, "err_code", None) in self._not_supported:
                cache.add(cache_key)
                return None, "unsupported"
            log.debug("amdsmi %s failed on %s: %s", call, key, self._describe(e))
            return None, "error"
        except self._amd.AmdSmiException as e:
            log.debug("amdsmi %s failed on %s: %s", call, key, self._describe(e))
            return None, "error"

    @staticmethod
    def _put(readings: dict, field: str, raw: Any, status: str, scale: float = 1.0,
             quality: Optional[Quality] = None) -> None:
        q = quality or QUALITY[field]
        if status != "ok":
            readings[field] = Reading(None, q.with_status(status))
            return
        v = _num(raw)
        readings[field] = Reading(None, q.with_status("unsupported")) if v is None else Reading(v * scale, q)

    def close(self) -> None:
        for r in self._readers:
            try:
                r.stop()
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
        try:
            self._amd.amdsmi_shut_down()
        except Exception:  # noqa: BLE001
            pass

    # ------------------------------------------------------------------ identity
    def _logical(self, index: int, h: Any) -> _Logical:
        bdf_raw, st = self._fetch(f"#{index}", "amdsmi_get_gpu_device_bdf", h)
        if st == "ok" and values.present(bdf_raw):
            bdf = self._bdf_by_index[index] = normalize_bdf(bdf_raw)
        else:  # a GPU that stops answering keeps the identity it had
            bdf = self._bdf_by_index.get(index, f"index-{index}")
        cached = self._identities.get(bdf)
        if cached is None:
            asic, _ = self._fetch(bdf, "amdsmi_get_gpu_asic_info", h)
            board, _ = self._fetch(bdf, "amdsmi_get_gpu_board_info", h)
            driver, _ = self._fetch(bdf, "amdsmi_get_gpu_driver_info", h)
            vbios, _ = self._fetch(bdf, "amdsmi_get_gpu_vbios_info", h)
            numa_raw, st = self._fetch(bdf, "amdsmi_topo_get_numa_node_number", h)
            kfd, _ = self._fetch(bdf, "amdsmi_get_gpu_kfd_info", h)
            compute, _ = self._fetch(bdf, "amdsmi_get_gpu_compute_partition", h)
            memory, _ = self._fetch(bdf, "amdsmi_get_gpu_memory_partition", h)
            asic, board = asic or {}, board or {}
            market = values.present(asic.get("market_name")) or values.present(board.get("product_name")) or ""
            numa = _num(numa_raw) if st == "ok" else None
            numa = int(numa) if numa is not None and 0 <= numa < 1024 else self._sysfs_numa(bdf)
            known = self._memory.recall(index=index) if bdf.startswith("index-") else None
            uuid = known.uuid if known is not None else device_uuid(
                "amd", index, values.present(asic.get("asic_serial")), values.present(board.get("product_serial")),
                None if bdf.startswith("index-") else bdf)
            ident = DeviceIdentity(
                vendor="amd", kind="gpu", index=index, uuid=uuid,
                model=profiles.normalize_model("amd", market), pci_address=None if bdf.startswith("index-") else bdf,
                numa_node=numa, driver_version=values.present((driver or {}).get("driver_version")),
                runtime_version=self._runtime,
                firmware_version=values.present((vbios or {}).get("version")) or values.present((vbios or {}).get("part_number")),
                name=market or None,
                serial=values.present(board.get("product_serial")) or values.present(asic.get("asic_serial")))
            pid = _num((kfd or {}).get("current_partition_id"))
            cached = (uuid, int(pid) if pid is not None else 0, values.present(compute), values.present(memory), ident)
            self._identities[bdf] = cached
        uuid, pid, compute, memory, ident = cached
        return _Logical(index, h, bdf, uuid, pid, compute, memory, dataclasses.replace(ident, index=index))

    def _rocm_version(self) -> Optional[str]:
        """The host's ROCm release from its install's version file below the host root
        (collectors/amd/versions.py), or None. Not ``amdsmi_get_rocm_version()``: that reads the
        librocm-core beside the binding, i.e. the agent image's ROCm, not the host's runtime."""
        return versions.rocm_version(self._host_root)

    def _sysfs_numa(self, bdf: str) -> Optional[int]:
        try:
            with open(os.path.join(self._sysfs, "bus/pci/devices", bdf, "numa_node")) as f:
                v = int(f.read().strip())
            return v if v >= 0 else None
        except (OSError, ValueError):
            return None

    # ------------------------------------------------------------------ readings
    def _activity_memory(self, lg: _Logical, r: dict) -> None:
        """Per-logical-GPU readings: activity and VRAM (a partition's own in partition mode)."""
        amd, key, h = self._amd, lg.bdf, lg.handle
        act, st = self._fetch(key, "amdsmi_get_gpu_activity", h)
        act = act if isinstance(act, Mapping) else {}
        self._put(r, F.UTILIZATION, act.get("gfx_activity"), st, 0.01)
        self._put(r, F.MEMORY_UTILIZATION, act.get("umc_activity"), st, 0.01)
        self._put(r, MEDIA_UTILIZATION, act.get("mm_activity"), st, 0.01)
        vram = amd.AmdSmiMemoryType.VRAM
        total, st = self._fetch(key, "amdsmi_get_gpu_memory_total", h, vram)
        self._put(r, F.MEMORY_TOTAL, total, st)
        used, st = self._fetch(key, "amdsmi_get_gpu_memory_usage", h, vram)
        self._put(r, F.MEMORY_USED, used, st)

    def _device_wide(self, lg: _Logical, r: dict) -> _DeviceWide:
        """Readings of the whole GPU; returns the raw ECC/PCIe/link results for fault checks."""
        amd, key, h = self._amd, lg.bdf, lg.handle
        T = amd.AmdSmiTemperatureType
        current = amd.AmdSmiTemperatureMetric.CURRENT
        for field, sensor in ((F.TEMP_CORE, T.HOTSPOT), (TEMP_EDGE, T.EDGE), (F.TEMP_MEMORY, T.VRAM)):
            v, st = self._fetch(key, "amdsmi_get_temp_metric", h, sensor, current)
            self._put(r, field, v, st)
        power, st = self._fetch(key, "amdsmi_get_power_info", h)
        power = power if isinstance(power, Mapping) else {}
        if _num(power.get("current_socket_power")) is None and _num(power.get("average_socket_power")) is not None:
            self._put(r, F.POWER, power.get("average_socket_power"), st, quality=POWER_AVERAGE)
        else:
            self._put(r, F.POWER, power.get("current_socket_power"), st)
        cap, st = self._fetch(key, "amdsmi_get_power_cap_info", h)
        self._put(r, F.POWER_LIMIT, (cap or {}).get("power_cap") if isinstance(cap, Mapping) else None, st, 1e-6)
        energy, st = self._fetch(key, "amdsmi_get_energy_count", h)
        if st == "ok" and isinstance(energy, Mapping):
            res = _num(energy.get("counter_resolution"))
            acc = _num(energy.get("energy_accumulator"))
            if res is not None and acc is not None and res > 0:
                q = dataclasses.replace(QUALITY[F.ENERGY], resolution=res * 1e-6)
                r[F.ENERGY] = Reading(acc * res * 1e-6, q)
            else:
                r[F.ENERGY] = Reading(None, QUALITY[F.ENERGY].with_status("unsupported"))
        else:
            self._put(r, F.ENERGY, None, st if st != "ok" else "unsupported")
        for field, ctype in ((F.CLOCK_COMPUTE, amd.AmdSmiClkType.GFX), (F.CLOCK_MEMORY, amd.AmdSmiClkType.MEM)):
            clk, st = self._fetch(key, "amdsmi_get_clock_info", h, ctype)
            self._put(r, field, clk.get("clk") if isinstance(clk, Mapping) else None, st, 1e6)
        ecc_blocks = self._ecc(lg, r)
        pcie, st = self._fetch(key, "amdsmi_get_pcie_info", h)
        metric = pcie.get("pcie_metric", {}) if isinstance(pcie, Mapping) else {}
        for field, k, scale in ((PCIE_WIDTH, "pcie_width", 1.0), (PCIE_SPEED, "pcie_speed", 1e6),
                                (PCIE_BANDWIDTH, "pcie_bandwidth", 1e6 / 8), (PCIE_REPLAY, "pcie_replay_count", 1.0),
                                (PCIE_REPLAY_ROLLOVER, "pcie_replay_roll_over_count", 1.0),
                                (PCIE_RECOVERY, "pcie_l0_to_recovery_count", 1.0),
                                (PCIE_NAK_SENT, "pcie_nak_sent_count", 1.0),
                                (PCIE_NAK_RECEIVED, "pcie_nak_received_count", 1.0)):
            self._put(r, field, metric.get(k), st, scale)
        self._violations(key, h, r)
        static = pcie.get("pcie_static", {}) if isinstance(pcie, Mapping) else {}
        # the link's width against the widest the device and its slot support (a downgraded link)
        self._put(r, PCIE_WIDTH_MAX, static.get("max_pcie_width"), st)
        links, st = self._fetch(key, "amdsmi_get_link_metrics", h)
        return _DeviceWide(ecc_blocks, self._xgmi_counters(links if st == "ok" else None, st, r))

    def _violations(self, key: str, h: Any, r: dict) -> None:
        """Clock throttle reasons from amdsmi_get_violation_status (bools; "N/A" unsupported)."""
        got, st = self._fetch(key, "amdsmi_get_violation_status", h)
        for reason, k in VIOLATIONS:
            v = got.get(k) if isinstance(got, Mapping) else None
            self._put(r, f"clock_throttle_{reason}", float(v) if isinstance(v, bool) else None, st,
                      quality=_VIOLATION_QUALITY[k])

    def _ecc(self, lg: _Logical, r: dict) -> dict[str, dict[str, int]]:
        """Totals plus per-block counters of the ECC-enabled RAS blocks; returns block counts."""
        amd, key, h = self._amd, lg.bdf, lg.handle
        total, st = self._fetch(key, "amdsmi_get_gpu_total_ecc_count", h)
        total = total if isinstance(total, Mapping) else {}
        self._put(r, F.ECC_CORRECTED, total.get("correctable_count"), st)
        self._put(r, F.ECC_UNCORRECTED, total.get("uncorrectable_count"), st)
        self._put(r, ECC_DEFERRED, total.get("deferred_count"), st)
        mask, st = self._fetch(key, "amdsmi_get_gpu_ecc_enabled", h)
        blocks: dict[str, dict[str, int]] = {}
        if st != "ok" or _num(mask) is None:
            return blocks
        seen: set[int] = set()
        for block in amd.AmdSmiGpuBlock:
            value = int(block)
            if value in seen or value <= 0 or value >= 1 << 62 or not int(mask) & value:
                continue  # aliases (FIRST/LAST), INVALID, RESERVED, blocks without ECC
            seen.add(value)
            counts, st = self._fetch(key, "amdsmi_get_gpu_ecc_count", h, block)
            counts = counts if isinstance(counts, Mapping) else {}
            got = {}
            for k, kind in _ECC_KINDS:
                self._put(r, ecc_block_field(block.name, kind), counts.get(k), st,
                          quality=_ecc_block_quality(block.name, k))
                v = _num(counts.get(k)) if st == "ok" else None
                if v is not None:
                    got[kind] = int(v)
            if got:
                blocks[block.name] = got
        return blocks

    def _xgmi_counters(self, metrics: Any, status: str, r: dict) -> dict[str, float]:
        """xGMI traffic summed over links (KB -> bytes); returns max bandwidth (B/s) by peer BDF."""
        bandwidth: dict[str, float] = {}
        if not isinstance(metrics, Mapping):
            self._put(r, XGMI_RX, None, status if status != "ok" else "unsupported")
            self._put(r, XGMI_TX, None, status if status != "ok" else "unsupported")
            return bandwidth
        xgmi = int(getattr(self._amd.AmdSmiLinkType, "AMDSMI_LINK_TYPE_XGMI", 2)) if hasattr(
            self._amd, "AmdSmiLinkType") else 2
        rx = tx = 0.0
        n = 0
        links = list(metrics.get("links") or [])[: int(_num(metrics.get("num_links")) or 0)]
        for link in links:
            if not isinstance(link, Mapping) or _num(link.get("link_type")) != xgmi:
                continue
            n += 1
            rx += _num(link.get("read")) or 0.0
            tx += _num(link.get("write")) or 0.0
            bw = _num(link.get("max_bandwidth"))
            if bw:
                bandwidth[normalize_bdf(link.get("bdf"))] = bw * 1e9 / 8  # Gb/s -> B/s
        if n:
            r[XGMI_RX] = Reading(rx * 1024.0, QUALITY[XGMI_RX])
            r[XGMI_TX] = Reading(tx * 1024.0, QUALITY[XGMI_TX])
        else:
            self._put(r, XGMI_RX, None, "unsupported")
            self._put(r, XGMI_TX, None, "unsupported")
        return bandwidth

    def _processes(self, lg: _Logical, uuid: str, now: float) -> tuple[ProcessSample, ...]:
        procs, st = self._fetch(lg.bdf, "amdsmi_get_gpu_process_list", lg.handle)
        if st != "ok" or not isinstance(procs, list):
            return ()
        out = []
        for p in procs:
            if not isinstance(p, Mapping):
                continue  # amdsmi < 6.1 returned opaque handles: not supported here
            pid = _num(p.get("pid"))
            if pid is None:
                continue
            usage, engine = p.get("memory_usage"), p.get("engine_usage")
            vram = _num(usage.get("vram_mem")) if isinstance(usage, Mapping) else None
            if vram is None:
                vram = _num(p.get("mem"))
            gfx = _num(engine.get("gfx")) if isinstance(engine, Mapping) else None
            out.append(ProcessSample(pid=int(pid), device_uuid=uuid,
                                     memory_bytes=None if vram is None else int(vram),
                                     utilization_ratio=self._process_util(uuid, int(pid), gfx, now),
                                     name=values.present(p.get("name"))))
        return tuple(out)

    def _process_util(self, uuid: str, pid: int, gfx_ns: Optional[float], now: float) -> Optional[float]:
        """Busy ratio from the growth of the process's cumulative GFX engine time."""
        if gfx_ns is None:
            return None
        prev = self._proc_prev.get((uuid, pid))
        self._proc_prev[(uuid, pid)] = (now, gfx_ns)
        if prev is None or now <= prev[0] or gfx_ns < prev[1]:
            return None
        return max(0.0, min(1.0, (gfx_ns - prev[1]) / ((now - prev[0]) * 1e9)))

    # ------------------------------------------------------------------ topology
    def _links(self, physical: list[_Logical], bandwidth: dict[str, dict[str, float]]) -> dict[str, tuple[Link, ...]]:
        """xGMI peers between physical GPUs (cached once read), with link bandwidth per cycle."""
        if self._topology is None:
            topo: dict[str, list[str]] = {lg.uuid: [] for lg in physical}
            xgmi = int(self._amd.AmdSmiLinkType.AMDSMI_LINK_TYPE_XGMI) if hasattr(self._amd, "AmdSmiLinkType") else 2
            answered = False
            for a in physical:
                for b in physical:
                    if a is b:
                        continue
                    res, st = self._fetch(a.bdf, "amdsmi_topo_get_link_type", a.handle, b.handle)
                    if st != "ok" or not isinstance(res, Mapping):
                        continue
                    answered = True
                    if _num(res.get("type")) == xgmi and (_num(res.get("hops")) or 0) <= 1:
                        topo[a.uuid].append(b.uuid)
            if answered or len(physical) < 2:
                self._topology = topo
            else:
                return {}
        by_bdf = {lg.bdf: lg.uuid for lg in physical}
        out = {}
        for a in physical:
            bw_by_uuid = {by_bdf[b]: bw for b, bw in bandwidth.get(a.uuid, {}).items() if b in by_bdf}
            out[a.uuid] = tuple(Link(peer=p, type="xgmi", bandwidth_bytes_per_second=bw_by_uuid.get(p), state="up")
                                for p in (self._topology or {}).get(a.uuid, []))
        return out

    # ------------------------------------------------------------------ faults
    def _fault(self, code: str, message: str) -> Fault:
        info = fault_tables.lookup("amd", code)
        return Fault(code=code, fault_class=info.fault_class, action=info.action, severity=info.severity,
                     message=message, source="amdsmi")

    def _ecc_faults(self, lg: _Logical, uuid: str, blocks: dict[str, dict[str, int]], r: dict, now: float) -> None:
        for block, counts in blocks.items():
            for kind in ("uncorrected", "deferred"):
                n = counts.get(kind, 0)
                prev = self._ecc_seen.get((uuid, block, kind), 0)
                self._ecc_seen[(uuid, block, kind)] = n
                if n > prev:
                    code = f"ecc-{'uncorrectable' if kind == 'uncorrected' else 'deferred'}-{block.lower()}"
                    msg = f"GPU {lg.ident.index} ({uuid}) {block}: {n} {kind} ECC error(s)"
                    self._ledger.record(uuid, self._fault(code, msg), now, occurrences=n - prev)
        # a total without per-block detail (blocks not reported by this GPU or library)
        total = r.get(F.ECC_UNCORRECTED)
        n = int(total.value) if total is not None and total.value is not None else 0
        if n and not any(c.get("uncorrected") for c in blocks.values()):
            prev = self._ecc_seen.get((uuid, "*", "uncorrected"), 0)
            self._ecc_seen[(uuid, "*", "uncorrected")] = n
            if n > prev:
                self._ledger.record(uuid, self._fault("ecc-uncorrectable", f"GPU {lg.ident.index} ({uuid}): "
                                                      f"{n} uncorrectable ECC error(s)"), now, occurrences=n - prev)

    def _cper(self, lg: _Logical, uuid: str, now: float) -> None:
        cursor = self._cper_cursor.get(uuid, 0)
        res, st = self._fetch(lg.bdf, "amdsmi_get_gpu_cper_entries", lg.handle, 0b111, 1 << 20, cursor)
        if st != "ok" or not isinstance(res, tuple) or len(res) < 2:
            return
        entries, new_cursor = res[0], res[1]
        if isinstance(new_cursor, int) and new_cursor >= cursor:
            self._cper_cursor[uuid] = new_cursor
        for entry in (entries.values() if isinstance(entries, Mapping) else entries or ()):
            if not isinstance(entry, Mapping):
                continue
            sev = str(entry.get("error_severity", "unused")).strip().lower().replace("_", "-")
            code = f"cper-{sev}"
            msg = (f"GPU {lg.ident.index} ({uuid}): CPER {sev} record {entry.get('record_id', '?')} "
                   f"at {entry.get('timestamp', '?')} ({entry.get('notify_type', '?')})")
            self._ledger.record(uuid, self._fault(code, msg), now)

    def _reset_events(self, handles: list[_Logical], physical_uuid: Mapping[Optional[int], str], now: float) -> None:
        amd = self._amd
        if not self._readers_tried:
            self._readers_tried = True
            ev = getattr(amd, "AmdSmiEvtNotificationType", None)
            if ev is not None and hasattr(amd, "AmdSmiEventReader"):
                for lg in handles:
                    try:
                        self._readers.append(amd.AmdSmiEventReader(lg.handle, [ev.GPU_PRE_RESET, ev.GPU_POST_RESET]))
                    except Exception as e:  # noqa: BLE001 - events need privileges; readings go on
                        log.debug("amdsmi event notification unavailable on %s: %s", lg.bdf, e)
        if not self._readers:
            return
        try:
            events = self._readers[0].read(0, 32)  # every GPU's events, without waiting
        except amd.AmdSmiLibraryException as e:
            if getattr(e, "err_code", None) not in self._no_data:
                log.debug("amdsmi event read failed: %s", self._describe(e))
            return
        except amd.AmdSmiException:
            return
        for event in events or ():
            if not isinstance(event, Mapping) or event.get("event") != "GPU_PRE_RESET":
                continue
            h = event.get("processor_handle")
            uuid = physical_uuid.get(getattr(h, "value", None) if h is not None else None)
            if uuid is None:
                continue
            msg = f"{uuid}: GPU reset by the driver ({values.present(event.get('message')) or 'no message'})"
            self._ledger.record(uuid, self._fault("gpu-reset", msg), now)

    def _pcie_faults(self, uuid: str, r: dict, now: float) -> None:
        reading = r.get(PCIE_REPLAY)
        if reading is None or reading.value is None:
            return
        n = int(reading.value)
        prev = self._replays_seen.get(uuid)
        self._replays_seen[uuid] = n
        if prev is not None and n > prev:  # since-boot replays at start are a baseline, not an event
            self._ledger.record(uuid, self._fault("pcie-replay", f"{uuid}: PCIe replays {prev} -> {n}"),
                                now, occurrences=n - prev)

    def _health(self, uuid: str, r: Mapping[str, Reading], now: float) -> Health:
        failed, degraded = [], []
        unc = r.get(F.ECC_UNCORRECTED)
        count = None if unc is None else unc.value
        over = count is not None and count > self._threshold
        for f in self._ledger.faults(uuid):
            recent = f.last_seen is not None and now - f.last_seen < self._hold
            if f.code.startswith("ecc-uncorrectable") and over:
                failed.append(f)
            elif f.code == "cper-fatal" and recent:
                failed.append(f)
            elif f.code.startswith("ecc-deferred") or (recent and f.code in ("gpu-reset", "cper-non-fatal-uncorrected")):
                degraded.append(f)
        if over and not any(f.code.startswith("ecc-uncorrectable") for f in failed):
            failed.append(self._fault("ecc-uncorrectable", f"{uuid}: {int(count or 0)} uncorrectable ECC errors"))
        if failed:
            return Health("failed", tuple(failed + degraded))
        if degraded:
            return Health("degraded", tuple(degraded))
        return Health("ok")

    # ------------------------------------------------------------------ collect
    def collect(self) -> list[DeviceSample]:
        amd = self._amd
        now = self._clock()
        try:
            handles = list(amd.amdsmi_get_processor_handles())
        except amd.AmdSmiException as e:
            raise Unavailable(f"amdsmi_get_processor_handles failed: {self._describe(e)}") from None
        if self._handle_count is not None and len(handles) != self._handle_count:
            self._identities.clear()  # re-enumerated (partition change, GPU lost): identities moved
            self._bdf_by_index.clear()
            self._topology = None
        self._handle_count = len(handles)
        logical = [self._logical(i, h) for i, h in enumerate(handles)]
        groups: dict[str, list[_Logical]] = {}
        for lg in logical:
            groups.setdefault(lg.bdf.rsplit(".", 1)[0], []).append(lg)
        physical = [sorted(g, key=lambda x: x.partition_id)[0] for g in groups.values()]
        phys_uuid: dict[Optional[int], str] = {getattr(lg.handle, "value", None): lg.uuid for lg in physical}
        for g in groups.values():  # every partition's handle maps to its physical GPU
            for lg in g:
                phys_uuid[getattr(lg.handle, "value", None)] = sorted(g, key=lambda x: x.partition_id)[0].uuid
        self._reset_events(physical, phys_uuid, now)
        raw_by_uuid: dict[str, _DeviceWide] = {}
        readings_by_uuid: dict[str, dict] = {}
        for lg in physical:
            r: dict = {}
            raw_by_uuid[lg.uuid] = self._device_wide(lg, r)
            readings_by_uuid[lg.uuid] = r
        links = self._links(physical, {u: raw.links for u, raw in raw_by_uuid.items()})
        out: list[DeviceSample] = []
        for pos, (lead, group) in enumerate(zip(physical, groups.values())):
            uuid = lead.uuid
            r = readings_by_uuid[uuid]
            partitioned = len(group) > 1 or (lead.compute_partition or "SPX").upper() != "SPX"
            children = []
            if not partitioned:
                self._activity_memory(lead, r)
                procs = self._processes(lead, uuid, now)
            else:
                procs = ()
                for lg in sorted(group, key=lambda x: x.partition_id):
                    cr: dict = {}
                    self._activity_memory(lg, cr)
                    cuuid = f"{uuid}-p{lg.partition_id}"
                    ident = dataclasses.replace(lg.ident, uuid=cuuid, parent=uuid,
                                                name=f"{lg.ident.name or lg.ident.model} partition {lg.partition_id} "
                                                     f"({lg.compute_partition or '?'}/{lg.memory_partition or '?'})")
                    children.append(DeviceSample(identity=ident, timestamp=now, readings=cr,
                                                 processes=self._processes(lg, cuuid, now)))
                self._derive_from_partitions(r, [c.readings for c in children], lead.memory_partition)
            blocks = raw_by_uuid[uuid].ecc_blocks
            self._ecc_faults(lead, uuid, blocks, r, now)
            self._cper(lead, uuid, now)
            self._pcie_faults(uuid, r, now)
            ident = dataclasses.replace(lead.ident, index=pos, uuid=uuid)
            health = self._health(uuid, r, now)
            if health.state == "ok" and r and not any(x.quality.status == "ok" for x in r.values()) and any(
                    x.quality.status == "error" for x in r.values()):
                # every call failed: cannot read is "unknown", never "failed"
                health = Health("unknown", (Fault(
                    code="unreadable", fault_class="unreadable", action="none", severity="info",
                    message=f"GPU {pos} ({uuid}): every amdsmi call failed", first_seen=now, last_seen=now,
                    source="amdsmi"),))
            if any(x.quality.status == "ok" for x in r.values()):  # the mode of a GPU that answers
                self._partition_mode(lead, len(group), r)
            out.append(DeviceSample(identity=ident, timestamp=now, readings=r, health=health,
                                    faults=self._ledger.faults(uuid), processes=procs,
                                    links=links.get(uuid, ())))
            out.extend(children)
        return out + self._missing(out, now)

    def _missing(self, listed: list[DeviceSample], now: float) -> list[DeviceSample]:
        """The GPUs pinned before that amdsmi no longer lists: failed under their uuid (one
        ``missing`` episode while they stay away)."""
        present = []
        for d in listed:
            if d.identity.parent is None:
                self._memory.remember(d.identity)
                present.append(d.identity.uuid)
        out, lost = [], set()
        for ident in self._memory.missing(present):
            lost.add(ident.uuid)
            fault = self._ledger.get(ident.uuid, "missing") if ident.uuid in self._lost else None
            if fault is None:  # a new episode
                fault = self._ledger.record(ident.uuid, self._fault(
                    "missing", f"GPU {ident.index} ({ident.uuid}) at {ident.pci_address or '?'} is no longer "
                               "listed by amdsmi"), now)
            out.append(DeviceSample(identity=ident, timestamp=now, health=Health("failed", (fault,)),
                                    faults=self._ledger.faults(ident.uuid)))
        self._lost = lost
        return out

    @staticmethod
    def _partition_mode(lead: "_Logical", handles: int, r: dict) -> None:
        """partitions_compute / partitions_memory of a physical GPU (absent where amdsmi does not say)."""
        compute, memory = partition_counts(lead.compute_partition, lead.memory_partition, handles if handles > 1 else None)
        for field, count in ((PARTITIONS_COMPUTE, compute), (PARTITIONS_MEMORY, memory)):
            if count is not None:
                r[field] = Reading(float(count), QUALITY[field])

    @staticmethod
    def _derive_from_partitions(r: dict, parts: list[Mapping[str, Reading]], memory_partition: Optional[str]) -> None:
        def known(field: str) -> list[float]:
            return [v for v in (p[field].value for p in parts if field in p) if v is not None]

        utils = known(F.UTILIZATION)
        r[F.UTILIZATION] = (Reading(sum(utils) / len(utils), DERIVED[F.UTILIZATION]) if utils
                            else Reading(None, DERIVED[F.UTILIZATION].with_status("unsupported")))
        used = known(F.MEMORY_USED)
        r[F.MEMORY_USED] = (Reading(float(sum(used)), DERIVED[F.MEMORY_USED]) if len(used) == len(parts)
                            else Reading(None, DERIVED[F.MEMORY_USED].with_status("error")))
        totals = known(F.MEMORY_TOTAL)
        if totals:
            # NPS1: each partition sees the whole HBM; NPSn: each sees its own share
            nps1 = (memory_partition or "NPS1").upper() == "NPS1"
            q = dataclasses.replace(QUALITY[F.MEMORY_TOTAL], method="derived",
                                    source="amdsmi_get_gpu_memory_total(VRAM) of partition 0" if nps1
                                    else "sum over partitions of amdsmi_get_gpu_memory_total(VRAM)")
            r[F.MEMORY_TOTAL] = Reading(float(totals[0] if nps1 else sum(totals)), q)


def create(options: CollectorOptions) -> Any:
    """The amdsmi collector over the real binding, or over the fake when simulating. When the
    binding cannot be imported or initialised (libamd_smi.so missing, or a build that does not
    match the host's ROCm: amdsmi_init fails) but ``amd-smi`` works, the ``amd-smi metric
    --json`` collector stands in (its readings say so in their quality source), as nvml falls
    back to nvidia-smi; ``fallback: false`` in the collector's settings turns that off."""
    kept = options.identity_memory(AmdSmiCollector.name)
    if options.scenario is not None:
        from hetero_exporter.collectors.amd.amdsmi.fake import FakeAmdSmi, install_root
        host = options.host
        if host.root is None:  # the simulated host's ROCm install (the fake writes it)
            host = host.or_root(install_root(options.scenario, options.workdir))
        return AmdSmiCollector(FakeAmdSmi(options.scenario, options.clock), options.clock, options.settings, host,
                               identities=kept)
    try:
        binding = import_binding()
    except Unavailable as e:
        return _fallback(options, Unavailable(f"{e}{host_library_hint(options.host)}"))
    try:
        return AmdSmiCollector(binding, options.clock, options.settings, options.host, identities=kept)
    except Unavailable as e:
        return _fallback(options, e)


def host_library_hint(host: HostPaths) -> str:
    """How to point amdsmi at the host root's libamd_smi.so when it has one ("" otherwise).
    amdsmi loads ``$ROCM_PATH/lib/libamd_smi.so`` (/opt/rocm without ROCM_PATH, amdsmi >= 6.2.3:
    ml-energy/amdsmi README, "search order"); its dependencies come through LD_LIBRARY_PATH,
    which the loader reads at process start, so the agent must be started with both."""
    root = host.root
    if not root:
        return ""
    lib = sdk_versions.below(root, "/opt/rocm/lib/libamd_smi.so")  # /opt/rocm is a link to /opt/rocm-<v>
    if not os.path.isfile(lib):
        return ""
    folder = os.path.dirname(lib)
    return (f"; the host root has {lib}: mount the host's /opt/rocm at /opt/rocm (hostPath), or start the "
            f"agent with ROCM_PATH={os.path.dirname(folder)} and LD_LIBRARY_PATH={folder}")


def _fallback(options: CollectorOptions, why: Unavailable) -> Any:
    return fall_back(options, why, "hetero_exporter.collectors.amd.amd_smi.collector", "amd-smi")
