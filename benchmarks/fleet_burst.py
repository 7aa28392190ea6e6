"""A fault burst across a fleet: N agents' real health code against one API server (issue 39 §1).

Each agent is the health code a real agent runs on its own simulated node of 8 accelerators: the
verdicts (``HealthVerdicts.judge``), the ``HealthLoop`` thread with its ``Remedy`` (plan, act, the
fleet budget's Lease slots, pod signals, DRA DeviceTaintRules), its own kubernetes client, and the
watches a real agent keeps (this node's pods: ``PodCache``, which also serves the stack health's
plugin pods; its ResourceSlices: ``SliceCache``). Every node runs its vendor's device plugin pod
(Ready, the GPU Operator's and Ascend's published labels), as a real accelerator node does. All
agents talk to ONE loopback API server (tests/kubeapi.py, the real wire protocol) in a process of
its own, which counts every request by verb and resource and notes when each Node gains or loses
the taint.

The snapshots come from the real collectors over the simulation (``nvml`` over the fake pynvml;
``npu_smi`` over the fake npu-smi executable; the kernel-log source over a simulated /dev/kmsg):
each node *shape* collects its idle, fault and recovered snapshots, in that order of scenario time,
before any agent starts, so the simulated tools never run on the machine the fleet saturates.
Each agent's collection tick (every ``--interval`` s, its first one offset by the sampler's own
start jitter) hands its current snapshot, re-stamped, to the real judge and offers it to its
health loop, as ``Sampler.run`` does; at a phase the next snapshot becomes current. What is not
run per node is the collector's cost at the tick (it never touches the API server); the fault
snapshot's collection time is measured and reported apart (``collect_seconds``).

Phases: idle for ``--idle-periods`` resync periods (a short ``--resync``; rates are per minute of
wall time); then F faults at once on F different nodes (a lost GPU, XID 79, an Ascend SeparateNPU
code, a kernel-log Xid line, in turn); then all of them recover. "Fault injected" is the moment the
fault snapshot is handed to the judge (as a driver event or the kernel-log line wakes the sampler);
"taint accepted" is when the API server stored the Node with the taint.

    python benchmarks/fleet_burst.py --nodes 1000 --faults 200 [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import multiprocessing
import os
import platform
import resource
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hetero_exporter import registry  # noqa: E402
from hetero_exporter.health.act.fleet_budget import SLOT_PREFIX  # noqa: E402
from hetero_exporter.health.act.metrics import HealthMetrics  # noqa: E402
from hetero_exporter.health.act.remedy import HealthLoop, Remedy  # noqa: E402
from hetero_exporter.health.detect import policy as policy_mod  # noqa: E402
from hetero_exporter.health.detect.verdicts import HealthVerdicts  # noqa: E402
from hetero_exporter.health.plan import RemedyConfig  # noqa: E402
from hetero_exporter.health.plan.stack import plugin_selectors  # noqa: E402
from hetero_exporter.k8s.client import connect  # noqa: E402
from hetero_exporter.k8s.pods import PodCache  # noqa: E402
from hetero_exporter.k8s.slice_cache import SliceCache  # noqa: E402
from hetero_exporter.model import Allocation, NodeSnapshot  # noqa: E402
from hetero_exporter.sampling import CollectorSpec, Sampler, start_offset  # noqa: E402
from hetero_exporter.sdk.contract import CollectorOptions  # noqa: E402
from hetero_exporter.simulate.scenario import from_dict  # noqa: E402

TAINT = "hetero-exporter.io/accelerator-unhealthy"
NAMESPACE = "ml"
AGENT_NS = "hetero-exporter"
FAULT_AT, RESET_AT = 1000.0, 2000.0  # scenario seconds of the fault and of the recovery
KINDS = ("gpu-lost", "xid79", "ascend-separate-npu", "kernel-log")
NVIDIA = {"vendor": "nvidia", "count": 8, "product": "NVIDIA H100 80GB HBM3", "memory_total": 85520809984,
          "driver_version": "550.54.15", "pci_address": "0000:18:00.0", "pci_stride": 16,
          "numa_nodes": [0, 0, 0, 0, 1, 1, 1, 1],
          "values": {"utilization_ratio": 0.9, "memory_used_bytes": "60GiB", "temperature_core_celsius": 60,
                     "power_watts": 600, "power_limit_watts": 700, "ecc_corrected_total": 0,
                     "ecc_uncorrected_total": 0}}
ASCEND = {"vendor": "ascend", "count": 8, "product": "910B3", "memory_total": "64GiB", "driver_version": "23.0.3",
          "firmware_version": "7.1.0.5.220", "pci_address": "0000:c1:00.0", "pci_stride": 1,
          "values": {"utilization_ratio": 0.4, "memory_used_bytes": "20GiB", "temperature_core_celsius": 50,
                     "power_watts": 200}}
PLUGIN_NS = "kube-system"
PLUGIN_LABELS = {"nvidia": {"app": "nvidia-device-plugin-daemonset"}, "ascend": {"name": "ascend-device-plugin-ds"}}
XID79_LINE = "NVRM: Xid (PCI:{bus}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


# --------------------------------------------------------------------------- the API server's process


def _serve(conn: Any, bookmark_seconds: float) -> None:
    """The API server in a process of its own: answers the benchmark's commands on ``conn``."""
    from kubeapi import LEASES, NODES, PODS, KubeAPIServer, now_rfc3339
    api = KubeAPIServer(keep_requests=False, count_clients=True, bookmark_seconds=bookmark_seconds,
                        max_watch_seconds=3600.0).start()
    failing: set[str] = set()  # the failing agents' clients (User-Agent agent/<node>)
    marks: list[tuple[float, str, bool]] = []  # (monotonic, node, tainted) at each change
    tainted: set[str] = set()
    slots: list[tuple[float, str, Optional[str]]] = []  # (monotonic, Lease, holder or None) at each write
    store = api._store

    def recording_store(res: Any, ns: str, name: str, obj: Optional[dict], old: Optional[dict], etype: str) -> None:
        store(res, ns, name, obj, old, etype)
        if res is NODES:
            on = obj is not None and any(t.get("key") == TAINT for t in (obj.get("spec") or {}).get("taints") or [])
            if on != (name in tainted):
                (tainted.add if on else tainted.discard)(name)
                marks.append((time.monotonic(), name, on))
        elif res is LEASES and name.startswith(SLOT_PREFIX):
            slots.append((time.monotonic(), name, None if obj is None else (obj.get("spec") or {}).get("holderIdentity")))

    api._store = recording_store  # type: ignore[method-assign]
    conn.send({"url": api.url, "token": api.token})
    while True:
        cmd, arg = conn.recv()
        if cmd == "stop":
            break
        out: Any = None
        if cmd == "seed":
            for node, kind in arg:
                api.seed_node(node, labels={"kubernetes.io/hostname": node, "node.kubernetes.io/accelerator": kind},
                              capacity={"nvidia.com/gpu": "8"} if kind == "nvidia" else {"huawei.com/Ascend910": "8"})
                api.seed_pod(NAMESPACE, f"train-{node}", node, labels={"app": "train"}, containers=["main"])
                api.create(PODS, PLUGIN_NS, {  # its device plugin, Ready (stack health reads it)
                    "metadata": {"name": f"device-plugin-{node}", "labels": PLUGIN_LABELS[kind]},
                    "spec": {"nodeName": node, "containers": [{"name": "plugin", "image": "plugin"}]},
                    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True",
                                                                   "lastTransitionTime": now_rfc3339()}],
                               "containerStatuses": [{"name": "plugin", "restartCount": 0, "ready": True,
                                                      "state": {"running": {"startedAt": now_rfc3339()}}}]}})
        elif cmd == "slices":
            for node, uuids in arg:
                api.seed_resource_slice(f"{node}-gpu.nvidia.com", node, [
                    {"name": f"gpu-{i}", "attributes": {"uuid": {"string": u}, "index": {"int": i}}}
                    for i, u in enumerate(uuids)], driver="gpu.nvidia.com")
        elif cmd == "failing":
            failing = {f"agent/{n}" for n in arg}
        elif cmd == "tally":  # the fleet's, per second, the failing agents' summed, writes that stored nothing
            mine: Counter = Counter()
            for client, counts in api.tally_by_client().items():
                if client in failing:
                    mine.update(counts)
            out = (api.tally(), api.per_second(), dict(mine), api.unchanged_writes(), api.sent_bytes())
        elif cmd == "cpu":  # this process's CPU seconds (user + system), all its threads
            out = cpu_seconds()
        elif cmd == "marks":
            out = list(marks)
        elif cmd == "slots":
            out = list(slots)
        elif cmd == "refusals":  # the budget's refusal events, by what the message says
            out = dict(Counter(refusal_kind(e.get("message", ""))
                               for e in api.events(reason="AcceleratorTaintBudgetExhausted")))
        elif cmd == "tainted":  # nodes that carry the taint now
            out = len(tainted)
        elif cmd == "annotated":  # nodes the agents have reconciled once (their inventory written)
            out = sum(1 for n in api.list(NODES) if "hetero-exporter.io/devices" in n["metadata"].get("annotations", {}))
        conn.send(out)
    api.close()


