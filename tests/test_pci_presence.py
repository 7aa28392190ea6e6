"""Missing devices: the PCI bus (a fake sysfs tree) against what the collectors report."""

from __future__ import annotations

from types import SimpleNamespace

from hetero_exporter import pci
from hetero_exporter import registry
from hetero_exporter.health.detect import policy as policy_mod
from hetero_exporter.health.detect import rules
from hetero_exporter.sources.pci_presence import PciPresence, UdevWatch, compare, simulated_scan
from hetero_exporter.model import CollectorStatus, DeviceIdentity, DeviceSample, NodeSnapshot
from hetero_exporter.simulate import ManualClock
from hetero_exporter.simulate.scenario import from_dict


def _sysfs(tmp_path, devices):
    """devices: (address, vendor, class, driver or None[, device id])."""
    base = tmp_path / "bus" / "pci" / "devices"
    base.mkdir(parents=True, exist_ok=True)
    drivers = tmp_path / "bus" / "pci" / "drivers"
    for addr, vendor, cls, driver, *device in devices:
        d = base / addr
        d.mkdir()
        (d / "vendor").write_text(f"0x{vendor:04x}\n")
        (d / "device").write_text(f"0x{(device or [0x2330])[0]:04x}\n")
        (d / "class").write_text(f"0x{cls:06x}\n")
        (d / "numa_node").write_text("0\n")
        if driver:
            (drivers / driver).mkdir(parents=True, exist_ok=True)
            (d / "driver").symlink_to(drivers / driver)
    return str(tmp_path)


def _gpu(index, addr, uuid=None, vendor="nvidia"):
    return DeviceSample(identity=DeviceIdentity(vendor=vendor, kind="gpu", index=index, uuid=uuid or f"GPU-{index}",
                                                pci_address=addr), timestamp=0.0)


def _snap(devices, ok=True, t=100.0):
    return NodeSnapshot(node="n", time=t, devices=tuple(devices),
                        collectors=(CollectorStatus(name="nvml", ok=ok, vendor="nvidia"),))


def test_device_on_the_bus_but_invisible_to_the_driver(tmp_path):
    root = _sysfs(tmp_path, [("0000:18:00.0", 0x10DE, 0x030200, "nvidia"),
                             ("0000:28:00.0", 0x10DE, 0x030200, None),
                             ("0000:38:00.0", 0x10DE, 0x040300, "snd_hda_intel"),  # the GPU's audio function
                             ("0000:48:00.0", 0x10DE, 0x030200, "vfio-pci")])  # passed through to a VM
    presence = PciPresence(lambda: pci.scan(root), registry.pci_vendors())
    out = presence(_snap([_gpu(0, "0000:18:00.0")]))
    missing = [d for d in out.devices if d.health.state == "failed"]
    assert [d.identity.pci_address for d in missing] == ["0000:28:00.0"]
    f = missing[0].health.reasons[0]
    assert (f.code, f.fault_class, f.severity) == ("pci-invisible", "missing-device", "critical")
    assert "no driver bound" in f.message
    assert out.expected == {"nvidia": 2}  # the audio function and the vfio device are not expected


def test_bmc_graphics_of_an_accelerator_vendor_is_not_expected(tmp_path):
    # Huawei servers carry the iBMC's VGA function (19e5:1711, class 0x0300) beside the NPUs
    # (class 0x1200); npu-smi never lists it, so counting it would fail a device that is none
    root = _sysfs(tmp_path, [("0000:c1:00.0", 0x19E5, 0x120000, "devdrv_device_driver", 0xD802),
                             ("0000:03:00.0", 0x19E5, 0x030000, "hibmc-drm", 0x1711),
                             ("0000:04:00.0", 0x1002, 0x030000, "radeon", 0x515E)])  # ATI ES1000
    presence = PciPresence(lambda: pci.scan(root), registry.pci_vendors())
    out = presence(NodeSnapshot(node="n", time=100.0, devices=(
        DeviceSample(identity=DeviceIdentity(vendor="ascend", kind="npu", index=0, uuid="NPU-0",
                                             pci_address="0000:c1:00.0"), timestamp=0.0),),
        collectors=(CollectorStatus(name="npu_smi", ok=True, vendor="ascend"),)))
    assert out.expected == {"ascend": 1}
    assert not [d for d in out.devices if d.health.state == "failed"]
    assert pci.expected_by_vendor(pci.scan(root), registry.pci_vendors()) == {"ascend": 1}


