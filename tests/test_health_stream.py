"""The local health stream (issue 38 §5): real gRPC clients over the unix socket, the judged
snapshots of the real judge (``HealthVerdicts``, as in test_nvsentinel.py) offered to the stream:
the current state on connect, a fault and its recovery each within one offer, the episodes, the
vendor filter; the bounds (clients, message size, a slow reader, a stalled one, the events queue);
the socket file (stale replaced, anything else refused, its mode); the restart ordering; the agent
with the section configured; the generated modules; the example client."""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Optional

import grpc
import pytest

from conftest import ROOT
from hetero_exporter import config as config_mod
from hetero_exporter.health.act.stream import HealthStream, HealthStreamSettings, SocketPathError
from hetero_exporter.health.act.stream import health_stream_pb2 as pb
from hetero_exporter.health.act.stream import health_stream_pb2_grpc as pb_grpc
from hetero_exporter.health.act.stream import messages, settings as settings_mod
from hetero_exporter.model import ACTIONS, HEALTH_STATES, RECOVERING, SEVERITIES
from hetero_exporter.model import DeviceIdentity, DeviceSample, Fault, Health, NodeSnapshot
from hetero_exporter.model.errors import EXIT_USAGE
from test_nvsentinel import GPU3, GPU_RESET, MI300, NODE, NPU0, RAS_UMC, XID79, Judge, faulty, healthy

PKG = ROOT / "hetero_exporter" / "health" / "act" / "stream"
DEADLINE = 120.0  # seconds: a condition to reach on a busy machine, never a speed claim
OK, FAILED = pb.DEVICE_STATE_OK, pb.DEVICE_STATE_FAILED


def _until(cond: Callable[[], object], what: str, limit: float = DEADLINE) -> None:
    end = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < end, f"never: {what}"
        time.sleep(0.01)


@pytest.fixture
def sock():
    # unix socket paths are limited to 107 bytes: a short private directory, not tmp_path
    d = tempfile.mkdtemp(prefix="hs-")
    yield os.path.join(d, "health.sock")
    for root, dirs, files in os.walk(d, topdown=False):
        for f in files:
            os.unlink(os.path.join(root, f))
        for sub in dirs:
            os.rmdir(os.path.join(root, sub))
    os.rmdir(d)


@pytest.fixture
def streams():
    """make(sock, ready=None, **settings) -> a started HealthStream; every one closed at the end."""
    made: list[HealthStream] = []

    def make(sock: str, ready: Optional[Callable[[], bool]] = None, start: bool = True, **over) -> HealthStream:
        s = HealthStream(HealthStreamSettings(socket=sock, **over), NODE, ready=ready)
        made.append(s)
        if start:
            s.start()
        return s

    yield make
    for s in made:
        s.close()


class Reader:
    """Reads one server-streaming call on its own thread (it ends with the call)."""

    def __init__(self, call) -> None:
        self.call = call
        self.messages: list = []
        self.error: Optional[grpc.RpcError] = None
        self.done = False
        self._cv = threading.Condition()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            for m in self.call:
                with self._cv:
                    self.messages.append(m)
                    self._cv.notify_all()
        except grpc.RpcError as e:
            with self._cv:
                self.error = e
        finally:
            with self._cv:
                self.done = True
                self._cv.notify_all()

    def wait(self, n: int, what: str = "messages") -> list:
        with self._cv:
            assert self._cv.wait_for(lambda: len(self.messages) >= n or self.done, DEADLINE), f"never: {what}"
            assert len(self.messages) >= n, f"{what}: the call ended ({self.error}) after {self.messages}"
            return list(self.messages)

    def ended(self) -> grpc.RpcError:
        with self._cv:
            assert self._cv.wait_for(lambda: self.done, DEADLINE), "the call never ended"
            assert self.error is not None
            return self.error


@pytest.fixture
def client():
    """client(sock) -> a stub on its own channel; every channel closed at the end."""
    channels: list[grpc.Channel] = []

    def make(sock: str) -> pb_grpc.HealthStreamStub:
        ch = grpc.insecure_channel(f"unix://{sock}")
        channels.append(ch)
        return pb_grpc.HealthStreamStub(ch)

    yield make
    for ch in channels:
        ch.close()


def health(stub, *vendors: str) -> Reader:
    return Reader(stub.WatchDeviceHealth(pb.WatchDeviceHealthRequest(vendors=list(vendors))))


