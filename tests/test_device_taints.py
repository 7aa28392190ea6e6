"""health/plan/device_taints.py: DeviceTaintRules for failed devices, over ResourceSlices shaped like
the ones NVIDIA's and AMD's DRA drivers publish."""

from __future__ import annotations

import copy
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from hetero_exporter.health.detect import policy as policy_mod
from hetero_exporter.health.plan.device_taints import (MANAGED_BY, DeviceTaintSettings, pci_key, plan_device_taints,
                                                  rule_name)
from hetero_exporter.health.detect.rules import Verdict
from hetero_exporter.model import DeviceIdentity, DeviceSample, Fault

POLICY = policy_mod.load()
CFG = DeviceTaintSettings()
NODE = "gpu-node-7"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
XID79 = Fault(code="79", fault_class="device-lost", action="reboot-node", severity="critical")
XID48 = Fault(code="48", fault_class="memory-uncorrectable", action="reset-device", severity="critical")


def _nvidia_devices(n=4):
    return {f"GPU-{i:08x}-1111-2222-3333-444455556666": DeviceSample(
        identity=DeviceIdentity(vendor="nvidia", kind="gpu", index=i, uuid=f"GPU-{i:08x}-1111-2222-3333-444455556666",
                                model="H100-SXM5-80GB", pci_address=f"0000:{0x18 + i:02x}:00.0"),
        timestamp=1000.0) for i in range(n)}


def _nvidia_slice(devices, node=NODE, generation=1, names=None):
    """As NVIDIA/k8s-dra-driver-gpu publishes a GPU (cmd/gpu-kubelet-plugin/deviceinfo.go, GpuInfo.GetDevice)."""
    out = []
    for i, (uuid, d) in enumerate(devices.items()):
        out.append({"name": (names or {}).get(i, f"gpu-{i}"), "attributes": {
            "type": {"string": "gpu"}, "uuid": {"string": uuid},
            "productName": {"string": "NVIDIA H100 80GB HBM3"}, "brand": {"string": "Nvidia"},
            "architecture": {"string": "Hopper"}, "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "550.54.15"}, "cudaDriverVersion": {"version": "12.4.0"},
            "pcieBusID": {"string": d.identity.pci_address.upper()},
            "addressingMode": {"string": "None"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:15"}},
            "capacity": {"memory": {"value": "80Gi"}}})
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu.nvidia.com-abcde", "uid": "s-1", "resourceVersion": "11"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": generation, "resourceSliceCount": 1}, "devices": out}}


def _amd_devices(n=2):
    return {f"amd-{i}": DeviceSample(identity=DeviceIdentity(
        vendor="amd", kind="gpu", index=i, uuid=f"0x{0xabc0 + i:x}-mi300x", model="MI300X",
        pci_address=f"0000:{0x0c + i * 0x10:02x}:00.0"), timestamp=1000.0) for i in range(n)}


def _amd_slice(devices, spelling=lambda a: a.upper()):
    """As ROCm/k8s-gpu-dra-driver publishes a full GPU (cmd/gpu-kubeletplugin/deviceinfo.go,
    AmdGpuInfo.GetDevice; docs/driver-attributes.md): no uuid attribute, the standard
    resource.kubernetes.io/pciBusID."""
    out = []
    for i, d in enumerate(devices.values()):
        out.append({"name": f"gpu-{i}-{128 + i}", "attributes": {
            "type": {"string": "amdgpu"}, "productName": {"string": "AMD_Instinct_MI300X_OAM"},
            "numaNode": {"int": i}, "driverVersion": {"version": "6.8.5"},
            "driverVersionFull": {"string": "6.8.5"}, "deviceID": {"string": "0x74a1"},
            "resource.kubernetes.io/pciBusID": {"string": spelling(d.identity.pci_address)},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"}},
            "capacity": {"memory": {"value": "192Gi"}, "computeUnits": {"value": "304"}}})
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s-amd"},
            "spec": {"driver": "gpu.amd.com", "nodeName": NODE, "pool": {"name": NODE, "generation": 3},
                     "devices": out}}


def _verdicts(devices, **states):
    """states: uuid -> "failed" | "degraded" | ...; failed ones get Xid 79."""
    out = {}
    for u in devices:
        state = states.get(u, "ok")
        reasons = (XID79,) if state == "failed" else (Fault(code="pcie-replays", fault_class="pcie"),) \
            if state == "degraded" else ()
        out[u] = Verdict(u, state, reasons)
    return out


