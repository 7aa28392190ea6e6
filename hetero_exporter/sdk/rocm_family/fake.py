"""Fake tools of the rocm-smi family: executables that print a scenario in the family's formats.

Built on the SDK's fake-tool harness (hetero_exporter.sdk.fake_tool): a vendor's fake module
declares its ``Style`` (the member tool, the keys its ``--json`` prints for a card, the word its
table names devices with, its runtime's default version) and gets ``main`` and ``install``
from ``entry``; ``install`` writes a launcher named like the tool that runs that module, so the
real collector runs the real runner and parser against it, with the failure modes of every
fake tool (settings ``{<vendor>: {mode: hang|slow|truncated|garbage|exit}}`` or a fault of that
kind). Renderings follow the captures in ../shared/fixtures: ``--json`` as rocm-smi's
formatJson builds it (every value a string; the style's card keys, then the options every
member prints, spelled as rocm-smi spells them), the ``--showtopo`` pairs (asked for with
--showtopo), the Concise Info table and the ``--showpidgpus`` text.

The older setting ``cli_mode`` still works: ``ok``, ``hang``, ``garbage``, ``crash`` (exit 1 with
the driver's message, i.e. ``mode: exit``) and ``legacy`` (rejects options outside
MINIMAL_ARGS with argparse's exit status 2, as an old tool would).

Scenario hooks: values ``temperature_edge_celsius`` (else 3 C under the core),
``pcie_replay_total``; ``extra``: ``device_id``, ``xgmi`` (the device is in the xGMI hive:
default the style's ``in_hive``), ``unique_id``; settings ``runtime_version`` (written to the
fake install's version file, sdk.versions.write_fake; default the style's), faults ``lost``
(the device is not listed from ``at`` until ``until``), ``no-unique-id`` (its Unique ID prints
N/A meanwhile, as on a device going bad).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import yaml

from hetero_exporter.model.scenario import DeviceSpec, Scenario
from hetero_exporter.sdk import fake_tool
from hetero_exporter.sdk import versions as sdk_versions
from hetero_exporter.sdk.rocm_family import MINIMAL_ARGS, Member
from hetero_exporter.sdk.rocm_family.identity import simulated_unique_id

MIB = 1 << 20
MODES = ("ok", "hang", "garbage", "crash", "legacy", *fake_tool.FAILURE_KINDS)


@dataclass(frozen=True)
class Style:
    """How a member tool's fake prints: ``card(spec, t, unique)`` its own ``--json`` keys of a
    card (``unique`` the simulated ASIC unique id, ``0x`` and 16 hex digits), before the keys
    every member prints; ``device_word`` its table's first column; ``in_hive`` whether a device
    is in the xGMI hive unless its ``extra.xgmi`` says; ``runtime`` the default version of the
    fake install; ``crash`` what ``cli_mode: crash`` prints."""

    member: Member
    card: Callable[[DeviceSpec, float, str], dict[str, str]]
    device_word: str = "GPU"
    in_hive: bool = False
    runtime: str = ""
    crash: str = "ERROR: GPU[0]: Driver not initialized (amdgpu not found in modules)"


def in_hive(spec: DeviceSpec, style: Style) -> bool:
    return bool(spec.extra.get("xgmi", style.in_hive))


def _bus(pci: str) -> str:
    """rocm-smi prints the bus id with an upper-case '0000:1E:00.0'."""
    return pci.upper()


def f1(v: Optional[float]) -> str:
    """A value as rocm-smi prints one with a decimal (N/A for None)."""
    return "N/A" if v is None else f"{v:.1f}"


def edge(spec: DeviceSpec, t: float) -> Optional[float]:
    """The edge sensor: the scenario's value, else 3 C under the core."""
    if "temperature_edge_celsius" in spec.values or "temperature_edge_celsius" in spec.unsupported:
        return spec.value("temperature_edge_celsius", t)
    core = spec.value("temperature_core_celsius", t)
    return None if core is None else core - 3.0