def events(stub, *vendors: str) -> Reader:
    return Reader(stub.WatchDeviceEvents(pb.WatchDeviceEventsRequest(vendors=list(vendors))))


def series(s: HealthStream) -> dict:
    """The stream's own series: (sample name, label values) -> value."""
    return {(x.name, tuple(x.labels.values())): x.value for fam in s.metrics.collect() for x in fam.samples}


def _states(msg) -> dict:
    return {h.device.uuid: h.state for h in msg.devices}


# --------------------------------------------------------------------------- what a client sees


def test_current_state_on_connect_then_a_fault_and_its_recovery_each_within_one_offer(sock, streams, client):
    judge, s = Judge(), streams(sock)
    s.offer(*judge(1.0, healthy(GPU3, 1), healthy(MI300, 1), healthy(NPU0, 1)))
    h = health(client(sock))
    (first,) = h.wait(1, "the current state on connect")
    assert first.full and not first.more and first.node == NODE and first.observed.seconds == 1
    assert _states(first) == {GPU3.uuid: OK, MI300.uuid: OK, NPU0.uuid: OK}
    gpu = next(d for d in first.devices if d.device.uuid == GPU3.uuid)
    assert (gpu.device.vendor, gpu.device.kind, gpu.device.index, gpu.device.pci_address, gpu.device.model) == (
        "nvidia", "gpu", 3, "0000:3b:00.0", "H100-SXM5-80GB")
    assert not gpu.reasons and gpu.since.seconds == 1

    # one offer with the fault: the next message is it, and only the device that changed
    s.offer(*judge(2.0, faulty(GPU3, 2, XID79), healthy(MI300, 2), healthy(NPU0, 2)))
    fault = h.wait(2, "the fault")[1]
    assert not fault.full and _states(fault) == {GPU3.uuid: FAILED} and fault.observed.seconds == 2
    (reason,) = fault.devices[0].reasons
    assert (reason.code, reason.fault_class, reason.action, reason.severity) == (
        "79", XID79.fault_class, pb.ACTION_REBOOT_NODE, pb.SEVERITY_CRITICAL)
    assert "fallen off the bus" in reason.message and fault.devices[0].since.seconds == 2

    # one offer with the evidence (the node rebooted: Xid 79 is sticky until then): the next message
    s.offer(*judge(3.0, healthy(GPU3, 3, XID79), healthy(MI300, 3), healthy(NPU0, 3), boot="boot-2"))
    recovered = h.wait(3, "the recovery")[2]
    assert _states(recovered) == {GPU3.uuid: OK} and not recovered.devices[0].reasons


def test_events_stream_an_opening_and_its_recovery_and_replay_open_episodes(sock, streams, client):
    judge, s = Judge(), streams(sock)
    s.offer(*judge(1.0, healthy(GPU3, 1), healthy(MI300, 1)))
    stub = client(sock)
    ev = events(stub)
    _until(lambda: s.hub.clients()["events"] == 1, "the events watch")
    s.offer(*judge(2.0, faulty(GPU3, 2, XID79), faulty(MI300, 2, RAS_UMC)))
    opened = ev.wait(2, "two openings")[:2]
    assert {e.device.uuid for e in opened} == {GPU3.uuid, MI300.uuid}
    assert all(e.kind == pb.DeviceEvent.KIND_OPENED and not e.replay and e.state == FAILED for e in opened)
    xid = next(e for e in opened if e.device.uuid == GPU3.uuid)
    assert xid.reason.code == "79" and xid.time.seconds == 2 == xid.opened.seconds and xid.node == NODE

    late = events(stub)  # connects while both are open: they are replayed, oldest first
    replayed = late.wait(2, "the replay")
    assert all(e.replay and e.kind == pb.DeviceEvent.KIND_OPENED for e in replayed)
    assert {e.episode_id for e in replayed} == {e.episode_id for e in opened}

    s.offer(*judge(3.0, faulty(GPU3, 3, XID79), healthy(MI300, 3, RAS_UMC, GPU_RESET)))  # the MI300X reset
    (rec,) = ev.wait(3, "the recovery")[2:]
    amd = next(e for e in opened if e.device.uuid == MI300.uuid)
    assert rec.kind == pb.DeviceEvent.KIND_RECOVERED and rec.episode_id == amd.episode_id
    assert rec.opened.seconds == 2 and rec.time.seconds == 3 and rec.state == OK and "recovered" in rec.message
    assert late.wait(3)[2].episode_id == amd.episode_id


