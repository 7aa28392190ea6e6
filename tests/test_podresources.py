"""kubelet PodResources: the generated client against a real gRPC server on a unix socket,
the mapping of every vendor's resource names and device ids, the background poller."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from typing import Iterator

import pytest
from hypothesis import given, settings, strategies as st

from hetero_exporter.model import DeviceIdentity
from hetero_exporter.sources.podresources import api_pb2
from hetero_exporter.sources.podresources.client import (PodResourcesError, PodResourcesPoller, list_pod_resources,
                                                 records_from_response)
from hetero_exporter.sources.podresources.mapping import ContainerDevices, DeviceIndex, map_allocations, vendor_of
from hetero_exporter.sources.podresources.server import PodResourcesServer, response_from_records

GPU0 = DeviceIdentity("nvidia", "gpu", 0, "GPU-5d3c2a1e-0f6b-4b7a-9a51-3f1e2d4c5b60", pci_address="0000:18:00.0")
GPU1 = DeviceIdentity("nvidia", "gpu", 1, "GPU-6e4d3b2f-1a7c-4c8b-8b62-4a2f3e5d6c71", pci_address="0000:28:00.0")
MIG = DeviceIdentity("nvidia", "gpu", 0, "MIG-0a1b2c3d-4e5f-5a6b-9c7d-8e9f0a1b2c3d", parent=GPU0.uuid)
MI300 = DeviceIdentity("amd", "gpu", 0, "fafd42f7-fbb0-22f0-94e6-63c8549834c3", pci_address="0000:05:00.0")
NPU3 = DeviceIdentity("ascend", "npu", 3, "ascend-0003", pci_address="0000:c4:00.0")
MLU0 = DeviceIdentity("cambricon", "mlu", 0, "MLU-40e26ece-47cb-8123-b2aa-fd9ab6ff7459", pci_address="0000:1a:00.0")
DCU1 = DeviceIdentity("hygon", "dcu", 1, "dcu-serial-1", pci_address="0000:3b:00.0")
DEVICES = [GPU0, GPU1, MIG, MI300, NPU3, MLU0, DCU1]


@pytest.fixture
def sock():
    # unix socket paths are limited to 107 bytes: a short private directory, not tmp_path
    d = tempfile.mkdtemp(prefix="pr-")
    yield os.path.join(d, "kubelet.sock")
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    os.rmdir(d)


RECORDS = [
    ContainerDevices("ml-team", "train-0", "trainer", "nvidia.com/gpu", (GPU0.uuid, GPU1.uuid)),
    ContainerDevices("ml-team", "train-0", "trainer", "cpu", ("3", "4")),  # not an accelerator
    ContainerDevices("research", "infer-0", "server", "amd.com/gpu", ("0000:05:00.0",)),
    ContainerDevices("cv", "resnet-0", "worker", "huawei.com/Ascend910", ("Ascend910-3",)),
    ContainerDevices("search", "ranker-0", "ranker", "cambricon.com/mlu", ("MLU-40e26ece-47cb-8123-b2aa-fd9ab6ff7459",)),
    ContainerDevices("hpc", "dcu-job", "main", "hygon.com/dcu", ("1",)),
]


def test_list_over_a_real_grpc_unix_socket_round_trips_every_record(sock):
    with PodResourcesServer(sock, RECORDS) as srv:
        got = list_pod_resources(sock, timeout=5)
    assert srv.calls == 1
    assert sorted(got, key=repr) == sorted(RECORDS, key=repr)


def test_allocations_of_every_vendor_land_on_our_devices(sock):
    with PodResourcesServer(sock, RECORDS):
        records = list_pod_resources(sock, timeout=5)
    allocs, unmatched = map_allocations(records, DEVICES)
    owner = {uuid: {(a.namespace, a.pod, a.container, a.resource) for a in al} for uuid, al in allocs.items()}
    assert owner[GPU0.uuid] == owner[GPU1.uuid] == {("ml-team", "train-0", "trainer", "nvidia.com/gpu")}
    assert owner[MI300.uuid] == {("research", "infer-0", "server", "amd.com/gpu")}
    assert owner[NPU3.uuid] == {("cv", "resnet-0", "worker", "huawei.com/Ascend910")}
    assert owner[MLU0.uuid] == {("search", "ranker-0", "ranker", "cambricon.com/mlu")}
    assert owner[DCU1.uuid] == {("hpc", "dcu-job", "main", "hygon.com/dcu")}
    assert unmatched == []
    assert all(a.method == "podresources" for al in allocs.values() for a in al)


@pytest.mark.parametrize("resource,device_id,expected", [
    ("nvidia.com/gpu", GPU0.uuid, GPU0),
    ("nvidia.com/gpu", GPU0.uuid.lower(), GPU0),
    ("nvidia.com/gpu.shared", GPU1.uuid + "::3", GPU1),  # time-slicing replica
    ("nvidia.com/gpu", "1", GPU1),  # DEVICE_ID_STRATEGY=index
    ("nvidia.com/mig-1g.10gb", MIG.uuid, MIG),
    ("amd.com/gpu", "0000:05:00.0", MI300),
    ("amd.com/cpx_nps4", "05:00.0", MI300),  # partition resource, short bus id
    ("amd.com/gpu", "00000000:05:00.0", MI300),  # NVML-style 8-digit domain
    ("huawei.com/Ascend910", "Ascend910-3", NPU3),
    ("huawei.com/Ascend910-4c", "Ascend910-4c-100-3", NPU3),  # vNPU: physical id last
    ("cambricon.com/mlu", "40e26ece-47cb-8123-b2aa-fd9ab6ff7459", MLU0),  # without the MLU- prefix
    ("hygon.com/dcu", "0000:3b:00.0", DCU1),
    ("gpu.nvidia.com", "gpu-1", GPU1),  # DRA driver + device name
])
def test_device_id_forms(resource, device_id, expected):
    vendor = vendor_of(resource)
    assert vendor == expected.vendor
    assert DeviceIndex(DEVICES).match(vendor, device_id) == expected


@pytest.mark.parametrize("resource,device_id", [
    ("nvidia.com/gpu", "GPU-00000000-0000-0000-0000-000000000000"),  # a GPU we do not see
    ("nvidia.com/gpu", "7"),
    ("amd.com/gpu", GPU0.pci_address),  # another vendor's device is never matched
    ("huawei.com/Ascend910", "Ascend910-9"),
])
def test_unknown_ids_are_unmatched_never_guessed(resource, device_id):
    allocs, unmatched = map_allocations([ContainerDevices("a", "b", "c", resource, (device_id,))], DEVICES)
    assert allocs == {} and unmatched == [(resource, device_id)]


def test_resources_that_are_not_accelerators_are_ignored():
    for r in ("cpu", "memory", "hugepages-2Mi", "example.com/foo", "intel.com/sriov"):
        assert vendor_of(r) is None
    assert vendor_of("example.com/npu", {"example.com": "ascend"}) == "ascend"
    assert vendor_of("nvidia.com/gpumem") == "nvidia"


def test_dra_claim_devices_become_records():
    resp = api_pb2.ListPodResourcesResponse()
    pod = resp.pod_resources.add(name="p", namespace="ns")
    c = pod.containers.add(name="c")
    dyn = c.dynamic_resources.add(claim_name="gpu-claim", claim_namespace="ns")
    dyn.claim_resources.add(driver_name="gpu.nvidia.com", pool_name="node-a", device_name="gpu-0")
    dyn.claim_resources.add(driver_name="gpu.nvidia.com", pool_name="node-a", device_name="gpu-1")
    assert records_from_response(resp) == [ContainerDevices("ns", "p", "c", "gpu.nvidia.com", ("gpu-0", "gpu-1"))]


def test_missing_socket_is_a_clear_error(tmp_path):
    with pytest.raises(PodResourcesError, match="not found"):
        list_pod_resources(str(tmp_path / "nope.sock"), timeout=1)


def test_a_kubelet_that_hangs_is_cut_by_the_timeout(sock):
    with PodResourcesServer(sock, RECORDS) as srv:
        srv.delay = 30
        with pytest.raises(PodResourcesError, match="DEADLINE_EXCEEDED"):
            list_pod_resources(sock, timeout=0.3)
        srv.release.set()


def test_poller_keeps_the_last_answer_and_says_stale_when_the_kubelet_fails(sock):
    with PodResourcesServer(sock, RECORDS) as srv:
        poller = PodResourcesPoller(sock, interval=3600, timeout=2)
        try:
            assert poller.refresh()
            first = poller.allocations(DEVICES)
            assert set(first) == {d.uuid for d in DEVICES if d is not MIG}
            st = poller.status()
            assert st.ok and not st.stale and st.items == 6 and st.error is None  # cpu ids not counted
            srv.fail = "UNAVAILABLE"
            assert not poller.refresh()
            st = poller.status()
            assert not st.ok and st.stale and "UNAVAILABLE" in st.error
            assert poller.allocations(DEVICES) == first  # last known allocations still served
            srv.fail = None
            srv.set_records(RECORDS[:1])
            assert poller.refresh()
            assert set(poller.allocations(DEVICES)) == {GPU0.uuid, GPU1.uuid}
            assert poller.status().ok
        finally:
            poller.close()


def test_poller_thread_answers_from_memory_while_the_kubelet_hangs(sock):
    with PodResourcesServer(sock, RECORDS) as srv:
        poller = PodResourcesPoller(sock, interval=0.05, timeout=0.5).start(wait_first=5)
        try:
            assert poller.status().ok
            srv.delay = 30  # the next List hangs until release
            deadline = time.monotonic() + 10
            while poller.status().ok and time.monotonic() < deadline:
                time.sleep(0.05)
            # the lookups a cycle makes returned at once all along; now the status says stale
            assert poller.allocations(DEVICES)
            assert poller.status().stale and "DEADLINE_EXCEEDED" in poller.status().error
        finally:
            srv.release.set()
            poller.close()


def test_poller_before_any_answer_is_empty_and_not_ok(tmp_path):
    poller = PodResourcesPoller(str(tmp_path / "absent.sock"), interval=3600, timeout=0.5)
    assert not poller.refresh()
    assert poller.allocations(DEVICES) == {}
    st = poller.status()
    assert not st.ok and not st.stale and "not found" in st.error


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ns1", "ns2"]), st.sampled_from(["p1", "p2"]), st.sampled_from(["c1", "c2"]),
                          st.sampled_from(["nvidia.com/gpu", "amd.com/gpu", "cpu", "huawei.com/Ascend910"]),
                          st.lists(st.text(max_size=40) | st.sampled_from([GPU0.uuid, "0000:05:00.0", "Ascend910-3", "1"]),
                                   max_size=4)), max_size=6))
def test_mapping_never_raises_and_every_allocation_is_a_listed_device(rows):
    records = [ContainerDevices(ns, p, c, r, tuple(ids)) for ns, p, c, r, ids in rows]
    allocs, unmatched = map_allocations(records, DEVICES)
    uuids = {d.uuid for d in DEVICES}
    assert set(allocs) <= uuids
    resp = response_from_records(records)  # and the server side encodes whatever the client may see
    decoded = records_from_response(api_pb2.ListPodResourcesResponse.FromString(resp.SerializeToString()))
    assert sorted(decoded, key=repr) == sorted((r for r in records if r.device_ids), key=repr)
    assert len(unmatched) + sum(len(v) for v in allocs.values()) <= sum(
        len(r.device_ids) for r in records if vendor_of(r.resource))


# A socket file exists from bind(), a moment before listen(): a List in between is refused. The
# simulated kubelet is waited for until it says it serves (it prints its socket's path).
_LATE_LISTENER = """
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
time.sleep(1.0)
s.listen()
print(sys.argv[1], flush=True)
time.sleep(60)
"""


@contextlib.contextmanager
def _python(script: str, *args: str) -> Iterator[subprocess.Popen]:
    """``python -c script args`` with its stdout piped, killed at the end."""
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_the_simulated_kubelet_is_waited_for_until_it_listens_not_until_its_file_appears(sock):
    import socket
    from hetero_exporter.simulate.kubelet import _said_serving
    with _python(_LATE_LISTENER, sock) as proc:
        assert _said_serving(proc, sock, time.monotonic() + 60)
        with socket.socket(socket.AF_UNIX) as probe:
            probe.connect(sock)  # refused had it returned when the file appeared


@pytest.mark.parametrize("script", ["print('something else', flush=True); import time; time.sleep(60)",
                                    "raise SystemExit(3)"])
def test_a_simulated_kubelet_that_never_says_it_serves_is_not_waited_for_past_its_word(sock, script):
    from hetero_exporter.simulate.kubelet import _said_serving
    with _python(script) as proc:
        assert not _said_serving(proc, sock, time.monotonic() + 60)


def test_the_simulated_kubelet_answers_its_first_list(sock):
    pytest.importorskip("grpc")
    from hetero_exporter.simulate import kubelet
    stop = kubelet.spawn(sock, RECORDS, os.path.dirname(sock), wait_seconds=60)
    try:
        assert set(list_pod_resources(sock, timeout=30)) == set(RECORDS)
    finally:
        stop()


def test_a_simulated_kubelet_that_cannot_listen_is_one_line_naming_why(tmp_path):
    pytest.importorskip("grpc")
    from hetero_exporter.simulate import kubelet
    too_long = str(tmp_path / ("k" * 120 + ".sock"))  # over the 107 bytes of a unix socket path
    with pytest.raises(OSError) as err:
        kubelet.spawn(too_long, RECORDS, str(tmp_path), wait_seconds=60)
    assert "\n" not in str(err.value) and "Failed to bind" in str(err.value), err.value
