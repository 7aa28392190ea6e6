"""Issue 24, item 3 end to end: a 910B node without the CANN install file reports no
runtime_version (not the driver's), and a pod that states a CANN floor is refused there with that
reason in the extender's answer; with the file, the floor is judged on CANN's version."""

from __future__ import annotations

import json

import pytest
import yaml

from hetero_exporter import registry
from hetero_exporter.model import NodeSnapshot, snapshot_to_json
from hetero_exporter.scoring.nodes import from_document
from hetero_exporter.scoring.request import request_from_pod
from hetero_exporter.scoring.scorer import Scorer
from hetero_exporter.simulate import ManualClock
from conftest import ROOT
import test_vendor_contract as contract


def _node(tmp_path, cann):
    doc = yaml.safe_load((ROOT / "fixtures" / "scenarios" / "ascend-910b-8x.yaml").read_text())
    doc.setdefault("settings", {}).setdefault("ascend", {})["cann_version"] = cann
    sc = contract.write_scenario(doc, tmp_path)
    c = registry.collector_factory(registry.collector_entries()["npu_smi"])(
        contract.options(sc, tmp_path, ManualClock()))
    try:
        devices = tuple(c.collect())
    finally:
        getattr(c, "close", lambda: None)()
    return NodeSnapshot(node="npu-1", time=0.0, devices=devices)


def _pod(floor):
    meta = {"name": "p", "namespace": "ns",
            "annotations": {"hetero-exporter.io/request": json.dumps({"min_runtime_version": {"ascend": floor}})}}
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "resources": {"limits": {"huawei.com/Ascend910": 1}}}]}}


def test_without_cann_the_runtime_is_absent_and_a_cann_floor_is_refused_with_the_reason(tmp_path):
    snap = _node(tmp_path, None)
    top = [d for d in snap.devices if d.identity.parent is None]
    assert top and all(d.identity.runtime_version is None and d.identity.driver_version for d in top)
    state = from_document("npu-1", json.loads(snapshot_to_json(snap)))
    d = Scorer().decide(request_from_pod(_pod("8.0")), state)
    assert not d.feasible and "runtime version not reported" in d.reason


@pytest.mark.parametrize("cann,feasible", [("8.0.RC3", False), ("8.1.0", True)])
def test_with_cann_the_floor_is_judged_on_cann(tmp_path, cann, feasible):
    snap = _node(tmp_path, cann)
    assert {d.identity.runtime_version for d in snap.devices if d.identity.parent is None} == {cann}
    d = Scorer().decide(request_from_pod(_pod("8.0")), from_document("npu-1", json.loads(snapshot_to_json(snap))))
    assert d.feasible is feasible, d.reason
