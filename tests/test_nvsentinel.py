"""NVSentinel HealthEvent bridge (issue 28, part 2): fault episodes of the judged snapshots (the real
judge, ``HealthVerdicts``, over DeviceSamples built as the collectors build them) sent to a real
gRPC platform connector on a unix socket, built from the same generated messages; the outbox in
the state dir across restarts and outages; the state file read back as hostile; the config
section; the generated modules; episodes over random histories (hypothesis)."""

from __future__ import annotations

import ast
import dataclasses
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from contextlib import contextmanager

import grpc
import pytest
from google.protobuf import empty_pb2
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from conftest import ROOT
from hetero_exporter import config as config_mod
from hetero_exporter.exposition.export import ExportFailures
from hetero_exporter.health.act.nvsentinel import EXPORTER, NvSentinelBridge, NvSentinelSettings
from hetero_exporter.health.act.nvsentinel import bridge as bridge_mod
from hetero_exporter.health.act.nvsentinel import episodes as ep_mod
from hetero_exporter.health.act.nvsentinel import health_event_pb2 as pb
from hetero_exporter.health.act.nvsentinel import health_event_pb2_grpc as pb_grpc
from hetero_exporter.health.act.nvsentinel import state as state_mod
from hetero_exporter.health.detect import policy as policy_mod
from hetero_exporter.health.detect import texts
from hetero_exporter.health.detect.verdicts import HealthVerdicts
from hetero_exporter.model import ACTIONS, CollectorStatus, DeviceIdentity, DeviceSample, Fault, Health, NodeSnapshot
from hetero_exporter.model.errors import EXIT_USAGE
from hetero_exporter.sampling import mark_stale
from hetero_exporter.sdk.cli_collector import table_fault
from hetero_exporter.sdk.faults import health_of
from hetero_exporter.validate import ValidationError

NODE = "gpu-node-7"
PKG = ROOT / "hetero_exporter" / "health" / "act" / "nvsentinel"
POLICY = policy_mod.load()

GPU3 = DeviceIdentity("nvidia", "gpu", 3, "GPU-5d3c2a1e-0f6b-4b7a-9a51-3f1e2d4c5b60", model="H100-SXM5-80GB",
                      pci_address="0000:3b:00.0")
NPU0 = DeviceIdentity("ascend", "npu", 0, "ascend-npu-0000", model="Ascend910B3", pci_address="0000:c1:00.0")
NPU1 = DeviceIdentity("ascend", "npu", 1, "ascend-npu-0001", model="Ascend910B3", pci_address="0000:c2:00.0")
MI300 = DeviceIdentity("amd", "gpu", 0, "fafd42f7-fbb0-22f0-94e6-63c8549834c3", model="MI300X",
                       pci_address="0000:05:00.0")


def _fault(vendor: str, code: str, message: str, source: str, count: int = 1) -> Fault:
    """A fault as a collector (or the kernel log) reports it: class, action, severity from the table."""
    return dataclasses.replace(table_fault(vendor, code, message, source), count=count)


XID79 = _fault("nvidia", "79", "GPU has fallen off the bus", "nvml")
ALARM = _fault("ascend", "Alarm", "", "npu-smi")  # npu-smi health Alarm: warning, debounced
RESTART_NPU = _fault("ascend", "80E18005", "", "npu-smi")  # MindCluster RestartNPU: critical
RAS_UMC = _fault("amd", "ras-uncorrectable-umc",
                 "amdgpu 0000:05:00.0: 2 uncorrectable hardware errors detected in umc block", "kmsg")
GPU_RESET = _fault("amd", "gpu-reset", "amdgpu 0000:05:00.0: GPU reset succeeded", "kmsg")


def faulty(ident: DeviceIdentity, t: float, *active: Fault, seen: tuple = ()) -> DeviceSample:
    """The collector's sample: the active faults as its health report (``sdk.faults.health_of``)."""
    return DeviceSample(ident, t, health=health_of(active), faults=tuple(active) + tuple(seen))


def healthy(ident: DeviceIdentity, t: float, *seen: Fault) -> DeviceSample:
    return DeviceSample(ident, t, health=Health("ok"), faults=tuple(seen))


class Judge:
    """The real judge over snapshots of this node: ``judge(t, devices)`` -> (judged snapshot, evaluation)."""

    def __init__(self) -> None:
        self.verdicts = HealthVerdicts(POLICY)

    def __call__(self, t: float, *devices: DeviceSample, boot: str = "boot-1", collectors=()) -> tuple:
        return self.verdicts.judge(NodeSnapshot(NODE, t, tuple(devices), boot_id=boot, collectors=tuple(collectors)))


# --------------------------------------------------------------------------- the platform connector


class Connector(pb_grpc.PlatformConnectorServicer):
    """NVSentinel's platform connector as far as the bridge sees it: stores every event it is sent.
    ``hang``: each call waits for ``release``; ``refuse(event)``: INVALID_ARGUMENT for a batch holding one."""

    def __init__(self, hang: bool = False, refuse=None) -> None:
        self.events: list = []
        self.calls = 0
        self.hang, self.refuse = hang, refuse
        self.entered, self.release = threading.Event(), threading.Event()
        self.inflight = 0
        self._cv = threading.Condition()

    def HealthEventOccurredV1(self, request, context):
        with self._cv:
            self.calls += 1
            self.inflight += 1
        try:
            if self.hang:
                self.entered.set()
                self.release.wait(120)
            assert request.version == 1
            if self.refuse is not None and any(self.refuse(e) for e in request.events):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "refused by the test")
            with self._cv:
                self.events.extend(request.events)
                self._cv.notify_all()
            return empty_pb2.Empty()
        finally:
            with self._cv:
                self.inflight -= 1

    def wait_for(self, n: int, timeout: float = 60.0) -> bool:
        with self._cv:
            return self._cv.wait_for(lambda: len(self.events) >= n, timeout)

    def of(self, uuid: str) -> list:
        with self._cv:
            return [e for e in self.events if _entity(e, "GPU_UUID") == uuid]