def cpu_seconds() -> float:
    """The calling process's CPU time so far (user + system, every thread), seconds."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def cpu_split(server: "Server", since: tuple[float, float], per: float = 1.0) -> dict[str, float]:
    """CPU seconds of the agents' process and the API server's since ``since`` (``cpu_now``'s), per ``per``."""
    return {"agents": round((cpu_seconds() - since[0]) / per, 3),
            "api_server": round((server.ask("cpu") - since[1]) / per, 3)}


def cpu_now(server: "Server") -> tuple[float, float]:
    """The agents' process's CPU seconds and the API server's, now."""
    return cpu_seconds(), server.ask("cpu")


def refusal_kind(message: str) -> str:
    """An AcceleratorTaintBudgetExhausted event's cause: ``late`` (the holder's deadline passed
    before its taint was sent), ``taken-back`` (its slot was taken over before its taint landed
    and none was free), else ``full`` (no slot free, or the budget could not be read)."""
    if message.startswith("taking the taint off "):
        return "taken-back"
    return "late" if "without its taint landing" in message else "full"


class Server:
    """The API server's process and the one pipe to it."""

    def __init__(self, bookmark_seconds: float):
        ctx = multiprocessing.get_context("fork")  # before any thread of ours exists
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, bookmark_seconds), daemon=True)
        self._proc.start()
        hello = self._conn.recv()
        self.url, self.token = hello["url"], hello["token"]

    def ask(self, cmd: str, arg: Any = None) -> Any:
        self._conn.send((cmd, arg))
        return self._conn.recv()

    def kubeconfig(self, path: Path) -> str:
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "bench", "preferences": {},
               "clusters": [{"name": "loopback", "cluster": {"server": self.url}}],
               "users": [{"name": "agent", "user": {"token": self.token}}],
               "contexts": [{"name": "bench", "context": {"cluster": "loopback", "user": "agent"}}]}
        path.write_text(json.dumps(doc), encoding="utf-8")
        return str(path)

    def close(self) -> None:
        try:
            self.ask("stop")
        except (OSError, EOFError):
            pass
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()


