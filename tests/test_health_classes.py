"""Issue 38 §1: device classes (``health.classes``) and ``health --dry-run --json``.

Checked at load (one line naming the entry); first match wins, a device of no class keeps the
node-wide settings; a class decides its failed devices' DeviceTaintRule effect, whether they
taint the node, cordon it, evict their pods, and its budget share. Per vendor (all ten), the class
and promotion tables go through the rules, the plan and the dry-run report; the CLI prints the
report as JSON of a fixed schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetero_exporter import cli
from hetero_exporter import config as config_mod
from hetero_exporter import vendors
from hetero_exporter.health.act import report
from hetero_exporter.health.detect import policy as policy_mod
from hetero_exporter.health.detect import rules
from hetero_exporter.health.plan import ClusterView, RemedyConfig, plan
from hetero_exporter.health.plan import classes as classes_mod
from hetero_exporter.health.plan.budget import Budget, ClassBudget, class_taints
from hetero_exporter.model import DeviceIdentity, DeviceSample, Fault, Health, NodeSnapshot
from hetero_exporter.model.errors import InputError
from hetero_exporter.model.evaluation import Evaluation

ROOT = Path(__file__).resolve().parent.parent
ALL_VENDORS = str(ROOT / "fixtures" / "scenarios" / "all-vendors.yaml")
VENDORS = sorted(vendors.specs())
T0 = 1_764_400_000.0
NODE = "node-1"


def device(vendor, index, model, faults=(), state="ok", reasons=(), parent=None, uuid=None):
    return DeviceSample(identity=DeviceIdentity(vendor=vendor, kind="gpu", index=index, uuid=uuid or f"{vendor}-{index}",
                                                model=model, pci_address=f"0000:{0x18 + index:02x}:00.0",
                                                parent=parent),
                        timestamp=0.0, health=Health(state, tuple(reasons)), faults=tuple(faults))


# --------------------------------------------------------------------------- the config

@pytest.mark.parametrize("bad, where", [
    ([{"name": "a", "match": {"vendor": "nvidia"}}, {"name": "b", "match": {"vendor": "nvdia"}}],
     "health.classes[1].match.vendor"),
    ([{"name": "a", "match": {"vendor": "nvidia"}, "device_taint_effect": "Evict"}],
     "health.classes[0].device_taint_effect"),
    ([{"name": "a", "match": {"vendor": "nvidia"}, "budget_share": 1.5}], "health.classes[0].budget_share"),
    ([{"name": "a", "match": {"vendor": "nvidia"}, "node_taint": "false"}], "health.classes[0].node_taint"),
    ([{"name": "Not A Label", "match": {"vendor": "nvidia"}}], "health.classes[0].name"),
    ([{"name": "a", "match": {}}], "health.classes[0].match"),
    ([{"name": "a"}], "health.classes[0]: a class needs a name and a match"),
    ([{"name": "a", "match": {"colour": "red"}}], "health.classes[0].match: unknown keys"),
    ([{"name": "a", "match": {"node_labels": {"zone": 3}}}], "health.classes[0].match.node_labels.zone"),
    ([{"name": "a", "match": {"kind": "gpu"}}, {"name": "a", "match": {"kind": "npu"}}], "health.classes[1].name"),
])
def test_a_bad_class_is_refused_at_load_naming_the_entry(bad, where):
    with pytest.raises(InputError) as e:
        config_mod.from_dict({"health": {"classes": bad}})
    assert where in str(e.value) and "\n" not in str(e.value)


def test_a_bad_class_exits_2_with_one_line(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("health:\n  classes:\n    - {name: a, match: {vendor: nvidia}}\n"
                   "    - {name: b, match: {vendor: nvdia}}\n")
    assert cli.main(["health", "--dry-run", "--simulate", ALL_VENDORS, "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert "health.classes[1].match.vendor" in err and "\n" not in err


# --------------------------------------------------------------------------- matching

CLASSES = classes_mod.parse("health.classes", [
    {"name": "inference", "match": {"vendor": "nvidia", "model": "l40s*"}, "device_taint_effect": "NoExecute",
     "node_taint": False},
    {"name": "zone-a", "match": {"node_labels": {"topology.kubernetes.io/zone": "a-*"}}, "cordon": True},
    {"name": "dra", "match": {"pool": "gpu.nvidia.com/*"}, "evict_pods": True},
    {"name": "ascend-910", "match": {"resource": "huawei.com/Ascend910*"}, "budget_share": 0.25},
    {"name": "catch-nvidia", "match": {"vendor": "nvidia"}},
])
BASE = classes_mod.default_policy(no_execute=False, cordon=False, evict_pods=False)


def test_first_match_wins_and_every_key_of_match_is_read():
    snap = NodeSnapshot(node=NODE, time=T0, devices=(
        device("nvidia", 0, "L40S-48GB"), device("nvidia", 1, "H100-SXM5-80GB"), device("nvidia", 2, "H100-SXM5-80GB"),
        device("ascend", 0, "910B3"), device("amd", 0, "MI300X"),
        device("nvidia", 9, "", parent="nvidia-1", uuid="MIG-1")))
    table = classes_mod.assign(snap, CLASSES, BASE, {"topology.kubernetes.io/zone": "b-1"},
                               {"nvidia-2": {"gpu.nvidia.com/node-1"}}, {"ascend-0": "huawei.com/Ascend910"})
    got = {u: table.of(u).device_class for u in ("nvidia-0", "nvidia-1", "nvidia-2", "ascend-0", "amd-0", "MIG-1")}
    assert got == {"nvidia-0": "inference", "nvidia-1": "catch-nvidia", "nvidia-2": "dra", "ascend-0": "ascend-910",
                   "amd-0": "", "MIG-1": "catch-nvidia"}  # the MIG instance takes its parent's
    assert table.of("nvidia-0").device_taint_effect == "NoExecute" and table.of("nvidia-0").node_taint is False
    assert table.of("amd-0") == BASE  # no class: the node-wide settings
    zoned = classes_mod.assign(snap, CLASSES, BASE, {"topology.kubernetes.io/zone": "a-2"}, {}, {})
    assert zoned.of("amd-0").device_class == "zone-a" and zoned.of("amd-0").cordon
    assert table.shares(["ascend-0", "nvidia-0"]) == {"ascend-910": 0.25}


def test_node_taint_of_a_class_decides_whether_its_failure_taints_the_node():
    pol = policy_mod.load()
    lost = Fault(code="gpu-lost", fault_class="device-lost", action="reboot-node", severity="critical")
    devices = tuple(device("nvidia", i, "M", state="failed" if i == 0 else "ok", reasons=(lost,) if i == 0 else ())
                    for i in range(8))
    snap = NodeSnapshot(node=NODE, time=T0, devices=devices, boot_id="b")
    _, verdicts = rules.step(rules.State(), snap, pol)
    assert rules.node_verdict(snap, verdicts, pol).unhealthy  # device-lost is node-level
    assert not rules.node_verdict(snap, verdicts, pol, {"nvidia-0": False}).unhealthy
    # an app error fails the device alone: a class with node_taint true taints the node for it
    app = Fault(code="48", fault_class="memory-ecc", action="reset-device", severity="critical", count=1)
    snap = NodeSnapshot(node=NODE, time=T0, devices=(device("nvidia", 0, "M", faults=(app,)),) + devices[1:])
    _, verdicts = rules.step(rules.State(), snap, pol)
    assert not rules.node_verdict(snap, verdicts, pol).unhealthy
    nv = rules.node_verdict(snap, verdicts, pol, {"nvidia-0": True})
    assert nv.unhealthy and nv.culprits == ("nvidia-0",)


def test_a_class_share_bounds_the_taint_and_is_counted_from_the_books():
    cfg = RemedyConfig(budget_max_fraction=1.0)
    share = ClassBudget("training", 0.25, held_by_others=1)
    assert not Budget(total=4, tainted=1, classes=(share,)).allows(cfg)  # 1 of its 1 is taken
    assert Budget(total=8, tainted=1, classes=(share,)).allows(cfg)  # 8 nodes: 2 for the class
    assert not Budget(total=8, tainted=1, classes=(ClassBudget("x", 0.0, 0),)).allows(cfg)  # share 0: never
    nodes = [{"metadata": {"name": n, "annotations": {cfg.book_annotation: json.dumps(
        {"v": 1, "taint": {"value": "x", "effects": ["NoSchedule"], "applied": applied, "since": 1, "classes": cls}})}}}
        for n, applied, cls in (("a", True, ["training"]), ("b", False, ["training"]), ("c", True, ["other", 7]))]
    nodes.append({"metadata": {"name": "d", "annotations": {cfg.book_annotation: "{not json"}}})
    assert class_taints(nodes, cfg) == {"training": {"a"}, "other": {"c"}}


# --------------------------------------------------------------------------- per vendor, through the dry-run report

def _vendor_setup(vendor):
    code = next((c for c, i in policy_mod.vendor_table(vendor).entries.items() if i.severity == "critical"), "lost")
    cfg = RemedyConfig.from_mapping({"classes": [
        {"name": "train", "match": {"vendor": vendor, "model": "TRAIN*"}, "device_taint_effect": "NoExecute",
         "node_taint": True, "cordon": True},
        {"name": "infer", "match": {"vendor": vendor}, "device_taint_effect": "None", "node_taint": False,
         "evict_pods": True}]}, mode="enforce")
    pol = policy_mod.load(None, [{"vendor": vendor, "code": "burst-*", "count": 3, "window_seconds": 600, "to": "failed"}])
    return code, cfg, pol


def _slices(devices):
    return ({"spec": {"nodeName": NODE, "driver": "dra.example.com", "pool": {"name": NODE},
                      "devices": [{"name": f"d{i}", "attributes": {"uuid": {"string": d.identity.uuid}}}
                                  for i, d in enumerate(devices)]}},)


@pytest.mark.parametrize("vendor", VENDORS)
def test_each_vendor_through_classes_promotion_and_the_dry_run_report(vendor):
    code, cfg, pol = _vendor_setup(vendor)
    fail = Fault(code=code, fault_class="x", action="reset-device", severity="critical", count=1, first_seen=T0)

    def snap(t, bursts):
        burst = Fault(code="burst-7", severity="info", count=bursts, first_seen=T0, last_seen=T0 + t)
        devices = (device(vendor, 0, "TRAIN-1", faults=(burst,) if bursts else ()),
                   device(vendor, 1, "INFER-1", faults=(fail,)), device(vendor, 2, "INFER-1"))
        return NodeSnapshot(node=NODE, time=T0 + t, devices=devices, boot_id="b")

    state = rules.State()
    dry = []
    for t, bursts in ((0, 0), (10, 1), (20, 2), (30, 3)):
        s = snap(t, bursts)
        state, verdicts = rules.step(state, s, pol)
        nv = rules.node_verdict(s, verdicts, pol)
        view = ClusterView(slices=_slices(s.devices))
        p = plan({"metadata": {"name": NODE}}, s, verdicts, nv, pol, cfg, T0 + t,
                 budget=Budget(total=10, tainted=0), view=view, occurrences=rules.occurrences(state))
        ev = Evaluation(T0 + t, verdicts, nv, {}, occurrences=rules.occurrences(state))
        dry.append(json.loads(report.to_json(report.build(s, ev, p, pol, cfg, "test"))))
    first, last = dry[1], dry[-1]
    d0, d1, d2 = first["devices"]
    assert (d0["class"], d1["class"], d2["class"]) == ("train", "infer", "infer")
    assert d1["state"] == "failed" and d1["device_taint_effect"] == "None" and d1["device_taint_rule"] == "create"
    assert d1["evict_pods"] and not d1["taints_node"]
    assert not first["node"]["unhealthy"] and first["node"]["taint"]["action"] == "none"
    d0 = last["devices"][0]
    assert d0["state"] == "failed" and d0["reasons"][0]["message"] == "promoted: 3 x burst-7 in 600 s"
    assert d0["device_taint_effect"] == "NoExecute" and d0["taints_node"] and d0["cordon"]
    assert d0["occurrences"] == {"burst-7": 3}
    assert last["node"]["unhealthy"] and last["node"]["taint"]["action"] == "add"
    assert last["node"]["cordon"] == "cordon"


# --------------------------------------------------------------------------- the CLI's JSON

REPORT_KEYS = {"version", "mode", "classes", "node", "devices"}
NODE_KEYS = {"name", "source", "unhealthy", "why", "taint", "condition", "cordon", "evictions", "budget",
             "events", "explain"}
DEVICE_KEYS = {"uuid", "vendor", "kind", "index", "model", "pci_address", "parent", "class", "state", "reasons",
               "pending", "occurrences", "device_taint_effect", "device_taint_rule", "taints_node", "cordon",
               "evict_pods"}
REASON_KEYS = {"code", "class", "action", "severity", "message", "text"}


def _check_schema(doc):
    """The report's schema (version 1): every key, and the type of each value."""
    assert set(doc) == REPORT_KEYS and doc["version"] == 1 and doc["mode"] == "enforce"
    node = doc["node"]
    assert set(node) == NODE_KEYS
    assert set(node["taint"]) == {"key", "value", "effects", "action"}
    assert node["taint"]["action"] in ("add", "keep", "remove", "refused", "none")
    assert node["condition"] is None or set(node["condition"]) == {"type", "status", "reason", "message", "write"}
    assert node["cordon"] in ("cordon", "uncordon", "keep", "none")
    assert all(isinstance(x, str) for x in node["evictions"] + node["explain"])
    assert all(set(e) == {"type", "reason", "message"} for e in node["events"])
    for d in doc["devices"]:
        assert set(d) == DEVICE_KEYS
        assert isinstance(d["index"], int) and isinstance(d["taints_node"], bool)
        assert d["class"] is None or d["class"] in doc["classes"]
        assert d["state"] in ("ok", "degraded", "failed", "unknown", "recovering")
        assert d["device_taint_effect"] in (None, "NoSchedule", "NoExecute", "None")
        assert all(set(r) == REASON_KEYS for r in d["reasons"])
        assert all(isinstance(n, int) for n in d["occurrences"].values())


