"""The normalized, vendor-neutral model (schema version 1): its dataclasses and vocabularies.

Every collector turns vendor output into these frozen dataclasses; everything downstream
(Prometheus exposition, health rules, the node annotation, the scorer) reads only these.

Units are base units: bytes, watts, joules, hertz, celsius, ratios 0..1. A value the device
does not support is *absent*: either no entry in ``DeviceSample.readings`` or a ``Reading``
whose value is ``None`` and whose quality status says why (``unsupported``, ``error``).
It is never 0 and never NaN.

The JSON outline is fixed by DESIGN.md: field names may be added, never renamed (the codec is
``model.codec``; it raises ``SchemaError``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Optional

from hetero_exporter.model.errors import InputError

SCHEMA_VERSION = 1

# identity.vendor names come from the vendor specs (hetero_exporter.vendors), not from here
KINDS = ("gpu", "npu", "mlu", "dcu", "gcu", "xpu")
METHODS = ("measured", "sampled", "derived", "estimated")
STATUSES = ("ok", "unsupported", "error", "stale")
# DESIGN.md's four states: accelerator_health_status lists them for every device
HEALTH_STATES = ("ok", "degraded", "failed", "unknown")
# failed, no longer, and its class's recovery gate has not passed yet (no new work; opt-in,
# health.classes[].recovery_gate): listed by accelerator_health_status only while a device is in it
RECOVERING = "recovering"
# Link.type: the device-to-device fabrics known today, then the host-side PCIe / NUMA
# relations. A new fabric adds its own name in its vendor's spec (``fabric_links``), not here:
# decoding accepts any type, and the scorer treats every type that is not host-side as a fabric.
HOST_LINK_TYPES = ("pcie-switch", "pcie-hostbridge", "numa", "cross-numa")
LINK_TYPES = ("nvlink", "nvswitch", "xgmi", "hccs", "mlulink", *HOST_LINK_TYPES)
ATTRIBUTION_METHODS = ("none", "cgroup", "podresources", "scenario")
# Recommended actions of a fault (vendor catalogues mapped onto one vocabulary).
ACTIONS = ("none", "restart-app", "reset-device", "reboot-node", "contact-support", "isolate-device")
SEVERITIES = ("info", "warning", "critical")


class SchemaError(InputError):
    """A JSON document does not match schema version 1 (message names the path)."""


# --------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True)
class Quality:
    """How much to trust a reading.

    ``source`` names the API call or CLI field the value came from; the static part
    (source, method, window, resolution, error bound) is declared once per field by the
    collector, the dynamic part (age, status) is set per sample.
    """

    source: str
    method: str = "measured"
    window_seconds: Optional[float] = None
    resolution: Optional[float] = None
    error_bound: Optional[float] = None
    age_seconds: float = 0.0
    status: str = "ok"

    def with_status(self, status: str, age_seconds: float | None = None) -> "Quality":
        return dataclasses.replace(
            self, status=status,
            age_seconds=self.age_seconds if age_seconds is None else age_seconds)


@dataclass(frozen=True)
class Reading:
    """One value in base units, or ``None`` when the quality status is not ``ok``.

    The quality defaults to an empty source: the compact annotation document leaves
    per-field quality out, and decoding it gives such readings."""

    value: Optional[float]
    quality: Quality = Quality(source="")


@dataclass(frozen=True)
class DeviceIdentity:
    """Who a device is. ``uuid`` is stable across reboots (vendor UUID or serial)."""

    vendor: str
    kind: str
    index: int
    uuid: str
    model: str = ""
    pci_address: Optional[str] = None
    numa_node: Optional[int] = None
    driver_version: Optional[str] = None
    firmware_version: Optional[str] = None
    parent: Optional[str] = None
    name: Optional[str] = None  # the vendor's own product string, before normalization
    serial: Optional[str] = None
    # compute runtime the driver serves (the vendor's runtime / toolkit API version), when the
    # vendor reports it; the scorer checks a pod's minimum runtime version against it
    runtime_version: Optional[str] = None


@dataclass(frozen=True)
class Fault:
    """A vendor fault: code as the vendor prints it, class and recommended action.

    ``count`` is cumulative since the agent started; ``first_seen``/``last_seen`` are Unix
    seconds. ``action`` is one of the action names of sdk/faults (e.g. ``reboot-node``).
    """

    code: str
    fault_class: str = "unknown"
    action: str = "none"
    message: str = ""
    first_seen: Optional[float] = None
    last_seen: Optional[float] = None
    count: int = 1
    severity: str = "warning"  # info | warning | critical
    source: str = ""


@dataclass(frozen=True)
class Health:
    state: str = "ok"
    reasons: tuple[Fault, ...] = ()


@dataclass(frozen=True)
class ProcessSample:
    """A process using a device. ``memory_bytes`` is device memory; ``utilization_ratio``
    is present only where the vendor reports per-process utilization."""

    pid: int
    device_uuid: str = ""
    memory_bytes: Optional[int] = None
    utilization_ratio: Optional[float] = None
    name: Optional[str] = None
    container_id: Optional[str] = None
    namespace: Optional[str] = None
    pod: Optional[str] = None
    pod_uid: Optional[str] = None
    container: Optional[str] = None
    attribution: str = "none"
    # how utilization_ratio was measured (source call, method, averaging window)
    utilization_quality: Optional[Quality] = None


@dataclass(frozen=True)
class Allocation:
    """A device allocated to a container by the kubelet (PodResources ``List``).

    ``resource`` is the extended resource name (``<vendor domain>/<resource>``);
    ``device_id`` the id the vendor's device plugin gave the kubelet (a uuid, PCI address,
    index or a name ending in the index, per the vendor spec's ``plugin_device_id``);
    ``method`` says how the allocation was learned."""

    namespace: str
    pod: str
    container: str
    resource: str = ""
    device_id: str = ""
    method: str = "podresources"


@dataclass(frozen=True)
class Link:
    """A connection from the owning device to ``peer`` (a uuid)."""

    peer: str
    type: str
    lanes: Optional[int] = None
    bandwidth_bytes_per_second: Optional[float] = None
    state: Optional[str] = None


@dataclass(frozen=True)
class Profile:
    """What a model is worth to a scheduler. ``compute_units`` is relative to the
    reference device named in profiles/profiles.yaml; ``estimated`` marks guesses."""

    model: str
    vendor: str = ""
    kind: str = ""
    compute_units: float = 1.0
    memory_bytes: Optional[int] = None
    interconnect: Optional[str] = None
    features: tuple[str, ...] = ()
    cost_weight: float = 1.0
    estimated: bool = False  # model unknown: figures guessed from what the device reports
    approximate: bool = False  # known model, figures from secondary public reporting
    source: str = ""


@dataclass(frozen=True)
class DeviceSample:
    """One device in one snapshot. Its health has two names, each meaning one thing: ``health`` is
    the device's health verdict (what /metrics, the annotation and the health outputs show: the
    rules' once judged, and until then the report, which is all an unjudged snapshot such as
    ``parse``'s has to say); ``report`` is what the collector and the sources after it said,
    judged or not (the rules judge it; ``reported_health`` keeps it in a judged snapshot)."""

    identity: DeviceIdentity
    timestamp: float
    readings: Mapping[str, Reading] = field(default_factory=dict)
    health: Health = Health()  # the verdict: the rules' once judged (health.detect.verdicts), else the report
    faults: tuple[Fault, ...] = ()
    processes: tuple[ProcessSample, ...] = ()
    links: tuple[Link, ...] = ()
    profile: Optional[Profile] = None
    allocations: tuple[Allocation, ...] = ()  # containers the kubelet gave this device to
    # True when the collector lists this device's processes, so an empty ``processes``
    # means none run (and all used memory is unattributed); False: not reported.
    processes_reported: bool = False
    # What the collector (and the sources after it) said of the device's health before the
    # rules judged it; None until judged (the report is ``health`` then). Read it as ``report``.
    reported_health: Optional[Health] = None

    @property
    def report(self) -> Health:
        """What the collector and the sources after it said of the device's health, judged or not."""
        return self.reported_health if self.reported_health is not None else self.health

    def value(self, name: str) -> Optional[float]:
        """The value of reading ``name``, or None when absent or not ok."""
        r = self.readings.get(name)
        return None if r is None or r.quality.status != "ok" else r.value


