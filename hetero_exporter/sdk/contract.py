"""The contract between the core and a vendor collector.

A collector is any object with ``name``, ``vendor`` and ``collect() -> list[DeviceSample]``
(and optionally ``close()``). A collector module exposes ``create(options) -> Collector``;
with ``options.scenario`` set it must drive its own fake backend (the real collector code
over a fake binding or fake CLI), so simulation always runs the real collector.

Errors a collector raises tell the sampler what happened:
- ``Unavailable``: the binding or tool is missing or cannot start (library absent, driver
  not loaded). The vendor is off for this cycle; the others go on.
- ``ParseError``: the vendor printed something we cannot read. Parsers raise it (never a
  bare IndexError/KeyError) with the tool, the line and what was expected.
- anything else: a bug or a vendor failure; reported with its type and message.
A device-level failure (one GPU lost) is not an exception: the collector returns that
device with ``health.state == "failed"`` and a Fault, and the other devices normally.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Protocol, Sequence, runtime_checkable

from hetero_exporter.model import DeviceSample
from hetero_exporter.sdk.host_tools import EXEC_MODES
from hetero_exporter.sdk.identity import IdentityMemory, IdentityStore, identity_file


class Unavailable(RuntimeError):
    """The vendor binding or tool cannot be used on this node (reason in the message)."""


class ParseError(ValueError):
    """Vendor output that does not have the expected structure.

    ``tool`` names the command (``<tool> info``), ``line`` the 1-based line where the
    problem was found (None when it concerns the whole document)."""

    def __init__(self, tool: str, message: str, line: Optional[int] = None):
        self.tool = tool
        self.line = line
        where = f" (line {line})" if line is not None else ""
        super().__init__(f"{tool}: {message}{where}")


@dataclass(frozen=True)
class HostPaths:
    """Where the host's files are, seen from the agent (the DaemonSet mounts the host's / at
    /host/root and its /sys at /host/sys). ``root``: the host's / (None: this / is the host's;
    normalized: absolute, and / itself is None); ``exec_mode``: how a tool found below ``root``
    runs (host_tools.EXEC_MODES); ``sysfs`` / ``proc``: the host's /sys and /proc."""

    root: Optional[str] = None
    exec_mode: str = EXEC_MODES[0]
    sysfs: str = "/sys"
    proc: str = "/proc"

    def __post_init__(self) -> None:
        root = os.path.abspath(self.root) if self.root else None
        object.__setattr__(self, "root", None if root == "/" else root)

    @property
    def root_dir(self) -> str:
        """The host's / as a folder here: ``root``, else /."""
        return self.root or "/"

    def or_root(self, root: str) -> "HostPaths":
        """These paths, with ``root`` when none is set (a simulated host's fake root: a
        configured one wins)."""
        return self if self.root else dataclasses.replace(self, root=root)


class IdentityMemories:
    """Each collector's pinned identities, read from its file under ``state_dir`` once and kept
    (thread-safe): the agent reads those of every enabled collector before the first cycle
    (``restore``), and a collector, when it is built, gets its memory from here
    (``CollectorOptions.identity_memory``), however often it is built."""

    def __init__(self, store: IdentityStore, state_dir: Optional[str]) -> None:
        self._store, self._state_dir = store, state_dir
        self._kept: dict[str, IdentityMemory] = {}
        self._lock = threading.Lock()

    def restore(self, collectors: Iterable[str]) -> None:
        for name in collectors:
            self.memory(name)

    def memory(self, collector: str) -> IdentityMemory:
        with self._lock:
            kept = self._kept.get(collector)
            if kept is None:
                kept = self._kept[collector] = self._store.memory(identity_file(self._state_dir, collector))
            return kept


@dataclass(frozen=True)
class CollectorOptions:
    """What a collector is built with. ``settings`` is the collector's own keys of its section
    of the config file (checked at load; a collector reads them through its settings class,
    sdk/settings.py); ``host`` where the host's tools, libraries and files are; ``scenario`` is
    a model.scenario.Scenario when simulating."""

    node_name: str = ""
    interval_seconds: float = 10.0
    timeout_seconds: float = 5.0
    settings: Mapping[str, Any] = field(default_factory=dict)
    host: HostPaths = HostPaths()
    scenario: Any = None
    clock: Callable[[], float] = time.time
    workdir: Optional[str] = None  # where fake executables / fake roots may be written
    # Call to ask the sampler for a cycle now (e.g. a driver event thread saw a device fault):
    wake: Callable[[], None] = lambda: None
    # Where state that must survive an agent restart is kept (pinned identities: sdk/identity.py);
    # None keeps it in memory only
    state_dir: Optional[str] = None
    # Whether that state may be written, and what tells a lost device from a removed one
    identity: IdentityStore = field(default_factory=IdentityStore)
    # The agent's: every collector's memory read once, before the first cycle (None: read when built)
    memories: Optional[IdentityMemories] = None

    def identity_memory(self, collector: str) -> IdentityMemory:
        """The collector's pinned identities, over its file in ``state_dir``."""
        if self.memories is not None:
            return self.memories.memory(collector)
        return self.identity.memory(identity_file(self.state_dir, collector))


@runtime_checkable
class Collector(Protocol):
    name: str
    vendor: str

    def collect(self) -> Sequence[DeviceSample]: ...