# --------------------------------------------------------------------------- one node


class PhaseClock:
    """Wall time for every stamp; the scenario time the simulated tools render is the phase's."""

    def __init__(self) -> None:
        self.scenario_t = 0.0

    def __call__(self) -> float:
        return time.time()

    def t(self) -> float:
        return self.scenario_t


def scenario_doc(node: str, kind: str) -> dict:
    """The node's scenario: 8 devices, and its fault (if any) at FAULT_AT, recovered at RESET_AT."""
    doc: dict = {"name": node, "node": node, "devices": [dict(ASCEND if kind.startswith("ascend") else NVIDIA)]}
    if kind == "gpu-lost":
        doc["faults"] = [{"at": FAULT_AT, "vendor": "nvidia", "index": 2, "kind": "lost"},
                         {"at": RESET_AT, "vendor": "nvidia", "index": 2, "kind": "reset"}]
    elif kind == "xid79":
        doc["faults"] = [{"at": FAULT_AT, "vendor": "nvidia", "index": 5, "kind": "xid", "code": "79",
                          "message": "GPU has fallen off the bus"},
                         {"at": RESET_AT, "vendor": "nvidia", "index": 5, "kind": "reset"}]
    elif kind == "ascend-separate-npu":
        doc["faults"] = [{"at": FAULT_AT, "until": RESET_AT, "vendor": "ascend", "index": 3, "kind": "health",
                          "state": "Alarm", "codes": ["80E3A201"], "message": "node type=HBM, sensor type=ECC"}]
    elif kind == "kernel-log":
        doc["kernel_log"] = [{"at": FAULT_AT, "vendor": "nvidia", "index": 1, "line": XID79_LINE}]
        doc["faults"] = [{"at": RESET_AT, "vendor": "nvidia", "index": 1, "kind": "reset"}]
    return doc


def allocate(node: str, resource: str) -> Callable[[NodeSnapshot], NodeSnapshot]:
    """The kubelet's PodResources, standing in: one training pod holds the node's 8 devices."""
    def enrich(snap: NodeSnapshot) -> NodeSnapshot:
        devices = tuple(dataclasses.replace(d, allocations=(Allocation(
            NAMESPACE, f"train-{node}", "main", resource, d.identity.uuid),)) if d.identity.parent is None
            else d for d in snap.devices)
        return dataclasses.replace(snap, devices=devices)
    enrich.__name__ = "bench-podresources"
    return enrich


def kernel_log_source(scenario: Any, clock: PhaseClock) -> Callable[[NodeSnapshot], NodeSnapshot]:
    """The kernel-log source over the scenario's simulated /dev/kmsg (drained at each collection,
    where the agent's follower thread would have read it)."""
    from hetero_exporter.simulate.kernel_log import ScenarioKmsg
    from hetero_exporter.sources import kernel_log as kl
    ring = ScenarioKmsg(scenario, clock)
    follower = kl.Follower(kl.KmsgSource("simulated:/dev/kmsg", opener=ring.opener, wall_time=ring.wall_time),
                           clock=clock, writable=False)
    faults = kl.KernelLogFaults(follower)

    def enrich(snap: NodeSnapshot) -> NodeSnapshot:
        follower.drain()
        return faults(snap)
    enrich.__name__ = "kernel-log"
    return enrich


def swap(obj: Any, old: str, new: str) -> Any:
    """``obj`` with every string's ``old`` replaced by ``new``, through dataclasses, tuples, lists
    and dicts (the same object where nothing changed): a template node's snapshot made another's."""
    if isinstance(obj, str):
        return obj.replace(old, new) if old in obj else obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {}
        for f in dataclasses.fields(obj):
            if f.init:
                v = getattr(obj, f.name)
                w = swap(v, old, new)
                if w is not v:
                    changes[f.name] = w
        return dataclasses.replace(obj, **changes) if changes else obj
    if isinstance(obj, (tuple, list)):
        items = [swap(v, old, new) for v in obj]
        return obj if all(a is b for a, b in zip(items, obj)) else type(obj)(items)
    if isinstance(obj, dict):
        pairs = {swap(k, old, new): swap(v, old, new) for k, v in obj.items()}
        return obj if all(k in obj and obj[k] is v for k, v in pairs.items()) else pairs
    return obj


def vendor_of(kind: str) -> str:
    return "ascend" if kind.startswith("ascend") else "nvidia"


def resource_of(kind: str) -> str:
    return "huawei.com/Ascend910" if vendor_of(kind) == "ascend" else "nvidia.com/gpu"