def _entity(event, kind: str):
    return next((x.entityValue for x in event.entitiesImpacted if x.entityType == kind), None)


@contextmanager
def serving(sock: str, connector: Connector):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_PlatformConnectorServicer_to_server(connector, server)
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    try:
        yield connector
    finally:
        connector.release.set()
        server.stop(0).wait(30)


@pytest.fixture
def sock():
    # unix socket paths are limited to 107 bytes: a short private directory, not tmp_path
    d = tempfile.mkdtemp(prefix="nvs-")
    yield os.path.join(d, "nvsentinel.sock")
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    os.rmdir(d)


@pytest.fixture
def bridges():
    """make(sock, state_dir, mode, **settings) -> a started bridge; every one closed at the end."""
    made: list[NvSentinelBridge] = []

    def make(sock, state_dir, mode="dry-run", failures=None, start=True, ready=None, **over):
        cfg = {"socket": sock, "retry_min_seconds": 0.02, "retry_max_seconds": 0.2, "timeout": 30,
               "settle_snapshots": 0, **over}
        b = NvSentinelBridge(NvSentinelSettings.parse(cfg), NODE, mode, str(state_dir) if state_dir else None,
                             failures or ExportFailures(), condition_reason=POLICY.condition_reason,
                             fault_text=lambda vendor, f, uuid: texts.fault_text(vendor, f, POLICY, uuid), ready=ready)
        if start:
            b.start()
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


def _until(cond, what: str, limit: float = 60.0) -> None:
    """Wait (bounded) for ``cond()``: a condition to reach, not a speed claim."""
    end = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < end, f"never: {what}"
        time.sleep(0.01)


# --------------------------------------------------------------------------- three vendors' episodes


def test_xid79_an_ascend_alarm_and_an_amd_ras_uncorrectable_each_arrive_once_then_recover_once(sock, tmp_path, bridges):
    judge = Judge()
    with serving(sock, Connector()) as conn:
        b = bridges(sock, tmp_path)
        for t in (1.0, 2.0, 3.0, 4.0):  # the Ascend alarm is a warning: confirmed on its 3rd poll
            b.offer(*judge(t, faulty(GPU3, t, XID79), faulty(NPU0, t, ALARM), faulty(NPU1, t, RESTART_NPU),
                           faulty(MI300, t, RAS_UMC)))
        assert conn.wait_for(4)
        # recoveries: a GPU reset for the MI300X (at 5), the node rebooted for the GPU (Xid 79 is
        # sticky until then; at 6), the alarm gone (its hysteresis waited out); the RestartNPU chip
        # is still reported failed
        b.offer(*judge(5.0, faulty(GPU3, 5.0, XID79), healthy(NPU0, 5, ALARM), faulty(NPU1, 5, RESTART_NPU),
                       healthy(MI300, 5, RAS_UMC, GPU_RESET)))
        for t in range(6, 16):
            b.offer(*judge(float(t), healthy(GPU3, t, XID79), healthy(NPU0, t, ALARM), faulty(NPU1, t, RESTART_NPU),
                           healthy(MI300, t, RAS_UMC, GPU_RESET), boot="boot-2"))
        assert conn.wait_for(7)
        b.close()
    gpu, npu0, npu1, amd = conn.of(GPU3.uuid), conn.of(NPU0.uuid), conn.of(NPU1.uuid), conn.of(MI300.uuid)
    assert [e.isHealthy for e in gpu] == [False, True] and [e.isHealthy for e in amd] == [False, True]
    assert [e.isHealthy for e in npu0] == [False, True] and [e.isHealthy for e in npu1] == [False]
    assert len(conn.events) == 7

    xid, ok = gpu
    assert (xid.agent, xid.version, xid.nodeName, xid.componentClass) == ("hetero-exporter", 1, NODE, "GPU")
    assert xid.checkName == "NvidiaXid79" == POLICY.condition_reason("nvidia", "79")  # the node condition's reason
    assert xid.isFatal and list(xid.errorCode) == ["79"]
    assert xid.recommendedAction == pb.RESTART_VM  # reboot-node
    assert [(x.entityType, x.entityValue) for x in xid.entitiesImpacted] == [("PCI", "0000:3b:00.0"),
                                                                          ("GPU_UUID", GPU3.uuid)]
    assert xid.message.startswith(f"nvidia GPU 3 ({GPU3.uuid}): XID 79: GPU has fallen off the bus")
    assert {k: xid.metadata[k] for k in ("vendor", "model", "device_index")} == {
        "vendor": "nvidia", "model": "H100-SXM5-80GB", "device_index": "3"}
    assert xid.generatedTimestamp.seconds == 1 and xid.processingStrategy == pb.STORE_ONLY
    # the recovery: same check, entities, error code and episode; healthy, not fatal, no action
    assert ok.isHealthy and not ok.isFatal and ok.recommendedAction == pb.NONE
    assert (ok.checkName, list(ok.errorCode), list(ok.entitiesImpacted)) == (
        xid.checkName, list(xid.errorCode), list(xid.entitiesImpacted))
    assert ok.metadata["episode_id"] == xid.metadata["episode_id"] and "boot" in ok.message
    assert ok.processingStrategy == pb.STORE_ONLY and ok.generatedTimestamp.seconds == 6

    alarm = npu0[0]
    assert (alarm.componentClass, alarm.checkName, list(alarm.errorCode)) == ("NPU", "AscendAlarm", ["Alarm"])
    assert not alarm.isFatal and alarm.recommendedAction == pb.NONE  # a warning: degraded, not failed
    assert alarm.generatedTimestamp.seconds == 3 and alarm.message.startswith(f"ascend NPU 0 ({NPU0.uuid}): ")
    chip = npu1[0]
    assert chip.isFatal and chip.recommendedAction == pb.COMPONENT_RESET and list(chip.errorCode) == ["80E18005"]
    assert chip.checkName == POLICY.condition_reason("ascend", "80E18005")

    ras, reset = amd
    assert (ras.componentClass, ras.checkName, list(ras.errorCode)) == (
        "GPU", "AmdRasUncorrectableUmc", ["ras-uncorrectable-umc"])
    assert ras.isFatal and ras.recommendedAction == pb.COMPONENT_RESET and ras.metadata["device_index"] == "0"
    assert [(x.entityType, x.entityValue) for x in ras.entitiesImpacted] == [("PCI", "0000:05:00.0"),
                                                                          ("GPU_UUID", MI300.uuid)]
    assert reset.isHealthy and "reset" in reset.message and reset.generatedTimestamp.seconds == 5


