"""FinOps (issue 19): prices per device-hour, the share of a device each container holds."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings, strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from hetero_exporter import config, finops
from hetero_exporter.model import names as N
from hetero_exporter.exposition.collector import SnapshotCollector, build_families
from hetero_exporter.model import (Allocation, DeviceIdentity, DeviceSample, NodeSnapshot, ProcessSample,
                                   Profile, Quality, Reading)

GiB = 1 << 30
FIN = finops.FinOps(prices={"A100-SXM4-80GB": 2.0, "H100-SXM5-80GB": 5.0})


def dev(uuid, model="H100-SXM5-80GB", weight=3.0, *, parent=None, allocs=(), procs=(), mem_total=None,
        estimated=False, profile=True):
    readings = {}
    if mem_total is not None:
        readings["memory_total_bytes"] = Reading(float(mem_total), Quality("test"))
    return DeviceSample(
        identity=DeviceIdentity("nvidia", "gpu", 0, uuid, model, parent=parent),
        timestamp=0.0, readings=readings,
        processes=tuple(procs), allocations=tuple(allocs),
        profile=Profile("estimated" if estimated else model, "nvidia", "gpu", 1.0, cost_weight=weight,
                        estimated=estimated) if profile else None)


def alloc(pod, ns="ml", container="c"):
    return Allocation(ns, pod, container)


def proc(pid, pod, mem, ns="ml", container="c"):
    return ProcessSample(pid, memory_bytes=mem, namespace=ns, pod=pod, container=container)


# prices

def test_price_configured_and_cost_weight_basis():
    assert finops.price(dev("a", "H100-SXM5-80GB"), FIN) == (5.0, "configured")
    assert finops.price(dev("b", "MI300X", 2.8), FIN) == (pytest.approx(5.6), "cost-weight")
    # an estimated profile is never priced by name, always by its cost weight
    assert finops.price(dev("c", "H100-SXM5-80GB", 0.5, estimated=True), FIN) == (1.0, "cost-weight")
    # partition children are priced on the parent only; no profile, no price
    assert finops.price(dev("mig", parent="a"), FIN) is None
    assert finops.price(dev("d", profile=False), FIN) is None


def test_cost_weight_is_relative_to_the_reference_profile():
    fin = finops.FinOps(reference="H100-SXM5-80GB", prices={"H100-SXM5-80GB": 6.0}).with_reference_cost_weight(3.0)
    assert finops.price(dev("x", "A100-SXM4-80GB", 1.0), fin) == (pytest.approx(2.0), "cost-weight")


def test_shipped_defaults():
    fin = config.Config().finops
    assert (fin.currency, fin.reference, fin.reference_price) == ("USD", "A100-SXM4-80GB", 2.0)


# config validation

@pytest.mark.parametrize("section, field", [
    ("{colour: USD}", "finops.['colour']"),
    ("{prices: {A100-SXM4-80GB: cheap}}", "finops.prices.A100-SXM4-80GB"),
    ("{prices: {A100-SXM4-80GB: -1}}", "finops.prices.A100-SXM4-80GB"),
    ("{prices: {A100-SXM4-80GB: .nan}}", "finops.prices.A100-SXM4-80GB"),
    ("{prices: {A100-SXM4-80GB: .inf}}", "finops.prices.A100-SXM4-80GB"),
    ("{prices: {A100-SXM4-80GB: true}}", "finops.prices.A100-SXM4-80GB"),
    ("{reference: MI300X}", "finops.reference"),
    ("{prices: {MI300X: 3}}", "finops.reference"),
    ("{currency: ''}", "finops.currency"),
    ("[1, 2]", "finops"),
])
def test_config_errors_name_the_field(tmp_path, section, field):
    p = tmp_path / "c.yaml"
    p.write_text(f"finops: {section}\n")
    with pytest.raises(config.ConfigError) as e:
        config.load(str(p))
    assert field in str(e.value)


def test_config_accepts_a_finops_section(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("finops: {currency: EUR, reference: H100-SXM5-80GB, prices: {H100-SXM5-80GB: 4.5, MI300X: 3}}\n")
    fin = config.load(str(p)).finops
    assert (fin.currency, fin.reference, fin.reference_price, fin.prices["MI300X"]) == ("EUR", "H100-SXM5-80GB", 4.5, 3.0)


# shares

def shares(*devices):
    return finops.node_shares(NodeSnapshot("n", 0.0, devices=devices))


def test_whole_device_is_one():
    assert shares(dev("a", allocs=[alloc("p0")], procs=[proc(1, "p0", 10 * GiB)])) == \
        {("nvidia", "a"): {("ml", "p0", "c"): 1.0}}


def test_two_pods_on_one_device_are_charged_one_device_between_them():
    d = dev("a", allocs=[alloc("p0"), alloc("p1")],
            procs=[proc(1, "p0", 30 * GiB), proc(2, "p1", 10 * GiB), ProcessSample(3, memory_bytes=GiB)])
    s = shares(d)[("nvidia", "a")]
    assert s == {("ml", "p0", "c"): 0.75, ("ml", "p1", "c"): 0.25}
    p, _ = finops.price(d, FIN)
    assert sum(v * p for v in s.values()) == pytest.approx(p)  # one device, not two


def test_time_slicing_replicas_without_memory_split_equally():
    s = shares(dev("a", allocs=[alloc("p0"), alloc("p1"), alloc("p2"), alloc("p3")]))[("nvidia", "a")]
    assert set(s.values()) == {0.25}


def test_mig_children_are_charged_on_the_parent():
    parent = dev("GPU-p", "A100-SXM4-80GB", 1.0, mem_total=80 * GiB)
    c1 = dev("MIG-1", parent="GPU-p", mem_total=40 * GiB, allocs=[alloc("big")])
    c2 = dev("MIG-2", parent="GPU-p", mem_total=10 * GiB, allocs=[alloc("small0"), alloc("small1")],
             procs=[proc(1, "small0", 3 * GiB), proc(2, "small1", 1 * GiB)])
    s = shares(parent, c1, c2)
    assert list(s) == [("nvidia", "GPU-p")]
    assert s[("nvidia", "GPU-p")] == {("ml", "big", "c"): 0.5, ("ml", "small0", "c"): 0.09375,
                                      ("ml", "small1", "c"): 0.03125}
    fams = {f.name: f for f in build_families(NodeSnapshot("n", 0.0, devices=(parent, c1, c2)), FIN)}
    assert [x.labels["uuid"] for x in fams[N.PRICE_PER_HOUR.name].samples] == ["GPU-p"]


owner = st.tuples(st.sampled_from(["ns1", "ns2"]), st.sampled_from(["p0", "p1", "p2", "p3"]),
                  st.sampled_from(["a", "b"]))
procs_st = st.lists(st.tuples(owner | st.none(), st.none() | st.integers(0, 100 * GiB)), max_size=6)


@st.composite
def devices(draw, uuid, parent=None):
    allocs = [Allocation(*o) for o in draw(st.lists(owner, max_size=4))]
    procs = [ProcessSample(i, memory_bytes=m, namespace=o and o[0], pod=o and o[1], container=o and o[2])
             for i, (o, m) in enumerate(draw(procs_st))]
    mem = draw(st.none() | st.integers(1, 100 * GiB))
    return dev(uuid, parent=parent, allocs=allocs, procs=procs, mem_total=mem)


@settings(max_examples=300, deadline=None)
@given(parent=devices("GPU-p"), kids=st.lists(st.integers(0, 6), max_size=7), data=st.data())
def test_shares_of_a_device_sum_to_at_most_one(parent, kids, data):
    children = [data.draw(devices(f"MIG-{i}", parent="GPU-p")) for i in range(len(kids))]
    for _, s in shares(parent, *children).items():
        assert all(0.0 <= v <= 1.0 for v in s.values())
        assert math.fsum(s.values()) <= 1.0 + 1e-9


# /metrics of the simulated default node

def test_families_on_the_simulated_default_node():
    from agent_proc import Agent
    agent = Agent(["--simulate", "--interval", "1"])
    try:
        text = agent.wait_metrics(lambda t: N.ALLOCATION_SHARE.name in t and N.PRICE_PER_HOUR.name in t)
    finally:
        agent.stop()
    line = re.compile(r'^(\w+)\{(.*)\} (\S+)$')
    series: dict[str, list[tuple[dict, float]]] = {}
    for ln in text.splitlines():
        m = line.match(ln)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            series.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    top = {l["uuid"] for l, _ in series[N.DEVICE_INFO.name]}
    priced = {l["uuid"] for l, _ in series[N.PRICE_PER_HOUR.name]}
    assert top and priced == top  # the default node has no partitions: every device priced
    assert all(l["basis"] in ("configured", "cost-weight") and v >= 0 for l, v in series[N.PRICE_PER_HOUR.name])
    assert series[N.FINOPS_INFO.name] == [({"currency": "USD", "reference": "A100-SXM4-80GB"}, 1.0)]
    per_device: dict[str, float] = {}
    for l, v in series[N.ALLOCATION_SHARE.name]:
        per_device[l["uuid"]] = per_device.get(l["uuid"], 0.0) + v
    assert per_device and all(v <= 1.0 + 1e-9 for v in per_device.values())
    allocated = {l["uuid"] for l, _ in series.get(N.ALLOCATION.name, [])}
    assert allocated <= set(per_device)