class Store:
    """What the API server keeps of the plan's writes (uid, resourceVersion, timeAdded)."""

    def __init__(self):
        self.rules: dict[str, dict] = {}
        self.rv = 100

    def apply(self, p):
        for r in p.create:
            assert r["metadata"]["name"] not in self.rules
            r = copy.deepcopy(r)
            self.rv += 1
            r["metadata"].update(uid=f"uid-{self.rv}", resourceVersion=str(self.rv))
            r["spec"]["taint"]["timeAdded"] = "2026-12-01T00:00:00Z"
            self.rules[r["metadata"]["name"]] = r
        for u in p.update:
            r = self.rules[u.name]
            assert u.patch["metadata"]["resourceVersion"] == r["metadata"]["resourceVersion"] == u.resource_version
            r["metadata"]["annotations"].update(u.patch["metadata"]["annotations"])
            r["spec"]["taint"].update(u.patch["spec"]["taint"])
            self.rv += 1
            r["metadata"]["resourceVersion"] = str(self.rv)
        for d in p.delete:
            r = self.rules.pop(d.name)
            assert (d.uid, d.resource_version) == (r["metadata"]["uid"], r["metadata"]["resourceVersion"])

    def list(self):
        return list(copy.deepcopy(self.rules).values())


def _plan(slices, store, verdicts, devices, cfg=CFG, node=NODE):
    return plan_device_taints(node, slices, store.list(), verdicts, devices, POLICY, cfg, 1000.0)


def test_one_failed_gpu_of_four_gets_one_rule_deleted_on_recovery():
    devices = _nvidia_devices()
    bad = list(devices)[2]
    slices, store = [_nvidia_slice(devices)], Store()
    p = _plan(slices, store, _verdicts(devices, **{bad: "failed"}), devices)
    assert len(p.create) == 1 and not p.update and not p.delete and p.unmatched == []
    rule = p.create[0]
    assert rule["apiVersion"] == "resource.k8s.io/v1" and rule["kind"] == "DeviceTaintRule"
    assert rule["metadata"]["name"] == rule_name(NODE, "gpu.nvidia.com", NODE, "gpu-2")
    assert DNS_SUBDOMAIN.match(rule["metadata"]["name"]) and rule["metadata"]["name"].startswith("hetero-exporter-")
    assert rule["metadata"]["labels"] == {MANAGED_BY: "hetero-exporter", "hetero-exporter.io/node": NODE}
    assert rule["metadata"]["annotations"]["hetero-exporter.io/device"] == bad
    msg = rule["metadata"]["annotations"]["hetero-exporter.io/message"]
    assert msg.startswith(f"nvidia GPU 2 ({bad}) failed: XID 79") and "fallen off the bus" in msg
    assert rule["spec"] == {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-2"},
                            "taint": {"key": "hetero-exporter.io/accelerator-unhealthy", "value": "device-lost",
                                      "effect": "NoSchedule"}}
    assert p.actions == [("device-taint", f"create {rule['metadata']['name']} device-lost:NoSchedule")]
    store.apply(p)
    again = _plan(slices, store, _verdicts(devices, **{bad: "failed"}), devices)
    assert not again.writes and not again.actions  # idempotent (also after a restart: nothing is in memory)
    back = _plan(slices, store, _verdicts(devices), devices)
    assert [d.name for d in back.delete] == [rule["metadata"]["name"]] and not back.create
    store.apply(back)
    assert store.rules == {} and not _plan(slices, store, _verdicts(devices), devices).writes


def test_amd_slices_match_by_pci_address_in_any_spelling():
    for spelling in (str.upper, lambda a: "0000" + a.upper(), lambda a: a[5:]):  # 0000:0C, 00000000:0C, 0c:00.0
        devices = _amd_devices()
        bad = list(devices)[1]
        p = _plan([_amd_slice(devices, spelling)], Store(), _verdicts(devices, **{bad: "failed"}), devices)
        assert [r["spec"]["deviceSelector"] for r in p.create] == [
            {"driver": "gpu.amd.com", "pool": NODE, "device": "gpu-1-129"}]


