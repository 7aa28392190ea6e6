"""Extended resource names of every vendor's device plugin and of HAMi, as the scorer reads them."""

from __future__ import annotations

import pytest

from hetero_exporter.scoring.resources import device_resource, parse_resource


@pytest.mark.parametrize("name,vendor,group,unit", [
    ("huawei.com/Ascend910", "ascend", "huawei.com/Ascend910", "devices"),
    ("huawei.com/Ascend910B3", "ascend", "huawei.com/Ascend910", "devices"),  # HAMi per chip
    ("huawei.com/Ascend910B3-memory", "ascend", "huawei.com/Ascend910", "memory_mib"),
    ("huawei.com/Ascend310P", "ascend", "huawei.com/Ascend310P", "devices"),
    ("huawei.com/Ascend310P-memory", "ascend", "huawei.com/Ascend310P", "memory_mib"),
    ("huawei.com/Ascend910-4c", "ascend", "huawei.com/Ascend910", "slices"),  # vNPU
    ("cambricon.com/vmlu", "cambricon", "cambricon.com/mlu", "slices"),  # HAMi
    ("cambricon.com/mlu", "cambricon", "cambricon.com/mlu", "devices"),
])
def test_resource_names(name, vendor, group, unit):
    rs = parse_resource(name)
    assert rs is not None and (rs.vendor, rs.group, rs.unit) == (vendor, group, unit)


def test_a_per_chip_request_groups_with_the_devices_of_its_family():
    assert parse_resource("huawei.com/Ascend910B3").group == device_resource("ascend", "Ascend910B3")


@pytest.mark.parametrize("name", ["cpu", "memory", "huawei.com/foo", "example.com/gpu", "hugepages-2Mi"])
def test_other_resources_are_not_accelerators(name):
    assert parse_resource(name) is None