class Shape:
    """One kind of node (its devices and its fault) collected through the real collectors and
    sources over the simulation, as a template node; every node of the kind gets its snapshots
    from here with the node's own name (``personal``). Collection is the simulated part: the
    judge, plan and act run per node."""

    def __init__(self, kind: str, workdir: str):
        self.kind, self.vendor = kind, vendor_of(kind)
        self.template = f"shape-{kind}"
        self.clock = PhaseClock()
        doc = scenario_doc(self.template, kind)
        path = Path(workdir) / f"{self.template}.yaml"
        if self.vendor == "ascend":  # the fake npu-smi reads its scenario from a file
            path.write_text(yaml.safe_dump(doc), encoding="utf-8")
        scenario = from_dict(doc, str(path))
        name = "npu_smi" if self.vendor == "ascend" else "nvml"
        opts = CollectorOptions(node_name=self.template, scenario=scenario, clock=self.clock,
                                workdir=str(Path(workdir) / self.template) if self.vendor == "ascend" else None)
        entry = registry.collector_entries()[name]
        spec = CollectorSpec(name, self.vendor, lambda: registry.collector_factory(entry)(opts), 30.0)
        enrichers = [kernel_log_source(scenario, self.clock)] if kind == "kernel-log" else []
        self.sampler = Sampler([spec], self.template, clock=self.clock, enrichers=enrichers, min_cycle_gap=0)
        self.collect_seconds = 0.0

    def collect(self, scenario_t: float) -> NodeSnapshot:
        """The template's collection at scenario time ``scenario_t`` (the real collector and sources)."""
        self.clock.scenario_t = scenario_t
        t0 = time.perf_counter()
        snap = self.sampler.collect()
        self.collect_seconds = time.perf_counter() - t0
        return snap

    def personal(self, snap: NodeSnapshot, node: str, boot_id: str) -> NodeSnapshot:
        """The template's snapshot as node ``node``'s: its name everywhere, its boot, its pod."""
        mine = swap(snap, self.template, node)
        return allocate(node, resource_of(self.kind))(dataclasses.replace(mine, node=node, boot_id=boot_id))

    def close(self) -> None:
        self.sampler.close()


@dataclasses.dataclass
class Shared:
    """What every agent of the run shares: the policy, the health settings, the kubeconfig."""

    kubeconfig: str
    policy: Any
    cfg: RemedyConfig
    workdir: str
    interval: float
    rng: random.Random


class NodeAgent:
    """One node: the judge, the health loop and its remedy on its own API client, the pod and
    ResourceSlice watches; its snapshots are its shape's, with its own name."""

    def __init__(self, node: str, kind: str, shared: Shared):
        self.node, self.kind = node, kind
        self.vendor = vendor_of(kind)
        self.boot_id = f"boot-{node}"
        self.verdicts = HealthVerdicts(shared.policy)
        self.cluster = connect(shared.kubeconfig, env={}, timeout_seconds=30.0)
        api_client = self.cluster.api_client
        api_client.user_agent = f"agent/{node}"  # the API server counts each agent's requests apart
        self.pods = PodCache(api_client, node, request_timeout=30.0, plugin_selectors=plugin_selectors())
        self.slices = SliceCache(api_client, node, request_timeout=30.0) if self.vendor == "nvidia" else None
        resource = resource_of(kind)
        self.remedy = Remedy(self.cluster, node, shared.policy, shared.cfg, HealthMetrics(),
                             resource_of=lambda d: resource, slices=self.slices, failed_pods=self.pods.failed_pods,
                             plugin_pods=self.pods.plugin_pods,
                             environ={"POD_NAMESPACE": AGENT_NS}, rng=shared.rng)
        # the loop's idle wake-up does nothing without an offer (each offer wakes it at once): 1 s
        # in the agent, 30 s here, so that a thousand loops in one process do not wake for nothing
        self.loop = HealthLoop(self.remedy, self.verdicts, boot_id=self.boot_id, idle_seconds=30.0)
        self.handed_at = float("inf")  # monotonic: when the phase's snapshot reached the judge
        self.done_at: Optional[float] = None  # when a reconcile of it finished with nothing left over
        self.started_at: Optional[float] = None  # when the first reconcile after the hand-over began
        reconcile = self.remedy.reconcile

        def timed(snap: NodeSnapshot, ev: Any) -> Any:  # the health loop's call, timed (bench only)
            started = time.monotonic()
            if started >= self.handed_at and self.started_at is None:
                self.started_at = started
            out = reconcile(snap, ev)
            if started >= self.handed_at and not out.skipped and out.error is None and not out.undelivered:
                self.done_at = self.done_at or time.monotonic()
            return out
        self.remedy.reconcile = timed  # type: ignore[method-assign]
        self.snapshot: Optional[NodeSnapshot] = None
        self.pending: Optional[NodeSnapshot] = None  # the next phase's, collected ahead

    def tick(self) -> None:
        """One collection tick: the last snapshot, re-stamped, judged and offered (Sampler.run)."""
        snap = self.snapshot
        if snap is None:
            return
        judged, evaluation = self.verdicts.judge(dataclasses.replace(snap, time=time.time()))
        self.loop.offer(judged, evaluation)

    def switch(self) -> float:
        """The phase's snapshot becomes the node's, handed to the judge now; when (monotonic)."""
        self.snapshot, self.pending = self.pending, None
        self.done_at, self.started_at, at = None, None, time.monotonic()
        self.handed_at = at
        self.tick()
        return at

    def close(self) -> None:
        self.loop.stop(timeout=2.0)
        self.pods.close()
        if self.slices is not None:
            self.slices.close()


# --------------------------------------------------------------------------- the fleet


