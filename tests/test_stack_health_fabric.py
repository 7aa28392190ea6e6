"""Issue 38 §4, the NVIDIA fabric: NVML's fabric registration per GPU on NVSwitch systems and the
fabric manager / persistence daemon in the host's /proc, through the real NVML collector over the
fake pynvml (and over a fake libnvidia-ml.so.1 through the real binding, for the structs)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import pytest

pynvml = pytest.importorskip("pynvml")

from hetero_exporter.collectors.nvidia.nvml import collector as nvml  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml import fabric  # noqa: E402
from hetero_exporter.collectors.nvidia.nvml.fake import FakeNvml  # noqa: E402
from hetero_exporter.sdk.contract import CollectorOptions  # noqa: E402
from hetero_exporter.simulate import ManualClock, load  # noqa: E402

SCENARIO = """
name: fabric
node: hgx-1
devices:
  - vendor: nvidia
    count: 4
    product: "NVIDIA H100 80GB HBM3"
    memory_total: 85520809984
    pci_address: "0000:18:00.0"
    pci_stride: 16
    values: {utilization_ratio: 0.5, memory_used_bytes: 20GiB, temperature_core_celsius: 55}
    extra: {fabric: {state: completed, status: Success}}
"""


def _scenario(tmp_path, faults: str = "", extra: str = "{fabric: {state: completed, status: Success}}"):
    text = SCENARIO.replace("{fabric: {state: completed, status: Success}}", extra)
    path = tmp_path / "fabric.yaml"
    path.write_text(text + (f"faults:\n{faults}" if faults else ""))
    return load(str(path))


def _make(scenario, proc_root=None, **settings):
    clock = ManualClock()
    if settings:
        scenario = dataclasses.replace(scenario, settings={**scenario.settings, "nvidia": settings})
    c = nvml.NvmlCollector(FakeNvml(scenario, clock), clock, events=False, proc_root=proc_root)
    return c, clock


def _codes(d):
    return [(r.code, r.fault_class, r.action, r.severity) for r in d.health.reasons]


def _fake_proc(root, names):
    """A host /proc: pid 2 kthreadd (the host's namespace) and one process per name."""
    for pid, name in enumerate(["systemd", "kthreadd", *names], start=1):
        os.makedirs(root / str(pid), exist_ok=True)
        (root / str(pid) / "comm").write_text(name[:15] + "\n")
    return str(root)


def test_a_failed_registration_degrades_that_gpu_with_reason_fabric_manager(tmp_path):
    scenario = _scenario(tmp_path, faults="  - {at: 0, vendor: nvidia, index: 2, kind: fabric, code: NotReady}\n")
    c, clock = _make(scenario)
    devices = c.collect()
    assert [d.health.state for d in devices] == ["ok", "ok", "degraded", "ok"]
    (reason,) = devices[2].health.reasons
    assert (reason.code, reason.fault_class, reason.action, reason.severity) == (
        "fabric-manager", "fabric-manager", "none", "warning")
    assert "registration failed" in reason.message and "NVML_ERROR_NOT_READY" in reason.message
    assert [f.code for f in devices[2].faults] == ["fabric-manager"]  # counted once per episode


def test_the_reason_goes_once_the_registration_completes_again(tmp_path):
    scenario = _scenario(tmp_path, faults="  - {at: 0, until: 100, vendor: nvidia, index: 0, kind: fabric, code: Unknown}\n")
    c, clock = _make(scenario)
    assert c.collect()[0].health.state == "degraded"
    clock.set_t(50)  # not due yet (read every FABRIC_INTERVAL): the last answer holds
    assert c.collect()[0].health.state == "degraded"
    clock.set_t(100 + fabric.FABRIC_INTERVAL)
    assert c.collect()[0].health.state == "ok"


def test_in_progress_and_not_started_are_no_fault(tmp_path):
    for state in ("in-progress", "not-started"):
        c, _ = _make(_scenario(tmp_path, extra=f"{{fabric: {{state: {state}, status: Success}}}}"))
        assert {d.health.state for d in c.collect()} == {"ok"}


def test_not_supported_is_absent_and_never_asked_again(tmp_path):
    c, clock = _make(_scenario(tmp_path, extra="{}"))
    fake = c._nv
    asked = []
    real = fake.nvmlDeviceGetGpuFabricInfoV
    fake.nvmlDeviceGetGpuFabricInfoV = lambda h, ref: asked.append(1) or real(h, ref)
    for t in (0, 100, 200):
        clock.set_t(t)
        assert {d.health.state for d in c.collect()} == {"ok"}
    assert len(asked) == 4  # once per GPU, at the first cycle
    assert c._fabric.conditions(c.collect()[0].identity.uuid) == []


@pytest.mark.parametrize("api", ["legacy", "none"])
def test_an_older_driver_falls_back_to_the_older_call_or_says_nothing(tmp_path, api):
    scenario = _scenario(tmp_path, faults="  - {at: 0, vendor: nvidia, index: 1, kind: fabric, code: Unknown}\n")
    c, _ = _make(scenario, fabric_api=api)
    states = [d.health.state for d in c.collect()]
    assert states == (["ok", "degraded", "ok", "ok"] if api == "legacy" else ["ok"] * 4)


def test_fabric_manager_missing_degrades_fabric_gpus_and_persistenced_is_info(tmp_path):
    proc = _fake_proc(tmp_path / "proc", ["nvidia-persistenced"])
    c, clock = _make(_scenario(tmp_path), proc_root=proc)
    devices = c.collect()
    assert {d.health.state for d in devices} == {"degraded"}
    assert _codes(devices[0]) == [("fabric-manager", "fabric-manager", "none", "warning")]
    assert "nv-fabricmanager is not running" in devices[0].health.reasons[0].message
    # the service starts: gone at the next scan
    _fake_proc(tmp_path / "proc", ["nvidia-persistenced", "nv-fabricmanager"])
    clock.set_t(fabric.PROCESS_INTERVAL)
    assert {d.health.state for d in c.collect()} == {"ok"}
    # no persistence daemon: an info fault, counted, health unchanged
    proc2 = _fake_proc(tmp_path / "proc2", ["nv-fabricmanager"])
    c2, _ = _make(_scenario(tmp_path), proc_root=proc2)
    d = c2.collect()[0]
    assert d.health.state == "ok" and [f.code for f in d.faults] == ["persistenced-missing"]


def test_no_process_check_without_a_fabric_or_without_the_hosts_process_table(tmp_path):
    proc = _fake_proc(tmp_path / "proc", [])
    c, _ = _make(_scenario(tmp_path, extra="{}"), proc_root=proc)  # PCIe GPUs: no fabric
    assert {d.health.state for d in c.collect()} == {"ok"}
    own = tmp_path / "own"  # a container's own pid namespace: no kthreadd as pid 2
    (own / "1").mkdir(parents=True)
    (own / "1" / "comm").write_text("hetero-exporter\n")
    c, _ = _make(_scenario(tmp_path), proc_root=str(own))
    assert {d.health.state for d in c.collect()} == {"ok"}
    assert fabric.running_names(str(own)) is None


def test_the_fabric_goes_through_the_funnel_a_lost_gpu_is_failed(tmp_path):
    scenario = _scenario(tmp_path, faults="  - {at: 0, vendor: nvidia, index: 3, kind: lost}\n")
    c, _ = _make(scenario)
    devices = c.collect()
    assert devices[3].health.state == "failed" and devices[3].health.reasons[0].code == "gpu-lost"


# ---------------------------------------------------------------- the real binding over a fake library

LIB_FABRIC = r"""
typedef struct { unsigned char clusterUuid[16]; nvmlReturn_t status; unsigned int cliqueId; unsigned int state; }
    nvmlGpuFabricInfo_t;
typedef struct { unsigned int version; unsigned char clusterUuid[16]; nvmlReturn_t status; unsigned int cliqueId;
    unsigned int state; unsigned int healthMask; } nvmlGpuFabricInfoV_t;
#ifdef WITH_V
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t h, nvmlGpuFabricInfoV_t *f) {
    (void)h; if (f->version != 0x02000024) return 25; /* ARGUMENT_VERSION_MISMATCH */
    f->state = 3; f->status = 27; f->cliqueId = 7; f->healthMask = 0; return 0;
}
#endif
nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t h, nvmlGpuFabricInfo_t *f) {
    (void)h; f->state = 3; f->status = 999; f->cliqueId = 7; return 0;
}
"""

PROBE = textwrap.dedent("""
    import json
    from hetero_exporter.collectors.nvidia.nvml import collector as nvml
    from hetero_exporter.sdk.contract import CollectorOptions, HostPaths
    c = nvml.create(CollectorOptions(settings={"fallback": False, "events": False},
                                     host=HostPaths(sysfs="/nonexistent", proc="/nonexistent")))
    d = c.collect()[0]
    c.close()
    print(json.dumps({"state": d.health.state, "reasons": [[r.code, r.message] for r in d.health.reasons]}))
""")


@pytest.mark.skipif(not (os.environ.get("CC") or __import__("shutil").which("cc") or __import__("shutil").which("gcc")),
                    reason="no C compiler to build a fake libnvidia-ml.so.1")
@pytest.mark.parametrize("with_v,status", [(True, "NVML_ERROR_NOT_READY"), (False, "NVML_ERROR_UNKNOWN")])
def test_the_real_binding_reads_the_structs_of_a_fake_library(tmp_path, with_v, status):
    import shutil

    from test_nvidia_fake_libnvml import LIB
    cc = shutil.which("cc") or shutil.which("gcc")
    src = tmp_path / "fake_nvml.c"
    src.write_text(LIB + LIB_FABRIC)
    out = tmp_path / "libnvidia-ml.so.1"
    flags = ["-DCUDA_VERSION=12080", "-DGPUS=1"] + (["-DWITH_V"] if with_v else [])
    subprocess.run([cc, "-shared", "-fPIC", "-O1", *flags, "-o", str(out), str(src)], check=True,
                   capture_output=True, timeout=60)
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["state"] == "degraded"
    (code, message), = got["reasons"]
    assert code == "fabric-manager" and status in message and "clique 7" in message


def test_create_passes_the_hosts_proc_but_not_when_simulating(tmp_path):
    scenario = _scenario(tmp_path)
    c = nvml.create(CollectorOptions(scenario=scenario, clock=ManualClock(), settings={"events": False}))
    assert c._fabric._proc is None