@dataclass(frozen=True)
class CollectorStatus:
    """Outcome of one collector in one cycle. ``error_kind`` is one of
    unavailable | timeout | late (still running when the cycle was published; its devices
    carried over stale) | exception | parse | busy (still running from an earlier cycle)."""

    name: str
    ok: bool
    duration_seconds: float = 0.0
    error: Optional[str] = None
    error_kind: Optional[str] = None
    last_success: Optional[float] = None
    errors_total: Mapping[str, int] = field(default_factory=dict)
    vendor: Optional[str] = None
    devices: int = 0


@dataclass(frozen=True)
class SourceStatus:
    """State of an attribution source (``procfs``, ``pod-cache``, ``podresources``).

    ``stale`` means the source is serving what it last knew (e.g. the Kubernetes API is
    unreachable and pod names come from the last successful list/watch); ``last_success``
    is Unix seconds; ``items`` counts what it holds (pods, allocations, cached pids)."""

    name: str
    ok: bool
    stale: bool = False
    last_success: Optional[float] = None
    error: Optional[str] = None
    items: int = 0


@dataclass(frozen=True)
class ContainerEnergy:
    """Joules of one device charged to one container since the device's energy run began
    (sources/energy.py: the device's energy increments split by its allocation shares)."""

    namespace: str
    pod: str
    container: str
    joules: float


