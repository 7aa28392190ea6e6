"""Process -> container -> pod attribution from /proc/<pid>/cgroup: real captures, fuzzing,
the (pid, start time) cache and the sampler enricher."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import shared_fixture, shared_fixtures
from hetero_exporter.sources.attribution import (QOS_CLASSES, Attributor, CgroupCache, PodInfo, StaticPods,
                                         parse_cgroup, parse_stat_start_time)
from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.model import (Allocation, DeviceIdentity, DeviceSample, NodeSnapshot, ProcessSample,
                                   SourceStatus)
from hetero_exporter.simulate import procfs

CAPTURES = shared_fixtures("cgroup")


def _lines(text: str) -> list[tuple[int, str, str]]:
    out = []
    for line in text.splitlines():
        if line.strip():
            hid, ctrl, path = line.split(":", 2)
            out.append((int(hid), ctrl, path))
    return out


# --------------------------------------------------------------------------- every capture

@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
def test_every_capture_parses_into_what_its_text_shows(path: Path):
    text = path.read_text(encoding="utf-8")
    info = parse_cgroup(text)
    lines = _lines(text)
    # version: only a 0:: line is cgroup v2; v1 controllers with a 0:: line are hybrid
    unified = [l for l in lines if l[0] == 0 and l[1] == ""]
    assert info.cgroup_version == (2 if len(unified) == len(lines) else 1)
    assert info.hybrid == (bool(unified) and len(unified) < len(lines))
    assert info.path in {l[2] for l in lines}
    # whatever was recovered is literally in the text (pod uid in either driver's spelling)
    if info.container_id is not None:
        assert info.container_id in info.path
    if info.pod_uid is not None:
        assert info.pod_uid in text or info.pod_uid.replace("-", "_") in text
        assert info.qos_class in QOS_CLASSES
    else:
        assert info.qos_class is None
    # a kubepods path always yields a pod; a 64-hex id in a container scope always a container
    if "kubepods" in info.path and re.search(r"pod[0-9a-f]{8}[-_]", info.path):
        assert info.pod_uid is not None
    if re.search(r"(?:cri-containerd|crio|docker|libpod)-[0-9a-f]{64}\.scope", text):
        assert info.container_id is not None and info.runtime is not None
    # the capture's name states what it is
    name = path.name.lower()
    for qos in QOS_CLASSES:
        if qos in name:
            assert info.qos_class == qos
    if "systemd-driver" in name:
        assert info.cgroup_driver == "systemd"
    if "cgroupfs-driver" in name:
        assert info.cgroup_driver == "cgroupfs"
    if name.startswith("host_") or "non-container" in name:
        assert info.container_id is None and info.pod_uid is None and info.note == "not in a container"
    if name.startswith(("k8s_", "kind_")):
        assert info.pod_uid is not None
    if re.search(r"[/:-][0-9a-f]{64}(?:\.scope)?(?:/|$)", info.path):
        assert info.container_id is not None
    runtimes_named = [r for r, token in (("cri-o", "crio"), ("containerd", "containerd"),
                                         ("docker", "docker"), ("podman", "podman")) if token in name]
    if info.runtime is not None and len(runtimes_named) == 1:
        assert info.runtime == runtimes_named[0]
    assert set(info.to_dict()) >= {"runtime", "container_id", "pod_uid", "qos_class", "cgroup_version"}


# Exact expectations, each read off the capture's text.
EXPECTED = {
    "k8s_v2_systemd-driver_crio_burstable.txt": dict(
        runtime="cri-o", cgroup_driver="systemd", qos_class="burstable", cgroup_version=2,
        pod_uid="2c9f8a79-5391-454b-88cb-86190881cb96",
        container_id="a09343ca97901516c25036e2b954421254f8c68b384b536064e8999f0c4ed18d"),
    "k8s_v2_systemd-driver_crio_besteffort_openshift.txt": dict(
        runtime="cri-o", cgroup_driver="systemd", qos_class="besteffort", cgroup_version=2,
        pod_uid="dbdd9718-6f63-40ef-987e-34776599d7d6",
        container_id="bdf2eeede4551b27acbbb05fb1b4f61925786681734bf128e68d39e17d115098"),
    "k8s_v2_cgroupfs-driver_burstable.txt": dict(
        runtime=None, cgroup_driver="cgroupfs", qos_class="burstable", cgroup_version=2,
        pod_uid="5a89bcaa-3509-4375-83e1-b9e7a5712123",
        container_id="a069581483b00a498b3ba172612ffed06b3275a043bf3895c1b19e783e2793ee"),
    "k8s_v1_systemd-driver_crio_burstable_name-systemd-line.txt": dict(
        runtime="cri-o", cgroup_driver="systemd", qos_class="burstable", cgroup_version=1,
        pod_uid="d0511cd2-29d2-4215-be0f-f77bc0609d99",
        container_id="f93ee491b8ed2680d5a909eb098b14a9430173b57ca1c4efedd8768566d67e8e"),
    "k8s_v1_containerd-service_colon-form_besteffort_memory-line.txt": dict(
        runtime="containerd", cgroup_driver="systemd", qos_class="besteffort", cgroup_version=1,
        pod_uid="0043435f-1854-4327-b76b-730f681a781d",
        container_id="01fd96f7ad292b02a8317cde4ecb8c7ef3cc06ffdd113f13410e0837eb2b2a20"),
    "k8s_v1-hybrid_cgroupfs-driver_containerd_burstable_datadog-agent.txt": dict(
        # cgroupfs paths carry a bare id; the unified line names containerd.service
        runtime="containerd", cgroup_driver="cgroupfs", qos_class="burstable", cgroup_version=1, hybrid=True,
        pod_uid="15513b48-e7a5-48fc-b9e3-92f713f36504",
        container_id="a51a9f7d073f848e7fc59e56e8f11524f330a2175a4ed26327da2dfe0d28015f"),
    "kind_v2_kubelet-slice_containerd_burstable.txt": dict(
        runtime="containerd", cgroup_driver="systemd", qos_class="burstable", cgroup_version=2,
        pod_uid="3cae2e45-052c-4b11-80d3-4d7b2d2d3464",
        container_id="2b180104511194aab36fd295d3e217439f3ddb5bc88277f37b4952abee85c40e"),
    "docker_v1_cgroupfs_14-controllers_libdatadog.txt": dict(
        runtime="docker", cgroup_driver="cgroupfs", pod_uid=None, qos_class=None, cgroup_version=1,
        container_id="9d5b23edb1ba181e8910389a99906598d69ac9a0ead109ee55730cc416d95f7f"),
    "docker_v2_systemd_scope_kepler-procfs.txt": dict(
        runtime="docker", cgroup_driver="systemd", pod_uid=None, cgroup_version=2,
        container_id="b176419186d75a44628851daf7841d3374a2ec56d0b038ee3bd1e0c6d331e5b1"),
    "podman_v2_rootful.txt": dict(
        runtime="podman", pod_uid=None, cgroup_version=2,
        container_id="06dc5f321aad8726aa26559f16ec203bc099245bc44894b14a89fc02b022d1d5"),
    "cloudfoundry-garden_v1_no-trailing-newline.txt": dict(
        runtime="garden", pod_uid=None, cgroup_version=1, container_id="6f265890-5165-7fab-6b52-18d1"),
    "ecs-fargate-1.4_v1.txt": dict(
        runtime="ecs", pod_uid=None, cgroup_version=1,
        container_id="8cd79a803caf4d2aa945152e934a5c00-1053176469"),
    "host_v1_non-container_user-session.txt": dict(
        runtime=None, container_id=None, pod_uid=None, cgroup_version=1,
        path="/user.slice/user-0.slice/session-14.scope"),
    "host_v2_user-session_tmux_kepler-procfs.txt": dict(
        runtime=None, container_id=None, pod_uid=None, cgroup_version=2),
    "v2_in-container-namespace_root.txt": dict(
        runtime=None, container_id=None, pod_uid=None, cgroup_version=2, path="/"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_known_capture_exact(name: str):
    info = parse_cgroup(shared_fixture("cgroup", name).read_text(encoding="utf-8"))
    for key, want in EXPECTED[name].items():
        assert getattr(info, key) == want, f"{name}: {key}"


def test_in_namespace_root_says_why_nothing_is_attributed():
    info = parse_cgroup(shared_fixture("cgroup", "v2_in-container-namespace_root.txt").read_text())
    assert "cgroup namespace" in info.note


def test_reader_in_its_own_cgroup_namespace_sees_dotdot_components():
    # a containerized reader (cgroupns=private) sees other pods' paths relative to its own
    text = ("0::/../../kubepods-besteffort-pod0f1e2d3c_4b5a_6978_8a9b_0c1d2e3f4a5b.slice/"
            "cri-containerd-" + "ab" * 32 + ".scope\n")
    info = parse_cgroup(text)
    assert info.pod_uid == "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
    assert info.qos_class == "besteffort" and info.runtime == "containerd" and info.container_id == "ab" * 32


@pytest.mark.parametrize("text,runtime", [
    ("0::/system.slice/nerdctl-" + "ef" * 32 + ".scope\n", "containerd"),
    ("4:memory:/ecs/" + "1a" * 16 + "/" + "2b" * 32 + "\n", "ecs"),
])
def test_other_container_layouts(text, runtime):
    info = parse_cgroup(text)
    assert info.runtime == runtime and info.container_id is not None and info.pod_uid is None


def test_guaranteed_pods_have_no_qos_level_in_either_driver():
    uid = "11111111-2222-3333-4444-555555555555"
    cid = "cd" * 32
    for driver in ("systemd", "cgroupfs"):
        info = parse_cgroup(procfs.cgroup_text(procfs.pod_cgroup_path(uid, "guaranteed", "containerd", cid, driver), 2))
        assert (info.qos_class, info.pod_uid, info.container_id, info.cgroup_driver) == ("guaranteed", uid, cid, driver)


@pytest.mark.parametrize("bad", ["", "\n\n", "garbage", "1:cpu", "x:cpu:/a", "1:cpu:relative/path",
                                 "0::/ok\nnot a line\n"])
def test_bad_input_raises_parse_error_with_a_clear_message(bad: str):
    with pytest.raises(ParseError) as e:
        parse_cgroup(bad)
    assert str(e.value).startswith("cgroup: ")


# --------------------------------------------------------------------------- properties

_uid = st.uuids().map(str)
_cid = st.binary(min_size=32, max_size=32).map(bytes.hex)


@settings(max_examples=200, deadline=None)
@given(uid=_uid, cid=_cid, qos=st.sampled_from(QOS_CLASSES),
       runtime=st.sampled_from(("containerd", "cri-o", "docker")),
       driver=st.sampled_from(("systemd", "cgroupfs")), version=st.sampled_from((1, 2)),
       dotdot=st.integers(0, 3))
def test_rendered_pod_layouts_parse_back(uid, cid, qos, runtime, driver, version, dotdot):
    path = "/.." * dotdot + procfs.pod_cgroup_path(uid, qos, runtime, cid, driver)
    info = parse_cgroup(procfs.cgroup_text(path, version, runtime))
    assert (info.pod_uid, info.container_id, info.qos_class, info.cgroup_driver) == (uid, cid, qos, driver)
    assert info.cgroup_version == version and info.hybrid == (version == 1)
    # the runtime is in the path (systemd scopes, crio-<id>) or in the hybrid 0:: service line
    if driver == "systemd" or runtime == "cri-o" or version == 1:
        assert info.runtime == runtime
    else:
        assert info.runtime is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300) | st.lists(
    st.tuples(st.integers(0, 20), st.sampled_from(["", "cpu", "memory", "name=systemd", "cpu,cpuacct", ":"]),
              st.text(alphabet="/abcdef0123456789-_.:podkubesliceburstable", max_size=120)),
    max_size=6).map(lambda ls: "\n".join(f"{a}:{b}:{c}" for a, b, c in ls)))
def test_fuzzed_input_gives_a_result_or_parse_error(text):
    try:
        info = parse_cgroup(text)
    except ParseError as e:
        assert str(e).startswith("cgroup: ")
        return
    assert info.cgroup_version in (1, 2)
    assert info.qos_class in QOS_CLASSES + (None,)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_fuzzed_stat_gives_a_number_or_parse_error(text):
    try:
        assert parse_stat_start_time(text) >= 0
    except ParseError:
        pass


def test_stat_start_time_survives_a_command_name_with_spaces_and_parens():
    text = procfs.stat_text(77, "a) b (c", 123456).replace("(a) b (c)", "(a) b (c)")
    assert parse_stat_start_time(text) == 123456
    assert parse_stat_start_time("77 (we ird) ) S " + " ".join(["0"] * 18) + " 999 0 0\n") == 999


# --------------------------------------------------------------------------- the pid cache

def _proc(root: Path, pid: int, cgroup: str, start: int) -> None:
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup").write_text(cgroup)
    (d / "stat").write_text(procfs.stat_text(pid, "python", start))


def test_cache_reads_a_pid_once_in_its_lifetime_and_again_when_reused(tmp_path):
    uid, cid, cid2 = "11111111-2222-3333-4444-555555555555", "ab" * 32, "cd" * 32
    _proc(tmp_path, 42, procfs.cgroup_text(procfs.pod_cgroup_path(uid, "burstable", "containerd", cid, "systemd"), 2), 1000)
    cache = CgroupCache(str(tmp_path))
    for _ in range(5):
        assert cache.lookup(42).info.container_id == cid
        cache.sweep()
    assert cache.reads == 1
    # the pid is reused by another process: new start time, re-read
    _proc(tmp_path, 42, procfs.cgroup_text(procfs.pod_cgroup_path(uid, "burstable", "containerd", cid2, "systemd"), 2), 2000)
    assert cache.lookup(42).info.container_id == cid2
    assert cache.reads == 2


def test_cache_forgets_pids_no_longer_reported_and_reports_gone_pids(tmp_path):
    _proc(tmp_path, 7, "0::/user.slice/user-0.slice/session-1.scope\n", 5)
    cache = CgroupCache(str(tmp_path), forget_after=2)
    assert cache.lookup(7).info is not None and len(cache) == 1
    for _ in range(4):
        cache.sweep()
    assert len(cache) == 0
    assert cache.lookup(8).why == "gone"


def test_cache_keeps_a_broken_cgroup_file_as_an_explained_miss(tmp_path):
    _proc(tmp_path, 9, "this is not a cgroup file", 5)
    found = CgroupCache(str(tmp_path)).lookup(9)
    assert found.info is None and "cgroup" in found.why


# --------------------------------------------------------------------------- the enricher

UID = "5d3c2a1e-0f6b-4b7a-9a51-3f1e2d4c5b60"
CID = "3b" * 32


def _snapshot(*procs: ProcessSample, used: float = 40 << 30, reported: bool = True) -> NodeSnapshot:
    ident = DeviceIdentity("nvidia", "gpu", 0, "GPU-0", "H100-SXM5-80GB", "0000:18:00.0")
    return NodeSnapshot("n", 1.0, (DeviceSample(ident, 1.0, processes=tuple(procs), processes_reported=reported),))


class _Allocs:
    def __init__(self, allocs):
        self._a = allocs

    def allocations(self, devices):
        return {"GPU-0": self._a}

    def status(self):
        return SourceStatus("podresources", ok=True, items=len(self._a))


def test_enricher_names_pod_processes_and_keeps_host_processes_with_empty_labels(tmp_path):
    path = procfs.pod_cgroup_path(UID, "guaranteed", "containerd", CID, "systemd")
    _proc(tmp_path, 4242, procfs.cgroup_text(path, 2), 10)
    _proc(tmp_path, 4290, procfs.cgroup_text(procfs.HOST_PATH, 2), 11)
    pods = StaticPods([PodInfo(UID, "ml-team", "train-llama-0", {CID: "trainer"})])
    attr = Attributor(str(tmp_path), pods=pods)
    snap = attr(_snapshot(ProcessSample(4242, "GPU-0", 30 << 30), ProcessSample(4290, "GPU-0", 1 << 30)))
    p, host = snap.devices[0].processes
    assert (p.namespace, p.pod, p.container, p.pod_uid, p.container_id, p.attribution) == \
        ("ml-team", "train-llama-0", "trainer", UID, CID, "cgroup")
    assert (host.pid, host.namespace, host.pod, host.container, host.attribution) == (4290, None, None, None, "none")
    names = {s.name: s for s in snap.attribution_sources}
    assert names["procfs"].ok and names["scenario-pods"].items == 1


def test_enricher_without_names_still_gives_ids(tmp_path):
    _proc(tmp_path, 5, procfs.cgroup_text(procfs.pod_cgroup_path(UID, "burstable", "cri-o", CID, "cgroupfs"), 1, "cri-o"), 1)
    p = Attributor(str(tmp_path))(_snapshot(ProcessSample(5, "GPU-0", 1))).devices[0].processes[0]
    assert (p.pod_uid, p.container_id, p.pod, p.attribution) == (UID, CID, None, "cgroup")


def test_enricher_falls_back_to_the_single_allocation_when_proc_is_invisible(tmp_path):
    allocs = [Allocation("ml-team", "train-llama-0", "trainer", "nvidia.com/gpu", "GPU-0")]
    attr = Attributor(str(tmp_path), allocations=_Allocs(allocs))
    snap = attr(_snapshot(ProcessSample(999, "GPU-0", 1)))
    p = snap.devices[0].processes[0]
    assert (p.namespace, p.pod, p.container, p.attribution) == ("ml-team", "train-llama-0", "trainer", "podresources")
    assert snap.devices[0].allocations == tuple(allocs)
    procfs_status = next(s for s in snap.attribution_sources if s.name == "procfs")
    assert not procfs_status.ok and "hostPID" in procfs_status.error


def test_enricher_does_not_guess_between_two_allocations(tmp_path):
    allocs = [Allocation("a", "p1", "c", "nvidia.com/gpu.shared", "GPU-0::0"),
              Allocation("b", "p2", "c", "nvidia.com/gpu.shared", "GPU-0::1")]
    p = Attributor(str(tmp_path), allocations=_Allocs(allocs))(_snapshot(ProcessSample(999, "GPU-0", 1))).devices[0].processes[0]
    assert p.pod is None and p.attribution == "none"


def test_enricher_keeps_what_a_collector_already_attributed(tmp_path):
    given_ = ProcessSample(1, "GPU-0", 1, namespace="x", pod="y", container="z", attribution="podresources")
    out = Attributor(str(tmp_path))(_snapshot(given_)).devices[0].processes[0]
    assert out == given_


def test_enricher_on_the_simulated_default_scenario(tmp_path):
    from hetero_exporter.simulate import load
    from hetero_exporter.simulate.kubelet import scenario_pods
    sc = load("default")
    root = procfs.write(sc, tmp_path / "proc")
    attr = Attributor(str(root), pods=StaticPods(scenario_pods(sc)))
    devices = []
    for d in sc.devices:
        ident = DeviceIdentity(d.vendor, "gpu", d.index, d.uuid)
        devices.append(DeviceSample(ident, 0.0, processes=tuple(
            ProcessSample(p.pid, d.uuid, 1, name=p.name) for p in d.processes)))
    snap = attr(NodeSnapshot("n", 0.0, tuple(devices)))
    by_pid = {p.pid: p for d in snap.devices for p in d.processes}
    for d in sc.devices:
        for sp in d.processes:
            got = by_pid[sp.pid]
            if sp.pod is None:
                assert got.pod is None and got.namespace is None and got.attribution == "none"
            else:
                ns, name = sp.pod.split("/")
                assert (got.namespace, got.pod, got.container, got.attribution) == (ns, name, sp.container, "cgroup")
    assert any(sp.pod is None for d in sc.devices for sp in d.processes), "default scenario has a host process"
    # every layout used by the scenario is one the parser reads back (cri-o, docker pods included)
    runtimes = {parse_cgroup((root / str(sp.pid) / "cgroup").read_text()).runtime
                for d in sc.devices for sp in d.processes if sp.pod}
    assert runtimes >= {"containerd", "cri-o", "docker"}


def test_enricher_survives_a_snapshot_without_processes(tmp_path):
    snap = _snapshot(reported=False)
    out = Attributor(str(tmp_path))(snap)
    assert out.devices == snap.devices
    assert dataclasses.replace(out, attribution_sources=()) == snap
