"""Agent configuration: defaults < config file (``--config FILE``, YAML) < command line.

Example (every key optional)::

    listen: "0.0.0.0:9400"
    interval: 10            # seconds between collection cycles
    node_name: gpu-node-7   # else --node-name, NODE_NAME, host name
    log_format: json        # json | text
    sysfs_root: /sys        # PCI enumeration (a host mount in a container)
    proc_root: /proc        # process attribution (hostPID)
    collectors:
      <collector>: {enabled: true, timeout: 5}   # a collector's name (``list-collectors``)
      <other>: {enabled: false}
    health: {mode: observe}  # observe | dry-run | enforce; see the health section of README
    kernel_log:             # the kernel log as a health source (README: Kernel log)
      enabled: true         # false: not followed
      path: /dev/kmsg       # or a text log followed like tail -F (/var/log/kern.log)
      state_dir: /var/lib/hetero-exporter   # cursor + boot id, so a restart neither replays nor misses
      max_records_per_second: 5000
      max_pending: 1024     # distinct (vendor, device, code) events held between cycles
      dedup_seconds: 60     # a fault the vendor API also reports within this counts once
    finops:                 # prices for accelerator_price_per_hour (README: FinOps)
      currency: USD
      reference: A100-SXM4-80GB   # a profile model; it must have a price below
      prices:               # profile model -> price per device-hour; an EXAMPLE, override it
        A100-SXM4-80GB: 2.0 # a model without a price: reference price x its profile's cost_weight
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from hetero_exporter import finops as finops_mod

KNOWN_KEYS = {"listen", "interval", "node_name", "log_format", "sysfs_root", "proc_root",
              "collectors", "health", "kubeconfig", "attribution", "scoring", "default_timeout",
              "kernel_log", "finops"}
KERNEL_LOG_KEYS = {"enabled", "path", "state_dir", "max_records_per_second", "max_pending", "dedup_seconds",
                   "initial_bytes", "retry_seconds"}


class ConfigError(ValueError):
    """The configuration cannot be used (message names the key)."""


@dataclass(frozen=True)
class Config:
    listen: str = "0.0.0.0:9400"
    interval: float = 10.0
    node_name: Optional[str] = None
    log_format: str = "json"
    sysfs_root: str = "/sys"
    proc_root: str = "/proc"
    kubeconfig: Optional[str] = None
    default_timeout: float = 5.0  # per-collector deadline, seconds
    collectors: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    health: Mapping[str, Any] = field(default_factory=dict)
    attribution: Mapping[str, Any] = field(default_factory=dict)
    scoring: Mapping[str, Any] = field(default_factory=dict)
    kernel_log: Mapping[str, Any] = field(default_factory=dict)
    finops: finops_mod.FinOps = field(default_factory=finops_mod.FinOps)

    def collector_settings(self, name: str) -> Mapping[str, Any]:
        return self.collectors.get(name) or {}

    def collector_timeout(self, name: str) -> float:
        t = self.collector_settings(name).get("timeout", self.default_timeout)
        return min(float(t), self.interval)  # a deadline past the interval would overlap cycles

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def load(path: Optional[str]) -> Config:
    if not path:
        return Config()
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: the config is a YAML mapping")
    unknown = sorted(set(doc) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown keys {unknown}; known: {sorted(KNOWN_KEYS)}")
    try:
        cfg = Config(
            listen=str(doc.get("listen", Config.listen)),
            interval=float(doc.get("interval", Config.interval)),
            node_name=doc.get("node_name"),
            log_format=str(doc.get("log_format", Config.log_format)),
            sysfs_root=str(doc.get("sysfs_root", Config.sysfs_root)),
            proc_root=str(doc.get("proc_root", Config.proc_root)),
            kubeconfig=doc.get("kubeconfig"),
            default_timeout=float(doc.get("default_timeout", Config.default_timeout)),
            collectors={str(k): dict(v or {}) for k, v in (doc.get("collectors") or {}).items()},
            health=dict(doc.get("health") or {}),
            attribution=dict(doc.get("attribution") or {}),
            scoring=dict(doc.get("scoring") or {}),
            kernel_log=dict(doc.get("kernel_log") or {}))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{path}: {e}") from None
    if cfg.interval <= 0:
        raise ConfigError(f"{path}: interval must be positive")
    if cfg.log_format not in ("json", "text"):
        raise ConfigError(f"{path}: log_format must be json or text")
    unknown = sorted(set(cfg.kernel_log) - KERNEL_LOG_KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown keys kernel_log.{unknown}; known: {sorted(KERNEL_LOG_KEYS)}")
    try:
        cfg = dataclasses.replace(cfg, finops=finops_mod.parse(doc.get("finops")))
    except finops_mod.FinOpsError as e:
        raise ConfigError(f"{path}: {e}") from None
    return cfg