def render_card(spec: DeviceSpec, t: float, style: Style) -> dict[str, str]:
    """One card's --json fields for the scenario device at time t: the style's own keys, then
    the options every member prints, with rocm-smi's key names."""
    cap = spec.value("power_limit_watts", t)
    sclk = spec.value("clock_compute_hertz", t)
    mclk = spec.value("clock_memory_hertz", t)
    replay = spec.value("pcie_replay_total", t)
    card = style.card(spec, t, f"0x{simulated_unique_id(spec):016x}")  # what the library's fake prints
    card.update({
        "Max Graphics Package Power (W)": f1(cap),
        "sclk clock speed:": "N/A" if sclk is None else f"({int(round(sclk / 1e6))}Mhz)",
        "mclk clock speed:": "N/A" if mclk is None else f"({int(round(mclk / 1e6))}Mhz)",
        "PCIe Replay Count": "0" if replay is None else str(int(replay)),
        "Serial Number": spec.serial,
        "PCI Bus": _bus(spec.pci_address),
        "(Topology) Numa Node": str(spec.numa_node),
        "(Topology) Numa Affinity": str(spec.numa_node),
    })
    return card


def render_json(devices: list[DeviceSpec], t: float, style: Style, topology: bool = True) -> str:
    """``--json`` of the scenario devices at t; ``topology``: with the ``--showtopo`` pairs."""
    doc: dict[str, Any] = {f"card{i}": render_card(d, t, style) for i, d in enumerate(devices)}
    system: dict[str, str] = {"Driver version": devices[0].driver_version if devices else "N/A"}
    for i, d in enumerate(devices):
        for p in d.processes:
            # rocm-smi --showpids: "name, GPU count, VRAM bytes, SDMA, CU occupancy"
            system[f"PID{p.pid}"] = f"{p.name}, 1, {int(p.memory.at(t))}, 0, 0"
    hive = [i for i, d in enumerate(devices) if in_hive(d, style)]
    for a in range(len(devices) if topology else 0):
        for b in range(a + 1, len(devices)):
            linked = a in hive and b in hive
            system[f"(Topology) Link type between DRM devices {a} and {b}"] = "XGMI" if linked else "PCIE"
            system[f"(Topology) Hops between DRM devices {a} and {b}"] = "1" if linked else "2"
            system[f"(Topology) Weight between DRM devices {a} and {b}"] = "15" if linked else "40"
    doc["system"] = system
    return json.dumps(doc, indent=4) + "\n"


def render_pid_gpus(devices: list[DeviceSpec]) -> str:
    """``--showpidgpus`` text: each process on the card of its scenario device."""
    lines = ["=" * 24 + " GPUs Indexed by PID " + "=" * 25]
    for i, d in enumerate(devices):
        for p in d.processes:
            lines.append(f"PID {p.pid} is using 1 DRM device(s):")
            lines.append(f"{i} ")
    lines.append("=" * 70)
    return "\n".join(lines) + "\n"


