"""Typed config sections with their defaults, in one place.

``config.py`` checks the file (every key, type and range) and keeps each section as the mapping
it read; here each section becomes a frozen dataclass the assembly reads by attribute, so a
default is written once and a misspelt key is an AttributeError, not a silent ``.get`` default.
The field names are the config keys (tests/test_app.py keeps them equal to config.py's tables).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional

from hetero_exporter import config as config_mod
from hetero_exporter.sdk.contract import HostPaths

if TYPE_CHECKING:
    from hetero_exporter.health.act.nvsentinel.settings import NvSentinelSettings
    from hetero_exporter.health.act.stream.settings import HealthStreamSettings
    from hetero_exporter.health.detect.policy import Policy
    from hetero_exporter.health.plan import RemedyConfig

DEFAULT_STATE_DIR = "/var/lib/hetero-exporter"  # the DaemonSets' hostPath (deploy/)
DEFAULT_PODRESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
OFF_WORDS = ("off", "false", "no", "none")  # --kernel-log values that turn the follower off


def _typed(cls: type, raw: Mapping[str, Any], **changes: Any) -> Any:
    """``cls`` from a checked config section (unknown keys were refused by config.py)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in {**raw, **changes}.items() if k in names})


@dataclass(frozen=True)
class KernelLogSettings:
    """``kernel_log``: the kernel log as a health source (docs/health.md: Kernel log)."""

    enabled: bool = True
    path: Optional[str] = None  # None or /dev/kmsg: the kmsg device; "syslog"; else a text file
    state_dir: str = DEFAULT_STATE_DIR  # cursor, boot id and pinned identities
    max_records_per_second: float = 5000.0
    max_pending: int = 1024  # distinct (vendor, device, code) events held between cycles
    dedup_seconds: float = 60.0  # a fault the vendor API also reports within this counts once
    initial_bytes: int = 8 << 20  # a text log's tail read at start
    retry_seconds: float = 60.0  # between attempts to open an unreadable source

    @classmethod
    def parse(cls, raw: Mapping[str, Any], flag: Optional[str] = None) -> "KernelLogSettings":
        """The section, with ``--kernel-log PATH|off`` over it."""
        if flag is None:
            return _typed(cls, raw)
        if flag.lower() in OFF_WORDS:
            return _typed(cls, raw, enabled=False)
        return _typed(cls, raw, enabled=True, path=flag)


@dataclass(frozen=True)
class AttributionSettings:
    """``attribution``: process -> container -> pod (docs/metrics-guide.md: Attribution)."""

    proc_root: Optional[str] = None  # None: the config's top-level proc_root
    pod_cache: bool = True  # watch this node's pods when Kubernetes is configured
    pod_cache_wait: float = 5.0  # seconds the first snapshot waits for the pod list
    podresources: Optional[bool] = None  # None: when the kubelet socket is mounted
    podresources_socket: str = DEFAULT_PODRESOURCES_SOCKET
    podresources_timeout: float = 2.0
    podresources_interval: Optional[float] = None  # None: the collection interval
    resources: Mapping[str, str] = field(default_factory=dict)  # extra resource name or domain -> vendor


@dataclass(frozen=True)
class HealthSettings:
    """``health`` (+ ``--health-mode``): the policy and the remedy's settings, parsed once."""

    policy: "Policy"
    remedy: "RemedyConfig"
    pci_presence: bool = True  # PCI presence and the locate enricher run
    udev: bool = True  # a udev watch wakes the sampler on a PCI remove/add (host only)

    @classmethod
    def parse(cls, raw: Mapping[str, Any], mode: Optional[str] = None) -> "HealthSettings":
        from hetero_exporter.health.detect import policy as policy_mod
        from hetero_exporter.health.plan import RemedyConfig
        return cls(policy=policy_mod.load(raw.get("policy"), raw.get("promote")), remedy=RemedyConfig.from_mapping(raw, mode=mode),
                   pci_presence=bool(raw.get("pci_presence", True)), udev=bool(raw.get("udev", True)))