def test_gone_from_the_bus_keeps_the_identity_last_seen(tmp_path):
    devices = [("0000:18:00.0", 0x10DE, 0x030200, "nvidia"), ("0000:28:00.0", 0x10DE, 0x030200, "nvidia")]
    state = {"devices": devices}
    presence = PciPresence(lambda: pci.scan(_sysfs(tmp_path / str(len(state["devices"])), state["devices"])),
                           registry.pci_vendors())
    presence(_snap([_gpu(0, "0000:18:00.0"), _gpu(1, "0000:28:00.0", uuid="GPU-abc")]))
    state["devices"] = devices[:1]
    out = presence(_snap([_gpu(0, "0000:18:00.0")]))
    gone = [d for d in out.devices if d.health.state == "failed"]
    assert len(gone) == 1 and gone[0].identity.uuid == "GPU-abc" and gone[0].identity.index == 1
    assert gone[0].health.reasons[0].code == "pci-gone"


def test_device_still_reported_gets_the_fault_itself():
    on_bus = {"nvidia": [pci.PciDevice("0000:18:00.0", 0x10DE, 0, 0x030200, 0, "nvidia")]}
    lost = _gpu(1, "0000:28:00.0", uuid="GPU-lost")
    known = {"0000:28:00.0": lost.identity}
    missing = compare(on_bus, _snap([_gpu(0, "0000:18:00.0"), lost]), {"0000:28:00.0": "nvidia"}, known)
    assert [(m.code, m.identity.uuid) for m in missing] == [("pci-gone", "GPU-lost")]
    presence = PciPresence(lambda: list(on_bus["nvidia"]), registry.pci_vendors())
    presence._seen["0000:28:00.0"] = "nvidia"
    out = presence(_snap([_gpu(0, "0000:18:00.0"), lost]))
    assert len(out.devices) == 2  # no placeholder: the lost device carries the fault
    assert out.devices[1].health.state == "failed"


def test_failed_collector_is_not_compared_and_count_fallback():
    on_bus = {"nvidia": [pci.PciDevice(f"0000:{b}:00.0", 0x10DE, 0, 0x030200, 0, "nvidia") for b in ("18", "28")]}
    assert compare(on_bus, _snap([], ok=False), {}, {}) == []
    no_addr = [_gpu(0, None)]
    missing = compare(on_bus, _snap(no_addr), {}, {})
    assert len(missing) == 1 and "2 nvidia devices on the PCI bus, 1 reported" in missing[0].message


def test_missing_device_makes_the_node_unhealthy():
    on_bus = [pci.PciDevice("0000:18:00.0", 0x10DE, 0, 0x030200, 0, "nvidia"),
              pci.PciDevice("0000:28:00.0", 0x10DE, 0, 0x030200, 0, None)]
    snap = PciPresence(lambda: on_bus, registry.pci_vendors())(_snap([_gpu(0, "0000:18:00.0")]))
    policy = policy_mod.load()
    _, verdicts = rules.evaluate([snap], policy)
    nv = rules.node_verdict(snap, verdicts, policy)
    assert nv.unhealthy and nv.taint_class == "missing-device"


def test_simulated_bus_extra_devices_and_removal():
    scenario = from_dict({"name": "s", "devices": [{"vendor": "nvidia", "count": 2, "pci_address": "0000:18:00.0"}],
                          "settings": {"pci_extra": {"nvidia": 1}},
                          "faults": [{"at": 50, "vendor": "nvidia", "index": 1, "kind": "pci-remove"}]})
    clock = ManualClock()
    scan = simulated_scan(scenario, clock, registry.pci_vendors())
    assert sorted(d.address for d in scan()) == ["0000:18:00.0", "0000:28:00.0", "0000:e0:00.0"]
    clock.set_t(60)
    assert sorted(d.address for d in scan()) == ["0000:18:00.0", "0000:e0:00.0"]


def test_udev_events_wake_only_for_accelerators():
    woke = []
    w = UdevWatch(registry.pci_vendors(), lambda: woke.append(1))
    ev = lambda action, pci_id, cls: SimpleNamespace(action=action, properties={  # noqa: E731
        "PCI_ID": pci_id, "PCI_CLASS": cls, "PCI_SLOT_NAME": "0000:18:00.0"})
    w.handle(ev("remove", "10DE:2330", "30200"))
    w.handle(ev("remove", "10DE:22A3", "40300"))  # the GPU's audio function
    w.handle(ev("remove", "8086:1572", "20000"))  # an Intel NIC
    w.handle(ev("change", "10DE:2330", "30200"))
    w.handle(ev("add", "19E5:D802", "120000"))  # an Ascend NPU
    assert len(woke) == 2 and w.events == 2


def test_udev_watch_starts_or_says_why():
    w = UdevWatch(registry.pci_vendors(), lambda: None)
    started = w.start()
    try:
        assert started or w.reason
    finally:
        w.stop()
