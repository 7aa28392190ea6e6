"""Agent configuration: defaults < config file (``--config FILE``, YAML) < command line.

Example (every key optional)::

    listen: "0.0.0.0:9400"
    interval: 10            # seconds between collection cycles
    node_name: gpu-node-7   # else --node-name, NODE_NAME, host name
    log_format: json        # json | text
    sysfs_root: /sys        # PCI enumeration (a host mount in a container)
    proc_root: /proc        # process attribution (hostPID)
    host_root: /host/root   # the host's / (DaemonSet mount): vendor tools and driver libraries;
                            # else --host-root (wins), else $HOST_ROOT (docs/troubleshooting.md: vendor tools from the host)
    host_exec: ld_library_path   # or chroot: how a tool of the host root runs (sdk/host_tools.py)
    collectors:
      <collector>: {enabled: true, timeout: 5}   # a collector's name (`run --help` lists them)
      <other>: {enabled: false}                  # + host_root/host_exec/sysfs_root, and its own keys (its SETTINGS)
    health: {mode: observe}  # observe | dry-run | enforce; see the health section of README
    kernel_log:             # the kernel log as a health source (docs/health.md: Kernel log)
      enabled: true         # false: not followed
      path: /dev/kmsg       # or a text log followed like tail -F (/var/log/kern.log)
      state_dir: /var/lib/hetero-exporter   # cursor + boot id (a restart neither replays nor misses), device identities
      max_records_per_second: 5000
      max_pending: 1024     # distinct (vendor, device, code) events held between cycles
      dedup_seconds: 60     # a fault the vendor API also reports within this counts once
    metrics:                # which families /metrics serves (docs/metrics-guide.md: Choosing what /metrics serves)
      profile: standard     # fleet (at most 32 series a GPU) | standard | full: docs/metrics.md gives each family's
      exclude: [accelerator_tensor_pipe_utilization_ratio, "clock_throttle_{reason}"]   # families or fields
      # include: [...]      # only these (identity, health and the agent's own families always stay)
    nvsentinel:             # opt-in: fault episodes and recoveries as NVSentinel HealthEvents
      socket: /var/run/nvsentinel.sock   # its platform connector (any key turns the bridge on; enabled: false off)
      timeout: 5            # seconds per send; retry_min_seconds: 1 .. retry_max_seconds: 60 while it is down
      max_outbox: 1024      # unsent events kept (in kernel_log.state_dir); the oldest dropped beyond
    health_stream:          # opt-in: every device's verdict and fault episodes over a local gRPC socket
      socket: /var/run/hetero-exporter/health.sock   # any key turns it on; enabled: false off
      max_clients: 16       # socket_mode: 0660, max_message_bytes, max_queue, stall_seconds (docs/health-stream.md)
    finops:                 # prices for accelerator_price_per_hour (docs/cost.md)
      currency: USD
      reference: A100-SXM4-80GB   # a profile model; it must have a price below
      prices:               # profile model -> price per device-hour; an EXAMPLE, override it
        A100-SXM4-80GB: 2.0 # a model without a price: reference price x its profile's cost_weight

Every key is checked (hetero_exporter/validate.py): an unknown key, a wrong type (``enabled:
"false"`` is a string, not a boolean) or a value out of range is refused with one line
``FILE: FIELD: what is wrong; allowed: ...`` and the command exits 2. Bounds: ``interval``
0.1 s .. 1 day; every timeout finite, 0.01 s .. 1 day.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from hetero_exporter import finops as finops_mod
from hetero_exporter import validate as v
from hetero_exporter.sdk import host_tools
from hetero_exporter.sdk import settings as collector_settings
from hetero_exporter.sdk.settings import CADENCE_MAX, TIMEOUT_MAX, TIMEOUT_MIN, Check, timeout  # noqa: F401 - config's too
from hetero_exporter.validate import ValidationError

MAX_CONFIG_BYTES = 1 << 20  # a config is a few KiB; a bigger file is a mistake
INTERVAL_MIN, INTERVAL_MAX = 0.1, 86400.0  # seconds: below 0.1 s a cycle is a busy loop


class ConfigError(ValidationError):
    """The configuration cannot be used (message names the key)."""


def interval(path: str, value: Any) -> float:
    """Seconds between collection cycles (``interval``, ``--interval``)."""
    return v.number(path, value, minimum=INTERVAL_MIN, maximum=INTERVAL_MAX, unit="seconds")


_seconds, _integer, _path = collector_settings.seconds, collector_settings.integer, collector_settings.a_path


def _section(path: str, value: Any, table: Mapping[str, Check]) -> dict:
    """A mapping whose keys are in ``table``, each value checked by its entry (null = absent)."""
    doc = v.mapping(path, value, table)
    return {k: table[k](v.join(path, k), x) for k, x in doc.items() if x is not None}


# The agent's keys of every collector's section (README: Collectors): whether it runs, its
# deadline, and the host paths it sees (over the top-level ones: CollectorOptions.host). The
# rest of a section is the collector's own keys, checked by its settings class (sdk/settings.py).
COLLECTOR_SETTINGS: dict[str, Check] = {
    "enabled": v.boolean, "timeout": timeout,
    "host_root": _path, "host_exec": lambda p, x: v.string(p, x, choices=host_tools.EXEC_MODES),
    "sysfs_root": _path,
}

KERNEL_LOG: dict[str, Check] = {
    "enabled": v.boolean, "path": _path, "state_dir": _path,
    "max_records_per_second": lambda p, x: v.number(p, x, minimum=1, maximum=1e6),
    "max_pending": _integer(1, 1 << 20), "dedup_seconds": _seconds(86400.0),
    "initial_bytes": _integer(0, 1 << 30), "retry_seconds": _seconds(86400.0, 0.1),
}
KERNEL_LOG_KEYS = set(KERNEL_LOG)


def _vendor(p: str, x: Any) -> str:
    from hetero_exporter import vendors
    return v.string(p, x, choices=sorted(vendors.specs()))


ATTRIBUTION: dict[str, Check] = {
    "proc_root": _path, "pod_cache": v.boolean, "pod_cache_wait": _seconds(600.0),
    "podresources": v.boolean, "podresources_socket": _path, "podresources_timeout": timeout,
    "podresources_interval": interval,
    # extra resource name or domain -> vendor
    "resources": lambda p, x: {k: _vendor(v.join(p, k), n) for k, n in v.mapping(p, x).items()},
}


def _collector(path: str, value: Any, entry: Any) -> dict:
    """One collector's section: the agent's keys and the collector's own, each checked by the
    collector's settings class (when its module cannot be imported, the agent's keys only: the
    collector says why it cannot run when it is built)."""
    from hetero_exporter import registry
    own = registry.collector_settings(entry)
    if own is not None:
        return _section(path, value, {**COLLECTOR_SETTINGS, **own.checks()})
    doc = v.mapping(path, value)
    agent = _section(path, {k: x for k, x in doc.items() if k in COLLECTOR_SETTINGS}, COLLECTOR_SETTINGS)
    return {**{k: x for k, x in doc.items() if k not in COLLECTOR_SETTINGS}, **agent}


def _collectors(path: str, value: Any) -> dict:
    from hetero_exporter import registry
    entries = registry.collector_entries()
    doc = v.mapping(path, value, entries)
    return {k: _collector(v.join(path, k), s, entries[k]) if s is not None else {} for k, s in doc.items()}


_BY_TYPE: dict[str, Check] = {"bool": v.boolean, "str": v.string, "int": _integer(0, 1 << 20),
                              "float": lambda p, x: v.number(p, x, minimum=0, maximum=1e9)}


def _health_table() -> dict[str, Check]:
    """The health section: RemedyConfig's fields (typed by their annotations) and the others."""
    from hetero_exporter.health.plan import MODES, RemedyConfig
    from hetero_exporter.health.plan.config import CHECKS
    table = {f.name: _BY_TYPE.get(str(f.type), v.plain) for f in dataclasses.fields(RemedyConfig)}
    table.update({name: _seconds(7 * 86400.0, 1.0) for name in table if name.endswith("_seconds")})
    table.update(CHECKS)  # the issue-15 keys check their own ranges (allocatable_grace_seconds: 0 is valid)
    table.update(
        mode=lambda p, x: v.string(p, x, choices=MODES),
        domain=v.dns_subdomain,
        budget_max_fraction=lambda p, x: v.number(p, x, minimum=0, maximum=1),
        inventory_max_bytes=_integer(1024, 1 << 18),
        policy=_policy_overrides, pci_presence=v.boolean, udev=v.boolean, promote=_promote)
    return table


