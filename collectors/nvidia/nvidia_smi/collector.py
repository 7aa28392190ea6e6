"""NVIDIA GPUs through ``nvidia-smi -q -x``, on the SDK's CLI collector.

One call per cycle (``nvidia-smi -q -x``) through the shared runner (deadline, process-group
kill, output cap); the XML is read by the pure parser in ``parse.py``. Conditions the readings
show (row remap pending, PCIe width downgrade, a recovery action...) are faults counted once
per episode; a GPU seen before that nvidia-smi no longer lists is reported failed under its
pinned uuid (``gpu-lost``). It is what the NVML collector falls back to when NVML cannot be
loaded but the CLI works, and is selectable as ``--collector.nvidia_smi``. When simulating,
the fake NVML renders the scenario as nvidia-smi XML in-process (nvml/fake.py render_smi_xml).
On its detail schedule (``details.py``: slow calls, not every cycle) it adds the NVLink speeds
(``nvlink -s``) and the MIG partition inventory (``mig -lgip/-lgipp/-lgi/-lci``) to its GPUs.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Mapping, Optional, Union

from hetero_exporter.collectors.nvidia import SPEC
from hetero_exporter.collectors.nvidia import common as C
from hetero_exporter.collectors.nvidia.nvidia_smi import details, dmon, listing, mig_listing, nvlink_status, pmon, table, topo
from hetero_exporter.collectors.nvidia.nvidia_smi import parse as reports
from hetero_exporter.collectors.nvidia.nvidia_smi.parse import (ARGV, FIELD_MAP, TOOL,  # noqa: F401
                                                                parse_devices, readings_of, value_of,
                                                                with_health)
from hetero_exporter.model import DeviceSample, NodeSnapshot
from hetero_exporter.sdk.cli_collector import CliCollector, find_tool
from hetero_exporter.sdk.contract import CollectorOptions, ParseError, Unavailable
from hetero_exporter.sdk.runner import CliResult
from hetero_exporter.sdk.settings import ToolSettings

__all__ = ["NvidiaSmiCollector", "create", "parse", "parse_devices", "readings_of", "value_of", "FIELD_MAP",
           "TOOL", "ARGV"]

Source = Callable[[float], str]  # timeout seconds -> the XML text (tests, simulation)
SETTINGS = ToolSettings  # its keys of collectors.nvidia_smi (sdk/settings.py)
_TOOL = next(t for t in SPEC.tools if t.name == "nvidia-smi")


def _source_runner(source: Source) -> Callable[..., CliResult]:
    """A runner (the sdk runner's signature) over a function that returns the XML."""
    def run(argv: Any, timeout: float, *, env: Optional[Mapping[str, str]] = None) -> CliResult:
        return CliResult(tuple(argv), source(timeout), "", 0, 0.0)
    return run


class NvidiaSmiCollector(CliCollector):
    name = "nvidia_smi"
    vendor = "nvidia"
    tool = "nvidia-smi"
    summary_args = ARGV[1:]
    lost_code = "gpu-lost"

    def __init__(self, exe: Union[str, Source] = "nvidia-smi", *, clock: Callable[[], float] = time.time,
                 timeout: float = 5.0, detail_intervals: Optional[Mapping[str, float]] = None, **kwargs: Any):
        if callable(exe):  # the XML from a function: tests and the simulation (no detail calls)
            kwargs["runner"] = _source_runner(exe)
            exe = "nvidia-smi"
            detail_intervals = {} if detail_intervals is None else detail_intervals
        super().__init__(exe, clock=clock, timeout=timeout, **kwargs)
        self._conditions = C.ConditionTracker(self.episodes.ledger, TOOL)
        # nvlink -s and the MIG listings: slow, node-wide, on their own cadence (details.py)
        self.details = details.Details(self.cli.call, self.interval, detail_intervals)

    def probe(self) -> None:
        """Run the tool once; Unavailable when it cannot be run or prints no GPU."""
        try:
            devices, _ = self.parse_summary(self.cli.call(self.summary_args, time.monotonic() + self.budget))
        except ParseError as e:
            raise Unavailable(str(e)) from None
        except Exception as e:  # noqa: BLE001 - any failure means "cannot stand in"
            raise Unavailable(f"{type(e).__name__}: {e}") from None
        if not devices:
            raise Unavailable(f"{TOOL} lists no GPU")

    def parse_summary(self, text: str) -> tuple[list[DeviceSample], Optional[float]]:
        return parse_devices(text)

    def devices(self, parsed: tuple[list[DeviceSample], Optional[float]], now: float,
                deadline: float) -> list[DeviceSample]:
        out, parent = [], None
        self.details.refresh(now, deadline)
        for d in parsed[0]:
            if d.identity.parent is None:
                found = self._conditions.update(d.identity.uuid, C.conditions(d.readings), now)
                d = with_health(self.details.apply(d, now), found, self.episodes.faults(d.identity.uuid),
                                timestamp=now)
                parent = d
            else:  # a MIG instance is as healthy as its GPU
                d = with_health(d, [], (), parent.health if parent is not None else None, timestamp=now)
            out.append(d)
        return out


# nvidia-smi's human layouts, each told by its structure (the module's looks_like), in an order
# where none can be mistaken for a later one; anything else goes to the report readers.
# ``nvlink`` before ``list``: both open with "GPU N: <name> (UUID: ...)".
LAYOUTS = (("mig", mig_listing), ("table", table), ("topo", topo), ("nvlink", nvlink_status), ("list", listing),
           ("pmon", pmon), ("dmon", dmon))


def layout(text: str) -> str:
    """Which nvidia-smi output ``text`` is: ``mig`` (``mig -lgip`` / ``-lgipp`` / ``-lgi`` /
    ``-lci``), ``table`` (the default, boxed), ``topo`` (``topo -m``), ``nvlink`` (``nvlink -s``),
    ``list`` (``-L``), ``pmon``, ``dmon``, else ``report`` (``-q -x`` XML, ``-q`` text,
    ``--query-*`` CSV: parse.py tells those apart)."""
    if text.lstrip("\ufeff \t\r\n").startswith("<"):
        return "report"
    body = text.lstrip("\ufeff")  # leading blanks kept: topo -m indents its header
    return next((name for name, mod in LAYOUTS if mod.looks_like(body)), "report")


def parse(text: str) -> Union[NodeSnapshot, mig_listing.MigInventory]:
    """``hetero-exporter parse nvidia-smi FILE``: any of nvidia-smi's outputs as a snapshot,
    the reader picked by structure (``layout``): the default table, ``topo -m``, ``nvlink -s``,
    ``-L``, ``dmon``, ``pmon``, or the reports parse.py reads (``-q -x``, ``-q``, ``--query-gpu`` /
    ``--query-compute-apps`` CSV); the MIG listings as the GPUs' partition inventory
    (mig_listing.MigInventory: profiles, placements, instances)."""
    if not isinstance(text, str):
        return reports.parse(text)  # its ParseError says what it expected
    kind = layout(text)
    if kind == "report":
        return reports.parse(text)
    return dict(LAYOUTS)[kind].parse(text.lstrip("\ufeff"))


def create(options: CollectorOptions) -> NvidiaSmiCollector:
    """The nvidia-smi collector: the real tool (``settings.path``, else ``nvidia-smi`` on PATH
    or where the driver installs it) or, when simulating, the scenario rendered as nvidia-smi
    XML by the fake NVML."""
    settings = ToolSettings.of(options.settings)
    common: dict[str, Any] = dict(clock=options.clock, timeout=options.timeout_seconds,
                                  interval=options.interval_seconds, settings=settings, host=options.host)
    if options.scenario is not None:
        from hetero_exporter.collectors.nvidia.nvml.fake import FakeNvml, render_smi_xml
        fake = FakeNvml(options.scenario, options.clock)
        fake.nvmlInit()
        collector = NvidiaSmiCollector(lambda _timeout: render_smi_xml(fake), **common)
    else:
        exe = find_tool(options.host, _TOOL.name, os.pathsep.join(_TOOL.dirs), _TOOL.why_missing, path=settings.path)
        collector = NvidiaSmiCollector(exe, **common)
    collector.persist_identities(options)  # built without sdk build(): as it would
    return collector
