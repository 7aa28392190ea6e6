"""Contract tests every vendor passes, parametrized over the registered vendors (issue 12, point 5).

Each check is a plain function of a VendorSpec, so a vendor registered at run time with
``vendors.register(spec)`` gets the same checks by calling them (tests/test_throwaway_vendor.py
does, for its throwaway vendor):

- ``check_spec``: the spec is complete, its collectors, parsers and fault table load;
- ``check_capture``: every capture of its tools in ../shared/fixtures/<tool>/ parses through
  ``registry.parser(tool)`` to devices of this vendor (or, for outputs the parser does not
  read, a clear ParseError);
- ``check_parser_fuzz``: random text and mutated captures give a result or a ParseError;
- ``check_simulation``: its default collectors over their fakes give its devices, with the
  scenario's device count and memory size (the fake render -> parse round trip);
- ``check_quality``: every simulated reading has a resolution, every ``sampled`` one a window;
- ``check_failure_isolation``: one vendor's fake tool hung / garbage / slow, the sampler still
  serves every other vendor and reports the failed collector not ok.
"""

from __future__ import annotations

import copy
import fnmatch
import json
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SHARED_ABSENT, shared_root
from hetero_exporter import registry, vendors
from hetero_exporter.sdk import faults as fault_tables
from hetero_exporter.model import KINDS, METHODS, NodeSnapshot, snapshot_to_json
from hetero_exporter.sampling import CollectorSpec, Sampler
from hetero_exporter.sdk.contract import CollectorOptions, HostPaths, ParseError
from hetero_exporter.model.spec import CollectorEntry, VendorSpec
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate import scenario as scenario_mod

# Captures a tool's parser reads (glob patterns; "*" unless listed): since issue 24 every parser
# reads every layout its folder holds (nvidia-smi: -q -x, -q, CSV, the default table, topo -m, -L,
# dmon, pmon), so none is listed.
READS: dict[str, tuple[str, ...]] = {}  # every tool reads every capture of its folder (error captures aside)
# Captures of an error message the tool printed: a ParseError naming the tool is the answer.
ERROR_CAPTURES = ("*error*",)
NOT_CAPTURES = ("SOURCES*", "README*", "*.md", ".*")