def test_pci_key_spellings():
    assert pci_key("0000:3B:00.0") == pci_key("3b:00.0") == pci_key("00000000:3B:00.0") == "0000:3b:00.0"
    assert pci_key("0001:3b:1f.7") == "0001:3b:1f.7"
    for bad in ("", "3b:00", "GPU-0000:3b:00.0", "0000:3b:00.8", "0000:3b:20.0", "0x00:3b:00.0", "1_0:3b:00.0",
                "pci0000:00", None, 7):
        assert pci_key(bad) is None


def test_other_nodes_slices_and_rules_are_left_alone():
    devices = _nvidia_devices()
    bad = list(devices)[0]
    verdicts = _verdicts(devices, **{bad: "failed"})
    p = _plan([_nvidia_slice(devices, node="other-node")], Store(), verdicts, devices)
    assert not p.create and p.unmatched == [bad]
    assert any("other nodes skipped" in line for line in p.explain)
    store = Store()
    mine = _plan([_nvidia_slice(devices)], store, verdicts, devices).create[0]
    foreign = copy.deepcopy(mine)  # the same name, made by someone else
    del foreign["metadata"]["labels"][MANAGED_BY]
    foreign["spec"]["taint"]["effect"] = "NoExecute"
    other = copy.deepcopy(mine)
    other["metadata"]["name"] = rule_name("other-node", "gpu.nvidia.com", "other-node", "gpu-0")
    other["metadata"]["labels"]["hetero-exporter.io/node"] = "other-node"
    store.rules = {"a": foreign, "b": other}
    for r in store.rules.values():
        r["metadata"].update(uid="u", resourceVersion="1")
    p = _plan([_nvidia_slice(devices)], store, _verdicts(devices, **{bad: "failed"}), devices)
    assert not p.writes  # ours would clash with the foreign one: neither created nor touched
    assert any("not labelled as made by this agent" in line for line in p.explain)
    p = _plan([_nvidia_slice(devices)], store, _verdicts(devices), devices)
    assert not p.delete  # recovered: still nothing of someone else's is deleted


def test_effects_no_execute_and_degraded():
    devices = _nvidia_devices()
    a, b = list(devices)[:2]
    verdicts = _verdicts(devices, **{a: "failed", b: "degraded"})
    slices = [_nvidia_slice(devices)]
    assert [r["spec"]["taint"]["effect"] for r in _plan(slices, Store(), verdicts, devices).create] == ["NoSchedule"]
    cfg = DeviceTaintSettings(no_execute=True, degraded=True)
    got = {r["metadata"]["annotations"]["hetero-exporter.io/device"]: r["spec"]["taint"]
           for r in _plan(slices, Store(), verdicts, devices, cfg).create}
    assert got[a]["effect"] == "NoExecute" and got[b] == {"key": "hetero-exporter.io/accelerator-unhealthy",
                                                           "value": "pcie", "effect": "None"}
    store = Store()
    store.apply(_plan(slices, store, verdicts, devices, cfg))
    p = _plan(slices, store, verdicts, devices, DeviceTaintSettings(no_execute=True))  # degraded taints turned off
    assert len(p.delete) == 1 and store.rules[p.delete[0].name]["metadata"]["annotations"][
        "hetero-exporter.io/device"] == b


def test_a_changed_fault_is_one_merge_patch_with_the_resource_version():
    devices = _nvidia_devices()
    bad = list(devices)[3]
    slices, store = [_nvidia_slice(devices)], Store()
    store.apply(_plan(slices, store, _verdicts(devices, **{bad: "failed"}), devices))
    worse = {**_verdicts(devices), bad: Verdict(bad, "failed", (XID48, XID79))}
    p = _plan(slices, store, worse, devices)
    assert not p.create and not p.delete and len(p.update) == 1
    u = p.update[0]
    name = next(iter(store.rules))
    assert u.name == name and u.resource_version == store.rules[name]["metadata"]["resourceVersion"]
    assert u.patch["spec"]["taint"]["value"] == "memory-uncorrectable"
    assert "XID 48" in u.patch["metadata"]["annotations"]["hetero-exporter.io/message"]
    store.apply(p)
    assert not _plan(slices, store, worse, devices).writes
    assert store.rules[name]["spec"]["taint"]["timeAdded"]  # the server's field survives the patch