def test_dry_run_json_classes_every_vendor_of_the_all_vendors_node(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("health:\n  classes:\n" + "".join(
        f"    - {{name: {v}-c, match: {{vendor: {v}}}, device_taint_effect: {e}}}\n"
        for v, e in zip(VENDORS, ["NoSchedule", "NoExecute"] * 5)))
    assert cli.main(["health", "--dry-run", "--json", "--simulate", ALL_VENDORS, "--config", str(cfg),
                     "--log-level", "error"]) == 0
    doc = json.loads(capsys.readouterr().out)
    _check_schema(doc)
    assert doc["classes"] == [f"{v}-c" for v in VENDORS]
    seen = {d["vendor"] for d in doc["devices"]}
    assert seen == set(VENDORS)
    assert all(d["class"] == f"{d['vendor']}-c" for d in doc["devices"])


def test_dry_run_json_shows_a_promotion_from_the_kernel_log(tmp_path, capsys, monkeypatch):
    """Three XID 13 lines in the kernel log before the dry-run's one read: promoted to failed."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(XID13_KERNEL_LOG)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("health:\n  promote:\n    - {vendor: nvidia, code: '13', count: 3, window_seconds: 600, to: failed}\n")
    assert cli.main(["health", "--dry-run", "--json", "--simulate", str(scenario), "--at", "320",
                     "--config", str(cfg), "--log-level", "error"]) == 0
    doc = json.loads(capsys.readouterr().out)
    _check_schema(doc)
    gpu = doc["devices"][1]
    assert gpu["state"] == "failed" and gpu["occurrences"] == {"13": 3}
    assert gpu["reasons"][0]["message"] == "promoted: 3 x 13 in 600 s"
    assert doc["node"]["condition"]["reason"] == "NvidiaXid13"
    # and the text report says it too
    assert cli.main(["health", "--dry-run", "--simulate", str(scenario), "--at", "320", "--config", str(cfg),
                     "--log-level", "error"]) == 0
    assert "promoted: 3 x 13 in 600 s" in capsys.readouterr().out


XID13_KERNEL_LOG = """
name: xid13-kernel
node: gpu-node-13
devices:
  - vendor: nvidia
    count: 2
    product: "NVIDIA H100 80GB HBM3"
    memory_total: 85520809984
    driver_version: "550.54.15"
    pci_address: "0000:18:00.0"
    pci_stride: 16
    values: {utilization_ratio: 0.5, memory_used_bytes: 20GiB, temperature_core_celsius: 55, power_watts: 400}
kernel_log:
  - {at: 100, vendor: nvidia, index: 1, line: "NVRM: Xid (PCI:{bus}): 13, pid=1234, name=python, Graphics Exception"}
  - {at: 200, vendor: nvidia, index: 1, line: "NVRM: Xid (PCI:{bus}): 13, pid=1234, name=python, Graphics Exception"}
  - {at: 300, vendor: nvidia, index: 1, line: "NVRM: Xid (PCI:{bus}): 13, pid=1235, name=python, Graphics Exception"}
"""


def test_the_worked_mixed_node_of_docs_health_md(capsys, monkeypatch):
    """docs/health.md "A mixed node, worked": the command it shows gives what it says (training's
    promoted H100 taints and cordons the node, inference's L40S only gets its NoExecute device
    taint), and its --json twin carries the same plan."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    args = ["health", "--dry-run", "--simulate", str(ROOT / "fixtures/scenarios/health-classes-mixed.yaml"),
            "--at", "320", "--config", str(ROOT / "fixtures/config/health-classes.yaml"), "--log-level", "error"]
    doc_text = (ROOT / "docs" / "health.md").read_text()
    assert " ".join(args[:7]).replace(str(ROOT) + "/", "") in " ".join(doc_text.replace("\\\n", " ").split())
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    shown = [line.strip() for line in out.splitlines()]
    for line in ("-> class training; device taint NoSchedule (dra-not-read); taints the node; cordon on; "
                 "evict pods off; counted 3 x 13",
                 "-> class inference; device taint NoExecute (dra-not-read); no node taint; cordon off; evict pods on",
                 "taint       hetero-exporter.io/accelerator-unhealthy=app-error:NoSchedule",
                 "cordon      gpu-mixed-1"):
        assert line in shown and line in doc_text
    assert cli.main([*args[:2], "--json", *args[2:]]) == 0
    doc = json.loads(capsys.readouterr().out)
    _check_schema(doc)
    by_class = {d["class"]: d for d in doc["devices"] if d["state"] == "failed"}
    assert by_class["training"]["taints_node"] is True and by_class["inference"]["taints_node"] is False
    assert by_class["inference"]["device_taint_effect"] == "NoExecute"
    assert doc["node"]["cordon"] and doc["node"]["taint"]["action"] == "add"