FUZZ = settings(max_examples=50, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FAILURE_MODES = ("hang", "garbage", "slow")
FAILING_TIMEOUT = 1.5  # seconds: the failing collector's deadline (the runner kills at 0.9 of it)
SERVING_TIMEOUT = 30.0  # the others answer in about a second; this only bounds a broken one


def _match(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in patterns)


# --------------------------------------------------------------------------- spec


def check_spec(spec: VendorSpec) -> None:
    """Complete, and everything it names loads: collectors, parsers, fault table."""
    assert spec.missing() == [], f"{spec.name}: spec fields missing: {spec.missing()}"
    assert spec.kind in KINDS, f"{spec.name}: kind {spec.kind!r} is not one of model.KINDS {KINDS}"
    assert all(0 < v <= 0xFFFF for v in spec.pci_vendor_ids)
    for e in spec.collectors:
        assert e.vendor == spec.name, f"collector {e.name} declares vendor {e.vendor!r}"
        assert callable(registry.collector_factory(e)), f"{e.module} has no create()"
    assert any(e.default for e in spec.collectors), f"{spec.name}: no collector on by default"
    for tool, dotted in spec.parsers.items():
        assert registry.parsers().get(tool) == dotted, f"parser {tool}: another vendor owns it"
        assert callable(registry.parser(tool)), f"parser {tool}: {dotted} is not callable"
    path = spec.data_path(spec.fault_table)
    assert path.is_file(), f"{spec.name}: no fault table at {path}"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    table = fault_tables.parse_table(doc, str(path))  # FaultTableError on a bad action/severity
    assert table.vendor == spec.name and table.entries, f"{path}: vendor {table.vendor!r}, no entries"
    assert table.source, f"{path}: say where the catalogue comes from (source:)"


# --------------------------------------------------------------------------- captures


def captures(spec: VendorSpec, root: Optional[Path] = None) -> list[tuple[str, Path]]:
    """(tool, file) for every capture of the vendor's parse tools under ``root``/<tool>/."""
    out = []
    root = shared_root() if root is None else root
    for tool in sorted(spec.parsers):
        folder = root / tool
        if folder.is_dir():
            out += [(tool, p) for p in sorted(folder.iterdir())
                    if p.is_file() and not _match(p.name, NOT_CAPTURES)]
    return out


def _check_result(spec: VendorSpec, tool: str, result: Any, where: str) -> None:
    if isinstance(result, NodeSnapshot):
        wrong = {d.identity.vendor for d in result.devices} - {spec.name}
        assert not wrong, f"{where}: devices of vendor {wrong}, not {spec.name!r}"
        json.loads(snapshot_to_json(result))  # finite values, schema-1 encodable
    else:
        assert hasattr(result, "to_dict"), f"{where}: {type(result).__name__} has no to_dict()"
        json.dumps(result.to_dict(), default=str)


def check_capture(spec: VendorSpec, tool: str, path: Path) -> Any:
    """One capture: devices of this vendor, or a ParseError where the parser does not read
    that output (READS) or the capture is an error message (ERROR_CAPTURES)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    parse = registry.parser(tool)
    error = _match(path.name, ERROR_CAPTURES)
    if error or not _match(path.name, READS.get(tool, ("*",))):
        try:
            result = parse(text)
        except ParseError as e:
            assert str(e).startswith(tool.split()[0]), f"{path.name}: the ParseError does not name {tool}: {e}"
            return e
        assert not error, f"{path.name}: the capture of an error message parsed without error"
    else:
        result = parse(text)
    _check_result(spec, tool, result, f"{tool} {path.name}")
    return result


def check_captures(spec: VendorSpec, root: Optional[Path] = None) -> int:
    """Every capture (check_capture); each tool with captures gives devices at least once."""
    found = captures(spec, root)
    for tool in {t for t, _ in found}:
        results = [check_capture(spec, tool, p) for t, p in found if t == tool]
        assert any(isinstance(r, NodeSnapshot) and r.devices for r in results), \
            f"{tool}: no capture gives a device"
    return len(found)


# --------------------------------------------------------------------------- fuzz


def _mutate(data: Any, text: str) -> str:
    """Truncate, drop / duplicate lines, flip characters: the ways a capture gets damaged."""
    lines = text.splitlines(keepends=True)
    how = data.draw(st.sampled_from(("truncate", "drop", "duplicate", "flip", "splice")))
    if how == "truncate":
        return text[:data.draw(st.integers(0, len(text)))]
    if how in ("drop", "duplicate") and lines:
        picks = data.draw(st.lists(st.integers(0, len(lines) - 1), min_size=1, max_size=5))
        for i in sorted(set(picks), reverse=True):
            if how == "drop":
                del lines[i]
            else:
                lines.insert(i, lines[i])
        return "".join(lines)
    chars = list(text)
    for _ in range(data.draw(st.integers(1, 8))):
        if not chars:
            break
        i = data.draw(st.integers(0, len(chars) - 1))
        if how == "flip":
            chars[i] = chr(ord(chars[i]) ^ (1 << data.draw(st.integers(0, 6))))
        else:
            chars[i:i + data.draw(st.integers(0, 40))] = data.draw(st.text(max_size=20))
    return "".join(chars)


def check_parser_fuzz(spec: VendorSpec, tool: str, seeds: Sequence[str] = ()) -> None:
    """Random text and mutated captures (plus ``seeds``): a result or a ParseError."""
    parse = registry.parser(tool)
    real = [p.read_text(encoding="utf-8", errors="replace") for t, p in captures(spec) if t == tool]
    texts = [t for t in [*real, *seeds] if t]

    def one(text: str) -> None:
        try:
            result = parse(text)
        except ParseError:
            return
        _check_result(spec, tool, result, f"{tool} (fuzzed)")

    @FUZZ
    @given(st.text(max_size=600))
    def random_text(text: str) -> None:
        one(text)

    random_text()
    if texts:
        @FUZZ
        @given(st.data())
        def mutated(data: Any) -> None:
            one(_mutate(data, data.draw(st.sampled_from(texts))))

        mutated()


# --------------------------------------------------------------------------- simulation


def scenario_doc(spec: VendorSpec) -> dict:
    """The default scenario with the vendor's own ``scenario.yaml`` (beside its spec, where it
    has one) in place of the default's groups of that vendor: the vendor's tests run over its own
    richer node, the others' devices beside it."""
    doc = yaml.safe_load((scenario_mod.BUILTIN_DIR / "default.yaml").read_text(encoding="utf-8"))
    own = spec.data_path("scenario.yaml")
    if own.is_file():
        mine = yaml.safe_load(own.read_text(encoding="utf-8"))
        doc["devices"] = [*(g for g in doc.get("devices") or () if g.get("vendor") != spec.name),
                          *mine.get("devices", [])]
        doc["faults"] = [*(f for f in doc.get("faults") or () if f.get("vendor") != spec.name),
                         *(mine.get("faults") or [])]
        doc["settings"] = {**(doc.get("settings") or {}), **(mine.get("settings") or {})}
    elif not any(g.get("vendor") == spec.name for g in doc.get("devices") or ()):
        pytest.skip(f"{spec.name}: no devices in the default scenario and no {own}")
    return doc


