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

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, runtime_checkable

from hetero_exporter.model import DeviceSample
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
class CollectorOptions:
    """What a collector is built with. ``settings`` is the collector's own section of the
    config file; ``scenario`` is a model.scenario.Scenario when simulating."""

    node_name: str = ""
    interval_seconds: float = 10.0
    timeout_seconds: float = 5.0
    settings: Mapping[str, Any] = field(default_factory=dict)
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

    def identity_memory(self, collector: str) -> IdentityMemory:
        """The collector's pinned identities, over its file in ``state_dir``."""
        return self.identity.memory(identity_file(self.state_dir, collector))


@runtime_checkable
class Collector(Protocol):
    name: str
    vendor: str

    def collect(self) -> Sequence[DeviceSample]: ...
