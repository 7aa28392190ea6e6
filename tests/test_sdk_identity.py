"""sdk.identity: a device keeps the uuid it was first seen with while it is lost."""

from __future__ import annotations

from hetero_exporter.model import DeviceIdentity
from hetero_exporter.sdk.identity import IdentityMemory


def _ident(index: int, uuid: str, pci: str | None, parent: str | None = None) -> DeviceIdentity:
    return DeviceIdentity(vendor="v", kind="gpu", index=index, uuid=uuid, model="m", pci_address=pci, parent=parent)


def test_recall_by_pci_address_in_any_spelling_then_by_index():
    mem = IdentityMemory()
    mem.remember(_ident(0, "U0", "0000:18:00.0"))
    mem.remember(_ident(1, "U1", "0000:2a:00.0"))
    assert mem.recall(pci_address="00000000:2A:00.0").uuid == "U1"
    assert mem.recall(index=0).uuid == "U0"
    # PCI address wins over index: indexes renumber when a device is lost
    assert mem.recall(index=0, pci_address="0000:2a:00.0").uuid == "U1"
    assert mem.recall(index=7) is None and mem.recall(pci_address="0000:99:00.0") is None


def test_missing_lists_pinned_top_level_devices_absent_now():
    mem = IdentityMemory()
    for i in range(3):
        mem.remember(_ident(i, f"U{i}", f"0000:1{i}:00.0"))
    mem.remember(_ident(0, "MIG-child", None, parent="U0"))
    assert [d.uuid for d in mem.missing(["U0", "U2"])] == ["U1"]
    assert mem.missing(["U0", "U1", "U2"]) == []


def test_children_are_not_indexed_over_their_parent():
    mem = IdentityMemory()
    mem.remember(_ident(0, "U0", "0000:18:00.0"))
    mem.remember(_ident(0, "child", "0000:18:00.0", parent="U0"))
    assert mem.recall(index=0).uuid == "U0"
    assert mem.recall(pci_address="0000:18:00.0").uuid == "U0"


def test_a_new_uuid_at_a_pinned_pci_address_replaces_the_old_one():
    mem = IdentityMemory()
    mem.remember(_ident(0, "placeholder-pci-0000:18:00.0", "0000:18:00.0"))
    mem.remember(_ident(0, "U0", "0000:18:00.0"))
    assert mem.recall(pci_address="0000:18:00.0").uuid == "U0"
    assert mem.missing(["U0"]) == []  # the placeholder is not reported lost
