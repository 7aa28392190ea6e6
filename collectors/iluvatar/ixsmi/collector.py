"""Iluvatar CoreX GPUs through ``ixsmi``: the parsed outputs (parse.py) turned into the model,
``parse ixsmi FILE``, and a collector on the SDK's CliCollector.

Invocations:

- ``ixsmi`` (the default table), one call for all chips, every cycle. Chosen over the CSV
  query (``ixsmi --query-gpu=... --format=csv,nounits``) because the table carries everything
  the model takes from ixsmi in one call: memory, utilization, temperature, power and cap,
  clocks, perf state, bus ids, the IX-ML / driver / CUDA versions (title) and the processes
  (the CSV needs a second call, ``--query-compute-apps``, and prints no IX-ML version), and
  because it is read by its header labels, while one field name the installed ixsmi does not
  know fails the whole CSV query (CoreX 4.x renamed ``power.draw`` to ``gpu.power.draw``).
- ``ixsmi --query-gpu=index,uuid,pci.bus_id --format=csv,nounits``: the table prints no UUID,
  and the device plugin's id is the chip UUID; asked once when a chip first appears (an
  identity, pinned), never per cycle. Where it fails, the chip's id is its PCI address.

Runtime version: the IX-ML version of the title (the CoreX SDK release the management library
ships with, e.g. 4.1.0), else the CoreX install's version file (collectors/iluvatar/versions.py),
else None (never the driver version).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Optional

from hetero_exporter.model import fields as F
from hetero_exporter import profiles
from hetero_exporter.model import (DeviceIdentity, DeviceSample, Fault, NodeSnapshot, ProcessSample,
                                   Quality, Reading)
from hetero_exporter.sdk.cli_collector import process_samples, CliCollector, ParsedOutput, Readings, build, table_fault
from hetero_exporter.sdk.faults import health_of
from hetero_exporter.sdk.contract import CollectorOptions, ParseError

from .parse import (CSV_FIELDS, DEFAULT_FIELDS, MIB, TOOL, IxGpu, IxsmiOutput, detect,  # noqa: F401 - API
                    parse_csv, parse_table)
from . import parse as _parse
from hetero_exporter.collectors.iluvatar import versions

log = logging.getLogger(__name__)
VENDOR, KIND = "iluvatar", "gpu"

# ixsmi mirrors nvidia-smi: GPU-Util is the busy share of the driver's last sample period,
# which Iluvatar does not document; the 1 s window (nvidia-smi's documented 1/6 s..1 s range,
# upper end) is assumed, not documented.
UTIL_WINDOW = 1.0

QUALITY: dict[str, Quality] = {
    F.UTILIZATION: Quality("ixsmi: GPU-Util", "sampled", UTIL_WINDOW, 0.01),
    F.MEMORY_USED: Quality("ixsmi: Memory-Usage used (MiB)", "measured", None, MIB),
    F.MEMORY_TOTAL: Quality("ixsmi: Memory-Usage total (MiB)", "measured", None, MIB),
    F.TEMP_CORE: Quality("ixsmi: Temp (C)", "measured", None, 1.0),
    F.POWER: Quality("ixsmi: Pwr:Usage (W; the board's power, on one chip of a two-chip board)", "measured", None, 1.0),
    F.POWER_LIMIT: Quality("ixsmi: Pwr:Cap (W)", "measured", None, 1.0),
    F.CLOCK_COMPUTE: Quality("ixsmi: Clock-SM (MHz)", "measured", None, 1e6),
    F.CLOCK_MEMORY: Quality("ixsmi: Clock-Mem (MHz)", "measured", None, 1e6),
    "fan_speed_ratio": Quality("ixsmi: Fan (%)", "measured", None, 0.01),
    F.ECC_UNCORRECTED: Quality("ixsmi: Volatile Uncorr. ECC", "measured", None, 1.0),
    F.MEMORY_UTILIZATION: Quality("ixsmi --query-gpu: utilization.memory", "sampled", UTIL_WINDOW, 0.01),
}


def readings_of(g: IxGpu) -> dict[str, Reading]:
    """A chip's readings in base units; memory used above total -> used reading ``error``."""
    r = Readings(QUALITY)
    r.put(F.UTILIZATION, g.utilization_ratio)
    r.put(F.MEMORY_TOTAL, g.memory_total_bytes)
    if over_total(g):
        r[F.MEMORY_USED] = Reading(None, QUALITY[F.MEMORY_USED].with_status("error"))
    else:
        r.put(F.MEMORY_USED, g.memory_used_bytes)
    r.put(F.TEMP_CORE, g.temperature_celsius)
    r.put(F.POWER, g.power_watts)
    r.put(F.POWER_LIMIT, g.power_limit_watts)
    r.put(F.CLOCK_COMPUTE, g.clock_sm_hertz)
    r.put(F.CLOCK_MEMORY, g.clock_memory_hertz)
    r.put("fan_speed_ratio", g.fan_ratio)
    if g.ecc_uncorrected is not None:
        r.put(F.ECC_UNCORRECTED, g.ecc_uncorrected)
    if g.memory_utilization_ratio is not None:
        r.put(F.MEMORY_UTILIZATION, g.memory_utilization_ratio)
    return r


def over_total(g: IxGpu) -> bool:
    return (g.memory_used_bytes is not None and g.memory_total_bytes is not None
            and g.memory_used_bytes > g.memory_total_bytes)


def conditions(g: IxGpu) -> list[Fault]:
    out = []
    if g.ecc_uncorrected:
        out.append(table_fault(VENDOR, "ecc-uncorrected", f"GPU {g.index}: {g.ecc_uncorrected:g}", TOOL))
    used, total = g.memory_used_bytes, g.memory_total_bytes
    if over_total(g) and used is not None and total is not None:
        out.append(table_fault(VENDOR, "memory-over-total", f"GPU {g.index}: {used / MIB:.0f} MiB used of "
                               f"{total / MIB:.0f} MiB", TOOL))
    return out


