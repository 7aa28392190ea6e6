"""Issue 37, typed joints: one fault catalogue (the vendors' tables with the policy's overrides),
read by the rules, the texts and the fault counters alike."""

from __future__ import annotations

from hetero_exporter.exposition.collector import build_families
from hetero_exporter.health.detect import policy as policy_mod
from hetero_exporter.health.detect import texts
from hetero_exporter.health.detect.verdicts import HealthVerdicts
from hetero_exporter.model import DeviceIdentity, DeviceSample, NodeSnapshot
from hetero_exporter.model import names as N
from hetero_exporter.sdk.cli_collector import FaultEpisodes, table_fault
from hetero_exporter.sdk.faults import health_of

OVERRIDE = {"overrides": {"nvidia": {"94": {"action": "reset-device", "description": "ours: reset it"}}}}


def _snapshot() -> NodeSnapshot:
    """A GPU whose collector saw Xid 94 (shipped: restart-app), as a CLI collector builds it."""
    episodes = FaultEpisodes()
    ident = DeviceIdentity(vendor="nvidia", kind="gpu", index=0, uuid="GPU-0")
    active = episodes.update(ident.uuid, [table_fault("nvidia", "94", "", "nvidia-smi")], 100.0)
    d = DeviceSample(identity=ident, timestamp=100.0, health=health_of(active), faults=episodes.faults(ident.uuid))
    return NodeSnapshot(node="n", time=100.0, devices=(d,))


def _fault_counter_actions(snap: NodeSnapshot) -> dict[str, str]:
    fam = next(f for f in build_families(snap) if f.name == N.FAULT_EVENTS.family)
    return {s.labels["code"]: s.labels["action"] for s in fam.samples}


def test_the_fault_counter_shows_the_overridden_action():
    snap = _snapshot()
    assert snap.devices[0].faults[0].action == "restart-app"  # the collector's: the shipped table
    judged, _ = HealthVerdicts(policy_mod.load(OVERRIDE)).judge(snap)
    assert _fault_counter_actions(judged) == {"94": "reset-device"}
    unconfigured, _ = HealthVerdicts(policy_mod.load()).judge(snap)
    assert _fault_counter_actions(unconfigured) == {"94": "restart-app"}


def test_rules_texts_and_counters_read_one_catalogue():
    policy = policy_mod.load(OVERRIDE)
    assert policy.catalogue.lookup("nvidia", "94").action == "reset-device"
    assert policy.catalogue.lookup("nvidia", "79").action == "reboot-node"  # not overridden: shipped
    assert policy.catalogue.code_prefix("nvidia") == "Xid"
    fault = policy.classify("nvidia", table_fault("nvidia", "94", "", "nvidia-smi"))
    assert (fault.action, fault.severity) == ("reset-device", "warning")
    assert "ours: reset it" in texts.fault_text("nvidia", fault, policy)


# A book as an agent writes it on the Node: every record of the typed Book (health/plan/records.py),
# in the JSON form the earlier, dict-typed Book wrote (pinned: the wire format is unchanged)
BOOK_JSON = (
    '{"black_hole":{"announced":{"allocatable-shortfall":90.0},"shortfall":{"nvidia.com/gpu":80.0}},'
    '"boot_id":"b-1","cordoned":false,"devices":{"GPU-0":{"classes":["device-lost"],"codes":["79"],'
    '"index":0,"since":100.0,"state":"failed","vendor":"nvidia"}},"inventory_hash":"h","inventory_time":99.5,'
    '"labels":["hetero-exporter.io/accelerator"],"outbox":[{"action":"Fault","id":"0123456789abcdef0123",'
    '"message":"m","reason":"NvidiaXid79","time":100.0,"type":"Warning"},{"action":"Fault","id":"pod-x",'
    '"message":"p","pod":{"name":"p","namespace":"ns","uid":"u"},"reason":"AcceleratorDeviceFailed",'
    '"time":100.0,"type":"Warning"}],"pods":{"ns/p":{"devices":["GPU-0"],"evict_failures":0,'
    '"evict_retry_at":0.0,"evicted":false,"message":"m","reason":"NvidiaXid79","recovered_at":null,'
    '"since":100.0,"status":"False","uid":"u"}},"refused_since":null,"scheduler":{"volcano.sh/gpu-unhealthy-ids":'
    '["0"]},"sticky":{"GPU-0":[{"clear_on":["boot"],"fault":{"class":"device-lost","code":"79"},'
    '"level":"failed","lost":false,"recovery_pending":false,"since":100.0}]},"suppressed":false,'
    '"taint":{"applied":true,"effects":["NoSchedule"],"since":100.0,"value":"device-lost"},"v":1}')


def test_the_node_book_reads_back_and_writes_byte_identical():
    from hetero_exporter.health.plan import Book
    book = Book.from_annotation(BOOK_JSON)
    assert not book.broken
    assert book.to_json() == BOOK_JSON
    assert book.taint is not None and book.taint["value"] == "device-lost"
    assert book.devices["GPU-0"]["classes"] == ["device-lost"] and book.outbox[1]["pod"]["uid"] == "u"
    assert Book().to_json() == ('{"boot_id":null,"cordoned":false,"devices":{},"inventory_hash":"",'
                                '"inventory_time":0.0,"labels":[],"outbox":[],"refused_since":null,"sticky":{},'
                                '"suppressed":false,"taint":null,"v":1}')


def test_report_is_the_collectors_word_before_and_after_the_judge():
    """``health`` is the verdict, ``report`` what the collector said, at every stage: the rules
    judge the report, so a judged snapshot judged again counts the collector's warning again."""
    from hetero_exporter.model import Fault, Health
    fan = Fault(code="fan", severity="warning", fault_class="thermal", message="fan slow")
    ident = DeviceIdentity(vendor="nvidia", kind="gpu", index=0, uuid="GPU-0")
    raw = NodeSnapshot(node="n", time=1.0, devices=(
        DeviceSample(identity=ident, timestamp=1.0, health=Health("degraded", (fan,))),))
    assert raw.devices[0].report == raw.devices[0].health == Health("degraded", (fan,))
    judge = HealthVerdicts(policy_mod.load())
    judged, first = judge.judge(raw)
    d = judged.devices[0]
    assert d.health.state == "ok" and first.verdicts["GPU-0"].pending == {"fan": 1}  # not confirmed yet
    assert d.report == Health("degraded", (fan,)) == d.reported_health
    again, second = judge.judge(judged)
    assert second.verdicts["GPU-0"].pending == {"fan": 2}  # the report judged again, not the verdict
    assert again.devices[0].report == Health("degraded", (fan,))