def test_the_vendor_filter_applies_to_both_watches(sock, streams, client):
    judge, s = Judge(), streams(sock)
    s.offer(*judge(1.0, healthy(GPU3, 1), healthy(MI300, 1)))
    stub = client(sock)
    amd_only, nvidia_events = health(stub, "amd"), events(stub, "nvidia")
    assert _states(amd_only.wait(1)[0]) == {MI300.uuid: OK}
    _until(lambda: s.hub.clients()["events"] == 1, "the events watch")
    s.offer(*judge(2.0, faulty(GPU3, 2, XID79), faulty(MI300, 2, RAS_UMC)))
    assert _states(amd_only.wait(2)[1]) == {MI300.uuid: FAILED}
    (e,) = nvidia_events.wait(1)
    assert e.device.uuid == GPU3.uuid
    s.offer(*judge(3.0, faulty(GPU3, 3, XID79), healthy(MI300, 3, RAS_UMC, GPU_RESET)))
    assert _states(amd_only.wait(3)[2]) == {MI300.uuid: OK}
    s.offer(*judge(4.0, healthy(GPU3, 4, XID79), healthy(MI300, 4), boot="boot-2"))
    assert [m.kind for m in nvidia_events.wait(2)] == [pb.DeviceEvent.KIND_OPENED, pb.DeviceEvent.KIND_RECOVERED]
    assert all(m.device.vendor == "nvidia" for m in nvidia_events.messages)
    assert all(h.device.vendor == "amd" for m in amd_only.messages for h in m.devices)


def test_a_request_out_of_bounds_is_refused(sock, streams, client):
    streams(sock)
    err = health(client(sock), *[f"v{i}" for i in range(33)]).ended()
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT


# --------------------------------------------------------------------------- bounds


def _big(index: int, t: float, tag: str, codes: range = range(16), state: str = "failed") -> DeviceSample:
    """A device with 16 reasons of about 1 KiB of text each (the views' bounds) that say ``tag``."""
    faults = tuple(Fault(f"c{j}", "synthetic", "reset-device", f"{tag} {j} ".ljust(1000, "x"), severity="critical",
                         source="test") for j in codes)
    ident = DeviceIdentity("nvidia", "gpu", index, f"GPU-big-{index:03d}")
    return DeviceSample(ident, t, health=Health(state, faults))


def _node(t: float, *devices: DeviceSample) -> NodeSnapshot:
    return NodeSnapshot(NODE, t, devices)


def test_max_clients_refuses_one_more_and_counts_it(sock, streams, client):
    judge, s = Judge(), streams(sock, max_clients=2)
    s.offer(*judge(1.0, healthy(GPU3, 1)))
    first, second = health(client(sock)), events(client(sock))
    first.wait(1)
    _until(lambda: sum(s.hub.clients().values()) == 2, "two watches")
    err = health(client(sock)).ended()
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "2 clients at most" in err.details()
    assert series(s)[("accelerator_health_stream_clients_dropped_total", ("health", "refused"))] == 1
    assert not first.done and not second.done  # the two served go on
    first.call.cancel()
    _until(lambda: sum(s.hub.clients().values()) == 1, "the first watch gone")
    assert health(client(sock)).wait(1)[0].full  # room again


def test_an_update_over_max_message_bytes_is_split_and_whole(sock, streams, client):
    limit = settings_mod.MIN_MESSAGE_BYTES
    s = streams(sock, max_message_bytes=limit)
    s.hub.offer(_node(1.0, *[_big(i, 1.0, "first") for i in range(12)]), None)  # ~200 KiB in all
    h = health(client(sock))
    _until(lambda: h.messages and not h.messages[-1].more or h.done, "the whole first update")
    parts = list(h.messages)
    assert len(parts) >= 3 and all(p.full for p in parts)
    assert [p.more for p in parts] == [True] * (len(parts) - 1) + [False]
    assert all(p.ByteSize() <= limit for p in parts)
    uuids = [d.device.uuid for p in parts for d in p.devices]
    assert sorted(uuids) == [f"GPU-big-{i:03d}" for i in range(12)]
    assert all(len(d.reasons) == 16 for p in parts for d in p.devices)


