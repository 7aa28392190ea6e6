"""Scenarios by built-in name or path, with each vendor's uuid prefix from its spec.

The types and the parsing are ``model.scenario`` (the model knows no vendor); this module adds
what needs the vendor registry and the shipped files: the built-in scenarios
(``simulate/scenarios/*.yaml``), the uuid prefix of each vendor's simulated devices, and the
check that every vendor a scenario names is a known spec (one line naming the entry, exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from hetero_exporter import vendors
from hetero_exporter.model import scenario as model_scenario
from hetero_exporter.model.scenario import DeviceSpec, Scenario, ScenarioError, parse_size  # noqa: F401 (the API)

BUILTIN_DIR = Path(__file__).with_name("scenarios")


def from_dict(doc: Any, source: str = "") -> Scenario:
    """A parsed scenario document -> Scenario, its devices' uuids with their vendors' prefixes."""
    return model_scenario.from_dict(doc, source, vendors.uuid_prefix, known_vendors=vendors.specs())


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def load(ref: Optional[str] = None) -> Scenario:
    """A scenario by file path, or by built-in name (default: ``default``); at most
    model.scenario.MAX_SCENARIO_BYTES are read."""
    ref = ref or "default"
    path = Path(ref)
    if not path.is_file():
        path = BUILTIN_DIR / f"{ref}.yaml"
        if not path.is_file():
            raise ScenarioError("", f"no scenario {ref!r}: not a file, and not one of the built-in scenarios",
                                builtin_names())
    return model_scenario.load_file(str(path), vendors.uuid_prefix, known_vendors=vendors.specs())