@pytest.mark.parametrize("mode, strategy", [("dry-run", pb.STORE_ONLY), ("observe", pb.STORE_ONLY),
                                            ("enforce", pb.EXECUTE_REMEDIATION)])
def test_store_only_unless_the_health_mode_is_enforce(sock, tmp_path, bridges, mode, strategy):
    judge = Judge()
    with serving(sock, Connector()) as conn:
        b = bridges(sock, tmp_path, mode=mode)
        b.offer(*judge(1.0, faulty(GPU3, 1.0, XID79)))
        b.offer(*judge(2.0, healthy(GPU3, 2.0, XID79), boot="boot-2"))
        assert conn.wait_for(2)
    assert [e.processingStrategy for e in conn.events] == [strategy, strategy]


def test_a_recovery_keeps_the_strategy_of_its_opening_across_a_mode_change(sock, tmp_path, bridges):
    """NVSentinel pairs the unhealthy and the healthy event: an episode opened in dry-run
    closes STORE_ONLY even after the agent restarted in enforce."""
    judge = Judge()
    with serving(sock, Connector()) as conn:
        first = bridges(sock, tmp_path, mode="dry-run")
        first.offer(*judge(1.0, faulty(GPU3, 1.0, XID79)))
        assert conn.wait_for(1)
        first.close()
        again = bridges(sock, tmp_path, mode="enforce")
        again.offer(*judge(2.0, healthy(GPU3, 2.0, XID79), boot="boot-2"))
        again.offer(*judge(3.0, faulty(MI300, 3.0, RAS_UMC), boot="boot-2"))
        assert conn.wait_for(3)
    assert [(e.isHealthy, e.processingStrategy) for e in conn.events] == [
        (False, pb.STORE_ONLY), (True, pb.STORE_ONLY), (False, pb.EXECUTE_REMEDIATION)]


# --------------------------------------------------------------------------- restarts and outages


def test_a_restart_resends_no_open_episode_and_sends_the_recovery_of_one_closed_meanwhile(sock, tmp_path, bridges):
    judge = Judge()
    with serving(sock, Connector()) as conn:
        first = bridges(sock, tmp_path)
        first.offer(*judge(1.0, faulty(GPU3, 1.0, XID79), faulty(MI300, 1.0, RAS_UMC)))
        assert conn.wait_for(2)
        first.close()
        # restarted, a new judge (the collector still reports both): nothing new to say
        second = bridges(sock, tmp_path)
        fresh = Judge()
        for t in (2.0, 3.0, 4.0):
            second.offer(*fresh(t, faulty(GPU3, t, XID79), faulty(MI300, t, RAS_UMC)))
        assert second.open_episodes() == sorted([(GPU3.uuid, "79"), (MI300.uuid, "ras-uncorrectable-umc")])
        assert second.pending() == 0
        second.close()
        assert len(conn.events) == 2
        # while no bridge ran, the node rebooted (the GPU is back) and the MI300X still fails
        third = bridges(sock, tmp_path)
        third.offer(*judge(5.0, healthy(GPU3, 5.0, XID79), faulty(MI300, 5.0, RAS_UMC), boot="boot-2"))
        assert conn.wait_for(3)
        third.close()
    assert len(conn.events) == 3
    last = conn.events[-1]
    assert last.isHealthy and _entity(last, "GPU_UUID") == GPU3.uuid
    assert last.metadata["episode_id"] == conn.events[0].metadata["episode_id"]


def test_a_restarted_bridge_closes_a_read_back_episode_only_after_settling(sock, tmp_path, bridges):
    """The judge of a restarted agent has no debounce history: a warning still active takes a
    few polls to be confirmed again, and must not read as a recovery meanwhile."""
    judge = Judge()
    with serving(sock, Connector()) as conn:
        first = bridges(sock, tmp_path)
        for t in (1.0, 2.0, 3.0):
            first.offer(*judge(t, faulty(NPU0, t, ALARM)))
        assert conn.wait_for(1)
        first.close()
        second = bridges(sock, tmp_path, settle_snapshots=3)
        fresh = Judge()
        for t in (4.0, 5.0, 6.0):  # judged ok, then confirmed degraded again on the 3rd poll
            second.offer(*fresh(t, faulty(NPU0, t, ALARM)))
        assert second.open_episodes() == [(NPU0.uuid, "Alarm")] and second.pending() == 0
        second.close()
    assert len(conn.events) == 1


