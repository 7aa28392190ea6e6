"""Kunlunxin XPUs through ``xpu_smi``: the quality table, the model of a parsed output,
``parse xpu-smi FILE``, and a collector on the SDK's CliCollector.

Invocations: ``xpu_smi`` (no arguments) once per cycle (XRE 4.x sections or the xpu-smi 5.x
box, parse.detect tells which). Its default output already holds
every device's utilization, memory, L3, state, power, temperature, clock and firmware (in the
versions that print those columns), the video engines and the processes, so there are no
detail calls. The base class runs it under the cycle's deadline (process-group kill, output
cap), pins identities and reports a device the tool stops listing as failed (``missing``).

Identity: the serial (``SN``) is the stable id (``KLX-<SN>``); a K200 lists its two chips with
one serial and one PCI address, and SR-IOV VFs share their card's serial, so devices sharing
a serial add their PCI address, or their position among those rows when the address is
shared too. Without a serial the PCI address, else the DevID. SR-IOV VF rows (model
``...-VF...``) get the PF row on the same bus as parent.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Sequence

from hetero_exporter.model import fields as F
from hetero_exporter import profiles
from hetero_exporter.model import DeviceIdentity, DeviceSample, Fault, NodeSnapshot, ProcessSample, Quality, Reading
from hetero_exporter.sdk.cli_collector import process_samples, CliCollector, Readings, build, table_fault
from hetero_exporter.sdk.faults import health_of
from hetero_exporter.sdk.contract import CollectorOptions, Unavailable
from hetero_exporter.sdk.settings import ToolSettings
from hetero_exporter.collectors.kunlunxin import versions

from .parse import MIB, TOOL, XpuDevice, XpuSmi, detect, parse  # noqa: F401 - part of this API

VENDOR, KIND = "kunlunxin", "xpu"
BINARY = "xpu_smi"  # the XRE 4.x name; newer drivers also install xpu-smi

# UseRate and the video engines' busy shares are ratios the driver keeps over a period
# Kunlunxin does not document (the XRE guide only names /proc/xpu/devN/use_ratio): a 1 s
# window is assumed, not documented.
UTIL_WINDOW = 1.0

QUALITY: dict[str, Quality] = {
    F.UTILIZATION: Quality("xpu_smi: UseRate", "sampled", UTIL_WINDOW, 0.01),
    F.MEMORY_USED: Quality("xpu_smi: Memory used (MB); xpu-smi 5.x: Memory-Usage (MiB)", "measured", None, MIB),
    F.MEMORY_TOTAL: Quality("xpu_smi: Memory total (MB); xpu-smi 5.x: Memory-Usage (MiB)", "measured", None, MIB),
    # a vendor-local reading: no core field holds the on-chip L3 SRAM
    "l3_used_bytes": Quality("xpu_smi: L3 used (MB); xpu-smi 5.x: L3-Usage (MiB); on-chip L3 SRAM",
                             "measured", None, MIB),
    "l3_total_bytes": Quality("xpu_smi: L3 total (MB); xpu-smi 5.x: L3-Usage (MiB); on-chip L3 SRAM",
                              "measured", None, MIB),
    F.POWER: Quality("xpu_smi: Power(W)", "measured", None, 1.0),
    F.TEMP_CORE: Quality("xpu_smi: Temp (C)", "measured", None, 1.0),
    F.CLOCK_COMPUTE: Quality("xpu_smi: Freq(MHz); xpu-smi -q: Clocks Cluster", "measured", None, 1e6),
    # xpu-smi 5.x: the box's Pwr:Usage/Cap cap (-q Enforced Power Limit, printed to 0.01 W) and
    # Volatile Uncorr. ECC (-q ECC Errors / Volatile / DRAM Uncorrectable; since driver load)
    F.POWER_LIMIT: Quality("xpu-smi: Pwr:Usage/Cap cap (W)", "measured", None, 1.0),
    F.ECC_UNCORRECTED: Quality("xpu-smi: Volatile Uncorr. ECC", "measured", None, 1.0),
    "decoder_utilization_ratio": Quality("xpu_smi: VIDEO DEC %", "sampled", UTIL_WINDOW, 0.01),
    "encoder_utilization_ratio": Quality("xpu_smi: VIDEO ENC %", "sampled", UTIL_WINDOW, 0.01),
    "image_processor_utilization_ratio": Quality("xpu_smi: VIDEO IMGPROC %", "sampled", UTIL_WINDOW, 0.01),
}
_VIDEO_FIELDS = {"dec": "decoder_utilization_ratio", "enc": "encoder_utilization_ratio",
                 "imgproc": "image_processor_utilization_ratio"}


def over_total(d: XpuDevice) -> bool:
    """Memory used above the total: a known driver fault; the used figure is not trusted."""
    return (d.memory_used_bytes is not None and d.memory_total_bytes is not None
            and d.memory_used_bytes > d.memory_total_bytes)


def readings_of(d: XpuDevice, t: XpuSmi) -> dict[str, Reading]:
    """One device's readings in base units (N/A or a column the version lacks: unsupported;
    memory used above total: the used reading has status ``error``)."""
    r = Readings(QUALITY)
    r.put(F.UTILIZATION, d.utilization_ratio)
    r.put(F.MEMORY_TOTAL, d.memory_total_bytes)
    if over_total(d):
        r[F.MEMORY_USED] = Reading(None, QUALITY[F.MEMORY_USED].with_status("error"))
    else:
        r.put(F.MEMORY_USED, d.memory_used_bytes)
    r.put("l3_used_bytes", d.l3_used_bytes)
    r.put("l3_total_bytes", d.l3_total_bytes)
    r.put(F.POWER, d.power_watts)
    r.put(F.TEMP_CORE, d.temperature_celsius)
    r.put(F.CLOCK_COMPUTE, d.clock_hertz)
    if d.power_limit_watts is not None:  # printed by xpu-smi 5.x only: absent in 4.x outputs
        r.put(F.POWER_LIMIT, d.power_limit_watts)
    if d.ecc_uncorrected is not None:
        r.put(F.ECC_UNCORRECTED, d.ecc_uncorrected)
    for engine, v in (t.video.get(d.index) or {}).items():
        name = _VIDEO_FIELDS.get(engine)
        if name is not None:
            r.put(name, v.utilization_ratio)
    return dict(r)


def device_uuids(devices: Sequence[XpuDevice]) -> dict[int, str]:
    """DevID -> uuid (see the module docstring)."""
    out: dict[int, str] = {}
    for d in devices:
        if d.serial:
            same = [o for o in devices if o.serial == d.serial]
            base = f"KLX-{d.serial}"
        elif d.bus_id:
            same = [o for o in devices if not o.serial and o.bus_id == d.bus_id]
            base = f"KLX-pci-{d.bus_id}"
        else:
            out[d.index] = f"KLX-index-{d.index}"
            continue
        if len(same) == 1:
            out[d.index] = base
        elif d.serial and d.bus_id and sum(o.bus_id == d.bus_id for o in same) == 1:
            out[d.index] = f"{base}-{d.bus_id}"
        else:  # several chips behind one address: their order among those rows
            peers = sorted(o.index for o in same if o.bus_id == d.bus_id)
            out[d.index] = f"{base}-{peers.index(d.index)}"
    return out


def _bus(bus: Optional[str]) -> Optional[str]:
    return bus.rsplit(":", 1)[0] if bus else None  # 0000:01:01.2 -> 0000:01


def parents(devices: Sequence[XpuDevice], uuids: dict[int, str]) -> dict[int, str]:
    """DevID of an SR-IOV VF -> uuid of its PF (the ``-PF`` row on the same bus)."""
    out = {}
    for d in devices:
        if re.search(r"-VF\b", d.model, re.I):
            pf = next((o for o in devices if re.search(r"-PF\b", o.model, re.I) and _bus(o.bus_id) == _bus(d.bus_id)
                       and o.bus_id is not None), None)
            if pf is not None:
                out[d.index] = uuids[pf.index]
    return out


def identity_of(d: XpuDevice, t: XpuSmi, uuid: str, parent: Optional[str] = None,
                numa: Optional[int] = None, runtime: Optional[str] = None) -> DeviceIdentity:
    """``runtime_version``: the XRE version the tool prints (``Runtime Version`` / ``XPU-RT
    Version``), else ``runtime`` (the XRE install's version file, collectors/kunlunxin/versions.py),
    else None; never the driver version."""
    return DeviceIdentity(vendor=VENDOR, kind=KIND, index=d.index, uuid=uuid,
                          model=profiles.normalize_model(VENDOR, d.model) if d.model else "unknown",
                          pci_address=d.bus_id, numa_node=numa, driver_version=t.driver_version,
                          runtime_version=t.runtime_version or runtime or None, firmware_version=d.firmware,
                          parent=parent, name=d.model or None, serial=d.serial)


def conditions(d: XpuDevice) -> list[Fault]:
    """Faults from what the row shows: the State column (N = normal)."""
    if d.state_ok is False and d.state is not None:
        code = "state-error" if d.state.strip().upper() in ("E", "ERROR", "ERR") else "state-abnormal"
        return [table_fault(VENDOR, code, f"xpu{d.index}: State {d.state}", "xpu_smi")]
    return []


def processes_of(t: XpuSmi, d: XpuDevice, uuid: str) -> tuple[ProcessSample, ...]:
    return process_samples((p for p in t.processes if p.index == d.index), uuid, name="command")


def snapshot(t: XpuSmi, node: str = "", now: float = 0.0) -> NodeSnapshot:
    """The model of one parsed output (what ``parse xpu-smi FILE`` prints)."""
    uuids = device_uuids(t.devices)
    up = parents(t.devices, uuids)
    out = []
    for d in t.devices:
        reasons = tuple(conditions(d))
        out.append(DeviceSample(identity=identity_of(d, t, uuids[d.index], up.get(d.index)), timestamp=now,
                                readings=readings_of(d, t), health=health_of(reasons),
                                faults=reasons, processes=processes_of(t, d, uuids[d.index]),
                                processes_reported=t.process_section))
    return NodeSnapshot(node=node, time=now, devices=tuple(out))


def parse_any(text: str) -> Any:
    """``hetero-exporter parse xpu-smi FILE``: the default output -> NodeSnapshot."""
    detect(text)
    return snapshot(parse(text))


_FAKE = "hetero_exporter.collectors.kunlunxin.xpu_smi.fake"  # imported only when simulating


class XpuSmiCollector(CliCollector):
    name = "xpu_smi"
    vendor = VENDOR
    tool = BINARY
    summary_args = ()

    def __init__(self, exe: str, **kw: Any):
        super().__init__(exe, **kw)
        # XRE below the host root, for outputs whose title says N/A (in containers)
        self._runtime = versions.discover(self.host.root_dir).runtime_version

    def parse_summary(self, text: str) -> XpuSmi:
        return parse(text)

    def devices(self, parsed: XpuSmi, now: float, deadline: float) -> list[DeviceSample]:
        uuids = device_uuids(parsed.devices)
        up = parents(parsed.devices, uuids)
        out = []
        for d in parsed.devices:
            ident = self.identities.recall(uuid=uuids[d.index]) or identity_of(
                d, parsed, uuids[d.index], up.get(d.index), self.numa(d.bus_id), self._runtime)
            out.append(self.sample(ident, now, readings_of(d, parsed), conditions(d),
                                   processes=processes_of(parsed, d, ident.uuid), processes_reported=parsed.process_section))
        return out



def create(options: CollectorOptions) -> XpuSmiCollector:
    """The collector over ``xpu_smi`` (``settings.path``, else xpu_smi, else xpu-smi, on PATH or
    in the XRE folders of the spec's ToolSpecs), or over its fake when simulating."""
    try:
        return build(options, XpuSmiCollector, _FAKE, BINARY, vendor=VENDOR)
    except Unavailable:
        if options.scenario is not None or ToolSettings.of(options.settings).path:
            raise
        return build(options, XpuSmiCollector, _FAKE, "xpu-smi", vendor=VENDOR)