def render_concise(devices: list[DeviceSpec], t: float, style: Style) -> str:
    """The ROCm 4 style table (its first column the style's device word), columns left-justified."""
    first = style.device_word
    header = [first, "Temp", "AvgPwr", "SCLK", "MCLK", "Fan", "Perf", "PwrCap", "VRAM%", f"{first}%"]
    rows = []
    for i, d in enumerate(devices):
        used, util = d.value("memory_used_bytes", t), d.value("utilization_ratio", t)
        sclk, mclk = d.value("clock_compute_hertz", t), d.value("clock_memory_hertz", t)
        temp, power, cap = edge(d, t), d.value("power_watts", t), d.value("power_limit_watts", t)
        rows.append([str(i), "N/A" if temp is None else f"{temp:.1f}c", "N/A" if power is None else f"{power:.1f}W",
                     "N/A" if sclk is None else f"{int(sclk / 1e6)}Mhz", "N/A" if mclk is None else f"{int(mclk / 1e6)}Mhz",
                     "0.0%", "auto", "N/A" if cap is None else f"{cap:.1f}W",
                     "N/A" if used is None else f"{100 * used / d.memory_total_bytes:3.0f}%",
                     "N/A" if util is None else f"{100 * util:3.0f}%"])
    widths = [max(len(h) + 2, *(len(r[c]) + 2 for r in rows)) for c, h in enumerate(header)]
    out = ["=" * 20 + " ROCm System Management Interface " + "=" * 20, "=" * 30 + " Concise Info " + "=" * 30,
           "".join(h.ljust(w) for h, w in zip(header, widths))]
    out += ["".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    out += ["=" * 74, "=" * 27 + " End of ROCm SMI Log " + "=" * 26]
    return "\n".join(out) + "\n"



# --------------------------------------------------------------------------- the executable


def _mode(scenario: Scenario, vendor: str) -> str:
    cfg = scenario.vendor_settings(vendor)
    return str(cfg.get("cli_mode") or cfg.get("mode") or "ok")


def answer(scenario: Scenario, t: float, argv: Sequence[str], style: Style) -> tuple[int, str, str]:
    """(status, stdout, stderr) of the style's tool with ``argv`` for the scenario at t."""
    tool, vendor = style.member.tool, style.member.vendor
    if _mode(scenario, vendor) == "legacy":
        for a in argv:
            if a not in MINIMAL_ARGS:
                return 2, "", f"usage: {tool} [-h] ...\n{tool}: error: unrecognized arguments: {a}\n"
    gone = {f.index for f in scenario.faults_of(vendor) if f.kind == "lost" and f.active(t)}
    devices = [d for d in scenario.devices_of(vendor) if d.index not in gone]  # fallen off the bus
    if "--showpidgpus" in argv:
        return 0, render_pid_gpus(devices), ""
    if "--json" in argv:
        text = render_json(devices, t, style, topology=any(a.startswith("--showtopo") and a != "--showtoponuma"
                                                            for a in argv))
        missing = {f.index for f in scenario.faults_of(vendor) if f.kind == "no-unique-id" and f.active(t)}
        if missing:  # a device answering N/A for its unique id (going bad)
            doc = json.loads(text)
            for i in missing:
                doc.get(f"card{i}", {})["Unique ID"] = "N/A"
            text = json.dumps(doc, indent=4) + "\n"
        return 0, text, ""
    return 0, render_concise(devices, t, style), ""


def _is_detail(argv: Sequence[str]) -> bool:
    return "--showpidgpus" in argv or list(argv) == ["--showtopo", "--json"]


Installed = tuple[str, Callable[[], dict[str, str]], str]  # (the launcher, its environment, the fake host root)


def entry(style: Style, module: str) -> tuple[Callable[..., int], Callable[..., Installed]]:
    """``(main, install)`` of a vendor's fake module (``module``, its dotted name): ``main(argv)``
    answers one call as the style's tool; ``install(scenario, clock, workdir, tool=None,
    mode=None)`` writes the launcher (running ``module``) and the fake runtime install
    (``install_tool``); ``tool``, when given, must be the style's."""

    def main(argv: Optional[Sequence[str]] = None) -> int:
        return fake_tool.fake_main(style.member.vendor, style.member.tool, lambda s, t, a: answer(s, t, a, style),
                                   argv, detail=_is_detail, error_message=style.crash)

    def install(scenario: Scenario, clock: Any, workdir: Optional[str], tool: Optional[str] = None,
                mode: Optional[str] = None) -> Installed:
        if tool not in (None, style.member.tool):
            raise ValueError(f"{module} fakes {style.member.tool}, not {tool!r}")
        return install_tool(scenario, clock, workdir, style, module, mode)

    return main, install


# --------------------------------------------------------------------------- installing


def _signal(sig: Any) -> Any:
    clamps = {k: sig.params[k] for k in ("min", "max") if k in sig.params}
    if sig.kind == "const":
        return sig.params["value"] if not clamps else {"steps": [[0.0, sig.params["value"]]], **clamps}
    if sig.kind == "steps":
        return {"steps": [list(p) for p in sig.params["points"]], **clamps}
    return {sig.kind: {k: v for k, v in sig.params.items() if k not in ("min", "max")}, **clamps}


def scenario_doc(scenario: Scenario) -> dict:
    """A scenario built in memory (no file) as the YAML document that loads back to it (one
    group per device, the generated uuids, serials, addresses and signal phases spelled out)."""
    groups = []
    for d in scenario.devices:
        groups.append({
            "vendor": d.vendor, "count": 1, "product": d.product, "uuid": d.uuid,
            "serial_base": int(d.serial) - d.index if d.serial.isdigit() else 1650000000000,
            "pci_address": d.pci_address, "numa_nodes": [d.numa_node], "memory_total": d.memory_total_bytes,
            "driver_version": d.driver_version, "firmware_version": d.firmware_version,
            "values": {k: _signal(v) for k, v in d.values.items()}, "unsupported": sorted(d.unsupported),
            "processes": [{"pid": p.pid, "name": p.name, "memory": _signal(p.memory),
                           **({"utilization": _signal(p.utilization)} if p.utilization is not None else {}),
                           **{k: getattr(p, k) for k in ("pod", "container", "cgroup") if getattr(p, k)}}
                          for p in d.processes],
            "extra": dict(d.extra)})
    faults = [{"at": f.at, "vendor": f.vendor, "index": f.index, "kind": f.kind, "message": f.message,
               **({"code": f.code} if f.code is not None else {}),
               **({"until": f.until} if f.until is not None else {}), **dict(f.params)} for f in scenario.faults]
    pods = [{"namespace": p.namespace, "name": p.name, "uid": p.uid, "qos": p.qos, "runtime": p.runtime,
             "containers": dict(p.containers)} for p in scenario.pods]
    return {"name": scenario.name, "node": scenario.node, "devices": groups, "faults": faults, "pods": pods,
            "links": [dict(x) for x in scenario.links], "settings": json.loads(json.dumps(scenario.settings))}


def _harness_settings(cfg: Mapping[str, Any], crash: str) -> Optional[dict]:
    """The vendor settings with ``cli_mode`` spelled in the harness's vocabulary; None when
    nothing needs translating."""
    mode = cfg.get("cli_mode")
    if mode is None or mode in ("ok", "legacy") or "mode" in cfg:
        return None
    if mode not in MODES:
        raise ValueError(f"cli_mode {mode!r} is not one of {MODES}")
    out = dict(cfg)
    if mode == "crash":
        out.update(mode="exit", status=1, message=crash)
    else:
        out["mode"] = mode
    return out


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def install_tool(scenario: Scenario, clock: Any, workdir: Optional[str], style: Style, module: str,
                 mode: Optional[str] = None) -> Installed:
    """Write the style's fake tool (running ``module``) and its runtime install for ``scenario``;
    returns (its path, the per-call environment, the fake host root holding the install)."""
    tool, vendor = style.member.tool, style.member.vendor
    wd = os.path.join(workdir or tempfile.mkdtemp(prefix=f"hetero-{tool}-"), f"fake-{tool}")
    cfg = dict(scenario.vendor_settings(vendor))
    if mode is not None:
        cfg.pop("mode", None)
        cfg["cli_mode"] = mode
    translated = _harness_settings(cfg, style.crash)
    if translated is not None or mode is not None or not (scenario.source and os.path.isfile(scenario.source)):
        if scenario.source and os.path.isfile(scenario.source):
            with open(scenario.source, encoding="utf-8") as f:
                doc = yaml.safe_load(f)
            doc["name"] = scenario.name  # uuids derive from it
        else:
            doc = scenario_doc(scenario)
        doc.setdefault("settings", {})
        doc["settings"] = dict(doc["settings"] or {})
        doc["settings"][vendor] = translated if translated is not None else cfg
        path = os.path.join(wd, "scenario.yaml")
        _write(path, yaml.safe_dump(doc, sort_keys=False))
        scenario = dataclasses.replace(scenario, source=path)
    root = os.path.join(wd, "root")
    version = str(cfg.get("runtime_version") or style.runtime)
    sdk_versions.write_fake(vendor, root, version)
    exe, env = fake_tool.install_tool(scenario, clock, wd, tool, module)
    return exe, env, root


class FakeSmiCli:
    """The fake executable of a style's tool (``path``), for tests that drive it directly;
    ``set_mode`` reinstalls it in another ``cli_mode``."""

    def __init__(self, scenario: Scenario, clock: Any, workdir: Optional[str], style: Style, module: str):
        self._scenario, self._clock, self._style, self._module = scenario, clock, style, module
        self._workdir = workdir or tempfile.mkdtemp(prefix="hetero-exporter-smi-")
        self.path, self.env, self.root = install_tool(scenario, clock, self._workdir, style, module)

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"cli_mode {mode!r} is not one of {MODES}")
        self.path, self.env, self.root = install_tool(self._scenario, self._clock, self._workdir, self._style,
                                                      self._module, mode)