def test_events_queued_while_the_connector_is_down_arrive_once_it_is_up(sock, tmp_path, bridges):
    judge, failures = Judge(), ExportFailures()
    b = bridges(sock, tmp_path, failures=failures)  # no socket yet
    assert failures.value(EXPORTER) == 0 and 'exporter="nvsentinel"' in _exposed(failures)
    b.offer(*judge(1.0, faulty(GPU3, 1.0, XID79)))
    b.offer(*judge(2.0, faulty(GPU3, 2.0, XID79), faulty(MI300, 2.0, RAS_UMC)))
    _until(lambda: failures.value(EXPORTER) >= 2, "failed sends counted")
    assert b.pending() == 2
    with serving(sock, Connector()) as conn:
        assert conn.wait_for(2)
        b.close()
    assert [e.checkName for e in conn.events] == ["NvidiaXid79", "AmdRasUncorrectableUmc"]
    assert b.pending() == 0


def test_an_outage_across_a_restart_loses_nothing(sock, tmp_path, bridges):
    judge = Judge()
    first = bridges(sock, tmp_path)  # never reaches the connector
    first.offer(*judge(1.0, faulty(GPU3, 1.0, XID79)))
    first.offer(*judge(2.0, healthy(GPU3, 2.0, XID79), boot="boot-2"))
    first.close()
    doc = json.loads((tmp_path / state_mod.STATE_FILE).read_text())
    assert doc["open"] == [] and len(doc["closing"]) == 1  # the recovery and the opening before it
    with serving(sock, Connector()) as conn:
        bridges(sock, tmp_path)
        assert conn.wait_for(2)
    assert [e.isHealthy for e in conn.events] == [False, True]


def test_offer_returns_while_the_connector_hangs(sock, tmp_path, bridges):
    judge = Judge()
    with serving(sock, Connector(hang=True)) as conn:
        b = bridges(sock, tmp_path, timeout=120)
        b.offer(*judge(1.0, faulty(GPU3, 1.0, XID79)))
        assert conn.entered.wait(60)  # the sender is inside the call, which does not answer
        caller = threading.Thread(target=b.offer, args=judge(2.0, faulty(GPU3, 2.0, XID79), faulty(MI300, 2.0, RAS_UMC)))
        caller.start()
        caller.join(60)
        assert not caller.is_alive(), "offer() waited on the connector"
        assert conn.inflight == 1 and not conn.release.is_set() and b.pending() == 2
        conn.release.set()
        assert conn.wait_for(2)
    assert [e.checkName for e in conn.events] == ["NvidiaXid79", "AmdRasUncorrectableUmc"]


def test_a_call_past_its_deadline_is_counted_and_sent_again(sock, tmp_path, bridges):
    judge, failures = Judge(), ExportFailures()
    conn = Connector(hang=True)
    with serving(sock, conn):
        b = bridges(sock, tmp_path, failures=failures, timeout=0.05)
        b.offer(*judge(1.0, faulty(GPU3, 1.0, XID79)))
        _until(lambda: failures.value(EXPORTER) >= 1, "a deadline exceeded counted")
        conn.hang = False
        conn.release.set()
        assert conn.wait_for(1)
        b.close()
    assert {e.checkName for e in conn.events} == {"NvidiaXid79"}  # at least once: the late call may land too


def test_an_event_the_connector_refuses_is_dropped_and_does_not_block_the_others(sock, tmp_path, bridges):
    judge, failures = Judge(), ExportFailures()
    with serving(sock, Connector(refuse=lambda e: _entity(e, "GPU_UUID") == GPU3.uuid)) as conn:
        b = bridges(sock, tmp_path, failures=failures)
        b.offer(*judge(1.0, faulty(GPU3, 1.0, XID79), faulty(MI300, 1.0, RAS_UMC)))
        assert conn.wait_for(1)
        _until(lambda: b.pending() == 0, "the refused event dropped")
        b.close()
    assert [e.checkName for e in conn.events] == ["AmdRasUncorrectableUmc"]
    assert failures.value(EXPORTER) >= 2  # the refused call(s) and the event dropped


class LateConnector(Connector):
    """A peer that stores what it is sent, then answers only once the client has given up
    (its deadline passed): every call is late. ``late_calls``: how many calls are (then prompt)."""

    def __init__(self, late_calls: int = 10**9) -> None:
        super().__init__()
        self.late_calls = late_calls

    def HealthEventOccurredV1(self, request, context):
        with self._cv:
            self.calls += 1
            late = self.calls <= self.late_calls
            self.events.extend(request.events)
            self._cv.notify_all()
        end = time.monotonic() + 60  # bounded: the client cancels at its deadline
        while late and context.is_active() and time.monotonic() < end:
            time.sleep(0.01)
        return empty_pb2.Empty()


def _meta(event, key: str) -> str:
    return dict(event.metadata)[key]


def test_a_peer_answering_past_the_deadline_gets_a_bounded_number_of_copies_of_one_id(sock, tmp_path, bridges):
    """Issue 35, item 11: such a peer got 5 copies of one event in 40 s, and more after."""
    bound = 3  # docs/nvsentinel.md: an event is sent at most 3 times to a peer that never answers in time
    judge, failures = Judge(), ExportFailures()
    conn = LateConnector()
    with serving(sock, conn):
        b = bridges(sock, tmp_path, failures=failures, timeout=0.2)
        b.offer(*judge(1.0, faulty(GPU3, 1.0, XID79)))
        # given up, or more copies than the bound: whichever comes first (bounded wait)
        _until(lambda: b.pending() == 0 or len(conn.events) > bound, "given up or flooded", 120)
        copies = list(conn.events)
    assert 1 <= len(copies) <= bound, f"{len(copies)} copies of one event"
    assert len({_meta(e, "event_id") for e in copies}) == 1 and _meta(copies[0], "event_id").endswith("-opened")
    assert {_meta(e, "episode_id") for e in copies} == {_meta(copies[0], "event_id").rsplit("-", 1)[0]}
    assert b.pending() == 0 and failures.value(EXPORTER) == len(copies) + 1  # each call, and the event given up


