"""Acme GPUs through ``acme-smi``: the quality table and the hooks of a CliCollector.

One call per cycle (``acme-smi``, the table of every device); no detail calls. The base class
runs it under the cycle's deadline, pins identities and reports a device that is no longer
listed as failed under its pinned uuid (fault ``missing`` of faults.yaml).
"""

from __future__ import annotations

from typing import Any, Optional

from hetero_exporter.model import fields as F
from hetero_exporter import profiles
from hetero_exporter.model import DeviceIdentity, DeviceSample, Fault, NodeSnapshot, Quality, Reading
from hetero_exporter.sdk.cli_collector import CliCollector, build, reading, table_fault
from hetero_exporter.sdk.faults import health_of
from hetero_exporter.sdk.contract import CollectorOptions

from .parse import MIB, TOOL, AcmeDevice, AcmeTable, parse_table

VENDOR, KIND = "acme", "gpu"
HOT_CELSIUS = 90.0

# Resolution: the step acme-smi prints in. Acme is fictional; its "documentation" (this
# comment) says Util is the busy share of the last 1 s, so the window is 1 s.
QUALITY: dict[str, Quality] = {
    F.UTILIZATION: Quality("acme-smi: Util", "sampled", 1.0, 0.01),
    F.MEMORY_USED: Quality("acme-smi: Memory-Usage used (MiB)", "measured", None, MIB),
    F.MEMORY_TOTAL: Quality("acme-smi: Memory-Usage total (MiB)", "measured", None, MIB),
    F.TEMP_CORE: Quality("acme-smi: Temp (C)", "measured", None, 1.0),
    F.POWER: Quality("acme-smi: Power (W)", "measured", None, 1.0),
}


def readings_of(d: AcmeDevice) -> dict[str, Reading]:
    return {name: reading(QUALITY, name, v) for name, v in (
        (F.UTILIZATION, d.utilization_ratio), (F.MEMORY_USED, d.memory_used_bytes),
        (F.MEMORY_TOTAL, d.memory_total_bytes), (F.TEMP_CORE, d.temperature_celsius),
        (F.POWER, d.power_watts))}


def device_uuid(d: AcmeDevice) -> str:
    """acme-smi prints no serial: the PCI address is the stable id, else the index."""
    return f"ACME-{d.bus_id}" if d.bus_id else f"ACME-index-{d.index}"


def identity_of(d: AcmeDevice, t: AcmeTable, numa: Optional[int] = None) -> DeviceIdentity:
    return DeviceIdentity(vendor=VENDOR, kind=KIND, index=d.index, uuid=device_uuid(d),
                          model=profiles.normalize_model(VENDOR, d.name), pci_address=d.bus_id,
                          numa_node=numa, driver_version=t.driver_version,
                          runtime_version=t.runtime_version, name=d.name or None)


def conditions(d: AcmeDevice) -> list[Fault]:
    if d.temperature_celsius is not None and d.temperature_celsius >= HOT_CELSIUS:
        return [table_fault(VENDOR, "hot", f"device {d.index}: {d.temperature_celsius:g} C", TOOL)]
    return []


def parse_snapshot(text: str) -> NodeSnapshot:
    """``hetero-exporter parse acme-smi FILE``."""
    t = parse_table(text)
    out = []
    for d in t.devices:
        reasons = tuple(conditions(d))
        out.append(DeviceSample(identity=identity_of(d, t), timestamp=0.0, readings=readings_of(d),
                                health=health_of(reasons), faults=reasons))
    return NodeSnapshot(node="", time=0.0, devices=tuple(out))


class AcmeSmiCollector(CliCollector):
    name = "acme_smi"
    vendor = VENDOR
    tool = TOOL
    summary_args = ()

    def parse_summary(self, text: str) -> AcmeTable:
        return parse_table(text)

    def devices(self, parsed: AcmeTable, now: float, deadline: float) -> list[DeviceSample]:
        out = []
        for d in parsed.devices:
            ident = self.identities.recall(uuid=device_uuid(d)) or identity_of(d, parsed, self.numa(d.bus_id))
            reasons = self.episodes.update(ident.uuid, conditions(d), now)
            out.append(DeviceSample(identity=ident, timestamp=now, readings=readings_of(d),
                                    health=health_of(reasons),
                                    faults=self.episodes.faults(ident.uuid)))
        return out


def _install_fake(scenario: Any, clock: Any, workdir: Optional[str]) -> Any:
    from . import fake  # simulation only
    return fake.install(scenario, clock, workdir)


def create(options: CollectorOptions) -> AcmeSmiCollector:
    return build(options, AcmeSmiCollector, _install_fake, TOOL, "/usr/local/bin:/usr/bin",
                 "Acme driver tools not installed")