class Ticker:
    """Every agent's collection tick, every ``interval`` s from its own start offset (the
    sampler's jitter), on one thread (the ticks are microseconds of judging each)."""

    def __init__(self, agents: list[NodeAgent], interval: float, rng: random.Random):
        now = time.monotonic()
        self._heap = [(now + start_offset(interval, rng), i) for i in range(len(agents))]
        heapq.heapify(self._heap)
        self._agents, self._interval = agents, interval
        self._lock = threading.Lock()  # a phase switch and a tick of the same agent never interleave
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ticker", daemon=True)

    def start(self) -> "Ticker":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            at, i = self._heap[0]
            wait = at - time.monotonic()
            if wait > 0:
                self._stop.wait(min(wait, 0.5))
                continue
            heapq.heapreplace(self._heap, (at + self._interval, i))
            with self._lock:
                self._agents[i].tick()

    def switch(self, agents: list[NodeAgent]) -> list[float]:
        """Hand each agent's next-phase snapshot to its judge, one after the other; when each was."""
        out = []
        for a in agents:
            with self._lock:
                out.append(a.switch())
        return out

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def percentile(values: list[float], q: float) -> Optional[float]:
    """The q-th percentile (nearest rank); None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered) + 0.5)) - 1))]


def plan_fleet(nodes: int, faults: int, ascend_nodes: int) -> list[tuple[str, str]]:
    """(node, kind): the first ``faults`` nodes fail, the kinds in turn; ``ascend_nodes`` Ascend
    nodes in all (those failing included), the rest NVIDIA (kind 'nvidia': no fault)."""
    kinds = [KINDS[i % len(KINDS)] for i in range(faults)]
    extra_ascend = max(0, ascend_nodes - kinds.count("ascend-separate-npu"))
    rest = ["ascend-idle"] * extra_ascend + ["nvidia"] * (nodes - faults - extra_ascend)
    return [(f"node-{i:05d}", k) for i, k in enumerate(kinds + rest)]


def wait_for(what: Callable[[], bool], timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # bounded
        if what():
            return True
        time.sleep(step)
    return what()


@dataclasses.dataclass
class Settings:
    nodes: int
    faults: int
    resync: float  # seconds: the benchmark's resync (the real default is 60)
    interval: float  # seconds between collection ticks
    idle_periods: int
    ascend_nodes: int
    seed: int
    settle_timeout: float
    health: dict = dataclasses.field(default_factory=dict)  # health settings over the defaults

    @property
    def scale(self) -> float:
        """Real seconds per benchmark second: every period of the health settings is shrunk by it."""
        return 60.0 / self.resync


def health_config(s: Settings) -> RemedyConfig:
    """The defaults (enforce mode), every period shrunk by the benchmark's scale."""
    k = s.scale
    return RemedyConfig.from_mapping({"resync_seconds": s.resync, "condition_heartbeat_seconds": 300.0 / k,
                                      "inventory_heartbeat_seconds": 120.0 / k,
                                      "budget_lease_seconds": max(30.0, 600.0 / k), **s.health}, mode="enforce")


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in sorted(after.items()) if v - before.get(k, 0)}


WRITE_VERBS = ("create", "update", "patch", "delete")


def writes_of(counts: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in counts.items() if k.split(" ", 1)[0] in WRITE_VERBS}


def settle(failing: list[NodeAgent], timeout: float) -> float:
    """Wait until every failing agent finished a reconcile of its new snapshot (bounded): when
    the last one did (monotonic), or the timeout's end."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # bounded
        done = [a.done_at for a in failing]
        if all(d is not None for d in done):
            return max(d for d in done if d is not None)
        time.sleep(0.1)
    return time.monotonic()


@dataclasses.dataclass
class Ahead:
    """A phase's shape snapshots, collected before any agent starts (``collect_ahead``), and how
    long each shape's first collection took (seconds)."""

    snaps: dict[str, NodeSnapshot]
    collect_seconds: dict[str, float]
    not_shown: tuple[str, ...] = ()  # shapes whose snapshot did not show the phase (bounded tries)


def collect_ahead(shapes: dict[str, Shape], kinds: list[str], scenario_t: float,
                  shows: Callable[[NodeSnapshot], bool], tries: int = 90) -> Ahead:
    """Each shape of ``kinds`` collected at ``scenario_t`` and a second later (NVML's event thread
    has delivered the XID by the second), then again every second (bounded) until ``shows`` says
    the snapshot shows the phase: a fault not yet delivered, or a lost GPU that the collector
    probes again only after its back-off (wall time), would hand the agents nothing to do."""
    snaps: dict[str, NodeSnapshot] = {}
    seconds: dict[str, float] = {}
    not_shown: list[str] = []
    for step in (0.0, 1.0):
        time.sleep(0.3)
        for k in kinds:
            snaps[k] = shapes[k].collect(scenario_t + step)
            if step == 0.0:
                seconds[k] = shapes[k].collect_seconds
    for k in kinds:
        for _ in range(tries):
            if shows(snaps[k]):
                break
            time.sleep(1.0)
            snaps[k] = shapes[k].collect(scenario_t + 1.0)
        else:
            progress(f"the {k} shape did not show its phase after {tries} collections")
            not_shown.append(k)
    return Ahead(snaps, seconds, tuple(not_shown))


def fails(policy: Any) -> Callable[[NodeSnapshot], bool]:
    """Whether a fresh judge fails or degrades a device of the snapshot."""
    def check(snap: NodeSnapshot) -> bool:
        ev = HealthVerdicts(policy).judge(snap)[1]
        return bool(ev.node.failed or ev.node.degraded)
    return check