def test_a_resend_after_a_late_answer_carries_the_same_event_id_and_the_recovery_its_own(sock, tmp_path, bridges):
    judge, failures = Judge(), ExportFailures()
    conn = LateConnector(late_calls=1)
    with serving(sock, conn):
        b = bridges(sock, tmp_path, failures=failures, timeout=0.2)
        b.offer(*judge(1.0, faulty(GPU3, 1.0, XID79)))
        assert conn.wait_for(2)  # the late copy, then the resend answered in time
        _until(lambda: b.pending() == 0, "the resend acknowledged")
        b.offer(*judge(2.0, healthy(GPU3, 2.0)))
        assert conn.wait_for(3)
    opened, resent, recovered = conn.events[:3]
    assert _meta(opened, "event_id") == _meta(resent, "event_id") != _meta(recovered, "event_id")
    assert recovered.isHealthy and _meta(recovered, "event_id").endswith("-recovered")
    assert _meta(opened, "episode_id") == _meta(recovered, "episode_id")


class _StubClient:
    """The bridge's client in one test: fails every call with ``error``, records the deadlines."""

    def __init__(self, error) -> None:
        self.error, self.deadlines = error, []

    def send(self, events, timeout=None) -> None:
        self.deadlines.append(timeout)
        raise self.error

    def close(self) -> None:
        pass


def test_late_answers_grow_the_deadline_to_a_cap_and_an_absent_socket_costs_no_attempt(tmp_path, bridges):
    from hetero_exporter.health.act.nvsentinel.client import SendError
    judge = Judge()
    late = bridges(sock="/nonexistent.sock", state_dir=None, start=False, timeout=1.0)
    late._client = _StubClient(SendError("DEADLINE_EXCEEDED: late", reached=True, late=True))
    late.offer(*judge(1.0, faulty(GPU3, 1.0, XID79)))
    for _ in range(bridge_mod.MAX_REACHED_SENDS + 2):
        late._send_once(0.0)
    assert late._client.deadlines == [1.0, 2.0, 4.0]  # then given up: no call with nothing pending
    assert late.pending() == 0 and bridge_mod.DEADLINE_GROWTH == 4.0
    absent = bridges(sock="/nonexistent.sock", state_dir=None, start=False)
    absent._client = _StubClient(SendError("UNAVAILABLE: no socket"))
    absent.offer(*judge(1.0, faulty(GPU3, 1.0, XID79)))
    for _ in range(10):
        absent._send_once(0.0)
    assert absent.pending() == 1 and len(absent._client.deadlines) == 10  # waits as long as the bridge runs


def test_the_outbox_is_bounded_and_drops_the_oldest_counted(tmp_path, bridges):
    failures = ExportFailures()
    b = bridges("/nonexistent/nvsentinel.sock", tmp_path, failures=failures, start=False, max_outbox=2)
    devices = [DeviceIdentity("nvidia", "gpu", i, f"GPU-{i}", pci_address=f"0000:{i + 16:02x}:00.0") for i in range(5)]
    judge = Judge()
    b.offer(*judge(1.0, *(faulty(d, 1.0, XID79) for d in devices)))
    assert b.pending() == 2 and failures.value(EXPORTER) == 3
    assert len(b.open_episodes()) == 5  # still tracked: no second opening for them
    b.offer(*judge(2.0, *(faulty(d, 2.0, XID79) for d in devices)))
    assert b.pending() == 2 and failures.value(EXPORTER) == 3


def test_snapshots_are_ignored_until_the_judge_has_restored_its_sticky_faults(sock, tmp_path, bridges):
    judge, ready = Judge(), threading.Event()
    b = bridges(sock, tmp_path, start=False, ready=ready.is_set)
    b.offer(*judge(1.0, faulty(GPU3, 1.0, XID79)))
    assert b.pending() == 0
    ready.set()
    b.offer(*judge(2.0, faulty(GPU3, 2.0, XID79)))  # judged before the restore was done
    assert b.pending() == 0
    b.offer(*judge(3.0, faulty(GPU3, 3.0, XID79)))
    assert b.pending() == 1
    b.offer(NodeSnapshot(NODE, 4.0, (healthy(GPU3, 4.0),)), None)  # not judged: says nothing
    assert b.open_episodes() == [(GPU3.uuid, "79")]


def _exposed(failures: ExportFailures) -> str:
    from prometheus_client import CollectorRegistry, generate_latest
    reg = CollectorRegistry()
    reg.register(failures)
    return generate_latest(reg).decode()


# --------------------------------------------------------------------------- missing data decides nothing


def test_a_device_whose_collector_failed_is_not_reported_recovered(sock, tmp_path, bridges):
    judge = Judge()
    with serving(sock, Connector()) as conn:
        first = bridges(sock, tmp_path)
        first.offer(*judge(1.0, faulty(GPU3, 1.0, XID79)))
        assert conn.wait_for(1)
        first.close()
        # restarted: the new judge knows nothing of the GPU, whose collector now times out
        b, fresh = bridges(sock, tmp_path), Judge()
        stale = mark_stale(DeviceSample(GPU3, 1.0), 2.0, "timeout after 5 s")  # carried over stale
        down = CollectorStatus("nvml", ok=False, error="timeout", error_kind="timeout", vendor="nvidia")
        snap, ev = fresh(2.0, stale, collectors=[down])
        assert snap.devices[0].health.state == "unknown"
        b.offer(snap, ev)
        b.offer(*fresh(3.0, collectors=[down]))  # not even carried over: absent, its collector down
        assert b.open_episodes() == [(GPU3.uuid, "79")] and b.pending() == 0
        b.close()
    assert len(conn.events) == 1


def _tracker(**kw) -> ep_mod.Tracker:
    return ep_mod.Tracker(NODE, "dry-run", condition_reason=POLICY.condition_reason, **kw)


