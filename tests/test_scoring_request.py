"""A pod's accelerator request: extended resources of every vendor's device plugin and the
vendor-neutral request annotation; malformed input raises RequestError only."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetero_exporter.scoring.request import RequestError, parse_quantity, request_from_pod
from hetero_exporter.scoring.resources import device_resource, parse_resource


def pod(*containers, annotation=None, init=()):
    meta = {"name": "p", "namespace": "ns"}
    if annotation is not None:
        meta["annotations"] = {"hetero-exporter.io/request": annotation if isinstance(annotation, str)
                               else json.dumps(annotation)}
    spec = {"containers": [{"name": f"c{i}", "resources": {"limits": c}} for i, c in enumerate(containers)]}
    if init:
        spec["initContainers"] = [{"name": f"i{i}", "resources": {"limits": c}} for i, c in enumerate(init)]
    return {"metadata": meta, "spec": spec}


@pytest.mark.parametrize("resources, vendor, group, count, shared, features", [
    ({"nvidia.com/gpu": 4}, "nvidia", "nvidia.com/gpu", 4, False, ()),
    ({"nvidia.com/gpu": "2"}, "nvidia", "nvidia.com/gpu", 2, False, ()),
    ({"nvidia.com/mig-1g.10gb": 2}, "nvidia", "nvidia.com/gpu", 1, True, ("mig",)),
    ({"nvidia.com/gpu.shared": 1}, "nvidia", "nvidia.com/gpu", 1, True, ()),
    ({"amd.com/gpu": 8}, "amd", "amd.com/gpu", 8, False, ()),
    ({"huawei.com/Ascend910": 8}, "ascend", "huawei.com/Ascend910", 8, False, ()),
    ({"huawei.com/Ascend310P": 1}, "ascend", "huawei.com/Ascend310P", 1, False, ()),
    ({"huawei.com/Ascend910-4c": 1}, "ascend", "huawei.com/Ascend910", 1, True, ()),
    ({"huawei.com/Ascend310P-2c.3cpu": 1}, "ascend", "huawei.com/Ascend310P", 1, True, ()),
    ({"cambricon.com/mlu": 2}, "cambricon", "cambricon.com/mlu", 2, False, ()),
    ({"cambricon.com/mlu.smlu.vcore": 20}, "cambricon", "cambricon.com/mlu", 1, True, ()),
    ({"cambricon.com/mlu.share": 1}, "cambricon", "cambricon.com/mlu", 1, True, ()),
    ({"hygon.com/dcu": 1}, "hygon", "hygon.com/dcu", 1, False, ()),
    ({"hygon.com/dcunum": 2, "hygon.com/dcumem": 8192}, "hygon", "hygon.com/dcu", 2, True, ()),
])
def test_extended_resources(resources, vendor, group, count, shared, features):
    r = request_from_pod(pod({"cpu": "4", "memory": "16Gi", **resources}))
    assert (r.vendors, r.group, r.count, r.shared, r.features) == ((vendor,), group, count, shared, features)


@pytest.mark.parametrize("vendor, model, resource", [
    ("nvidia", "H100-SXM5-80GB", "nvidia.com/gpu"), ("ascend", "Ascend910B3", "huawei.com/Ascend910"),
    ("ascend", "Ascend910A", "huawei.com/Ascend910"), ("ascend", "Ascend310P3", "huawei.com/Ascend310P"),
    ("ascend", "Ascend310", "huawei.com/Ascend310"), ("cambricon", "MLU370-X8", "cambricon.com/mlu"),
    ("hygon", "K100-AI", "hygon.com/dcu"), ("amd", "MI300X", "amd.com/gpu"),
])
def test_device_resource_groups_match_the_device_plugins(vendor, model, resource):
    assert device_resource(vendor, model) == resource
    assert parse_resource(resource).group == resource


def test_containers_add_up_and_init_containers_take_the_largest():
    assert request_from_pod(pod({"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 1})).count == 3
    assert request_from_pod(pod({"nvidia.com/gpu": 1}, init=[{"nvidia.com/gpu": 4}])).count == 4
    assert request_from_pod(pod({"nvidia.com/gpu": 3}, init=[{"nvidia.com/gpu": 2}])).count == 3


def test_requests_default_to_limits():
    p = {"spec": {"containers": [{"resources": {"requests": {"amd.com/gpu": 2}}}]}}
    assert request_from_pod(p).count == 2 and request_from_pod(p).pod == "default/?"


def test_no_accelerator():
    r = request_from_pod(pod({"cpu": "1"}))
    assert r.count == 0 and r.describe() == "no accelerator"


def test_annotation_only_request():
    r = request_from_pod(pod({}, annotation={
        "count": 4, "vendors": ["nvidia", "ascend"], "compute_units": 0.9, "memory_per_device": "64Gi",
        "features": ["rdma", "nvlink"], "topology": "same-switch", "min_driver_version": {"nvidia": "550"},
        "min_runtime_version": "12.4", "policy": "spread"}))
    assert r.count == 4 and r.vendors == ("nvidia", "ascend") and r.group is None
    assert r.memory_bytes == 64 * 2**30 and r.features == ("nvlink", "rdma") and r.topology == "same-switch"
    assert r.min_version("driver", "nvidia")[1] == "550" and r.min_version("driver", "ascend") is None
    assert r.min_version("runtime", "ascend")[1] == "12.4" and r.policy == "spread"
    assert "4 x nvidia/ascend" in r.describe() and "driver >= 550 (nvidia)" in r.describe()


def test_annotation_adds_constraints_to_extended_resources():
    r = request_from_pod(pod({"huawei.com/Ascend910": 8}, annotation={"topology": "same-nvlink-domain",
                                                                     "min_driver_version": "24.1"}))
    assert r.count == 8 and r.group == "huawei.com/Ascend910" and r.topology == "same-nvlink-domain"


def test_same_fabric_is_the_topology_name_and_same_nvlink_domain_its_alias():
    new = request_from_pod(pod({"cambricon.com/mlu": 4}, annotation={"topology": "same-fabric"}))
    old = request_from_pod(pod({"cambricon.com/mlu": 4}, annotation={"topology": "same-nvlink-domain"}))
    assert new.topology == "same-fabric" and old.topology == "same-nvlink-domain"
    assert new.topology_policy == old.topology_policy == "same-fabric"


@pytest.mark.parametrize("p, message", [
    (pod({"nvidia.com/gpu": 1, "amd.com/gpu": 1}), "come from one device group"),
    (pod({"nvidia.com/gpu": "1.5"}), "accelerators come whole"),
    (pod({"nvidia.com/gpu": "lots"}), "is not a Kubernetes quantity"),
    (pod({"nvidia.com/gpu": -1}), "non-negative"),
    (pod({"nvidia.com/gpu": 2}, annotation={"count": 4}), "count is 4 but the pod asks for 2"),
    (pod({"nvidia.com/gpu": 2}, annotation={"vendors": ["ascend"]}), "leaves out nvidia"),
    (pod({}, annotation="{not json"), "not valid JSON"),
    (pod({}, annotation="[1]"), "expected a JSON object"),
    (pod({}, annotation={"cnt": 1}), "unknown key(s) cnt"),
    (pod({}, annotation={"count": 0}), "count"),
    (pod({}, annotation={"count": True}), "count"),
    (pod({}, annotation={"vendors": "nvidia"}), "list of vendor names"),
    (pod({}, annotation={"vendors": ["nvidia", "NVIDIA"]}), "listed twice"),
    (pod({}, annotation={"topology": "same-rack"}), "same-node, same-switch, same-nvlink-domain"),
    (pod({}, annotation={"policy": "random"}), "binpack, spread"),
    (pod({}, annotation={"min_driver_version": "latest"}), "is not a version"),
    (pod({}, annotation={"memory_per_device": "64GB"}), "is not a Kubernetes quantity"),
    (pod({}, annotation={"compute_units": -1}), "positive number"),
    (pod({}, annotation={"features": "rdma"}), "list of feature names"),
    (pod({}, annotation={"shared": "yes"}), "true or false"),
    ({"metadata": [], "spec": {}}, "metadata: expected an object"),
    ({"spec": {"containers": {}}}, "spec.containers: expected a list"),
    ("pod", "Pod: expected an object"),
])
def test_bad_requests_say_where(p, message):
    with pytest.raises(RequestError) as e:
        request_from_pod(p)
    assert message in str(e.value)


@pytest.mark.parametrize("text, value", [
    ("4", 4), (4, 4), ("64Gi", 64 * 2**30), ("1k", 1000), ("500m", 0.5), ("1.5G", 1.5e9), ("2e3", 2000),
])
def test_quantities(text, value):
    assert parse_quantity(text, "x") == pytest.approx(value)


_values = st.none() | st.booleans() | st.integers(-5, 100) | st.floats(allow_nan=True) | st.text(max_size=12)
_resource_names = st.sampled_from(["nvidia.com/gpu", "amd.com/gpu", "huawei.com/Ascend910", "cambricon.com/mlu.share",
                                   "hygon.com/dcumem", "cpu", "nvidia.com/mig-1g.5gb"]) | st.text(max_size=20)


@settings(max_examples=300, deadline=None)
@given(resources=st.dictionaries(_resource_names, _values, max_size=4),
       annotation=st.one_of(st.none(), st.text(max_size=40),
                            st.dictionaries(st.sampled_from(["count", "vendors", "compute_units", "memory_per_device",
                                                             "features", "topology", "min_driver_version",
                                                             "min_runtime_version", "policy", "shared", "x"]),
                                            st.recursive(_values, lambda i: st.lists(i, max_size=3)
                                                         | st.dictionaries(st.text(max_size=6), i, max_size=3),
                                                         max_leaves=6), max_size=5)))
def test_any_pod_gives_a_request_or_a_request_error(resources, annotation):
    try:
        r = request_from_pod(pod(resources, annotation=annotation))
    except RequestError as e:
        assert str(e)
    else:
        assert r.count >= 0 and isinstance(r.key, str)
        r.describe()