@dataclass(frozen=True)
class OtlpTlsSettings:
    """``otlp.tls``: plaintext only with ``insecure: true`` (gRPC) or an http:// endpoint."""

    insecure: bool = False
    ca_file: Optional[str] = None  # PEM bundle that signs the receiver (default: the system's)
    cert_file: Optional[str] = None  # client certificate and key (mTLS), both or neither
    key_file: Optional[str] = None
    # the named files' bytes by key, read once when the settings are made: regular files of at
    # most 1 MiB, else exit 2 naming the key before anything starts (exposition/export/tls_files.py)
    contents: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class OtlpSettings:
    """``otlp`` (opt-in): the OTLP metrics exporter (docs/opentelemetry.md)."""

    endpoint: str
    protocol: str = "grpc"  # grpc (port 4317) | http (protobuf over HTTP, port 4318, path /v1/metrics)
    interval: float = 30.0  # seconds between exports of the latest snapshot
    timeout: float = 10.0  # seconds one export may take (clamped to the interval)
    headers: Mapping[str, str] = field(default_factory=dict)  # e.g. authorization
    tls: OtlpTlsSettings = OtlpTlsSettings()
    resource: Mapping[str, str] = field(default_factory=dict)  # extra resource attributes

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Optional["OtlpSettings"]:
        """None where the section is absent (no export, and the SDK never imported)."""
        if not raw:
            return None
        from hetero_exporter.exposition.export.tls_files import FILE_KEYS, TlsFiles
        tls = raw.get("tls") or {}
        contents = TlsFiles.read({k: tls.get(k) for k in FILE_KEYS}).contents
        return _typed(cls, raw, tls=_typed(OtlpTlsSettings, tls, contents=contents))


def _nvsentinel(raw: Mapping[str, Any]) -> "Optional[NvSentinelSettings]":
    if not raw:
        return None
    from hetero_exporter.health.act.nvsentinel.settings import NvSentinelSettings
    return NvSentinelSettings.parse(raw)


def _health_stream(raw: Mapping[str, Any]) -> "Optional[HealthStreamSettings]":
    if not raw:
        return None
    from hetero_exporter.health.act.stream.settings import HealthStreamSettings
    return HealthStreamSettings.parse(raw)


@dataclass(frozen=True)
class CollectorSection:
    """``collectors.NAME``: the agent's keys of a collector's section (config.COLLECTOR_SETTINGS:
    whether it runs, and the host paths it sees over the top-level ones) and ``own``, the
    collector's keys (checked at load by its settings class, sdk/settings.py), handed to it as
    ``CollectorOptions.settings``. Its deadline: ``Config.collector_timeout``."""

    enabled: Optional[bool] = None  # None: when its vendor is on the bus (a flag wins)
    host_root: Optional[str] = None
    host_exec: Optional[str] = None
    sysfs_root: Optional[str] = None
    own: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> "CollectorSection":
        agent = {k: raw[k] for k in config_mod.COLLECTOR_SETTINGS if k in raw and k != "timeout"}
        return cls(**agent, own={k: x for k, x in raw.items() if k not in config_mod.COLLECTOR_SETTINGS})

    def host(self, paths: HostPaths) -> HostPaths:
        """``paths`` with this section's own host root, exec mode and sysfs root over them."""
        return dataclasses.replace(paths, root=self.host_root or paths.root, exec_mode=self.host_exec or paths.exec_mode,
                                   sysfs=self.sysfs_root or paths.sysfs)


@dataclass(frozen=True)
class Settings:
    """The agent's configuration: the file's top level (``config.Config``) and its sections, typed."""

    config: config_mod.Config
    kernel_log: KernelLogSettings
    attribution: AttributionSettings
    health: HealthSettings
    otlp: Optional[OtlpSettings] = None
    nvsentinel: "Optional[NvSentinelSettings]" = None  # None: no bridge
    health_stream: "Optional[HealthStreamSettings]" = None  # None: no local health stream
    collectors: Mapping[str, CollectorSection] = field(default_factory=dict)

    @classmethod
    def parse(cls, cfg: config_mod.Config, *, health_mode: Optional[str] = None,
              kernel_log: Optional[str] = None) -> "Settings":
        return cls(config=cfg, kernel_log=KernelLogSettings.parse(cfg.kernel_log, kernel_log),
                   attribution=_typed(AttributionSettings, cfg.attribution),
                   health=HealthSettings.parse(cfg.health, health_mode),
                   otlp=OtlpSettings.parse(cfg.otlp), nvsentinel=_nvsentinel(cfg.nvsentinel),
                   health_stream=_health_stream(cfg.health_stream),
                   collectors={name: CollectorSection.parse(raw) for name, raw in cfg.collectors.items()})

    def collector(self, name: str) -> CollectorSection:
        """The section of collector ``name`` (every default when the file has none)."""
        return self.collectors.get(name) or CollectorSection()