@dataclass(frozen=True)
class EnergySplit:
    """One device's energy split: ``containers`` (what their allocation shares explain) and
    ``unattributed_joules`` (the rest: idle, host processes, the time before the agent saw it);
    together they equal the device's ``energy_joules_total`` as the agent counts it."""

    vendor: str
    uuid: str
    unattributed_joules: float
    containers: tuple[ContainerEnergy, ...] = ()


@dataclass(frozen=True)
class NodeSnapshot:
    node: str
    time: float
    devices: tuple[DeviceSample, ...] = ()
    collectors: tuple[CollectorStatus, ...] = ()
    expected: Mapping[str, int] = field(default_factory=dict)  # vendor -> devices on PCI
    boot_id: Optional[str] = None
    attribution_sources: tuple[SourceStatus, ...] = ()
    # devices remembered from an earlier boot that neither the PCI bus nor their tool shows:
    # removed, not lost (sdk/identity.py); ``removed`` those forgotten this cycle (a Node
    # event), ``removed_total`` per vendor since the agent started (a counter)
    removed: tuple[DeviceIdentity, ...] = ()
    removed_total: Mapping[str, int] = field(default_factory=dict)
    energy: tuple[EnergySplit, ...] = ()  # per top-level device with an energy run (sources/energy.py)

    def present(self) -> dict[str, int]:
        """Devices the vendor tools really see, per vendor (top-level devices only).

        Not counted: a device with nothing read and health failed or unknown. That is PCI
        presence's stand-in for a device on the bus that no tool reports
        (sources/pci_presence.py: no readings, failed), and a device its collector reports lost
        under its pinned identity (NVML GPU_IS_LOST, a CLI tool that no longer lists it), so
        ``accelerator_devices_expected > accelerator_devices_present`` says a device is missing.
        A device carried over stale from a late collector still counts: it has (stale)
        readings, it was seen at the last success, and a slow tool is not a missing device
        (``accelerator_collector_success`` says that), so a late cycle does not fire the
        missing-device alert."""
        counts: dict[str, int] = {}
        for d in self.devices:
            if d.identity.parent is None and (d.readings or d.health.state not in ("failed", "unknown")):
                counts[d.identity.vendor] = counts.get(d.identity.vendor, 0) + 1
        return counts