def test_a_device_gone_while_its_collector_answers_or_removed_closes_its_episodes():
    judge = Judge()
    up = CollectorStatus("nvml", ok=True, vendor="nvidia")
    t = _tracker()
    t.observe(*judge(1.0, faulty(GPU3, 1.0, XID79), collectors=[up]))
    t.observe(*judge(2.0, collectors=[CollectorStatus("nvml", ok=False, vendor="nvidia")]))
    assert list(t.open) == [(GPU3.uuid, "79")]
    t.observe(*judge(3.0, collectors=[up]))
    assert not t.open and "no longer reported" in t.pending()[-1].message
    t2 = _tracker()
    t2.observe(*judge(4.0, faulty(MI300, 4.0, RAS_UMC)))
    snap = NodeSnapshot(NODE, 5.0, (), removed=(MI300,))
    t2.observe(snap)
    assert not t2.open and "removed" in t2.pending()[-1].message


def test_child_devices_and_info_faults_open_no_episode():
    mig = DeviceIdentity("nvidia", "gpu", 0, "MIG-1", parent=GPU3.uuid)
    info = _fault("nvidia", "13", "Graphics Engine Exception", "nvml")
    t = _tracker()
    t.observe(NodeSnapshot(NODE, 1.0, (DeviceSample(mig, 1.0, health=Health("failed", (XID79,))),
                                       DeviceSample(GPU3, 1.0, health=Health("degraded", (info,))))))
    assert not t.open and not t.pending()


# --------------------------------------------------------------------------- the state file


def _corrupt_cases(path):
    return {
        "garbage": lambda: path.write_bytes(b"\x00\xff{not json"),
        "not-ours": lambda: path.write_text(json.dumps({"format": "something-else", "version": 1})),
        "bad-field": lambda: path.write_text(json.dumps({
            "format": ep_mod.STATE_FORMAT, "version": 1, "node": NODE, "next_seq": 5, "closing": [],
            "open": [{"id": "x", "uuid": "GPU-1", "code": "79", "index": "three"}]})),
        "deep": lambda: path.write_text("[" * 100000 + "]" * 100000),
        "huge": lambda: path.write_bytes(b" " * (state_mod.MAX_STATE_BYTES + 1)),
        "fifo": lambda: os.mkfifo(path),
        "symlink": lambda: os.symlink("/dev/zero", path),
        "group-writable": lambda: (path.write_text("{}"), os.chmod(path, 0o664)),
    }


@pytest.mark.parametrize("case", sorted(_corrupt_cases(None)))
def test_a_corrupt_state_file_is_logged_and_replaced_never_a_crash(sock, tmp_path, bridges, caplog, case):
    path = tmp_path / state_mod.STATE_FILE
    _corrupt_cases(path)[case]()
    caplog.set_level(logging.WARNING)
    with serving(sock, Connector()) as conn:
        b = bridges(sock, tmp_path)
        assert any("state unreadable" in r.getMessage() for r in caplog.records)
        b.offer(*Judge()(1.0, faulty(GPU3, 1.0, XID79)))
        assert conn.wait_for(1)
        b.close()
    assert path.is_file() and not path.is_symlink()
    doc = state_mod.load(str(path))
    assert [e["code"] for e in doc["open"]] == ["79"] and doc["open"][0]["open_state"] == "sent"


def test_the_state_file_is_private():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "sub", state_mod.STATE_FILE)
        state_mod.save(path, {"a": 1})
        assert os.stat(path).st_mode & 0o077 == 0 and state_mod.load(path) == {"a": 1}


def test_a_state_file_of_another_node_is_ignored():
    t = _tracker()
    t.observe(*Judge()(1.0, faulty(GPU3, 1.0, XID79)))
    other = ep_mod.Tracker("another-node", "dry-run", condition_reason=POLICY.condition_reason)
    assert other.restore(t.to_doc()) == 0 and not other.open


# --------------------------------------------------------------------------- mapping, config, wire format


def test_every_action_of_the_model_is_mapped_to_an_nvsentinel_recommended_action():
    assert set(ep_mod.RECOMMENDED_ACTION) == set(ACTIONS)
    names = set(pb.RecommendedAction.keys())
    assert set(ep_mod.RECOMMENDED_ACTION.values()) <= names and ep_mod.UNMAPPED_ACTION in names
    from hetero_exporter.health.plan import MODES
    assert set(ep_mod.PROCESSING_STRATEGY) == set(MODES)
    assert set(ep_mod.PROCESSING_STRATEGY.values()) <= set(pb.ProcessingStrategy.keys())


def test_every_fault_table_action_maps_to_a_real_action():
    from hetero_exporter import vendors
    from hetero_exporter.sdk import faults
    for vendor in vendors.specs():
        table = faults.table(vendor)
        for info in [table.default, *table.entries.values()]:
            assert ep_mod.recommended_action(info.action) != ep_mod.UNMAPPED_ACTION, (vendor, info.code)


def test_the_settings_are_the_config_keys_and_default_off():
    assert {f.name for f in dataclasses.fields(NvSentinelSettings)} == set(config_mod.NVSENTINEL)
    assert NvSentinelSettings.parse(config_mod.Config().nvsentinel) is None  # opt-in
    assert NvSentinelSettings.parse(config_mod.from_dict({"nvsentinel": {"enabled": False}}).nvsentinel) is None
    on = NvSentinelSettings.parse(config_mod.from_dict({"nvsentinel": {"socket": "/var/run/nvsentinel.sock"}}).nvsentinel)
    assert on == NvSentinelSettings() and on.target == "unix:///var/run/nvsentinel.sock"
    tuned = config_mod.from_dict({"nvsentinel": {"socket": "unix:///run/nvs.sock", "timeout": 2, "max_outbox": 10,
                                                 "retry_min_seconds": 0.5, "retry_max_seconds": 30, "batch": 8,
                                                 "settle_snapshots": 0}})
    s = NvSentinelSettings.parse(tuned.nvsentinel)
    assert (s.target, s.timeout, s.max_outbox, s.batch, s.settle_snapshots) == ("unix:///run/nvs.sock", 2, 10, 8, 0)
    assert config_mod.NVSENTINEL["max_outbox"]("x", ep_mod.MAX_CLOSING) == ep_mod.MAX_CLOSING
    with pytest.raises(ValidationError):
        config_mod.NVSENTINEL["max_outbox"]("x", ep_mod.MAX_CLOSING + 1)


