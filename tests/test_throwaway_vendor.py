"""A throwaway CLI vendor in one package (tests/vendors/acme: spec, parser, collector hooks,
fake renderer, fault table) gets collection, ``parse``, simulation and the vendor contract
tests by being registered, with no edit outside that package (issue 12, "What it must show").
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import test_vendor_contract as contract
from conftest import ROOT
from hetero_exporter import cli, registry, vendors
from hetero_exporter.model import snapshot_from_json
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate import scenario as scenario_mod

VENDORS_DIR = Path(__file__).resolve().parent / "vendors"
PACKAGE = VENDORS_DIR / "acme"
SCENARIO = PACKAGE / "scenario.yaml"


@pytest.fixture
def acme():
    """The acme spec, registered for one test (tests/vendors importable meanwhile)."""
    sys.path.insert(0, str(VENDORS_DIR))
    try:
        from acme import SPEC
        vendors.register(SPEC)
        yield SPEC
    finally:
        vendors.unregister("acme")
        sys.path.remove(str(VENDORS_DIR))


def rendered(t: float = 0.0) -> str:
    """What the fake acme-smi prints for the acme scenario at ``t``."""
    from acme.acme_smi import fake
    return fake.answer(scenario_mod.load(str(SCENARIO)), t, [])[1]


def test_the_core_and_the_builtin_vendors_do_not_know_acme():
    """Everything acme needs is in its package: no file outside it names it."""
    for top in ("hetero_exporter", "collectors"):
        for p in (ROOT / top).rglob("*"):
            if p.is_file() and p.suffix in (".py", ".yaml", ".toml", ".txt", ".md"):
                assert "acme" not in p.read_text(encoding="utf-8", errors="replace").lower(), p
    assert "acme" not in (ROOT / "pyproject.toml").read_text(encoding="utf-8").lower()


def test_registering_it_makes_it_known(acme):
    assert vendors.spec("acme") is acme
    assert vendors.pci_vendors()[0xACE5] == "acme"
    assert "acme_smi" in registry.collector_entries()
    assert "acme-smi" in registry.parsers()
    vendors.unregister("acme")
    assert vendors.spec("acme") is None and "acme-smi" not in registry.parsers()


def test_collection_over_its_fake(acme, tmp_path):
    """The real collector over the fake executable: the scenario's devices and values; a
    device the tool stops listing is failed under the uuid it had."""
    doc = contract.scenario_doc(acme)
    doc["faults"] = [*(doc.get("faults") or []), {"at": 100, "vendor": "acme", "index": 1, "kind": "missing"}]
    sc = contract.write_scenario(doc, tmp_path)
    clock = ManualClock()
    c = registry.collector_factory(registry.collector_entries()["acme_smi"])(contract.options(sc, tmp_path, clock))
    first = c.collect()
    assert [(d.identity.vendor, d.identity.kind, d.identity.index) for d in first] == [("acme", "gpu", 0), ("acme", "gpu", 1)]
    d0 = first[0]
    assert d0.identity.pci_address == "0000:3b:00.0" and d0.identity.model == "Acme-X1"
    assert (d0.identity.driver_version, d0.identity.runtime_version) == ("3.1.0", "2.6")
    assert d0.value("memory_total_bytes") == 16 << 30
    assert 0.0 <= d0.value("utilization_ratio") <= 1.0 and d0.health.state == "ok"
    clock.set_t(150)
    later = {d.identity.index: d for d in c.collect()}
    assert later[1].identity.uuid == first[1].identity.uuid
    assert later[1].health.state == "failed" and later[1].faults[0].code == "missing"
    assert later[1].faults[0].fault_class == "device-lost"  # from acme's faults.yaml
    assert later[0].health.state == "ok"


def test_parse_command(acme, tmp_path, capsys):
    capture = tmp_path / "acme-smi.txt"
    capture.write_text(rendered())
    assert cli.main(["parse", "acme-smi", str(capture), "--json"]) == 0
    snap = snapshot_from_json(capsys.readouterr().out)
    assert [d.identity.uuid for d in snap.devices] == ["ACME-0000:3b:00.0", "ACME-0000:3c:00.0"]
    assert cli.main(["parse", "acme-smi", str(capture)]) == 0
    assert "Acme-X1" in capsys.readouterr().out
    assert registry.parser("acme-smi")(capture.read_text()).devices[1].identity.index == 1


def test_simulation_through_the_cli(acme, capsys):
    """``inspect --simulate`` (the real Wiring, sampler and enrichers) with acme devices."""
    assert cli.main(["inspect", "--simulate", str(SCENARIO), "--json"]) == 0
    snap = snapshot_from_json(capsys.readouterr().out)
    assert [d.identity.vendor for d in snap.devices] == ["acme", "acme"]
    assert all(d.identity.runtime_version == "2.6" for d in snap.devices)
    assert [(c.name, c.ok) for c in snap.collectors] == [("acme_smi", True)]
    assert snap.expected.get("acme") == 2


# --------------------------------------------------------------------------- the contract


def test_contract_spec(acme):
    contract.check_spec(acme)


def test_contract_captures(acme, tmp_path):
    """acme has no captures in ../shared/fixtures: the check runs over a rendered one."""
    (tmp_path / "acme-smi").mkdir()
    (tmp_path / "acme-smi" / "default_2x-acme-x1.txt").write_text(rendered())
    assert contract.captures(acme) == []
    assert contract.check_captures(acme, tmp_path) == 1


def test_contract_parser_fuzz(acme):
    contract.check_parser_fuzz(acme, "acme-smi", seeds=[rendered(0.0), rendered(77.0)])


def test_contract_simulation_and_quality(acme, tmp_path):
    devices = contract.check_simulation(acme, tmp_path)
    contract.check_quality(acme, devices)


@pytest.mark.parametrize("mode", contract.FAILURE_MODES)
def test_contract_failure_isolation(acme, mode, tmp_path):
    """acme's fake failing: the built-in vendors serve. The check also runs the other way
    round (a built-in vendor failing, acme among those that must keep serving)."""
    assert contract.uses_fake_tool(acme.collectors[0])
    contract.check_failure_isolation(acme, mode, tmp_path)


def test_contract_others_failing_keep_acme_serving(acme, tmp_path):
    """A built-in CLI vendor's fake hung on a node that also has acme devices: acme serves."""
    cli_vendors = [s for s in vendors.specs().values()
                   if s.name != "acme" and any(contract.uses_fake_tool(e) for e in s.collectors if e.default)]
    if not cli_vendors:
        pytest.skip("no built-in CLI vendor on sdk.fake_tool")
    snap = contract.check_failure_isolation(cli_vendors[0], "hang", tmp_path, doc=contract.scenario_doc(acme))
    assert [d for d in snap.devices if d.identity.vendor == "acme"]


def test_its_profiles_are_used(acme):
    """The profile file beside the spec gives acme devices their compute units."""
    from hetero_exporter import profiles
    p = profiles.profile_for("acme", "Acme-X1", kind="gpu", memory_total_bytes=16 << 30)
    assert not p.estimated, ("profiles.table() was built before acme was registered and is cached: "
                             "vendors.register() must invalidate it")
    assert p.compute_units == pytest.approx(0.25, abs=0.01)  # 78 / 312 TFLOPS of the reference