def build(s: Settings, server: Server, workdir: str) -> tuple[list[NodeAgent], dict[str, Shape], tuple[Ahead, Ahead]]:
    """The shapes (one per kind), each collected for its three phases (idle, fault, recovery)
    before any agent starts, then the agents with their idle snapshots, their watches and health
    loops started. Collecting ahead keeps the simulated tools off a machine the fleet saturates (at
    1,000 agents the fake npu-smi missed its 1 s deadline in 20 collections in a row); what an
    agent runs between a fault and its writes (judge, plan, act) is unchanged: the snapshot is
    handed to its judge at the burst, re-stamped, as a collection tick does."""
    fleet = plan_fleet(s.nodes, s.faults, s.ascend_nodes)
    server.ask("seed", [(n, vendor_of(k)) for n, k in fleet])
    shapes = {k: Shape(k, workdir) for k in sorted({k for _, k in fleet})}
    idle = {k: shape.collect(FAULT_AT - 10) for k, shape in shapes.items()}
    policy = policy_mod.load()
    failing = sorted({k for _, k in fleet[:s.faults]})
    fault = collect_ahead(shapes, failing, FAULT_AT + 1, fails(policy))

    def recovered(snap: NodeSnapshot) -> bool:  # every device answers its collector again
        return all(d.report.state in ("ok", "degraded") for d in snap.devices)
    ahead = (fault, collect_ahead(shapes, failing, RESET_AT + 1, recovered))
    rng = random.Random(s.seed)
    shared = Shared(server.kubeconfig(Path(workdir) / "kubeconfig"), policy, health_config(s), workdir,
                    s.interval, rng)
    agents = []
    for node, kind in fleet:
        a = NodeAgent(node, kind, shared)
        a.snapshot = shapes[kind].personal(idle[kind], node, a.boot_id)
        agents.append(a)
    server.ask("slices", [(a.node, [d.identity.uuid for d in a.snapshot.devices if d.identity.parent is None])
                          for a in agents if a.vendor == "nvidia" and a.snapshot is not None])
    for a in agents:
        a.pods.start(wait_first=0.0)
        if a.slices is not None:
            a.slices.start()
        a.loop.start()
    return agents, shapes, ahead


# Evidence of the recovery the real judge needs, per kind: the device back through NVML after it
# was lost (readable), or, for an Xid 79 seen only in the kernel log (NVML answered throughout),
# the reboot its catalogue action asks for: the node's boot id changes.
REBOOTED = frozenset({"kernel-log"})


def burst(s: Settings, server: Server, ticker: Ticker, agents: list[NodeAgent], shapes: dict[str, Shape],
          ahead: Ahead, recovery: bool = False) -> dict:
    """One phase of the failing nodes (fault or recovery): every failing node gets its own copy of
    its shape's snapshot (collected ahead), all are handed over at once; wait until each failing
    agent finished a reconcile of it. The requests of the phase, its per-second peak, when each
    node was handed its snapshot."""
    failing = agents[:s.faults]
    for a in failing:
        boot = f"{a.boot_id}-rebooted" if recovery and a.kind in REBOOTED else a.boot_id
        a.pending = shapes[a.kind].personal(ahead.snaps[a.kind], a.node, boot)
    before, seconds_before, failing_before, unchanged_before, sent_before = server.ask("tally")
    cpu0 = cpu_now(server)
    t0 = time.monotonic()
    handed = ticker.switch(failing)
    last = settle(failing, s.settle_timeout)
    if recovery:  # a verdict that needs another collection tick to recover untaints at a later reconcile
        wait_for(lambda: server.ask("tainted") == 0, max(0.0, t0 + s.settle_timeout - time.monotonic()), 0.5)
    unsettled: dict[str, int] = {}
    for a in failing:
        if a.done_at is None:
            o = a.loop.last
            why = "no reconcile yet" if o is None else (o.skipped or o.error or f"{o.undelivered} undelivered")
            unsettled[why[:120]] = unsettled.get(why[:120], 0) + 1
    if unsettled:
        progress(f"not settled: {unsettled}")
    time.sleep(1.0)  # requests still in flight when the last reconcile ended
    after, per_second, failing_after, unchanged_after, sent_after = server.ask("tally")
    cpu = cpu_split(server, cpu0)
    window = {t: n - seconds_before.get(t, 0) for t, n in per_second.items() if t >= int(t0)}
    return {"requests": delta(after, before), "failing_requests": delta(failing_after, failing_before),
            "unchanged_writes": delta(unchanged_after, unchanged_before), "handed": handed, "t0": t0,
            "elapsed": max(0.0, last - t0), "unsettled": unsettled,
            "reconciled": [a.done_at - h for a, h in zip(failing, handed) if a.done_at is not None],
            "waited": [a.started_at - h for a, h in zip(failing, handed) if a.started_at is not None],
            "done_at": {a.node: a.done_at for a in failing if a.done_at is not None},
            "peak_requests_per_second": max(window.values(), default=0), "cpu_seconds": cpu,
            "sent_bytes": delta(sent_after, sent_before),
            "collect_seconds": ahead.collect_seconds}


def retries(s: Settings, server: Server, phase: dict) -> dict[str, int]:
    """The failing agents' requests from the end of the fault phase to 1.5 resync periods after
    it began: the refused nodes asking for a slot again at their resync."""
    before = server.ask("tally")[2]
    time.sleep(max(0.0, phase["t0"] + 1.5 * s.resync - time.monotonic()))
    return delta(server.ask("tally")[2], before)


def latencies(marks: list[tuple[float, str, bool]], handed: dict[str, float], on: bool) -> list[float]:
    """Seconds from each node's hand-over to the first change of its taint to ``on`` after it."""
    out = []
    for node, at in handed.items():
        first = next((t for t, n, tainted in marks if n == node and tainted == on and t >= at), None)
        if first is not None:
            out.append(first - at)
    return out