def write_scenario(doc: dict, folder: Path) -> scenario_mod.Scenario:
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return scenario_mod.load(str(path))


def options(scenario: Any, workdir: Path, clock: Any, timeout: float = 10.0) -> CollectorOptions:
    return CollectorOptions(node_name=scenario.node, timeout_seconds=timeout, interval_seconds=10.0,
                            host=HostPaths(sysfs=str(workdir / "no-sysfs")), scenario=scenario,
                            clock=clock, workdir=str(workdir))


def default_entries(spec: VendorSpec) -> list[CollectorEntry]:
    return [e for e in spec.collectors if e.default]


def simulate(spec: VendorSpec, folder: Path) -> tuple[scenario_mod.Scenario, list]:
    """One collection by each default collector of ``spec`` over its fake."""
    sc = write_scenario(scenario_doc(spec), folder)
    clock = ManualClock()
    out = []
    for e in default_entries(spec):
        c = registry.collector_factory(e)(options(sc, folder, clock))
        try:
            out += list(c.collect())
        finally:
            getattr(c, "close", lambda: None)()
    return sc, out


def check_simulation(spec: VendorSpec, folder: Path) -> list:
    """The vendor's devices, as many as the scenario has, with its memory size."""
    sc, devices = simulate(spec, folder)
    assert devices, f"{spec.name}: its collectors gave no device over their fakes"
    wrong = {d.identity.vendor for d in devices} - {spec.name}
    assert not wrong, f"{spec.name}: devices of {wrong}"
    top = [d for d in devices if d.identity.parent is None]
    want = sc.devices_of(spec.name)
    assert len({d.identity.uuid for d in top}) == len(want), \
        f"{spec.name}: {len(top)} top-level devices for {len(want)} in the scenario"
    for d in top:
        r = d.readings.get("memory_total_bytes")
        s = next((w for w in want if w.index == d.identity.index), None)
        if r is not None and r.value is not None and s is not None:
            step = max(r.quality.resolution or 0.0, 1 << 20)
            assert abs(r.value - s.memory_total_bytes) <= step, \
                f"{spec.name}[{d.identity.index}]: memory {r.value} for {s.memory_total_bytes} in the scenario"
    return devices


def check_quality(spec: VendorSpec, devices: Sequence[Any]) -> None:
    """Every reading a resolution and a known method; every ``sampled`` one a window."""
    no_res, no_win, bad = set(), set(), set()
    for d in devices:
        for name, r in d.readings.items():
            q = r.quality
            if q.resolution is None:
                no_res.add(name)
            if q.method == "sampled" and q.window_seconds is None:
                no_win.add(name)
            if q.method not in METHODS or not q.source:
                bad.add(name)
    assert not (no_res or no_win or bad), (
        f"{spec.name}: no resolution: {sorted(no_res)}; sampled without window_seconds: "
        f"{sorted(no_win)}; no source or unknown method: {sorted(bad)}")


# --------------------------------------------------------------------------- failure isolation


def _on_fake_tool(module: Any, depth: int = 2) -> bool:
    """Whether ``module`` uses sdk.fake_tool, itself or through a fake it re-exports
    (hy-smi's fake is AMD's rocm-smi fake)."""
    import sys
    used = {getattr(v, "__module__", None) or getattr(v, "__name__", None) for v in vars(module).values()
            if callable(v) or isinstance(v, type(sys))}
    if "hetero_exporter.sdk.fake_tool" in used:
        return True
    return depth > 0 and any(_on_fake_tool(sys.modules[m], depth - 1) for m in used
                             if m and m != module.__name__ and m in sys.modules and ".fake" in m)


def uses_fake_tool(entry: CollectorEntry) -> bool:
    """Whether the collector's fake (``<tool>/fake.py`` beside it) is built on sdk.fake_tool."""
    import importlib
    try:
        fake = importlib.import_module(entry.module.rsplit(".", 1)[0] + ".fake")
    except ImportError:
        return False
    return _on_fake_tool(fake)


