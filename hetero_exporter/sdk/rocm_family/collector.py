"""The rocm-smi family's collector: a member tool over the SDK's CliCollector.

For nodes where only the CLI exists (ROCm before amdsmi, a fork's toolkit). One ``TOOL --json``
summary per cycle (parse.py, devices.py), ``--showpidgpus`` when processes must be placed on
one of several devices, and the topology (``--showtopo``, the ``xgmi`` fabric links) at first
sight, then every ``topo_interval`` seconds (default 600; 0: never; sdk.schedule): with our own
option set it rides on the summary call, otherwise it is a call of its own. Identities are
pinned (a device the tool stops listing is reported failed under its uuid, fault ``missing``);
PCIe replay increases are faults. ``runtime_version``: the vendor's runtime from the install's
version file below the host root (the vendor's versions hook, sdk.versions).

Settings: ``path``, ``args`` (the summary's options), ``cli_timeout`` (seconds for a cycle's
calls), ``topo_interval``, ``parallel_calls``. A vendor package subclasses ``SmiCliCollector``
with its ``Member`` and builds it with ``create``.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import shlex
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from hetero_exporter.sdk import versions as sdk_versions
from hetero_exporter.sdk.rocm_family import FULL_ARGS, MINIMAL_ARGS, TOPO_ARGS, Member
from hetero_exporter.sdk.rocm_family.devices import PCIE_REPLAY, build_devices
from hetero_exporter.sdk.rocm_family.identity import unique_id
from hetero_exporter.sdk.rocm_family.parse import Hop, Report, parse_json, parse_pid_gpus, parse_topology
from hetero_exporter.model import DeviceSample, Health
from hetero_exporter.sdk import runner as vendor_cli
from hetero_exporter.sdk.cli_collector import CliCollector, build, table_fault
from hetero_exporter.sdk.contract import CollectorOptions, HostPaths
from hetero_exporter.sdk.schedule import DEFAULT_TOPO_INTERVAL, DetailSchedule
from hetero_exporter.sdk.settings import CADENCE_MAX, ToolSettings, seconds, setting, timeout, tool_args

log = logging.getLogger(__name__)
_TOPO = ("node", "topo")  # the schedule's job: the node-wide --showtopo


@dataclass(frozen=True)
class SmiSettings(ToolSettings):
    """``collectors.<name>`` of a member tool: ``args`` the summary call's options (a string
    split like a shell, or a list; default FULL_ARGS, falling back to MINIMAL_ARGS),
    ``cli_timeout`` seconds a call may take (default: budget_fraction of the deadline),
    ``topo_interval`` seconds between ``--showtopo`` calls (0: never)."""

    args: "str | list[str] | None" = setting(None, tool_args)
    cli_timeout: Optional[float] = setting(None, timeout)
    topo_interval: float = setting(DEFAULT_TOPO_INTERVAL, seconds(CADENCE_MAX))


class SmiCliCollector(CliCollector):
    """A member tool over the SDK (a subclass sets ``member``, ``name``, ``vendor`` and ``tool``)."""

    member: Member
    lost_code = "missing"
    settings_type = SmiSettings
    settings: SmiSettings

    def __init__(self, exe: str, **kw: Any):
        super().__init__(exe, **kw)
        args = self.settings.args
        if isinstance(args, str):  # "args: --json --showtemp" in the config file
            args = shlex.split(args)
        self._args = tuple(args) if args else FULL_ARGS
        self._fallback = not args  # only our own option set falls back to the minimal one
        if self.settings.cli_timeout is not None:
            self.budget = max(0.1, self.settings.cli_timeout)
        self.topo_interval = self.settings.topo_interval
        # the topology at first sight, then at its cadence (or at once when the device count changes)
        self.topo_schedule = DetailSchedule({"topo": self.topo_interval}, self.interval, 1)
        self.host_root = self.host.root_dir
        self._topology: Optional[dict[frozenset, Hop]] = None
        self._topo_cards: Optional[int] = None
        self._want_topo = False
        self._replays: dict[str, int] = {}
        self.runtime_version = self._read_runtime()

    # ------------------------------------------------------------------ hooks
    @property
    def summary_args(self) -> Sequence[str]:  # type: ignore[override]  # a class attribute in the base
        if self._want_topo and self._args == FULL_ARGS:
            return (*FULL_ARGS[:-1], "--showtopo", FULL_ARGS[-1])
        return self._args

    def parse_summary(self, text: str) -> Report:
        return parse_json(text, self.tool)

    def devices(self, parsed: Report, now: float, deadline: float) -> list[DeviceSample]:
        self._refresh_topology(parsed, now, deadline)
        pid_gpus = None
        if len(parsed.cards) > 1 and any(k.strip().upper().startswith("PID") for k in parsed.system):
            try:
                pid_gpus = parse_pid_gpus(self.cli.call(("--showpidgpus",), deadline))
            except (vendor_cli.CliError, TimeoutError) as e:
                log.debug("%s --showpidgpus failed: %s", self.tool, e)
        stable = self._stable_uuids(parsed)
        out = []
        for d in build_devices(parsed, now, pid_gpus, self._topology or {}, self.runtime_version, member=self.member):
            d = _with_uuid(d, stable)
            self._replay_fault(d, now)
            out.append(DeviceSample(identity=d.identity, timestamp=now, readings=d.readings, health=Health("ok"),
                                    faults=self.episodes.faults(d.identity.uuid), processes=d.processes,
                                    links=d.links))
        return out

    # ------------------------------------------------------------------ the cycle
    def collect(self) -> list[DeviceSample]:
        self._want_topo = bool(self.topo_schedule.due([_TOPO], self.clock()))
        try:
            return super().collect()
        except vendor_cli.CliError as e:
            if not (self._fallback and "exit status 2" in str(e)):
                raise
            log.info("%s rejected an option (%s); using the minimal option set", self.tool, e)
            self._args, self._fallback = MINIMAL_ARGS, False
            return super().collect()

    def _read_runtime(self) -> Optional[str]:
        # the vendor's own hook: the family serves several vendors
        return sdk_versions.discover(self.vendor, self.host_root).runtime_version

    def _refresh_topology(self, report: Report, now: float, deadline: float) -> None:
        """Keep the topology of the last request; ask again when due (or when the device count
        changed: the DRM indexes it names may have moved)."""
        if self._topo_cards is not None and self._topo_cards != len(report.cards) and self.topo_interval > 0:
            self._topology, self._want_topo = None, True
        if not self._want_topo:
            return
        self.topo_schedule.done(_TOPO, now)
        self._topo_cards = len(report.cards)
        self.runtime_version = self._read_runtime()  # an upgrade shows at the same slow cadence
        pairs = parse_topology(report.system)
        if not pairs and self.summary_args == self._args and len(report.cards) > 1:
            try:
                pairs = parse_topology(parse_json(self.cli.call(TOPO_ARGS, deadline), self.tool).system)
            except (vendor_cli.CliError, TimeoutError, ValueError) as e:  # ParseError is a ValueError
                log.debug("%s --showtopo failed: %s", self.tool, e)
                return
        self._topology = pairs

    def _stable_uuids(self, report: Report) -> dict[int, str]:
        """Card index -> pinned uuid for cards printed without their unique id (a GPU going bad
        may answer N/A): the uuid pinned for the same PCI address (else index) is kept."""
        out = {}
        for card in report.cards:
            keys = {k.strip().lower(): v for k, v in card.raw.items()}
            if unique_id(keys.get("unique id")):
                continue
            pci = keys.get("pci bus")
            known = self.identities.recall(pci_address=pci) if pci else self.identities.recall(index=card.index)
            if known is not None:
                out[card.index] = known.uuid
        return out

    def _replay_fault(self, d: DeviceSample, now: float) -> None:
        v = d.value(PCIE_REPLAY)
        if v is None:
            return
        uuid, n = d.identity.uuid, int(v)
        prev = self._replays.get(uuid)
        self._replays[uuid] = n
        if prev is not None and n > prev:
            fault = table_fault(self.vendor, "pcie-replay", f"{self.tool}: {d.identity.kind} {d.identity.index} "
                                                          f"({uuid}) PCIe replays {prev} -> {n}", self.tool)
            self.episodes.ledger.record(uuid, fault, now, occurrences=n - prev)


def _with_uuid(d: DeviceSample, stable: Mapping[int, str]) -> DeviceSample:
    """``d`` under the pinned uuid of its index, when ``stable`` has one."""
    uuid = stable.get(d.identity.index)
    if uuid is None or uuid == d.identity.uuid:
        return d
    procs = tuple(dataclasses.replace(p, device_uuid=uuid) for p in d.processes)
    return dataclasses.replace(d, identity=dataclasses.replace(d.identity, uuid=uuid), processes=procs)


def create(options: CollectorOptions, cls: type[SmiCliCollector], fake_module: str) -> SmiCliCollector:
    """``cls`` over the real tool (the member's folders searched) or, when simulating, over the
    fake ``fake_module`` installs (its ``install(scenario, clock, workdir)`` gives the launcher,
    its environment and the fake install's host root)."""
    fake_root: list[str] = []

    def install(scenario: Any, clock: Any, workdir: Optional[str]) -> tuple[str, Any]:
        fake = importlib.import_module(fake_module)  # lazily: simulation only
        exe, env, root = fake.install(scenario, clock, workdir)
        fake_root.append(root)
        return exe, env

    def factory(exe: str, *, host: HostPaths, **kw: Any) -> SmiCliCollector:
        if fake_root:  # the fake's runtime install
            host = dataclasses.replace(host, root=fake_root[0])
        return cls(exe, host=host, **kw)

    member = cls.member
    return build(options, factory, install, member.tool, os.pathsep.join(member.search_dirs), member.why_missing)
