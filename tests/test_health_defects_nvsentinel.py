"""Issue 38 §6 (b): an Ascend ``Alarm`` (npu-smi's major alarm, severity warning in the fault
table, action none) beside an error code that fails the NPU went to NVSentinel as a fatal event
with no action: the judge makes every reason of a device its collector reports failed critical,
and the bridge read ``isFatal`` from that. Now an event's ``isFatal`` and ``recommendedAction``
come from the policy's fault catalogue (with its overrides); a promotion (``health.promote``) and a
code the catalogue does not know keep their own."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("grpc")

from test_nvsentinel import (ALARM, GPU3, XID79, NODE, NPU0, POLICY, RESTART_NPU, Connector, Judge, _fault,  # noqa: E402
                             bridges, faulty, serving, sock)
from hetero_exporter.exposition.export import ExportFailures  # noqa: E402
from hetero_exporter.health.act.nvsentinel import NvSentinelBridge, NvSentinelSettings  # noqa: E402
from hetero_exporter.health.act.nvsentinel import episodes as ep_mod  # noqa: E402
from hetero_exporter.health.detect import policy as policy_mod  # noqa: E402
from hetero_exporter.health.detect.verdicts import HealthVerdicts  # noqa: E402
from hetero_exporter.model import NodeSnapshot  # noqa: E402

__all__ = ["bridges", "sock"]  # fixtures


def _events(tracker: ep_mod.Tracker) -> dict[str, dict]:
    return {e.fields(NODE)["errorCode"][0]: e.fields(NODE) for e in tracker.pending()}


def test_an_ascend_alarm_beside_a_failing_error_code_is_not_fatal_and_asks_nothing():
    snap, ev = Judge()(1.0, faulty(NPU0, 1.0, ALARM, RESTART_NPU))
    assert snap.devices[0].health.state == "failed"
    # what the judge says of the device: both reasons critical (the collector said failed)
    assert {f.code: f.severity for f in snap.devices[0].health.reasons} == {"Alarm": "critical", "80E18005": "critical"}
    t = ep_mod.Tracker(NODE, "enforce", condition_reason=POLICY.condition_reason, catalogue=POLICY.catalogue)
    t.observe(snap, ev)
    events = _events(t)
    assert (events["Alarm"]["isFatal"], events["Alarm"]["recommendedAction"]) == (False, "NONE")
    assert (events["80E18005"]["isFatal"], events["80E18005"]["recommendedAction"]) == (True, "COMPONENT_RESET")
    # without a catalogue handed in, the vendors' tables as shipped say the same
    plain = ep_mod.Tracker(NODE, "enforce", condition_reason=POLICY.condition_reason)
    plain.observe(snap, ev)
    assert _events(plain)["Alarm"]["isFatal"] is False


def test_the_policy_overrides_decide_what_is_fatal_and_the_action():
    policy = policy_mod.load({"overrides": {"ascend": {"Alarm": {"severity": "critical", "action": "isolate-device"}}}})
    snap, ev = HealthVerdicts(policy).judge(NodeSnapshot(NODE, 1.0, (faulty(NPU0, 1.0, ALARM, RESTART_NPU),),
                                                         boot_id="b"))
    t = ep_mod.Tracker(NODE, "enforce", condition_reason=policy.condition_reason, catalogue=policy.catalogue)
    t.observe(snap, ev)
    assert (_events(t)["Alarm"]["isFatal"], _events(t)["Alarm"]["recommendedAction"]) == (True, "CONTACT_SUPPORT")


def test_a_promotion_to_failed_is_fatal_though_its_code_is_info():
    """XID 13 is info in the catalogue (an application's fault); three in 600 s promoted to failed
    is the operator's word that the GPU is failed: a fatal event, its catalogue action."""
    policy = policy_mod.load(None, [{"vendor": "nvidia", "code": "13", "count": 3, "window_seconds": 600,
                                     "to": "failed"}])
    judge = HealthVerdicts(policy)
    t = ep_mod.Tracker(NODE, "enforce", condition_reason=policy.condition_reason, catalogue=policy.catalogue)
    xid13 = _fault("nvidia", "13", "Graphics Engine Exception", "nvml")
    for n, when in enumerate((10.0, 20.0, 30.0), start=1):
        seen = dataclasses.replace(xid13, count=n, first_seen=10.0, last_seen=when)
        t.observe(*judge.judge(NodeSnapshot(NODE, when, (faulty(GPU3, when, seen=(seen,)),), boot_id="b")))
    events = _events(t)
    assert events["13"]["isFatal"] is True and events["13"]["recommendedAction"] == "RESTART_APP"
    assert "promoted: 3 x 13 in 600 s" in events["13"]["message"]


def test_through_the_bridge_the_alarm_is_not_fatal_and_its_catalogue_is_the_policys(sock, tmp_path, bridges):
    with serving(sock, Connector()) as conn:
        b = bridges(sock, tmp_path, mode="enforce")
        b.offer(*Judge()(1.0, faulty(NPU0, 1.0, ALARM, RESTART_NPU), faulty(GPU3, 1.0)))
        assert conn.wait_for(2)
    by_code = {e.errorCode[0]: e for e in conn.events}
    assert by_code["Alarm"].isFatal is False and by_code["80E18005"].isFatal is True

    policy = policy_mod.load({"overrides": {"ascend": {"Alarm": {"severity": "critical", "action": "isolate-device"}}}})
    with serving(sock, Connector()) as conn:
        b = NvSentinelBridge(NvSentinelSettings.parse({"socket": sock, "retry_min_seconds": 0.02,
                                                       "retry_max_seconds": 0.2, "timeout": 30}),
                             NODE, "enforce", None, ExportFailures(), condition_reason=policy.condition_reason,
                             catalogue=policy.catalogue)
        b.start()
        try:
            b.offer(*HealthVerdicts(policy).judge(NodeSnapshot(NODE, 1.0, (faulty(NPU0, 1.0, ALARM, RESTART_NPU),),
                                                               boot_id="b")))
            assert conn.wait_for(2)
        finally:
            b.close()
    by_code = {e.errorCode[0]: e for e in conn.events}
    assert by_code["Alarm"].isFatal is True


def test_a_gpu_lost_before_its_first_read_is_named_by_its_pci_address():
    """NVML could not read GPU 2 at the first start (uuid ``nvidia-unidentified-2``); the PCI bus
    gave its address (sources/pci_presence.locate). NVSentinel gets the address, never the
    placeholder as a GPU_UUID it could not match to anything; an identified GPU keeps both."""
    lost = dataclasses.replace(GPU3, index=2, uuid="nvidia-unidentified-2", pci_address="0000:38:00.0")
    snap, ev = Judge()(1.0, faulty(lost, 1.0, XID79), faulty(GPU3, 1.0, XID79))
    t = ep_mod.Tracker(NODE, "enforce", condition_reason=POLICY.condition_reason, catalogue=POLICY.catalogue)
    t.observe(snap, ev)
    entities = sorted(tuple(e.fields(NODE)["entitiesImpacted"]) for e in t.pending())
    assert entities == sorted([(("PCI", "0000:38:00.0"),),
                               (("PCI", "0000:3b:00.0"), ("GPU_UUID", GPU3.uuid))])
