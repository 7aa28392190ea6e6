"""fixtures/scoring/: the example cluster and pods of `hetero-exporter score`, and the command on them.

nodes.json is built from scoring.synthetic (shapes with their vendors' documented topologies);
this test fails when the committed file differs from what the builder makes
(HETERO_UPDATE_FIXTURES=1 rewrites it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from hetero_exporter import cli
from hetero_exporter.model import compact_document, snapshot_to_json
from hetero_exporter.scoring import synthetic

FIX = ROOT / "fixtures" / "scoring"
T0 = 1764400000.0
NOW = T0 + 60


def cluster() -> dict:
    """The example cluster: two HGX H100 (one half busy), a DGX-1 with GPU 2 failed, an A100 PCIe
    box with GPU 0 busy, an Atlas 800T A2 (Ascend 910B) and an MI300X node 20 minutes stale."""
    return {
        "hgx-busy": synthetic.node("hgx-busy", "hgx-h100", time=T0, loads={0: 0.9, 1: 0.9, 2: 0.9, 3: 0.9}),
        "hgx-idle": synthetic.node("hgx-idle", "hgx-h100", time=T0),
        "dgx1-gpu2-failed": synthetic.node("dgx1-gpu2-failed", "dgx1-v100", time=T0, health={2: "failed"}),
        "a100-pcie": synthetic.node("a100-pcie", "pcie-a100", time=T0, loads={0: 0.8}),
        "atlas-910b": synthetic.node("atlas-910b", "atlas800-910b", time=T0),
        "mi300x": synthetic.node("mi300x", "mi300x", time=T0 - 1200),
    }


def render_nodes() -> str:
    """A map node -> compact annotation document, one node a line."""
    lines = [f" {json.dumps(name)}: {json.dumps(compact_document(s), sort_keys=True, separators=(',', ':'))}"
             for name, s in cluster().items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def test_nodes_fixture_is_what_the_builder_makes():
    path = FIX / "nodes.json"
    text = render_nodes()
    if os.environ.get("HETERO_UPDATE_FIXTURES") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.read_text(encoding="utf-8") == text, "regenerate with HETERO_UPDATE_FIXTURES=1"


def _score(capsys, pod: str, nodes: str = str(FIX / "nodes.json"), *extra: str) -> tuple[int, str]:
    rc = cli.main(["score", "--pod", str(FIX / pod), "--nodes", nodes, "--now", str(NOW), *extra])
    return rc, capsys.readouterr().out


def test_score_four_gpus_prefers_the_packed_node_and_skips_the_failed_gpu(capsys):
    rc, out = _score(capsys, "pod-4gpu.yaml", str(FIX / "nodes.json"), "--json")
    assert rc == 0
    doc = json.loads(out)
    rows = {r["node"]: r for r in doc["nodes"]}
    assert doc["nodes"][0]["node"] == "hgx-busy"  # binpack: the half-used HGX first
    assert [d["index"] for d in rows["hgx-busy"]["devices"]] == [4, 5, 6, 7]  # its idle half
    assert [d["index"] for d in rows["dgx1-gpu2-failed"]["devices"]] == [4, 5, 6, 7]  # the intact NVLink quad
    assert not rows["atlas-910b"]["feasible"] and "no nvidia.com/gpu devices" in rows["atlas-910b"]["reason"]


def test_score_text_output_explains_each_node(capsys):
    rc, out = _score(capsys, "pod-new-driver.yaml")
    assert rc == 0
    assert "driver 535.104.05 older than required 550.54" in out
    assert out.splitlines()[0].startswith("pod ml/needs-550: 1 x nvidia.com/gpu, driver >= 550.54")


def test_score_vendor_fallback_example(capsys):
    rc, out = _score(capsys, "pod-prefers-nvidia.yaml", str(FIX / "nodes.json"), "--json")
    doc = json.loads(out)
    feasible = [r for r in doc["nodes"] if r["feasible"]]
    assert rc == 0 and [r["node"] for r in feasible] == ["atlas-910b"]
    assert feasible[0]["group"] == "huawei.com/Ascend910"
    assert "driver 550.54.15 older than required 560.0" in {r["node"]: r for r in doc["nodes"]}["hgx-idle"]["reason"]


def test_score_spread_example(capsys):
    rc, out = _score(capsys, "pod-2gpu-spread.yaml", str(FIX / "nodes.json"), "--json")
    rows = {r["node"]: r for r in json.loads(out)["nodes"]}
    assert rc == 0
    assert rows["hgx-idle"]["score"] > rows["hgx-busy"]["score"]  # spread: away from the busy node
    assert [d["index"] for d in rows["hgx-busy"]["devices"]] == [4, 5]


def test_score_accepts_full_inspect_documents_as_a_list(tmp_path, capsys):
    docs = [json.loads(snapshot_to_json(s)) for s in cluster().values()]
    path = tmp_path / "full.json"
    path.write_text(json.dumps(docs), encoding="utf-8")
    rc, out = _score(capsys, "pod-4gpu.yaml", str(path), "--json")
    compact_rc, compact_out = _score(capsys, "pod-4gpu.yaml", str(FIX / "nodes.json"), "--json")
    assert rc == compact_rc == 0
    assert json.loads(out)["nodes"] == json.loads(compact_out)["nodes"]


def test_score_accepts_annotation_strings_and_a_node_list(tmp_path, capsys):
    from hetero_exporter.model import compact_json
    snaps = cluster()
    as_strings = tmp_path / "strings.json"
    as_strings.write_text(json.dumps({n: compact_json(s) for n, s in snaps.items()}), encoding="utf-8")
    node_list = tmp_path / "nodelist.json"
    node_list.write_text(json.dumps({"kind": "NodeList", "items": [
        {"metadata": {"name": n, "annotations": {"hetero-exporter.io/devices": compact_json(s)}}}
        for n, s in snaps.items()] + [{"metadata": {"name": "cpu-only"}}]}), encoding="utf-8")
    _, base = _score(capsys, "pod-4gpu.yaml", str(FIX / "nodes.json"), "--json")
    for path in (as_strings, node_list):
        rc, out = _score(capsys, "pod-4gpu.yaml", str(path), "--json")
        rows = [r for r in json.loads(out)["nodes"] if r["node"] != "cpu-only"]
        assert rc == 0 and rows == json.loads(base)["nodes"]
    rows = {r["node"]: r for r in json.loads(out)["nodes"]}
    assert "no hetero-exporter.io/devices annotation" in rows["cpu-only"]["reason"]


@pytest.mark.parametrize("content, message", [
    ("spec: [unclosed", "not YAML"),
    ("metadata: {annotations: {hetero-exporter.io/request: '{\"count\": 0}'}}", "count"),
    ("kind: Deployment\nspec: {}", "no pod template"),
])
def test_score_bad_pod_is_a_usage_error(tmp_path, capsys, content, message):
    pod = tmp_path / "pod.yaml"
    pod.write_text(content, encoding="utf-8")
    rc = cli.main(["score", "--pod", str(pod), "--nodes", str(FIX / "nodes.json")])
    err = capsys.readouterr().err
    assert rc == cli.EXIT_USAGE and message in err and "Traceback" not in err


def test_score_reads_a_workload_template(tmp_path, capsys):
    pod = tmp_path / "job.yaml"
    pod.write_text("kind: Job\nmetadata: {name: j, namespace: batch}\nspec:\n  template:\n    spec:\n"
                   "      containers: [{name: c, resources: {limits: {huawei.com/Ascend910: 8}}}]\n",
                   encoding="utf-8")
    rc = cli.main(["score", "--pod", str(pod), "--nodes", str(FIX / "nodes.json"), "--now", str(NOW), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["pod"] == "batch/j"
    assert [r["node"] for r in doc["nodes"] if r["feasible"]] == ["atlas-910b"]


def test_score_no_feasible_node_exits_1(tmp_path):
    pod = tmp_path / "pod.yaml"
    pod.write_text("spec: {containers: [{name: c, resources: {limits: {cambricon.com/mlu: 1}}}]}", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "hetero_exporter", "score", "--pod", str(pod),
                           "--nodes", str(FIX / "nodes.json")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "no cambricon.com/mlu devices here" in proc.stdout
