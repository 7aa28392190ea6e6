"""The real NVML collector over the real pynvml binding, loading a fake libnvidia-ml.so.1
compiled here: "on a fake libnvidia-ml.so reporting CUDA 12.8, runtime_version is 12.8".

The library exports only what identifying one GPU needs (init, shutdown, error strings,
driver and CUDA driver versions, count, handle, uuid, name, PCI info); every other call
makes pynvml raise NVML_ERROR_FUNCTION_NOT_FOUND, which the collector's funnel must treat
as unsupported (the readings are absent, the GPU is still reported)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("pynvml")

CC = shutil.which("cc") or shutil.which("gcc")

LIB = r"""
#include <string.h>
typedef int nvmlReturn_t;
typedef struct { int id; } dev_t_;
typedef dev_t_ *nvmlDevice_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
static dev_t_ gpu0 = {0};
static int inits = 0;
static nvmlReturn_t copy(char *dst, unsigned int n, const char *src) {
    if (strlen(src) + 1 > n) return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    strcpy(dst, src);
    return 0;
}
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; inits++; return 0; }
nvmlReturn_t nvmlInit_v2(void) { inits++; return 0; }
nvmlReturn_t nvmlInit(void) { inits++; return 0; }
nvmlReturn_t nvmlShutdown(void) { if (inits <= 0) return 1; inits--; return 0; }
const char *nvmlErrorString(nvmlReturn_t r) { (void)r; return "fake NVML error"; }
nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int n) { return copy(v, n, "570.124.06"); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = CUDA_VERSION; return 0; }
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { *v = CUDA_VERSION; return 0; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *c) { if (inits <= 0) return 1; *c = GPUS; return 0; }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *h) {
    if (i >= GPUS) return 2; *h = &gpu0; return 0;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *u, unsigned int n) {
    (void)h; return copy(u, n, "GPU-0f0e0d0c-1111-2222-3333-444455556666");
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *u, unsigned int n) {
    (void)h; return copy(u, n, "NVIDIA H100 80GB HBM3");
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *p) {
    (void)h; memset(p, 0, sizeof *p);
    strcpy(p->busIdLegacy, "0000:18:00.0"); strcpy(p->busId, "00000000:18:00.0");
    p->bus = 0x18; p->pciDeviceId = 0x233010de;
    return 0;
}
"""

PROBE = textwrap.dedent("""
    import json
    from hetero_exporter.collectors.nvidia.nvml import collector as nvml
    from hetero_exporter.sdk.contract import CollectorOptions, HostPaths
    c = nvml.create(CollectorOptions(settings={"fallback": False, "events": EVENTS},
                                     host=HostPaths(sysfs="/nonexistent")))
    devices = c.collect()
    c.close()
    print(json.dumps({"collector": type(c).__name__,
                      "devices": [{"uuid": d.identity.uuid, "runtime": d.identity.runtime_version,
                                   "driver": d.identity.driver_version, "pci": d.identity.pci_address,
                                   "health": d.health.state,
                                   "statuses": sorted({r.quality.status for r in d.readings.values()})}
                                  for d in devices]}))
""")


def build(tmp_path, cuda=12080, gpus=1):
    src = tmp_path / "fake_nvml.c"
    src.write_text(LIB)
    out = tmp_path / "libnvidia-ml.so.1"
    subprocess.run([CC, "-shared", "-fPIC", "-O1", f"-DCUDA_VERSION={cuda}", f"-DGPUS={gpus}",
                    "-o", str(out), str(src)], check=True, capture_output=True, timeout=60)
    return tmp_path


def probe(libdir, events=False):
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    done = subprocess.run([sys.executable, "-c", PROBE.replace("EVENTS", str(events))], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(CC is None, reason="no C compiler (cc/gcc) to build a fake libnvidia-ml.so.1")
def test_runtime_version_from_a_fake_libnvidia_ml_reporting_cuda_12_8(tmp_path):
    got = probe(build(tmp_path))
    assert got["collector"] == "NvmlCollector"  # the real NVML path, not the nvidia-smi fallback
    [gpu] = got["devices"]
    assert gpu["runtime"] == "12.8"
    assert gpu["uuid"] == "GPU-0f0e0d0c-1111-2222-3333-444455556666"
    assert (gpu["driver"], gpu["pci"], gpu["health"]) == ("570.124.06", "0000:18:00.0", "ok")
    # every reading call is missing from this library: absent as unsupported, never an error
    assert gpu["statuses"] == ["unsupported"]


@pytest.mark.skipif(CC is None, reason="no C compiler (cc/gcc) to build a fake libnvidia-ml.so.1")
def test_a_library_without_events_or_gpus_still_serves(tmp_path):
    got = probe(build(tmp_path, cuda=13000, gpus=0), events=True)
    assert got == {"collector": "NvmlCollector", "devices": []}
    got = probe(build(tmp_path, cuda=12040), events=True)  # no event symbols: the thread ends quietly
    assert got["devices"][0]["runtime"] == "12.4"
