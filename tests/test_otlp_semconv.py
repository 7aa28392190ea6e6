"""The OTLP names we claim from the OpenTelemetry hardware semantic conventions (issue 40 §3):
``semconv.CLAIMED`` is a part of the conventions' own table (checked in below, with its
source), and every ``hw.*`` name the export sends is claimed, with the claimed kind and unit,
the attributes the conventions require and only the values they list."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from otlp_receiver import exported_snapshot

from hetero_exporter.exposition.export import otlp_map, semconv
from hetero_exporter.model import Health, HEALTH_STATES, names as N

ROOT = Path(__file__).resolve().parents[1]
ALL_VENDORS = ROOT / "fixtures" / "scenarios" / "all-vendors.yaml"

# Every hw.* metric of the semantic conventions 1.44.0: name -> (instrument, UCUM unit).
# Source: github.com/open-telemetry/semantic-conventions v1.44.0, model/hardware/*-metrics.yaml, as
# generated into opentelemetry-semantic-conventions 0.66b2
# (opentelemetry/semconv/_incubating/metrics/hw_metrics.py); all at stability "development".
CONVENTIONS_1_44 = {
    "hw.battery.charge": ("gauge", "1"),
    "hw.battery.charge.limit": ("gauge", "1"),
    "hw.battery.time_left": ("gauge", "s"),
    "hw.cpu.speed": ("gauge", "Hz"),
    "hw.cpu.speed.limit": ("gauge", "Hz"),
    "hw.energy": ("counter", "J"),
    "hw.errors": ("counter", "{error}"),
    "hw.fan.speed": ("gauge", "rpm"),
    "hw.fan.speed.limit": ("gauge", "rpm"),
    "hw.fan.speed_ratio": ("gauge", "1"),
    "hw.gpu.io": ("counter", "By"),
    "hw.gpu.memory.limit": ("updowncounter", "By"),
    "hw.gpu.memory.usage": ("updowncounter", "By"),
    "hw.gpu.memory.utilization": ("gauge", "1"),
    "hw.gpu.utilization": ("gauge", "1"),
    "hw.host.ambient_temperature": ("gauge", "Cel"),
    "hw.host.energy": ("counter", "J"),
    "hw.host.heating_margin": ("gauge", "Cel"),
    "hw.host.power": ("gauge", "W"),
    "hw.logical_disk.limit": ("updowncounter", "By"),
    "hw.logical_disk.usage": ("updowncounter", "By"),
    "hw.logical_disk.utilization": ("gauge", "1"),
    "hw.memory.size": ("updowncounter", "By"),
    "hw.network.bandwidth.limit": ("updowncounter", "By/s"),
    "hw.network.bandwidth.utilization": ("gauge", "1"),
    "hw.network.io": ("counter", "By"),
    "hw.network.packets": ("counter", "{packet}"),
    "hw.network.up": ("updowncounter", "1"),
    "hw.physical_disk.endurance_utilization": ("gauge", "1"),
    "hw.physical_disk.size": ("updowncounter", "By"),
    "hw.physical_disk.smart": ("gauge", "1"),
    "hw.power": ("gauge", "W"),
    "hw.power_supply.limit": ("updowncounter", "W"),
    "hw.power_supply.usage": ("updowncounter", "W"),
    "hw.power_supply.utilization": ("gauge", "1"),
    "hw.status": ("updowncounter", "1"),
    "hw.tape_drive.operations": ("counter", "{operation}"),
    "hw.temperature": ("gauge", "Cel"),
    "hw.temperature.limit": ("gauge", "Cel"),
    "hw.voltage": ("gauge", "V"),
    "hw.voltage.limit": ("gauge", "V"),
    "hw.voltage.nominal": ("gauge", "V"),
}
# hw.state, hw.gpu.task and network.io.direction values of the same release
STATES_1_44 = {"degraded", "failed", "needs_cleaning", "ok", "predicted_failure"}
GPU_TASKS_1_44 = {"decoder", "encoder", "general"}
# attributes the conventions make required: hw.id everywhere; hw.type on the common metrics;
# hw.state on hw.status; network.io.direction on hw.gpu.io
REQUIRED = {"hw.power": {"hw.id", "hw.type"}, "hw.energy": {"hw.id", "hw.type"},
            "hw.errors": {"hw.id", "hw.type"}, "hw.status": {"hw.id", "hw.type", "hw.state"},
            "hw.gpu.io": {"hw.id", "network.io.direction"}}


@pytest.fixture(scope="module")
def snapshot():
    return exported_snapshot(ALL_VENDORS)


def test_the_claimed_names_are_the_conventions_with_their_kind_and_unit():
    for name, claim in semconv.CLAIMED.items():
        assert CONVENTIONS_1_44.get(name) == (claim.kind, claim.unit), name
        assert claim.gpu_only == name.startswith("hw.gpu."), name
    assert semconv.VERSION == "1.44.0"
    assert set(semconv.STATES) <= STATES_1_44 and set(semconv.DIRECTIONS) == {"receive", "transmit"}


def test_the_checked_in_list_is_the_installed_conventions_package():
    """Where the package this list was copied from is installed at that version, they agree."""
    version = pytest.importorskip("opentelemetry.semconv.version").__version__
    if version != "0.66b2":
        pytest.skip(f"opentelemetry-semantic-conventions {version}, the list is of 0.66b2")
    import inspect

    from opentelemetry.semconv._incubating.attributes import hw_attributes as A
    from opentelemetry.semconv._incubating.metrics import hw_metrics as H
    found = {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(
        r'^HW_[A-Z_]+: Final = "([^"]+)"\n"""\n.*?\nInstrument: (\w+)\nUnit: (\S+)', inspect.getsource(H), re.M)}
    assert found == CONVENTIONS_1_44
    assert {v.value for v in A.HwStateValues} == STATES_1_44
    assert {v.value for v in A.HwGpuTaskValues} == GPU_TASKS_1_44