def test_a_slow_health_reader_gets_the_latest_state_of_each_device(sock, streams, client):
    """The client reads nothing while the views change; the server's write waits on the client's
    window and the views pending for it are replaced (superseded, counted). Once it reads, each
    device's last state is the latest, in fewer messages than there were changes."""
    s = streams(sock, stall_seconds=600)
    stub = client(sock)
    call = stub.WatchDeviceHealth(pb.WatchDeviceHealthRequest())  # not read yet
    _until(lambda: s.hub.clients()["health"] == 1, "the watch")
    offers, end = 0, time.monotonic() + DEADLINE
    while series(s)[("accelerator_health_stream_messages_dropped_total", ("health", "superseded"))] < 16:
        assert time.monotonic() < end, "no view superseded"
        offers += 1
        s.hub.offer(_node(float(offers), *[_big(i, offers, f"v{offers}") for i in range(8)]), None)
        time.sleep(0.005)
    offers += 1
    s.hub.offer(_node(float(offers), *[_big(i, offers, "final", state="degraded") for i in range(8)]), None)
    r = Reader(call)
    latest: dict = {}

    def settled() -> bool:
        for m in list(r.messages)[len(latest.get("_seen", [])):]:
            latest.setdefault("_seen", []).append(m)
            latest.update({h.device.uuid: h for h in m.devices})
        return len(latest) == 9 and all(latest[f"GPU-big-{i:03d}"].state == pb.DEVICE_STATE_DEGRADED
                                         for i in range(8))
    _until(settled, "the final state read")
    assert all(latest[f"GPU-big-{i:03d}"].reasons[0].message.startswith("final") for i in range(8))
    assert len(r.messages) < offers + 1 and not r.done  # coalesced, and still served


def test_an_events_reader_that_falls_behind_is_dropped_with_a_status_and_counted(sock, streams, client):
    s = streams(sock, max_queue=64, stall_seconds=600)
    stub = client(sock)
    call = stub.WatchDeviceEvents(pb.WatchDeviceEventsRequest())  # not read
    _until(lambda: s.hub.clients()["events"] == 1, "the watch")
    key = ("accelerator_health_stream_clients_dropped_total", ("events", "slow-reader"))
    offers, end = 0, time.monotonic() + DEADLINE
    while series(s)[key] < 1:  # each offer: 16 episodes close, 16 others open (32 events < max_queue)
        assert time.monotonic() < end, "never dropped"
        offers += 1
        codes = range(16) if offers % 2 else range(16, 32)
        s.hub.offer(_node(float(offers), _big(0, offers, f"v{offers}", codes)), None)
        time.sleep(0.002)
    assert offers > 2  # not the first offers: the client was served until its queue filled
    err = Reader(call).ended()
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "more than 64 events unread" in err.details()
    assert series(s)[("accelerator_health_stream_messages_dropped_total", ("events", "slow-reader"))] > 0
    _until(lambda: s.hub.clients()["events"] == 0, "the watch gone")
    again = events(stub).wait(16, "the open episodes replayed on reconnect")[:16]
    assert all(e.replay for e in again) and {e.reason.code for e in again} == {
        f"c{j}" for j in (range(16) if offers % 2 else range(16, 32))}


def test_a_stalled_client_is_dropped_after_stall_seconds_and_a_reader_stays(sock, streams, client):
    s = streams(sock, stall_seconds=2.0)
    stalled = client(sock).WatchDeviceHealth(pb.WatchDeviceHealthRequest())  # never read until dropped
    reading = health(client(sock))
    _until(lambda: s.hub.clients()["health"] == 2, "both watches")
    key = ("accelerator_health_stream_clients_dropped_total", ("health", "stalled"))
    offers, end = 0, time.monotonic() + DEADLINE
    while series(s)[key] < 1:
        assert time.monotonic() < end, "the stalled client was never dropped"
        offers += 1
        s.hub.offer(_node(float(offers), *[_big(i, offers, f"v{offers}") for i in range(8)]), None)
        time.sleep(0.01)
    err = Reader(stalled).ended()
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "read nothing for 2 s" in err.details()
    # the server's handler leaves the hub after its abort has reached the client: waited for
    _until(lambda: s.hub.clients()["health"] == 1, "the dropped watch leaves the hub")
    assert not reading.done  # the one reading is served on
    assert series(s)[key] == 1


