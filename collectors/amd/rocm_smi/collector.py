"""AMD GPUs and Hygon DCUs through their command-line tools: ``rocm-smi`` and Hygon's ``hy-smi``.

For nodes where only the CLI exists (ROCm before amdsmi, Hygon DTK). A collector on the SDK's
CliCollector: one ``TOOL --json`` summary per cycle (parse.py, devices.py), ``--showpidgpus``
when processes must be placed on one of several devices, and the topology (``--showtopo``, the
``xgmi`` fabric links) once, then every ``topo_interval`` seconds (default 600): with our own
option set it rides on the summary call, otherwise it is a call of its own. Identities are
pinned (a device the tool stops listing is reported failed under its uuid, fault ``missing``);
PCIe replay increases are faults. ``runtime_version``: ROCm / DTK from the install's version
file below the ``host_root`` setting (collectors/amd/versions.py).

Settings: ``path``, ``args`` (the summary's options), ``cli_timeout`` (seconds for a cycle's
calls), ``topo_interval``, ``host_root``, ``parallel_calls``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Mapping, Optional, Sequence

from hetero_exporter.sdk import versions as sdk_versions
from hetero_exporter.collectors.amd.identity import unique_id
from hetero_exporter.collectors.amd.rocm_smi.devices import (  # noqa: F401 - re-exported (spec, tests)
    KIND, MEMORY_USED_RATIO, PCIE_REPLAY, QUALITY_TABLE, TEMP_EDGE, TOOL_VENDOR, build_devices, fabric_links,
    parse, parse_hy_smi, parse_rocm_smi, quality)
from hetero_exporter.collectors.amd.rocm_smi.parse import (  # noqa: F401 - re-exported
    Card, Hop, Report, frequency, is_na, number, parse_concise, parse_json, parse_keyed, parse_pid_gpus,
    parse_report, parse_topology)
from hetero_exporter.model import DeviceSample, Health
from hetero_exporter.sdk import runner as vendor_cli
from hetero_exporter.sdk.cli_collector import CliCollector, build, table_fault
from hetero_exporter.sdk.contract import CollectorOptions, HostPaths
from hetero_exporter.sdk.settings import CADENCE_MAX, ToolSettings, seconds, setting, timeout, tool_args

log = logging.getLogger(__name__)

# Options every rocm-smi since ROCm 4 and hy-smi accept, and what each shows in --json.
FULL_ARGS = ("--showid", "--showproductname", "--showuniqueid", "--showserial", "--showbus", "--showvbios",
             "--showdriverversion", "--showtemp", "--showuse", "--showmemuse", "--showpower", "--showmaxpower",
             "--showclocks", "--showreplaycount", "--showpids", "--showtoponuma", "--showmeminfo", "vram", "--json")
# The set gpustack runs on Hygon DTK and older rocm-smi: the fallback when the tool rejects
# an option of FULL_ARGS (argparse exits with status 2).
MINIMAL_ARGS = ("-i", "--showmeminfo", "vram", "--showpower", "--showserial", "--showuse", "--showtemp",
                "--showproductname", "--showuniqueid", "--json")
TOPO_ARGS = ("--showtopo", "--json")  # link type, hops and weight of every pair (and NUMA)
SEARCH_DIRS = {"rocm-smi": ("/opt/rocm/bin",), "hy-smi": ("/opt/hyhal/bin", "/opt/dtk/bin", "/opt/rocm/bin")}
_WHY = {"rocm-smi": "ROCm SMI not installed", "hy-smi": "Hygon DTK (hyhal) not installed"}


@dataclass(frozen=True)
class SmiSettings(ToolSettings):
    """``collectors.rocm_smi`` / ``collectors.hy_smi``: ``args`` the summary call's options (a
    string split like a shell, or a list; default FULL_ARGS, falling back to MINIMAL_ARGS),
    ``cli_timeout`` seconds a call may take (default: budget_fraction of the deadline),
    ``topo_interval`` seconds between ``--showtopo`` calls (0: never)."""

    args: "str | list[str] | None" = setting(None, tool_args)
    cli_timeout: Optional[float] = setting(None, timeout)
    topo_interval: float = setting(600.0, seconds(CADENCE_MAX))


SETTINGS = SmiSettings


class SmiCliCollector(CliCollector):
    """``rocm-smi`` / ``hy-smi`` over the SDK (subclasses set name, vendor and tool)."""

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
        self.host_root = self.host.root_dir
        self._topology: Optional[dict[frozenset, Hop]] = None
        self._topo_at: Optional[float] = None  # clock time of the last topology request
        self._topo_cards: Optional[int] = None
        self._want_topo = False
        self._replays: dict[str, int] = {}
        self.runtime_version = self._read_runtime()

    # ------------------------------------------------------------------ hooks
    @property
    def summary_args(self) -> Sequence[str]:  # type: ignore[override]
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
        for d in build_devices(parsed, now, pid_gpus, self._topology or {}, self.runtime_version):
            d = _with_uuid(d, stable)
            self._replay_fault(d, now)
            out.append(DeviceSample(identity=d.identity, timestamp=now, readings=d.readings, health=Health("ok"),
                                    faults=self.episodes.faults(d.identity.uuid), processes=d.processes,
                                    links=d.links))
        return out

    # ------------------------------------------------------------------ the cycle
    def collect(self) -> list[DeviceSample]:
        self._want_topo = self._topo_at is None or self.clock() - self._topo_at >= self.topo_interval
        try:
            return super().collect()
        except vendor_cli.CliError as e:
            if not (self._fallback and "exit status 2" in str(e)):
                raise
            log.info("%s rejected an option (%s); using the minimal option set", self.tool, e)
            self._args, self._fallback = MINIMAL_ARGS, False
            return super().collect()

    def _read_runtime(self) -> Optional[str]:
        # the vendor's own hook (rocm-smi serves two vendors): ROCm for amd, DTK for hy-smi's vendor
        return sdk_versions.discover(self.vendor, self.host_root).runtime_version

    def _refresh_topology(self, report: Report, now: float, deadline: float) -> None:
        """Keep the topology of the last request; ask again when due (or when the device count
        changed: the DRM indexes it names may have moved)."""
        if self._topo_cards is not None and self._topo_cards != len(report.cards):
            self._topology, self._want_topo = None, True
        if not self._want_topo:
            return
        self._topo_at, self._topo_cards = now, len(report.cards)
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
    import dataclasses
    uuid = stable.get(d.identity.index)
    if uuid is None or uuid == d.identity.uuid:
        return d
    procs = tuple(dataclasses.replace(p, device_uuid=uuid) for p in d.processes)
    return dataclasses.replace(d, identity=dataclasses.replace(d.identity, uuid=uuid), processes=procs)


class RocmSmiCollector(SmiCliCollector):
    name, vendor, tool = "rocm_smi", "amd", "rocm-smi"


class HySmiCollector(SmiCliCollector):
    name, vendor, tool = "hy_smi", "hygon", "hy-smi"


def _create(options: CollectorOptions, cls: type) -> SmiCliCollector:
    fake_root: list[str] = []

    def install(scenario: Any, clock: Any, workdir: Optional[str]) -> tuple[str, Any]:
        from hetero_exporter.collectors.amd.rocm_smi import fake  # lazily: simulation only
        exe, env, root = fake.install(scenario, clock, workdir, cls.tool)
        fake_root.append(root)
        return exe, env

    def factory(exe: str, *, host: HostPaths, **kw: Any) -> SmiCliCollector:
        if fake_root:  # the fake's ROCm / DTK install
            host = dataclasses.replace(host, root=fake_root[0])
        return cls(exe, host=host, **kw)

    return build(options, factory, install, cls.tool, os.pathsep.join(SEARCH_DIRS.get(cls.tool, ())),
                 _WHY.get(cls.tool, ""))


def create(options: CollectorOptions) -> SmiCliCollector:
    """``rocm_smi``: AMD GPUs through ``rocm-smi --json`` (nodes without amdsmi)."""
    return _create(options, RocmSmiCollector)


def create_hy_smi(options: CollectorOptions) -> SmiCliCollector:
    """``hy_smi``: Hygon DCUs through ``hy-smi --json``."""
    return _create(options, HySmiCollector)


# The registry loads "module:attr" and calls attr.create(options).
HY_SMI = SimpleNamespace(create=create_hy_smi, SETTINGS=SmiSettings)