def test_every_instrument_is_claimed_or_ours_and_no_two_families_share_a_name():
    for inst in otlp_map.instruments():
        if inst.name.startswith("hw."):
            claim = semconv.CLAIMED[inst.name]
            assert (inst.kind, inst.unit) == (claim.kind, claim.unit), inst.name
        else:
            assert inst.name.startswith(otlp_map.PREFIX), inst.name
    names = [otlp_map.generic(m).name for m in N.ALL]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for fam, hws in otlp_map.HW.items():
        assert all(hw.name in semconv.CLAIMED for hw in hws), fam


def test_every_hw_point_of_the_all_vendors_node_follows_the_conventions(snapshot):
    pts = otlp_map.points(snapshot, now=snapshot.time)
    sent = {p.instrument.name for p in pts if p.instrument.name.startswith("hw.")}
    assert sent == set(semconv.CLAIMED), "a claimed name the all-vendors node never sends, or one unclaimed"
    for p in pts:
        name, attrs = p.instrument.name, p.attributes
        if not name.startswith("hw."):
            continue
        claim = semconv.CLAIMED[name]
        assert (p.instrument.kind, p.instrument.unit) == (claim.kind, claim.unit)
        assert REQUIRED.get(name, {"hw.id"}) <= set(attrs), (name, attrs)
        if claim.gpu_only:
            assert attrs["hw.type"] == "gpu", (name, attrs)
        if name == "hw.status":
            assert attrs["hw.state"] in semconv.STATES
        if name == "hw.gpu.io":
            assert attrs["network.io.direction"] in semconv.DIRECTIONS
        if name == "hw.gpu.utilization":
            assert attrs["hw.gpu.task"] in GPU_TASKS_1_44
        if name == "hw.errors":
            assert attrs["error.type"] in semconv.ERROR_TYPES


def test_a_device_of_unknown_health_has_no_hw_status_at_one_and_keeps_its_state_in_ours(snapshot):
    """Regression: hw.state="unknown" was sent, a state the conventions do not list."""
    first = snapshot.devices[0]
    devices = (dataclasses.replace(first, health=Health("unknown")),) + tuple(snapshot.devices[1:])
    snap = dataclasses.replace(snapshot, devices=devices)
    pts = otlp_map.by_instrument(otlp_map.points(snap))
    uuid = first.identity.uuid
    status = {p.attributes["hw.state"]: p.value for p in pts["hw.status"] if p.attributes["hw.id"] == uuid}
    assert status == {"ok": 0.0, "degraded": 0.0, "failed": 0.0}
    ours = {p.attributes["state"]: p.value for p in pts["accelerator.health_status"] if p.attributes["hw.id"] == uuid}
    assert set(ours) >= set(HEALTH_STATES) and ours["unknown"] == 1.0


def test_only_gpus_get_hw_gpu_names_and_the_others_keep_their_kind(snapshot):
    """Regression: an NPU's utilization was hw.gpu.utilization with hw.type=npu."""
    pts = otlp_map.by_instrument(otlp_map.points(snapshot))
    npu = next(d for d in snapshot.devices if d.identity.kind == "npu")
    mine = {name for name, ps in pts.items() for p in ps if p.attributes.get("hw.id") == npu.identity.uuid}
    assert not any(n.startswith("hw.gpu.") for n in mine)
    assert {"accelerator.utilization", "accelerator.memory_used", "hw.power", "hw.status"} <= mine
    power = next(p for p in pts["hw.power"] if p.attributes["hw.id"] == npu.identity.uuid)
    assert power.attributes["hw.type"] == "npu" and power.value == pytest.approx(npu.value("power_watts"))
