"""The scorer on synthetic nodes of documented topologies (scoring.synthetic): table tests of the
choices it must make, its filters and their reasons, staleness, and decoding that never crashes."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetero_exporter.model import compact_json, snapshot_to_json
from hetero_exporter.scoring import synthetic
from hetero_exporter.scoring.nodes import from_annotation, node_state
from hetero_exporter.scoring.request import Request, request_from_pod
from hetero_exporter.scoring.scorer import EXHAUSTIVE_POOL, Scorer, Staleness
from hetero_exporter.scoring.versions import at_least, version_key

T0 = 1764400000.0
BUSY = {0: 0.9, 1: 0.9, 2: 0.9, 3: 0.9}


def state(name: str, shape: str, **kw):
    """A node as the extender gets it: through the compact annotation."""
    return from_annotation(name, compact_json(synthetic.node(name, shape, time=kw.pop("time", T0), **kw)))


def pod(resources=None, request=None, name="p"):
    meta = {"name": name, "namespace": "ns"}
    if request is not None:
        meta["annotations"] = {"hetero-exporter.io/request": json.dumps(request)}
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "resources": {"limits": resources or {}}}]}}


def gpus(n: int, **request) -> Request:
    return request_from_pod(pod({"nvidia.com/gpu": n}, request or None))


def indices(decision) -> list[int]:
    return [d.index for d in decision.devices]


def rank(scorer, req, states):
    """Node names by decreasing score (feasible ones only)."""
    decided = [(scorer.decide(req, s), s.name) for s in states]
    return [name for d, name in sorted(decided, key=lambda x: -x[0].score) if d.feasible]


# --------------------------------------------------------------------------- must show: table tests

@pytest.mark.parametrize("policy, request_, first_node, devices_on_busy", [
    # binpack fills the half-used node, on its idle GPUs; spread goes to the idle node
    ("binpack", {"nvidia.com/gpu": 2}, "hgx-busy", [4, 5]),
    ("spread", {"nvidia.com/gpu": 2}, "hgx-idle", [4, 5]),
    ("binpack", {"nvidia.com/gpu": 4}, "hgx-busy", [4, 5, 6, 7]),
    ("spread", {"nvidia.com/gpu": 4}, "hgx-idle", [4, 5, 6, 7]),
])
def test_binpack_and_spread_choose_nodes(policy, request_, first_node, devices_on_busy):
    nodes = [state("hgx-busy", "hgx-h100", loads=BUSY), state("hgx-idle", "hgx-h100")]
    scorer = Scorer(policy)
    req = request_from_pod(pod(request_))
    assert rank(scorer, req, nodes)[0] == first_node
    assert indices(scorer.decide(req, nodes[0])) == devices_on_busy  # never the busy GPUs 0-3


@pytest.mark.parametrize("policy, busy, chosen", [
    # PCIe box: GPUs 0-1, 2-3, 4-5, 6-7 share a PCIe switch; 0-3 on NUMA 0, 4-7 on NUMA 1.
    ("binpack", {0: 0.8}, [1]),  # next to the busy GPU, under its switch: keeps 2-7 whole
    ("spread", {0: 0.8}, [4]),  # away from it: another NUMA node, no shared switch
    ("binpack", {6: 0.8}, [7]),
    ("spread", {6: 0.8}, [0]),
])
def test_binpack_and_spread_choose_devices(policy, busy, chosen):
    node = state("a100", "pcie-a100", loads=busy)
    assert indices(Scorer(policy).decide(gpus(1), node)) == chosen


def test_request_annotation_policy_overrides_the_service_default():
    nodes = [state("hgx-busy", "hgx-h100", loads=BUSY), state("hgx-idle", "hgx-h100")]
    assert rank(Scorer("binpack"), gpus(2, policy="spread"), nodes)[0] == "hgx-idle"
    assert rank(Scorer("spread"), gpus(2, policy="binpack"), nodes)[0] == "hgx-busy"


@pytest.mark.parametrize("failed, expected", [
    # DGX-1 hybrid cube-mesh: NVLink within quads 0-3 and 4-7 and between i and i+4
    ({2}, [4, 5, 6, 7]),
    ({6}, [0, 1, 2, 3]),
    ({0, 5}, None),  # no intact quad: still 4 of the 6 healthy GPUs, never 0 or 5
])
def test_one_failed_gpu_of_eight_still_fits_four_on_the_best_linked_healthy_set(failed, expected):
    node = state("dgx1", "dgx1-v100", health={i: "failed" for i in failed})
    d = Scorer().decide(gpus(4), node)
    assert d.feasible, d.reason
    assert not set(indices(d)) & failed
    assert len(set(indices(d))) == 4
    if expected is not None:
        assert indices(d) == expected
        assert d.parts["topology"] == 1.0
    else:
        best = max(sum(node.groups["nvidia.com/gpu"].pair[a][b] for a, b in itertools.combinations(c, 2))
                   for c in itertools.combinations(range(6), 4))
        assert d.parts["topology"] == pytest.approx(best / 6, abs=1e-3)


def test_unknown_devices_are_never_chosen_and_degraded_ones_last():
    node = state("hgx", "hgx-h100", health={0: "unknown", 1: "degraded", 2: "failed"})
    d = Scorer().decide(gpus(5), node)
    assert d.feasible and indices(d) == [3, 4, 5, 6, 7]
    d6 = Scorer().decide(gpus(6), node)
    assert indices(d6) == [1, 3, 4, 5, 6, 7] and d6.parts["health"] < 1.0
    d7 = Scorer().decide(gpus(7), node)
    assert not d7.feasible
    assert "6 usable of 8" in d7.reason and "failed: #2" in d7.reason and "health unknown: #0" in d7.reason


PREFER = {"count": 4, "vendors": ["nvidia", "ascend"]}


@pytest.mark.parametrize("cluster, winner, group", [
    # NVIDIA fits somewhere: an NVIDIA node wins over the Ascend node
    ({"hgx": dict(shape="hgx-h100"), "atlas": dict(shape="atlas800-910b")}, "hgx", "nvidia.com/gpu"),
    # no NVIDIA fits (5 of 8 failed): the Ascend node is chosen
    ({"hgx": dict(shape="hgx-h100", health={i: "failed" for i in range(5)}), "atlas": dict(shape="atlas800-910b")},
     "atlas", "huawei.com/Ascend910"),
])
def test_vendor_preference_falls_back_to_ascend_when_no_nvidia_fits(cluster, winner, group):
    nodes = {n: state(n, **spec) for n, spec in cluster.items()}
    req = request_from_pod(pod(request=PREFER))
    scorer = Scorer()
    decisions = {n: scorer.decide(req, s) for n, s in nodes.items()}
    assert rank(scorer, req, nodes.values())[0] == winner
    assert decisions[winner].group == group
    if winner == "atlas":
        assert not decisions["hgx"].feasible and "3 usable of 8" in decisions["hgx"].reason
        assert decisions["atlas"].score <= 0.5  # the second-choice vendor's band
        assert "not preferred: no nvidia devices here" in decisions["atlas"].reason
    else:
        assert decisions["hgx"].score > 0.5 >= decisions["atlas"].score


def test_vendor_fallback_on_one_node_with_both_vendors():
    nv = synthetic.node("mixed", "hgx-h100", time=T0, health={i: "failed" for i in range(6)})
    npu = synthetic.node("mixed", "atlas800-910b", time=T0)
    both = dataclasses.replace(nv, devices=nv.devices + npu.devices)
    d = Scorer().decide(request_from_pod(pod(request=PREFER)), node_state("mixed", both))
    assert d.feasible and d.group == "huawei.com/Ascend910" and len(d.devices) == 4
    assert "needs 4 x nvidia.com/gpu, 2 usable of 8" in d.reason


@pytest.mark.parametrize("min_driver, node_driver, feasible", [
    ("550.54", "535.104.05", False),
    ("550.54", "550.54.15", True),
    ("550.54.15", "550.54.15", True),
    ("550.54.16", "550.54.15", False),
    ({"nvidia": "560"}, "550.54.15", False),
    ({"ascend": "24.1"}, "535.104.05", True),  # a minimum for another vendor does not apply
])
def test_a_pod_requiring_a_newer_driver_is_filtered_with_that_reason(min_driver, node_driver, feasible):
    node = state("hgx", "hgx-h100", driver=node_driver)
    d = Scorer().decide(gpus(1, min_driver_version=min_driver), node)
    assert d.feasible is feasible
    if not feasible:
        need = min_driver if isinstance(min_driver, str) else min_driver["nvidia"]
        assert f"driver {node_driver} older than required {need}" in d.reason
        assert not d.resolvable  # preemption cannot upgrade a driver


def test_runtime_version_filter():
    with_rt = state("new", "hgx-h100", runtime="12.4")
    old_rt = state("old", "hgx-h100", runtime="12.2")
    unknown = state("unknown", "hgx-h100")
    req = gpus(1, min_runtime_version={"nvidia": "12.3"})
    scorer = Scorer()
    assert scorer.decide(req, with_rt).feasible
    assert "runtime 12.2 older than required 12.3" in scorer.decide(req, old_rt).reason
    assert "runtime version not reported" in scorer.decide(req, unknown).reason


# --------------------------------------------------------------------------- constraints and topology

@pytest.mark.parametrize("request_, reason", [
    ({"memory_per_device": "90Gi"}, "memory 80.0 GiB < 90.0 GiB"),
    ({"compute_units": 3.5}, "compute 3.17 < 3.5 units"),
    ({"features": ["vgpu"]}, "lacks feature vgpu"),
])
def test_per_device_constraints_filter_with_reasons(request_, reason):
    d = Scorer().decide(gpus(1, **request_), state("hgx", "hgx-h100"))
    assert not d.feasible and reason in d.reason


def test_memory_and_compute_that_fit_pass():
    d = Scorer().decide(gpus(2, memory_per_device="64Gi", compute_units=3.0, features=["nvlink"]),
                        state("hgx", "hgx-h100"))
    assert d.feasible and len(d.devices) == 2


@pytest.mark.parametrize("shape, count, topology, feasible, devices, largest", [
    ("pcie-h100-nvl", 2, "same-nvlink-domain", True, [0, 1], None),
    ("pcie-h100-nvl", 3, "same-nvlink-domain", False, None, 2),
    ("pcie-a100", 2, "same-nvlink-domain", False, None, 1),
    ("pcie-a100", 2, "same-switch", True, [0, 1], None),
    ("pcie-a100", 3, "same-switch", False, None, 2),
    ("pcie-a100", 3, "same-node", True, None, None),
    ("hgx-h100", 8, "same-nvlink-domain", True, list(range(8)), None),
])
def test_topology_policies(shape, count, topology, feasible, devices, largest):
    d = Scorer().decide(gpus(count, topology=topology), state("n", shape))
    assert d.feasible is feasible, d.reason
    if devices is not None:
        assert indices(d) == devices
    if largest is not None:
        assert f"(largest such set: {largest})" in d.reason


@pytest.mark.parametrize("shape, resource", [
    ("atlas800-910b", "huawei.com/Ascend910"),  # HCCS full mesh
    ("mlu370-x8", "cambricon.com/mlu"),  # MLU-Link
    ("mi300x", "amd.com/gpu"),  # xGMI
    ("hgx-h100", "nvidia.com/gpu"),  # NVSwitch
])
@pytest.mark.parametrize("topology", ["same-fabric", "same-nvlink-domain"])
def test_same_fabric_holds_on_every_vendors_fabric(shape, resource, topology):
    """``same-fabric`` (and its older name) is one fabric-connected set, whichever vendor's
    fabric joins it: Ascend and Cambricon nodes pass it as NVIDIA and AMD ones do."""
    d = Scorer().decide(request_from_pod(pod({resource: 8}, {"topology": topology})), state("n", shape))
    assert d.feasible, d.reason
    assert indices(d) == list(range(8))


def test_same_fabric_refuses_devices_without_fabric_links_and_names_what_is_there():
    d = Scorer().decide(request_from_pod(pod({"nvidia.com/gpu": 2}, {"topology": "same-fabric"})),
                        state("n", "pcie-a100"))
    assert not d.feasible and "fabric" in d.reason and "(largest such set: 1)" in d.reason
    assert "no fabric links reported here" in d.reason
    d = Scorer().decide(gpus(3, topology="same-fabric"), state("n", "pcie-h100-nvl"))
    assert not d.feasible and "(nvlink links here)" in d.reason and "(largest such set: 2)" in d.reason


def test_a_new_fabric_link_type_is_a_fabric_without_an_edit():
    """A link type the scorer has never heard of (a new vendor's fabric) joins devices into one
    fabric set; host-side types never do."""
    snap = synthetic.node("n", "atlas800-910b", time=T0)
    renamed = tuple(dataclasses.replace(d, links=tuple(dataclasses.replace(l, type="newfabriclink")
                                                      if l.type == "hccs" else l for l in d.links))
                    for d in snap.devices)
    st_ = from_annotation("n", compact_json(dataclasses.replace(snap, devices=renamed)))
    g = st_.groups["huawei.com/Ascend910"]
    assert set(g.domain) == {0} and g.pair[0][7] == 1.0
    d = Scorer().decide(request_from_pod(pod({"huawei.com/Ascend910": 8}, {"topology": "same-fabric"})), st_)
    assert d.feasible, d.reason


def test_alias_and_name_share_one_decision():
    a = request_from_pod(pod({"nvidia.com/gpu": 4}, {"topology": "same-nvlink-domain"}))
    b = request_from_pod(pod({"nvidia.com/gpu": 4}, {"topology": "same-fabric"}))
    assert a.topology_policy == b.topology_policy == "same-fabric" and a.key == b.key
    s = Scorer()
    node = state("n", "dgx1-v100", loads=BUSY)
    da, db = s.decide(a, node), s.decide(b, node)
    assert (da.feasible, indices(da), da.score) == (db.feasible, indices(db), db.score)


def test_nvlink_pairs_are_preferred_without_a_topology_policy():
    d = Scorer().decide(gpus(2), state("n", "pcie-h100-nvl", loads={0: 0.9}))
    assert indices(d) == [2, 3] and d.parts["topology"] == 1.0  # bridged, not 1 + 2
    assert "nvlink links" in d.reason


def test_large_groups_use_the_greedy_search_close_to_the_optimum():
    node = state("big", "dgx1-v100", count=16, health={5: "failed"})
    group = node.groups["nvidia.com/gpu"]
    assert len(group.devices) == 15
    assert len(group.devices) > EXHAUSTIVE_POOL  # really the greedy path
    d = Scorer().decide(gpus(8), node)
    assert d.feasible and 5 not in indices(d) and len(set(indices(d))) == 8
    pair = group.pair
    pos = {dev.uuid: i for i, dev in enumerate(group.devices)}
    chosen = [pos[x.uuid] for x in d.devices]
    got = sum(pair[a][b] for a, b in itertools.combinations(chosen, 2))
    best = max(sum(pair[a][b] for a, b in itertools.combinations(c, 2))
               for c in itertools.combinations(range(15), 8))
    assert got >= 0.9 * best


def test_shared_requests_pack_onto_busy_devices_with_room():
    node = state("hgx", "hgx-h100", loads={0: 0.5, 1: 0.95})
    req = request_from_pod(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000}))  # HAMi: 20000 MiB
    assert req.shared and req.memory_bytes == 20000 * 2**20
    binpack = Scorer("binpack").decide(req, node)
    spread = Scorer("spread").decide(req, node)
    assert indices(binpack) == [0]  # busiest device that still has 40 GiB free (GPU 1 has 4)
    assert indices(spread) != [0] and indices(spread) != [1]
    full = request_from_pod(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 70000}))
    node_full = state("hgx", "hgx-h100", loads={i: 0.5 for i in range(8)})
    d = Scorer().decide(full, node_full)
    assert not d.feasible and "free memory 40.0 GiB < 68.4 GiB" in d.reason and d.resolvable


def test_a_pod_without_accelerators_fits_everywhere_with_a_neutral_score():
    req = request_from_pod(pod({"cpu": "2"}))
    for node in (state("hgx", "hgx-h100"), from_annotation("cpu", None)):
        d = Scorer().decide(req, node)
        assert d.feasible and d.score == 0.0


# --------------------------------------------------------------------------- staleness

def test_stale_annotations_lose_confidence_and_rank_lower():
    s = Staleness(fresh_seconds=180, floor_seconds=1800, floor=0.1)
    assert s.confidence(0) == 1.0 and s.confidence(180) == 1.0
    assert s.confidence(990) == pytest.approx(0.55)
    assert s.confidence(1800) == s.confidence(10**6) == 0.1
    scorer = Scorer(staleness=s)
    fresh = state("fresh", "hgx-h100", time=T0)
    stale = state("stale", "hgx-h100", time=T0 - 900)
    conf_fresh, age_fresh = scorer.confidence(fresh, T0 + 30)
    conf_stale, age_stale = scorer.confidence(stale, T0 + 30)
    assert (conf_fresh, age_fresh) == (1.0, 30.0)
    assert age_stale == 930.0 and conf_stale < 0.7
    d = scorer.decide(gpus(1), stale)
    assert d.feasible  # stale is scored lower, not filtered
    assert d.score * conf_stale < scorer.decide(gpus(1), fresh).score * conf_fresh


def test_future_annotation_time_counts_as_fresh():
    scorer = Scorer()
    assert scorer.confidence(state("n", "hgx-h100", time=T0 + 500), T0) == (1.0, 0.0)


# --------------------------------------------------------------------------- node documents

def test_full_inspect_document_and_compact_annotation_decide_alike():
    snap = synthetic.node("n", "dgx1-v100", time=T0, health={2: "failed"}, loads={4: 0.3})
    full = from_annotation("n", snapshot_to_json(snap))
    compact = from_annotation("n", compact_json(snap))
    a, b = Scorer().decide(gpus(4), full), Scorer().decide(gpus(4), compact)
    assert (a.feasible, a.score, indices(a)) == (b.feasible, b.score, indices(b))


@pytest.mark.parametrize("text, reason", [
    ("not json", "annotation unreadable: $: not valid JSON"),
    ('{"schema": 2, "node": "n", "time": 0}', "version 2 is not supported"),
    ('{"node": "n"}', "$.schema: missing"),
    ('{"schema": 1, "node": "n", "time": 0, "devices": [{"identity": {}}]}', "missing required field"),
])
def test_unreadable_annotation_is_a_per_node_reason(text, reason):
    d = Scorer().decide(gpus(1), from_annotation("n", text))
    assert not d.feasible and reason in d.reason


def test_missing_annotation_reason():
    d = Scorer().decide(gpus(1), from_annotation("n", None))
    assert not d.feasible and "no hetero-exporter.io/devices annotation" in d.reason


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=20)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_annotations_never_crash_the_scorer(data):
    """Any change to a real annotation document gives a decision, never an exception."""
    doc = json.loads(compact_json(synthetic.node("n", "dgx1-v100", time=T0, count=4, health={1: "failed"})))
    target = doc
    path = data.draw(st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=5))
    for step in path[:-1]:
        if isinstance(target, dict) and target:
            target = target[sorted(target)[step % len(target)]]
        elif isinstance(target, list) and target:
            target = target[step % len(target)]
    if isinstance(target, dict) and target:
        target[sorted(target)[path[-1] % len(target)]] = data.draw(_json)
    elif isinstance(target, list) and target:
        target[path[-1] % len(target)] = data.draw(_json)
    node = from_annotation("n", json.dumps(doc))
    d = Scorer().decide(gpus(2), node)
    assert isinstance(d.feasible, bool) and 0.0 <= d.score <= 1.0


# --------------------------------------------------------------------------- versions

@pytest.mark.parametrize("have, need, ok", [
    ("550.54.15", "550.54", True), ("535.104.05", "550", False), ("24.1.rc2", "24.1", False),
    ("24.1.rc2", "24.0.3", True), ("24.1.0", "24.1", True), ("v5.10.22", "5.10", True),
    ("6.7.0", "6.10", False), ("12.4", "12.4.0", True), (None, "1", False),
])
def test_version_order(have, need, ok):
    assert at_least(version_key(have), version_key(need)) is ok


def test_memo_is_per_request_shape_and_node_state():
    node = state("hgx", "hgx-h100")
    scorer = Scorer()
    a = scorer.decide(gpus(2), node)
    assert scorer.decide(gpus(2), node) is a  # same shape: memoized
    assert scorer.decide(gpus(3), node) is not a
    assert scorer.decide(request_from_pod(pod({"nvidia.com/gpu": 2}, name="other")), node) is a  # shape, not pod


# --------------------------------------------------------------------------- the fast paths agree with plain search

_node_spec = st.fixed_dictionaries({
    "shape": st.sampled_from(synthetic.SHAPES),
    "count": st.integers(2, 8),
    "loads": st.dictionaries(st.integers(0, 7), st.sampled_from([0.0, 0.2, 0.5, 0.9]), max_size=8),
    "health": st.dictionaries(st.integers(0, 7), st.sampled_from(["failed", "degraded", "unknown"]), max_size=3),
})
_request = st.fixed_dictionaries({}, optional={
    "memory_per_device": st.sampled_from(["8Gi", "40Gi", "70Gi", "100Gi"]),
    "compute_units": st.sampled_from([0.1, 1.0, 3.0]),
    "min_driver_version": st.sampled_from(["500", "550.54", "560"]),
    "topology": st.sampled_from(["same-node", "same-switch", "same-nvlink-domain"]),
    "policy": st.sampled_from(["binpack", "spread"]),
    "shared": st.booleans(),
})


@settings(max_examples=150, deadline=None)
@given(spec=_node_spec, req=_request, count=st.integers(1, 8), vendors=st.sampled_from([None, ["amd", "nvidia"]]))
def test_memoized_and_shortcut_decisions_equal_a_plain_search(spec, req, count, vendors):
    spec = {**spec, "loads": {i: v for i, v in spec["loads"].items() if i < spec["count"]},
            "health": {i: v for i, v in spec["health"].items() if i < spec["count"]}}
    text = compact_json(synthetic.node("n", time=T0, **spec))
    if vendors:
        request = request_from_pod(pod(request={**req, "count": count, "vendors": vendors}))
    else:
        request = request_from_pod(pod({"nvidia.com/gpu": count}, req or None))
    scorer = Scorer()
    warm = from_annotation("n", text)
    scorer.precompute(warm)
    for other in (gpus(1), gpus(count), request.unconstrained):  # fill the memos first
        scorer.decide(other, warm)
    fast = scorer.decide(request, warm)
    cold = from_annotation("n", text)
    for g in cold.group_list:
        g.floor = None  # every device checked one by one
    plain = Scorer()._decide(request, cold)  # no memo, no shortcut, no precompute, no floor
    assert (fast.feasible, indices(fast), fast.reason) == (plain.feasible, indices(plain), plain.reason)
    assert fast.score == pytest.approx(plain.score)


@settings(max_examples=100, deadline=None)
@given(spec=_node_spec, policy=st.sampled_from(["binpack", "spread"]),
       topology=st.sampled_from(["same-node", "same-switch", "same-nvlink-domain"]), shared=st.booleans())
def test_depth_first_search_finds_the_best_set_of_every_size(spec, policy, topology, shared):
    spec = {**spec, "loads": {i: v for i, v in spec["loads"].items() if i < spec["count"]}, "health": {}}
    group = state("n", **spec).groups.popitem()[1]
    scorer = Scorer(policy)
    found = scorer._exhaustive(group, group.every, shared)[(policy, topology)]
    vals = scorer._values(group, policy, shared)
    n = len(group.devices)
    for k in range(1, n + 1):
        best = None
        for combo in itertools.combinations(range(n), k):
            pairs = list(itertools.combinations(combo, 2))
            if topology == "same-switch" and any(group.pair[a][b] < 0.6 for a, b in pairs):
                continue
            if topology == "same-nvlink-domain" and len({group.domain[i] for i in combo}) > 1:
                continue
            t = sum(group.pair[a][b] for a, b in pairs) / len(pairs) if pairs else 1.0
            after = group.load_total if shared else group.load_total - sum(group.loads[i] for i in combo) + k
            fill = min(1.0, max(0.0, after / n))
            s = 0.3 * t + sum(vals[i] for i in combo) / k + 0.25 * (fill if policy == "binpack" else 1 - fill)
            if best is None or s > best + 1e-12:
                best = s
        if best is None:
            assert k not in found
        else:
            assert found[k][0] == pytest.approx(best)