def _promote(path: str, value: Any) -> tuple:
    """``health.promote``: N occurrences of a code in a window change a device's state (docs/health.md)."""
    from hetero_exporter.health.detect import promote
    return promote.parse(path, value)


def _text_list(p: str, x: Any) -> list:
    return v.list_of(p, x, v.string, max_items=1024)


def _of(check: Check) -> Check:
    """A mapping of any names to values ``check`` accepts."""
    return lambda p, x: {k: check(v.join(p, k), y) for k, y in v.mapping(p, x).items()}


def _table(table: Mapping[str, Check]) -> Check:
    return lambda p, x: _section(p, x, table)


_CLASS_POLICY = _table({"sticky": v.boolean, "node_level": v.boolean, "clear_on": _text_list})
# health.policy (health/detect/policy.yaml): the shape of each key; the policy parser checks the rest
POLICY: dict[str, Check] = {
    "debounce": _table({"k": _integer(1, 100), "n": _integer(1, 100)}),
    "recovery_polls": _integer(1, 1000),
    "classes": _of(_CLASS_POLICY), "actions": _of(_CLASS_POLICY),
    "reset_codes": _text_list, "reset_counters": _text_list,
    "overrides": _of(_of(lambda p, x: v.mapping(p, v.plain(p, x)))),  # vendor -> code -> fields
    "readings": lambda p, x: v.list_of(p, x, lambda p2, r: v.mapping(p2, v.plain(p2, r)), max_items=256),
    "escalation": _table({"count": _integer(1, 1000), "window_seconds": _seconds(366 * 86400.0, 1.0),
                          "action": v.string}),
    "min_healthy_fraction": lambda p, x: v.number(p, x, minimum=0, maximum=1),
    "reason_prefix": _of(v.string),
}


