"""NVIDIA profiling counters through NVML GPM (GPU Performance Monitoring), without DCGM.

GPM (Hopper and later; ``nvmlGpmQueryDeviceSupport``) turns two samples of a GPU's
performance counters into metrics over the time between them (``nvmlGpmMetricsGet``). Per GPU
(``nvmlGpmSampleGet``) and per MIG instance (``nvmlGpmMigSampleGet`` on the parent's handle with
the GPU instance id) one sample is taken each cycle and paired with the previous cycle's, so a
value is the average over the real time between the two (``method: sampled``, the window the collection
interval while it spans about one, so the quality series do not churn). A key seen for the first time gets
two samples ``MIN_WINDOW`` apart, all keys of the cycle sharing one wait, so the first snapshot
(and ``inspect``) has values too. At most 10 Hz: a sample younger than ``MIN_WINDOW`` is not
replaced, the previous values are repeated.

Outcomes, per GPU (its MIG instances follow it):
- GPM unsupported (pre-Hopper, or a binding without the calls): every GPM field ``unsupported``;
- a GPM call failing (another profiler holds the counters: NVML_ERROR_IN_USE; a lost GPU; a
  driver error): every GPM field ``error``, the reason logged once until GPM answers again, the
  calls tried again next cycle; never an exception out of ``read``;
- samples are always freed: the previous one once paired, both on an error, every one held at
  ``close()`` and for a key that stopped being read.

Percentages become ratios (x 0.01), MiB/s bytes per second (x 1048576). Several decoder or
JPEG engines are one ``decoder`` / ``jpeg`` value: the mean over the engines that answered.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

from hetero_exporter.collectors.nvidia.nvml.funnel import UNSUPPORTED, Funnel
from hetero_exporter.model import Quality, Reading

log = logging.getLogger(__name__)

MIN_WINDOW = 0.1  # seconds: GPM at most 10 Hz, and the first cycle's pair this far apart
PERCENT, MIB = 0.01, float(1 << 20)


@dataclass(frozen=True)
class GpmField:
    field: str  # catalogue name (model/fields.py)
    metrics: tuple[str, ...]  # pynvml NVML_GPM_METRIC_* names; several: the mean
    scale: float


def _engines(prefix: str, n: int) -> tuple[str, ...]:
    return tuple(f"NVML_GPM_METRIC_{prefix}_{i}_UTIL" for i in range(n))


FIELDS: tuple[GpmField, ...] = (
    GpmField("graphics_active_ratio", ("NVML_GPM_METRIC_GRAPHICS_UTIL",), PERCENT),
    GpmField("engine_compute_utilization_ratio", ("NVML_GPM_METRIC_SM_UTIL",), PERCENT),
    GpmField("sm_occupancy_ratio", ("NVML_GPM_METRIC_SM_OCCUPANCY",), PERCENT),
    GpmField("engine_integer_utilization_ratio", ("NVML_GPM_METRIC_INTEGER_UTIL",), PERCENT),
    GpmField("engine_tensor_utilization_ratio", ("NVML_GPM_METRIC_ANY_TENSOR_UTIL",), PERCENT),
    GpmField("tensor_dfma_utilization_ratio", ("NVML_GPM_METRIC_DFMA_TENSOR_UTIL",), PERCENT),
    GpmField("tensor_hmma_utilization_ratio", ("NVML_GPM_METRIC_HMMA_TENSOR_UTIL",), PERCENT),
    GpmField("tensor_imma_utilization_ratio", ("NVML_GPM_METRIC_IMMA_TENSOR_UTIL",), PERCENT),
    GpmField("engine_memory_utilization_ratio", ("NVML_GPM_METRIC_DRAM_BW_UTIL",), PERCENT),
    GpmField("engine_fp64_utilization_ratio", ("NVML_GPM_METRIC_FP64_UTIL",), PERCENT),
    GpmField("engine_fp32_utilization_ratio", ("NVML_GPM_METRIC_FP32_UTIL",), PERCENT),
    GpmField("engine_fp16_utilization_ratio", ("NVML_GPM_METRIC_FP16_UTIL",), PERCENT),
    GpmField("pcie_tx_bytes_per_second", ("NVML_GPM_METRIC_PCIE_TX_PER_SEC",), MIB),
    GpmField("pcie_rx_bytes_per_second", ("NVML_GPM_METRIC_PCIE_RX_PER_SEC",), MIB),
    GpmField("interconnect_nvlink_rx_bytes_per_second", ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC",), MIB),
    GpmField("interconnect_nvlink_tx_bytes_per_second", ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC",), MIB),
    GpmField("engine_decoder_utilization_ratio", _engines("NVDEC", 8), PERCENT),
    GpmField("engine_jpeg_utilization_ratio", _engines("NVJPG", 8), PERCENT),
    GpmField("engine_ofa_utilization_ratio", ("NVML_GPM_METRIC_NVOFA_0_UTIL",), PERCENT),
)
# MIG instances: the per-instance metrics (PCIe and NVLink belong to the whole GPU)
MIG_FIELDS = tuple(f for f in FIELDS if not f.field.startswith(("pcie_", "interconnect_")))


@functools.lru_cache(maxsize=512)  # per field and window: the same few objects every cycle
def _quality(f: GpmField, window: Optional[float]) -> Quality:
    # GPM reports doubles, not steps: the resolution stated is what a double percent or MiB/s
    # carries well past any use (1e-4 of a ratio, 1 byte per second)
    resolution = 1.0 if f.scale == MIB else 1e-4
    source = "nvmlGpmMetricsGet(" + (f.metrics[0] if len(f.metrics) == 1 else f.metrics[0].replace("_0_", "_0..7_")) + ")"
    return Quality(source, "sampled", window, resolution)


QUALITY: dict[str, Quality] = {f.field: _quality(f, None) for f in FIELDS}  # static part (docs/metrics.md)


@dataclass
class _Held:
    sample: Any
    at: float  # monotonic seconds
    values: dict[str, Reading]  # the last values computed for this key (repeated when too soon)


class GpmReader:
    """The GPM readings of GPUs and MIG instances, one pair of samples per cycle."""

    def __init__(self, nv: Any, funnel: Funnel, *, interval: float = 10.0,
                 monotonic: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self._nv, self._f = nv, funnel
        self._interval = interval
        self._monotonic, self._sleep = monotonic, sleep
        self._supported: dict[str, bool] = {}  # GPU uuid -> GPM supported
        self._held: dict[tuple, _Held] = {}  # (uuid, gpu instance or None) -> the previous sample
        self._said: dict[str, str] = {}  # GPU uuid -> the error already logged
        self._calls_present = all(hasattr(nv, n) for n in ("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc",
                                                              "nvmlGpmSampleGet", "nvmlGpmMetricsGet",
                                                              "nvmlGpmSampleFree"))

    # ------------------------------------------------------------------ support
    def supported(self, uuid: str, handle: Any) -> bool:
        if not self._calls_present:
            return False
        if uuid not in self._supported:
            got = self._f.call(self._nv.nvmlGpmQueryDeviceSupport, handle)
            if got.ok:
                self._supported[uuid] = bool(got.value.isSupportedDevice)
            elif got.status == UNSUPPORTED:
                self._supported[uuid] = False
            else:  # asking failed (an error, not an answer): ask again next cycle
                return False
        return self._supported[uuid]

    # ------------------------------------------------------------------ one cycle
    def read(self, targets: Sequence[tuple[str, Any, dict, Sequence[tuple[str, int, dict]]]]) -> None:
        """GPM readings into each target's readings dict: ``(gpu uuid, handle, readings, [(mig
        uuid, gpu instance id, mig readings)])``. Never raises."""
        live: list[tuple[tuple, Any, Optional[int], dict, tuple[GpmField, ...]]] = []
        for uuid, handle, readings, migs in targets:
            if not self.supported(uuid, handle):
                _mark(readings, FIELDS, "unsupported")
                for _, _, r in migs:
                    _mark(r, MIG_FIELDS, "unsupported")
                continue
            live.append(((uuid, None), handle, None, readings, FIELDS))
            live.extend(((mig, gi), handle, gi, r, MIG_FIELDS) for mig, gi, r in migs)
        try:
            self._cycle(live)
        except Exception:  # noqa: BLE001 - a GPM bug never costs the other readings
            log.exception("GPM read failed")
            for _, _, _, r, fields in live:
                _mark(r, fields, "error")
        self._forget(k for k, *_ in live)
        for *_, migs in targets:
            for _, _, r in migs:
                _mig_utilization(r)

    def _cycle(self, live: list) -> None:
        now = self._monotonic()
        fresh = [t for t in live if t[0] not in self._held]
        for key, handle, gi, _, _ in fresh:  # first sight: a first sample now, paired after one wait
            sample = self._take(key[0], handle, gi)
            if sample is not None:
                self._held[key] = _Held(sample, now, {})
        if any(t[0] in self._held for t in fresh):
            self._sleep(MIN_WINDOW)
        for key, handle, gi, readings, fields in live:
            held = self._held.get(key)
            if held is None:  # its first sample failed: said, marked
                _mark(readings, fields, "error")
                continue
            if self._monotonic() - held.at < MIN_WINDOW and held.values:
                _merge(readings, held.values)  # faster than 10 Hz: the last values again
                continue
            _merge(readings, self._pair(key, handle, gi, held, fields))

    def _pair(self, key: tuple, handle: Any, gi: Optional[int], held: _Held,
              fields: tuple[GpmField, ...]) -> dict[str, Reading]:
        """The metrics between the held sample and a new one; the held one is freed, the new one held."""
        uuid = key[0]
        sample = self._take(uuid, handle, gi)
        if sample is None:
            self._drop(key)  # start again from a fresh pair next cycle
            return _marked(fields, "error")
        at = self._monotonic()
        try:
            values = self._metrics(uuid, held.sample, sample, fields, self._window(at - held.at))
        except Exception:
            self._free(sample)
            self._drop(key)
            raise
        self._free(held.sample)
        self._held[key] = _Held(sample, at, values)
        return values

    def _window(self, elapsed: float) -> float:
        """The window a pair covers, as its quality says: the collection interval while the pair
        spans about one (the usual cycle: a stable label, no series churn from jitter), else the
        real time between the samples to 0.1 s (a late cycle, an early wake-up, the first pair)."""
        if abs(elapsed - self._interval) <= 0.25 * self._interval:
            return self._interval
        return round(max(MIN_WINDOW, elapsed), 1)

    def _metrics(self, uuid: str, s1: Any, s2: Any, fields: tuple[GpmField, ...], window: float) -> dict[str, Reading]:
        nv = self._nv
        ids = [(getattr(nv, name, None), f) for f in fields for name in f.metrics]
        wanted = [(mid, f) for mid, f in ids if mid is not None]
        req = nv.c_nvmlGpmMetricsGet_t()
        req.version = nv.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(wanted)
        req.sample1, req.sample2 = s1, s2
        for i, (mid, _) in enumerate(wanted):
            req.metrics[i].metricId = mid
        got = self._f.call(nv.nvmlGpmMetricsGet, req)
        if not got.ok:
            self._say(uuid, f"nvmlGpmMetricsGet: {type(got.error).__name__}")
            return _marked(fields, "error")
        sums: dict[str, list[float]] = {}
        for i, (_, f) in enumerate(wanted):
            m = req.metrics[i]
            if m.nvmlReturn == nv.NVML_SUCCESS:
                sums.setdefault(f.field, []).append(float(m.value))
        self._said.pop(uuid, None)
        out = {}
        for f in fields:
            got_values = sums.get(f.field)
            q = _quality(f, window)
            out[f.field] = Reading(sum(got_values) / len(got_values) * f.scale, q) if got_values else \
                Reading(None, q.with_status("unsupported"))
        return out

    # ------------------------------------------------------------------ samples
    def _take(self, uuid: str, handle: Any, gi: Optional[int]) -> Any:
        """A new sample of the GPU (``gi`` None) or of one of its MIG instances; None on an error (said once)."""
        nv = self._nv
        got = self._f.call(nv.nvmlGpmSampleAlloc)
        if not got.ok:
            self._say(uuid, f"nvmlGpmSampleAlloc: {type(got.error).__name__}")
            return None
        sample = got.value
        taken = self._f.call(nv.nvmlGpmSampleGet, handle, sample) if gi is None else \
            self._f.call(nv.nvmlGpmMigSampleGet, handle, gi, sample)
        if taken.ok:
            return sample
        self._free(sample)
        call = "nvmlGpmSampleGet" if gi is None else "nvmlGpmMigSampleGet"
        self._say(uuid, f"{call}: {type(taken.error).__name__}: {taken.error}")
        return None

    def _free(self, sample: Any) -> None:
        got = self._f.call(self._nv.nvmlGpmSampleFree, sample)
        if not got.ok:
            log.debug("nvmlGpmSampleFree failed: %s", got.error)

    def _drop(self, key: tuple) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            self._free(held.sample)

    def _forget(self, keys: Iterable[tuple]) -> None:
        """Free the samples of keys not read this cycle (a lost GPU, a MIG instance destroyed)."""
        current = set(keys)
        for key in [k for k in self._held if k not in current]:
            self._drop(key)

    def _say(self, uuid: str, why: str) -> None:
        if self._said.get(uuid) != why:
            self._said[uuid] = why
            log.warning("GPM profiling unavailable on %s: %s (fields marked error; retried each cycle)", uuid, why)

    def close(self) -> None:
        for key in list(self._held):
            self._drop(key)


def _marked(fields: Iterable[GpmField], status: str) -> dict[str, Reading]:
    return {f.field: Reading(None, QUALITY[f.field].with_status(status)) for f in fields}


def _merge(readings: dict, values: dict[str, Reading]) -> None:
    """GPM's values over what the collector read another way (NVML's decoder utilization, PCIe
    throughput), except that a GPM field without a value never hides a value read otherwise."""
    for field, reading in values.items():
        known = readings.get(field)
        if reading.quality.status == "ok" or known is None or known.quality.status != "ok":
            readings[field] = reading


def _mark(readings: dict, fields: Iterable[GpmField], status: str) -> None:
    _merge(readings, _marked(fields, status))


def _mig_utilization(r: dict) -> None:
    """A MIG instance's utilization: NVML has none for it (NotSupported on MIG handles); GPM's
    graphics activity of the instance is the same measure (the share of time a kernel ran)."""
    gr = r.get("graphics_active_ratio")
    util = r.get("utilization_ratio")
    if gr is None or gr.value is None or gr.quality.status != "ok" or (util is not None and util.quality.status == "ok"):
        return
    q = gr.quality
    r["utilization_ratio"] = Reading(gr.value, Quality("nvmlGpmMigSampleGet: GRAPHICS_UTIL (MIG instance)", q.method,
                                                       q.window_seconds, q.resolution))