def test_a_client_that_leaves_is_forgotten(sock, streams, client):
    """Each client that cancels after its first message leaves the hub (a watch whose cancellation
    was lost kept its place, and its max_clients slot, for good)."""
    judge, s = Judge(), streams(sock)
    s.offer(*judge(1.0, healthy(GPU3, 1)))
    stub = client(sock)
    for i in range(100):
        call = stub.WatchDeviceHealth(pb.WatchDeviceHealthRequest())
        assert next(call).full
        call.cancel()
        _until(lambda: s.hub.clients()["health"] == 0, f"client {i} forgotten")


def test_close_ends_the_watches_with_unavailable(sock, streams, client):
    judge, s = Judge(), streams(sock)
    s.offer(*judge(1.0, healthy(GPU3, 1)))
    h = health(client(sock))
    h.wait(1)
    s.close()
    err = h.ended()
    assert err.code() == grpc.StatusCode.UNAVAILABLE and "reconnect" in err.details()
    assert not os.path.exists(sock)  # the socket it made is removed


# --------------------------------------------------------------------------- the socket file


def test_the_socket_gets_its_mode_and_a_missing_directory_0750(streams):
    d = tempfile.mkdtemp(prefix="hs-")
    path = os.path.join(d, "run", "health.sock")
    s = streams(path, socket_mode=0o600)
    try:
        st = os.lstat(path)
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o750
    finally:
        s.close()
        os.rmdir(os.path.dirname(path))
        os.rmdir(d)


def test_a_stale_socket_is_replaced(sock, streams, client):
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(sock)
    stale.close()  # the file stays, nobody listens: an earlier agent killed
    judge, s = Judge(), streams(sock)  # binding over it would fail (EADDRINUSE) had it stayed
    s.offer(*judge(1.0, healthy(GPU3, 1)))
    assert health(client(sock)).wait(1)[0].full


def test_a_socket_in_use_and_anything_not_a_socket_are_refused_and_left_alone(sock, streams, client, tmp_path):
    judge, first = Judge(), streams(sock)
    first.offer(*judge(1.0, healthy(GPU3, 1)))
    with pytest.raises(SocketPathError, match="in use"):
        streams(sock)
    assert health(client(sock)).wait(1)[0].full  # the first still serves
    regular = os.path.join(os.path.dirname(sock), "file.sock")
    with open(regular, "w") as f:
        f.write("keep me")
    link = os.path.join(os.path.dirname(sock), "link.sock")
    os.symlink(sock, link)
    for path, kind in ((regular, "a regular file"), (link, "a symbolic link")):
        with pytest.raises(SocketPathError) as err:
            streams(path)
        assert err.value.exit_code == EXIT_USAGE and "\n" not in str(err.value)
        assert str(err.value).startswith("health_stream.socket: ") and kind in str(err.value)
    assert open(regular).read() == "keep me" and os.readlink(link) == sock


def test_the_agent_exits_2_in_one_line_when_the_socket_path_is_a_regular_file(tmp_path):
    path = tmp_path / "health.sock"
    path.write_text("not a socket")
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(json.dumps({"health_stream": {"socket": str(path)}}))
    proc = subprocess.run([sys.executable, "-m", "hetero_exporter", "run", "--listen", "127.0.0.1:0",
                           "--simulate", str(ROOT / "fixtures" / "scenarios" / "health-xid79-now.yaml"),
                           "--health-mode", "dry-run", "--log-format", "text", "--config", str(cfg)],
                          capture_output=True, text=True, timeout=DEADLINE)
    assert proc.returncode == EXIT_USAGE, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("hetero-exporter: error:")]
    assert errors == [f"hetero-exporter: error: health_stream.socket: {path} is a regular file, not a socket: "
                      "left alone (remove it, or configure another path)"]
    assert path.read_text() == "not a socket"


# --------------------------------------------------------------------------- restart ordering


