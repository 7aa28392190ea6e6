"""What the Kubernetes API and the kubelet would say about a scenario's pods.

- ``scenario_pods``: the pods as the pod cache would hold them (uid, namespace, name,
  container id -> name, QoS class), so simulation resolves names through the same code path
  as a real node (cgroup -> pod uid / container id -> names);
- ``scenario_allocations``: PodResources records, one per device a pod's process uses, with
  the resource name and device id in the form each vendor's device plugin advertises
  (see podresources/mapping.py), served by a real gRPC server in ``run/inspect --simulate``.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from typing import Any, Callable, Optional, Sequence

from hetero_exporter import profiles, vendors
from hetero_exporter.model.pods import ContainerDevices, PodInfo

def _plugin(d: Any) -> Optional[tuple[str, str]]:
    """(resource name, device id) of a scenario device as its vendor's device plugin names it
    (the spec's ``device_resource`` of the normalized model and ``plugin_device_id``)."""
    spec = vendors.spec(d.vendor)
    if spec is None:
        return None
    resource = spec.device_resource(profiles.normalize_model(d.vendor, d.product))
    return (resource, spec.plugin_device_id(d)) if resource else None


def scenario_pods(scenario: Any) -> list[PodInfo]:
    return [PodInfo(uid=p.uid, namespace=p.namespace, name=p.name, containers={cid: name for name, cid in p.containers.items()},
                    qos_class=p.qos) for p in scenario.pods]


def scenario_allocations(scenario: Any) -> list[ContainerDevices]:
    out: dict[tuple[str, str, str, str], list[str]] = {}
    for d in scenario.devices:
        plugin = _plugin(d)
        if plugin is None:
            continue
        resource, dev_id = plugin
        for proc in d.processes:
            pod = scenario.pod(proc.pod) if proc.pod else None
            if pod is None:
                continue
            container = proc.container or next(iter(pod.containers), "")
            ids = out.setdefault((pod.namespace, pod.name, container, resource), [])
            if dev_id not in ids:
                ids.append(dev_id)
    return [ContainerDevices(ns, pod, c, res, tuple(ids)) for (ns, pod, c, res), ids in out.items()]


# The fake kubelet runs in its own process, as the real one does: the agent talks to it through
# its grpc-free client (podresources/h2.py) and never loads the grpc runtime itself.
def spawn(socket_path: str, records: Sequence[ContainerDevices], workdir: str,
          wait_seconds: float = 15.0) -> Callable[[], None]:
    """Start ``python -m hetero_exporter.sources.podresources.server`` serving ``records`` on
    ``socket_path``; returns a ``stop()`` callable. Raises OSError if it does not listen."""
    import json
    import sys
    path = os.path.join(workdir, "podresources-records.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump([[r.namespace, r.pod, r.container, r.resource, list(r.device_ids)] for r in records], f)
    if os.path.exists(socket_path):
        os.unlink(socket_path)
    # cwd=workdir: `python -m` puts the cwd first on sys.path, and a source checkout there
    # would shadow the installed package; its log goes to a file, as a pipe nobody reads would
    # block the server once full
    log_path = os.path.join(workdir, "podresources-server.log")
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "hetero_exporter.sources.podresources.server",
                                 "--socket", socket_path, "--records", path, "--parent", str(os.getpid())],
                                cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log_file)

    def stop() -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if proc.stdout:
            proc.stdout.close()

    # Wait for the server's word, not for its socket file: the file appears at bind(), a moment
    # before listen(), and a List in between is refused (the snapshot then had no allocations).
    if not _said_serving(proc, socket_path, time.monotonic() + wait_seconds):
        stop()
        with open(log_path, "rb") as log:  # its last line: a traceback's says what went wrong
            log.seek(max(0, os.fstat(log.fileno()).st_size - 4096))
            lines = log.read().decode(errors="replace").strip().splitlines()
        err = lines[-1][:500] if lines else ""
        raise OSError(f"simulated kubelet did not listen on {socket_path}: {err or 'timed out'}")
    return stop


def _said_serving(proc: subprocess.Popen[bytes], socket_path: str, deadline: float) -> bool:
    """Whether ``proc`` printed ``socket_path``, the server's word that it answers there, before
    ``deadline`` (monotonic s)."""
    assert proc.stdout is not None  # spawn pipes it
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if sel.select(left):
                return proc.stdout.readline().decode(errors="replace").rstrip("\n") == socket_path
    return False