def over_budget(marks: list[tuple[float, str, bool]], slots: list[tuple[float, str, Optional[str]]],
                budget: int) -> dict:
    """Where the taints outnumbered the budget, why: at the first such moment, the tainted nodes
    that held no slot then, and for those, the slots they held before (taken over by whom, when)."""
    changes = sorted([(t, 0, n, on) for t, n, on in marks] + [(t, 1, lease, h) for t, lease, h in slots],
                     key=lambda c: (c[0], c[1]))
    tainted: set[str] = set()
    holder: dict[str, Optional[str]] = {}
    history: dict[str, list[tuple[float, str, Optional[str]]]] = {}  # node -> (when, lease, new holder)
    for t, kind, name, what in changes:
        if kind == 1:
            before = holder.get(name)
            holder[name] = what
            if before is not None and before != what:
                history.setdefault(before, []).append((t, name, what))
            continue
        (tainted.add if what else tainted.discard)(name)
        if what and len(tainted) > budget:
            held = {h for h in holder.values() if h}
            without = sorted(tainted - held)
            return {"at_seconds": round(t - changes[0][0], 3), "tainted": len(tainted), "slots_held": len(held),
                    "tainted_holding_no_slot": len(without),
                    "their_slots_taken_over": {n: [(round(w - changes[0][0], 3), lease, by)
                                                   for w, lease, by in history.get(n, [])][-3:]
                                               for n in without[:10]}}
    return {}


def after_first(marks: list[tuple[float, str, bool]], done_at: dict[str, float], handed: dict[str, float]) -> int:
    """The taints of the burst that landed after their node's first complete reconcile of the
    fault (``done_at``: node -> then): granted on a later attempt (a resync), not the first."""
    late = 0
    for node, at in handed.items():
        first = next((t for t, n, on in marks if n == node and on and t >= at), None)
        if first is not None and node in done_at and first > done_at[node]:
            late += 1
    return late


def max_at_once(marks: list[tuple[float, str, bool]]) -> int:
    now, top = 0, 0
    for _, _, on in sorted(marks):
        now += 1 if on else -1
        top = max(top, now)
    return top


def seconds_over(marks: list[tuple[float, str, bool]], budget: int) -> float:
    """How long (server seconds, in all) more nodes carried the taint than the budget allows."""
    now, since, total = 0, None, 0.0
    for t, _, on in sorted(marks):
        now += 1 if on else -1
        if now > budget and since is None:
            since = t
        elif now <= budget and since is not None:
            total, since = total + t - since, None
    return total


def taken_back(marks: list[tuple[float, str, bool]], handed: dict[str, float]) -> int:
    """Taints that came off a node before its recovery was handed over (``handed``: node ->
    then): a recheck that found its slot taken over and none free (fleet_budget.py's fence)."""
    return sum(1 for t, n, on in marks if not on and n in handed and t < handed[n])