@pytest.mark.parametrize("doc, field", [
    ({"sockett": "/var/run/nvsentinel.sock"}, "nvsentinel"),
    ({"socket": 7}, "nvsentinel.socket"),
    ({"socket": "var/run/nvsentinel.sock"}, "nvsentinel.socket"),
    ({"socket": "/" + "s" * 120}, "nvsentinel.socket"),
    ({"socket": "/run/a b.sock"}, "nvsentinel.socket"),
    ({"enabled": "true"}, "nvsentinel.enabled"),
    ({"timeout": 0}, "nvsentinel.timeout"),
    ({"timeout": "5s"}, "nvsentinel.timeout"),
    ({"max_outbox": 0}, "nvsentinel.max_outbox"),
    ({"max_outbox": 1.5}, "nvsentinel.max_outbox"),
    ({"batch": 10000}, "nvsentinel.batch"),
    ({"retry_min_seconds": 10, "retry_max_seconds": 5}, "nvsentinel.retry_min_seconds"),
    ({"settle_snapshots": -1}, "nvsentinel.settle_snapshots"),
])
def test_a_bad_nvsentinel_section_is_one_config_error_naming_the_key(doc, field):
    with pytest.raises(config_mod.ConfigError) as e:
        config_mod.from_dict({"nvsentinel": doc}, "agent.yaml")
    assert e.value.field == field and "\n" not in str(e.value) and str(e.value).startswith("agent.yaml: ")
    assert e.value.exit_code == EXIT_USAGE
    with pytest.raises(config_mod.ConfigError):
        config_mod.from_dict({"nvsentinel": "on"})


def test_the_proto_is_nvsentinels_wire_format():
    fd = pb.DESCRIPTOR
    assert fd.package == "datamodels"
    method = fd.services_by_name["PlatformConnector"].methods_by_name["HealthEventOccurredV1"]
    assert (method.input_type.name, method.output_type.full_name) == ("HealthEvents", "google.protobuf.Empty")
    fields = lambda msg: {f.name: f.number for f in fd.message_types_by_name[msg].fields}  # noqa: E731
    assert fields("HealthEvents") == {"version": 1, "events": 2}
    assert fields("Entity") == {"entityType": 1, "entityValue": 2}
    assert fields("BehaviourOverrides") == {"force": 1, "skip": 2}
    assert fields("HealthEvent") == {
        "version": 1, "agent": 2, "componentClass": 3, "checkName": 4, "isFatal": 5, "isHealthy": 6, "message": 7,
        "recommendedAction": 8, "errorCode": 9, "entitiesImpacted": 10, "metadata": 11, "generatedTimestamp": 12,
        "nodeName": 13, "quarantineOverrides": 14, "drainOverrides": 15, "processingStrategy": 16}
    assert dict(pb.ProcessingStrategy.items()) == {"UNSPECIFIED": 0, "EXECUTE_REMEDIATION": 1, "STORE_ONLY": 2}
    assert dict(pb.RecommendedAction.items()) == {
        "NONE": 0, "COMPONENT_RESET": 2, "CONTACT_SUPPORT": 5, "RUN_FIELDDIAG": 6, "RESTART_VM": 15,
        "RESTART_BM": 24, "REPLACE_VM": 25, "RUN_DCGMEUD": 26, "RESTART_APP": 39, "UNKNOWN": 99}
    calls = []

    class Channel:
        def unary_unary(self, path, **kw):
            calls.append(path)
            return lambda *a, **k: None

    pb_grpc.PlatformConnectorStub(Channel())
    assert calls == ["/datamodels.PlatformConnector/HealthEventOccurredV1"]


def test_regenerating_gives_the_committed_modules(tmp_path):
    pytest.importorskip("grpc_tools", reason="grpcio-tools not installed (pip install -e '.[test]')")
    from google.protobuf import descriptor_pb2

    from hetero_exporter.health.act.nvsentinel.generate import generate
    fresh_pb2, fresh_grpc = generate(tmp_path)
    blob = re.search(rb"AddSerializedFile\((b'.*?')\)\n", fresh_pb2.read_bytes(), re.S)
    assert blob is not None, "generated health_event_pb2.py no longer embeds a serialized descriptor"
    fresh_fd = descriptor_pb2.FileDescriptorProto.FromString(ast.literal_eval(blob.group(1).decode()))
    committed_fd = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(committed_fd)
    assert fresh_fd == committed_fd, "out of date: python -m hetero_exporter.health.act.nvsentinel.generate"
    versions = lambda a, b: (re.search(r"Protobuf Python Version: (\S+)", a.read_text()).group(1),  # noqa: E731
                             re.search(r"GRPC_GENERATED_VERSION = '([^']+)'", b.read_text()).group(1))
    if versions(fresh_pb2, fresh_grpc) == versions(PKG / "health_event_pb2.py", PKG / "health_event_pb2_grpc.py"):
        assert fresh_pb2.read_text() == (PKG / "health_event_pb2.py").read_text()
        assert fresh_grpc.read_text() == (PKG / "health_event_pb2_grpc.py").read_text()