def _policy_overrides(path: str, value: Any) -> dict:
    """``health.policy``: overrides of the shipped policy (its keys, each of its shape)."""
    from hetero_exporter.health.detect import policy as policy_mod
    table = {k: POLICY.get(k, v.plain) for k in policy_mod._shipped()}
    return _section(path, value, table)


def _health(path: str, value: Any) -> dict:
    from hetero_exporter.health.detect import policy as policy_mod
    from hetero_exporter.health.plan import RemedyConfig
    doc = _section(path, value, _health_table())
    try:
        policy_mod.load(doc.get("policy"))
        RemedyConfig.from_mapping(doc)
    except ValueError as e:  # PolicyError and the remedy checks name their key themselves
        raise ValidationError("", str(e)) from None
    return doc


def _metric_names(path: str, value: Any) -> list:
    """``metrics.include`` / ``.exclude``: families (``accelerator_fan_speed_ratio``) or catalogue
    fields (``fan_speed_ratio``, ``temperature_{sensor}_celsius``, or one reading such as
    ``temperature_edge_celsius``); an unknown name is refused, naming it."""
    from hetero_exporter.model import fields as F
    from hetero_exporter.model import names as N
    names = v.list_of(path, value, v.string, max_items=1024)
    known_fields = {f.name for f in F.CATALOGUE}
    for i, name in enumerate(names):
        if name not in N.BY_NAME and name not in known_fields and F.lookup(name) is None:
            raise ValidationError(f"{path}[{i}]", f"unknown metric family or field {v.describe(name)}",
                                  "a family of docs/metrics.md or a field of its first column")
    return names


def _metric_profile(path: str, value: Any) -> str:
    """``metrics.profile``: fleet | standard (the default) | full (model/names.py PROFILES)."""
    from hetero_exporter.model import names as N
    return v.string(path, value, choices=N.PROFILES)


METRICS: dict[str, Check] = {"include": _metric_names, "exclude": _metric_names, "profile": _metric_profile}


_HEADER_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}"  # an HTTP token; gRPC metadata keys are these, lower-cased


def _otlp_endpoint(path: str, value: Any) -> str:
    """``http(s)://HOST[:PORT][/PATH]`` or, for gRPC, ``HOST:PORT``: no blanks or control characters."""
    from urllib.parse import urlsplit
    text = v.string(path, value, non_empty=True, max_length=2048, pattern=r"[^\s\x00-\x1f\x7f]+")
    url = urlsplit(text if "://" in text else "//" + text)
    try:
        port = url.port  # ValueError past 65535 or not a number
    except ValueError:
        port = -1
    if (url.scheme not in ("", "http", "https")) or not url.hostname or port == -1:
        raise ValidationError(path, f"not an OTLP endpoint: {v.describe(text)}",
                              "http://HOST:4318, https://HOST:4317, HOST:4317")
    return text


