"""``health_stream``: the config section of the local health stream, typed, with its defaults.

config.py checks the file (``config.HEALTH_STREAM``: every key, its type and range) and keeps the
section as the mapping it read; ``HealthStreamSettings.parse`` makes it this dataclass. The field
names are the config keys (tests/test_health_stream.py keeps them equal). Off by default: the
stream serves when the section sets any key, unless ``enabled: false`` (``parse`` gives None then).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Optional

DEFAULT_SOCKET = "/var/run/hetero-exporter/health.sock"  # its directory: a hostPath the consumers mount
DEFAULT_SOCKET_MODE = 0o660  # owner and group (the consumers' group) may connect, no one else
MIN_MESSAGE_BYTES = 64 << 10  # one device's health (16 reasons of bounded text) always fits


@dataclass(frozen=True)
class HealthStreamSettings:
    """``health_stream``: every device's verdict and the fault episodes over a unix socket."""

    enabled: bool = True  # false: no stream (the section may stay in the file)
    socket: str = DEFAULT_SOCKET  # the socket the agent creates (a path, or unix:///path)
    socket_mode: int = DEFAULT_SOCKET_MODE  # its permission bits (YAML 0660, or the string "0660")
    max_clients: int = 16  # watches served at once (both methods); one more is refused (RESOURCE_EXHAUSTED)
    max_message_bytes: int = 4 << 20  # a larger health update is split (DeviceHealthUpdate.more)
    max_queue: int = 256  # device events waiting for one client; past it the client is dropped
    stall_seconds: float = 30.0  # a client that reads nothing this long while an update waits is dropped

    @classmethod
    def parse(cls, raw: Optional[Mapping[str, Any]]) -> Optional["HealthStreamSettings"]:
        """The section as config.py checked it (unknown keys were refused there); None where it
        is absent, empty or says ``enabled: false`` (no stream, and grpc never imported)."""
        if not raw or raw.get("enabled") is False:
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names and v is not None})

    @property
    def path(self) -> str:
        """The socket's file system path (``socket`` without ``unix://``)."""
        return self.socket[len("unix://"):] if self.socket.startswith("unix://") else self.socket
