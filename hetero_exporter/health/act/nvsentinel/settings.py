"""``nvsentinel``: the config section of the HealthEvent bridge, typed, with its defaults.

config.py checks the file (``config.NVSENTINEL``: every key, its type and range) and keeps the
section as the mapping it read; ``NvSentinelSettings.parse`` makes it this dataclass. The field
names are the config keys (tests/test_nvsentinel.py keeps them equal). Opt-in: the bridge runs
when the section sets any key, unless ``enabled: false`` (``parse`` gives None then).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Optional

DEFAULT_SOCKET = "/var/run/nvsentinel.sock"  # NVSentinel's platform connector (a hostPath socket)


@dataclass(frozen=True)
class NvSentinelSettings:
    """``nvsentinel``: fault episodes and recoveries as NVSentinel HealthEvents."""

    enabled: bool = True  # false: no bridge (the section may stay in the file)
    socket: str = DEFAULT_SOCKET  # the platform connector's unix socket (a path, or unix:///path)
    timeout: float = 5.0  # seconds: the deadline of one send
    retry_min_seconds: float = 1.0  # first wait after a failed send, doubled per failure
    retry_max_seconds: float = 60.0  # the longest wait between tries while the socket is absent/down
    max_outbox: int = 1024  # events waiting to be sent; beyond it the oldest is dropped (and counted)
    batch: int = 64  # events per call
    # judged snapshots after a (re)start during which an episode read back from the state file
    # is not closed: the judge starts without its debounce history, so a warning still present
    # takes up to ``debounce.n`` polls to be confirmed again (health/detect/policy.yaml)
    settle_snapshots: int = 5

    @classmethod
    def parse(cls, raw: Optional[Mapping[str, Any]]) -> Optional["NvSentinelSettings"]:
        """The section as config.py checked it (unknown keys were refused there); None where it
        is absent, empty or says ``enabled: false`` (no bridge, and grpc never imported)."""
        if not raw or raw.get("enabled") is False:
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names and v is not None})

    @property
    def target(self) -> str:
        """The gRPC target of ``socket`` (``unix:///var/run/nvsentinel.sock``)."""
        s = self.socket
        if s.startswith("unix:"):
            return s
        return f"unix://{s}" if s.startswith("/") else f"unix:{s}"