def _otlp_headers(path: str, value: Any) -> dict:
    out = {}
    for k, x in v.mapping(path, value, max_items=32).items():
        v.string(path, k, pattern=_HEADER_NAME)
        out[k.lower()] = v.string(v.join(path, k), x, max_length=8192, pattern=r"[^\r\n\x00]*")
    return out


def _otlp_resource(path: str, value: Any) -> dict:
    return {v.string(path, k, max_length=255, non_empty=True): v.string(v.join(path, k), x, max_length=4096)
            for k, x in v.mapping(path, value, max_items=64).items()}


OTLP_TLS: dict[str, Check] = {"insecure": v.boolean, "ca_file": _path, "cert_file": _path, "key_file": _path}
OTLP: dict[str, Check] = {
    "endpoint": _otlp_endpoint, "protocol": lambda p, x: v.string(p, x, choices=("grpc", "http")),
    "interval": _seconds(3600.0, 1.0), "timeout": _seconds(60.0, 0.1),
    "headers": _otlp_headers, "tls": lambda p, x: _section(p, x, OTLP_TLS), "resource": _otlp_resource,
}


def _otlp(path: str, value: Any) -> dict:
    """``otlp`` (opt-in): where and how the OTLP metrics exporter sends (docs/opentelemetry.md)."""
    doc = _section(path, value, OTLP)
    if "endpoint" not in doc:
        raise ValidationError(v.join(path, "endpoint"), "missing", "the OTLP receiver, e.g. http://otel-collector:4318")
    tls = doc.get("tls") or {}
    if ("cert_file" in tls) != ("key_file" in tls):
        raise ValidationError(v.join(path, "tls"), "cert_file and key_file go together", "both or neither")
    return doc


def _unix_socket(path: str, value: Any) -> str:
    """An absolute socket path or ``unix:///path`` (a unix socket path holds at most 107 bytes)."""
    text = v.string(path, value, non_empty=True, max_length=114, pattern=r"[^\s\x00-\x1f\x7f]+")
    name = text[len("unix://"):] if text.startswith("unix://") else text
    if not name.startswith("/") or len(name.encode()) > 107:
        raise ValidationError(path, f"not a unix socket path: {v.describe(text)}",
                              "an absolute path of at most 107 bytes, or unix:///PATH")
    return text


# nvsentinel (opt-in): the NVSentinel HealthEvent bridge (health/act/nvsentinel/settings.py
# NvSentinelSettings: the same keys, typed, with their defaults). max_outbox: at most
# episodes.MAX_CLOSING, what the state file may hold.
NVSENTINEL: dict[str, Check] = {
    "enabled": v.boolean, "socket": _unix_socket, "timeout": _seconds(600.0, 0.01),
    "retry_min_seconds": _seconds(3600.0, 0.01), "retry_max_seconds": _seconds(86400.0, 0.01),
    "max_outbox": _integer(1, 8192), "batch": _integer(1, 1000), "settle_snapshots": _integer(0, 1000),
}


def _nvsentinel(path: str, value: Any) -> dict:
    """``nvsentinel``: fault episodes and recoveries to NVSentinel's platform connector socket."""
    doc = _section(path, value, NVSENTINEL)
    if doc.get("retry_min_seconds", 1.0) > doc.get("retry_max_seconds", 60.0):
        raise ValidationError(v.join(path, "retry_min_seconds"), "above retry_max_seconds",
                              "retry_min_seconds <= retry_max_seconds (defaults 1 and 60)")
    return doc


def _socket_mode(path: str, value: Any) -> int:
    """Permission bits: an integer (YAML reads 0660 as octal) or a string of octal digits."""
    if isinstance(value, str):
        return int(v.string(path, value, pattern=r"0?[0-7]{3}"), 8)
    return int(v.number(path, value, minimum=0, maximum=0o777, integer=True))


# health_stream (opt-in): the local health stream (health/act/stream/settings.py
# HealthStreamSettings: the same keys, typed, with their defaults)
HEALTH_STREAM: dict[str, Check] = {
    "enabled": v.boolean, "socket": _unix_socket, "socket_mode": _socket_mode,
    "max_clients": _integer(1, 1024), "max_message_bytes": _integer(64 << 10, 64 << 20),
    "max_queue": _integer(1, 65536), "stall_seconds": _seconds(3600.0, 1.0),
}


def _scoring(path: str, value: Any) -> dict:
    # the extender and `score` take their settings from flags; nothing is read here yet
    return v.mapping(path, value, ())


