"""Issue 24, item 5: a GPU lost before the agent ever read it has no uuid and, from its
collector, no PCI address (``nvidia-unidentified-2``). The PCI bus knows the address: the
device gets it first thing in the cycle (PciLocate), so its DeviceTaintRule (``pcieBusID``) and a
device plugin naming it by PCI address find it."""

from __future__ import annotations

import dataclasses

import pytest

from hetero_exporter import pci, registry
from hetero_exporter.sources.pci_presence import PciLocate, locate, simulated_scan
from hetero_exporter.model import DeviceIdentity, DeviceSample, Health, NodeSnapshot
from hetero_exporter.sources.podresources.mapping import DeviceIndex
from test_device_taints import Store, _nvidia_slice, _plan, _verdicts
from test_identity_persist import _collect_once, _nvml, _scenario

NVIDIA = 0x10DE


def _gpu(index: int, uuid: str, pci_address: str | None, state: str = "ok") -> DeviceSample:
    return DeviceSample(identity=DeviceIdentity(vendor="nvidia", kind="gpu", index=index, uuid=uuid,
                                                pci_address=pci_address), timestamp=1.0, health=Health(state))


def _bus(*addresses: str) -> dict[str, list[pci.PciDevice]]:
    return {"nvidia": [pci.PciDevice(address=a, vendor_id=NVIDIA, device_id=0x2330, class_code=0x030200,
                                     numa_node=None, driver="nvidia") for a in addresses]}


def test_the_one_unclaimed_bus_address_is_the_lost_gpus():
    snap = NodeSnapshot(node="n", time=1.0, devices=(
        _gpu(0, "GPU-a", "0000:18:00.0"), _gpu(1, "GPU-b", "0000:28:00.0"),
        _gpu(2, "nvidia-unidentified-2", None, "failed"), _gpu(3, "GPU-d", "0000:48:00.0")))
    bus = _bus("0000:18:00.0", "0000:28:00.0", "0000:38:00.0", "0000:48:00.0")
    assert locate(bus, snap) == {"nvidia-unidentified-2": "0000:38:00.0"}


def test_several_are_paired_in_bus_order_and_unequal_counts_are_not_guessed():
    snap = NodeSnapshot(node="n", time=1.0, devices=(
        _gpu(3, "nvidia-unidentified-3", None, "failed"), _gpu(1, "nvidia-unidentified-1", None, "failed"),
        _gpu(0, "GPU-a", "0000:18:00.0")))
    assert locate(_bus("0000:18:00.0", "0000:48:00.0", "0000:28:00.0"), snap) == {
        "nvidia-unidentified-1": "0000:28:00.0", "nvidia-unidentified-3": "0000:48:00.0"}
    assert locate(_bus("0000:18:00.0", "0000:28:00.0"), snap) == {}  # two bare, one free: which?


def test_a_gpu_lost_at_first_start_gets_its_bus_address_a_device_taint_and_its_pod():
    pytest.importorskip("pynvml")
    scenario = _scenario("health-dra-4gpu", "GpuIsLost")
    devices = _collect_once(_nvml(scenario, 100, None))  # GPU 2 lost since t=60: never read
    lost = next(d for d in devices if d.identity.index == 2)
    assert lost.identity.uuid == "nvidia-unidentified-2" and lost.identity.pci_address is None
    snap = NodeSnapshot(node="n", time=100.0, devices=tuple(devices))
    from hetero_exporter.simulate import ManualClock
    clock = ManualClock()
    clock.set_t(100)
    out = PciLocate(simulated_scan(scenario, clock, registry.pci_vendors()), registry.pci_vendors())(snap)
    got = next(d for d in out.devices if d.identity.index == 2)
    address = next(d.pci_address for d in scenario.devices if d.vendor == "nvidia" and d.index == 2)
    assert got.identity.pci_address == address and got.identity.uuid == "nvidia-unidentified-2"

    # DRA: NVIDIA's driver lists the GPU with its pcieBusID (its uuid attribute is the real one,
    # which the agent never read): the rule selects it by address
    by_uuid = {d.identity.uuid: d for d in out.devices}
    real = {**{u: d for u, d in by_uuid.items() if u != got.identity.uuid},
            "GPU-never-read-by-the-agent": got}
    slices = [_nvidia_slice(dict(sorted(real.items(), key=lambda kv: kv[1].identity.index)))]
    p = _plan(slices, Store(), _verdicts(by_uuid, **{got.identity.uuid: "failed"}), by_uuid)
    assert [r["spec"]["deviceSelector"]["device"] for r in p.create] == ["gpu-2"]

    # a device plugin naming devices by PCI address (AMD's, MetaX's...) maps its allocation
    index = DeviceIndex([d.identity for d in out.devices])
    assert index.match("nvidia", address.upper()) == got.identity
    assert dataclasses.replace(got.identity, pci_address=None) == lost.identity
