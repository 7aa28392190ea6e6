"""The grpc-free PodResources client: HTTP/2 framing and protobuf decoding, against a real
gRPC server (grpcio) and against servers that misbehave."""

from __future__ import annotations

import socket
import threading

import pytest
from hyperframe.frame import DataFrame, GoAwayFrame, RstStreamFrame, SettingsFrame
from hypothesis import given, settings, strategies as st

from hetero_exporter.sources.podresources import h2, wire
from hetero_exporter.sources.podresources.mapping import ContainerDevices

grpc = pytest.importorskip("grpc")
from hetero_exporter.sources.podresources.server import PodResourcesServer, response_from_records  # noqa: E402

RECORDS = [ContainerDevices("ml", "train-0", "trainer", "nvidia.com/gpu", ("GPU-a", "GPU-b")),
           ContainerDevices("ml", "train-0", "sidecar", "amd.com/gpu", ("0000:05:00.0",)),
           ContainerDevices("cv", "infer-1", "worker", "huawei.com/Ascend910", ("Ascend910-3",))]


@pytest.fixture
def sock(tmp_path):
    return str(tmp_path / "kubelet.sock")


def test_a_large_answer_crosses_frames_and_flow_control(sock):
    many = [ContainerDevices("ns", f"pod-{i}", "c", "nvidia.com/gpu", tuple(f"GPU-{i}-{j}" for j in range(8)))
            for i in range(20000)]  # ~2.4 MB: twice the 1 MiB window the client grants, 16 KiB frames
    with PodResourcesServer(sock, many):
        raw = h2.unary_call(sock, "/v1.PodResourcesLister/List", b"", 10.0, 16 << 20)
    assert len(raw) > 2 * h2.RECEIVE_WINDOW_BYTES  # so the server waited on our WINDOW_UPDATEs
    resp = wire.decode_list_response(raw)
    assert len(resp.pod_resources) == 20000
    assert resp.pod_resources[19999].containers[0].devices[0].device_ids[7] == "GPU-19999-7"


def test_decoding_matches_the_protobuf_runtime(sock):
    reference = response_from_records(RECORDS)
    c = reference.pod_resources[0].containers[0]
    dyn = c.dynamic_resources.add(claim_name="gpu-claim", claim_namespace="ml")
    dyn.claim_resources.add(driver_name="gpu.nvidia.com", pool_name="node-a", device_name="gpu-0")
    c.cpu_ids.extend([3, 4])  # fields the agent skips must not disturb the rest
    got = wire.decode_list_response(reference.SerializeToString())
    assert [(p.namespace, p.name) for p in got.pod_resources] == [("ml", "train-0"), ("cv", "infer-1")]
    gc = got.pod_resources[0].containers[0]
    assert gc.devices[0].device_ids == ["GPU-a", "GPU-b"]
    assert gc.dynamic_resources[0].claim_resources[0].device_name == "gpu-0"
    assert gc.dynamic_resources[0].claim_resources[0].driver_name == "gpu.nvidia.com"


def test_an_error_status_is_named(sock):
    with PodResourcesServer(sock, RECORDS) as srv:
        srv.fail = "PERMISSION_DENIED"
        with pytest.raises(h2.CallError, match="PERMISSION_DENIED: injected PERMISSION_DENIED"):
            h2.unary_call(sock, "/v1.PodResourcesLister/List", b"", 5.0, 1 << 20)
        srv.fail = None
        with pytest.raises(h2.CallError, match="UNIMPLEMENTED"):
            h2.unary_call(sock, "/v1.PodResourcesLister/Nope", b"", 5.0, 1 << 20)


def test_an_answer_over_the_size_limit_is_refused(sock):
    many = [ContainerDevices("ns", f"pod-{i}", "c", "nvidia.com/gpu", ("GPU-x",)) for i in range(2000)]
    with PodResourcesServer(sock, many):
        with pytest.raises(h2.CallError, match="larger than"):
            h2.unary_call(sock, "/v1.PodResourcesLister/List", b"", 5.0, 10_000)


def _rogue_server(path: str, answer: bytes, hold: bool = False) -> threading.Thread:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)

    def run():
        conn, _ = srv.accept()
        conn.recv(65536)
        if answer:
            conn.sendall(answer)
        if hold:
            conn.recv(65536)  # until the client gives up
        conn.close()
        srv.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


SETTINGS = SettingsFrame(0).serialize()  # a server's first frame


@pytest.mark.parametrize("answer, hold, fragment", [
    (b"", False, "closed by the server"),
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", False, "not an HTTP/2 gRPC server"),
    (b"", True, "DEADLINE_EXCEEDED"),
    (SETTINGS + GoAwayFrame(0).serialize(), False, "GOAWAY"),
    (SETTINGS + RstStreamFrame(1, error_code=2).serialize(), False, "RST_STREAM"),
    (SETTINGS + DataFrame(1, data=b"\x00\x00\x00\x00\x09ab", flags=["END_STREAM"]).serialize(), False,
     "protocol error"),  # DATA before any HEADERS
], ids=["closed", "http1", "silent", "goaway", "rst-stream", "data-first"])
def test_misbehaving_servers_give_a_clear_error(sock, answer, hold, fragment):
    t = _rogue_server(sock, answer, hold)
    with pytest.raises(h2.CallError, match=fragment):
        h2.unary_call(sock, "/v1.PodResourcesLister/List", b"", 1.0, 1 << 20)
    t.join(5)


def test_no_socket_is_a_clear_error(tmp_path):
    with pytest.raises(h2.CallError, match="cannot connect"):
        h2.unary_call(str(tmp_path / "absent.sock"), "/x/y", b"", 1.0, 1024)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_decoding_arbitrary_bytes_raises_only_wire_error(data):
    try:
        wire.decode_list_response(data)
    except wire.WireError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=12), st.text(max_size=12), st.text(max_size=8),
                          st.sampled_from(["nvidia.com/gpu", "amd.com/gpu"]),
                          st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=3)), max_size=6))
def test_round_trip_through_the_protobuf_runtime(rows):
    records = [ContainerDevices(ns, pod, c, res, tuple(ids)) for ns, pod, c, res, ids in rows]
    ref = response_from_records(records)
    got = wire.decode_list_response(ref.SerializeToString())
    flat = [(p.namespace, p.name, c.name, d.resource_name, tuple(d.device_ids))
            for p in got.pod_resources for c in p.containers for d in c.devices]
    expected = [(p.namespace, p.name, c.name, d.resource_name, tuple(d.device_ids))
                for p in ref.pod_resources for c in p.containers for d in c.devices]
    assert flat == expected