TOP: dict[str, Check] = {
    "listen": v.host_port, "interval": interval,
    "node_name": lambda p, x: v.string(p, x, non_empty=True, max_length=253),
    "log_format": lambda p, x: v.string(p, x, choices=("json", "text")),
    "sysfs_root": _path, "proc_root": _path, "kubeconfig": _path, "default_timeout": timeout,
    "host_root": _path, "host_exec": lambda p, x: v.string(p, x, choices=host_tools.EXEC_MODES),
    "collectors": _collectors, "health": _health, "attribution": lambda p, x: _section(p, x, ATTRIBUTION),
    "scoring": _scoring, "kernel_log": lambda p, x: _section(p, x, KERNEL_LOG),
    "finops": lambda p, x: x,  # finops.parse checks it
    "metrics": lambda p, x: _section(p, x, METRICS),
    "otlp": _otlp,
    "nvsentinel": _nvsentinel,
    "health_stream": lambda p, x: _section(p, x, HEALTH_STREAM),
}
KNOWN_KEYS = set(TOP)


@dataclass(frozen=True)
class Config:
    listen: str = "0.0.0.0:9400"
    interval: float = 10.0
    node_name: Optional[str] = None
    log_format: str = "json"
    sysfs_root: str = "/sys"
    proc_root: str = "/proc"
    host_root: Optional[str] = None  # checked where it is used (host_root()): the mount is the node's
    host_exec: Optional[str] = None  # ld_library_path (default) | chroot
    kubeconfig: Optional[str] = None
    default_timeout: float = 5.0  # per-collector deadline, seconds
    collectors: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    health: Mapping[str, Any] = field(default_factory=dict)
    attribution: Mapping[str, Any] = field(default_factory=dict)
    scoring: Mapping[str, Any] = field(default_factory=dict)
    kernel_log: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, Any] = field(default_factory=dict)  # profile / include / exclude (exposition.selection)
    otlp: Mapping[str, Any] = field(default_factory=dict)  # empty: no OTLP export
    nvsentinel: Mapping[str, Any] = field(default_factory=dict)  # empty: no NVSentinel bridge
    health_stream: Mapping[str, Any] = field(default_factory=dict)  # empty: no local health stream
    finops: finops_mod.FinOps = field(default_factory=finops_mod.FinOps)

    def collector_settings(self, name: str) -> Mapping[str, Any]:
        return self.collectors.get(name) or {}

    def collector_timeout(self, name: str) -> float:
        t = self.collector_settings(name).get("timeout", self.default_timeout)
        return min(float(t), self.interval)  # a deadline past the interval would overlap cycles

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def host_root(flag: Optional[str], cfg: Config, environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """The host root (absolute): ``--host-root``, else the config's ``host_root``, else
    ``$HOST_ROOT``; None when none is set or it is /. It must be an existing directory:
    ConfigError naming where it came from otherwise."""
    for field_name, value in (("--host-root", flag), ("host_root", cfg.host_root),
                              (host_tools.HOST_ROOT_ENV, environ.get(host_tools.HOST_ROOT_ENV))):
        if value is None or (field_name == host_tools.HOST_ROOT_ENV and not value):
            continue
        v.string(field_name, value, non_empty=True)
        if not os.path.isdir(value):
            raise ConfigError(field_name, f"not an existing directory: {v.describe(value)}",
                              "the folder where the host's / is mounted (/host/root in the DaemonSet)")
        root = os.path.abspath(value)
        return None if root == "/" else root
    return None


def from_dict(doc: Any, source: str = "") -> Config:
    """A parsed config document -> Config; ConfigError (one line, from ``source``) otherwise."""
    try:
        if doc is None:
            doc = {}
        checked = _section("", doc, TOP)
        fin = finops_mod.parse(doc.get("finops"))
    except ValidationError as e:
        raise e.rebased(ConfigError, source) from None
    except finops_mod.FinOpsError as e:  # its messages name the finops.* key
        raise ConfigError("", str(e), source=source) from None
    checked.pop("finops", None)
    return Config(**{**checked, "finops": fin})


def load(path: Optional[str]) -> Config:
    if not path:
        return Config()
    try:
        text = v.read_text(path, MAX_CONFIG_BYTES, "config")
        doc = v.load_yaml(text)
    except OSError as e:
        raise ConfigError("", f"cannot read config {path}: {e.strerror}") from None
    except ValidationError as e:
        raise e.rebased(ConfigError) from None
    except ValueError as e:  # validate.NotYaml, or an integer too long to convert
        raise ConfigError("", f"not valid YAML: {e}", source=path) from None
    return from_dict(doc, path)