def device_uuid(g: IxGpu, uuid: Optional[str] = None) -> str:
    """The chip UUID ixsmi's query gives (the device plugin's id), else its serial, else its
    PCI address, else its index."""
    u = uuid or g.uuid
    if u:
        return u.strip()
    if g.serial:
        return f"iluvatar-sn-{g.serial}"
    if g.bus_id:
        return f"iluvatar-pci-{g.bus_id}"
    return f"iluvatar-index-{g.index}"


def identity_of(g: IxGpu, out: IxsmiOutput, uuid: Optional[str] = None, numa: Optional[int] = None,
                runtime: Optional[str] = None) -> DeviceIdentity:
    """``runtime``: the CoreX version of the host's install (collectors/iluvatar/versions.py),
    used where the title prints no IX-ML version (the CSV); never the driver's."""
    driver = out.driver_version or g.driver_version
    return DeviceIdentity(vendor=VENDOR, kind=KIND, index=g.index, uuid=device_uuid(g, uuid),
                          model=profiles.normalize_model(VENDOR, g.name) if g.name else "",
                          pci_address=g.bus_id, numa_node=numa, driver_version=driver,
                          runtime_version=out.ml_version or runtime or None, name=g.name or None,
                          serial=g.serial)


def _processes(out: IxsmiOutput, g: IxGpu, uuid: str) -> tuple[ProcessSample, ...]:
    return process_samples((p for p in out.processes if p.gpu == g.index), uuid)


def snapshot(out: IxsmiOutput, node: str = "", now: float = 0.0) -> NodeSnapshot:
    devices = []
    for g in out.gpus:
        ident = identity_of(g, out)
        reasons = tuple(conditions(g))
        devices.append(DeviceSample(identity=ident, timestamp=now, readings=readings_of(g),
                                    health=health_of(reasons), faults=reasons,
                                    processes=_processes(out, g, ident.uuid),
                                    processes_reported=out.process_section))
    return NodeSnapshot(node=node, time=now, devices=tuple(devices))


def parse_any(text: str) -> NodeSnapshot:
    """``hetero-exporter parse ixsmi FILE``: the default table or a --query-gpu CSV (with a
    header, or without one in gpustack's field order, parse.DEFAULT_FIELDS)."""
    return snapshot(_parse.parse_any(text))


# --------------------------------------------------------------------------- collector

IDENTITY_FIELDS = ("index", "uuid", "pci.bus_id")
IDENTITY_ARGS = (f"--query-gpu={','.join(IDENTITY_FIELDS)}", "--format=csv,nounits")


class IxsmiCollector(CliCollector):
    name = "ixsmi"
    vendor = VENDOR
    tool = TOOL
    summary_args = ()

    def __init__(self, exe: str, **kw: Any):
        super().__init__(exe, **kw)
        self._known: dict[tuple[int, Optional[str]], DeviceIdentity] = {}
        # CoreX below the host root, where the title prints no IX-ML version
        self._runtime = versions.discover(self.host.root_dir).runtime_version

    def parse_summary(self, text: str) -> IxsmiOutput:
        return parse_table(text)

    def lost_fault(self, identity: DeviceIdentity) -> Fault:
        return table_fault(VENDOR, self.lost_code, f"GPU {identity.index} ({identity.uuid}) no longer listed", TOOL)

    def _uuids(self, deadline: float) -> dict[tuple[int, Optional[str]], str]:
        """index / bus id -> UUID from one --query-gpu call; {} where it fails (logged)."""
        try:
            out = parse_csv(self.cli.call(IDENTITY_ARGS, deadline), IDENTITY_FIELDS)
        except Exception as e:  # noqa: BLE001 - the PCI address is the id then
            log.warning("ixsmi %s failed (%s): chips identified by PCI address", " ".join(IDENTITY_ARGS), e)
            return {}
        return {(g.index, g.bus_id): g.uuid for g in out.gpus if g.uuid}

    def devices(self, out: IxsmiOutput, now: float, deadline: float) -> list[DeviceSample]:
        new = [g for g in out.gpus if (g.index, g.bus_id) not in self._known]
        if new:
            uuids = self._uuids(deadline)
            by_bus = {bus: u for (_, bus), u in uuids.items() if bus}
            by_index = {i: u for (i, _), u in uuids.items()}
            for g in new:
                pinned = self.identities.recall(pci_address=g.bus_id) if g.bus_id else None
                u = by_bus.get(g.bus_id) if g.bus_id else by_index.get(g.index)
                self._known[(g.index, g.bus_id)] = (dataclasses.replace(pinned, index=g.index) if pinned
                                                    else identity_of(g, out, u, self.numa(g.bus_id), self._runtime))
        samples = []
        for g in out.gpus:
            ident = self._known[(g.index, g.bus_id)]
            samples.append(self.sample(ident, now, readings_of(g), conditions(g),
                                   processes=_processes(out, g, ident.uuid), processes_reported=out.process_section))
        return samples



def create(options: CollectorOptions) -> IxsmiCollector:
    """The ixsmi collector over the real tool (``settings.path``, else ixsmi on PATH or in
    /usr/local/corex/bin), or over the fake when simulating."""
    return build(options, IxsmiCollector, "hetero_exporter.collectors.iluvatar.ixsmi.fake", TOOL, vendor=VENDOR)


__all__ = ["IxsmiCollector", "create", "parse_any", "snapshot", "QUALITY", "ParsedOutput", "ParseError"]