def progress(what: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {what}", file=sys.stderr, flush=True)


def run(s: Settings) -> dict:
    server = Server(bookmark_seconds=60.0)
    workdir = tempfile.mkdtemp(prefix="fleet-burst-")
    agents: list[NodeAgent] = []
    shapes: dict[str, Shape] = {}
    ticker: Optional[Ticker] = None
    try:
        t_start = time.monotonic()
        agents, shapes, (fault_ahead, recovery_ahead) = build(s, server, workdir)
        progress(f"{len(agents)} agents built")
        ticker = Ticker(agents, s.interval, random.Random(s.seed + 1)).start()
        if not wait_for(lambda: server.ask("annotated") >= s.nodes, s.settle_timeout, 1.0):
            raise RuntimeError(f"only {server.ask('annotated')} of {s.nodes} nodes reconciled once")
        startup = time.monotonic() - t_start
        progress(f"every node reconciled once after {startup:.0f} s; idle")
        time.sleep(1.5 * s.resync)  # past every agent's first (jittered) resync
        server.ask("failing", [a.node for a in agents[:s.faults]])
        idle0, cpu0 = server.ask("tally")[0], cpu_now(server)
        idle_seconds = s.idle_periods * s.resync
        time.sleep(idle_seconds)
        idle = delta(server.ask("tally")[0], idle0)
        idle_cpu = cpu_split(server, cpu0, per=idle_seconds)
        progress("fault burst")
        fault = burst(s, server, ticker, agents, shapes, fault_ahead)
        fault["retry_requests"] = retries(s, server, fault)
        progress("recovery")
        recovery = burst(s, server, ticker, agents, shapes, recovery_ahead, recovery=True)
        marks = server.ask("marks")
        out = report(s, agents, idle, idle_seconds, fault, recovery, marks, startup, server.ask("slots"))
        out["budget_refusal_events"] = server.ask("refusals")
        out["idle_cpu_seconds_per_second"] = idle_cpu
        out["shapes_not_shown"] = {"fault": list(fault_ahead.not_shown), "recovery": list(recovery_ahead.not_shown)}
        return out
    finally:
        if ticker is not None:
            ticker.stop()
        for a in agents:
            a.close()
        for shape in shapes.values():
            shape.close()
        server.close()


def per_fault(s: Settings, phase: dict, idle: dict[str, int], idle_seconds: float) -> dict[str, float]:
    """The failing agents' writes in the phase per failing node, less what they would have
    written idle over as long (the fleet's idle writes per node and second)."""
    share = s.faults * phase["elapsed"] / (idle_seconds * s.nodes)
    raw = writes_of(phase["failing_requests"])
    return {k: round(max(0.0, v - idle.get(k, 0) * share) / s.faults, 3) for k, v in raw.items()
            if v - idle.get(k, 0) * share > 0.5}


def report(s: Settings, agents: list[NodeAgent], idle: dict[str, int], idle_seconds: float, fault: dict,
           recovery: dict, marks: list, startup: float, slots: list) -> dict:
    minutes = idle_seconds * s.scale / 60.0  # of real (unscaled) agent time
    beyond = {k: v for k, v in idle.items() if not k.startswith("watch ")}
    failing = agents[:s.faults]
    to_taint = latencies(marks, {a.node: t for a, t in zip(failing, fault["handed"])}, True)
    to_untaint = latencies(marks, {a.node: t for a, t in zip(failing, recovery["handed"])}, False)
    writes = per_fault(s, fault, idle, idle_seconds)
    budget = max(health_config(s).budget_min_nodes, int(health_config(s).budget_max_fraction * s.nodes))
    r2 = lambda x: None if x is None else round(x, 3)  # noqa: E731
    return {
        "nodes": s.nodes, "faults": s.faults, "devices_per_node": 8,
        "fault_kinds": dict(Counter(a.kind for a in failing)),
        "resync_seconds": s.resync, "scale": s.scale, "health_settings": s.health, "idle_seconds": idle_seconds,
        "idle_requests_per_node_per_minute": round(sum(beyond.values()) / s.nodes / minutes, 3),
        "idle_requests_per_node_per_minute_by_kind": {k: round(v / s.nodes / minutes, 3) for k, v in beyond.items()},
        "idle_watch_requests": {k: v for k, v in idle.items() if k.startswith("watch ")},
        "writes_per_fault": round(sum(writes.values()), 3),
        "writes_per_fault_by_kind": writes,
        "writes_stored_nothing_per_fault": {k: round(v / s.faults, 3) for k, v in fault["unchanged_writes"].items()},
        "failing_agents_requests": fault["failing_requests"],
        "burst_requests": fault["requests"],
        "refused_retry_requests": fault["retry_requests"],
        "tainted_by_kind": dict(Counter(a.kind for a, t in zip(failing, fault["handed"])
                                        if latencies(marks, {a.node: t}, True))),
        "untainted_by_kind": dict(Counter(a.kind for a, t in zip(failing, recovery["handed"])
                                          if latencies(marks, {a.node: t}, False))),
        "tainted_in_burst": len(to_taint),
        "fault_to_taint_p50_seconds": r2(percentile(to_taint, 50)),
        "fault_to_taint_p99_seconds": r2(percentile(to_taint, 99)),
        "fault_to_taint_max_seconds": r2(max(to_taint, default=None)),
        "recovery_to_untaint_p50_seconds": r2(percentile(to_untaint, 50)),
        "recovery_to_untaint_p99_seconds": r2(percentile(to_untaint, 99)),
        "untainted_in_recovery": len(to_untaint),
        "fault_reconciled_p99_seconds": r2(percentile(fault["reconciled"], 99)),
        "fault_to_taint_deciles_seconds": [r2(percentile(to_taint, q)) for q in range(10, 100, 10)],
        "fault_reconcile_wait_p50_seconds": r2(percentile(fault["waited"], 50)),
        "fault_reconcile_wait_p99_seconds": r2(percentile(fault["waited"], 99)),
        "tainted_after_first_reconcile": after_first(marks, fault["done_at"], {a.node: t for a, t in zip(
            failing, fault["handed"])}),
        "fault_phase_seconds": r2(fault["elapsed"]),
        "fault_phase_cpu_seconds": fault["cpu_seconds"],
        "fault_phase_answered_megabytes": {k: round(v / 1e6, 2) for k, v in fault["sent_bytes"].items()
                                           if v >= 10_000},
        "unsettled_agents": {"fault": fault["unsettled"], "recovery": recovery["unsettled"]},
        "recovery_requests": recovery["requests"],
        "max_tainted_at_once": max_at_once(marks),
        "budget": budget,
        "budget_exceeded": max_at_once(marks) > budget,
        "budget_excess": over_budget(marks, slots, budget),
        "over_budget_seconds": round(seconds_over(marks, budget), 3),
        "taints_taken_back": taken_back(marks, {a.node: t for a, t in zip(failing, recovery["handed"])}),
        "peak_requests_per_second": fault["peak_requests_per_second"],
        "recovery_peak_requests_per_second": recovery["peak_requests_per_second"],
        "collect_seconds_median": {k: round(v, 4) for k, v in fault["collect_seconds"].items()},
        "startup_seconds": round(startup, 1),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
    }


def main(argv: Optional[list[str]] = None) -> int:
    import faulthandler
    import logging
    import signal
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: every thread's stack (a stuck agent)
    logging.disable(logging.WARNING)  # thousands of agents' warnings (budget refusals) are not the measure
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--faults", type=int, default=20)
    ap.add_argument("--resync", type=float, default=6.0, help="the agents' resync_seconds (real: 60); every "
                    "health period is shrunk by 60 / RESYNC and the idle rates scaled back to real minutes")
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between an agent's collection ticks")
    ap.add_argument("--idle-periods", type=int, default=3)
    ap.add_argument("--ascend-nodes", type=int, default=None, help="Ascend nodes in the fleet (default: those "
                    "that fail, and as many idle ones)")
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--settle-timeout", type=float, default=600.0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a health setting over the defaults (pod_events=false, fleet_budget=false); repeatable")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if not 1 <= a.faults <= a.nodes <= 100_000:
        ap.error("need 1 <= --faults <= --nodes <= 100000")
    ascend = a.ascend_nodes if a.ascend_nodes is not None else 2 * sum(
        1 for i in range(a.faults) if KINDS[i % len(KINDS)].startswith("ascend"))
    s = Settings(a.nodes, a.faults, a.resync, a.interval, a.idle_periods, min(ascend, a.nodes - a.faults +
                 sum(1 for i in range(a.faults) if KINDS[i % len(KINDS)].startswith("ascend"))), a.seed,
                 a.settle_timeout, {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in a.set)})
    out = run(s)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
