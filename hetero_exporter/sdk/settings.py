"""A collector's settings: its keys of the config file's ``collectors.NAME`` section, typed.

A collector module names its class ``SETTINGS``: a frozen dataclass whose fields are the keys it
reads, each with its default and its check (``setting(default, check)``); a CLI collector's
extends ``ToolSettings`` (the keys the SDK reads for it). config.py checks a section with the
class of the collector it names, at load (a bad value or an unknown key: exit 2, one line naming
``collectors.NAME.KEY``); the collector reads the same section through the same class
(``XSettings.of(options.settings)``), so no key is read as a string where it is used.

The agent's keys of a section are not a collector's (config.COLLECTOR_SETTINGS): ``enabled``,
``timeout``, and ``host_root`` / ``host_exec`` / ``sysfs_root``, which the agent folds into the
collector's ``CollectorOptions.host`` (sdk/contract.py HostPaths).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, TypeVar, Union

from hetero_exporter import validate as v

Check = Callable[[str, Any], Any]

TIMEOUT_MIN, TIMEOUT_MAX = 0.01, 86400.0  # seconds: a deadline must be finite and positive
CADENCE_MAX = 7 * 86400.0  # seconds between slow per-device calls (0 = off)


def timeout(path: str, value: Any) -> float:
    """A deadline in seconds: finite and positive."""
    return v.number(path, value, minimum=TIMEOUT_MIN, maximum=TIMEOUT_MAX, unit="seconds")


def seconds(maximum: float, minimum: float = 0.0) -> Check:
    return lambda p, x: v.number(p, x, minimum=minimum, maximum=maximum, unit="seconds")


def integer(minimum: int, maximum: int) -> Check:
    return lambda p, x: int(v.number(p, x, minimum=minimum, maximum=maximum, integer=True))


def a_path(p: str, x: Any) -> str:
    return v.string(p, x, non_empty=True)


def tool_args(p: str, x: Any) -> Union[str, list[str]]:
    """A tool's options: one string (split like a shell) or a list of strings."""
    return v.string(p, x) if isinstance(x, str) else v.list_of(p, x, v.string, max_items=64)


def cadences(p: str, x: Any) -> dict[str, float]:
    """Call name -> seconds between calls (0 = off)."""
    return {k: seconds(CADENCE_MAX)(v.join(p, k), c) for k, c in v.mapping(p, x, max_items=64).items()}


def setting(default: Any, check: Check, *, factory: Optional[Callable[[], Any]] = None) -> Any:
    """A settings field: its default (``factory`` for a mutable one) and the check of its key."""
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={"check": check})
    return dataclasses.field(default=default, metadata={"check": check})


S = TypeVar("S", bound="CollectorSettings")


@dataclass(frozen=True)
class CollectorSettings:
    """The keys a collector reads (none here); subclasses add theirs with ``setting``."""

    @classmethod
    def checks(cls) -> dict[str, Check]:
        """Key -> its check (config.py checks a section with these)."""
        return {f.name: f.metadata["check"] for f in dataclasses.fields(cls)}

    @classmethod
    def parse(cls: type[S], section: Mapping[str, Any], where: str = "settings") -> S:
        """The section's keys checked (ValidationError naming ``where.KEY``: an unknown key, a
        bad value); a null value is the default."""
        table = cls.checks()
        doc = v.mapping(where, section, table)
        return cls(**{k: table[k](v.join(where, k), x) for k, x in doc.items() if x is not None})

    @classmethod
    def of(cls: type[S], given: "Union[S, Mapping[str, Any], None]") -> S:
        """``given`` as this class: itself, or the keys of a section (``CollectorOptions.settings``)
        that it reads, parsed; the others are another collector's (a binding collector's section
        is handed to its CLI fallback whole)."""
        if isinstance(given, cls):
            return given
        if isinstance(given, CollectorSettings):  # another collector's class: the fields both read
            given = dataclasses.asdict(given)
        table = cls.checks()
        return cls.parse({k: x for k, x in (given or {}).items() if k in table})


@dataclass(frozen=True)
class ToolSettings(CollectorSettings):
    """What the SDK reads for a CLI collector (sdk/cli_collector.py): ``path`` the tool (else
    looked for: find_tool), ``parallel_calls`` per-device calls at once, ``budget_fraction`` of
    the collector's deadline its calls may take (the rest is the sampler's margin)."""

    path: Optional[str] = setting(None, a_path)
    parallel_calls: int = setting(4, integer(1, 64))
    budget_fraction: float = setting(0.9, lambda p, x: v.number(p, x, minimum=0.05, maximum=1.0))


@dataclass(frozen=True)
class BindingSettings(ToolSettings):
    """A binding collector's: ``fallback`` to its CLI collector when the binding cannot load
    (which then reads the ToolSettings keys of the same section)."""

    fallback: bool = setting(True, v.boolean)