def test_the_package_imports_neither_grpc_nor_protobuf_until_started():
    code = ("import sys\n"
            "from hetero_exporter.health.act.nvsentinel import NvSentinelBridge, NvSentinelSettings\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'grpc' or m.startswith('google.protobuf')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", proc.stdout


# --------------------------------------------------------------------------- random histories


_CODES = ("79", "48", "94")
_IDENTS = (GPU3, DeviceIdentity("nvidia", "gpu", 4, "GPU-4", pci_address="0000:4b:00.0"))
# per device and poll: judged state and its reasons' codes, or absent (its collector up or down), or removed
_poll = st.one_of(
    st.tuples(st.sampled_from(["failed", "degraded"]), st.sets(st.sampled_from(_CODES), max_size=3)),
    st.tuples(st.sampled_from(["ok", "unknown", "absent-up", "absent-down", "removed"]), st.just(frozenset())),
)
_step = st.tuples(st.tuples(_poll, _poll), st.booleans(), st.booleans())  # polls, deliver now, restart now


def _snapshot(t: float, polls) -> NodeSnapshot:
    devices, removed, up = [], [], True
    for ident, (state, codes) in zip(_IDENTS, polls):
        if state == "removed":
            removed.append(ident)
        elif state.startswith("absent"):
            up = up and state == "absent-up"
        else:
            sev = "critical" if state == "failed" else "warning"
            reasons = tuple(Fault(code=c, severity=sev, action="reset-device") for c in sorted(codes))
            if state == "unknown":
                reasons = (Fault(code="unreadable", severity="info", source="sampler"),)
            devices.append(DeviceSample(ident, t, health=Health(state, reasons)))
    return NodeSnapshot(NODE, t, tuple(devices), collectors=(CollectorStatus("nvml", ok=up, vendor="nvidia"),),
                        removed=tuple(removed))


@hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_step, max_size=25))
def test_events_are_the_episodes_opened_and_closed_each_once(history):
    tracker, sent, opened, closed = _tracker(), [], 0, 0
    for t, (polls, deliver, restart) in enumerate(history, start=1):
        before = {e.seq for e in tracker.pending()}
        o0, c0 = tracker.opened_total, tracker.closed_total
        assert tracker.observe(_snapshot(float(t), polls)) == 0
        opened, closed = opened + tracker.opened_total - o0, closed + tracker.closed_total - c0
        new = [e for e in tracker.pending() if e.seq not in before]
        for ident, (state, _) in zip(_IDENTS, polls):
            if state in ("unknown", "absent-down"):  # missing data: nothing opens or closes
                assert not [e for e in new if e.episode.uuid == ident.uuid], (state, new)
        if deliver:
            batch = tracker.pending()
            sent += batch
            tracker.mark_sent(e.seq for e in batch)
        if restart:  # the bridge restarted with its state file
            doc = json.loads(json.dumps(tracker.to_doc()))
            tracker = _tracker()
            assert tracker.restore(doc) == 0
            tracker.opened_total, tracker.closed_total = 0, 0
    sent += tracker.pending()
    assert len(sent) == opened + closed
    assert len({e.seq for e in sent}) == len(sent)  # none sent twice
    per_key: dict = {}
    for e in sent:
        per_key.setdefault(e.episode.key, []).append(e.healthy)
    for key, kinds in per_key.items():  # open, close, open, close, ...: never two opens for one open episode
        assert kinds == [i % 2 == 1 for i in range(len(kinds))], (key, kinds)
        assert (kinds[-1] is False) == (key in tracker.open)


def test_without_grpc_the_bridge_says_so_in_one_line_when_started():
    code = ("import sys\n"
            "sys.modules['grpc'] = None  # not installed\n"
            "from hetero_exporter.exposition.export import ExportFailures\n"
            "from hetero_exporter.health.act.nvsentinel import NvSentinelBridge, NvSentinelSettings, "
            "NvSentinelUnavailable\n"
            "b = NvSentinelBridge(NvSentinelSettings(), 'n', 'observe', None, ExportFailures(), "
            "condition_reason=lambda v, c: v + c)\n"
            "try:\n"
            "    b.start()\n"
            "except NvSentinelUnavailable as e:\n"
            "    print(e.exit_code, str(e))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    code_, _, line = proc.stdout.strip().partition(" ")
    assert code_ == "1" and "grpcio" in line and "\n" not in line


def test_the_agent_sends_its_fault_episodes_through_the_bridge(sock, tmp_path):
    """End to end: `run --simulate` with an Xid 79 at t=0, dry-run, the nvsentinel section set:
    the stand-in connector gets the episode once, STORE_ONLY, and the failure series is served."""
    from agent_proc import Agent
    scenario = ROOT / "fixtures" / "scenarios" / "health-xid79-now.yaml"
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(json.dumps({"nvsentinel": {"socket": sock, "retry_min_seconds": 0.05, "retry_max_seconds": 0.5}}))
    with serving(sock, Connector()) as connector:
        with Agent(["--simulate", str(scenario), "--interval", "1", "--health-mode", "dry-run",
                    "--config", str(cfg)]) as agent:
            assert connector.wait_for(1), "no HealthEvent reached the connector"
            text = agent.wait_metrics(lambda t: 'accelerator_export_failures_total{exporter="nvsentinel"}' in t)
            seen: set = set()

            def cycles() -> bool:  # three more snapshots judged with the episode still open
                code, body = agent.get("/snapshot")
                if code == 200:
                    seen.add(json.loads(body)["time"])
                return len(seen) >= 4
            _until(cycles, "three more snapshots")
    events = connector.events
    assert len(events) == 1, [(e.checkName, e.isHealthy) for e in events]
    e = events[0]
    assert e.agent == "hetero-exporter" and e.componentClass == "GPU" and not e.isHealthy and e.isFatal
    assert e.processingStrategy == pb.STORE_ONLY and e.nodeName == "gpu-node-7"
    assert 'accelerator_export_failures_total{exporter="nvsentinel"} 0.0' in text
