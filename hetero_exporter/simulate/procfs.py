"""A fake ``/proc`` for the scenario's processes, so simulation runs the real attribution code.

For each process of each device ``write(scenario, root)`` creates ``<root>/<pid>/cgroup`` in
the layout the pod's runtime, QoS class and the node's cgroup driver/version produce on a
real node, and ``<root>/<pid>/stat`` with a start time (field 22). A process without a pod
gets a host cgroup (a user session). A process with an explicit ``cgroup:`` text in the
scenario gets that text verbatim.

Node-wide layout from the scenario's ``settings.procfs`` (defaults shown)::

    settings:
      procfs:
        cgroup_version: 2        # 1 | 2 (1 writes the v1 controller lines plus a hybrid 0:: line)
        cgroup_driver: systemd   # systemd | cgroupfs
        pods:                    # per-pod overrides, keyed "namespace/name"
          ml-team/train-llama-2: {cgroup_driver: cgroupfs, cgroup_version: 1}
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional

# container-id prefix of each runtime under the systemd driver (<prefix>-<id>.scope); under
# cgroupfs, CRI-O keeps "crio-<id>" while containerd and docker use the bare id
_SYSTEMD_PREFIX = {"containerd": "cri-containerd", "cri-o": "crio", "docker": "docker"}
_V1_CONTROLLERS = ("cpu,cpuacct", "memory", "devices", "pids", "blkio", "freezer", "perf_event",
                   "net_cls,net_prio", "hugetlb", "cpuset", "rdma")
_RUNTIME_SERVICE = {"containerd": "containerd.service", "cri-o": "crio.service", "docker": "docker.service"}


def pod_cgroup_path(uid: str, qos: str, runtime: str, container_id: str, driver: str) -> str:
    """The container's cgroup path as the kubelet + runtime lay it out."""
    qos = qos.lower()
    if driver == "systemd":
        u = uid.replace("-", "_")
        prefix = _SYSTEMD_PREFIX.get(runtime, "cri-containerd")
        if qos == "guaranteed":
            pod = f"/kubepods.slice/kubepods-pod{u}.slice"
        else:
            pod = f"/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{u}.slice"
        return f"{pod}/{prefix}-{container_id}.scope"
    qos_dir = "" if qos == "guaranteed" else f"/{qos}"
    leaf = f"crio-{container_id}" if runtime == "cri-o" else container_id
    return f"/kubepods{qos_dir}/pod{uid}/{leaf}"


def cgroup_text(path: str, version: int, runtime: Optional[str] = None) -> str:
    """A whole ``/proc/<pid>/cgroup`` file for one path. Version 1 lists the usual
    controllers (rdma at the root, as the kernel shows it) plus ``name=systemd`` and the
    unified ``0::`` line of a hybrid host, which names the runtime's service."""
    if version == 2:
        return f"0::{path}\n"
    lines = []
    n = len(_V1_CONTROLLERS) + 1
    for ctrl in _V1_CONTROLLERS:
        lines.append(f"{n}:{ctrl}:{'/' if ctrl == 'rdma' else path}")
        n -= 1
    lines.append(f"1:name=systemd:{path}")
    unified = "/system.slice/" + _RUNTIME_SERVICE[runtime] if runtime in _RUNTIME_SERVICE else "/"
    lines.append(f"0::{unified}")
    return "\n".join(lines) + "\n"


HOST_PATH = "/user.slice/user-1000.slice/session-3.scope"


def stat_text(pid: int, name: str, start_time: int) -> str:
    """``/proc/<pid>/stat`` with 52 fields; field 22 is ``start_time`` (clock ticks)."""
    fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194560", "1000", "0", "0", "0",
              "120", "40", "0", "0", "20", "0", "24", "0", str(start_time)]
    fields += ["0"] * (52 - 2 - len(fields))
    return f"{pid} ({name[:15]}) " + " ".join(fields) + "\n"


def start_time_of(pid: int) -> int:
    """Deterministic start time of a simulated process (ticks after boot)."""
    return 10_000 + pid


def _layout(settings: Mapping[str, Any], ref: str) -> tuple[int, str]:
    per_pod = (settings.get("pods") or {}).get(ref) or {}
    version = int(per_pod.get("cgroup_version", settings.get("cgroup_version", 2)))
    driver = str(per_pod.get("cgroup_driver", settings.get("cgroup_driver", "systemd")))
    return version, driver


def write(scenario: Any, root: str | os.PathLike) -> Path:
    """Write the fake proc tree of every scenario process under ``root``; returns it."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    settings = scenario.settings.get("procfs") or {}
    for dev in scenario.devices:
        for proc in dev.processes:
            pdir = root / str(proc.pid)
            pdir.mkdir(exist_ok=True)
            if proc.cgroup is not None:
                text = proc.cgroup
            else:
                pod = scenario.pod(proc.pod) if proc.pod else None
                if pod is None:
                    version, _ = _layout(settings, "")
                    text = cgroup_text(HOST_PATH, version)
                else:
                    version, driver = _layout(settings, proc.pod)
                    cid = pod.containers.get(proc.container or "") or next(iter(pod.containers.values()), "")
                    path = pod_cgroup_path(pod.uid, pod.qos, pod.runtime, cid, driver)
                    text = cgroup_text(path, version, pod.runtime)
            (pdir / "cgroup").write_text(text, encoding="utf-8")
            (pdir / "stat").write_text(stat_text(proc.pid, proc.name, start_time_of(proc.pid)), encoding="utf-8")
    return root