def test_message_is_bounded():
    devices = _nvidia_devices(1)
    u = next(iter(devices))
    long = Fault(code="79", fault_class="device-lost", action="reboot-node", message="x" * 5000)
    p = _plan([_nvidia_slice(devices)], Store(), {u: Verdict(u, "failed", (long, long, long))}, devices)
    assert len(p.create[0]["metadata"]["annotations"]["hetero-exporter.io/message"]) <= 1024


def test_a_pool_generation_roll_over_gives_one_rule():
    devices = _nvidia_devices()
    bad = list(devices)[1]
    old, new = _nvidia_slice(devices, generation=1), _nvidia_slice(devices, generation=2)
    new["metadata"]["name"] += "-2"
    p = _plan([old, new], Store(), _verdicts(devices, **{bad: "failed"}), devices)
    assert len(p.create) == 1


def test_a_rule_stays_while_its_device_is_failed_and_no_slice_lists_it():
    devices = _nvidia_devices()
    bad = list(devices)[1]
    verdicts = _verdicts(devices, **{bad: "failed"})
    store = Store()
    store.apply(_plan([_nvidia_slice(devices)], store, verdicts, devices))
    p = _plan([], store, verdicts, devices)  # the DRA driver restarting: no slice now
    assert not p.writes and p.unmatched == [bad]
    renamed = _nvidia_slice(devices, names={1: "gpu-1-renamed"})
    p = _plan([renamed], store, verdicts, devices)  # listed under another device name: the old rule goes
    assert len(p.create) == 1 and len(p.delete) == 1


def test_mig_devices_of_a_failed_gpu_are_tainted_and_a_failed_mig_instance_alone_only_itself():
    devices = _nvidia_devices(1)
    parent = next(iter(devices))
    mig = "MIG-5c0e6a39-0000-5c5b-9c2b-1f4d6f5b0001"
    devices[mig] = DeviceSample(identity=DeviceIdentity(vendor="nvidia", kind="gpu", index=0, uuid=mig,
                                                        parent=parent, pci_address="0000:18:00.0"), timestamp=1.0)
    s = _nvidia_slice({parent: devices[parent]})
    s["spec"]["devices"].append({"name": "gpu-0-mig-9-4-2", "attributes": {  # MigDeviceInfo.GetDevice
        "type": {"string": "mig"}, "uuid": {"string": mig}, "parentUUID": {"string": parent},
        "profile": {"string": "3g.40gb"}, "pcieBusID": {"string": "0000:18:00.0"}}})
    p = _plan([s], Store(), _verdicts(devices, **{parent: "failed"}), devices)
    assert sorted(r["spec"]["deviceSelector"]["device"] for r in p.create) == ["gpu-0", "gpu-0-mig-9-4-2"]
    p = _plan([s], Store(), _verdicts(devices, **{mig: "failed"}), devices)
    assert [r["spec"]["deviceSelector"]["device"] for r in p.create] == ["gpu-0-mig-9-4-2"]


def test_rule_names_are_dns_subdomains_for_any_node_name():
    for node in ("N1.Example.COM", "a" * 300, "x.-y..z", "-", "", "ノード"):
        name = rule_name(node, "gpu.nvidia.com", node, "gpu-0")
        assert len(name) <= 253 and DNS_SUBDOMAIN.match(name), name
        assert rule_name(node, "gpu.nvidia.com", node, "gpu-0") == name  # deterministic


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                     max_leaves=25)
_slice_like = st.fixed_dictionaries({"spec": st.fixed_dictionaries({
    "nodeName": st.sampled_from([NODE, "x", 3]), "driver": st.sampled_from(["d", "", None]),
    "pool": _json | st.just({"name": NODE}),
    "devices": st.lists(st.fixed_dictionaries({"name": _json | st.just("gpu-0"), "attributes": _json | st.just(
        {"uuid": {"string": "GPU-00000000-1111-2222-3333-444455556666"}})}), max_size=4) | _json})})


@settings(max_examples=150, deadline=None)
@given(st.lists(_slice_like | _json, max_size=5), st.lists(_json, max_size=5))
def test_hostile_slices_and_rules_never_raise(slices, rules):
    devices = _nvidia_devices()
    verdicts = _verdicts(devices, **{u: "failed" for u in devices})
    p = plan_device_taints(NODE, slices, rules, verdicts, devices, POLICY, CFG, 0.0)
    assert len(p.create) <= 256 and len(p.unmatched) <= 4
    for r in p.create:
        assert DNS_SUBDOMAIN.match(r["metadata"]["name"])