def test_nothing_is_streamed_until_the_restore_and_the_first_judgement_after_it(sock, streams, client):
    """An agent restarting judges its first snapshots without the sticky faults the Node keeps: a
    failed GPU looks ok. The stream says nothing until ``ready()`` (the restore is done), and skips
    the snapshot judged while the restore ran; the client's first message is the restored verdict."""
    restored = threading.Event()
    judge, s = Judge(), streams(sock, ready=restored.is_set)
    h = health(client(sock))
    _until(lambda: s.hub.clients()["health"] == 1, "the watch")
    for t in (1.0, 2.0):
        s.offer(*judge(t, healthy(GPU3, t)))  # before the restore: judged ok, wrongly
    assert s.hub.observed == 0
    restored.set()
    s.offer(*judge(3.0, healthy(GPU3, 3)))  # judged while the restore was finishing
    assert s.hub.observed == 0
    s.offer(*judge(4.0, faulty(GPU3, 4, XID79)))  # the restored verdict
    first = h.wait(1)[0]
    assert first.full and _states(first) == {GPU3.uuid: FAILED} and first.observed.seconds == 4
    assert s.hub.observed == 1


# --------------------------------------------------------------------------- the agent


def test_the_agent_serves_its_devices_on_the_configured_socket(sock, tmp_path, client):
    from agent_proc import Agent
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(json.dumps({"health_stream": {"socket": f"unix://{sock}", "socket_mode": "0600"}}))
    scenario = ROOT / "fixtures" / "scenarios" / "health-xid79-now.yaml"
    with Agent(["--simulate", str(scenario), "--interval", "1", "--health-mode", "dry-run",
                "--config", str(cfg)]):
        _until(lambda: os.path.exists(sock), "the socket")
        assert stat.S_IMODE(os.lstat(sock).st_mode) == 0o600
        stub = client(sock)
        first = health(stub).wait(1, "the agent's devices")[0]
        assert first.full and first.node == "gpu-node-7" and len(first.devices) == 8
        states = {h.device.index: h.state for h in first.devices}
        assert states[5] == FAILED and all(states[i] == OK for i in states if i != 5)
        (reason,) = next(h for h in first.devices if h.device.index == 5).reasons  # NVML: fallen off the bus
        assert (reason.code, reason.action, reason.severity) == (
            "gpu-lost", pb.ACTION_REBOOT_NODE, pb.SEVERITY_CRITICAL)
        e = events(stub, "nvidia").wait(1, "the open episode")[0]
        assert e.replay and e.reason.code == "gpu-lost" and e.device.index == 5
    assert not os.path.exists(sock)  # removed at exit


# --------------------------------------------------------------------------- the contract


def test_regenerating_gives_the_committed_modules(tmp_path):
    pytest.importorskip("grpc_tools", reason="grpcio-tools not installed (pip install -e '.[test]')")
    from hetero_exporter.health.act.stream.generate import OUTPUTS, PROTO, generate
    fresh = generate(tmp_path)
    assert [p.name for p in fresh] == list(OUTPUTS)
    # the committed modules are what this grpcio-tools writes: regenerate when it or the .proto changes
    for path in fresh:
        assert path.read_text() == (PKG / path.name).read_text(), (
            f"{path.name} is out of date: python -m hetero_exporter.health.act.stream.generate")
    assert pb.DESCRIPTOR.name == str(PROTO)


def test_the_proto_field_numbers_stay():
    fd = pb.DESCRIPTOR
    assert fd.package == "heteroexporter.health.v1"
    svc = fd.services_by_name["HealthStream"]
    assert {m.name: (m.input_type.name, m.output_type.name, m.server_streaming) for m in svc.methods} == {
        "WatchDeviceHealth": ("WatchDeviceHealthRequest", "DeviceHealthUpdate", True),
        "WatchDeviceEvents": ("WatchDeviceEventsRequest", "DeviceEvent", True)}
    fields = lambda msg: {f.name: f.number for f in fd.message_types_by_name[msg].fields}  # noqa: E731
    assert fields("DeviceHealthUpdate") == {"node": 1, "observed": 2, "full": 3, "devices": 4, "removed": 5,
                                            "more": 6}
    assert fields("DeviceHealth") == {"device": 1, "state": 2, "reasons": 3, "quality": 4, "since": 5,
                                      "observed": 6}
    assert fields("DeviceEvent") == {"node": 1, "kind": 2, "episode_id": 3, "device": 4, "reason": 5,
                                     "state": 6, "time": 7, "opened": 8, "message": 9, "replay": 10}
    assert fields("DeviceIdentity") == {"uuid": 1, "vendor": 2, "kind": 3, "index": 4, "pci_address": 5,
                                        "model": 6, "parent": 7}