def check_failure_isolation(spec: VendorSpec, mode: str, folder: Path,
                            everyone: Optional[Iterable[VendorSpec]] = None,
                            doc: Optional[dict] = None) -> NodeSnapshot:
    """``spec``'s fake tool in failure ``mode``; one sampler cycle over the default
    collectors of every vendor (``everyone``) with devices in the scenario (``doc``, default
    ``scenario_doc(spec)``): the others serve, ``spec``'s collectors report not ok."""
    failing = [e for e in default_entries(spec) if uses_fake_tool(e)]
    if not failing:
        pytest.skip(f"{spec.name}: no default collector over an sdk.fake_tool fake (CLI vendors only)")
    doc = copy.deepcopy(doc) if doc is not None else scenario_doc(spec)
    doc["settings"] = {**(doc.get("settings") or {}),
                       spec.name: {**((doc.get("settings") or {}).get(spec.name) or {}), "mode": mode, "seconds": 5}}
    sc = write_scenario(doc, folder)
    present = {d.vendor for d in sc.devices}
    clock = ManualClock()
    specs = []
    for s in (everyone if everyone is not None else vendors.specs().values()):
        if s.name not in present:
            continue
        for e in default_entries(s):
            timeout = FAILING_TIMEOUT if s.name == spec.name else SERVING_TIMEOUT
            # built here, one after the other: the sampler would build them in its worker
            # threads, and a fake launcher written while another thread forks can fail to
            # start with ETXTBSY ("Text file busy"), a harness race this check is not about
            built = registry.collector_factory(e)(options(sc, folder, clock, timeout))
            specs.append(CollectorSpec(e.name, e.vendor, lambda c=built: c, timeout))
    sampler = Sampler(specs, sc.node, clock=clock)
    try:
        snap = sampler.collect()
    finally:
        sampler.close()
    status = {c.name: c for c in snap.collectors}
    for e in failing:
        assert not status[e.name].ok, f"{e.name} with its fake in mode {mode}: reported ok"
    assert not [d for d in snap.devices if d.identity.vendor == spec.name and d.health.state != "unknown"]
    for s in specs:
        if s.vendor == spec.name:
            continue
        st_ = status[s.name]
        assert st_.ok, f"{s.name} failed while {spec.name} was {mode}: {st_.error}"
        mine = [d for d in snap.devices if d.identity.vendor == s.vendor]
        assert mine and all(r.quality.status != "stale" for d in mine for r in d.readings.values()), \
            f"{s.name}: no fresh devices while {spec.name} was {mode}"
    return snap


# --------------------------------------------------------------------------- the tests

BUILTIN = sorted(vendors.specs())
TOOLS = [(name, tool) for name in BUILTIN for tool in sorted(vendors.spec(name).parsers)]
CAPTURES = [(name, tool, path) for name in BUILTIN for tool, path in captures(vendors.spec(name))]


@pytest.mark.parametrize("name", BUILTIN)
def test_spec_is_complete(name):
    check_spec(vendors.spec(name))


@pytest.mark.skipif(not CAPTURES, reason=SHARED_ABSENT)
@pytest.mark.parametrize("name,tool,path", CAPTURES, ids=lambda v: getattr(v, "name", v))
def test_every_capture_parses(name, tool, path):
    check_capture(vendors.spec(name), tool, path)


@pytest.mark.parametrize("name", BUILTIN)
def test_each_tool_with_captures_gives_devices(name):
    if not captures(vendors.spec(name)):
        pytest.skip(f"no captures of {name}'s tools ({SHARED_ABSENT})")
    check_captures(vendors.spec(name))


@pytest.mark.parametrize("name,tool", TOOLS)
def test_parser_gives_a_result_or_a_parse_error(name, tool):
    check_parser_fuzz(vendors.spec(name), tool)


@pytest.mark.parametrize("name", BUILTIN)
def test_simulation_round_trip(name, tmp_path):
    check_simulation(vendors.spec(name), tmp_path)


@pytest.mark.parametrize("name", BUILTIN)
def test_every_reading_declares_its_quality(name, tmp_path):
    _, devices = simulate(vendors.spec(name), tmp_path)
    check_quality(vendors.spec(name), devices)


@pytest.mark.parametrize("mode", FAILURE_MODES)
@pytest.mark.parametrize("name", BUILTIN)
def test_a_failing_fake_keeps_the_other_vendors_serving(name, mode, tmp_path):
    check_failure_isolation(vendors.spec(name), mode, tmp_path)