def test_every_state_severity_and_action_of_the_model_has_its_value():
    for word in (*HEALTH_STATES, RECOVERING):
        assert pb.DeviceState.Name(messages.state(word)) == "DEVICE_STATE_" + word.upper()
    assert {w: pb.Severity.Name(v) for w, v in messages.SEVERITIES.items()} == {
        w: "SEVERITY_" + w.upper() for w in SEVERITIES}
    assert {w: pb.Action.Name(v) for w, v in messages.ACTIONS.items()} == {
        w: "ACTION_" + w.upper().replace("-", "_") for w in ACTIONS}
    assert messages.state("sideways") == pb.DEVICE_STATE_UNSPECIFIED


def test_the_settings_keys_are_the_config_keys_and_off_by_default():
    assert {f.name for f in dataclasses.fields(HealthStreamSettings)} == set(config_mod.HEALTH_STREAM)
    assert HealthStreamSettings.parse({}) is None
    assert HealthStreamSettings.parse({"enabled": False, "socket": "/x"}) is None
    parsed = HealthStreamSettings.parse({"socket": "unix:///run/h.sock", "max_clients": 3})
    assert parsed is not None and parsed.path == "/run/h.sock" and parsed.max_clients == 3
    assert HealthStreamSettings().socket_mode == 0o660 and HealthStreamSettings().path == settings_mod.DEFAULT_SOCKET


def test_the_package_imports_neither_grpc_nor_protobuf_until_started():
    code = ("import sys\n"
            "from hetero_exporter.health.act.stream import HealthStream, HealthStreamSettings\n"
            "HealthStream(HealthStreamSettings(), 'n')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'grpc' or m.startswith('google.protobuf')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=DEADLINE, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", proc.stdout


# --------------------------------------------------------------------------- the example client


def _example():
    spec = importlib.util.spec_from_file_location("health_stream_client", ROOT / "examples" / "health_stream_client.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_client_prints_each_state_change(sock, streams):
    example = _example()
    judge, s = Judge(), streams(sock)
    s.offer(*judge(1.0, healthy(GPU3, 1), healthy(MI300, 1)))
    out = io.StringIO()
    assert example.main(["--socket", f"unix://{sock}", "--vendor", "nvidia", "--count", "1"], out=out) == 0
    assert out.getvalue() == f"nvidia gpu 3 ({GPU3.uuid}): new -> ok\n"

    _until(lambda: s.hub.clients()["health"] == 0, "the first run's watch gone")
    result: dict = {}
    out = io.StringIO()
    t = threading.Thread(target=lambda: result.update(rc=example.main(["--socket", sock, "--count", "2"], out=out)),
                         daemon=True)
    t.start()
    _until(lambda: s.hub.clients()["health"] == 1, "the example's watch")
    s.offer(*judge(2.0, faulty(GPU3, 2, XID79), healthy(MI300, 2)))
    t.join(DEADLINE)
    assert result == {"rc": 0}
    lines = out.getvalue().splitlines()
    assert sorted(lines[:2]) == sorted([f"nvidia gpu 3 ({GPU3.uuid}): new -> ok",
                                        f"amd gpu 0 ({MI300.uuid}): new -> ok"])
    assert lines[2].startswith(f"nvidia gpu 3 ({GPU3.uuid}): ok -> failed (79 {XID79.fault_class}: ")
    assert len(lines) == 3


def test_the_example_client_reassembles_a_split_update_and_forgets_removed_devices():
    example = _example()
    devices = example.Devices()
    one = pb.DeviceHealth(device=pb.DeviceIdentity(uuid="A", vendor="nvidia", kind="gpu"), state=OK)
    two = pb.DeviceHealth(device=pb.DeviceIdentity(uuid="B", vendor="amd", kind="gpu", index=1), state=FAILED)
    assert devices.apply(pb.DeviceHealthUpdate(full=True, devices=[one], more=True)) == []
    assert len(devices.apply(pb.DeviceHealthUpdate(full=True, devices=[two]))) == 2
    assert devices.apply(pb.DeviceHealthUpdate(removed=[two.device])) == ["amd gpu 1 (B): removed from the node"]
    assert devices.apply(pb.DeviceHealthUpdate(full=True)) == ["A: no longer on the node (ok)"]
    assert devices.states == {}
